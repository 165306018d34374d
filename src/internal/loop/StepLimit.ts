/**
 * The step limit of a turn: a model that answers every request with a tool call would otherwise keep
 * its turn running, and spending, for as long as anyone waits. When a turn would open one step more
 * than the limit, it ends instead with `error` whose failure code is `MAX_STEPS` and whose message
 * names the limit; the steps already run, their tool results included, stay in the log.
 *
 * @since 0.1.0
 */
import type { LlmFailure } from "../../domain/Values.js"

/**
 * The steps a turn may run unless the agent's `maxSteps` says otherwise: generous, so that a long
 * but productive tool loop is never cut (peers stop far earlier: 10 to 25 steps), while a runaway
 * loop still ends.
 *
 * @since 0.1.0
 * @category constants
 */
export const DEFAULT_MAX_STEPS = 100

/**
 * The failure code of a turn ended by its step limit.
 *
 * @since 0.1.0
 * @category constants
 */
export const MAX_STEPS = "MAX_STEPS"

/**
 * The failure that ends a turn about to open step `step` past the limit `maxSteps` (default
 * {@link DEFAULT_MAX_STEPS}; `Infinity` turns the limit off), or `undefined` when the step may open.
 *
 * @since 0.1.0
 * @category constructors
 */
export const stepLimitFailure = (step: number, maxSteps: number | undefined): LlmFailure | undefined => {
  const limit = maxSteps ?? DEFAULT_MAX_STEPS
  if (step <= limit) return undefined
  return {
    code: MAX_STEPS,
    message: `the turn reached its step limit of ${limit} step${limit === 1 ? "" : "s"} (maxSteps, --max-steps) ` +
      "with the model still calling tools; a new prompt continues from the tool results",
    retryable: false
  }
}
