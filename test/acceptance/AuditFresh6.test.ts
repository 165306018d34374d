/**
 * Sixth fresh acceptance audit: SPEC 0.3 (superseded behaviours), 0.4 (binding decisions), the 3.3
 * send-family table and the 3.8 inbox-mutation table, against the package root.
 */
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Fiber, Option, Stream } from "effect"
import type { UserMessage } from "../../src/index.js"
import {
  CancelCause,
  Driver,
  Inbox,
  InvalidEvent,
  InvalidSplice,
  DuplicateMessage,
  MemoryStoreControl,
  PreStep,
  PreStepDecision,
  ScriptedModel,
  SessionLog
} from "../../src/index.js"
import {
  asId,
  closeOut,
  dataOfType,
  events,
  liveNotation,
  plugin,
  reasons,
  recordLive,
  requests,
  scenario,
  settle,
  shape,
  texts,
  until,
  user
} from "./AuditHarness.js"
import { gate, open } from "./AuditHarness.js"

const gateMaxTokens = gate()
const gateAppendNt = gate()
const gateAppendNs = gate()
const gateClear = gate()
const ids = (ms: ReadonlyArray<UserMessage>) => ms.map((m) => m.id)
const liveOf = (read: Effect.Effect<ReadonlyArray<any>>) => Effect.map(read, (es) => es.map(liveNotation))

describe("0.3 / 0.4 / 3.3: send family", () => {
  it.scoped("0.4 D2 / 3.10: an idle followup commits INS, TS and the claim (ns first, then the oldest nt) before it returns; live inserted, status, claimed", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const pre = yield* PreStep
      const g = gate()
      const seen: Array<ReadonlyArray<string>> = []
      yield* pre.register((input, next) => Effect.zipRight(Effect.sync(() => seen.push(ids(input.messages))), Effect.zipRight(Deferred.await(g), next())))
      yield* driver.inject(plugin("I"))
      yield* driver.send(user("Q"), "next-turn", false)
      const live = yield* recordLive
      yield* driver.followup(user("A"))
      // No yield between the return and these reads that lets the loop progress past its open.
      expect((yield* shape).slice(-4)).toEqual(["INS(nt,1,[A])", "TS(1)", "CLM(ns,0,1)", "CLM(nt,0,1)"])
      expect(yield* driver.status).toBe("running")
      expect(yield* liveOf(live)).toEqual(["inserted(A)", "status(running)", "claimed(I,1)", "claimed(Q,1)"])
      yield* until(Effect.sync(() => seen.length > 0))
      expect(seen[0]).toEqual(["I", "Q"])
      yield* open(g)
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario([ScriptedModel.text("one"), ScriptedModel.text("two")]))))

  it.scoped("0.3 O3/O4/O6: a rejected initial pre-step drops the injected context with the prompt: TE blocked, no UM, no fallback; the queued follow-up still runs", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const inbox = yield* Inbox
      const pre = yield* PreStep
      yield* pre.register((input, next) => input.turn === 1 ? Effect.succeed(PreStepDecision.reject("no")) : next())
      yield* driver.inject(plugin("I"))
      yield* driver.send(user("Q"), "next-turn", false)
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect(yield* shape).toEqual([
        "INS(ns,0,[I])", "INS(nt,0,[Q])", "INS(nt,1,[A])", "TS(1)", "CLM(ns,0,1)", "CLM(nt,0,1)", "TE(1,blocked)",
        "TS(2)", "CLM(nt,0,1)", "SS(2,1)", "UM(A)", "RH(initial)", "CH(block-start)", "CH(text-delta)", "CH(block-end)",
        "CH(finish stop)", "AM", "SE(2,1)", "TE(2,completed)"
      ])
      expect(yield* inbox.idState(asId("I"))).toEqual(Option.some("claimed"))
      expect(yield* inbox.idState(asId("Q"))).toEqual(Option.some("claimed"))
      expect(yield* inbox.hasPending).toBe(false)
    }).pipe(Effect.provide(scenario([ScriptedModel.text("ok")]))))

  it.scoped("0.3 O9: whenIdle does not wait for an idle inject's durability (store held)", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const control = yield* MemoryStoreControl
      yield* control.hold
      const pending = yield* Effect.fork(driver.inject(plugin("C")))
      yield* settle
      expect((yield* shape)).toEqual(["INS(ns,0,[C])"])
      expect(pending.unsafePoll()).toBeNull()
      // whenIdle resolves although the insertion is not yet durable.
      const idle = yield* Effect.fork(driver.whenIdle)
      yield* settle
      expect(idle.unsafePoll()).not.toBeNull()
      expect(yield* driver.status).toBe("idle")
      yield* control.release
      yield* Fiber.join(pending)
    }).pipe(Effect.provide(scenario([]))))

  it.scoped("0.3 O12 / 2.4: injected context enters as a plain user/message carrying its source; no other event type appears", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.inject(plugin("I", "ctx"))
      yield* driver.followup(user("A", "prompt"))
      expect(yield* closeOut).toEqual([])
      const ums = yield* dataOfType("user/message")
      expect(ums.map((d) => d.id)).toEqual(["I", "A"])
      expect(ums[0]!.source).toEqual({ kind: "plugin", plugin: "test" })
      const types = new Set((yield* events).map((e) => e.type))
      for (const t of types) expect(t.startsWith("context/")).toBe(false)
      expect(types.has("agent/inbox/enqueue")).toBe(false)
    }).pipe(Effect.provide(scenario([ScriptedModel.text("ok")]))))

  it.scoped("0.4 D3: after max-tokens the chain continues into a follow-up queued during the turn", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      yield* until(Effect.map(shape, (s) => s.includes("RH(initial)")))
      yield* driver.followup(user("B"))
      yield* open(gateMaxTokens)
      expect(yield* closeOut).toEqual([])
      expect((yield* reasons).map((r) => r.kind)).toEqual(["max-tokens", "completed"])
      expect(yield* texts).toEqual(["A", "B"])
    }).pipe(Effect.provide(scenario([
      ScriptedModel.response({ text: "cut", finish: "max-tokens", awaitBefore: Deferred.await(gateMaxTokens) }),
      ScriptedModel.text("ok")
    ]))))
})

describe("3.8: inbox mutations", () => {
  it.scoped("3.8: append/prepend on idle never wake: INS only, no turn, no status change", () =>
    Effect.gen(function*() {
      const inbox = yield* Inbox
      const driver = yield* Driver
      const live = yield* recordLive
      yield* inbox.append("next-turn", user("A"))
      yield* inbox.prepend("next-step", user("B"))
      yield* inbox.prepend("next-turn", user("C"))
      yield* settle
      expect(yield* shape).toEqual(["INS(nt,0,[A])", "INS(ns,0,[B])", "INS(nt,0,[C])"])
      expect(yield* liveOf(live)).toEqual(["inserted(A)", "inserted(B)", "inserted(C)"])
      expect(yield* driver.status).toBe("idle")
      expect(ids(yield* inbox.nextTurn)).toEqual(["C", "A"])
      expect(yield* requests).toHaveLength(0)
    }).pipe(Effect.provide(scenario([]))))

  it.scoped("3.8: an Inbox.append into next-turn while a turn runs is run as a later turn of the chain", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const inbox = yield* Inbox
      yield* driver.followup(user("A"))
      yield* until(Effect.map(shape, (s) => s.includes("RH(initial)")))
      yield* inbox.append("next-turn", user("B"))
      yield* open(gateAppendNt)
      expect(yield* closeOut).toEqual([])
      expect((yield* reasons).map((r) => r.kind)).toEqual(["completed", "completed"])
      expect(yield* texts).toEqual(["A", "B"])
    }).pipe(Effect.provide(scenario([ScriptedModel.text("one", { awaitBefore: Deferred.await(gateAppendNt) }), ScriptedModel.text("two")]))))

  it.scoped("3.8: an Inbox.append into next-step during the last step is claimed at the next boundary of the same turn", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const inbox = yield* Inbox
      yield* driver.followup(user("A"))
      yield* until(Effect.map(shape, (s) => s.includes("RH(initial)")))
      yield* inbox.append("next-step", user("X"))
      yield* open(gateAppendNs)
      expect(yield* closeOut).toEqual([])
      const s = yield* shape
      expect(s).toContain("SS(1,2)")
      expect(s.slice(s.indexOf("SE(1,1)"), s.indexOf("SE(1,1)") + 4)).toEqual(["SE(1,1)", "CLM(ns,0,1)", "SS(1,2)", "UM(X)"])
      expect((yield* reasons).map((r) => r.kind)).toEqual(["completed"])
    }).pipe(Effect.provide(scenario([ScriptedModel.text("one", { awaitBefore: Deferred.await(gateAppendNs) }), ScriptedModel.text("two")]))))

  it.scoped("3.8/4.8: an Inbox.append into next-step after the claim is not waking work: after a blocked turn the driver goes idle, the item stays pending", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const inbox = yield* Inbox
      const pre = yield* PreStep
      yield* pre.register(() =>
        Effect.zipRight(inbox.append("next-step", user("X")), Effect.succeed(PreStepDecision.reject("no")))
      )
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect(yield* shape).toEqual(["INS(nt,0,[A])", "TS(1)", "CLM(nt,0,1)", "INS(ns,0,[X])", "TE(1,blocked)"])
      expect(ids(yield* inbox.nextStep)).toEqual(["X"])
      expect(yield* driver.status).toBe("idle")
    }).pipe(Effect.provide(scenario([]))))

  it.scoped("3.8/3.6: removing one of two latched wakes during maintenance still replays the other", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const inbox = yield* Inbox
      const g = gate()
      const task = yield* Effect.fork(driver.runMaintenance(Deferred.await(g)))
      yield* settle
      yield* driver.followup(user("A"))
      yield* driver.followup(user("B"))
      expect(yield* inbox.remove(asId("A"))).toBe(true)
      yield* open(g)
      yield* Fiber.join(task)
      expect(yield* closeOut).toEqual([])
      expect(yield* shape).toEqual([
        "INS(nt,0,[A])", "INS(nt,1,[B])", "CAN(nt,0,1)", "TS(1)", "CLM(nt,0,1)", "SS(1,1)", "UM(B)", "RH(initial)",
        "CH(block-start)", "CH(text-delta)", "CH(block-end)", "CH(finish stop)", "AM", "SE(1,1)", "TE(1,completed)"
      ])
    }).pipe(Effect.provide(scenario([ScriptedModel.text("ok")]))))

  it.scoped("3.2/3.8: a splice that swaps a latched wake for a new message (not replace) drops the latch: no turn when the task ends", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const inbox = yield* Inbox
      const g = gate()
      const task = yield* Effect.fork(driver.runMaintenance(Deferred.await(g)))
      yield* settle
      yield* driver.followup(user("A"))
      expect(ids(yield* inbox.splice("next-turn", 0, 1, [user("A2")]))).toEqual(["A"])
      yield* open(g)
      yield* Fiber.join(task)
      expect(yield* closeOut).toEqual([])
      expect(yield* shape).toEqual(["INS(nt,0,[A])", "REP(nt,0,[A2])"])
      expect(ids(yield* inbox.nextTurn)).toEqual(["A2"])
      expect(yield* requests).toHaveLength(0)
    }).pipe(Effect.provide(scenario([]))))

  it.scoped("3.8: replace keeping the same id rewrites content: REP, live discarded(A) then inserted(A), true, still pending", () =>
    Effect.gen(function*() {
      const inbox = yield* Inbox
      yield* inbox.append("next-step", user("Z"))
      yield* inbox.append("next-step", user("A", "old"))
      const live = yield* recordLive
      expect(yield* inbox.replace(asId("A"), user("A", "new"))).toBe(true)
      expect(yield* shape).toEqual(["INS(ns,0,[Z])", "INS(ns,1,[A])", "REP(ns,1,[A])"])
      const last = (yield* dataOfType("agent/inbox/spliced")).at(-1)!
      expect(last.removedCount).toBe(1)
      expect(last.outcome).toBe("canceled")
      expect(yield* liveOf(live)).toEqual(["discarded(A)", "inserted(A)"])
      expect(yield* inbox.idState(asId("A"))).toEqual(Option.some("pending"))
      expect((yield* inbox.nextStep).map((m) => (m.content[0] as any).text)).toEqual(["Z", "new"])
    }).pipe(Effect.provide(scenario([]))))

  it.scoped("3.8/3.9: replace with a non-fresh new id fails DuplicateMessage and writes nothing", () =>
    Effect.gen(function*() {
      const inbox = yield* Inbox
      yield* inbox.append("next-turn", user("A"))
      yield* inbox.append("next-step", user("B"))
      const before = (yield* events).length
      const error = yield* Effect.flip(inbox.replace(asId("A"), user("B")))
      expect(error).toBeInstanceOf(DuplicateMessage)
      expect((error as DuplicateMessage).id).toBe("B")
      expect((error as DuplicateMessage).state).toBe("pending")
      expect((yield* events).length).toBe(before)
      expect(ids(yield* inbox.nextTurn)).toEqual(["A"])
    }).pipe(Effect.provide(scenario([]))))

  it.scoped("3.8/2.7: splice normalises negative start and +Infinity deleteCount; returns removed; live discarded per removed then inserted", () =>
    Effect.gen(function*() {
      const inbox = yield* Inbox
      yield* inbox.append("next-step", user("X"))
      yield* inbox.append("next-step", user("Y"))
      yield* inbox.append("next-step", user("Z"))
      const live = yield* recordLive
      const removed = yield* inbox.splice("next-step", -2.7, Infinity, [user("P"), user("Q")])
      expect(ids(removed)).toEqual(["Y", "Z"])
      const last = (yield* dataOfType("agent/inbox/spliced")).at(-1)!
      expect({ start: last.start, removedCount: last.removedCount, outcome: last.outcome }).toEqual({ start: 1, removedCount: 2, outcome: "canceled" })
      expect(yield* liveOf(live)).toEqual(["discarded(Y)", "discarded(Z)", "inserted(P)", "inserted(Q)"])
      expect(ids(yield* inbox.nextStep)).toEqual(["X", "P", "Q"])
      expect(yield* inbox.idState(asId("Y"))).toEqual(Option.some("discarded"))
      // Nothing removed, nothing inserted: nothing written, [] returned.
      const n = (yield* events).length
      expect(yield* inbox.splice("next-step", 1, 0, [])).toEqual([])
      expect((yield* events).length).toBe(n)
    }).pipe(Effect.provide(scenario([]))))

  it.scoped("3.1/3.8: splice check order: coordinates (InvalidSplice) before message validity (InvalidEvent) before identity", () =>
    Effect.gen(function*() {
      const inbox = yield* Inbox
      yield* inbox.append("next-turn", user("A"))
      const invalid = { id: "", role: "user", content: "nope" } as unknown as UserMessage
      expect(yield* Effect.flip(inbox.splice("next-turn", NaN, 0, [invalid]))).toBeInstanceOf(InvalidSplice)
      expect(yield* Effect.flip(inbox.splice("next-turn", 0, 0, [user("A"), invalid]))).toBeInstanceOf(InvalidEvent)
      expect(yield* shape).toEqual(["INS(nt,0,[A])"])
    }).pipe(Effect.provide(scenario([]))))

  it.scoped("3.8: clear on empty lists writes nothing; clear while running removes pending input (CAN) but aborts nothing", () =>
    Effect.gen(function*() {
      const inbox = yield* Inbox
      const driver = yield* Driver
      const live = yield* recordLive
      yield* inbox.clear
      expect(yield* shape).toEqual([])
      expect(yield* liveOf(live)).toEqual([])
      yield* driver.followup(user("A"))
      yield* until(Effect.map(shape, (s) => s.includes("RH(initial)")))
      yield* driver.inject(plugin("I"))
      yield* driver.send(user("Q"), "next-turn", false)
      yield* inbox.clear
      yield* open(gateClear)
      expect(yield* closeOut).toEqual([])
      const s = yield* shape
      expect(s.slice(3, 7)).toEqual(["SS(1,1)", "UM(A)", "RH(initial)", "INS(ns,0,[I])"])
      expect(s).toContain("CAN(ns,0,1)")
      expect(s).toContain("CAN(nt,0,1)")
      expect(s.indexOf("CAN(nt,0,1)")).toBe(s.indexOf("CAN(ns,0,1)") + 1)
      expect((yield* reasons).map((r) => r.kind)).toEqual(["completed"])
      expect(yield* requests).toHaveLength(1)
    }).pipe(Effect.provide(scenario([ScriptedModel.text("ok", { awaitBefore: Deferred.await(gateClear) })]))))
})

describe("0.4 D5 / 3.8: observers and aborted chains", () => {
  it.scoped("3.8: an Inbox.append into next-turn while running is parked when the turn ends aborted (keepInbox): no replay", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const inbox = yield* Inbox
      yield* driver.followup(user("A"))
      yield* until(Effect.map(shape, (s) => s.includes("RH(initial)")))
      yield* inbox.append("next-turn", user("B"))
      yield* driver.cancel(CancelCause.user, { keepInbox: true })
      expect(yield* closeOut).toEqual([])
      expect((yield* shape).at(-1)).toBe("TE(1,aborted(user))")
      expect(ids(yield* inbox.nextTurn)).toEqual(["B"])
      expect(yield* driver.status).toBe("idle")
      expect(yield* requests).toHaveLength(1)
    }).pipe(Effect.provide(scenario([ScriptedModel.hang()]))))

  it.scoped("0.4 D5 / 3.10: a Driver.events observer may call followup; the delivery is not dropped and runs in the chain", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      let done = false
      yield* Effect.forkScoped(
        Stream.runForEach(driver.events, (e) =>
          e.type === "agent/inbox/claimed" && e.message.id === "A" && !done
            ? Effect.zipRight(Effect.sync(() => (done = true)), driver.followup(user("B")))
            : Effect.void)
      )
      yield* settle
      yield* driver.followup(user("A"))
      yield* until(Effect.sync(() => done))
      yield* until(Effect.map(texts, (t) => t.includes("B")))
      expect(yield* closeOut).toEqual([])
      expect(yield* texts).toEqual(["A", "B"])
      expect((yield* reasons).map((r) => r.kind)).toEqual(["completed", "completed"])
    }).pipe(Effect.provide(scenario([ScriptedModel.text("one"), ScriptedModel.text("two")]))))

  it.scoped("0.4 D5 / 3.10: a SessionLog.stream observer may cancel the running turn", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const log = yield* SessionLog
      yield* Effect.forkScoped(
        Stream.runForEach(log.stream(0), (e) => e.type === "request/header" ? driver.cancel(CancelCause.user) : Effect.void)
      )
      yield* settle
      yield* driver.followup(user("A"))
      yield* until(Effect.map(shape, (s) => s.some((x) => x.startsWith("TE("))))
      expect(yield* closeOut).toEqual([])
      expect((yield* shape).at(-1)).toBe("TE(1,aborted(user))")
    }).pipe(Effect.provide(scenario([ScriptedModel.hang()]))))
})
