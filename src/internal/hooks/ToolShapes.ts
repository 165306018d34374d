/**
 * A tool call as Claude Code's hooks see it: `tool_input` with absolute paths (the model may give
 * `Read` a relative `file_path`; Claude Code's hooks always see an absolute one) and `tool_response`
 * in the shape Claude Code documents for each of its tools. The coding tools put the small fields of
 * that shape on their result's `meta` (`toolResponse`); the large ones (a file's text, a command's
 * output, the matching lines) are read back from the result's text and the input here, so the log
 * does not hold them twice.
 *
 * @since 0.1.0
 */
import * as path from "node:path"
import type { NormalizedToolOutput } from "../../domain/Tool.js"

const isRecord = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value)

/** The input fields that name a path, per tool. */
const PATH_FIELDS: Readonly<Record<string, string>> = {
  Read: "file_path",
  Write: "file_path",
  Edit: "file_path",
  MultiEdit: "file_path",
  NotebookEdit: "notebook_path",
  NotebookRead: "notebook_path",
  Glob: "path",
  Grep: "path",
  LS: "path"
}

/**
 * `input` as Claude Code's hooks see it: a relative path of a file tool made absolute against `cwd`.
 *
 * @since 0.1.0
 * @category mapping
 */
export const hookToolInput = (tool: string, input: unknown, cwd: string): unknown => {
  const field = PATH_FIELDS[tool]
  if (field === undefined || !isRecord(input)) return input
  const value = input[field]
  if (typeof value !== "string" || value === "" || path.isAbsolute(value)) return input
  return { ...input, [field]: path.resolve(cwd, value) }
}

/** The text blocks of an output, joined by newlines. */
const textOf = (output: NormalizedToolOutput): string =>
  output.content.map((b) => (b.type === "text" ? b.text : "[image]")).join("\n")

/** The lines of `Read`'s output without their numbers (its notes, in brackets, left out). */
const unnumbered = (text: string): string => {
  const lines: Array<string> = []
  for (const line of text.split("\n")) {
    const match = /^ *\d+\t(.*)$/s.exec(line)
    if (match !== null) lines.push(match[1]!)
  }
  return lines.join("\n")
}

/** The result lines of `Grep`'s output: neither its `Found N files` head nor its bracketed notes. */
const resultLines = (text: string): string =>
  text.split("\n").filter((line) =>
    !line.startsWith("[") && !/^Found \d+ files?$/.test(line) && line !== "No matches found"
  )
    .join("\n")

const str = (value: unknown): string => (typeof value === "string" ? value : "")

/**
 * The `tool_response` of a finished call, in Claude Code's shape for its tools (`Read`: `{type,
 * file: {filePath, content, numLines, startLine, totalLines}}`; `Write`: `{type: "create" |
 * "update", filePath, content, ...}`; `Edit`: `{filePath, oldString, newString, replaceAll, ...}`;
 * `Bash`: `{stdout, stderr, interrupted, isImage}`; `Glob`: `{filenames, numFiles, durationMs,
 * truncated}`; `Grep`: `{mode, numFiles, filenames, content, numLines}`). Another tool's response
 * (or one without the coding tools' `meta`) is `{content, is_error}`.
 *
 * @since 0.1.0
 * @category mapping
 */
export const hookToolResponse = (tool: string, input: unknown, output: NormalizedToolOutput): unknown => {
  const text = textOf(output)
  const meta = isRecord(output.meta) ? output.meta : {}
  const shape = meta["toolResponse"]
  if (!isRecord(shape)) return { content: text, is_error: output.isError }
  const args = isRecord(input) ? input : {}
  switch (tool) {
    case "Read": {
      const file = isRecord(shape["file"]) ? shape["file"] : {}
      return { ...shape, file: { filePath: str(args["file_path"]), content: unnumbered(text), ...file } }
    }
    case "Write":
      return { ...shape, filePath: str(args["file_path"]), content: str(args["content"]) }
    case "Edit":
      return {
        filePath: str(args["file_path"]),
        oldString: str(args["old_string"]),
        newString: str(args["new_string"]),
        replaceAll: args["replace_all"] === true,
        ...shape
      }
    case "Bash": {
      const chars = typeof meta["outputChars"] === "number" ? meta["outputChars"] : text.length
      return { stdout: text.slice(0, chars), stderr: "", interrupted: false, isImage: false, ...shape }
    }
    case "Grep":
      return shape["mode"] === "files_with_matches" ? shape : { ...shape, content: resultLines(text) }
    default:
      return shape
  }
}
