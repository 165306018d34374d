import { describe, expect, it } from "@effect/vitest"
import { FastCheck } from "effect"
import type { SessionEvent } from "../../src/domain/Event.js"
import type { SurfaceOp } from "../../src/domain/Event.js"
import * as GrowOnly from "../../src/domain/GrowOnly.js"
import type { FoldOptions, LogState, Violation } from "../../src/domain/LogState.js"
import { advance, initialLogState } from "../../src/domain/LogState.js"
import { applySurfaceOp, deriveMessages, emptySurface, messagesOf } from "../../src/domain/Surface.js"
import type { LogBuilder } from "../fixtures/events.js"
import { assistantMessage, call, event, log, text, toolResultMessage, user } from "../fixtures/events.js"

const A = user("A")
const B = user("B")
const C = user("C")
const S = user("S", "summary so far")

const options: FoldOptions = { relations: true, eventTypes: new Set() }

/** Folds a valid log with `advance`; every event must be accepted. */
const fold = (events: ReadonlyArray<SessionEvent>): LogState => {
  let state = initialLogState()
  for (const e of events) {
    const next = advance(state, e, (seq) => events[seq], options)
    expect({ seq: e.seq, violations: next.violations }).toStrictEqual({ seq: e.seq, violations: [] })
    state = next.state
  }
  return state
}

/** Offers the builder's last event to the fold of everything before it. */
const offerLast = (
  b: LogBuilder
): { readonly before: LogState; readonly state: LogState; readonly violations: ReadonlyArray<Violation> } => {
  const events = b.events
  const before = fold(events.slice(0, -1))
  const next = advance(before, events[events.length - 1]!, (seq) => events[seq], options)
  return { before, state: next.state, violations: next.violations }
}

const surfaceOf = (state: LogState): ReadonlyArray<number> => GrowOnly.toArray(state.surface)

/** The last event is rejected by an acceptance rule (no relational rule) and leaves the surface alone. */
const rejectedReplacement = (b: LogBuilder): string => {
  const { before, state, violations } = offerLast(b)
  expect(violations.length).toBe(1)
  expect(violations[0]!.rule).toBeUndefined()
  expect(surfaceOf(state)).toStrictEqual(surfaceOf(before))
  return violations[0]!.message
}

const accepted = (b: LogBuilder): LogState => {
  const { state, violations } = offerLast(b)
  expect(violations).toStrictEqual([])
  return state
}

/**
 * A closed turn whose surface is UM(A)@4, AM[c1]@10, TR(c1)@12, AM("done")@19.
 * seqs: INS 0, TS 1, CLM 2, SS 3, UM 4, RH 5, CH 6-9, AM 10, TC 11, TR 12, SE 13, SS 14, CH 15-18, AM 19, SE 20, TE 21
 */
const toolTurn = () =>
  log().insert("next-turn", 0, [A]).turnStart().claim("next-turn", 1).stepStart().enter(A).header()
    .respondWithCalls([call("c1")]).toolCall("c1").toolResult("c1").stepEnd()
    .stepStart().respond("done").stepEnd().turnEnd()

const UM_A = 4
const AM_CALL = 10
const TR_C1 = 12
const AM_DONE = 19

describe("deriveMessages", () => {
  it("walks the surface: user messages verbatim, assistant messages, tool results", () => {
    const b = toolTurn()
    expect([b.events[UM_A]!.type, b.events[AM_CALL]!.type, b.events[TR_C1]!.type, b.events[AM_DONE]!.type])
      .toStrictEqual([
        "user/message",
        "assistant/message",
        "tool/result",
        "assistant/message"
      ])
    expect(deriveMessages(b.events)).toStrictEqual([
      A,
      assistantMessage("assistant-1", [call("c1")]),
      toolResultMessage("c1"),
      assistantMessage("assistant-2", [text("done")])
    ])
  })

  it("skips an empty assistant message (a usage anchor) but keeps the rest of the step", () => {
    const b = log().insert("next-turn", 0, [A]).turnStart().claim("next-turn", 1).stepStart().enter(A).header()
      .finish().assistant([], { usage: { inputTokens: 3, outputTokens: 0 } }).stepEnd().turnEnd()
    expect(deriveMessages(b.events)).toStrictEqual([A])
  })

  it("returns a fresh array of frozen values, without freezing the caller's events", () => {
    const events = toolTurn().events
    const first = deriveMessages(events)
    const second = deriveMessages(events)
    expect(first).not.toBe(second)
    expect(first).toStrictEqual(second)
    for (const m of first) {
      expect(Object.isFrozen(m)).toBe(true)
      expect(Object.isFrozen(m.content)).toBe(true)
    }
    const am = events[AM_CALL]!.data as { readonly message: object }
    expect(Object.isFrozen(am.message)).toBe(false)
  })

  it("a user/message replace shadows its range and puts the new message in place; events stay", () => {
    const b = toolTurn().replaceWithUser(S, UM_A, TR_C1, [UM_A, AM_CALL, TR_C1])
    const replaced = b.lastSeq
    expect(deriveMessages(b.events)).toStrictEqual([S, assistantMessage("assistant-2", [text("done")])])
    expect(b.events[UM_A]!.data).toStrictEqual(A)
    expect(surfaceOf(fold(b.events))).toStrictEqual([replaced, AM_DONE])
  })

  it("a single-node replace keeps the surrounding order", () => {
    const b = toolTurn().replaceWithUser(S, UM_A, UM_A, [UM_A])
    const replaced = b.lastSeq
    expect(deriveMessages(b.events)[0]).toStrictEqual(S)
    expect(deriveMessages(b.events)).toHaveLength(4)
    expect(surfaceOf(fold(b.events))).toStrictEqual([replaced, AM_CALL, TR_C1, AM_DONE])
  })

  it("a pruned tool/result shows its new content in place", () => {
    const pruned = toolResultMessage("c1", { text: "[pruned]" })
    const b = toolTurn().replaceToolResult(TR_C1, pruned, [TR_C1], { turn: 1, step: 1 })
    const replaced = b.lastSeq
    expect(deriveMessages(b.events)[2]).toStrictEqual(pruned)
    expect(surfaceOf(fold(b.events))).toStrictEqual([UM_A, AM_CALL, replaced, AM_DONE])
  })
})

describe("surface replacement via advance (P44)", () => {
  it("accepts a replacement of a closed turn's user message; the surface holds the new seq", () => {
    const b = toolTurn().replaceWithUser(S, UM_A, UM_A, [UM_A])
    expect(surfaceOf(accepted(b))).toStrictEqual([b.lastSeq, AM_CALL, TR_C1, AM_DONE])
  })

  it("accepts extra earlier citations (e.g. compaction events)", () => {
    const b = toolTurn().compaction("start", null)
    const start = b.lastSeq
    accepted(b.replaceWithUser(S, UM_A, AM_DONE, [start, UM_A, AM_CALL, TR_C1, AM_DONE]))
  })

  it("rejects an endpoint not on the surface", () => {
    expect(rejectedReplacement(toolTurn().replaceWithUser(S, 1, UM_A, [1, UM_A]))).toMatch(/not on the surface/)
    expect(rejectedReplacement(toolTurn().replaceWithUser(S, UM_A, 13, [UM_A, 13]))).toMatch(/not on the surface/)
  })

  it("rejects an endpoint that was shadowed by an earlier replacement", () => {
    const b = toolTurn().replaceWithUser(S, UM_A, UM_A, [UM_A]).replaceWithUser(user("S2"), UM_A, UM_A, [UM_A])
    expect(rejectedReplacement(b)).toMatch(/not on the surface/)
  })

  it("rejects start after end", () => {
    expect(rejectedReplacement(toolTurn().replaceWithUser(S, AM_DONE, UM_A, [UM_A, AM_CALL, TR_C1, AM_DONE]))).toMatch(
      /after/
    )
  })

  it("rejects sourceEventSeqs missing a shadowed seq", () => {
    expect(rejectedReplacement(toolTurn().replaceWithUser(S, UM_A, UM_A, [1]))).toMatch(/cite/)
    expect(rejectedReplacement(toolTurn().replaceWithUser(S, UM_A, TR_C1, [UM_A, TR_C1]))).toMatch(
      new RegExp(`missing ${AM_CALL}`)
    )
  })

  it("rejects a range holding an AM with a tool call but not its TR, and one holding the TR but not the AM", () => {
    expect(rejectedReplacement(toolTurn().replaceWithUser(S, UM_A, AM_CALL, [UM_A, AM_CALL]))).toMatch(
      /separates tool call c1/
    )
    expect(rejectedReplacement(toolTurn().replaceWithUser(S, TR_C1, AM_DONE, [TR_C1, AM_DONE]))).toMatch(
      /separates tool call c1/
    )
    accepted(toolTurn().replaceWithUser(S, AM_CALL, TR_C1, [AM_CALL, TR_C1]))
  })

  it("pairs a result with its own call when call ids repeat across turns", () => {
    const b = toolTurn().insert("next-turn", 0, [B]).turnStart().claim("next-turn", 1).stepStart().enter(B)
      .respondWithCalls([call("c1")]).toolCall("c1").toolResult("c1", { id: "result-c1-again" }).stepEnd()
      .stepStart().respond("again").stepEnd().turnEnd()
    expect(rejectedReplacement(b.replaceWithUser(S, UM_A, AM_CALL, [UM_A, AM_CALL]))).toMatch(/separates tool call c1/)
  })

  it("rejects a range containing a node of the open step, and accepts one of closed steps", () => {
    const open = () =>
      toolTurn().insert("next-turn", 0, [B]).turnStart().claim("next-turn", 1).stepStart().enter(B).respond("x")
    const openUm = 26
    expect(open().events[openUm]!.data).toStrictEqual(B)
    expect(rejectedReplacement(open().replaceWithUser(S, openUm, openUm, [openUm]))).toMatch(/open step/)
    expect(rejectedReplacement(open().replaceWithUser(S, AM_DONE, openUm, [AM_DONE, openUm]))).toMatch(/open step/)
    accepted(open().replaceWithUser(S, UM_A, AM_DONE, [UM_A, AM_CALL, TR_C1, AM_DONE]))
  })

  it("rejects a tool/result replace of a result of the open step", () => {
    const b = toolTurn().insert("next-turn", 0, [B]).turnStart().claim("next-turn", 1).stepStart().enter(B)
      .respondWithCalls([call("c2")]).toolCall("c2").toolResult("c2")
    const tr = b.resultSeq("c2")
    expect(rejectedReplacement(b.replaceToolResult(tr, toolResultMessage("c2", { text: "[pruned]" }), [tr]))).toMatch(
      /open step/
    )
  })

  it("accepts a single-node tool/result replacement that changes only the content", () => {
    const b = toolTurn().replaceToolResult(TR_C1, toolResultMessage("c1", { text: "[pruned]" }), [TR_C1], {
      turn: 1,
      step: 1
    })
    expect(surfaceOf(accepted(b))).toStrictEqual([UM_A, AM_CALL, b.lastSeq, AM_DONE])
  })

  it("rejects a tool/result replacement that changes isError or the id", () => {
    expect(
      rejectedReplacement(
        toolTurn().replaceToolResult(TR_C1, toolResultMessage("c1", { text: "[pruned]", isError: true }), [TR_C1])
      )
    )
      .toMatch(/only the result content/)
    expect(rejectedReplacement(toolTurn().replaceToolResult(TR_C1, toolResultMessage("c1", { id: "other" }), [TR_C1])))
      .toMatch(/only the result content/)
  })

  it("rejects a tool/result replacement that does not shadow exactly one tool/result", () => {
    expect(rejectedReplacement(toolTurn().replaceToolResult(UM_A, toolResultMessage("c1"), [UM_A]))).toMatch(
      /exactly one tool\/result/
    )
    const b = toolTurn().push((seq) =>
      event.toolResult(seq, { turn: 1, step: 1 }, toolResultMessage("c1", { text: "[pruned]" }), {
        surfaceOp: { op: "replace", start: TR_C1, end: AM_DONE },
        sourceEventSeqs: [TR_C1, AM_DONE]
      })
    )
    expect(rejectedReplacement(b)).toMatch(/exactly one tool\/result/)
  })

  it("rejects an appended user/message outside a step (append is reserved to the loop)", () => {
    const { violations } = offerLast(toolTurn().enter(S))
    expect(violations.map((v) => v.rule)).toStrictEqual(["R8"])
  })

  it("rejects an appended user/message carrying sourceEventSeqs", () => {
    const b = log().insert("next-turn", 0, [A]).turnStart().claim("next-turn", 1).stepStart()
      .push((seq) => event.userMessage(seq, A, { surfaceOp: "append", sourceEventSeqs: [0] }))
    const { violations } = offerLast(b)
    expect(violations).toHaveLength(1)
    expect(violations[0]!.rule).toBeUndefined()
    accepted(log().insert("next-turn", 0, [A]).turnStart().claim("next-turn", 1).stepStart().enter(A))
  })

  it("rejects a replacement with a known id (R9), and accepts the same replacement with a fresh id", () => {
    const { violations } = offerLast(toolTurn().replaceWithUser(user("A", "rewritten"), UM_A, UM_A, [UM_A]))
    expect(violations.map((v) => v.rule)).toStrictEqual(["R9"])
    accepted(toolTurn().replaceWithUser(C, UM_A, UM_A, [UM_A]))
  })
})

/** One turn of `steps` steps, each calling a tool whose result is `c<i>`'s, then an answer. */
const longTurn = (steps: number) => {
  const b = log().insert("next-turn", 0, [A]).turnStart().claim("next-turn", 1).stepStart().enter(A).header()
  for (let i = 1; i <= steps; i++) {
    if (i > 1) b.stepStart()
    b.respondWithCalls([call(`c${i}`)]).toolCall(`c${i}`).toolResult(`c${i}`).stepEnd()
  }
  return b.stepStart().respond("done").stepEnd().turnEnd()
}

/** The surface and history of a log by the plain definition: each op applied to a copy, the history walked again. */
const reference = (events: ReadonlyArray<SessionEvent>) => {
  let surface = emptySurface()
  for (const e of events) {
    const op = (e as { readonly surfaceOp?: SurfaceOp }).surfaceOp
    if (op !== undefined) surface = applySurfaceOp(surface, e.seq, op)
  }
  return { surface: GrowOnly.toArray(surface), messages: messagesOf(surface, (seq) => events[seq]) }
}

describe("surface replacement cost", () => {
  it("a prune's run of single-node tool/result replacements reads each replaced event once, not the whole surface per replacement", () => {
    const steps = 300
    const b = longTurn(steps).compaction("start", null)
    const start = b.lastSeq
    for (let i = 1; i <= steps; i++) {
      const target = b.resultSeq(`c${i}`)
      b.replaceToolResult(target, toolResultMessage(`c${i}`, { text: `[pruned ${i}]` }), [target, start], {
        turn: 1,
        step: i
      })
    }
    const events = b.compaction("end", null).events
    let state = initialLogState()
    let reads = 0
    for (const e of events) {
      const replacing = (e as { readonly surfaceOp?: SurfaceOp }).surfaceOp !== "append" && e.type === "tool/result"
      const next = advance(state, e, (seq) => {
        if (replacing) reads++
        return events[seq]
      }, options)
      expect(next.violations).toStrictEqual([])
      state = next.state
    }
    // The old fold walked the 2 + 2 × 300 nodes after each of the 300 replacements (180,600 reads).
    expect(reads).toBeLessThanOrEqual(2 * steps)
    const expected = reference(events)
    expect(GrowOnly.toArray(state.surface)).toStrictEqual(expected.surface)
    expect(GrowOnly.toArray(state.messages)).toStrictEqual(expected.messages)
    expect(deriveMessages(events)).toStrictEqual(expected.messages)
  })

  it("replaying any mix of prunes, summaries and reads gives the surface and history of the plain definition at every read", () => {
    const op = FastCheck.oneof(
      FastCheck.record({ kind: FastCheck.constant("prune" as const), at: FastCheck.nat() }),
      FastCheck.record({
        kind: FastCheck.constant("summary" as const),
        at: FastCheck.nat(),
        width: FastCheck.nat({ max: 6 })
      }),
      FastCheck.record({ kind: FastCheck.constant("read" as const) })
    )
    FastCheck.assert(
      FastCheck.property(
        FastCheck.integer({ min: 1, max: 12 }),
        FastCheck.array(op, { maxLength: 25 }),
        (steps, ops) => {
          const b = longTurn(steps)
          let state = fold(b.events)
          let folded = b.events.length
          let summaries = 0
          const catchUp = () => {
            const events = b.events
            for (; folded < events.length; folded++) {
              const next = advance(state, events[folded]!, (seq) => events[seq], options)
              expect(next.violations).toStrictEqual([])
              state = next.state
            }
          }
          for (const o of ops) {
            const events = b.events
            const surface = reference(events).surface
            if (o.kind === "read") {
              catchUp()
              expect(GrowOnly.toArray(state.surface)).toStrictEqual(surface)
              expect(GrowOnly.toArray(state.messages)).toStrictEqual(reference(events).messages)
              continue
            }
            if (o.kind === "prune") {
              const results = surface.filter((seq) => events[seq]!.type === "tool/result")
              if (results.length === 0) continue
              const target = results[o.at % results.length]!
              const callId = (events[target]!.data as {
                readonly message: { readonly content: readonly [{ readonly toolCallId: string }] }
              })
                .message.content[0].toolCallId
              b.replaceToolResult(target, toolResultMessage(callId, { text: `[pruned at ${events.length}]` }), [target])
              continue
            }
            // A summary from a node that is not a result to one that no result follows: no call is cut off.
            const starts = surface.map((seq, i) => [seq, i] as const).filter(([seq]) =>
              events[seq]!.type !== "tool/result"
            )
            const [, from] = starts[o.at % starts.length]!
            let to = Math.min(surface.length - 1, from + o.width)
            while (to + 1 < surface.length && events[surface[to + 1]!]!.type === "tool/result") to++
            const shadowed = surface.slice(from, to + 1)
            b.replaceWithUser(
              user(`S${++summaries}`),
              shadowed[0]!,
              shadowed[shadowed.length - 1]!,
              [...shadowed].sort((x, y) => x - y)
            )
          }
          catchUp()
          const expected = reference(b.events)
          expect(GrowOnly.toArray(state.surface)).toStrictEqual(expected.surface)
          expect(GrowOnly.toArray(state.messages)).toStrictEqual(expected.messages)
          expect(deriveMessages(b.events)).toStrictEqual(expected.messages)
        }
      ),
      { numRuns: 200 }
    )
  })
})
