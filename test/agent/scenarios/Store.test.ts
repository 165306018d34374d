/**
 * SPEC 9 scenarios P42-P45: crash repair, fork, surface replacement, the relational checker; and
 * SessionLog.append refusals.
 */
import { describe, expect, it } from "@effect/vitest"
import { Cause, Context, Effect, Exit, Layer, Option, Schema, TestClock } from "effect"
import { CancelCause, checkLog, deriveMessages, Driver, DuplicateMessage, ForkError, forkSession, Inbox, InvalidEvent, MalformedLog, PreStep, PreStepDecision, repairClosers, ScriptedModel, SessionId, SessionLog, SessionNotFound, SessionStore, Tool } from "../../../src/index.js"
import { agentOver, closeOut, events, notation, plugin, requests, scenario, shape, token, untilEvent, user } from "../harness.js"
import type { Scope } from "effect"
import type { SessionEvent, UserMessage } from "../../../src/index.js"

const empty = Schema.Struct({})
const sid = (s: string) => SessionId.make(s)
const header = (id: string) => ({ formatVersion: 1, sessionId: sid(id), createdAt: 0, seedLength: 0 })

/** Runs `program` against an agent for session `s` over a store built once in the test scope. */
const withStore = Effect.map(Layer.build(SessionStore.layerMemory), (storeCtx) => {
  const store = Context.get(storeCtx, SessionStore)
  const run = <A, E>(
    script: Parameters<typeof agentOver>[0],
    program: Effect.Effect<A, E, Driver | SessionLog | Inbox | PreStep | ScriptedModel | Scope.Scope>,
    options: Parameters<typeof agentOver>[1] = {}
  ) => Effect.scoped(Effect.provide(program, agentOver(script, options).pipe(Layer.provide(Layer.succeedContext(storeCtx)))))
  return { store, storeCtx, run }
})

/** The log of a session whose single tool call never finishes, captured right after its `tool/call`. */
const hangingTool = Tool.make("slow", { description: "never ends", parameters: empty, execute: () => Effect.never })
const openToolLog = Effect.gen(function*() {
  const driver = yield* Driver
  yield* TestClock.adjust("5 seconds")
  yield* driver.followup(user("A"))
  yield* untilEvent((e) => e.type === "tool/call")
  return yield* events
})

const ev = (type: string, data: unknown, extra: Record<string, unknown> = {}) => ({ type, seq: 0, time: 0, data, ...extra }) as SessionEvent
const withSeqs = (es: ReadonlyArray<SessionEvent>) => es.map((e, seq) => ({ ...e, seq }) as SessionEvent)

describe("P42 crash repair", () => {
  it.scoped("P42 (a-f): repairClosers of open turns, open steps and balanced logs", () =>
    Effect.gen(function*() {
      const { run } = yield* withStore
      const full = yield* run([ScriptedModel.response({ toolCalls: [{ id: "call-1", name: "slow", arguments: {} }] })], openToolLog, {
        tools: [hangingTool]
      })
      const at = (n: string) => full.findIndex((e) => notation(e) === n)
      // (a)
      const a = full.slice(0, 3)
      expect(a.map(notation)).toEqual(["INS(nt,0,[A])", "TS(1)", "CLM(nt,0,1)"])
      expect(repairClosers(a).map((e) => [notation(e), e.seq, e.time])).toEqual([["TE(1,interrupted)", 3, a[2]!.time]])
      // (b)
      const b = full.slice(0, at("UM(A)") + 1)
      const rb = repairClosers(b)
      expect(rb.map(notation)).toEqual(["SE(1,1)", "TE(1,interrupted)"])
      expect(rb.map((e) => e.seq)).toEqual([b.length, b.length + 1])
      expect(rb.every((e) => e.time === b[b.length - 1]!.time)).toBe(true)
      // (c)
      const c = full.slice(0, at("AM") + 1)
      const rc = repairClosers(c)
      expect(rc.map(notation)).toEqual(["TR?(call-1)", "SE(1,1)", "TE(1,interrupted)"])
      const tc = rc[0]! as any
      expect(tc.data.error).toEqual({ name: "ToolNotStartedError", code: "TOOL_NOT_STARTED" })
      expect(tc.data.message.content[0].isError).toBe(true)
      expect(tc.data.message.id).toBe(`interrupted-tool-result-call-1-${c.length}`)
      expect(tc.sourceEventSeqs).toBeUndefined()
      expect(tc.data.message.content[0].content[0].text).toBe(
        "Error: the session was interrupted before this tool call started; it did not run and may be retried."
      )
      // (d)
      const d = full.slice(0, at("TC(call-1)") + 1)
      const rd = repairClosers(d)
      const td = rd[0]! as any
      expect(td.data.error).toEqual({ name: "ToolOutcomeUnknownError", code: "TOOL_OUTCOME_UNKNOWN" })
      expect(td.sourceEventSeqs).toEqual([at("TC(call-1)")])
      expect(td.data.message.content[0].content[0].text).toBe(
        "Error: the session was interrupted while this tool call was running; its outcome is unknown. Check the current state before retrying anything with side effects."
      )
      expect(checkLog([...d, ...rd], { closed: true })).toEqual([])
      // (f)
      expect(repairClosers([])).toEqual([])
      expect(repairClosers([...d, ...rd])).toEqual([])
    }))

  it.scoped("P42 (e): answered calls and calls of closed steps get nothing", () =>
    Effect.gen(function*() {
      const { run } = yield* withStore
      const quick = Tool.make("quick", { description: "ok", parameters: empty, execute: () => Effect.succeed("ok") })
      const full = yield* run(
        [
          ScriptedModel.response({ toolCalls: [{ id: "c1", name: "quick", arguments: {} }, { id: "c2", name: "slow", arguments: {} }] })
        ],
        Effect.gen(function*() {
          const driver = yield* Driver
          yield* driver.followup(user("A"))
          yield* untilEvent((e) => e.type === "tool/call" && (e.data as any).callId === "c2")
          return yield* events
        }),
        { tools: [quick, hangingTool] }
      )
      const closers = repairClosers(full)
      expect(closers.map(notation)).toEqual(["TR?(c2)", "SE(1,1)", "TE(1,interrupted)"])
    }))

  it.scoped("P42: resuming (d) commits the closers, then ES; the next turn is 2 and its request ends with the synthetic result", () =>
    Effect.gen(function*() {
      const { run, store } = yield* withStore
      const full = yield* run([ScriptedModel.response({ toolCalls: [{ id: "call-1", name: "slow", arguments: {} }] })], openToolLog, {
        tools: [hangingTool]
      })
      const d = full.slice(0, full.findIndex((e) => notation(e) === "TC(call-1)") + 1)
      yield* store.create(header("crashed"), d)
      yield* run(
        [ScriptedModel.text("after")],
        Effect.gen(function*() {
          const log = yield* SessionLog
          const driver = yield* Driver
          const opened = (yield* log.events).map(notation).slice(d.length)
          expect(opened).toEqual(["TR?(call-1)", "SE(1,1)", "TE(1,interrupted)", "ES"])
          expect(yield* log.durableSeq).toBe(d.length + 3)
          expect(log.firstLiveSeq).toBe(d.length)
          expect(checkLog(yield* log.events, { closed: true })).toEqual([])
          yield* driver.followup(user("B"))
          yield* driver.whenIdle
          expect((yield* events).filter((e) => e.type === "turn/start").map((e) => (e.data as any).turn)).toEqual([1, 2])
          const req = (yield* requests)[0]!
          expect(req.messages.map(token).slice(-2)).toEqual(["tool-result call-1", "B"])
        }),
        { sessionId: "crashed", resume: true }
      )
    }))
})

describe("P43 fork", () => {
  it.scoped("P43 (a): an empty source forks to [ES] with seedLength 0", () =>
    Effect.gen(function*() {
      const { store } = yield* withStore
      yield* store.create(header("empty"), [])
      const child = yield* forkSession({ source: sid("empty"), childId: sid("child") }).pipe(Effect.provideService(SessionStore, store))
      expect(child).toBe("child")
      const loaded = yield* store.load(child)
      expect(loaded.events.map(notation)).toEqual(["ES"])
      expect(loaded.header.seedLength).toBe(0)
      expect(loaded.header.parent).toEqual({ sessionId: "empty", boundary: -1 })
    }))

  it.scoped("P43 (b, d): a default fork copies the prefix and ES; the child inbox is empty; an agent on it opens turn 2 with RH(resume)", () =>
    Effect.gen(function*() {
      const { store, run } = yield* withStore
      const source = yield* run(
        [ScriptedModel.text("one")],
        Effect.gen(function*() {
          const driver = yield* Driver
          yield* driver.followup(user("A"))
          yield* driver.whenIdle
          yield* driver.inject(plugin("C"))
          return yield* events
        })
      )
      const childId = yield* forkSession({ source: sid("s") }).pipe(Effect.provideService(SessionStore, store))
      expect(childId).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/)
      const child = yield* store.load(childId)
      expect(child.events.slice(0, source.length)).toEqual(source)
      expect(child.events.map(notation).slice(source.length)).toEqual(["ES"])
      expect(child.header.seedLength).toBe(source.length)
      expect(child.header.parent).toEqual({ sessionId: "s", boundary: source.length - 1 })
      yield* run(
        [ScriptedModel.text("two")],
        Effect.gen(function*() {
          const inbox = yield* Inbox
          const driver = yield* Driver
          expect(yield* inbox.nextStep).toEqual([])
          expect(Option.isSome(yield* inbox.idState("C" as UserMessage["id"]))).toBe(true)
          yield* driver.followup(user("B"))
          yield* driver.whenIdle
          const after = (yield* shape).slice(source.length + 1)
          expect(after.slice(0, 6)).toEqual(["INS(nt,0,[B])", "TS(2)", "CLM(nt,0,1)", "SS(2,1)", "UM(B)", "RH(resume)"])
        }),
        { sessionId: childId, resume: true }
      )
      yield* run([], Effect.flatMap(Inbox, (inbox) => Effect.map(inbox.nextStep, (ns) => expect(ns.map((m) => m.id)).toEqual(["C"]))), {
        resume: true
      })
    }))

  it.scoped("P43 (c): boundaries inside an open turn, invalid boundaries, unknown source and existing child", () =>
    Effect.gen(function*() {
      const { store, run } = yield* withStore
      const source = yield* run(
        [ScriptedModel.text("one"), ScriptedModel.response({ toolCalls: [{ id: "c1", name: "slow", arguments: {} }] })],
        Effect.gen(function*() {
          const driver = yield* Driver
          yield* driver.followup(user("A"))
          yield* driver.whenIdle
          yield* driver.followup(user("B"))
          yield* untilEvent((e) => e.type === "tool/call")
          yield* (yield* SessionLog).flush
          return yield* events
        }),
        { tools: [hangingTool] }
      )
      const fork = (options: { boundary?: number; childId?: string }) =>
        forkSession({
          source: sid("s"),
          ...(options.boundary !== undefined ? { boundary: options.boundary } : {}),
          ...(options.childId !== undefined ? { childId: sid(options.childId) } : {})
        }).pipe(Effect.provideService(SessionStore, store))
      // The disposal of the source closed turn 2 (aborted); the stored prefix is cut where it was open.
      const stored = (yield* store.load(sid("s"))).events
      const at = (n: string) => stored.findIndex((e) => notation(e) === n)
      const te1 = at("TE(1,completed)")
      const okChild = yield* fork({ boundary: te1 })
      expect((yield* store.load(okChild)).events.length).toBe(te1 + 2)
      const openStore = yield* Layer.build(SessionStore.layerMemory)
      const open = Context.get(openStore, SessionStore)
      yield* open.create(header("s"), source)
      const forkOpen = (boundary?: number, childId?: string) =>
        Effect.flip(forkSession({
          source: sid("s"),
          ...(boundary !== undefined ? { boundary } : {}),
          ...(childId !== undefined ? { childId: sid(childId) } : {})
        }).pipe(Effect.provideService(SessionStore, open)))
      const atOpen = (n: string) => source.findIndex((e) => notation(e) === n)
      for (const boundary of [undefined, atOpen("TS(2)"), atOpen("SS(2,1)"), atOpen("UM(B)"), atOpen("AM"), atOpen("TC(c1)")]) {
        const error = yield* forkOpen(boundary)
        expect(error, String(boundary)).toBeInstanceOf(ForkError)
        expect(error).toMatchObject({ reason: "open-turn" })
      }
      for (const boundary of [-1, 0.5, source.length]) {
        expect(yield* forkOpen(boundary)).toMatchObject({ _tag: "ForkError", reason: "invalid-boundary" })
      }
      expect(yield* Effect.flip(forkSession({ source: sid("nope") }).pipe(Effect.provideService(SessionStore, open)))).toBeInstanceOf(SessionNotFound)
      yield* open.create(header("taken"), [])
      expect(yield* forkOpen(-1, "taken")).toMatchObject({ _tag: "ForkError", reason: "child-exists" })
      void fork
    }))

  it.scoped("6.6/6.8: a fork validates its source: another format version fails UnsupportedLogVersion, a malformed log MalformedLog", () =>
    Effect.gen(function*() {
      const { store } = yield* withStore
      yield* store.create({ formatVersion: 2 as 1, sessionId: sid("v2"), createdAt: 0, seedLength: 0 }, [])
      yield* store.create(header("bad"), withSeqs([
        ev("turn/start", { turn: 1 }),
        ev("turn/end", { turn: 1, reason: { kind: "completed" } })
      ]))
      const fork = (source: string) => Effect.flip(forkSession({ source: sid(source) }).pipe(Effect.provideService(SessionStore, store)))
      expect(yield* fork("v2")).toMatchObject({ _tag: "UnsupportedLogVersion", found: 2, supported: 1 })
      expect(yield* fork("bad")).toBeInstanceOf(MalformedLog)
    }))

  it.scoped("P43 (e): boundaries after completed, blocked, aborted, error and interrupted turns are accepted", () =>
    Effect.gen(function*() {
      const { store, run } = yield* withStore
      yield* run(
        [ScriptedModel.text("one"), ScriptedModel.fail({ message: "x", code: "AUTH" }), ScriptedModel.hang({ text: "h" })],
        Effect.gen(function*() {
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
          yield* driver.whenIdle
          yield* driver.followup(user("E"))
          yield* untilEvent((e) => e.type === "turn/start" && (e.data as any).turn === 5)
          yield* (yield* SessionLog).flush
        })
      )
      // Simulate the crash of turn 5 by repairing a copy whose turn 5 is still open.
      const stored = (yield* store.load(sid("s"))).events
      const te4 = stored.findIndex((e) => e.type === "turn/end" && (e.data as any).turn === 4)
      const cut = stored.slice(0, stored.findIndex((e) => e.type === "turn/start" && (e.data as any).turn === 5) + 2)
      const repaired = [...cut, ...repairClosers(cut)]
      yield* store.create(header("rep"), repaired)
      const kinds: Array<string> = []
      for (const [src, es] of [["s", stored.slice(0, te4 + 1)], ["rep", repaired]] as const) {
        for (const e of es) {
          if (e.type !== "turn/end") continue
          kinds.push((e.data as any).reason.kind)
          const child = yield* forkSession({ source: sid(src), boundary: e.seq }).pipe(Effect.provideService(SessionStore, store))
          expect((yield* store.load(child)).header.seedLength).toBe(e.seq + 1)
        }
      }
      expect(new Set(kinds)).toEqual(new Set(["completed", "blocked", "error", "aborted", "interrupted"]))
    }))
})

describe("P44 surface replacement", () => {
  it.scoped("P44: a replacement user/message takes X's place; invalid ranges and known ids are rejected with no change", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const log = yield* SessionLog
      const X = user("X")
      yield* driver.followup(X)
      yield* driver.whenIdle
      const s = (yield* events).find((e) => e.type === "user/message")!.seq
      const before = yield* events
      const S = user("S", "summary")
      const reject = (input: Parameters<typeof log.append>[0]) => Effect.flip(log.append(input))
      const am = before.find((e) => e.type === "assistant/message")!.seq
      // Not on the surface; start after end; citation missing s.
      expect(yield* reject({ type: "user/message", data: S, surfaceOp: { op: "replace", start: 0, end: 0 }, sourceEventSeqs: [0] })).toBeInstanceOf(InvalidEvent)
      expect(yield* reject({ type: "user/message", data: S, surfaceOp: { op: "replace", start: am, end: s }, sourceEventSeqs: [s, am] })).toBeInstanceOf(InvalidEvent)
      expect(yield* reject({ type: "user/message", data: S, surfaceOp: { op: "replace", start: s, end: s }, sourceEventSeqs: [0] })).toBeInstanceOf(InvalidEvent)
      expect(yield* reject({ type: "user/message", data: S, surfaceOp: "append" })).toBeInstanceOf(InvalidEvent)
      expect(yield* reject({ type: "user/message", data: user("X", "again"), surfaceOp: { op: "replace", start: s, end: s }, sourceEventSeqs: [s] })).toBeInstanceOf(DuplicateMessage)
      expect(yield* events).toEqual(before)
      const appended = yield* log.append({ type: "user/message", data: S, surfaceOp: { op: "replace", start: s, end: s }, sourceEventSeqs: [s] })
      expect(appended.seq).toBe(before.length)
      expect((yield* log.messages).map(token)).toEqual(["summary", "ok"])
      expect((yield* events).some((e) => e.seq === s && e.type === "user/message")).toBe(true)
      const surface = yield* log.surface
      expect(surface).toContain(appended.seq)
      expect(surface).not.toContain(s)
      expect(surface[0]).toBe(appended.seq)
      expect(yield* log.durableSeq).toBe(appended.seq)
      expect(deriveMessages(yield* events)).toEqual(yield* log.messages)
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario([ScriptedModel.text("ok")]))))

  const quick = Tool.make("quick", { description: "ok", parameters: empty, execute: () => Effect.succeed("ok") })
  it.scoped("P44: a range holding an AM with a tool call but not its TR is rejected", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const log = yield* SessionLog
      yield* driver.followup(user("X"))
      yield* driver.whenIdle
      const es = yield* events
      const um = es.find((e) => e.type === "user/message")!.seq
      const am = es.find((e) => e.type === "assistant/message")!.seq
      const error = yield* Effect.flip(
        log.append({ type: "user/message", data: user("S"), surfaceOp: { op: "replace", start: um, end: am }, sourceEventSeqs: [um, am] })
      )
      expect(error).toBeInstanceOf(InvalidEvent)
      expect(yield* events).toEqual(es)
    }).pipe(Effect.provide(scenario(
      [ScriptedModel.response({ toolCalls: [{ id: "c1", name: "quick", arguments: {} }] }), ScriptedModel.text("done")],
      { tools: [quick] }
    ))))
})

describe("P45 relational checker", () => {
  const A = user("A")
  const ins = ev("agent/inbox/spliced", { target: "next-turn", start: 0, inserted: [A] })
  const clm = ev("agent/inbox/spliced", { target: "next-turn", start: 0, removedCount: 1, inserted: [] })
  const ts = (turn: number) => ev("turn/start", { turn })
  const te = (turn: number, kind = "completed") => ev("turn/end", { turn, reason: { kind } })
  const ss = (turn: number, step: number) => ev("step/start", { turn, step })
  const se = (turn: number, step: number) => ev("step/end", { turn, step })
  const um = (m: UserMessage) => ev("user/message", m, { surfaceOp: "append" })
  const rh = ev("request/header", { header: { provider: "p", model: "m", tools: [] }, reason: "initial" })
  const ch = (chunk: unknown, turn = 1, step = 1) => ev("assistant/chunk", { turn, step, attempt: 1, chunk })
  const rules = (es: ReadonlyArray<SessionEvent>, options?: { readonly closed?: boolean }) =>
    [...new Set(checkLog(withSeqs(es), options).map((v) => v.rule))]
  const opened = [ins, ts(1), clm]

  it("P45: checkLog reports R1, R2, R3, R5, R7, R8, R16 and R19", () => {
    expect(rules([...opened, ts(2)])).toContain("R1")
    expect(rules([...opened, te(1), ts(3)])).toContain("R1")
    expect(rules([...opened, te(2)])).toContain("R2")
    expect(rules([...opened, ss(1, 1), um(A), te(1)])).toContain("R2")
    expect(rules([...opened, ss(2, 1)])).toContain("R3")
    expect(rules([...opened, ss(1, 1), um(A), ss(1, 2)])).toContain("R3")
    expect(rules([...opened, ss(1, 1), um(A), se(1, 1), ss(1, 3)])).toContain("R3")
    expect(rules([ch({ type: "block-start", index: 0, block: "text" })])).toContain("R5")
    expect(rules([rh])).toContain("R5")
    expect(rules([ins, ts(1)])).toEqual([])
    expect(rules([ins, ts(1), ss(1, 1)])).toContain("R7")
    expect(rules([...opened, ss(1, 1), rh, ch({ type: "block-start", index: 0, block: "text" }), um(A)])).toContain("R8")
    const maxTokens = [
      ...opened, ss(1, 1), um(A), rh, ch({ type: "finish", finish: { kind: "max-tokens" } }),
      ev("assistant/message", { turn: 1, step: 1, attempt: 1, message: { id: "m1", role: "assistant", content: [], source: { kind: "model", provider: "p", model: "m" } } }, { surfaceOp: "append", sourceEventSeqs: [6] }),
      se(1, 1)
    ]
    expect(rules(maxTokens)).toEqual([])
    expect(rules([...maxTokens, te(1, "completed")])).toContain("R16")
    expect(rules([...maxTokens, te(1, "max-tokens")], { closed: true })).toEqual([])
    expect(rules(opened, { closed: true })).toContain("R19")
  })

  const quick = Tool.make("quick", { description: "ok", parameters: empty, execute: () => Effect.succeed("ok") })
  it.scoped("P45: R13 and R15 on a real tool log; accepted extension events, replacement UMs, ES and TOOL_NOT_STARTED results", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("X"))
      yield* driver.whenIdle
      const es = yield* events
      expect(checkLog(es, { closed: true })).toEqual([])
      const tr = es.findIndex((e) => e.type === "tool/result")
      // SE with an unanswered call.
      expect(rules([...es.slice(0, tr), ...es.slice(tr + 1)])).toContain("R15")
      // A result answering no call of its step.
      const trEvent = es[tr]! as any
      const stray = { ...trEvent, data: { ...trEvent.data, message: { ...trEvent.data.message, id: "other", content: [{ ...trEvent.data.message.content[0], toolCallId: "zz" }], source: { kind: "tool", callId: "zz" } } } }
      expect(rules([...es.slice(0, tr + 1), stray])).toContain("R13")
      // A result for a call of an earlier step (step 2 of turn 1).
      const ss2 = es.findIndex((e) => e.type === "step/start" && (e.data as any).step === 2)
      const late = { ...trEvent, data: { ...trEvent.data, step: 2, message: { ...trEvent.data.message, id: "late" } } }
      expect(rules([...es.slice(0, ss2 + 1), late])).toContain("R13")
      // Accepted: extension events (ignorable), replacement UMs outside turns, ES anywhere, repair results.
      const firstUm = es.find((e) => e.type === "user/message")!.seq
      const extended = [
        ...es,
        ev("x/note", { a: 1 }, { ignorable: true }),
        ev("user/message", user("S"), { surfaceOp: { op: "replace", start: firstUm, end: firstUm }, sourceEventSeqs: [firstUm] }),
        ev("session/end-seed", {})
      ]
      expect(checkLog(withSeqs(extended), { closed: true })).toEqual([])
      const am = es.findIndex((e) => e.type === "assistant/message")
      const cut = es.slice(0, am + 1)
      expect(checkLog([...cut, ...repairClosers(cut)], { closed: true })).toEqual([])
    }).pipe(Effect.provide(scenario(
      [ScriptedModel.response({ toolCalls: [{ id: "c1", name: "quick", arguments: {} }] }), ScriptedModel.text("done")],
      { tools: [quick] }
    ))))

  it.scoped("P45: live compaction/start {turn: 1} while idle fails InvalidEvent {rule: R6} and changes nothing", () =>
    Effect.gen(function*() {
      const log = yield* SessionLog
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      const before = yield* events
      const error = yield* Effect.flip(log.append({ type: "compaction/start", data: { turn: 1 } }))
      expect(error).toBeInstanceOf(InvalidEvent)
      expect(error).toMatchObject({ rule: "R6" })
      expect(yield* events).toEqual(before)
    }).pipe(Effect.provide(scenario([ScriptedModel.text("ok")]))))

  it.scoped("P45: opening a stored log that violates a rule fails MalformedLog", () =>
    Effect.gen(function*() {
      const { store, storeCtx } = yield* withStore
      yield* store.create(header("bad"), withSeqs([ins, ts(1), ss(1, 1)]))
      const exit = yield* Effect.exit(Layer.build(agentOver([], { sessionId: "bad", resume: true }).pipe(Layer.provide(Layer.succeedContext(storeCtx)))))
      expect(Exit.isFailure(exit) && Option.getOrUndefined(Cause.failureOption(exit.cause))).toBeInstanceOf(MalformedLog)
    }))
})

describe("8.5 SessionLog.append refusals", () => {
  // SPEC 8.5: "`append` is for extension events: it refuses (`InvalidEvent {reason: "reserved"}`) every core type
  // except `compaction/*`, `user/message` with a replace `surfaceOp`, and `tool/result` with a replace `surfaceOp`"
  it.scoped("8.5: SessionLog.append of a reserved core type fails InvalidEvent with reason \"reserved\"", () =>
    Effect.gen(function*() {
      const log = yield* SessionLog
      const refusals = [
        { type: "user/message", data: user("S"), surfaceOp: "append" as const },
        { type: "turn/start", data: { turn: 1 } },
        { type: "session/end-seed", data: {} }
      ]
      for (const input of refusals) {
        const error = yield* Effect.flip(log.append(input))
        expect(error, input.type).toBeInstanceOf(InvalidEvent)
        expect(error, input.type).toMatchObject({ reason: "reserved" })
      }
      expect(yield* events).toEqual([])
    }).pipe(Effect.provide(scenario([]))))
})