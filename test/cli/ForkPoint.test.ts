/**
 * ForkPoint: `--at N` is a turn number and `--at-seq S` a seq, for `tiller fork` and `/fork` alike;
 * new sessions the CLI names are `s-` ids.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Either } from "effect"
import * as ForkPoint from "../../src/cli/ForkPoint.js"
import type { SessionEvent } from "../../src/domain/Event.js"

const event = (seq: number, type: string, data: unknown): SessionEvent => ({ seq, time: 0, type, data } as SessionEvent)

// Turn 1 ends at seq 4, turn 2 at seq 9.
const log: ReadonlyArray<SessionEvent> = [
  event(0, "turn/start", { turn: 1 }),
  event(4, "turn/end", { turn: 1, reason: { kind: "completed" } }),
  event(5, "turn/start", { turn: 2 }),
  event(9, "turn/end", { turn: 2, reason: { kind: "completed" } })
]

describe("ForkPoint", () => {
  it("--at and --at-turn name a turn, whose turn/end is the boundary; --at-seq names the seq itself", () => {
    expect(ForkPoint.parseForkWords("--at 1")).toEqual({ point: { _tag: "Turn", turn: 1 }, childId: undefined })
    expect(ForkPoint.parseForkWords("--at-turn 2 --as b")).toEqual({ point: { _tag: "Turn", turn: 2 }, childId: "b" })
    expect(ForkPoint.parseForkWords("--at-seq 4")).toEqual({ point: { _tag: "Seq", seq: 4 }, childId: undefined })
    expect(ForkPoint.parseForkWords("")).toEqual({ point: { _tag: "End" }, childId: undefined })
    expect(ForkPoint.boundaryOf(log, { _tag: "Turn", turn: 1 })).toEqual(Either.right(4))
    expect(ForkPoint.boundaryOf(log, { _tag: "Turn", turn: 2 })).toEqual(Either.right(9))
    expect(ForkPoint.boundaryOf(log, { _tag: "Seq", seq: 1 })).toEqual(Either.right(1))
    expect(ForkPoint.boundaryOf(log, { _tag: "End" })).toEqual(Either.right(undefined))
    expect(ForkPoint.boundaryOf(log, { _tag: "Turn", turn: 3 })).toEqual(
      Either.left("turn 3 has not ended (or does not exist)")
    )
  })

  it("a turn and a seq together, a flag without a value or an unknown word do not parse", () => {
    expect(ForkPoint.forkPointOf(1, 4)._tag).toBe("Left")
    expect(ForkPoint.parseForkWords("--at 1 --at-seq 4")).toBeUndefined()
    expect(ForkPoint.parseForkWords("--at")).toBeUndefined()
    expect(ForkPoint.parseForkWords("--at x")).toBeUndefined()
    expect(ForkPoint.parseForkWords("--upto 3")).toBeUndefined()
  })

  it.effect("a new session id is s- and twelve hex digits, fresh each time", () =>
    Effect.gen(function*() {
      const a = yield* ForkPoint.newSessionId
      const b = yield* ForkPoint.newSessionId
      expect(a).toMatch(/^s-[0-9a-f]{12}$/)
      expect(a).not.toBe(b)
    }))
})
