/**
 * Acceptance audit of SPEC 2.1 (lossless JSON), 4.3 (later boundaries), 4.4 (no nesting of
 * PreStepFailed), 3.5 (statusChanges for late subscribers) and 6.4 (persisted splice reasons),
 * written against the package root only.
 */
import { describe, expect, it } from "@effect/vitest"
import { Cause, Context, Effect, Exit, Layer, Option, Ref, Stream } from "effect"
import type { Driver as DriverTag } from "../../src/index.js"
import {
  Driver,
  Hooks,
  InvalidEvent,
  MalformedLog,
  PreStep,
  PreStepDecision,
  PreStepFailed,
  ScriptedModel,
  SessionId,
  SessionLog,
  SessionStore
} from "../../src/index.js"
import { agentOver, dataOfType, plugin, requests, scenario, settle, shape, texts, untilEvent, user } from "./AuditHarness.js"

const holder: { driver?: Context.Tag.Service<DriverTag> } = {}
const injectDuringStream = (id: string) => Effect.suspend(() => Effect.orDie(holder.driver!.inject(plugin(id))))

describe("2.1 lossless JSON on append", () => {
  it.scoped("2.1: -0, NaN, Infinity, undefined, sparse arrays, class instances, BigInt and cycles are rejected", () =>
    Effect.gen(function*() {
      const log = yield* SessionLog
      const cyclic: Record<string, unknown> = {}
      cyclic.self = cyclic
      const sparse = [1, , 3]
      const bad: ReadonlyArray<unknown> = [-0, NaN, Infinity, { a: undefined }, sparse, new Map(), new Date(0), 1n, cyclic, () => 1, Symbol("s")]
      for (const data of bad) {
        const exit = yield* Effect.exit(log.append({ type: "x/e", data, ignorable: true }))
        expect(Exit.isFailure(exit) && Option.getOrUndefined(Cause.failureOption(exit.cause)), String(typeof data)).toBeInstanceOf(InvalidEvent)
      }
      const input = { a: [1, { b: "c" }], d: null, e: true }
      const stored = yield* log.append({ type: "x/e", data: input, ignorable: true })
      input.a.push(2)
      expect(stored.data).toEqual({ a: [1, { b: "c" }], d: null, e: true })
      expect(Object.isFrozen(stored.data)).toBe(true)
      expect(stored.seq).toBe(0)
    }).pipe(Effect.provide(scenario([]))))
})

describe("4.3 later boundaries", () => {
  it.scoped("4.3 step 6: turn-stopping listeners are not run while next-step is non-empty", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const hooks = yield* Hooks
      holder.driver = driver
      const calls = yield* Ref.make<ReadonlyArray<string>>([])
      yield* hooks.onTurnStopping((input) => Ref.update(calls, (a) => [...a, `${input.turn}.${input.step}`]))
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect(yield* Ref.get(calls)).toEqual(["1.2"])
      expect(yield* texts).toEqual(["A", "C"])
    }).pipe(Effect.provide(scenario([ScriptedModel.text("a", { during: injectDuringStream("C") }), ScriptedModel.text("c")]))))

  it.scoped("4.3/7.3: a later boundary entering [] after a natural ending closes the turn with that ending (max-tokens sticky)", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      holder.driver = driver
      yield* (yield* PreStep).register((input, next) => input.boundary === "later" ? Effect.succeed(PreStepDecision.enter([])) : next())
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      const s = yield* shape
      expect(s.slice(s.indexOf("SE(1,1)"))).toEqual(["SE(1,1)", "CLM(ns,0,1)", "TE(1,max-tokens)"])
      expect(yield* requests).toHaveLength(1)
    }).pipe(Effect.provide(scenario([
      ScriptedModel.response({ text: "trunc", finish: "max-tokens", during: injectDuringStream("C") }),
      ScriptedModel.text("never")
    ]))))

  it.scoped("7.3: a steer inserted during a later pre-step that enters [] continues the chain; the next turn claims it", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      holder.driver = driver
      yield* (yield* PreStep).register((input, next) =>
        input.boundary === "later" && input.turn === 1
          ? Effect.as(Effect.orDie(driver.steer(user("S"))), PreStepDecision.enter([]))
          : next())
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      const s = yield* shape
      const te = s.indexOf("TE(1,completed)")
      expect(s.slice(te, te + 5)).toEqual(["TE(1,completed)", "TS(2)", "CLM(ns,0,1)", "SS(2,1)", "UM(S)"])
    }).pipe(Effect.provide(scenario([ScriptedModel.text("a", { during: injectDuringStream("C") }), ScriptedModel.text("s")]))))
})

describe("4.4 PreStepFailed does not nest", () => {
  it.scoped("4.4: a downstream failure propagated by an upstream listener reaches run as the same PreStepFailed", () =>
    Effect.gen(function*() {
      const preStep = yield* PreStep
      let seenByUpstream: unknown
      yield* preStep.register((_input, next) => Effect.tapError(next(), (e) => Effect.sync(() => (seenByUpstream = e))))
      yield* preStep.register(() => Effect.fail("inner broke"))
      const error = yield* Effect.flip(preStep.run({ sessionId: SessionId.make("s"), turn: 1, step: 1, boundary: "initial", messages: [] }))
      expect(error).toBeInstanceOf(PreStepFailed)
      expect(error).toMatchObject({ turn: 1, step: 1, cause: "inner broke" })
      expect(seenByUpstream).toBeInstanceOf(PreStepFailed)
      expect(error).toBe(seenByUpstream)
    }).pipe(Effect.provide(scenario([]))))

  it.scoped("4.3: the turn/end failure of a nested pre-step failure is the listener's own error", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const preStep = yield* PreStep
      yield* preStep.register((_input, next) => next())
      yield* preStep.register(() => Effect.fail({ message: "coded", code: "E_CODE" }))
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect((yield* dataOfType("turn/end"))[0]!.reason).toEqual({ kind: "error", error: { message: "coded", code: "E_CODE" } })
    }).pipe(Effect.provide(scenario([]))))
})

describe("3.5 / 6.4", () => {
  it.scoped("3.5: a statusChanges subscriber joining while running first receives running", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "assistant/chunk")
      const first = yield* Stream.runHead(driver.statusChanges)
      expect(first).toEqual(Option.some("running"))
      yield* driver.cancel({ kind: "user" })
      yield* driver.whenIdle
      yield* settle
    }).pipe(Effect.provide(scenario([ScriptedModel.hang({ text: "x" })]))))

  it.scoped("6.4: an invalid persisted splice fails resume with MalformedLog naming it", () =>
    Effect.gen(function*() {
      const storeCtx = yield* Layer.build(SessionStore.layerMemory)
      const store = Context.get(storeCtx, SessionStore)
      const id = SessionId.make("s")
      yield* store.create({ formatVersion: 1, sessionId: id, createdAt: 0, seedLength: 0 }, [
        { type: "agent/inbox/spliced", seq: 0, time: 0, data: { target: "next-step", start: 0, inserted: [user("X")] } } as any,
        { type: "agent/inbox/spliced", seq: 1, time: 0, data: { target: "next-step", start: 0, removedCount: 2, inserted: [], outcome: "canceled" } } as any
      ])
      const exit = yield* Effect.exit(Layer.build(agentOver([], { resume: true }).pipe(Layer.provide(Layer.succeedContext(storeCtx)))))
      const error = Exit.isFailure(exit) ? Option.getOrUndefined(Cause.failureOption(exit.cause)) : undefined
      expect(error).toBeInstanceOf(MalformedLog)
      expect(error).toMatchObject({ sessionId: "s", seq: 1 })
      expect((error as MalformedLog).reason).toContain("invalid persisted inbox splice at seq 1")
    }))
})
