/**
 * The agent loop's view of the tool registry: a tool's definition and its current mode by name,
 * read at call time so `Tools.setMode` and (un)registrations made by earlier results apply (SPEC 4.6).
 *
 * How the loop reaches it. The agent layers require only `Tools`, so the registry is a member of the
 * `Tools` service's shape (`registry`, which `Tools.layer` fills), and the loop calls
 * `ToolRegistry.fromTools(yield* Tools)` (or `fromToolsOrDie`). `Tools.layer` also adds the same
 * registry to its built context under this tag; code that has it in context may `yield* ToolRegistry`.
 * A hand-written `Tools` service without `registry`: `fromTools` returns `None` for it.
 *
 * @since 0.1.0
 */
import { Context, Effect, Option } from "effect"
import type { ToolDefinition, ToolMode } from "../../domain/Tool.js"
import type { ToolSchema } from "../../domain/Values.js"

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

/**
 * Internal lookups of the registry behind a `Tools` service built by `Tools.layer`.
 *
 * @since 0.1.0
 * @category tags
 */
export class ToolRegistry extends Context.Tag("tiller/internal/ToolRegistry")<ToolRegistry, ToolRegistryShape>() {
  /**
   * The registry a `Tools` service offers (`Tools.layer`'s does), or `None` for a service without it
   * (the service is taken by its `registry` member, so this module needs nothing from the service module).
   *
   * @since 0.1.0
   */
  static readonly fromTools = (tools: { readonly registry?: ToolRegistryShape }): Option.Option<ToolRegistryShape> =>
    Option.fromNullable(tools.registry)

  /**
   * Like {@link ToolRegistry.fromTools}, dying with a readable message when the service has no registry.
   *
   * @since 0.1.0
   */
  static readonly fromToolsOrDie = (
    tools: { readonly registry?: ToolRegistryShape }
  ): Effect.Effect<ToolRegistryShape> =>
    Option.match(ToolRegistry.fromTools(tools), {
      onNone: () =>
        Effect.dieMessage("the Tools service was not built by Tools.layer, so the agent cannot look tools up"),
      onSome: Effect.succeed
    })
}
