/**
 * What SessionLog accepts (SPEC 2.1, 2.4, 5.1, 8.5): lossless JSON, envelopes of extension events,
 * the invariants option, live appends that change nothing, loop appends validated like any other, and
 * a flaw in a stored log reported as MalformedLog on resume.
 */
import { describe, expect, it } from "@effect/vitest"
import { Cause, Chunk, Context, Effect, Either, Exit, Fiber, Layer, Option, Scope, Stream, TestClock } from "effect"
import {
  CancelCause,
  checkLog,
  CORE_EVENT_TYPES,
  deriveMessages,
  Driver,
  foldInbox,
  Inbox,
  InvalidEvent,
  MalformedLog,
  ScriptedModel,
  SessionLog,
  SessionStore,
  SqliteSessionStore
} from "../../src/index.js"
import type { SessionEvent } from "../../src/index.js"
import {
  agentTest,
  asId,
  events,
  notation,
  plugin,
  recordLive,
  requests,
  scenario,
  settle,
  shape,
  until,
  user
} from "../agent/harness.js"
import { buildIn, failureOf } from "../agent/stores.js"
import { ev } from "../fixtures/handLog.js"
import {
  echo,
  header,
  malformedCases,
  mutate,
  outcome,
  outcomeReason,
  richLog,
  richProgram,
  richScript,
  sid,
  withStore
} from "../fixtures/richLog.js"
import { raw, sqliteRun, tempFiles } from "../fixtures/sqliteFile.js"

const { freshFile } = tempFiles("tiller-log-validation-")

describe("§5.1 a flaw in a stored log is MalformedLog {seq} on resume (memory store)", () => {
  for (const [name, seq, f] of malformedCases) {
    it.scoped(`${name} → MalformedLog at seq ${seq}`, () =>
      Effect.gen(function*() {
        const es = yield* richLog
        const { store, run } = yield* withStore
        yield* store.create(header("bad"), mutate(es, seq, f))
        const exit = yield* Effect.exit(run([], Effect.void, { sessionId: "bad", resume: true }))
        expect(outcome(exit)).toBe(`MalformedLog@${seq}`)
        // Acceptance rules are always on: invariants "off" drops only the relational rules.
        const off = yield* Effect.exit(
          run([], Effect.void, { sessionId: "bad", resume: true, agent: { invariants: "off" } })
        )
        expect(outcome(off)).toBe(`MalformedLog@${seq}`)
        // Nothing was appended to the refused log (a store's own load may already refuse the flaw, 6.1).
        const loaded = yield* Effect.exit(store.load(sid("bad")))
        expect(Exit.isSuccess(loaded) ? loaded.value.events.length : outcome(loaded)).toBe(
          Exit.isSuccess(loaded) ? es.length : `MalformedLog@${seq}`
        )
      }))
  }
})

describe("§2.4/§2.1 every core event type is accepted and round-trips through storage", () => {
  it.scoped("2.4: the rich session holds every core type; stored = in-memory; resume adds only ES; derived state is rebuilt", () =>
    Effect.gen(function*() {
      const { store, run } = yield* withStore
      const live = yield* run(richScript(), richProgram, { tools: [echo] })
      const stored = (yield* store.load(sid("s"))).events
      expect(stored).toStrictEqual(live)
      expect(checkLog(stored, { closed: true })).toEqual([])
      const resumed = yield* run(
        [],
        Effect.gen(function*() {
          const log = yield* SessionLog
          return { events: yield* log.events, surface: yield* log.surface, messages: yield* log.messages }
        }),
        { resume: true }
      )
      expect(resumed.events.slice(0, live.length)).toStrictEqual(live)
      expect(resumed.events.slice(live.length).map(notation)).toEqual(["ES"])
      // The approval types need a permission layer: their storage round trip is covered by
      // test/internal/approvals/ApprovalGate.test.ts (memory) and test/cli/Approve.test.ts (SQLite).
      expect(new Set(resumed.events.map((e) => e.type))).toEqual(
        new Set([...CORE_EVENT_TYPES.filter((t) => !t.startsWith("approval/")), "x/note"])
      )
      expect(resumed.surface).toEqual([48, 35, 43])
      expect(resumed.messages).toStrictEqual(deriveMessages(resumed.events))
      expect(resumed.messages.map((m) => m.content[0]?.type === "text" ? m.content[0].text : m.content[0]?.type))
        .toEqual([
          "summary",
          "B",
          "second"
        ])
    }))

  it.effect("6.1/2.1: over SQLite every event (chunks, splices, UM~, TR~, ignorable) is one row equal to the live event; resume opens", () =>
    Effect.gen(function*() {
      const filename = freshFile()
      const live = yield* sqliteRun(filename, richScript(), richProgram, { tools: [echo] })
      const rows = raw(
        filename,
        (db) =>
          (db.prepare("SELECT seq, row FROM events WHERE session_id = ? ORDER BY seq") as any).all("s") as Array<
            { seq: number; row: string }
          >
      )
      expect(rows.map((r) => r.seq)).toEqual(live.map((e) => e.seq))
      expect(rows.map((r) => JSON.parse(r.row))).toStrictEqual(JSON.parse(JSON.stringify(live)))
      const loaded = yield* Effect.scoped(Effect.gen(function*() {
        const store = Context.get(yield* Layer.build(SqliteSessionStore.layer({ filename })), SessionStore)
        return (yield* store.load(sid("s"))).events
      }))
      expect(loaded).toStrictEqual(live)
      expect(loaded.every((e) => Object.isFrozen(e) && Object.isFrozen(e.data))).toBe(true)
      const after = yield* sqliteRun(filename, [], Effect.flatMap(SessionLog, (log) => log.events), { resume: true })
      expect(after.slice(live.length).map(notation)).toEqual(["ES"])
    }))
})

describe("§5.1 live appends: invalid surface replacements and extension payloads change nothing", () => {
  // After one tool turn the surface is [4 UM(A), 17 AM(c1), 19 TR(c1), 26 AM].
  const summary = (id: string) => ({
    id,
    role: "user",
    content: [{ type: "text", text: "s" }],
    source: { kind: "compaction" }
  })
  const um = (data: unknown, start: number, end: number, cites?: ReadonlyArray<number>) => ({
    type: "user/message",
    data,
    surfaceOp: { op: "replace" as const, start, end },
    ...(cites !== undefined ? { sourceEventSeqs: cites } : {})
  })
  const trData = (es: ReadonlyArray<SessionEvent>, f: (d: any) => void = () => {}) => {
    const d = JSON.parse(JSON.stringify(es.find((e) => e.type === "tool/result")!.data))
    d.message.content[0].content = [{ type: "text", text: "pruned" }]
    f(d)
    return d
  }
  const tr = (data: unknown, start: number, end: number, cites?: ReadonlyArray<number>) => ({
    type: "tool/result",
    data,
    surfaceOp: { op: "replace" as const, start, end },
    ...(cites !== undefined ? { sourceEventSeqs: cites } : {})
  })
  // The rich script's tool turn, prompted by "A"; the log after it.
  const toolTurn = [richScript()[0]!, richScript()[1]!]
  const afterPromptA = Effect.gen(function*() {
    const driver = yield* Driver
    yield* driver.followup(user("A"))
    yield* driver.whenIdle
    return yield* SessionLog
  })
  const invalid = (es: ReadonlyArray<SessionEvent>): ReadonlyArray<readonly [string, unknown]> => [
    ["A8 UM~ role assistant", um({ ...summary("S1"), role: "assistant" }, 4, 26, [4, 17, 19, 26])],
    ["A8 UM~ empty id", um(summary(""), 4, 26, [4, 17, 19, 26])],
    ["A8 UM~ empty source kind", um({ ...summary("S1"), source: { kind: "" } }, 4, 26, [4, 17, 19, 26])],
    [
      "A8 UM~ reasoning content",
      um({ ...summary("S1"), content: [{ type: "reasoning", text: "r" }] }, 4, 26, [4, 17, 19, 26])
    ],
    ["A8 UM~ extra message key", um({ ...summary("S1"), name: "n" }, 4, 26, [4, 17, 19, 26])],
    ["A5 UM~ negative start", um(summary("S1"), -1, 26, [4, 17, 19, 26])],
    ["A5 UM~ fractional end", um(summary("S1"), 4, 25.5, [4, 17, 19, 26])],
    ["A7 UM~ start not on the surface", um(summary("S1"), 5, 26, [5, 17, 19, 26])],
    ["A7 UM~ start after end", um(summary("S1"), 26, 4, [4, 17, 19, 26])],
    ["A7 UM~ a shadowed seq not cited", um(summary("S1"), 4, 26, [4, 17, 26])],
    ["A7 UM~ without sourceEventSeqs", um(summary("S1"), 4, 26)],
    ["A6 UM~ citing a seq twice", um(summary("S1"), 4, 26, [4, 4, 17, 19, 26])],
    ["A6 UM~ citing a later seq", um(summary("S1"), 4, 26, [4, 17, 19, 26, es.length])],
    ["A6 UM~ citing a negative seq", um(summary("S1"), 4, 26, [-1, 4, 17, 19, 26])],
    ["A6 UM~ empty citations", um(summary("S1"), 4, 4, [])],
    ["A7 UM~ separating a call from its result (range ends at the call)", um(summary("S1"), 4, 17, [4, 17])],
    ["A7 UM~ shadowing only the result", um(summary("S1"), 19, 19, [19])],
    ["A7 UM~ shadowing only the call's message", um(summary("S1"), 17, 17, [17])],
    ["A7 TR~ shadowing an assistant/message", tr(trData(es), 17, 17, [17])],
    ["A7 TR~ shadowing a user/message", tr(trData(es), 4, 4, [4])],
    ["A7 TR~ shadowing two nodes", tr(trData(es), 19, 26, [19, 26])],
    [
      "A7 TR~ changing isError",
      tr(
        trData(es, (d) => {
          d.message.content[0].isError = true
        }),
        19,
        19,
        [19]
      )
    ],
    [
      "A7 TR~ changing the message id",
      tr(
        trData(es, (d) => {
          d.message.id = "fresh"
        }),
        19,
        19,
        [19]
      )
    ],
    [
      "A7 TR~ changing the call id",
      tr(
        trData(es, (d) => {
          d.message.content[0].toolCallId = "c9"
          d.message.source.callId = "c9"
        }),
        19,
        19,
        [19]
      )
    ],
    [
      "A8 TR~ callId differing from toolCallId",
      tr(
        trData(es, (d) => {
          d.message.source.callId = "c9"
        }),
        19,
        19,
        [19]
      )
    ],
    [
      "A8 TR~ two result blocks",
      tr(
        trData(es, (d) => {
          d.message.content.push(d.message.content[0])
        }),
        19,
        19,
        [19]
      )
    ],
    ["A6 TR~ empty citations", tr(trData(es), 19, 19, [])],
    ["A7 TR~ without sourceEventSeqs", tr(trData(es), 19, 19)],
    [
      "A4 TR~ turn 0",
      tr(
        trData(es, (d) => {
          d.turn = 0
        }),
        19,
        19,
        [19]
      )
    ],
    ["A4 compaction/summary turn 0", { type: "compaction/summary", data: { turn: 0 } }],
    ["A4 compaction/summary data not an object", { type: "compaction/summary", data: 5 }],
    ["A4 compaction/summary without turn", { type: "compaction/summary", data: { note: "x" } }],
    ["A3 compaction/summary -0 field", { type: "compaction/summary", data: { turn: null, n: -0 } }],
    ["A4 compaction/end error message not a string", {
      type: "compaction/end",
      data: { turn: null, error: { message: 1 } }
    }],
    ["A3 extension data Infinity", { type: "x/declared", data: { n: Infinity } }],
    ["A3 extension data sparse array", { type: "x/declared", data: [1, , 2] }],
    ["A4 undeclared extension without ignorable", { type: "x/undeclared", data: {} }]
  ]

  for (const invariants of ["check", "off"] as const) {
    it.scoped(`5.1 (invariants ${invariants}): each invalid input fails InvalidEvent; events, surface, history and storage are unchanged`, () =>
      Effect.gen(function*() {
        const { store, run } = yield* withStore
        yield* run(
          toolTurn,
          Effect.gen(function*() {
            const log = yield* afterPromptA
            yield* log.flush
            const before = { events: yield* log.events, surface: yield* log.surface, messages: yield* log.messages }
            expect(before.surface).toEqual([4, 17, 19, 26])
            for (const [name, input] of invalid(before.events)) {
              const error = yield* Effect.flip(log.append(input as Parameters<typeof log.append>[0]))
              expect(error, name).toBeInstanceOf(InvalidEvent)
              expect((error as InvalidEvent).type, name).toBe((input as { type: string }).type)
            }
            expect({ events: yield* log.events, surface: yield* log.surface, messages: yield* log.messages })
              .toStrictEqual(before)
            expect((yield* store.load(sid("s"))).events.length).toBe(before.events.length)
          }),
          { tools: [echo], agent: { invariants, eventTypes: ["x/declared"] } }
        )
      }))
  }

  it.scoped("2.8/A6/A7: valid replacements (extra earlier citations, a second prune, call with its result) are accepted and resume intact", () =>
    Effect.gen(function*() {
      const { store, run } = yield* withStore
      const live = yield* run(
        toolTurn,
        Effect.gen(function*() {
          const log = yield* afterPromptA
          const es = yield* log.events
          const note = yield* log.append({ type: "x/declared", data: { why: "audit" } })
          // A TR~ may cite other earlier seqs (its tool/call, the note) besides the shadowed one.
          const first = yield* log.append(
            tr(trData(es), 19, 19, [18, 19, note.seq]) as Parameters<typeof log.append>[0]
          )
          expect(yield* log.surface).toEqual([4, 17, first.seq, 26])
          // A TR~ node is itself a tool/result node: it can be pruned again.
          const second = yield* log.append(
            tr(
              trData(es, (d) => {
                d.message.content[0].content = []
              }),
              first.seq,
              first.seq,
              [first.seq]
            ) as Parameters<typeof log.append>[0]
          )
          expect(yield* log.surface).toEqual([4, 17, second.seq, 26])
          // A range holding a call's message and its (pruned) result separates nothing.
          const s = yield* log.append(
            um(summary("S1"), 17, second.seq, [17, second.seq]) as Parameters<typeof log.append>[0]
          )
          expect(yield* log.surface).toEqual([4, s.seq, 26])
          expect((yield* log.messages).map((m) => m.id)).toEqual(["A", "S1", (es[26]!.data as any).message.id])
          expect(second.data).toStrictEqual(trData(es, (d) => {
            d.message.content[0].content = []
          }))
          yield* log.flush
          return yield* log.events
        }),
        { tools: [echo], agent: { eventTypes: ["x/declared"] } }
      )
      expect((yield* store.load(sid("s"))).events).toStrictEqual(live)
      expect(checkLog(live, { closed: true })).toEqual([])
      const surface = yield* run([], Effect.flatMap(SessionLog, (log) => log.surface), {
        resume: true,
        agent: { eventTypes: ["x/declared"] }
      })
      expect(surface).toEqual([4, live.length - 1, 26])
    }))

  it.scoped("2.3/3.9/6.5: pruning a repair result keeps its reserved id (a TR~ equals the shadowed message except content)", () =>
    Effect.gen(function*() {
      const { store, run } = yield* withStore
      yield* run(
        [
          ScriptedModel.response({ toolCalls: [{ id: "c1", name: "echo", arguments: { x: 1 } }] }),
          ScriptedModel.text("ok")
        ],
        Effect.gen(function*() {
          const driver = yield* Driver
          yield* driver.followup(user("A"))
          yield* driver.whenIdle
          yield* (yield* SessionLog).flush
        }),
        { tools: [echo] }
      )
      // The crash image: everything up to and including the tool/call, no result.
      const full = (yield* store.load(sid("s"))).events
      const cut = full.findIndex((e) => e.type === "tool/call") + 1
      yield* store.create(header("r"), full.slice(0, cut))
      const events = yield* run(
        [],
        Effect.gen(function*() {
          const log = yield* SessionLog
          const es = yield* log.events
          const repaired = es.find((e) => e.type === "tool/result")!
          const d = JSON.parse(JSON.stringify(repaired.data))
          expect(d.message.id).toBe(`interrupted-tool-result-c1-${repaired.seq}`)
          d.message.content[0].content = [{ type: "text", text: "outcome unknown" }]
          yield* log.append({
            type: "tool/result",
            data: d,
            surfaceOp: { op: "replace", start: repaired.seq, end: repaired.seq },
            sourceEventSeqs: [repaired.seq]
          })
          return yield* log.events
        }),
        { sessionId: "r", resume: true, tools: [echo] }
      )
      expect(events.map(notation).slice(cut)).toEqual(["TR?(c1)", "SE(1,1)", "TE(1,interrupted)", "ES", "TR?(c1)"])
      expect(checkLog(events, { closed: true })).toEqual([])
    }))
})

describe("5.1/8.5 SessionLog.append acceptance", () => {
  agentTest(
    "5.1: SessionLog.append refuses an empty type, ignorable false, non-lossless data, reserved core types and R6 violations, writing nothing",
    scenario([]),
    function*({ log }) {
      const refuse = (input: Parameters<typeof log.append>[0]) => Effect.flip(log.append(input))
      const inputs: Array<[Parameters<typeof log.append>[0], string | undefined]> = [
        [{ type: "", data: {}, ignorable: true }, undefined],
        [{ type: "x/ext", data: {}, ignorable: false as unknown as true }, undefined],
        [{ type: "x/ext", data: { n: Number.NaN }, ignorable: true }, undefined],
        [{ type: "x/ext", data: { d: new Date(0) }, ignorable: true }, undefined],
        [{ type: "x/ext", data: {} }, undefined],
        [{ type: "tool/result", data: {}, surfaceOp: "append" }, "reserved"],
        [{ type: "agent/inbox/spliced", data: { target: "next-step", start: 0, inserted: [user("Z")] } }, "reserved"],
        [{ type: "step/end", data: { turn: 1, step: 1 } }, "reserved"],
        [
          { type: "request/header", data: { header: { provider: "p", model: "m", tools: [] }, reason: "initial" } },
          "reserved"
        ],
        [{ type: "compaction/end", data: { turn: null } }, undefined]
      ]
      for (const [input, reason] of inputs) {
        const error = yield* refuse(input)
        expect(error, JSON.stringify(input.type)).toBeInstanceOf(InvalidEvent)
        if (reason !== undefined) expect(error).toMatchObject({ reason })
      }
      const r6 = yield* refuse({ type: "compaction/end", data: { turn: null } })
      expect(r6).toMatchObject({ _tag: "InvalidEvent", rule: "R6" })
      expect(yield* events).toEqual([])
      expect(yield* Inbox.pipe(Effect.flatMap((i) => i.idState(asId("Z"))))).toEqual(Option.none())
    }
  )

  agentTest(
    "2.1/A3: an appended extension event is a deep-frozen snapshot; the ack follows durability",
    scenario([]),
    function*({ log }) {
      const data = { list: [1, 2], nested: { a: "x" } }
      const event = yield* log.append({ type: "x/ext", data, ignorable: true })
      data.list.push(3)
      data.nested.a = "changed"
      expect(event).toMatchObject({
        type: "x/ext",
        seq: 0,
        time: 0,
        ignorable: true,
        data: { list: [1, 2], nested: { a: "x" } }
      })
      expect((yield* events)[0]!.data).toEqual({ list: [1, 2], nested: { a: "x" } })
      expect(Object.isFrozen(event.data)).toBe(true)
      expect(Object.isFrozen((event.data as any).nested)).toBe(true)
      expect(yield* log.durableSeq).toBe(0)
    }
  )

  // 3.1 check order is "... message/event validity → InvalidEvent; identity → DuplicateMessage": an event
  // invalid for another reason than its known id is that InvalidEvent.
  agentTest(
    "3.1 check order: an invalid replacement user/message with a known id fails InvalidEvent, not DuplicateMessage",
    scenario([ScriptedModel.text("ok")]),
    function*({ driver, log }) {
      yield* driver.followup(user("X"))
      yield* driver.whenIdle
      const before = yield* events
      const s = before.find((e) => e.type === "user/message")!.seq
      // Known id and an endpoint that is not on the surface.
      const e1 = yield* Effect.flip(
        log.append({
          type: "user/message",
          data: user("X", "again"),
          surfaceOp: { op: "replace", start: 0, end: 0 },
          sourceEventSeqs: [0]
        })
      )
      expect(e1).toBeInstanceOf(InvalidEvent)
      // Known id and an invalid message shape.
      const e2 = yield* Effect.flip(log.append({
        type: "user/message",
        data: { id: "X", role: "user", content: "not blocks", source: { kind: "compaction" } },
        surfaceOp: { op: "replace", start: s, end: s },
        sourceEventSeqs: [s]
      }))
      expect(e2).toBeInstanceOf(InvalidEvent)
      expect(yield* events).toEqual(before)
    }
  )
})

describe("5.1/D6 loop appends are validated like any other", () => {
  // 5.1 "Every append (loop, inbox, repair, opening, SessionLog.append) ... is checked with the same Schemas"
  // and D6 "a log accepted live can always be loaded": a cause outside the CancelCause union is refused (a
  // defect that changes nothing), so it never reaches turn/end.
  it.scoped("5.1/D6: a cancel cause outside the CancelCause union never reaches the log; the session stays loadable", () =>
    Effect.gen(function*() {
      const storeCtx = yield* Layer.build(SessionStore.layerMemory)
      const first = yield* buildIn(storeCtx, [ScriptedModel.hang({ text: "x" })])
      yield* first.driver.followup(user("A"))
      yield* until(Effect.map(first.log.events, (es) => es.some((e) => e.type === "assistant/chunk")))
      const refused = [
        yield* Effect.exit(first.driver.cancel({ kind: "bogus" } as unknown as CancelCause)),
        yield* Effect.exit(first.driver.cancel({ kind: "hook", reason: 7 } as unknown as CancelCause))
      ]
      // Refused as defects that change nothing: the turn still streams until a valid cancel.
      for (const exit of refused) expect(Exit.isFailure(exit) && Cause.isDie(exit.cause)).toBe(true)
      expect(yield* first.driver.status).toBe("running")
      yield* first.driver.cancel(CancelCause.user)
      yield* first.driver.whenIdle
      const reasons = (yield* first.log.events).filter((e) => e.type === "turn/end").map((e) => (e.data as any).reason)
      for (const r of reasons) expect(["aborted", "completed", "error"]).toContain(r.kind)
      for (const r of reasons) {
        if (r.kind === "aborted") expect(["user", "parent", "hook", "disposed"]).toContain(r.reason.kind)
      }
      yield* Scope.close(first.scope, Exit.void)
      const resumed = yield* Effect.exit(Effect.scoped(buildIn(storeCtx, [], { resume: true })))
      expect(failureOf(resumed)).toBeUndefined()
      expect(Exit.isSuccess(resumed)).toBe(true)
    }))
})

describe("5.1 acceptance on append", () => {
  agentTest(
    "5.1 A5: surface metadata on an extension event is rejected with no change",
    scenario([]),
    function*({ log }) {
      expect(yield* Effect.flip(log.append({ type: "x/e", data: {}, ignorable: true, sourceEventSeqs: [] })))
        .toBeInstanceOf(InvalidEvent)
      expect(yield* Effect.flip(log.append({ type: "x/e", data: {}, ignorable: true, surfaceOp: "append" })))
        .toBeInstanceOf(InvalidEvent)
      expect(yield* events).toEqual([])
    }
  )

  agentTest(
    "5.2: with invariants off the relational rules are not applied on append (a compaction/start {turn: 1} while idle is accepted)",
    scenario([], { agent: { invariants: "off" } }),
    function*({ log }) {
      const e = yield* log.append({ type: "compaction/start", data: { turn: 1 } })
      expect(e.seq).toBe(0)
      expect(yield* Effect.flip(log.append({ type: "x/undeclared", data: {} }))).toBeInstanceOf(InvalidEvent)
    }
  )

  agentTest("3.8: prepend inserts at the front; snapshot reads both lists", scenario([]), function*({ inbox }) {
    const live = yield* recordLive
    yield* inbox.append("next-turn", user("A"))
    yield* inbox.prepend("next-turn", user("B"))
    yield* inbox.prepend("next-step", user("C"))
    expect(yield* shape).toEqual(["INS(nt,0,[A])", "INS(nt,0,[B])", "INS(ns,0,[C])"])
    const snap = yield* inbox.snapshot
    expect([snap.nextTurn.map((m) => m.id), snap.nextStep.map((m) => m.id)]).toEqual([["B", "A"], ["C"]])
    expect(Object.isFrozen(snap.nextTurn)).toBe(true)
    expect(yield* inbox.hasPending).toBe(true)
    expect((yield* live).length).toBe(3)
    expect(yield* requests).toEqual([])
  })
})

describe("2.1 lossless JSON on append", () => {
  agentTest(
    "2.1: -0, NaN, Infinity, undefined, sparse arrays, class instances, BigInt and cycles are rejected",
    scenario([]),
    function*({ log }) {
      const cyclic: Record<string, unknown> = {}
      cyclic.self = cyclic
      const sparse = [1, , 3]
      const bad: ReadonlyArray<unknown> = [
        -0,
        NaN,
        Infinity,
        { a: undefined },
        sparse,
        new Map(),
        new Date(0),
        1n,
        cyclic,
        () => 1,
        Symbol("s")
      ]
      for (const data of bad) {
        const exit = yield* Effect.exit(log.append({ type: "x/e", data, ignorable: true }))
        expect(Exit.isFailure(exit) && Option.getOrUndefined(Cause.failureOption(exit.cause)), String(typeof data))
          .toBeInstanceOf(InvalidEvent)
      }
      const input = { a: [1, { b: "c" }], d: null, e: true }
      const stored = yield* log.append({ type: "x/e", data: input, ignorable: true })
      input.a.push(2)
      expect(stored.data).toEqual({ a: [1, { b: "c" }], d: null, e: true })
      expect(Object.isFrozen(stored.data)).toBe(true)
      expect(stored.seq).toBe(0)
    }
  )
})

describe("§2.1/§5.1 A5 envelope of appended extension events", () => {
  it.scoped("5.1 A5: surfaceOp or sourceEventSeqs on an extension or compaction event fails InvalidEvent and writes nothing", () =>
    Effect.gen(function*() {
      const { run } = yield* withStore
      yield* run(
        [],
        Effect.gen(function*() {
          const log = yield* SessionLog
          const inputs: ReadonlyArray<Parameters<typeof log.append>[0]> = [
            { type: "x/ext", data: {}, ignorable: true, surfaceOp: "append" },
            { type: "x/ext", data: {}, ignorable: true, sourceEventSeqs: [] },
            { type: "x/declared", data: {}, sourceEventSeqs: [0] },
            { type: "compaction/summary", data: { turn: null }, sourceEventSeqs: [0] },
            { type: "compaction/summary", data: { turn: null }, surfaceOp: "append" }
          ]
          yield* log.append({ type: "x/declared", data: {} })
          yield* log.append({ type: "compaction/summary", data: { turn: null } })
          for (const input of inputs) {
            expect(yield* Effect.flip(log.append(input)), JSON.stringify(input)).toBeInstanceOf(InvalidEvent)
          }
          expect((yield* log.events).length).toBe(2)
        }),
        { agent: { eventTypes: ["x/declared"] } }
      )
    }))

  it.scoped("2.9: an ignorable extension event is stored with the marker, resumes without declaration and changes no derived state", () =>
    Effect.gen(function*() {
      const { store, run } = yield* withStore
      yield* run(
        [],
        Effect.gen(function*() {
          const log = yield* SessionLog
          yield* log.append({ type: "x/note", data: { a: [1, "b", null] }, ignorable: true })
          yield* (yield* Inbox).append("next-step", plugin("p1"))
        })
      )
      const stored = yield* store.load(sid("s"))
      expect(stored.events[0]).toEqual({
        type: "x/note",
        seq: 0,
        time: 0,
        data: { a: [1, "b", null] },
        ignorable: true
      })
      expect(deriveMessages(stored.events)).toEqual([])
      const folded = foldInbox(stored.events)
      expect(Either.isRight(folded) && folded.right.nextStep.map((m) => m.id)).toEqual(["p1"])
      expect(checkLog(stored.events, { closed: true })).toEqual([])
      yield* run(
        [],
        Effect.flatMap(Inbox, (i) => Effect.map(i.nextStep, (ns) => expect(ns.map((m) => m.id)).toEqual(["p1"]))),
        {
          resume: true
        }
      )
    }))
})

describe("§5.1/§5.2 invariants option", () => {
  it.scoped("5.2/D6: with invariants off a live relational violation (R6) is accepted; the log then resumes only with off", () =>
    Effect.gen(function*() {
      const { store, run } = yield* withStore
      yield* run(
        [],
        Effect.flatMap(SessionLog, (log) => log.append({ type: "compaction/end", data: { turn: null } })),
        { agent: { invariants: "off" } }
      )
      const stored = yield* store.load(sid("s"))
      expect(checkLog(stored.events).map((v) => v.rule)).toEqual(["R6"])
      const off = yield* Effect.exit(run([], Effect.void, { resume: true, agent: { invariants: "off" } }))
      expect(outcomeReason(off)).toBe("ok")
      const on = yield* Effect.exit(run([], Effect.void, { resume: true }))
      expect(outcomeReason(on)).toMatch(/^MalformedLog: R6/)
    }))

  it.scoped("5.1 A1/A2: loaded envelopes are checked: extra keys, negative or fractional time, a wrong seq, ignorable false", () =>
    Effect.gen(function*() {
      const { store, run } = yield* withStore
      const cases: ReadonlyArray<readonly [string, SessionEvent]> = [
        ["extra", ev(0, "x/e", {}, { ignorable: true, extra: 1 })],
        ["negative-time", { ...ev(0, "x/e", {}, { ignorable: true }), time: -1 } as SessionEvent],
        ["fractional-time", { ...ev(0, "x/e", {}, { ignorable: true }), time: 1.5 } as SessionEvent],
        ["wrong-seq", ev(0, "x/e", {}, { ignorable: true })],
        ["ignorable-false", ev(0, "x/e", {}, { ignorable: false })],
        ["empty-type", ev(0, "", {}, { ignorable: true })]
      ]
      for (const [name, bad] of cases) {
        const good = ev(0, "x/e", {}, { ignorable: true })
        const log = name === "wrong-seq"
          ? [good, { ...bad, seq: 5 } as SessionEvent]
          : [good, { ...bad, seq: 1 } as SessionEvent]
        const created = yield* Effect.exit(store.create(header(name), log))
        if (Exit.isFailure(created)) continue // a store may refuse it outright (PersistenceError)
        const error = yield* Effect.flip(run([], Effect.void, { sessionId: name, resume: true }))
        expect(error, name).toBeInstanceOf(MalformedLog)
        expect(error, name).toMatchObject({ seq: 1 })
      }
    }))
})

describe("§2.1 time", () => {
  agentTest(
    "2.1: an appended event's time is the Clock time at commit, whatever extra key the input carries",
    scenario([]),
    function*({ log }) {
      yield* TestClock.adjust(777)
      const input = { type: "x/ext", data: {}, ignorable: true, time: 5 } as Parameters<typeof log.append>[0]
      const exit = yield* Effect.exit(log.append(input))
      // Either the extra key is refused, or it is ignored and the Clock decides.
      if (Exit.isSuccess(exit)) expect(exit.value.time).toBe(777)
      else expect(Option.getOrUndefined(Cause.failureOption(exit.cause))).toBeInstanceOf(InvalidEvent)
    }
  )
})

describe("SPEC 8.5 SessionLog", () => {
  agentTest(
    "8.5: a fresh session: header, firstLiveSeq 0, durableSeq -1, empty events, messages and surface",
    scenario([]),
    function*({ log }) {
      expect(log.sessionId).toBe("s")
      expect(log.header).toEqual({ formatVersion: 1, sessionId: "s", createdAt: 0, seedLength: 0 })
      expect(log.firstLiveSeq).toBe(0)
      expect(yield* log.durableSeq).toBe(-1)
      expect(yield* log.events).toEqual([])
      expect(yield* log.messages).toEqual([])
      expect(yield* log.surface).toEqual([])
      yield* log.flush
      expect(yield* log.durableSeq).toBe(-1)
    }
  )

  agentTest(
    "8.5: append returns the stored event (seq, Clock time, data, ignorable), acknowledged durable; other core types are reserved",
    scenario([]),
    function*({ log }) {
      const data = { n: 1, list: [1, 2] }
      const e = yield* log.append({ type: "x/ext", data, ignorable: true })
      expect(e).toEqual({ type: "x/ext", seq: 0, time: 0, data: { n: 1, list: [1, 2] }, ignorable: true })
      expect(yield* log.durableSeq).toBe(0)
      expect((yield* log.events)[0]).toEqual(e)
      data.list.push(3)
      expect((yield* log.events)[0]!.data).toEqual({ n: 1, list: [1, 2] })
      for (
        const type of [
          "turn/end",
          "step/start",
          "step/end",
          "assistant/chunk",
          "assistant/message",
          "tool/call",
          "tool/result",
          "request/header",
          "llm/retry",
          "agent/inbox/spliced"
        ]
      ) {
        const error = yield* Effect.flip(log.append({ type, data: {} }))
        expect(error, type).toBeInstanceOf(InvalidEvent)
        expect(error, type).toMatchObject({ type, reason: "reserved" })
      }
      expect((yield* log.events).length).toBe(1)
    }
  )

  agentTest(
    "8.5/3.10: stream(fromSeq) replays seq >= fromSeq then follows; a fromSeq beyond the end starts at that seq",
    scenario([]),
    function*({ log, inbox }) {
      for (const id of ["A", "B", "C"]) yield* inbox.append("next-turn", user(id))
      const fromOne = yield* Effect.fork(Stream.runCollect(Stream.take(log.stream(1), 4)))
      const ahead = yield* Effect.fork(Stream.runCollect(Stream.take(log.stream(5), 1)))
      const all = yield* Effect.fork(Stream.runCollect(Stream.take(log.stream(), 6)))
      yield* settle
      for (const id of ["D", "E", "F"]) yield* inbox.append("next-step", user(id))
      expect(Chunk.toReadonlyArray(yield* Fiber.join(fromOne)).map((e) => e.seq)).toEqual([1, 2, 3, 4])
      expect(Chunk.toReadonlyArray(yield* Fiber.join(ahead)).map((e) => e.seq)).toEqual([5])
      expect(Chunk.toReadonlyArray(yield* Fiber.join(all)).map((e) => e.seq)).toEqual([0, 1, 2, 3, 4, 5])
    }
  )

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

  agentTest(
    "8.5: stream delivers every in-memory append, also before it is durable",
    scenario([]),
    function*({ log, driver, control }) {
      yield* control.hold
      const ack = yield* Effect.fork(driver.inject(plugin("H")))
      const first = yield* Stream.runHead(log.stream(0))
      expect(Option.map(first, (e) => e.type)).toEqual(Option.some("agent/inbox/spliced"))
      expect(yield* log.durableSeq).toBe(-1)
      expect(Option.isNone(yield* Fiber.poll(ack))).toBe(true)
      yield* control.release
      yield* Fiber.join(ack)
      expect(yield* log.durableSeq).toBe(0)
    }
  )

  agentTest(
    "8.5/2.9: append refuses an undeclared type without ignorable, and ignorable other than true; nothing is written",
    scenario([], { agent: { eventTypes: ["x/declared"] } }),
    function*({ log }) {
      expect(yield* Effect.flip(log.append({ type: "x/undeclared", data: {} }))).toBeInstanceOf(InvalidEvent)
      expect(yield* Effect.flip(log.append({ type: "x/undeclared", data: {}, ignorable: false as unknown as true })))
        .toBeInstanceOf(InvalidEvent)
      expect(yield* Effect.flip(log.append({ type: "", data: {}, ignorable: true }))).toBeInstanceOf(InvalidEvent)
      expect(yield* log.events).toEqual([])
      const declared = yield* log.append({ type: "x/declared", data: { ok: true } })
      expect(declared).toEqual({ type: "x/declared", seq: 0, time: 0, data: { ok: true } })
    }
  )
})
