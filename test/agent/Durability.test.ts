/**
 * Durability through an agent (SPEC 6.2, 6.4): checkpoints, persistence of operations, group commit
 * and the batch window, opening with options.
 */
import { describe, expect, it } from "@effect/vitest"
import { Context, Deferred, Effect, Exit, Fiber, Layer, Option, Schedule, Scope, Stream, TestClock } from "effect"
import {
  AgentBusy,
  CancelCause,
  Driver,
  MemoryStoreControl,
  PersistenceError,
  ScriptedModel,
  SessionId,
  SessionStore,
  Tool,
  UnsupportedLogVersion
} from "../../src/index.js"
import {
  agentTest,
  asId,
  gate,
  open,
  plugin,
  recordLive,
  requests,
  scenario,
  settle,
  shape,
  until,
  untilEvent,
  user
} from "./harness.js"
import { buildIn, failureOf } from "./stores.js"
import { empty } from "./toolFixtures.js"

// The hold must happen between the assistant message and the tool's checkpoint: the scripted
// response's afterFinish takes it through this reference, set by the test.
const controlRef: { control?: Context.Tag.Service<MemoryStoreControl> } = {}
const MemoryStoreControlLater = Effect.sync(() => controlRef.control!)

describe("6.2 checkpoints", () => {
  agentTest(
    "6.2: while storage is held back no model request is dispatched",
    scenario([ScriptedModel.text("a")]),
    function*({ driver, control }) {
      yield* driver.followup(user("A"))
      yield* control.hold
      yield* untilEvent((e) => e.type === "request/header")
      yield* settle
      expect(yield* requests).toEqual([])
      yield* control.release
      yield* driver.whenIdle
      expect(yield* requests).toHaveLength(1)
    }
  )

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
      [
        ScriptedModel.response({
          toolCalls: [{ id: "c1", name: "t", arguments: {} }],
          afterFinish: Effect.flatMap(MemoryStoreControlLater, (c) => c.hold)
        }),
        ScriptedModel.text("done")
      ],
      { tools: [body] }
    ))))
})

describe("6.2 batch window", () => {
  const windowGate = gate()
  agentTest(
    "6.2 (c): later events do not extend the window: one append at oldest + batchWindow covers everything pending",
    scenario([ScriptedModel.text("hello", { deltas: ["he", "llo"], during: Deferred.await(windowGate) })]),
    function*({ driver, log, control }) {
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "assistant/chunk")
      yield* settle
      const durable = yield* log.durableSeq
      const calls = yield* control.appendCalls
      // The first chunk is pending since t = 0.
      yield* TestClock.adjust("150 millis")
      yield* settle
      expect(yield* log.durableSeq).toBe(durable)
      yield* open(windowGate)
      yield* driver.whenIdle
      yield* settle
      const total = (yield* log.events).length
      expect(yield* log.durableSeq).toBe(durable)
      yield* TestClock.adjust("50 millis")
      yield* until(Effect.map(log.durableSeq, (d) => d === total - 1))
      expect(yield* control.appendCalls).toBe(calls + 1)
    }
  )
})

describe("6.4 opening with options", () => {
  const sid = SessionId.make("s")
  const header = { formatVersion: 1 as const, sessionId: sid, createdAt: 0, seedLength: 0 }
  const ev = (seq: number, type: string, data: unknown, extra: Record<string, unknown> = {}) =>
    ({ type, seq, time: 0, data, ...extra }) as any

  it.scoped("6.4/5.2: a stored log violating only relational rules opens with invariants off and fails MalformedLog with check", () =>
    Effect.gen(function*() {
      const storeCtx = yield* Layer.build(SessionStore.layerMemory)
      const store = Context.get(storeCtx, SessionStore)
      // R2: a turn/end with no open turn (the schema of every event is valid).
      yield* store.create(header, [ev(0, "turn/end", { turn: 1, reason: { kind: "completed" } })])
      const checked = yield* Effect.exit(Effect.scoped(buildIn(storeCtx, [], { resume: true })))
      expect(failureOf(checked)).toMatchObject({ _tag: "MalformedLog", seq: 0 })
      const off = yield* buildIn(storeCtx, [], { resume: true, agent: { invariants: "off" } })
      expect((yield* off.log.events).map((e) => e.type)).toEqual(["turn/end", "session/end-seed"])
      yield* Scope.close(off.scope, Exit.void)
    }))

  it.scoped("2.9/6.4: a stored declared extension event resumes with the same eventTypes and is malformed without them", () =>
    Effect.gen(function*() {
      const storeCtx = yield* Layer.build(SessionStore.layerMemory)
      const store = Context.get(storeCtx, SessionStore)
      yield* store.create(header, [ev(0, "x/declared", { a: 1 }), ev(1, "x/other", { b: 2 }, { ignorable: true })])
      const without = yield* Effect.exit(Effect.scoped(buildIn(storeCtx, [], { resume: true })))
      expect(failureOf(without)).toMatchObject({ _tag: "MalformedLog", seq: 0 })
      const withTypes = yield* buildIn(storeCtx, [], { resume: true, agent: { eventTypes: ["x/declared"] } })
      expect(withTypes.log.firstLiveSeq).toBe(2)
      expect((yield* withTypes.log.events).map((e) => e.type)).toEqual(["x/declared", "x/other", "session/end-seed"])
      yield* Scope.close(withTypes.scope, Exit.void)
    }))

  agentTest(
    "6.2: durableSeq is -1 on a fresh session; flush of an empty log succeeds",
    scenario([]),
    function*({ log }) {
      expect(yield* log.durableSeq).toBe(-1)
      yield* log.flush
      expect(log.firstLiveSeq).toBe(0)
      expect(log.header).toEqual({ formatVersion: 1, sessionId: "s", createdAt: 0, seedLength: 0 })
    }
  )
})

describe("6 persistence", () => {
  it.scoped("6.4: create writes the header with createdAt from the Clock and no end-seed; resume of an untouched session does not grow it", () =>
    Effect.gen(function*() {
      yield* TestClock.adjust("7 seconds")
      const storeCtx = yield* Layer.build(SessionStore.layerMemory)
      const store = Context.get(storeCtx, SessionStore)
      const first = yield* buildIn(storeCtx, [])
      expect(first.log.header).toEqual({ formatVersion: 1, sessionId: "s", createdAt: 7000, seedLength: 0 })
      yield* first.driver.inject(plugin("C"))
      expect((yield* first.log.events)[0]!.time).toBe(7000)
      yield* Scope.close(first.scope, Exit.void)
      const second = yield* buildIn(storeCtx, [], { resume: true })
      expect(second.log.firstLiveSeq).toBe(1)
      yield* Scope.close(second.scope, Exit.void)
      const third = yield* buildIn(storeCtx, [], { resume: true })
      expect((yield* third.log.events).map((e) => e.type)).toEqual(["agent/inbox/spliced", "session/end-seed"])
      yield* Scope.close(third.scope, Exit.void)
      expect((yield* store.load(SessionId.make("s"))).events.length).toBe(2)
    }))

  it.scoped("6.4: resuming a header of another format version fails UnsupportedLogVersion {found, supported}", () =>
    Effect.gen(function*() {
      const storeCtx = yield* Layer.build(SessionStore.layerMemory)
      const store = Context.get(storeCtx, SessionStore)
      yield* store.create({ formatVersion: 2 as 1, sessionId: SessionId.make("s"), createdAt: 0, seedLength: 0 }, [])
      const exit = yield* Effect.exit(Effect.scoped(buildIn(storeCtx, [], { resume: true })))
      const error = failureOf(exit)
      expect(error).toBeInstanceOf(UnsupportedLogVersion)
      expect(error).toMatchObject({ found: 2, supported: 1 })
    }))

  it.scoped("6.1: a second open of the same session in one store layer fails AgentBusy {operation: open}", () =>
    Effect.gen(function*() {
      const storeCtx = yield* Layer.build(SessionStore.layerMemory)
      const first = yield* buildIn(storeCtx, [])
      const exit = yield* Effect.exit(Effect.scoped(buildIn(storeCtx, [], { resume: true })))
      expect(failureOf(exit)).toBeInstanceOf(AgentBusy)
      expect(failureOf(exit)).toMatchObject({ operation: "open" })
      yield* Scope.close(first.scope, Exit.void)
      const again = yield* buildIn(storeCtx, [], { resume: true })
      yield* Scope.close(again.scope, Exit.void)
    }))

  agentTest(
    "6.2: without waiters, loop events are written after batchWindow measured on the Clock",
    scenario([ScriptedModel.text("ok")]),
    function*({ driver, log, control }) {
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      yield* settle
      const total = (yield* log.events).length
      const durable = yield* log.durableSeq
      expect(durable).toBeLessThan(total - 1)
      const calls = yield* control.appendCalls
      yield* TestClock.adjust("199 millis")
      yield* settle
      expect(yield* log.durableSeq).toBe(durable)
      yield* TestClock.adjust("1 millis")
      yield* until(Effect.map(log.durableSeq, (d) => d === total - 1))
      expect(yield* control.appendCalls).toBe(calls + 1)
    }
  )

  agentTest(
    "6.3: two failed appends are retried; a third poisons: one agent/error, idle, later operations fail PersistenceError",
    scenario([ScriptedModel.text("a")]),
    function*({ driver, inbox, log, control }) {
      const live = yield* recordLive
      yield* control.failAppends(2)
      yield* driver.inject(plugin("C1"))
      expect(yield* log.durableSeq).toBe(0)
      yield* control.failAppends(3)
      const streamEnd = yield* Effect.fork(Stream.runDrain(log.stream(0)))
      const error = yield* Effect.flip(driver.followup(user("A")))
      expect(error).toBeInstanceOf(PersistenceError)
      yield* driver.whenIdle
      expect(yield* driver.status).toBe("idle")
      const errors = (yield* live).filter((e) => e.type === "agent/error")
      expect(errors).toHaveLength(1)
      expect((errors[0] as any).error).toBeInstanceOf(PersistenceError)
      const s = yield* shape
      expect(s.filter((x) => x.startsWith("TE"))).toEqual([])
      const before = s.length
      expect(yield* Effect.flip(driver.inject(plugin("C2")))).toBeInstanceOf(PersistenceError)
      expect(yield* Effect.flip(driver.cancel(CancelCause.user))).toBeInstanceOf(PersistenceError)
      expect(yield* Effect.flip(inbox.splice("next-turn", NaN, 0, []))).toBeInstanceOf(PersistenceError)
      expect(yield* Effect.flip(inbox.clear)).toBeInstanceOf(PersistenceError)
      expect(yield* Effect.flip(log.flush)).toBeInstanceOf(PersistenceError)
      expect(yield* Effect.flip(driver.runMaintenance(Effect.void))).toBeInstanceOf(PersistenceError)
      expect((yield* shape).length).toBe(before)
      expect(yield* inbox.idState(asId("C2"))).toEqual(Option.none())
      yield* Fiber.join(streamEnd)
    }
  )

  agentTest(
    "6.3: a custom writeRetry schedule is used",
    scenario([], { agent: { durability: { writeRetry: Schedule.recurs(0) } } }),
    function*({ driver, control }) {
      yield* control.failAppends(1)
      expect(yield* Effect.flip(driver.inject(plugin("C")))).toBeInstanceOf(PersistenceError)
    }
  )
})

describe("6.2 group commit and 3.4 D4", () => {
  agentTest(
    "6.2: at most one append in flight; events appended meanwhile go into one next batch",
    scenario([]),
    function*({ driver, control, log }) {
      const before = yield* control.appendCalls
      yield* control.hold
      const f1 = yield* Effect.fork(driver.inject(user("C1")))
      yield* until(Effect.map(control.appendCalls, (n) => n === before + 1))
      const f2 = yield* Effect.fork(driver.inject(user("C2")))
      const f3 = yield* Effect.fork(driver.inject(user("C3")))
      yield* settle
      expect(yield* control.appendCalls).toBe(before + 1)
      yield* control.release
      yield* Fiber.join(f1)
      yield* Fiber.join(f2)
      yield* Fiber.join(f3)
      expect(yield* control.appendCalls).toBe(before + 2)
      expect(yield* log.durableSeq).toBe(2)
    }
  )

  agentTest(
    "6.2: batchSize pending events are written without a waiter or the window",
    scenario([ScriptedModel.text("a", { deltas: ["1", "2", "3", "4", "5", "6"] })], {
      agent: { durability: { batchSize: 3 } }
    }),
    function*({ log, control }) {
      const before = yield* control.appendCalls
      // The loop's events after the request checkpoint have no waiter: with batchSize 3 they are
      // written in batches of 3 although the Clock never reaches the 200 ms window.
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      yield* settle
      const total = (yield* log.events).length
      expect(yield* log.durableSeq).toBeGreaterThanOrEqual(total - 3)
      expect(yield* control.appendCalls).toBeGreaterThan(before + 2)
    }
  )

  agentTest(
    "3.4 D4: a broad cancel whose CAN write fails still aborts and fails PersistenceError",
    scenario([ScriptedModel.hang({ text: "x" }), ScriptedModel.text("b")]),
    function*({ driver, control }) {
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "assistant/chunk")
      yield* driver.followup(user("B"))
      yield* control.failAppends(3)
      expect(yield* Effect.flip(driver.cancel(CancelCause.user))).toBeInstanceOf(PersistenceError)
      yield* driver.whenIdle
      expect(yield* driver.status).toBe("idle")
      expect(yield* requests).toHaveLength(1)
    }
  )
})
