/**
 * The SQLite session store (SPEC 6.1, 8.10) over `@effect/sql-sqlite-node`.
 *
 * One database file holds every session: `sessions` has one row per session (its header as JSON,
 * the caller's `createdAt` and the stored log length) and `events` one row per logical event,
 * keyed `(session_id, seq)`. The layer creates the file with mode 0600, turns on WAL and runs its
 * own migrations (internal/durability/SqliteOpen); a `leases` row names the process holding a
 * session (internal/durability/SqliteLease). `create` is one `BEGIN IMMEDIATE` transaction; an `append` advances
 * `sessions.length` only if it still equals `events[0].seq` (the optimistic check against a second
 * writer) and inserts the rows with a few cached multi-row INSERTs, in a `BEGIN IMMEDIATE`
 * transaction that appends of other sessions arriving at the same time share (group commit: their
 * rows share the INSERTs; after a storage failure the group is written again with each append in a
 * savepoint of its own, so the failure reaches only the appends it concerns). A file store also
 * keeps a second connection that better-sqlite3 serves directly (internal/durability/SqliteDirect): `load`
 * reads a session there as row text and decodes every row with the `SessionEvent` schema (when
 * anything is wrong it reads again on the client's connection with each row's seq, and a row that
 * does not decode is `MalformedLog` with its seq); and a session that needs durability while no
 * transaction of the client's is open appends there at once, in one synchronous transaction
 * (internal/durability/SyncAppend: the loop's checkpoints, opening and flush; acknowledgements keep group commit).
 * Every `SqlError` (and every driver defect while opening) surfaces as `PersistenceError`, its
 * message led by the SQLite code (`SQLITE_FULL: database or disk is full`); store-wide failures
 * (opening, `list`) carry the session id `"*"`.
 *
 * Another process's lock never blocks the event loop: every connection runs with SQLite's busy
 * timeout at 0, and an operation that meets a lock (opening a fresh file, a migration, a
 * transaction, the lease) is run again after `Clock` sleeps until it gets it or `busyTimeout`
 * (default 10 s) has passed; then it fails with `PersistenceError` saying `database is locked by
 * another process` and naming the file (internal/durability/SqliteDirect `waitForLock`). Reads never wait: in
 * WAL mode a writer does not lock readers out.
 *
 * @since 0.1.0
 */
import type { Connection } from "@effect/sql/SqlConnection"
import type { SqlError } from "@effect/sql/SqlError"
import type { Scope } from "effect"
import { Cause, Duration, Effect, Either, Exit, Layer, Option, Schema } from "effect"
import { MalformedLog, PersistenceError, SessionExists, SessionNotFound } from "../domain/Errors.js"
import { ApprovalAnswerData, SessionEvent, SessionHeader } from "../domain/Event.js"
import { SessionId } from "../domain/Ids.js"
import * as Checkpointer from "../internal/durability/Checkpointer.js"
import { seqProblem } from "../internal/durability/Contiguity.js"
import { makeLocalLease } from "../internal/durability/LocalLease.js"
import * as SqliteDirect from "../internal/durability/SqliteDirect.js"
import {
  insertChunks,
  insertEventsSql,
  MAX_ROWS_PER_INSERT,
  SELECT_SESSION
} from "../internal/durability/SqliteDirect.js"
import * as SqliteLease from "../internal/durability/SqliteLease.js"
import { ALL_SESSIONS, isFile, open, SYNCHRONOUS } from "../internal/durability/SqliteOpen.js"
import { encodeRows, eventsOf, eventsOfText, headerOf, parseJson, rowBytes } from "../internal/durability/SqliteRows.js"
import type { ApprovalMailbox } from "../internal/durability/Store.js"
import { decodeHeader } from "../internal/durability/StoredHeader.js"
import type { SyncAppend } from "../internal/durability/SyncAppend.js"
import { SessionStore } from "../services/SessionStore.js"

/**
 * Options of `SqliteSessionStore.layer`.
 *
 * @since 0.1.0
 * @category models
 */
export interface SqliteSessionStoreOptions {
  /** The database file; created with mode 0600 when missing (`":memory:"` for a private in-memory store). */
  readonly filename: string
  /** `PRAGMA synchronous`; default `"NORMAL"` (durable across process crashes, not power loss, in WAL). */
  readonly synchronous?: "OFF" | "NORMAL" | "FULL"
  /**
   * How long an operation waits for a lock another process (or connection) holds on the file,
   * without blocking the event loop; default 10 seconds. Past it the operation fails with
   * `PersistenceError` (`database is locked by another process`). A session's writer retries a
   * failed append per its `writeRetry`, each attempt waiting this long again.
   */
  readonly busyTimeout?: Duration.DurationInput
}

const DEFAULT_BUSY_TIMEOUT = Duration.seconds(10)

// The option as a duration; one that is not a duration or negative waits not at all.
const busyTimeoutOf = (options: SqliteSessionStoreOptions): Duration.Duration => {
  if (options.busyTimeout === undefined) return DEFAULT_BUSY_TIMEOUT
  const decoded = Duration.decodeUnknown(options.busyTimeout)
  return decoded._tag === "Some" ? decoded.value : Duration.zero
}

/** `PersistenceError.refail` for SQLite: the SQLite code leads the message. */
const refail = (sessionId: string, operation: string) => <A, E, R>(self: Effect.Effect<A, E, R>) =>
  Effect.mapError(self, SqliteDirect.persistenceError(sessionId, operation))

const INSERT_SESSION = "INSERT INTO sessions (id, header, created_at, length) VALUES (?, ?, ?, ?) " +
  "ON CONFLICT (id) DO NOTHING RETURNING id"
const ADVANCE_LENGTH = "UPDATE sessions SET length = ? WHERE id = ? AND length = ? RETURNING length"
// Several sessions' length checks in one statement: a JSON array of [id, from, to]; returns the ids advanced.
const ADVANCE_LENGTHS = "UPDATE sessions SET length = j.value ->> 2 FROM json_each(?) AS j " +
  "WHERE sessions.id = j.value ->> 0 AND sessions.length = j.value ->> 1 RETURNING sessions.id AS id"
// A lone surrogate is stored as its UTF-8-like bytes but read back as U+FFFD: such an id would not
// be recognised among the returned ones.
const LONE_SURROGATE = /\p{Surrogate}/u
const SELECT_LENGTH = "SELECT length FROM sessions WHERE id = ?"
const SELECT_EVENTS = "SELECT seq, row FROM events WHERE session_id = ? ORDER BY seq"
const SELECT_EXISTS = "SELECT 1 AS found FROM sessions WHERE id = ?"
// rowid order is insertion order: sessions are never deleted.
const SELECT_HEADERS = "SELECT id, header FROM sessions ORDER BY rowid"
const POST_ANSWER = "INSERT OR REPLACE INTO approval_answers (session_id, call_id, answer) VALUES (?, ?, ?)"
const TAKE_ANSWERS = "DELETE FROM approval_answers WHERE session_id = ? RETURNING rowid, answer"
const decodeAnswer = Schema.decodeEither(Schema.parseJson(ApprovalAnswerData))

// The nine INSERT texts (internal/durability/SqliteDirect), few enough to stay in the client's prepared-statement cache.
const INSERT_EVENTS: ReadonlyMap<number, string> = new Map(
  Array.from({ length: Math.log2(MAX_ROWS_PER_INSERT) + 1 }, (_, k) => [1 << k, insertEventsSql(1 << k)] as const)
)

// How many times a group-commit leader yields, at most, to let other sessions' appends join its group.
const MAX_GATHER_YIELDS = 4

/** One queued append: a session's events, their row JSON, and where its outcome goes. */
interface AppendRequest {
  readonly id: SessionId
  readonly firstSeq: number
  readonly events: ReadonlyArray<SessionEvent>
  readonly rows: ReadonlyArray<string>
  readonly done: (exit: Exit.Exit<void, PersistenceError | SqlError>) => void
}

/** Inserts rows given as flat `(session_id, seq, row)` parameter triples with as few multi-row INSERTs as the chunk sizes allow. */
const insertTriples = (conn: Connection, triples: ReadonlyArray<unknown>) =>
  Effect.suspend(() => {
    const rows = triples.length / 3
    const statements: Array<Effect.Effect<unknown, SqlError>> = []
    for (const { offset, size } of insertChunks(rows)) {
      const params = rows === size ? triples : triples.slice(3 * offset, 3 * (offset + size))
      statements.push(conn.execute(INSERT_EVENTS.get(size)!, params, undefined))
    }
    return statements.length === 1 ? statements[0]! : Effect.all(statements, { discard: true })
  })

/** Appends the `(session_id, seq, row)` triples of `rows` (the events of `id` from seq `firstSeq` on) to `triples`. */
const pushTriples = (triples: Array<unknown>, id: SessionId, firstSeq: number, rows: ReadonlyArray<string>): void => {
  for (let i = 0; i < rows.length; i++) triples.push(id, firstSeq + i, rows[i])
}

/** Inserts `rows` (the events of `id` from seq `firstSeq` on). */
const insertEvents = (conn: Connection, id: SessionId, firstSeq: number, rows: ReadonlyArray<string>) =>
  Effect.suspend(() => {
    const triples: Array<unknown> = []
    pushTriples(triples, id, firstSeq, rows)
    return insertTriples(conn, triples)
  })

/**
 * Builds the SQLite store in the current scope (the database closes with the scope).
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (
  options: SqliteSessionStoreOptions
): Effect.Effect<SessionStore["Type"], PersistenceError, Scope.Scope> =>
  Effect.gen(function*() {
    // Waits for another process's lock between attempts, never inside the driver (internal/durability/SqliteDirect).
    const wait = SqliteDirect.waitForLock(options.filename, busyTimeoutOf(options))
    const sql = yield* open(options, busyTimeoutOf(options))
    // The client is private to this store and has one connection: reserve it for the store's
    // lifetime and serialise its use with `lock`, so a transaction is not a scope per call and
    // no statement can run between another transaction's BEGIN and COMMIT.
    const conn = yield* sql.reserve.pipe(refail(ALL_SESSIONS, "open"))
    const lock = yield* Effect.makeSemaphore(1)

    // A lock wait sleeps without holding `lock`: the store's other work goes on meanwhile.
    const query = (text: string, params: ReadonlyArray<unknown>) =>
      wait(lock.withPermits(1)(conn.execute(text, params, undefined)))

    // Without a working checkpointer, SQLite's own automatic checkpoint (its default) comes back.
    const checkpointer = isFile(options.filename)
      ? yield* Checkpointer.make(options.filename, Effect.ignore(query("PRAGMA wal_autocheckpoint = 1000", [])))
      : undefined

    // Transactions open on the client's connection (the direct connection writes only while none is).
    let openTransactions = 0

    // A failed statement may already have ended the transaction; then ROLLBACK fails, harmlessly.
    const rollback = Effect.ignore(conn.execute("ROLLBACK", [], undefined))

    /**
     * Runs `body` in one transaction. Unlike `sql.withTransaction`, a failed COMMIT is a typed
     * failure (rolled back), not a defect. `body` uses `conn` directly (it holds the lock). A
     * transaction that meets another process's lock (at BEGIN IMMEDIATE, or later) is rolled back
     * and run again once it is gone, for `busyTimeout` at most (`body` must be safe to run again).
     */
    const transaction = <A, E>(begin: "BEGIN" | "BEGIN IMMEDIATE", body: Effect.Effect<A, E>) =>
      wait(
        lock.withPermits(1)(Effect.uninterruptibleMask((restore) =>
          Effect.suspend(() => {
            openTransactions++
            return Effect.zipRight(conn.execute(begin, [], undefined), Effect.exit(restore(body)))
          }).pipe(
            Effect.flatMap((exit): Effect.Effect<A, E | SqlError> =>
              Exit.isSuccess(exit)
                ? Effect.as(Effect.tapError(conn.execute("COMMIT", [], undefined), () => rollback), exit.value)
                : Effect.zipRight(rollback, exit)
            ),
            Effect.ensuring(Effect.sync(() => openTransactions--))
          )
        ))
      )

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
      yield* transaction(
        "BEGIN IMMEDIATE",
        Effect.gen(function*() {
          const inserted = yield* conn.execute(
            INSERT_SESSION,
            [sessionId, headerJson, header.createdAt, events.length],
            undefined
          )
          if (inserted.length === 0) return yield* new SessionExists({ sessionId })
          yield* insertEvents(conn, sessionId, 0, rows.right)
        })
      ).pipe(
        Effect.catchTag("SqlError", (error) => Effect.fail(SqliteDirect.persistenceError(sessionId, "create")(error)))
      )
      checkpointer?.wrote(rowBytes(rows.right) + headerJson.length)
    })

    // Why an append's length check was refused: the session is gone or its stored length moved.
    const refusal = (request: AppendRequest): Effect.Effect<PersistenceError, SqlError> =>
      Effect.map(conn.execute(SELECT_LENGTH, [request.id], undefined), ([stored]) =>
        new PersistenceError({
          sessionId: request.id,
          operation: "append",
          cause: stored === undefined
            ? new SessionNotFound({ sessionId: request.id })
            : seqProblem(request.events, (stored as { readonly length: number }).length) ?? "the stored length changed"
        }))

    // Advances a session's stored length if it still equals the append's first seq (the optimistic
    // check against a second writer); a refusal is the returned error, with nothing written.
    const advance = (request: AppendRequest): Effect.Effect<PersistenceError | void, SqlError> =>
      Effect.flatMap(
        conn.execute(
          ADVANCE_LENGTH,
          [request.firstSeq + request.events.length, request.id, request.firstSeq],
          undefined
        ),
        (advanced) => advanced.length > 0 ? Effect.void : refusal(request)
      )

    // `advance` for each append of a group of distinct sessions, in one statement; the refusals by index.
    const advanceAll = (
      group: ReadonlyArray<AppendRequest>
    ): Effect.Effect<Array<PersistenceError | undefined>, SqlError> =>
      Effect.flatMap(
        conn.execute(
          ADVANCE_LENGTHS,
          [JSON.stringify(
            group.map((request) => [request.id, request.firstSeq, request.firstSeq + request.events.length])
          )],
          undefined
        ),
        (advanced) => {
          const ids = new Set(advanced.map((row) => (row as { readonly id: string }).id))
          return Effect.forEach(group, (request) => ids.has(request.id) ? Effect.succeed(undefined) : refusal(request))
        }
      )

    // One session's append inside a transaction: its length check, then its rows.
    const appendRows = (request: AppendRequest): Effect.Effect<void, PersistenceError | SqlError> =>
      Effect.flatMap(
        advance(request),
        (refused): Effect.Effect<unknown, PersistenceError | SqlError> =>
          refused === undefined ? insertEvents(conn, request.id, request.firstSeq, request.rows) : Effect.fail(refused)
      )

    // The usual case: every length check (one statement when the sessions are distinct, as the
    // writers' one append at a time makes them, and their ids read back as written), then the rows
    // of every session that passed in shared multi-row INSERTs, without savepoints. A refused check
    // wrote nothing. Any SqlError fails the whole body (the caller rolls back and retries the group
    // apart).
    const appendTogether = (group: ReadonlyArray<AppendRequest>) =>
      Effect.gen(function*() {
        const results = new Array<Exit.Exit<void, PersistenceError>>(group.length)
        const triples: Array<unknown> = []
        const together = group.length > 1 && new Set(group.map((request) => request.id)).size === group.length &&
          !group.some((request) => LONE_SURROGATE.test(request.id))
        const refusals = together ? yield* advanceAll(group) : undefined
        for (let i = 0; i < group.length; i++) {
          const request = group[i]!
          const refused = refusals === undefined ? yield* advance(request) : refusals[i]
          if (refused === undefined) pushTriples(triples, request.id, request.firstSeq, request.rows)
          results[i] = refused === undefined ? Exit.void : Exit.fail(refused)
        }
        if (triples.length > 0) yield* insertTriples(conn, triples)
        return results
      })

    // Several sessions' appends in one transaction, each in a savepoint of its own, so one
    // session's failure leaves the others' rows in place. A failed COMMIT fails them all.
    const appendApart = (group: ReadonlyArray<AppendRequest>): Effect.Effect<void> => {
      const results = new Array<Exit.Exit<void, PersistenceError | SqlError>>(group.length)
      const body = Effect.forEach(group, (request, i) =>
        Effect.flatMap(
          Effect.zipRight(conn.execute("SAVEPOINT tiller_append", [], undefined), Effect.exit(appendRows(request))),
          (exit) => {
            results[i] = exit
            return Exit.isSuccess(exit)
              ? conn.execute("RELEASE tiller_append", [], undefined)
              : Effect.zipRight(
                conn.execute("ROLLBACK TO tiller_append", [], undefined),
                conn.execute("RELEASE tiller_append", [], undefined)
              )
          }
        ), { discard: true })
      return Effect.map(Effect.exit(transaction("BEGIN IMMEDIATE", body)), (committed) => {
        group.forEach((request, i) =>
          request.done(Exit.isFailure(committed) ? committed : results[i] ?? Exit.die("append not run"))
        )
      })
    }

    // A group's appends in one transaction: together first; after a storage failure (a statement or
    // the COMMIT; everything was rolled back) a group of several is written again apart, so the
    // failure reaches only the appends it concerns. One append alone gets its own outcome, and so
    // does every append of a group that waited for another process's lock until `busyTimeout`.
    const appendGroup = (group: ReadonlyArray<AppendRequest>): Effect.Effect<void> =>
      Effect.flatMap(Effect.exit(transaction("BEGIN IMMEDIATE", appendTogether(group))), (exit) => {
        if (Exit.isSuccess(exit)) {
          for (let i = 0; i < group.length; i++) group[i]!.done(exit.value[i]!)
          return Effect.void
        }
        if (
          group.length > 1 && !Option.exists(Cause.failureOption(exit.cause), SqliteDirect.isBusy)
        ) return appendApart(group)
        group[0]!.done(exit)
        return Effect.void
      })

    // Group commit across sessions: appends queue here; the first to arrive while none is being
    // written leads, writes every queued append (one transaction) and repeats until the queue is
    // empty. Before taking the queue it yields (a few times at most) until as many sessions have
    // queued as appended in the last two groups, so the writers of sessions busy together share
    // a transaction instead of splitting into a first append alone and the rest behind it.
    const queued: Array<AppendRequest> = []
    let leading = false
    // The sessions of the last two groups: how many appends a leader may expect to gather.
    let lastIds: ReadonlyArray<SessionId> = []
    let recent = 0
    const lead = (): Effect.Effect<void> =>
      Effect.uninterruptible(Effect.gen(function*() {
        // Each yield lets every fiber that is ready run once; a session writer woken meanwhile
        // appends on its next turn. With nobody else ready, a yield costs next to nothing.
        // Without a history yet (the store's first appends), it waits for a second session.
        const expected = recent === 0 ? 2 : recent
        for (let i = 0; i < MAX_GATHER_YIELDS && queued.length < expected; i++) yield* Effect.yieldNow()
        while (queued.length > 0) {
          const group = queued.splice(0, queued.length)
          const ids = group.map((request) => request.id)
          recent = new Set([...ids, ...lastIds]).size
          lastIds = ids
          yield* appendGroup(group)
          if (checkpointer !== undefined) {
            let bytes = 0
            for (const request of group) bytes += rowBytes(request.rows)
            checkpointer.wrote(bytes)
          }
        }
      })).pipe(
        // Normally the queue is empty here; after a defect, whatever is still queued fails with it.
        Effect.onExit((exit) =>
          Effect.sync(() => {
            leading = false
            if (Exit.isFailure(exit)) { for (const request of queued.splice(0, queued.length)) request.done(exit) }
          })
        )
      )

    // Untraced: the session writer calls it for every batch.
    const append = (
      id: SessionId,
      events: readonly [SessionEvent, ...Array<SessionEvent>]
    ): Effect.Effect<void, PersistenceError> =>
      Effect.suspend(() => {
        const fail = (cause: unknown) =>
          Effect.fail(new PersistenceError({ sessionId: id, operation: "append", cause }))
        if (events.length === 0) return fail("an append needs at least one event")
        const firstSeq = events[0].seq
        const problem = seqProblem(events, firstSeq)
        if (problem !== undefined) return fail(problem)
        const rows = encodeRows(events)
        if (Either.isLeft(rows)) return fail(rows.left)
        let result: Exit.Exit<void, PersistenceError | SqlError> | undefined
        let resume: ((exit: Exit.Exit<void, PersistenceError | SqlError>) => void) | undefined
        queued.push({
          id,
          firstSeq,
          events,
          rows: rows.right,
          done: (exit) => {
            result = exit
            resume?.(exit)
          }
        })
        const settled = Effect.async<void, PersistenceError | SqlError>((callback) => {
          if (result !== undefined) return callback(result)
          resume = callback
          // A caller that stops waiting: its append is still written (it may already be).
          return Effect.sync(() => {
            resume = undefined
          })
        })
        if (leading) return refail(id, "append")(settled)
        leading = true
        return refail(id, "append")(Effect.zipRight(lead(), settled))
      })

    // A file's sessions are read, and appended at once, on a connection of their own (internal/durability/SqliteDirect).
    const direct = isFile(options.filename)
      ? yield* wait(SqliteDirect.make(options.filename, SYNCHRONOUS[options.synchronous ?? "NORMAL"])).pipe(
        refail(ALL_SESSIONS, "open")
      )
      : undefined

    // The session read as row text, when every check passes; undefined sends `load` to the checked
    // read below, which names the exact problem (a gap, a stray seq, a bad header, a missing session)
    // and waits for a lock if the direct read met one.
    const loadText = (id: SessionId) =>
      Effect.try({
        try: () => direct?.read(id),
        catch: SqliteDirect.persistenceError(id, "load")
      }).pipe(
        Effect.catchIf((error) => SqliteDirect.isBusy(error.cause), () => Effect.succeed(undefined)),
        Effect.map((stored) => {
          if (stored === undefined || stored.rows.length !== stored.length) return undefined
          const header = headerOf(id, stored.header)
          if (Either.isLeft(header)) return undefined
          const events = eventsOfText(id, stored.rows)
          return events === undefined ? undefined : { header: header.right, events }
        })
      )

    const load = Effect.fn("SessionStore.load")(function*(id: SessionId) {
      if (direct !== undefined) {
        const loaded = yield* loadText(id)
        if (loaded !== undefined) return loaded
      }
      // One read transaction: the header, the length and the rows are one snapshot.
      const stored = yield* transaction(
        "BEGIN",
        Effect.gen(function*() {
          const [session] = yield* conn.execute(SELECT_SESSION, [id], undefined)
          if (session === undefined) return undefined
          const rows = yield* conn.execute(SELECT_EVENTS, [id], undefined)
          return {
            header: (session as { readonly header: unknown }).header,
            length: (session as { readonly length: number }).length,
            rows: rows as ReadonlyArray<{ readonly seq: number; readonly row: unknown }>
          }
        })
      ).pipe(refail(id, "load"))
      if (stored === undefined) return yield* new SessionNotFound({ sessionId: id })
      const header = yield* headerOf(id, stored.header)
      const events = yield* eventsOf(id, stored.rows)
      if (events.length !== stored.length) {
        return yield* new MalformedLog({
          sessionId: id,
          seq: events.length,
          reason: `the session records ${stored.length} events but ${events.length} rows are stored`
        })
      }
      return { header, events }
    })

    const exists = Effect.fn("SessionStore.exists")(function*(id: SessionId) {
      const rows = yield* query(SELECT_EXISTS, [id]).pipe(refail(id, "exists"))
      return rows.length > 0
    })

    const list = Effect.gen(function*() {
      const rows: ReadonlyArray<{ readonly id: SessionId; readonly header: unknown }> = yield* query(SELECT_HEADERS, [])
      const headers = new Array<SessionHeader>(rows.length)
      for (let i = 0; i < rows.length; i++) {
        const { header, id } = rows[i]!
        // Listed as stored, whatever their format version: only `load` refuses a version.
        const decoded = Either.flatMap(parseJson(header), decodeHeader)
        if (Either.isLeft(decoded)) return yield* new MalformedLog({ sessionId: id, reason: `header: ${decoded.left}` })
        headers[i] = decoded.right
      }
      return headers as ReadonlyArray<SessionHeader>
    }).pipe(refail(ALL_SESSIONS, "list"), Effect.withSpan("SessionStore.list"))

    // An append at once on the direct connection, while no transaction of the client's is open and no
    // group is being written; anything else (a refused length check, a failure) writes nothing and is
    // left to `append`, which reports it. Acknowledgements still go through group commit: a
    // transaction's fixed cost is worth sharing among concurrent callers.
    const appendNow: SyncAppend | undefined = direct === undefined ? undefined : {
      append: (id, events) => {
        if (openTransactions > 0 || leading || events.length === 0) return false
        if (seqProblem(events, events[0]!.seq) !== undefined) return false
        const rows = encodeRows(events)
        if (Either.isLeft(rows)) return false
        try {
          if (!direct.append(id, events[0]!.seq, rows.right)) return false
        } catch {
          return false
        }
        checkpointer?.wrote(rowBytes(rows.right))
        return true
      },
      acknowledgements: false
    }
    // Approval answers from other processes: one row per (session, call); taking deletes them.
    const approvalMailbox: ApprovalMailbox = {
      post: (id, answer) =>
        query(POST_ANSWER, [id, answer.callId, JSON.stringify(answer)]).pipe(
          Effect.asVoid,
          refail(id, "approve"),
          Effect.withSpan("SessionStore.approvalMailbox.post")
        ),
      take: (id) =>
        query(TAKE_ANSWERS, [id]).pipe(
          Effect.map((rows) =>
            (rows as ReadonlyArray<{ readonly answer: string; readonly rowid: number }>).slice()
              .sort((a, b) => a.rowid - b.rowid)
              .flatMap((row) => {
                const decoded = decodeAnswer(row.answer)
                return Either.isRight(decoded) ? [decoded.right] : []
              })
          ),
          refail(id, "approvals")
        )
    }
    const store: SessionStore["Type"] = {
      create,
      load,
      append,
      exists,
      list,
      localLease: makeLocalLease(),
      approvalMailbox,
      processLease: SqliteLease.make({ conn, query, transaction }),
      ...(appendNow === undefined ? {} : { appendNow })
    }
    return store
  })

/**
 * The SQLite session store: durable sessions in one database file (SPEC 6.1, 8.10).
 *
 * @since 0.1.0
 * @category layers
 */
export const SqliteSessionStore: {
  /** A store over `options.filename`, open for the layer's lifetime. */
  readonly layer: (options: SqliteSessionStoreOptions) => Layer.Layer<SessionStore, PersistenceError>
} = {
  layer: (options) => Layer.scoped(SessionStore, make(options))
}
