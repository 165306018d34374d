/**
 * The database as the read-only commands (`sessions`, `log`, `check`) see it: opened read-only
 * (a SQLite file, or a PostgreSQL database given by its URL), never created, never migrated, and read row by row, so that one damaged row costs only what
 * follows it (the events before it are still shown, the other sessions still listed).
 *
 * @since 0.1.0
 */
import * as SqlClient from "@effect/sql/SqlClient"
import Sqlite from "better-sqlite3"
import type { Scope } from "effect"
import { Context, Effect, Either, Layer, Redacted } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import type { PendingApproval } from "../domain/Approvals.js"
import { foldApprovals } from "../domain/Approvals.js"
import { MalformedLog } from "../domain/Errors.js"
import type { UnsupportedLogVersion } from "../domain/Errors.js"
import type { EventOf, SessionEvent, SessionHeader } from "../domain/Event.js"
import { SessionId } from "../domain/Ids.js"
import { decodeOwnedJson } from "../internal/durability/DecodedEvents.js"
import { SELECT_HOLDER } from "../internal/durability/PgLease.js"
import { alive } from "../internal/durability/SqliteLease.js"
import { PG_TABLES } from "../internal/durability/SqlSchema.js"
import { persistenceError } from "../internal/durability/SqlStore.js"
import { checkStoredHeader } from "../internal/durability/StoredHeader.js"
import { CliError } from "./CliError.js"
import * as Database from "./Database.js"

/**
 * A stored session read as far as it decodes: `events` is the prefix before `damage`, if any.
 *
 * @since 0.1.0
 * @category models
 */
export interface ReadSession {
  readonly header: SessionHeader
  readonly events: ReadonlyArray<SessionEvent>
  /** Why reading stopped before the end of the log (a bad row, a gap, a length mismatch). */
  readonly damage?: MalformedLog | UnsupportedLogVersion
}

/**
 * One line of `tiller sessions`: what the log says, or why it cannot be read.
 *
 * @since 0.1.0
 * @category models
 */
export interface Listed {
  readonly sessionId: SessionId
  readonly header?: SessionHeader
  readonly title: string | undefined
  readonly updatedAt: number
  readonly turns: number
  readonly events: number
  /**
   * idle, pending input (the inbox holds items), interrupted (the last turn was cancelled or left
   * open), awaiting approval (a tool call waits for `tiller approve` or an answer in the chat).
   */
  readonly status: "idle" | "pending input" | "interrupted" | "awaiting approval"
  /** The tool calls that wait for approval, oldest first. */
  readonly approvals: ReadonlyArray<PendingApproval>
  readonly damage?: MalformedLog | UnsupportedLogVersion
}

/**
 * A read-only view of one database file.
 *
 * @since 0.1.0
 * @category models
 */
export interface Reader {
  /** Whether the file exists (a missing file reads as an empty database and is not created). */
  readonly exists: boolean
  /** Every stored session, each summarised on its own: a damaged one is listed with its damage. */
  readonly list: Effect.Effect<ReadonlyArray<Listed>, CliError>
  /** The session's header and the events that decode; fails with `CliError` when it is not stored. */
  readonly load: (id: SessionId) => Effect.Effect<ReadSession, CliError>
  /** The other process that has the session open (its lease), if one does. */
  readonly holder: (id: SessionId) => Effect.Effect<Holder | undefined, CliError>
}

/**
 * A process that has a session open.
 *
 * @since 0.1.0
 * @category models
 */
export interface Holder {
  readonly pid: number
  readonly host: string
}

/**
 * How a holder is named in messages: `pid N` (and the host when it is another).
 *
 * @since 0.1.0
 * @category formatting
 */
export const describeHolder = (holder: Holder): string =>
  holder.host === os.hostname() ? `pid ${holder.pid}` : `pid ${holder.pid} on ${holder.host}`

interface Row {
  readonly seq: number
  readonly row: unknown
}

const decodeRows = (
  id: SessionId,
  rows: ReadonlyArray<Row>,
  length: number
): Pick<ReadSession, "events" | "damage"> => {
  const events: Array<SessionEvent> = []
  for (let seq = 0; seq < rows.length; seq++) {
    const { row, seq: stored } = rows[seq]!
    const fail = (reason: string) => ({ events, damage: new MalformedLog({ sessionId: id, seq, reason }) })
    if (stored !== seq) return fail(`no row is stored for seq ${seq} (next: ${stored})`)
    if (typeof row !== "string") return fail(`row is expected JSON text, found ${typeof row}`)
    const event = decodeOwnedJson(row)
    if (Either.isLeft(event)) {
      return fail(event.left._tag === "NotJson" ? `row is not JSON: ${event.left.message}` : event.left.reason)
    }
    if (event.right.seq !== seq) return fail(`the row stored at seq ${seq} has seq ${event.right.seq}`)
    events.push(event.right)
  }
  if (events.length !== length) {
    return {
      events,
      damage: new MalformedLog({
        sessionId: id,
        seq: events.length,
        reason: `the session records ${length} events but ${events.length} rows are stored`
      })
    }
  }
  return { events }
}

const headerOf = (id: SessionId, text: unknown): Either.Either<SessionHeader, MalformedLog | UnsupportedLogVersion> => {
  let parsed: unknown
  try {
    parsed = JSON.parse(String(text))
  } catch (cause) {
    return Either.left(
      new MalformedLog({
        sessionId: id,
        reason: `header is not JSON: ${cause instanceof Error ? cause.message : String(cause)}`
      })
    )
  }
  return checkStoredHeader(id, parsed)
}

/** The pending counts after the log's own part (from `seedLength`) and how the last turn stands. */
const statusOf = (header: SessionHeader, events: ReadonlyArray<SessionEvent>): Listed["status"] => {
  let pending = 0
  let open = false
  let aborted = false
  for (const event of events) {
    if (event.seq === header.seedLength && header.seedLength > 0) pending = 0
    if (event.type === "turn/start") open = true
    if (event.type === "turn/end") {
      open = false
      aborted = (event as EventOf<"turn/end">).data.reason.kind === "aborted"
    }
    if (event.type === "agent/inbox/spliced") {
      const data = (event as EventOf<"agent/inbox/spliced">).data
      pending += data.inserted.length - (data.removedCount ?? 0)
    }
  }
  return pending > 0 ? "pending input" : open || aborted ? "interrupted" : "idle"
}

const summary = (id: SessionId, read: ReadSession): Listed => {
  let turns = 0
  let title: string | undefined
  for (const event of read.events) {
    if (event.type === "turn/start") turns = (event as EventOf<"turn/start">).data.turn
    if (title === undefined && event.type === "user/message") {
      const block = (event as EventOf<"user/message">).data.content[0]
      if (block?.type === "text") title = block.text
    }
  }
  const last = read.events[read.events.length - 1]
  const approvals = foldApprovals(read.events).pending
  return {
    sessionId: id,
    header: read.header,
    title,
    updatedAt: last?.time ?? read.header.createdAt,
    turns,
    events: read.events.length,
    status: approvals.length > 0 ? "awaiting approval" : statusOf(read.header, read.events),
    approvals,
    ...(read.damage !== undefined ? { damage: read.damage } : {})
  }
}

const sqliteFailure = (db: string) => (cause: unknown) =>
  new CliError({ reason: `cannot read ${db}: ${cause instanceof Error ? cause.message : String(cause)}` })

/** The queries a reader runs, on SQLite or PostgreSQL. */
interface Queries {
  readonly session: (
    id: SessionId
  ) => Effect.Effect<{ readonly header: unknown; readonly length: number } | undefined, CliError>
  readonly sessions: Effect.Effect<
    ReadonlyArray<{ readonly id: string; readonly header: unknown; readonly length: number }>,
    CliError
  >
  readonly rows: (id: SessionId) => Effect.Effect<ReadonlyArray<Row>, CliError>
  readonly holder: (id: SessionId) => Effect.Effect<Holder | undefined, CliError>
}

/** A reader over `queries`. */
const readerOver = (queries: Queries): Reader => {
  const readSession = (id: SessionId, header: unknown, length: number) =>
    Effect.map(queries.rows(id), (rows): ReadSession => {
      const decoded = headerOf(id, header)
      if (Either.isLeft(decoded)) {
        const placeholder: SessionHeader = {
          formatVersion: 1,
          sessionId: id,
          createdAt: 0,
          seedLength: 0
        } as SessionHeader
        return { header: placeholder, events: [], damage: decoded.left }
      }
      return { header: decoded.right, ...decodeRows(id, rows, length) }
    })
  const load = (id: SessionId) =>
    Effect.gen(function*() {
      const session = yield* queries.session(id)
      if (session === undefined) return yield* new CliError({ reason: `no session ${id} in this database` })
      return yield* readSession(id, session.header, session.length)
    })
  const list = Effect.flatMap(queries.sessions, (rows) =>
    Effect.forEach(rows, (row) => {
      const id = SessionId.make(row.id)
      return Effect.map(readSession(id, row.header, row.length), (read) => summary(id, read))
    }))
  return { exists: true, list, load, holder: queries.holder }
}

const EMPTY: Reader = {
  exists: false,
  list: Effect.succeed([]),
  load: (id) => Effect.fail(new CliError({ reason: `no session ${id} in this database` })),
  holder: () => Effect.succeed(undefined)
}

/**
 * A PostgreSQL database read-only: only SELECTs, never a migration; a database without tiller's
 * tables reads as one without sessions. The holder of a session is the lease connection holding its
 * advisory lock, named `tiller <pid>@<host>`.
 */
const openPg = (db: string): Effect.Effect<Reader, CliError, Scope.Scope> =>
  Effect.gen(function*() {
    const failure = (cause: unknown) => {
      const error = persistenceError("*", "read")(cause)
      return new CliError({ reason: `cannot read ${Database.label(db)}: ${String(error.cause)}` })
    }
    const PgClient = yield* Effect.tryPromise({ try: () => import("@effect/sql-pg/PgClient"), catch: failure })
    const client = yield* Layer.build(
      PgClient.layer({ url: Redacted.make(db), maxConnections: 2, applicationName: "tiller (read-only)" })
    ).pipe(Effect.catchAllDefect(Effect.fail), Effect.mapError(failure))
    const sql = Context.get(client, SqlClient.SqlClient)
    const query = <A>(text: string, ...params: ReadonlyArray<unknown>) =>
      Effect.mapError(sql.unsafe<A & object>(text, params) as Effect.Effect<ReadonlyArray<A>, unknown>, failure)
    const [tables] = yield* query<{ readonly found: boolean }>(
      "SELECT to_regclass($1) IS NOT NULL AND to_regclass($2) IS NOT NULL AS found",
      PG_TABLES.sessions,
      PG_TABLES.events
    )
    if (tables?.found !== true) return EMPTY
    return readerOver({
      session: (id) =>
        Effect.map(
          query<{ readonly header: unknown; readonly length: number }>(
            `SELECT header, length FROM ${PG_TABLES.sessions} WHERE id = $1`,
            id
          ),
          (rows) => rows[0]
        ),
      sessions: query(`SELECT id, header, length FROM ${PG_TABLES.sessions} ORDER BY ${PG_TABLES.position}`),
      rows: (id) => query<Row>(`SELECT seq, row FROM ${PG_TABLES.events} WHERE session_id = $1 ORDER BY seq`, id),
      holder: (id) =>
        Effect.map(query<{ readonly holder: string }>(SELECT_HOLDER, id), (rows) => {
          const named = /^tiller (\d+)@(.*)$/.exec(rows[0]?.holder ?? "")
          if (rows.length === 0) return undefined
          if (named === null) return { pid: 0, host: "a process that is not named" }
          const holder = { pid: Number(named[1]), host: named[2]! }
          return holder.pid === process.pid && holder.host === os.hostname() ? undefined : holder
        })
    })
  })

/**
 * Opens `db` read-only for the current scope. A missing file is not created: it reads as a
 * database without sessions. A file that is not a tiller database is refused and left unchanged.
 *
 * @since 0.1.0
 * @category constructors
 */
export const open = (db: string): Effect.Effect<Reader, CliError, Scope.Scope> =>
  Effect.gen(function*() {
    if (Database.isPostgres(db)) return yield* openPg(db)
    if (db !== ":memory:" && !fs.existsSync(db)) return EMPTY
    const connection = yield* Effect.acquireRelease(
      Effect.try({
        try: () => new Sqlite(db, { readonly: true, fileMustExist: true, timeout: 5000 }),
        catch: sqliteFailure(db)
      }),
      (connection) => Effect.sync(() => connection.close())
    )
    const query = <A>(sql: string, ...params: ReadonlyArray<unknown>) =>
      Effect.try({ try: () => connection.prepare(sql).all(...params) as Array<A>, catch: sqliteFailure(db) })
    const tables = yield* query<{ readonly name: string }>(
      "SELECT name FROM sqlite_master WHERE type = 'table' AND name IN ('sessions', 'events')"
    )
    if (tables.length < 2) {
      return yield* new CliError({ reason: `${db} is not a tiller database (it has no sessions and events tables)` })
    }
    const holder = (id: SessionId) =>
      Effect.gen(function*() {
        const hasLeases = yield* query<{ readonly name: string }>(
          "SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'leases'"
        )
        if (hasLeases.length === 0) return undefined
        const [lease] = yield* query<Holder>("SELECT pid, host FROM leases WHERE session_id = ?", id)
        if (lease === undefined || (lease.host === os.hostname() && (lease.pid === process.pid || !alive(lease.pid)))) {
          return undefined
        }
        return lease
      })
    return readerOver({
      session: (id) =>
        Effect.map(
          query<{ readonly header: unknown; readonly length: number }>(
            "SELECT header, length FROM sessions WHERE id = ?",
            id
          ),
          (rows) => rows[0]
        ),
      sessions: query("SELECT id, header, length FROM sessions ORDER BY rowid"),
      rows: (id) => query<Row>("SELECT seq, row FROM events WHERE session_id = ? ORDER BY seq", id),
      holder
    })
  })
