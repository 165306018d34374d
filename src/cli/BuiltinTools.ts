/**
 * The chat's built-in tools: `read_file` and `list_dir`, confined to one root directory (the
 * working directory), `clock`, and `wait`, which keeps a turn running for a while (so steering a
 * running turn can be tried out). A path that leaves the root, directly or through a symbolic
 * link, is refused with an error result that says so; nothing outside the root is read.
 *
 * @since 0.1.0
 */
import { FileSystem, Path } from "@effect/platform"
import { DateTime, Duration, Effect, Schema } from "effect"
import type { ToolDefinition, ToolOutput } from "../services/Tools.js"
import { Tool } from "../services/Tools.js"
import { describeFileError } from "./FileErrors.js"

/**
 * The names of the built-in tools.
 *
 * @since 0.1.0
 * @category constants
 */
export const NAMES: ReadonlyArray<string> = ["clock", "list_dir", "read_file", "wait"]

/**
 * The longest wait the `wait` tool performs, in milliseconds; a longer request is cut to it.
 *
 * @since 0.1.0
 * @category constants
 */
export const MAX_WAIT_MS = 10_000

/** Files longer than this are cut, with a note saying so. */
const MAX_FILE_CHARS = 64 * 1024

const refuse = (content: string): ToolOutput => ({ content, isError: true })

/**
 * The `wait` tool: sleeps `ms` milliseconds (a number or a numeric string, at most
 * {@link MAX_WAIT_MS}) on the clock, so a cancel interrupts it.
 *
 * @since 0.1.0
 * @category constructors
 */
export const wait = Tool.make("wait", {
  description: `Waits the given number of milliseconds (at most ${MAX_WAIT_MS}), then returns. ` +
    "Use it only when asked to wait; it does nothing else.",
  parameters: Schema.Struct({ ms: Schema.Union(Schema.Number, Schema.NumberFromString) }),
  mode: "parallel",
  execute: ({ ms }) => {
    if (!Number.isFinite(ms) || ms < 0) {
      return Effect.succeed(refuse(`cannot wait ${ms} ms: ms must be a number from 0 to ${MAX_WAIT_MS}`))
    }
    const waited = Math.min(Math.round(ms), MAX_WAIT_MS)
    return Effect.as(
      Effect.sleep(Duration.millis(waited)),
      waited < ms ? `waited ${waited} ms (the longest wait; ${ms} ms were asked for)` : `waited ${waited} ms`
    )
  }
})

/**
 * The built-in tools over `root`.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (
  root: string
): Effect.Effect<ReadonlyArray<ToolDefinition<any>>, never, FileSystem.FileSystem | Path.Path> =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    const realRoot = yield* fs.realPath(root).pipe(Effect.orElseSucceed(() => path.resolve(root)))

    const inside = (candidate: string): boolean => {
      const relative = path.relative(realRoot, candidate)
      return relative === "" || (!path.isAbsolute(relative) && relative !== ".." && !relative.startsWith(`..${path.sep}`))
    }

    /** The real path of `requested` (relative to the root), or the refusal to return instead. */
    const confine = (requested: string): Effect.Effect<string, ToolOutput> =>
      Effect.gen(function*() {
        const resolved = path.resolve(realRoot, requested)
        const outside = refuse(`refused: ${requested} is outside the working directory (${realRoot}); only paths inside it can be read`)
        if (!inside(resolved)) return yield* Effect.fail(outside)
        const real = yield* fs.realPath(resolved).pipe(
          Effect.mapError((error) => refuse(`cannot open ${requested}: ${describeFileError(error)}`))
        )
        // A symbolic link inside the root may point outside it.
        if (!inside(real)) return yield* Effect.fail(outside)
        return real
      })

    const readFile = Tool.make("read_file", {
      description: "Reads a UTF-8 text file inside the working directory.",
      parameters: Schema.Struct({ path: Schema.String }),
      mode: "parallel",
      execute: ({ path: requested }) =>
        Effect.gen(function*() {
          const real = yield* confine(requested)
          const info = yield* fs.stat(real).pipe(Effect.mapError((error) => refuse(`cannot stat ${requested}: ${describeFileError(error)}`)))
          if (info.type === "Directory") return yield* Effect.fail(refuse(`${requested} is a directory; use list_dir`))
          const text = yield* fs.readFileString(real).pipe(
            Effect.mapError((error) => refuse(`cannot read ${requested}: ${describeFileError(error)}`))
          )
          return text.length > MAX_FILE_CHARS
            ? `${text.slice(0, MAX_FILE_CHARS)}\n[cut: ${requested} has ${text.length} characters; the first ${MAX_FILE_CHARS} are shown]`
            : text
        }).pipe(Effect.merge)
    })

    const listDir = Tool.make("list_dir", {
      description: "Lists a directory inside the working directory (default: the working directory itself).",
      parameters: Schema.Struct({ path: Schema.optional(Schema.String) }),
      mode: "parallel",
      execute: ({ path: requested }) =>
        Effect.gen(function*() {
          const shown = requested ?? "."
          const real = yield* confine(shown)
          const names = yield* fs.readDirectory(real).pipe(
            Effect.mapError((error) => refuse(`cannot list ${shown}: ${describeFileError(error)}`))
          )
          const entries = yield* Effect.forEach([...names].sort(), (name) =>
            fs.stat(path.join(real, name)).pipe(
              Effect.map((info) => (info.type === "Directory" ? `${name}/` : name)),
              Effect.orElseSucceed(() => name)
            ))
          return entries.length === 0 ? `${shown} is empty` : entries.join("\n")
        }).pipe(Effect.merge)
    })

    const clock = Tool.make("clock", {
      description: "The current date and time (UTC, ISO 8601).",
      parameters: Schema.Struct({}),
      mode: "parallel",
      execute: () => Effect.map(DateTime.now, DateTime.formatIso)
    })

    return [clock, listDir, readFile, wait]
  })
