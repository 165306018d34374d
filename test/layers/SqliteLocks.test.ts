/**
 * Another process holding a SQLite store's write lock (issue 27): the store waits for it without
 * blocking the event loop, for at most its `busyTimeout`, then fails with a `PersistenceError` that
 * says so and names the file. Real child processes and wall time: `it.live`.
 *
 * The case holds the lock for 10 s; `TILLER_TEST_LOCK_MS` shortens it for local runs.
 */
import { afterAll, describe, expect, it } from "@effect/vitest"
import { Context, Effect, Either, Fiber, Layer } from "effect"
import { spawn } from "node:child_process"
import * as fs from "node:fs"
import { createRequire } from "node:module"
import * as os from "node:os"
import * as path from "node:path"
import { performance } from "node:perf_hooks"
import { PersistenceError } from "../../src/domain/Errors.js"
import type { EventOf, SessionEvent } from "../../src/domain/Event.js"
import { SessionId } from "../../src/domain/Ids.js"
import { Agent } from "../../src/layers/Agent.js"
import { ScriptedModel } from "../../src/layers/ScriptedModel.js"
import type { SqliteSessionStoreOptions } from "../../src/layers/SqliteStore.js"
import { SqliteSessionStore } from "../../src/layers/SqliteStore.js"
import { Driver } from "../../src/services/Driver.js"
import { SessionLog } from "../../src/services/SessionLog.js"
import { SessionStore } from "../../src/services/SessionStore.js"
import { Tools } from "../../src/services/Tools.js"
import { user } from "../agent/harness.js"

const LOCK_MS = Number(process.env["TILLER_TEST_LOCK_MS"] ?? 10_000)

const dir = fs.mkdtempSync(path.join(os.tmpdir(), "tiller-locks-"))
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }))
let files = 0
const freshFile = () => path.join(dir, `store-${++files}.db`)

const driverPath = createRequire(import.meta.url).resolve("better-sqlite3")

/**
 * Another process holding `filename`'s write lock (`BEGIN IMMEDIATE`, nothing written) for `ms`
 * milliseconds; ready once it holds it. `exited` completes when the process is gone (the lock with it).
 */
const holdWriteLock = (filename: string, ms: number) =>
  Effect.gen(function*() {
    const script = `
      const Database = require(${JSON.stringify(driverPath)})
      const db = new Database(${JSON.stringify(filename)})
      db.exec("BEGIN IMMEDIATE")
      console.log("locked")
      setTimeout(() => { db.exec("ROLLBACK"); db.close() }, ${ms})`
    const child = spawn(process.execPath, ["-e", script], { stdio: ["ignore", "pipe", "inherit"] })
    yield* Effect.addFinalizer(() => Effect.sync(() => child.kill("SIGKILL")))
    let gone = false
    child.once("exit", () => (gone = true))
    yield* Effect.async<void>((resume) => {
      child.stdout!.setEncoding("utf8").once("data", () => resume(Effect.void))
    })
    const lockedAt = performance.now()
    return {
      lockedAt,
      running: () => !gone,
      exited: Effect.async<void>((resume) => {
        if (gone) resume(Effect.void)
        else child.once("exit", () => resume(Effect.void))
      })
    }
  })

/**
 * A 100 ms interval on the event loop; `stop` returns the most any tick was late. A synchronous
 * wait on a lock anywhere in the process shows up here.
 */
const ticker = () => {
  const interval = 100
  let expected = performance.now() + interval
  let worst = 0
  const timer = setInterval(() => {
    const now = performance.now()
    worst = Math.max(worst, now - expected)
    expected = now + interval
  }, interval)
  return {
    stop: () => {
      clearInterval(timer)
      return worst
    }
  }
}

const S = SessionId.make("s")

const agentOn = (
  store: SqliteSessionStoreOptions,
  target: { readonly sessionId: SessionId } | { readonly resume: SessionId },
  replies: ReadonlyArray<string>
) =>
  Agent.layer({ ...target, model: { provider: "p", model: "m" } }).pipe(
    Layer.provideMerge(
      Layer.mergeAll(
        SqliteSessionStore.layer(store),
        ScriptedModel.layer(replies.map((reply) => ScriptedModel.text(reply))),
        Tools.layer()
      )
    )
  )

const turnStarts = (events: ReadonlyArray<SessionEvent>) =>
  events.filter((e) => e.type === "turn/start").map((e) => (e as EventOf<"turn/start">).data.turn)

const storedEvents = (filename: string, id: SessionId) =>
  Effect.flatMap(SessionStore, (store) => Effect.map(store.load(id), (loaded) => loaded.events)).pipe(
    Effect.provide(SqliteSessionStore.layer({ filename }))
  )

/** The database file's bytes once every connection closed (SQLite then folds the WAL into it and removes it). */
const fileBytes = (filename: string) => {
  expect(fs.existsSync(`${filename}-wal`)).toBe(false)
  return fs.readFileSync(filename)
}

/** The failure of `effect`, or a test failure if it succeeded. */
const failureOf = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.flatMap(
    Effect.either(effect),
    Either.match({
      onLeft: Effect.succeed,
      onRight: () => Effect.dieMessage("expected a failure, but the effect succeeded")
    })
  )

describe("another process holds the SQLite write lock", () => {
  it.live(
    `for ${LOCK_MS} ms: timers fire on time, a session on another file completes turns, and the blocked followup completes once the lock is gone`,
    () =>
      Effect.gen(function*() {
        const locked = freshFile()
        const other = freshFile()
        yield* Effect.scoped(Effect.gen(function*() {
          // The bound is longer than the lock: the blocked operation waits, then completes.
          const a = yield* Layer.build(
            agentOn({ filename: locked, busyTimeout: LOCK_MS + 20_000 }, { sessionId: S }, ["one", "two"])
          )
          const b = yield* Layer.build(
            agentOn({ filename: other }, { sessionId: S }, Array.from({ length: 40 }, (_, i) => `b${i}`))
          )
          const driverA = Context.get(a, Driver)
          const driverB = Context.get(b, Driver)
          yield* driverA.followup(user("A1"))
          yield* driverA.whenIdle

          const holder = yield* holdWriteLock(locked, LOCK_MS)
          const ticks = ticker()
          const blocked = yield* Effect.fork(Effect.zipRight(driverA.followup(user("A2")), driverA.whenIdle))

          // Turns of the other file's session complete while the lock is held.
          let turnsDone = 0
          while (performance.now() - holder.lockedAt < LOCK_MS - 2_000 && holder.running()) {
            yield* driverB.followup(user(`B${turnsDone}`))
            yield* driverB.whenIdle
            turnsDone++
            yield* Effect.sleep("300 millis")
          }
          expect(holder.running()).toBe(true)
          expect(turnsDone).toBeGreaterThanOrEqual(Math.min(5, Math.floor((LOCK_MS - 2_000) / 400)))
          // The session on the locked file waits (its acknowledgement needs the write).
          expect(blocked.unsafePoll()).toBeNull()

          yield* holder.exited
          yield* Fiber.join(blocked)
          const lateness = ticks.stop()
          expect(lateness).toBeLessThan(200)

          const live = yield* Context.get(a, SessionLog).events
          expect(turnStarts(live)).toEqual([1, 2])
          const liveB = yield* Context.get(b, SessionLog).events
          expect(turnStarts(liveB)).toEqual(Array.from({ length: turnsDone }, (_, i) => i + 1))
        }))
        // Everything the blocked session wrote once the lock was gone is in the file.
        expect(turnStarts(yield* storedEvents(locked, S))).toEqual([1, 2])
      }),
    LOCK_MS + 60_000
  )

  it.live(
    "longer than busyTimeout: opening a session fails with 'database is locked by another process' naming the file, and changes nothing",
    () =>
      Effect.gen(function*() {
        const filename = freshFile()
        yield* Effect.scoped(Layer.build(agentOn({ filename }, { sessionId: S }, [])))
        const before = fileBytes(filename)

        const fresh = SessionId.make("fresh")
        const error = yield* Effect.scoped(Effect.gen(function*() {
          const holder = yield* holdWriteLock(filename, 4_000)
          const ticks = ticker()
          const started = performance.now()
          const error = yield* failureOf(
            Effect.scoped(Layer.build(agentOn({ filename, busyTimeout: "1 second" }, { sessionId: fresh }, [])))
          )
          const waited = performance.now() - started
          expect(ticks.stop()).toBeLessThan(200)
          // Bounded: given up after about a second, while the lock was still held.
          expect(waited).toBeGreaterThanOrEqual(950)
          expect(waited).toBeLessThan(2_500)
          expect(holder.running()).toBe(true)
          yield* holder.exited
          return error
        }))
        expect(error).toBeInstanceOf(PersistenceError)
        expect(error).toMatchObject({ sessionId: fresh, operation: "open" })
        expect(error.message).toContain("database is locked by another process")
        expect(error.message).toContain("SQLITE_BUSY")
        expect(error.message).toContain(filename)
        expect(fileBytes(filename)).toEqual(before)
        // Once the lock is gone the same open succeeds.
        yield* Effect.scoped(Layer.build(agentOn({ filename, busyTimeout: "1 second" }, { sessionId: fresh }, [])))
      }),
    30_000
  )

  it.live(
    "longer than busyTimeout on a running session: the followup fails with the lock's PersistenceError (poisoned, SPEC 6.3), nothing reaches the file, and a resume works once the lock is gone",
    () =>
      Effect.gen(function*() {
        const filename = freshFile()
        const store = { filename, busyTimeout: "300 millis" } as const
        const before = yield* Effect.scoped(Effect.gen(function*() {
          const scope = yield* Effect.scope
          const agent = yield* Layer.buildWithScope(agentOn(store, { sessionId: S }, ["one", "two"]), scope)
          const driver = Context.get(agent, Driver)
          yield* driver.followup(user("A1"))
          yield* driver.whenIdle
          yield* Context.get(agent, SessionLog).flush
          const stored = yield* Context.get(agent, SessionLog).events

          const holder = yield* holdWriteLock(filename, 4_000)
          const ticks = ticker()
          const error = yield* failureOf(driver.followup(user("A2")))
          expect(ticks.stop()).toBeLessThan(200)
          expect(holder.running()).toBe(true)
          expect(error).toBeInstanceOf(PersistenceError)
          expect(error.message).toContain("database is locked by another process")
          expect(error.message).toContain(filename)
          yield* holder.exited
          return stored
        }))
        expect(yield* storedEvents(filename, S)).toStrictEqual(before)
        const resumed = yield* Effect.gen(function*() {
          const driver = yield* Driver
          yield* driver.followup(user("A3"))
          yield* driver.whenIdle
          return yield* (yield* SessionLog).events
        }).pipe(Effect.provide(agentOn(store, { resume: S }, ["three"])))
        expect(turnStarts(resumed)).toEqual([1, 2])
      }),
    30_000
  )
})
