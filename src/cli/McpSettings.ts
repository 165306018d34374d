/**
 * The MCP configuration of a command: `mcpServers` of `.mcp.json` (the project file other agents
 * read), then `.tiller/mcp.json`, then each `--mcp FILE` (a later file's server replaces an earlier
 * one of the same name), `${VAR}` expanded from the process's environment; the OAuth tokens of HTTP
 * servers are kept in `TILLER_MCP_AUTH_DIR` when it is set (else `~/.tiller/mcp-auth`).
 *
 * @since 0.1.0
 */
import { Effect, Either } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import type { McpConfig, McpConfigFile } from "../internal/mcp/Config.js"
import { DEFAULT_TOOL_SEARCH_SHARE, parseFile, resolve } from "../internal/mcp/Config.js"
import { CliError } from "./CliError.js"

/**
 * The project files read when present, relative to the working directory.
 *
 * @since 0.1.0
 * @category constants
 */
export const PROJECT_FILES: ReadonlyArray<string> = [".mcp.json", path.join(".tiller", "mcp.json")]

/**
 * No servers.
 *
 * @since 0.1.0
 * @category constants
 */
export const EMPTY: McpConfig = { servers: [], toolSearchShare: DEFAULT_TOOL_SEARCH_SHARE }

/** The text of `file`; `undefined` when it is absent and not `required`. */
const readText = (file: string, required: boolean): Effect.Effect<string | undefined, CliError> =>
  Effect.suspend(() => {
    try {
      return Effect.succeed(fs.readFileSync(file, "utf8"))
    } catch (error) {
      const e = error as { readonly code?: string; readonly message?: string }
      return !required && e.code === "ENOENT"
        ? Effect.succeed(undefined)
        : Effect.fail(new CliError({ reason: `MCP configuration ${file}: ${e.message ?? String(error)}` }))
    }
  })

const readFile = (file: string, required: boolean) =>
  Effect.flatMap(readText(file, required), (text) =>
    text === undefined
      ? Effect.succeed(undefined)
      : Either.match(parseFile(text), {
        onLeft: (reason) => Effect.fail(new CliError({ reason: `MCP configuration ${file}: ${reason}` })),
        onRight: (parsed): Effect.Effect<McpConfigFile | undefined> => Effect.succeed(parsed)
      }))

/**
 * The configuration of the project files in `cwd` and the `--mcp` files.
 *
 * @since 0.1.0
 * @category constructors
 */
export const load = (
  files: ReadonlyArray<string>,
  cwd: string = process.cwd(),
  env: Readonly<Record<string, string | undefined>> = process.env
): Effect.Effect<McpConfig, CliError> =>
  Effect.gen(function*() {
    const parsed: Array<McpConfigFile> = []
    for (const file of PROJECT_FILES) {
      const one = yield* readFile(path.join(cwd, file), false)
      if (one !== undefined) parsed.push(one)
    }
    for (const file of files) {
      const one = yield* readFile(path.resolve(cwd, file), true)
      if (one !== undefined) parsed.push(one)
    }
    const authDir = env["TILLER_MCP_AUTH_DIR"]
    return yield* Either.match(resolve(parsed, env), {
      onLeft: (reason) => Effect.fail(new CliError({ reason: `MCP configuration: ${reason}` })),
      onRight: (config) =>
        Effect.succeed(
          authDir === undefined || authDir === "" ? config : { ...config, authDir: path.resolve(cwd, authDir) }
        )
    })
  })
