/**
 * One connection to an MCP server through the official client (`@modelcontextprotocol/client`):
 * a child process over stdio (its stderr kept for diagnostics) or Streamable HTTP, opened as a
 * scoped resource within the server's start-up timeout, speaking the 2026-07-28 revision where the
 * server does and an older one where it does not. Every request is an Effect whose interruption
 * cancels it on the server (`notifications/cancelled`) and which fails after the per-request timeout.
 * An HTTP server configured with `oauth` is reached with the tokens of its auth-store file (the
 * library refreshes an expired one); with none stored, or none it can refresh, opening or a request
 * fails with `McpAuthorizationRequired`.
 *
 * With `OAuth.ts`, this is the only module that names the client library.
 *
 * @since 0.1.0
 */
import {
  Client,
  SdkError,
  SdkErrorCode,
  StreamableHTTPClientTransport,
  UnauthorizedError
} from "@modelcontextprotocol/client"
import { StdioClientTransport } from "@modelcontextprotocol/client/stdio"
import { Duration, Effect } from "effect"
import type { Scope } from "effect"
import { McpAuthorizationRequired, McpError } from "../../domain/Errors.js"
import type { Json } from "../../domain/Json.js"
import { authFile, defaultAuthDir, readAuth } from "./AuthStore.js"
import type { McpServerConfig } from "./Config.js"
import type { McpContentBlock, McpResourceContents, McpToolResult } from "./Content.js"
import type { TillerOAuthProvider } from "./OAuth.js"
import { makeProvider } from "./OAuth.js"

/**
 * A failure of a connection: the server's or the lack of authorization.
 *
 * @since 0.1.0
 * @category models
 */
export type ConnectionError = McpError | McpAuthorizationRequired

/**
 * A tool as a server lists it.
 *
 * @since 0.1.0
 * @category models
 */
export interface ListedTool {
  readonly name: string
  readonly description: string
  readonly inputSchema: Json
  readonly readOnly: boolean
}

/**
 * A prompt as a server lists it.
 *
 * @since 0.1.0
 * @category models
 */
export interface ListedPrompt {
  readonly name: string
  readonly description: string
  readonly arguments: ReadonlyArray<
    { readonly name: string; readonly description?: string; readonly required: boolean }
  >
}

/**
 * A progress notification of a running request.
 *
 * @since 0.1.0
 * @category models
 */
export interface ProgressUpdate {
  readonly progress: number
  readonly total?: number
  readonly message?: string
}

/**
 * An elicitation request of a server (form mode), and the answer the client gives.
 *
 * @since 0.1.0
 * @category models
 */
export interface ElicitationRequest {
  readonly message: string
  readonly requestedSchema: Json
}

/**
 * The answer to an elicitation.
 *
 * @since 0.1.0
 * @category models
 */
export type ElicitationAnswer =
  | { readonly action: "accept"; readonly content: { readonly [key: string]: string | number | boolean } }
  | { readonly action: "decline" }
  | { readonly action: "cancel" }

/**
 * What the connection reports outside any request: a tools list change, its end, an elicitation.
 *
 * @since 0.1.0
 * @category models
 */
export interface ConnectionHooks {
  readonly onToolsChanged: () => void
  /** The connection ended without being closed by its scope (the server exited or hung up). */
  readonly onClosed: (reason: string) => void
  readonly onElicitation: (request: ElicitationRequest) => Promise<ElicitationAnswer>
}

/**
 * An open connection's requests.
 *
 * @since 0.1.0
 * @category models
 */
export interface Connection {
  /** The protocol revision agreed with the server. */
  readonly protocolVersion: string | undefined
  /** The server's process id (stdio). */
  readonly pid: number | undefined
  /** Whether the connection is still open (false once the server exited or hung up). */
  readonly isOpen: () => boolean
  /** The last lines the server wrote to stderr (stdio). */
  readonly stderr: () => string
  readonly listTools: Effect.Effect<ReadonlyArray<ListedTool>, ConnectionError>
  readonly callTool: (
    name: string,
    args: { readonly [key: string]: unknown },
    onProgress: (update: ProgressUpdate) => void
  ) => Effect.Effect<McpToolResult, ConnectionError>
  readonly readResource: (uri: string) => Effect.Effect<ReadonlyArray<McpResourceContents>, ConnectionError>
  readonly listPrompts: Effect.Effect<ReadonlyArray<ListedPrompt>, ConnectionError>
  readonly getPrompt: (
    name: string,
    args: Readonly<Record<string, string>>
  ) => Effect.Effect<ReadonlyArray<{ readonly role: string; readonly content: McpContentBlock }>, ConnectionError>
}

/** The most stderr kept per server, in characters. */
const STDERR_TAIL = 4000

/** A failure of the client as a reason a user can read. */
const reasonOf = (error: unknown, what: string, timeoutMs: number): string => {
  if (error instanceof SdkError) {
    if (error.code === SdkErrorCode.RequestTimeout && !/abort/i.test(error.message)) {
      return `${what} timed out after ${timeoutMs} ms`
    }
    if (error.code === SdkErrorCode.ConnectionClosed) return `the server closed the connection during ${what}`
    if (error.code === SdkErrorCode.NotConnected) return `the server is not connected`
  }
  return `${what} failed: ${error instanceof Error ? error.message : String(error)}`
}

/**
 * Opens a connection to `config`'s server in the current scope; closing the scope closes it
 * (and ends a stdio server's process). Fails when the server does not answer within its start-up
 * timeout, or, for a server with `oauth`, when `authDir` (default `~/.tiller/mcp-auth`) holds no
 * tokens for it.
 *
 * @since 0.1.0
 * @category constructors
 */
export const open = (
  config: McpServerConfig,
  hooks: ConnectionHooks,
  authDir?: string
): Effect.Effect<Connection, ConnectionError, Scope.Scope> =>
  Effect.gen(function*() {
    const server = config.name
    const failure = (reason: string) => new McpError({ server, reason })
    let provider: TillerOAuthProvider | undefined
    if (config.transport._tag === "http" && config.transport.oauth !== undefined) {
      const file = authFile(authDir ?? defaultAuthDir(), server, config.transport.url)
      if ((yield* Effect.sync(() => readAuth(file))).tokens === undefined) {
        return yield* new McpAuthorizationRequired({ server })
      }
      provider = makeProvider(file, config.transport.url, config.transport.oauth)
    }
    // The library asked for a new authorization (no token it could refresh): a login is needed.
    const unauthorized = (error: unknown) => provider?.needsLogin() === true || error instanceof UnauthorizedError
    let stderr = ""
    let closing = false
    let open = true
    const client = new Client({ name: "tiller", version: "0.1.0" }, {
      capabilities: { elicitation: { form: {} } },
      versionNegotiation: { mode: "auto", probe: { timeoutMs: Math.min(5000, config.startupTimeoutMs) } },
      listChanged: { tools: { autoRefresh: false, debounceMs: 0, onChanged: () => hooks.onToolsChanged() } }
    })
    client.setRequestHandler("elicitation/create", async (request) => {
      const params = request.params as { readonly message?: string; readonly requestedSchema?: Json }
      const answer = await hooks.onElicitation({
        message: params.message ?? "",
        requestedSchema: params.requestedSchema ?? {}
      })
      return answer.action === "accept"
        ? { action: "accept", content: { ...answer.content } }
        : { action: answer.action }
    })
    const transport = config.transport._tag === "stdio"
      ? new StdioClientTransport({
        command: config.transport.command,
        args: [...config.transport.args],
        ...(config.transport.env === undefined ? {} : { env: { ...config.transport.env } }),
        ...(config.transport.cwd === undefined ? {} : { cwd: config.transport.cwd }),
        stderr: "pipe"
      })
      : new StreamableHTTPClientTransport(new URL(config.transport.url), {
        requestInit: { headers: { ...config.transport.headers } },
        ...(provider === undefined ? {} : { authProvider: provider })
      })
    if (transport instanceof StdioClientTransport) {
      transport.stderr?.on("data", (chunk: unknown) => {
        stderr = (stderr + String(chunk)).slice(-STDERR_TAIL)
      })
    }
    client.onclose = () => {
      open = false
      if (!closing) {
        const tail = stderr.trim().split("\n").slice(-3).join(" | ")
        hooks.onClosed(`the server's connection ended${tail === "" ? "" : ` (stderr: ${tail})`}`)
      }
    }
    const close = Effect.promise(() => {
      closing = true
      return client.close().catch(() => undefined)
    })
    yield* Effect.acquireRelease(
      Effect.tryPromise({
        try: () => client.connect(transport),
        catch: (error): ConnectionError =>
          unauthorized(error)
            ? new McpAuthorizationRequired({ server })
            : failure(reasonOf(error, "connecting", config.startupTimeoutMs))
      }).pipe(
        Effect.timeoutFail({
          duration: Duration.millis(config.startupTimeoutMs),
          onTimeout: () => failure(`did not start within ${config.startupTimeoutMs} ms`)
        }),
        Effect.tapError(() => close),
        Effect.mapError((error) => {
          const tail = stderr.trim().split("\n").slice(-3).join(" | ")
          return tail === "" || error._tag !== "McpError" ? error : failure(`${error.reason} (stderr: ${tail})`)
        })
      ),
      () => close
    )

    const request = <A>(what: string, run: (signal: AbortSignal, timeout: number) => Promise<A>) =>
      Effect.tryPromise({
        try: (signal) => run(signal, config.callTimeoutMs),
        catch: (error): ConnectionError =>
          unauthorized(error)
            ? new McpAuthorizationRequired({ server })
            : failure(reasonOf(error, what, config.callTimeoutMs))
      })

    const listTools = request("tools/list", (signal, timeout) => client.listTools(undefined, { signal, timeout })).pipe(
      Effect.map((result) =>
        result.tools.map((tool): ListedTool => ({
          name: tool.name,
          description: tool.description ?? tool.title ?? "",
          inputSchema: tool.inputSchema as unknown as Json,
          readOnly: tool.annotations?.readOnlyHint === true
        }))
      )
    )
    const callTool = (
      name: string,
      args: { readonly [key: string]: unknown },
      onProgress: (update: ProgressUpdate) => void
    ) =>
      request(`the call of ${name}`, (signal, timeout) =>
        client.callTool({ name, arguments: { ...args } }, {
          signal,
          timeout,
          onprogress: (progress) =>
            onProgress({
              progress: progress.progress,
              ...(progress.total === undefined ? {} : { total: progress.total }),
              ...(progress.message === undefined ? {} : { message: progress.message })
            })
        })).pipe(Effect.map((result) => result as McpToolResult))
    const readResource = (uri: string) =>
      request(`reading ${uri}`, (signal, timeout) => client.readResource({ uri }, { signal, timeout })).pipe(
        Effect.map((result) => result.contents as ReadonlyArray<McpResourceContents>)
      )
    const listPrompts = Effect.suspend(() =>
      client.getServerCapabilities()?.prompts === undefined
        ? Effect.succeed([])
        : request("prompts/list", (signal, timeout) => client.listPrompts(undefined, { signal, timeout })).pipe(
          Effect.map((result) =>
            result.prompts.map((prompt): ListedPrompt => ({
              name: prompt.name,
              description: prompt.description ?? prompt.title ?? "",
              arguments: (prompt.arguments ?? []).map((a) => ({
                name: a.name,
                ...(a.description === undefined ? {} : { description: a.description }),
                required: a.required === true
              }))
            }))
          )
        )
    )
    const getPrompt = (name: string, args: Readonly<Record<string, string>>) =>
      request(
        `the prompt ${name}`,
        (signal, timeout) => client.getPrompt({ name, arguments: { ...args } }, { signal, timeout })
      ).pipe(
        Effect.map((result) =>
          result.messages.map((m) => ({ role: m.role, content: m.content as unknown as McpContentBlock }))
        )
      )
    return {
      protocolVersion: client.getNegotiatedProtocolVersion(),
      pid: transport instanceof StdioClientTransport ? transport.pid ?? undefined : undefined,
      isOpen: () => open,
      stderr: () => stderr,
      listTools: Effect.suspend(() => listTools),
      callTool,
      readResource,
      listPrompts,
      getPrompt
    }
  })
