/**
 * Where the OAuth state of one HTTP MCP server is kept, outside any session database: one JSON
 * file per server (`<dir>/<name>-<hash of its URL>.json`, default dir `~/.tiller/mcp-auth`) holding
 * its tokens, the client registration, the discovery state and, during a login, the PKCE code
 * verifier. The directory is created with mode 0700 and each file with mode 0600; a file is written
 * to a temporary name and renamed over the old one, so a reader sees the old or the new whole file.
 *
 * @since 0.1.0
 */
import { createHash, randomBytes } from "node:crypto"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"

/**
 * The stored OAuth state of one server; each value as the client library gave it.
 *
 * @since 0.1.0
 * @category models
 */
export interface StoredAuth {
  /** The server's URL the state belongs to. */
  readonly serverUrl?: string
  readonly tokens?: unknown
  readonly clientInformation?: unknown
  readonly discoveryState?: unknown
  readonly codeVerifier?: string
}

/**
 * The default directory of the stored OAuth state.
 *
 * @since 0.1.0
 * @category constants
 */
export const defaultAuthDir = (home: string = os.homedir()): string => path.join(home, ".tiller", "mcp-auth")

/**
 * The file of server `name` at `url` in `dir`.
 *
 * @since 0.1.0
 * @category constructors
 */
export const authFile = (dir: string, name: string, url: string): string =>
  path.join(dir, `${name}-${createHash("sha256").update(url).digest("hex").slice(0, 12)}.json`)

/**
 * The state stored in `file`; empty when there is none (or it is not readable JSON).
 *
 * @since 0.1.0
 * @category reading
 */
export const readAuth = (file: string): StoredAuth => {
  try {
    const parsed = JSON.parse(fs.readFileSync(file, "utf8")) as unknown
    return parsed !== null && typeof parsed === "object" && !Array.isArray(parsed) ? parsed as StoredAuth : {}
  } catch {
    return {}
  }
}

/**
 * Replaces the state in `file` with `change` of it, atomically, the file mode 0600 and a created
 * directory 0700.
 *
 * @since 0.1.0
 * @category writing
 */
export const updateAuth = (file: string, change: (stored: StoredAuth) => StoredAuth): void => {
  fs.mkdirSync(path.dirname(file), { recursive: true, mode: 0o700 })
  const next = change(readAuth(file))
  const temporary = `${file}.${process.pid}.${randomBytes(6).toString("hex")}.tmp`
  try {
    fs.writeFileSync(temporary, JSON.stringify(next, null, 2), { mode: 0o600, flag: "wx" })
    fs.renameSync(temporary, file)
  } catch (error) {
    fs.rmSync(temporary, { force: true })
    throw error
  }
}
