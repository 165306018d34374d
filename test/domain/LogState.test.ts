import { describe, expect, it } from "@effect/vitest"
import type { SessionEvent } from "../../src/domain/Event.js"
import type { FoldOptions } from "../../src/domain/LogState.js"
import { advance, initialLogState } from "../../src/domain/LogState.js"
import { event } from "../fixtures/events.js"

const options: FoldOptions = { relations: true, eventTypes: new Set() }
const none = () => undefined

describe("LogState.advance", () => {
  it("each result keeps its own violations: a later advance changes no earlier result", () => {
    const state = initialLogState()
    const first = advance(state, event.turnStart(3, 1), none, options)
    const firstViolations = [...first.violations]
    expect(firstViolations.map((v) => v.message)).toContain("seq 3 where 0 was expected")
    const second = advance(state, event.turnStart(7, 1), none, options)
    expect(second.violations.map((v) => v.message)).toContain("seq 7 where 0 was expected")
    const clean = advance(state, event.turnStart(0, 1), none, options)
    expect(clean.violations).toStrictEqual([])
    expect(first.violations).toStrictEqual(firstViolations)
    expect(second.violations).not.toBe(first.violations)
  })

  describe("sourceEventSeqs of an appended tool/result", () => {
    // A tool/result citing `cites`, offered at seq 10 of a log whose fold is otherwise empty: only
    // the citation rule's verdict is read (the relational rules find other problems here).
    const citing = (cites: ReadonlyArray<number>) => {
      const result: SessionEvent = {
        type: "tool/result",
        seq: 10,
        time: 0,
        surfaceOp: "append",
        sourceEventSeqs: cites,
        data: {
          turn: 1,
          step: 1,
          message: {
            id: "r",
            role: "user",
            content: [{ type: "tool-result", toolCallId: "c", isError: false, content: [] }],
            source: { kind: "tool", callId: "c" }
          }
        }
      } as unknown as SessionEvent
      const { violations } = advance({ ...initialLogState(), length: 10 }, result, none, options)
      return violations.filter((v) => v.rule === undefined).map((v) => v.message)
    }

    it("an ascending list of earlier seqs passes, in any order", () => {
      expect(citing([2, 5, 9])).toStrictEqual([])
      expect(citing([9, 2, 5])).toStrictEqual([])
    })

    it("a repeated seq is refused wherever it stands", () => {
      expect(citing([2, 2, 5])).toStrictEqual(["sourceEventSeqs cites 2 twice"])
      expect(citing([5, 2, 5])).toStrictEqual(["sourceEventSeqs cites 5 twice"])
    })

    it("a seq not earlier than the event's own is refused, the first such named", () => {
      expect(citing([2, 5, 10])).toStrictEqual(["sourceEventSeqs cites 10, not earlier than the event's own seq 10"])
      expect(citing([12, 2])).toStrictEqual(["sourceEventSeqs cites 12, not earlier than the event's own seq 10"])
      expect(citing([])).toStrictEqual(["tool/result sourceEventSeqs must not be empty"])
    })
  })
})
