/**
 * A tool of one agent only (such as `read_history` over its own log), added to the loop's view of
 * the registry instead of the shared `Tools` registry: agents that share one `Tools` layer each see
 * their own. A registered tool of the same name takes precedence.
 *
 * @since 0.1.0
 */
import { JSONSchema } from "effect"
import type { Json } from "../../domain/Json.js"
import { freezeCopy } from "../../domain/Json.js"
import type { ToolDefinition } from "../../domain/Tool.js"
import type { ToolSchema } from "../../domain/Values.js"
import type { ToolRegistryShape } from "./ToolRegistry.js"

/**
 * The registry's lookups with `tool` added beneath the registered tools.
 *
 * @since 0.1.0
 * @category combinators
 */
export const withAgentTool = (registry: ToolRegistryShape, tool: ToolDefinition<any>): ToolRegistryShape => {
  const schema: ToolSchema = freezeCopy({
    name: tool.name,
    description: tool.description,
    parameters: JSONSchema.make(tool.parameters) as unknown as Json
  })
  // The merged list of the last registry list it was derived from (the loop reads it every request).
  let listed: { readonly base: ReadonlyArray<ToolSchema>; readonly list: ReadonlyArray<ToolSchema> } | undefined
  const list = (): ReadonlyArray<ToolSchema> => {
    const base = registry.list()
    if (listed?.base !== base) {
      const merged = base.some((t) => t.name === tool.name)
        ? base
        : Object.freeze([...base, schema].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0)))
      listed = { base, list: merged }
    }
    return listed.list
  }
  return {
    list,
    lookup: (name) => registry.lookup(name) ?? (name === tool.name ? tool : undefined),
    modeOf: (name) => registry.modeOf(name) ?? (name === tool.name ? tool.mode : undefined)
  }
}
