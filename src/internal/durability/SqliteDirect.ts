/**
 * A second connection to a SQLite store's database file, used through better-sqlite3 directly for
 * the two things `@effect/sql`'s client makes slow: reading whole sessions and appending at once.
 *
 * - Reads use pluck mode, which returns each event row's text without building a row object (on a
 *   long log that object is a third of the read). In WAL mode a read never waits for the store's
 *   writer and sees every committed transaction.
 * - A synchronous append runs a whole transaction (the length check, the rows, the COMMIT) in one
 *   call, without an Effect per statement; a session that needs durability while nothing else writes
 *   uses it to write at once instead of handing the batch to its writer fiber (see `SyncAppend`).
 *
 * The store runs its own transactions on its `@effect/sql` connection; it calls `append` here only
 * while none of them is open, so the two connections never hold a write transaction together. A
 * file-backed store only: a second connection to `:memory:` would open another, empty database.
 *
 * This module also holds what the store knows about the driver's failures: the SQLite result code
 * of an error (`SQLITE_BUSY`, `SQLITE_FULL`, ...), put first in its message (and in the store's
 * `PersistenceError`), and the wait for
 * another process's lock. better-sqlite3 is synchronous: its own busy timeout would wait for a lock
 * inside the call, blocking the event loop (every session and timer of the process). Every
 * connection of the store runs with a busy timeout of 0, so a statement that needs a lock another
 * connection holds fails at once with `SQLITE_BUSY`; {@link waitForLock} runs the operation again
 * after a `Clock` sleep (exponential backoff from 2 ms, at most ~100 ms apart, jittered) until it
 * gets the lock or the store's `busyTimeout` has passed.
 *
 * @since 0.1.0
 */
import { SqlError } from "@effect/sql/SqlError"
import Database from "better-sqlite3"
import type { Scope } from "effect"
import { Clock, Duration, Effect, Schedule } from "effect"
import { PersistenceError } from "../../domain/Errors.js"

/**
 * One session as stored: its header text, its recorded length and its event rows' text in seq order.
 *
 * @since 0.1.0
 * @category models
 */
export interface StoredSession {
  readonly header: unknown
  readonly length: number
  readonly rows: ReadonlyArray<unknown>
}

/**
 * The direct connection's operations; each throws what the driver throws.
 *
 * @since 0.1.0
 * @category models
 */
export interface SqliteDirect {
  /** The session `id` as one snapshot, or undefined when it is not stored. */
  readonly read: (id: string) => StoredSession | undefined
  /**
   * Appends `rows` (the events of `id` from seq `firstSeq` on) in one `BEGIN IMMEDIATE` transaction
   * if the stored length still equals `firstSeq`; `false` (nothing written) when it does not.
   */
  readonly append: (id: string, firstSeq: number, rows: ReadonlyArray<string>) => boolean
}

/**
 * A session's stored header and recorded length.
 *
 * @since 0.1.0
 * @category sql
 */
export const SELECT_SESSION = "SELECT header, length FROM sessions WHERE id = ?"
const SELECT_ROWS = "SELECT row FROM events WHERE session_id = ? ORDER BY seq"
const ADVANCE_LENGTH = "UPDATE sessions SET length = ? WHERE id = ? AND length = ?"

/**
 * The most rows one INSERT takes. Rows go in with INSERTs of 256, 128, ..., 1 rows: any batch needs
 * at most log2 + 1 statements beyond its full 256-row chunks, only nine statement texts exist, and
 * 768 bound parameters stay under SQLite's historical limit of 999.
 *
 * @since 0.1.0
 * @category sql
 */
export const MAX_ROWS_PER_INSERT = 256

/**
 * The INSERTs that write `total` rows: each one's first row and row count (a power of two).
 *
 * @since 0.1.0
 * @category sql
 */
export const insertChunks = (total: number): Array<{ readonly offset: number; readonly size: number }> => {
  const chunks: Array<{ readonly offset: number; readonly size: number }> = []
  let size = MAX_ROWS_PER_INSERT
  for (let offset = 0; offset < total; offset += size) {
    while (size > total - offset) size >>>= 1
    chunks.push({ offset, size })
  }
  return chunks
}

/**
 * An INSERT of `rows` event rows, bound as flat `(session_id, seq, row)` triples.
 *
 * @since 0.1.0
 * @category sql
 */
export const insertEventsSql = (rows: number): string =>
  `INSERT INTO events (session_id, seq, row) VALUES ${"(?, ?, ?), ".repeat(rows - 1)}(?, ?, ?)`

/**
 * Opens the direct connection on the existing database file `filename` with the store's
 * `PRAGMA synchronous`, closed with the scope. Call it after the store's migrations ran (the
 * statements are prepared on open).
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (
  filename: string,
  synchronous: "OFF" | "NORMAL" | "FULL"
): Effect.Effect<SqliteDirect, unknown, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.try(() => {
      // No busy wait: a call that meets another connection's lock throws SQLITE_BUSY at once.
      const db = new Database(filename, { fileMustExist: true, timeout: 0 })
      try {
        db.pragma(`synchronous = ${synchronous}`)
        const selectSession = db.prepare<[string], { readonly header: unknown; readonly length: number }>(
          SELECT_SESSION
        )
        const selectRows = db.prepare<[string], unknown>(SELECT_ROWS).pluck(true)
        const read = db.transaction((id: string): StoredSession | undefined => {
          const session = selectSession.get(id)
          if (session === undefined) return undefined
          return { header: session.header, length: session.length, rows: selectRows.all(id) }
        })
        const advance = db.prepare(ADVANCE_LENGTH)
        const inserts = new Map<number, Database.Statement>()
        const insert = (rows: number) => {
          let statement = inserts.get(rows)
          if (statement === undefined) {
            statement = db.prepare(insertEventsSql(rows))
            inserts.set(rows, statement)
          }
          return statement
        }
        const params: Array<unknown> = []
        const write = db.transaction((id: string, firstSeq: number, rows: ReadonlyArray<string>): boolean => {
          if (advance.run(firstSeq + rows.length, id, firstSeq).changes === 0) return false
          for (const { offset, size } of insertChunks(rows.length)) {
            params.length = 0
            for (let i = offset; i < offset + size; i++) params.push(id, firstSeq + i, rows[i])
            insert(size).run(params)
          }
          return true
        })
        const direct: SqliteDirect = { read, append: (id, firstSeq, rows) => write.immediate(id, firstSeq, rows) }
        return { db, direct }
      } catch (cause) {
        db.close()
        throw cause
      }
    }),
    ({ db }) => Effect.sync(() => db.close())
  ).pipe(Effect.map(({ direct }) => direct))

/**
 * The SQLite result code (`SQLITE_BUSY`, `SQLITE_FULL`, `SQLITE_CONSTRAINT_PRIMARYKEY`, ...) of a
 * driver error, looked up along its `cause` links (an `SqlError` wraps the driver's error); undefined
 * for a failure that did not come from SQLite.
 *
 * @since 0.1.0
 * @category failures
 */
export const sqliteCode = (error: unknown): string | undefined => driverError(error)?.code

const driverError = (error: unknown): { readonly code: string; readonly message: string } | undefined => {
  let current = error
  for (let depth = 0; depth < 8 && typeof current === "object" && current !== null; depth++) {
    const { cause, code, message } = current as {
      readonly cause?: unknown
      readonly code?: unknown
      readonly message?: unknown
    }
    if (typeof code === "string" && code.startsWith("SQLITE_")) {
      return { code, message: typeof message === "string" ? message : code }
    }
    current = cause
  }
  return undefined
}

/**
 * Whether `error` is SQLite's answer that another connection holds a lock the operation needs
 * (`SQLITE_BUSY` and its extended codes).
 *
 * @since 0.1.0
 * @category failures
 */
export const isBusy = (error: unknown): boolean => driverError(error)?.code.startsWith("SQLITE_BUSY") === true

/**
 * `error` as a cause whose message starts with its SQLite code (`SQLITE_FULL: database or disk is
 * full`) instead of the client's `Failed to execute statement`; the driver's error stays its cause.
 * A failure without a SQLite code, or whose message already names it, is returned as it is.
 *
 * @since 0.1.0
 * @category failures
 */
export const withSqliteCode = (error: unknown): unknown => {
  const driver = driverError(error)
  if (driver === undefined) return error
  const message = (error as { readonly message?: unknown }).message
  if (typeof message === "string" && message.includes(driver.code)) return error
  return new SqlError({
    cause: (error as { readonly cause?: unknown }).cause ?? error,
    message: `${driver.code}: ${driver.message}`
  })
}

/**
 * A failure of `operation` on session `sessionId` as `PersistenceError`, its SQLite code (if any)
 * leading its message (see {@link withSqliteCode}); a `PersistenceError` is returned as it is.
 *
 * @since 0.1.0
 * @category failures
 */
export const persistenceError = (sessionId: string, operation: string) => (cause: unknown): PersistenceError =>
  cause instanceof PersistenceError
    ? cause
    : new PersistenceError({ sessionId, operation, cause: withSqliteCode(cause) })

/**
 * The message of a lock wait that gave up.
 *
 * @since 0.1.0
 * @category failures
 */
export const lockedMessage = (filename: string, code: string, waitedMs: number): string =>
  `database is locked by another process (${code}): ${filename}; gave up after ${waitedMs} ms (the store's busyTimeout)`

// Exponential from 2 ms, never more than ~100 ms apart (the smaller delay of the two), jittered
// (x0.8-1.2) so that processes waiting for the same lock do not retry in step, for `timeout` at most.
const lockBackoff = (timeout: Duration.Duration) =>
  Schedule.exponential(Duration.millis(2)).pipe(
    Schedule.union(Schedule.spaced(Duration.millis(100))),
    Schedule.jittered,
    Schedule.upTo(timeout)
  )

/**
 * Runs `attempt`; while it fails with `SQLITE_BUSY` (see {@link isBusy}), sleeps (`Clock`) and runs
 * it again, for `timeout` at most. A lock that outlasts it fails with an `SqlError` saying
 * `database is locked by another process` and naming `filename` (still {@link isBusy}). `attempt`
 * must be an operation that a busy failure left without effect (a statement, or a transaction that
 * was rolled back), and must not hold anything the lock's holder could need while it sleeps.
 *
 * @since 0.1.0
 * @category locks
 */
export const waitForLock = (filename: string, timeout: Duration.Duration) => {
  const gaveUp = (error: unknown, waitedMs: number) =>
    new SqlError({
      cause: (error as { readonly cause?: unknown }).cause ?? error,
      message: lockedMessage(filename, sqliteCode(error) ?? "SQLITE_BUSY", Math.round(waitedMs))
    })
  return <A, E, R>(attempt: Effect.Effect<A, E, R>): Effect.Effect<A, E | SqlError, R> =>
    Effect.catchIf(attempt, isBusy, (first) =>
      Duration.isZero(timeout)
        ? Effect.fail(gaveUp(first, 0))
        : Effect.flatMap(Clock.currentTimeMillis, (start) =>
          Effect.retry(attempt, { schedule: lockBackoff(timeout), while: isBusy }).pipe(
            Effect.catchIf(isBusy, (error) =>
              Effect.flatMap(Clock.currentTimeMillis, (now) =>
                Effect.fail(gaveUp(error, now - start))))
          )))
}
