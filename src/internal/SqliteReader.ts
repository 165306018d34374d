/**
 * A second connection to a SQLite store's database file, for reading whole sessions. It uses
 * better-sqlite3 directly: its pluck mode returns each event row's text without building a row
 * object, which `@effect/sql`'s client does not offer; on a long log that object is a third of the
 * read. The connection only reads (`query_only`); in WAL mode its reads never wait for the store's
 * writer and see every committed transaction. A file-backed store only: a second connection to
 * `:memory:` would open another, empty database.
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
 * Reads sessions in one read transaction each; throws what the driver throws.
 *
 * @since 0.1.0
 * @category models
 */
export interface SqliteReader {
  /** The session `id` as one snapshot, or undefined when it is not stored. */
  readonly read: (id: string) => StoredSession | undefined
}

const SELECT_SESSION = "SELECT header, length FROM sessions WHERE id = ?"
const SELECT_ROWS = "SELECT row FROM events WHERE session_id = ? ORDER BY seq"

/**
 * Opens a reader on the existing database file `filename` with the store's `PRAGMA synchronous`,
 * closed with the scope. Call it after the store's migrations ran (the statements are prepared on open).
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (
  filename: string,
  synchronous: "OFF" | "NORMAL" | "FULL"
): Effect.Effect<SqliteReader, unknown, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.try(() => {
      const db = new Database(filename, { fileMustExist: true })
      try {
        db.pragma("query_only = ON")
        // Irrelevant to a connection that never writes, but every connection of the store carries its setting.
        db.pragma(`synchronous = ${synchronous}`)
        const selectSession = db.prepare<[string], { readonly header: unknown; readonly length: number }>(SELECT_SESSION)
        const selectRows = db.prepare<[string], unknown>(SELECT_ROWS).pluck(true)
        const read = db.transaction((id: string): StoredSession | undefined => {
          const session = selectSession.get(id)
          if (session === undefined) return undefined
          return { header: session.header, length: session.length, rows: selectRows.all(id) }
        })
        return { db, reader: { read } satisfies SqliteReader }
      } catch (cause) {
        db.close()
        throw cause
      }
    }),
    ({ db }) => Effect.sync(() => db.close())
  ).pipe(Effect.map(({ reader }) => reader))
