/**
 * MCP server configuration in the shape other agents read (`mcpServers` in `.mcp.json`): stdio
 * servers (`command`, `args`, `env`, `cwd`) and Streamable HTTP servers (`url`, `headers`), with
 * `${VAR}` and `${VAR:-default}` expanded in `command`, `args`, `env`, `cwd`, `url` and `headers`,
 * and tiller's own fields: timeouts, allow and deny lists, the tool-search share, and `oauth` for
 * an HTTP server that wants OAuth authorization (`true`, or `{clientId?, scopes?, callbackPort?}`).
 *
 * @since 0.1.0
 */
import { Either, ParseResult, Schema } from "effect"
import { permitted } from "./Patterns.js"

/**
 * How tiller reaches one server.
 *
 * @since 0.1.0
 * @category models
 */
export type McpTransport =
  | {
    readonly _tag: "stdio"
    readonly command: string
    readonly args: ReadonlyArray<string>
    readonly env?: Readonly<Record<string, string>>
    readonly cwd?: string
  }
  | {
    readonly _tag: "http"
    readonly url: string
    readonly headers: Readonly<Record<string, string>>
    /** Present when the server is reached with OAuth tokens (`tiller mcp login SERVER` gets them). */
    readonly oauth?: McpOAuthConfig
  }

/**
 * OAuth for one HTTP server: tiller registers itself with the authorization server (dynamic client
 * registration) unless `clientId` names a registered client.
 *
 * @since 0.1.0
 * @category models
 */
export interface McpOAuthConfig {
  /** A client registered beforehand (its redirect URI `http://127.0.0.1:<callbackPort>/callback`). */
  readonly clientId?: string
  /** The scopes asked for (default: those the server advertises). */
  readonly scopes?: ReadonlyArray<string>
  /** The loopback port the login listens on for the authorization code (default: a free one). */
  readonly callbackPort?: number
}

/**
 * One configured server, its variables expanded.
 *
 * @since 0.1.0
 * @category models
 */
export interface McpServerConfig {
  /** The key under `mcpServers`. */
  readonly name: string
  readonly transport: McpTransport
  /** The longest wait for the server to start and answer its first listing (default 30 s). */
  readonly startupTimeoutMs: number
  /** The longest wait for one request, such as a tool call (default 120 s). */
  readonly callTimeoutMs: number
  /** Only these tools (names as the server gives them, `*` a wildcard) are offered; absent: all. */
  readonly allowTools?: ReadonlyArray<string>
  /** These tools are never offered. */
  readonly denyTools: ReadonlyArray<string>
}

/**
 * The whole MCP configuration.
 *
 * @since 0.1.0
 * @category models
 */
export interface McpConfig {
  readonly servers: ReadonlyArray<McpServerConfig>
  /**
   * The share of the context window the MCP tools' definitions may take before they are offered
   * through one search tool instead (default 0.1).
   */
  readonly toolSearchShare: number
  /** The directory the OAuth tokens of HTTP servers are kept in (default `~/.tiller/mcp-auth`). */
  readonly authDir?: string
}

/**
 * The default start-up timeout, in milliseconds.
 *
 * @since 0.1.0
 * @category constants
 */
export const DEFAULT_STARTUP_TIMEOUT_MS = 30_000

/**
 * The default per-request timeout, in milliseconds.
 *
 * @since 0.1.0
 * @category constants
 */
export const DEFAULT_CALL_TIMEOUT_MS = 120_000

/**
 * The default share of the context window the MCP tool definitions may take.
 *
 * @since 0.1.0
 * @category constants
 */
export const DEFAULT_TOOL_SEARCH_SHARE = 0.1

const StringRecord = Schema.Record({ key: Schema.String, value: Schema.String })
const Names = Schema.Array(Schema.String)
const Millis = Schema.Int.pipe(Schema.positive())

const ServerEntry = Schema.Struct({
  type: Schema.optional(Schema.Literal("stdio", "http", "streamable-http", "streamableHttp")),
  command: Schema.optional(Schema.String),
  args: Schema.optional(Schema.Array(Schema.String)),
  env: Schema.optional(StringRecord),
  cwd: Schema.optional(Schema.String),
  url: Schema.optional(Schema.String),
  headers: Schema.optional(StringRecord),
  oauth: Schema.optional(Schema.Union(
    Schema.Boolean,
    Schema.Struct({
      clientId: Schema.optional(Schema.NonEmptyString),
      scopes: Schema.optional(Names),
      callbackPort: Schema.optional(Schema.Int.pipe(Schema.between(1, 65535)))
    })
  )),
  startupTimeoutMs: Schema.optional(Millis),
  timeoutMs: Schema.optional(Millis),
  allowTools: Schema.optional(Names),
  denyTools: Schema.optional(Names),
  disabled: Schema.optional(Schema.Boolean)
})
type ServerEntry = typeof ServerEntry.Type

const FileShape = Schema.Struct({
  mcpServers: Schema.optional(Schema.Record({ key: Schema.String, value: ServerEntry })),
  allowServers: Schema.optional(Names),
  denyServers: Schema.optional(Names),
  toolSearchShare: Schema.optional(Schema.Number.pipe(Schema.between(0, 1)))
})

/**
 * One configuration file, parsed (variables not yet expanded).
 *
 * @since 0.1.0
 * @category models
 */
export type McpConfigFile = typeof FileShape.Type

const decodeFile = Schema.decodeUnknownEither(FileShape, { onExcessProperty: "ignore" })

/**
 * Parses the text of one configuration file; `Left` is a readable reason.
 *
 * @since 0.1.0
 * @category parsing
 */
export const parseFile = (text: string): Either.Either<McpConfigFile, string> => {
  let json: unknown
  try {
    json = JSON.parse(text)
  } catch (error) {
    return Either.left(`not JSON: ${error instanceof Error ? error.message : String(error)}`)
  }
  return Either.mapLeft(decodeFile(json), (error) => ParseResult.TreeFormatter.formatErrorSync(error))
}

/**
 * `text` with `${VAR}` and `${VAR:-default}` replaced from `env`; `Left` names a variable that is
 * unset and has no default.
 *
 * @since 0.1.0
 * @category parsing
 */
export const expand = (
  text: string,
  env: Readonly<Record<string, string | undefined>>
): Either.Either<string, string> => {
  let missing: string | undefined
  const out = text.replace(/\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}/g, (_, name: string, fallback?: string) => {
    const value = env[name]
    if (value !== undefined && value !== "") return value
    if (fallback !== undefined) return fallback
    missing ??= name
    return ""
  })
  return missing === undefined ? Either.right(out) : Either.left(`\${${missing}} is not set`)
}

const expandRecord = (
  record: Readonly<Record<string, string>>,
  env: Readonly<Record<string, string | undefined>>
): Either.Either<Record<string, string>, string> => {
  const out: Record<string, string> = {}
  for (const [key, value] of Object.entries(record)) {
    const expanded = expand(value, env)
    if (Either.isLeft(expanded)) return Either.left(`${key}: ${expanded.left}`)
    out[key] = expanded.right
  }
  return Either.right(out)
}

/** One entry as a server configuration; `Left` says what is wrong with it. */
const serverOf = (
  name: string,
  entry: ServerEntry,
  env: Readonly<Record<string, string | undefined>>
): Either.Either<McpServerConfig, string> =>
  Either.gen(function*() {
    const fail = (reason: string) => Either.left(`server ${name}: ${reason}`)
    const one = (text: string, field: string) =>
      Either.mapLeft(expand(text, env), (r) => `server ${name}: ${field}: ${r}`)
    const common = {
      name,
      startupTimeoutMs: entry.startupTimeoutMs ?? DEFAULT_STARTUP_TIMEOUT_MS,
      callTimeoutMs: entry.timeoutMs ?? DEFAULT_CALL_TIMEOUT_MS,
      ...(entry.allowTools === undefined ? {} : { allowTools: entry.allowTools }),
      denyTools: entry.denyTools ?? []
    }
    const http = entry.type === "http" || entry.type === "streamable-http" || entry.type === "streamableHttp" ||
      (entry.type === undefined && entry.url !== undefined)
    if (http) {
      if (entry.url === undefined) return yield* fail("an http server needs a url")
      const url = yield* one(entry.url, "url")
      if (!URL.canParse(url) || !/^https?:$/.test(new URL(url).protocol)) {
        return yield* fail(`url is not an http(s) URL: ${JSON.stringify(url)}`)
      }
      const headers = yield* Either.mapLeft(
        expandRecord(entry.headers ?? {}, env),
        (r) => `server ${name}: headers: ${r}`
      )
      const settings = entry.oauth === true ? {} : entry.oauth === false ? undefined : entry.oauth
      const oauth: McpOAuthConfig | undefined = settings === undefined ? undefined : {
        ...(settings.clientId === undefined ? {} : { clientId: settings.clientId }),
        ...(settings.scopes === undefined ? {} : { scopes: settings.scopes }),
        ...(settings.callbackPort === undefined ? {} : { callbackPort: settings.callbackPort })
      }
      return { ...common, transport: { _tag: "http", url, headers, ...(oauth === undefined ? {} : { oauth }) } }
    }
    if (entry.command === undefined || entry.command === "") return yield* fail("a stdio server needs a command")
    if (entry.oauth !== undefined && entry.oauth !== false) return yield* fail("oauth is for http servers only")
    const command = yield* one(entry.command, "command")
    const args: Array<string> = []
    for (const [i, arg] of (entry.args ?? []).entries()) args.push(yield* one(arg, `args[${i}]`))
    const serverEnv = entry.env === undefined
      ? undefined
      : yield* Either.mapLeft(expandRecord(entry.env, env), (r) => `server ${name}: env: ${r}`)
    const cwd = entry.cwd === undefined ? undefined : yield* one(entry.cwd, "cwd")
    return {
      ...common,
      transport: {
        _tag: "stdio",
        command,
        args,
        ...(serverEnv === undefined ? {} : { env: serverEnv }),
        ...(cwd === undefined ? {} : { cwd })
      }
    }
  })

/**
 * The configuration of `files` (in order: a later file's server replaces an earlier one of the
 * same name; allow and deny lists add up), variables expanded from `env`. Disabled and denied
 * servers are left out. `Left` is a reason naming the server.
 *
 * @since 0.1.0
 * @category constructors
 */
export const resolve = (
  files: ReadonlyArray<McpConfigFile>,
  env: Readonly<Record<string, string | undefined>>
): Either.Either<McpConfig, string> =>
  Either.gen(function*() {
    const entries = new Map<string, ServerEntry>()
    let allow: Array<string> | undefined
    const deny: Array<string> = []
    let share = DEFAULT_TOOL_SEARCH_SHARE
    for (const file of files) {
      for (const [name, entry] of Object.entries(file.mcpServers ?? {})) {
        entries.delete(name)
        entries.set(name, entry)
      }
      if (file.allowServers !== undefined) allow = [...(allow ?? []), ...file.allowServers]
      deny.push(...(file.denyServers ?? []))
      if (file.toolSearchShare !== undefined) share = file.toolSearchShare
    }
    const servers: Array<McpServerConfig> = []
    for (const [name, entry] of entries) {
      if (entry.disabled === true || !permitted(name, { allow, deny })) continue
      if (!/^[A-Za-z0-9_.-]+$/.test(name)) {
        return yield* Either.left(`server ${JSON.stringify(name)}: a name may hold letters, digits, _ . and - only`)
      }
      servers.push(yield* serverOf(name, entry, env))
    }
    return { servers, toolSearchShare: share }
  })
