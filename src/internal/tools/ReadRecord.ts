/**
 * What each session has read: `Edit` (and `Write` over an existing file) runs only on a file the
 * session read, unchanged since (its modification time and size as the read, or the session's own
 * last write, left them). Kept in memory for the tools' lifetime; a reopened process reads again.
 *
 * @since 0.1.0
 */
import type { Stats } from "node:fs"

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
  /** Notes that `session` now knows `file` as `stats` describe it. */
  readonly saw: (session: string, file: string, stats: Stats) => void
  /** Why `session` may not change `file` (whose current stats are `stats`), or `undefined` when it may. */
  readonly refusal: (session: string, file: string, stats: Stats, shown: string) => string | undefined
}

/**
 * An empty record.
 *
 * @since 0.1.0
 * @category constructors
 */
export const makeReadRecord = (): ReadRecord => {
  const sessions = new Map<string, Map<string, SeenVersion>>()
  return {
    saw: (session, file, stats) => {
      let files = sessions.get(session)
      if (files === undefined) sessions.set(session, files = new Map())
      files.set(file, { mtimeMs: stats.mtimeMs, size: stats.size })
    },
    refusal: (session, file, stats, shown) => {
      const seen = sessions.get(session)?.get(file)
      if (seen === undefined) {
        return `refused: ${shown} has not been read in this session; Read it first, then change it`
      }
      if (seen.mtimeMs !== stats.mtimeMs || seen.size !== stats.size) {
        return `refused: ${shown} changed since it was last read in this session; Read it again, then change it`
      }
      return undefined
    }
  }
}
