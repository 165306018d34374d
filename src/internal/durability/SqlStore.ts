/**
 * The session store over `@effect/sql`'s `SqlClient` (SPEC 6.1, 8.10): one implementation of
 * create, load, append with group commit and the optimistic check, exists and list, whatever the
 * database; only the statements that differ between dialects come from `SqlDialect`.
 *
 * A session is a `sessions` row (its header as JSON text, the caller's `createdAt`, the stored log
 * length) and one `events` row per logical event, keyed `(session_id, seq)`. An append advances the
 * stored length only if it still equals `events[0].seq` and inserts the rows, in one transaction
 * (`sql.withTransaction`): the conditional update and the unique key are the database's own check
 * against a second writer. Appends of several sessions arriving together share one transaction
 * (group commit: the length checks in one statement, the rows in one insert); after a storage
 * failure such a group is written again with each append in a transaction of its own, so the
 * failure reaches only the appends it concerns. `load` reads the header and length, then the rows
 * below that length (a consistent prefix whatever commits meanwhile), and decodes each row with
 * the `SessionEvent` schema: a row that does not decode is `MalformedLog` with its seq.
 *
 * Every `SqlError` surfaces as `PersistenceError`, also one that `withTransaction` raises as a defect
 * (a COMMIT or ROLLBACK on a connection the server dropped); store-wide failures carry the session
 * id `"*"`.
 *
 * @since 0.1.0
 */
import type * as SqlClient from "@effect/sql/SqlClient"
import { SqlError } from "@effect/sql/SqlError"
import { Cause, Deferred, Effect, Either, Exit, FiberId, Option } from "effect"
import { MalformedLog, PersistenceError, SessionExists, SessionNotFound } from "../../domain/Errors.js"
import type { SessionEvent, SessionHeader } from "../../domain/Event.js"
import { SessionId } from "../../domain/Ids.js"
import { seqProblem } from "./Contiguity.js"
import { makeLocalLease } from "./LocalLease.js"
import type { SqlDialect } from "./SqlDialect.js"
import { encodeRows, eventsOf, headerOf, parseJson } from "./SqliteRows.js"
import type { StoreShape } from "./Store.js"
import { decodeHeader } from "./StoredHeader.js"

/**
 * The session id of store-wide failures (opening, `list`).
 *
 * @since 0.1.0
 * @category constants
 */
export const ALL_SESSIONS = "*"

/**
 * A storage failure as `PersistenceError`; the driver's error code (a PostgreSQL SQLSTATE) leads the message.
 *
 * @since 0.1.0
 * @category failures
 */
export const persistenceError = (sessionId: string, operation: string) => (cause: unknown): PersistenceError => {
  if (cause instanceof PersistenceError) return cause
  const driver = cause instanceof SqlError ? cause.cause : cause
  const code = typeof driver === "object" && driver !== null && "code" in driver ? String(driver.code) : undefined
  const message = typeof driver === "object" && driver !== null && "message" in driver
    ? String(driver.message)
    : cause instanceof SqlError
    ? cause.message
    : String(driver)
  return new PersistenceError({ sessionId, operation, cause: code === undefined ? message : `${code}: ${message}` })
}

const isSqlError = (defect: unknown): defect is SqlError => defect instanceof SqlError

/** `withTransaction`, whose COMMIT or ROLLBACK failing is a typed `SqlError` here instead of a defect. */
const transaction = (sql: SqlClient.SqlClient) => <A, E>(body: Effect.Effect<A, E>): Effect.Effect<A, E | SqlError> =>
  sql.withTransaction(body).pipe(
    Effect.catchSomeDefect((defect) => isSqlError(defect) ? Option.some(Effect.fail(defect)) : Option.none())
  )

/** One queued append: a session's events, their row JSON, and where its outcome goes. */
interface AppendRequest {
  readonly id: SessionId
  readonly firstSeq: number
  readonly events: ReadonlyArray<SessionEvent>
  readonly rows: ReadonlyArray<string>
  readonly done: Deferred.Deferred<void, PersistenceError>
}

/**
 * Builds the store over `sql` (migrated by the caller) with `dialect`'s statements.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (
  sql: SqlClient.SqlClient,
  dialect: SqlDialect,
  extra: Pick<StoreShape, "processLease"> = {}
): StoreShape => {
  const { events: EVENTS, position: POSITION, sessions: SESSIONS } = dialect.tables
  const p = dialect.placeholder
  const INSERT_SESSION = `INSERT INTO ${SESSIONS} (id, header, created_at, length) VALUES (${p(1)}, ${p(2)}, ${p(3)}, ${
    p(4)
  }) ON CONFLICT (id) DO NOTHING RETURNING id`
  const ADVANCE_LENGTH = `UPDATE ${SESSIONS} SET length = ${p(1)} WHERE id = ${p(2)} AND length = ${p(3)} RETURNING id`
  const SELECT_SESSION = `SELECT header, length FROM ${SESSIONS} WHERE id = ${p(1)}`
  const SELECT_LENGTH = `SELECT length FROM ${SESSIONS} WHERE id = ${p(1)}`
  const SELECT_EVENTS = `SELECT seq, row FROM ${EVENTS} WHERE session_id = ${p(1)} AND seq < ${p(2)} ORDER BY seq`
  const SELECT_EXISTS = `SELECT 1 AS found FROM ${SESSIONS} WHERE id = ${p(1)}`
  const SELECT_HEADERS = `SELECT id, header FROM ${SESSIONS} ORDER BY ${POSITION}`
  const inTransaction = transaction(sql)
  const query = (text: string, params: ReadonlyArray<unknown>) => sql.unsafe<Record<string, unknown>>(text, params)

  const create = Effect.fn("SessionStore.create")(function*(
    header: SessionHeader,
    events: ReadonlyArray<SessionEvent>
  ) {
    const sessionId = SessionId.make(header.sessionId)
    const fail = (cause: unknown) => new PersistenceError({ sessionId, operation: "create", cause })
    const problem = seqProblem(events, 0)
    if (problem !== undefined) return yield* fail(problem)
    const rows = encodeRows(events)
    if (Either.isLeft(rows)) return yield* fail(rows.left)
    const headerJson = JSON.stringify(header)
    yield* inTransaction(Effect.gen(function*() {
      const inserted = yield* query(INSERT_SESSION, [sessionId, headerJson, header.createdAt, events.length])
      if (inserted.length === 0) return yield* new SessionExists({ sessionId })
      if (rows.right.length > 0) yield* dialect.insertRows(sql, [{ id: sessionId, firstSeq: 0, rows: rows.right }])
    })).pipe(Effect.catchTag("SqlError", (error) => Effect.fail(persistenceError(sessionId, "create")(error))))
  })

  // Why an append's length check was refused: the session is gone or its stored length moved.
  const refusal = (request: AppendRequest): Effect.Effect<PersistenceError, SqlError> =>
    Effect.map(query(SELECT_LENGTH, [request.id]), ([stored]) =>
      new PersistenceError({
        sessionId: request.id,
        operation: "append",
        cause: stored === undefined
          ? new SessionNotFound({ sessionId: request.id })
          : seqProblem(request.events, Number(stored.length)) ?? "the stored length changed"
      }))

  // The length checks of a group: one statement when its sessions are distinct, else one each.
  // Returns each append's refusal (undefined when its check passed).
  const advance = (group: ReadonlyArray<AppendRequest>) =>
    Effect.gen(function*() {
      const distinct = group.length > 1 && new Set(group.map((request) => request.id)).size === group.length
      let advanced: ReadonlySet<string>
      if (distinct) {
        advanced = new Set(
          yield* dialect.advanceLengths(
            sql,
            group.map((request) => ({
              id: request.id,
              from: request.firstSeq,
              to: request.firstSeq + request.events.length
            }))
          )
        )
      } else {
        const passed = new Set<string>()
        for (const request of group) {
          const rows = yield* query(ADVANCE_LENGTH, [
            request.firstSeq + request.events.length,
            request.id,
            request.firstSeq
          ])
          if (rows.length > 0) passed.add(request.id)
        }
        advanced = passed
      }
      const refusals = new Array<PersistenceError | undefined>(group.length)
      for (let i = 0; i < group.length; i++) {
        const request = group[i]!
        refusals[i] = advanced.has(request.id) ? undefined : yield* refusal(request)
      }
      return refusals
    })

  // A group's appends in one transaction: the length checks, then the rows of every append that passed.
  const appendTogether = (group: ReadonlyArray<AppendRequest>) =>
    inTransaction(Effect.gen(function*() {
      const refusals = yield* advance(group)
      const passed = group.filter((_, i) => refusals[i] === undefined)
      if (passed.length > 0) yield* dialect.insertRows(sql, passed)
      return refusals
    }))

  const settle = (request: AppendRequest, exit: Exit.Exit<void, PersistenceError | SqlError>) =>
    Deferred.done(request.done, Exit.mapError(exit, persistenceError(request.id, "append")))

  // After a storage failure, a group of several is written again with each append apart.
  const appendGroup = (group: ReadonlyArray<AppendRequest>): Effect.Effect<void> =>
    Effect.flatMap(Effect.exit(appendTogether(group)), (exit) => {
      if (Exit.isSuccess(exit)) {
        return Effect.forEach(group, (request, i) => {
          const refused = exit.value[i]
          return settle(request, refused === undefined ? Exit.void : Exit.fail(refused))
        }, { discard: true })
      }
      if (group.length === 1) return settle(group[0]!, exit)
      return Effect.forEach(
        group,
        (request) =>
          Effect.flatMap(Effect.exit(appendTogether([request])), (alone) =>
            settle(
              request,
              Exit.isSuccess(alone)
                ? (alone.value[0] === undefined ? Exit.void : Exit.fail(alone.value[0]))
                : alone
            )),
        { discard: true }
      )
    })

  // Group commit across sessions: appends queue here; the first to arrive while none is being
  // written leads and writes every queued append (one transaction) until the queue is empty.
  const queued: Array<AppendRequest> = []
  let leading = false
  const lead: Effect.Effect<void> = Effect.uninterruptible(Effect.gen(function*() {
    // Let the writers of other sessions woken at the same moment queue their appends first.
    yield* Effect.yieldNow()
    while (queued.length > 0) yield* appendGroup(queued.splice(0, queued.length))
  })).pipe(
    Effect.onExit((exit) =>
      Effect.suspend(() => {
        leading = false
        // Normally the queue is empty here; after a defect, whatever is still queued fails with it.
        if (Exit.isSuccess(exit)) return Effect.void
        const failure = new PersistenceError({
          sessionId: ALL_SESSIONS,
          operation: "append",
          cause: Cause.pretty(exit.cause)
        })
        return Effect.forEach(queued.splice(0, queued.length), (request) => Deferred.fail(request.done, failure))
      })
    )
  )

  // Untraced: the session writer calls it for every batch.
  const append = (
    id: SessionId,
    events: readonly [SessionEvent, ...Array<SessionEvent>]
  ): Effect.Effect<void, PersistenceError> =>
    Effect.suspend(() => {
      const fail = (cause: unknown) => Effect.fail(new PersistenceError({ sessionId: id, operation: "append", cause }))
      if (events.length === 0) return fail("an append needs at least one event")
      const firstSeq = events[0].seq
      const problem = seqProblem(events, firstSeq)
      if (problem !== undefined) return fail(problem)
      const rows = encodeRows(events)
      if (Either.isLeft(rows)) return fail(rows.left)
      const done = Deferred.unsafeMake<void, PersistenceError>(FiberId.none)
      queued.push({ id, firstSeq, events, rows: rows.right, done })
      if (leading) return Deferred.await(done)
      leading = true
      return Effect.zipRight(lead, Deferred.await(done))
    })

  const load = Effect.fn("SessionStore.load")(function*(id: SessionId) {
    const [session] = yield* query(SELECT_SESSION, [id]).pipe(Effect.mapError(persistenceError(id, "load")))
    if (session === undefined) return yield* new SessionNotFound({ sessionId: id })
    const header = yield* headerOf(id, session.header)
    const length = Number(session.length)
    // Rows below the length read first: appends committed meanwhile only add rows above it.
    const rows = yield* query(SELECT_EVENTS, [id, length]).pipe(Effect.mapError(persistenceError(id, "load")))
    const events = yield* eventsOf(
      id,
      rows as unknown as ReadonlyArray<{ readonly seq: number; readonly row: unknown }>
    )
    if (events.length !== length) {
      return yield* new MalformedLog({
        sessionId: id,
        seq: events.length,
        reason: `the session records ${length} events but ${events.length} rows are stored`
      })
    }
    return { header, events: events as ReadonlyArray<SessionEvent> }
  })

  const exists = Effect.fn("SessionStore.exists")(function*(id: SessionId) {
    const rows = yield* query(SELECT_EXISTS, [id]).pipe(Effect.mapError(persistenceError(id, "exists")))
    return rows.length > 0
  })

  const list = Effect.gen(function*() {
    const rows = yield* query(SELECT_HEADERS, [])
    const headers = new Array<SessionHeader>(rows.length)
    for (let i = 0; i < rows.length; i++) {
      const row = rows[i]!
      // Listed as stored, whatever their format version: only `load` refuses a version.
      const decoded = Either.flatMap(parseJson(row.header), decodeHeader)
      if (Either.isLeft(decoded)) {
        return yield* new MalformedLog({ sessionId: String(row.id), reason: `header: ${decoded.left}` })
      }
      headers[i] = decoded.right
    }
    return headers as ReadonlyArray<SessionHeader>
  }).pipe(
    Effect.mapError((error) =>
      error instanceof MalformedLog
        ? new PersistenceError({ sessionId: ALL_SESSIONS, operation: "list", cause: error })
        : persistenceError(ALL_SESSIONS, "list")(error)
    ),
    Effect.withSpan("SessionStore.list")
  )

  return { create, load, append, exists, list, localLease: makeLocalLease(), ...extra }
}
