/**
 * Acceptance audit of the cancel windows of SPEC 7.2 not covered by the scenarios (K9, K10, START
 * interruption, own failures kept) and of 3.10 agent/error case 2, written against the package root only.
 */
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Layer, Schema, Stream } from "effect"
import { Agent, CancelCause, Driver, Hooks, Inbox, Model, PreStep, ScriptedModel, SessionId, SessionStore, Tool, Tools } from "../../src/index.js"
import { closeOut, dataOfType, plugin, recordLive, scenario, shape, until, untilEvent, user } from "./AuditHarness.js"

const empty = Schema.Struct({})
const boom = new Error("interrupt handler broke")
const ownFailure = new Error("own failure")

describe("7.2 cancel windows", () => {
  it.scoped("K9: a cancel during turn-stopping listeners writes no further step and ends the turn aborted", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const hooks = yield* Hooks
      const entered = yield* Deferred.make<void>()
      yield* hooks.onTurnStopping(() => Effect.zipRight(Deferred.succeed(entered, undefined), Effect.never))
      yield* driver.followup(user("A"))
      yield* Deferred.await(entered)
      yield* driver.cancel(CancelCause.user)
      yield* driver.whenIdle
      expect((yield* shape).slice(-3)).toEqual(["AM", "SE(1,1)", "TE(1,aborted(user))"])
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario([ScriptedModel.text("a")]))))

  it.scoped("K10: a cancel while a later boundary's pre-step runs loses that batch: CLM, then TE(aborted), no step", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const inbox = yield* Inbox
      const entered = yield* Deferred.make<void>()
      yield* (yield* PreStep).register((input, next) =>
        input.boundary === "later" ? Effect.zipRight(Deferred.succeed(entered, undefined), Effect.never) : next())
      yield* (yield* Hooks).onTurnStopping((input) => input.step === 1 ? Effect.orDie(driver.inject(plugin("C"))) : Effect.void)
      yield* driver.followup(user("A"))
      yield* Deferred.await(entered)
      yield* driver.cancel(CancelCause.user, { keepInbox: true })
      yield* driver.whenIdle
      expect((yield* shape).slice(-4)).toEqual(["SE(1,1)", "INS(ns,0,[C])", "CLM(ns,0,1)", "TE(1,aborted(user))"])
      expect(yield* inbox.hasPending).toBe(false)
      expect(yield* inbox.idState("C" as never)).toMatchObject({ value: "claimed" })
    }).pipe(Effect.provide(scenario([ScriptedModel.text("a")]))))

  it.scoped("4.6: a call interrupted while its ToolPre hook runs yields ABORTED_BEFORE_DISPATCH; later calls get ⟨TC TR⊘⟩", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const hooks = yield* Hooks
      const entered = yield* Deferred.make<void>()
      yield* hooks.onToolPre(() => Effect.zipRight(Deferred.succeed(entered, undefined), Effect.never))
      yield* driver.followup(user("A"))
      yield* Deferred.await(entered)
      yield* driver.cancel(CancelCause.user)
      yield* driver.whenIdle
      expect((yield* shape).slice(-6)).toEqual(["TC(c1)", "TR⊘(c1)", "TC(c2)", "TR⊘(c2)", "SE(1,1)", "TE(1,aborted(user))"])
      expect((yield* dataOfType("tool/result"))[0]!.message.content[0].content[0].text).toBe("Error: tool call aborted before dispatch")
    }).pipe(Effect.provide(scenario(
      [ScriptedModel.response({ toolCalls: [{ id: "c1", name: "t", arguments: {} }, { id: "c2", name: "t", arguments: {} }] })],
      { tools: [Tool.make("t", { description: "", parameters: empty, execute: () => Effect.succeed("ran") })] }
    ))))

  const started: Array<string> = []
  const tools = [
    Tool.make("fails", { description: "", parameters: empty, mode: "parallel", execute: () => Effect.fail(ownFailure) }),
    Tool.make("hangs", { description: "", parameters: empty, mode: "parallel", execute: (_p, ctx) => Effect.zipRight(Effect.sync(() => started.push(ctx.callId)), Effect.never) })
  ]
  it.scoped("4.6: on abort a body that already failed with its own error keeps it; a running body gets ABORTED", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      yield* until(Effect.sync(() => started.length === 1))
      yield* driver.cancel(CancelCause.user)
      yield* driver.whenIdle
      const results = yield* dataOfType("tool/result")
      expect(results.map((d) => d.error?.code)).toEqual(["TOOL_ERROR", "ABORTED"])
      expect(results[1]!.message.content[0].content[0].text).toBe("Error: tool call aborted")
    }).pipe(Effect.provide(scenario(
      [ScriptedModel.response({ toolCalls: [{ id: "c1", name: "fails", arguments: {} }, { id: "c2", name: "hangs", arguments: {} }] })],
      { tools }
    ))))
})

// A listener that reports it was entered, then blocks until interrupted, running `onInterrupt` then.
const blocking = (entered: Deferred.Deferred<void>, onInterrupt: Effect.Effect<void>) => () =>
  Effect.zipRight(Deferred.succeed(entered, undefined), Effect.onInterrupt(Effect.never, () => onInterrupt))

// Registers a blocking listener with `register`, follows up, cancels once it is entered and waits
// until idle: the errors of the agent/error notifications published meanwhile.
const cancelWhileBlocked = <R>(
  register: (listener: () => Effect.Effect<never>) => Effect.Effect<void, never, R>,
  onInterrupt: Effect.Effect<void>
) =>
  Effect.gen(function*() {
    const driver = yield* Driver
    const live = yield* recordLive
    const entered = yield* Deferred.make<void>()
    yield* register(blocking(entered, onInterrupt))
    yield* driver.followup(user("A"))
    yield* Deferred.await(entered)
    yield* driver.cancel(CancelCause.user)
    yield* driver.whenIdle
    return (yield* live).filter((e) => e.type === "agent/error").map((e) => (e as any).error)
  })

describe("3.10 agent/error case 2", () => {
  it.scoped("3.10: a typed failure during an aborted turn is not published", () =>
    Effect.gen(function*() {
      const errors = yield* cancelWhileBlocked((listener) => Effect.flatMap(PreStep, (p) => p.register(listener)), Effect.void)
      expect(errors).toEqual([])
      expect((yield* shape).slice(-1)).toEqual(["TE(1,aborted(user))"])
    }).pipe(Effect.provide(scenario([]))))

  it.scoped("3.10: a defect of a pre-step listener found when an aborted turn closes is published once", () =>
    Effect.gen(function*() {
      const errors = yield* cancelWhileBlocked((listener) => Effect.flatMap(PreStep, (p) => p.register(listener)), Effect.die(boom))
      expect(errors).toEqual([boom])
      expect((yield* shape).slice(-1)).toEqual(["TE(1,aborted(user))"])
    }).pipe(Effect.provide(scenario([]))))

  it.scoped("3.10: a defect of a ToolPre listener found when an aborted turn closes is published once", () =>
    Effect.gen(function*() {
      const errors = yield* cancelWhileBlocked((listener) => Effect.flatMap(Hooks, (h) => h.onToolPre(listener)), Effect.die(boom))
      expect(errors).toEqual([boom])
    }).pipe(Effect.provide(scenario(
      [ScriptedModel.response({ toolCalls: [{ id: "c1", name: "t", arguments: {} }] })],
      { tools: [Tool.make("t", { description: "", parameters: empty, execute: () => Effect.succeed("ran") })] }
    ))))

  it.scoped("3.10: a defect of an onRequest listener found when an aborted turn closes is published once", () =>
    Effect.gen(function*() {
      const errors = yield* cancelWhileBlocked((listener) => Effect.flatMap(Hooks, (h) => h.onRequest(listener)), Effect.die(boom))
      expect(errors).toEqual([boom])
    }).pipe(Effect.provide(scenario([ScriptedModel.text("x")]))))

  it.scoped("3.10: a defect of the model stream found when an aborted turn closes is published once; the turn still ends aborted", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const live = yield* recordLive
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "assistant/chunk" && (e.data as any).chunk.type === "text-delta")
      yield* driver.cancel(CancelCause.user)
      yield* driver.whenIdle
      expect((yield* shape).slice(-1)).toEqual(["TE(1,aborted(user))"])
      const errors = (yield* live).filter((e) => e.type === "agent/error")
      expect(errors).toHaveLength(1)
      expect((errors[0] as any).error).toBe(boom)
    }).pipe(Effect.provide(scenario([ScriptedModel.hang({ text: "x" }, { onInterrupt: Effect.die(boom) })]))))
})

describe("defects published when an aborted turn closes", () => {
  // SPEC 3.10 agent/error case (2): "TX-CLOSE writes `aborted(cause)`: one event per `Die` found in the exit
  // `Cause` of a loop component of this turn — pre-step listeners, the `onRequest`, `onRequestError`,
  // `onTurnStopping`, `ToolPre`, `ToolPost` waterfalls, the model stream, the tool scheduler outside bodies".
  // ScriptedModel's `onInterrupt` defect is published (test above); a defect raised by the interruption of
  // any other Model's stream is not.
  it.scoped("3.10: a defect of a custom Model stream's interruption is published once; the turn still ends aborted", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const live = yield* recordLive
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "assistant/chunk")
      yield* driver.cancel(CancelCause.user)
      yield* driver.whenIdle
      expect((yield* shape).slice(-1)).toEqual(["TE(1,aborted(user))"])
      const errors = (yield* live).filter((e) => e.type === "agent/error")
      expect(errors.map((e) => (e as any).error)).toEqual([boom])
    }).pipe(Effect.provide(Agent.layer({ sessionId: SessionId.make("s"), model: { provider: "p", model: "m" } }).pipe(
      Layer.provideMerge(Layer.mergeAll(
        SessionStore.layerMemory,
        Tools.layer(),
        Layer.succeed(Model, {
          stream: () =>
            Stream.concat(
              Stream.make({ type: "block-start" as const, index: 0, block: "text" as const }),
              Stream.fromEffect(Effect.onInterrupt(Effect.never, () => Effect.die(boom)))
            )
        })
      ))
    ))))
})

