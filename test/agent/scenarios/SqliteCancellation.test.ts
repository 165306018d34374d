/**
 * SPEC 9 scenarios on SQLite: P31-P41 cancellation in the loop, disposal, maintenance.
 */
import { afterAll, describe, expect, it } from "@effect/vitest"
import Database from "better-sqlite3"
import { Cause, Context, Deferred, Effect, Exit, Fiber, Layer, Option, Random, Schema, Scope, Stream } from "effect"
import { AgentBusy, AgentDisposed, CancelCause, checkLog, Driver, DuplicateMessage, Hooks, Inbox, InvalidSplice, MaintenanceAborted, MalformedLog, PreStep, ScriptedModel, SessionId, SessionLog, SessionStore, SqliteSessionStore, Tool } from "../../../src/index.js"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { agentOver, asId, dataOfType, events, gate, liveNotation, notation, open, plugin, recordLive, recordStatus, requests, settle, shape, texts, token, until, untilEvent, user } from "../harness.js"
import type { DriverEvent, ScriptEntry, SessionEvent, UserMessage } from "../../../src/index.js"

const dir = fs.mkdtempSync(path.join(os.tmpdir(), "tiller-loop-"))
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }))
let files = 0
const freshFile = () => path.join(dir, `loop-${++files}.db`)

/** The committed events of session "s", read from the file on a connection of its own. */
const fileEvents = (file: string): Array<unknown> => {
  const db = new Database(file, { readonly: true })
  try {
    const rows = db.prepare("SELECT seq, row FROM events WHERE session_id = ? ORDER BY seq").all("s") as Array<
      { readonly seq: number; readonly row: string }
    >
    return rows.map((r) => JSON.parse(r.row))
  } finally {
    db.close()
  }
}

type Services = Layer.Layer.Success<ReturnType<typeof agentOver>> | Scope.Scope
type Options = Parameters<typeof agentOver>[1]

/** One scenario: built afresh for each store so gates and counters are its own. */
interface Case<X> {
  readonly script: ReadonlyArray<ScriptEntry>
  readonly options?: Options
  readonly body: Effect.Effect<X, unknown, Services>
  /** Events whose position races with the loop (concurrent callers): left out of the store comparison. */
  readonly racing?: ReadonlyArray<string>
}

interface Run<X> {
  readonly shape: ReadonlyArray<string>
  readonly events: ReadonlyArray<SessionEvent>
  readonly live: ReadonlyArray<string>
  readonly trace: ReadonlyArray<string>
  readonly requests: ReadonlyArray<{ readonly turn: number; readonly step: number; readonly attempt: number; readonly messages: ReadonlyArray<string> }>
  readonly violations: ReadonlyArray<unknown>
  readonly inbox: { readonly nextTurn: ReadonlyArray<string>; readonly nextStep: ReadonlyArray<string> }
  readonly file?: ReadonlyArray<unknown>
  readonly extra: X
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/

/** The log as JSON with minted UUIDs numbered in order of appearance and times made relative to event 0. */
const normalise = (es: ReadonlyArray<SessionEvent>) => {
  const ids = new Map<string, string>()
  const t0 = es[0]?.time ?? 0
  const walk = (v: unknown): unknown => {
    if (typeof v === "string" && UUID.test(v)) {
      if (!ids.has(v)) ids.set(v, `uuid-${ids.size}`)
      return ids.get(v)
    }
    if (Array.isArray(v)) return v.map(walk)
    if (v !== null && typeof v === "object") return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, walk(x)]))
    return v
  }
  return es.map((e) => walk({ ...JSON.parse(JSON.stringify(e)), time: e.time - t0 }))
}

/** Runs a case over one store (a SQLite file, or memory when `file` is undefined) and gathers its outcome. */
const runOn = <X>(c: Case<X>, file: string | undefined): Effect.Effect<Run<X>, unknown> => {
  const store = file === undefined ? SessionStore.layerMemory : SqliteSessionStore.layer({ filename: file })
  const layer = agentOver(c.script, c.options ?? {}).pipe(Layer.provideMerge(store))
  return Effect.gen(function*() {
    const driver = yield* Driver
    const log = yield* SessionLog
    const inbox = yield* Inbox
    const live = yield* recordLive
    const trace = yield* recordStatus
    const extra = yield* c.body
    yield* driver.whenIdle
    yield* settle
    yield* log.flush
    const es = yield* events
    const snapshot = yield* inbox.snapshot
    return {
      shape: yield* shape,
      events: es,
      live: (yield* live).map(liveNotation),
      trace: yield* trace,
      requests: (yield* requests).map((r) => ({ turn: r.turn, step: r.step, attempt: r.attempt, messages: r.messages.map(token) })),
      violations: checkLog(es, { closed: true }),
      inbox: { nextTurn: snapshot.nextTurn.map((m) => m.id), nextStep: snapshot.nextStep.map((m) => m.id) },
      ...(file === undefined ? {} : { file: fileEvents(file) }),
      extra
    }
  }).pipe(Effect.provide(layer), Effect.scoped, Effect.withRandom(Random.make("tiller-loop")))
}

/**
 * Runs `make()` over memory and over a fresh SQLite file. Checks on SQLite: checkLog clean, the
 * file equals the live log; and that both runs agree on everything observable. Returns the SQLite run.
 */
const onBoth = <X>(make: (file: string | undefined) => Case<X>) =>
  Effect.gen(function*() {
    const first = make(undefined)
    const mem = yield* runOn(first, undefined)
    const file = freshFile()
    const sql = yield* runOn(make(file), file)
    // after disposal, a fresh store on the same file loads exactly the live log
    const loaded = yield* Effect.provide(
      Effect.flatMap(SessionStore, (store) => store.load(SessionId.make("s"))),
      SqliteSessionStore.layer({ filename: file })
    )
    expect(loaded.events).toEqual(sql.events)
    expect(loaded.header).toMatchObject({ formatVersion: 1, sessionId: "s", seedLength: 0 })
    const racing = first.racing ?? []
    const steady = (s: ReadonlyArray<string>) => s.filter((x) => !racing.includes(x))
    expect(sql.violations).toEqual([])
    expect(mem.violations).toEqual([])
    expect(sql.file).toEqual(JSON.parse(JSON.stringify(sql.events)))
    expect(steady(sql.shape)).toEqual(steady(mem.shape))
    expect(sql.live).toEqual(mem.live)
    expect(sql.trace).toEqual(mem.trace)
    expect(sql.requests).toEqual(mem.requests)
    expect(sql.inbox).toEqual(mem.inbox)
    if (racing.length === 0) expect(normalise(sql.events)).toEqual(normalise(mem.events))
    return sql
  })

const TEXT = ["CH(block-start)", "CH(text-delta)", "CH(block-end)", "CH(finish stop)", "AM"]
const empty = Schema.Struct({})
const calls = (name: string, ids: ReadonlyArray<string>) =>
  ScriptedModel.response({ toolCalls: ids.map((id) => ({ id, name, arguments: {} })) })
/** The Driver of the current run, for tool bodies defined before the agent exists. */
const captured = () => {
  let current: Driver["Type"] | undefined
  return {
    get get(): Driver["Type"] {
      return current!
    },
    capture: Effect.map(Driver, (d) => (current = d))
  }
}

const dirSqlite = fs.mkdtempSync(path.join(os.tmpdir(), "tiller-p37-45-"))
afterAll(() => fs.rmSync(dirSqlite, { recursive: true, force: true }))
const freshFileSqlite = () => path.join(dirSqlite, `scenario-${++files}.db`)

const sid = (s: string) => SessionId.make(s)
const header = (id: string) => ({ formatVersion: 1 as const, sessionId: sid(id), createdAt: 0, seedLength: 0 })
const ids = (ms: ReadonlyArray<UserMessage>) => ms.map((m) => m.id)
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

// ---------------------------------------------------------------------------------------------------
describe("§7 / §9 P31-P36 on SQLite: cancellation in the loop", () => {
  it.scoped("P31/C5: cancel while streaming — AM! citing both chunks, SE, TE(aborted(user)); the next request sees the prefix", () =>
    Effect.gen(function*() {
      const run = yield* onBoth(() => ({
        script: [ScriptedModel.hang({ text: "partial" }), ScriptedModel.text("after")],
        body: Effect.gen(function*() {
          const d = yield* Driver
          yield* d.followup(user("A"))
          yield* untilEvent((e) => e.type === "assistant/chunk" && (e.data as any).chunk.type === "text-delta")
          yield* d.cancel(CancelCause.user)
          yield* d.whenIdle
          yield* d.followup(user("B"))
        })
      }))
      expect(run.shape.slice(0, 12)).toEqual([
        "INS(nt,0,[A])", "TS(1)", "CLM(nt,0,1)", "SS(1,1)", "UM(A)", "RH(initial)", "CH(block-start)", "CH(text-delta)",
        "AM!", "SE(1,1)", "TE(1,aborted(user))", "INS(nt,0,[B])"
      ])
      const am = run.events[8]!
      expect((am.data as any).message.content).toEqual([{ type: "text", text: "partial" }])
      expect((am.data as any).interrupted).toBe(true)
      expect((am as any).sourceEventSeqs).toEqual([6, 7])
      expect(run.requests[1]!.messages).toEqual(["A", "partial", "B"])
      expect(run.live).toEqual([
        "inserted(A)", "status(running)", "claimed(A,1)", "status(idle)", "inserted(B)", "status(running)", "claimed(B,2)",
        "status(idle)"
      ])
    }))

  it.scoped("P32: cancel after the assistant message, before tools — ⟨TC TR⊘⟩, the body never runs", () =>
    Effect.gen(function*() {
      const run = yield* onBoth(() => {
        const driver = captured()
        let ran = 0
        const danger = Tool.make("danger", { description: "counts", parameters: empty, execute: () => Effect.sync(() => (ran++, "boom")) })
        return {
          script: [
            ScriptedModel.response({
              toolCalls: [{ id: "c1", name: "danger", arguments: {} }],
              afterFinish: Effect.suspend(() => driver.get.cancel(CancelCause.user))
            }),
            ScriptedModel.text("ok")
          ],
          options: { tools: [danger] },
          body: Effect.gen(function*() {
            const d = yield* driver.capture
            yield* d.followup(user("A"))
            yield* d.whenIdle
            yield* d.followup(user("B"))
            yield* d.whenIdle
            return ran
          })
        }
      })
      expect(run.extra).toBe(0)
      const te1 = run.shape.indexOf("TE(1,aborted(user))")
      expect(run.shape.slice(te1 - 5, te1 + 1)).toEqual(["CH(finish stop)", "AM", "TC(c1)", "TR⊘(c1)", "SE(1,1)", "TE(1,aborted(user))"])
      expect(run.requests[1]!.messages).toEqual(["A", "tool-call c1", "tool-result c1", "B"])
      const tr = run.events.find((e) => e.type === "tool/result")!.data as any
      expect(tr.message.content[0].isError).toBe(true)
      expect(run.events.filter((e) => e.type === "turn/end").map((e) => (e.data as any).reason.kind)).toEqual(["aborted", "completed"])
    }))

  const p33 = (keepInbox: boolean) => () => {
    const started: Array<string> = []
    const p = Tool.make("p", {
      description: "never finishes",
      parameters: empty,
      mode: "parallel",
      execute: (_p, ctx) => Effect.zipRight(Effect.sync(() => started.push(ctx.callId)), Effect.never)
    })
    return {
      script: [calls("p", ["c1", "c2", "c3", "c4"]), ScriptedModel.text("after")],
      options: { tools: [p], maxParallelToolCalls: 2 },
      body: Effect.gen(function*() {
        const hooks = yield* Hooks
        yield* hooks.onToolPost((input, next) =>
          Effect.map(next(), (output) => ({ ...output, additionalContexts: [plugin(`ctx-${input.callId}`)] }))
        )
        const d = yield* Driver
        yield* d.followup(user("A"))
        yield* until(Effect.sync(() => started.length === 2))
        yield* d.cancel(CancelCause.user, { keepInbox })
        yield* d.whenIdle
        const pending = (yield* (yield* Inbox).nextStep).map((m) => m.id)
        yield* d.followup(user("W"))
        return pending
      })
    }
  }

  it.scoped("P33/D8: broad cancel during parallel tools — each TR✗ with INS+CAN of its context; ⟨TC TR⊘⟩ for unstarted calls", () =>
    Effect.gen(function*() {
      const run = yield* onBoth(p33(false))
      const s = run.shape
      expect(s.slice(s.indexOf("TC(c1)"), s.indexOf("TE(1,aborted(user))") + 1)).toEqual([
        "TC(c1)", "TC(c2)", "TR✗(c1)", "INS(ns,0,[ctx-c1])", "CAN(ns,0,1)", "TR✗(c2)", "INS(ns,0,[ctx-c2])", "CAN(ns,0,1)",
        "TC(c3)", "TR⊘(c3)", "TC(c4)", "TR⊘(c4)", "SE(1,1)", "TE(1,aborted(user))"
      ])
      expect(run.extra).toEqual([])
      expect(run.requests[1]!.messages.slice(-1)).toEqual(["W"])
      expect(run.events.filter((e) => e.type === "user/message").map((e) => (e.data as any).id)).toEqual(["A", "W"])
      expect(run.live).toEqual([
        "inserted(A)", "status(running)", "claimed(A,1)", "inserted(ctx-c1)", "discarded(ctx-c1)", "inserted(ctx-c2)",
        "discarded(ctx-c2)", "status(idle)", "inserted(W)", "status(running)", "claimed(W,2)", "status(idle)"
      ])
    }))

  it.scoped("P33/D8: keepInbox cancel during parallel tools keeps the contexts; turn 2 enters ctx-c1 ctx-c2 W once", () =>
    Effect.gen(function*() {
      const run = yield* onBoth(p33(true))
      const s = run.shape
      expect(s.slice(s.indexOf("TC(c1)"), s.indexOf("TE(1,aborted(user))") + 1)).toEqual([
        "TC(c1)", "TC(c2)", "TR✗(c1)", "INS(ns,0,[ctx-c1])", "TR✗(c2)", "INS(ns,1,[ctx-c2])",
        "TC(c3)", "TR⊘(c3)", "TC(c4)", "TR⊘(c4)", "SE(1,1)", "TE(1,aborted(user))"
      ])
      expect(run.extra).toEqual(["ctx-c1", "ctx-c2"])
      const ss = s.indexOf("SS(2,1)")
      expect(s.slice(ss - 4, ss + 4)).toEqual(["INS(nt,0,[W])", "TS(2)", "CLM(ns,0,2)", "CLM(nt,0,1)", "SS(2,1)", "UM(ctx-c1)", "UM(ctx-c2)", "UM(W)"])
      expect(run.live.filter((x) => x.startsWith("discarded"))).toEqual([])
    }))

  it.scoped("P34: cancel right after waking follow-ups — CAN(nt,0,1), no step, discarded(B)", () =>
    Effect.gen(function*() {
      const run = yield* onBoth(() => {
        const G = gate()
        return {
          script: [],
          body: Effect.gen(function*() {
            yield* (yield* PreStep).register((_i, next) => Effect.zipRight(Deferred.await(G), next()))
            const d = yield* Driver
            yield* d.followup(user("A"))
            yield* d.followup(user("B"))
            yield* d.cancel(CancelCause.user)
            yield* d.whenIdle
            const inbox = yield* Inbox
            return [yield* inbox.idState(user("A").id), yield* inbox.idState(user("B").id)].map((o) => o._tag === "Some" ? o.value : "none")
          })
        }
      })
      expect(run.shape).toEqual(["INS(nt,0,[A])", "TS(1)", "CLM(nt,0,1)", "INS(nt,0,[B])", "CAN(nt,0,1)", "TE(1,aborted(user))"])
      expect(run.live).toEqual(["inserted(A)", "status(running)", "claimed(A,1)", "inserted(B)", "discarded(B)", "status(idle)"])
      expect(run.extra).toEqual(["claimed", "discarded"])
    }))

  it.scoped("P35: keepInbox parks pre-abort work; a later wake runs B then W as turns 2 and 3", () =>
    Effect.gen(function*() {
      const run = yield* onBoth(() => ({
        script: [ScriptedModel.hang({ text: "a" }), ScriptedModel.text("b"), ScriptedModel.text("w")],
        racing: ["INS(nt,0,[B])"],
        body: Effect.gen(function*() {
          const d = yield* Driver
          yield* d.followup(user("A"))
          yield* untilEvent((e) => e.type === "assistant/chunk")
          yield* d.followup(user("B"))
          yield* d.cancel(CancelCause.user, { keepInbox: true })
          yield* d.whenIdle
          const parked = { nextTurn: (yield* (yield* Inbox).nextTurn).map((m) => m.id), requests: (yield* requests).length }
          yield* d.followup(user("W"))
          return parked
        })
      }))
      expect(run.extra).toEqual({ nextTurn: ["B"], requests: 1 })
      expect(run.shape.filter((x) => x.startsWith("CAN"))).toEqual([])
      expect(run.shape.filter((x) => x.startsWith("TE") || x.startsWith("UM"))).toEqual([
        "UM(A)", "TE(1,aborted(user))", "UM(B)", "TE(2,completed)", "UM(W)", "TE(3,completed)"
      ])
      const te1 = run.shape.indexOf("TE(1,aborted(user))")
      expect(run.shape.slice(te1 + 1, te1 + 4)).toEqual(["INS(nt,1,[W])", "TS(2)", "CLM(nt,0,1)"])
      expect(run.requests).toHaveLength(3)
    }))

  it.scoped("P36: a wake after a keepInbox cancel is latched and replayed in TX-CLOSE; no transient idle", () =>
    Effect.gen(function*() {
      const run = yield* onBoth(() => {
        const G = gate()
        return {
          script: [ScriptedModel.hang({}, { onInterrupt: Deferred.await(G) }), ScriptedModel.text("b")],
          body: Effect.gen(function*() {
            const d = yield* Driver
            yield* d.followup(user("A"))
            yield* until(Effect.map(requests, (r) => r.length === 1))
            yield* d.cancel(CancelCause.user, { keepInbox: true })
            yield* d.followup(user("B"))
            yield* settle
            const statusBefore = yield* d.status
            yield* open(G)
            return statusBefore
          })
        }
      })
      expect(run.extra).toBe("running")
      expect(run.shape).toEqual([
        // nothing was streamed: an empty prefix writes no AM! (7.4)
        "INS(nt,0,[A])", "TS(1)", "CLM(nt,0,1)", "SS(1,1)", "UM(A)", "RH(initial)", "INS(nt,0,[B])", "SE(1,1)",
        "TE(1,aborted(user))", "TS(2)", "CLM(nt,0,1)", "SS(2,1)", "UM(B)", ...TEXT, "SE(2,1)", "TE(2,completed)"
      ])
      expect(run.trace).toEqual(["idle", "running", "idle"])
      expect(run.live).toEqual(["inserted(A)", "status(running)", "claimed(A,1)", "inserted(B)", "claimed(B,2)", "status(idle)"])
    }))
})

describe("P37-P38 on SQLite", () => {
  it.scoped("P37: first cause wins (TE(1,aborted(parent))) on SQLite", () =>
    Effect.gen(function*() {
      const file = freshFileSqlite()
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
      const file = freshFileSqlite()
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
      const file = freshFileSqlite()
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
      const file = freshFileSqlite()
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
      const file = freshFileSqlite()
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
      const file = freshFileSqlite()
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
      const file = freshFileSqlite()
      const crashCopy = freshFileSqlite()
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