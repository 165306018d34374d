/**
 * Acceptance audit of SPEC 6.2 checkpoints, 3.10 delivery before durability and 3.7 step 4
 * (disposal cannot fail), written against the package root only.
 */
import { describe, expect, it } from "@effect/vitest"
import { Context, Deferred, Effect, Exit, Fiber, Layer, Option, Schema, Scope } from "effect"
import { CancelCause, Driver, MemoryStoreControl, ScriptedModel, SessionId, SessionLog, SessionStore, Tool } from "../../src/index.js"
import { agentOver, liveNotation, plugin, recordLive, requests, scenario, settle, untilEvent, user } from "./AuditHarness.js"

const empty = Schema.Struct({})

// The hold must happen between the assistant message and the tool's checkpoint: the scripted
// response's afterFinish takes it through this reference, set by the test.
const controlRef: { control?: Context.Tag.Service<MemoryStoreControl> } = {}
const MemoryStoreControlLater = Effect.sync(() => controlRef.control!)

describe("6.2 checkpoints", () => {
  it.scoped("6.2: while storage is held back no model request is dispatched", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const control = yield* MemoryStoreControl
      yield* driver.followup(user("A"))
      yield* control.hold
      yield* untilEvent((e) => e.type === "request/header")
      yield* settle
      expect(yield* requests).toEqual([])
      yield* control.release
      yield* driver.whenIdle
      expect(yield* requests).toHaveLength(1)
    }).pipe(Effect.provide(scenario([ScriptedModel.text("a")]))))

  let ran = 0
  const body = Tool.make("t", { description: "", parameters: empty, execute: () => Effect.sync(() => (ran++, "ok")) })
  it.scoped("6.2: while storage is held back no tool body runs", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const control = yield* MemoryStoreControl
      controlRef.control = control
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "tool/call")
      yield* settle
      expect(ran).toBe(0)
      yield* control.release
      yield* driver.whenIdle
      expect(ran).toBe(1)
    }).pipe(Effect.provide(scenario(
      [ScriptedModel.response({ toolCalls: [{ id: "c1", name: "t", arguments: {} }], afterFinish: Effect.flatMap(MemoryStoreControlLater, (c) => c.hold) }), ScriptedModel.text("done")],
      { tools: [body] }
    ))))
})

describe("3.10 / 3.7", () => {
  it.scoped("3.10: notifications are delivered after the commit and before durability", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const control = yield* MemoryStoreControl
      const log = yield* SessionLog
      const live = yield* recordLive
      yield* control.hold
      const call = yield* Effect.fork(driver.inject(plugin("C")))
      yield* settle
      expect((yield* live).map(liveNotation)).toEqual(["inserted(C)"])
      expect(yield* log.durableSeq).toBe(-1)
      expect(Option.isNone(yield* Fiber.poll(call))).toBe(true)
      yield* control.release
      yield* Fiber.join(call)
    }).pipe(Effect.provide(scenario([]))))

  it.scoped("3.7 step 4: disposal of a poisoned session cannot fail", () =>
    Effect.gen(function*() {
      const storeCtx = yield* Layer.build(SessionStore.layerMemory)
      const control = Context.get(storeCtx, MemoryStoreControl)
      const scope = yield* Scope.make()
      const ctx = yield* Layer.buildWithScope(agentOver([ScriptedModel.hang({ text: "x" })]).pipe(Layer.provide(Layer.succeedContext(storeCtx))), scope)
      const driver = Context.get(ctx, Driver)
      yield* driver.followup(user("A"))
      yield* control.failAppends(1000)
      yield* Effect.exit(driver.inject(plugin("C")))
      const closed = yield* Effect.exit(Scope.close(scope, Exit.void))
      expect(Exit.isSuccess(closed)).toBe(true)
    }))

  it.scoped("3.7: disposal during maintenance aborts the task with cause disposed; latched wakes stay pending, not run", () =>
    Effect.gen(function*() {
      const storeCtx = yield* Layer.build(SessionStore.layerMemory)
      const scope = yield* Scope.make()
      const ctx = yield* Layer.buildWithScope(agentOver([ScriptedModel.text("w")]).pipe(Layer.provide(Layer.succeedContext(storeCtx))), scope)
      const driver = Context.get(ctx, Driver)
      const task = yield* Effect.fork(driver.runMaintenance(Effect.never))
      yield* settle
      yield* driver.followup(user("W"))
      yield* Scope.close(scope, Exit.void)
      expect(yield* Effect.flip(Fiber.join(task))).toMatchObject({ _tag: "MaintenanceAborted", cause: { kind: "disposed" } })
      const stored = (yield* Context.get(storeCtx, SessionStore).load(SessionId.make("s"))).events
      expect(stored.map((e) => e.type)).toEqual(["agent/inbox/spliced"])
    }))

  it.scoped("3.7: an earlier cause stays recorded when disposal arrives while the aborted turn converges", () =>
    Effect.gen(function*() {
      const storeCtx = yield* Layer.build(SessionStore.layerMemory)
      const scope = yield* Scope.make()
      const G = yield* Deferred.make<void>()
      const ctx = yield* Layer.buildWithScope(
        agentOver([ScriptedModel.hang({ text: "x" }, { onInterrupt: Deferred.await(G) })]).pipe(Layer.provide(Layer.succeedContext(storeCtx))),
        scope
      )
      const driver = Context.get(ctx, Driver)
      yield* driver.followup(user("A"))
      yield* Effect.provide(untilEvent((e) => e.type === "assistant/chunk"), ctx)
      yield* driver.cancel(CancelCause.user, { keepInbox: true })
      const closing = yield* Effect.fork(Scope.close(scope, Exit.void))
      yield* settle
      yield* Deferred.succeed(G, undefined)
      yield* Fiber.join(closing)
      const stored = (yield* Context.get(storeCtx, SessionStore).load(SessionId.make("s"))).events
      expect(stored[stored.length - 1]!.data).toEqual({ turn: 1, reason: { kind: "aborted", reason: { kind: "user" } } })
    }))

  it.scoped("3.3: a steer while disposing keeps its requested target (next-step) and stays pending", () =>
    Effect.gen(function*() {
      const storeCtx = yield* Layer.build(SessionStore.layerMemory)
      const scope = yield* Scope.make()
      const G = yield* Deferred.make<void>()
      const ctx = yield* Layer.buildWithScope(
        agentOver([ScriptedModel.hang({ text: "x" }, { onInterrupt: Deferred.await(G) })]).pipe(Layer.provide(Layer.succeedContext(storeCtx))),
        scope
      )
      const driver = Context.get(ctx, Driver)
      yield* driver.followup(user("A"))
      yield* Effect.provide(untilEvent((e) => e.type === "assistant/chunk"), ctx)
      const closing = yield* Effect.fork(Scope.close(scope, Exit.void))
      yield* settle
      yield* driver.steer(user("S"))
      yield* Deferred.succeed(G, undefined)
      yield* Fiber.join(closing)
      const stored = (yield* Context.get(storeCtx, SessionStore).load(SessionId.make("s"))).events
      const steer = stored.find((e) => e.type === "agent/inbox/spliced" && (e.data as any).inserted.some((m: any) => m.id === "S"))!
      expect((steer.data as any).target).toBe("next-step")
      expect(stored.filter((e) => e.type === "turn/start").length).toBe(1)
      expect((stored[stored.length - 1]!.data as any).reason).toEqual({ kind: "aborted", reason: { kind: "disposed" } })
    }))

  it.scoped("3.1: interrupting a caller after its transaction committed does not undo the change", () =>
    Effect.gen(function*() {
      const storeCtx = yield* Layer.build(SessionStore.layerMemory)
      const control = Context.get(storeCtx, MemoryStoreControl)
      const { driver, log } = yield* Effect.map(
        Layer.build(agentOver([ScriptedModel.text("a")]).pipe(Layer.provide(Layer.succeedContext(storeCtx)))),
        (ctx) => ({ driver: Context.get(ctx, Driver), log: Context.get(ctx, SessionLog) })
      )
      yield* control.hold
      const call = yield* Effect.fork(driver.followup(user("A")))
      yield* settle
      yield* Fiber.interrupt(call)
      yield* control.release
      yield* driver.whenIdle
      expect((yield* log.events).map((e) => e.type).slice(-1)).toEqual(["turn/end"])
    }))

  it.scoped("6.3: a store conflict with a second writer poisons the session like a failed append", () =>
    Effect.gen(function*() {
      const storeCtx = yield* Layer.build(SessionStore.layerMemory)
      const store = Context.get(storeCtx, SessionStore)
      const { driver } = yield* Effect.map(
        Layer.build(agentOver([]).pipe(Layer.provide(Layer.succeedContext(storeCtx)))),
        (ctx) => ({ driver: Context.get(ctx, Driver) })
      )
      yield* driver.inject(plugin("C"))
      yield* store.append(SessionId.make("s"), [{ type: "x/other", seq: 1, time: 0, data: {}, ignorable: true }])
      expect(yield* Effect.flip(driver.inject(plugin("D")))).toMatchObject({ _tag: "PersistenceError" })
      expect(yield* Effect.flip(driver.inject(plugin("E")))).toMatchObject({ _tag: "PersistenceError" })
    }))
})

