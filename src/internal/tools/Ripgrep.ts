/**
 * Running ripgrep for `Glob` and `Grep`: without a user configuration file, over hidden files but
 * not `.git`, never following symbolic links (so a search stays inside its confined root).
 *
 * @since 0.1.0
 */
import { Duration, Effect } from "effect"
import type { ToolOutput } from "../../domain/Tool.js"
import { refuse } from "./Confine.js"
import type { ProcessResult } from "./Process.js"
import { runProcess } from "./Process.js"
import type { Workspace } from "./Workspace.js"

/**
 * The longest a search may run.
 *
 * @since 0.1.0
 * @category constants
 */
export const SEARCH_TIMEOUT = Duration.seconds(60)

/**
 * Runs ripgrep with `args` (after the common ones), handing stdout lines to `onLine`; a search that
 * could not run (no ripgrep, a bad pattern, a timeout) is the refusal.
 *
 * @since 0.1.0
 * @category constructors
 */
export const ripgrep = (
  workspace: Workspace,
  tool: string,
  args: ReadonlyArray<string>,
  onLine: (line: string) => boolean
): Effect.Effect<ProcessResult, ToolOutput> =>
  Effect.gen(function*() {
    const result = yield* runProcess({
      file: workspace.ripgrep,
      args: ["--no-config", "--hidden", "--glob", "!.git", ...args],
      cwd: workspace.confinement.cwd,
      env: workspace.env,
      timeout: SEARCH_TIMEOUT,
      maxChars: 4000,
      onLine
    })
    if (result.spawnError !== undefined) {
      return yield* Effect.fail(refuse(`${tool} needs ripgrep (rg), which could not be started: ${result.spawnError}`))
    }
    if (result.timedOut) {
      return yield* Effect.fail(
        refuse(`${tool}: the search took longer than ${Duration.format(SEARCH_TIMEOUT)} and was stopped`)
      )
    }
    // ripgrep exits 1 when nothing matched, 2 on an error (a bad pattern, an unreadable path).
    if (!result.stopped && result.code === 2) {
      return yield* Effect.fail(refuse(`${tool} failed: ${result.output.trim() || "ripgrep exited with an error"}`))
    }
    return result
  })
