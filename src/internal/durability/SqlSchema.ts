/**
 * The schema of the SQL session store (internal/durability/SqlStore) on each dialect, as numbered
 * migrations that `@effect/sql`'s `Migrator` applies once per database, and the table names the
 * store's statements use.
 *
 * On PostgreSQL the tables are `tiller_sessions` and `tiller_events` (a shared database may already
 * hold a `sessions` table); a session's row keeps its header as JSON text, the caller's `createdAt`,
 * the stored log length and an identity `position` (creation order); an event row is its JSON text
 * keyed `(session_id, seq)`. The migrations run while an advisory lock is held, so processes
 * opening a fresh database at the same moment migrate it once.
 *
 * @since 0.1.0
 */
import * as Migrator from "@effect/sql/Migrator"
import * as SqlClient from "@effect/sql/SqlClient"
import type { SqlError } from "@effect/sql/SqlError"
import { Effect } from "effect"

/**
 * The table names of one dialect.
 *
 * @since 0.1.0
 * @category models
 */
export interface Tables {
  readonly sessions: string
  readonly events: string
  /** The column giving creation order. */
  readonly position: string
}

/**
 * PostgreSQL's tables.
 *
 * @since 0.1.0
 * @category constants
 */
export const PG_TABLES: Tables = { sessions: "tiller_sessions", events: "tiller_events", position: "position" }

/**
 * The table recording applied migrations.
 *
 * @since 0.1.0
 * @category constants
 */
export const MIGRATIONS_TABLE = "tiller_migrations"

// Text, not jsonb: the row is read back byte for byte as it was written (jsonb would reorder keys,
// drop duplicates and renormalise numbers, and cost a parse on insert and a print on read), and the
// same decoder as SQLite's checks it.
const PG_MIGRATIONS = {
  "1_sessions_and_events": Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    yield* sql.unsafe(`
      CREATE TABLE tiller_sessions (
        id text PRIMARY KEY,
        header text NOT NULL,
        created_at bigint NOT NULL,
        length integer NOT NULL,
        position bigint GENERATED ALWAYS AS IDENTITY
      )`)
    yield* sql.unsafe(`
      CREATE TABLE tiller_events (
        session_id text NOT NULL,
        seq integer NOT NULL,
        row text NOT NULL,
        PRIMARY KEY (session_id, seq)
      )`)
  })
}

// An arbitrary constant: the advisory lock key under which migrations run ("tiller" in ASCII).
const MIGRATION_LOCK = 0x74696c6c6572

/**
 * Runs PostgreSQL's migrations (once per database, whoever else migrates at the same moment).
 *
 * @since 0.1.0
 * @category migrations
 */
export const migratePg = (sql: SqlClient.SqlClient): Effect.Effect<void, SqlError | Migrator.MigrationError> =>
  Effect.scoped(Effect.gen(function*() {
    // A session-level lock on a connection of its own serialises the migrators of every process;
    // the migrator's statements run on other connections (a failed statement would abort an
    // enclosing transaction, and the migrator probes for its table with one).
    const conn = yield* sql.reserve
    yield* Effect.acquireRelease(
      conn.execute("SELECT pg_advisory_lock($1)", [MIGRATION_LOCK], undefined),
      () => Effect.ignore(conn.execute("SELECT pg_advisory_unlock($1)", [MIGRATION_LOCK], undefined))
    )
    yield* Migrator.make({})({ loader: Migrator.fromRecord(PG_MIGRATIONS), table: MIGRATIONS_TABLE }).pipe(
      Effect.provideService(SqlClient.SqlClient, sql)
    )
  }))

/**
 * How many migrations PostgreSQL's schema has.
 *
 * @since 0.1.0
 * @category migrations
 */
export const PG_MIGRATION_COUNT = Object.keys(PG_MIGRATIONS).length
