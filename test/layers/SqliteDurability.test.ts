/**
 * An agent on the SQLite store (SPEC 6.1-6.4, 3.7): acknowledgement means committed in the file, the
 * writer, fail-stop then reopen, disposal then resume, opening.
 */
import { describe, expect, it } from "@effect/vitest"
import Database from "better-sqlite3"
import { Context, Deferred, Effect, Exit, Fiber, Layer, Option, Queue, Schema, Scope, TestClock } from "effect"
import {
  AgentBusy,
  AgentDisposed,
  checkLog,
  Driver,
  DuplicateMessage,
  forkSession,
  Inbox,
  PersistenceError,
  ScriptedModel,
  SessionId,
  SessionLog,
  SessionStore,
  SqliteSessionStore,
  Tool
} from "../../src/index.js"
import type { ScriptEntry, SessionEvent, ToolDefinition } from "../../src/index.js"
import { agentOver, asId, events, notation, plugin, settle, until, untilEvent, user } from "../agent/harness.js"
import { storedEvents, storedShape, tempFiles } from "../fixtures/sqliteFile.js"

const { freshFile } = tempFiles("tiller-f9-")

const sid = (s: string) => SessionId.make(s)

/** Runs `statements` on a connection of its own (used to make the store's writes fail or succeed again). */
const rawExec = (file: string, statements: string) =>
  Effect.sync(() => {
    const db = new Database(file)
    try {
      db.exec(statements)
    } finally {
      db.close()
    }
  })
const FAIL_WRITES =
  "CREATE TRIGGER audit_fail BEFORE INSERT ON events BEGIN SELECT RAISE(ABORT, 'storage says no'); END;"
const HEAL_WRITES = "DROP TRIGGER audit_fail;"

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

const on = <A, E, R>(ctx: Context.Context<R>) => (effect: Effect.Effect<A, E, R>) => Effect.provide(effect, ctx)

const slowTool = (started: Deferred.Deferred<void>): ToolDefinition<any> =>
  Tool.make("slow", {
    description: "never finishes",
    parameters: Schema.Struct({}),
    execute: () => Effect.zipRight(Deferred.succeed(started, undefined), Effect.never)
  })
const quickTool: ToolDefinition<any> = Tool.make("quick", {
  description: "answers at once",
  parameters: Schema.Struct({}),
  execute: () => Effect.succeed("ok")
})

/** The ids of the user/messages entered in each turn. */
const enteredByTurn = (es: ReadonlyArray<SessionEvent>) => {
  const byTurn = new Map<number, Array<string>>()
  let turn = 0
  for (const e of es) {
    if (e.type === "turn/start") turn = (e.data as { turn: number }).turn
    if (e.type === "user/message" && (e as { surfaceOp?: unknown }).surfaceOp === "append") {
      byTurn.set(turn, [...(byTurn.get(turn) ?? []), (e.data as { id: string }).id])
    }
  }
  return byTurn
}

const typeSeq = (es: ReadonlyArray<SessionEvent>, type: string) => es.filter((e) => e.type === type).map((e) => e.seq)

/**
 * A SQLite store on `filename` that records each append's seqs and, while `control.holding`, makes
 * an append wait for `control.gate` before it writes.
 */
const holdingStore = (filename: string) => {
  const control = {
    appends: [] as Array<ReadonlyArray<number>>,
    holding: false,
    gate: undefined as unknown as Deferred.Deferred<void>
  }
  const counting = Layer.effect(
    SessionStore,
    // Without the store's synchronous append: every write goes through the counted `append`.
    Effect.map(SessionStore, ({ appendNow: _appendNow, ...store }) =>
      SessionStore.of({
        ...store,
        append: (id, es) =>
          Effect.suspend(() => {
            control.appends.push(es.map((e) => e.seq))
            return control.holding
              ? Effect.zipRight(Deferred.await(control.gate), store.append(id, es))
              : store.append(id, es)
          })
      }))
  ).pipe(Layer.provideMerge(SqliteSessionStore.layer({ filename })))
  return { control, counting }
}

describe("§6.2/§3.1 acknowledgement means committed in the file", () => {
  it.scoped("6.2/3.1: when inject, inbox mutations, SessionLog.append, followup, steer and cancel complete, their events are rows of the file", () =>
    Effect.gen(function*() {
      const filename = freshFile()
      const { acquire } = yield* sqliteStore(filename)
      const { ctx } = yield* acquire([ScriptedModel.hang({ text: "thinking" })], { sessionId: "ack" })
      yield* Effect.gen(function*() {
        const driver = yield* Driver
        const inbox = yield* Inbox
        const log = yield* SessionLog
        // After each acknowledged operation: the file holds a prefix of the in-memory log that
        // includes the operation's own record.
        const committed = (expected: string) =>
          Effect.gen(function*() {
            const stored = storedEvents(filename, "ack")
            const memory = yield* log.events
            expect(stored).toEqual(memory.slice(0, stored.length))
            expect(stored.map(notation)).toContain(expected)
            return stored
          })
        yield* driver.inject(plugin("C"))
        expect((yield* committed("INS(ns,0,[C])")).length).toBe(1)
        yield* inbox.append("next-turn", user("Q"))
        yield* committed("INS(nt,0,[Q])")
        yield* inbox.prepend("next-step", plugin("P"))
        yield* committed("INS(ns,0,[P])")
        expect(yield* inbox.replace(asId("P"), plugin("P2"))).toBe(true)
        yield* committed("REP(ns,0,[P2])")
        expect(yield* inbox.remove(asId("P2"))).toBe(true)
        yield* committed("CAN(ns,0,1)")
        expect((yield* inbox.splice("next-turn", 0, 1, [user("Q2")])).map((m) => m.id)).toEqual(["Q"])
        yield* committed("REP(nt,0,[Q2])")
        yield* inbox.clear
        const afterClear = yield* committed("CAN(nt,0,1)")
        expect(afterClear.map(notation).slice(-2)).toEqual(["CAN(ns,0,1)", "CAN(nt,0,1)"])
        yield* log.append({ type: "audit/note", data: { n: 1 }, ignorable: true })
        expect((yield* committed("audit/note")).length).toBe(afterClear.length + 1)
        yield* driver.followup(user("A"))
        const opened = yield* committed("TS(1)")
        expect(opened.map(notation)).toContain("INS(nt,0,[A])")
        expect(opened.map(notation)).toContain("CLM(nt,0,1)")
        expect(yield* driver.status).toBe("running")
        yield* driver.steer(user("S"))
        yield* committed("INS(ns,0,[S])")
        yield* driver.followup(user("F"))
        yield* committed("INS(nt,0,[F])")
        yield* driver.cancel({ kind: "user" })
        const canceled = yield* committed("CAN(nt,0,1)")
        expect(canceled.map(notation)).toContain("CAN(ns,0,1)")
        yield* driver.whenIdle
        yield* log.flush
        expect(storedEvents(filename, "ack")).toEqual(yield* log.events)
        expect(storedShape(filename, "ack").slice(-1)).toEqual(["TE(1,aborted(user))"])
        expect(yield* log.durableSeq).toBe((yield* log.events).length - 1)
      }).pipe(on(ctx))
    }))

  it.scoped("6.2 group commit: concurrent callers waiting on one in-flight append share the next one; all rows are in the file", () =>
    Effect.gen(function*() {
      const filename = freshFile()
      const { control, counting } = holdingStore(filename)
      const { appends } = control
      control.gate = yield* Deferred.make<void>()
      const ctx = yield* Layer.build(agentOver([], { sessionId: "gc" }).pipe(Layer.provideMerge(counting)))
      yield* Effect.gen(function*() {
        const driver = yield* Driver
        const log = yield* SessionLog
        control.holding = true
        const first = yield* Effect.fork(driver.inject(plugin("C0")))
        yield* until(Effect.sync(() => appends.length === 1))
        control.holding = false
        const rest = yield* Effect.fork(
          Effect.all(["C1", "C2", "C3", "C4", "C5"].map((id) => driver.inject(plugin(id))), {
            concurrency: "unbounded"
          })
        )
        yield* until(Effect.map(log.events, (es) => es.length === 6))
        yield* settle
        // One append is in flight: the five later events wait for it, none is written yet.
        expect(appends).toEqual([[0]])
        expect(storedEvents(filename, "gc")).toEqual([])
        yield* Deferred.succeed(control.gate, undefined)
        yield* Fiber.join(first)
        yield* Fiber.join(rest)
        expect(appends).toEqual([[0], [1, 2, 3, 4, 5]])
        expect(storedShape(filename, "gc")).toEqual(
          ["C0", "C1", "C2", "C3", "C4", "C5"].map((id, i) => `INS(ns,${i},[${id}])`)
        )
        expect(yield* log.durableSeq).toBe(5)
      }).pipe(on(ctx))
    }))

  it.scoped("3.1: operations that append nothing (remove/replace of a missing id, an empty splice, a keepInbox cancel while idle, a duplicate) and flush complete only after earlier events are committed", () =>
    Effect.gen(function*() {
      const filename = freshFile()
      const { control, counting } = holdingStore(filename)
      const { appends } = control
      const ctx = yield* Layer.build(agentOver([], { sessionId: "nop" }).pipe(Layer.provideMerge(counting)))
      yield* Effect.gen(function*() {
        const driver = yield* Driver
        const inbox = yield* Inbox
        const log = yield* SessionLog
        yield* driver.inject(plugin("C0"))
        const operations: ReadonlyArray<readonly [string, Effect.Effect<unknown, unknown>]> = [
          ["remove", inbox.remove(asId("missing"))],
          ["replace", inbox.replace(asId("missing"), plugin("other"))],
          ["splice", inbox.splice("next-turn", 0, 0, [])],
          ["cancel", driver.cancel({ kind: "user" }, { keepInbox: true })],
          ["duplicate", Effect.flip(driver.inject(plugin("C0")))],
          ["flush", log.flush]
        ]
        for (const [name, operation] of operations) {
          const held = yield* Deferred.make<void>()
          control.gate = held
          control.holding = true
          const count = appends.length
          const earlier = yield* Effect.fork(driver.inject(plugin(`H-${name}`)))
          yield* until(Effect.sync(() => appends.length === count + 1))
          control.holding = false
          const fiber = yield* Effect.fork(operation)
          yield* settle
          expect(Option.isNone(yield* Fiber.poll(fiber)), name).toBe(true)
          yield* Deferred.succeed(held, undefined)
          const result = yield* Fiber.join(fiber)
          yield* Fiber.join(earlier)
          if (name === "remove" || name === "replace") expect(result, name).toBe(false)
          if (name === "duplicate") expect(result).toEqual(new DuplicateMessage({ id: asId("C0"), state: "pending" }))
          expect(storedShape(filename, "nop").slice(-1), name).toEqual([`INS(ns,${count},[H-${name}])`])
        }
        // Nothing was written for the operations themselves.
        expect(storedShape(filename, "nop")).toEqual(
          ["C0", ...operations.map(([name]) => `H-${name}`)].map((id, i) => `INS(ns,${i},[${id}])`)
        )
      }).pipe(on(ctx))
    }))

  it.scoped("6.2: SessionLog.flush commits every event appended before it; disposal flushes the rest", () =>
    Effect.gen(function*() {
      const filename = freshFile()
      const { acquire } = yield* sqliteStore(filename)
      const { ctx, dispose } = yield* acquire([ScriptedModel.text("one"), ScriptedModel.text("two")], {
        sessionId: "fl",
        agent: { durability: { batchWindow: "1 hour" } }
      })
      const log = Context.get(ctx, SessionLog)
      const driver = Context.get(ctx, Driver)
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      const before = storedEvents(filename, "fl")
      const memory = yield* log.events
      expect(before).toEqual(memory.slice(0, before.length))
      yield* log.flush
      expect(storedEvents(filename, "fl")).toEqual(memory)
      expect(yield* log.durableSeq).toBe(memory.length - 1)
      yield* driver.followup(user("B"))
      yield* driver.whenIdle
      yield* dispose
      const final = yield* log.events
      expect(storedEvents(filename, "fl")).toEqual(final)
      expect(final.map(notation).slice(-1)).toEqual(["TE(2,completed)"])
    }))
})

describe("§6.2 writer on SQLite", () => {
  it.scoped("6.2 (c): loop events after the last checkpoint reach the file when batchWindow (Clock) has elapsed, without flush", () =>
    Effect.gen(function*() {
      const filename = freshFile()
      const { acquire } = yield* sqliteStore(filename)
      const { ctx, dispose } = yield* acquire([ScriptedModel.text("hello", { deltas: ["a", "b", "c"] })], {
        sessionId: "win"
      })
      const driver = Context.get(ctx, Driver)
      const log = Context.get(ctx, SessionLog)
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      const memory = yield* log.events
      yield* TestClock.adjust("200 millis")
      yield* until(Effect.map(log.durableSeq, (seq) => seq === memory.length - 1))
      expect(storedEvents(filename, "win")).toEqual(memory)
      yield* dispose
    }))

  it.scoped("6.3: a failed window write (no waiter) poisons: one agent/error, flush and later mutations fail; resume repairs the turn the file left open", () =>
    Effect.gen(function*() {
      const filename = freshFile()
      const { acquire } = yield* sqliteStore(filename)
      const first = yield* acquire([ScriptedModel.text("one")], { sessionId: "wf" })
      const driver = Context.get(first.ctx, Driver)
      const log = Context.get(first.ctx, SessionLog)
      const queue = yield* driver.subscribe
      yield* rawExec(
        filename,
        `CREATE TRIGGER audit_fail BEFORE INSERT ON events WHEN NEW.row LIKE '%"turn/end"%' BEGIN SELECT RAISE(ABORT, 'no'); END;`
      )
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      yield* TestClock.adjust("1 second")
      yield* until(Effect.map(Effect.exit(log.flush), Exit.isFailure))
      expect(yield* Effect.flip(log.flush)).toBeInstanceOf(PersistenceError)
      expect(yield* Effect.flip(driver.followup(user("B")))).toBeInstanceOf(PersistenceError)
      yield* settle
      const live = Array.from(yield* Queue.takeAll(queue))
      const errors = live.filter((e) => e.type === "agent/error")
      expect(errors).toHaveLength(1)
      expect((errors[0] as { error: unknown }).error).toBeInstanceOf(PersistenceError)
      const stored = storedEvents(filename, "wf")
      expect(stored.length).toBe((yield* log.durableSeq) + 1)
      expect(stored.map(notation).slice(-1)).toEqual(["RH(initial)"])
      yield* first.dispose
      yield* rawExec(filename, HEAL_WRITES)
      const second = yield* acquire([], { sessionId: "wf", resume: true })
      expect(storedEvents(filename, "wf").slice(stored.length).map(notation)).toEqual([
        "SE(1,1)",
        "TE(1,interrupted)",
        "ES"
      ])
      expect(yield* Context.get(second.ctx, Inbox).idState(asId("B"))).toEqual(Option.none())
      yield* second.dispose
    }))

  it.scoped("3.4 D4/6.3: a broad cancel whose CAN write fails still aborts and fails PersistenceError; after resume the turn is repaired and the follow-up is still pending", () =>
    Effect.gen(function*() {
      const filename = freshFile()
      const { acquire } = yield* sqliteStore(filename)
      const first = yield* acquire([ScriptedModel.hang({ text: "p" })], { sessionId: "cf" })
      const driver = Context.get(first.ctx, Driver)
      yield* driver.followup(user("A"))
      yield* driver.followup(user("F"))
      yield* untilEvent((e) => e.type === "assistant/chunk").pipe(on(first.ctx))
      yield* rawExec(filename, FAIL_WRITES)
      expect(yield* Effect.flip(driver.cancel({ kind: "user" }))).toBeInstanceOf(PersistenceError)
      yield* driver.whenIdle
      expect(yield* driver.status).toBe("idle")
      yield* first.dispose
      const stored = storedEvents(filename, "cf")
      expect(stored.map(notation).slice(-1)).toEqual(["INS(nt,0,[F])"])
      yield* rawExec(filename, HEAL_WRITES)
      const second = yield* acquire([], { sessionId: "cf", resume: true })
      yield* Effect.gen(function*() {
        const inbox = yield* Inbox
        expect((yield* inbox.nextTurn).map((m) => m.id)).toEqual(["F"])
        expect((yield* events).slice(stored.length).map(notation)).toEqual(["SE(1,1)", "TE(1,interrupted)", "ES"])
        expect(yield* Context.get(second.ctx, Driver).status).toBe("idle")
      }).pipe(on(second.ctx))
      yield* second.dispose
    }))

  it.scoped("6.2/6.3: a follow-up whose opening write fails sends no request; after resume its id is unknown and earlier input is pending", () =>
    Effect.gen(function*() {
      const filename = freshFile()
      const { acquire } = yield* sqliteStore(filename)
      const first = yield* acquire([ScriptedModel.text("never")], { sessionId: "of" })
      const driver = Context.get(first.ctx, Driver)
      yield* driver.inject(plugin("P"))
      yield* rawExec(filename, FAIL_WRITES)
      expect(yield* Effect.flip(driver.followup(user("A")))).toBeInstanceOf(PersistenceError)
      yield* driver.whenIdle
      yield* settle
      expect(yield* Context.get(first.ctx, ScriptedModel).requests).toEqual([])
      yield* first.dispose
      yield* rawExec(filename, HEAL_WRITES)
      const second = yield* acquire([], { sessionId: "of", resume: true })
      yield* Effect.gen(function*() {
        const inbox = yield* Inbox
        expect(yield* inbox.snapshot).toEqual({ nextTurn: [], nextStep: [plugin("P")] })
        expect(yield* inbox.idState(asId("A"))).toEqual(Option.none())
        expect((yield* events).map(notation)).toEqual(["INS(ns,0,[P])", "ES"])
      }).pipe(on(second.ctx))
      yield* second.dispose
    }))

  it.scoped("6.4/6.6: opening, resuming and forking while the file refuses writes fail with PersistenceError and store nothing; once it accepts them the repair is written once", () =>
    Effect.gen(function*() {
      const filename = freshFile()
      const { acquire, store } = yield* sqliteStore(filename)
      const started = yield* Deferred.make<void>()
      const first = yield* acquire([
        ScriptedModel.response({ toolCalls: [{ id: "k", name: "slow", arguments: {} }] })
      ], { sessionId: "rf", tools: [slowTool(started)] })
      yield* Context.get(first.ctx, Driver).followup(user("A"))
      yield* Deferred.await(started)
      yield* rawExec(filename, FAIL_WRITES)
      yield* Effect.exit(Context.get(first.ctx, Driver).inject(plugin("C")))
      yield* first.dispose
      const stored = storedEvents(filename, "rf")
      expect(stored.map(notation).slice(-1)).toEqual(["TC(k)"])
      const resumeFailure = yield* Effect.flip(acquire([], { sessionId: "rf", resume: true }))
      expect(resumeFailure).toBeInstanceOf(PersistenceError)
      expect(storedEvents(filename, "rf")).toEqual(stored)
      const forkFailure = yield* Effect.flip(
        forkSession({ source: sid("rf"), boundary: 0, childId: sid("rf-kid") }).pipe(
          Effect.provideService(SessionStore, store)
        )
      )
      expect(forkFailure).toBeInstanceOf(PersistenceError)
      expect(yield* store.exists(sid("rf-kid"))).toBe(false)
      yield* rawExec(
        filename,
        "CREATE TRIGGER audit_fail_sessions BEFORE INSERT ON sessions BEGIN SELECT RAISE(ABORT, 'no'); END;"
      )
      expect(yield* Effect.flip(acquire([], { sessionId: "fresh" }))).toBeInstanceOf(PersistenceError)
      expect(yield* store.exists(sid("fresh"))).toBe(false)
      yield* rawExec(filename, HEAL_WRITES + " DROP TRIGGER audit_fail_sessions;")
      // Nothing is held by the failed opens: the session resumes and is repaired exactly once.
      const second = yield* acquire([], { sessionId: "rf", resume: true })
      yield* second.dispose
      const third = yield* acquire([], { sessionId: "rf", resume: true })
      yield* third.dispose
      expect(storedEvents(filename, "rf").slice(stored.length).map(notation)).toEqual([
        "TR?(k)",
        "SE(1,1)",
        "TE(1,interrupted)",
        "ES"
      ])
      const created = yield* acquire([], { sessionId: "fresh" })
      yield* created.dispose
      expect((yield* store.load(sid("fresh"))).events).toEqual([])
    }))
})

describe("§6.3 fail-stop on SQLite, then reopen", () => {
  it.scoped("6.3: a failing file poisons the session: PersistenceError, later mutations change nothing, memory ahead of the file only by the failed batch; reopen after repair of storage", () =>
    Effect.gen(function*() {
      const filename = freshFile()
      const { acquire, store } = yield* sqliteStore(filename)
      const first = yield* acquire([], { sessionId: "po" })
      const driver = Context.get(first.ctx, Driver)
      const inbox = Context.get(first.ctx, Inbox)
      const log = Context.get(first.ctx, SessionLog)
      yield* driver.inject(plugin("A"))
      yield* rawExec(filename, FAIL_WRITES)
      const failed = yield* Effect.flip(driver.inject(plugin("B")))
      expect(failed).toBeInstanceOf(PersistenceError)
      expect(failed).toMatchObject({ _tag: "PersistenceError", sessionId: "po" })
      const memory = yield* log.events
      expect(memory.map(notation)).toEqual(["INS(ns,0,[A])", "INS(ns,1,[B])"])
      expect(yield* log.durableSeq).toBe(0)
      expect(storedShape(filename, "po")).toEqual(["INS(ns,0,[A])"])
      // Every later mutation fails with PersistenceError and changes nothing.
      expect(yield* Effect.flip(driver.followup(user("C")))).toBeInstanceOf(PersistenceError)
      expect(yield* Effect.flip(inbox.append("next-turn", user("D")))).toBeInstanceOf(PersistenceError)
      expect(yield* Effect.flip(inbox.clear)).toBeInstanceOf(PersistenceError)
      expect(yield* Effect.flip(driver.cancel({ kind: "user" }))).toBeInstanceOf(PersistenceError)
      expect(yield* Effect.flip(log.append({ type: "audit/note", data: {}, ignorable: true }))).toBeInstanceOf(
        PersistenceError
      )
      expect(yield* Effect.flip(log.flush)).toBeInstanceOf(PersistenceError)
      expect(yield* log.events).toEqual(memory)
      expect(yield* inbox.idState(asId("C"))).toEqual(Option.none())
      expect(yield* driver.status).toBe("idle")
      // Disposal of a poisoned session cannot fail; the file keeps only what was committed.
      yield* first.dispose
      expect(storedShape(filename, "po")).toEqual(["INS(ns,0,[A])"])
      // Storage works again: the session resumes from the file.
      yield* rawExec(filename, HEAL_WRITES)
      const second = yield* acquire([ScriptedModel.text("hi")], { sessionId: "po", resume: true })
      yield* Effect.gen(function*() {
        const log2 = yield* SessionLog
        const inbox2 = yield* Inbox
        const driver2 = yield* Driver
        expect(log2.firstLiveSeq).toBe(1)
        expect((yield* inbox2.nextStep).map((m) => m.id)).toEqual(["A"])
        expect(yield* inbox2.idState(asId("B"))).toEqual(Option.none())
        expect(yield* inbox2.idState(asId("A"))).toEqual(Option.some("pending"))
        // The id that was never durably accepted may be sent again.
        yield* driver2.inject(plugin("B"))
        yield* driver2.followup(user("C"))
        yield* driver2.whenIdle
        yield* log2.flush
        expect(storedShape(filename, "po").slice(0, 6)).toEqual([
          "INS(ns,0,[A])",
          "ES",
          "INS(ns,1,[B])",
          "INS(nt,0,[C])",
          "TS(1)",
          "CLM(ns,0,2)"
        ])
        expect(checkLog(storedEvents(filename, "po"), { closed: true })).toEqual([])
      }).pipe(on(second.ctx))
      yield* second.dispose
      expect((yield* store.load(sid("po"))).events).toEqual(storedEvents(filename, "po"))
    }))

  it.scoped("6.3/6.4/6.5: poisoned while a tool body runs: the file ends inside the turn; resume repairs it (unknown and not-started results) durably; a second resume adds nothing", () =>
    Effect.gen(function*() {
      const filename = freshFile()
      const { acquire } = yield* sqliteStore(filename)
      const started = yield* Deferred.make<void>()
      const tools = [slowTool(started)]
      const first = yield* acquire([
        ScriptedModel.response({
          toolCalls: [{ id: "a", name: "slow", arguments: {} }, { id: "b", name: "slow", arguments: {} }]
        })
      ], { sessionId: "rp", tools })
      yield* Effect.gen(function*() {
        const driver = yield* Driver
        yield* driver.followup(user("A"))
        yield* Deferred.await(started)
        yield* rawExec(filename, FAIL_WRITES)
        expect(yield* Effect.flip(driver.inject(plugin("C")))).toBeInstanceOf(PersistenceError)
        yield* driver.whenIdle
        expect(yield* driver.status).toBe("idle")
      }).pipe(on(first.ctx))
      yield* first.dispose
      const stored = storedEvents(filename, "rp")
      expect(stored.map(notation).slice(-3)).toEqual(["CH(finish stop)", "AM", "TC(a)"])
      yield* rawExec(filename, HEAL_WRITES)
      yield* TestClock.setTime(5_000)
      const second = yield* acquire([ScriptedModel.text("after")], {
        sessionId: "rp",
        resume: true,
        tools: [quickTool]
      })
      // The closers and the end-seed are committed before the layer is handed out.
      const repaired = storedEvents(filename, "rp")
      expect(repaired.slice(0, stored.length)).toEqual(stored)
      expect(repaired.slice(stored.length).map(notation)).toEqual([
        "TR?(a)",
        "TR?(b)",
        "SE(1,1)",
        "TE(1,interrupted)",
        "ES"
      ])
      const tc = stored[stored.length - 1]!
      const [ra, rb, se, te, es] = repaired.slice(stored.length) as unknown as Array<
        {
          readonly seq: number
          readonly time: number
          readonly data: any
          readonly sourceEventSeqs?: ReadonlyArray<number>
        }
      >
      expect(ra!.data.error).toEqual({ name: "ToolOutcomeUnknownError", code: "TOOL_OUTCOME_UNKNOWN" })
      expect(ra!.sourceEventSeqs).toEqual([tc.seq])
      expect(ra!.data.message.id).toBe(`interrupted-tool-result-a-${ra!.seq}`)
      expect(ra!.data.message.content[0].isError).toBe(true)
      expect(rb!.data.message.content[0].isError).toBe(true)
      expect(ra!.data.message.content[0].content[0].text).toBe(
        "Error: the session was interrupted while this tool call was running; its outcome is unknown. Check the current state before retrying anything with side effects."
      )
      expect(rb!.data.error).toEqual({ name: "ToolNotStartedError", code: "TOOL_NOT_STARTED" })
      expect(rb!.sourceEventSeqs).toBeUndefined()
      expect(rb!.data.message.id).toBe(`interrupted-tool-result-b-${rb!.seq}`)
      expect(rb!.data.message.content[0].content[0].text).toBe(
        "Error: the session was interrupted before this tool call started; it did not run and may be retried."
      )
      for (const e of [ra!, rb!, se!, te!]) expect(e.time).toBe(tc.time)
      expect(es!.time).toBe(5_000)
      yield* Effect.gen(function*() {
        const log = yield* SessionLog
        const driver = yield* Driver
        expect(log.firstLiveSeq).toBe(stored.length)
        expect(yield* log.events).toEqual(repaired)
        expect(yield* driver.status).toBe("idle")
        // The input of the poisoned operation was never durable; nothing is resurrected.
        expect(yield* Context.get(second.ctx, Inbox).hasPending).toBe(false)
      }).pipe(on(second.ctx))
      yield* second.dispose
      expect(storedEvents(filename, "rp")).toEqual(repaired)
      // A second resume: no repair, no second end-seed; the next turn is 2.
      const third = yield* acquire([ScriptedModel.text("after")], { sessionId: "rp", resume: true, tools: [quickTool] })
      expect(storedEvents(filename, "rp")).toEqual(repaired)
      yield* Effect.gen(function*() {
        const driver = yield* Driver
        const log = yield* SessionLog
        expect(log.firstLiveSeq).toBe(repaired.length)
        yield* driver.followup(user("B"))
        yield* driver.whenIdle
        yield* log.flush
        const after = storedEvents(filename, "rp").slice(repaired.length).map(notation)
        expect(after.slice(0, 6)).toEqual(["INS(nt,0,[B])", "TS(2)", "CLM(nt,0,1)", "SS(2,1)", "UM(B)", "RH(resume)"])
        const request = (yield* Context.get(third.ctx, ScriptedModel).requests)[0]!
        expect(request.messages.map((m) => m.id).slice(-3)).toEqual([
          `interrupted-tool-result-a-${ra!.seq}`,
          `interrupted-tool-result-b-${rb!.seq}`,
          "B"
        ])
        expect(checkLog(storedEvents(filename, "rp"), { closed: true })).toEqual([])
      }).pipe(on(third.ctx))
      yield* third.dispose
    }))
})

describe("§3.7 disposal (D9) on SQLite, then resume", () => {
  it.scoped("3.7/D9: disposing while a tool body runs aborts the turn with cause disposed, writes no cancellation splice; pending input is in the file and restored idle; a waking delivery runs it", () =>
    Effect.gen(function*() {
      const filename = freshFile()
      const { acquire } = yield* sqliteStore(filename)
      const started = yield* Deferred.make<void>()
      const first = yield* acquire([
        ScriptedModel.response({ toolCalls: [{ id: "k", name: "slow", arguments: {} }] })
      ], { sessionId: "dp", tools: [slowTool(started)] })
      const driver = Context.get(first.ctx, Driver)
      const log = Context.get(first.ctx, SessionLog)
      yield* driver.followup(user("A"))
      yield* Deferred.await(started)
      yield* driver.steer(user("S"))
      yield* driver.followup(user("F"))
      yield* driver.inject(plugin("C"))
      yield* first.dispose
      expect(yield* Effect.flip(driver.followup(user("late")))).toBeInstanceOf(AgentDisposed)
      const final = yield* log.events
      const stored = storedEvents(filename, "dp")
      expect(stored).toEqual(final)
      const shape = stored.map(notation)
      expect(shape.slice(-3)).toEqual(["TR✗(k)", "SE(1,1)", "TE(1,aborted(disposed))"])
      expect(shape.filter((s) => s.startsWith("CAN("))).toEqual([])
      expect(shape).toContain("INS(ns,0,[S])")
      expect(shape).toContain("INS(nt,0,[F])")
      expect(shape).toContain("INS(ns,1,[C])")
      const second = yield* acquire([
        ScriptedModel.text("two"),
        ScriptedModel.text("three"),
        ScriptedModel.text("four")
      ], {
        sessionId: "dp",
        resume: true,
        tools: [quickTool]
      })
      yield* Effect.gen(function*() {
        const driver2 = yield* Driver
        const inbox = yield* Inbox
        const log2 = yield* SessionLog
        expect((yield* inbox.nextStep).map((m) => m.id)).toEqual(["S", "C"])
        expect((yield* inbox.nextTurn).map((m) => m.id)).toEqual(["F"])
        yield* settle
        expect(yield* driver2.status).toBe("idle")
        expect(yield* Context.get(second.ctx, ScriptedModel).requests).toEqual([])
        expect((yield* log2.events).map(notation).slice(stored.length)).toEqual(["ES"])
        // A quiet queue does not wake the resumed agent; a waking delivery does.
        yield* driver2.send(user("Q"), "next-turn", false)
        yield* settle
        expect(yield* driver2.status).toBe("idle")
        yield* driver2.followup(user("G"))
        yield* driver2.whenIdle
        yield* log2.flush
        const es = storedEvents(filename, "dp")
        expect(es).toEqual(yield* log2.events)
        const turns = typeSeq(es, "turn/start").map((seq) => (es[seq]!.data as { turn: number }).turn)
        expect(turns).toEqual([1, 2, 3, 4])
        // Turn 2 takes all of next-step and the oldest next-turn item; the chain runs the rest in order.
        const entered = (turn: number) => enteredByTurn(es).get(turn)
        expect(entered(2)).toEqual(["S", "C", "F"])
        expect(entered(3)).toEqual(["Q"])
        expect(entered(4)).toEqual(["G"])
        expect(es.filter((e) => e.type === "turn/end").map(notation)).toEqual([
          "TE(1,aborted(disposed))",
          "TE(2,completed)",
          "TE(3,completed)",
          "TE(4,completed)"
        ])
        expect(checkLog(es, { closed: true })).toEqual([])
      }).pipe(on(second.ctx))
      yield* second.dispose
    }))
})

describe("§3.7 disposal keeps the draining step's contexts (D8/D9)", () => {
  it.scoped("3.7/7.5: a context deferred by a body interrupted by disposal is inserted after its result and stays pending; after resume it is in next-step", () =>
    Effect.gen(function*() {
      const filename = freshFile()
      const { acquire } = yield* sqliteStore(filename)
      const started = yield* Deferred.make<void>()
      const deferring: ToolDefinition<any> = Tool.make("slow", {
        description: "defers a context, then never finishes",
        parameters: Schema.Struct({}),
        execute: (_params, ctx) =>
          ctx.deferContext(plugin("ctx1")).pipe(
            Effect.zipRight(Deferred.succeed(started, undefined)),
            Effect.zipRight(Effect.never)
          )
      })
      const first = yield* acquire([
        ScriptedModel.response({ toolCalls: [{ id: "k", name: "slow", arguments: {} }] })
      ], { sessionId: "dc", tools: [deferring] })
      yield* Context.get(first.ctx, Driver).followup(user("A"))
      yield* Deferred.await(started)
      yield* first.dispose
      expect(storedShape(filename, "dc").slice(-4)).toEqual([
        "TR✗(k)",
        "INS(ns,0,[ctx1])",
        "SE(1,1)",
        "TE(1,aborted(disposed))"
      ])
      const second = yield* acquire([], { sessionId: "dc", resume: true })
      expect((yield* Context.get(second.ctx, Inbox).nextStep).map((m) => m.id)).toEqual(["ctx1"])
      yield* second.dispose
    }))
})

describe("§6.4/§6.1 opening on SQLite", () => {
  it.scoped("6.4 create: the header {formatVersion 1, sessionId, createdAt: Clock, seedLength 0} is stored with an empty log before the layer is handed out; a second agent of the same store is AgentBusy", () =>
    Effect.gen(function*() {
      const filename = freshFile()
      const { acquire, store } = yield* sqliteStore(filename)
      yield* TestClock.setTime(4_242)
      const first = yield* acquire([], { sessionId: "new" })
      expect(yield* store.load(sid("new"))).toEqual({
        header: { formatVersion: 1, sessionId: "new", createdAt: 4_242, seedLength: 0 },
        events: []
      })
      expect(storedEvents(filename, "new")).toEqual([])
      const busy = yield* Effect.flip(acquire([], { sessionId: "new", resume: true }))
      expect(busy).toBeInstanceOf(AgentBusy)
      expect(busy).toMatchObject({ sessionId: "new", operation: "open" })
      yield* first.dispose
      expect(yield* Effect.flip(acquire([], { sessionId: "new" }))).toMatchObject({
        _tag: "SessionExists",
        sessionId: "new"
      })
      expect(yield* Effect.flip(acquire([], { sessionId: "absent", resume: true }))).toMatchObject({
        _tag: "SessionNotFound",
        sessionId: "absent"
      })
      expect(yield* store.exists(sid("absent"))).toBe(false)
      // Reopening an untouched session does not grow it.
      const again = yield* acquire([], { sessionId: "new", resume: true })
      expect(Context.get(again.ctx, SessionLog).firstLiveSeq).toBe(0)
      yield* again.dispose
      const third = yield* acquire([], { sessionId: "new", resume: true })
      yield* third.dispose
      expect(storedShape(filename, "new")).toEqual(["ES"])
    }))
})
