/**
 * The continuation of a chain on a session's new owner: `chainInterrupted` reads the log an opening
 * left, and `Driver.continuePending` opens a turn for pending input only when idle.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import type { SessionEvent } from "../../src/domain/Event.js"
import { Agent, Driver, Inbox, SessionId, SessionStore, Tools, userMessage } from "../../src/index.js"
import * as DemoModel from "../../src/layers/DemoModel.js"
import { chainInterrupted } from "../../src/layers/SessionEntityHandlers.js"

const event = (seq: number, type: string, data: unknown) => ({ seq, time: 0, type, data }) as unknown as SessionEvent

describe("chainInterrupted", () => {
  it("goes on after a turn this opening closed as interrupted, or one its owner's disposal aborted", () => {
    const interrupted = [
      event(0, "turn/start", { turn: 1 }),
      event(1, "turn/end", { turn: 1, reason: { kind: "interrupted" } })
    ]
    expect(chainInterrupted(interrupted, 1)).toBe(true)
    // Closed by an earlier opening: what is pending now stays parked.
    expect(chainInterrupted(interrupted, 2)).toBe(false)
    const disposed = [
      event(0, "turn/start", { turn: 1 }),
      event(1, "turn/end", { turn: 1, reason: { kind: "aborted", reason: { kind: "disposed" } } })
    ]
    expect(chainInterrupted(disposed, 2)).toBe(true)
    const cancelled = [
      event(0, "turn/start", { turn: 1 }),
      event(1, "turn/end", { turn: 1, reason: { kind: "aborted", reason: { kind: "user" } } })
    ]
    expect(chainInterrupted(cancelled, 2)).toBe(false)
    const completed = [
      event(0, "turn/start", { turn: 1 }),
      event(1, "turn/end", { turn: 1, reason: { kind: "completed" } })
    ]
    expect(chainInterrupted(completed, 0)).toBe(false)
    expect(chainInterrupted([], 0)).toBe(false)
  })
})

describe("Driver.continuePending", () => {
  it.live("opens a turn for pending input when idle, and nothing when there is none", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const inbox = yield* Inbox
      expect(yield* driver.continuePending).toBe(false)
      yield* driver.send(userMessage({ id: "p-1", text: "parked" }), "next-turn", false)
      expect(yield* driver.status).toBe("idle")
      expect(yield* driver.continuePending).toBe(true)
      yield* driver.whenIdle
      expect(yield* inbox.snapshot).toEqual({ nextTurn: [], nextStep: [] })
      expect(yield* driver.continuePending).toBe(false)
    }).pipe(Effect.provide(
      Agent.layer({ sessionId: SessionId.make("cp-1") }).pipe(
        Layer.provide(Layer.mergeAll(SessionStore.layerMemory, DemoModel.layer, Tools.layer()))
      )
    )))
})
