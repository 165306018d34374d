/**
 * `CLAUDE_ENV_FILE`: the file a `SessionStart` hook may write `export NAME=value` lines to; `Bash`
 * sources it before each command of the session, so the variables apply to every later command.
 * One file per session, in a directory the hook bridge and the coding tools share: by default
 * `~/.tiller/session-env/<hash of the working directory>/`, as Claude Code keeps them under
 * `~/.claude/session-env/`. It lies outside the working directory on purpose: the file tools cannot
 * write it, so a file edit cannot slip a command into what `Bash` runs.
 *
 * @since 0.1.0
 */
import { createHash } from "node:crypto"
import * as os from "node:os"
import * as path from "node:path"

/**
 * The directory of the session environment files of a working directory.
 *
 * @since 0.1.0
 * @category constructors
 */
export const defaultEnvDir = (cwd: string, home: string = os.homedir()): string =>
  path.join(home, ".tiller", "session-env", createHash("sha256").update(path.resolve(cwd)).digest("hex").slice(0, 16))

/**
 * The environment file of `sessionId` in `dir`.
 *
 * @since 0.1.0
 * @category constructors
 */
export const sessionEnvFile = (dir: string, sessionId: string): string =>
  path.join(dir, `${sessionId.replace(/[^A-Za-z0-9_.-]/g, "_")}.sh`)
