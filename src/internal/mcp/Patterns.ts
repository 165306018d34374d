/**
 * Allow and deny lists of MCP servers and tools: names, with `*` matching any run of characters.
 *
 * @since 0.1.0
 */

/** A pattern as a regular expression over the whole name. */
const compile = (pattern: string): RegExp =>
  new RegExp(`^${pattern.split("*").map((part) => part.replace(/[.+?^${}()|[\]\\]/g, "\\$&")).join(".*")}$`)

/**
 * Whether `name` passes the lists: not denied, and allowed when an allow list is given.
 *
 * @since 0.1.0
 * @category predicates
 */
export const permitted = (
  name: string,
  lists: { readonly allow?: ReadonlyArray<string> | undefined; readonly deny?: ReadonlyArray<string> | undefined }
): boolean => {
  if ((lists.deny ?? []).some((p) => compile(p).test(name))) return false
  return lists.allow === undefined || lists.allow.some((p) => compile(p).test(name))
}
