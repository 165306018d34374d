/**
 * The SQLite store's schema: the `sessions`, `events`, `leases` and `approval_answers` tables, created by numbered
 * migrations that `@effect/sql`'s `Migrator` applies once per database file.
 *
 * @since 0.1.0
 */
import * as Migrator from "@effect/sql/Migrator"
import * as SqlClient from "@effect/sql/SqlClient"
import { Effect } from "effect"

// Run by `@effect/sql`'s Migrator, which records applied ids in `tiller_migrations` (its own
// `created_at` column defaults to SQLite's clock: bookkeeping only, never read by tiller).
const MIGRATIONS = {
  "1_sessions_and_events": Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    yield* sql`
      CREATE TABLE sessions (
        id TEXT PRIMARY KEY NOT NULL,
        header TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        length INTEGER NOT NULL
      ) STRICT`
    yield* sql`
      CREATE TABLE events (
        session_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        row TEXT NOT NULL,
        PRIMARY KEY (session_id, seq)
      ) STRICT`
  }),
  // Which process has a session open (the lease across processes; see `processLease`).
  "2_leases": Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    yield* sql`
      CREATE TABLE leases (
        session_id TEXT PRIMARY KEY NOT NULL,
        pid INTEGER NOT NULL,
        host TEXT NOT NULL
      ) STRICT`
  }),
  // Answers to approval requests left by a process that does not hold the session (`tiller approve`);
  // the holder takes them into its log (see `ApprovalMailbox`).
  "3_approval_answers": Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    yield* sql`
      CREATE TABLE approval_answers (
        session_id TEXT NOT NULL,
        call_id TEXT NOT NULL,
        answer TEXT NOT NULL,
        PRIMARY KEY (session_id, call_id)
      ) STRICT`
  })
}
/**
 * The migrations, for `@effect/sql`'s `Migrator`.
 *
 * @since 0.1.0
 * @category migrations
 */
export const migrations = Migrator.fromRecord(MIGRATIONS)

/**
 * How many migrations the schema has.
 *
 * @since 0.1.0
 * @category migrations
 */
export const MIGRATION_COUNT = Object.keys(MIGRATIONS).length

/**
 * How many migrations `tiller_migrations` records.
 *
 * @since 0.1.0
 * @category migrations
 */
export const migrationsApplied = (sql: SqlClient.SqlClient) =>
  Effect.map(
    sql<{ readonly n: number }>`SELECT count(*) AS n FROM tiller_migrations`,
    (rows) => rows[0]?.n ?? 0
  )
