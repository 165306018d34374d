/**
 * `Grep`: searches file contents with ripgrep (Debian's `ripgrep` package), in Claude Code's shape:
 * `pattern` (a regular expression), `path`, `glob`, `type`, `output_mode` (`files_with_matches`,
 * the default, newest first; `content`, the matching lines with `-n`, `-A`/`-B`/`-C` context;
 * `count`), `-i`, `multiline`, `head_limit`. Files with several hard links are left out (their
 * other names may be outside the roots); symbolic links are not followed.
 *
 * ripgrep rather than a JavaScript search library: it is the search Claude Code itself runs, so its
 * regular expression dialect, glob and type filters and ignore rules are the ones models expect,
 * and it streams: a search over a large tree keeps only what is shown.
 *
 * @since 0.1.0
 */
import { Effect, Schema } from "effect"
import * as NodeFs from "node:fs"
import type { ToolDefinition } from "../../domain/Tool.js"
import { ripgrep } from "./Ripgrep.js"
import type { Workspace } from "./Workspace.js"
import { defineTool } from "./Workspace.js"

/**
 * The most characters of results one `Grep` returns.
 *
 * @since 0.1.0
 * @category constants
 */
export const MAX_OUTPUT_CHARS = 30_000

/**
 * The most entries (lines, files or counts) one `Grep` returns when `head_limit` names none.
 *
 * @since 0.1.0
 * @category constants
 */
export const DEFAULT_HEAD_LIMIT = 250

const Count = Schema.optional(Schema.Number)

const Parameters = Schema.Struct({
  pattern: Schema.String.annotations({ description: "The regular expression to search for (ripgrep syntax)" }),
  path: Schema.optional(
    Schema.String.annotations({ description: "The file or directory to search in (default: the working directory)" })
  ),
  glob: Schema.optional(
    Schema.String.annotations({
      description: "Only files whose path matches this glob, e.g. \"*.js\" or \"*.{ts,tsx}\""
    })
  ),
  type: Schema.optional(
    Schema.String.annotations({ description: "Only files of this ripgrep type, e.g. js, py, rust" })
  ),
  output_mode: Schema.optional(
    Schema.Literal("content", "files_with_matches", "count").annotations({
      description:
        "content: matching lines; files_with_matches: the paths of matching files (default); count: matches per file"
    })
  ),
  "-i": Schema.optional(Schema.Boolean.annotations({ description: "Case-insensitive search" })),
  "-n": Schema.optional(Schema.Boolean.annotations({ description: "Show line numbers (content mode; default true)" })),
  "-A": Count.annotations({ description: "Lines of context after each match (content mode)" }),
  "-B": Count.annotations({ description: "Lines of context before each match (content mode)" }),
  "-C": Count.annotations({ description: "Lines of context before and after each match (content mode)" }),
  multiline: Schema.optional(
    Schema.Boolean.annotations({ description: "Let patterns span lines; . matches newlines" })
  ),
  head_limit: Count.annotations({ description: `Show only the first N entries (default ${DEFAULT_HEAD_LIMIT})` })
})

type Params = Schema.Schema.Type<typeof Parameters>

/**
 * The longest matching line `Grep` shows whole in content mode; a longer one is cut with a note.
 *
 * @since 0.1.0
 * @category constants
 */
export const MAX_LINE_CHARS = 2000

interface RipgrepMessage {
  readonly type: string
  readonly data: {
    readonly path?: { readonly text?: string; readonly bytes?: string }
    readonly lines?: { readonly text?: string; readonly bytes?: string }
    readonly line_number?: number | null
  }
}

/** One line of ripgrep's JSON output; `undefined` for a line that is not one. */
const parseMessage = (line: string): RipgrepMessage | undefined => {
  try {
    const parsed = JSON.parse(line) as RipgrepMessage
    return typeof parsed === "object" && parsed !== null && typeof parsed.data === "object" ? parsed : undefined
  } catch {
    return undefined
  }
}

/** The text of a ripgrep JSON `text` or `bytes` field. */
const textOf = (field: { readonly text?: string; readonly bytes?: string } | undefined): string =>
  field?.text ?? (field?.bytes === undefined ? "" : Buffer.from(field.bytes, "base64").toString("utf8"))

/** Whether `file` has more than one hard link (a file that cannot be checked counts as linked). */
const isLinked = (file: string): boolean => {
  try {
    return NodeFs.lstatSync(file).nlink > 1
  } catch {
    return true
  }
}

const contextCount = (value: number | undefined): number | undefined =>
  value === undefined || !Number.isFinite(value) || value < 0 ? undefined : Math.floor(value)

/** ripgrep's arguments for `params`, searching `root`. */
const argsOf = (params: Params, root: string): Array<string> => {
  const mode = params.output_mode ?? "files_with_matches"
  const args: Array<string> = []
  if (params["-i"] === true) args.push("--ignore-case")
  if (params.multiline === true) args.push("--multiline", "--multiline-dotall")
  if (params.glob !== undefined) args.push("--glob", params.glob)
  if (params.type !== undefined) args.push("--type", params.type)
  if (mode === "files_with_matches") args.push("--files-with-matches", "--sortr", "modified")
  else if (mode === "count") args.push("--count", "--with-filename")
  else {
    args.push("--json")
    const after = contextCount(params["-A"] ?? params["-C"])
    const before = contextCount(params["-B"] ?? params["-C"])
    if (after !== undefined) args.push("--after-context", String(after))
    if (before !== undefined) args.push("--before-context", String(before))
  }
  args.push("--regexp", params.pattern, "--", root)
  return args
}

/**
 * Claude Code's Grep response without its `content` (the hook bridge reads that from the text).
 *
 * @since 0.1.0
 * @category formatting
 */
export const grepResponse = (
  mode: "content" | "files_with_matches" | "count",
  entries: ReadonlyArray<string>,
  files: ReadonlySet<string>
) =>
  mode === "files_with_matches"
    ? { mode, filenames: [...entries], numFiles: entries.length }
    : mode === "count"
    ? {
      mode,
      filenames: [...files],
      numFiles: files.size,
      numMatches: entries.reduce((sum, line) => sum + (Number(line.slice(line.lastIndexOf(":") + 1)) || 0), 0)
    }
    : { mode, filenames: [...files], numFiles: files.size, numLines: entries.filter((e) => e !== "--").length }

/**
 * The `Grep` tool over `workspace`.
 *
 * @since 0.1.0
 * @category constructors
 */
export const makeGrep = (workspace: Workspace): ToolDefinition<typeof Parameters> =>
  defineTool({
    name: "Grep",
    description: "A content search built on ripgrep. Supports full regular expressions (\"log.*Error\", " +
      "\"function\\s+\\w+\"); filter files with glob (\"*.js\") or type (\"py\"). output_mode \"content\" shows " +
      "matching lines (with -n line numbers, -A/-B/-C context), \"files_with_matches\" (the default) the matching " +
      "files, newest first, \"count\" the matches per file. Searches the working directory unless path names " +
      "a file or directory inside it or an added directory.",
    parameters: Parameters,
    mode: "parallel",
    execute: (params) =>
      Effect.gen(function*() {
        const root = yield* workspace.confinement.existing(params.path ?? ".")
        const mode = params.output_mode ?? "files_with_matches"
        const headLimit = params.head_limit !== undefined && params.head_limit > 0
          ? Math.floor(params.head_limit)
          : DEFAULT_HEAD_LIMIT
        const numbered = params["-n"] !== false
        const entries: Array<string> = []
        const skipped = new Set<string>()
        let length = 0
        let cut: string | undefined
        const keep = (entry: string): boolean => {
          if (entries.length >= headLimit) {
            cut = `[results stop at head_limit ${headLimit}]`
            return false
          }
          if (length + entry.length + 1 > MAX_OUTPUT_CHARS) {
            cut =
              `[results cut at ${MAX_OUTPUT_CHARS} characters: narrow the search with path, glob or a more specific pattern]`
            return false
          }
          entries.push(entry)
          length += entry.length + 1
          return true
        }
        // Content mode: per file, the last line number shown, to mark gaps between context groups.
        let lastLine: { readonly file: string; readonly line: number } | undefined
        // The files the shown entries come from (content and count modes).
        const files = new Set<string>()
        const onLine = (line: string): boolean => {
          if (line === "") return true
          if (mode === "files_with_matches") {
            if (!isLinked(line)) return keep(line)
            skipped.add(line)
            return true
          }
          if (mode === "count") {
            const colon = line.lastIndexOf(":")
            const file = line.slice(0, colon)
            if (!isLinked(file)) {
              files.add(file)
              return keep(line)
            }
            skipped.add(file)
            return true
          }
          const message = parseMessage(line)
          if (message === undefined || message.type !== "match" && message.type !== "context") return true
          const file = textOf(message.data.path)
          if (skipped.has(file)) return true
          if (lastLine?.file !== file && isLinked(file)) {
            skipped.add(file)
            return true
          }
          const number = message.data.line_number ?? 0
          const gap = lastLine !== undefined && (lastLine.file !== file || number > lastLine.line + 1)
          if (
            gap && entries.length > 0 && (params["-A"] ?? params["-B"] ?? params["-C"]) !== undefined && !keep("--")
          ) return false
          lastLine = { file, line: number }
          files.add(file)
          const separator = message.type === "match" ? ":" : "-"
          const whole = textOf(message.data.lines).replace(/\r?\n$/, "")
          const text = whole.length > MAX_LINE_CHARS
            ? `${whole.slice(0, MAX_LINE_CHARS)} [line cut: ${whole.length} characters]`
            : whole
          return keep(numbered ? `${file}${separator}${number}${separator}${text}` : `${file}${separator}${text}`)
        }
        const result = yield* ripgrep(workspace, "Grep", argsOf(params, root), onLine)
        const notes = [
          ...(cut === undefined ? [] : [cut]),
          ...(result.droppedLines === 0
            ? []
            : [
              `[${result.droppedLines} result line${result.droppedLines === 1 ? "" : "s"} too long to show left out]`
            ]),
          ...(skipped.size === 0
            ? []
            : [`[${skipped.size} file${skipped.size === 1 ? "" : "s"} with several hard links left out]`])
        ]
        const meta = { toolResponse: grepResponse(mode, entries, files) }
        if (entries.length === 0) return { content: ["No matches found", ...notes].join("\n"), meta }
        const head = mode === "files_with_matches"
          ? [`Found ${entries.length} file${entries.length === 1 ? "" : "s"}`]
          : []
        return { content: [...head, ...entries, ...notes].join("\n"), meta }
      }).pipe(Effect.merge)
  })
