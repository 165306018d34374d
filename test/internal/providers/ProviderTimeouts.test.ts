import { describe, expect, it } from "@effect/vitest"
import { ConfigProvider, Duration, Effect, Either } from "effect"
import { DEFAULT_TIMEOUTS, parseDuration, resolveTimeouts } from "../../../src/internal/providers/ProviderTimeouts.js"

const withEnv = (env: Record<string, string>) =>
  Effect.withConfigProvider(ConfigProvider.fromMap(new Map(Object.entries(env))))

const millis = (timeouts: { connect: Duration.Duration; firstByte: Duration.Duration; idle: Duration.Duration }) => ({
  connect: Duration.toMillis(timeouts.connect),
  firstByte: Duration.toMillis(timeouts.firstByte),
  idle: Duration.toMillis(timeouts.idle)
})

describe("ProviderTimeouts", () => {
  it.effect("defaults to 30 s for the headers, 120 s for the first byte and 120 s between chunks", () =>
    Effect.gen(function*() {
      expect(millis(yield* resolveTimeouts().pipe(withEnv({})))).toEqual({
        connect: 30_000,
        firstByte: 120_000,
        idle: 120_000
      })
      expect(millis(DEFAULT_TIMEOUTS)).toEqual({ connect: 30_000, firstByte: 120_000, idle: 120_000 })
    }))

  it.effect("reads the environment when an option is not given, and an option wins over it", () =>
    Effect.gen(function*() {
      const env = withEnv({
        TILLER_CONNECT_TIMEOUT: "3 seconds",
        TILLER_FIRST_BYTE_TIMEOUT: "1500",
        TILLER_IDLE_TIMEOUT: "2 minutes"
      })
      expect(millis(yield* resolveTimeouts().pipe(env))).toEqual({ connect: 3000, firstByte: 1500, idle: 120_000 })
      expect(millis(yield* resolveTimeouts({ connectTimeout: "250 millis", idleTimeout: 10 }).pipe(env))).toEqual({
        connect: 250,
        firstByte: 1500,
        idle: 10
      })
    }))

  it.effect("refuses a value that is not a positive duration, naming the variable", () =>
    Effect.gen(function*() {
      const error = yield* Effect.flip(resolveTimeouts().pipe(withEnv({ TILLER_IDLE_TIMEOUT: "soon" })))
      expect(String(error)).toContain("TILLER_IDLE_TIMEOUT")
      const zero = yield* Effect.flip(resolveTimeouts({ connectTimeout: 0 }).pipe(withEnv({})))
      expect(String(zero)).toContain("connectTimeout")
      expect(Either.isLeft(parseDuration("0"))).toBe(true)
      expect(Either.isLeft(parseDuration("Infinity"))).toBe(true)
      expect(Either.map(parseDuration(" 42 "), Duration.toMillis)).toEqual(Either.right(42))
    }))
})
