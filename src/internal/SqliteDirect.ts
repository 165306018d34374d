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
 * @since 0.1.0
 */
import Database from "better-sqlite3"
import type { Scope } from "effect"
import { Effect } from "effect"

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
      const db = new Database(filename, { fileMustExist: true })
      try {
        db.pragma(`synchronous = ${synchronous}`)
        const selectSession = db.prepare<[string], { readonly header: unknown; readonly length: number }>(SELECT_SESSION)
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
