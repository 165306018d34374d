/**
 * The tool search: when the MCP tools' definitions would take more than a share of the context
 * window, the model is offered one search tool instead, and the definitions it finds are offered
 * from the next request on.
 *
 * @since 0.1.0
 */

/**
 * The name of the search tool.
 *
 * @since 0.1.0
 * @category constants
 */
export const SEARCH_TOOL = "mcp__search_tools"

/**
 * The most definitions one search loads.
 *
 * @since 0.1.0
 * @category constants
 */
export const MAX_LOADED_PER_SEARCH = 5

/**
 * The tokens a tool definition takes in a request, estimated as its JSON's characters / 4.
 *
 * @since 0.1.0
 * @category constructors
 */
export const definitionTokens = (
  definition: { readonly name: string; readonly description: string; readonly parameters: unknown }
): number => Math.ceil(JSON.stringify(definition).length / 4)

/**
 * The candidates that match `query` best, at most {@link MAX_LOADED_PER_SEARCH}: `select:A,B` names
 * them; otherwise each word of the query scores 3 in a name and 1 in a description.
 *
 * @since 0.1.0
 * @category combinators
 */
export const search = <T extends { readonly name: string; readonly description: string }>(
  candidates: ReadonlyArray<T>,
  query: string
): ReadonlyArray<T> => {
  const trimmed = query.trim()
  if (trimmed.startsWith("select:")) {
    const wanted = new Set(trimmed.slice("select:".length).split(",").map((n) => n.trim()))
    return candidates.filter((c) => wanted.has(c.name)).slice(0, MAX_LOADED_PER_SEARCH)
  }
  const words = trimmed.toLowerCase().split(/[^a-z0-9]+/).filter((w) => w.length > 1)
  return candidates
    .map((c) => {
      const name = c.name.toLowerCase()
      const description = c.description.toLowerCase()
      const score = words.reduce((n, w) => n + (name.includes(w) ? 3 : 0) + (description.includes(w) ? 1 : 0), 0)
      return { c, score }
    })
    .filter((s) => s.score > 0)
    .sort((a, b) => b.score - a.score || (a.c.name < b.c.name ? -1 : 1))
    .slice(0, MAX_LOADED_PER_SEARCH)
    .map((s) => s.c)
}
