import { SqlError } from "@effect/sql/SqlError"
import { describe, expect, it } from "@effect/vitest"
import { Clock, Duration, Effect, Fiber, Option, TestClock } from "effect"
import { isBusy, sqliteCode, waitForLock, withSqliteCode } from "../../../src/internal/durability/SqliteDirect.js"

/** An error as better-sqlite3 throws it. */
const driverError = (code: string, message: string) => Object.assign(new Error(message), { code })
const busy = () =>
  new SqlError({ cause: driverError("SQLITE_BUSY", "database is locked"), message: "Failed to execute statement" })

describe("SqliteDirect failures", () => {
  it("finds the SQLite code along cause links, and only a SQLite code", () => {
    expect(sqliteCode(busy())).toBe("SQLITE_BUSY")
    expect(sqliteCode({ cause: { cause: driverError("SQLITE_FULL", "database or disk is full") } })).toBe("SQLITE_FULL")
    expect(sqliteCode(Object.assign(new Error("no such file"), { code: "ENOENT" }))).toBeUndefined()
    expect(sqliteCode("text")).toBeUndefined()
    expect(isBusy(new SqlError({ cause: driverError("SQLITE_BUSY_SNAPSHOT", "database is locked"), message: "x" })))
      .toBe(true)
    expect(isBusy(new SqlError({ cause: driverError("SQLITE_FULL", "database or disk is full"), message: "x" }))).toBe(
      false
    )
  })

  it("puts the SQLite code and the driver's message first, keeping the driver's error as the cause", () => {
    const full = driverError("SQLITE_FULL", "database or disk is full")
    const coded = withSqliteCode(new SqlError({ cause: full, message: "Failed to execute statement" }))
    expect(coded).toBeInstanceOf(SqlError)
    expect((coded as SqlError).message).toBe("SQLITE_FULL: database or disk is full")
    expect((coded as SqlError).cause).toBe(full)
    const plain = new Error("not from SQLite")
    expect(withSqliteCode(plain)).toBe(plain)
  })
})

describe("waitForLock", () => {
  /** An operation that meets a lock `busyFor` times, recording when (Clock millis) each attempt ran. */
  const lockedFor = (busyFor: number) => {
    const attempts: Array<number> = []
    const attempt = Effect.flatMap(Clock.currentTimeMillis, (now) => {
      attempts.push(now)
      return attempts.length <= busyFor ? Effect.fail(busy()) : Effect.succeed("done")
    })
    return { attempt, attempts }
  }

  it.effect("an operation that gets the lock at once runs once, without reading the clock or sleeping", () =>
    Effect.gen(function*() {
      const { attempt, attempts } = lockedFor(0)
      expect(yield* waitForLock("f.db", Duration.seconds(10))(attempt)).toBe("done")
      expect(attempts).toEqual([0])
    }))

  it.effect("runs the operation again after Clock sleeps, growing from a few ms to about 100 ms apart, until it gets the lock", () =>
    Effect.gen(function*() {
      const { attempt, attempts } = lockedFor(20)
      const fiber = yield* Effect.fork(waitForLock("f.db", Duration.seconds(10))(attempt))
      yield* TestClock.adjust("1 millis")
      // Sleeping, not spinning: one attempt so far, then a second once its short sleep passed.
      expect(attempts.length).toBeLessThanOrEqual(2)
      yield* TestClock.adjust("5 seconds")
      expect(yield* Fiber.join(fiber)).toBe("done")
      expect(attempts.length).toBe(21)
      const gaps = attempts.slice(1).map((at, i) => at - attempts[i]!)
      expect(gaps[0]).toBeLessThanOrEqual(3)
      expect(Math.max(...gaps)).toBeLessThanOrEqual(120)
      expect(Math.max(...gaps)).toBeGreaterThanOrEqual(80)
    }))

  it.effect("gives up once the timeout has passed: 'database is locked by another process', its code and the file", () =>
    Effect.gen(function*() {
      const { attempt, attempts } = lockedFor(Number.POSITIVE_INFINITY)
      const fiber = yield* Effect.fork(Effect.flip(waitForLock("/tmp/f.db", Duration.seconds(2))(attempt)))
      yield* TestClock.adjust("1900 millis")
      expect(Option.isNone(yield* Fiber.poll(fiber))).toBe(true)
      yield* TestClock.adjust("300 millis")
      const error = yield* Fiber.join(fiber)
      expect(error).toBeInstanceOf(SqlError)
      expect(error.message).toMatch(
        /^database is locked by another process \(SQLITE_BUSY\): \/tmp\/f\.db; gave up after 2\d\d\d ms/
      )
      expect(isBusy(error)).toBe(true)
      expect(attempts.length).toBeGreaterThan(15)
    }))

  it.effect("a timeout of zero gives up at the first busy answer; other failures are not retried", () =>
    Effect.gen(function*() {
      const { attempt, attempts } = lockedFor(1)
      const error = yield* Effect.flip(waitForLock("f.db", Duration.zero)(attempt))
      expect(error.message).toContain("database is locked by another process (SQLITE_BUSY): f.db")
      expect(attempts).toEqual([0])
      let runs = 0
      const full = Effect.suspend(() => {
        runs++
        return Effect.fail(
          new SqlError({ cause: driverError("SQLITE_FULL", "database or disk is full"), message: "x" })
        )
      })
      yield* Effect.flip(waitForLock("f.db", Duration.seconds(10))(full))
      expect(runs).toBe(1)
    }))
})
