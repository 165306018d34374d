/**
 * The names MCP tools get in tiller: `mcp__<server>__<tool>`, made of the characters every
 * provider accepts, at most 64 characters long, and unique within one set of servers.
 *
 * @since 0.1.0
 */

/**
 * The longest tool name the providers accept.
 *
 * @since 0.1.0
 * @category constants
 */
export const MAX_TOOL_NAME = 64

/**
 * The prefix of every MCP tool name (and of every MCP prompt command).
 *
 * @since 0.1.0
 * @category constants
 */
export const PREFIX = "mcp__"

/** Replaces every character a provider refuses in a tool name. */
const clean = (part: string): string => part.replace(/[^A-Za-z0-9_-]/g, "_")

/** FNV-1a over the UTF-16 code units of `text`, as 8 hex digits. */
const hash = (text: string): string => {
  let h = 0x811c9dc5
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i)
    h = Math.imul(h, 0x01000193) >>> 0
  }
  return h.toString(16).padStart(8, "0")
}

/**
 * The tool name of `tool` on `server` before collisions are resolved: sanitised, and, past
 * {@link MAX_TOOL_NAME} characters, cut with a hash of the original names appended.
 *
 * @since 0.1.0
 * @category constructors
 */
export const toolName = (server: string, tool: string): string => {
  const full = `${PREFIX}${clean(server)}__${clean(tool)}`
  if (full.length <= MAX_TOOL_NAME) return full
  return `${full.slice(0, MAX_TOOL_NAME - 9)}_${hash(`${server}\u0000${tool}`)}`
}

/**
 * Unique names for `entries` (server and tool pairs, in a stable order): a name already taken gets
 * `_2`, `_3`, ... appended (cut to stay within {@link MAX_TOOL_NAME}).
 *
 * @since 0.1.0
 * @category constructors
 */
export const uniqueToolNames = (
  entries: ReadonlyArray<{ readonly server: string; readonly tool: string }>,
  taken: ReadonlySet<string> = new Set()
): ReadonlyArray<string> => {
  const used = new Set(taken)
  return entries.map(({ server, tool }) => {
    const base = toolName(server, tool)
    let name = base
    for (let n = 2; used.has(name); n++) {
      const suffix = `_${n}`
      name = `${base.slice(0, MAX_TOOL_NAME - suffix.length)}${suffix}`
    }
    used.add(name)
    return name
  })
}

/**
 * Whether `name` is an MCP tool's or prompt command's name.
 *
 * @since 0.1.0
 * @category predicates
 */
export const isMcpName = (name: string): boolean => name.startsWith(PREFIX)
