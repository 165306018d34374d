/**
 * Resume and fail-stop (SPEC 6.3-6.5): crash images taken inside a turn, repair and extension
 * brackets, fail-stop then disposal and resume.
 */
import { describe, expect, it } from "@effect/vitest"
import { Context, Deferred, Effect, Exit, Fiber, Layer, Option, Scope, Stream, TestClock } from "effect"
import {
  CancelCause,
  checkLog,
  Driver,
  Inbox,
  MalformedLog,
  MemoryStoreControl,
  PersistenceError,
  PreStep,
  ScriptedModel,
  SessionId,
  SessionLog,
  SessionStore,
  Tool
} from "../../src/index.js"
import type { ScriptEntry, SessionEvent, StoreSnapshot, ToolDefinition, UserMessage } from "../../src/index.js"
import {
  agentOver,
  asId,
  closeOut,
  events,
  gate,
  ids,
  liveNotation,
  notation,
  open,
  plugin,
  settle,
  token,
  until,
  user
} from "./harness.js"
import { ev, header, outcome, withStore } from "./stores.js"
import { empty } from "./toolFixtures.js"

const sid = SessionId.make("s")
type AgentCtx = Context.Context<Layer.Layer.Success<ReturnType<typeof agentOver>>>

/** A memory store built in the current scope; agents over it live in scopes the test closes itself. */
const memoryStore = (layer: Layer.Layer<SessionStore | MemoryStoreControl> = SessionStore.layerMemory) =>
  Effect.map(Layer.build(layer), (storeCtx) => ({
    storeCtx,
    store: Context.get(storeCtx, SessionStore),
    control: Context.get(storeCtx, MemoryStoreControl),
    acquire: (script: ReadonlyArray<ScriptEntry>, options: Parameters<typeof agentOver>[1] = {}) =>
      Effect.gen(function*() {
        const scope = yield* Scope.make()
        const ctx: AgentCtx = yield* Layer.buildWithScope(
          agentOver(script, options).pipe(Layer.provide(Layer.succeedContext(storeCtx))),
          scope
        )
        return { ctx, dispose: Scope.close(scope, Exit.void) }
      })
  }))

/** Resumes session "s" of a crash image; returns the agent and the image's stored events. */
const resumeImage = (
  image: StoreSnapshot,
  script: ReadonlyArray<ScriptEntry> = [],
  options: Parameters<typeof agentOver>[1] = {}
) =>
  Effect.gen(function*() {
    const m = yield* memoryStore(SessionStore.layerMemoryFrom(image))
    const stored = (yield* m.store.load(sid)).events
    const agent = yield* m.acquire(script, { ...options, resume: true })
    return { ...m, stored, agent }
  })

const get = <I, S>(ctx: AgentCtx, tag: Context.Tag<I, S>) => Context.get(ctx as Context.Context<I>, tag)
type Loose = { readonly [k: string]: any }
const d = (e: SessionEvent): Loose => e.data as Loose

const UNKNOWN_TEXT =
  "Error: the session was interrupted while this tool call was running; its outcome is unknown. Check the current state before retrying anything with side effects."
const NOT_STARTED_TEXT =
  "Error: the session was interrupted before this tool call started; it did not run and may be retried."

describe("6.4/6.5 resume of crash images taken inside a turn", () => {
  it.scoped("6.5 mid-stream with flushed chunks: SE + TE(interrupted) at the last event's time, no AM!; pending follow-up and inject restored idle; RH(resume) on the waking turn", () =>
    Effect.gen(function*() {
      const m = yield* memoryStore()
      const a = yield* m.acquire([ScriptedModel.hang({ text: "par" })])
      const driver = get(a.ctx, Driver)
      const log = get(a.ctx, SessionLog)
      yield* TestClock.adjust("1 second")
      yield* driver.followup(user("A"))
      yield* until(
        Effect.map(log.events, (es) => es.some((e) => e.type === "assistant/chunk" && d(e).chunk.type === "text-delta"))
      )
      yield* TestClock.adjust("1 second")
      yield* driver.followup(user("B"))
      yield* TestClock.adjust("1 second")
      yield* driver.inject(plugin("N"))
      const image = yield* m.control.snapshot
      yield* a.dispose
      yield* TestClock.adjust("1 hour")

      const r = yield* resumeImage(image, [ScriptedModel.text("b"), ScriptedModel.text("c")])
      expect(r.stored.map(notation)).toEqual([
        "INS(nt,0,[A])",
        "TS(1)",
        "CLM(nt,0,1)",
        "SS(1,1)",
        "UM(A)",
        "RH(initial)",
        "CH(block-start)",
        "CH(text-delta)",
        "INS(nt,0,[B])",
        "INS(ns,0,[N])"
      ])
      const rlog = get(r.agent.ctx, SessionLog)
      const rdriver = get(r.agent.ctx, Driver)
      const inbox = get(r.agent.ctx, Inbox)
      expect(rlog.firstLiveSeq).toBe(10)
      const after = yield* rlog.events
      const added = after.slice(10)
      expect(added.map(notation)).toEqual(["SE(1,1)", "TE(1,interrupted)", "ES"])
      expect(added.map((e) => e.seq)).toEqual([10, 11, 12])
      expect(added.slice(0, 2).map((e) => e.time)).toEqual([3000, 3000])
      expect(d(added[1]!).reason).toEqual({ kind: "interrupted" })
      // the closers and the end-seed are committed before the layer is handed out
      expect(yield* rlog.durableSeq).toBe(12)
      expect((yield* r.store.load(sid)).events.map(notation).slice(10)).toEqual(["SE(1,1)", "TE(1,interrupted)", "ES"])
      expect(checkLog(after, { closed: true })).toEqual([])
      expect(ids(yield* inbox.nextTurn)).toEqual(["B"])
      expect(ids(yield* inbox.nextStep)).toEqual(["N"])
      expect(yield* inbox.idState(asId("A"))).toEqual(Option.some("entered"))
      expect(yield* rdriver.status).toBe("idle")
      yield* settle
      expect(yield* (yield* ScriptedModel.pipe(Effect.provide(r.agent.ctx as Context.Context<ScriptedModel>))).requests)
        .toEqual([])
      // the interrupted prefix was never recorded: history holds A only
      expect((yield* rlog.messages).map(token)).toEqual(["A"])

      // a non-waking delivery leaves the restored items pending
      yield* rdriver.inject(plugin("N2"))
      yield* settle
      expect(yield* rdriver.status).toBe("idle")
      expect((yield* rlog.events).slice(13).map(notation)).toEqual(["INS(ns,1,[N2])"])
      yield* rdriver.followup(user("C"))
      yield* rdriver.whenIdle
      const next = (yield* rlog.events).slice(14).map(notation)
      expect(next.slice(0, 9)).toEqual([
        "INS(nt,1,[C])",
        "TS(2)",
        "CLM(ns,0,2)",
        "CLM(nt,0,1)",
        "SS(2,1)",
        "UM(N)",
        "UM(N2)",
        "UM(B)",
        "RH(resume)"
      ])
      expect(next).toContain("TS(3)")
      const reqs = yield* get(r.agent.ctx, ScriptedModel).requests
      expect(reqs.map((q) => [q.turn, q.step])).toEqual([[2, 1], [3, 1]])
      expect(reqs[0]!.messages.map(token)).toEqual(["A", "N", "N2", "B"])
      expect(checkLog(yield* rlog.events, { closed: true })).toEqual([])
    }))

  it.scoped("6.5 during a tool body: the started call gets TOOL_OUTCOME_UNKNOWN citing its tool/call, the unstarted one TOOL_NOT_STARTED; exact ids, texts, seqs and times", () =>
    Effect.gen(function*() {
      const started = gate()
      const slow: ToolDefinition<any> = Tool.make("slow", {
        description: "never finishes",
        parameters: empty,
        execute: () => Effect.zipRight(Deferred.succeed(started, undefined), Effect.never)
      })
      const quick: ToolDefinition<any> = Tool.make("quick", {
        description: "ok",
        parameters: empty,
        execute: () => Effect.succeed("ok")
      })
      const m = yield* memoryStore()
      const a = yield* m.acquire(
        [ScriptedModel.response({
          toolCalls: [{ id: "c1", name: "slow", arguments: {} }, { id: "c2", name: "quick", arguments: {} }]
        })],
        { tools: [slow, quick] }
      )
      yield* TestClock.adjust("5 seconds")
      yield* get(a.ctx, Driver).followup(user("A"))
      yield* Deferred.await(started)
      const image = yield* m.control.snapshot
      yield* a.dispose
      yield* TestClock.adjust("1 hour")

      const r = yield* resumeImage(image)
      const n = r.stored.length
      expect(r.stored.map(notation).slice(-3)).toEqual(["CH(finish stop)", "AM", "TC(c1)"])
      const tc1 = r.stored[n - 1]!
      const all = yield* get(r.agent.ctx, SessionLog).events
      const added = all.slice(n)
      expect(added.map(notation)).toEqual(["TR?(c1)", "TR?(c2)", "SE(1,1)", "TE(1,interrupted)", "ES"])
      expect(added.map((e) => e.seq)).toEqual([n, n + 1, n + 2, n + 3, n + 4])
      expect(added.slice(0, 4).map((e) => e.time)).toEqual([tc1.time, tc1.time, tc1.time, tc1.time])
      expect(tc1.time).toBe(5000)
      const [r1, r2] = [added[0]!, added[1]!]
      expect(d(r1)).toMatchObject({
        turn: 1,
        step: 1,
        error: { name: "ToolOutcomeUnknownError", code: "TOOL_OUTCOME_UNKNOWN" },
        message: {
          id: `interrupted-tool-result-c1-${n}`,
          content: [{
            type: "tool-result",
            toolCallId: "c1",
            isError: true,
            content: [{ type: "text", text: UNKNOWN_TEXT }]
          }]
        }
      })
      expect((r1 as Loose).sourceEventSeqs).toEqual([tc1.seq])
      expect(d(r2)).toMatchObject({
        turn: 1,
        step: 1,
        error: { name: "ToolNotStartedError", code: "TOOL_NOT_STARTED" },
        message: {
          id: `interrupted-tool-result-c2-${n + 1}`,
          content: [{
            type: "tool-result",
            toolCallId: "c2",
            isError: true,
            content: [{ type: "text", text: NOT_STARTED_TEXT }]
          }]
        }
      })
      expect((r2 as Loose).sourceEventSeqs).toBeUndefined()
      expect(checkLog(all, { closed: true })).toEqual([])
      expect((yield* get(r.agent.ctx, SessionLog).messages).map(token)).toEqual([
        "A",
        "tool-call c1",
        "tool-result c1",
        "tool-result c2"
      ])
      expect(yield* get(r.agent.ctx, Inbox).hasPending).toBe(false)
      expect(yield* get(r.agent.ctx, Driver).status).toBe("idle")
    }))

  it.scoped("6.5 after the assistant message, before the first tool/call is durable: every call is TOOL_NOT_STARTED without sourceEventSeqs", () =>
    Effect.gen(function*() {
      const finished = gate()
      const proceed = gate()
      const m = yield* memoryStore()
      const quick: ToolDefinition<any> = Tool.make("quick", {
        description: "ok",
        parameters: empty,
        execute: () => Effect.succeed("ok")
      })
      const a = yield* m.acquire(
        [ScriptedModel.response({
          toolCalls: [{ id: "c1", name: "quick", arguments: {} }, { id: "c2", name: "quick", arguments: {} }],
          afterFinish: Effect.zipRight(open(finished), Deferred.await(proceed))
        })],
        { tools: [quick] }
      )
      yield* get(a.ctx, Driver).followup(user("A"))
      yield* Deferred.await(finished)
      yield* get(a.ctx, SessionLog).flush
      const image = yield* m.control.snapshot
      yield* open(proceed)
      yield* get(a.ctx, Driver).whenIdle
      yield* a.dispose

      const r = yield* resumeImage(image)
      expect(r.stored.map(notation).slice(-1)).toEqual(["AM"])
      const all = yield* get(r.agent.ctx, SessionLog).events
      const added = all.slice(r.stored.length)
      expect(added.map(notation)).toEqual(["TR?(c1)", "TR?(c2)", "SE(1,1)", "TE(1,interrupted)", "ES"])
      expect(added.slice(0, 2).map((e) => d(e).error.code)).toEqual(["TOOL_NOT_STARTED", "TOOL_NOT_STARTED"])
      expect(added.slice(0, 2).map((e) => (e as Loose).sourceEventSeqs)).toEqual([undefined, undefined])
      expect(checkLog(all, { closed: true })).toEqual([])
    }))

  it.scoped("6.5/6.4 during a pre-step listener after its numeric compaction/start: only TE(interrupted), the bracket stays open; claimed A is gone but known; inject pending; next turn 2 logs RH(initial)", () =>
    Effect.gen(function*() {
      const inListener = gate()
      const m = yield* memoryStore()
      const a = yield* m.acquire([])
      const log = get(a.ctx, SessionLog)
      yield* Effect.provide(
        get(a.ctx, PreStep).register((input, next) =>
          Effect.gen(function*() {
            yield* log.append({ type: "compaction/start", data: { turn: input.turn } })
            yield* open(inListener)
            return yield* Effect.zipRight(Effect.never, next())
          })
        ),
        Context.make(Scope.Scope, yield* Scope.make())
      )
      yield* get(a.ctx, Driver).followup(user("A"))
      yield* Deferred.await(inListener)
      yield* get(a.ctx, Driver).inject(plugin("N"))
      const image = yield* m.control.snapshot
      yield* a.dispose

      const r = yield* resumeImage(image, [ScriptedModel.text("b")])
      expect(r.stored.map(notation)).toEqual([
        "INS(nt,0,[A])",
        "TS(1)",
        "CLM(nt,0,1)",
        "compaction/start",
        "INS(ns,0,[N])"
      ])
      const rlog = get(r.agent.ctx, SessionLog)
      const rdriver = get(r.agent.ctx, Driver)
      const all = yield* rlog.events
      expect(all.slice(5).map(notation)).toEqual(["TE(1,interrupted)", "ES"])
      expect(all[5]!.time).toBe(r.stored[4]!.time)
      expect(checkLog(all, { closed: true })).toEqual([])
      expect(ids(yield* get(r.agent.ctx, Inbox).nextStep)).toEqual(["N"])
      expect(ids(yield* get(r.agent.ctx, Inbox).nextTurn)).toEqual([])
      expect(yield* Effect.flip(rdriver.followup(user("A")))).toMatchObject({
        _tag: "DuplicateMessage",
        state: "claimed"
      })
      expect(yield* rdriver.status).toBe("idle")
      yield* rdriver.followup(user("B"))
      yield* rdriver.whenIdle
      expect((yield* rlog.events).slice(7).map(notation).slice(0, 8)).toEqual(
        ["INS(nt,0,[B])", "TS(2)", "CLM(ns,0,1)", "CLM(nt,0,1)", "SS(2,1)", "UM(N)", "UM(B)", "RH(initial)"]
      )
      expect(checkLog(yield* rlog.events, { closed: true })).toEqual([])
    }))

  it.scoped("6.4/R6 during a manual compaction task: no closers, ⟨ES⟩ only; the abandoned null bracket does not block a new task", () =>
    Effect.gen(function*() {
      const m = yield* memoryStore()
      const a = yield* m.acquire([ScriptedModel.text("a")])
      const driver = get(a.ctx, Driver)
      const log = get(a.ctx, SessionLog)
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      const opened = gate()
      yield* Effect.fork(driver.runMaintenance(
        Effect.zipRight(
          log.append({ type: "compaction/start", data: { turn: null } }),
          Effect.zipRight(open(opened), Effect.never)
        )
      ))
      yield* Deferred.await(opened)
      const image = yield* m.control.snapshot
      yield* a.dispose

      const r = yield* resumeImage(image)
      expect(r.stored.map(notation).slice(-2)).toEqual(["TE(1,completed)", "compaction/start"])
      const rlog = get(r.agent.ctx, SessionLog)
      expect((yield* rlog.events).slice(r.stored.length).map(notation)).toEqual(["ES"])
      expect(checkLog(yield* rlog.events, { closed: true })).toEqual([])
      yield* get(r.agent.ctx, Driver).runMaintenance(Effect.zipRight(
        rlog.append({ type: "compaction/start", data: { turn: null } }),
        rlog.append({ type: "compaction/end", data: { turn: null } })
      ))
      expect((yield* rlog.events).slice(r.stored.length).map(notation)).toEqual([
        "ES",
        "compaction/start",
        "compaction/end"
      ])
    }))

  it.scoped("6.4: resuming a repaired image a second time appends nothing; the next turn after a closed log is lastTurn + 1", () =>
    Effect.gen(function*() {
      const m = yield* memoryStore()
      const a = yield* m.acquire([ScriptedModel.hang({})])
      yield* get(a.ctx, Driver).followup(user("A"))
      yield* until(Effect.map(get(a.ctx, SessionLog).events, (es) => es.some((e) => e.type === "request/header")))
      const image = yield* m.control.snapshot
      yield* a.dispose
      const r1 = yield* resumeImage(image)
      const first = yield* get(r1.agent.ctx, SessionLog).events
      yield* r1.agent.dispose
      const image2 = yield* r1.control.snapshot
      const r2 = yield* resumeImage(image2, [ScriptedModel.text("x")])
      const second = yield* get(r2.agent.ctx, SessionLog).events
      expect(second).toEqual(first)
      expect(get(r2.agent.ctx, SessionLog).firstLiveSeq).toBe(first.length)
      yield* get(r2.agent.ctx, Driver).followup(user("B"))
      yield* get(r2.agent.ctx, Driver).whenIdle
      expect((yield* get(r2.agent.ctx, ScriptedModel).requests).map((q) => q.turn)).toEqual([2])
    }))
})

describe("6.3 fail-stop through Agent.layer, then disposal and resume", () => {
  it.scoped("6.3: after a poison every mutating operation fails PersistenceError and changes nothing; one agent/error; stream ends on poison; disposal succeeds; resume repairs", () =>
    Effect.gen(function*() {
      const m = yield* memoryStore()
      const a = yield* m.acquire([ScriptedModel.hang({ text: "p" })])
      const driver = get(a.ctx, Driver)
      const log = get(a.ctx, SessionLog)
      const inbox = get(a.ctx, Inbox)
      const live = yield* Effect.provide(driver.subscribe, Context.make(Scope.Scope, yield* Scope.make()))
      const streamed = yield* Effect.fork(Stream.runCollect(log.stream(0)))
      yield* driver.inject(plugin("P"))
      yield* driver.steer(user("A"))
      yield* until(
        Effect.map(log.events, (es) => es.some((e) => e.type === "assistant/chunk" && d(e).chunk.type === "text-delta"))
      )
      yield* m.control.failAppends(3)
      const calls0 = yield* m.control.appendCalls
      expect(yield* Effect.flip(driver.inject(plugin("C")))).toBeInstanceOf(PersistenceError)
      expect((yield* m.control.appendCalls) - calls0).toBe(3)
      yield* driver.whenIdle
      expect(yield* driver.status).toBe("idle")
      yield* settle
      const errors = [] as Array<any>
      const all = [] as Array<string>
      while (Option.getOrElse(live.unsafeSize(), () => 0) > 0) {
        const e = yield* live.take
        all.push(liveNotation(e))
        if (e.type === "agent/error") errors.push(e)
      }
      expect(errors).toHaveLength(1)
      expect(errors[0].turn).toBe(1)
      expect(errors[0].step).toBe(1)
      expect(errors[0].error).toBeInstanceOf(PersistenceError)
      expect(all.slice(-3)).toEqual(["inserted(C)", "error(1,1)", "status(idle)"])

      const before = yield* log.events
      const durable = yield* log.durableSeq
      const calls = yield* m.control.appendCalls
      expect(before.at(-1)!.type).toBe("agent/inbox/spliced")
      expect(before.filter((e) => e.type === "turn/end")).toEqual([])
      const ops: ReadonlyArray<readonly [string, Effect.Effect<unknown, unknown>]> = [
        ["send", driver.send(user("X1"), "next-turn", true)],
        ["followup", driver.followup(user("X2"))],
        ["followup duplicate", driver.followup(user("A"))],
        ["steer", driver.steer(user("X3"))],
        ["inject", driver.inject(plugin("X4"))],
        ["cancel", driver.cancel(CancelCause.user)],
        ["cancel keepInbox", driver.cancel(CancelCause.user, { keepInbox: true })],
        ["runMaintenance", driver.runMaintenance(Effect.void)],
        ["inbox.append", inbox.append("next-step", plugin("X5"))],
        ["inbox.prepend", inbox.prepend("next-turn", user("X6"))],
        ["inbox.splice", inbox.splice("next-step", 0, 0, [])],
        ["inbox.replace", inbox.replace(asId("P"), plugin("X7"))],
        ["inbox.remove", inbox.remove(asId("P"))],
        ["inbox.remove missing", inbox.remove(asId("nope"))],
        ["inbox.clear", inbox.clear],
        ["log.append", log.append({ type: "x/y", data: {}, ignorable: true })],
        ["flush", log.flush]
      ]
      const failures: Array<string> = []
      for (const [name, op] of ops) {
        const exit = yield* Effect.exit(op)
        const ok = Exit.isFailure(exit) &&
          Option.exists(
            Exit.causeOption(exit).pipe(Option.flatMap((c) => Option.fromNullable(JSON.stringify(c)))),
            (s) => s.includes("PersistenceError")
          )
        if (!ok) failures.push(name)
      }
      expect(failures).toEqual([])
      yield* settle
      expect(yield* log.events).toEqual(before)
      expect(yield* log.durableSeq).toBe(durable)
      expect(yield* m.control.appendCalls).toBe(calls)
      expect(yield* driver.status).toBe("idle")
      expect(Option.getOrElse(live.unsafeSize(), () => -1)).toBe(0)
      // SessionLog.stream ends on poison
      const got = yield* Fiber.join(streamed)
      expect([...got].map((e) => e.seq)).toEqual(before.map((e) => e.seq))

      const closed = yield* Effect.exit(a.dispose)
      expect(Exit.isSuccess(closed)).toBe(true)
      const stored = (yield* m.store.load(sid)).events
      expect(stored.length).toBe(durable + 1)
      expect(stored.map(notation)).not.toContain("INS(ns,0,[C])")

      const r = yield* m.acquire([], { resume: true })
      const rev = yield* get(r.ctx, SessionLog).events
      expect(rev.slice(stored.length).map(notation)).toEqual(["SE(1,1)", "TE(1,interrupted)", "ES"])
      expect(checkLog(rev, { closed: true })).toEqual([])
      expect(yield* get(r.ctx, Inbox).idState(asId("C"))).toEqual(Option.none())
      expect(ids(yield* get(r.ctx, Inbox).nextStep)).toEqual([])
      yield* r.dispose
    }))
})

describe("§6.4/§6.5 resume", () => {
  const A = user("A")
  const crashed: ReadonlyArray<SessionEvent> = [
    { type: "agent/inbox/spliced", seq: 0, time: 1000, data: { target: "next-turn", start: 0, inserted: [A] } },
    { type: "turn/start", seq: 1, time: 2000, data: { turn: 1 } },
    {
      type: "agent/inbox/spliced",
      seq: 2,
      time: 3000,
      data: { target: "next-turn", start: 0, removedCount: 1, inserted: [] }
    }
  ] as unknown as ReadonlyArray<SessionEvent>

  it.scoped("2.1/6.4/6.5: resume commits the closer with the last event's time, then ES with the Clock time; firstLiveSeq is the stored length", () =>
    Effect.gen(function*() {
      const { store, run } = yield* withStore
      yield* store.create(header("c"), crashed)
      yield* TestClock.adjust(10_000)
      yield* run(
        [],
        Effect.gen(function*() {
          const log = yield* SessionLog
          const es = yield* log.events
          expect(es.slice(3).map((e) => [notation(e), e.seq, e.time])).toEqual([["TE(1,interrupted)", 3, 3000], [
            "ES",
            4,
            10_000
          ]])
          expect(log.firstLiveSeq).toBe(3)
          expect(yield* log.durableSeq).toBe(4)
          // 6.5: input claimed by the interrupted turn is gone; nothing is resurrected.
          const inbox = yield* Inbox
          expect(yield* inbox.snapshot).toEqual({ nextTurn: [], nextStep: [] })
          expect(yield* inbox.idState("A" as UserMessage["id"])).toEqual(Option.some("claimed"))
        }),
        { sessionId: "c", resume: true }
      )
      const stored = yield* store.load(SessionId.make("c"))
      expect(stored.events.slice(3).map((e) => e.time)).toEqual([3000, 10_000])
      // Reopening the untouched session does not grow it.
      yield* run([], Effect.void, { sessionId: "c", resume: true })
      expect((yield* store.load(SessionId.make("c"))).events.length).toBe(5)
    }))

  it.scoped("2.7/5.1 A9: a seed splice with none of the four shapes makes the log malformed on resume", () =>
    Effect.gen(function*() {
      const { store, run } = yield* withStore
      const m = plugin("m")
      yield* store.create({ ...header("child"), seedLength: 1, parent: { sessionId: "p", boundary: 0 } }, [
        ev(0, "agent/inbox/spliced", { target: "next-step", start: 0, inserted: [m], outcome: "canceled" }),
        ev(1, "session/end-seed", {})
      ])
      const exit = yield* Effect.exit(run([], Effect.void, { sessionId: "child", resume: true }))
      // Splice shapes are checked inside the seed too.
      expect(outcome(exit)).toMatch(/^MalformedLog/)
    }))

  it.scoped("6.4 step 2: resume with invariants off still refuses an invalid persisted splice (\"invalid persisted inbox splice at seq N\")", () =>
    Effect.gen(function*() {
      const { store, run } = yield* withStore
      yield* store.create(header("bad"), [
        ev(0, "agent/inbox/spliced", { target: "next-step", start: 0, inserted: [plugin("x")] }),
        ev(1, "agent/inbox/spliced", {
          target: "next-step",
          start: 1,
          removedCount: 1,
          inserted: [],
          outcome: "canceled"
        })
      ])
      const error = yield* Effect.flip(
        run([], Effect.void, { sessionId: "bad", resume: true, agent: { invariants: "off" } })
      )
      expect(error).toBeInstanceOf(MalformedLog)
      expect(error).toMatchObject({ seq: 1 })
      expect((error as MalformedLog).reason).toContain("invalid persisted inbox splice at seq 1")
    }))
})

describe("§6.5 repair and extension brackets (R6)", () => {
  const A = user("A")
  const start: ReadonlyArray<SessionEvent> = [
    ev(0, "agent/inbox/spliced", { target: "next-turn", start: 0, inserted: [A] }),
    ev(1, "turn/start", { turn: 1 }),
    ev(2, "agent/inbox/spliced", { target: "next-turn", start: 0, removedCount: 1, inserted: [] })
  ]

  it.scoped("6.5/R6: an open compaction {turn: n} bracket is abandoned by the repair's turn/end; a new bracket opens in maintenance", () =>
    Effect.gen(function*() {
      const { store, run } = yield* withStore
      yield* store.create(header("c"), [...start, ev(3, "compaction/start", { turn: 1, note: "auto" })])
      yield* run(
        [],
        Effect.gen(function*() {
          const log = yield* SessionLog
          const driver = yield* Driver
          expect((yield* log.events).slice(4).map(notation)).toEqual(["TE(1,interrupted)", "ES"])
          yield* driver.runMaintenance(Effect.gen(function*() {
            yield* log.append({ type: "compaction/start", data: { turn: null } })
            yield* log.append({ type: "compaction/end", data: { turn: null } })
          }))
          expect(checkLog(yield* log.events, { closed: true })).toEqual([])
        }),
        { sessionId: "c", resume: true }
      )
    }))

  it.scoped("6.5/R6: repair never closes a {turn: null} bracket; it is abandoned at ES, so a compaction/end after resume is R6", () =>
    Effect.gen(function*() {
      const { store, run } = yield* withStore
      yield* store.create(header("m"), [ev(0, "compaction/start", { turn: null })])
      yield* run(
        [],
        Effect.gen(function*() {
          const log = yield* SessionLog
          const driver = yield* Driver
          expect((yield* log.events).map(notation)).toEqual(["compaction/start", "ES"])
          const error = yield* Effect.flip(
            driver.runMaintenance(log.append({ type: "compaction/end", data: { turn: null } }))
          )
          expect(error).toMatchObject({ _tag: "InvalidEvent", rule: "R6" })
          yield* driver.runMaintenance(log.append({ type: "compaction/start", data: { turn: null } }))
          expect((yield* log.events).map(notation)).toEqual(["compaction/start", "ES", "compaction/start"])
        }),
        { sessionId: "m", resume: true }
      )
    }))
})

describe("§6.3 fail-stop then resume", () => {
  it.scoped("6.3/6.4/3.9: a session poisoned inside a turn keeps it open in storage; after disposal a resume repairs it, and the failed input is not known", () =>
    Effect.gen(function*() {
      const { store, storeCtx, run } = yield* withStore
      const control = Context.get(storeCtx, MemoryStoreControl)
      const durable = yield* run(
        [ScriptedModel.hang({ text: "partial" })],
        Effect.gen(function*() {
          const driver = yield* Driver
          const log = yield* SessionLog
          yield* driver.followup(user("A"))
          yield* Effect.flatMap(Effect.yieldNow(), () => log.flush)
          yield* control.failAppends(3)
          expect(yield* Effect.flip(driver.inject(plugin("C")))).toBeInstanceOf(PersistenceError)
          expect(yield* driver.status).toBe("idle")
          expect(yield* Effect.flip(log.flush)).toBeInstanceOf(PersistenceError)
          // Reads keep the in-memory state, which may go beyond durableSeq.
          const inMemory = yield* log.events
          const durableSeq = yield* log.durableSeq
          expect(inMemory.length - 1).toBeGreaterThan(durableSeq)
          return durableSeq
        })
      )
      const stored = (yield* store.load(SessionId.make("s"))).events
      expect(stored.length).toBe(durable + 1)
      expect(stored.some((e) => e.type === "turn/end")).toBe(false)
      expect(stored.map(notation)).toContain("TS(1)")
      yield* run(
        [ScriptedModel.text("after")],
        Effect.gen(function*() {
          const driver = yield* Driver
          const inbox = yield* Inbox
          const es = yield* events
          expect(es.slice(stored.length).map(notation).slice(-2)).toEqual(["TE(1,interrupted)", "ES"])
          expect(yield* inbox.idState("C" as UserMessage["id"])).toEqual(Option.none())
          yield* driver.inject(plugin("C"))
          yield* driver.followup(user("B"))
          yield* driver.whenIdle
          expect(yield* closeOut).toEqual([])
          expect((yield* events).filter((e) => e.type === "turn/start").map((e) => (e.data as { turn: number }).turn))
            .toEqual([1, 2])
        }),
        { resume: true }
      )
    }))
})
