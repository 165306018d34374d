/**
 * `CLAUDE_ENV_FILE`: the file a `SessionStart` hook may write `export NAME=value` lines to; `Bash`
 * sources it before each command of the session, so the variables apply to every later command.
 * One file per session, in a directory the hook bridge and the coding tools share (by default
 * `<cwd>/.tiller/session-env`).
 *
 * @since 0.1.0
 */
import * as path from "node:path"

/**
 * The directory of the session environment files under a working directory.
 *
 * @since 0.1.0
 * @category constructors
 */
export const defaultEnvDir = (cwd: string): string => path.join(cwd, ".tiller", "session-env")

/**
 * The environment file of `sessionId` in `dir`.
 *
 * @since 0.1.0
 * @category constructors
 */
export const sessionEnvFile = (dir: string, sessionId: string): string =>
  path.join(dir, `${sessionId.replace(/[^A-Za-z0-9_.-]/g, "_")}.sh`)
