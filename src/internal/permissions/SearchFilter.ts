/**
 * A `Read` deny rule also hides the file from the searches: `Glob` and `Grep` are checked on the
 * path they search before they run, and what they found is filtered after, so a search of the whole
 * project returns neither the path nor a line of a file the rules deny reading (`Read(./.env)`).
 * The filter reads the coding tools' output (absolute paths first on each line) and their
 * `meta.toolResponse`, and rewrites both.
 *
 * @since 0.1.0
 */
import type { Json } from "../../domain/Json.js"
import type { NormalizedToolOutput } from "../../domain/Tool.js"

const isRecord = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value)

/** The tools whose results this filter rewrites. */
export const SEARCH_TOOLS: ReadonlyArray<string> = ["Glob", "Grep"]

/**
 * `output` of a `Glob` or `Grep` call without the files `denied` names; the output unchanged when
 * nothing is denied (or it is not a coding tool's search result).
 *
 * @since 0.1.0
 * @category combinators
 */
export const filterSearch = (
  tool: string,
  output: NormalizedToolOutput,
  denied: (file: string) => boolean
): NormalizedToolOutput => {
  const meta = isRecord(output.meta) ? output.meta : undefined
  const response = meta !== undefined && isRecord(meta["toolResponse"]) ? meta["toolResponse"] : undefined
  if (response === undefined || output.isError || !SEARCH_TOOLS.includes(tool)) return output
  const text = output.content.map((b) => (b.type === "text" ? b.text : "")).join("\n")
  const lines = text.split("\n")
  const named = Array.isArray(response["filenames"])
    ? response["filenames"].filter((f): f is string => typeof f === "string")
    : []
  const mode = tool === "Glob"
    ? "files"
    : typeof response["mode"] === "string"
    ? response["mode"]
    : "files_with_matches"
  // Whole-path lines (Glob, files_with_matches) are checked directly; other lines by their file's prefix.
  const hidden = new Set<string>()
  const candidates = mode === "files" || mode === "files_with_matches"
    ? lines.filter((l) => l.startsWith("/"))
    : mode === "count"
    ? lines.filter((l) => l.startsWith("/")).map((l) => l.slice(0, l.lastIndexOf(":")))
    : named
  for (const file of candidates) if (denied(file)) hidden.add(file)
  if (hidden.size === 0) return output
  const keepLine = (line: string): boolean => {
    if (!line.startsWith("/")) return true
    if (mode === "files" || mode === "files_with_matches") return !hidden.has(line)
    if (mode === "count") return !hidden.has(line.slice(0, line.lastIndexOf(":")))
    for (const file of hidden) if (line.startsWith(`${file}:`) || line.startsWith(`${file}-`)) return false
    return true
  }
  let kept = lines.filter(keepLine)
  // Content mode: no context separator left leading, trailing or doubled.
  kept = kept.filter((line, i) => line !== "--" || (i > 0 && kept[i - 1] !== "--" && i < kept.length - 1))
  const results = kept.filter((l) => l.startsWith("/"))
  const filenames = named.filter((f) => !hidden.has(f))
  let content: string
  if (results.length === 0) {
    content = [tool === "Glob" ? "No files found" : "No matches found", ...kept.filter((l) => l.startsWith("["))]
      .join("\n")
  } else if (mode === "files_with_matches") {
    content = [
      `Found ${results.length} file${results.length === 1 ? "" : "s"}`,
      ...kept.filter((l) => !/^Found \d+ files?$/.test(l))
    ]
      .join("\n")
  } else {
    content = kept.join("\n")
  }
  const note = `[${hidden.size} file${hidden.size === 1 ? "" : "s"} hidden by a Read deny rule]`
  return {
    ...output,
    content: [{ type: "text", text: `${content}\n${note}` }],
    meta: {
      ...meta,
      toolResponse: {
        ...response,
        filenames,
        numFiles: mode === "count" || mode === "content" ? filenames.length : results.length,
        ...(mode === "content" ? { numLines: results.length } : {})
      }
    } as Json
  }
}
