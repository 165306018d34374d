/**
 * What differs between databases for the SQL session store (internal/durability/SqlStore): the
 * table names, the placeholder syntax, and the two statements a group commit runs for many rows at
 * once (the length checks of several sessions, and the rows of several appends).
 *
 * @since 0.1.0
 */
import type * as SqlClient from "@effect/sql/SqlClient"
import type { SqlError } from "@effect/sql/SqlError"
import { Effect } from "effect"
import type { Tables } from "./SqlSchema.js"
import { PG_TABLES } from "./SqlSchema.js"

/**
 * One append's length check: advance `id`'s stored length from `from` to `to`.
 *
 * @since 0.1.0
 * @category models
 */
export interface LengthChange {
  readonly id: string
  readonly from: number
  readonly to: number
}

/**
 * One append's rows: the JSON texts of the events of `id` from seq `firstSeq` on.
 *
 * @since 0.1.0
 * @category models
 */
export interface RowBatch {
  readonly id: string
  readonly firstSeq: number
  readonly rows: ReadonlyArray<string>
}

/**
 * A dialect's statements.
 *
 * @since 0.1.0
 * @category models
 */
export interface SqlDialect {
  readonly tables: Tables
  /** The text of the `n`th (1-based) parameter. */
  readonly placeholder: (n: number) => string
  /** Advances the stored length of each session (distinct ids) whose length still equals `from`; the ids advanced. */
  readonly advanceLengths: (
    sql: SqlClient.SqlClient,
    changes: ReadonlyArray<LengthChange>
  ) => Effect.Effect<ReadonlyArray<string>, SqlError>
  /** Inserts the rows of every batch. */
  readonly insertRows: (sql: SqlClient.SqlClient, batches: ReadonlyArray<RowBatch>) => Effect.Effect<void, SqlError>
}

// Three arrays bound as three parameters: one statement (and one prepared plan) whatever the row count.
const PG_ADVANCE = `UPDATE ${PG_TABLES.sessions} AS s SET length = v.next ` +
  "FROM unnest($1::text[], $2::int4[], $3::int4[]) AS v(id, first, next) " +
  "WHERE s.id = v.id AND s.length = v.first RETURNING s.id"
const PG_INSERT = `INSERT INTO ${PG_TABLES.events} (session_id, seq, row) ` +
  "SELECT * FROM unnest($1::text[], $2::int4[], $3::text[])"

/**
 * PostgreSQL: `$n` placeholders; the rows of a group as three array parameters to one `unnest` insert.
 *
 * @since 0.1.0
 * @category dialects
 */
export const pg: SqlDialect = {
  tables: PG_TABLES,
  placeholder: (n) => `$${n}`,
  advanceLengths: (sql, changes) =>
    Effect.map(
      sql.unsafe<{ readonly id: string }>(PG_ADVANCE, [
        changes.map((change) => change.id),
        changes.map((change) => change.from),
        changes.map((change) => change.to)
      ]),
      (rows) => rows.map((row) => row.id)
    ),
  insertRows: (sql, batches) =>
    Effect.suspend(() => {
      const ids: Array<string> = []
      const seqs: Array<number> = []
      const rows: Array<string> = []
      for (const batch of batches) {
        for (let i = 0; i < batch.rows.length; i++) {
          ids.push(batch.id)
          seqs.push(batch.firstSeq + i)
          rows.push(batch.rows[i]!)
        }
      }
      return Effect.asVoid(sql.unsafe(PG_INSERT, [ids, seqs, rows]))
    })
}
