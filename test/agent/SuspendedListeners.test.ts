/**
 * The loop while listeners, hooks and tool bodies suspend (SPEC 3.10, 4.3-4.8, 7.3): stream tails,
 * retries and cancel windows, boundaries, a cause recorded by a hook, maintenance windows,
 * notification timing and request derivation after suspension.
 */
import { describe, expect, it } from "@effect/vitest"
import { Chunk, Context, Deferred, Effect, Fiber, Option, Queue, TestClock } from "effect"
import { CancelCause, Driver, Hooks, Inbox, PreStep, PreStepDecision, RequestErrorAction, ScriptedModel, SessionLog, Tool, userMessage } from "../../src/index.js"
import { agentTest, closeOut, events, from, gate, liveNotation, open, plugin, recordLive, recordStatus, requests, scenario, settle, shape, shapeHas, toolLine, until, untilEvent, user } from "./harness.js"
import { calls, empty, holder } from "./toolFixtures.js"

type DriverService = Context.Tag.Service<typeof Driver>

// Keep `until` referenced for future probes.
void until

describe("4.5 stream tail, retries and cancel windows", () => {
  it.scoped("4.5 Q6: tools start only after the stream was pulled to its end (afterFinish suspended)", () => {
    const ga = gate()
    const t = Tool.make("t", { description: "t", parameters: empty, execute: () => Effect.succeed("ok") })
    return Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "assistant/message")
      yield* settle
      expect(yield* shapeHas("TC(c1)")).toBe(false)
      yield* open(ga)
      expect(yield* closeOut).toEqual([])
      expect(yield* toolLine).toBe("TC(c1) TR(c1)")
    }).pipe(Effect.provide(scenario([
      ScriptedModel.response({ toolCalls: [{ id: "c1", name: "t", arguments: {} }], afterFinish: Deferred.await(ga) }),
      ScriptedModel.text("done")
    ], { tools: [t] })))
  })

  it.scoped("4.5 Q8 / K7: a cancel while the stream tail is suspended leaves the AM standing; calls get TC TR⊘ pairs", () => {
    const ga = gate()
    const entered = gate()
    let ran = 0
    const t = Tool.make("t", { description: "t", parameters: empty, execute: () => Effect.sync(() => ran++).pipe(Effect.as("ok")) })
    return Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      yield* Deferred.await(entered)
      yield* driver.cancel(CancelCause.user)
      expect(yield* closeOut).toEqual([])
      const s = yield* shape
      expect(s.slice(s.indexOf("CH(finish stop)")).join(" ")).toBe("CH(finish stop) AM TC(c1) TR⊘(c1) SE(1,1) TE(1,aborted(user))")
      expect(ran).toBe(0)
    }).pipe(Effect.provide(scenario([
      ScriptedModel.response({ toolCalls: [{ id: "c1", name: "t", arguments: {} }], afterFinish: Effect.zipRight(open(entered), Deferred.await(ga)) }),
      ScriptedModel.text("done")
    ], { tools: [t] })))
  })

  it.scoped("4.7 / K9a: a cause recorded in the stream tail of a text answer: no turn-stopping listener runs; ⟨SE⟩ ⟨TE(aborted)⟩", () => {
    const h = holder()
    return Effect.gen(function*() {
      const driver = yield* Driver
      const hooks = yield* Hooks
      h.d = driver
      const calls: Array<number> = []
      yield* hooks.onTurnStopping((i) => Effect.sync(() => calls.push(i.step)))
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect(calls).toEqual([])
      const s = yield* shape
      expect(s.slice(s.indexOf("CH(finish stop)")).join(" ")).toBe("CH(finish stop) AM SE(1,1) TE(1,aborted(user))")
    }).pipe(Effect.provide(scenario([
      ScriptedModel.text("one", { afterFinish: Effect.suspend(() => h.d!.cancel(CancelCause.user)) }),
      ScriptedModel.text("two")
    ])))
  })

  it.scoped("4.5 / K6: a cancel during the backoff sleep keeps RT and makes no further attempt", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "llm/retry")
      yield* driver.cancel(CancelCause.user)
      expect(yield* closeOut).toEqual([])
      expect(yield* from("RT(1)")).toBe("RT(1) SE(1,1) TE(1,aborted(user))")
      expect((yield* requests).length).toBe(1)
    }).pipe(Effect.provide(scenario([
      ScriptedModel.fail({ code: "RATE_LIMIT", status: 429, message: "slow" }),
      ScriptedModel.text("ok")
    ]))))

  it.scoped("4.5 / K6: a Retry obtained after a cause was recorded is ignored (uninterruptible request-error listener): no RT, no second request", () => {
    const g = gate()
    const entered = gate()
    return Effect.gen(function*() {
      const driver = yield* Driver
      const hooks = yield* Hooks
      yield* hooks.onRequestError(() =>
        Effect.uninterruptible(Effect.zipRight(open(entered), Effect.as(Deferred.await(g), RequestErrorAction.retry(0))))
      )
      yield* driver.followup(user("A"))
      yield* Deferred.await(entered)
      yield* driver.cancel(CancelCause.user)
      yield* open(g)
      expect(yield* closeOut).toEqual([])
      expect(yield* from("CH(finish error)")).toBe("SE(1,1) TE(1,aborted(user))")
      expect((yield* shape).some((x) => x.startsWith("RT"))).toBe(false)
      expect((yield* requests).length).toBe(1)
    }).pipe(Effect.provide(scenario([
      ScriptedModel.fail({ code: "RATE_LIMIT", status: 429, message: "slow" }),
      ScriptedModel.text("ok")
    ])))
  })
})

describe("4.7 / 4.8 / 7.3 boundaries while listeners suspend", () => {
  it.scoped("4.7: an inject from outside while the turn-stopping listener is suspended is claimed by TX-BOUNDARY (re-read): one turn, step 2", () => {
    const gs = gate()
    const entered = gate()
    return Effect.gen(function*() {
      const driver = yield* Driver
      const hooks = yield* Hooks
      let n = 0
      yield* hooks.onTurnStopping(() => (n++ === 0 ? Effect.zipRight(open(entered), Deferred.await(gs)) : Effect.void))
      yield* driver.followup(user("A"))
      yield* Deferred.await(entered)
      yield* driver.inject(plugin("C"))
      yield* open(gs)
      expect(yield* closeOut).toEqual([])
      expect(yield* from("SE(1,1)")).toBe("SE(1,1) INS(ns,0,[C]) CLM(ns,0,1) SS(1,2) UM(C) SE(1,2) TE(1,completed)")
      expect((yield* requests).length).toBe(2)
    }).pipe(Effect.provide(scenario([ScriptedModel.text("one"), ScriptedModel.text("two")])))
  })

  it.scoped("4.8: a follow-up while the turn-stopping listener is suspended continues the chain in the TX-CLOSE transaction", () => {
    const gs = gate()
    const entered = gate()
    return Effect.gen(function*() {
      const driver = yield* Driver
      const hooks = yield* Hooks
      const status = yield* recordStatus
      yield* hooks.onTurnStopping((i) => (i.turn === 1 ? Effect.zipRight(open(entered), Deferred.await(gs)) : Effect.void))
      yield* driver.followup(user("A"))
      yield* Deferred.await(entered)
      yield* driver.followup(user("B"))
      yield* open(gs)
      expect(yield* closeOut).toEqual([])
      expect(yield* from("SE(1,1)")).toBe("SE(1,1) INS(nt,0,[B]) TE(1,completed) TS(2) CLM(nt,0,1) SS(2,1) UM(B) SE(2,1) TE(2,completed)")
      expect(yield* status).toEqual(["idle", "running", "idle"])
    }).pipe(Effect.provide(scenario([ScriptedModel.text("one"), ScriptedModel.text("two")])))
  })

  it.scoped("4.7: a steer during the stream makes next-step non-empty at the step's end: turn-stopping listeners do not run; the boundary claims it", () => {
    const h = holder()
    return Effect.gen(function*() {
      const driver = yield* Driver
      const hooks = yield* Hooks
      h.d = driver
      const calls: Array<string> = []
      yield* hooks.onTurnStopping((i) => Effect.sync(() => calls.push(`${i.turn}.${i.step}`)))
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect(calls).toEqual(["1.2"])
      expect(yield* from("SE(1,1)")).toBe("SE(1,1) CLM(ns,0,1) SS(1,2) UM(S) SE(1,2) TE(1,completed)")
    }).pipe(Effect.provide(scenario([
      ScriptedModel.text("one", { during: Effect.suspend(() => h.d!.steer(user("S"))) }),
      ScriptedModel.text("two")
    ])))
  })

  it.scoped("7.3: a steer during a later pre-step that enters [] after a natural ending continues the chain: ⟨TE(1,completed) TS(2) CLM(ns)⟩", () => {
    const gp = gate()
    const entered = gate()
    return Effect.gen(function*() {
      const driver = yield* Driver
      const hooks = yield* Hooks
      const pre = yield* PreStep
      let n = 0
      yield* hooks.onTurnStopping(() => (n++ === 0 ? driver.inject(plugin("C")) : Effect.void))
      yield* pre.register((input, next) =>
        input.turn === 1 && input.boundary === "later"
          ? Effect.zipRight(Effect.zipRight(open(entered), Deferred.await(gp)), Effect.succeed(PreStepDecision.enter([])))
          : next()
      )
      yield* driver.followup(user("A"))
      yield* Deferred.await(entered)
      yield* driver.steer(user("S"))
      yield* open(gp)
      expect(yield* closeOut).toEqual([])
      expect(yield* from("SE(1,1)")).toBe("SE(1,1) INS(ns,0,[C]) CLM(ns,0,1) INS(ns,0,[S]) TE(1,completed) TS(2) CLM(ns,0,1) SS(2,1) UM(S) SE(2,1) TE(2,completed)")
      expect((yield* requests).length).toBe(2)
    }).pipe(Effect.provide(scenario([ScriptedModel.text("one"), ScriptedModel.text("two")])))
  })

  it.scoped("7.3: an inject (not a steer) during that pre-step waits: the turn ends completed, no turn 2, the inject stays pending", () => {
    const gp = gate()
    const entered = gate()
    return Effect.gen(function*() {
      const driver = yield* Driver
      const hooks = yield* Hooks
      const pre = yield* PreStep
      const inbox = yield* Inbox
      let n = 0
      yield* hooks.onTurnStopping(() => (n++ === 0 ? driver.inject(plugin("C")) : Effect.void))
      yield* pre.register((input, next) =>
        input.turn === 1 && input.boundary === "later"
          ? Effect.zipRight(Effect.zipRight(open(entered), Deferred.await(gp)), Effect.succeed(PreStepDecision.enter([])))
          : next()
      )
      yield* driver.followup(user("A"))
      yield* Deferred.await(entered)
      yield* driver.inject(plugin("N"))
      yield* open(gp)
      expect(yield* closeOut).toEqual([])
      expect(yield* from("SE(1,1)")).toBe("SE(1,1) INS(ns,0,[C]) CLM(ns,0,1) INS(ns,0,[N]) TE(1,completed)")
      expect((yield* inbox.nextStep).map((m) => m.id)).toEqual(["N"])
      expect((yield* requests).length).toBe(1)
    }).pipe(Effect.provide(scenario([ScriptedModel.text("one"), ScriptedModel.text("two")])))
  })

  it.scoped("3.10 / 4.2: a pre-step failure while a follow-up is queued: agent/error is published before the claimed/continuation of TX-CLOSE", () => {
    const g = gate()
    return Effect.gen(function*() {
      const driver = yield* Driver
      const pre = yield* PreStep
      const live = yield* recordLive
      yield* pre.register((input, next) =>
        input.turn === 1 ? Effect.zipRight(Deferred.await(g), Effect.fail(new Error("boom"))) : next()
      )
      yield* driver.followup(user("A"))
      yield* driver.followup(user("B"))
      yield* open(g)
      expect(yield* closeOut).toEqual([])
      const l = (yield* live).map((e) => e.type === "agent/error" ? `error(${e.turn})` : e.type === "agent/inbox/claimed" ? `claimed(${e.message.id})` : e.type === "agent/status" ? e.status : "ins")
      expect(l.join(" ")).toBe("ins running claimed(A) ins error(1) claimed(B) idle")
      expect(yield* from("INS(nt,0,[B])")).toBe("INS(nt,0,[B]) TE(1,error(UNKNOWN)) TS(2) CLM(nt,0,1) SS(2,1) UM(B) SE(2,1) TE(2,completed)")
    }).pipe(Effect.provide(scenario([ScriptedModel.text("two")])))
  })
})

describe("a cause recorded by a hook that masks interruption: every later loop transaction reads it first (4.3)", () => {
  it.scoped("K9a: a keepInbox cancel while a turn-stopping listener (that injected C) is suspended: no claim, ⟨TE(aborted)⟩, C stays pending", () => {
    const entered = gate()
    return Effect.gen(function*() {
      const driver = yield* Driver
      const hooks = yield* Hooks
      const inbox = yield* Inbox
      yield* hooks.onTurnStopping(() => Effect.zipRight(Effect.zipRight(driver.inject(plugin("C")), open(entered)), Effect.never))
      yield* driver.followup(user("A"))
      yield* Deferred.await(entered)
      yield* driver.cancel(CancelCause.user, { keepInbox: true })
      expect(yield* closeOut).toEqual([])
      expect(yield* from("SE(1,1)")).toBe("SE(1,1) INS(ns,0,[C]) TE(1,aborted(user))")
      expect((yield* inbox.nextStep).map((m) => m.id)).toEqual(["C"])
    }).pipe(Effect.provide(scenario([ScriptedModel.text("one"), ScriptedModel.text("two")])))
  })

  agentTest("4.3: with a cause recorded, turn-stopping listeners are not started: the first (uninterruptible) records a keepInbox cancel, the second never runs", scenario([ScriptedModel.text("one"), ScriptedModel.text("two")]), function*({ driver, hooks }) {
    const second: Array<number> = []
    yield* hooks.onTurnStopping(() => Effect.uninterruptible(driver.cancel(CancelCause.user, { keepInbox: true })))
    yield* hooks.onTurnStopping((i) => Effect.sync(() => second.push(i.step)))
    yield* driver.followup(user("A"))
    expect(yield* closeOut).toEqual([])
    expect(second).toEqual([])
    expect(yield* from("SE(1,1)")).toBe("SE(1,1) TE(1,aborted(user))")
  })

  agentTest("4.3 K3a: a pre-step listener (uninterruptible) that records a cancel then enters [A, X]: TX-STEP appends nothing; X stays unknown", scenario([ScriptedModel.text("one")]), function*({ driver, preStep: pre, inbox }) {
    yield* pre.register((input) =>
      Effect.uninterruptible(Effect.as(driver.cancel(CancelCause.user, { keepInbox: true }), PreStepDecision.enter([...input.messages, plugin("X")])))
    )
    yield* driver.followup(user("A"))
    expect(yield* closeOut).toEqual([])
    expect(yield* from("TS(1)")).toBe("TS(1) CLM(nt,0,1) TE(1,aborted(user))")
    expect(Option.isNone(yield* inbox.idState(plugin("X").id))).toBe(true)
    expect((yield* requests).length).toBe(0)
  })

  it.scoped("4.6 START 6: a ToolPre (uninterruptible) that records a cancel and allows: ABORTED_BEFORE_DISPATCH, body never runs; the later call gets a pair", () => {
    let ran = 0
    const t = Tool.make("t", { description: "t", parameters: empty, execute: () => Effect.sync(() => ran++).pipe(Effect.as("ok")) })
    return Effect.gen(function*() {
      const driver = yield* Driver
      const hooks = yield* Hooks
      yield* hooks.onToolPre((info, next) =>
        info.callId === "c1" ? Effect.uninterruptible(Effect.zipRight(driver.cancel(CancelCause.user), next())) : next()
      )
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect(yield* from("TC(c1)")).toBe("TC(c1) TR⊘(c1) TC(c2) TR⊘(c2) SE(1,1) TE(1,aborted(user))")
      expect(ran).toBe(0)
    }).pipe(Effect.provide(scenario([calls(["c1", "t"], ["c2", "t"]), ScriptedModel.text("done")], { tools: [t] })))
  })

  agentTest("4.3 / K4: an onRequest listener (uninterruptible) that records a cancel: no request/header (not a closing record), no request; ⟨SE⟩ ⟨TE(aborted)⟩", scenario([ScriptedModel.text("one")]), function*({ driver, hooks }) {
    yield* hooks.onRequest((_i, next) => Effect.uninterruptible(Effect.zipRight(driver.cancel(CancelCause.user), next())))
    yield* driver.followup(user("A"))
    expect(yield* closeOut).toEqual([])
    expect((yield* requests).length).toBe(0)
    expect(yield* from("SS(1,1)")).toBe("SS(1,1) UM(A) SE(1,1) TE(1,aborted(user))")
    expect((yield* shape).some((x) => x.startsWith("RH"))).toBe(false)
  })
})

describe("inputs from turn-stopping listeners and tool bodies", () => {
  agentTest("4.7 / 4.8: a follow-up from a turn-stopping listener: next-step stays empty, the turn closes and the chain continues in that transaction", scenario([ScriptedModel.text("one"), ScriptedModel.text("two")]), function*({ driver, hooks }) {
    yield* hooks.onTurnStopping((i) => (i.turn === 1 ? driver.followup(user("B")) : Effect.void))
    yield* driver.followup(user("A"))
    expect(yield* closeOut).toEqual([])
    expect(yield* from("SE(1,1)")).toBe("SE(1,1) INS(nt,0,[B]) TE(1,completed) TS(2) CLM(nt,0,1) SS(2,1) UM(B) SE(2,1) TE(2,completed)")
  })

  agentTest("4.7 / 3.2: a steer from a turn-stopping listener joins the turn (step 2); its claim empties wakingSteers, so no second turn follows", scenario([ScriptedModel.text("one"), ScriptedModel.text("two"), ScriptedModel.text("three")]), function*({ driver, hooks }) {
    let n = 0
    yield* hooks.onTurnStopping(() => (n++ === 0 ? driver.steer(user("S")) : Effect.void))
    yield* driver.followup(user("A"))
    expect(yield* closeOut).toEqual([])
    expect(yield* from("SE(1,1)")).toBe("SE(1,1) INS(ns,0,[S]) CLM(ns,0,1) SS(1,2) UM(S) SE(1,2) TE(1,completed)")
    expect((yield* requests).length).toBe(2)
  })

  it.scoped("4.6: a concluding tool whose body injects: the turn still takes another step because next-step is non-empty", () => {
    const h = holder()
    const fin = Tool.make("fin", {
      description: "fin", parameters: empty,
      execute: () => Effect.as(Effect.suspend(() => h.d!.inject(plugin("C"))), { content: "ok", concludesTurn: true })
    })
    return Effect.gen(function*() {
      const driver = yield* Driver
      h.d = driver
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect(yield* from("TC(c1)")).toBe("TC(c1) INS(ns,0,[C]) TR(c1) SE(1,1) CLM(ns,0,1) SS(1,2) UM(C) SE(1,2) TE(1,completed)")
    }).pipe(Effect.provide(scenario([calls(["c1", "fin"]), ScriptedModel.text("two")], { tools: [fin] })))
  })
})

describe("3.10 case 2 and maintenance windows", () => {
  it.scoped("3.10 case 2: a ToolPost defect after the cause it records: turn ends aborted(user), exactly one live agent/error", () => {
    const t = Tool.make("t", { description: "t", parameters: empty, execute: () => Effect.succeed("ok") })
    return Effect.gen(function*() {
      const driver = yield* Driver
      const hooks = yield* Hooks
      const live = yield* recordLive
      yield* hooks.onToolPost(() => Effect.uninterruptible(Effect.zipRight(driver.cancel(CancelCause.user), Effect.dieMessage("post died"))))
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect((yield* shape).filter((x) => x.startsWith("TE")).join(" ")).toBe("TE(1,aborted(user))")
      expect((yield* live).filter((e) => e.type === "agent/error").length).toBe(1)
    }).pipe(Effect.provide(scenario([calls(["c1", "t"]), ScriptedModel.text("two")], { tools: [t] })))
  })

  agentTest("3.10 case 2: a pre-step defect after the cause it records publishes one agent/error; a typed failure publishes none", scenario([]), function*({ driver, preStep: pre }) {
    const live = yield* recordLive
    yield* pre.register((input) =>
      Effect.uninterruptible(Effect.zipRight(
        driver.cancel(CancelCause.user),
        input.turn === 1 ? Effect.dieMessage("pre died") : Effect.fail(new Error("pre failed"))
      ))
    )
    yield* driver.followup(user("A"))
    expect(yield* closeOut).toEqual([])
    yield* driver.followup(user("B"))
    expect(yield* closeOut).toEqual([])
    expect((yield* shape).filter((x) => x.startsWith("TE")).join(" ")).toBe("TE(1,aborted(user)) TE(2,aborted(user))")
    expect((yield* live).filter((e) => e.type === "agent/error").map((e) => (e as any).turn)).toEqual([1])
  })

  agentTest("3.6: a keepInbox cancel of a maintenance task keeps the wake latched before it: the task exit opens turn 1", scenario([ScriptedModel.text("w")]), function*({ driver }) {
    const fiber = yield* Effect.fork(driver.runMaintenance(Effect.never))
    yield* settle
    yield* driver.followup(user("W"))
    yield* driver.cancel(CancelCause.user, { keepInbox: true })
    const exit = yield* Fiber.await(fiber)
    expect(exit._tag).toBe("Failure")
    expect(yield* closeOut).toEqual([])
    expect((yield* shape).join(" ")).toBe("INS(nt,0,[W]) TS(1) CLM(nt,0,1) SS(1,1) UM(W) RH(initial) CH(block-start) CH(text-delta) CH(block-end) CH(finish stop) AM SE(1,1) TE(1,completed)")
  })

  it.scoped("3.3 / 3.6: a steer after a maintenance task was cancelled (task masks interruption) is re-routed to next-turn and latched; the task exit runs it", () => {
    const g = gate()
    return Effect.gen(function*() {
      const driver = yield* Driver
      const fiber = yield* Effect.fork(driver.runMaintenance(Effect.uninterruptible(Effect.as(Deferred.await(g), 42))))
      yield* settle
      yield* driver.cancel(CancelCause.user, { keepInbox: true })
      yield* driver.steer(user("S"))
      yield* open(g)
      const value = yield* Fiber.join(fiber)
      expect(value).toBe(42)
      expect(yield* closeOut).toEqual([])
      expect((yield* shape).slice(0, 5).join(" ")).toBe("INS(nt,0,[S]) TS(1) CLM(nt,0,1) SS(1,1) UM(S)")
    }).pipe(Effect.provide(scenario([ScriptedModel.text("s")])))
  })
})

describe("3.10 notification timing and 4.5 request derivation after suspension", () => {
  agentTest("3.10: notifications are delivered before the operation's Effect completes (followup, inject, cancel)", scenario([]), function*({ driver, preStep: pre }) {
    const q = yield* driver.subscribe
    yield* pre.register(() => Effect.never)
    const take = Effect.map(Queue.takeAll(q), (c) => Chunk.toReadonlyArray(c).map(liveNotation).join(" "))
    yield* driver.followup(user("A"))
    expect(yield* take).toBe("inserted(A) status(running) claimed(A,1)")
    yield* driver.inject(plugin("C"))
    expect(yield* take).toBe("inserted(C)")
    yield* driver.cancel(CancelCause.user)
    expect(yield* take).toBe("discarded(C)")
  })

  it.scoped("3.10 / D5: an inject from a tool body has published `inserted` when it returns inside the body", () => {
    const seen: Array<string> = []
    const h = { d: undefined as DriverService | undefined, q: undefined as Queue.Dequeue<any> | undefined }
    const t = Tool.make("t", {
      description: "t", parameters: empty,
      execute: () =>
        Effect.gen(function*() {
          yield* h.d!.inject(plugin("C"))
          seen.push(...Chunk.toReadonlyArray(yield* Queue.takeAll(h.q!)).map(liveNotation))
          return "ok"
        })
    })
    return Effect.gen(function*() {
      const driver = yield* Driver
      h.d = driver
      h.q = yield* driver.subscribe
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect(seen.join(" ")).toBe("inserted(A) status(running) claimed(A,1) inserted(C)")
    }).pipe(Effect.provide(scenario([calls(["c1", "t"]), ScriptedModel.text("d")], { tools: [t] })))
  })

  it.scoped("4.3: a cause recorded by a stream effect that masks interruption: no further chunk, no finish, no AM; ⟨SE⟩ ⟨TE(aborted)⟩", () => {
    const h = holder()
    return Effect.gen(function*() {
      const driver = yield* Driver
      h.d = driver
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect(yield* from("SS(1,1)")).toBe("SS(1,1) UM(A) SE(1,1) TE(1,aborted(user))")
      expect((yield* shape).filter((x) => x.startsWith("CH")).join(" ")).toBe("CH(block-start)")
    }).pipe(Effect.provide(scenario([
      ScriptedModel.text("one", { deltas: ["a", "b"], during: Effect.uninterruptible(Effect.suspend(() => h.d!.cancel(CancelCause.user))) })
    ])))
  })

  agentTest("4.5 Q3: a surface replacement appended while the onRequest hook is suspended is in this attempt's request", scenario([ScriptedModel.text("one"), ScriptedModel.text("two")]), function*({ driver, hooks, log }) {
    const summary = userMessage({ id: "S", text: "summary", source: { kind: "compaction" } })
    yield* driver.followup(user("A"))
    expect(yield* closeOut).toEqual([])
    const seqA = (yield* events).find((e) => e.type === "user/message")!.seq
    yield* hooks.onRequest((i, next) =>
      i.turn === 2
        ? Effect.zipRight(
          Effect.zipRight(Effect.yieldNow(), Effect.orDie(log.append({ type: "user/message", data: summary, surfaceOp: { op: "replace", start: seqA, end: seqA }, sourceEventSeqs: [seqA] }))),
          next()
        )
        : next()
    )
    yield* driver.followup(user("B"))
    expect(yield* closeOut).toEqual([])
    const reqs = yield* requests
    expect(reqs[1]!.messages.map((m) => (m.content[0] as any).text).join(" ")).toBe("summary one B")
  })

  it.scoped("4.5: a surface replacement appended during the backoff sleep applies from the next attempt", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const log = yield* SessionLog
      const summary = userMessage({ id: "S", text: "summary", source: { kind: "compaction" } })
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      const seqA = (yield* events).find((e) => e.type === "user/message")!.seq
      yield* driver.followup(user("B"))
      yield* untilEvent((e) => e.type === "llm/retry")
      yield* log.append({ type: "user/message", data: summary, surfaceOp: { op: "replace", start: seqA, end: seqA }, sourceEventSeqs: [seqA] })
      const delay = ((yield* events).find((e) => e.type === "llm/retry")!.data as any).delayMs as number
      yield* TestClock.adjust(delay)
      expect(yield* closeOut).toEqual([])
      const reqs = yield* requests
      expect(reqs.slice(1).map((r) => r.messages.map((m) => (m.content[0] as any).text).join(" "))).toEqual(["A one B", "summary one B"])
    }).pipe(Effect.provide(scenario([
      ScriptedModel.text("one"),
      ScriptedModel.fail({ code: "RATE_LIMIT", status: 429, message: "slow" }),
      ScriptedModel.text("two")
    ]))))
})