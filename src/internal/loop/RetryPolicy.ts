/**
 * The default request-error policy (SPEC 4.5, D10): the innermost link of the `onRequestError`
 * waterfall; and the cap on how long any `Retry` may sleep.
 *
 * @since 0.1.0
 */
import { Duration, Effect, Random } from "effect"
import { RequestErrorAction } from "../../domain/Seams.js"
import type { LlmFailure } from "../../domain/Values.js"

/**
 * Failure codes that are retryable by default.
 *
 * @since 0.1.0
 * @category constants
 */
export const RETRYABLE_CODES: ReadonlySet<string> = new Set([
  "RATE_LIMIT",
  "OVERLOADED",
  "SERVICE_UNAVAILABLE",
  "NETWORK",
  "TIMEOUT"
])

/**
 * Attempts per step under the default policy.
 *
 * @since 0.1.0
 * @category constants
 */
export const MAX_ATTEMPTS = 3

const BASE_DELAY_MS = 1_000
const MAX_DELAY_MS = 30_000
const JITTER_MIN = 0.8
const JITTER_MAX = 1.2

/**
 * Whether the default policy retries a failure: `retryable: false` always wins.
 *
 * @since 0.1.0
 * @category predicates
 */
export const isRetryable = (failure: LlmFailure): boolean =>
  failure.retryable !== false && (
    failure.retryable === true ||
    failure.status === 429 ||
    (failure.status !== undefined && failure.status >= 500 && failure.status <= 599) ||
    RETRYABLE_CODES.has(failure.code)
  )

/**
 * The default policy: `Retry` with jittered exponential backoff (floored by `retryAfterMs`) while
 * the failure is retryable and `attempt < 3`, else `Fail`. The jitter factor is drawn uniformly
 * from [0.8, 1.2] with Effect's `Random`, as `Schedule.jittered` does.
 *
 * @since 0.1.0
 * @category policies
 */
export const defaultRetryPolicy = (
  input: { readonly attempt: number; readonly failure: LlmFailure }
): Effect.Effect<RequestErrorAction> =>
  input.attempt < MAX_ATTEMPTS && isRetryable(input.failure)
    ? Effect.map(Random.next, (random) => {
      const base = Math.min(MAX_DELAY_MS, BASE_DELAY_MS * 2 ** (input.attempt - 1))
      const jittered = base * JITTER_MIN * (1 - random) + base * JITTER_MAX * random
      return RequestErrorAction.retry(Duration.millis(Math.max(input.failure.retryAfterMs ?? 0, jittered)))
    })
    : Effect.succeed(RequestErrorAction.fail)

/**
 * The longest a `Retry` may sleep unless `AgentOptions.maxRetryDelay` says otherwise: 60 seconds.
 *
 * @since 0.1.0
 * @category constants
 */
export const DEFAULT_MAX_RETRY_DELAY: Duration.Duration = Duration.seconds(60)

/**
 * The failure code of a turn whose `Retry` asked to sleep longer than the cap (or forever).
 *
 * @since 0.1.0
 * @category constants
 */
export const RETRY_DELAY_TOO_LONG = "RETRY_DELAY_TOO_LONG"

const spoken = (ms: number): string => Number.isFinite(ms) ? `${Number((ms / 1000).toFixed(3))} s` : "forever"

/**
 * Why a `Retry` of `delayMs` (already rounded to whole milliseconds) is not slept on: a
 * `RETRY_DELAY_TOO_LONG` failure saying what was asked for, or `undefined` when the delay is finite
 * and at most `cap`. The provider is named when its `retryAfterMs` is itself over the cap.
 *
 * @since 0.1.0
 * @category policies
 */
export const refuseRetryDelay = (
  delayMs: number,
  failure: LlmFailure,
  cap: Duration.Duration
): LlmFailure | undefined => {
  const capMs = Duration.toMillis(cap)
  if (Number.isFinite(delayMs) && delayMs <= capMs) return undefined
  const asked = failure.retryAfterMs
  const byProvider = asked !== undefined && !(asked <= capMs)
  const who = byProvider ? "the provider" : "the request-error recovery"
  const limit = Number.isFinite(capMs) ? `the cap is ${spoken(capMs)}` : "a retry cannot wait forever"
  return {
    message: `${who} asked to wait ${spoken(byProvider ? asked : delayMs)} before retrying; ${limit}`,
    code: RETRY_DELAY_TOO_LONG,
    ...(failure.status !== undefined ? { status: failure.status } : {}),
    ...(byProvider && Number.isFinite(asked) ? { retryAfterMs: asked } : {}),
    ...(failure.requestId !== undefined ? { requestId: failure.requestId } : {}),
    retryable: false
  }
}
