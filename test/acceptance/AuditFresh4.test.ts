/**
 * Fresh audit (4): SPEC 8.1/8.2 API shapes at runtime and SPEC 5.2 `checkLog` rules not covered
 * elsewhere, written against the package root only.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Either, Option, Schema } from "effect"
import * as Tiller from "../../src/index.js"
import type { AgentStatus, InboxTarget, KnownIdState, RuleId, SessionEvent, UserMessage } from "../../src/index.js"
import {
  AgentBusy,
  CancelCause,
  checkLog,
  deriveMessages,
  Domain,
  Driver,
  DuplicateMessage,
  ForkError,
  foldInbox,
  Inbox,
  InvalidEvent,
  LOG_FORMAT_VERSION,
  MalformedLog,
  MessageId,
  newUserMessage,
  PreStepFailed,
  ScriptedModel,
  SessionId,
  SessionLog,
  Tool,
  userMessage
} from "../../src/index.js"
import { scenario } from "./AuditHarness.js"

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

// 5.2 checkLog --------------------------------------------------------------------------------

describe("SPEC 5.2 checkLog (fresh 4)", () => {
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

// 8.1 / 8.2 API -------------------------------------------------------------------------------

describe("SPEC 8.1 / 8.2 API (fresh 4)", () => {
  it("8.1: userMessage is pure: it neither freezes nor aliases the caller's input, and later mutation has no effect", () => {
    const content: Array<{ type: "text"; text: string }> = [{ type: "text", text: "hi" }]
    const source = { kind: "plugin", plugin: "x", extra: [1] }
    const m = userMessage({ id: "p1", content, source })
    expect(Object.isFrozen(content)).toBe(false)
    expect(Object.isFrozen(content[0])).toBe(false)
    expect(Object.isFrozen(source)).toBe(false)
    content[0]!.text = "changed"
    content.push({ type: "text", text: "more" })
    source.extra.push(2)
    expect(m.content).toStrictEqual([{ type: "text", text: "hi" }])
    expect(m.source).toStrictEqual({ kind: "plugin", plugin: "x", extra: [1] })
    expect(Object.isFrozen((m.source as any).extra)).toBe(true)
  })

  it("8.1: userMessage accepts only text/image blocks as content; other blocks throw InvalidEvent", () => {
    const bad = [
      [{ type: "reasoning", text: "r" }],
      [{ type: "tool-call", id: "c", name: "n", arguments: "{}" }],
      [{ type: "image", mediaType: "image/png" }]
    ]
    for (const content of bad) {
      expect(() => userMessage({ id: "x", content: content as any }), JSON.stringify(content)).toThrow(InvalidEvent)
    }
    expect(userMessage({ id: "x", content: [{ type: "image", mediaType: "image/png", data: "AA" }, { type: "text", text: "t" }] }).content)
      .toHaveLength(2)
  })

  it("8.1: newUserMessage takes content or text and a source, and returns a deep-frozen message", () =>
    Effect.runPromise(Effect.gen(function*() {
      const m = yield* newUserMessage({ content: [{ type: "text", text: "c" }], source: { kind: "plugin", plugin: "q" } })
      expect(m.role).toBe("user")
      expect(m.content).toStrictEqual([{ type: "text", text: "c" }])
      expect(m.source).toStrictEqual({ kind: "plugin", plugin: "q" })
      expect(Object.isFrozen(m) && Object.isFrozen(m.content) && Object.isFrozen(m.source)).toBe(true)
      expect(Schema.is(Tiller.UserMessage)(m)).toBe(true)
    })))

  it("8.1: CancelCause values and hook(reason) are plain objects the CancelCause schema accepts; other shapes are rejected", () => {
    for (const c of [CancelCause.user, CancelCause.parent, CancelCause.disposed, CancelCause.hook("why")]) {
      expect(Schema.is(CancelCause)(c)).toBe(true)
      expect(Object.getPrototypeOf(c)).toBe(Object.prototype)
    }
    expect(Schema.is(CancelCause)({ kind: "hook" })).toBe(false)
    expect(Schema.is(CancelCause)({ kind: "timeout" })).toBe(false)
    expect(Schema.is(CancelCause)({ kind: "parent" })).toBe(true)
  })

  it("8.1: MessageId.make / SessionId.make refuse the empty string", () => {
    expect(() => MessageId.make("")).toThrow()
    expect(() => SessionId.make("")).toThrow()
    expect(SessionId.make("s")).toBe("s")
  })

  it("8.1: Domain is a namespace alias holding the same domain values", () => {
    for (
      const name of [
        "MessageId", "SessionId", "TextBlock", "ImageBlock", "ReasoningBlock", "ToolCallBlock", "ToolResultBlock", "MessageSource",
        "UserMessage", "AssistantMessage", "ToolResultMessage", "Message", "Usage", "LlmFailure", "StreamChunk", "CancelCause",
        "TurnEndReason", "ToolSchema", "RequestHeader", "SessionHeader", "SurfaceOp", "SessionEvent", "LOG_FORMAT_VERSION",
        "CORE_EVENT_TYPES", "userMessage", "newUserMessage", "deriveMessages", "foldInbox", "repairClosers", "checkLog"
      ]
    ) {
      expect((Domain as any)[name], name).toBeDefined()
      expect((Domain as any)[name], name).toBe((Tiller as any)[name])
    }
  })

  it("8.1: foldInbox(events, seedLength) ignores the seed's splices and folds the rest from empty lists", () => {
    const b = new L().ins("next-turn", 0, [A]).ins("next-step", 0, [C]).es().ins("next-turn", 0, [B])
    const all = foldInbox(b.events)
    expect(Either.isRight(all) && all.right).toStrictEqual({ nextTurn: [B, A], nextStep: [C] })
    const seeded = foldInbox(b.events, 3)
    expect(Either.isRight(seeded) && seeded.right).toStrictEqual({ nextTurn: [B], nextStep: [] })
  })

  it("8.1: foldInbox reports duplicate pending ids across both lists as MalformedLog at the offending seq", () => {
    const b = new L().ins("next-turn", 0, [A]).ins("next-step", 0, [A])
    const r = foldInbox(b.events)
    expect(Either.isLeft(r)).toBe(true)
    if (Either.isLeft(r)) {
      expect(r.left).toBeInstanceOf(MalformedLog)
      expect(r.left._tag).toBe("MalformedLog")
      expect(r.left.seq).toBe(1)
    }
  })

  it("8.2: error field schemas follow SPEC (literal unions are enforced when decoding)", () => {
    const ok = (schema: any, value: unknown) => Either.isRight(Schema.decodeUnknownEither(schema)(value))
    expect(ok(InvalidEvent, { _tag: "InvalidEvent", type: "t", reason: "r", rule: "R19" })).toBe(true)
    expect(ok(InvalidEvent, { _tag: "InvalidEvent", type: "t", reason: "r" })).toBe(true)
    expect(ok(InvalidEvent, { _tag: "InvalidEvent", type: "t", reason: "r", rule: "R20" })).toBe(false)
    expect(ok(AgentBusy, { _tag: "AgentBusy", sessionId: "s", operation: "runMaintenance", phase: "disposing" })).toBe(true)
    expect(ok(AgentBusy, { _tag: "AgentBusy", sessionId: "s", operation: "send", phase: "running" })).toBe(false)
    expect(ok(AgentBusy, { _tag: "AgentBusy", sessionId: "", operation: "open", phase: "open" })).toBe(false)
    expect(ok(ForkError, { _tag: "ForkError", source: "s", reason: "child-exists", childId: "c" })).toBe(true)
    expect(ok(ForkError, { _tag: "ForkError", source: "s", reason: "other" })).toBe(false)
    expect(ok(DuplicateMessage, { _tag: "DuplicateMessage", id: "m", state: "entered" })).toBe(true)
    expect(ok(DuplicateMessage, { _tag: "DuplicateMessage", id: "m", state: "unknown" })).toBe(false)
    expect(ok(MalformedLog, { _tag: "MalformedLog", sessionId: "s", reason: "r" })).toBe(true)
    expect(ok(PreStepFailed, { _tag: "PreStepFailed", turn: 1, step: 0, cause: { message: "x" } })).toBe(true)
  })

  it("8.2: errors are yieldable failures carrying their fields", () =>
    Effect.runPromise(Effect.gen(function*() {
      const e = yield* Effect.flip(Effect.gen(function*() {
        return yield* new AgentBusy({ sessionId: SessionId.make("s"), operation: "runMaintenance", phase: "maintenance" })
      }))
      expect(e._tag).toBe("AgentBusy")
      expect(e).toMatchObject({ sessionId: "s", operation: "runMaintenance", phase: "maintenance" })
    })))

  it("8.1: type-level literals (LOG_FORMAT_VERSION: 1, RuleId, AgentStatus, KnownIdState, InboxTarget)", () => {
    const v: 1 = LOG_FORMAT_VERSION
    // @ts-expect-error R20 is not a RuleId
    const r20: RuleId = "R20"
    // @ts-expect-error not an AgentStatus
    const s: AgentStatus = "busy"
    // @ts-expect-error not a KnownIdState
    const k: KnownIdState = "unknown"
    // @ts-expect-error not an InboxTarget
    const t: InboxTarget = "later"
    const brand: Schema.brand<typeof Schema.NonEmptyString, "MessageId"> = MessageId
    const brand2: Schema.brand<typeof Schema.NonEmptyString, "SessionId"> = SessionId
    expect([v, r20, s, k, t, brand !== undefined, brand2 !== undefined]).toHaveLength(7)
  })
})

