/**
 * Agent.layer options that compose extra services: `compaction` (issue 28).
 */
import { describe, expect, it } from "@effect/vitest"
import { Context, Effect, Layer, Option, Schema } from "effect"
import { checkLog } from "../../src/domain/Check.js"
import { SessionId } from "../../src/domain/Ids.js"
import { userMessage } from "../../src/domain/Message.js"
import type { AgentOpenError } from "../../src/layers/Agent.js"
import { Agent } from "../../src/layers/Agent.js"
import { ScriptedModel } from "../../src/layers/ScriptedModel.js"
import { Compaction } from "../../src/services/Compaction.js"
import { Driver } from "../../src/services/Driver.js"
import { Hooks } from "../../src/services/Hooks.js"
import { Inbox } from "../../src/services/Inbox.js"
import type { Model } from "../../src/services/Model.js"
import { PreStep } from "../../src/services/PreStep.js"
import { SessionLog } from "../../src/services/SessionLog.js"
import { SessionStore } from "../../src/services/SessionStore.js"
import { Tool, Tools } from "../../src/services/Tools.js"

const read = Tool.make("read", {
  description: "",
  parameters: Schema.Struct({}),
  execute: () => Effect.succeed("x".repeat(4_000))
})
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
    }).pipe(Effect.provide(
      Agent.layer({
        sessionId: SessionId.make("s"),
        model: { provider: "p", model: "m" },
        compaction: {
          contextWindow: 4_000,
          protectRecentTokens: 1_500,
          minimumPruneTokens: 500,
          maxToolResultChars: 100_000
        }
      }).pipe(Layer.provideMerge(environment))
    )))

  it.scoped("the configured model picks the window from the table until a request names one", () =>
    Effect.gen(function*() {
      expect((yield* (yield* Compaction).contextUsage).window).toBe(200_000)
    }).pipe(Effect.provide(
      Agent.layer({
        sessionId: SessionId.make("s"),
        model: { provider: "anthropic", model: "claude-sonnet-4-5" },
        compaction: {}
      }).pipe(Layer.provideMerge(environment))
    )))

  it.scoped("without it there is no Compaction and no listener", () =>
    Effect.gen(function*() {
      expect(Option.isNone(yield* Effect.serviceOption(Compaction))).toBe(true)
      const driver = yield* Driver
      yield* driver.followup(userMessage({ id: "A", text: "A" }))
      yield* driver.whenIdle
      expect((yield* (yield* SessionLog).events).some((e) => e.type.startsWith("compaction/"))).toBe(false)
    }).pipe(Effect.provide(
      Agent.layer({ sessionId: SessionId.make("s"), model: { provider: "p", model: "m" } }).pipe(
        Layer.provideMerge(environment)
      )
    )))
})

describe("Agent.layer: which session it opens", () => {
  const prompted = (id: string, text: string) =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(userMessage({ id, text }))
      yield* driver.whenIdle
      return (yield* (yield* SessionLog).messages).map((m) => m.id)
    })
  const scripted = ScriptedModel.layer([ScriptedModel.text("one"), ScriptedModel.text("two")])

  it.scoped("`open` creates a session that is not stored and resumes one that is: the same program runs twice on one store", () =>
    Effect.gen(function*() {
      const agent = Agent.layer({ open: SessionId.make("again"), model: { provider: "p", model: "m" } })
      const first = yield* Effect.scoped(Effect.provide(prompted("q1", "first"), agent))
      const second = yield* Effect.scoped(Effect.provide(prompted("q2", "second"), agent))
      expect(first).toEqual(["q1", first[1]])
      expect(second.slice(0, 3)).toEqual(["q1", first[1], "q2"])
      const { events, header } = yield* (yield* SessionStore).load(SessionId.make("again"))
      expect(header.sessionId).toBe("again")
      expect(events.filter((e) => e.type === "turn/start").map((e) => e.data)).toEqual([{ turn: 1 }, { turn: 2 }])
      expect(checkLog(events, { closed: true })).toEqual([])
    }).pipe(Effect.provide(Layer.mergeAll(SessionStore.layerMemory, scripted, Tools.layer({ tools: [] })))))

  it.scoped("`sessionId` on a stored session fails with SessionExists, whose message names `resume` and `open`", () =>
    Effect.gen(function*() {
      yield* Effect.scoped(
        Effect.provide(
          prompted("q1", "first"),
          Agent.layer({ sessionId: SessionId.make("s"), model: { provider: "p", model: "m" } })
        )
      )
      const error = yield* Effect.flip(
        Effect.scoped(
          Effect.provide(
            prompted("q2", "second"),
            Agent.layer({ sessionId: SessionId.make("s"), model: { provider: "p", model: "m" } })
          )
        )
      )
      expect(error._tag).toBe("SessionExists")
      expect(error.message).toBe(
        "session s already exists; to continue it use Agent.layer({ resume: \"s\" }), or { open: \"s\" } to resume it when stored and create it otherwise"
      )
    }).pipe(Effect.provide(Layer.mergeAll(SessionStore.layerMemory, scripted, Tools.layer({ tools: [] })))))

  it.scoped("`open` of a session created by someone else between its look-up and its create resumes it (the failed create holds no lease)", () =>
    Effect.gen(function*() {
      yield* Effect.scoped(
        Effect.provide(
          prompted("q1", "first"),
          Agent.layer({ sessionId: SessionId.make("raced"), model: { provider: "p", model: "m" } })
        )
      )
      // A store that never admits the session is there: every create of it fails SessionExists.
      const store = yield* SessionStore
      const blind = Layer.succeed(SessionStore, { ...store, exists: () => Effect.succeed(false) })
      const ids = yield* Effect.scoped(Effect.provide(
        prompted("q2", "second"),
        Agent.layer({ open: SessionId.make("raced"), model: { provider: "p", model: "m" } }).pipe(Layer.provide(blind))
      ))
      expect(ids.slice(0, 3)).toEqual(["q1", ids[1], "q2"])
    }).pipe(Effect.provide(Layer.mergeAll(SessionStore.layerMemory, scripted, Tools.layer({ tools: [] })))))
})

describe("Agent.layer: the step limit option", () => {
  it.effect("a maxSteps that is not a positive integer (or Infinity) is refused at build, before the session is stored", () =>
    Effect.gen(function*() {
      for (const bad of [0, -1, 1.5, Number.NaN]) {
        const built = yield* Effect.exit(
          Effect.scoped(Layer.build(Agent.layer({ sessionId: SessionId.make("limit"), maxSteps: bad })))
        )
        expect(built._tag, String(bad)).toBe("Failure")
        if (built._tag === "Failure") {
          expect(String(built.cause)).toContain("maxSteps must be a positive integer or Infinity")
        }
        expect(yield* (yield* SessionStore).exists(SessionId.make("limit"))).toBe(false)
      }
      const fine = yield* Effect.exit(
        Effect.scoped(
          Layer.build(Agent.layer({ sessionId: SessionId.make("limit"), maxSteps: Number.POSITIVE_INFINITY }))
        )
      )
      expect(fine._tag).toBe("Success")
    }).pipe(Effect.provide(environment)))
})

describe("Agent.layer: a composition of the agent's layers", () => {
  // What a test reads of one agent, under a tag of its own so that two agents fit in one context.
  const viewOf = Effect.all({ driver: Driver, inbox: Inbox, log: SessionLog, preStep: PreStep, hooks: Hooks })
  type View = Effect.Effect.Success<typeof viewOf>
  class First extends Context.Tag("test/First")<First, View>() {}
  class Second extends Context.Tag("test/Second")<Second, View>() {}

  it.scoped("two agents composed in one layer build each have their own log, inbox, pre-step, hooks and driver", () =>
    Effect.gen(function*() {
      const first = yield* First
      const second = yield* Second
      expect([first.log.sessionId, first.driver.sessionId]).toEqual(["one", "one"])
      expect([second.log.sessionId, second.driver.sessionId]).toEqual(["two", "two"])
      expect(second.preStep).not.toBe(first.preStep)
      expect(second.hooks).not.toBe(first.hooks)
      yield* second.driver.inject(userMessage({ id: "C", text: "context" }))
      expect((yield* second.inbox.nextStep).map((m) => m.id)).toEqual(["C"])
      expect(yield* first.inbox.nextStep).toEqual([])
    }).pipe(Effect.provide(
      Layer.merge(
        Layer.effect(First, viewOf).pipe(Layer.provide(Agent.layer({ sessionId: SessionId.make("one") }))),
        Layer.effect(Second, viewOf).pipe(Layer.provide(Agent.layer({ sessionId: SessionId.make("two") })))
      ).pipe(Layer.provide(environment))
    )))

  it("the layer's type names Compaction exactly when the options hold `compaction`", () => {
    const withIt: Layer.Layer<Compaction | Driver, AgentOpenError, SessionStore | Model | Tools> = Agent.layer({
      sessionId: SessionId.make("s"),
      compaction: {}
    })
    const without: Layer.Layer<Driver, AgentOpenError, SessionStore | Model | Tools> = Agent.layer({
      sessionId: SessionId.make("s")
    })
    // @ts-expect-error without `compaction` the layer does not provide Compaction
    const wrong: Layer.Layer<Compaction, AgentOpenError, SessionStore | Model | Tools> = without
    expect([Layer.isLayer(withIt), Layer.isLayer(wrong)]).toEqual([true, true])
  })
})
