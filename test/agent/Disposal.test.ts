/**
 * Disposal (SPEC 3.6, 3.7, 7.5): the disposal window, streams ending, contexts of the draining step.
 */
import { describe, expect, it } from "@effect/vitest"
import { Chunk, Context, Effect, Exit, Fiber, Layer, Option, Scope, Stream } from "effect"
import { CancelCause, Driver, Inbox, ScriptedModel, SessionId, SessionLog, SessionStore } from "../../src/index.js"
import { disposeWhileHeld, gatedContextTool } from "./cancelFixtures.js"
import {
  agentOver,
  agentTest,
  asId,
  closeOut,
  gate,
  notation,
  open,
  plugin,
  scenario,
  settle,
  shape,
  until,
  untilEvent,
  user
} from "./harness.js"
import { buildIn, buildOwn } from "./stores.js"
import { callT } from "./toolFixtures.js"

const G2 = gate()

describe("3.6/3.7 disposal window", () => {
  const held: {
    driver?: Context.Tag.Service<Driver>
    inbox?: Context.Tag.Service<Inbox>
    busy?: unknown
    appended?: boolean
  } = {}
  it.scoped("3.6/3.7/3.8: while disposing runMaintenance fails AgentBusy {phase: disposing}; inbox mutations are allowed and stay pending", () =>
    Effect.gen(function*() {
      const storeCtx = yield* Layer.build(SessionStore.layerMemory)
      const built = yield* buildIn(storeCtx, [ScriptedModel.hang({}, {
        onInterrupt: Effect.suspend(() =>
          Effect.gen(function*() {
            held.busy = yield* Effect.flip(held.driver!.runMaintenance(Effect.void))
            yield* held.inbox!.append("next-turn", user("late"))
            held.appended = true
          }).pipe(Effect.ignore)
        )
      })])
      held.driver = built.driver
      held.inbox = built.inbox
      yield* built.driver.followup(user("A"))
      yield* until(Effect.map(built.log.events, (es) => es.some((e) => e.type === "request/header")))
      yield* settle
      yield* Scope.close(built.scope, Exit.void)
      expect(held.busy).toMatchObject({
        _tag: "AgentBusy",
        operation: "runMaintenance",
        phase: "disposing",
        sessionId: "s"
      })
      expect(held.appended).toBe(true)
      const again = yield* buildIn(storeCtx, [], { resume: true })
      expect((yield* again.inbox.nextTurn).map((m) => m.id)).toEqual(["late"])
      const ends = (yield* again.log.events).filter((e) => e.type === "turn/end").map((e) => (e.data as any).reason)
      expect(ends).toEqual([{ kind: "aborted", reason: { kind: "disposed" } }])
      yield* Scope.close(again.scope, Exit.void)
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
      expect(Option.isSome(s) && Exit.isSuccess(s.value) ? Chunk.toReadonlyArray(s.value.value) : "running").toEqual([
        "idle"
      ])
      expect(Option.isSome(l) && Exit.isSuccess(l.value) ? Chunk.toReadonlyArray(l.value.value) : "running").toEqual([])
      expect(Option.isSome(st) && Exit.isSuccess(st.value) ? Chunk.toReadonlyArray(st.value.value).length : "running")
        .toBe(
          (yield* log.events).length
        )
    }))

  // 3.7: "tool contexts finalized by the draining step are inserted and stay pending (the keepInbox rule of D8)".
  it.scoped("3.7/7.5: disposal during tools keeps the draining step's later contexts pending (no CAN)", () =>
    Effect.gen(function*() {
      const G = gate()
      const { driver, inbox, log, scope, storeCtx } = yield* buildOwn([callT()], { tools: [gatedContextTool(G)] })
      yield* driver.followup(user("A"))
      yield* Effect.provideService(untilEvent((e) => e.type === "tool/call"), SessionLog, log)
      yield* disposeWhileHeld(scope, G)
      expect((yield* log.events).map(notation).slice(-4)).toEqual([
        "TR✗(c1)",
        "INS(ns,0,[X])",
        "SE(1,1)",
        "TE(1,aborted(disposed))"
      ])
      expect((yield* inbox.nextStep).map((m) => m.id)).toEqual(["X"])
      const stored = (yield* Context.get(storeCtx, SessionStore).load(SessionId.make("s"))).events
      expect(stored.length).toBe((yield* log.events).length)
    }))

  // 7.5: "a commit after the cancel appends, in its result's transaction, the insertion of its contexts
  // immediately followed by their cancellation … (An explicit inject issued after the cancel is an ordinary
  // insertion and stays pending.)" 4.6 COMMIT step 3: s = the length of next-step before the insertion.
  agentTest(
    "7.5: after a broad cancel an explicit inject stays pending; the late context is INS(ns,1) then CAN(ns,1,1)",
    scenario([callT()], { tools: [gatedContextTool(G2)] }),
    function*({ driver, inbox }) {
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "tool/call")
      yield* driver.cancel(CancelCause.user)
      yield* driver.inject(plugin("P"))
      yield* open(G2)
      yield* driver.whenIdle
      expect((yield* shape).slice(-6)).toEqual([
        "INS(ns,0,[P])",
        "TR✗(c1)",
        "INS(ns,1,[X])",
        "CAN(ns,1,1)",
        "SE(1,1)",
        "TE(1,aborted(user))"
      ])
      expect((yield* inbox.nextStep).map((m) => m.id)).toEqual(["P"])
      expect(yield* inbox.idState(asId("X"))).toEqual(Option.some("discarded"))
      expect(yield* closeOut).toEqual([])
    }
  )

  // K3a: "pre-step returned, step/start not yet written | ⟨TE(aborted)⟩, no step; the claimed batch is lost";
  // 4.3: "TX-STEP appends nothing (no step/start; the entered batch is dropped; ids it would have added stay unknown)".
  agentTest(
    "K3a: a pre-step that records the cause and then enters writes no step; an added message stays unknown",
    scenario([]),
    function*({ driver, preStep, inbox }) {
      yield* preStep.register((input, next) =>
        Effect.uninterruptible(Effect.zipRight(
          driver.cancel(CancelCause.user, { keepInbox: true }),
          Effect.map(
            next(),
            (d) => d._tag === "Enter" ? { _tag: "Enter" as const, messages: [...d.messages, plugin("N")] } : d
          )
        ))
      )
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect(yield* shape).toEqual(["INS(nt,0,[A])", "TS(1)", "CLM(nt,0,1)", "TE(1,aborted(user))"])
      expect(yield* inbox.idState(asId("N"))).toEqual(Option.none())
      expect(yield* inbox.idState(asId("A"))).toEqual(Option.some("claimed"))
      expect(yield* closeOut).toEqual([])
    }
  )
})

describe("3.7 disposal ends the streams", () => {
  it.scoped("3.7: SessionLog.stream and Driver.events end on disposal", () =>
    Effect.gen(function*() {
      const storeCtx = yield* Layer.build(SessionStore.layerMemory)
      const scope = yield* Scope.make()
      const ctx = yield* Layer.buildWithScope(agentOver([]).pipe(Layer.provide(Layer.succeedContext(storeCtx))), scope)
      const log = Context.get(ctx, SessionLog)
      const driver = Context.get(ctx, Driver)
      const logEnd = yield* Effect.fork(Stream.runDrain(log.stream()))
      const eventsEnd = yield* Effect.fork(Stream.runDrain(driver.events))
      yield* settle
      yield* Scope.close(scope, Exit.void)
      expect(Exit.isSuccess(yield* Fiber.await(logEnd))).toBe(true)
      expect(Exit.isSuccess(yield* Fiber.await(eventsEnd))).toBe(true)
    }))
})
