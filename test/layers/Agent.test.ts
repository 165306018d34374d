/**
 * Agent.layer options that compose extra services: `compaction` (issue 28).
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer, Option, Schema } from "effect"
import { checkLog } from "../../src/domain/Check.js"
import { SessionId } from "../../src/domain/Ids.js"
import { userMessage } from "../../src/domain/Message.js"
import { Agent } from "../../src/layers/Agent.js"
import { ScriptedModel } from "../../src/layers/ScriptedModel.js"
import { Compaction } from "../../src/services/Compaction.js"
import { Driver } from "../../src/services/Driver.js"
import { SessionLog } from "../../src/services/SessionLog.js"
import { SessionStore } from "../../src/services/SessionStore.js"
import { Tool, Tools } from "../../src/services/Tools.js"

const read = Tool.make("read", { description: "", parameters: Schema.Struct({}), execute: () => Effect.succeed("x".repeat(4_000)) })
const call = (id: string) => ScriptedModel.response({ toolCalls: [{ id, name: "read", arguments: {} }] })
const environment = Layer.mergeAll(
  SessionStore.layerMemory,
  ScriptedModel.layer([call("r1"), call("r2"), call("r3"), call("r4"), ScriptedModel.text("done")]),
  Tools.layer({ tools: [read] })
)

describe("Agent.layer: the compaction option", () => {
  it.scoped("with `compaction` the agent provides Compaction, and its triggers run in the agent's loop", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const compaction = yield* Compaction
      yield* driver.followup(userMessage({ id: "A", text: "A" }))
      yield* driver.whenIdle
      const events = yield* (yield* SessionLog).events
      const start = events.find((e) => e.type === "compaction/start")
      expect(start?.data).toMatchObject({ turn: 1, kind: "prune", trigger: "threshold" })
      expect((yield* compaction.contextUsage).window).toBe(4_000)
      expect(checkLog(events, { closed: true })).toEqual([])
    }).pipe(Effect.provide(Agent.layer({
      sessionId: SessionId.make("s"),
      model: { provider: "p", model: "m" },
      compaction: { contextWindow: 4_000, protectRecentTokens: 1_500, minimumPruneTokens: 500, maxToolResultChars: 100_000 }
    }).pipe(Layer.provideMerge(environment)))))

  it.scoped("the configured model picks the window from the table until a request names one", () =>
    Effect.gen(function*() {
      expect((yield* (yield* Compaction).contextUsage).window).toBe(200_000)
    }).pipe(Effect.provide(Agent.layer({
      sessionId: SessionId.make("s"),
      model: { provider: "anthropic", model: "claude-sonnet-4-5" },
      compaction: {}
    }).pipe(Layer.provideMerge(environment)))))

  it.scoped("without it there is no Compaction and no listener", () =>
    Effect.gen(function*() {
      expect(Option.isNone(yield* Effect.serviceOption(Compaction))).toBe(true)
      const driver = yield* Driver
      yield* driver.followup(userMessage({ id: "A", text: "A" }))
      yield* driver.whenIdle
      expect((yield* (yield* SessionLog).events).some((e) => e.type.startsWith("compaction/"))).toBe(false)
    }).pipe(Effect.provide(Agent.layer({ sessionId: SessionId.make("s"), model: { provider: "p", model: "m" } }).pipe(
      Layer.provideMerge(environment)
    ))))
})
