import { describe, expect, it } from "@effect/vitest"
import { Duration, Effect, Random } from "effect"
import type { LlmFailure } from "../../src/domain/Values.js"
import { defaultRetryPolicy, isRetryable } from "../../src/internal/RetryPolicy.js"
import type { RequestErrorAction } from "../../src/services/Hooks.js"

const failure = (fields: Partial<LlmFailure> = {}): LlmFailure => ({ message: "failed", code: "UNKNOWN", ...fields })

const delayMs = (action: RequestErrorAction): number => {
  if (action._tag !== "Retry") throw new Error(`expected Retry, got ${action._tag}`)
  return Duration.toMillis(action.delay)
}

/** The policy's action with the jitter draw fixed to `random`. */
const withDraw = (random: number, attempt: number, f: LlmFailure) =>
  defaultRetryPolicy({ attempt, failure: f }).pipe(Effect.withRandom(Random.fixed([random])))

describe("defaultRetryPolicy", () => {
  it.effect("retries each retryable condition on attempt 1", () =>
    Effect.gen(function*() {
      const retryable = [
        failure({ retryable: true }),
        failure({ status: 429 }),
        failure({ status: 500 }),
        failure({ status: 503 }),
        failure({ status: 599 }),
        failure({ code: "RATE_LIMIT" }),
        failure({ code: "OVERLOADED" }),
        failure({ code: "SERVICE_UNAVAILABLE" }),
        failure({ code: "NETWORK" }),
        failure({ code: "TIMEOUT" })
      ]
      for (const f of retryable) {
        expect(isRetryable(f)).toBe(true)
        expect((yield* defaultRetryPolicy({ attempt: 1, failure: f }))._tag).toBe("Retry")
      }
    }))

  it.effect("fails everything else", () =>
    Effect.gen(function*() {
      const fatal = [
        failure(),
        failure({ status: 400 }),
        failure({ status: 499 }),
        failure({ status: 600 }),
        failure({ code: "rate_limit" }),
        failure({ code: "ABORTED" })
      ]
      for (const f of fatal) {
        expect(isRetryable(f)).toBe(false)
        expect(yield* defaultRetryPolicy({ attempt: 1, failure: f })).toEqual({ _tag: "Fail" })
      }
    }))

  it.effect("retryable: false wins over status and code", () =>
    Effect.gen(function*() {
      const f = failure({ retryable: false, status: 429, code: "RATE_LIMIT" })
      expect(isRetryable(f)).toBe(false)
      expect(yield* defaultRetryPolicy({ attempt: 1, failure: f })).toEqual({ _tag: "Fail" })
    }))

  it.effect("attempt 3 fails even when retryable; attempt 2 still retries", () =>
    Effect.gen(function*() {
      const f = failure({ status: 503 })
      expect((yield* defaultRetryPolicy({ attempt: 2, failure: f }))._tag).toBe("Retry")
      expect(yield* defaultRetryPolicy({ attempt: 3, failure: f })).toEqual({ _tag: "Fail" })
      expect(yield* defaultRetryPolicy({ attempt: 4, failure: f })).toEqual({ _tag: "Fail" })
    }))

  it.effect("the jitter factor spans [0.8, 1.2] of 1 s, then 2 s", () =>
    Effect.gen(function*() {
      const f = failure({ status: 500 })
      expect(delayMs(yield* withDraw(0, 1, f))).toBeCloseTo(800)
      expect(delayMs(yield* withDraw(0.5, 1, f))).toBeCloseTo(1000)
      expect(delayMs(yield* withDraw(0.999999, 1, f))).toBeCloseTo(1200, 2)
      expect(delayMs(yield* withDraw(0, 2, f))).toBeCloseTo(1600)
      expect(delayMs(yield* withDraw(0.999999, 2, f))).toBeCloseTo(2400, 2)
    }))

  it.effect("seeded draws stay in [800, 1200] for attempt 1 and [1600, 2400] for attempt 2, and vary", () =>
    Effect.gen(function*() {
      const f = failure({ code: "OVERLOADED" })
      const first: Array<number> = []
      const second: Array<number> = []
      for (let seed = 0; seed < 200; seed++) {
        first.push(delayMs(yield* defaultRetryPolicy({ attempt: 1, failure: f }).pipe(Effect.withRandom(Random.make(seed)))))
        second.push(delayMs(yield* defaultRetryPolicy({ attempt: 2, failure: f }).pipe(Effect.withRandom(Random.make(seed)))))
      }
      for (const d of first) expect(d >= 800 && d <= 1200).toBe(true)
      for (const d of second) expect(d >= 1600 && d <= 2400).toBe(true)
      expect(new Set(first).size).toBeGreaterThan(100)
      // The same seed gives the same delay.
      const again = delayMs(yield* defaultRetryPolicy({ attempt: 1, failure: f }).pipe(Effect.withRandom(Random.make(0))))
      expect(again).toBe(first[0])
    }))

  it.effect("retryAfterMs is a floor on the jittered delay", () =>
    Effect.gen(function*() {
      expect(delayMs(yield* withDraw(0.5, 1, failure({ status: 429, retryAfterMs: 5_000 })))).toBe(5_000)
      expect(delayMs(yield* withDraw(0.5, 1, failure({ status: 429, retryAfterMs: 200 })))).toBeCloseTo(1000)
      expect(delayMs(yield* withDraw(0.5, 2, failure({ status: 429, retryAfterMs: 1_999 })))).toBeCloseTo(2000)
    }))

  it.effect("a retryAfterMs does not make a non-retryable failure retry", () =>
    Effect.gen(function*() {
      expect(yield* defaultRetryPolicy({ attempt: 1, failure: failure({ status: 400, retryAfterMs: 100 }) }))
        .toEqual({ _tag: "Fail" })
    }))
})
