import { describe, expect, it } from "@effect/vitest"
import { Effect, Exit, Fiber } from "effect"
import { Inbox } from "../../src/services/Inbox.js"
import { SessionLog } from "../../src/services/SessionLog.js"
import { MemoryStoreControl } from "../../src/services/SessionStore.js"
import { freshSession, plugin } from "../services/harness.js"

const lastSeq = Effect.map(Effect.flatMap(SessionLog, (log) => log.events), (events) => events.length - 1)

describe("Writer: synchronous writes on the memory store", () => {
  it.scoped("an acknowledged append is written from the caller's fiber: it completes without suspending, in one store append", () =>
    Effect.gen(function*() {
      const inbox = yield* Inbox
      const log = yield* SessionLog
      const control = yield* MemoryStoreControl
      const calls = yield* control.appendCalls
      // Run on a runtime of its own: any suspension (a wait for the writer fiber) fails runSyncExit.
      const exit = Effect.runSyncExit(inbox.append("next-step", plugin("C")))
      expect(exit).toStrictEqual(Exit.void)
      expect(yield* log.durableSeq).toBe(yield* lastSeq)
      expect(yield* control.appendCalls).toBe(calls + 1)
    }).pipe(Effect.provide(freshSession())))

  it.scoped("while the store is held, the wait falls back to the writer: one append, once released", () =>
    Effect.gen(function*() {
      const inbox = yield* Inbox
      const log = yield* SessionLog
      const control = yield* MemoryStoreControl
      const durable = yield* log.durableSeq
      yield* control.hold
      const calls = yield* control.appendCalls
      const fiber = yield* Effect.fork(inbox.append("next-step", plugin("C")))
      yield* Effect.repeatN(Effect.yieldNow(), 50)
      expect(fiber.unsafePoll()).toBeNull()
      expect(yield* log.durableSeq).toBe(durable)
      yield* control.release
      yield* Fiber.join(fiber)
      expect(yield* log.durableSeq).toBe(yield* lastSeq)
      expect(yield* control.appendCalls).toBe(calls + 1)
    }).pipe(Effect.provide(freshSession())))

  it.scoped("an injected failure is left to the writer, which retries it: the append succeeds on the second call", () =>
    Effect.gen(function*() {
      const inbox = yield* Inbox
      const log = yield* SessionLog
      const control = yield* MemoryStoreControl
      const calls = yield* control.appendCalls
      yield* control.failAppends(1)
      yield* inbox.append("next-step", plugin("C"))
      expect(yield* log.durableSeq).toBe(yield* lastSeq)
      expect(yield* control.appendCalls).toBe(calls + 2)
    }).pipe(Effect.provide(freshSession())))
})
