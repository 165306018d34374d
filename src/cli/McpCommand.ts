/**
 * `tiller mcp list`, `tiller mcp tools SERVER`, `tiller mcp call SERVER TOOL JSON` and
 * `tiller mcp login SERVER`: the configured MCP servers, their tools, one call as the agent would
 * make it, and the OAuth authorization of an HTTP server.
 *
 * @since 0.1.0
 */
import { Effect, Layer } from "effect"
import { authFile, defaultAuthDir } from "../internal/mcp/AuthStore.js"
import type { McpConfig } from "../internal/mcp/Config.js"
import * as Login from "../internal/mcp/Login.js"
import { McpServers } from "../layers/McpServers.js"
import { Mcp } from "../services/Mcp.js"
import { Tools } from "../services/Tools.js"
import { CliError, ExitWith } from "./CliError.js"
import * as Output from "./Output.js"

/** The MCP servers of `config`, started for one command. */
const withServers = <A, E>(config: McpConfig, body: Effect.Effect<A, E, Mcp>) =>
  Effect.provide(body, McpServers.layer(config).pipe(Layer.provide(Tools.layer())))

const noServers = (config: McpConfig) =>
  config.servers.length === 0
    ? Output.lines(["no MCP servers configured (.mcp.json, .tiller/mcp.json or --mcp FILE)"])
    : Effect.void

/**
 * `tiller mcp list`: each server, its transport, state and tool and prompt counts.
 *
 * @since 0.1.0
 * @category commands
 */
export const list = (config: McpConfig) =>
  Effect.gen(function*() {
    if (config.servers.length === 0) return yield* noServers(config)
    const servers = yield* withServers(config, Effect.flatMap(Mcp, (mcp) => mcp.servers))
    const width = Math.max(4, ...servers.map((s) => s.name.length))
    yield* Output.lines([
      `${"NAME".padEnd(width)}  TRANSPORT  STATE      TOOLS  PROMPTS  PROTOCOL`,
      ...servers.map((s) =>
        `${s.name.padEnd(width)}  ${s.transport.padEnd(9)}  ${s.state.padEnd(9)}  ${String(s.tools).padStart(5)}  ${
          String(s.prompts).padStart(7)
        }  ${s.protocolVersion ?? "-"}${s.error === undefined ? "" : `\n${" ".repeat(width + 2)}${s.error}`}`
      )
    ])
    if (servers.some((s) => s.state !== "connected")) return yield* new ExitWith({ code: 1 })
  })

/**
 * `tiller mcp tools SERVER`: the tools of one server, by their tiller names.
 *
 * @since 0.1.0
 * @category commands
 */
export const tools = (config: McpConfig, server: string) =>
  withServers(
    config,
    Effect.gen(function*() {
      const mcp = yield* Mcp
      const listed = yield* Effect.mapError(mcp.tools(server), (error) => new CliError({ reason: error.message }))
      if (listed.length === 0) return yield* Output.lines([`MCP server ${server} offers no tools`])
      yield* Output.lines(listed.flatMap((t) => [
        `${t.name}  (${t.tool})`,
        ...(t.description === "" ? [] : [`  ${t.description.split("\n")[0]!.slice(0, 200)}`])
      ]))
    })
  )

/**
 * `tiller mcp call SERVER TOOL JSON`: calls the tool and prints its result (text; images and
 * other blocks as a note); exit code 1 when the tool reports an error.
 *
 * @since 0.1.0
 * @category commands
 */
export const call = (config: McpConfig, server: string, tool: string, json: string) =>
  Effect.gen(function*() {
    const args = yield* Effect.try({
      try: () => JSON.parse(json === "" ? "{}" : json) as unknown,
      catch: (error) => new CliError({ reason: `JSON: ${error instanceof Error ? error.message : String(error)}` })
    })
    if (args === null || typeof args !== "object" || Array.isArray(args)) {
      return yield* new CliError({ reason: "JSON must be an object of the tool's arguments" })
    }
    const output = yield* withServers(
      config,
      Effect.flatMap(Mcp, (mcp) =>
        Effect.mapError(
          mcp.call(server, tool, args as Record<string, unknown>),
          (error) => new CliError({ reason: error.message })
        ))
    )
    const blocks = typeof output.content === "string"
      ? [{ type: "text" as const, text: output.content }]
      : output.content
    yield* Output.lines(
      blocks.map((b) =>
        b.type === "text" ? b.text : `[image ${b.mediaType}, ${Math.floor(b.data.length * 3 / 4)} bytes]`
      )
    )
    if (output.isError === true) return yield* new ExitWith({ code: 1 })
  })

/**
 * `tiller mcp login SERVER`: prints the URL that authorizes tiller with an HTTP server configured
 * with `oauth`, waits (up to `timeoutSeconds`) for the authorization server's redirect to a loopback
 * port, and stores the tokens in the server's file of the auth directory (mode 0600). The tokens
 * are never printed.
 *
 * @since 0.1.0
 * @category commands
 */
export const login = (config: McpConfig, server: string, timeoutSeconds: number) =>
  Effect.gen(function*() {
    const entry = config.servers.find((s) => s.name === server)
    if (entry === undefined) return yield* new CliError({ reason: `no MCP server ${server} is configured` })
    yield* Effect.scoped(Login.login(entry, {
      ...(config.authDir === undefined ? {} : { authDir: config.authDir }),
      timeoutMs: timeoutSeconds * 1000,
      onAuthorizationUrl: (url) =>
        Output.lines([
          `Open this URL to authorize tiller with MCP server ${server}:`,
          "",
          `  ${url}`,
          "",
          `Waiting up to ${timeoutSeconds} s for the authorization...`
        ])
    })).pipe(Effect.mapError((error) => new CliError({ reason: error.message })))
    const file = entry.transport._tag === "http"
      ? authFile(config.authDir ?? defaultAuthDir(), server, entry.transport.url)
      : ""
    yield* Output.lines([`MCP server ${server}: authorized (tokens stored in ${file})`])
  })
