/**
 * Live notifications and agent/error (SPEC 3.10): their order, the cases of agent/error, defects of
 * loop components in an aborted turn, poisoning and quiet queueing.
 */
import { describe, expect, it } from "@effect/vitest"
import { Cause, Context, Deferred, Effect, Exit, Fiber, Layer, Option, Ref, Scope, Stream } from "effect"
import {
  Agent,
  CancelCause,
  Driver,
  Hooks,
  MemoryStoreControl,
  Model,
  PersistenceError,
  PreStep,
  ScriptedModel,
  SessionId,
  SessionLog,
  SessionStore,
  Tool,
  Tools
} from "../../src/index.js"
import type { DriverEvent } from "../../src/index.js"
import { disposeWhileHeld, scenarioSeeingDriver, streamingAgentHeldByGate } from "./cancelFixtures.js"
import {
  agentOver,
  agentTest,
  closeOut,
  gate,
  liveNotation,
  open,
  plugin,
  reasons,
  recordLive,
  scenario,
  settle,
  shape,
  untilEvent,
  user
} from "./harness.js"
import { buildIn, buildOwn } from "./stores.js"
import { callT, empty } from "./toolFixtures.js"

const boom = new Error("interrupt handler broke")

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
const errorsOf = (live: ReadonlyArray<DriverEvent>) => live.flatMap((e) => (e.type === "agent/error" ? [e] : []))

describe("3.10 notification order", () => {
  agentTest(
    "3.10: a failure's agent/error precedes the claimed and status events of the continuing TX-CLOSE",
    scenario([ScriptedModel.text("s")]),
    function*({ driver }) {
      const live = yield* recordLive
      const G = gate()
      const broke = new Error("broke")
      yield* (yield* PreStep).register((input, next) =>
        input.turn === 1 ? Effect.zipRight(Deferred.await(G), Effect.fail(broke)) : next()
      )
      yield* driver.followup(user("F"))
      yield* driver.followup(user("S"))
      yield* open(G)
      yield* driver.whenIdle
      expect((yield* live).map(liveNotation)).toEqual([
        "inserted(F)",
        "status(running)",
        "claimed(F,1)",
        "inserted(S)",
        "error(1,1)",
        "claimed(S,2)",
        "status(idle)"
      ])
    }
  )

  agentTest(
    "3.10: Driver.events is hot: it delivers only notifications committed after subscription",
    scenario([]),
    function*({ driver }) {
      yield* driver.inject(plugin("C"))
      const seen = yield* Ref.make<ReadonlyArray<string>>([])
      yield* Effect.forkScoped(
        Stream.runForEach(driver.events, (e) => Ref.update(seen, (a) => [...a, liveNotation(e)]))
      )
      yield* settle
      yield* driver.inject(plugin("D"))
      yield* settle
      expect(yield* Ref.get(seen)).toEqual(["inserted(D)"])
    }
  )
})

describe("3.10 agent/error case 2", () => {
  agentTest("3.10: a typed failure during an aborted turn is not published", scenario([]), function*() {
    const errors = yield* cancelWhileBlocked(
      (listener) => Effect.flatMap(PreStep, (p) => p.register(listener)),
      Effect.void
    )
    expect(errors).toEqual([])
    expect((yield* shape).slice(-1)).toEqual(["TE(1,aborted(user))"])
  })

  agentTest(
    "3.10: a defect of a pre-step listener found when an aborted turn closes is published once",
    scenario([]),
    function*() {
      const errors = yield* cancelWhileBlocked(
        (listener) => Effect.flatMap(PreStep, (p) => p.register(listener)),
        Effect.die(boom)
      )
      expect(errors).toEqual([boom])
      expect((yield* shape).slice(-1)).toEqual(["TE(1,aborted(user))"])
    }
  )

  agentTest(
    "3.10: a defect of a ToolPre listener found when an aborted turn closes is published once",
    scenario(
      [ScriptedModel.response({ toolCalls: [{ id: "c1", name: "t", arguments: {} }] })],
      { tools: [Tool.make("t", { description: "", parameters: empty, execute: () => Effect.succeed("ran") })] }
    ),
    function*(_) {
      const errors = yield* cancelWhileBlocked(
        (listener) => Effect.flatMap(Hooks, (h) => h.onToolPre(listener)),
        Effect.die(boom)
      )
      expect(errors).toEqual([boom])
    }
  )

  agentTest(
    "3.10: a defect of an onRequest listener found when an aborted turn closes is published once",
    scenario([ScriptedModel.text("x")]),
    function*() {
      const errors = yield* cancelWhileBlocked(
        (listener) => Effect.flatMap(Hooks, (h) => h.onRequest(listener)),
        Effect.die(boom)
      )
      expect(errors).toEqual([boom])
    }
  )

  agentTest(
    "3.10: a defect of the model stream found when an aborted turn closes is published once; the turn still ends aborted",
    scenario([ScriptedModel.hang({ text: "x" }, { onInterrupt: Effect.die(boom) })]),
    function*({ driver }) {
      const live = yield* recordLive
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "assistant/chunk" && (e.data as any).chunk.type === "text-delta")
      yield* driver.cancel(CancelCause.user)
      yield* driver.whenIdle
      expect((yield* shape).slice(-1)).toEqual(["TE(1,aborted(user))"])
      const errors = (yield* live).filter((e) => e.type === "agent/error")
      expect(errors).toHaveLength(1)
      expect((errors[0] as any).error).toBe(boom)
    }
  )
})

describe("defects published when an aborted turn closes", () => {
  // SPEC 3.10 agent/error case (2): "TX-CLOSE writes `aborted(cause)`: one event per `Die` found in the exit
  // `Cause` of a loop component of this turn — pre-step listeners, the `onRequest`, `onRequestError`,
  // `onTurnStopping`, `ToolPre`, `ToolPost` waterfalls, the model stream, the tool scheduler outside bodies".
  // ScriptedModel's `onInterrupt` defect is published (test above); a defect raised by the interruption of
  // any other Model's stream is not.
  agentTest(
    "3.10: a defect of a custom Model stream's interruption is published once; the turn still ends aborted",
    Agent.layer({ sessionId: SessionId.make("s"), model: { provider: "p", model: "m" } }).pipe(
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
    ),
    function*({ driver }) {
      const live = yield* recordLive
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "assistant/chunk")
      yield* driver.cancel(CancelCause.user)
      yield* driver.whenIdle
      expect((yield* shape).slice(-1)).toEqual(["TE(1,aborted(user))"])
      const errors = (yield* live).filter((e) => e.type === "agent/error")
      expect(errors.map((e) => (e as any).error)).toEqual([boom])
    }
  )
})

describe("3.10 case 2 / 7.1: defects of loop components in an aborted turn", () => {
  // SPEC 3.10 case 2: "TX-CLOSE writes aborted(cause): one event per Die found in the exit Cause of a loop
  // component of this turn — pre-step listeners, the onRequest, onRequestError, onTurnStopping, ToolPre,
  // ToolPost waterfalls, … — including failures that happened before the cause was recorded but were
  // still being closed".
  agentTest(
    "3.10 case 2: a defect of a ToolPost listener in an aborted turn is published once; the turn ends aborted",
    scenario([callT()], {
      tools: [Tool.make("t", { description: "t", parameters: empty, execute: () => Effect.succeed("ok") })]
    }),
    function*({ driver, hooks }) {
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
    }
  )

  // Each listener records the cause and then dies; K6: no RT during the onRequestError waterfall.
  const dyingListeners = [
    {
      listener: "onTurnStopping",
      script: [ScriptedModel.text("a")],
      register: (hooks: Context.Tag.Service<typeof Hooks>, die: Effect.Effect<never, unknown>) =>
        hooks.onTurnStopping(() => die),
      message: "stop boom"
    },
    {
      listener: "onRequestError",
      script: [ScriptedModel.fail({ message: "busy", code: "OVERLOADED" })],
      register: (hooks: Context.Tag.Service<typeof Hooks>, die: Effect.Effect<never, unknown>) =>
        hooks.onRequestError(() => die),
      message: "recover boom"
    }
  ]
  for (const { listener, message, register, script } of dyingListeners) {
    agentTest(
      `3.10 case 2: a defect of an ${listener} listener that recorded the cause is published once`,
      scenario(script),
      function*({ driver, hooks }) {
        const live = yield* recordLive
        yield* register(
          hooks,
          Effect.uninterruptible(Effect.zipRight(driver.cancel(CancelCause.user), Effect.dieMessage(message)))
        )
        yield* driver.followup(user("A"))
        yield* driver.whenIdle
        expect(yield* reasons).toEqual([{ kind: "aborted", reason: { kind: "user" } }])
        const errors = errorsOf(yield* live)
        expect(errors.map((e) => [e.turn, e.step, (e.error as Error).message])).toEqual([[1, 1, message]])
        expect((yield* shape).filter((s) => s.startsWith("RT"))).toEqual([])
        expect(yield* closeOut).toEqual([])
      }
    )
  }

  // "tool-body outcomes are results and never published".
  agentTest(
    "3.10 case 2: a tool body that records the cause and then dies publishes nothing",
    scenarioSeeingDriver((agentDriver) => {
      const t = Tool.make("t", {
        description: "t",
        parameters: empty,
        execute: () =>
          Effect.uninterruptible(Effect.zipRight(
            Effect.suspend(() => agentDriver().cancel(CancelCause.user)),
            Effect.dieMessage("body boom")
          ))
      })
      return scenario([callT()], { tools: [t] })
    }),
    function*({ driver }) {
      const live = yield* recordLive
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect(yield* reasons).toEqual([{ kind: "aborted", reason: { kind: "user" } }])
      expect(errorsOf(yield* live)).toEqual([])
      expect(yield* closeOut).toEqual([])
    }
  )
})

describe("3.10 case 1: agent/error turn and step", () => {
  agentTest(
    "3.10 case 1: a later boundary's pre-step failure publishes step k+1 and the listener's own error",
    scenario([callT()], {
      tools: [Tool.make("t", { description: "t", parameters: empty, execute: () => Effect.succeed("ok") })]
    }),
    function*({ driver, preStep }) {
      const live = yield* recordLive
      const own = { message: "own failure", code: "MINE" }
      yield* preStep.register((input, next) =>
        input.boundary === "later" ? Effect.fail(own) as Effect.Effect<never, typeof own> : Effect.orDie(next())
      )
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      const errors = errorsOf(yield* live)
      expect(errors.length).toBe(1)
      expect(errors[0]!.turn).toBe(1)
      expect(errors[0]!.step).toBe(2)
      expect(errors[0]!.error).toBe(own)
      expect(yield* reasons).toEqual([{ kind: "error", error: { message: "own failure", code: "MINE" } }])
      expect(yield* closeOut).toEqual([])
    }
  )

  agentTest(
    "3.10 case 1: an onTurnStopping failure publishes the step that stopped and the listener's own error",
    scenario([ScriptedModel.text("a")]),
    function*({ driver, hooks }) {
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
    }
  )
})

describe("3.10 / 3.7", () => {
  agentTest(
    "3.10: notifications are delivered after the commit and before durability",
    scenario([]),
    function*({ driver, control, log }) {
      const live = yield* recordLive
      yield* control.hold
      const call = yield* Effect.fork(driver.inject(plugin("C")))
      yield* settle
      expect((yield* live).map(liveNotation)).toEqual(["inserted(C)"])
      expect(yield* log.durableSeq).toBe(-1)
      expect(Option.isNone(yield* Fiber.poll(call))).toBe(true)
      yield* control.release
      yield* Fiber.join(call)
    }
  )

  it.scoped("3.7 step 4: disposal of a poisoned session cannot fail", () =>
    Effect.gen(function*() {
      const storeCtx = yield* Layer.build(SessionStore.layerMemory)
      const control = Context.get(storeCtx, MemoryStoreControl)
      const { driver, scope } = yield* buildIn(storeCtx, [ScriptedModel.hang({ text: "x" })])
      yield* driver.followup(user("A"))
      yield* control.failAppends(1000)
      yield* Effect.exit(driver.inject(plugin("C")))
      const closed = yield* Effect.exit(Scope.close(scope, Exit.void))
      expect(Exit.isSuccess(closed)).toBe(true)
    }))

  it.scoped("3.7: disposal during maintenance aborts the task with cause disposed; latched wakes stay pending, not run", () =>
    Effect.gen(function*() {
      const { driver, scope, storeCtx } = yield* buildOwn([ScriptedModel.text("w")])
      const task = yield* Effect.fork(driver.runMaintenance(Effect.never))
      yield* settle
      yield* driver.followup(user("W"))
      yield* Scope.close(scope, Exit.void)
      expect(yield* Effect.flip(Fiber.join(task))).toMatchObject({
        _tag: "MaintenanceAborted",
        cause: { kind: "disposed" }
      })
      const stored = (yield* Context.get(storeCtx, SessionStore).load(SessionId.make("s"))).events
      expect(stored.map((e) => e.type)).toEqual(["agent/inbox/spliced"])
    }))

  it.scoped("3.7: an earlier cause stays recorded when disposal arrives while the aborted turn converges", () =>
    Effect.gen(function*() {
      const G = gate()
      const { driver, scope, storeCtx } = yield* streamingAgentHeldByGate(G)
      yield* driver.cancel(CancelCause.user, { keepInbox: true })
      yield* disposeWhileHeld(scope, G)
      const stored = (yield* Context.get(storeCtx, SessionStore).load(SessionId.make("s"))).events
      expect(stored[stored.length - 1]!.data).toEqual({
        turn: 1,
        reason: { kind: "aborted", reason: { kind: "user" } }
      })
    }))

  it.scoped("3.3: a steer while disposing keeps its requested target (next-step) and stays pending", () =>
    Effect.gen(function*() {
      const G = gate()
      const { driver, scope, storeCtx } = yield* streamingAgentHeldByGate(G)
      yield* disposeWhileHeld(scope, G, Effect.zipRight(settle, driver.steer(user("S"))))
      const stored = (yield* Context.get(storeCtx, SessionStore).load(SessionId.make("s"))).events
      const steer = stored.find((e) =>
        e.type === "agent/inbox/spliced" && (e.data as any).inserted.some((m: any) => m.id === "S")
      )!
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

describe("3.10/6.3 poisoning and quiet queueing", () => {
  agentTest(
    "3.10 case 3: poisoning an idle session with no turn publishes exactly one agent/error {turn: 0, step: 0, error: PersistenceError}",
    scenario([]),
    function*({ driver, control }) {
      const live = yield* recordLive
      yield* control.failAppends(3)
      expect(yield* Effect.flip(driver.inject(plugin("C")))).toBeInstanceOf(PersistenceError)
      const errors = (yield* live).filter((e) => e.type === "agent/error")
      expect(errors.length).toBe(1)
      expect(errors[0]).toMatchObject({ turn: 0, step: 0 })
      expect((errors[0] as any).error).toBeInstanceOf(PersistenceError)
    }
  )

  agentTest(
    "6.3: poisoning during a step stops the activity without turn/end; agent/error names the turn and step; status idle",
    scenario([ScriptedModel.hang({ text: "par" })]),
    function*({ driver, control }) {
      const live = yield* recordLive
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "assistant/chunk")
      yield* control.failAppends(3)
      expect(yield* Effect.flip(driver.inject(plugin("C")))).toBeInstanceOf(PersistenceError)
      yield* driver.whenIdle
      expect(yield* driver.status).toBe("idle")
      const notes = yield* live
      const errors = notes.filter((e) => e.type === "agent/error")
      expect(errors.length).toBe(1)
      expect(errors[0]).toMatchObject({ turn: 1, step: 1 })
      expect(notes.map(liveNotation)).toContain("status(idle)")
      expect((yield* shape).some((s) => s.startsWith("TE("))).toBe(false)
    }
  )

  agentTest(
    "3.3: send(m, next-turn, false) during maintenance only inserts; no turn opens when the task ends",
    scenario([ScriptedModel.text("never")]),
    function*({ driver, inbox }) {
      yield* driver.runMaintenance(driver.send(user("Q"), "next-turn", false))
      yield* driver.whenIdle
      expect(yield* shape).toEqual(["INS(nt,0,[Q])"])
      expect((yield* inbox.nextTurn).map((m) => m.id)).toEqual(["Q"])
      expect(yield* driver.status).toBe("idle")
    }
  )
})
