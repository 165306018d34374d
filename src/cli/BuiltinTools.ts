/**
 * The chat's built-in tools: the coding tools (`Read`, `Write`, `Edit`, `Glob`, `Grep`, `Bash`,
 * see `CodingTools`) confined to the working directory and the `--add-dir` directories, `clock`,
 * and `wait`, which keeps a turn running for a while (so steering a running turn can be tried out).
 *
 * @since 0.1.0
 */
import { DateTime, Duration, Effect, Schema } from "effect"
import * as CodingTools from "../layers/CodingTools.js"
import type { ToolDefinition } from "../services/Tools.js"
import { Tool } from "../services/Tools.js"

/**
 * The names of the built-in tools, in the order the model sees them.
 *
 * @since 0.1.0
 * @category constants
 */
export const NAMES: ReadonlyArray<string> = [...CodingTools.NAMES, "clock", "wait"]

/**
 * The longest wait the `wait` tool performs, in milliseconds; a longer request is cut to it.
 *
 * @since 0.1.0
 * @category constants
 */
export const MAX_WAIT_MS = 10_000

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
      return Effect.succeed({
        content: `cannot wait ${ms} ms: ms must be a number from 0 to ${MAX_WAIT_MS}`,
        isError: true
      })
    }
    const waited = Math.min(Math.round(ms), MAX_WAIT_MS)
    return Effect.as(
      Effect.sleep(Duration.millis(waited)),
      waited < ms ? `waited ${waited} ms (the longest wait; ${ms} ms were asked for)` : `waited ${waited} ms`
    )
  }
})

/**
 * The `clock` tool: the current date and time.
 *
 * @since 0.1.0
 * @category constructors
 */
export const clock = Tool.make("clock", {
  description: "The current date and time (UTC, ISO 8601).",
  parameters: Schema.Struct({}),
  mode: "parallel",
  execute: () => Effect.map(DateTime.now, DateTime.formatIso)
})

/**
 * The built-in tools over `root` and the added directories; `history` lets a reopened session's
 * coding tools remember the files it read before (see `CodingTools`).
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (
  root: string,
  addDirs: ReadonlyArray<string> = [],
  history?: CodingTools.CodingToolsOptions["history"]
): Effect.Effect<ReadonlyArray<ToolDefinition<any>>> =>
  Effect.map(
    CodingTools.make({ cwd: root, addDirs, ...(history === undefined ? {} : { history }) }),
    (coding) => [...coding, clock, wait]
  )
