/**
 * The surface and derived history through an agent (SPEC 2.8, 6.4-6.7, 3.9): replacement messages,
 * resume and fork keeping the surface, checking modes, snapshots and repaired surfaces.
 */
import { describe, expect, it } from "@effect/vitest"
import { Cause, Context, Effect, Exit, Layer, Option, Schema } from "effect"
import {
  checkLog,
  deriveMessages,
  Driver,
  DuplicateMessage,
  forkSession,
  Inbox,
  InvalidEvent,
  MalformedLog,
  PreStep,
  PreStepDecision,
  ScriptedModel,
  SessionId,
  SessionLog,
  SessionStore,
  Tool,
  userMessage
} from "../../src/index.js"
import type { ScriptEntry, SessionEvent, UserMessage } from "../../src/index.js"
import { ev, found } from "../fixtures/handLog.js"
import { outcomeReason } from "../fixtures/richLog.js"
import { c1, c2, summary, SurfaceLog, twoTurns, u } from "../fixtures/surfaceLog.js"
import {
  agentOver,
  agentTest,
  asId,
  closeOut,
  dataOfType,
  events,
  plugin,
  requests,
  scenario,
  token,
  user
} from "./harness.js"

/** A `user/message` that replaces the surface from seq `start` to seq `end` with `data`, citing `cites`. */
const replacement = (data: UserMessage, start: number, end: number, cites: ReadonlyArray<number>) =>
  ({ type: "user/message", data, surfaceOp: { op: "replace", start, end }, sourceEventSeqs: cites }) as const

/** A `tool/result` with `data` that replaces the one surface entry at seq `seq`, citing it. */
const resultReplacing = <D>(data: D, seq: number) =>
  ({ type: "tool/result", data, surfaceOp: { op: "replace", start: seq, end: seq }, sourceEventSeqs: [seq] }) as const

/** The surface metadata of an event (present on message events only). */
const meta = (e: SessionEvent | undefined) =>
  e as { readonly surfaceOp?: unknown; readonly sourceEventSeqs?: ReadonlyArray<number> } | undefined

const tokens = (events: ReadonlyArray<SessionEvent>) => deriveMessages(events).map(token)

/** Opens an agent over a stored hand-built log (resume). */
const resumeOver = (events: ReadonlyArray<SessionEvent>, script: ReadonlyArray<ScriptEntry> = []) =>
  Effect.gen(function*() {
    const storeCtx = yield* Layer.build(SessionStore.layerMemory)
    const store = Context.get(storeCtx, SessionStore)
    yield* store.create({ formatVersion: 1, sessionId: SessionId.make("s"), createdAt: 0, seedLength: 0 }, events)
    return yield* Layer.build(agentOver(script, { resume: true }).pipe(Layer.provide(Layer.succeedContext(storeCtx))))
  })

const failureOf = <A, E>(exit: Exit.Exit<A, E>): E | undefined =>
  Exit.isFailure(exit) ? Option.getOrUndefined(Cause.failureOption(exit.cause)) : undefined

// 6.7 / 3.9 compaction through the public API -------------------------------------------------------

const echo = Tool.make("echo", { description: "", parameters: Schema.Struct({}), execute: () => Effect.succeed("out") })
const toolScript = [
  ScriptedModel.response({ toolCalls: [{ id: "c1", name: "echo", arguments: {} }] }),
  ScriptedModel.text("done"),
  ScriptedModel.text("b"),
  ScriptedModel.text("c")
]

/** Runs turn 1 (A → call c1 → out → done) and turn 2 (B → b). */
const runTwoTurns = Effect.gen(function*() {
  const driver = yield* Driver
  yield* driver.followup(user("A"))
  yield* driver.whenIdle
  yield* driver.followup(user("B"))
  yield* driver.whenIdle
})

const empty = Schema.Struct({})

const ENVELOPE = new Set(["type", "seq", "time", "data", "surfaceOp", "sourceEventSeqs", "ignorable"])
const MESSAGE_TYPES = new Set(["user/message", "assistant/message", "tool/result"])

// The history before the first assistant message: what the first request saw.
const deriveUpTo = (es: ReadonlyArray<import("../../src/index.js").SessionEvent>) =>
  es.filter((e) => e.type === "user/message").slice(0, 1).map((e) => e.data)

// 2.8 surface and derived history on hand-built logs -------------------------------------------------

describe("2.8 surface and derived history (hand-built logs)", () => {
  it("2.8: the fixture is valid and derives [A, call, out, done, B, b]", () => {
    const b = twoTurns()
    expect(found(b.events, { closed: true })).toStrictEqual([])
    expect(tokens(b.events)).toStrictEqual(["A", "call", "tool-result c1", "done", "B", "b"])
  })

  it("2.8/6.7: a bracketed null compaction between turns replaces [UM(A)..AM(done)] in place; history [S, B, b]; every prefix checks", () => {
    const b = twoTurns()
    b.comp("start", null).comp("summary", null, { tokens: 3 })
    const start = b.last - 1
    b.umr(summary("S"), 4, 22, [start, start + 1, 4, 13, 15, 22]).comp("end", null)
    expect(tokens(b.events)).toStrictEqual(["S", "B", "b"])
    const s = deriveMessages(b.events)[0]!
    expect(s).toStrictEqual({
      id: "S",
      role: "user",
      content: [{ type: "text", text: "S" }],
      source: { kind: "compaction", by: "audit" }
    })
    for (let n = 0; n <= b.events.length; n++) expect(found(b.events.slice(0, n))).toStrictEqual([])
    expect(found(b.events, { closed: true })).toStrictEqual([])
    // lossless: the prefix before the replacement derives the full history
    expect(tokens(b.events.slice(0, start + 2))).toStrictEqual(["A", "call", "tool-result c1", "done", "B", "b"])
  })

  it("2.8: a replacement in the middle keeps the nodes before and after in order", () => {
    const b = twoTurns()
    // [UM(A), AM(call), TR(c1), AM(done), UM(B), AM(b)] → replace AM(done)..UM(B)
    b.umr(summary("M"), 22, 29, [22, 29])
    expect(tokens(b.events)).toStrictEqual(["A", "call", "tool-result c1", "M", "b"])
    expect(found(b.events)).toStrictEqual([])
  })

  it("2.8: pruning twice: the second tool/result replacement shadows the first and cites it; history shows the last content", () => {
    const b = twoTurns()
    b.trr(1, 1, "c1", "pruned-1", 15)
    const first = b.last
    b.trr(1, 1, "c1", "pruned-2", first, [15, first])
    const history = deriveMessages(b.events)
    expect(history.map(token)).toStrictEqual(["A", "call", "tool-result c1", "done", "B", "b"])
    expect((history[2]!.content[0] as { content: ReadonlyArray<{ text: string }> }).content[0]!.text).toBe("pruned-2")
    expect(found(b.events, { closed: true })).toStrictEqual([])
  })

  it("2.8: an empty assistant message is a surface node yielding nothing; a replacement may start at it", () => {
    const b = new SurfaceLog()
    b.ins("next-turn", [u("A")]).ts(1).clm("next-turn", 1).ss(1, 1).um(u("A")).rh().answer(1, 1, "").se(1, 1).te(1)
    // 0 INS 1 TS 2 CLM 3 SS 4 UM 5 RH 6 finish 7 AM(empty) 8 SE 9 TE
    expect(tokens(b.events)).toStrictEqual(["A"])
    b.umr(summary("S"), 7, 7, [7])
    expect(tokens(b.events)).toStrictEqual(["A", "S"])
    expect(found(b.events, { closed: true })).toStrictEqual([])
  })

  it("2.8: deriveMessages returns a fresh array of frozen messages equal to the logged ones (verbatim, no framing)", () => {
    const b = twoTurns()
    b.umr(summary("S", "the summary"), 4, 22, [4, 13, 15, 22])
    const first = deriveMessages(b.events)
    const second = deriveMessages(b.events)
    expect(first).not.toBe(second)
    expect(first).toStrictEqual(second)
    expect(first.every((m) => Object.isFrozen(m) && Object.isFrozen(m.content))).toBe(true)
    expect(first[0]).toStrictEqual(b.events[b.last]!.data)
  })
})

// 2.8 / 6.4 load validation of surface rules on resume --------------------------------------------------

describe("2.8 / 6.4 surface state after resume of a hand-built log", () => {
  it.scoped("2.8/6.4: resume over a compacted log: surface and messages are the derivation; ids known as entered", () =>
    Effect.gen(function*() {
      const b = twoTurns()
      b.comp("start", null).umr(summary("S"), 4, 22, [b.last, 4, 13, 15, 22]).comp("end", null)
      const sSeq = b.last - 1
      const valid = b.events
      const ctx = yield* resumeOver(valid)
      const log = Context.get(ctx, SessionLog)
      const inbox = Context.get(ctx, Inbox)
      expect(yield* log.surface).toStrictEqual([sSeq, 29, 34])
      expect(yield* log.messages).toStrictEqual(deriveMessages(valid))
      expect((yield* log.messages).map(token)).toStrictEqual(["S", "B", "b"])
      for (const id of ["S", "A", "am-1-1", "tr-c1"]) {
        expect(yield* inbox.idState(asId(id))).toStrictEqual(Option.some("entered"))
      }
      const all = yield* log.events
      expect(all.length).toBe(valid.length + 1)
      expect(all.at(-1)!.type).toBe("session/end-seed")
      expect(checkLog(all, { closed: true })).toStrictEqual([])
    }).pipe(Effect.provide(SessionStore.layerMemory)))

  it.scoped("2.8/6.4: a stored pruning whose target was shadowed fails resume with MalformedLog at that seq", () =>
    Effect.gen(function*() {
      const b = twoTurns()
      b.umr(summary("S"), 4, 22, [4, 13, 15, 22])
      b.trr(1, 1, "c1", "never", 15, [15])
      const error = failureOf(yield* Effect.exit(resumeOver(b.events)))
      expect(error).toBeInstanceOf(MalformedLog)
      expect(error).toMatchObject({ seq: b.last })
    }).pipe(Effect.provide(SessionStore.layerMemory)))

  it.scoped("2.8/6.4: a stored compaction that shadows only the assistant call (not its result) fails resume at that seq", () =>
    Effect.gen(function*() {
      const b = twoTurns()
      b.umr(summary("S"), 4, 13, [4, 13])
      const error = failureOf(yield* Effect.exit(resumeOver(b.events)))
      expect(error).toBeInstanceOf(MalformedLog)
      expect(error).toMatchObject({ seq: b.last })
    }).pipe(Effect.provide(SessionStore.layerMemory)))

  it.scoped("2.8/6.4: a stored replacement citing a shadowed seq twice, or its own seq, fails resume at that seq", () =>
    Effect.gen(function*() {
      for (const cites of [[4, 4, 13, 15, 22], [4, 13, 15, 22, 37]]) {
        const b = twoTurns()
        b.umr(summary("S"), 4, 22, cites)
        const error = failureOf(yield* Effect.exit(resumeOver(b.events)))
        expect(error).toBeInstanceOf(MalformedLog)
        expect(error).toMatchObject({ seq: 37 })
      }
    }).pipe(Effect.provide(SessionStore.layerMemory)))
})

describe("6.7 / 3.9 replacement messages through SessionLog.append", () => {
  agentTest(
    "6.7/2.5: a replacement user/message is class F: accepted while idle without a bracket or maintenance; surface and known ids follow",
    scenario(toolScript, { tools: [echo] }),
    function*({ log, inbox }) {
      yield* runTwoTurns
      const before = yield* log.surface
      expect(before.length).toBe(6)
      const event = yield* log.append(replacement(summary("S"), before[0]!, before[3]!, before.slice(0, 4)))
      expect(event.seq).toBe((yield* log.events).length - 1)
      expect(yield* log.surface).toStrictEqual([event.seq, before[4], before[5]])
      expect((yield* log.messages).map(token)).toStrictEqual(["S", "B", "b"])
      expect(yield* inbox.idState(asId("S"))).toStrictEqual(Option.some("entered"))
      expect(checkLog(yield* log.events, { closed: true })).toStrictEqual([])
    }
  )

  agentTest(
    "3.9: a replacement with a pending, discarded, assistant or tool-result id fails DuplicateMessage {id, state}; nothing written",
    scenario(toolScript, { tools: [echo] }),
    function*({ driver, log, inbox }) {
      yield* runTwoTurns
      yield* driver.inject(user("P"))
      yield* driver.inject(user("R"))
      expect(yield* inbox.remove(asId("R"))).toBe(true)
      const all = yield* log.events
      const am = all.find((e) => e.type === "assistant/message")!.data as { message: { id: string } }
      const tr = all.find((e) => e.type === "tool/result")!.data as { message: { id: string } }
      const surface = yield* log.surface
      const cases: ReadonlyArray<readonly [string, string]> = [
        ["P", "pending"],
        ["R", "discarded"],
        [am.message.id, "entered"],
        [tr.message.id, "entered"],
        ["A", "entered"]
      ]
      for (const [id, state] of cases) {
        const error = yield* Effect.flip(log.append(replacement(summary(id), surface[4]!, surface[4]!, [surface[4]!])))
        expect(error).toBeInstanceOf(DuplicateMessage)
        expect(error).toMatchObject({ id, state })
      }
      expect((yield* log.events).length).toBe(all.length)
      expect(yield* log.surface).toStrictEqual(surface)
    }
  )

  agentTest(
    "3.9/3.1: a rejected replacement does not make its id known; validity is checked before identity",
    scenario(toolScript, { tools: [echo] }),
    function*({ log, inbox }) {
      yield* runTwoTurns
      const surface = yield* log.surface
      const length = (yield* log.events).length
      // missing a shadowed citation
      const bad = yield* Effect.flip(log.append(replacement(summary("S"), surface[0]!, surface[1]!, [surface[0]!])))
      expect(bad).toBeInstanceOf(InvalidEvent)
      expect(yield* inbox.idState(asId("S"))).toStrictEqual(Option.none())
      // a known id with an invalid range: InvalidEvent, not DuplicateMessage
      const both = yield* Effect.flip(
        log.append(
          replacement(summary("A"), surface[3]!, surface[0]!, [surface[0]!, surface[1]!, surface[2]!, surface[3]!])
        )
      )
      expect(both).toBeInstanceOf(InvalidEvent)
      expect((yield* log.events).length).toBe(length)
      // the same fresh id is then accepted
      const ok = yield* log.append(
        replacement(summary("S"), surface[0]!, surface[3]!, [surface[0]!, surface[1]!, surface[2]!, surface[3]!])
      )
      expect(ok.seq).toBe(length)
      expect(yield* inbox.idState(asId("S"))).toStrictEqual(Option.some("entered"))
    }
  )

  agentTest(
    "2.8/A6: replacement citations must be unique, earlier than the event and non-empty",
    scenario(toolScript, { tools: [echo] }),
    function*({ log }) {
      yield* runTwoTurns
      const surface = yield* log.surface
      const length = (yield* log.events).length
      const at = surface[4]!
      for (const cites of [[at, at], [at, length], [at, length + 5], []]) {
        const error = yield* Effect.flip(log.append(replacement(summary("S"), at, at, cites)))
        expect(error).toBeInstanceOf(InvalidEvent)
      }
      const noCites = yield* Effect.flip(
        log.append({ type: "user/message", data: summary("S"), surfaceOp: { op: "replace", start: at, end: at } })
      )
      expect(noCites).toBeInstanceOf(InvalidEvent)
      expect((yield* log.events).length).toBe(length)
      // extra earlier citations (not shadowed) are fine, in any order
      const ok = yield* log.append({
        type: "user/message",
        data: summary("S"),
        surfaceOp: { op: "replace", start: at, end: at },
        sourceEventSeqs: [at, 0]
      })
      expect(meta(ok)!.sourceEventSeqs).toStrictEqual([at, 0])
    }
  )

  agentTest(
    "2.8/6.7: a tool/result replacement must equal the old message except its content; it may be pruned twice",
    scenario(toolScript, { tools: [echo] }),
    function*({ log }) {
      yield* runTwoTurns
      const all = yield* log.events
      const trEvent = all.find((e) => e.type === "tool/result")!
      const d = trEvent.data as {
        turn: number
        step: number
        message: {
          id: string
          role: "user"
          content: ReadonlyArray<{ type: "tool-result"; toolCallId: string; isError: boolean }>
          source: { kind: string; callId: string }
        }
      }
      const pruned = (text: string, patch: Record<string, unknown> = {}) => ({
        turn: d.turn,
        step: d.step,
        message: { ...d.message, content: [{ ...d.message.content[0]!, content: [{ type: "text", text }] }], ...patch }
      })
      for (
        const patch of [{ id: "other" }, { source: { kind: "tool", callId: "c9" } }, {
          source: { kind: "tool", callId: "c1", extra: 1 }
        }]
      ) {
        expect(yield* Effect.flip(log.append(resultReplacing(pruned("x", patch), trEvent.seq)))).toBeInstanceOf(
          InvalidEvent
        )
      }
      const first = yield* log.append(resultReplacing(pruned("p1"), trEvent.seq))
      // the original is shadowed: it is no longer an endpoint
      expect(yield* Effect.flip(log.append(resultReplacing(pruned("p2"), trEvent.seq)))).toBeInstanceOf(InvalidEvent)
      const second = yield* log.append(resultReplacing(pruned("p2"), first.seq))
      const messages = yield* log.messages
      expect(messages.map(token)).toStrictEqual(["A", "tool-call c1", "tool-result c1", "done", "B", "b"])
      expect(messages[2]).toStrictEqual((second.data as { message: unknown }).message)
      expect((yield* log.surface)[2]).toBe(second.seq)
      expect(messages).toStrictEqual(deriveMessages(yield* log.events))
      expect(checkLog(yield* log.events, { closed: true })).toStrictEqual([])
    }
  )

  agentTest(
    "2.8: a compaction cannot shadow a tool/result alone while its assistant call stays, nor the call without the result",
    scenario(toolScript, { tools: [echo] }),
    function*({ log }) {
      yield* runTwoTurns
      const surface = yield* log.surface
      const length = (yield* log.events).length
      for (const [start, end] of [[1, 1], [2, 2], [0, 1], [2, 3]] as const) {
        const cites = surface.slice(start, end + 1)
        expect(yield* Effect.flip(log.append(replacement(summary("S"), surface[start]!, surface[end]!, cites))))
          .toBeInstanceOf(InvalidEvent)
      }
      expect((yield* log.events).length).toBe(length)
    }
  )
})

describe("6.4 / 6.6 resume and fork keep the surface", () => {
  it.scoped("6.4/6.7: after compaction and pruning, a resumed agent derives the same history and surface; the next request starts with it", () =>
    Effect.gen(function*() {
      const storeCtx = yield* Layer.build(SessionStore.layerMemory)
      const first = yield* Effect.scoped(Effect.gen(function*() {
        const ctx = yield* Layer.build(
          agentOver(toolScript, { tools: [echo] }).pipe(Layer.provide(Layer.succeedContext(storeCtx)))
        )
        yield* Effect.provide(runTwoTurns, ctx)
        const log = Context.get(ctx, SessionLog)
        const before = yield* log.surface
        const tr = (yield* log.events)[before[2]!]!
        const d = tr.data as {
          turn: number
          step: number
          message: { content: ReadonlyArray<Record<string, unknown>> }
        }
        const pruned = yield* log.append(
          resultReplacing({
            turn: d.turn,
            step: d.step,
            message: {
              ...d.message,
              content: [{ ...d.message.content[0], content: [{ type: "text", text: "pruned" }] }]
            }
          }, tr.seq)
        )
        const surface = yield* log.surface
        expect(surface[2]).toBe(pruned.seq)
        yield* log.append(replacement(summary("S"), surface[1]!, surface[2]!, [tr.seq, ...surface.slice(1, 3)]))
        return { surface: yield* log.surface, messages: yield* log.messages, length: (yield* log.events).length }
      }))
      const ctx = yield* Layer.build(
        agentOver([ScriptedModel.text("c")], { resume: true }).pipe(Layer.provide(Layer.succeedContext(storeCtx)))
      )
      const log = Context.get(ctx, SessionLog)
      expect(yield* log.surface).toStrictEqual(first.surface)
      expect(yield* log.messages).toStrictEqual(first.messages)
      expect(log.firstLiveSeq).toBe(first.length)
      expect(yield* Context.get(ctx, Inbox).idState(asId("S"))).toStrictEqual(Option.some("entered"))
      const driver = Context.get(ctx, Driver)
      yield* driver.followup(user("C"))
      yield* driver.whenIdle
      const reqs = yield* Effect.provide(requests, ctx)
      expect(reqs.at(-1)!.messages.map(token)).toStrictEqual(["A", "S", "done", "B", "b", "C"])
      expect(checkLog(yield* log.events, { closed: true })).toStrictEqual([])
    }))

  it.scoped("6.7/6.6: a fork at a boundary before the replacement restores full detail; a fork after it keeps the summary", () =>
    Effect.gen(function*() {
      const storeCtx = yield* Layer.build(SessionStore.layerMemory)
      const boundary = yield* Effect.scoped(Effect.gen(function*() {
        const ctx = yield* Layer.build(
          agentOver(toolScript, { tools: [echo] }).pipe(Layer.provide(Layer.succeedContext(storeCtx)))
        )
        yield* Effect.provide(runTwoTurns, ctx)
        const log = Context.get(ctx, SessionLog)
        const surface = yield* log.surface
        const event = yield* log.append(replacement(summary("S"), surface[0]!, surface[3]!, surface.slice(0, 4)))
        return event.seq
      }))
      const before = yield* Effect.provide(
        forkSession({ source: SessionId.make("s"), boundary: boundary - 1, childId: SessionId.make("full") }),
        storeCtx
      )
      const after = yield* Effect.provide(
        forkSession({ source: SessionId.make("s"), boundary, childId: SessionId.make("short") }),
        storeCtx
      )
      const open = (id: string) =>
        Effect.map(
          Layer.build(
            agentOver([], { resume: true, sessionId: id }).pipe(Layer.provide(Layer.succeedContext(storeCtx)))
          ),
          (ctx) => Context.get(ctx, SessionLog)
        )
      const full = yield* open(before)
      expect((yield* full.messages).map(token)).toStrictEqual(["A", "tool-call c1", "tool-result c1", "done", "B", "b"])
      const short = yield* open(after)
      expect((yield* short.messages).map(token)).toStrictEqual(["S", "B", "b"])
      expect(yield* short.surface).toStrictEqual([boundary, ...(yield* full.surface).slice(4)])
    }))
})

describe("3.9 / 5.2 / 5.1 identity and checking modes around replacements", () => {
  agentTest(
    "3.9: a replacement reusing an id claimed by a blocked turn fails DuplicateMessage {state: claimed}",
    scenario(toolScript, { tools: [echo] }),
    function*({ driver, log }) {
      yield* runTwoTurns
      yield* (yield* PreStep).register(() => Effect.succeed(PreStepDecision.reject("no")))
      yield* driver.followup(user("X"))
      yield* driver.whenIdle
      expect(yield* (yield* Inbox).idState(asId("X"))).toStrictEqual(Option.some("claimed"))
      const surface = yield* log.surface
      const length = (yield* log.events).length
      const error = yield* Effect.flip(log.append(replacement(summary("X"), surface[4]!, surface[4]!, [surface[4]!])))
      expect(error).toBeInstanceOf(DuplicateMessage)
      expect(error).toMatchObject({ id: "X", state: "claimed" })
      expect((yield* log.events).length).toBe(length)
    }
  )

  agentTest(
    "3.9: with invariants off a replacement with a known id still fails DuplicateMessage; A7 still refuses a bad range",
    scenario(toolScript, { tools: [echo], agent: { invariants: "off" } }),
    function*({ log }) {
      yield* runTwoTurns
      const surface = yield* log.surface
      const length = (yield* log.events).length
      const dup = yield* Effect.flip(log.append(replacement(summary("A"), surface[4]!, surface[4]!, [surface[4]!])))
      expect(dup).toMatchObject({ _tag: "DuplicateMessage", id: "A", state: "entered" })
      const split = yield* Effect.flip(
        log.append(replacement(summary("S"), surface[0]!, surface[1]!, [surface[0]!, surface[1]!]))
      )
      expect(split).toBeInstanceOf(InvalidEvent)
      expect((yield* log.events).length).toBe(length)
    }
  )

  it.scoped("5.2/6.4: a stored replacement with a known id (R9) fails resume with MalformedLog at its seq when checking, and loads when off", () =>
    Effect.gen(function*() {
      const b = twoTurns()
      b.umr(summary("B"), 4, 22, [4, 13, 15, 22])
      expect(found(b.events)).toStrictEqual([{ seq: b.last, rule: "R9" }])
      const error = failureOf(yield* Effect.exit(resumeOver(b.events)))
      expect(error).toBeInstanceOf(MalformedLog)
      expect(error).toMatchObject({ seq: b.last })
      const storeCtx = yield* Layer.build(SessionStore.layerMemory)
      yield* Context.get(storeCtx, SessionStore).create({
        formatVersion: 1,
        sessionId: SessionId.make("off"),
        createdAt: 0,
        seedLength: 0
      }, b.events)
      const ctx = yield* Layer.build(
        agentOver([], { resume: true, sessionId: "off", agent: { invariants: "off" } }).pipe(
          Layer.provide(Layer.succeedContext(storeCtx))
        )
      )
      expect((yield* Context.get(ctx, SessionLog).messages).map(token)).toStrictEqual(["B", "B", "b"])
    }).pipe(Effect.provide(SessionStore.layerMemory)))

  it.scoped("5.2 R6/6.4: an unclosed null bracket is abandoned by the resume end-seed; a new bracket then opens in maintenance", () =>
    Effect.gen(function*() {
      const b = twoTurns()
      b.comp("start", null)
      const ctx = yield* resumeOver(b.events)
      const log = Context.get(ctx, SessionLog)
      const driver = Context.get(ctx, Driver)
      const all = yield* log.events
      expect(all.at(-1)!.type).toBe("session/end-seed")
      const start = yield* driver.runMaintenance(log.append({ type: "compaction/start", data: { turn: null } }))
      expect(start.seq).toBe(all.length)
      const stray = yield* Effect.flip(log.append({ type: "compaction/start", data: { turn: null } }))
      expect(stray).toBeInstanceOf(InvalidEvent)
      yield* log.append({ type: "compaction/end", data: { turn: null } })
      const endAgain = yield* Effect.flip(log.append({ type: "compaction/end", data: { turn: null } }))
      expect(endAgain).toMatchObject({ _tag: "InvalidEvent", rule: "R6" })
      expect(checkLog(yield* log.events, { closed: true })).toStrictEqual([])
    }).pipe(Effect.provide(SessionStore.layerMemory)))

  agentTest(
    "8.5: SessionLog.append refuses an appended or surfaceOp-less user/message and a replacing assistant/message as reserved",
    scenario(toolScript, { tools: [echo] }),
    function*({ log }) {
      yield* runTwoTurns
      const length = (yield* log.events).length
      const all = yield* log.events
      const am = all.find((e) => e.type === "assistant/message")!
      const inputs = [
        { type: "user/message", data: summary("S"), surfaceOp: "append" as const },
        { type: "user/message", data: summary("S") },
        {
          type: "assistant/message",
          data: am.data,
          surfaceOp: { op: "replace" as const, start: am.seq, end: am.seq },
          sourceEventSeqs: [am.seq]
        }
      ]
      for (const input of inputs) {
        expect(yield* Effect.flip(log.append(input))).toMatchObject({ _tag: "InvalidEvent", reason: "reserved" })
      }
      expect((yield* log.events).length).toBe(length)
    }
  )
})

describe("2.1 / 2.8 / 6.5 replacement snapshots and repaired surfaces", () => {
  agentTest(
    "2.1/A3: a replacement's data and metadata are stored as deep-frozen snapshots; later mutation has no effect",
    scenario(toolScript, { tools: [echo] }),
    function*({ log }) {
      yield* runTwoTurns
      const surface = yield* log.surface
      const data = {
        id: "S",
        role: "user",
        content: [{ type: "text", text: "sum" }],
        source: { kind: "compaction", n: [1] }
      }
      const op = { op: "replace" as const, start: surface[0]!, end: surface[3]! }
      const cites = surface.slice(0, 4)
      const event = yield* log.append({ type: "user/message", data, surfaceOp: op, sourceEventSeqs: cites })
      data.content[0]!.text = "changed"
      data.source.n.push(2)
      op.end = surface[4]!
      cites.push(0)
      const stored = (yield* log.events)[event.seq]!
      expect(stored.data).toStrictEqual({
        id: "S",
        role: "user",
        content: [{ type: "text", text: "sum" }],
        source: { kind: "compaction", n: [1] }
      })
      expect(meta(stored)!.surfaceOp).toStrictEqual({ op: "replace", start: surface[0], end: surface[3] })
      expect(meta(stored)!.sourceEventSeqs).toStrictEqual(surface.slice(0, 4))
      expect(
        Object.isFrozen(stored.data) && Object.isFrozen(meta(stored)!.surfaceOp) &&
          Object.isFrozen(meta(stored)!.sourceEventSeqs)
      ).toBe(true)
      expect((yield* log.messages)[0]).toStrictEqual(stored.data)
    }
  )

  agentTest(
    "3.9: a replacement user/message with a reserved interrupted-tool-result- id is InvalidEvent; the id stays unknown",
    scenario(toolScript, { tools: [echo] }),
    function*({ log }) {
      yield* runTwoTurns
      const surface = yield* log.surface
      const length = (yield* log.events).length
      const error = yield* Effect.flip(
        log.append(replacement(summary("interrupted-tool-result-c1-3"), surface[4]!, surface[4]!, [surface[4]!]))
      )
      expect(error).toBeInstanceOf(InvalidEvent)
      expect((yield* log.events).length).toBe(length)
      expect(yield* (yield* Inbox).idState(asId("interrupted-tool-result-c1-3"))).toStrictEqual(Option.none())
    }
  )

  it.scoped("6.5/2.8: repair results join the surface; a later compaction may shadow the call with both repair results", () =>
    Effect.gen(function*() {
      const b = new SurfaceLog()
      b.ins("next-turn", [u("A")]).ts(1).clm("next-turn", 1).ss(1, 1).um(u("A")).rh().answer(1, 1, "go", [c1, c2]).tc(
        1,
        1,
        "c1"
      )
      const amSeq = b.last - 1
      const tcSeq = b.last
      const stored = b.events.length
      const ctx = yield* resumeOver(b.events)
      const log = Context.get(ctx, SessionLog)
      const driver = Context.get(ctx, Driver)
      const all = yield* log.events
      // TR?(c1) TR(c2) SE TE(interrupted) ES
      expect(all.slice(stored).map((e) => e.type)).toStrictEqual([
        "tool/result",
        "tool/result",
        "step/end",
        "turn/end",
        "session/end-seed"
      ])
      expect(meta(all[stored])!.sourceEventSeqs).toStrictEqual([tcSeq])
      expect(meta(all[stored + 1])!.sourceEventSeqs).toBeUndefined()
      expect(yield* log.surface).toStrictEqual([4, amSeq, stored, stored + 1])
      expect(yield* log.messages).toStrictEqual(deriveMessages(all))
      // shadowing the call and only one of its results is refused
      expect(
        yield* Effect.flip(driver.runMaintenance(log.append(replacement(summary("S"), amSeq, stored, [amSeq, stored]))))
      ).toBeInstanceOf(InvalidEvent)
      const event = yield* driver.runMaintenance(
        log.append(replacement(summary("S"), 4, stored + 1, [4, amSeq, stored, stored + 1]))
      )
      expect(yield* log.surface).toStrictEqual([event.seq])
      const repairId = `interrupted-tool-result-c1-${stored}`
      expect((all[stored]!.data as { message: { id: string } }).message.id).toBe(repairId)
      expect(yield* Context.get(ctx, Inbox).idState(asId(repairId))).toStrictEqual(Option.some("entered"))
      expect(checkLog(yield* log.events, { closed: true })).toStrictEqual([])
    }).pipe(Effect.provide(SessionStore.layerMemory)))
})

describe("5.2 R6 on live compaction appends", () => {
  agentTest(
    "5.2 R6: while idle compaction/start {turn: 1} fails InvalidEvent {rule: R6}; compaction/end {turn: null} without a bracket too",
    scenario(toolScript, { tools: [echo] }),
    function*({ log }) {
      yield* runTwoTurns
      const length = (yield* log.events).length
      expect(yield* Effect.flip(log.append({ type: "compaction/start", data: { turn: 1 } }))).toMatchObject({
        _tag: "InvalidEvent",
        rule: "R6"
      })
      expect(yield* Effect.flip(log.append({ type: "compaction/end", data: { turn: null } }))).toMatchObject({
        _tag: "InvalidEvent",
        rule: "R6"
      })
      expect(yield* Effect.flip(log.append({ type: "compaction/start", data: { turn: null } }))).toBeInstanceOf(
        InvalidEvent
      )
      expect((yield* log.events).length).toBe(length)
    }
  )

  agentTest(
    "5.2 R6: inside a turn compaction/summary {turn: null} and compaction/start {turn: other} fail InvalidEvent {rule: R6}; {turn: n} brackets are accepted",
    scenario([ScriptedModel.text("a")]),
    function*({ driver, log }) {
      const seen: Array<unknown> = []
      yield* (yield* PreStep).register((input, next) =>
        Effect.gen(function*() {
          seen.push(yield* Effect.flip(log.append({ type: "compaction/summary", data: { turn: null } })))
          seen.push(yield* Effect.flip(log.append({ type: "compaction/start", data: { turn: input.turn + 1 } })))
          yield* log.append({ type: "compaction/start", data: { turn: input.turn, why: "auto" } })
          yield* log.append({ type: "compaction/end", data: { turn: input.turn } })
          return yield* next()
        })
      )
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect(seen[0]).toMatchObject({ _tag: "InvalidEvent", rule: "R6" })
      expect(seen[1]).toMatchObject({ _tag: "InvalidEvent", rule: "R6" })
      const types = (yield* log.events).map((e) => e.type)
      expect(types.filter((t) => t.startsWith("compaction/"))).toStrictEqual(["compaction/start", "compaction/end"])
      expect(checkLog(yield* log.events, { closed: true })).toStrictEqual([])
    }
  )
})

describe("SPEC 5.2 R6 on live appends", () => {
  agentTest(
    "5.2 R6: compaction/start {turn: null} appended inside an open turn fails InvalidEvent {rule: \"R6\"}",
    scenario([ScriptedModel.text("a")]),
    function*({ driver, log }) {
      const seen: Array<unknown> = []
      yield* (yield* PreStep).register((_input, next) =>
        Effect.gen(function*() {
          seen.push(yield* Effect.flip(log.append({ type: "compaction/start", data: { turn: null } })))
          return yield* next()
        })
      )
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      // the same event in a hand-built log is an R6 violation at its seq
      const all = yield* events
      const probe = [...all.slice(0, 3), {
        type: "compaction/start",
        seq: 3,
        time: 0,
        data: { turn: null }
      }] as typeof all
      expect(checkLog(probe).map((v) => v.rule)).toStrictEqual(["R6"])
      expect(seen[0]).toMatchObject({ _tag: "InvalidEvent", type: "compaction/start", rule: "R6" })
    }
  )
})

describe("§2.8 derived history", () => {
  it("2.8: deriveMessages returns a fresh array of frozen values and leaves the caller's events unfrozen", () => {
    const m = { id: "u1", role: "user", content: [{ type: "text", text: "hi" }], source: { kind: "user" } }
    const es = [ev(0, "user/message", m, { surfaceOp: "append" })]
    const a = deriveMessages(es)
    const b = deriveMessages(es)
    expect(a).toEqual([m])
    expect(a).not.toBe(b)
    expect(Object.isFrozen(a[0])).toBe(true)
    expect(Object.isFrozen((a[0] as any).content[0])).toBe(true)
    expect(Object.isFrozen(m)).toBe(false)
    expect(Object.isFrozen(m.content)).toBe(false)
  })
})

describe("§2.8/§6.7 replacement ranges and the open step", () => {
  const summary = (id: string) => userMessage({ id, text: "summary", source: { kind: "compaction" } })

  agentTest(
    "2.8/A7: during an open step a range of earlier nodes may be replaced; a range holding the step's entered message is refused",
    scenario([ScriptedModel.text("a"), ScriptedModel.text("b")]),
    function*({ driver, log, hooks }) {
      const outcomes: Array<string> = []
      yield* hooks.onRequest((input, next) =>
        input.turn === 2
          ? Effect.gen(function*() {
            const surface = yield* log.surface
            // surface = [UM(A), AM(a), UM(B)]; UM(B) belongs to the open step.
            outcomes.push(
              outcomeReason(
                yield* Effect.exit(
                  log.append(replacement(summary("S2"), surface[1]!, surface[2]!, [surface[1]!, surface[2]!]))
                )
              )
            )
            outcomes.push(
              outcomeReason(
                yield* Effect.exit(
                  log.append(replacement(summary("S1"), surface[0]!, surface[1]!, [surface[0]!, surface[1]!]))
                )
              )
            )
            return yield* next()
          })
          : next()
      )
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      yield* driver.followup(user("B"))
      yield* driver.whenIdle
      expect(outcomes[0]).toMatch(/^InvalidEvent/)
      expect(outcomes[1]).toBe("ok")
      expect((yield* requests).map((r) => r.messages.map(token))).toEqual([["A"], ["summary", "B"]])
      expect((yield* log.messages).map(token)).toEqual(["summary", "B", "b"])
      expect((yield* events).filter((e) => e.type === "user/message").map((e) => (e.data as UserMessage).id)).toEqual([
        "A",
        "B",
        "S1"
      ])
      expect(yield* closeOut).toEqual([])
    }
  )
})

describe("2.1 / 2.8 envelope and surface metadata of loop events", () => {
  const quick = Tool.make("quick", { description: "", parameters: empty, execute: () => Effect.succeed("ok") })
  agentTest(
    "2.1: loop events carry only envelope keys; surfaceOp only on message events; no ignorable; loop UMs cite nothing",
    scenario(
      [ScriptedModel.response({ toolCalls: [{ id: "c1", name: "quick", arguments: {} }] }), ScriptedModel.text("done")],
      { tools: [quick] }
    ),
    function*({ driver }) {
      yield* driver.inject(plugin("C"))
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      const es = yield* events
      for (const e of es) {
        for (const key of Object.keys(e)) expect(ENVELOPE.has(key), `${e.type}.${key}`).toBe(true)
        expect("ignorable" in e, e.type).toBe(false)
        expect("surfaceOp" in e, e.type).toBe(MESSAGE_TYPES.has(e.type))
        if (e.type === "user/message") expect("sourceEventSeqs" in e).toBe(false)
        expect(Object.isFrozen(e) && Object.isFrozen(e.data)).toBe(true)
      }
      const am = es.find((e) => e.type === "assistant/message")!
      const finish = es.find((e) => e.type === "assistant/chunk" && (e.data as any).chunk.type === "finish")!
      expect((am as any).sourceEventSeqs).toContain(finish.seq)
      expect(yield* closeOut).toEqual([])
    }
  )

  agentTest(
    "4.5: the assembler drops empty text blocks, keeps reasoning, and puts replayState in the source; requests are frozen and omit absent limits",
    scenario([
      ScriptedModel.chunks([
        { type: "block-start", index: 0, block: "reasoning" },
        { type: "reasoning-delta", index: 0, text: "hmm" },
        { type: "block-end", index: 0 },
        { type: "block-start", index: 1, block: "text" },
        { type: "text-delta", index: 1, text: "   " },
        { type: "block-end", index: 1 },
        { type: "block-start", index: 2, block: "text" },
        { type: "text-delta", index: 2, text: "" },
        { type: "block-end", index: 2 },
        { type: "block-start", index: 3, block: "text" },
        { type: "text-delta", index: 3, text: "answer" },
        { type: "block-end", index: 3 },
        { type: "replay-state", state: { token: 7 } },
        { type: "finish", finish: { kind: "stop" } }
      ])
    ]),
    function*({ driver, log }) {
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      const am = (yield* dataOfType("assistant/message"))[0]!
      // Only empty text is dropped on success (a whitespace block stays; 7.4's non-whitespace rule is for prefixes).
      expect(am.message.content).toEqual([{ type: "reasoning", text: "hmm" }, { type: "text", text: "   " }, {
        type: "text",
        text: "answer"
      }])
      expect(am.message.source).toEqual({ kind: "model", provider: "p", model: "m", replayState: { token: 7 } })
      expect(am.message.id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/)
      const req = (yield* requests)[0]!
      expect(Object.isFrozen(req)).toBe(true)
      expect("system" in req).toBe(false)
      expect("maxTokens" in req).toBe(false)
      expect(req.messages).toEqual(deriveUpTo(yield* log.events))
    }
  )
})
