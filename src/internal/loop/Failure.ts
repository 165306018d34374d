/**
 * How a failure value becomes an `LlmFailure` on `turn/end` (SPEC 4.7).
 *
 * @since 0.1.0
 */
import { Cause, Exit } from "effect"
import { ModelError } from "../../domain/Errors.js"
import type { LlmFailure } from "../../domain/Values.js"

/**
 * Maps any failure value: a `ModelError` carries its failure verbatim; anything else becomes
 * `{message, code}` with `message` from a string `message` property (else `String(e)`) and `code`
 * from a string `code` property (else `"UNKNOWN"`).
 *
 * @since 0.1.0
 * @category constructors
 */
export const toLlmFailure = (error: unknown): LlmFailure => {
  if (error instanceof ModelError) return error.failure
  const record = typeof error === "object" && error !== null
    ? (error as { readonly message?: unknown; readonly code?: unknown })
    : undefined
  const message = typeof record?.message === "string" ? record.message : String(error)
  const code = typeof record?.code === "string" ? record.code : "UNKNOWN"
  return { message, code }
}

/**
 * A failure with one of tiller's own codes.
 *
 * @since 0.1.0
 * @category constructors
 */
export const ownFailure = (code: string, message: string): LlmFailure => ({ message, code })

/**
 * The original error of a failed exit: its first failure, else its first defect, else the cause.
 *
 * @since 0.1.0
 * @category getters
 */
export const originalError = <A, E>(exit: Exit.Exit<A, E>): unknown => {
  if (Exit.isSuccess(exit)) return undefined
  const failure = Cause.failureOption(exit.cause)
  if (failure._tag === "Some") return failure.value
  const defects = Array.from(Cause.defects(exit.cause))
  if (defects.length > 0) return defects[0]
  return Cause.squash(exit.cause)
}
