/**
 * The agent loop's view of the tool registry: a tool's definition and its current mode by name,
 * read at call time so `Tools.setMode` and (un)registrations made by earlier results apply (SPEC 4.6).
 *
 * How the loop reaches it. The public type of `Tools.layer` is `Layer.Layer<Tools>` and the agent
 * layers require only `Tools`, so the registry rides on the `Tools` service object itself: `Tools.layer`
 * attaches it under a module-private, non-enumerable symbol, and the loop calls
 * `ToolRegistry.fromTools(yield* Tools)` (or `fromToolsOrDie`). `Tools.layer` also adds the same
 * registry to its built context under this tag (a `Layer` is contravariant in what it provides, so the
 * public type stays `Layer.Layer<Tools>`); code that has it in context may `yield* ToolRegistry`.
 * A hand-written `Tools` service carries no registry: `fromTools` returns `None` for it.
 *
 * @since 0.1.0
 */
import { Context, Effect, Option } from "effect"
import type { ToolSchema } from "../../domain/Values.js"
import type { ToolDefinition, ToolMode } from "../../domain/Tool.js"

/**
 * Lookups the loop needs: the visible definition of a name and its mode, both read at call time.
 * They are plain reads of the registry's current state (a registry change is one synchronous
 * replacement of that state), so the loop pays no Effect operation for them.
 *
 * @since 0.1.0
 * @category models
 */
export interface ToolRegistryShape {
  /** The visible (latest registered, not yet removed) definition now, with its current mode; `undefined` when none. */
  readonly lookup: (name: string) => ToolDefinition<any> | undefined
  /** The current mode of the visible definition; `undefined` for an unknown tool (the loop treats it as exclusive). */
  readonly modeOf: (name: string) => ToolMode | undefined
  /** `Tools.list` now, without its span, cached per registry state (the loop reads it every request). */
  readonly list: () => ReadonlyArray<ToolSchema>
}

const registryKey: unique symbol = Symbol("tiller/internal/ToolRegistry")

/**
 * Internal lookups of the registry behind a `Tools` service built by `Tools.layer`.
 *
 * @since 0.1.0
 * @category tags
 */
export class ToolRegistry extends Context.Tag("tiller/internal/ToolRegistry")<ToolRegistry, ToolRegistryShape>() {
  /**
   * The registry attached to a `Tools` service by `Tools.layer`, or `None` for any other implementation
   * (the service is taken as any object, so this module needs nothing from the service module).
   *
   * @since 0.1.0
   */
  static readonly fromTools = (tools: object): Option.Option<ToolRegistryShape> =>
    Option.fromNullable((tools as { readonly [registryKey]?: ToolRegistryShape })[registryKey])

  /**
   * Like {@link ToolRegistry.fromTools}, dying with a readable message when the service has no registry.
   *
   * @since 0.1.0
   */
  static readonly fromToolsOrDie = (tools: object): Effect.Effect<ToolRegistryShape> =>
    Option.match(ToolRegistry.fromTools(tools), {
      onNone: () => Effect.dieMessage("the Tools service was not built by Tools.layer, so the agent cannot look tools up"),
      onSome: Effect.succeed
    })
}

/**
 * Attaches `registry` to a freshly built `Tools` service object as a hidden, read-only property.
 *
 * @since 0.1.0
 * @category constructors
 */
export const attachRegistry = <S extends object>(service: S, registry: ToolRegistryShape): S =>
  Object.defineProperty(service, registryKey, { value: registry, enumerable: false, writable: false, configurable: false })
