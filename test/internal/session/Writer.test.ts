import { afterAll, describe, expect, it } from "@effect/vitest"
import Database from "better-sqlite3"
import { Clock, Duration, Effect, Exit, Fiber, Layer, Option, Scheduler, Scope, TRef } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { SessionId } from "../../../src/domain/Ids.js"
import * as WriterSignal from "../../../src/internal/durability/WriterSignal.js"
import { openSessionState } from "../../../src/internal/session/SessionOpen.js"
import { awaitDurable, SessionState } from "../../../src/internal/state/SessionState.js"
import { SqliteSessionStore } from "../../../src/layers/SqliteStore.js"
import { Inbox } from "../../../src/services/Inbox.js"
import { SessionLog } from "../../../src/services/SessionLog.js"
import { MemoryStoreControl, SessionStore } from "../../../src/services/SessionStore.js"
import { claimTurn, freshSession, plugin, sessionOn } from "../../services/harness.js"

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

  // A scheduler like the default one, except that the running fiber yields once, at the first
  // operation after `trap()` turns true (as the default one does when its operation budget runs out).
  const trapScheduler = (trap: () => boolean): Scheduler.Scheduler => {
    let fired = false
    return {
      scheduleTask: (task, priority) => Scheduler.defaultScheduler.scheduleTask(task, priority),
      shouldYield: () => {
        if (fired || !trap()) return false
        fired = true
        return 0
      }
    }
  }

  it.scoped("a writer that yields while starting its timer reads the log only afterwards: no stale batch, no poison", () =>
    Effect.gen(function*() {
      let writer: WriterSignal.WriterSignal | undefined
      const result = yield* Effect.gen(function*() {
        const state = yield* SessionState
        writer = state.writer
        const inbox = yield* Inbox
        const log = yield* SessionLog
        // Two acknowledged appends, written synchronously: the writer is woken to start its timer.
        yield* inbox.append("next-step", plugin("a"))
        yield* inbox.append("next-step", plugin("b"))
        const timerStarted = state.writer.windowMs !== undefined
        // Events nobody awaits; with batchSize 1 the writer is due to write them.
        yield* claimTurn
        const last = (yield* log.events).length - 1
        // A waiter that writes synchronously while the writer is parked in the yield.
        yield* Fiber.join(yield* Effect.fork(awaitDurable(state, last)))
        yield* Effect.repeatN(Effect.yieldNow(), 20)
        return {
          timerStarted,
          last,
          durable: yield* log.durableSeq,
          poisoned: Option.isSome(yield* TRef.get(state.poisoned))
        }
      }).pipe(
        Effect.provide(freshSession({ durability: { batchSize: 1 } })),
        Effect.withScheduler(trapScheduler(() => writer?.windowMs !== undefined))
      )
      expect(result.timerStarted).toBe(false)
      expect(result.durable).toBe(result.last)
      expect(result.poisoned).toBe(false)
    }))

  // A clock whose sleeps end up to 1 ms short of their duration by its own reading, as Node's timers
  // (monotonic, whole milliseconds) may fire against Date.now().
  const earlyWakingClock = (): Clock.Clock => {
    let now = 1_000_000
    return {
      [Clock.ClockTypeId]: Clock.ClockTypeId,
      unsafeCurrentTimeMillis: () => now,
      currentTimeMillis: Effect.sync(() => now),
      unsafeCurrentTimeNanos: () => BigInt(now) * 1_000_000n,
      currentTimeNanos: Effect.sync(() => BigInt(now) * 1_000_000n),
      sleep: (duration) =>
        Effect.sync(() => {
          now += Math.max(1, Duration.toMillis(duration) - 1)
        })
    }
  }

  it.scoped("a window timer that wakes 1 ms before the clock reaches its deadline still gets the batch written", () =>
    Effect.gen(function*() {
      const result = yield* Effect.gen(function*() {
        const state = yield* SessionState
        const inbox = yield* Inbox
        const log = yield* SessionLog
        // Two acknowledged appends, written synchronously: the writer starts its window timer.
        yield* inbox.append("next-step", plugin("a"))
        yield* inbox.append("next-step", plugin("b"))
        // Events nobody awaits: only the batch window writes them.
        yield* claimTurn
        const last = (yield* log.events).length - 1
        yield* Effect.repeatN(Effect.yieldNow(), 50)
        return { timer: state.writer.windowMs !== undefined, last, durable: yield* log.durableSeq }
      }).pipe(Effect.provide(freshSession()), Effect.withClock(earlyWakingClock()))
      expect(result.timer).toBe(true)
      expect(result.durable).toBe(result.last)
    }))

  it.effect("once the session's scope is closed, nothing is written synchronously any more", () =>
    Effect.gen(function*() {
      const scope = yield* Scope.make()
      const state = yield* openSessionState(yield* SessionStore, { sessionId: SessionId.make("closed") }).pipe(
        Scope.extend(scope)
      )
      expect(WriterSignal.canWriteNow(state.writer)).toBe(true)
      yield* Scope.close(scope, Exit.void)
      expect(WriterSignal.canWriteNow(state.writer)).toBe(false)
    }).pipe(Effect.provide(SessionStore.layerMemory)))
})

describe("Writer: synchronous writes on the SQLite store", () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "tiller-writer-"))
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }))
  let files = 0
  const onSqlite = (filename: string) =>
    sessionOn({ sessionId: SessionId.make("s1") }).pipe(Layer.provideMerge(SqliteSessionStore.layer({ filename })))

  it.scoped("on a file, the session's own waits write at once; an acknowledgement waits for the writer's group commit", () =>
    Effect.gen(function*() {
      const inbox = yield* Inbox
      const log = yield* SessionLog
      const state = yield* SessionState
      expect(WriterSignal.canWriteNow(state.writer)).toBe(true)
      expect(WriterSignal.acknowledgesNow(state.writer)).toBe(false)
      const durable = yield* log.durableSeq
      // The acknowledgement suspends (runSyncExit reports it), and nothing was written meanwhile.
      const acknowledged = Effect.runSyncExit(inbox.append("next-step", plugin("C")))
      expect(Exit.isFailure(acknowledged)).toBe(true)
      expect(yield* log.durableSeq).toBe(durable)
      // A flush writes everything pending from this fiber, without suspending.
      expect(Effect.runSyncExit(log.flush)).toStrictEqual(Exit.void)
      expect(yield* log.durableSeq).toBe(yield* lastSeq)
      const stored = yield* Effect.flatMap(SessionStore, (store) => store.load(SessionId.make("s1")))
      expect(stored.events).toStrictEqual(yield* log.events)
    }).pipe(Effect.provide(onSqlite(path.join(dir, `writer-${++files}.db`)))))

  it.scoped("a write at once that fails writes nothing; the writer's own attempts fail too and the session is poisoned", () => {
    const filename = path.join(dir, `writer-${++files}.db`)
    return Effect.gen(function*() {
      const inbox = yield* Inbox
      const log = yield* SessionLog
      const state = yield* SessionState
      yield* inbox.append("next-step", plugin("C"))
      const durable = yield* log.durableSeq
      const db = new Database(filename)
      db.exec("CREATE TRIGGER refuse BEFORE INSERT ON events BEGIN SELECT RAISE(ABORT, 'refused'); END")
      db.close()
      yield* claimTurn
      expect(yield* lastSeq).toBeGreaterThan(durable)
      // The write at once fails, so the flush waits for the writer (runSyncExit reports the suspension).
      expect(Exit.isFailure(Effect.runSyncExit(log.flush))).toBe(true)
      const flushed = yield* Effect.exit(log.flush)
      expect(flushed).toMatchObject({
        _tag: "Failure",
        cause: { error: { _tag: "PersistenceError", operation: "append" } }
      })
      expect(yield* log.durableSeq).toBe(durable)
      expect(Option.isSome(yield* TRef.get(state.poisoned))).toBe(true)
      const stored = yield* Effect.flatMap(SessionStore, (store) => store.load(SessionId.make("s1")))
      expect(stored.events).toStrictEqual((yield* log.events).slice(0, durable + 1))
    }).pipe(Effect.provide(onSqlite(filename)))
  })

  it.scoped("on :memory: (no second connection) every wait goes through the writer", () =>
    Effect.gen(function*() {
      const log = yield* SessionLog
      const state = yield* SessionState
      expect(WriterSignal.canWriteNow(state.writer)).toBe(false)
      yield* Effect.flatMap(Inbox, (inbox) => inbox.append("next-step", plugin("C")))
      expect(yield* log.durableSeq).toBe(yield* lastSeq)
    }).pipe(Effect.provide(onSqlite(":memory:"))))
})
