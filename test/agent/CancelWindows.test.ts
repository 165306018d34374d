/**
 * Cancel windows K0-K15 of SPEC 7.2, each in both modes (broad and `keepInbox`) where the table
 * distinguishes them, with every cause kind; D4 (a cancel whose durable write fails still aborts),
 * D7 (internal tool failures answer every call), defects after an abort on the live error stream,
 * and D8 (tool contexts of a draining step under both modes).
 */
import { describe, expect, it } from "@effect/vitest"
import {
  Cause,
  Chunk,
  Context,
  Deferred,
  Effect,
  Exit,
  Fiber,
  Layer,
  Option,
  Queue,
  Ref,
  Scope,
  Stream,
  TestClock
} from "effect"
import { checkLog } from "../../src/domain/Check.js"
import { MaintenanceAborted, PersistenceError } from "../../src/domain/Errors.js"
import type { EventOf } from "../../src/domain/Event.js"
import { SessionId } from "../../src/domain/Ids.js"
import { foldInbox } from "../../src/domain/Splice.js"
import { CancelCause } from "../../src/domain/Values.js"
import type { ScriptEntry } from "../../src/layers/ScriptedModel.js"
import { ScriptedModel } from "../../src/layers/ScriptedModel.js"
import { Driver } from "../../src/services/Driver.js"
import { Hooks } from "../../src/services/Hooks.js"
import { Inbox } from "../../src/services/Inbox.js"
import { PreStep } from "../../src/services/PreStep.js"
import { SessionLog } from "../../src/services/SessionLog.js"
import { SessionStore } from "../../src/services/SessionStore.js"
import type { ToolContext, ToolOutput } from "../../src/services/Tools.js"
import { Tool } from "../../src/services/Tools.js"
import { drivenThrough } from "./cancelFixtures.js"
import {
  type AgentServices,
  agentTest,
  broad,
  events as eventsOf,
  hasChunk,
  idleAndChecked,
  ifBroad,
  type Mode,
  modes,
  notation,
  OPEN_A,
  opts,
  pending,
  plugin,
  recordLiveOf,
  scenario,
  settle,
  shape,
  shapeHas,
  STEP_A,
  TEXT,
  toolResponse,
  turnEndsOf,
  user,
  waitUntil
} from "./harness.js"
import { call, calls, empty, makeHandle } from "./toolFixtures.js"

// ---------------------------------------------------------------------------------------------
// Helpers

/** One test per mode. */
const both = (name: string, body: (mode: Mode) => Effect.Effect<void, unknown, Scope.Scope>) => {
  for (const mode of modes) it.scoped(`${name} [${mode}]`, () => body(mode))
}

/** One test per mode over the agent `layer`; `body` gets the agent's services and the mode. */
const bothOver = (
  name: string,
  layer: Layer.Layer<any, any, never>,
  body: (services: AgentServices, mode: Mode) => Generator<any, void, any>
) => {
  for (const mode of modes) agentTest(`${name} [${mode}]`, layer, (services) => body(services, mode))
}

const Never = Effect.never

const abortedBy = (cause: CancelCause) => ({ kind: "aborted", reason: cause })

const requestCount = Effect.flatMap(ScriptedModel, (model) => Effect.map(model.requests, (r) => r.length))

/**
 * Installs a listener through `install` (handed an effect that signals and hangs) and sends A; once
 * the listener hangs, sends B and cancels with `cause` in `mode`. Returns the live record once idle.
 */
const cancelWithBPending = (
  driver: Context.Tag.Service<typeof Driver>,
  install: (hang: Effect.Effect<never>) => Effect.Effect<void, never, Scope.Scope>,
  cause: CancelCause,
  mode: Mode
) =>
  Effect.gen(function*() {
    const entered = yield* Deferred.make<void>()
    yield* install(enterAndHang(entered))
    const live = yield* recordLiveOf(driver)
    yield* driver.followup(user("A"))
    yield* Deferred.await(entered)
    yield* driver.followup(user("B"))
    yield* driver.cancel(cause, opts(mode))
    yield* driver.whenIdle
    return live
  })

/**
 * After an abort by `cause`: one turn end, aborted; under keepInbox `kept` is still pending, under
 * a broad cancel it was discarded (next-step first) and nothing is pending; the idle log checks.
 */
const expectAbortedKeeping = (
  live: { readonly discarded: Effect.Effect<ReadonlyArray<string>> },
  mode: Mode,
  cause: CancelCause,
  kept: { readonly nt?: ReadonlyArray<string>; readonly ns?: ReadonlyArray<string> }
) =>
  Effect.gen(function*() {
    const nt = kept.nt ?? []
    const ns = kept.ns ?? []
    expect(turnEndsOf(yield* eventsOf)).toEqual([abortedBy(cause)])
    expect(yield* pending).toEqual(broad(mode) ? { nt: [], ns: [] } : { nt, ns })
    yield* settle
    expect(yield* live.discarded).toEqual(ifBroad(mode, ...[...ns, ...nt].map((id) => `discarded(${id})`)))
    yield* idleAndChecked
  })

/** A tool `name` that counts its invocations in `invocations`, then runs `then` and answers "done". */
const countingTool = (
  name: string,
  description: string,
  then: (ctx: ToolContext) => Effect.Effect<unknown, unknown> = () => Effect.void
) =>
  Effect.map(Ref.make(0), (invocations) => ({
    invocations,
    tool: Tool.make(name, {
      description,
      parameters: empty,
      execute: (_params, ctx) =>
        Ref.update(invocations, (n) => n + 1).pipe(Effect.zipRight(then(ctx)), Effect.as("done"))
    })
  }))

/** Signals `entered`, then never finishes (until interrupted). */
const enterAndHang = (entered: Deferred.Deferred<void>) => Effect.zipRight(Deferred.succeed(entered, undefined), Never)

// ---------------------------------------------------------------------------------------------

describe("cancel windows K0-K1: idle (SPEC 7.2)", () => {
  bothOver(
    "K0: idle with nothing pending writes nothing and arms nothing",
    scenario([ScriptedModel.text("a")]),
    function*({ driver }, mode) {
      const live = yield* recordLiveOf(driver)
      yield* driver.cancel(CancelCause.user, opts(mode))
      yield* driver.whenIdle
      yield* settle
      expect(yield* shape).toEqual([])
      expect(yield* live.all).toEqual([])
      expect(yield* driver.status).toBe("idle")
      // Nothing was armed: the next turn runs to completion.
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect(yield* shape).toEqual([...STEP_A, ...TEXT, "SE(1,1)", "TE(1,completed)"])
      expect(turnEndsOf(yield* eventsOf)).toEqual([{ kind: "completed" }])
      yield* idleAndChecked
    }
  )

  bothOver(
    "K1: idle with pending items: broad cancels them, keepInbox does nothing",
    scenario([ScriptedModel.text("x"), ScriptedModel.text("y")]),
    function*({ driver, inbox }, mode) {
      const live = yield* recordLiveOf(driver)
      const C = plugin("C")
      const Q = user("Q")
      yield* driver.inject(C)
      yield* driver.send(Q, "next-turn", false)
      yield* driver.cancel(CancelCause.hook("reset"), opts(mode))
      yield* driver.whenIdle
      yield* settle
      expect(yield* shape).toEqual(["INS(ns,0,[C])", "INS(nt,0,[Q])", ...ifBroad(mode, "CAN(ns,0,1)", "CAN(nt,0,1)")])
      expect(yield* live.all).toEqual(["inserted(C)", "inserted(Q)", ...ifBroad(mode, "discarded(C)", "discarded(Q)")])
      expect(yield* pending).toEqual(broad(mode) ? { nt: [], ns: [] } : { nt: ["Q"], ns: ["C"] })
      expect(yield* inbox.idState(C.id)).toEqual(Option.some(broad(mode) ? "discarded" : "pending"))
      expect(yield* driver.status).toBe("idle")
      expect(yield* requestCount).toBe(0)
      // Nothing was armed: a later wake runs normally.
      yield* driver.followup(user("W"))
      yield* driver.whenIdle
      expect(turnEndsOf(yield* eventsOf)).toEqual(
        broad(mode) ? [{ kind: "completed" }] : [{ kind: "completed" }, { kind: "completed" }]
      )
      yield* idleAndChecked
    }
  )
})

describe("cancel windows K3-K4: before the request (SPEC 7.2)", () => {
  bothOver(
    "K3: initial pre-step not finished: no step, the claimed batch is lost",
    scenario([]),
    function*({ driver, inbox, preStep }, mode) {
      const entered = yield* Deferred.make<void>()
      const interrupted = yield* Ref.make(false)
      yield* preStep.register((_input, next) =>
        enterAndHang(entered).pipe(Effect.onInterrupt(() => Ref.set(interrupted, true)), Effect.zipRight(next()))
      )
      const live = yield* recordLiveOf(driver)
      const A = user("A")
      yield* driver.followup(A)
      yield* Deferred.await(entered)
      yield* driver.inject(plugin("C"))
      yield* driver.followup(user("B"))
      yield* driver.cancel(CancelCause.parent, opts(mode))
      yield* driver.whenIdle
      expect(yield* shape).toEqual([
        ...OPEN_A,
        "INS(ns,0,[C])",
        "INS(nt,0,[B])",
        ...ifBroad(mode, "CAN(ns,0,1)", "CAN(nt,0,1)"),
        "TE(1,aborted(parent))"
      ])
      expect(turnEndsOf(yield* eventsOf)).toEqual([abortedBy(CancelCause.parent)])
      expect(yield* Ref.get(interrupted)).toBe(true)
      expect(yield* inbox.idState(A.id)).toEqual(Option.some("claimed"))
      expect(yield* pending).toEqual(broad(mode) ? { nt: [], ns: [] } : { nt: ["B"], ns: ["C"] })
      yield* settle
      expect(yield* live.all).toEqual([
        "inserted(A)",
        "status(running)",
        "claimed(A,1)",
        "inserted(C)",
        "inserted(B)",
        ...ifBroad(mode, "discarded(C)", "discarded(B)"),
        "status(idle)"
      ])
      expect(yield* requestCount).toBe(0)
      yield* idleAndChecked
    }
  )

  bothOver(
    "K3a: pre-step returned, step/start not written: no step (cancel from a pre-step listener)",
    scenario([]),
    function*({ driver, preStep }, mode) {
      const returned = yield* Ref.make(false)
      const A = user("A")
      yield* preStep.register((input, next) =>
        input.turn !== 1 ? next() : Effect.uninterruptible(
          driver.inject(plugin("D")).pipe(
            Effect.zipRight(driver.cancel(CancelCause.hook("policy"), opts(mode))),
            Effect.zipRight(next()),
            Effect.tap(() => Ref.set(returned, true))
          )
        )
      )
      const live = yield* recordLiveOf(driver)
      yield* driver.followup(A)
      yield* driver.whenIdle
      expect(yield* Ref.get(returned)).toBe(true) // the pre-step decided Enter([A])
      expect(yield* shape).toEqual([...OPEN_A, "INS(ns,0,[D])", ...ifBroad(mode, "CAN(ns,0,1)"), "TE(1,aborted(hook))"])
      expect(turnEndsOf(yield* eventsOf)).toEqual([abortedBy(CancelCause.hook("policy"))])
      expect(yield* (yield* Inbox).idState(A.id)).toEqual(Option.some("claimed"))
      expect(yield* pending).toEqual({ nt: [], ns: broad(mode) ? [] : ["D"] })
      yield* settle
      expect(yield* live.discarded).toEqual(ifBroad(mode, "discarded(D)"))
      expect(yield* requestCount).toBe(0)
      yield* idleAndChecked
    }
  )

  bothOver(
    "K4: step open, during the request hook: SE, TE, no header, no request",
    scenario([ScriptedModel.text("never")]),
    function*({ driver, hooks }, mode) {
      const live = yield* cancelWithBPending(
        driver,
        (hang) => hooks.onRequest((_input, next) => Effect.zipRight(hang, next())),
        CancelCause.user,
        mode
      )
      expect(yield* shape).toEqual([
        ...OPEN_A,
        "SS(1,1)",
        "UM(A)",
        "INS(nt,0,[B])",
        ...ifBroad(mode, "CAN(nt,0,1)"),
        "SE(1,1)",
        "TE(1,aborted(user))"
      ])
      expect(yield* requestCount).toBe(0)
      yield* expectAbortedKeeping(live, mode, CancelCause.user, { nt: ["B"] })
    }
  )

  bothOver(
    "K4: step open, during the checkpoint: the header stays, no request is dispatched",
    scenario([ScriptedModel.text("never")]),
    function*({ driver, preStep, control }, mode) {
      const G = yield* Deferred.make<void>()
      yield* preStep.register((_input, next) => Effect.zipRight(Deferred.await(G), next()))
      const live = yield* recordLiveOf(driver)
      yield* driver.followup(user("A"))
      yield* control.hold
      yield* Deferred.succeed(G, undefined)
      yield* waitUntil(shapeHas("RH(initial)"), "the request header")
      // Both operations commit at once and wait for durability, which is held.
      const injected = yield* Effect.fork(driver.inject(plugin("C")))
      yield* waitUntil(shapeHas("INS(ns,0,[C])"), "the injection")
      const cancelled = yield* Effect.fork(driver.cancel(CancelCause.user, opts(mode)))
      yield* driver.whenIdle
      expect(yield* shape).toEqual([
        ...STEP_A,
        "INS(ns,0,[C])",
        ...ifBroad(mode, "CAN(ns,0,1)"),
        "SE(1,1)",
        "TE(1,aborted(user))"
      ])
      expect(yield* requestCount).toBe(0)
      yield* control.release
      yield* Fiber.join(injected)
      yield* Fiber.join(cancelled)
      expect(yield* pending).toEqual({ nt: [], ns: broad(mode) ? [] : ["C"] })
      yield* settle
      expect(yield* live.discarded).toEqual(ifBroad(mode, "discarded(C)"))
      expect(yield* requestCount).toBe(0)
      yield* idleAndChecked
    }
  )
})

describe("cancel windows K5-K6: the model request (SPEC 7.2, 7.4)", () => {
  bothOver(
    "K5: during streaming: the interrupted prefix, SE, TE",
    scenario([ScriptedModel.hang({ reasoning: "think", text: "partial" })]),
    function*({ driver }, mode) {
      const live = yield* recordLiveOf(driver)
      yield* driver.followup(user("A"))
      yield* waitUntil(hasChunk("text-delta"), "the text chunk")
      yield* driver.inject(plugin("C"))
      yield* driver.followup(user("B"))
      yield* driver.cancel(CancelCause.parent, opts(mode))
      yield* driver.whenIdle
      expect(yield* shape).toEqual([
        ...STEP_A,
        "CH(block-start)",
        "CH(reasoning-delta)",
        "CH(block-start)",
        "CH(text-delta)",
        "INS(ns,0,[C])",
        "INS(nt,0,[B])",
        ...ifBroad(mode, "CAN(ns,0,1)", "CAN(nt,0,1)"),
        "AM!",
        "SE(1,1)",
        "TE(1,aborted(parent))"
      ])
      const events = yield* eventsOf
      const am = events.find((e) => e.type === "assistant/message") as EventOf<"assistant/message">
      expect(am.data.interrupted).toBe(true)
      expect(am.data.message.content).toEqual([{ type: "reasoning", text: "think" }, { type: "text", text: "partial" }])
      expect(am.sourceEventSeqs).toEqual(events.filter((e) => e.type === "assistant/chunk").map((e) => e.seq))
      expect(turnEndsOf(events)).toEqual([abortedBy(CancelCause.parent)])
      expect(yield* pending).toEqual(broad(mode) ? { nt: [], ns: [] } : { nt: ["B"], ns: ["C"] })
      yield* settle
      expect(yield* live.discarded).toEqual(ifBroad(mode, "discarded(C)", "discarded(B)"))
      yield* idleAndChecked
    }
  )

  agentTest(
    "K5: during streaming with no visible text: no assistant message",
    scenario([ScriptedModel.hang({})]),
    function*({ driver }) {
      yield* driver.followup(user("A"))
      yield* waitUntil(Effect.map(requestCount, (n) => n === 1), "the request")
      yield* driver.cancel(CancelCause.user)
      yield* driver.whenIdle
      expect(yield* shape).toEqual([...STEP_A, "SE(1,1)", "TE(1,aborted(user))"])
      yield* idleAndChecked
    }
  )

  bothOver(
    "K6: during the request-error waterfall: no assistant message, no retry",
    scenario([
      ScriptedModel.fail({ code: "RATE_LIMIT", status: 429, message: "slow" }),
      ScriptedModel.text("never")
    ]),
    function*({ driver, hooks, model }, mode) {
      const live = yield* cancelWithBPending(
        driver,
        (hang) => hooks.onRequestError((_input, next) => Effect.zipRight(hang, next())),
        CancelCause.hook("budget"),
        mode
      )
      expect(yield* shape).toEqual([
        ...STEP_A,
        "CH(finish error)",
        "INS(nt,0,[B])",
        ...ifBroad(mode, "CAN(nt,0,1)"),
        "SE(1,1)",
        "TE(1,aborted(hook))"
      ])
      expect(yield* requestCount).toBe(1)
      expect(yield* model.remaining).toBe(1)
      yield* expectAbortedKeeping(live, mode, CancelCause.hook("budget"), { nt: ["B"] })
    }
  )

  bothOver(
    "K6: during the backoff sleep: the retry record stays, no further attempt",
    scenario([
      ScriptedModel.fail({ code: "RATE_LIMIT", status: 429, message: "slow" }),
      ScriptedModel.text("never")
    ]),
    function*({ driver, model }, mode) {
      const live = yield* recordLiveOf(driver)
      yield* driver.followup(user("A"))
      yield* waitUntil(shapeHas("RT(1)"), "the retry record")
      const rt = (yield* eventsOf).find((e) => e.type === "llm/retry") as EventOf<"llm/retry">
      const now = yield* TestClock.currentTimeMillis
      yield* waitUntil(
        Effect.map(TestClock.sleeps(), (s) => Chunk.some(s, (t) => t === now + rt.data.delayMs)),
        "the backoff sleep"
      )
      yield* driver.followup(user("B"))
      yield* driver.cancel(CancelCause.user, opts(mode))
      yield* driver.whenIdle
      expect(yield* shape).toEqual([
        ...STEP_A,
        "CH(finish error)",
        "RT(1)",
        "INS(nt,0,[B])",
        ...ifBroad(mode, "CAN(nt,0,1)"),
        "SE(1,1)",
        "TE(1,aborted(user))"
      ])
      // Time passing after the abort makes no further attempt.
      yield* TestClock.adjust(60_000)
      yield* settle
      expect(yield* requestCount).toBe(1)
      expect(yield* model.remaining).toBe(1)
      expect(turnEndsOf(yield* eventsOf)).toEqual([abortedBy(CancelCause.user)])
      expect(yield* pending).toEqual({ nt: broad(mode) ? [] : ["B"], ns: [] })
      expect(yield* live.discarded).toEqual(ifBroad(mode, "discarded(B)"))
      yield* idleAndChecked
    }
  )
})

describe("cancel windows K7-K8: tools (SPEC 7.2, 7.5)", () => {
  both(
    "K7: assistant message recorded, no tool started: adjacent never-started pairs",
    (mode) =>
      Effect.gen(function*() {
        const handle = yield* makeHandle
        const { invocations, tool: danger } = yield* countingTool("danger", "counts invocations")
        const script = [
          ScriptedModel.response({
            toolCalls: [call("c1", "danger"), call("c2", "danger")],
            during: handle.use((driver) => driver.inject(plugin("C"))),
            afterFinish: handle.use((driver) => driver.cancel(CancelCause.user, opts(mode)))
          })
        ]
        yield* drivenThrough(handle, function*(driver) {
          const live = yield* recordLiveOf(driver)
          yield* driver.followup(user("A"))
          yield* driver.whenIdle
          expect(yield* shape).toEqual([
            ...STEP_A,
            "CH(block-start)",
            "INS(ns,0,[C])",
            ...toolResponse(2).slice(1),
            ...ifBroad(mode, "CAN(ns,0,1)"),
            "TC(c1)",
            "TR⊘(c1)",
            "TC(c2)",
            "TR⊘(c2)",
            "SE(1,1)",
            "TE(1,aborted(user))"
          ])
          expect(yield* Ref.get(invocations)).toBe(0)
          yield* expectAbortedKeeping(live, mode, CancelCause.user, { ns: ["C"] })
        }).pipe(Effect.provide(scenario(script, { tools: [danger] })))
      })
  )

  both(
    "K8: during tools: a running body is aborted, a call in ToolPre is aborted before dispatch",
    (mode) =>
      Effect.gen(function*() {
        const started = yield* Queue.unbounded<string>()
        const body = Tool.make("p", {
          description: "never finishes",
          parameters: empty,
          mode: "parallel",
          execute: (_params, ctx) => Effect.zipRight(Queue.offer(started, ctx.callId), Never)
        })
        const script = [calls(["c1", "p"], ["c2", "p"], ["c3", "p"])]
        yield* Effect.gen(function*() {
          const driver = yield* Driver
          const hooks = yield* Hooks
          const preEntered = yield* Deferred.make<void>()
          const posted = yield* Ref.make<ReadonlyArray<string>>([])
          yield* hooks.onToolPre((info, next) =>
            info.callId === "c2" ? Effect.zipRight(enterAndHang(preEntered), next()) : next()
          )
          yield* hooks.onToolPost((input, next) =>
            Effect.gen(function*() {
              yield* Ref.update(posted, (all) => [...all, `${input.callId}:${input.aborted}`])
              const output = yield* next()
              return { ...output, additionalContexts: [...output.additionalContexts, plugin(`ctx-${input.callId}`)] }
            })
          )
          const live = yield* recordLiveOf(driver)
          yield* driver.followup(user("A"))
          expect(yield* Queue.take(started)).toBe("c1")
          yield* Deferred.await(preEntered)
          yield* driver.inject(plugin("C"))
          yield* driver.cancel(CancelCause.parent, opts(mode))
          yield* driver.whenIdle
          expect(yield* shape).toEqual([
            ...STEP_A,
            ...toolResponse(3),
            "TC(c1)",
            "TC(c2)",
            "INS(ns,0,[C])",
            ...ifBroad(mode, "CAN(ns,0,1)"),
            "TR✗(c1)",
            broad(mode) ? "INS(ns,0,[ctx-c1])" : "INS(ns,1,[ctx-c1])",
            ...ifBroad(mode, "CAN(ns,0,1)"),
            "TR⊘(c2)",
            "TC(c3)",
            "TR⊘(c3)",
            "SE(1,1)",
            "TE(1,aborted(parent))"
          ])
          expect(yield* Queue.size(started)).toBe(0) // c2 and c3 never ran
          expect(yield* Ref.get(posted)).toEqual(["c1:true"]) // ToolPost does not run for ABORTED_BEFORE_DISPATCH
          yield* expectAbortedKeeping(live, mode, CancelCause.parent, { ns: ["C", "ctx-c1"] })
        }).pipe(Effect.provide(scenario(script, { tools: [body], maxParallelToolCalls: 3 })))
      })
  )

  both(
    "D8: contexts finalised after a broad cancel are inserted and discarded in one transaction",
    (mode) =>
      Effect.gen(function*() {
        const started = yield* Deferred.make<void>()
        const H = yield* Deferred.make<void>()
        const t = Tool.make("t", {
          description: "c1 answers at once with a context; c2 defers one and settles late",
          parameters: empty,
          execute: (_params, ctx: ToolContext): Effect.Effect<ToolOutput | string> =>
            ctx.callId === "c1"
              ? Effect.succeed({ content: "ok", additionalContexts: [plugin("ctx-c1")] })
              : ctx.deferContext(plugin(`ctx-${ctx.callId}`)).pipe(
                Effect.zipRight(Deferred.succeed(started, undefined)),
                Effect.zipRight(Effect.uninterruptible(Deferred.await(H))),
                Effect.as("late")
              )
        })
        const script = [
          calls(["c1", "t"], ["c2", "t"], ["c3", "t"]),
          ScriptedModel.text("w")
        ]
        yield* Effect.gen(function*() {
          const driver = yield* Driver
          const log = yield* SessionLog
          const live = yield* recordLiveOf(driver)
          yield* driver.followup(user("A"))
          yield* Deferred.await(started)
          expect(yield* pending).toEqual({ nt: [], ns: ["ctx-c1"] })
          yield* driver.cancel(CancelCause.user, opts(mode))
          // The body masks interruption: the turn converges only once it settles.
          yield* settle
          expect(yield* driver.status).toBe("running")
          yield* Deferred.succeed(H, undefined)
          yield* driver.whenIdle
          const turn1 = [
            ...STEP_A,
            ...toolResponse(3),
            "TC(c1)",
            "TR(c1)",
            "INS(ns,0,[ctx-c1])",
            "TC(c2)",
            ...ifBroad(mode, "CAN(ns,0,1)"),
            "TR✗(c2)",
            broad(mode) ? "INS(ns,0,[ctx-c2])" : "INS(ns,1,[ctx-c2])",
            ...ifBroad(mode, "CAN(ns,0,1)"),
            "TC(c3)",
            "TR⊘(c3)",
            "SE(1,1)",
            "TE(1,aborted(user))"
          ]
          expect(yield* shape).toEqual(turn1)
          // The late context's result, insertion and cancellation are adjacent (one transaction, SPEC 4.6 COMMIT step 3).
          const events = yield* log.events
          const tr2 = events.findIndex((e) => notation(e) === "TR✗(c2)")
          const late = events[tr2 + 1] as EventOf<"agent/inbox/spliced">
          expect(late.data.inserted.map((m) => m.id)).toEqual(["ctx-c2"])
          expect(yield* pending).toEqual({ nt: [], ns: broad(mode) ? [] : ["ctx-c1", "ctx-c2"] })
          yield* settle
          expect(yield* live.all).toEqual([
            "inserted(A)",
            "status(running)",
            "claimed(A,1)",
            "inserted(ctx-c1)",
            ...(broad(mode)
              ? ["discarded(ctx-c1)", "inserted(ctx-c2)", "discarded(ctx-c2)"]
              : ["inserted(ctx-c2)"]),
            "status(idle)"
          ])
          // keepInbox parks the contexts: the next turn's first step enters them, each once.
          yield* driver.followup(user("W"))
          yield* driver.whenIdle
          expect((yield* shape).slice(turn1.length)).toEqual([
            "INS(nt,0,[W])",
            "TS(2)",
            ...(broad(mode)
              ? ["CLM(nt,0,1)", "SS(2,1)", "UM(W)"]
              : ["CLM(ns,0,2)", "CLM(nt,0,1)", "SS(2,1)", "UM(ctx-c1)", "UM(ctx-c2)", "UM(W)"]),
            ...TEXT,
            "SE(2,1)",
            "TE(2,completed)"
          ])
          yield* idleAndChecked
        }).pipe(Effect.provide(scenario(script, { tools: [t] })))
      })
  )
})

describe("cancel windows K9-K11: boundaries and chains (SPEC 7.2)", () => {
  bothOver(
    "K9: during turn-stopping listeners: no further step",
    scenario([ScriptedModel.text("a"), ScriptedModel.text("never")]),
    function*({ driver, hooks }, mode) {
      const live = yield* cancelWithBPending(driver, (hang) => hooks.onTurnStopping(() => hang), CancelCause.user, mode)
      expect(yield* shape).toEqual([
        ...STEP_A,
        ...TEXT,
        "SE(1,1)",
        "INS(nt,0,[B])",
        ...ifBroad(mode, "CAN(nt,0,1)"),
        "TE(1,aborted(user))"
      ])
      expect(yield* requestCount).toBe(1)
      yield* expectAbortedKeeping(live, mode, CancelCause.user, { nt: ["B"] })
    }
  )

  bothOver(
    "K9a: after SE, before the boundary's claim: no claim, next-step items stay or are cancelled",
    scenario([ScriptedModel.text("a"), ScriptedModel.text("never")]),
    function*({ driver, hooks }, mode) {
      const returned = yield* Ref.make(false)
      // The listener leaves next-step non-empty and records the cause, then returns normally.
      yield* hooks.onTurnStopping(() =>
        Effect.uninterruptible(
          driver.inject(plugin("X")).pipe(
            Effect.zipRight(driver.cancel(CancelCause.hook("stop"), opts(mode))),
            Effect.zipRight(Ref.set(returned, true))
          )
        )
      )
      const live = yield* recordLiveOf(driver)
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect(yield* Ref.get(returned)).toBe(true)
      expect(yield* shape).toEqual([
        ...STEP_A,
        ...TEXT,
        "SE(1,1)",
        "INS(ns,0,[X])",
        ...ifBroad(mode, "CAN(ns,0,1)"),
        "TE(1,aborted(hook))"
      ])
      expect(yield* requestCount).toBe(1)
      yield* expectAbortedKeeping(live, mode, CancelCause.hook("stop"), { ns: ["X"] })
    }
  )

  both("K10: later boundary claimed, its pre-step not finished: that batch is lost", (mode) =>
    Effect.gen(function*() {
      const t = Tool.make("t", {
        description: "answers with a context",
        parameters: empty,
        execute: () => Effect.succeed({ content: "ok", additionalContexts: [plugin("X")] })
      })
      yield* Effect.gen(function*() {
        const driver = yield* Driver
        const preStep = yield* PreStep
        const inbox = yield* Inbox
        const live = yield* cancelWithBPending(
          driver,
          (hang) =>
            preStep.register((input, next) => input.boundary === "later" ? Effect.zipRight(hang, next()) : next()),
          CancelCause.parent,
          mode
        )
        expect(yield* shape).toEqual([
          ...STEP_A,
          ...toolResponse(1),
          "TC(c1)",
          "TR(c1)",
          "INS(ns,0,[X])",
          "SE(1,1)",
          "CLM(ns,0,1)",
          "INS(nt,0,[B])",
          ...ifBroad(mode, "CAN(nt,0,1)"),
          "TE(1,aborted(parent))"
        ])
        expect(turnEndsOf(yield* eventsOf)).toEqual([abortedBy(CancelCause.parent)])
        expect(yield* inbox.idState(plugin("X").id)).toEqual(Option.some("claimed"))
        expect(yield* requestCount).toBe(1)
        expect(yield* pending).toEqual({ nt: broad(mode) ? [] : ["B"], ns: [] })
        yield* settle
        expect(yield* live.discarded).toEqual(ifBroad(mode, "discarded(B)"))
        yield* idleAndChecked
      }).pipe(Effect.provide(scenario([calls(["c1", "t"]), ScriptedModel.text("never")], {
        tools: [t]
      })))
    }))

  both(
    "K11: right after TX-CLOSE continued the chain: the new turn ends aborted with no step (cancel from Driver.events)",
    (mode) =>
      Effect.gen(function*() {
        const G = yield* Deferred.make<void>()
        yield* Effect.gen(function*() {
          const driver = yield* Driver
          const preStep = yield* PreStep
          const turn2 = yield* Deferred.make<void>()
          yield* preStep.register((input, next) =>
            input.turn === 2 ? Effect.zipRight(enterAndHang(turn2), next()) : next()
          )
          const live = yield* recordLiveOf(driver)
          const trace = yield* Ref.make<ReadonlyArray<string>>([])
          yield* Effect.forkScoped(
            Stream.runForEach(driver.statusChanges, (s) => Ref.update(trace, (all) => [...all, s]))
          )
          // An observer cancels as soon as it sees the continuation claim B.
          const observed = yield* Deferred.make<Exit.Exit<void, unknown>>()
          yield* Effect.forkScoped(Stream.runForEach(driver.events, (event) =>
            event.type === "agent/inbox/claimed" && event.turn === 2
              ? Effect.flatMap(Effect.exit(driver.cancel(CancelCause.user, opts(mode))), (exit) =>
                Deferred.succeed(observed, exit))
              : Effect.void))
          yield* settle
          yield* driver.followup(user("A"))
          yield* waitUntil(
            Effect.map(requestCount, (n) =>
              n === 1),
            "the first request"
          )
          yield* driver.followup(user("B"))
          yield* driver.followup(user("C"))
          yield* Deferred.succeed(G, undefined)
          expect(Exit.isSuccess(yield* Deferred.await(observed))).toBe(true)
          yield* driver.whenIdle
          expect(yield* shape).toEqual([
            ...STEP_A,
            "INS(nt,0,[B])",
            "INS(nt,1,[C])",
            ...TEXT,
            "SE(1,1)",
            "TE(1,completed)",
            "TS(2)",
            "CLM(nt,0,1)",
            ...ifBroad(mode, "CAN(nt,0,1)"),
            "TE(2,aborted(user))"
          ])
          expect(turnEndsOf(yield* eventsOf)).toEqual([{ kind: "completed" }, abortedBy(CancelCause.user)])
          expect(yield* requestCount).toBe(1)
          expect(yield* pending).toEqual({ nt: broad(mode) ? [] : ["C"], ns: [] })
          yield* settle
          expect(yield* live.discarded).toEqual(ifBroad(mode, "discarded(C)"))
          expect(yield* Ref.get(trace)).toEqual(["idle", "running", "idle"])
          yield* idleAndChecked
        }).pipe(
          Effect.provide(
            scenario([ScriptedModel.text("a", { awaitBefore: Deferred.await(G) }), ScriptedModel.text("never")])
          )
        )
      })
  )
})

describe("cancel windows K12-K15 (SPEC 7.2)", () => {
  bothOver(
    "K12: during maintenance: the task is interrupted; broad also clears the latch and the inbox",
    scenario([ScriptedModel.text("w")]),
    function*({ driver }, mode) {
      const interrupted = yield* Ref.make(false)
      const started = yield* Deferred.make<void>()
      const task = yield* Effect.fork(
        driver.runMaintenance(enterAndHang(started).pipe(Effect.onInterrupt(() => Ref.set(interrupted, true))))
      )
      yield* Deferred.await(started)
      const live = yield* recordLiveOf(driver)
      yield* driver.followup(user("W"))
      yield* driver.inject(plugin("C"))
      yield* driver.steer(user("S"))
      yield* driver.cancel(CancelCause.user, opts(mode))
      const error = yield* Effect.flip(Fiber.join(task))
      expect(error).toBeInstanceOf(MaintenanceAborted)
      expect((error as MaintenanceAborted).cause).toEqual(CancelCause.user)
      expect(yield* Ref.get(interrupted)).toBe(true)
      yield* driver.whenIdle
      const head = ["INS(nt,0,[W])", "INS(ns,0,[C])", "INS(ns,1,[S])"]
      expect(yield* shape).toEqual(
        broad(mode)
          ? [...head, "CAN(ns,0,2)", "CAN(nt,0,1)"]
          // keepInbox keeps the wakes latched before it: the task's exit opens a turn.
          : [
            ...head,
            "TS(1)",
            "CLM(ns,0,2)",
            "CLM(nt,0,1)",
            "SS(1,1)",
            "UM(C)",
            "UM(S)",
            "UM(W)",
            "RH(initial)",
            ...TEXT,
            "SE(1,1)",
            "TE(1,completed)"
          ]
      )
      expect(yield* requestCount).toBe(broad(mode) ? 0 : 1)
      expect(yield* pending).toEqual({ nt: [], ns: [] })
      yield* settle
      expect(yield* live.discarded).toEqual(ifBroad(mode, "discarded(C)", "discarded(S)", "discarded(W)"))
      yield* idleAndChecked
    }
  )

  both(
    "K13: from a SessionLog.stream observer: exactly the streaming window, never lost",
    (mode) =>
      Effect.gen(function*() {
        const G = yield* Deferred.make<void>()
        yield* Effect.gen(function*() {
          const driver = yield* Driver
          const log = yield* SessionLog
          const observed = yield* Deferred.make<Exit.Exit<void, unknown>>()
          yield* Effect.forkScoped(Stream.runForEach(log.stream(0), (event) =>
            event.type === "assistant/chunk" && (event as EventOf<"assistant/chunk">).data.chunk.type === "text-delta"
              ? Effect.flatMap(
                Effect.exit(driver.cancel(CancelCause.user, opts(mode))),
                (exit) =>
                  Deferred.succeed(observed, exit)
              )
              : Effect.void))
          const live = yield* recordLiveOf(driver)
          yield* driver.followup(user("A"))
          yield* waitUntil(
            Effect.map(requestCount, (n) =>
              n === 1),
            "the request"
          )
          yield* driver.followup(user("B"))
          yield* Deferred.succeed(G, undefined)
          expect(Exit.isSuccess(yield* Deferred.await(observed))).toBe(true)
          yield* driver.whenIdle
          expect(yield* shape).toEqual([
            ...STEP_A,
            "INS(nt,0,[B])",
            "CH(block-start)",
            "CH(text-delta)",
            ...ifBroad(mode, "CAN(nt,0,1)"),
            "AM!",
            "SE(1,1)",
            "TE(1,aborted(user))"
          ])
          expect(yield* pending).toEqual({ nt: broad(mode) ? [] : ["B"], ns: [] })
          yield* settle
          expect(yield* live.discarded).toEqual(ifBroad(mode, "discarded(B)"))
          yield* idleAndChecked
        }).pipe(Effect.provide(scenario([ScriptedModel.hang({ text: "partial" }, { awaitBefore: Deferred.await(G) })])))
      })
  )

  both("K13: from a tool body: the running call is aborted, the rest never start", (mode) =>
    Effect.gen(function*() {
      const handle = yield* makeHandle
      const { invocations, tool: stopper } = yield* countingTool("stopper", "cancels its own turn", (ctx) =>
        Effect.zipRight(
          ctx.deferContext(plugin(`ctx-${ctx.callId}`)),
          handle.use((driver) =>
            driver.cancel(CancelCause.parent, opts(mode))
          )
        ))
      yield* drivenThrough(handle, function*(driver) {
        const live = yield* recordLiveOf(driver)
        yield* driver.followup(user("A"))
        yield* driver.whenIdle
        expect(yield* shape).toEqual([
          ...STEP_A,
          ...toolResponse(2),
          "TC(c1)",
          "TR✗(c1)",
          "INS(ns,0,[ctx-c1])",
          ...ifBroad(mode, "CAN(ns,0,1)"),
          "TC(c2)",
          "TR⊘(c2)",
          "SE(1,1)",
          "TE(1,aborted(parent))"
        ])
        expect(yield* Ref.get(invocations)).toBe(1)
        yield* expectAbortedKeeping(live, mode, CancelCause.parent, { ns: ["ctx-c1"] })
      }).pipe(Effect.provide(scenario(
        [calls(["c1", "stopper"], ["c2", "stopper"])],
        { tools: [stopper] }
      )))
    }))

  agentTest(
    "K14: on a poisoned session: nothing changes, cancel fails with PersistenceError (both modes)",
    scenario([ScriptedModel.text("never")]),
    function*({ driver, preStep, control }) {
      const store = yield* SessionStore
      yield* preStep.register((_input, next) => Effect.zipRight(Never, next()))
      const live = yield* recordLiveOf(driver)
      yield* control.failAppends(3) // the first write and its two retries
      const refused = yield* Effect.flip(driver.followup(user("A")))
      expect(refused).toBeInstanceOf(PersistenceError)
      yield* driver.whenIdle
      expect(yield* driver.status).toBe("idle")
      const before = yield* eventsOf
      expect(before.map(notation)).toEqual(OPEN_A)
      for (const mode of modes) {
        const error = yield* Effect.flip(driver.cancel(CancelCause.user, opts(mode)))
        expect(error).toBeInstanceOf(PersistenceError)
      }
      yield* driver.whenIdle
      expect(yield* eventsOf).toEqual(before)
      // The poison stopped the activity: the turn stays open, in memory and in storage.
      expect(checkLog(before)).toEqual([])
      expect(checkLog(before, { closed: true }).map((v) => v.rule)).toEqual(["R19"])
      expect((yield* store.load(SessionId.make("s"))).events).toEqual([])
      yield* settle
      expect(yield* live.all).toEqual(["inserted(A)", "status(running)", "claimed(A,1)", "error", "status(idle)"])
      const errors = yield* live.errors
      expect(errors.length).toBe(1)
      expect(errors[0]!.error).toBeInstanceOf(PersistenceError)
      expect(yield* requestCount).toBe(0)
    }
  )

  both(
    "K15: while disposing: the first cause (disposed) wins; a broad cancel still discards",
    (mode) =>
      Effect.gen(function*() {
        const started = yield* Deferred.make<void>()
        const interrupted = yield* Deferred.make<void>()
        const H = yield* Deferred.make<void>()
        // c1 defers a context, then runs until interrupted; its interruption is held open by H.
        const slow = Tool.make("slow", {
          description: "held open on interruption",
          parameters: empty,
          execute: (_params, ctx) =>
            ctx.deferContext(plugin(`ctx-${ctx.callId}`)).pipe(
              Effect.zipRight(Deferred.succeed(started, undefined)),
              Effect.zipRight(Never),
              Effect.onInterrupt(() => Effect.zipRight(Deferred.succeed(interrupted, undefined), Deferred.await(H)))
            )
        })
        const agentScope = yield* Scope.make()
        const context = yield* Layer.buildWithScope(
          scenario([calls(["c1", "slow"], ["c2", "slow"])], { tools: [slow] }),
          agentScope
        )
        const driver = Context.get(context, Driver)
        const store = Context.get(context, SessionStore)
        const live = yield* recordLiveOf(driver)
        yield* driver.followup(user("A"))
        yield* Deferred.await(started)
        const closing = yield* Effect.fork(Scope.close(agentScope, Exit.void))
        yield* Deferred.await(interrupted) // disposal recorded `disposed` and interrupted the body
        yield* driver.followup(user("T")) // disposing: inserted, never latched or run
        if (broad(mode)) yield* driver.cancel(CancelCause.user)
        yield* Deferred.succeed(H, undefined)
        yield* Fiber.join(closing)
        yield* driver.whenIdle
        const stored = (yield* store.load(SessionId.make("s"))).events
        expect(stored.map(notation)).toEqual([
          ...STEP_A,
          ...toolResponse(2),
          "TC(c1)",
          "INS(nt,0,[T])",
          ...ifBroad(mode, "CAN(nt,0,1)"),
          "TR✗(c1)",
          "INS(ns,0,[ctx-c1])",
          ...ifBroad(mode, "CAN(ns,0,1)"),
          "TC(c2)",
          "TR⊘(c2)",
          "SE(1,1)",
          "TE(1,aborted(disposed))"
        ])
        expect(turnEndsOf(stored)).toEqual([abortedBy(CancelCause.disposed)])
        expect(checkLog(stored, { closed: true })).toEqual([])
        const inbox = foldInbox(stored)
        expect(inbox._tag).toBe("Right")
        if (inbox._tag === "Right") {
          expect(inbox.right.nextTurn.map((m) => m.id)).toEqual(broad(mode) ? [] : ["T"])
          expect(inbox.right.nextStep.map((m) => m.id)).toEqual(broad(mode) ? [] : ["ctx-c1"])
        }
        expect(yield* live.discarded).toEqual(ifBroad(mode, "discarded(T)", "discarded(ctx-c1)"))
        expect(yield* live.errors).toEqual([])
      })
  )
})

describe("D4, D7 and defects after an abort", () => {
  agentTest(
    "D4: a broad cancel whose durable write fails still aborts; cancel fails with PersistenceError",
    scenario([ScriptedModel.hang({ text: "partial" })]),
    function*({ driver, control }) {
      const live = yield* recordLiveOf(driver)
      yield* driver.followup(user("A"))
      yield* waitUntil(hasChunk("text-delta"), "the text chunk")
      yield* driver.followup(user("B"))
      yield* control.hold
      const cancelled = yield* Effect.fork(driver.cancel(CancelCause.user))
      // The abort does not wait for the write: the turn converges in memory.
      yield* driver.whenIdle
      expect(yield* shape).toEqual([
        ...STEP_A,
        "CH(block-start)",
        "CH(text-delta)",
        "INS(nt,0,[B])",
        "CAN(nt,0,1)",
        "AM!",
        "SE(1,1)",
        "TE(1,aborted(user))"
      ])
      expect(turnEndsOf(yield* eventsOf)).toEqual([abortedBy(CancelCause.user)])
      expect(checkLog(yield* eventsOf, { closed: true })).toEqual([])
      yield* control.failAppends(3)
      yield* control.release
      const exit = yield* Fiber.await(cancelled)
      expect(Exit.isFailure(exit)).toBe(true)
      if (Exit.isFailure(exit)) {
        expect(Option.getOrUndefined(Chunk.head(Cause.failures(exit.cause)))).toBeInstanceOf(
          PersistenceError
        )
      }
      yield* driver.whenIdle
      expect(yield* driver.status).toBe("idle")
      yield* settle
      expect(yield* live.discarded).toEqual(["discarded(B)"])
      const errors = yield* live.errors
      expect(errors.length).toBe(1) // the poison's, not the abort's
      expect(errors[0]!.error).toBeInstanceOf(PersistenceError)
    }
  )

  const interruptedBodies: Array<string> = []
  const boom = new Error("post hook broke")
  agentTest(
    "D7: a failing ToolPost answers every call, ends the step and the turn with TOOL_INTERNAL_ERROR",
    scenario(
      [calls(["c1", "p"], ["c2", "p"], ["c3", "p"])],
      {
        tools: [Tool.make("p", {
          description: "c1 answers at once, the others never",
          parameters: empty,
          mode: "parallel",
          execute: (_params, ctx) =>
            ctx.callId === "c1"
              ? Effect.succeed("ok")
              : Never.pipe(Effect.onInterrupt(() => Effect.sync(() => interruptedBodies.push(ctx.callId))))
        })],
        maxParallelToolCalls: 2
      }
    ),
    function*({ driver, hooks }) {
      yield* hooks.onToolPost((input, next) => input.callId === "c1" ? Effect.fail(boom) : next())
      const live = yield* recordLiveOf(driver)
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect(yield* shape).toEqual([
        ...STEP_A,
        ...toolResponse(3),
        "TC(c1)",
        "TC(c2)",
        "TR?(c1)",
        "TR?(c2)",
        "TC(c3)",
        "TR?(c3)",
        "SE(1,1)",
        "TE(1,error(TOOL_INTERNAL_ERROR))"
      ])
      const events = yield* eventsOf
      const codes = events.filter((e) => e.type === "tool/result").map((e) =>
        (e as EventOf<"tool/result">).data.error?.code
      )
      expect(codes).toEqual(["TOOL_INTERNAL_ERROR", "TOOL_INTERNAL_ERROR", "TOOL_INTERNAL_ERROR"])
      expect(interruptedBodies).toEqual(["c2"])
      expect(turnEndsOf(events)).toEqual([
        { kind: "error", error: { message: "tool call failed internally", code: "TOOL_INTERNAL_ERROR" } }
      ])
      yield* settle
      const errors = yield* live.errors
      expect(errors.length).toBe(1)
      expect([errors[0]!.turn, errors[0]!.step]).toEqual([1, 1])
      expect(errors[0]!.error).toBe(boom)
      yield* idleAndChecked
    }
  )

  agentTest(
    "a defect raised in a pre-step listener's interruption finalizer is published after the abort",
    scenario([]),
    function*({ driver, preStep }) {
      const entered = yield* Deferred.make<void>()
      const outer = new Error("outer finalizer broke")
      const inner = new Error("inner finalizer broke")
      // `onInterrupt` skips a cause that already holds a defect; the outer finalizer runs on any interruption.
      yield* preStep.register((_input, next) =>
        next().pipe(Effect.onExit((exit) => Exit.isInterrupted(exit) ? Effect.die(outer) : Effect.void))
      )
      yield* preStep.register((_input, next) =>
        Effect.zipRight(enterAndHang(entered), next()).pipe(Effect.onInterrupt(() => Effect.die(inner)))
      )
      const live = yield* recordLiveOf(driver)
      yield* driver.followup(user("A"))
      yield* Deferred.await(entered)
      yield* driver.cancel(CancelCause.user)
      yield* driver.whenIdle
      expect(yield* shape).toEqual([...OPEN_A, "TE(1,aborted(user))"])
      expect(turnEndsOf(yield* eventsOf)).toEqual([abortedBy(CancelCause.user)])
      yield* settle
      const errors = yield* live.errors
      expect(errors.map((e) => e.error)).toEqual([inner, outer]) // one per defect
      expect(errors.every((e) => e.turn === 1 && e.step === 1)).toBe(true)
      yield* idleAndChecked
    }
  )

  const dyingHook = (
    name: string,
    register: (services: AgentServices, die: Effect.Effect<never, unknown>) => Effect.Effect<void, never, Scope.Scope>,
    script: ReadonlyArray<ScriptEntry>,
    expected: ReadonlyArray<string>
  ) =>
    agentTest(
      `a ${name} listener that dies right after recording a cause: the defect is published, the turn ends aborted`,
      scenario(script),
      function*(services) {
        const { driver } = services
        const defect = new Error(`${name} died after cancelling`)
        yield* register(
          services,
          Effect.uninterruptible(Effect.zipRight(driver.cancel(CancelCause.user), Effect.die(defect)))
        )
        const live = yield* recordLiveOf(driver)
        yield* driver.followup(user("A"))
        yield* driver.whenIdle
        expect(yield* shape).toEqual([...expected, "TE(1,aborted(user))"])
        expect(turnEndsOf(yield* eventsOf)).toEqual([abortedBy(CancelCause.user)])
        yield* settle
        const errors = yield* live.errors
        expect(errors.map((e) => e.error)).toEqual([defect])
        expect([errors[0]!.turn, errors[0]!.step]).toEqual([1, 1])
        yield* idleAndChecked
      }
    )

  dyingHook("pre-step", ({ preStep }, die) => preStep.register(() => die), [], OPEN_A)
  dyingHook("onRequest", ({ hooks }, die) => hooks.onRequest(() => die), [ScriptedModel.text("never")], [
    ...OPEN_A,
    "SS(1,1)",
    "UM(A)",
    "SE(1,1)"
  ])
  dyingHook("onRequestError", ({ hooks }, die) => hooks.onRequestError(() => die), [
    ScriptedModel.fail({ code: "RATE_LIMIT", status: 429, message: "slow" })
  ], [...STEP_A, "CH(finish error)", "SE(1,1)"])
  dyingHook("onTurnStopping", ({ hooks }, die) => hooks.onTurnStopping(() => die), [ScriptedModel.text("a")], [
    ...STEP_A,
    ...TEXT,
    "SE(1,1)"
  ])

  it.scoped("a ToolPre that dies right after recording a cause: the defect is published, no body runs", () =>
    Effect.gen(function*() {
      const { invocations, tool: t } = yield* countingTool("t", "never runs")
      yield* Effect.gen(function*() {
        const driver = yield* Driver
        const hooks = yield* Hooks
        const defect = new Error("pre hook died after cancelling")
        yield* hooks.onToolPre(() =>
          Effect.uninterruptible(Effect.zipRight(driver.cancel(CancelCause.parent), Effect.die(defect)))
        )
        const live = yield* recordLiveOf(driver)
        yield* driver.followup(user("A"))
        yield* driver.whenIdle
        const tail = (yield* shape).slice(STEP_A.length + toolResponse(2).length)
        expect(tail).toEqual(["TC(c1)", "TR?(c1)", "TC(c2)", "TR⊘(c2)", "SE(1,1)", "TE(1,aborted(parent))"])
        const results = (yield* eventsOf).filter((e) => e.type === "tool/result") as ReadonlyArray<
          EventOf<"tool/result">
        >
        expect(results.map((e) => e.data.error?.code)).toEqual(["PRE_HOOK_FAILED", "ABORTED_BEFORE_DISPATCH"])
        expect(yield* Ref.get(invocations)).toBe(0)
        yield* settle
        const errors = yield* live.errors
        expect(errors.map((e) => e.error)).toEqual([defect])
        yield* idleAndChecked
      }).pipe(Effect.provide(scenario([calls(["c1", "t"], ["c2", "t"])], { tools: [t] })))
    }))

  it.scoped("a ToolPre that dies while the cause is recorded is published; the turn ends aborted", () =>
    Effect.gen(function*() {
      const { invocations, tool: t } = yield* countingTool("t", "never runs")
      yield* Effect.gen(function*() {
        const driver = yield* Driver
        const hooks = yield* Hooks
        const entered = yield* Deferred.make<void>()
        const defect = new Error("pre hook died while aborting")
        yield* hooks.onToolPre((_info, next) =>
          Effect.zipRight(enterAndHang(entered), next()).pipe(Effect.onInterrupt(() => Effect.die(defect)))
        )
        const live = yield* recordLiveOf(driver)
        yield* driver.followup(user("A"))
        yield* Deferred.await(entered)
        yield* driver.cancel(CancelCause.hook("policy"))
        yield* driver.whenIdle
        expect(yield* shape).toEqual([
          ...STEP_A,
          ...toolResponse(1),
          "TC(c1)",
          "TR⊘(c1)",
          "SE(1,1)",
          "TE(1,aborted(hook))"
        ])
        expect(yield* Ref.get(invocations)).toBe(0)
        yield* settle
        const errors = yield* live.errors
        expect(errors.map((e) => e.error)).toEqual([defect])
        expect([errors[0]!.turn, errors[0]!.step]).toEqual([1, 1])
        yield* idleAndChecked
      }).pipe(Effect.provide(scenario([calls(["c1", "t"])], { tools: [t] })))
    }))
})
