import { describe, expect, it } from "@effect/vitest"
import { Duration, Effect, Random } from "effect"
import type { LlmFailure } from "../../../src/domain/Values.js"
import {
  DEFAULT_MAX_RETRY_DELAY,
  defaultRetryPolicy,
  isRetryable,
  refuseRetryDelay,
  RETRY_DELAY_TOO_LONG
} from "../../../src/internal/loop/RetryPolicy.js"
import type { RequestErrorAction } from "../../../src/services/Hooks.js"

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
        first.push(
          delayMs(yield* defaultRetryPolicy({ attempt: 1, failure: f }).pipe(Effect.withRandom(Random.make(seed))))
        )
        second.push(
          delayMs(yield* defaultRetryPolicy({ attempt: 2, failure: f }).pipe(Effect.withRandom(Random.make(seed))))
        )
      }
      for (const d of first) expect(d >= 800 && d <= 1200).toBe(true)
      for (const d of second) expect(d >= 1600 && d <= 2400).toBe(true)
      expect(new Set(first).size).toBeGreaterThan(100)
      // The same seed gives the same delay.
      const again = delayMs(
        yield* defaultRetryPolicy({ attempt: 1, failure: f }).pipe(Effect.withRandom(Random.make(0)))
      )
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

describe("refuseRetryDelay", () => {
  const cap = DEFAULT_MAX_RETRY_DELAY

  it("the default cap is 60 s; delays up to it, 0 included, are not refused", () => {
    expect(Duration.toMillis(cap)).toBe(60_000)
    for (const delayMs of [0, 800, 30_000, 59_999, 60_000]) {
      expect(refuseRetryDelay(delayMs, failure({ status: 429, retryAfterMs: delayMs }), cap)).toBeUndefined()
    }
  })

  it("a provider's retryAfterMs over the cap is named with the cap", () => {
    expect(refuseRetryDelay(3_600_000, failure({ status: 429, retryAfterMs: 3_600_000, requestId: "r1" }), cap))
      .toEqual({
        message: "the provider asked to wait 3600 s before retrying; the cap is 60 s",
        code: RETRY_DELAY_TOO_LONG,
        status: 429,
        retryAfterMs: 3_600_000,
        requestId: "r1",
        retryable: false
      })
    expect(refuseRetryDelay(60_001, failure({ retryAfterMs: 60_001 }), cap)?.message)
      .toBe("the provider asked to wait 60.001 s before retrying; the cap is 60 s")
  })

  it("a delay over the cap that the provider did not ask for is the recovery's; forever is refused under any cap", () => {
    expect(refuseRetryDelay(Infinity, failure(), cap)).toEqual({
      message: "the request-error recovery asked to wait forever before retrying; the cap is 60 s",
      code: RETRY_DELAY_TOO_LONG,
      retryable: false
    })
    expect(refuseRetryDelay(NaN, failure(), cap)?.code).toBe(RETRY_DELAY_TOO_LONG)
    expect(refuseRetryDelay(90_000, failure({ retryAfterMs: 5_000 }), cap)?.message)
      .toBe("the request-error recovery asked to wait 90 s before retrying; the cap is 60 s")
    expect(refuseRetryDelay(Infinity, failure(), Duration.infinity)?.message)
      .toBe("the request-error recovery asked to wait forever before retrying; a retry cannot wait forever")
    expect(refuseRetryDelay(Number.MAX_SAFE_INTEGER, failure(), Duration.infinity)).toBeUndefined()
  })

  it.effect("the default policy's own delays stay under the default cap; a negative retryAfterMs is no floor (SPEC's max)", () =>
    Effect.gen(function*() {
      const retry = yield* withDraw(0.999999, 2, failure({ status: 503, retryAfterMs: -1 }))
      expect(delayMs(retry)).toBeCloseTo(2400, 2)
      expect(refuseRetryDelay(Math.round(delayMs(retry)), failure({ status: 503, retryAfterMs: -1 }), cap))
        .toBeUndefined()
      expect(delayMs(yield* withDraw(0.5, 1, failure({ status: 429, retryAfterMs: -5_000 })))).toBeCloseTo(1000)
    }))
})
