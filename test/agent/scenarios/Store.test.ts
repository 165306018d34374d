/**
 * SPEC 9 scenarios P42-P45 over both stores: crash repair, fork, surface replacement, the relational
 * checker; and SessionLog.append refusals.
 */
import { describe, expect, it } from "@effect/vitest"
import { Cause, Effect, Exit, Layer, Option, TestClock } from "effect"
import {
  CancelCause,
  checkLog,
  deriveMessages,
  Driver,
  DuplicateMessage,
  ForkError,
  forkSession,
  Inbox,
  InvalidEvent,
  MalformedLog,
  PreStep,
  PreStepDecision,
  repairClosers,
  ScriptedModel,
  SessionLog,
  SessionNotFound,
  SessionStore,
  Tool
} from "../../../src/index.js"
import type { ScriptEntry, SessionEvent } from "../../../src/index.js"
import {
  closeOut,
  dataOfType,
  events,
  notation,
  plugin,
  requests,
  scenario,
  shape,
  token,
  untilEvent,
  user
} from "../harness.js"
import { ev } from "../stores.js"
import { empty, header, ids, json, sid, stores, storeTest } from "./bothStores.js"

const hangingTool = Tool.make("slow", { description: "never ends", parameters: empty, execute: () => Effect.never })
const quick = Tool.make("quick", { description: "ok", parameters: empty, execute: () => Effect.succeed("ok") })
const withSeqs = (es: ReadonlyArray<SessionEvent>) => es.map((e, seq) => ({ ...e, seq }) as SessionEvent)

/** The log of a memory agent that ran `program` (left open when its scope closes: the agent is disposed, not the log captured). */
const capture = (script: ReadonlyArray<ScriptEntry>, program: Effect.Effect<unknown, unknown, Driver | SessionLog>) =>
  Effect.gen(function*() {
    yield* program
    return yield* events
  }).pipe(Effect.provide(scenario(script, { tools: [quick, hangingTool] })), Effect.scoped)

/** A session whose single tool call never finishes, captured right after its `tool/call`. */
const openToolLog = capture(
  [ScriptedModel.response({ toolCalls: [{ id: "call-1", name: "slow", arguments: {} }] })],
  Effect.gen(function*() {
    yield* TestClock.adjust("5 seconds")
    yield* (yield* Driver).followup(user("A"))
    yield* untilEvent((e) => e.type === "tool/call")
  })
)

const fork = (store: SessionStore["Type"], input: Parameters<typeof forkSession>[0]) =>
  forkSession(input).pipe(Effect.provideService(SessionStore, store))

describe("P42 crash repair", () => {
  it.scoped("P42 (a-f): repairClosers of open turns, open steps and balanced logs", () =>
    Effect.gen(function*() {
      const full = yield* openToolLog
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
      expect(rd.map(notation)).toEqual(["TR?(call-1)", "SE(1,1)", "TE(1,interrupted)"])
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
      const full = yield* capture(
        [ScriptedModel.response({
          toolCalls: [{ id: "c1", name: "quick", arguments: {} }, { id: "c2", name: "slow", arguments: {} }]
        })],
        Effect.gen(function*() {
          yield* (yield* Driver).followup(user("A"))
          yield* untilEvent((e) => e.type === "tool/call" && (e.data as any).callId === "c2")
        })
      )
      expect(repairClosers(full).map(notation)).toEqual(["TR?(c2)", "SE(1,1)", "TE(1,interrupted)"])
    }))
})

describe.each(stores)("P42-P45 over the $name store", ({ open: openStore }) => {
  it.scoped("P42: resuming a crashed log (d) commits the closers, then ES; the next turn is 2 and its request ends with the synthetic result", () =>
    Effect.gen(function*() {
      const store = yield* openStore
      const full = yield* openToolLog
      const d = full.slice(0, full.findIndex((e) => notation(e) === "TC(call-1)") + 1)
      yield* store.use((s) => s.create(header("crashed"), d))
      expect(yield* store.rows("crashed")).toEqual(json(d))
      yield* store.run(
        [ScriptedModel.text("after")],
        Effect.gen(function*() {
          const log = yield* SessionLog
          const driver = yield* Driver
          const opened = yield* log.events
          expect(opened.map(notation).slice(d.length)).toEqual(["TR?(call-1)", "SE(1,1)", "TE(1,interrupted)", "ES"])
          const tr = opened[d.length] as any
          expect(tr.data.error).toEqual({ name: "ToolOutcomeUnknownError", code: "TOOL_OUTCOME_UNKNOWN" })
          expect(tr.sourceEventSeqs).toEqual([d.length - 1])
          expect(opened.slice(d.length, d.length + 3).map((e) => e.seq)).toEqual([d.length, d.length + 1, d.length + 2])
          expect(opened.slice(d.length, d.length + 3).every((e) => e.time === d[d.length - 1]!.time)).toBe(true)
          expect(yield* log.durableSeq).toBe(d.length + 3)
          expect(log.firstLiveSeq).toBe(d.length)
          // The closers and ES are committed before the agent is handed out.
          expect((yield* store.rows("crashed")).map(notation).slice(d.length)).toEqual([
            "TR?(call-1)",
            "SE(1,1)",
            "TE(1,interrupted)",
            "ES"
          ])
          expect(checkLog(opened, { closed: true })).toEqual([])
          yield* driver.followup(user("B"))
          yield* driver.whenIdle
          expect((yield* dataOfType("turn/start")).map((x) => x.turn)).toEqual([1, 2])
          expect((yield* requests)[0]!.messages.map(token).slice(-2)).toEqual(["tool-result call-1", "B"])
        }),
        { sessionId: "crashed", resume: true }
      )
    }))

  it.scoped("P42 (a, b): open turns are closed on resume with TE(interrupted) (and SE), then ES, all committed", () =>
    Effect.gen(function*() {
      const store = yield* openStore
      const A = user("A")
      const ins = {
        type: "agent/inbox/spliced",
        seq: 0,
        time: 7,
        data: { target: "next-turn", start: 0, inserted: [A] }
      }
      const ts = { type: "turn/start", seq: 1, time: 8, data: { turn: 1 } }
      const clm = {
        type: "agent/inbox/spliced",
        seq: 2,
        time: 9,
        data: { target: "next-turn", start: 0, removedCount: 1, inserted: [] }
      }
      const ss = { type: "step/start", seq: 3, time: 10, data: { turn: 1, step: 1 } }
      const um = { type: "user/message", seq: 4, time: 11, data: A, surfaceOp: "append" }
      const a = [ins, ts, clm] as unknown as ReadonlyArray<SessionEvent>
      const b = [ins, ts, clm, ss, um] as unknown as ReadonlyArray<SessionEvent>
      yield* store.use((s) => Effect.zipRight(s.create(header("a"), a), s.create(header("b"), b)))
      for (
        const [session, log, closers] of [["a", a, ["TE(1,interrupted)"]], ["b", b, [
          "SE(1,1)",
          "TE(1,interrupted)"
        ]]] as const
      ) {
        yield* store.run(
          [],
          Effect.gen(function*() {
            const es = yield* events
            expect(es.map(notation).slice(log.length)).toEqual([...closers, "ES"])
            expect(es.slice(log.length, log.length + closers.length).map((e) => [e.seq, e.time])).toEqual(
              closers.map((_, i) => [log.length + i, log[log.length - 1]!.time])
            )
            expect(yield* store.rows(session)).toEqual(json(es))
          }),
          { sessionId: session, resume: true }
        )
      }
    }))

  it.scoped("P43 (a, b, d): an empty source forks to [ES]; a default fork copies the prefix and ES; an agent on the child opens turn 2 with RH(resume)", () =>
    Effect.gen(function*() {
      const store = yield* openStore
      const source = yield* store.run(
        [ScriptedModel.text("one")],
        Effect.gen(function*() {
          const driver = yield* Driver
          yield* driver.followup(user("A"))
          yield* driver.whenIdle
          yield* driver.inject(plugin("C"))
          yield* (yield* SessionLog).flush
          return yield* events
        })
      )
      expect(yield* store.rows()).toEqual(json(source))
      const childId = yield* store.use((s) =>
        Effect.gen(function*() {
          yield* s.create(header("empty"), [])
          expect(yield* fork(s, { source: sid("empty"), childId: sid("child0") })).toBe("child0")
          return yield* fork(s, { source: sid("s") })
        })
      )
      expect(childId).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/)
      // Read back on a store opened afresh (SQLite: a new store on the file).
      const reopened = yield* store.use((s) =>
        Effect.all([s.load(sid("child0")), s.load(childId), s.load(sid("nope")).pipe(Effect.flip)])
      )
      expect(reopened[0].events.map(notation)).toEqual(["ES"])
      expect(reopened[0].header).toMatchObject({ seedLength: 0, parent: { sessionId: "empty", boundary: -1 } })
      expect((yield* store.rows("child0")).map(notation)).toEqual(["ES"])
      const child = reopened[1]
      expect(child.events.slice(0, source.length)).toEqual(source)
      expect(child.events.map(notation).slice(source.length)).toEqual(["ES"])
      expect(child.header).toMatchObject({
        seedLength: source.length,
        parent: { sessionId: "s", boundary: source.length - 1 }
      })
      expect(yield* store.rows(childId)).toEqual(json(child.events))
      expect(reopened[2]).toBeInstanceOf(SessionNotFound)
      // (d) An agent on the child: the child's inbox is empty, though it knows C.
      yield* store.run(
        [ScriptedModel.text("two")],
        Effect.gen(function*() {
          const inbox = yield* Inbox
          const driver = yield* Driver
          expect(yield* inbox.nextStep).toEqual([])
          expect(Option.isSome(yield* inbox.idState(plugin("C").id))).toBe(true)
          yield* driver.followup(user("B"))
          yield* driver.whenIdle
          expect((yield* shape).slice(source.length + 1, source.length + 7)).toEqual(
            ["INS(nt,0,[B])", "TS(2)", "CLM(nt,0,1)", "SS(2,1)", "UM(B)", "RH(resume)"]
          )
        }),
        { sessionId: childId, resume: true }
      )
      // The source keeps its pending [C].
      yield* store.run(
        [],
        Effect.map(Effect.flatMap(Inbox, (inbox) => inbox.nextStep), (ns) => expect(ids(ns)).toEqual(["C"])),
        { resume: true }
      )
    }))

  it.scoped("P43 (c): boundaries inside an open turn, invalid boundaries, unknown source and existing child", () =>
    Effect.gen(function*() {
      const store = yield* openStore
      const source = yield* capture(
        [ScriptedModel.text("one"), ScriptedModel.response({ toolCalls: [{ id: "c1", name: "slow", arguments: {} }] })],
        Effect.gen(function*() {
          const driver = yield* Driver
          yield* driver.followup(user("A"))
          yield* driver.whenIdle
          yield* driver.followup(user("B"))
          yield* untilEvent((e) => e.type === "tool/call")
          yield* (yield* SessionLog).flush
        })
      )
      const at = (n: string) => source.findIndex((e) => notation(e) === n)
      const te1 = at("TE(1,completed)")
      yield* store.use((s) =>
        Effect.gen(function*() {
          yield* s.create(header("src"), source)
          yield* s.create(header("taken"), [])
          const forkSrc = (boundary?: number, childId?: string) =>
            Effect.flip(fork(s, {
              source: sid("src"),
              ...(boundary !== undefined ? { boundary } : {}),
              ...(childId !== undefined ? { childId: sid(childId) } : {})
            }))
          for (const boundary of [undefined, at("TS(2)"), at("SS(2,1)"), at("UM(B)"), at("AM"), at("TC(c1)")]) {
            const error = yield* forkSrc(boundary)
            expect(error, String(boundary)).toBeInstanceOf(ForkError)
            expect(error, String(boundary)).toMatchObject({ reason: "open-turn" })
          }
          for (const boundary of [-1, 0.5, source.length]) {
            expect(yield* forkSrc(boundary), String(boundary)).toMatchObject({
              _tag: "ForkError",
              reason: "invalid-boundary"
            })
          }
          expect(yield* forkSrc(-1, "taken")).toMatchObject({ _tag: "ForkError", reason: "child-exists" })
          expect(yield* forkSrc(0.5, "taken")).toMatchObject({ _tag: "ForkError", reason: "child-exists" })
          expect(yield* Effect.flip(fork(s, { source: sid("nope") }))).toBeInstanceOf(SessionNotFound)
          expect(yield* fork(s, { source: sid("src"), boundary: te1, childId: sid("ok") })).toBe("ok")
        })
      )
      const rows = yield* store.rows("ok")
      expect(rows).toHaveLength(te1 + 2)
      expect(rows.map(notation)).toEqual([...source.slice(0, te1 + 1).map(notation), "ES"])
      expect(rows.slice(0, -1)).toEqual(json(source.slice(0, te1 + 1)))
      expect(yield* store.sessions).toEqual(["ok", "src", "taken"])
    }))

  it.scoped("6.6/6.8: a fork validates its source: another format version fails UnsupportedLogVersion, a malformed log MalformedLog", () =>
    Effect.gen(function*() {
      const store = yield* openStore
      yield* store.use((s) =>
        Effect.gen(function*() {
          yield* s.create({ ...header("v2"), formatVersion: 2 as 1 }, [])
          yield* s.create(
            header("bad"),
            withSeqs([ev(0, "turn/start", { turn: 1 }), ev(0, "turn/end", { turn: 1, reason: { kind: "completed" } })])
          )
          expect(yield* Effect.flip(fork(s, { source: sid("v2") }))).toMatchObject({
            _tag: "UnsupportedLogVersion",
            found: 2,
            supported: 1
          })
          expect(yield* Effect.flip(fork(s, { source: sid("bad") }))).toBeInstanceOf(MalformedLog)
        })
      )
    }))

  it.scoped("P43 (e): boundaries after completed, blocked, aborted, error and interrupted turns are accepted", () =>
    Effect.gen(function*() {
      const store = yield* openStore
      yield* Effect.gen(function*() {
        const driver = yield* Driver
        const preStep = yield* PreStep
        yield* preStep.register((input, next) =>
          input.turn === 2 ? Effect.succeed(PreStepDecision.reject("no")) : next()
        )
        for (const id of ["A", "B", "C"]) {
          yield* driver.followup(user(id))
          yield* driver.whenIdle
        }
        yield* driver.followup(user("D"))
        yield* untilEvent((e) => e.type === "assistant/chunk" && (e.data as any).turn === 4)
        yield* driver.cancel(CancelCause.user)
        yield* driver.whenIdle
        expect(checkLog(yield* events, { closed: true })).toEqual([])
        yield* driver.followup(user("E"))
        yield* untilEvent((e) => e.type === "turn/start" && (e.data as any).turn === 5)
        yield* (yield* SessionLog).flush
      }).pipe(
        Effect.provide(
          store.agent([
            ScriptedModel.text("one"),
            ScriptedModel.fail({ message: "x", code: "AUTH" }),
            ScriptedModel.hang({ text: "h" })
          ])
        ),
        Effect.scoped
      )
      // Simulate the crash of turn 5 by repairing a copy whose turn 5 is still open.
      const stored = yield* store.rows()
      const te4 = stored.findIndex((e) => e.type === "turn/end" && (e.data as any).turn === 4)
      const cut = stored.slice(0, stored.findIndex((e) => e.type === "turn/start" && (e.data as any).turn === 5) + 2)
      const repaired = [...cut, ...repairClosers(cut)]
      const ends = (es: ReadonlyArray<SessionEvent>) => es.filter((e) => e.type === "turn/end")
      expect(ends(stored.slice(0, te4 + 1)).map((e) => (e.data as any).reason.kind)).toEqual([
        "completed",
        "blocked",
        "error",
        "aborted"
      ])
      yield* store.use((s) => s.create(header("rep"), repaired))
      const kinds: Array<string> = []
      for (const [src, es] of [["s", stored.slice(0, te4 + 1)], ["rep", repaired]] as const) {
        for (const e of ends(es)) {
          kinds.push((e.data as any).reason.kind)
          const child = yield* store.use((s) =>
            Effect.flatMap(
              fork(s, { source: sid(src), boundary: e.seq }),
              (child) => Effect.map(s.load(child), (loaded) => ({ child, loaded }))
            )
          )
          expect(child.loaded.header.seedLength).toBe(e.seq + 1)
          expect((yield* store.rows(child.child)).map(notation)).toEqual([
            ...es.slice(0, e.seq + 1).map(notation),
            "ES"
          ])
        }
      }
      expect(new Set(kinds)).toEqual(new Set(["completed", "blocked", "error", "aborted", "interrupted"]))
    }))

  it.scoped("P44: a replacement user/message takes X's place and is committed; rejections change nothing; the reopened log derives S where X was", () =>
    Effect.gen(function*() {
      const store = yield* openStore
      const replaced = yield* store.run(
        [ScriptedModel.text("ok")],
        Effect.gen(function*() {
          const driver = yield* Driver
          const log = yield* SessionLog
          yield* driver.followup(user("X"))
          yield* driver.whenIdle
          const before = yield* events
          const s = before.find((e) => e.type === "user/message")!.seq
          const am = before.find((e) => e.type === "assistant/message")!.seq
          const S = user("S", "summary")
          const reject = (input: Parameters<typeof log.append>[0]) => Effect.flip(log.append(input))
          // Not on the surface; start after end; citation missing s; not a replacement; a known id.
          expect(
            yield* reject({
              type: "user/message",
              data: S,
              surfaceOp: { op: "replace", start: 0, end: 0 },
              sourceEventSeqs: [0]
            })
          ).toBeInstanceOf(InvalidEvent)
          expect(
            yield* reject({
              type: "user/message",
              data: S,
              surfaceOp: { op: "replace", start: am, end: s },
              sourceEventSeqs: [s, am]
            })
          ).toBeInstanceOf(InvalidEvent)
          expect(
            yield* reject({
              type: "user/message",
              data: S,
              surfaceOp: { op: "replace", start: s, end: s },
              sourceEventSeqs: [0]
            })
          ).toBeInstanceOf(InvalidEvent)
          expect(yield* reject({ type: "user/message", data: S, surfaceOp: "append" })).toBeInstanceOf(InvalidEvent)
          expect(
            yield* reject({
              type: "user/message",
              data: user("X", "again"),
              surfaceOp: { op: "replace", start: s, end: s },
              sourceEventSeqs: [s]
            })
          ).toBeInstanceOf(DuplicateMessage)
          expect(yield* events).toEqual(before)
          yield* log.flush
          expect(yield* store.rows()).toEqual(json(before))
          const appended = yield* log.append({
            type: "user/message",
            data: S,
            surfaceOp: { op: "replace", start: s, end: s },
            sourceEventSeqs: [s]
          })
          expect(appended.seq).toBe(before.length)
          expect((yield* log.messages).map(token)).toEqual(["summary", "ok"])
          expect((yield* events).some((e) => e.seq === s && e.type === "user/message")).toBe(true)
          const surface = yield* log.surface
          expect(surface).toContain(appended.seq)
          expect(surface).not.toContain(s)
          expect(surface[0]).toBe(appended.seq)
          expect(yield* log.durableSeq).toBe(appended.seq)
          // Acknowledged ⇒ durable.
          expect((yield* store.rows()).at(-1)).toEqual(json(appended))
          expect(deriveMessages(yield* events)).toEqual(yield* log.messages)
          return { s, seq: appended.seq }
        })
      )
      expect(deriveMessages(yield* store.rows()).map(token)).toEqual(["summary", "ok"])
      yield* store.run(
        [],
        Effect.gen(function*() {
          const log = yield* SessionLog
          expect((yield* log.messages).map(token)).toEqual(["summary", "ok"])
          const surface = yield* log.surface
          expect(surface[0]).toBe(replaced.seq)
          expect(surface).not.toContain(replaced.s)
        }),
        { resume: true }
      )
    }))

  it.scoped("P44: a range holding an AM with a tool call but not its TR is rejected", () =>
    Effect.gen(function*() {
      const store = yield* openStore
      yield* store.run(
        [
          ScriptedModel.response({ toolCalls: [{ id: "c1", name: "quick", arguments: {} }] }),
          ScriptedModel.text("done")
        ],
        Effect.gen(function*() {
          const driver = yield* Driver
          const log = yield* SessionLog
          yield* driver.followup(user("X"))
          yield* driver.whenIdle
          const es = yield* events
          const um = es.find((e) => e.type === "user/message")!.seq
          const am = es.find((e) => e.type === "assistant/message")!.seq
          const error = yield* Effect.flip(
            log.append({
              type: "user/message",
              data: user("S"),
              surfaceOp: { op: "replace", start: um, end: am },
              sourceEventSeqs: [um, am]
            })
          )
          expect(error).toBeInstanceOf(InvalidEvent)
          expect(yield* events).toEqual(es)
        }),
        { tools: [quick] }
      )
    }))

  storeTest(
    openStore,
    "P45: live compaction/start {turn: 1} while idle fails InvalidEvent {rule: R6} and commits nothing",
    [ScriptedModel.text("ok")],
    () =>
      Effect.gen(function*() {
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
      })
  )

  it.scoped("P45: opening a stored log that violates a rule fails MalformedLog and leaves the store as it was", () =>
    Effect.gen(function*() {
      const store = yield* openStore
      const bad = withSeqs([
        ev(0, "agent/inbox/spliced", { target: "next-turn", start: 0, inserted: [user("A")] }),
        ev(0, "turn/start", { turn: 1 }),
        ev(0, "step/start", { turn: 1, step: 1 })
      ])
      expect(checkLog(bad).map((v) => v.rule)).toContain("R7")
      yield* store.use((s) => s.create(header("bad"), bad))
      const exit = yield* Effect.exit(Effect.scoped(Layer.build(store.agent([], { sessionId: "bad", resume: true }))))
      expect(Exit.isFailure(exit) && Option.getOrUndefined(Cause.failureOption(exit.cause))).toBeInstanceOf(
        MalformedLog
      )
      expect(yield* store.rows("bad")).toEqual(json(bad))
    }))
})

describe("P45 relational checker", () => {
  const A = user("A")
  const e = (type: string, data: unknown, extra: Record<string, unknown> = {}) => ev(0, type, data, extra)
  const ins = e("agent/inbox/spliced", { target: "next-turn", start: 0, inserted: [A] })
  const clm = e("agent/inbox/spliced", { target: "next-turn", start: 0, removedCount: 1, inserted: [] })
  const ts = (turn: number) => e("turn/start", { turn })
  const te = (turn: number, kind = "completed") => e("turn/end", { turn, reason: { kind } })
  const ss = (turn: number, step: number) => e("step/start", { turn, step })
  const se = (turn: number, step: number) => e("step/end", { turn, step })
  const um = e("user/message", A, { surfaceOp: "append" })
  const rh = e("request/header", { header: { provider: "p", model: "m", tools: [] }, reason: "initial" })
  const ch = (chunk: unknown, turn = 1, step = 1) => e("assistant/chunk", { turn, step, attempt: 1, chunk })
  const rules = (
    es: ReadonlyArray<SessionEvent>,
    options?: { readonly closed?: boolean }
  ) => [...new Set(checkLog(withSeqs(es), options).map((v) => v.rule))]
  const opened = [ins, ts(1), clm]

  it("P45: checkLog reports R1, R2, R3, R5, R7, R8, R16 and R19", () => {
    expect(rules([...opened, ts(2)])).toContain("R1")
    expect(rules([...opened, te(1), ts(3)])).toContain("R1")
    expect(rules([...opened, te(2)])).toContain("R2")
    expect(rules([...opened, ss(1, 1), um, te(1)])).toContain("R2")
    expect(rules([...opened, ss(2, 1)])).toContain("R3")
    expect(rules([...opened, ss(1, 1), um, ss(1, 2)])).toContain("R3")
    expect(rules([...opened, ss(1, 1), um, se(1, 1), ss(1, 3)])).toContain("R3")
    expect(rules([ch({ type: "block-start", index: 0, block: "text" })])).toContain("R5")
    expect(rules([rh])).toContain("R5")
    expect(rules([ins, ts(1)])).toEqual([])
    expect(rules([ins, ts(1), ss(1, 1)])).toContain("R7")
    expect(rules([...opened, ss(1, 1), rh, ch({ type: "block-start", index: 0, block: "text" }), um])).toContain("R8")
    const maxTokens = [
      ...opened,
      ss(1, 1),
      um,
      rh,
      ch({ type: "finish", finish: { kind: "max-tokens" } }),
      e("assistant/message", {
        turn: 1,
        step: 1,
        attempt: 1,
        message: { id: "m1", role: "assistant", content: [], source: { kind: "model", provider: "p", model: "m" } }
      }, { surfaceOp: "append", sourceEventSeqs: [6] }),
      se(1, 1)
    ]
    expect(rules(maxTokens)).toEqual([])
    expect(rules([...maxTokens, te(1, "completed")])).toContain("R16")
    expect(rules([...maxTokens, te(1, "max-tokens")], { closed: true })).toEqual([])
    expect(rules(opened, { closed: true })).toContain("R19")
  })

  it.scoped("P45: R13 and R15 on a real tool log; accepted extension events, replacement UMs, ES and TOOL_NOT_STARTED results", () =>
    Effect.gen(function*() {
      const es = yield* capture(
        [
          ScriptedModel.response({ toolCalls: [{ id: "c1", name: "quick", arguments: {} }] }),
          ScriptedModel.text("done")
        ],
        Effect.gen(function*() {
          yield* (yield* Driver).followup(user("X"))
          yield* (yield* Driver).whenIdle
        })
      )
      expect(checkLog(es, { closed: true })).toEqual([])
      const tr = es.findIndex((e) => e.type === "tool/result")
      // SE with an unanswered call.
      expect(rules([...es.slice(0, tr), ...es.slice(tr + 1)])).toContain("R15")
      // A result answering no call of its step.
      const trEvent = es[tr]! as any
      const stray = {
        ...trEvent,
        data: {
          ...trEvent.data,
          message: {
            ...trEvent.data.message,
            id: "other",
            content: [{ ...trEvent.data.message.content[0], toolCallId: "zz" }],
            source: { kind: "tool", callId: "zz" }
          }
        }
      }
      expect(rules([...es.slice(0, tr + 1), stray])).toContain("R13")
      // A result for a call of an earlier step (step 2 of turn 1).
      const ss2 = es.findIndex((e) => e.type === "step/start" && (e.data as any).step === 2)
      const late = { ...trEvent, data: { ...trEvent.data, step: 2, message: { ...trEvent.data.message, id: "late" } } }
      expect(rules([...es.slice(0, ss2 + 1), late])).toContain("R13")
      // Accepted: extension events (ignorable), replacement UMs outside turns, ES anywhere, repair results.
      const firstUm = es.find((e) => e.type === "user/message")!.seq
      const extended = [
        ...es,
        e("x/note", { a: 1 }, { ignorable: true }),
        e("user/message", user("S"), {
          surfaceOp: { op: "replace", start: firstUm, end: firstUm },
          sourceEventSeqs: [firstUm]
        }),
        e("session/end-seed", {})
      ]
      expect(checkLog(withSeqs(extended), { closed: true })).toEqual([])
      const am = es.findIndex((e) => e.type === "assistant/message")
      const cut = es.slice(0, am + 1)
      expect(checkLog([...cut, ...repairClosers(cut)], { closed: true })).toEqual([])
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
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario([]))))
})
