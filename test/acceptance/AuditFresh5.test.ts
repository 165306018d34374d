/**
 * Fifth fresh acceptance audit: the loop itself — SPEC 4.3 (turn), 4.4 (pre-step waterfall), 4.5
 * (steps, streams, retries), 4.6 (tools) and 4.7 (turn-stopping, failures) — against the package root.
 */
import { describe, expect, it } from "@effect/vitest"
import { Context, Deferred, Duration, Effect, Exit, Layer, Option, Random, Schema, Scope, Stream, TestClock } from "effect"
import type { ModelRequest, StreamChunk } from "../../src/index.js"
import {
  Agent,
  CancelCause,
  Driver,
  Hooks,
  Inbox,
  MemoryStoreControl,
  Model,
  ModelError,
  PreStep,
  PreStepDecision,
  RequestErrorAction,
  ScriptedModel,
  SessionId,
  SessionLog,
  SessionStore,
  Tool,
  ToolPreDecision,
  Tools
} from "../../src/index.js"
import {
  agentOver,
  asId,
  closeOut,
  dataOfType,
  events,
  reasons,
  recordLive,
  requests,
  scenario,
  settle,
  shape,
  texts,
  until,
  untilEvent,
  user
} from "./AuditHarness.js"
import { gate, open } from "./AuditHarness.js"

const empty = Schema.Struct({})
type Loose = { readonly [k: string]: any }

const okTool = (name: string, mode: "parallel" | "exclusive" = "exclusive", body?: Effect.Effect<any, any>) =>
  Tool.make(name, { description: name, parameters: empty, mode, execute: () => body ?? Effect.succeed("ok") })

const calls = (...cs: ReadonlyArray<readonly [string, string]>) =>
  ScriptedModel.response({ toolCalls: cs.map(([id, name]) => ({ id, name, arguments: {} })) })

/** A model whose n-th request gets the n-th stream; requests are recorded. */
const streamsModel = (streams: ReadonlyArray<(r: ModelRequest) => Stream.Stream<StreamChunk, any>>) => {
  const seen: Array<ModelRequest> = []
  const layer = Layer.succeed(Model, {
    stream: (r: ModelRequest) => {
      const i = seen.length
      seen.push(r)
      const make = streams[i]
      return (make === undefined ? Stream.dieMessage("no stream") : make(r)) as Stream.Stream<StreamChunk, any>
    }
  })
  return { seen, layer }
}

const customAgent = (modelLayer: Layer.Layer<Model>, tools: ReadonlyArray<any> = []) =>
  Agent.layer({ sessionId: SessionId.make("s"), model: { provider: "p", model: "m" }, invariants: "check" }).pipe(
    Layer.provideMerge(Layer.mergeAll(SessionStore.layerMemory, Tools.layer({ tools }), modelLayer))
  )

const textChunks: ReadonlyArray<StreamChunk> = [
  { type: "block-start", index: 0, block: "text" },
  { type: "text-delta", index: 0, text: "hi" },
  { type: "block-end", index: 0 }
]
const stop: StreamChunk = { type: "finish", finish: { kind: "stop" } }

const chunkData = Effect.map(dataOfType("assistant/chunk"), (ds) => ds.map((d) => d.chunk as Loose))

// ---------------------------------------------------------------------------------------------------
describe("4.3 / 4.4: turn and pre-step", () => {
  it.scoped("4.4: added messages become known as `entered`; claimed messages left out stay `claimed`", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const inbox = yield* Inbox
      const pre = yield* PreStep
      yield* pre.register((input, next) => input.boundary === "initial" ? Effect.succeed(PreStepDecision.enter([user("X")])) : next())
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect(yield* shape).toEqual([
        "INS(nt,0,[A])", "TS(1)", "CLM(nt,0,1)", "SS(1,1)", "UM(X)", "RH(initial)", "CH(block-start)", "CH(text-delta)", "CH(block-end)",
        "CH(finish stop)", "AM", "SE(1,1)", "TE(1,completed)"
      ])
      expect(yield* inbox.idState(asId("X"))).toEqual(Option.some("entered"))
      expect(yield* inbox.idState(asId("A"))).toEqual(Option.some("claimed"))
    }).pipe(Effect.provide(scenario([ScriptedModel.text("ok")]))))

  it.scoped("4.4/4.2: Enter naming an id pending in the inbox → error(DUPLICATE_MESSAGE) decided in TX-STEP, no step; the item stays pending", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const inbox = yield* Inbox
      const pre = yield* PreStep
      yield* pre.register((input, next) =>
        Effect.gen(function*() {
          if (input.turn !== 1) return yield* next()
          yield* driver.inject(user("P"))
          return PreStepDecision.enter([...input.messages, user("P")])
        })
      )
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      const s = yield* shape
      expect(s).not.toContain("SS(1,1)")
      expect(s.at(-1)).toBe("TE(1,error(DUPLICATE_MESSAGE))")
      expect(yield* inbox.idState(asId("P"))).toEqual(Option.some("pending"))
      expect((yield* inbox.nextStep).map((m) => m.id)).toEqual(["P"])
      expect(yield* requests).toHaveLength(0)
    }).pipe(Effect.provide(scenario([]))))

  it.scoped("4.4: Enter may carry a claimed id with new content (it belongs to the claimed batch)", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const pre = yield* PreStep
      yield* pre.register(() => Effect.succeed(PreStepDecision.enter([user("A", "changed")])))
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect(yield* texts).toEqual(["changed"])
      expect((yield* reasons).map((r) => r.kind)).toEqual(["completed"])
    }).pipe(Effect.provide(scenario([ScriptedModel.text("ok")]))))

  it.scoped("4.4: an invalid element → error(INVALID_MESSAGE) without step/start; a valid addition of that batch stays unknown", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const inbox = yield* Inbox
      const pre = yield* PreStep
      yield* pre.register((input) =>
        Effect.succeed(PreStepDecision.enter([...input.messages, user("X"), { id: "Y", role: "user", content: "nope" } as any]))
      )
      const live = yield* recordLive
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect(yield* shape).toEqual(["INS(nt,0,[A])", "TS(1)", "CLM(nt,0,1)", "TE(1,error(INVALID_MESSAGE))"])
      expect(yield* inbox.idState(asId("X"))).toEqual(Option.none())
      expect((yield* live).filter((e) => e.type === "agent/error").map((e: any) => [e.turn, e.step])).toEqual([[1, 1]])
    }).pipe(Effect.provide(scenario([]))))

  it.scoped("4.3 D15: the initial pre-step entering [] closes completed with zero steps; a pending follow-up continues", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const pre = yield* PreStep
      yield* pre.register((input, next) =>
        input.turn === 1
          ? Effect.as(Effect.orDie(driver.followup(user("B"))), PreStepDecision.enter([]))
          : next()
      )
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect(yield* shape).toEqual([
        "INS(nt,0,[A])", "TS(1)", "CLM(nt,0,1)", "INS(nt,0,[B])", "TE(1,completed)",
        "TS(2)", "CLM(nt,0,1)", "SS(2,1)", "UM(B)", "RH(initial)", "CH(block-start)", "CH(text-delta)", "CH(block-end)",
        "CH(finish stop)", "AM", "SE(2,1)", "TE(2,completed)"
      ])
      expect(yield* requests).toHaveLength(1)
    }).pipe(Effect.provide(scenario([ScriptedModel.text("ok")]))))

  it.scoped("4.3 R16: a later boundary entering [] after a max-tokens step closes max-tokens (sticky)", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const hooks = yield* Hooks
      const pre = yield* PreStep
      const inbox = yield* Inbox
      let steered = false
      yield* hooks.onTurnStopping(() => steered ? Effect.void : Effect.zipRight(Effect.sync(() => (steered = true)), driver.steer(user("S"))))
      yield* pre.register((input, next) => input.boundary === "later" ? Effect.succeed(PreStepDecision.enter([])) : next())
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      const s = yield* shape
      expect(s.slice(-4)).toEqual(["SE(1,1)", "INS(ns,0,[S])", "CLM(ns,0,1)", "TE(1,max-tokens)"])
      expect(yield* requests).toHaveLength(1)
      expect(yield* inbox.idState(asId("S"))).toEqual(Option.some("claimed"))
    }).pipe(Effect.provide(scenario([ScriptedModel.response({ text: "cut", finish: "max-tokens" })]))))

  it.scoped("4.3: max-tokens is sticky across a later completed step (R16)", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const hooks = yield* Hooks
      let steered = false
      yield* hooks.onTurnStopping(() => steered ? Effect.void : Effect.zipRight(Effect.sync(() => (steered = true)), driver.steer(user("S"))))
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect((yield* reasons).map((r) => r.kind)).toEqual(["max-tokens"])
      expect(yield* requests).toHaveLength(2)
    }).pipe(Effect.provide(scenario([ScriptedModel.response({ text: "cut", finish: "max-tokens" }), ScriptedModel.text("ok")]))))

  it.scoped("4.3: after tools the later pre-step sees boundary later with []; entering [] still runs a step without user messages", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const pre = yield* PreStep
      const inputs: Array<Loose> = []
      yield* pre.register((input, next) => Effect.zipRight(Effect.sync(() => inputs.push({ ...input, messages: input.messages.map((m) => m.id) })), next()))
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect(inputs.map(({ boundary, messages, step, turn }) => ({ turn, step, boundary, messages }))).toEqual([
        { turn: 1, step: 1, boundary: "initial", messages: ["A"] },
        { turn: 1, step: 2, boundary: "later", messages: [] }
      ])
      const s = yield* shape
      const i = s.indexOf("SS(1,2)")
      expect(i).toBeGreaterThan(0)
      expect(s[i + 1]).not.toMatch(/^UM/)
      expect(s.filter((x) => x.startsWith("UM"))).toEqual(["UM(A)"])
      expect(yield* requests).toHaveLength(2)
      expect((yield* reasons).map((r) => r.kind)).toEqual(["completed"])
    }).pipe(Effect.provide(scenario([calls(["c1", "t"]), ScriptedModel.text("done")], { tools: [okTool("t")] }))))

  it.scoped("4.3: a rejection at a later boundary ends blocked{message}; the claimed steer is dropped (stays claimed)", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const hooks = yield* Hooks
      const pre = yield* PreStep
      const inbox = yield* Inbox
      let steered = false
      yield* hooks.onTurnStopping(() => steered ? Effect.void : Effect.zipRight(Effect.sync(() => (steered = true)), driver.steer(user("S"))))
      yield* pre.register((input, next) => input.boundary === "later" ? Effect.succeed(PreStepDecision.reject("no more")) : next())
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect(yield* reasons).toEqual([{ kind: "blocked", message: "no more" }])
      expect(yield* inbox.idState(asId("S"))).toEqual(Option.some("claimed"))
      expect((yield* shape).slice(-3)).toEqual(["INS(ns,0,[S])", "CLM(ns,0,1)", "TE(1,blocked)"])
    }).pipe(Effect.provide(scenario([ScriptedModel.text("ok")]))))

  it.scoped("4.3/4.7: PreStepFailed ends error with the listener's own error mapped ({message, code}), agent/error carries the original", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const pre = yield* PreStep
      const original = { message: "mine", code: "MY_CODE", extra: 1 }
      yield* pre.register(() => Effect.fail(original))
      const live = yield* recordLive
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect(yield* reasons).toEqual([{ kind: "error", error: { message: "mine", code: "MY_CODE" } }])
      const errors = (yield* live).filter((e) => e.type === "agent/error") as Array<Loose>
      expect(errors.map((e) => [e.turn, e.step, e.error])).toEqual([[1, 1, original]])
    }).pipe(Effect.provide(scenario([]))))
})

// ---------------------------------------------------------------------------------------------------
describe("4.7: turn-stopping", () => {
  it.scoped("4.7: turn-stopping listeners run serially in registration order with {sessionId, turn, step}, not while next-step is non-empty", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const hooks = yield* Hooks
      const seen: Array<string> = []
      yield* hooks.onTurnStopping((i) => Effect.sync(() => seen.push(`a:${i.sessionId}:${i.turn}:${i.step}`)))
      yield* hooks.onTurnStopping((i) => Effect.sync(() => seen.push(`b:${i.turn}:${i.step}`)))
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      // step 1 ran tools (no stop): listeners only after step 2.
      expect(seen).toEqual(["a:s:1:2", "b:1:2"])
    }).pipe(Effect.provide(scenario([calls(["c1", "t"]), ScriptedModel.text("done")], { tools: [okTool("t")] }))))

  it.scoped("4.7: a turn-stopping failure ends the turn error with the listener's error mapped; a string failure gives code UNKNOWN", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const hooks = yield* Hooks
      yield* hooks.onTurnStopping(() => Effect.fail("stopping broke"))
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect(yield* reasons).toEqual([{ kind: "error", error: { message: "stopping broke", code: "UNKNOWN" } }])
      expect((yield* shape).slice(-2)).toEqual(["SE(1,1)", "TE(1,error(UNKNOWN))"])
    }).pipe(Effect.provide(scenario([ScriptedModel.text("ok")]))))

  it.scoped("4.7: a steer made by a turn-stopping listener is claimed at TX-BOUNDARY and another step runs", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const hooks = yield* Hooks
      let n = 0
      yield* hooks.onTurnStopping(() => n++ === 0 ? driver.steer(user("S")) : Effect.void)
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      const s = yield* shape
      expect(s.slice(s.indexOf("SE(1,1)"), s.indexOf("SE(1,1)") + 5)).toEqual(["SE(1,1)", "INS(ns,0,[S])", "CLM(ns,0,1)", "SS(1,2)", "UM(S)"])
      expect(n).toBe(2)
    }).pipe(Effect.provide(scenario([ScriptedModel.text("one"), ScriptedModel.text("two")]))))
})

// ---------------------------------------------------------------------------------------------------
describe("4.5: steps", () => {
  it.scoped("4.5 Q1: a later request's seed is the config of the last logged header (a hook's change carries over, no RH(change))", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const hooks = yield* Hooks
      const seeds: Array<Loose> = []
      yield* hooks.onRequest((input, next) =>
        Effect.gen(function*() {
          seeds.push({ step: input.step, config: input.config, frozen: Object.isFrozen(input.config) })
          const config = yield* next()
          return input.step === 1 ? { ...config, model: "m2", temperature: 0.5 } : config
        })
      )
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect(seeds).toEqual([
        { step: 1, config: { provider: "p", model: "m" }, frozen: true },
        { step: 2, config: { provider: "p", model: "m2", temperature: 0.5 }, frozen: true }
      ])
      expect((yield* shape).filter((x) => x.startsWith("RH"))).toEqual(["RH(initial)"])
      expect((yield* requests).map((r) => [r.model, r.temperature])).toEqual([["m2", 0.5], ["m2", 0.5]])
    }).pipe(Effect.provide(scenario([calls(["c1", "t"]), ScriptedModel.text("done")], { tools: [okTool("t")] }))))

  it.scoped("4.5 Q1: provider or model missing after onRequest → error(NO_ROUTE), no request/header, no dispatch", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const hooks = yield* Hooks
      let offered = 0
      yield* hooks.onRequest(() => Effect.succeed({ provider: "p" }))
      yield* hooks.onRequestError((_, next) => Effect.zipRight(Effect.sync(() => offered++), next()))
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect((yield* reasons).map((r) => r.kind === "error" ? r.error.code : r.kind)).toEqual(["NO_ROUTE"])
      expect((yield* shape).slice(-3)).toEqual(["UM(A)", "SE(1,1)", "TE(1,error(NO_ROUTE))"])
      expect(yield* requests).toHaveLength(0)
      expect(offered).toBe(0)
    }).pipe(Effect.provide(scenario([ScriptedModel.text("never")]))))

  it.scoped("4.5: an onRequest failure is a turn failure not offered to request-error recovery", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const hooks = yield* Hooks
      let offered = 0
      yield* hooks.onRequest(() => Effect.fail({ message: "cfg", code: "CFG" }))
      yield* hooks.onRequestError((_, next) => Effect.zipRight(Effect.sync(() => offered++), next()))
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect(yield* reasons).toEqual([{ kind: "error", error: { message: "cfg", code: "CFG" } }])
      expect(offered).toBe(0)
    }).pipe(Effect.provide(scenario([ScriptedModel.text("never")]))))

  it.scoped("4.5 Q2/Q6: a retry whose onRequest changes the config logs RH(change); attempt 2 chunks/AM carry attempt 2 and AM cites only them", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const hooks = yield* Hooks
      yield* hooks.onRequest((input, next) => Effect.map(next(), (c) => input.attempt === 2 ? { ...c, temperature: 0.7 } : c))
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "llm/retry")
      yield* TestClock.adjust("2 seconds")
      expect(yield* closeOut).toEqual([])
      expect(yield* shape).toEqual([
        "INS(nt,0,[A])", "TS(1)", "CLM(nt,0,1)", "SS(1,1)", "UM(A)", "RH(initial)", "CH(finish error)", "RT(1)",
        "RH(change)", "CH(block-start)", "CH(text-delta)", "CH(block-end)", "CH(finish stop)", "AM", "SE(1,1)", "TE(1,completed)"
      ])
      const es = yield* events
      const a2 = es.filter((e) => e.type === "assistant/chunk" && (e.data as Loose).attempt === 2).map((e) => e.seq)
      expect(a2).toHaveLength(4)
      const am = es.find((e) => e.type === "assistant/message")!
      expect((am.data as Loose).attempt).toBe(2)
      expect((am as Loose).sourceEventSeqs).toEqual(a2)
      expect((yield* requests).map((r) => [r.attempt, r.temperature])).toEqual([[1, undefined], [2, 0.7]])
      const retry = (yield* dataOfType("llm/retry"))[0]!
      expect(retry).toMatchObject({ turn: 1, step: 1, attempt: 1, failure: { message: "busy", code: "OVERLOADED" } })
      expect(retry.delayMs).toBeGreaterThanOrEqual(800)
      expect(retry.delayMs).toBeLessThanOrEqual(1200)
      expect(Number.isInteger(retry.delayMs)).toBe(true)
    }).pipe(Effect.provide(scenario([ScriptedModel.fail({ message: "busy", code: "OVERLOADED" }), ScriptedModel.text("ok")]))))

  it.scoped("4.5 D10: retryAfterMs floors the delay; the retry sleeps exactly delayMs on the Clock", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "llm/retry")
      expect((yield* dataOfType("llm/retry"))[0]!.delayMs).toBe(5000)
      yield* TestClock.adjust(4999)
      yield* settle
      expect(yield* requests).toHaveLength(1)
      yield* TestClock.adjust(1)
      expect(yield* closeOut).toEqual([])
      expect(yield* requests).toHaveLength(2)
    }).pipe(Effect.provide(scenario([ScriptedModel.fail({ message: "slow", code: "X", status: 429, retryAfterMs: 5000 }), ScriptedModel.text("ok")]))))

  it.scoped("4.5 D10: at most 3 attempts; the third failure fails the turn with that LlmFailure verbatim", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const f = { message: "down", code: "X", status: 503, requestId: "req-1" }
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "llm/retry")
      yield* TestClock.adjust("2 seconds")
      yield* untilEvent((e) => e.type === "llm/retry" && (e.data as Loose).attempt === 2)
      const rt2 = (yield* dataOfType("llm/retry"))[1]!
      expect(rt2.delayMs).toBeGreaterThanOrEqual(1600)
      expect(rt2.delayMs).toBeLessThanOrEqual(2400)
      yield* TestClock.adjust("3 seconds")
      expect(yield* closeOut).toEqual([])
      expect(yield* reasons).toEqual([{ kind: "error", error: f }])
      expect((yield* shape).filter((x) => x.startsWith("RT") || x.startsWith("RH"))).toEqual(["RH(initial)", "RT(1)", "RT(2)"])
      expect((yield* requests).map((r) => r.attempt)).toEqual([1, 2, 3])
    }).pipe(Effect.provide(scenario([
      ScriptedModel.fail({ message: "down", code: "X", status: 503, requestId: "req-1" }),
      ScriptedModel.fail({ message: "down", code: "X", status: 503, requestId: "req-1" }),
      ScriptedModel.fail({ message: "down", code: "X", status: 503, requestId: "req-1" })
    ]))))

  it.scoped("4.5 D10: retryable:false wins over status 429 → no retry", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect((yield* shape).filter((x) => x.startsWith("RT"))).toEqual([])
      expect((yield* reasons)[0]).toEqual({ kind: "error", error: { message: "no", code: "RATE_LIMIT", status: 429, retryable: false } })
    }).pipe(Effect.provide(scenario([ScriptedModel.fail({ message: "no", code: "RATE_LIMIT", status: 429, retryable: false })]))))

  it.scoped("4.5: a listener's Retry is logged with the delay rounded to whole ms, and slept exactly", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const hooks = yield* Hooks
      yield* hooks.onRequestError((input) => Effect.succeed(input.attempt === 1 ? RequestErrorAction.retry(Duration.micros(1_234_600n)) : RequestErrorAction.fail))
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "llm/retry")
      expect((yield* dataOfType("llm/retry"))[0]!.delayMs).toBe(1235)
      yield* TestClock.adjust(1234)
      yield* settle
      expect(yield* requests).toHaveLength(1)
      yield* TestClock.adjust(1)
      expect(yield* closeOut).toEqual([])
      expect(yield* requests).toHaveLength(2)
      expect((yield* reasons).map((r) => r.kind)).toEqual(["completed"])
    }).pipe(Effect.provide(scenario([ScriptedModel.fail({ message: "x", code: "NOT_RETRYABLE" }), ScriptedModel.text("ok")]))))

  it.scoped("4.5: a cancel during the backoff sleep aborts the turn (no further attempt)", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "llm/retry")
      yield* driver.cancel(CancelCause.user)
      expect(yield* closeOut).toEqual([])
      expect((yield* shape).slice(-3)).toEqual(["RT(1)", "SE(1,1)", "TE(1,aborted(user))"])
      expect(yield* requests).toHaveLength(1)
    }).pipe(Effect.provide(scenario([ScriptedModel.fail({ message: "busy", code: "OVERLOADED" }), ScriptedModel.text("ok")]))))

  it.scoped("4.5: a provider-side aborted finish is a failure, never a cancellation", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect(yield* reasons).toEqual([{ kind: "error", error: { message: "provider stopped", code: "ABORTED" } }])
      const finish = (yield* chunkData).at(-1)!
      expect(finish).toEqual({ type: "finish", finish: { kind: "aborted", failure: { message: "provider stopped", code: "ABORTED" } } })
    }).pipe(Effect.provide(scenario([ScriptedModel.fail({ message: "provider stopped", code: "ABORTED" }, { finish: "aborted" })]))))

  it.scoped("4.5 Q3: the request is frozen, its messages frozen and equal to the derived history", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const log = yield* SessionLog
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      const [r] = yield* requests
      expect(Object.isFrozen(r)).toBe(true)
      expect(Object.isFrozen(r!.messages)).toBe(true)
      expect(r!.messages).toEqual((yield* log.messages).slice(0, 1))
      expect(r).toMatchObject({ sessionId: "s", turn: 1, step: 1, attempt: 1, provider: "p", model: "m", tools: [] })
    }).pipe(Effect.provide(scenario([ScriptedModel.text("ok")]))))
})

describe("4.5 Q5/Q6: streams", () => {
  it.scoped("4.5 Q5: a stream defect that is not a ModelError → synthetic finish error {message, code: UNKNOWN}", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      const cs = yield* chunkData
      expect(cs).toEqual([...textChunks.slice(0, 2), { type: "finish", finish: { kind: "error", failure: { message: "kaput", code: "UNKNOWN" } } }])
      expect(yield* reasons).toEqual([{ kind: "error", error: { message: "kaput", code: "UNKNOWN" } }])
    }).pipe(Effect.provide(customAgent(streamsModel([
      () => Stream.concat(Stream.fromIterable(textChunks.slice(0, 2)), Stream.die(new Error("kaput")))
    ]).layer))))

  it.scoped("4.5 Q5: a plain-object stream failure gives message \"[object Object]\"", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect(yield* reasons).toEqual([{ kind: "error", error: { message: "[object Object]", code: "UNKNOWN" } }])
    }).pipe(Effect.provide(customAgent(streamsModel([() => Stream.fail({ what: 1 })]).layer))))

  it.scoped("4.5 Q5: chunks after the finish are not logged, and a later stream failure is ignored", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect(yield* chunkData).toEqual([...textChunks, stop])
      expect((yield* reasons).map((r) => r.kind)).toEqual(["completed"])
    }).pipe(Effect.provide(customAgent(streamsModel([
      () => Stream.concat(Stream.fromIterable([...textChunks, stop, { type: "text-delta", index: 0, text: "late" } as StreamChunk]), Stream.fail({ message: "late", code: "LATE" }))
    ]).layer))))

  it.scoped("4.5 Q5: after a stop finish the loop keeps pulling until the stream ends (the turn waits for it)", () => {
    const g = gate()
    const ended = gate()
    const tail = Effect.zipRight(Deferred.await(g), Effect.as(open(ended), { type: "usage", usage: { inputTokens: 1, outputTokens: 1 } } as StreamChunk))
    return Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "assistant/message")
      yield* settle
      expect((yield* shape).some((x) => x.startsWith("TE"))).toBe(false)
      yield* open(g)
      expect(yield* closeOut).toEqual([])
      expect(yield* Deferred.isDone(ended)).toBe(true)
      expect((yield* reasons).map((r) => r.kind)).toEqual(["completed"])
      expect(yield* chunkData).toEqual([...textChunks, stop])
    }).pipe(Effect.provide(customAgent(streamsModel([() => Stream.concat(Stream.fromIterable([...textChunks, stop]), Stream.fromEffect(tail))]).layer)))
  })

  for (
    const [label, bad] of [
      ["a delta for an unopened index", { type: "text-delta", index: 5, text: "x" }],
      ["a block-end for an unopened index", { type: "block-end", index: 5 }],
      ["a block-start reusing an open index", { type: "block-start", index: 0, block: "reasoning" }]
    ] as const
  ) {
    it.scoped(`4.5 Q5: malformed order (${label}) → synthetic MALFORMED_STREAM finish in its place; reading stops`, () =>
      Effect.gen(function*() {
        const driver = yield* Driver
        yield* driver.followup(user("A"))
        expect(yield* closeOut).toEqual([])
        const cs = yield* chunkData
        expect(cs.slice(0, 2)).toEqual(textChunks.slice(0, 2))
        expect(cs).toHaveLength(3)
        expect(cs[2]).toMatchObject({ type: "finish", finish: { kind: "error", failure: { code: "MALFORMED_STREAM" } } })
        expect((yield* reasons).map((r) => r.kind === "error" ? r.error.code : r.kind)).toEqual(["MALFORMED_STREAM"])
        expect((yield* shape).filter((x) => x === "AM")).toEqual([])
      }).pipe(Effect.provide(scenario([ScriptedModel.chunks([...textChunks.slice(0, 2), bad, ...textChunks.slice(2), stop], { then: "hang" })]))))
  }

  it.scoped("4.5 Q5: a stream that ends without a finish → synthetic finish error NO_FINISH after the logged chunks", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      const cs = yield* chunkData
      expect(cs.slice(0, 3)).toEqual(textChunks)
      expect(cs[3]).toMatchObject({ type: "finish", finish: { kind: "error", failure: { code: "NO_FINISH" } } })
      expect((yield* reasons).map((r) => r.kind === "error" ? r.error.code : r.kind)).toEqual(["NO_FINISH"])
    }).pipe(Effect.provide(scenario([ScriptedModel.chunks(textChunks)]))))

  it.scoped("4.5 Q6: a lone stop finish gives an AM with empty content citing the finish chunk", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      const es = yield* events
      const ch = es.find((e) => e.type === "assistant/chunk")!
      const am = es.find((e) => e.type === "assistant/message")!
      expect((am.data as Loose).message.content).toEqual([])
      expect((am as Loose).sourceEventSeqs).toEqual([ch.seq])
      expect(am.seq).toBe(ch.seq + 1)
    }).pipe(Effect.provide(scenario([ScriptedModel.chunks([stop])]))))

  it.scoped("4.5 assembler: max-tokens drops tool-call blocks and replayState; the turn ends max-tokens without tools", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      let ran = 0
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      const am = (yield* dataOfType("assistant/message"))[0]!
      expect(am.message.content).toEqual([{ type: "text", text: "t" }])
      expect(am.message.source).toEqual({ kind: "model", provider: "p", model: "m" })
      expect((yield* shape).filter((x) => x.startsWith("TC"))).toEqual([])
      expect(yield* reasons).toEqual([{ kind: "max-tokens" }])
      expect(ran).toBe(0)
    }).pipe(Effect.provide(scenario([ScriptedModel.response({ text: "t", toolCalls: [{ id: "c1", name: "t", arguments: {} }], replayState: { r: 1 }, finish: "max-tokens" })], { tools: [okTool("t")] }))))
})

// ---------------------------------------------------------------------------------------------------
const gatedTool = (name: string, mode: "parallel" | "exclusive", g: Deferred.Deferred<void>, started?: Array<string>, result: Effect.Effect<any, any> = Effect.succeed("ok")) =>
  Tool.make(name, {
    description: name,
    parameters: empty,
    mode,
    execute: (_p, ctx) => Effect.zipRight(Effect.zipRight(Effect.sync(() => started?.push(ctx.callId)), Deferred.await(g)), result)
  })

const resultsByCall = Effect.map(dataOfType("tool/result"), (ds) =>
  Object.fromEntries(ds.map((d) => [d.message.content[0].toolCallId, { text: d.message.content[0].content[0]?.text, isError: d.message.content[0].isError, error: d.error, meta: d.meta }])))

class Oops extends Schema.TaggedError<Oops>("Oops")("Oops", { message: Schema.String, code: Schema.String }) {}

describe("4.6: tools", () => {
  it.scoped("4.6 grouping: an unknown tool between parallel calls is exclusive (a barrier)", () => {
    const g = gate()
    const started: Array<string> = []
    return Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      yield* until(Effect.sync(() => started.length === 1))
      yield* settle
      expect((yield* shape).filter((x) => x.startsWith("TC") || x.startsWith("TR"))).toEqual(["TC(c1)"])
      yield* open(g)
      expect(yield* closeOut).toEqual([])
      expect((yield* shape).filter((x) => x.startsWith("TC") || x.startsWith("TR"))).toEqual(["TC(c1)", "TR(c1)", "TC(c2)", "TR?(c2)", "TC(c3)", "TR(c3)"])
      const r = yield* resultsByCall
      expect(r.c2).toEqual({ text: "Error: unknown tool nope", isError: true, error: { name: "UnknownToolError", code: "UNKNOWN_TOOL" }, meta: undefined })
    }).pipe(Effect.provide(scenario([calls(["c1", "p"], ["c2", "nope"], ["c3", "p"]), ScriptedModel.text("done")], { tools: [gatedTool("p", "parallel", g, started)] })))
  })

  it.scoped("4.6 grouping: a parallel call after an exclusive one starts only after it committed", () => {
    const g = gate()
    const started: Array<string> = []
    return Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      yield* until(Effect.sync(() => started.length === 1))
      yield* settle
      expect(started).toEqual(["c1"])
      yield* open(g)
      expect(yield* closeOut).toEqual([])
      const tctr = (yield* shape).filter((x) => x.startsWith("TC") || x.startsWith("TR"))
      expect(tctr.slice(0, 3)).toEqual(["TC(c1)", "TR(c1)", "TC(c2)"])
      expect(tctr.filter((x) => x.startsWith("TR"))).toEqual(["TR(c1)", "TR(c2)", "TR(c3)"])
    }).pipe(Effect.provide(scenario([calls(["c1", "x"], ["c2", "p"], ["c3", "p"]), ScriptedModel.text("done")], {
      tools: [gatedTool("x", "exclusive", g, started), gatedTool("p", "parallel", g, started)]
    })))
  })

  it.scoped("4.6 grouping: the mode is read just before the start, so setMode by an earlier result applies", () => {
    const g = gate()
    const started: Array<string> = []
    return Effect.gen(function*() {
      const tools = yield* Tools
      const driver = yield* Driver
      const setter = Tool.make("a", { description: "a", parameters: empty, mode: "exclusive", execute: () => Effect.as(tools.setMode("b", "parallel"), "set") })
      yield* tools.register(setter)
      yield* driver.followup(user("A"))
      yield* until(Effect.sync(() => started.length === 2))
      yield* settle
      expect((yield* shape).filter((x) => x.startsWith("TC") || x.startsWith("TR"))).toEqual(["TC(c1)", "TR(c1)", "TC(c2)", "TC(c3)"])
      yield* open(g)
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario([calls(["c1", "a"], ["c2", "b"], ["c3", "b"]), ScriptedModel.text("done")], {
      tools: [gatedTool("b", "exclusive", g, started)]
    })))
  })

  it.scoped("4.6 pool: with cap 2 releasing c1 gives TC(c1) TC(c2) TR(c1) TC(c3)", () => {
    const gs = { c1: gate(), c2: gate(), c3: gate() } as Record<string, Deferred.Deferred<void>>
    const started: Array<string> = []
    const p = Tool.make("p", {
      description: "p", parameters: empty, mode: "parallel",
      execute: (_x, ctx) => Effect.zipRight(Effect.zipRight(Effect.sync(() => started.push(ctx.callId)), Deferred.await(gs[ctx.callId]!)), Effect.succeed("ok"))
    })
    return Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      yield* until(Effect.sync(() => started.length === 2))
      yield* settle
      expect(started).toEqual(["c1", "c2"])
      yield* open(gs.c1!)
      yield* until(Effect.sync(() => started.length === 3))
      expect((yield* shape).filter((x) => x.startsWith("TC") || x.startsWith("TR"))).toEqual(["TC(c1)", "TC(c2)", "TR(c1)", "TC(c3)"])
      yield* open(gs.c2!)
      yield* open(gs.c3!)
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario([calls(["c1", "p"], ["c2", "p"], ["c3", "p"]), ScriptedModel.text("done")], { tools: [p], maxParallelToolCalls: 2 })))
  })

  it.scoped("4.6 mapping: typed failures (plain Error, tagged error with code, string) and a defect", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      const r = yield* resultsByCall
      expect(r.c1).toEqual({ text: "Error: plain", isError: true, error: { name: "Error", code: "TOOL_ERROR" }, meta: undefined })
      expect(r.c2).toEqual({ text: "Error: tagged", isError: true, error: { name: "Oops", code: "E_OOPS" }, meta: undefined })
      expect(r.c3).toEqual({ text: "Error: just a string", isError: true, error: { name: "Error", code: "TOOL_ERROR" }, meta: undefined })
      expect(r.c4).toEqual({ text: "Error: dead", isError: true, error: { name: "ToolDefect", code: "TOOL_DEFECT" }, meta: undefined })
    }).pipe(Effect.provide(scenario([calls(["c1", "e1"], ["c2", "e2"], ["c3", "e3"], ["c4", "e4"]), ScriptedModel.text("done")], {
      tools: [
        okTool("e1", "exclusive", Effect.fail(new Error("plain"))),
        okTool("e2", "exclusive", Effect.fail(new Oops({ message: "tagged", code: "E_OOPS" }))),
        okTool("e3", "exclusive", Effect.fail("just a string")),
        okTool("e4", "exclusive", Effect.die(new Error("dead")))
      ]
    }))))

  it.scoped("4.6 mapping: invalid arguments text and code; \"\" means {}", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      const r = yield* resultsByCall
      expect(r.c1!.text).toMatch(/^Error: invalid arguments for need: /)
      expect(r.c1!.error).toEqual({ name: "ToolArgumentsError", code: "INVALID_ARGUMENTS" })
      expect(r.c2!.text).toMatch(/^Error: invalid arguments for need: /)
      expect(r.c3).toEqual({ text: "ok", isError: false, error: undefined, meta: undefined })
    }).pipe(Effect.provide(scenario([
      ScriptedModel.response({ toolCalls: [{ id: "c1", name: "need", arguments: "{not json" }, { id: "c2", name: "need", arguments: {} }, { id: "c3", name: "t", arguments: "" }] }),
      ScriptedModel.text("done")
    ], { tools: [Tool.make("need", { description: "n", parameters: Schema.Struct({ x: Schema.Number }), execute: () => Effect.succeed("x") }), okTool("t")] }))))

  it.scoped("4.6: ToolPost runs for DENIED (with aborted false) but not for UNKNOWN_TOOL / INVALID_ARGUMENTS / PRE_HOOK_FAILED; its meta is stored", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const hooks = yield* Hooks
      const posts: Array<string> = []
      yield* hooks.onToolPre((info, next) =>
        info.callId === "c1" ? Effect.succeed(ToolPreDecision.deny("nope")) : info.callId === "c4" ? Effect.fail(new Error("pre broke")) : next())
      yield* hooks.onToolPost((input, next) =>
        Effect.map(next(), (o) => {
          posts.push(`${input.callId}:${input.aborted}`)
          return { ...o, meta: { seen: input.callId } }
        })
      )
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect(posts).toEqual(["c1:false", "c5:false"])
      const r = yield* resultsByCall
      expect(r.c1).toEqual({ text: "Error: tool call denied: nope", isError: true, error: { name: "ToolDeniedError", code: "DENIED" }, meta: { seen: "c1" } })
      expect(r.c4).toEqual({ text: "Error: pre broke", isError: true, error: { name: "ToolPreHookError", code: "PRE_HOOK_FAILED" }, meta: undefined })
      expect(r.c5!.meta).toEqual({ seen: "c5" })
    }).pipe(Effect.provide(scenario([
      ScriptedModel.response({ toolCalls: [
        { id: "c1", name: "t", arguments: {} }, { id: "c2", name: "zzz", arguments: {} }, { id: "c3", name: "need", arguments: "[" },
        { id: "c4", name: "t", arguments: {} }, { id: "c5", name: "t", arguments: {} }
      ] }),
      ScriptedModel.text("done")
    ], { tools: [okTool("t"), Tool.make("need", { description: "n", parameters: Schema.Struct({ x: Schema.Number }), execute: () => Effect.succeed("x") })] }))))

  it.scoped("4.6: concludesTurn with isError true does not conclude; ToolPost setting concludesTurn does", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const hooks = yield* Hooks
      yield* hooks.onToolPost((input, next) => Effect.map(next(), (o) => input.name === "fin" ? { ...o, concludesTurn: true } : o))
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      // step 1: the erroring concluder does not conclude → step 2: "fin" concluded by ToolPost → no step 3.
      expect(yield* requests).toHaveLength(2)
      expect((yield* reasons).map((r) => r.kind)).toEqual(["completed"])
    }).pipe(Effect.provide(scenario([calls(["c1", "errc"]), calls(["c2", "fin"]), ScriptedModel.text("never")], {
      tools: [okTool("errc", "exclusive", Effect.succeed({ content: "bad", isError: true, concludesTurn: true })), okTool("fin")]
    }))))

  it.scoped("4.6: contexts follow their own result; deferContext before additionalContexts; they enter only at the next step after all results", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      const s = yield* shape
      const from = s.indexOf("TC(c1)")
      expect(s.slice(from, from + 9)).toEqual(["TC(c1)", "TR(c1)", "INS(ns,0,[X1,X2])", "TC(c2)", "TR(c2)", "SE(1,1)", "CLM(ns,0,2)", "SS(1,2)", "UM(X1)"])
      expect(s[from + 9]).toBe("UM(X2)")
      expect((yield* reasons).map((r) => r.kind)).toEqual(["completed"])
    }).pipe(Effect.provide(scenario([calls(["c1", "ctx"], ["c2", "t"]), ScriptedModel.text("done")], {
      tools: [
        Tool.make("ctx", { description: "c", parameters: empty, execute: (_p, ctx) => Effect.as(ctx.deferContext(user("X1")), { content: "ok", additionalContexts: [user("X2")] }) }),
        okTool("t")
      ]
    }))))

  it.scoped("4.6: a non-fresh context id turns the result into INVALID_TOOL_OUTPUT with its contexts dropped", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      const r = yield* resultsByCall
      expect(r.c1!.error).toEqual({ name: "ToolOutputError", code: "INVALID_TOOL_OUTPUT" })
      expect(r.c1!.text).toMatch(/^Error: tool produced invalid output: /)
      expect((yield* shape).filter((x) => x.startsWith("INS"))).toEqual(["INS(nt,0,[A])"])
    }).pipe(Effect.provide(scenario([calls(["c1", "ctx"]), ScriptedModel.text("done")], {
      tools: [Tool.make("ctx", { description: "c", parameters: empty, execute: () => Effect.succeed({ content: "ok", additionalContexts: [user("A")] }) })]
    }))))

  it.scoped("4.6 abort during tools: a body that failed first keeps its error; a running body yields ABORTED; later groups get ⟨TC TR⊘⟩", () => {
    const g = gate()
    const started: Array<string> = []
    return Effect.gen(function*() {
      const driver = yield* Driver
      const hooks = yield* Hooks
      const posted: Array<string> = []
      yield* hooks.onToolPost((input, next) => Effect.zipRight(Effect.sync(() => posted.push(`${input.callId}:${input.aborted}`)), next()))
      yield* driver.followup(user("A"))
      yield* until(Effect.sync(() => started.length === 1))
      yield* until(Effect.map(events, (es) => es.some((e) => e.type === "tool/call" && (e.data as Loose).callId === "c2")))
      yield* settle
      yield* driver.cancel(CancelCause.user)
      expect(yield* closeOut).toEqual([])
      expect((yield* shape).filter((x) => /^(TC|TR|SE|TE)/.test(x))).toEqual(["TC(c1)", "TC(c2)", "TR✗(c1)", "TR?(c2)", "TC(c3)", "TR⊘(c3)", "SE(1,1)", "TE(1,aborted(user))"])
      const r = yield* resultsByCall
      expect(r.c1).toEqual({ text: "Error: tool call aborted", isError: true, error: { name: "AbortError", code: "ABORTED" }, meta: undefined })
      expect(r.c2!.error).toEqual({ name: "Error", code: "FIRST" })
      expect(r.c3).toEqual({ text: "Error: tool call aborted before dispatch", isError: true, error: { name: "AbortError", code: "ABORTED_BEFORE_DISPATCH" }, meta: undefined })
      expect(posted).toEqual(["c1:true", "c2:true"])
    }).pipe(Effect.provide(scenario([calls(["c1", "p"], ["c2", "f"], ["c3", "x"])], {
      tools: [gatedTool("p", "parallel", g, started), okTool("f", "parallel", Effect.fail({ message: "first", code: "FIRST" })), okTool("x")]
    })))
  })

  it.scoped("4.6 abort: a body that completes after the cause was recorded yields ABORTED", () => {
    const g = gate()
    const started: Array<string> = []
    return Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      yield* until(Effect.sync(() => started.length === 1))
      const cancel = yield* Effect.fork(driver.cancel(CancelCause.user))
      yield* untilEvent((e) => e.type === "turn/end").pipe(Effect.timeoutTo({ duration: 0, onSuccess: () => true, onTimeout: () => false }), Effect.ignore)
      yield* settle
      yield* open(g)
      yield* cancel.await
      expect(yield* closeOut).toEqual([])
      const r = yield* resultsByCall
      expect(r.c1!.error).toEqual({ name: "AbortError", code: "ABORTED" })
      expect((yield* reasons).map((r) => r.kind)).toEqual(["aborted"])
    }).pipe(Effect.provide(scenario([calls(["c1", "u"])], {
      tools: [Tool.make("u", { description: "u", parameters: empty, execute: () => Effect.uninterruptible(Effect.zipRight(Effect.sync(() => started.push("c1")), Effect.as(Deferred.await(g), "done"))) })]
    })))
  })

  it.scoped("4.6 D7: a ToolPost failure → TOOL_INTERNAL_ERROR for it and ⟨TC TR⟩ for unstarted calls; contexts stay pending (non-waking) for the next turn's claim", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const hooks = yield* Hooks
      const inbox = yield* Inbox
      const boom = { message: "post broke", code: "POST" }
      yield* hooks.onToolPost((input, next) => input.callId === "c2" ? Effect.fail(boom) : next())
      const live = yield* recordLive
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect((yield* shape).filter((x) => /^(TC|TR|INS\(ns|SE|TE)/.test(x))).toEqual([
        "TC(c1)", "TR(c1)", "INS(ns,0,[X])", "TC(c2)", "TR?(c2)", "TC(c3)", "TR?(c3)", "SE(1,1)", "TE(1,error(TOOL_INTERNAL_ERROR))"
      ])
      const r = yield* resultsByCall
      for (const c of ["c2", "c3"]) {
        expect(r[c]).toEqual({ text: "Error: tool call failed internally", isError: true, error: { name: "ToolSchedulerError", code: "TOOL_INTERNAL_ERROR" }, meta: undefined })
      }
      const errors = (yield* live).filter((e) => e.type === "agent/error") as Array<Loose>
      expect(errors.map((e) => e.error)).toEqual([boom])
      expect(yield* driver.status).toBe("idle")
      expect((yield* inbox.nextStep).map((m) => m.id)).toEqual(["X"])
      yield* driver.followup(user("B"))
      expect(yield* closeOut).toEqual([])
      const s = yield* shape
      const t2 = s.indexOf("TS(2)")
      expect(s.slice(t2, t2 + 6)).toEqual(["TS(2)", "CLM(ns,0,1)", "CLM(nt,0,1)", "SS(2,1)", "UM(X)", "UM(B)"])
    }).pipe(Effect.provide(scenario([calls(["c1", "ctx"], ["c2", "t"], ["c3", "t"]), ScriptedModel.text("two")], {
      tools: [
        Tool.make("ctx", { description: "c", parameters: empty, execute: () => Effect.succeed({ content: "ok", additionalContexts: [user("X")] }) }),
        okTool("t")
      ]
    }))))
})

// ---------------------------------------------------------------------------------------------------
describe("4.3 / 7.3: closing paths and the late insertion", () => {
  for (
    const [label, decide] of [
      ["rejected", () => Effect.succeed(PreStepDecision.reject())],
      ["failed", () => Effect.fail({ message: "pre", code: "PRE" })],
      ["empty", () => Effect.succeed(PreStepDecision.enter([]))]
    ] as const
  ) {
    it.scoped(`4.3/7.3: an initial pre-step that ${label} while a steer arrived late → the chain continues into a turn that claims the steer`, () =>
      Effect.gen(function*() {
        const driver = yield* Driver
        const pre = yield* PreStep
        yield* pre.register((input, next) => input.turn === 1 ? Effect.zipRight(Effect.orDie(driver.steer(user("S"))), decide() as Effect.Effect<PreStepDecision, any>) : next())
        yield* driver.followup(user("A"))
        expect(yield* closeOut).toEqual([])
        const s = yield* shape
        const t2 = s.indexOf("TS(2)")
        expect(t2).toBeGreaterThan(0)
        expect(s[t2 - 1]).toMatch(/^TE\(1,/)
        expect(s.slice(t2, t2 + 4)).toEqual(["TS(2)", "CLM(ns,0,1)", "SS(2,1)", "UM(S)"])
        expect(yield* requests).toHaveLength(1)
      }).pipe(Effect.provide(scenario([ScriptedModel.text("ok")]))))
  }

  it.scoped("4.3/7.3: an initial pre-step rejecting while only an inject arrived late → idle; the inject stays pending", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const pre = yield* PreStep
      const inbox = yield* Inbox
      yield* pre.register(() => Effect.zipRight(driver.inject(user("I")), Effect.succeed(PreStepDecision.reject("x"))))
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect((yield* shape).filter((x) => x.startsWith("TS"))).toEqual(["TS(1)"])
      expect((yield* inbox.nextStep).map((m) => m.id)).toEqual(["I"])
      expect(yield* driver.status).toBe("idle")
    }).pipe(Effect.provide(scenario([]))))

  it.scoped("4.3: a cause recorded by a turn-stopping listener: TX-BOUNDARY claims nothing, TE aborted, next-step items stay pending (keepInbox)", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const hooks = yield* Hooks
      const inbox = yield* Inbox
      yield* hooks.onTurnStopping(() => Effect.zipRight(driver.steer(user("S")), driver.cancel(CancelCause.user, { keepInbox: true })))
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      const s = yield* shape
      expect(s.slice(-3)).toEqual(["SE(1,1)", "INS(ns,0,[S])", "TE(1,aborted(user))"])
      expect(yield* inbox.idState(asId("S"))).toEqual(Option.some("pending"))
    }).pipe(Effect.provide(scenario([ScriptedModel.text("ok")]))))

  // Regression test (fixed; the text says what tiller did before): SPEC 4.3 "With a cause recorded: … turn-stopping listeners are not started"; 4.7 "a cancel
  // aborts it"; 7.2 K13 "from any observer, hook or tool body: exactly as the window the driver is in"
  // (K9: no further step; TE(aborted)). tiller starts the second listener after the first recorded the cause.
  it.scoped("4.3/4.7 K9/K13: after a turn-stopping listener records a cause, the later listeners are not started", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const hooks = yield* Hooks
      let second = 0
      yield* hooks.onTurnStopping(() => driver.cancel(CancelCause.user))
      yield* hooks.onTurnStopping(() => Effect.sync(() => second++))
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect((yield* shape).slice(-2)).toEqual(["SE(1,1)", "TE(1,aborted(user))"])
      expect(second).toBe(0)
    }).pipe(Effect.provide(scenario([ScriptedModel.text("ok")]))))
})

describe("4.5 Q1/Q2: first request of a driver instance", () => {
  it.scoped("4.5 Q1/Q2: a resumed driver's first request logs RH(resume); absent option fields come from the last logged header", () =>
    Effect.gen(function*() {
      const storeCtx = yield* Layer.build(SessionStore.layerMemory)
      const run = (options: Parameters<typeof agentOver>[1], script: Parameters<typeof agentOver>[0]) =>
        Effect.scoped(Effect.gen(function*() {
          const scope = yield* Scope.make()
          const ctx = yield* Layer.buildWithScope(agentOver(script, options).pipe(Layer.provide(Layer.succeedContext(storeCtx))), scope)
          const driver = Context.get(ctx, Driver)
          yield* driver.followup(user(options?.resume === true ? "B" : "A"))
          yield* driver.whenIdle
          const es = yield* Context.get(ctx, SessionLog).events
          const reqs = yield* Context.get(ctx, ScriptedModel).requests
          yield* Scope.close(scope, Exit.void)
          return { es, reqs }
        }))
      yield* run({ agent: { system: "S1", temperature: 0.3, maxTokens: 100 } }, [ScriptedModel.text("one")])
      const second = yield* run({ resume: true, agent: { model: { provider: "p", model: "m2" }, maxTokens: 50 } }, [ScriptedModel.text("two")])
      const headers = second.es.filter((e) => e.type === "request/header").map((e) => e.data as Loose)
      expect(headers.map((h) => h.reason)).toEqual(["initial", "resume"])
      expect(headers[1]!.header).toEqual({ provider: "p", model: "m2", system: "S1", maxTokens: 50, temperature: 0.3, tools: [] })
      expect(second.reqs.map((r) => [r.model, r.system, r.maxTokens, r.temperature])).toEqual([["m2", "S1", 50, 0.3]])
    }))
})

describe("4.5: append failures", () => {
  it.scoped("4.5: a chunk that is not lossless JSON → error(INVALID_EVENT), not offered to onRequestError", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const hooks = yield* Hooks
      let offered = 0
      yield* hooks.onRequestError((_, next) => Effect.zipRight(Effect.sync(() => offered++), next()))
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect((yield* reasons).map((r) => r.kind === "error" ? r.error.code : r.kind)).toEqual(["INVALID_EVENT"])
      expect(offered).toBe(0)
      expect((yield* shape).slice(-2)).toEqual(["SE(1,1)", "TE(1,error(INVALID_EVENT))"])
    }).pipe(Effect.provide(scenario([ScriptedModel.chunks([...textChunks, { type: "usage", usage: { inputTokens: Number.NaN, outputTokens: 1 } }, stop])]))))
})

describe("4.5: retries, Random and model-visible history", () => {
  it.scoped("4.5 D10: the jitter factor is drawn with Effect's Random (factor 0.8 + 0.4·r)", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "llm/retry")
      yield* TestClock.adjust("1 second")
      yield* untilEvent((e) => e.type === "llm/retry" && (e.data as Loose).attempt === 2)
      yield* TestClock.adjust("2 seconds")
      expect(yield* closeOut).toEqual([])
      expect((yield* dataOfType("llm/retry")).map((d) => d.delayMs)).toEqual([1000, 1800])
    }).pipe(Effect.provide(scenario([
      ScriptedModel.fail({ message: "a", code: "TIMEOUT" }),
      ScriptedModel.fail({ message: "b", code: "NETWORK" }),
      ScriptedModel.text("ok")
    ])), Effect.withRandom(Random.fixed([0.5, 0.25]))))

  it.scoped("4.5: a surface replacement appended during the backoff applies from the next attempt", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const log = yield* SessionLog
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      yield* driver.followup(user("B"))
      yield* untilEvent((e) => e.type === "llm/retry")
      const es = yield* events
      const um = es.find((e) => e.type === "user/message" && (e.data as Loose).id === "A")!
      const am = es.find((e) => e.type === "assistant/message")!
      yield* log.append({
        type: "user/message",
        data: user("SUM", "summary"),
        surfaceOp: { op: "replace", start: um.seq, end: am.seq },
        sourceEventSeqs: [um.seq, am.seq]
      })
      yield* TestClock.adjust("2 seconds")
      expect(yield* closeOut).toEqual([])
      const reqs = yield* requests
      const ids = (r: ModelRequest) => r.messages.map((m) => m.id)
      expect(reqs).toHaveLength(3)
      expect(ids(reqs[1]!)).toEqual(["A", am.data && (am.data as Loose).message.id, "B"])
      expect(ids(reqs[2]!)).toEqual(["SUM", "B"])
    }).pipe(Effect.provide(scenario([ScriptedModel.text("one"), ScriptedModel.fail({ message: "busy", code: "OVERLOADED" }), ScriptedModel.text("two")]))))
})

describe("4.5 Q4 / 4.6 START 2: checkpoints, and cancels from hooks (K13)", () => {
  it.scoped("4.5 Q4: the request is dispatched only after every event so far is durable", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const control = yield* MemoryStoreControl
      const log = yield* SessionLog
      yield* control.hold
      yield* Effect.fork(driver.followup(user("A")))
      yield* untilEvent((e) => e.type === "request/header")
      yield* settle
      expect(yield* requests).toHaveLength(0)
      yield* control.release
      expect(yield* closeOut).toEqual([])
      expect(yield* requests).toHaveLength(1)
      expect(yield* log.durableSeq).toBeGreaterThan(0)
    }).pipe(Effect.provide(scenario([ScriptedModel.text("ok")]))))

  it.scoped("4.6 START 2: a tool body runs only after its tool/call is durable", () => {
    const ran: Array<string> = []
    return Effect.gen(function*() {
      const driver = yield* Driver
      const control = yield* MemoryStoreControl
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "tool/call")
      yield* settle
      expect(ran).toEqual([])
      yield* control.release
      expect(yield* closeOut).toEqual([])
      expect(ran).toEqual(["c1"])
    }).pipe(Effect.provide(Layer.unwrapEffect(Effect.sync(() => {
      let holdRef: Effect.Effect<void> = Effect.void
      const base = scenario([
        ScriptedModel.response({ toolCalls: [{ id: "c1", name: "t", arguments: {} }], afterFinish: Effect.suspend(() => holdRef) }),
        ScriptedModel.text("done")
      ], { tools: [Tool.make("t", { description: "t", parameters: empty, execute: (_p, ctx) => Effect.sync(() => (ran.push(ctx.callId), "ok")) })] })
      return Layer.tap(base, (ctx) => Effect.sync(() => {
        holdRef = Context.get(ctx, MemoryStoreControl).hold
      }))
    }))))
  })

  it.scoped("4.5 K4/K13: an onRequest listener that cancels: no request dispatched, SE then TE(aborted)", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const hooks = yield* Hooks
      yield* hooks.onRequest((_, next) => Effect.zipRight(driver.cancel(CancelCause.user), next()))
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect(yield* requests).toHaveLength(0)
      expect((yield* shape).slice(-2)).toEqual(["SE(1,1)", "TE(1,aborted(user))"])
    }).pipe(Effect.provide(scenario([ScriptedModel.text("never")]))))

  it.scoped("4.5 K6/K13: a Retry returned after its listener recorded a cause is ignored (no RT, no attempt 2)", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const hooks = yield* Hooks
      yield* hooks.onRequestError(() => Effect.as(driver.cancel(CancelCause.user), RequestErrorAction.retry(0)))
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect((yield* shape).filter((x) => x.startsWith("RT"))).toEqual([])
      expect((yield* shape).slice(-3)).toEqual(["CH(finish error)", "SE(1,1)", "TE(1,aborted(user))"])
      expect(yield* requests).toHaveLength(1)
    }).pipe(Effect.provide(scenario([ScriptedModel.fail({ message: "x", code: "OVERLOADED" }), ScriptedModel.text("never")]))))

  it.scoped("4.6 K13: a body that records a cause and then succeeds yields ABORTED; ToolPost sees aborted:true", () => {
    const posted: Array<boolean> = []
    return Effect.gen(function*() {
      const driver = yield* Driver
      const hooks = yield* Hooks
      yield* hooks.onToolPost((input, next) => Effect.zipRight(Effect.sync(() => posted.push(input.aborted)), next()))
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      const r = yield* resultsByCall
      expect(r.c1!.error).toEqual({ name: "AbortError", code: "ABORTED" })
      expect(r.c2).toEqual({ text: "Error: tool call aborted before dispatch", isError: true, error: { name: "AbortError", code: "ABORTED_BEFORE_DISPATCH" }, meta: undefined })
      expect(posted).toEqual([true])
      expect((yield* shape).slice(-5)).toEqual(["TR✗(c1)", "TC(c2)", "TR⊘(c2)", "SE(1,1)", "TE(1,aborted(user))"])
    }).pipe(Effect.provide(Layer.unwrapEffect(Effect.sync(() => {
      let cancel: Effect.Effect<void, any> = Effect.void
      const base = scenario([calls(["c1", "self"], ["c2", "t"])], {
        tools: [Tool.make("self", { description: "s", parameters: empty, execute: () => Effect.as(Effect.suspend(() => cancel), "fine") }), okTool("t")]
      })
      return Layer.tap(base, (ctx) => Effect.sync(() => {
        cancel = Context.get(ctx, Driver).cancel(CancelCause.user)
      }))
    }))))
  })
})

describe("4.3/4.5: more closing paths", () => {
  it.scoped("4.3 K3a/K13: a pre-step listener that records a cause and enters an addition: no step, the addition stays unknown", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const pre = yield* PreStep
      const inbox = yield* Inbox
      yield* pre.register((input) => Effect.as(Effect.orDie(driver.cancel(CancelCause.user)), PreStepDecision.enter([...input.messages, user("X")])))
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect(yield* shape).toEqual(["INS(nt,0,[A])", "TS(1)", "CLM(nt,0,1)", "TE(1,aborted(user))"])
      expect(yield* inbox.idState(asId("X"))).toEqual(Option.none())
      expect(yield* inbox.idState(asId("A"))).toEqual(Option.some("claimed"))
    }).pipe(Effect.provide(scenario([]))))

  it.scoped("4.5 Q7: a failed attempt commits no assistant content; the retry's request does not see its partial text", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "llm/retry")
      yield* TestClock.adjust("2 seconds")
      expect(yield* closeOut).toEqual([])
      const reqs = yield* requests
      expect(reqs[1]!.messages.map((m) => m.id)).toEqual(["A"])
      expect((yield* shape).filter((x) => x === "AM" || x === "AM!")).toEqual(["AM"])
    }).pipe(Effect.provide(scenario([ScriptedModel.fail({ message: "x", code: "OVERLOADED" }, { partial: { text: "par" } }), ScriptedModel.text("ok")]))))

  it.scoped("4.5: an onRequest config that cannot be logged (NaN temperature) → error(INVALID_EVENT), nothing dispatched", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const hooks = yield* Hooks
      yield* hooks.onRequest((_, next) => Effect.map(next(), (c) => ({ ...c, temperature: Number.NaN })))
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect((yield* reasons).map((r) => r.kind === "error" ? r.error.code : r.kind)).toEqual(["INVALID_EVENT"])
      expect(yield* requests).toHaveLength(0)
      expect((yield* shape).filter((x) => x.startsWith("RH"))).toEqual([])
    }).pipe(Effect.provide(scenario([ScriptedModel.text("never")]))))
})

describe("4.5 Q8: a cause recorded after the finish transaction", () => {
  const toolCallChunks: ReadonlyArray<StreamChunk> = [
    { type: "block-start", index: 0, block: "tool-call", id: "c1", name: "t" },
    { type: "tool-call-delta", index: 0, arguments: "{}" },
    { type: "block-end", index: 0 },
    { type: "block-start", index: 1, block: "tool-call", id: "c2", name: "t" },
    { type: "tool-call-delta", index: 1, arguments: "{}" },
    { type: "block-end", index: 1 },
    stop
  ]

  it.scoped("4.5 Q8/K7: the AM stands while the stream is still pulled; a cancel then gives ⟨TC TR⊘⟩ per call in model order", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "assistant/message")
      yield* settle
      expect((yield* shape).some((x) => x.startsWith("TC"))).toBe(false)
      yield* driver.cancel(CancelCause.user)
      expect(yield* closeOut).toEqual([])
      expect((yield* shape).slice(-8)).toEqual(["CH(finish stop)", "AM", "TC(c1)", "TR⊘(c1)", "TC(c2)", "TR⊘(c2)", "SE(1,1)", "TE(1,aborted(user))"])
    }).pipe(Effect.provide(scenario([ScriptedModel.chunks(toolCallChunks, { then: "hang" })], { tools: [okTool("t")] }))))

  it.scoped("4.5 Q8/K9a: without tool calls the AM stands and the turn ends aborted", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "assistant/message")
      yield* settle
      yield* driver.cancel(CancelCause.user)
      expect(yield* closeOut).toEqual([])
      expect((yield* shape).slice(-4)).toEqual(["CH(finish stop)", "AM", "SE(1,1)", "TE(1,aborted(user))"])
    }).pipe(Effect.provide(scenario([ScriptedModel.chunks([...textChunks, stop], { then: "hang" })]))))
})

describe("3.9/4.4: reserved ids", () => {
  // Regression test (fixed; the text says what tiller did before): SPEC 3.9 "Ids starting with `interrupted-tool-result-` are reserved: a caller message with such an
  // id fails with InvalidEvent"; 4.4 "Each element MUST be a valid UserMessage (else the turn ends
  // error(INVALID_MESSAGE))". Tool contexts are refused (INVALID_TOOL_OUTPUT) but a pre-step addition is entered.
  it.scoped("3.9/4.4: a pre-step addition with a reserved id is not entered (error(INVALID_MESSAGE), no step)", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const pre = yield* PreStep
      yield* pre.register((input) => Effect.succeed(PreStepDecision.enter([...input.messages, user("interrupted-tool-result-x-1")])))
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect(yield* shape).toEqual(["INS(nt,0,[A])", "TS(1)", "CLM(nt,0,1)", "TE(1,error(INVALID_MESSAGE))"])
    }).pipe(Effect.provide(scenario([ScriptedModel.text("x")]))))

  it.scoped("3.9/4.6: a tool context with a reserved id → INVALID_TOOL_OUTPUT", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect((yield* resultsByCall).c1!.error).toEqual({ name: "ToolOutputError", code: "INVALID_TOOL_OUTPUT" })
    }).pipe(Effect.provide(scenario([calls(["c1", "ctx"]), ScriptedModel.text("done")], {
      tools: [Tool.make("ctx", { description: "c", parameters: empty, execute: () => Effect.succeed({ content: "ok", additionalContexts: [user("interrupted-tool-result-y-2")] }) })]
    }))))
})

describe("4.6 COMMIT 2 / 5.1 D6: the final output of ToolPost", () => {
  const postScript = () => [calls(["c1", "t"]), ScriptedModel.text("done")]

  // Regression test (fixed; the text says what tiller did before): SPEC 4.6 COMMIT 2 "invalid content/meta … turns the result into INVALID_TOOL_OUTPUT"; 2.3 ToolResultBlock
  // content is (TextBlock|ImageBlock)[]. tiller writes a tool/result whose block content is the string "replaced".
  it.scoped("4.6 COMMIT 2: a ToolPost output with invalid content (a string) → INVALID_TOOL_OUTPUT", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const hooks = yield* Hooks
      yield* hooks.onToolPost((_, next) => Effect.map(next(), (o) => ({ ...o, content: "replaced" as any })))
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      const r = yield* resultsByCall
      expect(r.c1!.error).toEqual({ name: "ToolOutputError", code: "INVALID_TOOL_OUTPUT" })
      expect(r.c1!.text).toMatch(/^Error: tool produced invalid output: /)
    }).pipe(Effect.provide(scenario(postScript(), { tools: [okTool("t")] }))))

  // Regression test (fixed; the text says what tiller did before): SPEC 5.1 "Every append (loop, …) … checked with the same Schemas … Hence a log accepted live can
  // always be loaded" (D6). A ToolPost output without `isError` is written as a tool/result with
  // `isError: undefined`; resuming the session then fails with MalformedLog {seq: 12}.
  it.scoped("5.1 D6 / 4.6: whatever ToolPost returns, the live log stays loadable (resume opens)", () =>
    Effect.gen(function*() {
      const storeCtx = yield* Layer.build(SessionStore.layerMemory)
      const scope = yield* Scope.make()
      const ctx = yield* Layer.buildWithScope(agentOver(postScript(), { tools: [okTool("t")] }).pipe(Layer.provide(Layer.succeedContext(storeCtx))), scope)
      yield* Effect.provideService(
        Context.get(ctx, Hooks).onToolPost((_, next) => Effect.map(next(), (o) => ({ content: o.content, additionalContexts: [], concludesTurn: false }) as any)),
        Scope.Scope,
        scope
      )
      const driver = Context.get(ctx, Driver)
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      yield* Scope.close(scope, Exit.void)
      const scope2 = yield* Scope.make()
      const reopened = yield* Effect.either(Layer.buildWithScope(agentOver([], { resume: true }).pipe(Layer.provide(Layer.succeedContext(storeCtx))), scope2))
      expect(reopened._tag === "Left" ? (reopened.left as any)._tag : "Right").toBe("Right")
      yield* Scope.close(scope2, Exit.void)
    }))
})

describe("4.5 / 5.1 D6: chunks that are JSON but not StreamChunks", () => {
  const schemaBad: ReadonlyArray<readonly [string, ReadonlyArray<unknown>]> = [
    ["a usage with a negative count", [...textChunks, { type: "usage", usage: { inputTokens: -1, outputTokens: 1 } }, stop]],
    ["a text-delta whose text is a number", [textChunks[0], { type: "text-delta", index: 0, text: 5 }, textChunks[2], stop]],
    ["a finish chunk with an extra key", [{ type: "finish", finish: { kind: "stop" }, extra: 1 }]]
  ]
  for (const [label, chunks] of schemaBad) {
    // Regression test (fixed; the text says what tiller did before): SPEC 5.1 "Every append (loop, …) … is checked with the same Schemas and the same rules. A live
    // violation fails the append with InvalidEvent"; 4.5 "failures … of appends (… InvalidEvent → code
    // INVALID_EVENT) are turn failures". tiller checks chunks only for lossless JSON: the chunk is logged, the
    // turn completes, and the stored log no longer loads (MalformedLog on resume).
    it.scoped(`4.5/5.1: ${label} is refused: the turn ends error(INVALID_EVENT)`, () =>
      Effect.gen(function*() {
        const driver = yield* Driver
        yield* driver.followup(user("A"))
        yield* driver.whenIdle
        expect((yield* reasons).map((r) => r.kind === "error" ? r.error.code : r.kind)).toEqual(["INVALID_EVENT"])
      }).pipe(Effect.provide(scenario([ScriptedModel.chunks(chunks)]))))
  }

  // Regression test (fixed; the text says what tiller did before): SPEC 5.1 "Hence a log accepted live can always be loaded by an agent with the same … options (D6)".
  it.scoped("5.1 D6: after a model sent a schema-invalid chunk the session can still be resumed", () =>
    Effect.gen(function*() {
      const storeCtx = yield* Layer.build(SessionStore.layerMemory)
      const scope = yield* Scope.make()
      const ctx = yield* Layer.buildWithScope(agentOver([ScriptedModel.chunks(schemaBad[0]![1])]).pipe(Layer.provide(Layer.succeedContext(storeCtx))), scope)
      const driver = Context.get(ctx, Driver)
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      yield* Scope.close(scope, Exit.void)
      const scope2 = yield* Scope.make()
      const reopened = yield* Effect.either(Layer.buildWithScope(agentOver([], { resume: true }).pipe(Layer.provide(Layer.succeedContext(storeCtx))), scope2))
      expect(reopened._tag === "Left" ? (reopened.left as any)._tag : "Right").toBe("Right")
      yield* Scope.close(scope2, Exit.void)
    }))
})

describe("4.5 / 4.3: an error finish whose failure is not an LlmFailure", () => {
  // Regression test (fixed; the text says what tiller did before): SPEC 4.5 "failures … of appends (… InvalidEvent → code INVALID_EVENT) are turn failures"; 4.3
  // "Failure inside the turn: close the open step …, then CLOSE(error(failure))". With a finish chunk
  // {kind:"error", failure:{message:"m"}} (no `code`) tiller logs the chunk, then never writes SE/TE: the
  // driver stays `running` forever (and disposing its scope hangs).
  it.effect("4.5/4.3: a finish error without a code still closes the step and the turn; the driver goes idle", () =>
    Effect.gen(function*() {
      const storeCtx = yield* Effect.scoped(Layer.build(SessionStore.layerMemory))
      const scope = yield* Scope.make()
      const ctx = yield* Layer.buildWithScope(
        agentOver([ScriptedModel.chunks([{ type: "finish", finish: { kind: "error", failure: { message: "m" } } }])]).pipe(Layer.provide(Layer.succeedContext(storeCtx))),
        scope
      )
      const driver = Context.get(ctx, Driver)
      const log = Context.get(ctx, SessionLog)
      yield* driver.followup(user("A"))
      const idle = yield* Effect.exit(until(Effect.map(driver.status, (s) => s === "idle")))
      const es = yield* log.events
      // The scope is closed in the background: with the deviation, disposal never completes.
      yield* Effect.forkDaemon(Scope.close(scope, Exit.void))
      expect(idle._tag).toBe("Success")
      expect(es.map((e) => e.type).slice(-2)).toEqual(["step/end", "turn/end"])
    }))
})

describe("4.5 Q2: header tools", () => {
  it.scoped("4.5 Q2: tools are sorted by name in code-unit order; a tool registered between steps logs RH(change)", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const tools = yield* Tools
      const testScope = yield* Scope.make()
      const reg = Tool.make("reg", {
        description: "r", parameters: empty,
        execute: () => Effect.as(Scope.extend(tools.register(okTool("B")), testScope), "registered")
      })
      yield* tools.register(reg)
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      const headers = yield* dataOfType("request/header")
      expect(headers.map((h) => h.reason)).toEqual(["initial", "change"])
      expect(headers[0]!.header.tools.map((t: Loose) => t.name)).toEqual(["_a", "b", "reg"])
      expect(headers[1]!.header.tools.map((t: Loose) => t.name)).toEqual(["B", "_a", "b", "reg"])
      expect((yield* requests)[1]!.tools.map((t) => t.name)).toEqual(["B", "_a", "b", "reg"])
      yield* Scope.close(testScope, Exit.void)
    }).pipe(Effect.provide(scenario([calls(["c1", "reg"]), ScriptedModel.text("done")], { tools: [okTool("b"), okTool("_a")] }))))

  it.scoped("4.4/7.3: an inject made during step 1's pre-step misses step 1's request and enters step 2", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const pre = yield* PreStep
      yield* pre.register((input, next) => input.step === 1 ? Effect.zipRight(Effect.orDie(driver.inject(user("I"))), next()) : next())
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      const reqs = yield* requests
      expect(reqs.map((r) => r.messages.filter((m) => m.role === "user" && m.source.kind !== "tool").map((m) => m.id))).toEqual([["A"], ["A", "I"]])
      const s = yield* shape
      expect(s.slice(s.indexOf("SE(1,1)"), s.indexOf("SE(1,1)") + 4)).toEqual(["SE(1,1)", "CLM(ns,0,1)", "SS(1,2)", "UM(I)"])
    }).pipe(Effect.provide(scenario([ScriptedModel.text("one"), ScriptedModel.text("two")]))))
})

describe("4.6 / 4.3: small cases", () => {
  it.scoped("4.6 abort: a call interrupted in ToolPre (START 5) yields ABORTED_BEFORE_DISPATCH; its body never runs, ToolPost does not run", () => {
    let bodies = 0
    return Effect.gen(function*() {
      const driver = yield* Driver
      const hooks = yield* Hooks
      const inPre = gate()
      let interrupted = false
      let posts = 0
      yield* hooks.onToolPre(() => Effect.zipRight(open(inPre), Effect.onInterrupt(Effect.never, () => Effect.sync(() => (interrupted = true)))))
      yield* hooks.onToolPost((_, next) => Effect.zipRight(Effect.sync(() => posts++), next()))
      yield* driver.followup(user("A"))
      yield* Deferred.await(inPre)
      yield* driver.cancel(CancelCause.user)
      expect(yield* closeOut).toEqual([])
      expect((yield* shape).slice(-6)).toEqual(["TC(c1)", "TR⊘(c1)", "TC(c2)", "TR⊘(c2)", "SE(1,1)", "TE(1,aborted(user))"])
      expect(interrupted).toBe(true)
      expect(bodies).toBe(0)
      expect(posts).toBe(0)
    }).pipe(Effect.provide(scenario([calls(["c1", "t"], ["c2", "t"])], { tools: [okTool("t", "exclusive", Effect.sync(() => (bodies++, "ran")))] })))
  })

  it.scoped("2.6/4.3: a rejection without a reason ends {kind:\"blocked\"} with no message key", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const pre = yield* PreStep
      yield* pre.register(() => Effect.succeed(PreStepDecision.reject()))
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect(JSON.stringify(yield* reasons)).toBe(JSON.stringify([{ kind: "blocked" }]))
    }).pipe(Effect.provide(scenario([]))))

  it.scoped("4.4: a pre-step listener is interrupted by a cancel; no step, TE aborted, the claimed batch is lost", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const pre = yield* PreStep
      const inside = gate()
      let interrupted = false
      yield* pre.register(() => Effect.zipRight(open(inside), Effect.onInterrupt(Effect.never, () => Effect.sync(() => (interrupted = true)))))
      yield* driver.followup(user("A"))
      yield* Deferred.await(inside)
      yield* driver.cancel(CancelCause.user, { keepInbox: true })
      expect(yield* closeOut).toEqual([])
      expect(interrupted).toBe(true)
      expect(yield* shape).toEqual(["INS(nt,0,[A])", "TS(1)", "CLM(nt,0,1)", "TE(1,aborted(user))"])
    }).pipe(Effect.provide(scenario([]))))
})

describe("4.5 Q5 / 4.6: more", () => {
  it.scoped("4.5 Q5: a ModelError stream failure carries its failure verbatim (status 503 → default retry)", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "llm/retry")
      yield* TestClock.adjust("2 seconds")
      expect(yield* closeOut).toEqual([])
      const f = { message: "unavailable", code: "X", status: 503, requestId: "r1" }
      expect((yield* chunkData)[2]).toEqual({ type: "finish", finish: { kind: "error", failure: f } })
      expect((yield* dataOfType("llm/retry"))[0]!.failure).toEqual(f)
      expect((yield* reasons).map((r) => r.kind)).toEqual(["completed"])
    }).pipe(Effect.provide(customAgent(streamsModel([
      () => Stream.concat(Stream.fromIterable(textChunks.slice(0, 2)), Stream.fail(new ModelError({ failure: { message: "unavailable", code: "X", status: 503, requestId: "r1" } }))),
      () => Stream.fromIterable([...textChunks, stop])
    ]).layer))))

  it.scoped("4.5 Q5: a stream defect after the finish chunk is ignored", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect((yield* reasons).map((r) => r.kind)).toEqual(["completed"])
      expect(yield* chunkData).toEqual([...textChunks, stop])
    }).pipe(Effect.provide(customAgent(streamsModel([
      () => Stream.concat(Stream.fromIterable([...textChunks, stop]), Stream.die(new Error("late defect")))
    ]).layer))))

  it.scoped("4.6: a concluding result with a context still takes another step (next-step non-empty afterwards)", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      const s = yield* shape
      expect(s.slice(s.indexOf("SE(1,1)"), s.indexOf("SE(1,1)") + 4)).toEqual(["SE(1,1)", "CLM(ns,0,1)", "SS(1,2)", "UM(X)"])
      expect(yield* requests).toHaveLength(2)
      expect((yield* reasons).map((r) => r.kind)).toEqual(["completed"])
    }).pipe(Effect.provide(scenario([calls(["c1", "fin"], ["c2", "ctx"]), ScriptedModel.text("done")], {
      tools: [
        okTool("fin", "exclusive", Effect.succeed({ content: "done", concludesTurn: true })),
        Tool.make("ctx", { description: "c", parameters: empty, execute: () => Effect.succeed({ content: "ok", additionalContexts: [user("X")] }) })
      ]
    }))))

  it.scoped("4.6: a concluding result without contexts ends the turn after the batch (both calls commit)", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect((yield* shape).filter((x) => /^(TC|TR|SE|TE)/.test(x))).toEqual(["TC(c1)", "TR(c1)", "TC(c2)", "TR(c2)", "SE(1,1)", "TE(1,completed)"])
      expect(yield* requests).toHaveLength(1)
    }).pipe(Effect.provide(scenario([calls(["c1", "fin"], ["c2", "t"])], {
      tools: [okTool("fin", "exclusive", Effect.succeed({ content: "done", concludesTurn: true })), okTool("t")]
    }))))
})

describe("4.5 / 5.1 D6: an unloggable Retry delay", () => {
  // Regression test (fixed; the text says what tiller did before): SPEC 5.1 "Every append (loop, …) … checked with the same Schemas … a log accepted live can always be
  // loaded" (D6); 4.5 "The loop rounds every Retry delay to a whole number of milliseconds". A Retry with
  // Duration.infinity is logged as llm/retry {delayMs: Infinity}; resume then fails with MalformedLog
  // ("event.data.delayMs: Infinity is not a finite number").
  it.effect("4.5/5.1: a Retry of Duration.infinity never makes the stored log unloadable", () =>
    Effect.gen(function*() {
      const storeCtx = yield* Effect.scoped(Layer.build(SessionStore.layerMemory))
      const scope = yield* Scope.make()
      const ctx = yield* Layer.buildWithScope(agentOver([ScriptedModel.fail({ message: "x", code: "X" })]).pipe(Layer.provide(Layer.succeedContext(storeCtx))), scope)
      yield* Effect.provideService(Context.get(ctx, Hooks).onRequestError(() => Effect.succeed(RequestErrorAction.retry(Duration.infinity))), Scope.Scope, scope)
      const driver = Context.get(ctx, Driver)
      const log = Context.get(ctx, SessionLog)
      yield* driver.followup(user("A"))
      yield* until(Effect.map(log.events, (es) => es.some((e) => e.type === "llm/retry" || e.type === "turn/end")))
      yield* driver.cancel(CancelCause.user)
      yield* driver.whenIdle
      const delays = (yield* log.events).filter((e) => e.type === "llm/retry").map((e) => (e.data as Loose).delayMs)
      yield* Scope.close(scope, Exit.void)
      expect(delays.every((d) => Number.isSafeInteger(d))).toBe(true)
      const scope2 = yield* Scope.make()
      const reopened = yield* Effect.either(Layer.buildWithScope(agentOver([], { resume: true }).pipe(Layer.provide(Layer.succeedContext(storeCtx))), scope2))
      expect(reopened._tag === "Left" ? (reopened.left as any)._tag : "Right").toBe("Right")
      yield* Scope.close(scope2, Exit.void)
    }))
})

describe("4.6 START: order of checks", () => {
  it.scoped("4.6 START 3-5: ToolPre runs only for known tools with valid arguments and sees the decoded params", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const hooks = yield* Hooks
      const seen: Array<Loose> = []
      yield* hooks.onToolPre((info, next) => Effect.zipRight(Effect.sync(() => seen.push({ callId: info.callId, name: info.name, arguments: info.arguments, params: info.params })), next()))
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect(seen).toEqual([{ callId: "c3", name: "num", arguments: "{\"n\":\"5\"}", params: { n: 5 } }])
      const r = yield* resultsByCall
      expect(r.c1!.error!.code).toBe("UNKNOWN_TOOL")
      expect(r.c2!.error!.code).toBe("INVALID_ARGUMENTS")
      expect(r.c3!.text).toBe("got 5")
    }).pipe(Effect.provide(scenario([
      ScriptedModel.response({ toolCalls: [
        { id: "c1", name: "missing", arguments: {} },
        { id: "c2", name: "num", arguments: { n: "five" } },
        { id: "c3", name: "num", arguments: { n: "5" } }
      ] }),
      ScriptedModel.text("done")
    ], {
      tools: [Tool.make("num", { description: "n", parameters: Schema.Struct({ n: Schema.NumberFromString }), execute: (p) => Effect.succeed(`got ${p.n + 0}`) })]
    }))))
})

describe("4.4 / 4.3: a malformed Enter", () => {
  // Regression test (fixed; the text says what tiller did before): SPEC 4.4 "Enter {messages} is the complete batch … (else the turn ends error(INVALID_MESSAGE)) …
  // validity … decided by the loop inside TX-STEP"; 4.3 a failure inside the turn ends CLOSE(error(…)). A listener
  // returning {_tag:"Enter", messages: null} (a JS caller) wedges the loop: no turn/end, the driver stays
  // `running` and disposal never completes. ([null] correctly ends error(INVALID_MESSAGE).)
  it.effect("4.4/4.3: an Enter whose messages is not an array still ends the turn (error), and the driver goes idle", () =>
    Effect.gen(function*() {
      const storeCtx = yield* Effect.scoped(Layer.build(SessionStore.layerMemory))
      const scope = yield* Scope.make()
      const ctx = yield* Layer.buildWithScope(agentOver([ScriptedModel.text("ok")]).pipe(Layer.provide(Layer.succeedContext(storeCtx))), scope)
      yield* Effect.provideService(Context.get(ctx, PreStep).register(() => Effect.succeed({ _tag: "Enter", messages: null } as any)), Scope.Scope, scope)
      const driver = Context.get(ctx, Driver)
      const log = Context.get(ctx, SessionLog)
      yield* driver.followup(user("A"))
      const idle = yield* Effect.exit(until(Effect.map(driver.status, (s) => s === "idle")))
      const es = yield* log.events
      yield* Effect.forkDaemon(Scope.close(scope, Exit.void))
      expect(idle._tag).toBe("Success")
      expect(es.at(-1)?.type).toBe("turn/end")
      expect((es.at(-1)?.data as Loose | undefined)?.reason?.kind).toBe("error")
    }))
})

describe("4.5 / 4.3: malformed hook results never wedge the loop", () => {
  const cases: ReadonlyArray<readonly [string, (h: Context.Tag.Service<typeof Hooks>) => Effect.Effect<void, never, Scope.Scope>, ReadonlyArray<any>]> = [
    ["onRequest returns null", (h) => h.onRequest(() => Effect.succeed(null as any)), [ScriptedModel.text("ok")]],
    ["onRequestError returns undefined", (h) => h.onRequestError(() => Effect.succeed(undefined as any)), [ScriptedModel.fail({ message: "x", code: "X" }), ScriptedModel.text("ok")]]
  ]
  for (const [label, register, script] of cases) {
    // Regression test (fixed; the text says what tiller did before): SPEC 4.5 "Failures of the onRequest waterfall, of the onRequestError waterfall … are turn
    // failures"; 4.3 "Failure inside the turn: close the open step …, then CLOSE(error(failure))". When a (JS)
    // listener returns a non-config / non-action value, tiller writes neither SE nor TE and the driver stays
    // `running` forever (disposal hangs too); ToolPre/ToolPost garbage, by contrast, is handled (D7 / INVALID_TOOL_OUTPUT).
    it.effect(`4.5/4.3: ${label} → the step and the turn still close (error) and the driver goes idle`, () =>
      Effect.gen(function*() {
        const storeCtx = yield* Effect.scoped(Layer.build(SessionStore.layerMemory))
        const scope = yield* Scope.make()
        const ctx = yield* Layer.buildWithScope(agentOver(script).pipe(Layer.provide(Layer.succeedContext(storeCtx))), scope)
        yield* Effect.provideService(register(Context.get(ctx, Hooks)), Scope.Scope, scope)
        const driver = Context.get(ctx, Driver)
        const log = Context.get(ctx, SessionLog)
        yield* driver.followup(user("A"))
        const idle = yield* Effect.exit(until(Effect.map(driver.status, (s) => s === "idle")))
        const es = yield* log.events
        yield* Effect.forkDaemon(Scope.close(scope, Exit.void))
        expect(idle._tag).toBe("Success")
        expect(es.map((e) => e.type).slice(-2)).toEqual(["step/end", "turn/end"])
      }))
  }
})
