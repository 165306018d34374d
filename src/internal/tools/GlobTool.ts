/**
 * `Glob`: the files under `path` (default: the working directory) whose path matches `pattern`
 * (gitignore-style globs, as ripgrep reads them: `**\/*.ts`, `src/**\/*.{ts,tsx}`), newest first,
 * at most {@link MAX_FILES}.
 *
 * @since 0.1.0
 */
import { Clock, Effect, Schema } from "effect"
import type { ToolDefinition } from "../../domain/Tool.js"
import { ripgrep } from "./Ripgrep.js"
import type { Workspace } from "./Workspace.js"
import { defineTool } from "./Workspace.js"

/**
 * The most paths one `Glob` returns.
 *
 * @since 0.1.0
 * @category constants
 */
export const MAX_FILES = 100

const Parameters = Schema.Struct({
  pattern: Schema.String.annotations({
    description: "The glob pattern to match file paths against, e.g. \"**/*.ts\" or \"src/**/*.tsx\""
  }),
  path: Schema.optional(
    Schema.String.annotations({ description: "The directory to search in (default: the working directory)" })
  )
})

/**
 * The `Glob` tool over `workspace`.
 *
 * @since 0.1.0
 * @category constructors
 */
export const makeGlob = (workspace: Workspace): ToolDefinition<typeof Parameters> =>
  defineTool({
    name: "Glob",
    description:
      "Fast file pattern matching: finds files whose path (relative to the searched directory) matches a glob " +
      "pattern such as \"**/*.js\" or \"src/**/*.ts\". Returns absolute paths, most recently modified first, " +
      `at most ${MAX_FILES}. Searches the working directory unless path names another directory inside it or an added directory.`,
    parameters: Parameters,
    mode: "parallel",
    execute: ({ path: requested, pattern }) =>
      Effect.gen(function*() {
        const root = yield* workspace.confinement.existing(requested ?? ".")
        const started = yield* Clock.currentTimeMillis
        const files: Array<string> = []
        let more = false
        yield* ripgrep(workspace, "Glob", ["--files", "--sortr", "modified", "--glob", pattern, "--", root], (line) => {
          if (line === "") return true
          if (files.length === MAX_FILES) {
            more = true
            return false
          }
          files.push(line)
          return true
        })
        const durationMs = (yield* Clock.currentTimeMillis) - started
        // Claude Code's Glob response.
        const meta = { toolResponse: { filenames: files, numFiles: files.length, durationMs, truncated: more } }
        if (files.length === 0) return { content: "No files found", meta }
        return {
          content: more
            ? `${
              files.join("\n")
            }\n(Results are truncated to the ${MAX_FILES} newest: use a more specific path or pattern.)`
            : files.join("\n"),
          meta
        }
      }).pipe(Effect.merge)
  })
