/**
 * What each session has read: `Edit` (and `Write` over an existing file) runs only on a file the
 * session read, unchanged since (its modification time and size as the read, or the session's own
 * last write, left them). Each `Read`, `Write` and `Edit` result carries the version it saw in its
 * `meta` (`seen`), so the record is a fold of the session's log: given the log's `history`, a
 * reopened session (another process, after a restart) finds what it read before; without it the
 * record lives in memory for the tools' lifetime.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import type { SessionEvent } from "../../domain/Event.js"
import type { Json } from "../../domain/Json.js"

/**
 * What the record reads of a file's stats (a `node:fs` `Stats` has both).
 *
 * @since 0.1.0
 * @category models
 */
export interface FileStats {
  readonly mtimeMs: number
  readonly size: number
}

/**
 * The version of a file a session saw.
 *
 * @since 0.1.0
 * @category models
 */
export interface SeenVersion {
  readonly mtimeMs: number
  readonly size: number
}

/**
 * The record of the files each session read or wrote, by real path.
 *
 * @since 0.1.0
 * @category models
 */
export interface ReadRecord {
  /** Notes that `session` now knows `file` as `stats` describe it; returns the `meta` entry that says so in the log. */
  readonly saw: (session: string, file: string, stats: FileStats) => Json
  /** Why `session` may not change `file` (whose current stats are `stats`), or `undefined` when it may. */
  readonly refusal: (
    session: string,
    file: string,
    stats: FileStats,
    shown: string
  ) => Effect.Effect<string | undefined>
}

/**
 * The events of a session's log, for a record that survives a restart.
 *
 * @since 0.1.0
 * @category models
 */
export type ReadHistory = (session: string) => Effect.Effect<ReadonlyArray<SessionEvent>, unknown>

const isRecord = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value)

/**
 * The files a log's tool results say their session saw (the last version of each).
 *
 * @since 0.1.0
 * @category folds
 */
export const seenIn = (events: ReadonlyArray<SessionEvent>): ReadonlyMap<string, SeenVersion> => {
  const seen = new Map<string, SeenVersion>()
  for (const event of events) {
    if (event.type !== "tool/result") continue
    const meta = (event.data as { readonly meta?: unknown }).meta
    const entry = isRecord(meta) ? meta["seen"] : undefined
    if (!isRecord(entry)) continue
    const { file, mtimeMs, size } = entry
    if (typeof file === "string" && typeof mtimeMs === "number" && typeof size === "number") {
      seen.set(file, { mtimeMs, size })
    }
  }
  return seen
}

/**
 * An empty record; with `history`, a session's first check also reads what its log says it saw.
 *
 * @since 0.1.0
 * @category constructors
 */
export const makeReadRecord = (history?: ReadHistory): ReadRecord => {
  const sessions = new Map<string, Map<string, SeenVersion>>()
  const filesOf = (session: string) => {
    let files = sessions.get(session)
    if (files === undefined) sessions.set(session, files = new Map())
    return files
  }
  // Sessions whose log was folded in already (or that have no history to fold).
  const recalled = new Set<string>()
  const recall = (session: string): Effect.Effect<void> =>
    history === undefined || recalled.has(session)
      ? Effect.void
      : Effect.gen(function*() {
        const events = yield* Effect.orElseSucceed(history(session), () => [])
        if (recalled.has(session)) return
        recalled.add(session)
        const files = filesOf(session)
        // What this process saw itself is newer than the stored log.
        for (const [file, version] of seenIn(events)) if (!files.has(file)) files.set(file, version)
      })
  return {
    saw: (session, file, stats) => {
      filesOf(session).set(file, { mtimeMs: stats.mtimeMs, size: stats.size })
      return { file, mtimeMs: stats.mtimeMs, size: stats.size }
    },
    refusal: (session, file, stats, shown) =>
      Effect.map(recall(session), () => {
        const seen = sessions.get(session)?.get(file)
        if (seen === undefined) {
          return `refused: ${shown} has not been read in this session; Read it first, then change it`
        }
        if (seen.mtimeMs !== stats.mtimeMs || seen.size !== stats.size) {
          return `refused: ${shown} changed since it was last read in this session; Read it again, then change it`
        }
        return undefined
      })
  }
}
