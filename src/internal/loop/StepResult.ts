/**
 * How a step of the loop ended: the value a step (and its tool batch) hands back to the turn.
 *
 * @since 0.1.0
 */
import type { LlmFailure } from "../../domain/Values.js"

/**
 * How a step ended.
 *
 * @since 0.1.0
 * @category models
 */
export type StepResult =
  | { readonly _tag: "Completed" }
  | { readonly _tag: "MaxTokens" }
  | { readonly _tag: "Continue" }
  | { readonly _tag: "Aborted"; readonly defects: ReadonlyArray<unknown> }
  | {
    readonly _tag: "Failed"
    readonly failure: LlmFailure
    readonly error: unknown
    /** Defects of the failed component, published if the turn ends aborted (SPEC 3.10 case 2). */
    readonly defects?: ReadonlyArray<unknown>
  }

/**
 * A step that ended aborted, with the defects to publish if its turn ends so.
 *
 * @since 0.1.0
 * @category constructors
 */
export const aborted = (defects: ReadonlyArray<unknown> = []): StepResult => ({ _tag: "Aborted", defects })
/**
 * A step that failed with `failure` (`error` is what the turn reports).
 *
 * @since 0.1.0
 * @category constructors
 */
export const failed = (
  failure: LlmFailure,
  error: unknown = failure,
  defects: ReadonlyArray<unknown> = []
): StepResult => ({
  _tag: "Failed",
  failure,
  error,
  defects
})
