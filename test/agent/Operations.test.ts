/**
 * The driver's operations through an agent (SPEC 3.1-3.7, 0.3-0.4): check order, acknowledgement,
 * phases, send family, whenIdle, callers, waiters and observers, maintenance at the edges.
 */
import { describe, expect, it } from "@effect/vitest"
import { Cause, Context, Deferred, Effect, Exit, Fiber, Layer, Option, Queue, Schema, Scope, Stream } from "effect"
import {
  AgentDisposed,
  CancelCause,
  Driver,
  DuplicateMessage,
  Hooks,
  InvalidEvent,
  InvalidSplice,
  MaintenanceAborted,
  MalformedLog,
  MemoryStoreControl,
  PersistenceError,
  PreStep,
  PreStepDecision,
  ScriptedModel,
  SessionId,
  SessionLog,
  SessionStore,
  Tool
} from "../../src/index.js"
import type { UserMessage } from "../../src/index.js"
import {
  agentOver,
  agentTest,
  asId,
  closeOut,
  dataOfType,
  events,
  gate,
  ids,
  liveNotation,
  liveNotations,
  open,
  plugin,
  reasons,
  recordLive,
  recordStatus,
  requests,
  scenario,
  settle,
  shape,
  TEXT,
  texts,
  until,
  untilEvent,
  user
} from "./harness.js"
import { buildIn, buildOwn, failureOf } from "./stores.js"
import { empty } from "./toolFixtures.js"

const holder: { driver?: Context.Tag.Service<Driver> } = {}

let ran = 0
const counting = Tool.make("t", {
  description: "",
  parameters: Schema.Struct({}),
  execute: () => Effect.sync(() => ran++).pipe(Effect.as("ok"))
})
const hold2 = gate()
const turn1Hold = gate()
const turn2 = gate()

/** Poisons the idle session: an injection whose store append fails three times (two default retries). */
const poison = Effect.gen(function*() {
  const control = yield* MemoryStoreControl
  const driver = yield* Driver
  yield* control.failAppends(3)
  const error = yield* Effect.flip(driver.inject(plugin("P")))
  expect(error).toBeInstanceOf(PersistenceError)
  return error
})

const gateMaxTokens = gate()

describe("3.1 conventions", () => {
  agentTest(
    "3.1: a duplicate and an empty splice are acknowledged only after the earlier events are durable",
    scenario([]),
    function*({ driver, inbox, control }) {
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
      expect(
        yield* Effect.flip(
          driver.inject({ id: "", role: "user", content: [], source: { kind: "user" } } as unknown as UserMessage)
        )
      ).toBeInstanceOf(InvalidEvent)
      yield* control.release
      yield* Fiber.join(first)
      const dup = yield* Fiber.join(duplicate)
      expect(dup._tag === "Left" && dup.left).toBeInstanceOf(DuplicateMessage)
      expect(dup._tag === "Left" && dup.left).toMatchObject({ id: "C", state: "pending" })
      expect(yield* Fiber.join(nothing)).toEqual([])
    }
  )

  agentTest(
    "3.9: the same id twice in one call is reported for the second occurrence with state pending; nothing is written",
    scenario([]),
    function*({ inbox }) {
      const F = user("F")
      const error = yield* Effect.flip(inbox.splice("next-turn", 0, 0, [F, F]))
      expect(error).toBeInstanceOf(DuplicateMessage)
      expect(error).toMatchObject({ id: "F", state: "pending" })
      expect(yield* events).toEqual([])
      expect(yield* inbox.idState(F.id)).toEqual(Option.none())
    }
  )

  agentTest(
    "3.9: a caller message with a reserved id fails InvalidEvent and does not become known",
    scenario([]),
    function*({ driver, inbox }) {
      const m = {
        id: "interrupted-tool-result-x-1",
        role: "user",
        content: [{ type: "text", text: "x" }],
        source: { kind: "user" }
      } as unknown as UserMessage
      expect(yield* Effect.flip(driver.followup(m))).toBeInstanceOf(InvalidEvent)
      expect(yield* inbox.idState(m.id)).toEqual(Option.none())
      expect(yield* events).toEqual([])
    }
  )

  agentTest(
    "3.1: a message is copied, deep-frozen and stored deep-equal to the input",
    scenario([]),
    function*({ driver, inbox }) {
      const input = {
        id: "M",
        role: "user",
        content: [{ type: "text", text: "hello" }],
        source: { kind: "plugin", plugin: "p", extra: { n: [1, 2] } }
      }
      yield* driver.inject(input as unknown as UserMessage)
      const stored = (yield* inbox.nextStep)[0]!
      expect(stored).toEqual(input)
      expect(stored).not.toBe(input)
      expect(
        Object.isFrozen(stored) && Object.isFrozen(stored.content[0]) && Object.isFrozen((stored.source as any).extra.n)
      ).toBe(true)
      input.content[0]!.text = "changed"
      expect(((yield* inbox.nextStep)[0]!.content[0] as any).text).toBe("hello")
    }
  )

  it.scoped("3.1: check order: a disposed agent fails AgentDisposed before validating input", () =>
    Effect.gen(function*() {
      const { scope, driver, inbox, log } = yield* buildOwn([])
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
  agentTest(
    "3.3: a steer while running-aborted is re-routed to next-turn and latched",
    scenario([ScriptedModel.hang({}, { onInterrupt: Deferred.await(G33) }), ScriptedModel.text("s")]),
    function*({ driver }) {
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
    }
  )

  agentTest(
    "3.3: an inject while running-aborted is parked: no latch, no replay",
    scenario([ScriptedModel.hang({ text: "x" })]),
    function*({ driver, inbox }) {
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "assistant/chunk")
      yield* driver.cancel(CancelCause.user, { keepInbox: true })
      yield* driver.inject(plugin("C"))
      yield* driver.whenIdle
      expect((yield* shape).filter((s) => s.startsWith("TS"))).toEqual(["TS(1)"])
      expect((yield* inbox.nextStep).map((m) => m.id)).toEqual(["C"])
    }
  )

  agentTest(
    "3.3: a steer during maintenance inserts into next-step and is latched",
    scenario([ScriptedModel.text("s")]),
    function*({ driver }) {
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
    }
  )

  agentTest(
    "3.6: a keepInbox cancel of a maintenance task keeps wakes latched before it",
    scenario([ScriptedModel.text("w")]),
    function*({ driver }) {
      const task = yield* Effect.fork(driver.runMaintenance(Effect.never))
      yield* settle
      yield* driver.followup(user("W"))
      yield* driver.cancel(CancelCause.user, { keepInbox: true })
      const failure = yield* Effect.flip(Fiber.join(task))
      expect(failure).toBeInstanceOf(MaintenanceAborted)
      yield* driver.whenIdle
      expect(yield* texts).toEqual(["W"])
      expect(yield* closeOut).toEqual([])
    }
  )

  agentTest(
    "3.3: a steer during a cancelled maintenance task is re-routed to next-turn",
    scenario([ScriptedModel.text("s")]),
    function*({ driver }) {
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
    }
  )

  agentTest(
    "3.6: a task's own failure is returned; a defect dies and is published as agent/error",
    scenario([]),
    function*({ driver }) {
      const live = yield* recordLive
      expect(yield* Effect.flip(driver.runMaintenance(Effect.fail("own")))).toBe("own")
      const exit = yield* Effect.exit(driver.runMaintenance(Effect.die("kaput")))
      expect(Exit.isFailure(exit) && Cause.isDie(exit.cause)).toBe(true)
      expect((yield* live).filter((e) => e.type === "agent/error").length).toBe(1)
      expect(yield* driver.status).toBe("idle")
      expect(yield* events).toEqual([])
    }
  )

  agentTest(
    "3.5: whenIdle awaited from a hook of the activity dies instead of hanging",
    scenario([ScriptedModel.text("a")]),
    function*({ driver }) {
      const seen = yield* Deferred.make<Exit.Exit<void>>()
      yield* (yield* PreStep).register((_i, next) =>
        Effect.zipRight(Effect.flatMap(Effect.exit(driver.whenIdle), (exit) => Deferred.succeed(seen, exit)), next())
      )
      yield* driver.followup(user("A"))
      const exit = yield* Deferred.await(seen)
      expect(Exit.isFailure(exit) && Cause.isDie(exit.cause)).toBe(true)
      yield* driver.whenIdle
    }
  )

  agentTest(
    "3.5: statusChanges emits the current status then each change, never twice in a row",
    scenario([ScriptedModel.text("a"), ScriptedModel.text("b"), ScriptedModel.text("d")]),
    function*({ driver }) {
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
    }
  )

  it.scoped("3.7: between the disposal start and the end, deliveries from a tool body are inserted and never run", () =>
    Effect.gen(function*() {
      const { scope, driver, log, storeCtx } = yield* buildOwn([
        ScriptedModel.hang({}, {
          onInterrupt: Effect.suspend(() => Effect.ignore(holder.driver!.followup(user("late"))))
        })
      ])
      holder.driver = driver
      yield* driver.followup(user("A"))
      yield* until(Effect.map(log.events, (es) => es.some((e) => e.type === "request/header")))
      yield* settle
      yield* Scope.close(scope, Exit.void)
      const stored = (yield* Context.get(storeCtx, SessionStore).load(SessionId.make("s"))).events
      const types = stored.map((e) => e.type)
      expect(types.filter((t) => t === "turn/start").length).toBe(1)
      expect(
        stored.some((e) =>
          e.type === "agent/inbox/spliced" && (e.data as any).inserted.some((m: UserMessage) => m.id === "late")
        )
      ).toBe(true)
      expect((stored[stored.length - 1]!.data as any).reason).toEqual({ kind: "aborted", reason: { kind: "disposed" } })
    }))
})

describe("maintenance and subscribers at the edges", () => {
  // SPEC 3.6: "If a cause was recorded before the task exits: a success still returns its value; a failure or
  // interruption gives `MaintenanceAborted {cause}`". A task that masks interruption to its very end cannot keep
  // its value: Effect delivers the pending interruption when the masked region ends and drops the value (the same
  // happens to any interrupted fiber), so the task's exit is an interruption and the result `MaintenanceAborted`.
  agentTest(
    "3.6: a task that masks interruption to its end and succeeds after a cancel ends MaintenanceAborted",
    scenario([]),
    function*({ driver }) {
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
    }
  )

  // SPEC 3.10: "Observers are asynchronous: each subscriber has its own unbounded buffer; a slow or failing
  // subscriber never blocks, vetoes or interrupts the loop or other subscribers." SPEC 3.7 step 5 ends
  // `SessionLog.stream` / `Driver.events` / `statusChanges`; notifications committed before disposal were
  // already delivered to each subscriber's buffer.
  it.scoped("3.10/3.7: a subscription queue keeps the notifications committed before disposal", () =>
    Effect.gen(function*() {
      const { scope, driver } = yield* buildOwn([])
      const queue = yield* driver.subscribe
      yield* driver.inject(plugin("C"))
      yield* Scope.close(scope, Exit.void)
      const taken = yield* Effect.exit(Queue.takeAll(queue))
      expect(Exit.isSuccess(taken) ? [...taken.value].map(liveNotation) : taken).toEqual(["inserted(C)"])
    }))

  it.scoped("3.10/3.7: a slow Driver.events consumer still receives every notification committed before disposal", () =>
    Effect.gen(function*() {
      const { scope, driver } = yield* buildOwn([])
      const G = gate()
      const seen: Array<string> = []
      const consumer = yield* Effect.fork(
        Stream.runForEach(driver.events, (e) =>
          Effect.zipRight(
            Effect.sync(() => seen.push(liveNotation(e))),
            Deferred.await(G)
          ))
      )
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
      const { scope, driver, log } = yield* buildOwn([ScriptedModel.hang({ text: "partial" })])
      const G = gate()
      const seen: Array<string> = []
      const consumer = yield* Effect.fork(
        Stream.runForEach(driver.statusChanges, (status) =>
          Effect.zipRight(
            Effect.sync(() => seen.push(status)),
            Deferred.await(G)
          ))
      )
      yield* settle
      yield* driver.followup(user("A"))
      yield* until(Effect.map(log.events, (es) => es.some((e) => e.type === "assistant/chunk")))
      yield* Scope.close(scope, Exit.void)
      yield* open(G)
      yield* Fiber.await(consumer)
      expect(seen).toEqual(["idle", "running", "idle"])
    }))
})

describe("3.1/3.4-3.7 operations", () => {
  agentTest(
    "3.1: input-only failures (InvalidSplice, InvalidEvent) complete at once while storage is held",
    scenario([]),
    function*({ driver, inbox, control }) {
      yield* control.hold
      const pending = yield* Effect.fork(driver.inject(plugin("C")))
      yield* settle
      expect(pending.unsafePoll()).toBeNull()
      const splice = yield* Effect.fork(inbox.splice("next-step", Number.NaN, 0, []))
      const invalid = yield* Effect.fork(
        driver.followup({ id: "", role: "user", content: [], source: { kind: "user" } } as any)
      )
      yield* settle
      const s = splice.unsafePoll()
      const i = invalid.unsafePoll()
      expect(s !== null && failureOf(s)).toBeInstanceOf(InvalidSplice)
      expect(i !== null && failureOf(i)).toBeInstanceOf(InvalidEvent)
      yield* control.release
      yield* Fiber.join(pending)
    }
  )

  agentTest(
    "3.4/2.6: a hook cause (constructor or plain object) is recorded on turn/end as aborted(hook)",
    scenario([ScriptedModel.hang({ text: "par" }), ScriptedModel.hang({})]),
    function*({ driver }) {
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "assistant/chunk")
      yield* driver.cancel(CancelCause.hook("too long"))
      yield* driver.whenIdle
      yield* driver.followup(user("B"))
      yield* untilEvent((e) => e.type === "turn/start" && (e.data as any).turn === 2)
      yield* driver.cancel({ kind: "hook", reason: "plain" })
      yield* driver.whenIdle
      const ends = yield* dataOfType("turn/end")
      expect(ends.map((d) => d.reason)).toEqual([
        { kind: "aborted", reason: { kind: "hook", reason: "too long" } },
        { kind: "aborted", reason: { kind: "hook", reason: "plain" } }
      ])
      expect(yield* closeOut).toEqual([])
    }
  )

  agentTest(
    "3.4: cancel with a parent cause while idle and empty is a no-op; nothing is armed for later work",
    scenario([ScriptedModel.text("ok")]),
    function*({ driver }) {
      yield* driver.cancel(CancelCause.parent)
      yield* driver.cancel(CancelCause.parent, { keepInbox: true })
      expect(yield* events).toEqual([])
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect((yield* dataOfType("turn/end")).map((d) => d.reason)).toEqual([{ kind: "completed" }])
    }
  )

  it.scoped("3.5/3.7: on a disposed agent whenIdle resolves, status is idle, mutating operations fail AgentDisposed, reads return the final state", () =>
    Effect.gen(function*() {
      const { driver, inbox, log, scope } = yield* buildOwn([ScriptedModel.text("ok")])
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      yield* inbox.append("next-turn", user("Q"))
      const final = yield* log.events
      yield* Scope.close(scope, Exit.void)
      yield* driver.whenIdle
      expect(yield* driver.status).toBe("idle")
      for (
        const op of [
          driver.followup(user("B")),
          driver.cancel(CancelCause.user),
          driver.runMaintenance(Effect.void),
          inbox.append("next-step", user("C")),
          inbox.remove(asId("Q")),
          inbox.clear,
          log.append({ type: "x/ext", data: {}, ignorable: true })
        ]
      ) {
        expect(yield* Effect.flip(op as Effect.Effect<unknown, unknown>)).toBeInstanceOf(AgentDisposed)
      }
      expect(yield* log.events).toEqual(final)
      expect((yield* inbox.nextTurn).map((m) => m.id)).toEqual(["Q"])
    }))

  agentTest(
    "3.6: whenIdle waits for a maintenance task (phase not Idle) while status stays idle; the task's value is returned",
    scenario([]),
    function*({ driver }) {
      const g = gate()
      const task = yield* Effect.fork(driver.runMaintenance(Effect.as(Deferred.await(g), 42)))
      yield* settle
      expect(yield* driver.status).toBe("idle")
      const idle = yield* Effect.fork(driver.whenIdle)
      yield* settle
      expect(idle.unsafePoll()).toBeNull()
      yield* open(g)
      expect(yield* Fiber.join(task)).toBe(42)
      yield* Fiber.join(idle)
      expect(yield* events).toEqual([])
    }
  )

  agentTest(
    "3.6: a keepInbox cancel of a maintenance task that then fails gives MaintenanceAborted {cause}",
    scenario([]),
    function*({ driver }) {
      const g = gate()
      const task = yield* Effect.fork(Effect.flip(driver.runMaintenance(
        Effect.zipRight(Effect.uninterruptible(Deferred.await(g)), Effect.fail("own failure" as const))
      )))
      yield* settle
      yield* driver.cancel(CancelCause.hook("stop"), { keepInbox: true })
      yield* open(g)
      const error = yield* Fiber.join(task)
      expect(error).toBeInstanceOf(MaintenanceAborted)
      expect(error).toMatchObject({ cause: { kind: "hook", reason: "stop" } })
      expect(yield* driver.status).toBe("idle")
    }
  )

  agentTest(
    "3.4/3.6 (6.3): on a poisoned session cancel and runMaintenance fail PersistenceError and change nothing",
    scenario([]),
    function*({ driver, control }) {
      yield* control.failAppends(3)
      expect(yield* Effect.flip(driver.inject(plugin("C")))).toBeInstanceOf(PersistenceError)
      const before = yield* events
      expect(yield* Effect.flip(driver.cancel(CancelCause.user))).toBeInstanceOf(PersistenceError)
      expect(yield* Effect.flip(driver.runMaintenance(Effect.void))).toBeInstanceOf(PersistenceError)
      expect(yield* Effect.flip((yield* SessionLog).flush)).toBeInstanceOf(PersistenceError)
      expect(yield* events).toEqual(before)
      yield* driver.whenIdle
    }
  )
})

describe("3.1 acknowledgement of operations that write nothing", () => {
  agentTest(
    "3.1: remove/replace of an unknown id, an empty clear and a no-op cancel are acknowledged only after earlier events are durable",
    scenario([]),
    function*({ driver, inbox, control }) {
      yield* control.hold
      const first = yield* Effect.fork(driver.send(user("Q"), "next-turn", false))
      yield* settle
      const ops = [
        inbox.remove(asId("nobody")),
        inbox.replace(asId("nobody"), user("Z")),
        driver.cancel(CancelCause.user, { keepInbox: true })
      ] as ReadonlyArray<Effect.Effect<unknown, unknown>>
      const fibers = []
      for (const op of ops) fibers.push(yield* Effect.fork(op))
      yield* settle
      for (const f of [first, ...fibers]) expect(f.unsafePoll()).toBeNull()
      yield* control.release
      yield* Fiber.join(first)
      for (const f of fibers) yield* Fiber.join(f)
      expect(yield* (yield* SessionLog).durableSeq).toBe(0)
    }
  )

  // 3.1 lists "runMaintenance's phase switch" among the mutating operations whose Effect "completes only
  // after every event in the log when its transaction committed is durably committed".
  agentTest(
    "3.1/3.6: runMaintenance completes only after the events logged before its phase switch are durable",
    scenario([ScriptedModel.text("ok")]),
    function*({ driver, log, control }) {
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      const last = (yield* events).length - 1
      // Loop events after the last checkpoint are written by the window (never elapsed under TestClock).
      expect(yield* log.durableSeq).toBeLessThan(last)
      yield* control.hold
      const task = yield* Effect.fork(driver.runMaintenance(Effect.succeed(1)))
      yield* settle
      const early = task.unsafePoll()
      const durableWhileHeld = yield* log.durableSeq
      yield* control.release
      expect(early).toBeNull()
      expect(durableWhileHeld).toBeLessThan(last)
      expect(yield* Fiber.join(task)).toBe(1)
      expect(yield* log.durableSeq).toBe(last)
    }
  )
})

describe("3.5 whenIdle from the activity", () => {
  agentTest(
    "3.5: whenIdle awaited from a maintenance task of the same driver dies instead of hanging",
    scenario([]),
    function*({ driver }) {
      const exit = yield* Effect.exit(driver.runMaintenance(driver.whenIdle))
      expect(Exit.isFailure(exit) && Cause.isDie(exit.cause)).toBe(true)
      expect(yield* driver.status).toBe("idle")
      yield* driver.whenIdle
    }
  )

  const waiter = { driver: undefined as Context.Tag.Service<Driver> | undefined }
  const waits = Tool.make("waits", {
    description: "awaits whenIdle",
    parameters: empty,
    execute: () => Effect.as(waiter.driver!.whenIdle, "never")
  })
  agentTest(
    "3.5: whenIdle awaited from a tool body dies; the defect is the body's outcome (TOOL_DEFECT)",
    scenario(
      [ScriptedModel.response({ toolCalls: [{ id: "c1", name: "waits", arguments: {} }] }), ScriptedModel.text("ok")],
      { tools: [waits] }
    ),
    function*({ driver }) {
      waiter.driver = driver
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect((yield* dataOfType("tool/result"))[0]!.error).toEqual({ name: "ToolDefect", code: "TOOL_DEFECT" })
      expect(yield* closeOut).toEqual([])
    }
  )
})

describe("K13 / D5: operations from observers, hooks and stream effects", () => {
  agentTest(
    "K3/K13: a broad cancel from a Driver.events observer of the claim, after it queued Q, loses the batch and cancels Q; no step",
    scenario([ScriptedModel.text("x")]),
    function*({ driver, inbox, preStep: pre }) {
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
      expect(yield* shape).toEqual([
        "INS(nt,0,[A])",
        "TS(1)",
        "CLM(nt,0,1)",
        "INS(nt,0,[Q])",
        "CAN(nt,0,1)",
        "TE(1,aborted(user))"
      ])
      expect(yield* liveNotations(live)).toEqual([
        "inserted(A)",
        "status(running)",
        "claimed(A,1)",
        "inserted(Q)",
        "discarded(Q)",
        "status(idle)"
      ])
      expect(yield* status).toEqual(["idle", "running", "idle"])
      expect(yield* inbox.hasPending).toBe(false)
      expect(yield* requests).toHaveLength(0)
    }
  )

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
        "TC(c1)",
        "INS(ns,0,[I-c1])",
        "TR(c1)",
        "INS(ns,1,[X])",
        "SE(1,1)",
        "CLM(ns,0,2)",
        "SS(1,2)",
        "UM(I-c1)",
        "UM(X)"
      ])
      expect(s.at(-1)).toBe("TE(1,completed)")
      expect(yield* texts).toEqual(["A", "I-c1", "X"])
    }).pipe(
      Effect.provide(
        scenario([
          ScriptedModel.response({ toolCalls: [{ id: "c1", name: "ctx", arguments: {} }] }),
          ScriptedModel.text("done")
        ], {
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

  agentTest(
    "D5/4.8: a follow-up queued from an onRequestError listener that fails the attempt runs as the next turn of the chain",
    scenario([ScriptedModel.fail({ message: "busy", code: "RATE_LIMIT", status: 429 }), ScriptedModel.text("x")]),
    function*({ driver, hooks }) {
      let once = false
      yield* hooks.onRequestError((_, next) =>
        once
          ? next()
          : Effect.zipRight(
            Effect.sync(() => (once = true)),
            Effect.zipRight(driver.followup(user("B")), Effect.succeed({ _tag: "Fail" } as const))
          )
      )
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect(yield* shape).toEqual([
        "INS(nt,0,[A])",
        "TS(1)",
        "CLM(nt,0,1)",
        "SS(1,1)",
        "UM(A)",
        "RH(initial)",
        "CH(finish error)",
        "INS(nt,0,[B])",
        "SE(1,1)",
        "TE(1,error(RATE_LIMIT))",
        "TS(2)",
        "CLM(nt,0,1)",
        "SS(2,1)",
        "UM(B)",
        ...TEXT,
        "SE(2,1)",
        "TE(2,completed)"
      ])
    }
  )

  const steerCell: { effect: Effect.Effect<void, unknown> } = { effect: Effect.void }
  it.scoped("D5/3.3: a steer issued from a model stream effect lands after the chunk already logged and is claimed at the boundary of the same turn", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      steerCell.effect = driver.steer(user("S"))
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect(yield* shape).toEqual([
        "INS(nt,0,[A])",
        "TS(1)",
        "CLM(nt,0,1)",
        "SS(1,1)",
        "UM(A)",
        "RH(initial)",
        "CH(block-start)",
        "INS(ns,0,[S])",
        "CH(text-delta)",
        "CH(block-end)",
        "CH(finish stop)",
        "AM",
        "SE(1,1)",
        "CLM(ns,0,1)",
        "SS(1,2)",
        "UM(S)",
        ...TEXT,
        "SE(1,2)",
        "TE(1,completed)"
      ])
    }).pipe(
      Effect.provide(
        scenario([
          ScriptedModel.text("one", { during: Effect.suspend(() => steerCell.effect) }),
          ScriptedModel.text("two")
        ])
      )
    ))

  const cancelCell: { effect: Effect.Effect<void, unknown> } = { effect: Effect.void }
  it.scoped("K5/K13: a cancel issued from a model stream effect before any text is visible: no AM!, SE, TE(aborted)", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      cancelCell.effect = driver.cancel(CancelCause.hook("stream"))
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect(yield* shape).toEqual([
        "INS(nt,0,[A])",
        "TS(1)",
        "CLM(nt,0,1)",
        "SS(1,1)",
        "UM(A)",
        "RH(initial)",
        "CH(block-start)",
        "SE(1,1)",
        "TE(1,aborted(hook))"
      ])
    }).pipe(
      Effect.provide(
        scenario([ScriptedModel.text("one", { deltas: ["a", "b"], during: Effect.suspend(() => cancelCell.effect) })])
      )
    ))

  it.scoped("K13/4.6: a ToolPre listener that cancels and allows: the call gets TR⊘ (its body never runs); the later call a ⟨TC TR⊘⟩ pair", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const hooks = yield* Hooks
      yield* hooks.onToolPre((_, next) => Effect.zipRight(driver.cancel(CancelCause.user), next()))
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      const s = yield* shape
      expect(s.slice(s.indexOf("AM"))).toEqual([
        "AM",
        "TC(c1)",
        "TR⊘(c1)",
        "TC(c2)",
        "TR⊘(c2)",
        "SE(1,1)",
        "TE(1,aborted(user))"
      ])
      expect(ran).toBe(0)
    }).pipe(
      Effect.provide(
        scenario([
          ScriptedModel.response({
            toolCalls: [{ id: "c1", name: "t", arguments: {} }, { id: "c2", name: "t", arguments: {} }]
          })
        ], { tools: [counting] })
      )
    ))
})

describe("3.5: whenIdle", () => {
  agentTest(
    "3.5: whenIdle awaited from a fiber forked by a maintenance task dies (the activity mark is inherited by forks)",
    scenario([]),
    function*({ driver }) {
      const exit = yield* Effect.exit(driver.runMaintenance(Effect.flatMap(Effect.fork(driver.whenIdle), Fiber.join)))
      expect(Exit.isFailure(exit) && exit.cause._tag === "Die").toBe(true)
      expect(yield* driver.status).toBe("idle")
      yield* driver.whenIdle
    }
  )

  agentTest(
    "3.5: whenIdle issued during turn 1 with a follow-up queued resolves only after the continued turn ends",
    scenario([ScriptedModel.text("one"), ScriptedModel.text("two", { awaitBefore: Deferred.await(turn2) })]),
    function*({ driver }) {
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
    }
  )
})

describe("3.1 / 3.5 / 3.8 / 3.10: callers, waiters and observers", () => {
  agentTest(
    "3.10: a subscriber that dies on its first notification blocks neither the loop nor another subscriber",
    scenario([ScriptedModel.text("one"), ScriptedModel.text("two")]),
    function*({ driver }) {
      const dead = yield* Effect.forkScoped(
        Stream.runForEach(driver.events, () => Effect.dieMessage("observer failed"))
      )
      const unread = yield* driver.subscribe
      const live = yield* recordLive
      yield* settle
      yield* driver.followup(user("A"))
      yield* driver.followup(user("B"))
      expect(yield* closeOut).toEqual([])
      expect(Exit.isFailure(yield* Fiber.await(dead))).toBe(true)
      expect(yield* liveNotations(live)).toEqual([
        "inserted(A)",
        "status(running)",
        "claimed(A,1)",
        "inserted(B)",
        "claimed(B,2)",
        "status(idle)"
      ])
      expect((yield* unread.takeAll).length).toBe(6)
      expect(yield* texts).toEqual(["A", "B"])
    }
  )

  agentTest(
    "3.5/3.6: whenIdle issued during maintenance follows the latched replay; statusChanges shows one running interval",
    scenario([ScriptedModel.text("one", { awaitBefore: Deferred.await(turn1Hold) })]),
    function*({ driver }) {
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
    }
  )

  agentTest(
    "3.1: a followup whose caller is interrupted while its durability is pending still runs its turn",
    scenario([ScriptedModel.text("x")]),
    function*({ driver, control }) {
      yield* control.hold
      const caller = yield* Effect.fork(driver.followup(user("A")))
      yield* until(Effect.map(shape, (s) => s.includes("TS(1)")))
      yield* settle
      expect(caller.unsafePoll()).toBeNull()
      yield* Fiber.interrupt(caller)
      yield* control.release
      expect(yield* closeOut).toEqual([])
      expect(yield* shape).toEqual([
        "INS(nt,0,[A])",
        "TS(1)",
        "CLM(nt,0,1)",
        "SS(1,1)",
        "UM(A)",
        "RH(initial)",
        ...TEXT,
        "SE(1,1)",
        "TE(1,completed)"
      ])
    }
  )

  agentTest(
    "3.8/7.6: of two wakes latched during an aborted turn, removing one still replays the other at convergence",
    scenario([ScriptedModel.hang({}, { onInterrupt: Deferred.await(hold2) }), ScriptedModel.text("x")]),
    function*({ driver, inbox }) {
      yield* driver.followup(user("A"))
      yield* until(Effect.map(shape, (s) => s.includes("RH(initial)")))
      yield* driver.cancel(CancelCause.user, { keepInbox: true })
      yield* driver.followup(user("B"))
      yield* driver.steer(user("C"))
      expect(yield* inbox.remove(asId("B"))).toBe(true)
      yield* open(hold2)
      expect(yield* closeOut).toEqual([])
      const s = yield* shape
      expect(s.slice(s.indexOf("RH(initial)") + 1, s.indexOf("RH(initial)") + 11)).toEqual([
        "INS(nt,0,[B])",
        "INS(nt,1,[C])",
        "CAN(nt,0,1)",
        "SE(1,1)",
        "TE(1,aborted(user))",
        "TS(2)",
        "CLM(nt,0,1)",
        "SS(2,1)",
        "UM(C)",
        "CH(block-start)"
      ])
      expect(s.at(-1)).toBe("TE(2,completed)")
    }
  )
})

describe("3.10 / 3.5 / 7.1: delivery timing, whenIdle in the stream, concurrent cancels", () => {
  agentTest(
    "3.10: a wake's notifications reach a subscriber before durability, while the followup still awaits its acknowledgement",
    scenario([ScriptedModel.text("x")]),
    function*({ driver, control }) {
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
    }
  )

  const idleCell: { effect: Effect.Effect<void, unknown> } = { effect: Effect.void }
  agentTest(
    "3.5: whenIdle awaited from a model stream effect of the same driver dies instead of hanging; the turn ends error(UNKNOWN)",
    scenario([ScriptedModel.text("x", { awaitBefore: Effect.suspend(() => idleCell.effect) })]),
    function*({ driver }) {
      idleCell.effect = driver.whenIdle
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect(yield* shape).toEqual([
        "INS(nt,0,[A])",
        "TS(1)",
        "CLM(nt,0,1)",
        "SS(1,1)",
        "UM(A)",
        "RH(initial)",
        "CH(finish error)",
        "SE(1,1)",
        "TE(1,error(UNKNOWN))"
      ])
    }
  )

  agentTest(
    "7.1: concurrent cancels from two fibers while streaming: one cause is recorded, the broad one still discards the inbox",
    scenario([ScriptedModel.hang()]),
    function*({ driver, inbox }) {
      yield* driver.followup(user("A"))
      yield* until(Effect.map(shape, (s) => s.includes("RH(initial)")))
      yield* driver.inject(plugin("I"))
      yield* Effect.all([driver.cancel(CancelCause.parent, { keepInbox: true }), driver.cancel(CancelCause.user)], {
        concurrency: "unbounded"
      })
      expect(yield* closeOut).toEqual([])
      const s = yield* shape
      expect(s.slice(s.indexOf("RH(initial)"))).toEqual([
        "RH(initial)",
        "INS(ns,0,[I])",
        "CAN(ns,0,1)",
        "SE(1,1)",
        "TE(1,aborted(parent))"
      ])
      expect(yield* inbox.hasPending).toBe(false)
    }
  )
})

describe("SPEC 3.1 check order and refusals that change nothing", () => {
  agentTest(
    "3.1/6.3: on a poisoned session every inbox mutation fails PersistenceError before input checks; nothing changes",
    scenario([]),
    function*({ driver, inbox, log }) {
      yield* driver.inject(plugin("K"))
      yield* poison
      const before = yield* log.events
      const lists = yield* inbox.snapshot
      const invalid = { id: "", role: "user", content: [], source: { kind: "" } } as unknown as UserMessage
      const refused: ReadonlyArray<Effect.Effect<unknown, unknown>> = [
        inbox.append("next-turn", user("K")), // duplicate id
        inbox.prepend("next-step", invalid), // invalid message
        inbox.append("next-turn", user("N")),
        inbox.splice("next-step", 0, 1, [user("N")]),
        inbox.replace(asId("K"), user("N")),
        inbox.remove(asId("K")),
        driver.send(invalid, "next-turn", true),
        driver.steer(user("K")),
        log.append({ type: "turn/start", data: { turn: 1 } }), // reserved type
        log.append({ type: "x/ext", data: { a: 1 }, ignorable: true })
      ]
      for (const op of refused) {
        const error = yield* Effect.flip(op)
        expect(error).toBeInstanceOf(PersistenceError)
        expect((error as PersistenceError).sessionId).toBe("s")
      }
      expect(yield* log.events).toEqual(before)
      expect(yield* inbox.snapshot).toEqual(lists)
      expect(yield* inbox.idState(asId("N"))).toEqual(Option.none())
      expect(yield* inbox.idState(asId("K"))).toEqual(Option.some("pending"))
      expect(yield* driver.status).toBe("idle")
    }
  )

  it.scoped("3.1/3.7: disposed comes before poisoned: a disposed poisoned agent fails AgentDisposed {sessionId}", () =>
    Effect.gen(function*() {
      const storeCtx = yield* Layer.build(SessionStore.layerMemory)
      const control = Context.get(storeCtx, MemoryStoreControl)
      const { driver, inbox, log, scope } = yield* buildIn(storeCtx, [], { sessionId: "dp" })
      yield* control.failAppends(3)
      expect(yield* Effect.flip(driver.inject(plugin("P")))).toBeInstanceOf(PersistenceError)
      yield* Scope.close(scope, Exit.void)
      const ops: ReadonlyArray<Effect.Effect<unknown, unknown>> = [
        driver.followup(user("A")),
        driver.cancel(CancelCause.user),
        driver.runMaintenance(Effect.void),
        inbox.append("next-step", user("B")),
        inbox.splice("next-turn", NaN, 0, []),
        inbox.replace(asId("x"), user("C")),
        inbox.remove(asId("x")),
        inbox.clear,
        log.append({ type: "turn/start", data: { turn: 1 } })
      ]
      for (const op of ops) {
        const error = yield* Effect.flip(op)
        expect(error).toBeInstanceOf(AgentDisposed)
        expect(error).toMatchObject({ _tag: "AgentDisposed", sessionId: "dp" })
      }
    }))

  agentTest(
    "3.1: message validity before identity: an invalid raw message whose id is known fails InvalidEvent on every delivery path",
    scenario([]),
    function*({ driver, inbox }) {
      yield* driver.inject(plugin("K"))
      const before = yield* events
      const invalid = {
        id: "K",
        role: "user",
        content: [{ type: "text" }],
        source: { kind: "user" }
      } as unknown as UserMessage
      const ops: ReadonlyArray<Effect.Effect<unknown, unknown>> = [
        driver.send(invalid, "next-turn", false),
        driver.followup(invalid),
        driver.steer(invalid),
        driver.inject(invalid),
        inbox.append("next-turn", invalid),
        inbox.prepend("next-step", invalid),
        inbox.splice("next-turn", 0, 0, [invalid]),
        inbox.replace(asId("K"), invalid)
      ]
      for (const op of ops) {
        const error = yield* Effect.flip(op)
        expect(error).toBeInstanceOf(InvalidEvent)
        expect(error).not.toBeInstanceOf(DuplicateMessage)
      }
      expect(yield* events).toEqual(before)
      expect(yield* driver.status).toBe("idle")
    }
  )

  agentTest(
    "3.1/3.9: a valid message with a known id fails DuplicateMessage {id, state} on every delivery path and writes nothing",
    scenario([]),
    function*({ driver, inbox }) {
      yield* driver.inject(plugin("K"))
      yield* inbox.append("next-turn", user("R"))
      yield* inbox.remove(asId("R"))
      const before = yield* events
      const cases: ReadonlyArray<readonly [Effect.Effect<unknown, unknown>, string, string]> = [
        [driver.followup(user("K")), "K", "pending"],
        [driver.steer(user("R")), "R", "discarded"],
        [inbox.prepend("next-turn", user("K")), "K", "pending"],
        [inbox.splice("next-turn", 0, 0, [user("R")]), "R", "discarded"],
        [inbox.replace(asId("K"), user("R")), "R", "discarded"]
      ]
      for (const [op, id, state] of cases) {
        const error = yield* Effect.flip(op)
        expect(error).toBeInstanceOf(DuplicateMessage)
        expect(error).toMatchObject({ _tag: "DuplicateMessage", id, state })
      }
      expect(yield* events).toEqual(before)
      expect(yield* driver.status).toBe("idle")
    }
  )

  agentTest(
    "3.1/8.3: a delivery to a target that is not an inbox list fails InvalidEvent, wakes nothing and writes nothing",
    scenario([]),
    function*({ driver, inbox }) {
      const bogus = "later" as unknown as "next-turn"
      expect(yield* Effect.flip(driver.send(user("A"), bogus, true))).toBeInstanceOf(InvalidEvent)
      expect(yield* Effect.flip(driver.send(user("A"), bogus, false))).toBeInstanceOf(InvalidEvent)
      expect(yield* Effect.flip(inbox.append(bogus, user("A")))).toBeInstanceOf(InvalidEvent)
      expect(yield* events).toEqual([])
      expect(yield* driver.status).toBe("idle")
      expect(yield* inbox.idState(asId("A"))).toEqual(Option.none())
      // the id did not become known: it is accepted afterwards
      yield* driver.inject(user("A"))
      expect(yield* shape).toEqual(["INS(ns,0,[A])"])
    }
  )
})

describe("3.5 / 6.4", () => {
  agentTest(
    "3.5: a statusChanges subscriber joining while running first receives running",
    scenario([ScriptedModel.hang({ text: "x" })]),
    function*({ driver }) {
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "assistant/chunk")
      const first = yield* Stream.runHead(driver.statusChanges)
      expect(first).toEqual(Option.some("running"))
      yield* driver.cancel({ kind: "user" })
      yield* driver.whenIdle
      yield* settle
    }
  )

  it.scoped("6.4: an invalid persisted splice fails resume with MalformedLog naming it", () =>
    Effect.gen(function*() {
      const storeCtx = yield* Layer.build(SessionStore.layerMemory)
      const store = Context.get(storeCtx, SessionStore)
      const id = SessionId.make("s")
      yield* store.create({ formatVersion: 1, sessionId: id, createdAt: 0, seedLength: 0 }, [
        {
          type: "agent/inbox/spliced",
          seq: 0,
          time: 0,
          data: { target: "next-step", start: 0, inserted: [user("X")] }
        } as any,
        {
          type: "agent/inbox/spliced",
          seq: 1,
          time: 0,
          data: { target: "next-step", start: 0, removedCount: 2, inserted: [], outcome: "canceled" }
        } as any
      ])
      const exit = yield* Effect.exit(
        Layer.build(agentOver([], { resume: true }).pipe(Layer.provide(Layer.succeedContext(storeCtx))))
      )
      const error = Exit.isFailure(exit) ? Option.getOrUndefined(Cause.failureOption(exit.cause)) : undefined
      expect(error).toBeInstanceOf(MalformedLog)
      expect(error).toMatchObject({ sessionId: "s", seq: 1 })
      expect((error as MalformedLog).reason).toContain("invalid persisted inbox splice at seq 1")
    }))
})

describe("3.3 deliveries by phase", () => {
  agentTest(
    "3.3: send(m, next-turn, false) while running runs as a later turn of the chain",
    scenario([ScriptedModel.text("a"), ScriptedModel.text("q")]),
    function*({ driver }) {
      const G = yield* Deferred.make<void>()
      yield* (yield* PreStep).register((input, next) =>
        input.turn === 1 ? Effect.zipRight(Deferred.await(G), next()) : next()
      )
      yield* driver.followup(user("A"))
      yield* driver.send(user("Q"), "next-turn", false)
      yield* Deferred.succeed(G, undefined)
      yield* driver.whenIdle
      expect(yield* texts).toEqual(["A", "Q"])
      expect((yield* dataOfType("turn/start")).map((d) => d.turn)).toEqual([1, 2])
    }
  )

  agentTest(
    "3.3: send(m, next-turn, false) while running-aborted is parked (no replay)",
    scenario([ScriptedModel.hang({ text: "x" })]),
    function*({ driver, inbox }) {
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "assistant/chunk")
      yield* driver.cancel(CancelCause.user, { keepInbox: true })
      yield* driver.send(user("Q"), "next-turn", false)
      yield* driver.whenIdle
      expect((yield* dataOfType("turn/start")).map((d) => d.turn)).toEqual([1])
      expect((yield* inbox.nextTurn).map((m) => m.id)).toEqual(["Q"])
    }
  )

  agentTest(
    "3.3: inject during maintenance only inserts: no turn when the task ends",
    scenario([]),
    function*({ driver }) {
      const G = yield* Deferred.make<void>()
      const task = yield* Effect.fork(driver.runMaintenance(Deferred.await(G)))
      yield* settle
      yield* driver.inject(plugin("C"))
      yield* Deferred.succeed(G, undefined)
      yield* Fiber.join(task)
      yield* driver.whenIdle
      expect(yield* shape).toEqual(["INS(ns,0,[C])"])
    }
  )
})

describe("0.3 / 0.4 / 3.3: send family", () => {
  agentTest(
    "0.4 D2 / 3.10: an idle followup commits INS, TS and the claim (ns first, then the oldest nt) before it returns; live inserted, status, claimed",
    scenario([ScriptedModel.text("one"), ScriptedModel.text("two")]),
    function*({ driver, preStep: pre }) {
      const g = gate()
      const seen: Array<ReadonlyArray<string>> = []
      yield* pre.register((input, next) =>
        Effect.zipRight(Effect.sync(() => seen.push(ids(input.messages))), Effect.zipRight(Deferred.await(g), next()))
      )
      yield* driver.inject(plugin("I"))
      yield* driver.send(user("Q"), "next-turn", false)
      const live = yield* recordLive
      yield* driver.followup(user("A"))
      // No yield between the return and these reads that lets the loop progress past its open.
      expect((yield* shape).slice(-4)).toEqual(["INS(nt,1,[A])", "TS(1)", "CLM(ns,0,1)", "CLM(nt,0,1)"])
      expect(yield* driver.status).toBe("running")
      expect(yield* liveNotations(live)).toEqual(["inserted(A)", "status(running)", "claimed(I,1)", "claimed(Q,1)"])
      yield* until(Effect.sync(() => seen.length > 0))
      expect(seen[0]).toEqual(["I", "Q"])
      yield* open(g)
      expect(yield* closeOut).toEqual([])
    }
  )

  agentTest(
    "0.3 O3/O4/O6: a rejected initial pre-step drops the injected context with the prompt: TE blocked, no UM, no fallback; the queued follow-up still runs",
    scenario([ScriptedModel.text("ok")]),
    function*({ driver, inbox, preStep: pre }) {
      yield* pre.register((input, next) => input.turn === 1 ? Effect.succeed(PreStepDecision.reject("no")) : next())
      yield* driver.inject(plugin("I"))
      yield* driver.send(user("Q"), "next-turn", false)
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect(yield* shape).toEqual([
        "INS(ns,0,[I])",
        "INS(nt,0,[Q])",
        "INS(nt,1,[A])",
        "TS(1)",
        "CLM(ns,0,1)",
        "CLM(nt,0,1)",
        "TE(1,blocked)",
        "TS(2)",
        "CLM(nt,0,1)",
        "SS(2,1)",
        "UM(A)",
        "RH(initial)",
        "CH(block-start)",
        "CH(text-delta)",
        "CH(block-end)",
        "CH(finish stop)",
        "AM",
        "SE(2,1)",
        "TE(2,completed)"
      ])
      expect(yield* inbox.idState(asId("I"))).toEqual(Option.some("claimed"))
      expect(yield* inbox.idState(asId("Q"))).toEqual(Option.some("claimed"))
      expect(yield* inbox.hasPending).toBe(false)
    }
  )

  agentTest(
    "0.3 O9: whenIdle does not wait for an idle inject's durability (store held)",
    scenario([]),
    function*({ driver, control }) {
      yield* control.hold
      const pending = yield* Effect.fork(driver.inject(plugin("C")))
      yield* settle
      expect(yield* shape).toEqual(["INS(ns,0,[C])"])
      expect(pending.unsafePoll()).toBeNull()
      // whenIdle resolves although the insertion is not yet durable.
      const idle = yield* Effect.fork(driver.whenIdle)
      yield* settle
      expect(idle.unsafePoll()).not.toBeNull()
      expect(yield* driver.status).toBe("idle")
      yield* control.release
      yield* Fiber.join(pending)
    }
  )

  agentTest(
    "0.3 O12 / 2.4: injected context enters as a plain user/message carrying its source; no other event type appears",
    scenario([ScriptedModel.text("ok")]),
    function*({ driver }) {
      yield* driver.inject(plugin("I", "ctx"))
      yield* driver.followup(user("A", "prompt"))
      expect(yield* closeOut).toEqual([])
      const ums = yield* dataOfType("user/message")
      expect(ums.map((d) => d.id)).toEqual(["I", "A"])
      expect(ums[0]!.source).toEqual({ kind: "plugin", plugin: "test" })
      const types = new Set((yield* events).map((e) => e.type))
      for (const t of types) expect(t.startsWith("context/")).toBe(false)
      expect(types.has("agent/inbox/enqueue")).toBe(false)
    }
  )

  agentTest(
    "0.4 D3: after max-tokens the chain continues into a follow-up queued during the turn",
    scenario([
      ScriptedModel.response({ text: "cut", finish: "max-tokens", awaitBefore: Deferred.await(gateMaxTokens) }),
      ScriptedModel.text("ok")
    ]),
    function*({ driver }) {
      yield* driver.followup(user("A"))
      yield* until(Effect.map(shape, (s) => s.includes("RH(initial)")))
      yield* driver.followup(user("B"))
      yield* open(gateMaxTokens)
      expect(yield* closeOut).toEqual([])
      expect((yield* reasons).map((r) => r.kind)).toEqual(["max-tokens", "completed"])
      expect(yield* texts).toEqual(["A", "B"])
    }
  )
})
