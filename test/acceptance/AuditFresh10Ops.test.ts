/**
 * Tenth fresh acceptance audit: SPEC 3.2-3.10 and 7 — operations issued from observers, hooks,
 * model stream effects and maintenance tasks (D5), cancels at exact windows, injections racing
 * the claim, latches under repeated cancels, and whenIdle inheritance, against the package root.
 */
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Exit, Fiber, Schema, Stream } from "effect"
import type { DriverEvent, UserMessage } from "../../src/index.js"
import { CancelCause, Driver, Hooks, Inbox, MaintenanceAborted, MemoryStoreControl, PreStep, PreStepDecision, ScriptedModel, Tool } from "../../src/index.js"
import { closeOut, gate, liveNotation, open, plugin, recordLive, recordStatus, requests, scenario, settle, shape, texts, until, user } from "./AuditHarness.js"

const ids = (ms: ReadonlyArray<UserMessage>) => ms.map((m) => m.id)
const liveOf = (read: Effect.Effect<ReadonlyArray<DriverEvent>>) => Effect.map(read, (es) => es.map(liveNotation))
let ran = 0
const counting = Tool.make("t", {
  description: "",
  parameters: Schema.Struct({}),
  execute: () => Effect.sync(() => ran++).pipe(Effect.as("ok"))
})
const hold = gate()
const hold2 = gate()
const turn1Hold = gate()
const asIdOf = (s: string): UserMessage["id"] => s as UserMessage["id"]
const turn2 = gate()
const TEXT = ["CH(block-start)", "CH(text-delta)", "CH(block-end)", "CH(finish stop)", "AM"]

describe("7.3: late insertions racing the initial claim", () => {
  it.scoped("7.3: an empty initial entry with a steer made during its pre-step ends completed; the chain continues and the next turn claims the steer", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const pre = yield* PreStep
      yield* pre.register((input, next): Effect.Effect<PreStepDecision, unknown> =>
        input.turn === 1
          ? Effect.as(driver.steer(user("S")), PreStepDecision.enter([]))
          : next()
      )
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect(yield* shape).toEqual([
        "INS(nt,0,[A])", "TS(1)", "CLM(nt,0,1)", "INS(ns,0,[S])", "TE(1,completed)", "TS(2)", "CLM(ns,0,1)",
        "SS(2,1)", "UM(S)", "RH(initial)", ...TEXT, "SE(2,1)", "TE(2,completed)"
      ])
      expect(yield* requests).toHaveLength(1)
    }).pipe(Effect.provide(scenario([ScriptedModel.text("x")]))))

  it.scoped("7.3: an empty initial entry with only an inject made during its pre-step goes idle; the inject waits for the next wake", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const inbox = yield* Inbox
      const pre = yield* PreStep
      yield* pre.register((input, next): Effect.Effect<PreStepDecision, unknown> =>
        input.turn === 1
          ? Effect.as(driver.inject(plugin("I")), PreStepDecision.enter([]))
          : next()
      )
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect(yield* shape).toEqual(["INS(nt,0,[A])", "TS(1)", "CLM(nt,0,1)", "INS(ns,0,[I])", "TE(1,completed)"])
      expect(ids(yield* inbox.nextStep)).toEqual(["I"])
      expect(yield* driver.status).toBe("idle")
      yield* driver.followup(user("B"))
      expect(yield* closeOut).toEqual([])
      expect((yield* shape).slice(5, 10)).toEqual(["INS(nt,0,[B])", "TS(2)", "CLM(ns,0,1)", "CLM(nt,0,1)", "SS(2,1)"])
      expect(yield* texts).toEqual(["I", "B"])
    }).pipe(Effect.provide(scenario([ScriptedModel.text("x")]))))

  it.scoped("7.3/3.10: a failing initial pre-step that queued a follow-up ends error with the listener's own error; the chain continues", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const pre = yield* PreStep
      const live = yield* recordLive
      yield* pre.register((input, next): Effect.Effect<PreStepDecision, unknown> =>
        input.turn === 1
          ? Effect.zipRight(driver.followup(user("B")), Effect.fail({ message: "nope", code: "LISTENER" }))
          : next()
      )
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect(yield* shape).toEqual([
        "INS(nt,0,[A])", "TS(1)", "CLM(nt,0,1)", "INS(nt,0,[B])", "TE(1,error(LISTENER))", "TS(2)", "CLM(nt,0,1)",
        "SS(2,1)", "UM(B)", "RH(initial)", ...TEXT, "SE(2,1)", "TE(2,completed)"
      ])
      const all = yield* live
      expect(all.map(liveNotation)).toEqual([
        "inserted(A)", "status(running)", "claimed(A,1)", "inserted(B)", "error(1,1)", "claimed(B,2)", "status(idle)"
      ])
      const error = all.find((e) => e.type === "agent/error")
      expect(error?.type === "agent/error" ? error.error : undefined).toEqual({ message: "nope", code: "LISTENER" })
    }).pipe(Effect.provide(scenario([ScriptedModel.text("x")]))))
})

describe("K13 / D5: operations from observers, hooks and stream effects", () => {
  it.scoped("K3/K13: a broad cancel from a Driver.events observer of the claim, after it queued Q, loses the batch and cancels Q; no step", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const inbox = yield* Inbox
      const pre = yield* PreStep
      const g = gate()
      yield* pre.register((_, next) => Effect.zipRight(Deferred.await(g), next()))
      yield* Effect.forkScoped(
        Stream.runForEach(driver.events, (e) =>
          e.type === "agent/inbox/claimed" && e.message.id === "A"
            ? Effect.zipRight(
              Effect.zipRight(inbox.append("next-turn", user("Q")), driver.cancel(CancelCause.user)),
              open(g)
            )
            : Effect.void)
      )
      yield* settle
      const live = yield* recordLive
      const status = yield* recordStatus
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect(yield* shape).toEqual(["INS(nt,0,[A])", "TS(1)", "CLM(nt,0,1)", "INS(nt,0,[Q])", "CAN(nt,0,1)", "TE(1,aborted(user))"])
      expect(yield* liveOf(live)).toEqual([
        "inserted(A)", "status(running)", "claimed(A,1)", "inserted(Q)", "discarded(Q)", "status(idle)"
      ])
      expect(yield* status).toEqual(["idle", "running", "idle"])
      expect(yield* inbox.hasPending).toBe(false)
      expect(yield* requests).toHaveLength(0)
    }).pipe(Effect.provide(scenario([ScriptedModel.text("x")]))))

  it.scoped("D5/4.9: an inject from a ToolPost listener precedes the call's own contexts in next-step; both enter the next step in that order", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const hooks = yield* Hooks
      yield* hooks.onToolPost((input, next) => Effect.zipRight(driver.inject(plugin(`I-${input.callId}`)), next()))
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      const s = yield* shape
      const from = s.indexOf("TC(c1)")
      expect(s.slice(from, from + 9)).toEqual([
        "TC(c1)", "INS(ns,0,[I-c1])", "TR(c1)", "INS(ns,1,[X])", "SE(1,1)", "CLM(ns,0,2)", "SS(1,2)", "UM(I-c1)", "UM(X)"
      ])
      expect(s.at(-1)).toBe("TE(1,completed)")
      expect(yield* texts).toEqual(["A", "I-c1", "X"])
    }).pipe(
      Effect.provide(
        scenario([ScriptedModel.response({ toolCalls: [{ id: "c1", name: "ctx", arguments: {} }] }), ScriptedModel.text("done")], {
          tools: [
            Tool.make("ctx", {
              description: "",
              parameters: Schema.Struct({}),
              execute: () => Effect.succeed({ content: "r", additionalContexts: [plugin("X")] })
            })
          ]
        })
      )
    ))

  it.scoped("D5/4.8: a follow-up queued from an onRequestError listener that fails the attempt runs as the next turn of the chain", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const hooks = yield* Hooks
      let once = false
      yield* hooks.onRequestError((_, next) =>
        once ? next() : Effect.zipRight(Effect.sync(() => (once = true)), Effect.zipRight(driver.followup(user("B")), Effect.succeed({ _tag: "Fail" } as const)))
      )
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect(yield* shape).toEqual([
        "INS(nt,0,[A])", "TS(1)", "CLM(nt,0,1)", "SS(1,1)", "UM(A)", "RH(initial)", "CH(finish error)", "INS(nt,0,[B])",
        "SE(1,1)", "TE(1,error(RATE_LIMIT))", "TS(2)", "CLM(nt,0,1)", "SS(2,1)", "UM(B)", ...TEXT, "SE(2,1)", "TE(2,completed)"
      ])
    }).pipe(Effect.provide(scenario([ScriptedModel.fail({ message: "busy", code: "RATE_LIMIT", status: 429 }), ScriptedModel.text("x")]))))

  const steerCell: { effect: Effect.Effect<void, unknown> } = { effect: Effect.void }
  it.scoped("D5/3.3: a steer issued from a model stream effect lands after the chunk already logged and is claimed at the boundary of the same turn", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      steerCell.effect = driver.steer(user("S"))
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect(yield* shape).toEqual([
        "INS(nt,0,[A])", "TS(1)", "CLM(nt,0,1)", "SS(1,1)", "UM(A)", "RH(initial)", "CH(block-start)", "INS(ns,0,[S])",
        "CH(text-delta)", "CH(block-end)", "CH(finish stop)", "AM", "SE(1,1)", "CLM(ns,0,1)", "SS(1,2)", "UM(S)", ...TEXT,
        "SE(1,2)", "TE(1,completed)"
      ])
    }).pipe(
      Effect.provide(scenario([ScriptedModel.text("one", { during: Effect.suspend(() => steerCell.effect) }), ScriptedModel.text("two")]))
    ))

  const cancelCell: { effect: Effect.Effect<void, unknown> } = { effect: Effect.void }
  it.scoped("K5/K13: a cancel issued from a model stream effect before any text is visible: no AM!, SE, TE(aborted)", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      cancelCell.effect = driver.cancel(CancelCause.hook("stream"))
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect(yield* shape).toEqual([
        "INS(nt,0,[A])", "TS(1)", "CLM(nt,0,1)", "SS(1,1)", "UM(A)", "RH(initial)", "CH(block-start)", "SE(1,1)", "TE(1,aborted(hook))"
      ])
    }).pipe(
      Effect.provide(scenario([ScriptedModel.text("one", { deltas: ["a", "b"], during: Effect.suspend(() => cancelCell.effect) })]))
    ))

  it.scoped("K13/4.6: a ToolPre listener that cancels and allows: the call gets TR⊘ (its body never runs); the later call a ⟨TC TR⊘⟩ pair", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const hooks = yield* Hooks
      yield* hooks.onToolPre((_, next) => Effect.zipRight(driver.cancel(CancelCause.user), next()))
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      const s = yield* shape
      expect(s.slice(s.indexOf("AM"))).toEqual(["AM", "TC(c1)", "TR⊘(c1)", "TC(c2)", "TR⊘(c2)", "SE(1,1)", "TE(1,aborted(user))"])
      expect(ran).toBe(0)
    }).pipe(
      Effect.provide(
        scenario([
          ScriptedModel.response({ toolCalls: [{ id: "c1", name: "t", arguments: {} }, { id: "c2", name: "t", arguments: {} }] })
        ], { tools: [counting] })
      )
    ))
})


describe("7.6 / 3.6: latches under cancels and maintenance", () => {
  it.scoped("3.4/7.6: a broad cancel while the aborted turn converges discards a wake latched meanwhile: no replay; the first cause stays", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const inbox = yield* Inbox
      yield* driver.followup(user("A"))
      yield* until(Effect.map(shape, (s) => s.includes("CH(text-delta)")))
      yield* driver.cancel(CancelCause.user, { keepInbox: true })
      yield* driver.followup(user("B"))
      yield* driver.cancel(CancelCause.parent)
      expect(yield* driver.status).toBe("running")
      yield* open(hold)
      expect(yield* closeOut).toEqual([])
      const s = yield* shape
      expect(s.slice(s.indexOf("CH(text-delta)"))).toEqual([
        "CH(text-delta)", "INS(nt,0,[B])", "CAN(nt,0,1)", "AM!", "SE(1,1)", "TE(1,aborted(user))"
      ])
      expect(yield* inbox.hasPending).toBe(false)
      expect(yield* driver.status).toBe("idle")
      expect(yield* requests).toHaveLength(1)
    }).pipe(Effect.provide(scenario([ScriptedModel.hang({ text: "partial" }, { onInterrupt: Deferred.await(hold) })]))))

  it.scoped("3.6/7.6: a broad cancel of a task that masks interruption clears the earlier latch; a wake after it latches and replays; the value is returned", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const g = gate()
      const started = gate()
      const task = yield* Effect.fork(driver.runMaintenance(Effect.uninterruptible(Effect.zipRight(open(started), Deferred.await(g))).pipe(Effect.as(42))))
      yield* Deferred.await(started)
      yield* driver.followup(user("A"))
      yield* driver.cancel(CancelCause.user)
      yield* driver.followup(user("B"))
      expect(yield* shape).toEqual(["INS(nt,0,[A])", "CAN(nt,0,1)", "INS(nt,0,[B])"])
      yield* open(g)
      expect(yield* Fiber.join(task)).toBe(42)
      expect(yield* closeOut).toEqual([])
      expect(yield* shape).toEqual([
        "INS(nt,0,[A])", "CAN(nt,0,1)", "INS(nt,0,[B])", "TS(1)", "CLM(nt,0,1)", "SS(1,1)", "UM(B)", "RH(initial)", ...TEXT,
        "SE(1,1)", "TE(1,completed)"
      ])
    }).pipe(Effect.provide(scenario([ScriptedModel.text("x")]))))

  it.scoped("7.6/3.10: a maintenance replay claims the oldest next-turn item (quiet-queued before) first; the chain continues with the latched wake", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const g = gate()
      const started = gate()
      yield* driver.send(user("Q"), "next-turn", false)
      const live = yield* recordLive
      const task = yield* Effect.fork(driver.runMaintenance(Effect.zipRight(open(started), Deferred.await(g))))
      yield* Deferred.await(started)
      yield* driver.followup(user("A"))
      yield* open(g)
      yield* Fiber.join(task)
      expect(yield* closeOut).toEqual([])
      expect(yield* shape).toEqual([
        "INS(nt,0,[Q])", "INS(nt,1,[A])", "TS(1)", "CLM(nt,0,1)", "SS(1,1)", "UM(Q)", "RH(initial)", ...TEXT, "SE(1,1)",
        "TE(1,completed)", "TS(2)", "CLM(nt,0,1)", "SS(2,1)", "UM(A)", ...TEXT, "SE(2,1)", "TE(2,completed)"
      ])
      expect(yield* liveOf(live)).toEqual(["inserted(A)", "status(running)", "claimed(Q,1)", "claimed(A,2)", "status(idle)"])
    }).pipe(Effect.provide(scenario([ScriptedModel.text("one"), ScriptedModel.text("two")]))))

  it.scoped("3.6/D5: runMaintenance called from a Driver.events observer of status idle runs; a follow-up from its task latches and replays", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const result = yield* Deferred.make<number, unknown>()
      let fired = false
      yield* Effect.forkScoped(
        Stream.runForEach(driver.events, (e) =>
          e.type === "agent/status" && e.status === "idle" && !fired
            ? Effect.zipRight(
              Effect.sync(() => (fired = true)),
              Effect.forkScoped(
                Deferred.complete(result, driver.runMaintenance(Effect.as(driver.followup(user("B")), 7)))
              )
            )
            : Effect.void)
      )
      yield* settle
      yield* driver.followup(user("A"))
      expect(yield* Deferred.await(result)).toBe(7)
      expect(yield* closeOut).toEqual([])
      expect(yield* shape).toEqual([
        "INS(nt,0,[A])", "TS(1)", "CLM(nt,0,1)", "SS(1,1)", "UM(A)", "RH(initial)", ...TEXT, "SE(1,1)", "TE(1,completed)",
        "INS(nt,0,[B])", "TS(2)", "CLM(nt,0,1)", "SS(2,1)", "UM(B)", ...TEXT, "SE(2,1)", "TE(2,completed)"
      ])
    }).pipe(Effect.provide(scenario([ScriptedModel.text("one"), ScriptedModel.text("two")]))))

  it.scoped("3.6: a task that cancels its own maintenance and then fails gives MaintenanceAborted with that cause; a wake it made after stays latched and replays", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const exit = yield* Effect.exit(
        driver.runMaintenance(
          Effect.zipRight(
            driver.cancel(CancelCause.hook("self"), { keepInbox: true }),
            Effect.zipRight(driver.steer(user("S")), Effect.fail("task failed"))
          )
        )
      )
      expect(exit).toEqual(Exit.fail(new MaintenanceAborted({ cause: { kind: "hook", reason: "self" } })))
      expect(yield* closeOut).toEqual([])
      // re-routed: a waking delivery cannot join a cancelled task (3.3 step 2)
      expect((yield* shape).slice(0, 5)).toEqual(["INS(nt,0,[S])", "TS(1)", "CLM(nt,0,1)", "SS(1,1)", "UM(S)"])
    }).pipe(Effect.provide(scenario([ScriptedModel.text("x")]))))
})


describe("3.5: whenIdle", () => {
  it.scoped("3.5: whenIdle awaited from a fiber forked by a maintenance task dies (the activity mark is inherited by forks)", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const exit = yield* Effect.exit(driver.runMaintenance(Effect.flatMap(Effect.fork(driver.whenIdle), Fiber.join)))
      expect(Exit.isFailure(exit) && exit.cause._tag === "Die").toBe(true)
      expect(yield* driver.status).toBe("idle")
      yield* driver.whenIdle
    }).pipe(Effect.provide(scenario([]))))

  it.scoped("3.5: whenIdle issued during turn 1 with a follow-up queued resolves only after the continued turn ends", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      yield* driver.followup(user("B"))
      const waiter = yield* Effect.fork(driver.whenIdle)
      yield* until(Effect.map(shape, (s) => s.includes("TS(2)")))
      yield* settle
      expect(waiter.unsafePoll()).toBeNull()
      yield* open(turn2)
      yield* Fiber.join(waiter)
      const s = yield* shape
      expect(s.at(-1)).toBe("TE(2,completed)")
      expect(yield* driver.status).toBe("idle")
    }).pipe(Effect.provide(scenario([ScriptedModel.text("one"), ScriptedModel.text("two", { awaitBefore: Deferred.await(turn2) })]))))
})


describe("3.1 / 3.5 / 3.8 / 3.10: callers, waiters and observers", () => {
  it.scoped("3.10: a subscriber that dies on its first notification blocks neither the loop nor another subscriber", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const dead = yield* Effect.forkScoped(Stream.runForEach(driver.events, () => Effect.dieMessage("observer failed")))
      const unread = yield* driver.subscribe
      const live = yield* recordLive
      yield* settle
      yield* driver.followup(user("A"))
      yield* driver.followup(user("B"))
      expect(yield* closeOut).toEqual([])
      expect(Exit.isFailure(yield* Fiber.await(dead))).toBe(true)
      expect(yield* liveOf(live)).toEqual([
        "inserted(A)", "status(running)", "claimed(A,1)", "inserted(B)", "claimed(B,2)", "status(idle)"
      ])
      expect((yield* unread.takeAll).length).toBe(6)
      expect(yield* texts).toEqual(["A", "B"])
    }).pipe(Effect.provide(scenario([ScriptedModel.text("one"), ScriptedModel.text("two")]))))

  it.scoped("3.5/3.6: whenIdle issued during maintenance follows the latched replay; statusChanges shows one running interval", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const g = gate()
      const started = gate()
      const status = yield* recordStatus
      const task = yield* Effect.fork(driver.runMaintenance(Effect.zipRight(open(started), Deferred.await(g))))
      yield* Deferred.await(started)
      const waiter = yield* Effect.fork(driver.whenIdle)
      yield* driver.followup(user("A"))
      yield* settle
      expect(waiter.unsafePoll()).toBeNull()
      expect(yield* driver.status).toBe("idle")
      yield* open(g)
      yield* Fiber.join(task)
      yield* until(Effect.map(shape, (s) => s.includes("TS(1)")))
      yield* settle
      expect(waiter.unsafePoll()).toBeNull()
      yield* open(turn1Hold)
      yield* Fiber.join(waiter)
      expect((yield* shape).at(-1)).toBe("TE(1,completed)")
      expect(yield* status).toEqual(["idle", "running", "idle"])
    }).pipe(Effect.provide(scenario([ScriptedModel.text("one", { awaitBefore: Deferred.await(turn1Hold) })]))))

  it.scoped("3.1: a followup whose caller is interrupted while its durability is pending still runs its turn", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const control = yield* MemoryStoreControl
      yield* control.hold
      const caller = yield* Effect.fork(driver.followup(user("A")))
      yield* until(Effect.map(shape, (s) => s.includes("TS(1)")))
      yield* settle
      expect(caller.unsafePoll()).toBeNull()
      yield* Fiber.interrupt(caller)
      yield* control.release
      expect(yield* closeOut).toEqual([])
      expect(yield* shape).toEqual([
        "INS(nt,0,[A])", "TS(1)", "CLM(nt,0,1)", "SS(1,1)", "UM(A)", "RH(initial)", ...TEXT, "SE(1,1)", "TE(1,completed)"
      ])
    }).pipe(Effect.provide(scenario([ScriptedModel.text("x")]))))

  it.scoped("3.8/7.6: of two wakes latched during an aborted turn, removing one still replays the other at convergence", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const inbox = yield* Inbox
      yield* driver.followup(user("A"))
      yield* until(Effect.map(shape, (s) => s.includes("RH(initial)")))
      yield* driver.cancel(CancelCause.user, { keepInbox: true })
      yield* driver.followup(user("B"))
      yield* driver.steer(user("C"))
      expect(yield* inbox.remove(asIdOf("B"))).toBe(true)
      yield* open(hold2)
      expect(yield* closeOut).toEqual([])
      const s = yield* shape
      expect(s.slice(s.indexOf("RH(initial)") + 1, s.indexOf("RH(initial)") + 11)).toEqual([
        "INS(nt,0,[B])", "INS(nt,1,[C])", "CAN(nt,0,1)", "SE(1,1)", "TE(1,aborted(user))", "TS(2)", "CLM(nt,0,1)",
        "SS(2,1)", "UM(C)", "CH(block-start)"
      ])
      expect(s.at(-1)).toBe("TE(2,completed)")
    }).pipe(Effect.provide(scenario([ScriptedModel.hang({}, { onInterrupt: Deferred.await(hold2) }), ScriptedModel.text("x")]))))
})

describe("3.10 / 3.5 / 7.1: delivery timing, whenIdle in the stream, concurrent cancels", () => {
  it.scoped("3.10: a wake's notifications reach a subscriber before durability, while the followup still awaits its acknowledgement", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const control = yield* MemoryStoreControl
      const queue = yield* driver.subscribe
      yield* control.hold
      const caller = yield* Effect.fork(driver.followup(user("A")))
      const received: Array<string> = []
      while (received.length < 3) received.push(liveNotation(yield* queue.take))
      expect(received).toEqual(["inserted(A)", "status(running)", "claimed(A,1)"])
      expect(caller.unsafePoll()).toBeNull()
      yield* control.release
      yield* Fiber.join(caller)
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario([ScriptedModel.text("x")]))))

  const idleCell: { effect: Effect.Effect<void, unknown> } = { effect: Effect.void }
  it.scoped("3.5: whenIdle awaited from a model stream effect of the same driver dies instead of hanging; the turn ends error(UNKNOWN)", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      idleCell.effect = driver.whenIdle
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect(yield* shape).toEqual([
        "INS(nt,0,[A])", "TS(1)", "CLM(nt,0,1)", "SS(1,1)", "UM(A)", "RH(initial)", "CH(finish error)", "SE(1,1)", "TE(1,error(UNKNOWN))"
      ])
    }).pipe(Effect.provide(scenario([ScriptedModel.text("x", { awaitBefore: Effect.suspend(() => idleCell.effect) })]))))

  it.scoped("7.1: concurrent cancels from two fibers while streaming: one cause is recorded, the broad one still discards the inbox", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const inbox = yield* Inbox
      yield* driver.followup(user("A"))
      yield* until(Effect.map(shape, (s) => s.includes("RH(initial)")))
      yield* driver.inject(plugin("I"))
      yield* Effect.all([driver.cancel(CancelCause.parent, { keepInbox: true }), driver.cancel(CancelCause.user)], { concurrency: "unbounded" })
      expect(yield* closeOut).toEqual([])
      const s = yield* shape
      expect(s.slice(s.indexOf("RH(initial)"))).toEqual(["RH(initial)", "INS(ns,0,[I])", "CAN(ns,0,1)", "SE(1,1)", "TE(1,aborted(parent))"])
      expect(yield* inbox.hasPending).toBe(false)
    }).pipe(Effect.provide(scenario([ScriptedModel.hang()]))))
})
