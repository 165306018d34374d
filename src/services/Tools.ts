/**
 * Tools: definitions the model may call and the registry the agent reads them from (SPEC 4.6, 8.9).
 *
 * @since 0.1.0
 */
import { Context, Effect, Either, JSONSchema, Layer, Schema } from "effect"
import type { Scope } from "effect"
import type { Json } from "../domain/Json.js"
import { freezeCopy, jsonProblem } from "../domain/Json.js"
import type { ToolContext, ToolDefinition, ToolMode, ToolOutput } from "../domain/Tool.js"
import type { ToolSchema } from "../domain/Values.js"
import type { ToolRegistryShape } from "../internal/loop/ToolRegistry.js"
import { ToolRegistry } from "../internal/loop/ToolRegistry.js"

/**
 * The shapes of a tool (defined beside the domain values, which the loop and the adapters share).
 *
 * @since 0.1.0
 * @category models
 */
export type { NormalizedToolOutput, ToolContext, ToolDefinition, ToolMode, ToolOutput } from "../domain/Tool.js"

/**
 * Constructors of tool definitions.
 *
 * @since 0.1.0
 * @category constructors
 */
export const Tool = {
  /** A frozen tool definition; `mode` defaults to `"exclusive"`. */
  make: <P extends Schema.Schema.AnyNoContext>(name: string, spec: {
    readonly description: string
    readonly parameters: P
    readonly mode?: ToolMode
    readonly execute: ToolDefinition<P>["execute"]
  }): ToolDefinition<P> =>
    Object.freeze({
      name,
      description: spec.description,
      parameters: spec.parameters,
      mode: spec.mode ?? "exclusive",
      execute: spec.execute
    }),
  /**
   * A frozen tool whose parameters are a JSON Schema (an object schema, such as an MCP server's
   * `inputSchema`), passed to the model as it is; the body gets the arguments object undecoded.
   */
  fromJsonSchema: (name: string, spec: {
    readonly description: string
    readonly parameters: Json
    readonly mode?: ToolMode
    readonly execute: (
      args: { readonly [key: string]: unknown },
      ctx: ToolContext
    ) => Effect.Effect<ToolOutput | string, unknown>
  }): ToolDefinition<typeof JsonArguments> =>
    Object.freeze({
      name,
      description: spec.description,
      parameters: JsonArguments,
      jsonSchema: spec.parameters,
      mode: spec.mode ?? "exclusive",
      execute: spec.execute
    })
}

/** The arguments of a tool whose parameters are a JSON Schema: any JSON object, checked by the tool's owner. */
const JsonArguments = Schema.Record({ key: Schema.String, value: Schema.Unknown })

/**
 * Options of {@link Tools.layer}.
 *
 * @since 0.1.0
 * @category models
 */
export interface ToolsOptions {
  /** Registered for the lifetime of the layer; a later entry shadows an earlier one of the same name. */
  readonly tools?: ReadonlyArray<ToolDefinition<any>>
  /** The parallel pool cap; a positive integer, default 10. */
  readonly maxParallelToolCalls?: number
}

/**
 * The tool registry: scoped registration with shadowing, live mode changes, and the schemas offered to
 * the model.
 *
 * @since 0.1.0
 * @category tags
 */
export class Tools extends Context.Tag("tiller/Tools")<Tools, {
  /** Makes `tool` visible until the scope closes; it shadows an earlier registration of the same name. */
  readonly register: (tool: ToolDefinition<any>) => Effect.Effect<void, never, Scope.Scope>
  /** Changes the mode of the visible tool called `name`; a no-op when no such tool is registered. */
  readonly setMode: (name: string, mode: ToolMode) => Effect.Effect<void>
  /** Every visible tool, sorted by name in code-unit order, parameters as JSON Schema. */
  readonly list: Effect.Effect<ReadonlyArray<ToolSchema>>
  /** The parallel pool cap (SPEC 4.6). */
  readonly maxParallelToolCalls: number
  /**
   * The lookups the loop reads at every step (the visible definition of a name, its mode, the list
   * now), as plain reads of the registry's state. `Tools.layer` offers them; a service without them
   * lists tools but cannot run them in an agent.
   */
  readonly registry?: ToolRegistryShape
}>() {
  /**
   * A registry holding `options.tools`; dies at build unless `maxParallelToolCalls` is a positive
   * integer (default 10). The built context also carries the internal `ToolRegistry`.
   *
   * @since 0.1.0
   */
  static readonly layer = (options?: ToolsOptions): Layer.Layer<Tools> => Layer.effectContext(make(options))
}

const DEFAULT_MAX_PARALLEL_TOOL_CALLS = 10

interface Registration {
  readonly token: number
  readonly tool: ToolDefinition<any>
  readonly schema: ToolSchema
}

interface RegistryState {
  readonly nextToken: number
  /** In registration order; the visible tool of a name is its last registration. */
  readonly registrations: ReadonlyArray<Registration>
}

const lastIndexOf = (registrations: ReadonlyArray<Registration>, name: string): number => {
  for (let i = registrations.length - 1; i >= 0; i--) if (registrations[i]!.tool.name === name) return i
  return -1
}

const byCodeUnits = (a: ToolSchema, b: ToolSchema): number => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0)

// The JSON Schema of a tool's parameters is derived once, at registration, so a Schema that
// JSONSchema.make cannot render fails where the tool is registered, not in a later model request.
const toolSchemaOf = (tool: ToolDefinition<any>): Effect.Effect<ToolSchema> =>
  Effect.suspend(() => {
    const rendered = tool.jsonSchema !== undefined
      ? Either.right<unknown>(tool.jsonSchema)
      : Either.try<unknown>(() => JSONSchema.make(tool.parameters))
    if (Either.isLeft(rendered)) {
      const reason = rendered.left instanceof Error ? rendered.left.message : String(rendered.left)
      return Effect.dieMessage(`tool ${tool.name}: cannot derive a JSON Schema for its parameters: ${reason}`)
    }
    const parameters = rendered.right
    const problem = jsonProblem(parameters, "parameters")
    if (problem !== undefined) {
      return Effect.dieMessage(`tool ${tool.name}: its parameter JSON Schema is not lossless JSON: ${problem}`)
    }
    return Effect.succeed(
      freezeCopy({ name: tool.name, description: tool.description, parameters: parameters as Json })
    )
  })

const make = (options?: ToolsOptions): Effect.Effect<Context.Context<Tools | ToolRegistry>> =>
  Effect.gen(function*() {
    const maxParallelToolCalls = options?.maxParallelToolCalls ?? DEFAULT_MAX_PARALLEL_TOOL_CALLS
    if (!Number.isInteger(maxParallelToolCalls) || maxParallelToolCalls < 1) {
      return yield* Effect.dieMessage(
        `Tools.layer: maxParallelToolCalls must be a positive integer, got ${String(maxParallelToolCalls)}`
      )
    }
    const initial = options?.tools ?? []
    const registrations: Array<Registration> = []
    for (const tool of initial) {
      registrations.push({ token: registrations.length, tool, schema: yield* toolSchemaOf(tool) })
    }
    // The registry's state: every change replaces it in one synchronous step, so plain reads see a
    // whole state (the loop's lookups are plain reads; see `ToolRegistryShape`).
    let state: RegistryState = { nextToken: registrations.length, registrations }

    const add = (tool: ToolDefinition<any>, schema: ToolSchema) =>
      Effect.sync(() => {
        const token = state.nextToken
        state = { nextToken: token + 1, registrations: [...state.registrations, { token, tool, schema }] }
        return token
      })

    const remove = (token: number) =>
      Effect.sync(() => {
        state = { ...state, registrations: state.registrations.filter((r) => r.token !== token) }
      })

    const register = Effect.fn("Tools.register")(function*(tool: ToolDefinition<any>) {
      const schema = yield* toolSchemaOf(tool)
      yield* Effect.acquireRelease(add(tool, schema), remove)
    })

    const setMode = (name: string, mode: ToolMode) =>
      Effect.sync(() => {
        const at = lastIndexOf(state.registrations, name)
        const current = state.registrations[at]
        if (current === undefined || current.tool.mode === mode) return
        const updated = [...state.registrations]
        updated[at] = { ...current, tool: Object.freeze({ ...current.tool, mode }) }
        state = { ...state, registrations: updated }
      }).pipe(Effect.withSpan("Tools.setMode"))

    const visible = (s: RegistryState): ReadonlyArray<ToolSchema> => {
      const byName = new Map<string, ToolSchema>()
      for (const r of s.registrations) byName.set(r.tool.name, r.schema)
      return Object.freeze([...byName.values()].sort(byCodeUnits))
    }

    const lookup = (name: string): ToolDefinition<any> | undefined =>
      state.registrations[lastIndexOf(state.registrations, name)]?.tool

    // The visible list of the last state it was derived from: every registry change replaces the state.
    let listed: { readonly state: RegistryState; readonly list: ReadonlyArray<ToolSchema> } | undefined
    const list = (): ReadonlyArray<ToolSchema> => {
      if (listed?.state !== state) listed = { state, list: visible(state) }
      return listed.list
    }

    const registry: ToolRegistryShape = {
      lookup,
      list,
      modeOf: (name) => lookup(name)?.mode
    }
    const tools: Context.Tag.Service<Tools> = {
      register,
      setMode,
      list: Effect.sync(list).pipe(Effect.withSpan("Tools.list")),
      maxParallelToolCalls,
      registry
    }
    return Context.make(Tools, tools).pipe(Context.add(ToolRegistry, registry))
  })
