/**
 * The canonical sequences of SPEC 4.11 as golden tests: the complete durable log of each.
 */
import { describe, expect } from "@effect/vitest"
import { Deferred, Effect, Fiber, type Layer, Schema, TestClock } from "effect"
import { checkLog } from "../../src/domain/Check.js"
import { ScriptedModel } from "../../src/layers/ScriptedModel.js"
import { PreStepDecision } from "../../src/services/PreStep.js"
import { SessionLog } from "../../src/services/SessionLog.js"
import { Tool } from "../../src/services/Tools.js"
import { type AgentServices, agentTest, plugin, scenario, shape, user } from "./harness.js"

const closedCheck = Effect.flatMap(
  SessionLog,
  (log) => Effect.map(log.events, (events) => checkLog(events, { closed: true }))
)

const echo = Tool.make("echo", {
  description: "echoes its text",
  parameters: Schema.Struct({ text: Schema.String }),
  execute: ({ text }) => Effect.succeed(`echo: ${text}`)
})

const followupA = function*({ driver }: AgentServices) {
  yield* driver.followup(user("A"))
}

/** A golden sequence: `act` runs, the agent goes idle, and the whole log is `expected` and checks closed. */
const canonical = (
  name: string,
  layer: Layer.Layer<any, any, never>,
  act: (services: AgentServices) => Generator<any, void, any>,
  expected: ReadonlyArray<string>
) =>
  agentTest(name, layer, function*(services) {
    yield* Effect.gen(() => act(services))
    yield* services.driver.whenIdle
    expect(yield* shape).toEqual(expected)
    expect(yield* closedCheck).toEqual([])
  })

describe("canonical sequences (SPEC 4.11)", () => {
  canonical("C1: one follow-up, text answer", scenario([ScriptedModel.text("hi")]), followupA, [
    "INS(nt,0,[A])",
    "TS(1)",
    "CLM(nt,0,1)",
    "SS(1,1)",
    "UM(A)",
    "RH(initial)",
    "CH(block-start)",
    "CH(text-delta)",
    "CH(block-end)",
    "CH(finish stop)",
    "AM",
    "SE(1,1)",
    "TE(1,completed)"
  ])

  canonical(
    "C2: tool round trip; step 2 has no claim and no new header",
    scenario([
      ScriptedModel.response({ toolCalls: [{ id: "c1", name: "echo", arguments: { text: "ping" } }] }),
      ScriptedModel.text("done")
    ], { tools: [echo] }),
    followupA,
    [
      "INS(nt,0,[A])",
      "TS(1)",
      "CLM(nt,0,1)",
      "SS(1,1)",
      "UM(A)",
      "RH(initial)",
      "CH(block-start)",
      "CH(tool-call-delta)",
      "CH(block-end)",
      "CH(finish stop)",
      "AM",
      "TC(c1)",
      "TR(c1)",
      "SE(1,1)",
      "SS(1,2)",
      "CH(block-start)",
      "CH(text-delta)",
      "CH(block-end)",
      "CH(finish stop)",
      "AM",
      "SE(1,2)",
      "TE(1,completed)"
    ]
  )

  canonical("C3: idle inject, then follow-up", scenario([ScriptedModel.text("ok")]), function*({ driver }) {
    yield* driver.inject(plugin("C"))
    expect(yield* driver.status).toBe("idle")
    yield* driver.followup(user("A"))
  }, [
    "INS(ns,0,[C])",
    "INS(nt,0,[A])",
    "TS(1)",
    "CLM(ns,0,1)",
    "CLM(nt,0,1)",
    "SS(1,1)",
    "UM(C)",
    "UM(A)",
    "RH(initial)",
    "CH(block-start)",
    "CH(text-delta)",
    "CH(block-end)",
    "CH(finish stop)",
    "AM",
    "SE(1,1)",
    "TE(1,completed)"
  ])

  canonical(
    "C4: rejection, then the chain continues",
    scenario([ScriptedModel.text("y")]),
    function*({ driver, preStep }) {
      const gate = yield* Deferred.make<void>()
      yield* preStep.register((input, next) =>
        input.messages.some((m) => m.id === "X")
          ? Effect.as(Deferred.await(gate), PreStepDecision.reject())
          : next()
      )
      yield* driver.followup(user("X"))
      yield* driver.followup(user("Y"))
      yield* Deferred.succeed(gate, undefined)
    },
    [
      "INS(nt,0,[X])",
      "TS(1)",
      "CLM(nt,0,1)",
      "INS(nt,0,[Y])",
      "TE(1,blocked)",
      "TS(2)",
      "CLM(nt,0,1)",
      "SS(2,1)",
      "UM(Y)",
      "RH(initial)",
      "CH(block-start)",
      "CH(text-delta)",
      "CH(block-end)",
      "CH(finish stop)",
      "AM",
      "SE(2,1)",
      "TE(2,completed)"
    ]
  )

  agentTest(
    "C5: cancel while streaming",
    scenario([ScriptedModel.hang({ text: "partial" })]),
    function*({ driver, log }) {
      yield* driver.followup(user("A"))
      // Wait until the text delta is logged, then cancel.
      while (!(yield* shape).includes("CH(text-delta)")) yield* Effect.yieldNow()
      yield* driver.cancel({ kind: "user" })
      yield* driver.whenIdle
      expect(yield* shape).toEqual([
        "INS(nt,0,[A])",
        "TS(1)",
        "CLM(nt,0,1)",
        "SS(1,1)",
        "UM(A)",
        "RH(initial)",
        "CH(block-start)",
        "CH(text-delta)",
        "AM!",
        "SE(1,1)",
        "TE(1,aborted(user))"
      ])
      const events = yield* log.events
      expect((events[8] as { sourceEventSeqs?: ReadonlyArray<number> }).sourceEventSeqs).toEqual([6, 7])
      expect(yield* closedCheck).toEqual([])
    }
  )

  canonical(
    "C6: a failed request is retried inside the step",
    scenario([ScriptedModel.fail({ message: "slow down", code: "RATE_LIMIT", status: 429 }), ScriptedModel.text("ok")]),
    function*({ driver, log }) {
      yield* driver.followup(user("A"))
      const waiter = yield* Effect.fork(driver.whenIdle)
      while (!(yield* shape).includes("RT(1)")) yield* Effect.yieldNow()
      const events = yield* log.events
      const retry = events.find((e) => e.type === "llm/retry")!.data as { delayMs: number }
      yield* TestClock.adjust(`${retry.delayMs} millis`)
      yield* Fiber.join(waiter)
    },
    [
      "INS(nt,0,[A])",
      "TS(1)",
      "CLM(nt,0,1)",
      "SS(1,1)",
      "UM(A)",
      "RH(initial)",
      "CH(finish error)",
      "RT(1)",
      "CH(block-start)",
      "CH(text-delta)",
      "CH(block-end)",
      "CH(finish stop)",
      "AM",
      "SE(1,1)",
      "TE(1,completed)"
    ]
  )
})
