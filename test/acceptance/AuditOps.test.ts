/**
 * Acceptance audit of SPEC 3 (operations), 4.5 (requests) and 6 (persistence) beyond the scenarios
 * of SPEC 9, written against the package root only.
 */
import { describe, expect, it } from "@effect/vitest"
import { Cause, Context, Deferred, Duration, Effect, Exit, Fiber, Layer, Option, Queue, Ref, Schedule, Scope, Stream, TestClock } from "effect"
import type { UserMessage } from "../../src/index.js"
import {
  Agent,
  AgentBusy,
  AgentDisposed,
  CancelCause,
  Driver,
  DuplicateMessage,
  Hooks,
  Inbox,
  InvalidEvent,
  InvalidSplice,
  MaintenanceAborted,
  MemoryStoreControl,
  PersistenceError,
  PreStep,
  ScriptedModel,
  SessionId,
  SessionLog,
  SessionStore,
  Tools,
  UnsupportedLogVersion
} from "../../src/index.js"
import {
  agentOver,
  asId,
  closeOut,
  dataOfType,
  events,
  liveNotation,
  plugin,
  recordLive,
  recordStatus,
  requests,
  scenario,
  settle,
  shape,
  texts,
  until,
  untilEvent,
  user
} from "./AuditHarness.js"
import { gate, open } from "./AuditHarness.js"

const failureOf = <E>(exit: Exit.Exit<unknown, E>) => Exit.isFailure(exit) ? Option.getOrUndefined(Cause.failureOption(exit.cause)) : undefined

/** Builds an agent over the given store context in a scope the test closes itself. */
const buildIn = (storeCtx: Context.Context<SessionStore | MemoryStoreControl>, script: Parameters<typeof agentOver>[0], options: Parameters<typeof agentOver>[1] = {}) =>
  Effect.gen(function*() {
    const scope = yield* Scope.make()
    const ctx = yield* Layer.buildWithScope(agentOver(script, options).pipe(Layer.provide(Layer.succeedContext(storeCtx))), scope)
    return { scope, ctx, driver: Context.get(ctx, Driver), inbox: Context.get(ctx, Inbox), log: Context.get(ctx, SessionLog) }
  })

describe("3.1 conventions", () => {
  it.scoped("3.1: a duplicate and an empty splice are acknowledged only after the earlier events are durable", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const inbox = yield* Inbox
      const control = yield* MemoryStoreControl
      yield* control.hold
      const first = yield* Effect.fork(driver.inject(plugin("C")))
      const duplicate = yield* Effect.fork(Effect.either(driver.inject(plugin("C"))))
      const nothing = yield* Effect.fork(inbox.splice("next-turn", 3, 0, []))
      yield* settle
      expect(Option.isNone(yield* Fiber.poll(first))).toBe(true)
      expect(Option.isNone(yield* Fiber.poll(duplicate))).toBe(true)
      expect(Option.isNone(yield* Fiber.poll(nothing))).toBe(true)
      // Input-only failures complete at once.
      expect(yield* Effect.flip(inbox.splice("next-turn", NaN, 0, []))).toBeInstanceOf(InvalidSplice)
      expect(yield* Effect.flip(driver.inject({ id: "", role: "user", content: [], source: { kind: "user" } } as unknown as UserMessage))).toBeInstanceOf(InvalidEvent)
      yield* control.release
      yield* Fiber.join(first)
      const dup = yield* Fiber.join(duplicate)
      expect(dup._tag === "Left" && dup.left).toBeInstanceOf(DuplicateMessage)
      expect(dup._tag === "Left" && dup.left).toMatchObject({ id: "C", state: "pending" })
      expect(yield* Fiber.join(nothing)).toEqual([])
    }).pipe(Effect.provide(scenario([]))))

  it.scoped("3.9: the same id twice in one call is reported for the second occurrence with state pending; nothing is written", () =>
    Effect.gen(function*() {
      const inbox = yield* Inbox
      const F = user("F")
      const error = yield* Effect.flip(inbox.splice("next-turn", 0, 0, [F, F]))
      expect(error).toBeInstanceOf(DuplicateMessage)
      expect(error).toMatchObject({ id: "F", state: "pending" })
      expect(yield* events).toEqual([])
      expect(yield* inbox.idState(F.id)).toEqual(Option.none())
    }).pipe(Effect.provide(scenario([]))))

  it.scoped("3.9: a caller message with a reserved id fails InvalidEvent and does not become known", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const inbox = yield* Inbox
      const m = { id: "interrupted-tool-result-x-1", role: "user", content: [{ type: "text", text: "x" }], source: { kind: "user" } } as unknown as UserMessage
      expect(yield* Effect.flip(driver.followup(m))).toBeInstanceOf(InvalidEvent)
      expect(yield* inbox.idState(m.id)).toEqual(Option.none())
      expect(yield* events).toEqual([])
    }).pipe(Effect.provide(scenario([]))))

  it.scoped("3.1: a message is copied, deep-frozen and stored deep-equal to the input", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const inbox = yield* Inbox
      const input = { id: "M", role: "user", content: [{ type: "text", text: "hello" }], source: { kind: "plugin", plugin: "p", extra: { n: [1, 2] } } }
      yield* driver.inject(input as unknown as UserMessage)
      const stored = (yield* inbox.nextStep)[0]!
      expect(stored).toEqual(input)
      expect(stored).not.toBe(input)
      expect(Object.isFrozen(stored) && Object.isFrozen(stored.content[0]) && Object.isFrozen((stored.source as any).extra.n)).toBe(true)
      input.content[0]!.text = "changed"
      expect(((yield* inbox.nextStep)[0]!.content[0] as any).text).toBe("hello")
    }).pipe(Effect.provide(scenario([]))))

  it.scoped("3.1: check order: a disposed agent fails AgentDisposed before validating input", () =>
    Effect.gen(function*() {
      const storeCtx = yield* Layer.build(SessionStore.layerMemory)
      const { scope, driver, inbox, log } = yield* buildIn(storeCtx, [])
      yield* Scope.close(scope, Exit.void)
      const invalid = { id: "", role: "user", content: [], source: { kind: "" } } as unknown as UserMessage
      expect(yield* Effect.flip(driver.followup(invalid))).toBeInstanceOf(AgentDisposed)
      expect(yield* Effect.flip(inbox.splice("next-turn", NaN, 0, []))).toBeInstanceOf(AgentDisposed)
      expect(yield* Effect.flip(inbox.remove(asId("x")))).toBeInstanceOf(AgentDisposed)
      expect(yield* Effect.flip(inbox.clear)).toBeInstanceOf(AgentDisposed)
      expect(yield* Effect.flip(driver.cancel(CancelCause.user))).toBeInstanceOf(AgentDisposed)
      expect(yield* Effect.flip(driver.runMaintenance(Effect.void))).toBeInstanceOf(AgentDisposed)
      expect(yield* Effect.flip(log.append({ type: "x/y", data: {}, ignorable: true }))).toBeInstanceOf(AgentDisposed)
      // Read-only operations return the final state.
      expect(yield* driver.status).toBe("idle")
      yield* driver.whenIdle
      expect(yield* inbox.nextStep).toEqual([])
    }))
})

describe("3.3-3.6 phases", () => {
  const G33 = gate()
  it.scoped("3.3: a steer while running-aborted is re-routed to next-turn and latched", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const G = G33
      yield* driver.followup(user("A"))
      yield* until(Effect.map(requests, (r) => r.length === 1))
      yield* driver.cancel(CancelCause.user, { keepInbox: true })
      yield* driver.steer(user("S"))
      const s = yield* shape
      expect(s[s.length - 1]).toBe("INS(nt,0,[S])")
      yield* open(G)
      yield* driver.whenIdle
      const all = yield* shape
      const te = all.indexOf("TE(1,aborted(user))")
      expect(all.slice(te, te + 5)).toEqual(["TE(1,aborted(user))", "TS(2)", "CLM(nt,0,1)", "SS(2,1)", "UM(S)"])
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario([ScriptedModel.hang({}, { onInterrupt: Deferred.await(G33) }), ScriptedModel.text("s")]))))

  it.scoped("3.3: an inject while running-aborted is parked: no latch, no replay", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const inbox = yield* Inbox
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "assistant/chunk")
      yield* driver.cancel(CancelCause.user, { keepInbox: true })
      yield* driver.inject(plugin("C"))
      yield* driver.whenIdle
      expect((yield* shape).filter((s) => s.startsWith("TS"))).toEqual(["TS(1)"])
      expect((yield* inbox.nextStep).map((m) => m.id)).toEqual(["C"])
    }).pipe(Effect.provide(scenario([ScriptedModel.hang({ text: "x" })]))))

  it.scoped("3.3: a steer during maintenance inserts into next-step and is latched", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const G = gate()
      const task = yield* Effect.fork(driver.runMaintenance(Deferred.await(G)))
      yield* settle
      yield* driver.steer(user("S"))
      expect(yield* shape).toEqual(["INS(ns,0,[S])"])
      yield* open(G)
      yield* Fiber.join(task)
      yield* driver.whenIdle
      expect((yield* shape).slice(0, 3)).toEqual(["INS(ns,0,[S])", "TS(1)", "CLM(ns,0,1)"])
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario([ScriptedModel.text("s")]))))

  it.scoped("3.6: a keepInbox cancel of a maintenance task keeps wakes latched before it", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const task = yield* Effect.fork(driver.runMaintenance(Effect.never))
      yield* settle
      yield* driver.followup(user("W"))
      yield* driver.cancel(CancelCause.user, { keepInbox: true })
      const failure = yield* Effect.flip(Fiber.join(task))
      expect(failure).toBeInstanceOf(MaintenanceAborted)
      yield* driver.whenIdle
      expect(yield* texts).toEqual(["W"])
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario([ScriptedModel.text("w")]))))

  it.scoped("3.3: a steer during a cancelled maintenance task is re-routed to next-turn", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const G = gate()
      const task = yield* Effect.fork(driver.runMaintenance(Effect.uninterruptible(Deferred.await(G))))
      yield* settle
      yield* driver.cancel(CancelCause.user, { keepInbox: true })
      yield* driver.steer(user("S"))
      expect((yield* shape).slice(-1)).toEqual(["INS(nt,0,[S])"])
      yield* open(G)
      yield* Fiber.await(task)
      yield* driver.whenIdle
      expect(yield* texts).toEqual(["S"])
    }).pipe(Effect.provide(scenario([ScriptedModel.text("s")]))))

  it.scoped("3.6: a task's own failure is returned; a defect dies and is published as agent/error", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const live = yield* recordLive
      expect(yield* Effect.flip(driver.runMaintenance(Effect.fail("own")))).toBe("own")
      const exit = yield* Effect.exit(driver.runMaintenance(Effect.die("kaput")))
      expect(Exit.isFailure(exit) && Cause.isDie(exit.cause)).toBe(true)
      expect((yield* live).filter((e) => e.type === "agent/error").length).toBe(1)
      expect(yield* driver.status).toBe("idle")
      expect(yield* events).toEqual([])
    }).pipe(Effect.provide(scenario([]))))

  it.scoped("3.5: whenIdle awaited from a hook of the activity dies instead of hanging", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const seen = yield* Deferred.make<Exit.Exit<void>>()
      yield* (yield* PreStep).register((_i, next) =>
        Effect.zipRight(Effect.flatMap(Effect.exit(driver.whenIdle), (exit) => Deferred.succeed(seen, exit)), next())
      )
      yield* driver.followup(user("A"))
      const exit = yield* Deferred.await(seen)
      expect(Exit.isFailure(exit) && Cause.isDie(exit.cause)).toBe(true)
      yield* driver.whenIdle
    }).pipe(Effect.provide(scenario([ScriptedModel.text("a")]))))

  it.scoped("3.5: statusChanges emits the current status then each change, never twice in a row", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const trace = yield* recordStatus
      const preStep = yield* PreStep
      yield* preStep.register((input, next) => next())
      yield* driver.followup(user("A"))
      yield* driver.followup(user("B"))
      yield* driver.whenIdle
      yield* driver.inject(plugin("C"))
      yield* driver.followup(user("D"))
      yield* driver.whenIdle
      expect(yield* trace).toEqual(["idle", "running", "idle", "running", "idle"])
    }).pipe(Effect.provide(scenario([ScriptedModel.text("a"), ScriptedModel.text("b"), ScriptedModel.text("d")]))))

  it.scoped("3.7: between the disposal start and the end, deliveries from a tool body are inserted and never run", () =>
    Effect.gen(function*() {
      const storeCtx = yield* Layer.build(SessionStore.layerMemory)
      const { scope, driver, log } = yield* buildIn(storeCtx, [ScriptedModel.hang({}, { onInterrupt: Effect.suspend(() => Effect.ignore(holder.driver!.followup(user("late")))) })])
      holder.driver = driver
      yield* driver.followup(user("A"))
      yield* until(Effect.map(log.events, (es) => es.some((e) => e.type === "request/header")))
      yield* settle
      yield* Scope.close(scope, Exit.void)
      const stored = (yield* Context.get(storeCtx, SessionStore).load(SessionId.make("s"))).events
      const types = stored.map((e) => e.type)
      expect(types.filter((t) => t === "turn/start").length).toBe(1)
      expect(stored.some((e) => e.type === "agent/inbox/spliced" && (e.data as any).inserted.some((m: UserMessage) => m.id === "late"))).toBe(true)
      expect((stored[stored.length - 1]!.data as any).reason).toEqual({ kind: "aborted", reason: { kind: "disposed" } })
    }))
})

const holder: { driver?: Context.Tag.Service<Driver> } = {}

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

  it.scoped("6.2: without waiters, loop events are written after batchWindow measured on the Clock", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const log = yield* SessionLog
      const control = yield* MemoryStoreControl
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
    }).pipe(Effect.provide(scenario([ScriptedModel.text("ok")]))))

  it.scoped("6.3: two failed appends are retried; a third poisons: one agent/error, idle, later operations fail PersistenceError", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const inbox = yield* Inbox
      const log = yield* SessionLog
      const control = yield* MemoryStoreControl
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
    }).pipe(Effect.provide(scenario([ScriptedModel.text("a")]))))

  it.scoped("6.3: a custom writeRetry schedule is used", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const control = yield* MemoryStoreControl
      yield* control.failAppends(1)
      expect(yield* Effect.flip(driver.inject(plugin("C")))).toBeInstanceOf(PersistenceError)
    }).pipe(Effect.provide(scenario([], { agent: { durability: { writeRetry: Schedule.recurs(0) } } }))))
})

describe("4.5 requests", () => {
  it.scoped("4.5 Q1: no provider or model anywhere ends the turn error(NO_ROUTE)", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect((yield* shape).slice(-1)).toEqual(["TE(1,error(NO_ROUTE))"])
      expect(yield* requests).toEqual([])
    }).pipe(Effect.provide(Agent.layer({ sessionId: SessionId.make("s") }).pipe(
      Layer.provideMerge(Layer.mergeAll(SessionStore.layerMemory, ScriptedModel.layer([ScriptedModel.text("x")]), Tools.layer()))
    ))))

  it.scoped("4.5 Q2: a header changed by onRequest logs RH(change); an unchanged one logs nothing", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const hooks = yield* Hooks
      yield* hooks.onRequest((input, next) => input.turn === 2 ? Effect.map(next(), (c) => ({ ...c, system: "changed" })) : next())
      for (const id of ["A", "B", "C"]) {
        yield* driver.followup(user(id))
        yield* driver.whenIdle
      }
      // Q1: after the first request the seed is the config of the last logged header.
      expect((yield* shape).filter((s) => s.startsWith("RH"))).toEqual(["RH(initial)", "RH(change)"])
      const rs = yield* requests
      expect(rs.map((r) => r.system)).toEqual(["sys", "changed", "changed"])
      expect(rs[0]).toMatchObject({ provider: "p", model: "m", system: "sys", maxTokens: 100, temperature: 0.5, tools: [] })
    }).pipe(Effect.provide(scenario([ScriptedModel.text("a"), ScriptedModel.text("b"), ScriptedModel.text("c")], {
      agent: { system: "sys", maxTokens: 100, temperature: 0.5 }
    }))))

  it.scoped("4.5 Q5: a stream that ends without finish gets a synthetic finish error NO_FINISH", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect((yield* shape).slice(-2)).toEqual(["SE(1,1)", "TE(1,error(NO_FINISH))"])
    }).pipe(Effect.provide(scenario([ScriptedModel.chunks([{ type: "block-start", index: 0, block: "text" }, { type: "text-delta", index: 0, text: "x" }])]))))

  it.scoped("4.5 Q5: a delta for an unopened index gives MALFORMED_STREAM and is not logged", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      const s = yield* shape
      expect(s.slice(-5)).toEqual(["RH(initial)", "CH(block-start)", "CH(finish error)", "SE(1,1)", "TE(1,error(MALFORMED_STREAM))"])
    }).pipe(Effect.provide(scenario([ScriptedModel.chunks([{ type: "block-start", index: 0, block: "text" }, { type: "text-delta", index: 3, text: "x" }, { type: "finish", finish: { kind: "stop" } }])]))))

  it.scoped("4.5: a listener's Retry is logged with the rounded delay and slept on the Clock; retryAfterMs raises the default delay", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const hooks = yield* Hooks
      yield* hooks.onRequestError((input, next) => input.attempt === 1 ? Effect.succeed({ _tag: "Retry" as const, delay: decimalDelay }) : next())
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "llm/retry")
      expect((yield* dataOfType("llm/retry"))[0]!.delayMs).toBe(1501)
      yield* TestClock.adjust("1501 millis")
      yield* until(Effect.map(dataOfType("llm/retry"), (a) => a.length === 2))
      expect((yield* dataOfType("llm/retry"))[1]!.delayMs).toBe(5000)
      yield* TestClock.adjust("5 seconds")
      yield* driver.whenIdle
      expect(yield* texts).toEqual(["A"])
      expect((yield* shape).slice(-1)).toEqual(["TE(1,completed)"])
    }).pipe(Effect.provide(scenario([
      ScriptedModel.fail({ message: "x", code: "OVERLOADED" }),
      ScriptedModel.fail({ message: "y", code: "X", status: 500, retryAfterMs: 5000 }),
      ScriptedModel.text("ok")
    ]))))

  it.scoped("4.5: retryable false, a provider-side aborted finish and an unknown code are not retried", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      for (const id of ["A", "B", "C"]) {
        yield* driver.followup(user(id))
        yield* driver.whenIdle
      }
      expect((yield* shape).filter((s) => s.startsWith("RT"))).toEqual([])
      expect((yield* shape).filter((s) => s.startsWith("TE"))).toEqual(["TE(1,error(RATE_LIMIT))", "TE(2,error(ABORTED))", "TE(3,error(WEIRD))"])
    }).pipe(Effect.provide(scenario([
      ScriptedModel.fail({ message: "x", code: "RATE_LIMIT", status: 429, retryable: false }),
      ScriptedModel.fail({ message: "y", code: "ABORTED" }, { finish: "aborted" }),
      ScriptedModel.fail({ message: "z", code: "WEIRD", status: 400 })
    ]))))

  it.scoped("3.10/6.2: every event time is the Clock time at commit", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* TestClock.adjust("3 seconds")
      yield* driver.inject(plugin("C"))
      yield* TestClock.adjust("2 seconds")
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      const times = (yield* events).map((e) => e.time)
      expect(times[0]).toBe(3000)
      expect(times.slice(1).every((t) => t === 5000)).toBe(true)
    }).pipe(Effect.provide(scenario([ScriptedModel.text("a")]))))

  it.scoped("3.10: live order of a wake and the stream of the log replays then follows", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const log = yield* SessionLog
      const live = yield* recordLive
      yield* driver.inject(plugin("C"))
      const seen = yield* Ref.make<ReadonlyArray<number>>([])
      yield* Effect.forkScoped(Stream.runForEach(log.stream(1), (e) => Ref.update(seen, (a) => [...a, e.seq])))
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      yield* settle
      const total = (yield* events).length
      expect(yield* Ref.get(seen)).toEqual(Array.from({ length: total - 1 }, (_, i) => i + 1))
      expect((yield* live).map(liveNotation)).toEqual([
        "inserted(C)", "inserted(A)", "status(running)", "claimed(C,1)", "claimed(A,1)", "status(idle)"
      ])
    }).pipe(Effect.provide(scenario([ScriptedModel.text("a")]))))
})

const decimalDelay = Duration.millis(1500.6)

describe("maintenance and subscribers at the edges", () => {
  // SPEC 3.6: "If a cause was recorded before the task exits: a success still returns its value; a failure or
  // interruption gives `MaintenanceAborted {cause}`". A task that masks interruption to its very end cannot keep
  // its value: Effect delivers the pending interruption when the masked region ends and drops the value (the same
  // happens to any interrupted fiber), so the task's exit is an interruption and the result `MaintenanceAborted`.
  it.scoped("3.6: a task that masks interruption to its end and succeeds after a cancel ends MaintenanceAborted", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const G = gate()
      const task = yield* Effect.fork(driver.runMaintenance(Effect.uninterruptible(Effect.as(Deferred.await(G), 42))))
      yield* settle
      yield* driver.cancel(CancelCause.user)
      // Let the driver deliver the interruption to the (masked) task before it completes.
      yield* settle
      yield* open(G)
      const exit = yield* Fiber.await(task)
      expect(exit).toEqual(Exit.fail(new MaintenanceAborted({ cause: CancelCause.user })))
      expect(yield* driver.status).toBe("idle")
    }).pipe(Effect.provide(scenario([]))))

  // SPEC 3.10: "Observers are asynchronous: each subscriber has its own unbounded buffer; a slow or failing
  // subscriber never blocks, vetoes or interrupts the loop or other subscribers." SPEC 3.7 step 5 ends
  // `SessionLog.stream` / `Driver.events` / `statusChanges`; notifications committed before disposal were
  // already delivered to each subscriber's buffer.
  it.scoped("3.10/3.7: a subscription queue keeps the notifications committed before disposal", () =>
    Effect.gen(function*() {
      const storeCtx = yield* Layer.build(SessionStore.layerMemory)
      const { scope, driver } = yield* buildIn(storeCtx, [])
      const queue = yield* driver.subscribe
      yield* driver.inject(plugin("C"))
      yield* Scope.close(scope, Exit.void)
      const taken = yield* Effect.exit(Queue.takeAll(queue))
      expect(Exit.isSuccess(taken) ? [...taken.value].map(liveNotation) : taken).toEqual(["inserted(C)"])
    }))

  it.scoped("3.10/3.7: a slow Driver.events consumer still receives every notification committed before disposal", () =>
    Effect.gen(function*() {
      const storeCtx = yield* Layer.build(SessionStore.layerMemory)
      const { scope, driver } = yield* buildIn(storeCtx, [])
      const G = gate()
      const seen: Array<string> = []
      const consumer = yield* Effect.fork(Stream.runForEach(driver.events, (e) =>
        Effect.zipRight(Effect.sync(() => seen.push(liveNotation(e))), Deferred.await(G))))
      yield* settle
      yield* driver.inject(plugin("C1"))
      yield* driver.inject(plugin("C2"))
      yield* settle
      yield* Scope.close(scope, Exit.void)
      yield* open(G)
      yield* Fiber.await(consumer)
      expect(seen).toEqual(["inserted(C1)", "inserted(C2)"])
    }))

  it.scoped("3.5/3.7: a slow statusChanges consumer still receives the final idle of a disposed agent (P38 trace)", () =>
    Effect.gen(function*() {
      const storeCtx = yield* Layer.build(SessionStore.layerMemory)
      const { scope, driver, log } = yield* buildIn(storeCtx, [ScriptedModel.hang({ text: "partial" })])
      const G = gate()
      const seen: Array<string> = []
      const consumer = yield* Effect.fork(Stream.runForEach(driver.statusChanges, (status) =>
        Effect.zipRight(Effect.sync(() => seen.push(status)), Deferred.await(G))))
      yield* settle
      yield* driver.followup(user("A"))
      yield* until(Effect.map(log.events, (es) => es.some((e) => e.type === "assistant/chunk")))
      yield* Scope.close(scope, Exit.void)
      yield* open(G)
      yield* Fiber.await(consumer)
      expect(seen).toEqual(["idle", "running", "idle"])
    }))
})

