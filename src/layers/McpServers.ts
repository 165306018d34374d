/**
 * McpServers: the `Mcp` service over configured servers. Each server's connection is a scoped
 * resource started with the layer; its tools are registered in `Tools` as `mcp__<server>__<tool>`
 * (re-registered when the server says its list changed, so the next request offers the new list and
 * its `request/header` records it); a server whose connection ends is reported and started again
 * on its next use. When the definitions would take more than the configured share of the context
 * window, one search tool is offered instead and loads definitions on demand. An HTTP server with
 * `oauth` is reached with the tokens `tiller mcp login` stored (in the config's `authDir`); without
 * them it fails with `McpAuthorizationRequired` and the other servers go on.
 *
 * ```ts
 * const mcp = McpServers.layer({ servers: [...], toolSearchShare: 0.1 })
 * Agent.layer(...).pipe(Layer.provide(mcp), Layer.provideMerge(Tools.layer()))
 * ```
 *
 * @since 0.1.0
 */
import {
  Cause,
  Effect,
  Either,
  ExecutionStrategy,
  Exit,
  FiberSet,
  Layer,
  Option,
  PubSub,
  Queue,
  Schema,
  Scope,
  Stream
} from "effect"
import { McpError } from "../domain/Errors.js"
import type { Json } from "../domain/Json.js"
import { newUserMessage } from "../domain/Message.js"
import type { ToolDefinition, ToolOutput } from "../domain/Tool.js"
import { contextWindowOf } from "../internal/compaction/Budget.js"
import type { McpConfig, McpServerConfig } from "../internal/mcp/Config.js"
import type {
  Connection,
  ElicitationAnswer,
  ElicitationRequest,
  ListedPrompt,
  ListedTool
} from "../internal/mcp/Connection.js"
import * as Connections from "../internal/mcp/Connection.js"
import { contentBlocks, META_KEY, resourceBlocks, toolOutput } from "../internal/mcp/Content.js"
import { PREFIX, uniqueToolNames } from "../internal/mcp/Names.js"
import { permitted } from "../internal/mcp/Patterns.js"
import { parsePromptArguments } from "../internal/mcp/PromptArguments.js"
import { definitionTokens, search, SEARCH_TOOL } from "../internal/mcp/ToolSearch.js"
import type {
  McpElicitation,
  McpElicitationAnswer,
  McpEvent,
  McpFailure,
  McpPromptInfo,
  McpToolInfo
} from "../services/Mcp.js"
import { Mcp, PROMPT_SOURCE_KIND, RESOURCE_SOURCE_KIND } from "../services/Mcp.js"
import { Tool, Tools } from "../services/Tools.js"

/**
 * Options of {@link McpServers.layer}.
 *
 * @since 0.1.0
 * @category models
 */
export interface McpServersOptions {
  /** The context window (tokens) the tool-search share is taken of (default: the model's, else 32768). */
  readonly contextWindow?: number
  /** The model whose known window is used when `contextWindow` is absent. */
  readonly model?: string
}

type Signal =
  | { readonly _tag: "ToolsChanged"; readonly server: string; readonly generation: number }
  | { readonly _tag: "Closed"; readonly server: string; readonly generation: number; readonly reason: string }
  | {
    readonly _tag: "Elicit"
    readonly server: string
    readonly request: ElicitationRequest
    readonly resolve: (answer: ElicitationAnswer) => void
  }
  | { readonly _tag: "Event"; readonly event: McpEvent }

interface Live {
  readonly connection: Connection
  readonly scope: Scope.CloseableScope
  readonly generation: number
  closed: boolean
}

interface ServerState {
  readonly config: McpServerConfig
  readonly lock: Effect.Semaphore
  generation: number
  live: Live | undefined
  error: string | undefined
  /** The tools after the allow and deny lists, as last listed. */
  tools: ReadonlyArray<ListedTool>
  prompts: ReadonlyArray<ListedPrompt>
  /** How many times the server said its tools changed, and the count the last listing covers. */
  changes: number
  listedChanges: number
  /** The elicitation records of the calls running now. */
  readonly running: Set<Array<Json>>
}

/** A tool of some server with its tiller name. */
interface NamedTool {
  readonly server: string
  readonly tool: ListedTool
  readonly name: string
}

/** A JSON Schema the providers take as a tool's parameters: an object schema. */
const objectSchema = (schema: Json): Json =>
  schema !== null && typeof schema === "object" && !Array.isArray(schema)
    ? ("type" in schema ? schema : { ...schema, type: "object" })
    : { type: "object", properties: {} }

const make = (config: McpConfig, options: McpServersOptions = {}) =>
  Effect.gen(function*() {
    const registry = yield* Tools
    const layerScope = yield* Effect.scope
    const signals = yield* Queue.unbounded<Signal>()
    const events = yield* PubSub.unbounded<McpEvent>()
    const fibers = yield* FiberSet.make()
    const handlers: Array<(e: McpElicitation) => Effect.Effect<McpElicitationAnswer>> = []
    const window = options.contextWindow ?? contextWindowOf(options.model)
    const states = new Map<string, ServerState>()
    for (const server of config.servers) {
      states.set(server.name, {
        config: server,
        lock: yield* Effect.makeSemaphore(1),
        generation: 0,
        live: undefined,
        error: undefined,
        tools: [],
        prompts: [],
        changes: 0,
        listedChanges: 0,
        running: new Set()
      })
    }
    const stateOf = (server: string) =>
      Effect.suspend(() => {
        const state = states.get(server)
        return state === undefined
          ? Effect.fail(new McpError({ server, reason: "no such server is configured" }))
          : Effect.succeed(state)
      })

    // ---- tool registration ---------------------------------------------------------------------
    // Every MCP tool with its tiller name, in configuration order (names stay stable across a restart).
    const named = (): ReadonlyArray<NamedTool> => {
      const all = [...states.values()].flatMap((s) => s.tools.map((tool) => ({ server: s.config.name, tool })))
      const names = uniqueToolNames(all.map((t) => ({ server: t.server, tool: t.tool.name })))
      return all.map((t, i) => ({ ...t, name: names[i]! }))
    }
    const loaded = new Set<string>()
    let searching = false
    let registered: { readonly key: string; readonly scope: Scope.CloseableScope } | undefined

    const definitionOf = (t: NamedTool): ToolDefinition<any> =>
      Tool.fromJsonSchema(t.name, {
        description: t.tool.description === "" ? `${t.tool.name} (MCP server ${t.server})` : t.tool.description,
        parameters: objectSchema(t.tool.inputSchema),
        mode: t.tool.readOnly ? "parallel" : "exclusive",
        execute: (args, ctx) =>
          call(t.server, t.tool.name, args, ctx.callId).pipe(
            Effect.catchTags({
              McpError: (error) =>
                Effect.succeed<ToolOutput>({
                  content: error.message,
                  isError: true,
                  meta: { [META_KEY]: { server: t.server, tool: t.tool.name, error: error.reason } }
                }),
              McpAuthorizationRequired: (error) =>
                Effect.succeed<ToolOutput>({
                  content: error.message,
                  isError: true,
                  meta: { [META_KEY]: { server: t.server, tool: t.tool.name, error: "authorization required" } }
                })
            })
          )
      })

    const searchTool = Tool.make(SEARCH_TOOL, {
      description: "Finds tools of the connected MCP servers and loads their definitions: they are offered " +
        "from the next request on. Give words of what the tool should do, or select:NAME,NAME for exact names.",
      parameters: Schema.Struct({ query: Schema.String }),
      mode: "exclusive",
      execute: ({ query }) =>
        Effect.gen(function*() {
          const candidates = named().map((t) => ({ ...t, description: t.tool.description }))
          const found = search(candidates.filter((t) => !loaded.has(t.name)), query)
          if (found.length === 0) {
            return `No MCP tool not yet loaded matches ${JSON.stringify(query)}. The servers' tools: ${
              candidates.map((t) => t.name).join(", ")
            }`
          }
          for (const t of found) loaded.add(t.name)
          yield* syncTools
          return [
            `Loaded ${found.length} tool definition${found.length === 1 ? "" : "s"}; call them from now on:`,
            ...found.map((t) => `- ${t.name}: ${t.description}`)
          ].join("\n")
        })
    })

    // Registers what the model is offered now, replacing the previous registrations when it changed.
    const syncTools: Effect.Effect<void> = Effect.suspend(() => {
      const all = named()
      const total = all.reduce(
        (n, t) =>
          n + definitionTokens({ name: t.name, description: t.tool.description, parameters: t.tool.inputSchema }),
        0
      )
      searching = total > config.toolSearchShare * window
      const offered = searching ? all.filter((t) => loaded.has(t.name)) : all
      const definitions = [...offered.map(definitionOf), ...(searching && all.length > 0 ? [searchTool] : [])]
      const key = JSON.stringify(offered.map((t) => [t.name, t.tool])) + String(searching && all.length > 0)
      if (registered?.key === key) return Effect.void
      return Effect.gen(function*() {
        const scope = yield* Scope.fork(layerScope, ExecutionStrategy.sequential)
        yield* Effect.forEach(definitions, (d) => registry.register(d), { discard: true }).pipe(Scope.extend(scope))
        const previous = registered
        registered = { key, scope }
        if (previous !== undefined) yield* Scope.close(previous.scope, Exit.void)
      })
    })

    // ---- connections ---------------------------------------------------------------------------
    const filterTools = (s: ServerState, tools: ReadonlyArray<ListedTool>) =>
      tools.filter((t) => permitted(t.name, { allow: s.config.allowTools, deny: s.config.denyTools }))

    const hooksOf = (s: ServerState, generation: number): Connections.ConnectionHooks => ({
      onToolsChanged: () => {
        s.changes++
        Queue.unsafeOffer(signals, { _tag: "ToolsChanged", server: s.config.name, generation })
      },
      onClosed: (reason) => Queue.unsafeOffer(signals, { _tag: "Closed", server: s.config.name, generation, reason }),
      onElicitation: (request) =>
        new Promise((resolve) =>
          Queue.unsafeOffer(signals, { _tag: "Elicit", server: s.config.name, request, resolve })
        )
    })

    const drop = (s: ServerState) =>
      Effect.suspend(() => {
        const live = s.live
        s.live = undefined
        return live === undefined ? Effect.void : Scope.close(live.scope, Exit.void)
      })

    // The live connection of `s`, (re)started when there is none or it ended (serialised per server).
    const connect = (s: ServerState): Effect.Effect<Connection, McpFailure> =>
      s.lock.withPermits(1)(Effect.gen(function*() {
        if (s.live !== undefined && !s.live.closed && s.live.connection.isOpen()) return s.live.connection
        yield* drop(s)
        const generation = ++s.generation
        const scope = yield* Scope.fork(layerScope, ExecutionStrategy.sequential)
        const started = yield* Effect.exit(Effect.gen(function*() {
          const connection = yield* Connections.open(s.config, hooksOf(s, generation), config.authDir).pipe(
            Scope.extend(scope)
          )
          const changes = s.changes
          const tools = yield* connection.listTools
          s.listedChanges = changes
          const prompts = yield* Effect.orElseSucceed(connection.listPrompts, () => [])
          return { connection, tools, prompts }
        }))
        if (Exit.isFailure(started)) {
          yield* Scope.close(scope, Exit.void)
          const failure = Option.getOrElse(
            Cause.failureOption(started.cause),
            (): McpFailure =>
              new McpError({ server: s.config.name, reason: `could not start: ${Cause.pretty(started.cause)}` })
          )
          s.error = failure._tag === "McpError" ? failure.reason : failure.message
          return yield* failure
        }
        const { connection, prompts, tools } = started.value
        s.live = { connection, scope, generation, closed: false }
        s.error = undefined
        s.tools = filterTools(s, tools)
        s.prompts = prompts
        yield* syncTools
        return connection
      }))

    const refreshTools = (s: ServerState, generation: number) =>
      s.lock.withPermits(1)(Effect.gen(function*() {
        const live = s.live
        if (live === undefined || live.closed || live.generation !== generation) return
        const changes = s.changes
        if (s.listedChanges === changes) return
        const tools = yield* Effect.either(live.connection.listTools)
        if (Either.isLeft(tools)) return
        s.listedChanges = changes
        const before = JSON.stringify(s.tools)
        s.tools = filterTools(s, tools.right)
        if (JSON.stringify(s.tools) === before) return
        yield* syncTools
        yield* PubSub.publish(events, { _tag: "ToolsChanged", server: s.config.name, tools: s.tools.length })
      }))

    const handleSignal = (signal: Signal): Effect.Effect<void> => {
      switch (signal._tag) {
        case "Event":
          return PubSub.publish(events, signal.event)
        case "ToolsChanged": {
          const s = states.get(signal.server)
          return s === undefined
            ? Effect.void
            : FiberSet.run(fibers, refreshTools(s, signal.generation), { propagateInterruption: false }).pipe(
              Effect.asVoid
            )
        }
        case "Closed": {
          const s = states.get(signal.server)
          if (s === undefined || s.live === undefined || s.live.generation !== signal.generation) return Effect.void
          s.live.closed = true
          s.error = signal.reason
          return Effect.zipRight(
            FiberSet.run(
              fibers,
              s.lock.withPermits(1)(
                Effect.suspend(() => s.live?.generation === signal.generation ? drop(s) : Effect.void)
              )
            ),
            PubSub.publish(events, { _tag: "Closed", server: signal.server, reason: signal.reason })
          )
        }
        case "Elicit": {
          const s = states.get(signal.server)
          const handler = handlers.at(-1)
          const elicitation: McpElicitation = { server: signal.server, ...signal.request }
          const answer = handler === undefined
            ? Effect.succeed<McpElicitationAnswer>({ action: "decline" })
            : Effect.orElseSucceed(handler(elicitation), (): McpElicitationAnswer => ({ action: "cancel" }))
          return FiberSet.run(
            fibers,
            Effect.tap(answer, (a) =>
              Effect.sync(() => {
                const record: Json = {
                  message: signal.request.message,
                  action: a.action,
                  ...(a.action === "accept" ? { content: { ...a.content } } : {}),
                  ...(handler === undefined ? { note: "declined: no one to ask (headless)" } : {})
                }
                for (const running of s?.running ?? []) running.push(record)
                signal.resolve(a)
              }))
          ).pipe(Effect.asVoid)
        }
      }
    }
    yield* Effect.forkScoped(Effect.forever(Effect.flatMap(Queue.take(signals), handleSignal)))

    // ---- operations ----------------------------------------------------------------------------
    const call = (server: string, tool: string, args: { readonly [key: string]: unknown }, callId?: string) =>
      Effect.gen(function*() {
        const s = yield* stateOf(server)
        const connection = yield* connect(s)
        const record: Array<Json> = []
        s.running.add(record)
        const result = yield* connection.callTool(tool, args, (update) =>
          Queue.unsafeOffer(signals, {
            _tag: "Event",
            event: { _tag: "Progress", server, tool, callId, ...update }
          })).pipe(Effect.ensuring(Effect.sync(() => s.running.delete(record))))
        // A list change the call caused reaches the next request: the tools are listed again first.
        if (s.changes !== s.listedChanges && s.live !== undefined) yield* refreshTools(s, s.live.generation)
        return toolOutput(result, { server, tool, ...(record.length === 0 ? {} : { elicitations: record }) })
      }).pipe(Effect.withSpan("Mcp.call", { attributes: { server, tool } }))

    const tools = (server: string) =>
      Effect.gen(function*() {
        const s = yield* stateOf(server)
        yield* connect(s)
        const offered = new Set(registry.registry?.list().map((t) => t.name) ?? [])
        return named().filter((t) => t.server === server).map((t): McpToolInfo => ({
          server,
          tool: t.tool.name,
          name: t.name,
          description: t.tool.description,
          inputSchema: t.tool.inputSchema,
          offered: offered.has(t.name)
        }))
      }).pipe(Effect.withSpan("Mcp.tools", { attributes: { server } }))

    const resource = (server: string, uri: string) =>
      Effect.gen(function*() {
        const s = yield* stateOf(server)
        const connection = yield* connect(s)
        const contents = yield* connection.readResource(uri)
        return yield* newUserMessage({
          content: [
            { type: "text", text: `Resource ${uri} of MCP server ${server}:` },
            ...contents.flatMap(resourceBlocks)
          ],
          source: { kind: RESOURCE_SOURCE_KIND, server, uri }
        })
      }).pipe(Effect.withSpan("Mcp.resource", { attributes: { server, uri } }))

    const promptInfos = (): ReadonlyArray<McpPromptInfo> =>
      [...states.values()].flatMap((s) =>
        s.prompts.map((p) => ({
          server: s.config.name,
          prompt: p.name,
          command: `${PREFIX}${s.config.name}__${p.name}`,
          description: p.description,
          arguments: p.arguments
        }))
      )

    const prompt = (command: string, text: string) =>
      Effect.gen(function*() {
        const name = command.replace(/^\//, "")
        const info = promptInfos().find((p) => p.command === name)
        if (info === undefined) {
          return yield* new McpError({
            server: name.slice(PREFIX.length).split("__")[0] ?? "",
            reason: `no prompt ${name}`
          })
        }
        const args = parsePromptArguments(text, info.arguments)
        if (Either.isLeft(args)) {
          const usage = info.arguments.map((a) => a.required ? `${a.name}=…` : `[${a.name}=…]`).join(" ")
          return yield* new McpError({
            server: info.server,
            reason: `prompt ${info.prompt}: ${args.left} (usage: /${info.command}${usage === "" ? "" : ` ${usage}`})`
          })
        }
        const s = yield* stateOf(info.server)
        const connection = yield* connect(s)
        const messages = yield* connection.getPrompt(info.prompt, args.right)
        const blocks = messages.flatMap((m) => {
          const content = contentBlocks([m.content])
          return messages.length > 1 || m.role !== "user"
            ? [{ type: "text" as const, text: `[${m.role}]` }, ...content]
            : content
        })
        return yield* newUserMessage({
          content: blocks.length === 0 ? [{ type: "text", text: `(prompt ${info.prompt} gave no content)` }] : blocks,
          source: { kind: PROMPT_SOURCE_KIND, server: info.server, prompt: info.prompt, arguments: args.right }
        })
      }).pipe(Effect.withSpan("Mcp.prompt", { attributes: { command } }))

    const servers = Effect.sync(() =>
      [...states.values()].map((s) => ({
        name: s.config.name,
        transport: s.config.transport._tag,
        state: s.live !== undefined && !s.live.closed && s.live.connection.isOpen()
          ? "connected" as const
          : "failed" as const,
        tools: s.tools.length,
        prompts: s.prompts.length,
        ...(s.live?.connection.protocolVersion === undefined
          ? {}
          : { protocolVersion: s.live.connection.protocolVersion }),
        ...(s.live?.connection.pid === undefined ? {} : { pid: s.live.connection.pid }),
        ...(s.error === undefined ? {} : { error: s.error })
      }))
    ).pipe(Effect.withSpan("Mcp.servers"))

    const handleElicitations = (handler: (e: McpElicitation) => Effect.Effect<McpElicitationAnswer>) =>
      Effect.acquireRelease(
        Effect.sync(() => handlers.push(handler)),
        () =>
          Effect.sync(() => {
            const at = handlers.lastIndexOf(handler)
            if (at >= 0) handlers.splice(at, 1)
          })
      ).pipe(Effect.asVoid)

    // Every server starts with the layer; one that fails is reported by `servers` and retried on use.
    yield* Effect.forEach([...states.values()], (s) => Effect.either(connect(s)), {
      concurrency: "unbounded",
      discard: true
    })

    return Mcp.of({
      servers,
      tools,
      call,
      resource,
      prompts: Effect.sync(promptInfos),
      prompt,
      events: Stream.fromPubSub(events),
      handleElicitations
    })
  })

/**
 * The MCP servers as a layer.
 *
 * @since 0.1.0
 * @category layers
 */
export const McpServers = {
  /**
   * The `Mcp` service over `config`'s servers, registering their tools in the `Tools` service it
   * requires; closing the layer closes every connection.
   */
  layer: (config: McpConfig, options?: McpServersOptions): Layer.Layer<Mcp, never, Tools> =>
    Layer.scoped(Mcp, make(config, options))
}
