/**
 * Acceptance audit of the SPEC §9 scenarios P37-P45 on the SQLite store: every scenario runs over
 * `SqliteSessionStore.layer({ filename })` in a temporary directory; where a scenario shuts down,
 * resumes or forks, the store is closed and a new store layer is opened on the same file. Beyond
 * each scenario's own assertions: `checkLog` is clean and the rows read back from the file on a
 * connection of their own equal the live log.
 */
import { afterAll, describe, expect, it } from "@effect/vitest"
import Database from "better-sqlite3"
import { Cause, Context, Deferred, Effect, Exit, Fiber, Layer, Option, Schema, Scope, Stream } from "effect"
import type { DriverEvent, SessionEvent, UserMessage } from "../../src/index.js"
import {
  AgentBusy,
  AgentDisposed,
  CancelCause,
  checkLog,
  deriveMessages,
  Driver,
  DuplicateMessage,
  ForkError,
  forkSession,
  Inbox,
  InvalidEvent,
  InvalidSplice,
  MaintenanceAborted,
  MalformedLog,
  PreStep,
  PreStepDecision,
  repairClosers,
  ScriptedModel,
  SessionId,
  SessionLog,
  SessionNotFound,
  SessionStore,
  SqliteSessionStore,
  Tool
} from "../../src/index.js"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import {
  agentOver,
  asId,
  dataOfType,
  events,
  gate,
  liveNotation,
  notation,
  open,
  plugin,
  recordLive,
  recordStatus,
  requests,
  settle,
  shape,
  texts,
  token,
  untilEvent,
  user
} from "./AuditHarness.js"

const dir = fs.mkdtempSync(path.join(os.tmpdir(), "tiller-p37-45-"))
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }))
let files = 0
const freshFile = () => path.join(dir, `scenario-${++files}.db`)

const sid = (s: string) => SessionId.make(s)
const header = (id: string) => ({ formatVersion: 1 as const, sessionId: sid(id), createdAt: 0, seedLength: 0 })
const ids = (ms: ReadonlyArray<UserMessage>) => ms.map((m) => m.id)
const empty = Schema.Struct({})
const sqlite = (file: string) => SqliteSessionStore.layer({ filename: file })

/** The committed events of a session, read from the file on a connection of its own. */
const fileRows = (file: string, session = "s"): Array<SessionEvent> => {
  const db = new Database(file, { readonly: true })
  try {
    const rows = db.prepare("SELECT seq, row FROM events WHERE session_id = ? ORDER BY seq").all(session) as Array<
      { readonly seq: number; readonly row: string }
    >
    return rows.map((r) => JSON.parse(r.row))
  } finally {
    db.close()
  }
}
const json = (x: unknown) => JSON.parse(JSON.stringify(x))

/** The agent of the SPEC 9 harness over a SQLite file (the store is closed with the layer). */
const onFile = (file: string, script: Parameters<typeof agentOver>[0], options: Parameters<typeof agentOver>[1] = {}) =>
  agentOver(script, options).pipe(Layer.provideMerge(sqlite(file)))

/** Flushes, then checks the closing conditions: `checkLog` clean and the file equal to the live log. */
const closeOnFile = (file: string, session = "s") =>
  Effect.gen(function*() {
    const driver = yield* Driver
    const log = yield* SessionLog
    yield* driver.whenIdle
    yield* settle
    yield* log.flush
    const es = yield* log.events
    expect(checkLog(es, { closed: true })).toEqual([])
    expect(fileRows(file, session)).toEqual(json(es))
    return es
  })

/** Runs `program` against a SQLite store alone, opened on `file` and closed afterwards. */
const withStore = <A, E>(file: string, program: (store: SessionStore["Type"]) => Effect.Effect<A, E>) =>
  Effect.scoped(Effect.flatMap(Effect.map(Layer.build(sqlite(file)), (ctx) => Context.get(ctx, SessionStore)), program))

const hangingTool = Tool.make("slow", { description: "never ends", parameters: empty, execute: () => Effect.never })

describe("P37-P38 on SQLite", () => {
  it.scoped("P37: first cause wins (TE(1,aborted(parent))) on SQLite", () =>
    Effect.gen(function*() {
      const file = freshFile()
      yield* Effect.gen(function*() {
        const driver = yield* Driver
        yield* driver.followup(user("A"))
        yield* untilEvent((e) => e.type === "assistant/chunk")
        yield* driver.cancel(CancelCause.parent)
        yield* driver.cancel(CancelCause.user)
        yield* driver.whenIdle
        expect((yield* dataOfType("turn/end")).map((d) => d.reason)).toEqual([{ kind: "aborted", reason: { kind: "parent" } }])
        yield* closeOnFile(file)
      }).pipe(Effect.provide(onFile(file, [ScriptedModel.hang({ text: "partial" })])), Effect.scoped)
      const last = fileRows(file).at(-1)!
      expect(notation(last)).toBe("TE(1,aborted(parent))")
    }))

  it.scoped("P38: disposal keeps the queued tail in the file; a new store on the file resumes and runs T then W", () =>
    Effect.gen(function*() {
      const file = freshFile()
      const scope = yield* Scope.make()
      const ctx = yield* Layer.buildWithScope(onFile(file, [ScriptedModel.hang({ text: "partial" })]), scope)
      const driver = Context.get(ctx, Driver)
      const trace = yield* Effect.provide(recordStatus, ctx)
      const collected: Array<DriverEvent> = []
      const collector = yield* Effect.fork(Stream.runForEach(driver.events, (e) => Effect.sync(() => collected.push(e))))
      yield* settle
      yield* driver.followup(user("A"))
      yield* Effect.provide(untilEvent((e) => e.type === "assistant/chunk" && (e.data as any).chunk.type === "text-delta"), ctx)
      yield* driver.followup(user("T"))
      const live1 = yield* Effect.provide(events, ctx)
      yield* Scope.close(scope, Exit.void)
      yield* settle
      yield* Fiber.join(collector)
      const stored = fileRows(file)
      const n = stored.map(notation)
      expect(n.indexOf("INS(nt,0,[T])")).toBeGreaterThan(0)
      expect(n.slice(-3)).toEqual(["AM!", "SE(1,1)", "TE(1,aborted(disposed))"])
      expect(n.filter((s) => s.startsWith("CAN"))).toEqual([])
      expect(stored.slice(0, live1.length)).toEqual(json(live1))
      expect(checkLog(stored, { closed: true })).toEqual([])
      expect(collected.filter((e) => e.type === "agent/error")).toEqual([])
      expect(yield* trace).toEqual(["idle", "running", "idle"])
      expect(yield* Effect.flip(driver.followup(user("X")))).toBeInstanceOf(AgentDisposed)
      // Lifecycle 2: a new store layer on the same file.
      yield* Effect.gen(function*() {
        const d2 = yield* Driver
        const inbox = yield* Inbox
        expect(ids(yield* inbox.nextTurn)).toEqual(["T"])
        expect(yield* d2.status).toBe("idle")
        const before = yield* events
        expect(json(before.slice(0, stored.length))).toEqual(stored)
        expect(before.map(notation).slice(stored.length)).toEqual(["ES"])
        yield* d2.followup(user("W"))
        yield* d2.whenIdle
        const es = yield* closeOnFile(file)
        const ss = es.filter((e) => e.type === "step/start" || e.type === "user/message").map(notation)
        expect(ss.slice(-4)).toEqual(["SS(2,1)", "UM(T)", "SS(3,1)", "UM(W)"])
        expect((yield* requests).map((r) => r.messages.map(token).at(-1))).toEqual(["T", "W"])
      }).pipe(Effect.provide(onFile(file, [ScriptedModel.text("t"), ScriptedModel.text("w")], { resume: true })), Effect.scoped)
    }))
})

describe("P39 on SQLite", () => {
  it.scoped("P39 (a, b, c, e): inbox mutations are written to the file exactly", () =>
    Effect.gen(function*() {
      const file = freshFile()
      yield* Effect.gen(function*() {
        const inbox = yield* Inbox
        const driver = yield* Driver
        const live = yield* recordLive
        const O = user("O")
        const N = plugin("N")
        const R = user("R")
        yield* inbox.append("next-turn", O)
        yield* inbox.append("next-step", N)
        expect(yield* inbox.replace(asId("missing"), user("Z"))).toBe(false)
        expect(yield* shape).toEqual(["INS(nt,0,[O])", "INS(ns,0,[N])"])
        expect(fileRows(file).map(notation)).toEqual(["INS(nt,0,[O])", "INS(ns,0,[N])"])
        yield* live
        expect(yield* inbox.replace(O.id, R)).toBe(true)
        expect((yield* shape).slice(-1)).toEqual(["REP(nt,0,[R])"])
        expect((yield* live).map(liveNotation)).toEqual(["discarded(O)", "inserted(R)"])
        expect(yield* inbox.idState(O.id)).toEqual(Option.some("discarded"))
        const N2 = plugin("N", "N prime")
        expect(yield* inbox.replace(N.id, N2)).toBe(true)
        expect(yield* inbox.nextStep).toEqual([N2])
        expect(yield* Effect.flip(inbox.replace(R.id, user("N")))).toMatchObject({ _tag: "DuplicateMessage", id: "N", state: "pending" })
        expect(yield* Effect.flip(inbox.replace(R.id, user("O")))).toMatchObject({ _tag: "DuplicateMessage", id: "O", state: "discarded" })
        // (b)
        const before = (yield* shape).length
        yield* inbox.splice("next-turn", 0, 0, [user("F"), user("V")])
        expect((yield* shape).slice(before)).toEqual(["INS(nt,0,[F,V])"])
        expect(ids(yield* inbox.splice("next-turn", -1, 1, []))).toEqual(["R"])
        expect((yield* shape).slice(-1)).toEqual(["CAN(nt,2,1)"])
        expect(yield* inbox.remove(R.id)).toBe(false)
        const dupF = yield* Effect.flip(inbox.append("next-step", user("F")))
        expect(dupF).toBeInstanceOf(DuplicateMessage)
        expect(dupF).toMatchObject({ state: "pending" })
        const length = (yield* shape).length
        expect(yield* Effect.flip(inbox.splice("next-turn", NaN, 0, [user("H")]))).toBeInstanceOf(InvalidSplice)
        expect(yield* inbox.splice("next-turn", 5, 0, [])).toEqual([])
        expect((yield* shape).length).toBe(length)
        expect(fileRows(file)).toHaveLength(length)
        // (c)
        yield* live
        yield* inbox.clear
        expect((yield* shape).slice(-2)).toEqual(["CAN(ns,0,1)", "CAN(nt,0,2)"])
        expect((yield* live).map(liveNotation)).toEqual(["discarded(N)", "discarded(F)", "discarded(V)"])
        yield* inbox.clear
        expect((yield* shape).length).toBe(length + 2)
        // (e)
        yield* driver.inject(plugin("C"))
        yield* inbox.remove(asId("C"))
        yield* driver.followup(user("P"))
        expect((yield* shape).slice(length + 2, length + 7)).toEqual(["INS(ns,0,[C])", "CAN(ns,0,1)", "INS(nt,0,[P])", "TS(1)", "CLM(nt,0,1)"])
        const l = (yield* live).map(liveNotation)
        expect(l.filter((s) => s.startsWith("inserted"))).toEqual(["inserted(C)", "inserted(P)"])
        expect(l.filter((s) => s.startsWith("discarded"))).toEqual(["discarded(C)"])
        expect(l.filter((s) => s.startsWith("claimed"))).toEqual(["claimed(P,1)"])
        yield* driver.whenIdle
        expect((yield* requests).map((r) => r.messages.map(token))).toEqual([["P"]])
        yield* closeOnFile(file)
      }).pipe(Effect.provide(onFile(file, [ScriptedModel.text("ok")])), Effect.scoped)
    }))

  it.scoped("P39 (d): resuming from the file a log whose event 0 is an out-of-range splice fails MalformedLog {seq: 0}", () =>
    Effect.gen(function*() {
      const file = freshFile()
      yield* withStore(file, (store) =>
        store.create(header("s"), [
          { type: "agent/inbox/spliced", seq: 0, time: 0, data: { target: "next-turn", start: 1, inserted: [user("X")] } } as any
        ]))
      const exit = yield* Effect.exit(Effect.scoped(Layer.build(onFile(file, [], { resume: true }))))
      const error = Exit.isFailure(exit) ? Option.getOrUndefined(Cause.failureOption(exit.cause)) : undefined
      expect(error).toBeInstanceOf(MalformedLog)
      expect(error).toMatchObject({ seq: 0 })
      expect(fileRows(file)).toHaveLength(1)
    }))
})

describe("P40 on SQLite", () => {
  it.scoped("P40 (a, d): a wake during maintenance is latched; the task exit opens the turn; AgentBusy during the task", () =>
    Effect.gen(function*() {
      const file = freshFile()
      yield* Effect.gen(function*() {
        const driver = yield* Driver
        const live = yield* recordLive
        const trace = yield* recordStatus
        const G = gate()
        const task = yield* Effect.fork(driver.runMaintenance(Deferred.await(G).pipe(Effect.as(42))))
        yield* settle
        expect(yield* Effect.flip(driver.runMaintenance(Effect.void))).toMatchObject({ _tag: "AgentBusy", phase: "maintenance" })
        yield* driver.followup(user("W"))
        expect(yield* shape).toEqual(["INS(nt,0,[W])"])
        expect(fileRows(file).map(notation)).toEqual(["INS(nt,0,[W])"])
        expect(yield* driver.status).toBe("idle")
        expect((yield* live).map(liveNotation)).toEqual(["inserted(W)"])
        yield* open(G)
        expect(yield* Fiber.join(task)).toBe(42)
        yield* driver.whenIdle
        expect((yield* shape).slice(0, 5)).toEqual(["INS(nt,0,[W])", "TS(1)", "CLM(nt,0,1)", "SS(1,1)", "UM(W)"])
        expect(yield* texts).toEqual(["W"])
        expect(yield* trace).toEqual(["idle", "running", "idle"])
        yield* closeOnFile(file)
      }).pipe(Effect.provide(onFile(file, [ScriptedModel.text("w")])), Effect.scoped)
    }))

  it.scoped("P40 (b, c, d): a removed latch opens no turn; a broad cancel fails MaintenanceAborted; AgentBusy while running", () =>
    Effect.gen(function*() {
      const file = freshFile()
      yield* Effect.gen(function*() {
        const driver = yield* Driver
        const inbox = yield* Inbox
        // (b)
        const G = gate()
        const first = yield* Effect.fork(driver.runMaintenance(Deferred.await(G)))
        yield* settle
        yield* driver.followup(user("W"))
        expect(yield* inbox.remove(asId("W"))).toBe(true)
        yield* open(G)
        yield* Fiber.join(first)
        yield* driver.whenIdle
        expect(yield* shape).toEqual(["INS(nt,0,[W])", "CAN(nt,0,1)"])
        expect(yield* requests).toEqual([])
        // (c)
        const second = yield* Effect.fork(driver.runMaintenance(Effect.never))
        yield* settle
        yield* driver.followup(user("A"))
        yield* driver.cancel(CancelCause.user)
        expect((yield* shape).slice(2)).toEqual(["INS(nt,0,[A])", "CAN(nt,0,1)"])
        const failure = yield* Effect.flip(Fiber.join(second))
        expect(failure).toBeInstanceOf(MaintenanceAborted)
        expect(failure).toMatchObject({ cause: { kind: "user" } })
        yield* driver.followup(user("B"))
        yield* untilEvent((e) => e.type === "assistant/chunk")
        // (d)
        const busy = yield* Effect.flip(driver.runMaintenance(Effect.void))
        expect(busy).toBeInstanceOf(AgentBusy)
        expect(busy).toMatchObject({ phase: "running" })
        yield* driver.cancel(CancelCause.user)
        yield* driver.whenIdle
        expect(yield* texts).toEqual(["B"])
        expect((yield* dataOfType("turn/start")).map((x) => x.turn)).toEqual([1])
        expect(yield* requests).toHaveLength(1)
        yield* closeOnFile(file)
      }).pipe(Effect.provide(onFile(file, [ScriptedModel.hang({ text: "b" })])), Effect.scoped)
    }))
})

describe("P41 on SQLite", () => {
  it.scoped("P41: a pending injection survives a real close and reopen; a copy of the file taken after inject holds it", () =>
    Effect.gen(function*() {
      const file = freshFile()
      const crashCopy = freshFile()
      const scope = yield* Scope.make()
      const ctx = yield* Layer.buildWithScope(onFile(file, [ScriptedModel.text("a")]), scope)
      const driver = Context.get(ctx, Driver)
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      yield* driver.inject(plugin("N"))
      // Acknowledged ⇒ durable: the row is in the file as inject returns.
      expect(fileRows(file).map(notation).slice(-2)).toEqual(["TE(1,completed)", "INS(ns,0,[N])"])
      const snap = new Database(file, { readonly: true })
      yield* Effect.promise(() => snap.backup(crashCopy))
      snap.close()
      const live1 = yield* Effect.provide(events, ctx)
      yield* Scope.close(scope, Exit.void)
      const stored = fileRows(file)
      expect(stored).toEqual(json(live1))
      expect(stored.map(notation).slice(-2)).toEqual(["TE(1,completed)", "INS(ns,0,[N])"])
      expect(stored.map(notation).filter((s) => s.startsWith("CAN"))).toEqual([])
      yield* Effect.gen(function*() {
        const d2 = yield* Driver
        const inbox = yield* Inbox
        const before = yield* shape
        expect(before.slice(stored.length)).toEqual(["ES"])
        expect(ids(yield* inbox.nextStep)).toEqual(["N"])
        expect(yield* d2.status).toBe("idle")
        expect(before.filter((s) => s.startsWith("TS(2"))).toEqual([])
        yield* d2.followup(user("Q"))
        yield* d2.whenIdle
        expect((yield* shape).slice(before.length, before.length + 8)).toEqual(
          ["INS(nt,0,[Q])", "TS(2)", "CLM(ns,0,1)", "CLM(nt,0,1)", "SS(2,1)", "UM(N)", "UM(Q)", "RH(resume)"]
        )
        expect((yield* requests)[0]!.messages.map(token).slice(-2)).toEqual(["N", "Q"])
        yield* closeOnFile(file)
      }).pipe(Effect.provide(onFile(file, [ScriptedModel.text("q")], { resume: true })), Effect.scoped)
      // Crash variant: the image taken right after inject returned.
      yield* Effect.gen(function*() {
        const inbox = yield* Inbox
        expect(ids(yield* inbox.nextStep)).toEqual(["N"])
        yield* closeOnFile(crashCopy)
      }).pipe(Effect.provide(onFile(crashCopy, [], { resume: true })), Effect.scoped)
    }))
})

describe("P42-P43 on SQLite", () => {
  it.scoped("P42: a crashed log in the file is repaired on resume (closers, then ES); turn 2's request ends with the synthetic result", () =>
    Effect.gen(function*() {
      const file = freshFile()
      // A live run whose tool never finishes; the log is captured right after its tool/call.
      const full = yield* Effect.gen(function*() {
        const driver = yield* Driver
        yield* driver.followup(user("A"))
        yield* untilEvent((e) => e.type === "tool/call")
        return yield* events
      }).pipe(
        Effect.provide(agentOver([ScriptedModel.response({ toolCalls: [{ id: "call-1", name: "slow", arguments: {} }] })], {
          tools: [hangingTool]
        }).pipe(Layer.provideMerge(SessionStore.layerMemory))),
        Effect.scoped
      )
      const d = full.slice(0, full.findIndex((e) => notation(e) === "TC(call-1)") + 1)
      const tc = d.length - 1
      const closers = repairClosers(d)
      expect(closers.map(notation)).toEqual(["TR?(call-1)", "SE(1,1)", "TE(1,interrupted)"])
      yield* withStore(file, (store) => store.create(header("crashed"), d))
      expect(fileRows(file, "crashed")).toEqual(json(d))
      yield* Effect.gen(function*() {
        const log = yield* SessionLog
        const driver = yield* Driver
        const opened = yield* log.events
        expect(opened.map(notation).slice(d.length)).toEqual(["TR?(call-1)", "SE(1,1)", "TE(1,interrupted)", "ES"])
        const tr = opened[d.length] as any
        expect(tr.data.error).toEqual({ name: "ToolOutcomeUnknownError", code: "TOOL_OUTCOME_UNKNOWN" })
        expect(tr.sourceEventSeqs).toEqual([tc])
        expect(opened.slice(d.length, d.length + 3).map((e) => e.seq)).toEqual([d.length, d.length + 1, d.length + 2])
        expect(opened.slice(d.length, d.length + 3).every((e) => e.time === d[d.length - 1]!.time)).toBe(true)
        // The closers and ES are committed before the agent is handed out.
        expect(fileRows(file, "crashed").map(notation).slice(d.length)).toEqual(["TR?(call-1)", "SE(1,1)", "TE(1,interrupted)", "ES"])
        expect(checkLog(opened, { closed: true })).toEqual([])
        yield* driver.followup(user("B"))
        yield* driver.whenIdle
        expect((yield* dataOfType("turn/start")).map((x) => x.turn)).toEqual([1, 2])
        expect((yield* requests)[0]!.messages.map(token).slice(-2)).toEqual(["tool-result call-1", "B"])
        yield* closeOnFile(file, "crashed")
      }).pipe(Effect.provide(onFile(file, [ScriptedModel.text("after")], { sessionId: "crashed", resume: true })), Effect.scoped)
    }))

  it.scoped("P42 (a, b): open turns in the file are closed on resume with TE(interrupted) (and SE), then ES, all committed", () =>
    Effect.gen(function*() {
      const file = freshFile()
      const A = user("A")
      const ins = { type: "agent/inbox/spliced", seq: 0, time: 7, data: { target: "next-turn", start: 0, inserted: [A] } }
      const ts = { type: "turn/start", seq: 1, time: 8, data: { turn: 1 } }
      const clm = { type: "agent/inbox/spliced", seq: 2, time: 9, data: { target: "next-turn", start: 0, removedCount: 1, inserted: [] } }
      const ss = { type: "step/start", seq: 3, time: 10, data: { turn: 1, step: 1 } }
      const um = { type: "user/message", seq: 4, time: 11, data: A, surfaceOp: "append" }
      const a = [ins, ts, clm] as unknown as ReadonlyArray<SessionEvent>
      const b = [ins, ts, clm, ss, um] as unknown as ReadonlyArray<SessionEvent>
      yield* withStore(file, (store) => Effect.zipRight(store.create(header("a"), a), store.create(header("b"), b)))
      for (const [session, log, closers] of [["a", a, ["TE(1,interrupted)"]], ["b", b, ["SE(1,1)", "TE(1,interrupted)"]]] as const) {
        yield* Effect.gen(function*() {
          const es = yield* events
          expect(es.map(notation).slice(log.length)).toEqual([...closers, "ES"])
          expect(es.slice(log.length, log.length + closers.length).map((e) => [e.seq, e.time])).toEqual(
            closers.map((_, i) => [log.length + i, log[log.length - 1]!.time])
          )
          expect(fileRows(file, session)).toEqual(json(es))
          yield* closeOnFile(file, session)
        }).pipe(Effect.provide(onFile(file, [], { sessionId: session, resume: true })), Effect.scoped)
      }
    }))

  it.scoped("P43 (e): on SQLite, boundaries after completed, blocked, aborted and error turns are accepted", () =>
    Effect.gen(function*() {
      const file = freshFile()
      yield* Effect.gen(function*() {
        const driver = yield* Driver
        const preStep = yield* PreStep
        yield* preStep.register((input, next) => input.turn === 2 ? Effect.succeed(PreStepDecision.reject("no")) : next())
        for (const id of ["A", "B", "C"]) {
          yield* driver.followup(user(id))
          yield* driver.whenIdle
        }
        yield* driver.followup(user("D"))
        yield* untilEvent((e) => e.type === "assistant/chunk" && (e.data as any).turn === 4)
        yield* driver.cancel(CancelCause.user)
        yield* closeOnFile(file)
      }).pipe(
        Effect.provide(onFile(file, [ScriptedModel.text("one"), ScriptedModel.fail({ message: "x", code: "AUTH" }), ScriptedModel.hang({ text: "h" })])),
        Effect.scoped
      )
      const stored = fileRows(file)
      const ends = stored.filter((e) => e.type === "turn/end")
      expect(ends.map((e) => (e.data as any).reason.kind)).toEqual(["completed", "blocked", "error", "aborted"])
      yield* withStore(file, (store) =>
        Effect.forEach(ends, (e) =>
          Effect.gen(function*() {
            const child = yield* forkSession({ source: sid("s"), boundary: e.seq }).pipe(Effect.provideService(SessionStore, store))
            expect((yield* store.load(child)).header.seedLength).toBe(e.seq + 1)
            expect(fileRows(file, child).map(notation)).toEqual([...stored.slice(0, e.seq + 1).map(notation), "ES"])
          })))
    }))

  it.scoped("P43 (a, b, d): fork on the SQLite store; the child is read back from a reopened file and runs turn 2 with RH(resume)", () =>
    Effect.gen(function*() {
      const file = freshFile()
      const source = yield* Effect.gen(function*() {
        const driver = yield* Driver
        yield* driver.followup(user("A"))
        yield* driver.whenIdle
        yield* driver.inject(plugin("C"))
        yield* (yield* SessionLog).flush
        return yield* events
      }).pipe(Effect.provide(onFile(file, [ScriptedModel.text("one")])), Effect.scoped)
      expect(fileRows(file)).toEqual(json(source))
      // (a) and (b) on a store opened afresh on the file.
      const childId = yield* withStore(file, (store) =>
        Effect.gen(function*() {
          yield* store.create(header("empty"), [])
          const fork = (input: Parameters<typeof forkSession>[0]) => forkSession(input).pipe(Effect.provideService(SessionStore, store))
          expect(yield* fork({ source: sid("empty"), childId: sid("child0") })).toBe("child0")
          return yield* fork({ source: sid("s") })
        }))
      const reopened = yield* withStore(file, (store) =>
        Effect.all([store.load(sid("child0")), store.load(childId), store.load(sid("nope")).pipe(Effect.flip)]))
      expect(reopened[0].events.map(notation)).toEqual(["ES"])
      expect(reopened[0].header).toMatchObject({ seedLength: 0, parent: { sessionId: "empty", boundary: -1 } })
      expect(fileRows(file, "child0").map(notation)).toEqual(["ES"])
      const child = reopened[1]
      expect(child.events.slice(0, source.length)).toEqual(source)
      expect(child.events.map(notation).slice(source.length)).toEqual(["ES"])
      expect(child.header).toMatchObject({ seedLength: source.length, parent: { sessionId: "s", boundary: source.length - 1 } })
      expect(fileRows(file, childId)).toEqual(json(child.events))
      expect(reopened[2]).toBeInstanceOf(SessionNotFound)
      // (d) An agent on the child, over a new store on the file.
      yield* Effect.gen(function*() {
        const inbox = yield* Inbox
        const driver = yield* Driver
        expect(yield* inbox.nextStep).toEqual([])
        yield* driver.followup(user("B"))
        yield* driver.whenIdle
        expect((yield* shape).slice(source.length + 1, source.length + 7)).toEqual(
          ["INS(nt,0,[B])", "TS(2)", "CLM(nt,0,1)", "SS(2,1)", "UM(B)", "RH(resume)"]
        )
        yield* closeOnFile(file, childId)
      }).pipe(Effect.provide(onFile(file, [ScriptedModel.text("two")], { sessionId: childId, resume: true })), Effect.scoped)
      // The source keeps its pending [C].
      yield* Effect.gen(function*() {
        expect(ids(yield* (yield* Inbox).nextStep)).toEqual(["C"])
      }).pipe(Effect.provide(onFile(file, [], { resume: true })), Effect.scoped)
    }))

  it.scoped("P43 (c): fork errors against a SQLite source holding an open turn", () =>
    Effect.gen(function*() {
      const file = freshFile()
      const source = yield* Effect.gen(function*() {
        const driver = yield* Driver
        yield* driver.followup(user("A"))
        yield* driver.whenIdle
        yield* driver.followup(user("B"))
        yield* untilEvent((e) => e.type === "tool/call")
        yield* (yield* SessionLog).flush
        return yield* events
      }).pipe(
        Effect.provide(agentOver(
          [ScriptedModel.text("one"), ScriptedModel.response({ toolCalls: [{ id: "c1", name: "slow", arguments: {} }] })],
          { tools: [hangingTool] }
        ).pipe(Layer.provideMerge(SessionStore.layerMemory))),
        Effect.scoped
      )
      const at = (n: string) => source.findIndex((e) => notation(e) === n)
      yield* withStore(file, (store) =>
        Effect.gen(function*() {
          yield* store.create(header("src"), source)
          yield* store.create(header("taken"), [])
          const fork = (boundary?: number, childId?: string) =>
            Effect.flip(forkSession({
              source: sid("src"),
              ...(boundary !== undefined ? { boundary } : {}),
              ...(childId !== undefined ? { childId: sid(childId) } : {})
            }).pipe(Effect.provideService(SessionStore, store)))
          for (const boundary of [undefined, at("TS(2)"), at("SS(2,1)"), at("UM(B)"), at("AM"), at("TC(c1)")]) {
            const error = yield* fork(boundary)
            expect(error, String(boundary)).toBeInstanceOf(ForkError)
            expect(error, String(boundary)).toMatchObject({ reason: "open-turn" })
          }
          for (const boundary of [-1, 0.5, source.length]) {
            expect(yield* fork(boundary), String(boundary)).toMatchObject({ _tag: "ForkError", reason: "invalid-boundary" })
          }
          expect(yield* fork(0.5, "taken")).toMatchObject({ _tag: "ForkError", reason: "child-exists" })
          const ok = yield* forkSession({ source: sid("src"), boundary: at("TE(1,completed)"), childId: sid("ok") }).pipe(
            Effect.provideService(SessionStore, store)
          )
          expect(ok).toBe("ok")
        }))
      const rows = fileRows(file, "ok")
      expect(rows.map(notation)).toEqual([...source.slice(0, at("TE(1,completed)") + 1).map(notation), "ES"])
      expect(rows.slice(0, -1)).toEqual(json(source.slice(0, at("TE(1,completed)") + 1)))
      const db = new Database(file, { readonly: true })
      const sessions = db.prepare("SELECT id FROM sessions ORDER BY id").all() as Array<{ readonly id: string }>
      db.close()
      expect(sessions.map((s) => s.id)).toEqual(["ok", "src", "taken"])
    }))
})

describe("P44-P45 on SQLite", () => {
  it.scoped("P44: a surface replacement is written to the file; rejections write nothing; the reopened log derives S where X was", () =>
    Effect.gen(function*() {
      const file = freshFile()
      const replaced = yield* Effect.gen(function*() {
        const driver = yield* Driver
        const log = yield* SessionLog
        yield* driver.followup(user("X"))
        yield* driver.whenIdle
        const before = yield* events
        const s = before.find((e) => e.type === "user/message")!.seq
        const am = before.find((e) => e.type === "assistant/message")!.seq
        const S = user("S", "summary")
        const reject = (input: Parameters<typeof log.append>[0]) => Effect.flip(log.append(input))
        expect(yield* reject({ type: "user/message", data: S, surfaceOp: { op: "replace", start: 0, end: 0 }, sourceEventSeqs: [0] })).toBeInstanceOf(InvalidEvent)
        expect(yield* reject({ type: "user/message", data: S, surfaceOp: { op: "replace", start: am, end: s }, sourceEventSeqs: [s, am] })).toBeInstanceOf(InvalidEvent)
        expect(yield* reject({ type: "user/message", data: S, surfaceOp: { op: "replace", start: s, end: s }, sourceEventSeqs: [0] })).toBeInstanceOf(InvalidEvent)
        expect(yield* reject({ type: "user/message", data: S, surfaceOp: "append" })).toBeInstanceOf(InvalidEvent)
        expect(yield* reject({ type: "user/message", data: user("X", "again"), surfaceOp: { op: "replace", start: s, end: s }, sourceEventSeqs: [s] })).toBeInstanceOf(DuplicateMessage)
        expect(yield* events).toEqual(before)
        yield* log.flush
        expect(fileRows(file)).toEqual(json(before))
        const appended = yield* log.append({ type: "user/message", data: S, surfaceOp: { op: "replace", start: s, end: s }, sourceEventSeqs: [s] })
        expect(appended.seq).toBe(before.length)
        expect((yield* log.messages).map(token)).toEqual(["summary", "ok"])
        const surface = yield* log.surface
        expect(surface[0]).toBe(appended.seq)
        expect(surface).not.toContain(s)
        expect((yield* events).some((e) => e.seq === s && e.type === "user/message")).toBe(true)
        // Acknowledged ⇒ durable.
        expect(fileRows(file).at(-1)).toEqual(json(appended))
        yield* closeOnFile(file)
        return { s, seq: appended.seq }
      }).pipe(Effect.provide(onFile(file, [ScriptedModel.text("ok")])), Effect.scoped)
      const stored = fileRows(file)
      expect(deriveMessages(stored).map(token)).toEqual(["summary", "ok"])
      yield* Effect.gen(function*() {
        const log = yield* SessionLog
        expect((yield* log.messages).map(token)).toEqual(["summary", "ok"])
        const surface = yield* log.surface
        expect(surface[0]).toBe(replaced.seq)
        expect(surface).not.toContain(replaced.s)
        yield* closeOnFile(file)
      }).pipe(Effect.provide(onFile(file, [], { resume: true })), Effect.scoped)
    }))

  it.scoped("P45: on SQLite, live compaction/start {turn: 1} while idle fails InvalidEvent {rule: R6} and writes nothing", () =>
    Effect.gen(function*() {
      const file = freshFile()
      yield* Effect.gen(function*() {
        const log = yield* SessionLog
        const driver = yield* Driver
        yield* driver.followup(user("A"))
        yield* driver.whenIdle
        yield* log.flush
        const before = yield* events
        const error = yield* Effect.flip(log.append({ type: "compaction/start", data: { turn: 1 } }))
        expect(error).toBeInstanceOf(InvalidEvent)
        expect(error).toMatchObject({ rule: "R6" })
        expect(yield* events).toEqual(before)
        yield* closeOnFile(file)
      }).pipe(Effect.provide(onFile(file, [ScriptedModel.text("ok")])), Effect.scoped)
    }))

  it.scoped("P45: opening a stored SQLite log that violates a rule fails MalformedLog and leaves the file as it was", () =>
    Effect.gen(function*() {
      const file = freshFile()
      const A = user("A")
      const bad = [
        { type: "agent/inbox/spliced", seq: 0, time: 0, data: { target: "next-turn", start: 0, inserted: [A] } },
        { type: "turn/start", seq: 1, time: 0, data: { turn: 1 } },
        { type: "step/start", seq: 2, time: 0, data: { turn: 1, step: 1 } }
      ] as unknown as ReadonlyArray<SessionEvent>
      expect(checkLog(bad).map((v) => v.rule)).toContain("R7")
      yield* withStore(file, (store) => store.create(header("bad"), bad))
      const exit = yield* Effect.exit(Effect.scoped(Layer.build(onFile(file, [], { sessionId: "bad", resume: true }))))
      expect(Exit.isFailure(exit) && Option.getOrUndefined(Cause.failureOption(exit.cause))).toBeInstanceOf(MalformedLog)
      expect(fileRows(file, "bad")).toEqual(json(bad))
    }))
})
