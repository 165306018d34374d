/**
 * Sessions and fork over the SQLite store (SPEC 6.6, 8.10): lifetime, idle release, opening after a
 * release elsewhere, failed opens, fork and resume through the file.
 */
import { describe, expect, it } from "@effect/vitest"
import Database from "better-sqlite3"
import { Context, Effect, Exit, Layer, Option, Schema, Scope, TestClock } from "effect"
import * as fs from "node:fs"
import * as Fs from "node:fs"
import * as os from "node:os"
import * as Os from "node:os"
import * as path from "node:path"
import * as Path from "node:path"
import {
  Agent,
  AgentBusy,
  AgentDisposed,
  checkLog,
  Driver,
  DuplicateMessage,
  ForkError,
  forkSession,
  Inbox,
  PersistenceError,
  ScriptedModel,
  SessionExists,
  SessionId,
  SessionLog,
  SessionNotFound,
  Sessions,
  SessionStore,
  SqliteSessionStore,
  Tool,
  Tools
} from "../../src/index.js"
import type { ScriptEntry, SessionEvent, ToolDefinition, UserMessage } from "../../src/index.js"
import { agentOver, asId, events, notation, plugin, settle, until, untilEvent, user } from "../agent/harness.js"
import { storedEvents, storedShape, tempFiles } from "../fixtures/sqliteFile.js"

const { freshFile } = tempFiles("tiller-f9-")

const sid = (s: string) => SessionId.make(s)
const rawShapeEffect = (file: string, id: string) => Effect.sync(() => storedShape(file, id))

type AgentServices = Context.Context<
  Layer.Layer.Success<ReturnType<typeof agentOver>>
>

/** An SQLite store built in the current scope, and agents over it in scopes the test closes itself. */
const sqliteStore = (filename: string) =>
  Effect.map(Layer.build(SqliteSessionStore.layer({ filename })), (storeCtx) => {
    const store = Context.get(storeCtx, SessionStore)
    const acquire = (script: ReadonlyArray<ScriptEntry>, options: Parameters<typeof agentOver>[1] = {}) =>
      Effect.gen(function*() {
        const scope = yield* Scope.make()
        const ctx: AgentServices = yield* Layer.buildWithScope(
          agentOver(script, options).pipe(Layer.provide(Layer.succeedContext(storeCtx))),
          scope
        ).pipe(Effect.tapError(() => Scope.close(scope, Exit.void)))
        return { ctx, dispose: Scope.close(scope, Exit.void) }
      })
    return { store, storeCtx, acquire }
  })

/** An agent resuming `id`, over the store, model and tools its context provides. */
const agentResuming = (id: string) => Agent.layer({ resume: sid(id), model: { provider: "p", model: "m" } })

const on = <A, E, R>(ctx: Context.Context<R>) => (effect: Effect.Effect<A, E, R>) => Effect.provide(effect, ctx)
const quickTool: ToolDefinition<any> = Tool.make("quick", {
  description: "answers at once",
  parameters: Schema.Struct({}),
  execute: () => Effect.succeed("ok")
})

/** A source session on `filename`: three turns (completed, with a tool, aborted), an extension event, then pending input. */
const buildSource = (
  acquire: ReturnType<typeof sqliteStore> extends Effect.Effect<infer S, any, any> ? S extends { acquire: infer A } ? A
    : never
    : never
) =>
  Effect.gen(function*() {
    const agent = yield* acquire([
      ScriptedModel.text("one"),
      ScriptedModel.response({ toolCalls: [{ id: "q1", name: "quick", arguments: {} }] }),
      ScriptedModel.text("two"),
      ScriptedModel.hang({ text: "partial" })
    ], { sessionId: "src", tools: [quickTool] })
    const stored = yield* Effect.gen(function*() {
      const driver = yield* Driver
      const log = yield* SessionLog
      yield* driver.followup(user("A", "first words"))
      yield* driver.whenIdle
      yield* driver.inject(plugin("C"))
      yield* log.append({ type: "audit/mark", data: {}, ignorable: true })
      yield* driver.followup(user("B"))
      yield* driver.whenIdle
      yield* driver.followup(user("X"))
      yield* untilEvent((e) => e.type === "assistant/chunk")
      yield* driver.cancel({ kind: "user" }, { keepInbox: true })
      yield* driver.whenIdle
      yield* driver.inject(plugin("D"))
      yield* driver.send(user("E"), "next-turn", false)
      yield* log.flush
      return yield* log.events
    }).pipe(on(agent.ctx))
    yield* agent.dispose
    return stored
  })

/** Whether a fork at `boundary` ends inside an open turn (the last turn/start or turn/end at or before it is a turn/start). */
const insideTurn = (es: ReadonlyArray<SessionEvent>, boundary: number) => {
  for (let i = boundary; i >= 0; i--) {
    if (es[i]!.type === "turn/end") return false
    if (es[i]!.type === "turn/start") return true
  }
  return false
}
const header = (id: string) => ({ formatVersion: 1, sessionId: sid(id), createdAt: 0, seedLength: 0 })

describe("§8.10 Sessions over SQLite", () => {
  const sessionsOn = (filename: string, script: ReadonlyArray<ScriptEntry>) =>
    Sessions.layer({ model: { provider: "p", model: "m" }, idleTimeToLive: "1 minute" }).pipe(
      Layer.provideMerge(
        Layer.mergeAll(SqliteSessionStore.layer({ filename }), ScriptedModel.layer(script), Tools.layer())
      )
    )
  const open = (id: string) =>
    Effect.gen(function*() {
      const sessions = yield* Sessions
      const scope = yield* Scope.make()
      const ctx = yield* Scope.extend(sessions.open(sid(id)), scope)
      return { ctx, release: Scope.close(scope, Exit.void) }
    })

  it.scoped("8.10: create, list (title, times, turns, parent) after a fork and after idle release; reopen transparently continues the turn numbering", () =>
    Effect.gen(function*() {
      const filename = freshFile()
      const layerCtx = yield* Layer.build(sessionsOn(filename, [ScriptedModel.text("one"), ScriptedModel.text("two")]))
      yield* Effect.gen(function*() {
        const sessions = yield* Sessions
        const store = yield* SessionStore
        yield* TestClock.setTime(1_000)
        const alpha = yield* open("alpha")
        const alphaDriver = Context.get(alpha.ctx, Driver)
        expect(yield* store.exists(sid("alpha"))).toBe(true)
        yield* alphaDriver.followup(user("H", "Hello alpha"))
        yield* alphaDriver.whenIdle
        yield* alpha.release
        yield* TestClock.setTime(2_000)
        const beta = yield* open("beta")
        yield* beta.release
        yield* TestClock.setTime(3_000)
        // alpha is still live (within its time-to-live): the fork flushes it first.
        const kid = yield* sessions.fork({ source: sid("alpha"), childId: sid("kid") })
        expect(kid).toBe("kid")
        const alphaEvents = storedEvents(filename, "alpha")
        expect(alphaEvents.map(notation).slice(-1)).toEqual(["TE(1,completed)"])
        const listed = yield* sessions.list
        expect(listed).toEqual([
          {
            sessionId: "alpha",
            title: "Hello alpha",
            createdAt: 1_000,
            updatedAt: 1_000,
            turns: 1,
            events: alphaEvents.length
          },
          { sessionId: "beta", title: undefined, createdAt: 2_000, updatedAt: 2_000, turns: 0, events: 0 },
          {
            sessionId: "kid",
            title: "Hello alpha",
            createdAt: 3_000,
            updatedAt: 3_000,
            turns: 1,
            events: alphaEvents.length + 1,
            parent: { sessionId: "alpha", boundary: alphaEvents.length - 1 }
          }
        ])
        // While alpha is live, a second agent on the same store cannot open it.
        const busy = yield* Effect.flip(Effect.scoped(Layer.build(
          agentResuming("alpha").pipe(Layer.provide(Layer.succeedContext(layerCtx)))
        )))
        expect(busy).toBeInstanceOf(AgentBusy)
        expect(busy).toMatchObject({ sessionId: "alpha", operation: "open" })
        // Idle release: the agent is disposed after the time-to-live.
        yield* TestClock.adjust("61 seconds")
        yield* until(Effect.map(Effect.exit(alphaDriver.inject(plugin("probe"))), Exit.isFailure))
        expect(yield* Effect.flip(alphaDriver.inject(plugin("probe2")))).toBeInstanceOf(AgentDisposed)
        expect(storedEvents(filename, "alpha")).toEqual(alphaEvents)
        // Reopened transparently: resumed from the file, ES appended, turn 2 next.
        yield* TestClock.setTime(100_000)
        const again = yield* open("alpha")
        yield* Effect.gen(function*() {
          const driver = yield* Driver
          const log = yield* SessionLog
          expect(driver).not.toBe(alphaDriver)
          expect(log.firstLiveSeq).toBe(alphaEvents.length)
          yield* driver.followup(user("I", "second"))
          yield* driver.whenIdle
          yield* log.flush
          expect((yield* log.events).slice(alphaEvents.length).map(notation).slice(0, 3)).toEqual([
            "ES",
            "INS(nt,0,[I])",
            "TS(2)"
          ])
        }).pipe(on(again.ctx))
        yield* again.release
        const relisted = yield* sessions.list
        expect(relisted.map((s) => s.sessionId)).toEqual(["alpha", "beta", "kid"])
        expect(relisted[0]).toMatchObject({ title: "Hello alpha", createdAt: 1_000, updatedAt: 100_000, turns: 2 })
        expect(relisted[0]!.events).toBe(storedEvents(filename, "alpha").length)
        expect(relisted[2]).toMatchObject({ turns: 1, updatedAt: 3_000 })
      }).pipe(Effect.provide(layerCtx))
    }))

  it.scoped("8.10/6.6: Sessions.fork of a live source with a running turn is refused open-turn; missing source and taken child id are typed", () =>
    Effect.gen(function*() {
      const filename = freshFile()
      const layerCtx = yield* Layer.build(sessionsOn(filename, [ScriptedModel.hang({ text: "partial" })]))
      yield* Effect.gen(function*() {
        const sessions = yield* Sessions
        const run = yield* open("run")
        const driver = Context.get(run.ctx, Driver)
        yield* driver.followup(user("A"))
        yield* until(
          Effect.map(Context.get(run.ctx, SessionLog).events, (es) => es.some((e) => e.type === "assistant/chunk"))
        )
        const refused = yield* Effect.flip(sessions.fork({ source: sid("run"), childId: sid("child") }))
        expect(refused).toBeInstanceOf(ForkError)
        expect(refused).toMatchObject({ reason: "open-turn", source: "run", childId: "child" })
        // The flush made the open turn's events durable; the fork read them.
        const stored = storedEvents(filename, "run")
        expect(stored).toEqual((yield* Context.get(run.ctx, SessionLog).events).slice(0, stored.length))
        expect(stored.map(notation)).toContain("CH(text-delta)")
        expect(yield* Effect.flip(sessions.fork({ source: sid("nobody") }))).toBeInstanceOf(SessionNotFound)
        // A boundary before the turn is accepted.
        const beforeTurn = stored.findIndex((e) => e.type === "turn/start") - 1
        expect(yield* sessions.fork({ source: sid("run"), boundary: beforeTurn, childId: sid("child") })).toBe("child")
        expect(yield* Effect.flip(sessions.fork({ source: sid("run"), boundary: beforeTurn, childId: sid("child") })))
          .toMatchObject({ _tag: "ForkError", reason: "child-exists" })
        yield* driver.cancel({ kind: "user" })
        yield* driver.whenIdle
        yield* run.release
      }).pipe(Effect.provide(layerCtx))
    }))
})

describe("§8.10 Sessions over SQLite: lifetime", () => {
  it.scoped("8.10/3.7: closing the Sessions layer disposes its live agents, which flush; a stored malformed session fails open with MalformedLog {seq}", () =>
    Effect.gen(function*() {
      const filename = freshFile()
      const scope = yield* Scope.make()
      const ctx = yield* Layer.buildWithScope(
        Sessions.layer({
          model: { provider: "p", model: "m" },
          idleTimeToLive: "1 hour",
          durability: { batchWindow: "1 hour" }
        }).pipe(
          Layer.provideMerge(
            Layer.mergeAll(
              SqliteSessionStore.layer({ filename }),
              ScriptedModel.layer([ScriptedModel.text("x")]),
              Tools.layer()
            )
          )
        ),
        scope
      )
      const sessions = Context.get(ctx, Sessions)
      const { driver, log } = yield* Effect.scoped(Effect.gen(function*() {
        const c = yield* sessions.open(sid("z"))
        yield* Context.get(c, Driver).followup(user("A"))
        yield* Context.get(c, Driver).whenIdle
        return { driver: Context.get(c, Driver), log: Context.get(c, SessionLog) }
      }))
      const memory = yield* log.events
      expect(memory.map(notation).slice(-1)).toEqual(["TE(1,completed)"])
      yield* Scope.close(scope, Exit.void)
      expect(storedEvents(filename, "z")).toEqual(memory)
      expect(yield* Effect.flip(driver.inject(plugin("late")))).toBeInstanceOf(AgentDisposed)
      // A row damaged on disk: opening the session through a new Sessions layer is MalformedLog at its seq.
      const db = new Database(filename)
      db.prepare("UPDATE events SET row = '{' WHERE session_id = 'z' AND seq = 2").run()
      db.close()
      const reopened = yield* Layer.build(
        Sessions.layer({ model: { provider: "p", model: "m" }, idleTimeToLive: "1 hour" }).pipe(
          Layer.provideMerge(
            Layer.mergeAll(SqliteSessionStore.layer({ filename }), ScriptedModel.layer([]), Tools.layer())
          )
        )
      )
      const malformed = yield* Effect.flip(Effect.scoped(Context.get(reopened, Sessions).open(sid("z"))))
      expect(malformed).toMatchObject({ _tag: "MalformedLog", sessionId: "z", seq: 2 })
    }))
})

describe("§8.10/§3.7 Sessions idle release of a running session", () => {
  it.scoped("8.10/3.7: concurrent opens share one agent; released during a turn, the agent is disposed after the time-to-live (aborted(disposed), no CAN); reopened idle with the follow-up pending", () =>
    Effect.gen(function*() {
      const filename = freshFile()
      const ctx = yield* Layer.build(
        Sessions.layer({ model: { provider: "p", model: "m" }, idleTimeToLive: "1 minute" }).pipe(
          Layer.provideMerge(Layer.mergeAll(
            SqliteSessionStore.layer({ filename }),
            ScriptedModel.layer([ScriptedModel.hang({ text: "p" })]),
            Tools.layer()
          ))
        )
      )
      const sessions = Context.get(ctx, Sessions)
      const scope = yield* Scope.make()
      const opened = yield* Effect.all(
        [0, 1, 2].map(() => Effect.map(Scope.extend(sessions.open(sid("t")), scope), (c) => Context.get(c, Driver))),
        { concurrency: "unbounded" }
      )
      expect(new Set(opened).size).toBe(1)
      const driver = opened[0]!
      yield* driver.followup(user("A"))
      yield* until(Effect.map(rawShapeEffect(filename, "t"), (shape) => shape.includes("RH(initial)")))
      yield* driver.followup(user("F"))
      yield* Scope.close(scope, Exit.void)
      yield* TestClock.adjust("30 seconds")
      yield* settle
      expect(yield* driver.status).toBe("running")
      yield* TestClock.adjust("31 seconds")
      yield* until(Effect.map(rawShapeEffect(filename, "t"), (shape) => shape.includes("TE(1,aborted(disposed))")))
      const stored = storedShape(filename, "t")
      expect(stored.slice(-1)).toEqual(["TE(1,aborted(disposed))"])
      expect(stored.filter((s) => s.startsWith("CAN("))).toEqual([])
      const again = yield* Effect.scoped(Effect.flatMap(sessions.open(sid("t")), (c) =>
        Effect.all({
          pending: Effect.map(Context.get(c, Inbox).nextTurn, (ms) => ms.map((m) => m.id)),
          status: Context.get(c, Driver).status,
          tail: Effect.map(Context.get(c, SessionLog).events, (es) => es.slice(stored.length).map(notation))
        })))
      expect(again).toEqual({ pending: ["F"], status: "idle", tail: ["ES"] })
    }))
})

describe("§6.6 fork on SQLite", () => {
  it.scoped("6.6: a fork at every seq of a real log: closed-turn boundaries give prefix + ES with the parent header; open-turn boundaries and invalid ones fail typed and store nothing", () =>
    Effect.gen(function*() {
      const filename = freshFile()
      const { acquire, store } = yield* sqliteStore(filename)
      const source = yield* buildSource(acquire)
      expect(storedEvents(filename, "src")).toEqual(source)
      expect(source.filter((e) => e.type === "turn/end").map(notation)).toEqual([
        "TE(1,completed)",
        "TE(2,completed)",
        "TE(3,aborted(user))"
      ])
      yield* TestClock.setTime(7_000)
      const fork = (options: Parameters<typeof forkSession>[0]) =>
        forkSession(options).pipe(Effect.provideService(SessionStore, store))
      let accepted = 0
      let refused = 0
      for (let b = 0; b < source.length; b++) {
        const childId = sid(`c${b}`)
        const exit = yield* Effect.exit(fork({ source: sid("src"), boundary: b, childId }))
        if (insideTurn(source, b)) {
          expect(exit, `boundary ${b}`).toEqual(
            Exit.fail(new ForkError({ source: sid("src"), reason: "open-turn", boundary: b, childId }))
          )
          expect(yield* store.exists(childId)).toBe(false)
          refused++
          continue
        }
        accepted++
        expect(exit, `boundary ${b}`).toEqual(Exit.succeed(childId))
        const child = yield* store.load(childId)
        expect(child.header).toEqual({
          formatVersion: 1,
          sessionId: childId,
          createdAt: 7_000,
          parent: { sessionId: "src", boundary: b },
          seedLength: b + 1
        })
        expect(child.events.slice(0, b + 1)).toEqual(source.slice(0, b + 1))
        expect(child.events.slice(b + 1)).toEqual([{ type: "session/end-seed", seq: b + 1, time: 7_000, data: {} }])
        expect(storedEvents(filename, childId)).toEqual(child.events)
      }
      // Boundaries outside the turns: before turn 1, between turns (around the splice and the extension event), and after turn 3.
      expect(accepted).toBeGreaterThanOrEqual(6)
      expect(refused).toBeGreaterThanOrEqual(20)
      expect(accepted + refused).toBe(source.length)
      for (const boundary of [-1, source.length, 2.5, Number.NaN, Number.POSITIVE_INFINITY]) {
        const error = yield* Effect.flip(fork({ source: sid("src"), boundary, childId: sid("bad") }))
        expect(error).toBeInstanceOf(ForkError)
        expect(error).toMatchObject({ reason: "invalid-boundary", source: "src", childId: "bad" })
      }
      expect(yield* store.exists(sid("bad"))).toBe(false)
      expect(yield* Effect.flip(fork({ source: sid("src"), childId: sid("c0") }))).toMatchObject({
        _tag: "ForkError",
        reason: "child-exists",
        childId: "c0"
      })
      expect(yield* Effect.flip(fork({ source: sid("src"), childId: sid("src") }))).toMatchObject({
        _tag: "ForkError",
        reason: "child-exists"
      })
      expect(yield* Effect.flip(fork({ source: sid("missing") }))).toBeInstanceOf(SessionNotFound)
    }))

  it.scoped("6.6 steps 6-7: the child of a source with pending input starts with an empty inbox, knows the prefix ids, continues turn numbering with RH(resume); the source keeps its inbox", () =>
    Effect.gen(function*() {
      const filename = freshFile()
      const { acquire, store } = yield* sqliteStore(filename)
      const source = yield* buildSource(acquire)
      const childId = yield* forkSession({ source: sid("src") }).pipe(Effect.provideService(SessionStore, store))
      expect(childId).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/)
      const child = yield* acquire([ScriptedModel.text("four")], {
        sessionId: childId,
        resume: true,
        tools: [quickTool]
      })
      yield* Effect.gen(function*() {
        const driver = yield* Driver
        const inbox = yield* Inbox
        const log = yield* SessionLog
        expect(log.header.parent).toEqual({ sessionId: "src", boundary: source.length - 1 })
        expect(log.firstLiveSeq).toBe(source.length + 1)
        expect(yield* inbox.snapshot).toEqual({ nextTurn: [], nextStep: [] })
        expect(yield* inbox.idState(asId("D"))).toEqual(Option.some("discarded"))
        expect(yield* inbox.idState(asId("E"))).toEqual(Option.some("discarded"))
        expect(yield* inbox.idState(asId("A"))).toEqual(Option.some("entered"))
        expect(yield* Effect.flip(driver.followup(user("E")))).toEqual(
          new DuplicateMessage({ id: asId("E"), state: "discarded" })
        )
        yield* driver.followup(user("N"))
        yield* driver.whenIdle
        yield* log.flush
        const after = storedEvents(filename, childId).slice(source.length + 1).map(notation)
        expect(after.slice(0, 6)).toEqual(["INS(nt,0,[N])", "TS(4)", "CLM(nt,0,1)", "SS(4,1)", "UM(N)", "RH(resume)"])
        expect(checkLog(storedEvents(filename, childId), { seedLength: source.length + 1, closed: true })).toEqual([])
      }).pipe(on(child.ctx))
      yield* child.dispose
      // The source is untouched and keeps its pending input.
      expect(storedEvents(filename, "src")).toEqual(source)
      const again = yield* acquire([], { sessionId: "src", resume: true })
      yield* Effect.gen(function*() {
        const inbox = yield* Inbox
        expect((yield* inbox.nextStep).map((m) => m.id)).toEqual(["D"])
        expect((yield* inbox.nextTurn).map((m) => m.id)).toEqual(["E"])
      }).pipe(on(again.ctx))
      yield* again.dispose
    }))

  it.scoped("6.6: a fork of a fork at a boundary inside the child's seed copies that prefix; the grandchild opens clean", () =>
    Effect.gen(function*() {
      const filename = freshFile()
      const { acquire, store } = yield* sqliteStore(filename)
      const source = yield* buildSource(acquire)
      const fork = (options: Parameters<typeof forkSession>[0]) =>
        forkSession(options).pipe(Effect.provideService(SessionStore, store))
      yield* fork({ source: sid("src"), childId: sid("kid") })
      const endOfTurn1 = source.findIndex((e) => e.type === "turn/end")
      yield* fork({ source: sid("kid"), boundary: endOfTurn1, childId: sid("grandkid") })
      const loaded = yield* store.load(sid("grandkid"))
      expect(loaded.header).toMatchObject({
        parent: { sessionId: "kid", boundary: endOfTurn1 },
        seedLength: endOfTurn1 + 1
      })
      expect(loaded.events.slice(0, endOfTurn1 + 1)).toEqual(source.slice(0, endOfTurn1 + 1))
      const agent = yield* acquire([ScriptedModel.text("again")], { sessionId: "grandkid", resume: true })
      yield* Effect.gen(function*() {
        const driver = yield* Driver
        yield* driver.followup(user("Z"))
        yield* driver.whenIdle
        const es = yield* events
        expect(es.filter((e) => e.type === "turn/start").map(notation)).toEqual(["TS(1)", "TS(2)"])
        expect(checkLog(es, { seedLength: endOfTurn1 + 2, closed: true })).toEqual([])
      }).pipe(on(agent.ctx))
      yield* agent.dispose
    }))
})

describe("§8.10/§6.1 Sessions.open after the session was released elsewhere", () => {
  it.scoped("8.10/6.1: Sessions.open of a session another agent held succeeds once that agent is disposed (no cached AgentBusy for idleTimeToLive)", () =>
    Effect.acquireRelease(
      Effect.sync(() => fs.mkdtempSync(path.join(os.tmpdir(), "tiller-f9d-"))),
      (dir) => Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true }))
    ).pipe(Effect.flatMap((dir) =>
      Effect.gen(function*() {
        const model = { provider: "p", model: "m" }
        const ctx = yield* Layer.build(
          Sessions.layer({ model, idleTimeToLive: "5 minutes" }).pipe(
            Layer.provideMerge(
              Layer.mergeAll(
                SqliteSessionStore.layer({ filename: path.join(dir, "s.db") }),
                ScriptedModel.layer([]),
                Tools.layer()
              )
            )
          )
        )
        const sessions = Context.get(ctx, Sessions)
        const id = SessionId.make("x")
        // Another agent of the same store holds the session: open fails with AgentBusy (6.1).
        const holder = yield* Scope.make()
        const held = yield* Layer.buildWithScope(
          Agent.layer({ sessionId: id, model }).pipe(Layer.provide(Layer.succeedContext(ctx))),
          holder
        )
        yield* Context.get(held, Driver).inject(plugin("A"))
        expect(yield* Effect.flip(Effect.scoped(sessions.open(id)))).toMatchObject({
          _tag: "AgentBusy",
          operation: "open"
        })
        // That agent is disposed: the session is free, so open resumes it.
        yield* Scope.close(holder, Exit.void)
        const reopened = yield* Effect.exit(
          Effect.scoped(Effect.flatMap(sessions.open(id), (c) => Context.get(c, SessionLog).events))
        )
        expect(Exit.map(reopened, (es) => es.map(notation))).toEqual(Exit.succeed(["INS(ns,0,[A])", "ES"]))
      })
    )))
})

describe("§8.10 a failed Sessions.open under a long-lived scope", () => {
  it.scoped("8.10: the failed open leaves nothing behind: a later open's agent stays in the map after that scope closes and the time-to-live passes", () =>
    Effect.gen(function*() {
      const model = { provider: "p", model: "m" }
      const ctx = yield* Layer.build(
        Sessions.layer({ model, idleTimeToLive: "1 minute" }).pipe(
          Layer.provideMerge(Layer.mergeAll(SessionStore.layerMemory, ScriptedModel.layer([]), Tools.layer()))
        )
      )
      const sessions = Context.get(ctx, Sessions)
      const id = SessionId.make("y")
      const holder = yield* Scope.make()
      yield* Layer.buildWithScope(
        Agent.layer({ sessionId: id, model }).pipe(Layer.provide(Layer.succeedContext(ctx))),
        holder
      )
      // The failed open runs in a scope that outlives it.
      const longLived = yield* Scope.make()
      const failed = yield* Effect.flip(Scope.extend(sessions.open(id), longLived))
      expect(failed).toMatchObject({ _tag: "AgentBusy", operation: "open" })
      yield* Scope.close(holder, Exit.void)
      // A new open succeeds and is kept in use.
      const user = yield* Scope.make()
      const first = yield* Scope.extend(sessions.open(id), user)
      yield* Scope.close(longLived, Exit.void)
      yield* TestClock.adjust("5 minutes")
      // Still the same agent: the failed attempt's expiry did not take the live one out of the map.
      const again = yield* Effect.scoped(sessions.open(id))
      expect(Context.get(again, Driver)).toBe(Context.get(first, Driver))
      yield* Scope.close(user, Exit.void)
    }))
})

describe("8.10 SqliteSessionStore", () => {
  const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "tiller-audit-"))
  it.scoped("8.10: the SQLite store keeps the contract: create, exists, list, load, append with the seq check", () =>
    Effect.gen(function*() {
      const store = yield* SessionStore
      const id = SessionId.make("q")
      const header = { formatVersion: 1, sessionId: id, createdAt: 5, seedLength: 0 }
      yield* store.create(header, [])
      expect(yield* Effect.flip(store.create(header, []))).toBeInstanceOf(SessionExists)
      expect(yield* store.exists(id)).toBe(true)
      expect(yield* Effect.flip(store.load(SessionId.make("none")))).toBeInstanceOf(SessionNotFound)
      const A = user("A")
      const e0 = {
        type: "agent/inbox/spliced",
        seq: 0,
        time: 1,
        data: { target: "next-turn", start: 0, inserted: [A] }
      } as any
      const e1 = { type: "x/ext", seq: 1, time: 2, data: { nested: [1, "two", null] }, ignorable: true } as any
      yield* store.append(id, [e0])
      expect(yield* Effect.flip(store.append(id, [e0]))).toBeInstanceOf(PersistenceError)
      yield* store.append(id, [e1])
      const loaded = yield* store.load(id)
      expect(loaded.header).toEqual(header)
      expect(loaded.events).toEqual([e0, e1])
      expect((yield* store.list).map((h) => h.sessionId)).toEqual(["q"])
    }).pipe(Effect.provide(SqliteSessionStore.layer({ filename: Path.join(dir, "a.db") }))))

  it.scoped("8.10: an agent over the SQLite store runs P1 and resumes", () =>
    Effect.gen(function*() {
      const filename = Path.join(dir, "b.db")
      const first = Effect.gen(function*() {
        const driver = yield* Driver
        yield* driver.followup(user("A"))
        yield* driver.whenIdle
        yield* driver.inject(plugin("C"))
        return (yield* events).length
      }).pipe(
        Effect.provide(
          agentOver([ScriptedModel.text("hi")]).pipe(Layer.provide(SqliteSessionStore.layer({ filename })))
        ),
        Effect.scoped
      )
      const length = yield* first
      yield* Effect.gen(function*() {
        const es = yield* events
        expect(es.length).toBe(length + 1)
        expect(notation(es[es.length - 1]!)).toBe("ES")
        expect(((yield* (yield* Inbox).nextStep) as ReadonlyArray<UserMessage>).map((m) => m.id)).toEqual(["C"])
      }).pipe(
        Effect.provide(agentOver([], { resume: true }).pipe(Layer.provide(SqliteSessionStore.layer({ filename })))),
        Effect.scoped
      )
    }))

  it.scoped("6.1: both stores' load refuses another format version with UnsupportedLogVersion; an unusable file fails the layer with PersistenceError", () =>
    Effect.gen(function*() {
      for (const layer of [SessionStore.layerMemory, SqliteSessionStore.layer({ filename: Path.join(dir, "c.db") })]) {
        const store = Context.get(
          yield* Layer.build(layer as Layer.Layer<SessionStore, PersistenceError>),
          SessionStore
        )
        const id = SessionId.make("v2")
        yield* store.create({ formatVersion: 2 as 1, sessionId: id, createdAt: 0, seedLength: 0 }, [])
        expect(yield* Effect.flip(store.load(id))).toMatchObject({
          _tag: "UnsupportedLogVersion",
          found: 2,
          supported: 1
        })
      }
      const exit = yield* Effect.exit(
        Layer.build(SqliteSessionStore.layer({ filename: Path.join(dir, "missing", "x.db") }))
      )
      expect(Exit.isFailure(exit) && exit.cause._tag === "Fail" && exit.cause.error).toBeInstanceOf(PersistenceError)
    }))
})

describe("§8.10 SqliteSessionStore: fork and resume through the file", () => {
  const tempFile = Effect.acquireRelease(
    Effect.sync(() => fs.mkdtempSync(path.join(os.tmpdir(), "tiller-sessions-"))),
    (dir) => Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true }))
  ).pipe(Effect.map((dir) => path.join(dir, "sessions.db")))

  it.scoped("6.6/8.10: a fork over SQLite stores the child header (parent, seedLength) and prefix + ES; a fresh layer resumes the child at turn 2", () =>
    Effect.gen(function*() {
      const filename = yield* tempFile
      const runOn = <A, E, R>(
        script: Parameters<typeof agentOver>[0],
        program: Effect.Effect<A, E, R>,
        options: Parameters<typeof agentOver>[1] = {}
      ) =>
        Effect.scoped(Effect.provide(
          program as Effect.Effect<A, E, Exclude<R, Scope.Scope> | Scope.Scope>,
          agentOver(script, options).pipe(Layer.provideMerge(SqliteSessionStore.layer({ filename })))
        ))
      const source = yield* runOn(
        [ScriptedModel.text("one")],
        Effect.gen(function*() {
          const driver = yield* Driver
          yield* driver.followup(user("A"))
          yield* driver.whenIdle
          yield* driver.inject(plugin("C"))
          return yield* events
        })
      )
      const { child, empty, list, loaded } = yield* Effect.scoped(
        Effect.gen(function*() {
          const store = yield* SessionStore
          yield* store.create(header("empty"), [])
          const child = yield* forkSession({ source: sid("s"), childId: sid("kid") })
          const empty = yield* forkSession({ source: sid("empty"), childId: sid("empty-kid") })
          return { child, empty, list: yield* store.list, loaded: yield* store.load(sid("kid")) }
        }).pipe(Effect.provide(SqliteSessionStore.layer({ filename })))
      )
      expect(child).toBe("kid")
      expect(empty).toBe("empty-kid")
      expect(list.map((h) => h.sessionId)).toEqual(["s", "empty", "kid", "empty-kid"])
      expect(list[3]).toEqual({
        formatVersion: 1,
        sessionId: "empty-kid",
        createdAt: 0,
        parent: { sessionId: "empty", boundary: -1 },
        seedLength: 0
      })
      expect(loaded.header).toEqual({
        formatVersion: 1,
        sessionId: "kid",
        createdAt: 0,
        parent: { sessionId: "s", boundary: source.length - 1 },
        seedLength: source.length
      })
      expect(loaded.events.slice(0, source.length)).toEqual(source)
      expect(loaded.events.slice(source.length).map(notation)).toEqual(["ES"])
      yield* runOn(
        [ScriptedModel.text("two")],
        Effect.gen(function*() {
          const driver = yield* Driver
          const inbox = yield* Inbox
          const log = yield* SessionLog
          expect(log.header).toEqual(loaded.header)
          expect(log.firstLiveSeq).toBe(source.length + 1)
          expect(yield* inbox.nextStep).toEqual([])
          yield* driver.followup(user("B"))
          yield* driver.whenIdle
          const after = (yield* events).slice(source.length + 1).map(notation)
          expect(after.slice(0, 6)).toEqual(["INS(nt,0,[B])", "TS(2)", "CLM(nt,0,1)", "SS(2,1)", "UM(B)", "RH(resume)"])
          expect(checkLog(yield* events, { seedLength: source.length, closed: true })).toEqual([])
        }),
        { sessionId: "kid", resume: true }
      )
    }))
})
