/**
 * `Read`: a text file's lines, numbered as `cat -n` numbers them (`     1\tfirst line`), from
 * `offset` (a 1-based line number) for `limit` lines (default {@link DEFAULT_LINES}). Long lines and
 * long outputs are cut with a note; binary files are refused; only regular files with one hard
 * link, inside the roots, are read.
 *
 * @since 0.1.0
 */
import { Effect, Schema } from "effect"
import type { ToolDefinition } from "../../domain/Tool.js"
import { refuse } from "./Confine.js"
import { looksBinary, readRegularFile, utf8Boundary } from "./SafeFile.js"
import type { Workspace } from "./Workspace.js"
import { defineTool } from "./Workspace.js"

/**
 * The lines `Read` shows when no `limit` is given.
 *
 * @since 0.1.0
 * @category constants
 */
export const DEFAULT_LINES = 2000

/**
 * The longest line `Read` shows whole; a longer one is cut with a note.
 *
 * @since 0.1.0
 * @category constants
 */
export const MAX_LINE_CHARS = 2000

/**
 * The most characters of numbered lines one `Read` returns.
 *
 * @since 0.1.0
 * @category constants
 */
export const MAX_OUTPUT_CHARS = 60_000

/**
 * The most bytes of a file `Read` looks at; lines beyond them are not reachable by `offset`.
 *
 * @since 0.1.0
 * @category constants
 */
export const MAX_FILE_BYTES = 8 * 1024 * 1024

const Parameters = Schema.Struct({
  file_path: Schema.String.annotations({ description: "The absolute path of the file to read" }),
  offset: Schema.optional(
    Schema.Number.annotations({
      description: "The line number to start reading from (1-based); only for files too long to read at once"
    })
  ),
  limit: Schema.optional(
    Schema.Number.annotations({ description: "The number of lines to read; only for files too long to read at once" })
  )
})

/**
 * The numbered lines of `text` from line `offset` (1-based), at most `limit` of them, each cut at
 * {@link MAX_LINE_CHARS}, the whole cut at {@link MAX_OUTPUT_CHARS}.
 *
 * @since 0.1.0
 * @category formatting
 */
export const numberLines = (text: string, offset: number, limit: number): string => {
  const lines = text.split("\n")
  if (lines.length > 1 && lines[lines.length - 1] === "") lines.pop()
  const first = Math.max(1, Math.floor(offset))
  if (first > lines.length) {
    return `[the file has ${lines.length} line${lines.length === 1 ? "" : "s"}; offset ${first} is past its end]`
  }
  const last = Math.min(lines.length, first - 1 + Math.max(1, Math.floor(limit)))
  const out: Array<string> = []
  let length = 0
  for (let n = first; n <= last; n++) {
    const line = lines[n - 1]!.replace(/\r$/, "")
    const shown = line.length > MAX_LINE_CHARS
      ? `${line.slice(0, MAX_LINE_CHARS)} [line cut: ${line.length} characters]`
      : line
    const numbered = `${String(n).padStart(6)}\t${shown}`
    if (length + numbered.length + 1 > MAX_OUTPUT_CHARS && out.length > 0) {
      out.push(`[output cut after line ${n - 1}: Read again with offset ${n} to see more]`)
      return out.join("\n")
    }
    out.push(numbered)
    length += numbered.length + 1
  }
  if (last < lines.length) {
    out.push(`[lines ${first}-${last} of ${lines.length} shown: Read again with offset ${last + 1} to see more]`)
  }
  return out.join("\n")
}

/** The number of lines of `text` (a last line without its newline counts). */
const lineCount = (text: string): number => {
  const lines = text.split("\n")
  return lines.length > 1 && lines[lines.length - 1] === "" ? lines.length - 1 : lines.length
}

/**
 * The `Read` tool over `workspace`.
 *
 * @since 0.1.0
 * @category constructors
 */
export const makeRead = (workspace: Workspace): ToolDefinition<typeof Parameters> =>
  defineTool({
    name: "Read",
    description:
      "Reads a text file from the local filesystem. file_path should be an absolute path (a relative one is " +
      "resolved against the working directory). Lines are returned numbered like `cat -n` (number, tab, text), " +
      `up to ${DEFAULT_LINES} lines from the start by default; offset and limit read a part of a long file. ` +
      `Lines longer than ${MAX_LINE_CHARS} characters are cut. Binary files are refused. ` +
      "Only files inside the working directory and the added directories can be read.",
    parameters: Parameters,
    mode: "parallel",
    execute: ({ file_path, limit, offset }, ctx) =>
      Effect.gen(function*() {
        const real = yield* workspace.confinement.existing(file_path)
        const { bytes, stats } = yield* readRegularFile(real, file_path, MAX_FILE_BYTES, {
          name: "Read",
          list: "Glob or Bash ls"
        })
        if (looksBinary(bytes)) {
          return refuse(`refused: ${file_path} is a binary file (${stats.size} bytes); Read shows only text files`)
        }
        const seen = workspace.record.saw(ctx.sessionId, real, stats)
        const whole = bytes.length <= MAX_FILE_BYTES
        const end = whole ? bytes.length : utf8Boundary(bytes, MAX_FILE_BYTES)
        const text = new TextDecoder("utf-8").decode(bytes.subarray(0, end))
        const startLine = Math.max(1, Math.floor(offset ?? 1))
        const totalLines = bytes.length === 0 ? 0 : lineCount(text)
        // Claude Code's Read response; its file's path and text are filled in from the input and the lines.
        const meta = {
          toolResponse: {
            type: "text",
            file: {
              numLines: Math.max(
                0,
                Math.min(Math.max(1, Math.floor(limit ?? DEFAULT_LINES)), totalLines - startLine + 1)
              ),
              startLine,
              totalLines
            }
          },
          seen
        }
        if (bytes.length === 0) return { content: `[${file_path} is empty]`, meta }
        const numbered = numberLines(text, startLine, limit ?? DEFAULT_LINES)
        return {
          content: whole
            ? numbered
            : `${numbered}\n[only the first ${end} of ${stats.size} bytes of ${file_path} are read; use Grep to find text beyond them]`,
          meta
        }
      }).pipe(Effect.merge)
  })
