/**
 * `Write`: creates a file (and the directories above it) or replaces one with `content`. An
 * existing file is replaced only when this session read it and it has not changed since; the file
 * must be inside the roots, regular and have one hard link.
 *
 * @since 0.1.0
 */
import { Effect, Schema } from "effect"
import * as NodeFs from "node:fs/promises"
import * as path from "node:path"
import type { ToolDefinition } from "../../domain/Tool.js"
import { refuse } from "./Confine.js"
import { describeFileError } from "./FileErrors.js"
import { writeRegularFile } from "./SafeFile.js"
import type { Workspace } from "./Workspace.js"
import { defineTool } from "./Workspace.js"

const Parameters = Schema.Struct({
  file_path: Schema.String.annotations({
    description: "The absolute path of the file to write (it is created or replaced)"
  }),
  content: Schema.String.annotations({ description: "The content to write to the file" })
})

/**
 * Checks that `session` may replace the existing file `target` (it read it, unchanged since).
 *
 * @since 0.1.0
 * @category constructors
 */
export const checkSeen = (workspace: Workspace, session: string, target: string, shown: string) =>
  Effect.gen(function*() {
    const stats = yield* Effect.tryPromise({
      try: () => NodeFs.stat(target),
      catch: (error) => refuse(`cannot stat ${shown}: ${describeFileError(error)}`)
    })
    const refusal = yield* workspace.record.refusal(session, target, stats, shown)
    if (refusal !== undefined) return yield* Effect.fail(refuse(refusal))
  })

/**
 * The `Write` tool over `workspace`.
 *
 * @since 0.1.0
 * @category constructors
 */
export const makeWrite = (workspace: Workspace): ToolDefinition<typeof Parameters> =>
  defineTool({
    name: "Write",
    description: "Writes a file to the local filesystem, creating it (and its missing directories) or replacing it. " +
      "file_path should be an absolute path. An existing file must have been read with Read in this session first. " +
      "Prefer Edit for changing part of an existing file. Only paths inside the working directory and the added " +
      "directories can be written.",
    parameters: Parameters,
    mode: "exclusive",
    execute: ({ content, file_path }, ctx) =>
      Effect.gen(function*() {
        const { exists, target } = yield* workspace.confinement.writable(file_path)
        if (exists) yield* checkSeen(workspace, ctx.sessionId, target, file_path)
        else {
          yield* Effect.tryPromise({
            try: () => NodeFs.mkdir(path.dirname(target), { recursive: true }),
            catch: (error) => refuse(`cannot create the directory of ${file_path}: ${describeFileError(error)}`)
          })
        }
        const stats = yield* writeRegularFile(target, file_path, content, "Write")
        const seen = workspace.record.saw(ctx.sessionId, target, stats)
        const lines = content === "" ? 0 : content.split("\n").length - (content.endsWith("\n") ? 1 : 0)
        return {
          content: exists
            ? `The file ${file_path} has been updated (${lines} line${lines === 1 ? "" : "s"}).`
            : `File created successfully at: ${file_path} (${lines} line${lines === 1 ? "" : "s"})`,
          meta: { toolResponse: { type: exists ? "update" : "create" }, seen }
        }
      }).pipe(Effect.merge)
  })
