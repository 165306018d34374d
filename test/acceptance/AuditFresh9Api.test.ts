/**
 * Acceptance audit of SPEC 8 (public API contract) together with the 3.1 conventions: check order of
 * every mutating operation and "a refused operation changes nothing", error fields, documented
 * options and defaults. Written against the package root only.
 */
import { describe, expect, it } from "@effect/vitest"
import { Chunk, Context, Deferred, Effect, Exit, Fiber, Layer, Option, Queue, Schema, Scope, Stream } from "effect"
import type { SessionEvent, UserMessage } from "../../src/index.js"
import {
  Agent,
  AgentBusy,
  AgentDisposed,
  CancelCause,
  Driver,
  DuplicateMessage,
  forkSession,
  Hooks,
  Inbox,
  InvalidEvent,
  InvalidSplice,
  MaintenanceAborted,
  MemoryStoreControl,
  PersistenceError,
  PreStep,
  PreStepDecision,
  PreStepFailed,
  ScriptedModel,
  SessionExists,
  SessionId,
  SessionLog,
  SessionNotFound,
  Sessions,
  SessionStore,
  Tool,
  Tools
} from "../../src/index.js"
import { agentOver, asId, events, gate, liveNotation, open, plugin, recordLive, requests, scenario, settle, shape, user } from "./AuditHarness.js"

const sid = (s: string) => SessionId.make(s)

const buildIn = (
  storeCtx: Context.Context<SessionStore | MemoryStoreControl>,
  script: Parameters<typeof agentOver>[0],
  options: Parameters<typeof agentOver>[1] = {}
) =>
  Effect.gen(function*() {
    const scope = yield* Scope.make()
    const ctx = yield* Layer.buildWithScope(agentOver(script, options).pipe(Layer.provide(Layer.succeedContext(storeCtx))), scope)
    return { scope, driver: Context.get(ctx, Driver), inbox: Context.get(ctx, Inbox), log: Context.get(ctx, SessionLog) }
  })

/** Poisons the idle session: an injection whose store append fails three times (two default retries). */
const poison = Effect.gen(function*() {
  const control = yield* MemoryStoreControl
  const driver = yield* Driver
  yield* control.failAppends(3)
  const error = yield* Effect.flip(driver.inject(plugin("P")))
  expect(error).toBeInstanceOf(PersistenceError)
  return error
})

const ev = (seq: number, type: string, data: unknown, extra: Partial<SessionEvent> = {}): SessionEvent =>
  ({ type, seq, time: 0, data, ...extra }) as SessionEvent

describe("SPEC 3.1 check order and refusals that change nothing", () => {
  it.scoped("3.1/6.3: on a poisoned session every inbox mutation fails PersistenceError before input checks; nothing changes", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const inbox = yield* Inbox
      const log = yield* SessionLog
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
    }).pipe(Effect.provide(scenario([]))))

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

  it.scoped("3.1: message validity before identity: an invalid raw message whose id is known fails InvalidEvent on every delivery path", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const inbox = yield* Inbox
      yield* driver.inject(plugin("K"))
      const before = yield* events
      const invalid = { id: "K", role: "user", content: [{ type: "text" }], source: { kind: "user" } } as unknown as UserMessage
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
    }).pipe(Effect.provide(scenario([]))))

  it.scoped("3.1/3.9: a valid message with a known id fails DuplicateMessage {id, state} on every delivery path and writes nothing", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const inbox = yield* Inbox
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
    }).pipe(Effect.provide(scenario([]))))

  it.scoped("3.1/8.3: a delivery to a target that is not an inbox list fails InvalidEvent, wakes nothing and writes nothing", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const inbox = yield* Inbox
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
    }).pipe(Effect.provide(scenario([]))))
})

describe("SPEC 8.4 Inbox", () => {
  it.scoped("8.4: InvalidSplice carries the target and the caller's raw coordinates; nothing is written", () =>
    Effect.gen(function*() {
      const inbox = yield* Inbox
      yield* inbox.append("next-step", user("A"))
      const a = yield* Effect.flip(inbox.splice("next-step", NaN, 1, []))
      expect(a).toBeInstanceOf(InvalidSplice)
      expect(a).toMatchObject({ _tag: "InvalidSplice", target: "next-step", deleteCount: 1 })
      expect(Number.isNaN((a as InvalidSplice).start)).toBe(true)
      const b = yield* Effect.flip(inbox.splice("next-turn", 0, "1" as unknown as number, [user("B")]))
      expect(b).toBeInstanceOf(InvalidSplice)
      expect(b).toMatchObject({ target: "next-turn", start: 0, deleteCount: "1" })
      expect(typeof (b as InvalidSplice).reason).toBe("string")
      expect(yield* shape).toEqual(["INS(ns,0,[A])"])
      expect(yield* inbox.idState(asId("B"))).toEqual(Option.none())
    }).pipe(Effect.provide(scenario([]))))

  it.scoped("8.4/2.7: fractional coordinates are truncated and a negative deleteCount removes nothing", () =>
    Effect.gen(function*() {
      const inbox = yield* Inbox
      for (const id of ["A", "B", "C"]) yield* inbox.append("next-turn", user(id))
      const removed = yield* inbox.splice("next-turn", 1.9, 1.7, [user("X")])
      expect(removed.map((m) => m.id)).toEqual(["B"])
      const none = yield* inbox.splice("next-turn", 0, -3, [user("Y")])
      expect(none).toEqual([])
      expect((yield* inbox.nextTurn).map((m) => m.id)).toEqual(["Y", "A", "X", "C"])
      expect((yield* shape).slice(3)).toEqual(["REP(nt,1,[X])", "INS(nt,0,[Y])"])
    }).pipe(Effect.provide(scenario([]))))

  it.scoped("8.4: reads return frozen arrays; hasPending follows either list; idState is none for an unknown id", () =>
    Effect.gen(function*() {
      const inbox = yield* Inbox
      expect(yield* inbox.hasPending).toBe(false)
      expect(yield* inbox.idState(asId("nobody"))).toEqual(Option.none())
      yield* inbox.append("next-step", user("S"))
      expect(yield* inbox.hasPending).toBe(true)
      const nextStep = yield* inbox.nextStep
      const nextTurn = yield* inbox.nextTurn
      const snap = yield* inbox.snapshot
      expect(Object.isFrozen(nextStep)).toBe(true)
      expect(Object.isFrozen(nextTurn)).toBe(true)
      expect(Object.isFrozen(snap.nextStep) && Object.isFrozen(snap.nextTurn)).toBe(true)
      expect(snap).toEqual({ nextTurn: [], nextStep: [user("S")] })
      yield* inbox.remove(asId("S"))
      yield* inbox.append("next-turn", user("T"))
      expect(yield* inbox.hasPending).toBe(true)
      yield* inbox.clear
      expect(yield* inbox.hasPending).toBe(false)
      expect(yield* inbox.idState(asId("S"))).toEqual(Option.some("discarded"))
      expect(yield* inbox.idState(asId("T"))).toEqual(Option.some("discarded"))
      expect(yield* shape).toEqual(["INS(ns,0,[S])", "CAN(ns,0,1)", "INS(nt,0,[T])", "CAN(nt,0,1)"])
    }).pipe(Effect.provide(scenario([]))))

  it.scoped("8.4/3.8: remove of a next-step item writes CAN at its index; replace in next-step writes REP there", () =>
    Effect.gen(function*() {
      const inbox = yield* Inbox
      const live = yield* recordLive
      for (const id of ["A", "B", "C"]) yield* inbox.append("next-step", plugin(id))
      expect(yield* inbox.remove(asId("B"))).toBe(true)
      expect(yield* inbox.replace(asId("C"), plugin("D"))).toBe(true)
      expect((yield* inbox.nextStep).map((m) => m.id)).toEqual(["A", "D"])
      expect((yield* shape).slice(3)).toEqual(["CAN(ns,1,1)", "REP(ns,1,[D])"])
      expect((yield* live).map(liveNotation).slice(3)).toEqual(["discarded(B)", "discarded(C)", "inserted(D)"])
    }).pipe(Effect.provide(scenario([]))))

  it.scoped("8.4/3.9: a splice refused for its second message makes neither id known and writes nothing", () =>
    Effect.gen(function*() {
      const inbox = yield* Inbox
      yield* inbox.append("next-turn", user("K"))
      const error = yield* Effect.flip(inbox.splice("next-turn", 0, 0, [user("N1"), user("K")]))
      expect(error).toMatchObject({ _tag: "DuplicateMessage", id: "K", state: "pending" })
      expect(yield* inbox.idState(asId("N1"))).toEqual(Option.none())
      expect(yield* shape).toEqual(["INS(nt,0,[K])"])
      yield* inbox.append("next-step", user("N1"))
      expect(yield* inbox.idState(asId("N1"))).toEqual(Option.some("pending"))
    }).pipe(Effect.provide(scenario([]))))
})

describe("SPEC 8.3 Driver", () => {
  it.scoped("8.3/3.6: AgentBusy names the session, the operation and the phase; MaintenanceAborted carries the first cause", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const G = gate()
      const task = yield* Effect.fork(driver.runMaintenance(Effect.zipRight(open(G), Effect.never)))
      yield* Deferred.await(G)
      const busy = yield* Effect.flip(driver.runMaintenance(Effect.succeed(1)))
      expect(busy).toBeInstanceOf(AgentBusy)
      expect(busy).toMatchObject({ _tag: "AgentBusy", sessionId: "s", operation: "runMaintenance", phase: "maintenance" })
      yield* driver.cancel(CancelCause.hook("why"))
      yield* driver.cancel(CancelCause.parent)
      const exit = yield* Fiber.await(task)
      expect(exit).toEqual(Exit.fail(new MaintenanceAborted({ cause: { kind: "hook", reason: "why" } })))
      expect(yield* driver.status).toBe("idle")
      expect(yield* events).toEqual([])
    }).pipe(Effect.provide(scenario([]))))

  it.scoped("8.3: AgentBusy while running carries phase running; the running turn is unaffected", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      const busy = yield* Effect.flip(driver.runMaintenance(Effect.succeed(1)))
      expect(busy).toMatchObject({ _tag: "AgentBusy", sessionId: "s", operation: "runMaintenance", phase: "running" })
      yield* driver.whenIdle
      expect((yield* shape).filter((x) => x.startsWith("TE"))).toEqual(["TE(1,completed)"])
    }).pipe(Effect.provide(scenario([ScriptedModel.text("ok")]))))

  it.scoped("8.3: subscribe returns a queue already subscribed: the notifications of an operation right after it are all in it, in commit order", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const queue = yield* driver.subscribe
      yield* driver.inject(plugin("I"))
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      yield* settle
      const got = Chunk.toReadonlyArray(yield* Queue.takeAll(queue)).map(liveNotation)
      expect(got).toEqual(["inserted(I)", "inserted(A)", "status(running)", "claimed(I,1)", "claimed(A,1)", "status(idle)"])
    }).pipe(Effect.provide(scenario([ScriptedModel.text("ok")]))))

  it.scoped("8.3/3.4: cancel accepts a plain CancelCause object; it is recorded on turn/end as given", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      yield* driver.cancel({ kind: "parent" })
      yield* driver.whenIdle
      const ends = (yield* events).filter((e) => e.type === "turn/end").map((e) => (e.data as any).reason)
      expect(ends).toEqual([{ kind: "aborted", reason: { kind: "parent" } }])
    }).pipe(Effect.provide(scenario([ScriptedModel.hang({})]))))
})

describe("SPEC 8.5 SessionLog", () => {
  it.scoped("8.5: a fresh session: header, firstLiveSeq 0, durableSeq -1, empty events, messages and surface", () =>
    Effect.gen(function*() {
      const log = yield* SessionLog
      expect(log.sessionId).toBe("s")
      expect(log.header).toEqual({ formatVersion: 1, sessionId: "s", createdAt: 0, seedLength: 0 })
      expect(log.firstLiveSeq).toBe(0)
      expect(yield* log.durableSeq).toBe(-1)
      expect(yield* log.events).toEqual([])
      expect(yield* log.messages).toEqual([])
      expect(yield* log.surface).toEqual([])
      yield* log.flush
      expect(yield* log.durableSeq).toBe(-1)
    }).pipe(Effect.provide(scenario([]))))

  it.scoped("8.5: append returns the stored event (seq, Clock time, data, ignorable), acknowledged durable; other core types are reserved", () =>
    Effect.gen(function*() {
      const log = yield* SessionLog
      const data = { n: 1, list: [1, 2] }
      const e = yield* log.append({ type: "x/ext", data, ignorable: true })
      expect(e).toEqual({ type: "x/ext", seq: 0, time: 0, data: { n: 1, list: [1, 2] }, ignorable: true })
      expect(yield* log.durableSeq).toBe(0)
      expect((yield* log.events)[0]).toEqual(e)
      data.list.push(3)
      expect((yield* log.events)[0]!.data).toEqual({ n: 1, list: [1, 2] })
      for (
        const type of [
          "turn/end", "step/start", "step/end", "assistant/chunk", "assistant/message", "tool/call", "tool/result",
          "request/header", "llm/retry", "agent/inbox/spliced"
        ]
      ) {
        const error = yield* Effect.flip(log.append({ type, data: {} }))
        expect(error, type).toBeInstanceOf(InvalidEvent)
        expect(error, type).toMatchObject({ type, reason: "reserved" })
      }
      expect((yield* log.events).length).toBe(1)
    }).pipe(Effect.provide(scenario([]))))

  it.scoped("8.5/3.10: stream(fromSeq) replays seq >= fromSeq then follows; a fromSeq beyond the end starts at that seq", () =>
    Effect.gen(function*() {
      const log = yield* SessionLog
      const inbox = yield* Inbox
      for (const id of ["A", "B", "C"]) yield* inbox.append("next-turn", user(id))
      const fromOne = yield* Effect.fork(Stream.runCollect(Stream.take(log.stream(1), 4)))
      const ahead = yield* Effect.fork(Stream.runCollect(Stream.take(log.stream(5), 1)))
      const all = yield* Effect.fork(Stream.runCollect(Stream.take(log.stream(), 6)))
      yield* settle
      for (const id of ["D", "E", "F"]) yield* inbox.append("next-step", user(id))
      expect(Chunk.toReadonlyArray(yield* Fiber.join(fromOne)).map((e) => e.seq)).toEqual([1, 2, 3, 4])
      expect(Chunk.toReadonlyArray(yield* Fiber.join(ahead)).map((e) => e.seq)).toEqual([5])
      expect(Chunk.toReadonlyArray(yield* Fiber.join(all)).map((e) => e.seq)).toEqual([0, 1, 2, 3, 4, 5])
    }).pipe(Effect.provide(scenario([]))))

  it.scoped("8.5/3.7: after disposal the log is readable, flush succeeds, stream replays then ends, events and statusChanges end", () =>
    Effect.gen(function*() {
      const storeCtx = yield* Layer.build(SessionStore.layerMemory)
      const { driver, inbox, log, scope } = yield* buildIn(storeCtx, [ScriptedModel.text("ok")])
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      yield* inbox.append("next-turn", user("Q"))
      yield* Scope.close(scope, Exit.void)
      const final = yield* log.events
      expect(yield* log.durableSeq).toBe(final.length - 1)
      yield* log.flush
      expect(Chunk.toReadonlyArray(yield* Stream.runCollect(log.stream(0)))).toEqual(final)
      expect(Chunk.toReadonlyArray(yield* Stream.runCollect(driver.events))).toEqual([])
      expect(Chunk.toReadonlyArray(yield* Stream.runCollect(driver.statusChanges))).toEqual(["idle"])
      expect(yield* inbox.idState(asId("A"))).toEqual(Option.some("entered"))
      expect(yield* inbox.idState(asId("Q"))).toEqual(Option.some("pending"))
      expect((yield* log.messages).length).toBe(2)
    }))

  it.scoped("8.5: stream delivers every in-memory append, also before it is durable", () =>
    Effect.gen(function*() {
      const log = yield* SessionLog
      const driver = yield* Driver
      const control = yield* MemoryStoreControl
      yield* control.hold
      const ack = yield* Effect.fork(driver.inject(plugin("H")))
      const first = yield* Stream.runHead(log.stream(0))
      expect(Option.map(first, (e) => e.type)).toEqual(Option.some("agent/inbox/spliced"))
      expect(yield* log.durableSeq).toBe(-1)
      expect(Option.isNone(yield* Fiber.poll(ack))).toBe(true)
      yield* control.release
      yield* Fiber.join(ack)
      expect(yield* log.durableSeq).toBe(0)
    }).pipe(Effect.provide(scenario([]))))

  it.scoped("8.5/2.9: append refuses an undeclared type without ignorable, and ignorable other than true; nothing is written", () =>
    Effect.gen(function*() {
      const log = yield* SessionLog
      expect(yield* Effect.flip(log.append({ type: "x/undeclared", data: {} }))).toBeInstanceOf(InvalidEvent)
      expect(yield* Effect.flip(log.append({ type: "x/undeclared", data: {}, ignorable: false as unknown as true }))).toBeInstanceOf(InvalidEvent)
      expect(yield* Effect.flip(log.append({ type: "", data: {}, ignorable: true }))).toBeInstanceOf(InvalidEvent)
      expect(yield* log.events).toEqual([])
      const declared = yield* log.append({ type: "x/declared", data: { ok: true } })
      expect(declared).toEqual({ type: "x/declared", seq: 0, time: 0, data: { ok: true } })
    }).pipe(Effect.provide(scenario([], { agent: { eventTypes: ["x/declared"] } }))))
})

describe("SPEC 8.6 PreStep", () => {
  it.scoped("8.6: prepend makes a listener outermost; a registration ends with its scope", () =>
    Effect.gen(function*() {
      const pre = yield* PreStep
      const order: Array<string> = []
      const tag = (name: string) => (_: unknown, next: () => Effect.Effect<PreStepDecision, PreStepFailed>) =>
        Effect.zipRight(Effect.sync(() => order.push(name)), next())
      yield* pre.register(tag("first"))
      yield* pre.register(tag("second"))
      const inner = yield* Scope.make()
      yield* Scope.extend(pre.register(tag("outer"), { prepend: true }), inner)
      const input = { sessionId: sid("s"), turn: 1, step: 1, boundary: "initial" as const, messages: [user("A")] }
      expect(yield* pre.run(input)).toEqual([user("A")])
      expect(order).toEqual(["outer", "first", "second"])
      yield* Scope.close(inner, Exit.void)
      order.length = 0
      yield* pre.run(input)
      expect(order).toEqual(["first", "second"])
    }).pipe(Effect.provide(scenario([]))))

  it.scoped("8.6: run does not validate Enter.messages; a downstream failure reaches the upstream listener and run as the same PreStepFailed", () =>
    Effect.gen(function*() {
      const pre = yield* PreStep
      const input = { sessionId: sid("s"), turn: 3, step: 4, boundary: "later" as const, messages: [] }
      const odd = { id: "", role: "user", content: [], source: {} } as unknown as UserMessage
      const scope1 = yield* Scope.make()
      yield* Scope.extend(pre.register(() => Effect.succeed(PreStepDecision.enter([odd]))), scope1)
      expect(yield* pre.run(input)).toEqual([odd])
      yield* Scope.close(scope1, Exit.void)
      let seen: unknown
      yield* pre.register((_, next) => Effect.tapError(next(), (e) => Effect.sync(() => (seen = e))))
      yield* pre.register(() => Effect.fail("boom"))
      const failed = yield* Effect.flip(pre.run(input))
      expect(failed).toBeInstanceOf(PreStepFailed)
      expect(failed).toMatchObject({ _tag: "PreStepFailed", turn: 3, step: 4, cause: "boom" })
      expect(seen).toBe(failed)
    }).pipe(Effect.provide(scenario([]))))

  it.scoped("8.6: a listener's defect makes run fail PreStepFailed with the defect as cause", () =>
    Effect.gen(function*() {
      const pre = yield* PreStep
      const defect = new Error("kaput")
      yield* pre.register(() => Effect.die(defect))
      const failed = yield* Effect.flip(pre.run({ sessionId: sid("s"), turn: 1, step: 1, boundary: "initial", messages: [] }))
      expect(failed).toBeInstanceOf(PreStepFailed)
      expect((failed as PreStepFailed).cause).toBe(defect)
    }).pipe(Effect.provide(scenario([]))))

  it.scoped("8.6/4.4: calling next() twice is a listener failure: run fails PreStepFailed whose cause is the defect \"next() called more than once\"", () =>
    Effect.gen(function*() {
      const pre = yield* PreStep
      yield* pre.register((_, next) => Effect.zipRight(next(), next()))
      const failed = yield* Effect.flip(pre.run({ sessionId: sid("s"), turn: 2, step: 1, boundary: "initial", messages: [user("A")] }))
      expect(failed).toBeInstanceOf(PreStepFailed)
      expect(failed).toMatchObject({ turn: 2, step: 1 })
      expect(String((failed as PreStepFailed).cause)).toContain("next() called more than once")
    }).pipe(Effect.provide(scenario([]))))
})

describe("SPEC 8.7 Hooks", () => {
  it.scoped("8.7/8.10: onRequest's default is the seed config of AgentOptions; the ModelRequest carries it", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const hooks = yield* Hooks
      const configs: Array<unknown> = []
      yield* hooks.onRequest((input, next) => Effect.zipRight(Effect.sync(() => configs.push(input.config)), next()))
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      const expected = { provider: "p", model: "m", system: "sys", maxTokens: 77, temperature: 0.25 }
      expect(configs).toEqual([expected])
      const [request] = yield* requests
      expect(request).toMatchObject({ ...expected, sessionId: "s", turn: 1, step: 1, attempt: 1, tools: [] })
    }).pipe(Effect.provide(scenario([ScriptedModel.text("ok")], {
      agent: { system: "sys", maxTokens: 77, temperature: 0.25 }
    }))))

  it.scoped("8.7/4.5: a hook registration ends with its scope; the next request's seed is the last logged config; onTurnStopping runs serially in registration order", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const hooks = yield* Hooks
      const seen: Array<string> = []
      let calls = 0
      const inner = yield* Scope.make()
      yield* Scope.extend(
        hooks.onRequest((_, next) => Effect.map(next(), (c) => {
          calls++
          return { ...c, system: "from-hook" }
        })),
        inner
      )
      yield* hooks.onTurnStopping((i) => Effect.sync(() => seen.push(`a${i.turn}.${i.step}`)))
      yield* hooks.onTurnStopping((i) => Effect.sync(() => seen.push(`b${i.turn}.${i.step}`)))
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      yield* Scope.close(inner, Exit.void)
      yield* driver.followup(user("B"))
      yield* driver.whenIdle
      expect(calls).toBe(1)
      // SPEC 4.5 Q1: later requests start from the config of the last logged request/header.
      expect((yield* requests).map((r) => r.system)).toEqual(["from-hook", "from-hook"])
      expect((yield* shape).filter((x) => x.startsWith("RH"))).toEqual(["RH(initial)"])
      expect(seen).toEqual(["a1.1", "b1.1", "a2.1", "b2.1"])
    }).pipe(Effect.provide(scenario([ScriptedModel.text("a"), ScriptedModel.text("b")]))))
})

describe("SPEC 8.9 Tools", () => {
  it.scoped("8.9: a string returned by execute means {content: [{type: text, text}]}; ToolPost sees it normalized with aborted false", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const hooks = yield* Hooks
      const posts: Array<unknown> = []
      yield* hooks.onToolPost((input, next) => Effect.zipRight(Effect.sync(() => posts.push({ output: input.output, aborted: input.aborted, name: input.name, params: input.params })), next()))
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect(posts).toEqual([{
        output: { content: [{ type: "text", text: "echo:hi" }], isError: false, additionalContexts: [], concludesTurn: false },
        aborted: false,
        name: "echo",
        params: { s: "hi" }
      }])
      const result = (yield* events).find((e) => e.type === "tool/result")!.data as any
      expect(result.message.content[0]).toEqual({ type: "tool-result", toolCallId: "c1", isError: false, content: [{ type: "text", text: "echo:hi" }] })
    }).pipe(Effect.provide(scenario([
      ScriptedModel.response({ toolCalls: [{ id: "c1", name: "echo", arguments: { s: "hi" } }] }),
      ScriptedModel.text("done")
    ], {
      tools: [Tool.make("echo", { description: "echo", parameters: Schema.Struct({ s: Schema.String }), execute: (p) => Effect.succeed(`echo:${p.s}`) })]
    }))))

  it.effect("8.9: Tools.layer with two tools of one name lists the later one; list is frozen ToolSchemas", () =>
    Effect.gen(function*() {
      const tools = yield* Tools
      const listed = yield* tools.list
      expect(listed.map((t) => [t.name, t.description])).toEqual([["a", "A"], ["dup", "second"]])
      expect(Object.isFrozen(listed)).toBe(true)
      expect(tools.maxParallelToolCalls).toBe(3)
    }).pipe(Effect.provide(Tools.layer({
      maxParallelToolCalls: 3,
      tools: [
        Tool.make("dup", { description: "first", parameters: Schema.Struct({}), execute: () => Effect.succeed("1") }),
        Tool.make("a", { description: "A", parameters: Schema.Struct({}), execute: () => Effect.succeed("a") }),
        Tool.make("dup", { description: "second", parameters: Schema.Struct({}), execute: () => Effect.succeed("2") })
      ]
    }))))
})

describe("SPEC 8.10 storage, agent and sessions layers", () => {
  it.effect("8.10/6.1: the memory store contract: create, SessionExists, load, SessionNotFound, exists, list, append with the seq check", () =>
    Effect.gen(function*() {
      const store = yield* SessionStore
      const header = { formatVersion: 1 as const, sessionId: "m1", createdAt: 5, seedLength: 0 }
      expect(yield* store.exists(sid("m1"))).toBe(false)
      yield* store.create(header, [ev(0, "x/a", { a: 1 }, { ignorable: true })])
      const exists = yield* Effect.flip(store.create(header, []))
      expect(exists).toBeInstanceOf(SessionExists)
      expect(exists).toMatchObject({ sessionId: "m1" })
      const missing = yield* Effect.flip(store.load(sid("nope")))
      expect(missing).toBeInstanceOf(SessionNotFound)
      expect(missing).toMatchObject({ sessionId: "nope" })
      expect(yield* store.exists(sid("m1"))).toBe(true)
      const wrongSeq = yield* Effect.flip(store.append(sid("m1"), [ev(0, "x/b", {}, { ignorable: true })]))
      expect(wrongSeq).toBeInstanceOf(PersistenceError)
      expect(wrongSeq).toMatchObject({ sessionId: "m1" })
      const gap = yield* Effect.flip(store.append(sid("m1"), [ev(2, "x/b", {}, { ignorable: true })]))
      expect(gap).toBeInstanceOf(PersistenceError)
      yield* store.append(sid("m1"), [ev(1, "x/b", { b: 2 }, { ignorable: true }), ev(2, "x/c", {}, { ignorable: true })])
      const loaded = yield* store.load(sid("m1"))
      expect(loaded.header).toEqual(header)
      expect(loaded.events.map((e) => [e.seq, e.type])).toEqual([[0, "x/a"], [1, "x/b"], [2, "x/c"]])
      yield* store.create({ ...header, sessionId: "m2" }, [])
      expect((yield* store.list).map((h) => h.sessionId).sort()).toEqual(["m1", "m2"])
      const control = yield* MemoryStoreControl
      expect(yield* control.appendCalls).toBe(3)
    }).pipe(Effect.provide(SessionStore.layerMemory)))

  it.effect("8.10: MemoryStoreControl: failAppends fails the next n calls; hold blocks appends until release; snapshot holds committed contents only", () =>
    Effect.gen(function*() {
      const store = yield* SessionStore
      const control = yield* MemoryStoreControl
      yield* store.create({ formatVersion: 1, sessionId: "c", createdAt: 0, seedLength: 0 }, [])
      yield* control.failAppends(2)
      const e0 = ev(0, "x/a", {}, { ignorable: true })
      expect(yield* Effect.flip(store.append(sid("c"), [e0]))).toBeInstanceOf(PersistenceError)
      expect(yield* Effect.flip(store.append(sid("c"), [e0]))).toBeInstanceOf(PersistenceError)
      yield* store.append(sid("c"), [e0])
      expect(yield* control.appendCalls).toBe(3)
      yield* control.hold
      const held = yield* Effect.fork(store.append(sid("c"), [ev(1, "x/b", {}, { ignorable: true })]))
      yield* settle
      expect(Option.isNone(yield* Fiber.poll(held))).toBe(true)
      const image = yield* control.snapshot
      yield* control.release
      yield* Fiber.join(held)
      expect((yield* store.load(sid("c"))).events.length).toBe(2)
      const restored = yield* Effect.provide(
        Effect.flatMap(SessionStore, (s) => s.load(sid("c"))),
        SessionStore.layerMemoryFrom(image)
      )
      expect(restored.events.map((e) => e.type)).toEqual(["x/a"])
    }).pipe(Effect.provide(SessionStore.layerMemory)))

  it.scoped("8.10: AgentOptions.invariants defaults to check (a relational violation on append is refused with its rule)", () =>
    Effect.gen(function*() {
      const log = yield* SessionLog
      const error = yield* Effect.flip(log.append({ type: "compaction/start", data: { turn: 1 } }))
      expect(error).toBeInstanceOf(InvalidEvent)
      expect(error).toMatchObject({ rule: "R6" })
      expect(yield* log.events).toEqual([])
    }).pipe(Effect.provide(
      Agent.layer({ model: { provider: "p", model: "m" }, sessionId: sid("d") }).pipe(
        Layer.provideMerge(Layer.mergeAll(ScriptedModel.layer([]), Tools.layer(), SessionStore.layerMemory))
      )
    )))

  it.scoped("8.10: Sessions.open creates then shares one live agent per id; fork of an open source gives a child with the prefix", () =>
    Effect.gen(function*() {
      const sessions = yield* Sessions
      const a = yield* sessions.open(sid("one"))
      const b = yield* sessions.open(sid("one"))
      expect(Context.get(a, Driver)).toBe(Context.get(b, Driver))
      const driver = Context.get(a, Driver)
      expect(driver.sessionId).toBe("one")
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      const child = yield* sessions.fork({ source: sid("one"), childId: sid("kid") })
      expect(child).toBe("kid")
      const store = yield* SessionStore
      const loaded = yield* store.load(sid("kid"))
      const parentEvents = yield* Context.get(a, SessionLog).events
      expect(loaded.header).toMatchObject({ sessionId: "kid", parent: { sessionId: "one", boundary: parentEvents.length - 1 }, seedLength: parentEvents.length })
      expect(loaded.events.length).toBe(parentEvents.length + 1)
      expect(loaded.events[loaded.events.length - 1]!.type).toBe("session/end-seed")
      const again = yield* Effect.flip(sessions.fork({ source: sid("one"), childId: sid("kid") }))
      expect(again).toMatchObject({ _tag: "ForkError", source: "one", reason: "child-exists", childId: "kid" })
      const missing = yield* Effect.flip(forkSession({ source: sid("ghost") }).pipe(Effect.provideService(SessionStore, store)))
      expect(missing).toBeInstanceOf(SessionNotFound)
    }).pipe(Effect.provide(
      Sessions.layer({ model: { provider: "p", model: "m" }, idleTimeToLive: "1 minute" }).pipe(
        Layer.provideMerge(Layer.mergeAll(ScriptedModel.layer([ScriptedModel.text("ok")]), Tools.layer(), SessionStore.layerMemory))
      )
    )))

  it.scoped("8.10/6.1: Sessions.open of a session held by an Agent.layer over the same store fails AgentBusy {operation: open, phase: open}", () =>
    Effect.gen(function*() {
      const storeCtx = yield* Layer.build(SessionStore.layerMemory)
      const deps = Layer.mergeAll(ScriptedModel.layer([]), Tools.layer(), Layer.succeedContext(storeCtx))
      yield* Layer.build(Agent.layer({ model: { provider: "p", model: "m" }, sessionId: sid("x") }).pipe(Layer.provide(deps)))
      const sessionsCtx = yield* Layer.build(
        Sessions.layer({ model: { provider: "p", model: "m" }, idleTimeToLive: "1 minute" }).pipe(Layer.provide(deps))
      )
      const busy = yield* Effect.flip(Effect.scoped(Context.get(sessionsCtx, Sessions).open(sid("x"))))
      expect(busy).toBeInstanceOf(AgentBusy)
      expect(busy).toMatchObject({ sessionId: "x", operation: "open", phase: "open" })
    }))
})
