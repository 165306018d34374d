/**
 * Acceptance audit of SPEC 3.3 (quiet queue and inject by phase), 4.7 (failure mapping), 2.6
 * (blocked without a message) and 4.5 Q1 (seed from the last header on resume), written against the
 * package root only.
 */
import { describe, expect, it } from "@effect/vitest"
import { Context, Data, Deferred, Effect, Exit, Fiber, Layer, Scope } from "effect"
import {
  Agent,
  CancelCause,
  Driver,
  Inbox,
  PreStep,
  PreStepDecision,
  ScriptedModel,
  SessionId,
  SessionStore,
  Tools
} from "../../src/index.js"
import { agentOver, dataOfType, plugin, requests, scenario, settle, shape, texts, untilEvent, user } from "./AuditHarness.js"

class Coded extends Data.TaggedError("Coded")<{ readonly message: string; readonly code: string }> {}

describe("3.3 deliveries by phase", () => {
  it.scoped("3.3: send(m, next-turn, false) while running runs as a later turn of the chain", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const G = yield* Deferred.make<void>()
      yield* (yield* PreStep).register((input, next) => input.turn === 1 ? Effect.zipRight(Deferred.await(G), next()) : next())
      yield* driver.followup(user("A"))
      yield* driver.send(user("Q"), "next-turn", false)
      yield* Deferred.succeed(G, undefined)
      yield* driver.whenIdle
      expect(yield* texts).toEqual(["A", "Q"])
      expect((yield* dataOfType("turn/start")).map((d) => d.turn)).toEqual([1, 2])
    }).pipe(Effect.provide(scenario([ScriptedModel.text("a"), ScriptedModel.text("q")]))))

  it.scoped("3.3: send(m, next-turn, false) while running-aborted is parked (no replay)", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const inbox = yield* Inbox
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "assistant/chunk")
      yield* driver.cancel(CancelCause.user, { keepInbox: true })
      yield* driver.send(user("Q"), "next-turn", false)
      yield* driver.whenIdle
      expect((yield* dataOfType("turn/start")).map((d) => d.turn)).toEqual([1])
      expect((yield* inbox.nextTurn).map((m) => m.id)).toEqual(["Q"])
    }).pipe(Effect.provide(scenario([ScriptedModel.hang({ text: "x" })]))))

  it.scoped("3.3: inject during maintenance only inserts: no turn when the task ends", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const G = yield* Deferred.make<void>()
      const task = yield* Effect.fork(driver.runMaintenance(Deferred.await(G)))
      yield* settle
      yield* driver.inject(plugin("C"))
      yield* Deferred.succeed(G, undefined)
      yield* Fiber.join(task)
      yield* driver.whenIdle
      expect(yield* shape).toEqual(["INS(ns,0,[C])"])
    }).pipe(Effect.provide(scenario([]))))
})

describe("4.7 failure mapping and 2.6 reasons", () => {
  const failures: ReadonlyArray<unknown> = [{ foo: 1 }, "plain string", new Coded({ message: "coded failure", code: "E_CODED" })]
  it.scoped("4.7: a failure value maps to {message, code}: [object Object] / String(e) / message getter and code", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* (yield* PreStep).register((input) => Effect.fail(failures[input.turn - 1]))
      for (const id of ["A", "B", "C"]) {
        yield* driver.followup(user(id))
        yield* driver.whenIdle
      }
      expect((yield* dataOfType("turn/end")).map((d) => d.reason.error)).toEqual([
        { message: "[object Object]", code: "UNKNOWN" },
        { message: "plain string", code: "UNKNOWN" },
        { message: "coded failure", code: "E_CODED" }
      ])
    }).pipe(Effect.provide(scenario([]))))

  it.scoped("2.6: a rejection without a reason ends the turn {kind: blocked} with no message", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* (yield* PreStep).register(() => Effect.succeed(PreStepDecision.reject()))
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      const reason = (yield* dataOfType("turn/end"))[0]!.reason
      expect(reason).toStrictEqual({ kind: "blocked" })
    }).pipe(Effect.provide(scenario([]))))
})

describe("4.5 Q1 seed on resume", () => {
  it.scoped("4.5 Q1: an agent resumed without model options takes provider and model from the last logged header", () =>
    Effect.gen(function*() {
      const storeCtx = yield* Layer.build(SessionStore.layerMemory)
      const scope = yield* Scope.make()
      const first = yield* Layer.buildWithScope(
        agentOver([ScriptedModel.text("a")], { agent: { system: "sys" } }).pipe(Layer.provide(Layer.succeedContext(storeCtx))),
        scope
      )
      const d1 = Context.get(first, Driver)
      yield* d1.followup(user("A"))
      yield* d1.whenIdle
      yield* Scope.close(scope, Exit.void)
      yield* Effect.gen(function*() {
        const driver = yield* Driver
        yield* driver.followup(user("B"))
        yield* driver.whenIdle
        const req = (yield* requests)[0]!
        expect([req.provider, req.model, req.system]).toEqual(["p", "m", "sys"])
        expect((yield* shape).filter((s) => s.startsWith("RH"))).toEqual(["RH(initial)", "RH(resume)"])
        expect((yield* shape).slice(-1)).toEqual(["TE(2,completed)"])
      }).pipe(
        Effect.provide(
          Agent.layer({ resume: SessionId.make("s") }).pipe(
            Layer.provideMerge(Layer.mergeAll(Layer.succeedContext(storeCtx), ScriptedModel.layer([ScriptedModel.text("b")]), Tools.layer()))
          )
        )
      )
    }))
})


