/**
 * Third fresh acceptance audit: SPEC 7 (cancellation and races), 3.2/3.5/3.7/3.10 (phases, idleness,
 * disposal, live notifications), 4.8-4.11 (drain policy, where input lands, canonical sequences) and
 * the model and tool seams of 8.8/8.9, written against the package root only.
 */
import * as AiError from "@effect/ai/AiError"
import * as LanguageModel from "@effect/ai/LanguageModel"
import type * as Response from "@effect/ai/Response"
import { describe, expect, it } from "@effect/vitest"
import { Cause, Chunk, Context, Deferred, Effect, Either, Exit, Fiber, JSONSchema, Layer, Option, Schema, Scope, Stream } from "effect"
import type { DriverEvent, ModelRequest, StreamChunk } from "../../src/index.js"
import {
  AgentBusy,
  MemoryStoreControl as MemoryStoreControlTag,
  CancelCause,
  Driver,
  Hooks,
  Inbox,
  Model,
  ModelError,
  PreStep,
  ScriptedModel,
  SessionId,
  SessionLog,
  SessionStore,
  Tool,
  Tools
} from "../../src/index.js"
import {
  agentOver,
  asId,
  closeOut,
  events,
  liveNotation,
  plugin,
  reasons,
  recordLive,
  recordStatus,
  scenario,
  settle,
  shape,
  until,
  untilEvent,
  user
} from "./AuditHarness.js"
import { gate, open } from "./AuditHarness.js"

const empty = Schema.Struct({})
const errorsOf = (live: ReadonlyArray<DriverEvent>) =>
  live.flatMap((e) => (e.type === "agent/error" ? [e] : []))

/** Builds an agent over a fresh memory store in a scope the test closes itself. */
const buildOwn = (
  script: Parameters<typeof agentOver>[0],
  options: Parameters<typeof agentOver>[1] = {}
) =>
  Effect.gen(function*() {
    const storeCtx = yield* Layer.build(SessionStore.layerMemory)
    const scope = yield* Scope.make()
    const ctx = yield* Layer.buildWithScope(agentOver(script, options).pipe(Layer.provide(Layer.succeedContext(storeCtx))), scope)
    return { storeCtx, scope, ctx, driver: Context.get(ctx, Driver), inbox: Context.get(ctx, Inbox), log: Context.get(ctx, SessionLog) }
  })

const callT = (id = "c1") => ScriptedModel.response({ toolCalls: [{ id, name: "t", arguments: {} }] })

describe("3.10 case 2 / 7.1: defects of loop components in an aborted turn", () => {
  // SPEC 3.10 case 2: "TX-CLOSE writes aborted(cause): one event per Die found in the exit Cause of a loop
  // component of this turn — pre-step listeners, the onRequest, onRequestError, onTurnStopping, ToolPre,
  // ToolPost waterfalls, … — including failures that happened before the cause was recorded but were
  // still being closed".
  it.scoped("3.10 case 2: a defect of a ToolPost listener in an aborted turn is published once; the turn ends aborted", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const hooks = yield* Hooks
      const live = yield* recordLive
      yield* hooks.onToolPost(() => Effect.zipRight(driver.cancel(CancelCause.user), Effect.dieMessage("post boom")))
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      // The ToolPost defect is the scheduler failure and is also listed as a defect, so TX-CLOSE
      // (aborted) publishes it once.
      expect(yield* reasons).toEqual([{ kind: "aborted", reason: { kind: "user" } }])
      const errors = errorsOf(yield* live)
      expect(errors.length).toBe(1)
      expect(errors[0]!.turn).toBe(1)
      expect(errors[0]!.step).toBe(1)
      expect(Cause.isRuntimeException(errors[0]!.error)).toBe(true)
      expect((errors[0]!.error as Error).message).toBe("post boom")
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario([callT()], {
      tools: [Tool.make("t", { description: "t", parameters: empty, execute: () => Effect.succeed("ok") })]
    }))))

  it.scoped("3.10 case 2: a defect of an onTurnStopping listener that recorded the cause is published once", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const hooks = yield* Hooks
      const live = yield* recordLive
      yield* hooks.onTurnStopping(() =>
        Effect.uninterruptible(Effect.zipRight(driver.cancel(CancelCause.user), Effect.dieMessage("stop boom")))
      )
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect(yield* reasons).toEqual([{ kind: "aborted", reason: { kind: "user" } }])
      const errors = errorsOf(yield* live)
      expect(errors.map((e) => [e.turn, e.step, (e.error as Error).message])).toEqual([[1, 1, "stop boom"]])
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario([ScriptedModel.text("a")]))))

  it.scoped("3.10 case 2: a defect of an onRequestError listener that recorded the cause is published once", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const hooks = yield* Hooks
      const live = yield* recordLive
      yield* hooks.onRequestError(() =>
        Effect.uninterruptible(Effect.zipRight(driver.cancel(CancelCause.user), Effect.dieMessage("recover boom")))
      )
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect(yield* reasons).toEqual([{ kind: "aborted", reason: { kind: "user" } }])
      const errors = errorsOf(yield* live)
      expect(errors.map((e) => [e.turn, e.step, (e.error as Error).message])).toEqual([[1, 1, "recover boom"]])
      // K6: no RT during the waterfall.
      expect((yield* shape).filter((s) => s.startsWith("RT"))).toEqual([])
    }).pipe(Effect.provide(scenario([ScriptedModel.fail({ message: "busy", code: "OVERLOADED" })]))))

  // "tool-body outcomes are results and never published".
  it.scoped("3.10 case 2: a tool body that records the cause and then dies publishes nothing", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const live = yield* recordLive
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect(yield* reasons).toEqual([{ kind: "aborted", reason: { kind: "user" } }])
      expect(errorsOf(yield* live)).toEqual([])
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(Layer.unwrapEffect(Effect.sync(() => {
      let driverRef: Context.Tag.Service<typeof Driver> | undefined
      const t = Tool.make("t", {
        description: "t",
        parameters: empty,
        execute: () => Effect.uninterruptible(Effect.zipRight(Effect.suspend(() => driverRef!.cancel(CancelCause.user)), Effect.dieMessage("body boom")))
      })
      const base = scenario([callT()], { tools: [t] })
      return Layer.effectContext(Effect.map(Layer.build(base), (ctx) => {
        driverRef = Context.get(ctx, Driver)
        return ctx
      }))
    })))))
})

describe("3.10 case 1: agent/error turn and step", () => {
  it.scoped("3.10 case 1: a later boundary's pre-step failure publishes step k+1 and the listener's own error", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const preStep = yield* PreStep
      const live = yield* recordLive
      const own = { message: "own failure", code: "MINE" }
      yield* preStep.register((input, next) =>
        input.boundary === "later" ? Effect.fail(own) as Effect.Effect<never, typeof own> : Effect.orDie(next()))
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      const errors = errorsOf(yield* live)
      expect(errors.length).toBe(1)
      expect(errors[0]!.turn).toBe(1)
      expect(errors[0]!.step).toBe(2)
      expect(errors[0]!.error).toBe(own)
      expect(yield* reasons).toEqual([{ kind: "error", error: { message: "own failure", code: "MINE" } }])
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario([callT()], {
      tools: [Tool.make("t", { description: "t", parameters: empty, execute: () => Effect.succeed("ok") })]
    }))))

  it.scoped("3.10 case 1: an onTurnStopping failure publishes the step that stopped and the listener's own error", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const hooks = yield* Hooks
      const live = yield* recordLive
      const own = new Error("stopping failed")
      yield* hooks.onTurnStopping(() => Effect.fail(own))
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      const seen = yield* live
      const errors = errorsOf(seen)
      expect(errors.map((e) => [e.turn, e.step])).toEqual([[1, 1]])
      expect(errors[0]!.error).toBe(own)
      // The error precedes the status(idle) of the same TX-CLOSE.
      const tail = seen.map(liveNotation).slice(-2)
      expect(tail).toEqual(["error(1,1)", "status(idle)"])
    }).pipe(Effect.provide(scenario([ScriptedModel.text("a")]))))
})

describe("4.8 drain policy and waking work", () => {
  // SPEC 4.8: "Waking work pending" means a next-turn item exists, or a steer inserted after the last
  // claim is still pending in next-step (wakingSteers). Injected context alone is not waking work.
  it.scoped("4.8/4.2: a turn ending error with a steer inserted during its step continues the chain; the next turn claims it", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect(yield* shape).toEqual([
        "INS(nt,0,[A])", "TS(1)", "CLM(nt,0,1)", "SS(1,1)", "UM(A)", "RH(initial)",
        "INS(ns,0,[S])", "CH(finish error)", "SE(1,1)",
        "TE(1,error(BAD))", "TS(2)", "CLM(ns,0,1)",
        "SS(2,1)", "UM(S)", "CH(block-start)", "CH(text-delta)", "CH(block-end)", "CH(finish stop)", "AM", "SE(2,1)", "TE(2,completed)"
      ])
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(Layer.unwrapEffect(Effect.sync(() => {
      let driverRef: Context.Tag.Service<typeof Driver> | undefined
      const base = scenario([
        ScriptedModel.fail({ message: "bad", code: "BAD" }, { awaitBefore: Effect.suspend(() => driverRef!.steer(user("S"))) }),
        ScriptedModel.text("ok")
      ])
      return Layer.effectContext(Effect.map(Layer.build(base), (ctx) => {
        driverRef = Context.get(ctx, Driver)
        return ctx
      }))
    })))))

  it.scoped("4.8: a turn ending error with only an injected context pending goes idle; the context waits for the next wake", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const inbox = yield* Inbox
      const status = yield* recordStatus
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect((yield* shape).slice(-3)).toEqual(["CH(finish error)", "SE(1,1)", "TE(1,error(BAD))"])
      expect((yield* inbox.nextStep).map((m) => m.id)).toEqual(["I"])
      expect(yield* status).toEqual(["idle", "running", "idle"])
      yield* driver.followup(user("B"))
      yield* driver.whenIdle
      const after = yield* shape
      const at = after.indexOf("TS(2)")
      expect(after.slice(at - 1, at + 7)).toEqual(["INS(nt,0,[B])", "TS(2)", "CLM(ns,0,1)", "CLM(nt,0,1)", "SS(2,1)", "UM(I)", "UM(B)", "CH(block-start)"])
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(Layer.unwrapEffect(Effect.sync(() => {
      let driverRef: Context.Tag.Service<typeof Driver> | undefined
      const base = scenario([
        ScriptedModel.fail({ message: "bad", code: "BAD" }, { awaitBefore: Effect.suspend(() => driverRef!.inject(plugin("I"))) }),
        ScriptedModel.text("ok")
      ])
      return Layer.effectContext(Effect.map(Layer.build(base), (ctx) => {
        driverRef = Context.get(ctx, Driver)
        return ctx
      }))
    })))))

  // SPEC 3.2: "every claim of next-step (TX-BOUNDARY, TX-OPEN) empties [wakingSteers]".
  it.scoped("3.2/4.8: a steer claimed at a boundary is no longer waking work: an inject left after a later failure parks", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const inbox = yield* Inbox
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      // Step 1 (tool) saw S steered; the boundary claimed it; step 2 failed with I injected.
      expect(yield* reasons).toEqual([{ kind: "error", error: { message: "bad", code: "BAD" } }])
      expect((yield* dataOfTurnStarts)).toEqual([1])
      expect((yield* inbox.nextStep).map((m) => m.id)).toEqual(["I"])
      expect(yield* driver.status).toBe("idle")
    }).pipe(Effect.provide(Layer.unwrapEffect(Effect.sync(() => {
      let driverRef: Context.Tag.Service<typeof Driver> | undefined
      const t = Tool.make("t", {
        description: "t",
        parameters: empty,
        execute: () => Effect.as(Effect.suspend(() => driverRef!.steer(user("S"))), "ok")
      })
      const base = scenario([
        callT(),
        ScriptedModel.fail({ message: "bad", code: "BAD" }, { awaitBefore: Effect.suspend(() => driverRef!.inject(plugin("I"))) })
      ], { tools: [t] })
      return Layer.effectContext(Effect.map(Layer.build(base), (ctx) => {
        driverRef = Context.get(ctx, Driver)
        return ctx
      }))
    })))))
})

const dataOfTurnStarts = Effect.map(events, (es) => es.filter((e) => e.type === "turn/start").map((e) => (e.data as { turn: number }).turn))

describe("7.2 cancel windows", () => {
  // K9a: "after SE, before the boundary's claim (including during turn-stopping listeners) | no claim;
  // ⟨TE(aborted)⟩; next-step items stay pending (keepInbox)". A steer made before the cause is not latched
  // (7.6: pre-abort work is parked).
  it.scoped("K9a: a keepInbox cancel during turn-stopping after the listener steered: no claim, TE(aborted), the steer stays parked", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const hooks = yield* Hooks
      const inbox = yield* Inbox
      const G = gate()
      yield* hooks.onTurnStopping(() =>
        Effect.zipRight(
          Effect.zipRight(driver.steer(user("S")), driver.cancel(CancelCause.user, { keepInbox: true })),
          Deferred.await(G)
        )
      )
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect((yield* shape).slice(-4)).toEqual(["AM", "SE(1,1)", "INS(ns,0,[S])", "TE(1,aborted(user))"])
      expect((yield* inbox.nextStep).map((m) => m.id)).toEqual(["S"])
      expect(yield* driver.status).toBe("idle")
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario([ScriptedModel.text("a")]))))

  // K15: "while disposing | first cause wins; a broad cancel still discards the inbox and the draining
  // step's later contexts". 3.4: dropContexts := true "also while disposing".
  it.scoped("K15/7.5: a broad cancel during disposal discards pending input and the draining step's later contexts; TE records disposed", () =>
    Effect.gen(function*() {
      const G = gate()
      const t = Tool.make("t", {
        description: "t",
        parameters: empty,
        execute: (_, ctx) => Effect.as(Effect.uninterruptible(Effect.zipRight(Deferred.await(G), ctx.deferContext(plugin("X")))), "done")
      })
      const { driver, log, scope } = yield* buildOwn([callT()], { tools: [t] })
      const live = yield* Effect.flatMap(driver.subscribe, (q) => Effect.succeed(q))
      yield* driver.followup(user("A"))
      yield* Effect.provideService(untilEvent((e) => e.type === "tool/call"), SessionLog, log)
      yield* driver.inject(plugin("P"))
      const closing = yield* Effect.fork(Scope.close(scope, Exit.void))
      yield* until(Effect.map(Effect.either(driver.runMaintenance(Effect.void)), (r) =>
        Either.isLeft(r) && r.left instanceof AgentBusy && r.left.phase === "disposing"))
      yield* driver.cancel(CancelCause.user)
      yield* open(G)
      yield* Fiber.join(closing)
      const all = (yield* log.events)
      const { notation } = yield* Effect.promise(() => import("./AuditHarness.js"))
      expect(all.map(notation).slice(-8)).toEqual([
        "TC(c1)", "INS(ns,0,[P])", "CAN(ns,0,1)", "TR✗(c1)", "INS(ns,0,[X])", "CAN(ns,0,1)", "SE(1,1)", "TE(1,aborted(disposed))"
      ])
      const seen = Chunk.toReadonlyArray(yield* Effect.flatMap(Effect.succeed(live), (q) => q.takeAll)).map(liveNotation)
      expect(seen.filter((s) => s.startsWith("discarded") || s.startsWith("inserted(X") || s.startsWith("inserted(P"))).toEqual([
        "inserted(P)", "discarded(P)", "inserted(X)", "discarded(X)"
      ])
    }))

  // 3.7 step 1: "latched := ∅"; "Between steps 1 and 3, deliveries are inserted and stay pending — never
  // latched, never run". A wake latched by an earlier keepInbox cancel is not replayed after disposal.
  it.scoped("3.7/7.6: disposal clears a latch made before it: the aborted turn is not followed by a replay; the wake stays pending", () =>
    Effect.gen(function*() {
      const G = gate()
      const { driver, inbox, log, scope, storeCtx } = yield* buildOwn([ScriptedModel.hang({ text: "x" }, { onInterrupt: Deferred.await(G) })])
      yield* driver.followup(user("A"))
      yield* Effect.provideService(untilEvent((e) => e.type === "assistant/chunk"), SessionLog, log)
      yield* driver.cancel(CancelCause.user, { keepInbox: true })
      yield* driver.followup(user("B"))
      const closing = yield* Effect.fork(Scope.close(scope, Exit.void))
      yield* settle
      yield* open(G)
      yield* Fiber.join(closing)
      const stored = (yield* Context.get(storeCtx, SessionStore).load(SessionId.make("s"))).events
      expect(stored.filter((e) => e.type === "turn/start").length).toBe(1)
      expect(stored[stored.length - 1]!.data).toEqual({ turn: 1, reason: { kind: "aborted", reason: { kind: "user" } } })
      expect((yield* inbox.nextTurn).map((m) => m.id)).toEqual(["B"])
    }))

  // 7.1: "interrupted tool bodies are awaited, and work that masks interruption delays whenIdle".
  it.scoped("7.1: a tool body that masks interruption delays whenIdle until it settles; its result is ABORTED", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "tool/call")
      yield* driver.cancel(CancelCause.user)
      const idle = yield* Effect.fork(driver.whenIdle)
      yield* settle
      expect(Option.isNone(yield* Fiber.poll(idle))).toBe(true)
      expect(yield* driver.status).toBe("running")
      yield* open(G1)
      yield* Fiber.join(idle)
      expect((yield* shape).slice(-3)).toEqual(["TR✗(c1)", "SE(1,1)", "TE(1,aborted(user))"])
    }).pipe(Effect.provide(scenario([callT()], {
      tools: [Tool.make("t", { description: "t", parameters: empty, execute: () => Effect.as(Effect.uninterruptible(Deferred.await(G1)), "late") })]
    }))))

  // K3: "turn open, batch claimed, initial pre-step not finished | ⟨TE(aborted)⟩, no step; the claimed batch
  // is lost (even with keepInbox); broad: other pending items CAN".
  it.scoped("K3: a broad cancel during the initial pre-step cancels the other pending items, loses the batch and writes no step", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const preStep = yield* PreStep
      const inbox = yield* Inbox
      const live = yield* recordLive
      const entered = gate()
      yield* preStep.register(() => Effect.zipRight(open(entered), Effect.never))
      yield* driver.inject(plugin("C"))
      yield* driver.followup(user("A"))
      yield* inbox.append("next-turn", user("B"))
      yield* Deferred.await(entered)
      yield* driver.cancel(CancelCause.user)
      yield* driver.whenIdle
      expect(yield* shape).toEqual([
        "INS(ns,0,[C])", "INS(nt,0,[A])", "TS(1)", "CLM(ns,0,1)", "CLM(nt,0,1)", "INS(nt,0,[B])", "CAN(nt,0,1)", "TE(1,aborted(user))"
      ])
      expect(yield* inbox.idState(asId("A"))).toEqual(Option.some("claimed"))
      expect(yield* inbox.idState(asId("C"))).toEqual(Option.some("claimed"))
      expect(yield* inbox.idState(asId("B"))).toEqual(Option.some("discarded"))
      expect((yield* live).map(liveNotation)).toEqual([
        "inserted(C)", "inserted(A)", "status(running)", "claimed(C,1)", "claimed(A,1)", "inserted(B)", "discarded(B)", "status(idle)"
      ])
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario([]))))
})

const G1 = gate()

describe("7.6 the latch / 3.10 ordering", () => {
  // 7.6: "Cleared (latched := ∅) … by TX-OPEN". Two wakes latched during maintenance: the end of the task
  // opens a turn for the oldest; the other is then ordinary next-turn work of the chain. A keepInbox cancel of
  // that turn parks it (it is no longer latched), so no replay follows.
  it.scoped("7.6: TX-OPEN clears the latch: after a maintenance replay's turn is cancelled (keepInbox), the second wake is parked", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const inbox = yield* Inbox
      const T = gate()
      const task = yield* Effect.fork(driver.runMaintenance(Deferred.await(T)))
      yield* settle
      yield* driver.followup(user("A"))
      yield* driver.followup(user("B"))
      yield* open(T)
      yield* Fiber.join(task)
      yield* untilEvent((e) => e.type === "assistant/chunk")
      yield* driver.cancel(CancelCause.user, { keepInbox: true })
      yield* driver.whenIdle
      expect(yield* dataOfTurnStarts).toEqual([1])
      expect((yield* inbox.nextTurn).map((m) => m.id)).toEqual(["B"])
      expect(yield* driver.status).toBe("idle")
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario([ScriptedModel.hang({ text: "x" })]))))

  // 3.5: "consecutive turns of one activity share one running interval, including latched replays";
  // 3.10: claimed events of the replay follow the turn/end; status idle follows the last turn/end.
  it.scoped("3.5/3.10: a latched replay shares the running interval; live: inserted(B) then claimed(B,2), one status(idle) at the end", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const live = yield* recordLive
      const status = yield* recordStatus
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "assistant/chunk")
      yield* driver.cancel(CancelCause.user, { keepInbox: true })
      yield* driver.followup(user("B"))
      yield* driver.whenIdle
      expect((yield* live).map(liveNotation)).toEqual([
        "inserted(A)", "status(running)", "claimed(A,1)", "inserted(B)", "claimed(B,2)", "status(idle)"
      ])
      expect(yield* status).toEqual(["idle", "running", "idle"])
      expect(yield* reasons).toEqual([{ kind: "aborted", reason: { kind: "user" } }, { kind: "completed" }])
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario([ScriptedModel.hang({ text: "x" }), ScriptedModel.text("b")]))))
})

describe("8.9 Tools", () => {
  it.effect("8.9: Tool.make defaults mode to exclusive; list renders parameters with JSON Schema, sorted; default cap is 10", () =>
    Effect.gen(function*() {
      const params = Schema.Struct({ n: Schema.Number })
      const b = Tool.make("b", { description: "B", parameters: params, execute: () => Effect.succeed("b") })
      const a = Tool.make("a", { description: "A", parameters: empty, mode: "parallel", execute: () => Effect.succeed("a") })
      expect(b.mode).toBe("exclusive")
      expect(a.mode).toBe("parallel")
      const tools = yield* Effect.provide(Tools, Tools.layer({ tools: [b, a] }))
      expect(tools.maxParallelToolCalls).toBe(10)
      const listed = yield* tools.list
      expect(listed.map((s) => s.name)).toEqual(["a", "b"])
      expect(listed[1]).toEqual({ name: "b", description: "B", parameters: JSON.parse(JSON.stringify(JSONSchema.make(params))) })
    }))

  it.scoped("8.9: a later registration shadows an earlier one until its scope closes; setMode of an unknown name is a no-op", () =>
    Effect.gen(function*() {
      const tools = yield* Tools
      const one = Tool.make("x", { description: "first", parameters: empty, execute: () => Effect.succeed("1") })
      const two = Tool.make("x", { description: "second", parameters: empty, execute: () => Effect.succeed("2") })
      yield* tools.register(one)
      const inner = yield* Scope.make()
      yield* Scope.extend(tools.register(two), inner)
      expect((yield* tools.list).map((s) => s.description)).toEqual(["second"])
      yield* Scope.close(inner, Exit.void)
      expect((yield* tools.list).map((s) => s.description)).toEqual(["first"])
      yield* tools.setMode("nope", "parallel")
      expect((yield* tools.list).map((s) => s.name)).toEqual(["x"])
    }).pipe(Effect.provide(Tools.layer())))

  it.effect("8.9: Tools.layer dies at build for NaN, -1 and Infinity caps; 1 is accepted", () =>
    Effect.gen(function*() {
      for (const cap of [NaN, -1, Infinity]) {
        const exit = yield* Effect.exit(Effect.provide(Tools, Tools.layer({ maxParallelToolCalls: cap })))
        expect(Exit.isFailure(exit) && Cause.isDie(exit.cause)).toBe(true)
      }
      const ok = yield* Effect.provide(Tools, Tools.layer({ maxParallelToolCalls: 1 }))
      expect(ok.maxParallelToolCalls).toBe(1)
    }))
})

describe("8.8 ScriptedModel", () => {
  const req = (): ModelRequest => ({
    sessionId: SessionId.make("s"), turn: 1, step: 1, attempt: 1, provider: "p", model: "m", tools: [], messages: []
  })
  const collect = (s: Stream.Stream<StreamChunk, ModelError>) =>
    Effect.map(Stream.runCollect(Stream.either(s)), (c) => Chunk.toReadonlyArray(c))

  it.effect("8.8: requests and remaining; text deltas and usage; response order; exhausted script fails UNKNOWN", () =>
    Effect.gen(function*() {
      const model = yield* Model
      const scripted = yield* ScriptedModel
      expect(yield* scripted.remaining).toBe(2)
      const first = yield* collect(model.stream(req()))
      expect(first.map((e) => Either.getOrThrow(e))).toEqual([
        { type: "block-start", index: 0, block: "text" },
        { type: "text-delta", index: 0, text: "h" },
        { type: "text-delta", index: 0, text: "i" },
        { type: "block-end", index: 0 },
        { type: "usage", usage: { inputTokens: 1, outputTokens: 2 } },
        { type: "finish", finish: { kind: "stop" } }
      ])
      const second = yield* collect(model.stream({ ...req(), attempt: 2 }))
      expect(second.map((e) => Either.getOrThrow(e))).toEqual([
        { type: "block-start", index: 0, block: "reasoning" },
        { type: "reasoning-delta", index: 0, text: "r1" },
        { type: "reasoning-delta", index: 0, text: "r2" },
        { type: "block-end", index: 0 },
        { type: "block-start", index: 1, block: "text" },
        { type: "text-delta", index: 1, text: "t" },
        { type: "block-end", index: 1 },
        { type: "block-start", index: 2, block: "tool-call", id: "c1", name: "f" },
        { type: "tool-call-delta", index: 2, arguments: "{\"a\":1}" },
        { type: "block-end", index: 2 },
        { type: "block-start", index: 3, block: "tool-call", id: "c2", name: "g" },
        { type: "tool-call-delta", index: 3, arguments: "raw" },
        { type: "usage", usage: { inputTokens: 1, outputTokens: 1 } },
        { type: "replay-state", state: { k: 1 } },
        { type: "finish", finish: { kind: "max-tokens" } }
      ])
      expect(yield* scripted.remaining).toBe(0)
      const third = yield* collect(model.stream({ ...req(), attempt: 3 }))
      expect(third).toEqual([Either.left(new ModelError({ failure: { message: "ScriptedModel: script exhausted", code: "UNKNOWN" } }))])
      expect((yield* scripted.requests).map((r) => r.attempt)).toEqual([1, 2, 3])
    }).pipe(Effect.provide(ScriptedModel.layer([
      ScriptedModel.text("hi", { deltas: ["h", "i"], usage: { inputTokens: 1, outputTokens: 2 } }),
      ScriptedModel.response({
        reasoning: ["r1", "r2"],
        text: "t",
        toolCalls: [{ id: "c1", name: "f", arguments: { a: 1 } }, { id: "c2", name: "g", arguments: "raw", partial: true }],
        usage: { inputTokens: 1, outputTokens: 1 },
        replayState: { k: 1 },
        finish: "max-tokens"
      })
    ]))))

  it.effect("8.8: fail emits the partial chunks then finish {kind: finish ?? error, failure}; die fails ModelError UNKNOWN", () =>
    Effect.gen(function*() {
      const model = yield* Model
      const failure = { message: "gone", code: "ABORTED" }
      const a = yield* collect(model.stream(req()))
      expect(a.map((e) => Either.getOrThrow(e))).toEqual([
        { type: "block-start", index: 0, block: "text" },
        { type: "text-delta", index: 0, text: "p" },
        { type: "block-end", index: 0 },
        { type: "finish", finish: { kind: "aborted", failure } }
      ])
      const b = yield* collect(model.stream(req()))
      expect(b).toEqual([Either.left(new ModelError({ failure: { message: "dead", code: "UNKNOWN" } }))])
    }).pipe(Effect.provide(ScriptedModel.layer([
      ScriptedModel.fail({ message: "gone", code: "ABORTED" }, { partial: { text: "p", closed: true }, finish: "aborted" }),
      ScriptedModel.die("dead")
    ]))))

  // 4.5: "A provider-side aborted finish is a failure (e.g. code ABORTED), never a cancellation."
  it.scoped("4.5/8.8: a provider-side aborted finish ends the turn error, not aborted, and is not retried", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect(yield* reasons).toEqual([{ kind: "error", error: { message: "gone", code: "ABORTED" } }])
      expect((yield* shape).filter((s) => s.startsWith("RT"))).toEqual([])
    }).pipe(Effect.provide(scenario([ScriptedModel.fail({ message: "gone", code: "ABORTED" }, { finish: "aborted" })]))))

  // 8.8: "awaitBefore runs as soon as the stream is pulled, before the first chunk — also for entries that
  // emit no chunk (hang({}))"; chunks(cs, {then: "hang"}) hangs after its chunks until interrupted.
  it.scoped("8.8/K5: chunks(…, {then: hang}) logs its chunks then hangs; a cancel writes the prefix AM!", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "assistant/chunk" && (e.data as { chunk: { type: string } }).chunk.type === "text-delta")
      yield* driver.cancel(CancelCause.user)
      yield* driver.whenIdle
      expect((yield* shape).slice(-6)).toEqual(["RH(initial)", "CH(block-start)", "CH(text-delta)", "AM!", "SE(1,1)", "TE(1,aborted(user))"])
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario([
      ScriptedModel.chunks([{ type: "block-start", index: 0, block: "text" }, { type: "text-delta", index: 0, text: "so far" }], { then: "hang" })
    ]))))
})

describe("8.8 Model.layerLanguageModel", () => {
  const req: ModelRequest = {
    sessionId: SessionId.make("s"), turn: 1, step: 1, attempt: 1, provider: "p", model: "m", tools: [], messages: []
  }
  const through = (parts: ReadonlyArray<Response.StreamPartEncoded>, failure?: unknown) =>
    Effect.gen(function*() {
      const lm = yield* LanguageModel.make({
        generateText: () => Effect.dieMessage("unused"),
        streamText: () =>
          Stream.concat(Stream.fromIterable(parts), failure === undefined ? Stream.empty : Stream.fail(failure as AiError.AiError))
      })
      const out = yield* Effect.flatMap(Model, (m) => Stream.runCollect(Stream.either(m.stream(req)))).pipe(
        Effect.provide(Model.layerLanguageModel),
        Effect.provideService(LanguageModel.LanguageModel, lm)
      )
      return Chunk.toReadonlyArray(out)
    })
  const usage = { inputTokens: 3, outputTokens: 4, totalTokens: 7 }

  it.effect("8.8: finish reasons: length → usage then max-tokens; error → error; others → stop", () =>
    Effect.gen(function*() {
      const length = yield* through([{ type: "finish", reason: "length", usage }])
      expect(length.map((e) => Either.getOrThrow(e).type)).toEqual(["usage", "finish"])
      expect((Either.getOrThrow(length[1]!) as { finish: { kind: string } }).finish.kind).toBe("max-tokens")
      const err = yield* through([{ type: "finish", reason: "error", usage }])
      expect((Either.getOrThrow(err[err.length - 1]!) as { finish: { kind: string } }).finish.kind).toBe("error")
      for (const reason of ["stop", "content-filter", "tool-calls", "other", "unknown"] as const) {
        const r = yield* through([{ type: "finish", reason, usage }])
        expect((Either.getOrThrow(r[r.length - 1]!) as { finish: { kind: string } }).finish.kind).toBe("stop")
      }
    }))

  it.effect("8.8: reasoning and text parts map to blocks; tool params parts map to a tool-call block", () =>
    Effect.gen(function*() {
      const out = yield* through([
        { type: "reasoning-start", id: "r" },
        { type: "reasoning-delta", id: "r", delta: "think" },
        { type: "reasoning-end", id: "r" },
        { type: "text-start", id: "t" },
        { type: "text-delta", id: "t", delta: "hi" },
        { type: "text-end", id: "t" },
        { type: "tool-params-start", id: "c1", name: "f" },
        { type: "tool-params-delta", id: "c1", delta: "{\"a\":" },
        { type: "tool-params-delta", id: "c1", delta: "1}" },
        { type: "tool-params-end", id: "c1" },
        { type: "finish", reason: "tool-calls", usage }
      ] as ReadonlyArray<Response.StreamPartEncoded>)
      expect(out.map((e) => Either.getOrThrow(e))).toEqual([
        { type: "block-start", index: 0, block: "reasoning" },
        { type: "reasoning-delta", index: 0, text: "think" },
        { type: "block-end", index: 0 },
        { type: "block-start", index: 1, block: "text" },
        { type: "text-delta", index: 1, text: "hi" },
        { type: "block-end", index: 1 },
        { type: "block-start", index: 2, block: "tool-call", id: "c1", name: "f" },
        { type: "tool-call-delta", index: 2, arguments: "{\"a\":" },
        { type: "tool-call-delta", index: 2, arguments: "1}" },
        { type: "block-end", index: 2 },
        { type: "usage", usage: { inputTokens: 3, outputTokens: 4, totalTokens: 7 } },
        { type: "finish", finish: { kind: "stop" } }
      ])
    }))

  it.effect("8.8: stream failures map to ModelError codes: 429 RATE_LIMIT, 5xx SERVICE_UNAVAILABLE, transport NETWORK, else UNKNOWN; status copied", () =>
    Effect.gen(function*() {
      const response = (status: number) =>
        new AiError.HttpResponseError({
          module: "M",
          method: "m",
          reason: "StatusCode",
          request: { method: "POST", url: "http://x", urlParams: [], hash: Option.none(), headers: {} },
          response: { status, headers: {} }
        } as unknown as ConstructorParameters<typeof AiError.HttpResponseError>[0])
      const failureOf = (out: ReadonlyArray<Either.Either<StreamChunk, ModelError>>) => {
        const last = out[out.length - 1]!
        return Either.isLeft(last) ? last.left.failure : undefined
      }
      const r429 = failureOf(yield* through([], response(429)))
      expect([r429?.code, r429?.status]).toEqual(["RATE_LIMIT", 429])
      const r503 = failureOf(yield* through([], response(503)))
      expect([r503?.code, r503?.status]).toEqual(["SERVICE_UNAVAILABLE", 503])
      const r404 = failureOf(yield* through([], response(404)))
      expect([r404?.code, r404?.status]).toEqual(["UNKNOWN", 404])
      const transport = new AiError.HttpRequestError({
        module: "M",
        method: "m",
        reason: "Transport",
        request: { method: "POST", url: "http://x", urlParams: [], hash: Option.none(), headers: {} }
      } as unknown as ConstructorParameters<typeof AiError.HttpRequestError>[0])
      expect(failureOf(yield* through([], transport))?.code).toBe("NETWORK")
      // An error part.
      const part = failureOf(yield* through([{ type: "error", error: { message: "boom", status: 529 } } as Response.StreamPartEncoded]))
      expect([part?.code, part?.status]).toEqual(["SERVICE_UNAVAILABLE", 529])
      const plain = failureOf(yield* through([{ type: "error", error: { message: "boom" } } as Response.StreamPartEncoded]))
      expect(plain?.code).toBe("UNKNOWN")
    }))
})

describe("3.7 disposal and 7.5 contexts", () => {
  // 3.7 step 5: "End SessionLog.stream / Driver.events / statusChanges". A subscriber that joins after
  // disposal gets the final state and an ended stream.
  it.scoped("3.7/3.5: after disposal statusChanges emits idle and ends; Driver.events ends; SessionLog.stream replays then ends", () =>
    Effect.gen(function*() {
      const { driver, log, scope } = yield* buildOwn([ScriptedModel.text("a")])
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      yield* Scope.close(scope, Exit.void)
      const status = yield* Effect.fork(Stream.runCollect(driver.statusChanges))
      const live = yield* Effect.fork(Stream.runCollect(driver.events))
      const stored = yield* Effect.fork(Stream.runCollect(log.stream(0)))
      yield* settle
      const s = yield* Fiber.poll(status)
      const l = yield* Fiber.poll(live)
      const st = yield* Fiber.poll(stored)
      expect(Option.isSome(s) && Exit.isSuccess(s.value) ? Chunk.toReadonlyArray(s.value.value) : "running").toEqual(["idle"])
      expect(Option.isSome(l) && Exit.isSuccess(l.value) ? Chunk.toReadonlyArray(l.value.value) : "running").toEqual([])
      expect(Option.isSome(st) && Exit.isSuccess(st.value) ? Chunk.toReadonlyArray(st.value.value).length : "running").toBe(
        (yield* log.events).length
      )
    }))

  // 3.7: "tool contexts finalized by the draining step are inserted and stay pending (the keepInbox rule of D8)".
  it.scoped("3.7/7.5: disposal during tools keeps the draining step's later contexts pending (no CAN)", () =>
    Effect.gen(function*() {
      const G = gate()
      const t = Tool.make("t", {
        description: "t",
        parameters: empty,
        execute: (_, ctx) => Effect.as(Effect.uninterruptible(Effect.zipRight(Deferred.await(G), ctx.deferContext(plugin("X")))), "done")
      })
      const { driver, inbox, log, scope, storeCtx } = yield* buildOwn([callT()], { tools: [t] })
      yield* driver.followup(user("A"))
      yield* Effect.provideService(untilEvent((e) => e.type === "tool/call"), SessionLog, log)
      const closing = yield* Effect.fork(Scope.close(scope, Exit.void))
      yield* settle
      yield* open(G)
      yield* Fiber.join(closing)
      const { notation } = yield* Effect.promise(() => import("./AuditHarness.js"))
      expect((yield* log.events).map(notation).slice(-4)).toEqual(["TR✗(c1)", "INS(ns,0,[X])", "SE(1,1)", "TE(1,aborted(disposed))"])
      expect((yield* inbox.nextStep).map((m) => m.id)).toEqual(["X"])
      const stored = (yield* Context.get(storeCtx, SessionStore).load(SessionId.make("s"))).events
      expect(stored.length).toBe((yield* log.events).length)
    }))

  // 7.5: "a commit after the cancel appends, in its result's transaction, the insertion of its contexts
  // immediately followed by their cancellation … (An explicit inject issued after the cancel is an ordinary
  // insertion and stays pending.)" 4.6 COMMIT step 3: s = the length of next-step before the insertion.
  it.scoped("7.5: after a broad cancel an explicit inject stays pending; the late context is INS(ns,1) then CAN(ns,1,1)", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const inbox = yield* Inbox
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "tool/call")
      yield* driver.cancel(CancelCause.user)
      yield* driver.inject(plugin("P"))
      yield* open(G2)
      yield* driver.whenIdle
      expect((yield* shape).slice(-6)).toEqual(["INS(ns,0,[P])", "TR✗(c1)", "INS(ns,1,[X])", "CAN(ns,1,1)", "SE(1,1)", "TE(1,aborted(user))"])
      expect((yield* inbox.nextStep).map((m) => m.id)).toEqual(["P"])
      expect(yield* inbox.idState(asId("X"))).toEqual(Option.some("discarded"))
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario([callT()], {
      tools: [Tool.make("t", {
        description: "t",
        parameters: empty,
        execute: (_, ctx) => Effect.as(Effect.uninterruptible(Effect.zipRight(Deferred.await(G2), ctx.deferContext(plugin("X")))), "done")
      })]
    }))))

  // K3a: "pre-step returned, step/start not yet written | ⟨TE(aborted)⟩, no step; the claimed batch is lost";
  // 4.3: "TX-STEP appends nothing (no step/start; the entered batch is dropped; ids it would have added stay unknown)".
  it.scoped("K3a: a pre-step that records the cause and then enters writes no step; an added message stays unknown", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const preStep = yield* PreStep
      const inbox = yield* Inbox
      yield* preStep.register((input, next) =>
        Effect.uninterruptible(Effect.zipRight(
          driver.cancel(CancelCause.user, { keepInbox: true }),
          Effect.map(next(), (d) => d._tag === "Enter" ? { _tag: "Enter" as const, messages: [...d.messages, plugin("N")] } : d)
        ))
      )
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect(yield* shape).toEqual(["INS(nt,0,[A])", "TS(1)", "CLM(nt,0,1)", "TE(1,aborted(user))"])
      expect(yield* inbox.idState(asId("N"))).toEqual(Option.none())
      expect(yield* inbox.idState(asId("A"))).toEqual(Option.some("claimed"))
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario([]))))
})

const G2 = gate()

describe("8.8 ScriptedModel effects", () => {
  // 8.8: "afterFinish after the finish chunk has been consumed (so, for a stop/max-tokens finish, after the
  // assistant/message is recorded and before any tool starts)".
  it.scoped("8.8: afterFinish runs after the AM is recorded and before any tool starts", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      yield* Deferred.await(G3in)
      const during = yield* shape
      expect(during[during.length - 1]).toBe("AM")
      expect(during.some((s) => s.startsWith("TC"))).toBe(false)
      yield* open(G3)
      yield* driver.whenIdle
      expect((yield* shape).filter((s) => s.startsWith("TC") || s.startsWith("TR"))).toEqual(["TC(c1)", "TR(c1)"])
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario([
      ScriptedModel.response({ toolCalls: [{ id: "c1", name: "t", arguments: {} }], afterFinish: Effect.zipRight(open(G3in), Deferred.await(G3)) }),
      ScriptedModel.text("done")
    ], { tools: [Tool.make("t", { description: "t", parameters: empty, execute: () => Effect.succeed("ok") })] }))))
})

const G3 = gate()
const G3in = gate()

describe("8.8 Model.layerLanguageModel request mapping", () => {
  // 8.8: "it calls streamText with the system prompt and the messages converted to its prompt format (…
  // tool-call params are the parsed arguments, or the raw string when unparsable; tool results as
  // tool-message parts), a toolkit of schema-only tools built from request.tools, and
  // disableToolCallResolution: true".
  it.effect("8.8: streamText gets the system prompt, parsed or raw tool-call params, tool messages, the toolkit and disableToolCallResolution", () =>
    Effect.gen(function*() {
      const seen: Array<LanguageModel.ProviderOptions | Record<string, unknown>> = []
      const lm = yield* LanguageModel.make({
        generateText: () => Effect.dieMessage("unused"),
        streamText: (options) => {
          seen.push(options)
          return Stream.fromIterable([{ type: "finish", reason: "stop", usage: { inputTokens: 1, outputTokens: 1, totalTokens: 2 } }] as ReadonlyArray<Response.StreamPartEncoded>) as any
        }
      })
      // Capture the raw streamText options too (before provider-option processing).
      const captured: Array<any> = []
      const wrapped: LanguageModel.Service = {
        ...lm,
        streamText: ((options: any) => {
          captured.push(options)
          return lm.streamText(options)
        }) as any
      }
      const messages = [
        { id: "u", role: "user", content: [{ type: "text", text: "hi" }], source: { kind: "user" } },
        {
          id: "a",
          role: "assistant",
          content: [
            { type: "tool-call", id: "c1", name: "f", arguments: "{\"x\":1}" },
            { type: "tool-call", id: "c2", name: "f", arguments: "{not json" }
          ],
          source: { kind: "model", provider: "p", model: "m" }
        },
        {
          id: "r1",
          role: "tool",
          content: [{ type: "tool-result", toolCallId: "c1", content: [{ type: "text", text: "one" }], isError: false }],
          source: { kind: "tool", callId: "c1" }
        },
        {
          id: "r2",
          role: "tool",
          content: [{ type: "tool-result", toolCallId: "c2", content: [{ type: "text", text: "two" }], isError: true }],
          source: { kind: "tool", callId: "c2" }
        }
      ] as unknown as ModelRequest["messages"]
      const request: ModelRequest = {
        sessionId: SessionId.make("s"), turn: 1, step: 2, attempt: 1, provider: "p", model: "m", system: "be brief",
        tools: [{ name: "f", description: "F", parameters: { type: "object", properties: {} } }], messages
      }
      yield* Effect.flatMap(Model, (m) => Stream.runDrain(m.stream(request))).pipe(
        Effect.provide(Model.layerLanguageModel),
        Effect.provideService(LanguageModel.LanguageModel, wrapped)
      )
      expect(captured.length).toBe(1)
      const options = captured[0]
      expect(options.disableToolCallResolution).toBe(true)
      expect(Object.keys(options.toolkit.tools)).toEqual(["f"])
      const content = options.prompt.content as ReadonlyArray<any>
      expect(content.map((m) => m.role)).toEqual(["system", "user", "assistant", "tool", "tool"])
      expect(content[0].content).toBe("be brief")
      const calls = content[2].content.filter((p: any) => p.type === "tool-call")
      expect(calls.map((p: any) => p.params)).toEqual([{ x: 1 }, "{not json"])
      expect(content[3].content[0].type).toBe("tool-result")
      expect(content[3].content[0].id).toBe("c1")
    }))
})

describe("4.6 START step 2 under cancel", () => {
  // 4.6: "A call interrupted during START steps 2–5 yields ABORTED_BEFORE_DISPATCH"; step 2 is the checkpoint
  // (D13). The body never runs.
  it.scoped("4.6/K8: a cancel while a call's START checkpoint waits on held storage gives TR⊘; the body never runs", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const control = yield* MemoryStoreControlTag
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "tool/call")
      yield* settle
      const cancelling = yield* Effect.fork(driver.cancel(CancelCause.user))
      yield* driver.whenIdle
      expect((yield* shape).slice(-5)).toEqual(["AM", "TC(c1)", "TR⊘(c1)", "SE(1,1)", "TE(1,aborted(user))"])
      expect(ran).toBe(0)
      yield* control.release
      yield* Fiber.join(cancelling)
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(Layer.unwrapEffect(Effect.sync(() => {
      let hold: Effect.Effect<void> = Effect.void
      const base = scenario([
        ScriptedModel.response({ toolCalls: [{ id: "c1", name: "t", arguments: {} }], afterFinish: Effect.suspend(() => hold) })
      ], { tools: [Tool.make("t", { description: "t", parameters: empty, execute: () => Effect.sync(() => (ran++, "ok")) })] })
      return Layer.effectContext(Effect.map(Layer.build(base), (ctx) => {
        hold = Context.get(ctx, MemoryStoreControlTag).hold
        return ctx
      }))
    })))))
})

let ran = 0
