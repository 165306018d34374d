/**
 * `Edit`: replaces `old_string` with `new_string` in a file this session read (unchanged since).
 * `old_string` must occur exactly once unless `replace_all` is set; the file must be a text file
 * inside the roots, regular, with one hard link.
 *
 * @since 0.1.0
 */
import { Effect, Schema } from "effect"
import type { ToolDefinition } from "../../domain/Tool.js"
import { refuse } from "./Confine.js"
import { MAX_FILE_BYTES } from "./ReadTool.js"
import { looksBinary, readRegularFile, writeRegularFile } from "./SafeFile.js"
import type { Workspace } from "./Workspace.js"
import { defineTool } from "./Workspace.js"

const Parameters = Schema.Struct({
  file_path: Schema.String.annotations({ description: "The absolute path of the file to modify" }),
  old_string: Schema.String.annotations({
    description: "The text to replace (exactly as in the file, indentation included)"
  }),
  new_string: Schema.String.annotations({ description: "The text to replace it with (must differ from old_string)" }),
  replace_all: Schema.optional(
    Schema.Boolean.annotations({ description: "Replace every occurrence of old_string (default false)" })
  )
})

/** The number of non-overlapping occurrences of `needle` in `text`. */
const occurrences = (text: string, needle: string): number => {
  let count = 0
  for (let at = text.indexOf(needle); at >= 0; at = text.indexOf(needle, at + needle.length)) count++
  return count
}

/**
 * The `Edit` tool over `workspace`.
 *
 * @since 0.1.0
 * @category constructors
 */
export const makeEdit = (workspace: Workspace): ToolDefinition<typeof Parameters> =>
  defineTool({
    name: "Edit",
    description: "Performs an exact string replacement in a file. The file must have been read with Read in this " +
      "session first. old_string must match the file's text exactly (without the line-number prefix Read shows) " +
      "and occur exactly once, unless replace_all is true; give more surrounding context to make it unique. " +
      "file_path should be an absolute path inside the working directory or an added directory.",
    parameters: Parameters,
    mode: "exclusive",
    execute: ({ file_path, new_string, old_string, replace_all }, ctx) =>
      Effect.gen(function*() {
        if (old_string === new_string) {
          return refuse("refused: old_string and new_string are the same; nothing would change")
        }
        if (old_string === "") {
          return refuse("refused: old_string is empty; use Write to create a file or replace all of it")
        }
        const real = yield* workspace.confinement.existing(file_path)
        const { bytes, stats } = yield* readRegularFile(real, file_path, MAX_FILE_BYTES, { name: "Edit", list: "Glob" })
        const refusal = yield* workspace.record.refusal(ctx.sessionId, real, stats, file_path)
        if (refusal !== undefined) return refuse(refusal)
        if (bytes.length > MAX_FILE_BYTES) {
          return refuse(`refused: ${file_path} is larger than ${MAX_FILE_BYTES} bytes; Edit changes smaller files only`)
        }
        if (looksBinary(bytes)) return refuse(`refused: ${file_path} is a binary file; Edit changes only text files`)
        const text = new TextDecoder("utf-8").decode(bytes)
        const count = occurrences(text, old_string)
        if (count === 0) {
          return refuse(`old_string was not found in ${file_path}; it must match the file's text exactly`)
        }
        if (count > 1 && replace_all !== true) {
          return refuse(
            `old_string occurs ${count} times in ${file_path}; give more context to make it unique, or set replace_all to replace every occurrence`
          )
        }
        const updated = replace_all === true
          ? text.split(old_string).join(new_string)
          : text.replace(old_string, () => new_string)
        const written = yield* writeRegularFile(real, file_path, updated, "Edit")
        const seen = workspace.record.saw(ctx.sessionId, real, written)
        return {
          content: replace_all === true && count > 1
            ? `The file ${file_path} has been updated: ${count} occurrences replaced.`
            : `The file ${file_path} has been updated.`,
          meta: { toolResponse: { replaceAll: replace_all === true, userModified: false }, seen }
        }
      }).pipe(Effect.merge)
  })
