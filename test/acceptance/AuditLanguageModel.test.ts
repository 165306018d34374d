/**
 * Acceptance audit of SPEC 8.8 `Model.layerLanguageModel` end to end: an agent over a fake
 * `@effect/ai` LanguageModel runs a tool round trip, tiller executing the tool itself.
 */
import * as LanguageModel from "@effect/ai/LanguageModel"
import type * as Response from "@effect/ai/Response"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer, Schema, Stream } from "effect"
import { Agent, Driver, Model, SessionId, SessionLog, SessionStore, Tool, Tools } from "../../src/index.js"
import { closeOut, shape, token, user } from "./AuditHarness.js"

const usage = { inputTokens: 3, outputTokens: 4, totalTokens: 7 }
const turns: ReadonlyArray<ReadonlyArray<Response.StreamPartEncoded>> = [
  [
    { type: "tool-call", id: "c1", name: "echo", params: { text: "ping" } },
    { type: "finish", reason: "tool-calls", usage }
  ],
  [
    { type: "text-start", id: "t" },
    { type: "text-delta", id: "t", delta: "pong" },
    { type: "text-end", id: "t" },
    { type: "finish", reason: "stop", usage }
  ]
]

describe("8.8 Model.layerLanguageModel", () => {
  let calls = 0
  let ran = 0
  const echo = Tool.make("echo", {
    description: "echoes",
    parameters: Schema.Struct({ text: Schema.String }),
    execute: ({ text }) => Effect.sync(() => (ran++, `echo: ${text}`))
  })
  const fake = Layer.effect(
    LanguageModel.LanguageModel,
    LanguageModel.make({
      generateText: () => Effect.dieMessage("generateText is not used"),
      streamText: () => Stream.suspend(() => Stream.fromIterable(turns[calls++] ?? []))
    })
  )
  it.scoped("8.8: an agent over an @effect/ai LanguageModel runs a tool round trip with the C2 shape; the body runs once", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const log = yield* SessionLog
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect(yield* shape).toEqual([
        "INS(nt,0,[A])", "TS(1)", "CLM(nt,0,1)", "SS(1,1)", "UM(A)", "RH(initial)",
        "CH(block-start)", "CH(tool-call-delta)", "CH(block-end)", "CH(usage)", "CH(finish stop)", "AM",
        "TC(c1)", "TR(c1)", "SE(1,1)", "SS(1,2)",
        "CH(block-start)", "CH(text-delta)", "CH(block-end)", "CH(usage)", "CH(finish stop)", "AM", "SE(1,2)", "TE(1,completed)"
      ])
      expect(ran).toBe(1)
      expect(calls).toBe(2)
      expect((yield* log.messages).map(token)).toEqual(["A", "tool-call c1", "tool-result c1", "pong"])
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(
      Agent.layer({ sessionId: SessionId.make("s"), model: { provider: "p", model: "m" } }).pipe(
        Layer.provideMerge(Layer.mergeAll(SessionStore.layerMemory, Model.layerLanguageModel.pipe(Layer.provide(fake)), Tools.layer({ tools: [echo] })))
      )
    )))
})
