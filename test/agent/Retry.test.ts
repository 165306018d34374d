/**
 * Retries inside the step (SPEC 4.5 Q7, D10) and the cap on how long a `Retry` may sleep
 * (`AgentOptions.maxRetryDelay`, issue 27 item 6): a longer delay is never slept on.
 */
import { describe, expect, it } from "@effect/vitest"
import { Duration, Effect, Fiber, TestClock } from "effect"
import type { EventOf } from "../../src/domain/Event.js"
import type { LlmFailure } from "../../src/domain/Values.js"
import { CancelCause } from "../../src/domain/Values.js"
import { ScriptedModel } from "../../src/layers/ScriptedModel.js"
import { Driver } from "../../src/services/Driver.js"
import { Hooks, RequestErrorAction } from "../../src/services/Hooks.js"
import { SessionLog } from "../../src/services/SessionLog.js"
import { agentTest, scenario, shape, user } from "./harness.js"

const rateLimited = (retryAfterMs: number): LlmFailure => ({
  message: "slow down",
  code: "RATE_LIMIT",
  status: 429,
  retryAfterMs
})

/** A follow-up, then the loop runs with the clock standing still; the log in notation once the turn is over. */
const followupWithoutTime = Effect.gen(function*() {
  const driver = yield* Driver
  const log = yield* SessionLog
  yield* driver.followup(user("A"))
  // No TestClock adjustment: a turn that slept would never end here.
  for (let i = 0; i < 1_000 && !(yield* log.events).some((e) => e.type === "turn/end"); i++) yield* Effect.yieldNow()
  return yield* shape
})

/** The reason of the log's `turn/end`. */
const endReason = Effect.map(
  Effect.flatMap(SessionLog, (log) => log.events),
  (events) => (events.find((e) => e.type === "turn/end") as EventOf<"turn/end"> | undefined)?.data.reason
)

const failedAtOnce = [
  "INS(nt,0,[A])",
  "TS(1)",
  "CLM(nt,0,1)",
  "SS(1,1)",
  "UM(A)",
  "RH(initial)",
  "CH(finish error)",
  "SE(1,1)"
]

describe("the retry delay cap", () => {
  agentTest(
    "a provider's retryAfterMs of one hour is not slept on: the turn ends at once with RETRY_DELAY_TOO_LONG",
    scenario([ScriptedModel.fail(rateLimited(3_600_000)), ScriptedModel.text("ok")]),
    function*() {
      expect(yield* followupWithoutTime).toEqual([...failedAtOnce, "TE(1,error(RETRY_DELAY_TOO_LONG))"])
      expect(yield* endReason).toEqual({
        kind: "error",
        error: {
          message: "the provider asked to wait 3600 s before retrying; the cap is 60 s",
          code: "RETRY_DELAY_TOO_LONG",
          status: 429,
          retryAfterMs: 3_600_000,
          retryable: false
        }
      })
      expect(yield* Effect.flatMap(ScriptedModel, (m) => m.remaining)).toBe(1)
    }
  )

  agentTest(
    "a listener's Retry of Duration.infinity is refused the same way",
    scenario([ScriptedModel.fail({ message: "x", code: "OVERLOADED" }), ScriptedModel.text("ok")]),
    function*() {
      yield* (yield* Hooks).onRequestError(() => Effect.succeed(RequestErrorAction.retry(Duration.infinity)))
      expect(yield* followupWithoutTime).toEqual([...failedAtOnce, "TE(1,error(RETRY_DELAY_TOO_LONG))"])
      expect(yield* endReason).toEqual({
        kind: "error",
        error: {
          message: "the request-error recovery asked to wait forever before retrying; the cap is 60 s",
          code: "RETRY_DELAY_TOO_LONG",
          retryable: false
        }
      })
    }
  )

  agentTest(
    "a provider's retryAfterMs of Infinity cannot be logged: the turn ends at once with INVALID_EVENT (SPEC 4.5), never sleeps",
    scenario([ScriptedModel.fail(rateLimited(Infinity)), ScriptedModel.text("ok")]),
    function*() {
      expect(yield* followupWithoutTime).toEqual([
        "INS(nt,0,[A])",
        "TS(1)",
        "CLM(nt,0,1)",
        "SS(1,1)",
        "UM(A)",
        "RH(initial)",
        "SE(1,1)",
        "TE(1,error(INVALID_EVENT))"
      ])
      const reason = yield* endReason
      expect(reason?.kind === "error" ? reason.error.message : undefined).toContain("retryAfterMs: Infinity")
    }
  )

  agentTest(
    "a Retry over the cap after the listener recorded a cause: abort wins (SPEC 4.5), no RETRY_DELAY_TOO_LONG",
    scenario([ScriptedModel.fail({ message: "x", code: "OVERLOADED" }), ScriptedModel.text("ok")]),
    function*({ driver }) {
      yield* (yield* Hooks).onRequestError(() =>
        Effect.as(driver.cancel(CancelCause.user), RequestErrorAction.retry(Duration.infinity))
      )
      expect(yield* followupWithoutTime).toEqual([...failedAtOnce, "TE(1,aborted(user))"])
    }
  )

  agentTest(
    "30 s, under the cap, is slept on and retried as SPEC's default policy says",
    scenario([ScriptedModel.fail(rateLimited(30_000)), ScriptedModel.text("ok")]),
    function*({ driver, log }) {
      yield* driver.followup(user("A"))
      const idle = yield* Effect.fork(driver.whenIdle)
      while (!(yield* shape).includes("RT(1)")) yield* Effect.yieldNow()
      const retry = (yield* log.events).find((e) => e.type === "llm/retry") as EventOf<"llm/retry">
      expect(retry.data).toEqual({ turn: 1, step: 1, attempt: 1, delayMs: 30_000, failure: rateLimited(30_000) })
      // No second request before the delay has passed.
      yield* TestClock.adjust("29999 millis")
      for (let i = 0; i < 100; i++) yield* Effect.yieldNow()
      expect(yield* Effect.flatMap(ScriptedModel, (m) => m.remaining)).toBe(1)
      yield* TestClock.adjust("1 millis")
      yield* Fiber.join(idle)
      expect(yield* shape).toEqual([
        ...failedAtOnce.slice(0, -1),
        "RT(1)",
        "CH(block-start)",
        "CH(text-delta)",
        "CH(block-end)",
        "CH(finish stop)",
        "AM",
        "SE(1,1)",
        "TE(1,completed)"
      ])
    }
  )

  it.scoped("maxRetryDelay raises the cap: one hour is then slept on", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      const idle = yield* Effect.fork(driver.whenIdle)
      while (!(yield* shape).includes("RT(1)")) yield* Effect.yieldNow()
      yield* TestClock.adjust("1 hour")
      yield* Fiber.join(idle)
      expect((yield* shape).at(-1)).toBe("TE(1,completed)")
    }).pipe(Effect.provide(scenario([ScriptedModel.fail(rateLimited(3_600_000)), ScriptedModel.text("ok")], {
      agent: { maxRetryDelay: "2 hours" }
    }))))

  it.scoped("maxRetryDelay lowers the cap for a listener's finite delay too", () =>
    Effect.gen(function*() {
      yield* (yield* Hooks).onRequestError(() => Effect.succeed(RequestErrorAction.retry("5 seconds")))
      expect(yield* followupWithoutTime).toEqual([...failedAtOnce, "TE(1,error(RETRY_DELAY_TOO_LONG))"])
      const reason = yield* endReason
      expect(reason?.kind === "error" ? reason.error.message : undefined)
        .toBe("the request-error recovery asked to wait 5 s before retrying; the cap is 2 s")
    }).pipe(
      Effect.provide(scenario([ScriptedModel.fail({ message: "x", code: "OVERLOADED" }), ScriptedModel.text("ok")], {
        agent: { maxRetryDelay: "2 seconds" }
      }))
    ))
})
