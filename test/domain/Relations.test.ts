/**
 * The relational rules of SPEC 5.2 through `checkLog`: hand-built logs that break each rule, and a real
 * log that keeps them all.
 */
import { afterAll, describe, expect, it } from "@effect/vitest"
import { Cause, Context, Duration, Effect, Exit, Layer, Option, Schema, Scope } from "effect"
import { checkLog, deriveMessages, Driver, DuplicateMessage, Hooks, Inbox, MessageId, RequestErrorAction, ScriptedModel, SessionId, SessionLog, SessionStore, Tool, userMessage } from "../../src/index.js"
import { agentOver, scenario, user } from "../agent/harness.js"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import type { InboxTarget, SessionEvent, UserMessage } from "../../src/index.js"

// A tiny log builder: seq = index, time = 0. -----------------------------------------------------

type Extra = { readonly surfaceOp?: unknown; readonly sourceEventSeqs?: ReadonlyArray<number>; readonly ignorable?: true }

class L {
  readonly events: Array<SessionEvent> = []
  get last(): number {
    return this.events.length - 1
  }
  push(type: string, data: unknown, extra: Extra = {}): this {
    this.events.push({ type, seq: this.events.length, time: 0, data, ...extra } as unknown as SessionEvent)
    return this
  }
  ins(target: InboxTarget, start: number, inserted: ReadonlyArray<UserMessage>) {
    return this.push("agent/inbox/spliced", { target, start, inserted })
  }
  clm(target: InboxTarget, n: number) {
    return this.push("agent/inbox/spliced", { target, start: 0, removedCount: n, inserted: [] })
  }
  ts(turn: number) {
    return this.push("turn/start", { turn })
  }
  te(turn: number, reason: unknown = { kind: "completed" }) {
    return this.push("turn/end", { turn, reason })
  }
  ss(turn: number, step: number) {
    return this.push("step/start", { turn, step })
  }
  se(turn: number, step: number) {
    return this.push("step/end", { turn, step })
  }
  um(m: UserMessage) {
    return this.push("user/message", m, { surfaceOp: "append" })
  }
  rh() {
    return this.push("request/header", { header: { provider: "p", model: "m", tools: [] }, reason: "initial" })
  }
  chunk(turn: number, step: number, attempt: number, chunk: unknown) {
    return this.push("assistant/chunk", { turn, step, attempt, chunk })
  }
  /** block-start, text-delta, block-end, finish(kind), assistant/message citing exactly those chunks. */
  answer(turn: number, step: number, text: string, calls: ReadonlyArray<{ id: string; name: string; arguments: string }> = [], finish = "stop", attempt = 1) {
    const first = this.events.length
    this.chunk(turn, step, attempt, { type: "block-start", index: 0, block: "text" })
    this.chunk(turn, step, attempt, { type: "text-delta", index: 0, text })
    this.chunk(turn, step, attempt, { type: "block-end", index: 0 })
    this.chunk(turn, step, attempt, { type: "finish", finish: { kind: finish } })
    const cites = [first, first + 1, first + 2, first + 3]
    return this.push("assistant/message", {
      turn,
      step,
      attempt,
      message: {
        id: `am-${turn}-${step}`,
        role: "assistant",
        content: [{ type: "text", text }, ...calls.map((c) => ({ type: "tool-call", ...c }))],
        source: { kind: "model", provider: "p", model: "m" }
      }
    }, { surfaceOp: "append", sourceEventSeqs: cites })
  }
  tc(turn: number, step: number, callId: string, name = "t", args = "{}") {
    return this.push("tool/call", { turn, step, callId, name, arguments: args })
  }
  tr(turn: number, step: number, callId: string, cites: ReadonlyArray<number> | undefined, error?: { name: string; code: string }) {
    return this.push("tool/result", {
      turn,
      step,
      message: {
        id: `tr-${callId}`,
        role: "user",
        content: [{ type: "tool-result", toolCallId: callId, isError: error !== undefined, content: [{ type: "text", text: "r" }] }],
        source: { kind: "tool", callId }
      },
      ...(error !== undefined ? { error } : {})
    }, { surfaceOp: "append", ...(cites !== undefined ? { sourceEventSeqs: cites } : {}) })
  }
  es() {
    return this.push("session/end-seed", {})
  }
}

const u = (id: string) => userMessage({ id, text: id })
const A = u("A")
const B = u("B")
const C = u("C")
const P = u("P")

const found = (events: ReadonlyArray<SessionEvent>, options?: { readonly seedLength?: number; readonly closed?: boolean }) =>
  checkLog(events, options).map(({ rule, seq }) => ({ seq, rule }))

/** `⟨INS(nt,0,[m]) TS(turn) CLM(nt,0,1)⟩ ⟨SS(turn,1) UM(m)⟩ RH` */
const opening = (b: L, m: UserMessage, turn = 1, header = true) => {
  b.ins("next-turn", 0, [m]).ts(turn).clm("next-turn", 1).ss(turn, 1).um(m)
  return header ? b.rh() : b
}
/** A whole one-step text turn. */
const textTurn = (b: L, m: UserMessage, turn = 1) => opening(b, m, turn, turn === 1).answer(turn, 1, "ok").se(turn, 1).te(turn)

// A log builder: seq = index, time = 0. ------------------------------------------------------------

type ExtraSurface = { readonly surfaceOp?: unknown; readonly sourceEventSeqs?: ReadonlyArray<number>; readonly ignorable?: true }
type Call = { readonly id: string; readonly name: string; readonly arguments: string }

class LSurface {
  readonly events: Array<SessionEvent> = []
  get last(): number {
    return this.events.length - 1
  }
  push(type: string, data: unknown, extra: ExtraSurface = {}): this {
    this.events.push({ type, seq: this.events.length, time: 0, data, ...extra } as unknown as SessionEvent)
    return this
  }
  ins(target: InboxTarget, inserted: ReadonlyArray<UserMessage>, start = 0) {
    return this.push("agent/inbox/spliced", { target, start, inserted })
  }
  clm(target: InboxTarget, n: number) {
    return this.push("agent/inbox/spliced", { target, start: 0, removedCount: n, inserted: [] })
  }
  can(target: InboxTarget, start: number, n: number) {
    return this.push("agent/inbox/spliced", { target, start, removedCount: n, inserted: [], outcome: "canceled" })
  }
  ts(turn: number) {
    return this.push("turn/start", { turn })
  }
  te(turn: number, reason: unknown = { kind: "completed" }) {
    return this.push("turn/end", { turn, reason })
  }
  ss(turn: number, step: number) {
    return this.push("step/start", { turn, step })
  }
  se(turn: number, step: number) {
    return this.push("step/end", { turn, step })
  }
  um(m: UserMessage) {
    return this.push("user/message", m, { surfaceOp: "append" })
  }
  /** A replacement user/message (compaction). */
  umr(m: UserMessage, start: number, end: number, cites: ReadonlyArray<number>) {
    return this.push("user/message", m, { surfaceOp: { op: "replace", start, end }, sourceEventSeqs: cites })
  }
  rh() {
    return this.push("request/header", { header: { provider: "p", model: "m", tools: [] }, reason: "initial" })
  }
  chunk(turn: number, step: number, chunk: unknown) {
    return this.push("assistant/chunk", { turn, step, attempt: 1, chunk })
  }
  /** Chunks then an assistant/message citing them; `text` "" gives an empty (anchor) message. */
  answer(turn: number, step: number, text: string, calls: ReadonlyArray<Call> = [], id = `am-${turn}-${step}`) {
    const first = this.events.length
    const cites: Array<number> = []
    if (text !== "") {
      this.chunk(turn, step, { type: "block-start", index: 0, block: "text" })
      this.chunk(turn, step, { type: "text-delta", index: 0, text })
      this.chunk(turn, step, { type: "block-end", index: 0 })
    }
    calls.forEach((c, i) => {
      this.chunk(turn, step, { type: "block-start", index: i + 1, block: "tool-call", id: c.id, name: c.name })
      this.chunk(turn, step, { type: "tool-call-delta", index: i + 1, arguments: c.arguments })
      this.chunk(turn, step, { type: "block-end", index: i + 1 })
    })
    this.chunk(turn, step, { type: "finish", finish: { kind: "stop" } })
    for (let s = first; s < this.events.length; s++) cites.push(s)
    return this.push("assistant/message", {
      turn,
      step,
      attempt: 1,
      message: {
        id,
        role: "assistant",
        content: [...(text !== "" ? [{ type: "text", text }] : []), ...calls.map((c) => ({ type: "tool-call", ...c }))],
        source: { kind: "model", provider: "p", model: "m" }
      }
    }, { surfaceOp: "append", sourceEventSeqs: cites })
  }
  tc(turn: number, step: number, callId: string) {
    return this.push("tool/call", { turn, step, callId, name: "t", arguments: "{}" })
  }
  trMessage(callId: string, text: string, id = `tr-${callId}`) {
    return {
      id,
      role: "user",
      content: [{ type: "tool-result", toolCallId: callId, isError: false, content: [{ type: "text", text }] }],
      source: { kind: "tool", callId }
    }
  }
  tr(turn: number, step: number, callId: string, text = "r") {
    let callSeq = -1
    this.events.forEach((e, i) => {
      if (e.type === "tool/call" && (e.data as { callId: string }).callId === callId) callSeq = i
    })
    return this.push("tool/result", { turn, step, message: this.trMessage(callId, text) }, { surfaceOp: "append", sourceEventSeqs: [callSeq] })
  }
  /** A replacement tool/result (pruning) naming (turn, step). */
  trr(turn: number, step: number, callId: string, text: string, at: number, cites: ReadonlyArray<number> = [at], id = `tr-${callId}`) {
    return this.push("tool/result", { turn, step, message: this.trMessage(callId, text, id) }, {
      surfaceOp: { op: "replace", start: at, end: at },
      sourceEventSeqs: cites
    })
  }
  comp(kind: "start" | "summary" | "end", turn: number | null, extra: Record<string, unknown> = {}) {
    return this.push(`compaction/${kind}`, { turn, ...extra })
  }
  es() {
    return this.push("session/end-seed", {})
  }
}

const uSurface = (id: string, text = id) => userMessage({ id, text })
const summary = (id: string, text = id) => userMessage({ id, text, source: { kind: "compaction", by: "audit" } })
const c1: Call = { id: "c1", name: "t", arguments: "{}" }

/**
 * Turn 1 with a tool round trip and turn 2 with a text answer.
 * seqs: 0 INS, 1 TS, 2 CLM, 3 SS, 4 UM(A), 5 RH, 6-12 chunks, 13 AM(call c1), 14 TC, 15 TR(c1), 16 SE,
 *       17 SS(1,2), 18-21 chunks, 22 AM(done), 23 SE, 24 TE, 25 INS(B), 26 TS(2), 27 CLM, 28 SS, 29 UM(B),
 *       30-33 chunks, 34 AM(b), 35 SE, 36 TE
 */
const twoTurns = () => {
  const b = new LSurface()
  b.ins("next-turn", [uSurface("A")]).ts(1).clm("next-turn", 1).ss(1, 1).um(uSurface("A")).rh()
  b.answer(1, 1, "call", [c1]).tc(1, 1, "c1").tr(1, 1, "c1", "out").se(1, 1)
  b.ss(1, 2).answer(1, 2, "done").se(1, 2).te(1)
  b.ins("next-turn", [uSurface("B")]).ts(2).clm("next-turn", 1).ss(2, 1).um(uSurface("B")).answer(2, 1, "b").se(2, 1).te(2)
  return b
}

const dir = fs.mkdtempSync(path.join(os.tmpdir(), "tiller-relations-"))
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }))

const sid = (s: string) => SessionId.make(s)
const header = (id: string, seedLength = 0) => ({ formatVersion: 1, sessionId: sid(id), createdAt: 0, seedLength })

/** A memory store built once in the test scope, and a runner of agents over it. */
const withStore = Effect.map(Layer.build(SessionStore.layerMemory), (storeCtx) => {
  const store = Context.get(storeCtx, SessionStore)
  const run = <A, E, R>(
    script: Parameters<typeof agentOver>[0],
    program: Effect.Effect<A, E, R>,
    options: Parameters<typeof agentOver>[1] = {}
  ) =>
    Effect.scoped(
      Effect.provide(
        program as Effect.Effect<A, E, Exclude<R, Scope.Scope> | Scope.Scope>,
        agentOver(script, options).pipe(Layer.provide(Layer.succeedContext(storeCtx)))
      )
    ) as Effect.Effect<A, E | Layer.Layer.Error<ReturnType<typeof agentOver>>, never>
  return { store, run }
})

const outcome = (exit: Exit.Exit<unknown, unknown>): string => {
  if (Exit.isSuccess(exit)) return "ok"
  const failure = Cause.failureOption(exit.cause)
  if (Option.isNone(failure)) return `defect: ${Cause.pretty(exit.cause)}`
  const f = failure.value as { readonly _tag?: string; readonly seq?: number }
  return `${f._tag}@${f.seq}`
}

const echo = Tool.make("echo", {
  description: "echoes",
  parameters: Schema.Struct({ x: Schema.Number }),
  execute: (p) => Effect.succeed(`got ${p.x}`)
})

const richScript = () => [
  ScriptedModel.response({
    reasoning: "think",
    text: "calling",
    toolCalls: [{ id: "c1", name: "echo", arguments: { x: 1 } }],
    usage: { inputTokens: 3, outputTokens: 4 }
  }),
  ScriptedModel.text("done"),
  ScriptedModel.fail({ message: "busy", code: "RATE_LIMIT", status: 429 }),
  ScriptedModel.text("second", { usage: { inputTokens: 1, outputTokens: 1, totalTokens: 2 } })
]

/**
 * A rich valid session: two turns (reasoning, text and a tool call with its result, usage, a
 * retried attempt), an ignorable extension event, a pruned tool result (TR~), and a maintenance
 * compaction whose summary replaces the first turn's history (UM~). Returns the in-memory log.
 *
 * seqs: 0 INS, 1 TS, 2 CLM, 3 SS, 4 UM(A), 5 RH, 6-16 chunks, 17 AM, 18 TC, 19 TR, 20 SE, 21 SS,
 * 22-25 chunks, 26 AM, 27 SE, 28 TE, 29 x/note, 30 TR~, 31 INS, 32 TS, 33 CLM, 34 SS, 35 UM(B),
 * 36 chunk (finish error), 37 RT, 38-42 chunks, 43 AM, 44 SE, 45 TE, 46-47 compaction, 48 UM~(S),
 * 49 compaction/end.
 */
const richProgram = Effect.gen(function*() {
  const driver = yield* Driver
  const log = yield* SessionLog
  const hooks = yield* Hooks
  yield* hooks.onRequestError(() => Effect.succeed(RequestErrorAction.retry(Duration.zero)))
  yield* driver.followup(user("A"))
  yield* driver.whenIdle
  yield* log.append({ type: "x/note", data: { k: [1, "two", null, true] }, ignorable: true })
  const tr = (yield* log.events).find((e) => e.type === "tool/result")!
  const d = tr.data as any
  yield* log.append({
    type: "tool/result",
    data: { ...d, message: { ...d.message, content: [{ ...d.message.content[0], content: [{ type: "text", text: "pruned" }] }] } },
    surfaceOp: { op: "replace", start: tr.seq, end: tr.seq },
    sourceEventSeqs: [tr.seq]
  })
  yield* driver.followup(user("B"))
  yield* driver.whenIdle
  yield* driver.runMaintenance(Effect.gen(function*() {
    const surface = yield* log.surface
    const start = yield* log.append({ type: "compaction/start", data: { turn: null, by: "audit" } })
    yield* log.append({ type: "compaction/summary", data: { turn: null, text: "sum" } })
    yield* log.append({
      type: "user/message",
      data: userMessage({ id: "S", text: "summary", source: { kind: "compaction", upTo: surface[3]! } }),
      surfaceOp: { op: "replace", start: surface[0]!, end: surface[3]! },
      sourceEventSeqs: [...surface.slice(0, 4), start.seq]
    })
    yield* log.append({ type: "compaction/end", data: { turn: null } })
  }))
  yield* log.flush
  return yield* log.events
})

const richLog = Effect.gen(function*() {
  const { run } = yield* withStore
  return yield* run(richScript(), richProgram, { tools: [echo] })
})

type Mut = (e: any) => void
/** A JSON copy of the log with `f` applied to the copy of event `seq` (each event frozen at its top, so the memory store keeps it verbatim). */
const mutate = (es: ReadonlyArray<SessionEvent>, seq: number, f: Mut): ReadonlyArray<SessionEvent> =>
  es.map((e) => {
    const copy = JSON.parse(JSON.stringify(e))
    if (e.seq === seq) f(copy)
    return Object.freeze(copy)
  })

// 5.2 checkLog --------------------------------------------------------------------------------

describe("SPEC 5.2 checkLog rule by rule", () => {
  it("5.2 R7: a turn/start followed only by CLM(ns) (no CLM(nt)) is valid ('or only one of them')", () => {
    const b = new L().ins("next-step", 0, [C]).ts(1).clm("next-step", 1).ss(1, 1).um(C).rh().answer(1, 1, "x").se(1, 1).te(1)
    expect(found(b.events)).toStrictEqual([])
  })

  it("5.2 R7: a boundary CLM(ns) between step/end and turn/end is valid", () => {
    const b = opening(new L(), A).answer(1, 1, "x").ins("next-step", 0, [C]).se(1, 1).clm("next-step", 1).te(1)
    expect(found(b.events)).toStrictEqual([])
  })

  it("5.2 R7: CLM(ns) right after turn/end (outside a turn) is reported R7 at the claim", () => {
    const b = opening(new L(), A).answer(1, 1, "x").ins("next-step", 0, [C]).se(1, 1).te(1).clm("next-step", 1)
    expect(found(b.events)).toStrictEqual([{ seq: b.last, rule: "R7" }])
  })

  it("5.2 R3: the first step of turn 2 must be step 1 (step numbering restarts per turn)", () => {
    const b = textTurn(new L(), A).ins("next-turn", 0, [B]).ts(2).clm("next-turn", 1).ss(2, 2)
    expect(found(b.events)).toStrictEqual([{ seq: b.last, rule: "R3" }])
    const ok = textTurn(new L(), A).ins("next-turn", 0, [B]).ts(2).clm("next-turn", 1).ss(2, 1).um(B).answer(2, 1, "y").se(2, 1).te(2)
    expect(found(ok.events)).toStrictEqual([])
  })

  it("5.2 R2: turn/end on an empty log (no turn ever opened) is R2 at seq 0", () => {
    const b = new L().te(1, { kind: "blocked" })
    expect(found(b.events)).toStrictEqual([{ seq: 0, rule: "R2" }])
  })

  it("5.2 R18/seedLength: the inbox is folded from seedLength, so a seed-pending item cannot be claimed after it", () => {
    const seed = textTurn(new L(), A).ins("next-turn", 0, [P])
    const seedLength = seed.events.length
    const b = seed.es().ts(2).clm("next-turn", 1)
    // Without a seed the same log is valid (P is pending).
    expect(found(b.events)).toStrictEqual([])
    const withSeed = found(b.events, { seedLength })
    expect(withSeed).toContainEqual({ seq: b.last, rule: "R18" })
    expect(withSeed.every((v) => v.seq === b.last)).toBe(true)
  })

  it("5.2 R9/seedLength: the known-id table is folded from 0, so re-inserting an id entered in the seed is R9", () => {
    const seed = textTurn(new L(), A)
    const seedLength = seed.events.length
    const b = seed.es().ins("next-turn", 0, [A])
    expect(found(b.events, { seedLength })).toStrictEqual([{ seq: b.last, rule: "R9" }])
  })

  it("5.2 R9/seedLength: an id still pending at the end of the seed stays known after it", () => {
    const seed = textTurn(new L(), A).ins("next-turn", 0, [P])
    const seedLength = seed.events.length
    const b = seed.es().ins("next-turn", 0, [P])
    expect(found(b.events, { seedLength })).toStrictEqual([{ seq: b.last, rule: "R9" }])
  })

  it("5.2 seedLength: splices inside the seed are not folded (an invalid seed splice is not R18) but later ones are", () => {
    const b = new L().ins("next-turn", 3, [A]).es().ins("next-turn", 1, [B])
    expect(found(b.events, { seedLength: 1 })).toStrictEqual([{ seq: 2, rule: "R18" }])
  })

  it("5.2 R19: an open final turn is fine without closed; closed: true adds exactly one R19 after the others", () => {
    const b = opening(new L(), A).answer(1, 1, "x").se(1, 1).chunk(1, 1, 1, { type: "block-end", index: 0 })
    const open = found(b.events)
    expect(open).toStrictEqual([{ seq: b.last, rule: "R5" }])
    const closed = found(b.events, { closed: true })
    expect(closed.slice(0, -1)).toStrictEqual(open)
    expect(closed[closed.length - 1]!.rule).toBe("R19")
    expect(closed.filter((v) => v.rule === "R19")).toHaveLength(1)
    // A balanced log with closed: true reports nothing.
    expect(found(textTurn(new L(), A).events, { closed: true })).toStrictEqual([])
    expect(found([], { closed: true })).toStrictEqual([])
  })

  it("5.2: violations carry the offending event's seq and come in seq order", () => {
    const b = textTurn(new L(), A)
    const r6 = b.push("compaction/summary", { turn: 1 }).last
    const r2 = b.te(1, { kind: "blocked" }).last
    const v = found(b.events)
    expect(v).toStrictEqual([{ seq: r6, rule: "R6" }, { seq: r2, rule: "R2" }])
    for (const x of checkLog(b.events)) expect(typeof x.message === "string" && x.message.length > 0).toBe(true)
  })

  it("5.2: checkLog is total: it never throws on malformed event data", () => {
    const bad: ReadonlyArray<ReadonlyArray<unknown>> = [
      [{ type: "turn/start", seq: 0, time: 0, data: null }],
      [{ type: "tool/result", seq: 0, time: 0, data: {}, surfaceOp: "append" }],
      [{ type: "agent/inbox/spliced", seq: 0, time: 0, data: { target: "nowhere" } }],
      [{ type: "assistant/message", seq: 0, time: 0, data: { turn: 1 }, surfaceOp: "append" }],
      [{ type: "user/message", seq: 0, time: 0, data: 5, surfaceOp: { op: "replace", start: 9, end: 1 } }],
      [{ type: "turn/end", seq: 0, time: 0, data: { turn: 1 } }],
      [{ type: "compaction/end", seq: 0, time: 0, data: [] }],
      [null, undefined, 3]
    ]
    for (const events of bad) {
      let result: unknown
      expect(() => {
        result = checkLog(events as unknown as ReadonlyArray<SessionEvent>, { closed: true })
      }, JSON.stringify(events)).not.toThrow()
      expect(Array.isArray(result)).toBe(true)
    }
  })

  it("5.2 R13: a TOOL_NOT_STARTED result that lacks a citation although its tool/call exists is R13", () => {
    const b = opening(new L(), A).answer(1, 1, "x", [{ id: "c1", name: "t", arguments: "{}" }]).tc(1, 1, "c1")
      .tr(1, 1, "c1", undefined, { name: "ToolNotStarted", code: "TOOL_NOT_STARTED" })
    expect(found(b.events)).toStrictEqual([{ seq: b.last, rule: "R13" }])
  })

  it("5.2 R13: a repair TOOL_NOT_STARTED result without tool/call and without citation is valid", () => {
    const b = opening(new L(), A).answer(1, 1, "x", [{ id: "c1", name: "t", arguments: "{}" }])
      .tr(1, 1, "c1", undefined, { name: "ToolNotStarted", code: "TOOL_NOT_STARTED" }).se(1, 1).te(1, { kind: "interrupted" })
    expect(found(b.events, { closed: true })).toStrictEqual([])
  })

  it("5.2 R10: an llm/retry after an `aborted` failure finish is accepted; the next attempt's chunks are attempt 2", () => {
    const failure = { message: "x", code: "NETWORK" }
    const b = opening(new L(), A)
      .chunk(1, 1, 1, { type: "finish", finish: { kind: "aborted", failure } })
      .push("llm/retry", { turn: 1, step: 1, attempt: 1, delayMs: 1000, failure })
      .answer(1, 1, "x", [], "stop", 2).se(1, 1).te(1)
    expect(found(b.events)).toStrictEqual([])
  })

  it("5.2 R16: reasons other than completed/max-tokens are not constrained by a max-tokens step", () => {
    for (const reason of [{ kind: "error", error: { message: "m", code: "c" } }, { kind: "blocked" }, { kind: "interrupted" }]) {
      const b = opening(new L(), A).answer(1, 1, "cut", [], "max-tokens").se(1, 1).te(1, reason)
      expect(found(b.events), JSON.stringify(reason)).toStrictEqual([])
    }
  })

  it("5.2 R8: an appended user/message after the step's request/header (not directly after step/start or another appended UM) is R8", () => {
    const b = opening(new L(), A).um(C)
    expect(found(b.events).map((v) => v.rule)).toContain("R8")
    expect(found(b.events).every((v) => v.seq === b.last)).toBe(true)
  })

  it("5.2 R5: request/header inside an open turn but between steps is R5", () => {
    const b = opening(new L(), A).answer(1, 1, "x").se(1, 1).rh()
    expect(found(b.events)).toStrictEqual([{ seq: b.last, rule: "R5" }])
  })

  it("5.2 R6: compaction/summary {turn: 1} after turn 1 ended is R6", () => {
    const b = textTurn(new L(), A).push("compaction/summary", { turn: 1 })
    expect(found(b.events)).toStrictEqual([{ seq: b.last, rule: "R6" }])
  })

  it("5.2 R9/3.9: assistant and tool-result ids are known ids, so inserting a user message with such an id is R9", () => {
    const base = () => opening(new L(), A).answer(1, 1, "x", [{ id: "c1", name: "t", arguments: "{}" }]).tc(1, 1, "c1")
    const c1Seq = base().last
    const done = () => base().tr(1, 1, "c1", [c1Seq]).se(1, 1).ss(1, 2).answer(1, 2, "y").se(1, 2).te(1)
    const am = done().ins("next-turn", 0, [u("am-1-1")])
    expect(found(am.events)).toStrictEqual([{ seq: am.last, rule: "R9" }])
    const tr = done().ins("next-step", 0, [u("tr-c1")])
    expect(found(tr.events)).toStrictEqual([{ seq: tr.last, rule: "R9" }])
    expect(found(done().ins("next-step", 0, [u("fresh")]).events)).toStrictEqual([])
  })

  it("5.2 R7: a second CLM(ns) right after the opening CLM(ns) is R7", () => {
    const b = new L().ins("next-step", 0, [C]).ts(1).clm("next-step", 1).clm("next-step", 1)
    const r7 = found(b.events).filter((v) => v.rule === "R7")
    expect(r7.length).toBeGreaterThan(0)
    expect(r7.every((v) => v.seq === b.last)).toBe(true)
  })

  it.scoped("3.9/8.4: an id used by a logged assistant message or tool result is known: delivering it fails DuplicateMessage {state: entered}", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const log = yield* SessionLog
      const inbox = yield* Inbox
      yield* driver.followup(A)
      yield* driver.whenIdle
      const events = yield* log.events
      const am = events.find((e) => e.type === "assistant/message")!.data as { readonly message: { readonly id: string } }
      const tr = events.find((e) => e.type === "tool/result")!.data as { readonly message: { readonly id: string } }
      const before = events.length
      for (const id of [am.message.id, tr.message.id]) {
        const e1 = yield* Effect.flip(driver.followup(userMessage({ id, text: "dup" })))
        expect(e1).toBeInstanceOf(DuplicateMessage)
        expect(e1).toMatchObject({ id, state: "entered" })
        const e2 = yield* Effect.flip(inbox.append("next-step", userMessage({ id, text: "dup" })))
        expect(e2).toMatchObject({ _tag: "DuplicateMessage", id, state: "entered" })
        expect(Option.getOrUndefined(yield* inbox.idState(MessageId.make(id)))).toBe("entered")
      }
      expect((yield* log.events).length).toBe(before)
    }).pipe(Effect.provide(scenario(
      [
        ScriptedModel.response({ text: "calling", toolCalls: [{ id: "c1", name: "echo", arguments: { text: "ping" } }] }),
        ScriptedModel.text("done")
      ],
      {
        tools: [Tool.make("echo", {
          description: "echo",
          parameters: Schema.Struct({ text: Schema.String }),
          execute: ({ text }) => Effect.succeed("echo: " + text)
        })]
      }
    ))))

  it.scoped("5.2/P45: every prefix of a live tool round-trip log is valid, and the whole log is valid with closed: true", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const log = yield* SessionLog
      yield* driver.followup(A)
      yield* driver.whenIdle
      const events = yield* log.events
      expect(events.some((e) => e.type === "tool/result")).toBe(true)
      for (let n = 0; n <= events.length; n++) expect(checkLog(events.slice(0, n)), `prefix ${n}`).toStrictEqual([])
      expect(checkLog(events, { closed: true })).toStrictEqual([])
      // deriveMessages over the same events is the session's derived history.
      expect(deriveMessages(events)).toStrictEqual(yield* log.messages)
    }).pipe(Effect.provide(scenario(
      [
        ScriptedModel.response({ text: "calling", toolCalls: [{ id: "c1", name: "echo", arguments: { text: "ping" } }] }),
        ScriptedModel.text("done")
      ],
      {
        tools: [Tool.make("echo", {
          description: "echo",
          parameters: Schema.Struct({ text: Schema.String }),
          execute: ({ text }) => Effect.succeed("echo: " + text)
        })]
      }
    ))))
})

// 5.2 checkLog around replacements and identity ---------------------------------------------------

describe("5.2 checkLog: replacements and message identity", () => {
  it("5.2 R5/R13: a pruning tool/result outside any turn naming an old (turn, step) is not step-enclosed: []", () => {
    const b = twoTurns()
    b.trr(7, 9, "c1", "pruned", 15)
    expect(found(b.events, { closed: true })).toStrictEqual([])
  })

  it("5.2 R8: a replacement user/message is not an entered message: an appended one right after it is R8", () => {
    const b = twoTurns()
    b.ins("next-turn", [uSurface("C")]).ins("next-step", [uSurface("D")]).ts(3).clm("next-step", 1).clm("next-turn", 1).ss(3, 1).um(uSurface("D"))
    b.umr(summary("S"), 4, 4, [4])
    b.um(uSurface("C"))
    expect(found(b.events)).toStrictEqual([{ seq: b.last, rule: "R8" }])
  })

  it("5.2 R9: a replacement user/message reusing a pending, claimed-unentered, discarded, assistant or tool-result id is R9 at its seq", () => {
    const base = () => {
      const b = twoTurns()
      // P pending; X claimed by a zero-step blocked turn; Y discarded
      b.ins("next-step", [uSurface("P")])
      b.ins("next-turn", [uSurface("X")]).ts(3).clm("next-step", 1).clm("next-turn", 1).te(3, { kind: "blocked" })
      b.ins("next-step", [uSurface("P2")]).ins("next-turn", [uSurface("Y")]).can("next-turn", 0, 1)
      return b
    }
    expect(found(base().events, { closed: true })).toStrictEqual([])
    for (const id of ["P2", "X", "Y", "am-1-1", "tr-c1", "A"]) {
      const b = base()
      b.umr(summary(id), 34, 34, [34])
      expect(found(b.events)).toStrictEqual([{ seq: b.last, rule: "R9" }])
    }
    const ok = base()
    ok.umr(summary("fresh"), 34, 34, [34])
    expect(found(ok.events, { closed: true })).toStrictEqual([])
  })

  it("5.2 R9: a replacement user/message's id becomes known: inserting it later is R9 at the splice", () => {
    const b = twoTurns()
    b.umr(summary("S"), 4, 22, [4, 13, 15, 22]).ins("next-step", [uSurface("S")])
    expect(found(b.events)).toStrictEqual([{ seq: b.last, rule: "R9" }])
  })

  it("5.2 R9: entering an id that is pending (not claimed) is R9; a fresh pre-step addition is valid", () => {
    const b = new LSurface()
    b.ins("next-turn", [uSurface("A")]).ts(1).clm("next-turn", 1).ins("next-step", [uSurface("P")]).ss(1, 1).um(uSurface("A")).um(uSurface("P"))
    expect(found(b.events)).toStrictEqual([{ seq: b.last, rule: "R9" }])
    const ok = new LSurface()
    ok.ins("next-turn", [uSurface("A")]).ts(1).clm("next-turn", 1).ins("next-step", [uSurface("P")]).ss(1, 1).um(uSurface("A")).um(uSurface("NEW")).rh().answer(1, 1, "x").se(1, 1).te(1)
    expect(found(ok.events, { closed: true })).toStrictEqual([])
  })

  it("5.2 R9: an id claimed at one boundary but dropped by its pre-step cannot be entered at the next step", () => {
    const b = new LSurface()
    b.ins("next-turn", [uSurface("A")]).ins("next-step", [uSurface("K")]).ts(1).clm("next-step", 1).clm("next-turn", 1).ss(1, 1).um(uSurface("A")).rh()
    b.answer(1, 1, "x").se(1, 1).ins("next-step", [uSurface("Z")]).clm("next-step", 1).ss(1, 2).um(uSurface("Z")).um(uSurface("K"))
    expect(found(b.events)).toStrictEqual([{ seq: b.last, rule: "R9" }])
  })

  it("5.2 R9: a claimed id is entered at most once, in the step right after its claim", () => {
    const b = new LSurface()
    b.ins("next-turn", [uSurface("A")]).ts(1).clm("next-turn", 1).ss(1, 1).um(uSurface("A")).rh().answer(1, 1, "x").se(1, 1)
    b.ins("next-step", [uSurface("Z")]).clm("next-step", 1).ss(1, 2).um(uSurface("Z")).answer(1, 2, "y").se(1, 2)
    const okLen = b.events.length
    expect(found(b.events)).toStrictEqual([])
    b.ss(1, 3).um(uSurface("Z"))
    expect(found(b.events)).toStrictEqual([{ seq: okLen + 1, rule: "R9" }])
  })

  it("5.2 R9: a replacement splice may re-insert the id it removes among fresh ones; a removed id of another splice is R9", () => {
    const b = new LSurface()
    b.ins("next-step", [uSurface("P"), uSurface("Q")])
    b.push("agent/inbox/spliced", { target: "next-step", start: 0, removedCount: 1, inserted: [uSurface("N"), uSurface("P", "edited")], outcome: "canceled" })
    expect(found(b.events)).toStrictEqual([])
    // lists: [N, P, Q]; Q is cancelled, then a replacement of N re-inserts Q
    b.can("next-step", 2, 1)
    b.push("agent/inbox/spliced", { target: "next-step", start: 0, removedCount: 1, inserted: [uSurface("Q", "again")], outcome: "canceled" })
    expect(found(b.events)).toStrictEqual([{ seq: b.last, rule: "R9" }])
  })
})

describe("5.2 checkLog R6 compaction brackets", () => {
  it("5.2 R6: a {turn:n} bracket abandoned at turn/end n is no longer open: a later null bracket opens and closes cleanly", () => {
    const b = new LSurface()
    b.ins("next-turn", [uSurface("A")]).ts(1).clm("next-turn", 1).comp("start", 1).comp("summary", 1).te(1, { kind: "blocked" })
    b.comp("start", null).comp("end", null)
    expect(found(b.events, { closed: true })).toStrictEqual([])
  })

  it("5.2 R6: a null bracket is not abandoned at turn/end: compaction/start after the turn is R6", () => {
    const b = new LSurface()
    b.comp("start", null).ins("next-turn", [uSurface("A")]).ts(1).clm("next-turn", 1).te(1, { kind: "blocked" }).comp("start", null)
    expect(found(b.events)).toStrictEqual([{ seq: b.last, rule: "R6" }])
  })

  it("5.2 R6: closing a null bracket inside a turn is R6; a numeric bracket of a past turn cannot be closed in the next", () => {
    const b = new LSurface()
    b.comp("start", null).ins("next-turn", [uSurface("A")]).ts(1).clm("next-turn", 1).comp("end", null)
    expect(found(b.events).map((v) => v.rule)).toContain("R6")
    expect(found(b.events).every((v) => v.seq === b.last && v.rule === "R6")).toBe(true)
    const c = new LSurface()
    c.ins("next-turn", [uSurface("A")]).ts(1).clm("next-turn", 1).comp("start", 1).te(1, { kind: "blocked" })
    c.ins("next-turn", [uSurface("B")]).ts(2).clm("next-turn", 1).comp("end", 2)
    expect(found(c.events)).toStrictEqual([{ seq: c.last, rule: "R6" }])
  })

  it("5.2 R6: compaction/summary and extra JSON fields inside an open numeric bracket are valid; summary naming another turn is R6", () => {
    const b = new LSurface()
    b.ins("next-turn", [uSurface("A")]).ts(1).clm("next-turn", 1).comp("start", 1, { why: "overflow" }).comp("summary", 1, { n: [1, 2] }).comp("end", 1, { error: { message: "x" } })
    expect(found(b.events)).toStrictEqual([])
    b.comp("summary", 2)
    expect(found(b.events)).toStrictEqual([{ seq: b.last, rule: "R6" }])
  })
})

describe("§5.2 checkLog over a real log", () => {
  it.scoped("5.2: prefix-closed: every prefix of a valid log is []; with closed: true exactly the prefixes ending inside a turn report R19 at their last seq", () =>
    Effect.gen(function*() {
      const es = yield* richLog
      let open = false
      for (let k = 0; k <= es.length; k++) {
        const prefix = es.slice(0, k)
        if (k > 0 && es[k - 1]!.type === "turn/start") open = true
        if (k > 0 && es[k - 1]!.type === "turn/end") open = false
        expect(checkLog(prefix), `prefix ${k}`).toEqual([])
        const closed = checkLog(prefix, { closed: true })
        expect(closed.map((v) => [v.seq, v.rule]), `closed prefix ${k}`).toEqual(open ? [[k - 1, "R19"]] : [])
      }
    }))

  it.scoped("5.2: checkLog reports relational rules only; an acceptance-rule flaw of 5.1 (a replacement not citing a shadowed seq) is not a RuleId", () =>
    Effect.gen(function*() {
      const es = yield* richLog
      const bad = mutate(es, 48, (e) => { e.sourceEventSeqs = [4, 17, 26, 46] })
      const rules = checkLog(bad, { closed: true }).map((v) => v.rule)
      expect(rules.every((r) => /^R(1[0-9]|[1-9])$/.test(r))).toBe(true)
      // The same flaw is still refused on load, relations or not.
      const { store, run } = yield* withStore
      yield* store.create(header("bad"), bad)
      expect(outcome(yield* Effect.exit(run([], Effect.void, { sessionId: "bad", resume: true, agent: { invariants: "off" } })))).toBe("MalformedLog@48")
    }))
})