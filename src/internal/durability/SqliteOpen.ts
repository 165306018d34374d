/**
 * Opening a SQLite store's database file (SPEC 6.1, 8.10): the file created with mode 0600, the
 * client's pragmas (busy timeout 0, `synchronous`, WAL with automatic checkpoints off) and the
 * schema's migrations, each step that meets another process's lock waiting for it between attempts
 * (`SqliteDirect.waitForLock`), never inside the driver. A connection left busy by a race of
 * processes opening a fresh file is closed and replaced by a new one.
 *
 * @since 0.1.0
 */
import * as SqliteClient from "@effect/sql-sqlite-node/SqliteClient"
import * as Migrator from "@effect/sql/Migrator"
import * as SqlClient from "@effect/sql/SqlClient"
import { Context, Duration, Effect, ExecutionStrategy, Exit, Layer, Scope } from "effect"
import * as fs from "node:fs"
import { PersistenceError } from "../../domain/Errors.js"
import * as SqliteDirect from "./SqliteDirect.js"
import { MIGRATION_COUNT, migrations, migrationsApplied } from "./SqliteSchema.js"

/**
 * What opening needs of the store's options.
 *
 * @since 0.1.0
 * @category models
 */
export interface OpenOptions {
  /** The database file (`":memory:"` for a private in-memory database). */
  readonly filename: string
  /** `PRAGMA synchronous`; default `"NORMAL"`. */
  readonly synchronous?: "OFF" | "NORMAL" | "FULL"
}

/**
 * The session id a store-wide failure (opening, `list`) carries.
 *
 * @since 0.1.0
 * @category constants
 */
export const ALL_SESSIONS = "*"

/**
 * The values of `PRAGMA synchronous`, by option.
 *
 * @since 0.1.0
 * @category constants
 */
export const SYNCHRONOUS = { OFF: "OFF", NORMAL: "NORMAL", FULL: "FULL" } as const

// How many times `open` waits for another process's migration and migrates again.
const MIGRATION_ATTEMPTS = 5

// Creates the database file with mode 0600 (the client would create it with the umask's mode); an
// existing file keeps its mode. SQLite gives the -wal and -shm files the database file's mode.
const createPrivateFile = (filename: string): Effect.Effect<void, PersistenceError> =>
  Effect.try({
    try: () => {
      if (filename === "" || filename === ":memory:") return
      let fd: number
      try {
        fd = fs.openSync(filename, "wx", 0o600)
      } catch (cause) {
        if ((cause as { readonly code?: unknown }).code === "EEXIST") return
        throw cause
      }
      try {
        fs.fchmodSync(fd, 0o600)
      } finally {
        fs.closeSync(fd)
      }
    },
    catch: (cause) => new PersistenceError({ sessionId: ALL_SESSIONS, operation: "open", cause })
  })

/**
 * Whether `filename` names a file (not a private in-memory database).
 *
 * @since 0.1.0
 * @category predicates
 */
export const isFile = (filename: string): boolean => filename !== "" && filename !== ":memory:"

/**
 * Opens the client in the current scope, sets the pragmas and runs the migrations. Each step that
 * may meet another process's lock (turning a fresh file to WAL, a migration) waits for it with
 * `wait`, never inside the driver: the client opens without touching the file (WAL is set here)
 * and its first statement sets SQLite's busy timeout to 0.
 */
const openOnce = (options: OpenOptions, wait: ReturnType<typeof SqliteDirect.waitForLock>) =>
  Effect.gen(function*() {
    yield* createPrivateFile(options.filename)
    const client = yield* Layer.build(SqliteClient.layer({ filename: options.filename, disableWAL: true }))
    const sql = Context.get(client, SqlClient.SqlClient)
    // Even a pragma may meet a lock: preparing it reads the schema, which another process turning
    // the file to WAL or migrating it holds for a moment.
    yield* wait(sql.unsafe("PRAGMA busy_timeout = 0"))
    yield* wait(sql.unsafe(`PRAGMA synchronous = ${SYNCHRONOUS[options.synchronous ?? "NORMAL"]}`))
    if (isFile(options.filename)) {
      const [mode] = yield* wait(sql<{ readonly journal_mode: string }>`PRAGMA journal_mode = WAL`)
      if (mode?.journal_mode !== "wal") {
        const cause = `could not enable WAL (journal_mode is ${mode?.journal_mode})`
        return yield* new PersistenceError({ sessionId: ALL_SESSIONS, operation: "open", cause })
      }
      // Checkpoints run on a worker thread instead (internal/durability/Checkpointer).
      yield* wait(sql.unsafe("PRAGMA wal_autocheckpoint = 0"))
    }
    // A migration that meets a lock dies inside the migrator: as a failure, it can wait and run again.
    const migrate = wait(
      Migrator.make({})({ loader: migrations, table: "tiller_migrations" }).pipe(
        Effect.provideService(SqlClient.SqlClient, sql),
        Effect.catchAllDefect(Effect.fail)
      )
    )
    yield* migrate
    // The migrator stands aside ("already running") when another process migrates the same fresh
    // file at the same moment, possibly before that migration committed: wait for the other
    // process's write lock to go, then migrate again, until every migration is recorded.
    for (let attempt = 1; (yield* wait(migrationsApplied(sql))) < MIGRATION_COUNT; attempt++) {
      if (attempt > MIGRATION_ATTEMPTS) {
        const cause = `the schema's migrations are still incomplete after ${MIGRATION_ATTEMPTS} attempts`
        return yield* new PersistenceError({ sessionId: ALL_SESSIONS, operation: "open", cause })
      }
      yield* wait(sql.unsafe("BEGIN IMMEDIATE"))
      yield* sql.unsafe("ROLLBACK")
      yield* migrate
    }
    return sql
  }).pipe(
    // The driver throws from its constructor (a missing directory, a file that is not a database)
    // and the migrator dies when a migration fails: while opening, every defect is a storage failure.
    Effect.catchAllDefect(Effect.fail)
  )

/** How long one connection waits for a lock while opening before a fresh connection tries. */
const OPEN_CONNECTION_WAIT = Duration.seconds(1)

/**
 * Opens the store's connection in the current scope (see `openOnce`). A connection that opened a fresh file while other
 * processes turned it to WAL and migrated it can stay busy after every other process is gone
 * (SQLite then answers `SQLITE_BUSY` to each of its statements while a new connection reads the
 * file at once): each connection waits a moment, then is closed and a new one tries, until
 * `busyTimeout` has passed.
 *
 * @since 0.1.0
 * @category constructors
 */
export const open = (
  options: OpenOptions,
  timeout: Duration.Duration
): Effect.Effect<SqlClient.SqlClient, PersistenceError, Scope.Scope> =>
  Effect.gen(function*() {
    const outer = yield* Effect.scope
    const attempt = Effect.flatMap(Scope.fork(outer, ExecutionStrategy.sequential), (scope) =>
      openOnce(options, SqliteDirect.waitForLock(options.filename, Duration.min(timeout, OPEN_CONNECTION_WAIT))).pipe(
        Scope.extend(scope),
        Effect.onExit((exit) =>
          Exit.isSuccess(exit) ? Effect.void : Scope.close(scope, exit)
        )
      ))
    return yield* SqliteDirect.waitForLock(options.filename, timeout)(attempt)
  }).pipe(Effect.mapError(SqliteDirect.persistenceError(ALL_SESSIONS, "open")))
