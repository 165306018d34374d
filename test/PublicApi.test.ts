/**
 * The public API of SPEC 8 from the package root: exported names, error classes, Driver, the
 * storage, agent and sessions layers.
 */
import { describe, expect, it } from "@effect/vitest"
import {
  Chunk,
  Context,
  Deferred,
  Effect,
  Either,
  Exit,
  Fiber,
  JSONSchema,
  Layer,
  Option,
  Queue,
  Schema,
  Scope,
  Stream,
  TestClock
} from "effect"
import * as Tiller from "../src/index.js"
import {
  Agent,
  AgentBusy,
  AgentDisposed,
  CancelCause,
  checkLog,
  CORE_EVENT_TYPES,
  Domain,
  Driver,
  DuplicateMessage,
  foldInbox,
  ForkError,
  forkSession,
  Hooks,
  Inbox,
  InvalidEvent,
  InvalidSplice,
  LOG_FORMAT_VERSION,
  MaintenanceAborted,
  MalformedLog,
  MemoryStoreControl,
  MessageId,
  Model,
  ModelError,
  newUserMessage,
  PersistenceError,
  PreStep,
  PreStepDecision,
  PreStepFailed,
  PreStepRejected,
  RequestErrorAction,
  ScriptedModel,
  SessionExists,
  SessionId,
  SessionLog,
  SessionNotFound,
  Sessions,
  SessionStore,
  Tool,
  ToolPreDecision,
  Tools,
  UnsupportedLogVersion,
  userMessage
} from "../src/index.js"
import type { AgentStatus, InboxTarget, KnownIdState, ModelRequest, RuleId, SessionEvent } from "../src/index.js"
import {
  events,
  gate,
  liveNotation,
  notation,
  open,
  plugin,
  scenario,
  settle,
  shape,
  until,
  user
} from "./agent/harness.js"
import { ev, HandLog } from "./fixtures/handLog.js"
import { u } from "./fixtures/surfaceLog.js"

const errorClasses = {
  PreStepRejected,
  PreStepFailed,
  DuplicateMessage,
  InvalidSplice,
  InvalidEvent,
  AgentBusy,
  AgentDisposed,
  MaintenanceAborted,
  PersistenceError,
  MalformedLog,
  UnsupportedLogVersion,
  ForkError,
  SessionNotFound,
  SessionExists,
  ModelError
} as const

const sample = {
  PreStepRejected: { turn: 1, step: 1, reason: "r" },
  PreStepFailed: { turn: 1, step: 1, cause: new Error("x") },
  DuplicateMessage: { id: MessageId.make("m"), state: "pending" as const },
  InvalidSplice: { target: "next-turn", start: NaN, deleteCount: 0, reason: "r" },
  InvalidEvent: { type: "t", reason: "r", rule: "R1" as const },
  AgentBusy: { sessionId: SessionId.make("s"), operation: "open" as const, phase: "open" as const },
  AgentDisposed: { sessionId: SessionId.make("s") },
  MaintenanceAborted: { cause: CancelCause.user },
  PersistenceError: { sessionId: "s", operation: "append", cause: new Error("disk") },
  MalformedLog: { sessionId: "s", seq: 3, reason: "r" },
  UnsupportedLogVersion: { sessionId: "s", found: 2, supported: 1 },
  ForkError: { source: SessionId.make("s"), reason: "open-turn" as const, boundary: 2, childId: "c" },
  SessionNotFound: { sessionId: "s" },
  SessionExists: { sessionId: "s" },
  ModelError: { failure: { message: "m", code: "C" } }
}

const A = u("A")
const B = u("B")
const C = u("C")

const sid = (s: string) => SessionId.make(s)

describe("SPEC 8 public API", () => {
  it("8: services are Context.Tag classes keyed tiller/<Name>", () => {
    const tags: Record<string, { readonly key: string }> = {
      Driver,
      Inbox,
      SessionLog,
      PreStep,
      Model,
      Tools,
      Hooks,
      SessionStore,
      MemoryStoreControl,
      ScriptedModel,
      Sessions
    }
    for (const [name, tag] of Object.entries(tags)) expect(tag.key).toBe(`tiller/${name}`)
  })

  it("8.2: errors are Schema.TaggedError classes with identifier tiller/<Name>, their tag and a message getter", () => {
    for (const [name, cls] of Object.entries(errorClasses)) {
      expect((cls as unknown as { readonly identifier: string }).identifier).toBe(`tiller/${name}`)
      const error = new (cls as any)((sample as any)[name])
      expect(error._tag).toBe(name)
      expect(typeof error.message).toBe("string")
      expect(error.message.length).toBeGreaterThan(0)
      expect(Schema.is(cls as any)(error)).toBe(true)
    }
  })

  it("8.2: PersistenceError.refail maps failures and keeps a PersistenceError as is", () =>
    Effect.runPromise(Effect.gen(function*() {
      const mapped = yield* Effect.flip(PersistenceError.refail("s", "op")(Effect.fail("boom")))
      expect(mapped).toBeInstanceOf(PersistenceError)
      expect(mapped).toMatchObject({ sessionId: "s", operation: "op", cause: "boom" })
      const original = new PersistenceError({ sessionId: "x", operation: "y", cause: 1 })
      expect(yield* Effect.flip(PersistenceError.refail("s", "op")(Effect.fail(original)))).toBe(original)
    })))

  it("8.1: domain constants and CancelCause constructors", () => {
    expect(LOG_FORMAT_VERSION).toBe(1)
    expect([...CORE_EVENT_TYPES].sort()).toEqual([
      "agent/inbox/spliced",
      "approval/answer",
      "approval/request",
      "assistant/chunk",
      "assistant/message",
      "compaction/end",
      "compaction/start",
      "compaction/summary",
      "llm/retry",
      "request/header",
      "session/end-seed",
      "step/end",
      "step/start",
      "tool/call",
      "tool/result",
      "turn/end",
      "turn/start",
      "user/message"
    ])
    expect(CancelCause.user).toEqual({ kind: "user" })
    expect(CancelCause.parent).toEqual({ kind: "parent" })
    expect(CancelCause.disposed).toEqual({ kind: "disposed" })
    expect(CancelCause.hook("why")).toEqual({ kind: "hook", reason: "why" })
    expect(Schema.is(CancelCause)({ kind: "hook", reason: "r" })).toBe(true)
    expect(Domain.userMessage).toBe(userMessage)
    expect(Domain.checkLog).toBe(checkLog)
  })

  it("8.1: every shape of 2.3 and 2.4 has a Schema value", () => {
    for (
      const name of [
        "TextBlock",
        "ImageBlock",
        "ReasoningBlock",
        "ToolCallBlock",
        "ToolResultBlock",
        "MessageSource",
        "UserMessage",
        "AssistantMessage",
        "ToolResultMessage",
        "Message",
        "Usage",
        "LlmFailure",
        "StreamChunk",
        "CancelCause",
        "TurnEndReason",
        "ToolSchema",
        "RequestHeader",
        "SessionHeader",
        "SurfaceOp",
        "SessionEvent",
        "MessageId",
        "SessionId"
      ]
    ) {
      expect(Schema.isSchema((Tiller as any)[name]), name).toBe(true)
    }
  })

  it("8.1: MessageId and SessionId are non-empty branded strings", () => {
    expect(Schema.is(MessageId)("")).toBe(false)
    expect(Schema.is(SessionId)("")).toBe(false)
    expect(Schema.is(MessageId)("a")).toBe(true)
  })

  it("8.1: userMessage is pure, defaults source user, deep-freezes, and throws InvalidEvent on invalid input", () => {
    const m = userMessage({ id: "a", text: "hi" })
    expect(m).toEqual({ id: "a", role: "user", content: [{ type: "text", text: "hi" }], source: { kind: "user" } })
    expect(
      Object.isFrozen(m) && Object.isFrozen(m.content) && Object.isFrozen(m.content[0]) && Object.isFrozen(m.source)
    ).toBe(true)
    const content = [{ type: "image" as const, mediaType: "image/png", data: "AAAA" }]
    const withContent = userMessage({ id: "b", content, source: { kind: "plugin", plugin: "x" } })
    expect(withContent.content).toEqual(content)
    expect(withContent.source).toEqual({ kind: "plugin", plugin: "x" })
    const invalid: ReadonlyArray<Parameters<typeof userMessage>[0]> = [
      { id: "", text: "x" },
      { id: "a", text: "x", content: [] },
      { id: "a" },
      { id: "a", text: "x", source: { kind: "k", bad: undefined } as any },
      { id: "a", text: "x", source: { kind: "k", when: new Date(0) } as any },
      { id: "a", text: "x", source: { kind: "" } }
    ]
    for (const input of invalid) {
      let thrown: unknown
      try {
        userMessage(input)
      } catch (e) {
        thrown = e
      }
      expect(thrown, JSON.stringify(input)).toBeInstanceOf(InvalidEvent)
    }
  })

  it("8.1: newUserMessage mints UUID v4 ids", () =>
    Effect.runPromise(Effect.gen(function*() {
      const a = yield* newUserMessage({ text: "x" })
      const b = yield* newUserMessage({ text: "x" })
      expect(a.id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/)
      expect(a.id).not.toBe(b.id)
      expect(a.source).toEqual({ kind: "user" })
    })))

  it("8.1: foldInbox returns the lists or MalformedLog", () => {
    const A = userMessage({ id: "A", text: "A" })
    const ok = foldInbox([
      {
        type: "agent/inbox/spliced",
        seq: 0,
        time: 0,
        data: { target: "next-turn", start: 0, inserted: [A] }
      } as SessionEvent
    ])
    expect(Either.isRight(ok) && ok.right.nextTurn).toEqual([A])
    const bad = foldInbox([
      {
        type: "agent/inbox/spliced",
        seq: 0,
        time: 0,
        data: { target: "next-turn", start: 1, inserted: [A] }
      } as SessionEvent
    ])
    expect(Either.isLeft(bad) && bad.left).toBeInstanceOf(MalformedLog)
    expect(Either.isLeft(bad) && bad.left.seq).toBe(0)
    expect(Either.isRight(foldInbox([
      {
        type: "agent/inbox/spliced",
        seq: 0,
        time: 0,
        data: { target: "next-turn", start: 1, inserted: [A] }
      } as SessionEvent
    ], 1))).toBe(true)
  })

  it("8.6: PreStepDecision constructors; 8.7: RequestErrorAction and ToolPreDecision", () => {
    const A = userMessage({ id: "A", text: "A" })
    expect(PreStepDecision.enter([A])).toEqual({ _tag: "Enter", messages: [A] })
    expect(PreStepDecision.reject("r")).toEqual({ _tag: "Reject", reason: "r" })
    expect(PreStepDecision.reject()._tag).toBe("Reject")
    const retry = RequestErrorAction.retry("2 seconds")
    expect(retry._tag).toBe("Retry")
    expect(retry._tag === "Retry" && retry.delay.value).toEqual({ _tag: "Millis", millis: 2000 })
    expect(RequestErrorAction.fail).toEqual({ _tag: "Fail" })
    expect(ToolPreDecision.allow).toEqual({ _tag: "Allow" })
    expect(ToolPreDecision.deny("no")).toEqual({ _tag: "Deny", reason: "no" })
  })

  it("8.9: Tool.make defaults to exclusive; Tools.list is sorted by name with JSON Schema parameters", () =>
    Effect.runPromise(Effect.gen(function*() {
      const params = Schema.Struct({ text: Schema.String })
      const b = Tool.make("b", { description: "B", parameters: params, execute: () => Effect.succeed("x") })
      const a = Tool.make("a", {
        description: "A",
        parameters: Schema.Struct({}),
        mode: "parallel",
        execute: () => Effect.succeed("x")
      })
      expect(b.mode).toBe("exclusive")
      expect(a.mode).toBe("parallel")
      const tools = yield* Effect.provide(Tools, Tools.layer({ tools: [b, a] }))
      expect(tools.maxParallelToolCalls).toBe(10)
      expect(yield* tools.list).toEqual([
        { name: "a", description: "A", parameters: JSONSchema.make(Schema.Struct({})) },
        { name: "b", description: "B", parameters: JSONSchema.make(params) }
      ])
      yield* tools.setMode("b", "parallel")
      yield* Effect.scoped(Effect.gen(function*() {
        const shadow = Tool.make("b", { description: "B2", parameters: params, execute: () => Effect.succeed("y") })
        yield* tools.register(shadow)
        expect((yield* tools.list).map((t) => t.description)).toEqual(["A", "B2"])
      }))
      expect((yield* tools.list).map((t) => t.description)).toEqual(["A", "B"])
    })))

  it("8.8: ScriptedModel.die fails with ModelError UNKNOWN; an exhausted script fails 'ScriptedModel: script exhausted'", () =>
    Effect.runPromise(
      Effect.gen(function*() {
        const model = yield* Model
        const request: ModelRequest = {
          sessionId: SessionId.make("s"),
          turn: 1,
          step: 1,
          attempt: 1,
          provider: "p",
          model: "m",
          tools: [],
          messages: []
        }
        const first = yield* Effect.flip(Stream.runCollect(model.stream(request)))
        expect(first).toBeInstanceOf(ModelError)
        expect(first.failure).toEqual({ message: "gone", code: "UNKNOWN" })
        const second = yield* Effect.flip(Stream.runCollect(model.stream(request)))
        expect(second.failure).toEqual({ message: "ScriptedModel: script exhausted", code: "UNKNOWN" })
        const scripted = yield* ScriptedModel
        expect((yield* scripted.requests).length).toBe(2)
        expect(yield* scripted.remaining).toBe(0)
      }).pipe(Effect.provide(ScriptedModel.layer([ScriptedModel.die("gone")])))
    ))

  it("8.8: ScriptedModel chunk sequences of text, response and fail", () =>
    Effect.runPromise(
      Effect.gen(function*() {
        const model = yield* Model
        const request: ModelRequest = {
          sessionId: SessionId.make("s"),
          turn: 1,
          step: 1,
          attempt: 1,
          provider: "p",
          model: "m",
          tools: [],
          messages: []
        }
        const collect = Effect.map(Stream.runCollect(model.stream(request)), (c) => [...c])
        expect(yield* collect).toEqual([
          { type: "block-start", index: 0, block: "text" },
          { type: "text-delta", index: 0, text: "a" },
          { type: "text-delta", index: 0, text: "b" },
          { type: "block-end", index: 0 },
          { type: "usage", usage: { inputTokens: 1, outputTokens: 2 } },
          { type: "finish", finish: { kind: "stop" } }
        ])
        expect(yield* collect).toEqual([
          { type: "block-start", index: 0, block: "reasoning" },
          { type: "reasoning-delta", index: 0, text: "think" },
          { type: "block-end", index: 0 },
          { type: "block-start", index: 1, block: "text" },
          { type: "text-delta", index: 1, text: "say" },
          { type: "block-end", index: 1 },
          { type: "block-start", index: 2, block: "tool-call", id: "c1", name: "t" },
          { type: "tool-call-delta", index: 2, arguments: "{\"x\":1}" },
          { type: "block-end", index: 2 },
          { type: "usage", usage: { inputTokens: 1, outputTokens: 1 } },
          { type: "replay-state", state: { r: 1 } },
          { type: "finish", finish: { kind: "stop" } }
        ])
        expect(yield* collect).toEqual([
          { type: "block-start", index: 0, block: "text" },
          { type: "text-delta", index: 0, text: "par" },
          { type: "finish", finish: { kind: "aborted", failure: { message: "m", code: "C" } } }
        ])
      }).pipe(Effect.provide(ScriptedModel.layer([
        ScriptedModel.text("ab", { deltas: ["a", "b"], usage: { inputTokens: 1, outputTokens: 2 } }),
        ScriptedModel.response({
          reasoning: "think",
          text: "say",
          toolCalls: [{ id: "c1", name: "t", arguments: { x: 1 } }],
          usage: { inputTokens: 1, outputTokens: 1 },
          replayState: { r: 1 }
        }),
        ScriptedModel.fail({ message: "m", code: "C" }, { partial: { text: "par" }, finish: "aborted" })
      ])))
    ))

  it("8: internal modules are not exported from the root", () => {
    const names = Object.keys(Tiller)
    for (const internal of ["claim", "Claim", "Writer", "SessionState", "Outbox", "Phase", "ToolRegistry"]) {
      expect(names).not.toContain(internal)
    }
    for (
      const required of [
        "Agent",
        "Sessions",
        "SessionStore",
        "MemoryStoreControl",
        "SqliteSessionStore",
        "forkSession",
        "Driver",
        "Inbox",
        "SessionLog",
        "PreStep",
        "PreStepDecision",
        "Hooks",
        "RequestErrorAction",
        "ToolPreDecision",
        "Model",
        "ScriptedModel",
        "Tool",
        "Tools",
        "Domain",
        "userMessage",
        "newUserMessage",
        "deriveMessages",
        "foldInbox",
        "repairClosers",
        "checkLog",
        "LOG_FORMAT_VERSION",
        "CORE_EVENT_TYPES"
      ]
    ) {
      expect(names, required).toContain(required)
    }
  })

  it("8.10: Agent.layer on an existing id fails SessionExists; resume of a missing id fails SessionNotFound", () =>
    Effect.runPromise(
      Effect.gen(function*() {
        const store = yield* SessionStore
        yield* store.create({ formatVersion: 1, sessionId: SessionId.make("taken"), createdAt: 0, seedLength: 0 }, [])
        const build = (options: Parameters<typeof Agent.layer>[0]) =>
          Effect.scoped(Effect.flip(Layer.build(
            Agent.layer(options).pipe(
              Layer.provide(Layer.merge(ScriptedModel.layer([]), Tools.layer())),
              Layer.provide(Layer.succeed(SessionStore, store))
            )
          )))
        expect(yield* build({ sessionId: SessionId.make("taken") })).toBeInstanceOf(SessionExists)
        expect(yield* build({ resume: SessionId.make("missing") })).toBeInstanceOf(SessionNotFound)
      }).pipe(Effect.provide(SessionStore.layerMemory))
    ))
})

// 8.1 / 8.2 API -------------------------------------------------------------------------------

describe("SPEC 8.1 / 8.2 API", () => {
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
    expect(
      userMessage({
        id: "x",
        content: [{ type: "image", mediaType: "image/png", data: "AA" }, { type: "text", text: "t" }]
      }).content
    )
      .toHaveLength(2)
  })

  it("8.1: newUserMessage takes content or text and a source, and returns a deep-frozen message", () =>
    Effect.runPromise(Effect.gen(function*() {
      const m = yield* newUserMessage({
        content: [{ type: "text", text: "c" }],
        source: { kind: "plugin", plugin: "q" }
      })
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
        "MessageId",
        "SessionId",
        "TextBlock",
        "ImageBlock",
        "ReasoningBlock",
        "ToolCallBlock",
        "ToolResultBlock",
        "MessageSource",
        "UserMessage",
        "AssistantMessage",
        "ToolResultMessage",
        "Message",
        "Usage",
        "LlmFailure",
        "StreamChunk",
        "CancelCause",
        "TurnEndReason",
        "ToolSchema",
        "RequestHeader",
        "SessionHeader",
        "SurfaceOp",
        "SessionEvent",
        "LOG_FORMAT_VERSION",
        "CORE_EVENT_TYPES",
        "userMessage",
        "newUserMessage",
        "deriveMessages",
        "foldInbox",
        "repairClosers",
        "checkLog"
      ]
    ) {
      expect((Domain as any)[name], name).toBeDefined()
      expect((Domain as any)[name], name).toBe((Tiller as any)[name])
    }
  })

  it("8.1: foldInbox(events, seedLength) ignores the seed's splices and folds the rest from empty lists", () => {
    const b = new HandLog().ins("next-turn", 0, [A]).ins("next-step", 0, [C]).es().ins("next-turn", 0, [B])
    const all = foldInbox(b.events)
    expect(Either.isRight(all) && all.right).toStrictEqual({ nextTurn: [B, A], nextStep: [C] })
    const seeded = foldInbox(b.events, 3)
    expect(Either.isRight(seeded) && seeded.right).toStrictEqual({ nextTurn: [B], nextStep: [] })
  })

  it("8.1: foldInbox reports duplicate pending ids across both lists as MalformedLog at the offending seq", () => {
    const b = new HandLog().ins("next-turn", 0, [A]).ins("next-step", 0, [A])
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
    expect(ok(InvalidEvent, { _tag: "InvalidEvent", type: "t", reason: "r", rule: "R20" })).toBe(true)
    expect(ok(InvalidEvent, { _tag: "InvalidEvent", type: "t", reason: "r", rule: "R21" })).toBe(false)
    expect(ok(AgentBusy, { _tag: "AgentBusy", sessionId: "s", operation: "runMaintenance", phase: "disposing" })).toBe(
      true
    )
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
        return yield* new AgentBusy({
          sessionId: SessionId.make("s"),
          operation: "runMaintenance",
          phase: "maintenance"
        })
      }))
      expect(e._tag).toBe("AgentBusy")
      expect(e).toMatchObject({ sessionId: "s", operation: "runMaintenance", phase: "maintenance" })
    })))

  it("8.1: type-level literals (LOG_FORMAT_VERSION: 1, RuleId, AgentStatus, KnownIdState, InboxTarget)", () => {
    const v: 1 = LOG_FORMAT_VERSION
    // @ts-expect-error R21 is not a RuleId
    const r20: RuleId = "R21"
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

describe("SPEC 8.3 Driver", () => {
  it.scoped("8.3/3.6: AgentBusy names the session, the operation and the phase; MaintenanceAborted carries the first cause", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const G = gate()
      const task = yield* Effect.fork(driver.runMaintenance(Effect.zipRight(open(G), Effect.never)))
      yield* Deferred.await(G)
      const busy = yield* Effect.flip(driver.runMaintenance(Effect.succeed(1)))
      expect(busy).toBeInstanceOf(AgentBusy)
      expect(busy).toMatchObject({
        _tag: "AgentBusy",
        sessionId: "s",
        operation: "runMaintenance",
        phase: "maintenance"
      })
      yield* driver.cancel(CancelCause.hook("why"))
      yield* driver.cancel(CancelCause.parent)
      const exit = yield* Fiber.await(task)
      expect(exit).toEqual(Exit.fail(new MaintenanceAborted({ cause: { kind: "hook", reason: "why" } })))
      expect(yield* driver.status).toBe("idle")
      expect(yield* events).toEqual([])
    }).pipe(Effect.provide(scenario([]))))

  it.scoped("8.3: AgentBusy while running carries phase running; the running turn is unaffected", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      const busy = yield* Effect.flip(driver.runMaintenance(Effect.succeed(1)))
      expect(busy).toMatchObject({ _tag: "AgentBusy", sessionId: "s", operation: "runMaintenance", phase: "running" })
      yield* driver.whenIdle
      expect((yield* shape).filter((x) => x.startsWith("TE"))).toEqual(["TE(1,completed)"])
    }).pipe(Effect.provide(scenario([ScriptedModel.text("ok")]))))

  it.scoped("8.3: subscribe returns a queue already subscribed: the notifications of an operation right after it are all in it, in commit order", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const queue = yield* driver.subscribe
      yield* driver.inject(plugin("I"))
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      yield* settle
      const got = Chunk.toReadonlyArray(yield* Queue.takeAll(queue)).map(liveNotation)
      expect(got).toEqual([
        "inserted(I)",
        "inserted(A)",
        "status(running)",
        "claimed(I,1)",
        "claimed(A,1)",
        "status(idle)"
      ])
    }).pipe(Effect.provide(scenario([ScriptedModel.text("ok")]))))

  it.scoped("8.3/3.4: cancel accepts a plain CancelCause object; it is recorded on turn/end as given", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      yield* driver.cancel({ kind: "parent" })
      yield* driver.whenIdle
      const ends = (yield* events).filter((e) => e.type === "turn/end").map((e) => (e.data as any).reason)
      expect(ends).toEqual([{ kind: "aborted", reason: { kind: "parent" } }])
    }).pipe(Effect.provide(scenario([ScriptedModel.hang({})]))))
})

describe("SPEC 8.10 storage, agent and sessions layers", () => {
  it.effect("8.10/6.1: the memory store contract: create, SessionExists, load, SessionNotFound, exists, list, append with the seq check", () =>
    Effect.gen(function*() {
      const store = yield* SessionStore
      const header = { formatVersion: 1 as const, sessionId: "m1", createdAt: 5, seedLength: 0 }
      expect(yield* store.exists(sid("m1"))).toBe(false)
      yield* store.create(header, [ev(0, "x/a", { a: 1 }, { ignorable: true })])
      const exists = yield* Effect.flip(store.create(header, []))
      expect(exists).toBeInstanceOf(SessionExists)
      expect(exists).toMatchObject({ sessionId: "m1" })
      const missing = yield* Effect.flip(store.load(sid("nope")))
      expect(missing).toBeInstanceOf(SessionNotFound)
      expect(missing).toMatchObject({ sessionId: "nope" })
      expect(yield* store.exists(sid("m1"))).toBe(true)
      const wrongSeq = yield* Effect.flip(store.append(sid("m1"), [ev(0, "x/b", {}, { ignorable: true })]))
      expect(wrongSeq).toBeInstanceOf(PersistenceError)
      expect(wrongSeq).toMatchObject({ sessionId: "m1" })
      const gap = yield* Effect.flip(store.append(sid("m1"), [ev(2, "x/b", {}, { ignorable: true })]))
      expect(gap).toBeInstanceOf(PersistenceError)
      yield* store.append(sid("m1"), [
        ev(1, "x/b", { b: 2 }, { ignorable: true }),
        ev(2, "x/c", {}, { ignorable: true })
      ])
      const loaded = yield* store.load(sid("m1"))
      expect(loaded.header).toEqual(header)
      expect(loaded.events.map((e) => [e.seq, e.type])).toEqual([[0, "x/a"], [1, "x/b"], [2, "x/c"]])
      yield* store.create({ ...header, sessionId: "m2" }, [])
      expect((yield* store.list).map((h) => h.sessionId).sort()).toEqual(["m1", "m2"])
      const control = yield* MemoryStoreControl
      expect(yield* control.appendCalls).toBe(3)
    }).pipe(Effect.provide(SessionStore.layerMemory)))

  it.effect("8.10: MemoryStoreControl: failAppends fails the next n calls; hold blocks appends until release; snapshot holds committed contents only", () =>
    Effect.gen(function*() {
      const store = yield* SessionStore
      const control = yield* MemoryStoreControl
      yield* store.create({ formatVersion: 1, sessionId: "c", createdAt: 0, seedLength: 0 }, [])
      yield* control.failAppends(2)
      const e0 = ev(0, "x/a", {}, { ignorable: true })
      expect(yield* Effect.flip(store.append(sid("c"), [e0]))).toBeInstanceOf(PersistenceError)
      expect(yield* Effect.flip(store.append(sid("c"), [e0]))).toBeInstanceOf(PersistenceError)
      yield* store.append(sid("c"), [e0])
      expect(yield* control.appendCalls).toBe(3)
      yield* control.hold
      const held = yield* Effect.fork(store.append(sid("c"), [ev(1, "x/b", {}, { ignorable: true })]))
      yield* settle
      expect(Option.isNone(yield* Fiber.poll(held))).toBe(true)
      const image = yield* control.snapshot
      yield* control.release
      yield* Fiber.join(held)
      expect((yield* store.load(sid("c"))).events.length).toBe(2)
      const restored = yield* Effect.provide(
        Effect.flatMap(SessionStore, (s) => s.load(sid("c"))),
        SessionStore.layerMemoryFrom(image)
      )
      expect(restored.events.map((e) => e.type)).toEqual(["x/a"])
    }).pipe(Effect.provide(SessionStore.layerMemory)))

  it.scoped("8.10: AgentOptions.invariants defaults to check (a relational violation on append is refused with its rule)", () =>
    Effect.gen(function*() {
      const log = yield* SessionLog
      const error = yield* Effect.flip(log.append({ type: "compaction/start", data: { turn: 1 } }))
      expect(error).toBeInstanceOf(InvalidEvent)
      expect(error).toMatchObject({ rule: "R6" })
      expect(yield* log.events).toEqual([])
    }).pipe(Effect.provide(
      Agent.layer({ model: { provider: "p", model: "m" }, sessionId: sid("d") }).pipe(
        Layer.provideMerge(Layer.mergeAll(ScriptedModel.layer([]), Tools.layer(), SessionStore.layerMemory))
      )
    )))

  it.scoped("8.10: Sessions.open creates then shares one live agent per id; fork of an open source gives a child with the prefix", () =>
    Effect.gen(function*() {
      const sessions = yield* Sessions
      const a = yield* sessions.open(sid("one"))
      const b = yield* sessions.open(sid("one"))
      expect(Context.get(a, Driver)).toBe(Context.get(b, Driver))
      const driver = Context.get(a, Driver)
      expect(driver.sessionId).toBe("one")
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      const child = yield* sessions.fork({ source: sid("one"), childId: sid("kid") })
      expect(child).toBe("kid")
      const store = yield* SessionStore
      const loaded = yield* store.load(sid("kid"))
      const parentEvents = yield* Context.get(a, SessionLog).events
      expect(loaded.header).toMatchObject({
        sessionId: "kid",
        parent: { sessionId: "one", boundary: parentEvents.length - 1 },
        seedLength: parentEvents.length
      })
      expect(loaded.events.length).toBe(parentEvents.length + 1)
      expect(loaded.events[loaded.events.length - 1]!.type).toBe("session/end-seed")
      const again = yield* Effect.flip(sessions.fork({ source: sid("one"), childId: sid("kid") }))
      expect(again).toMatchObject({ _tag: "ForkError", source: "one", reason: "child-exists", childId: "kid" })
      const missing = yield* Effect.flip(
        forkSession({ source: sid("ghost") }).pipe(Effect.provideService(SessionStore, store))
      )
      expect(missing).toBeInstanceOf(SessionNotFound)
    }).pipe(Effect.provide(
      Sessions.layer({ model: { provider: "p", model: "m" }, idleTimeToLive: "1 minute" }).pipe(
        Layer.provideMerge(
          Layer.mergeAll(ScriptedModel.layer([ScriptedModel.text("ok")]), Tools.layer(), SessionStore.layerMemory)
        )
      )
    )))

  it.scoped("8.10/6.1: Sessions.open of a session held by an Agent.layer over the same store fails AgentBusy {operation: open, phase: open}", () =>
    Effect.gen(function*() {
      const storeCtx = yield* Layer.build(SessionStore.layerMemory)
      const deps = Layer.mergeAll(ScriptedModel.layer([]), Tools.layer(), Layer.succeedContext(storeCtx))
      yield* Layer.build(
        Agent.layer({ model: { provider: "p", model: "m" }, sessionId: sid("x") }).pipe(Layer.provide(deps))
      )
      const sessionsCtx = yield* Layer.build(
        Sessions.layer({ model: { provider: "p", model: "m" }, idleTimeToLive: "1 minute" }).pipe(Layer.provide(deps))
      )
      const busy = yield* Effect.flip(Effect.scoped(Context.get(sessionsCtx, Sessions).open(sid("x"))))
      expect(busy).toBeInstanceOf(AgentBusy)
      expect(busy).toMatchObject({ sessionId: "x", operation: "open", phase: "open" })
    }))
})

describe("8.10 Sessions", () => {
  const sessions = Sessions.layer({ model: { provider: "p", model: "m" }, idleTimeToLive: "1 minute" })
  const deps = (script: Parameters<typeof ScriptedModel.layer>[0]) =>
    Layer.mergeAll(SessionStore.layerMemory, ScriptedModel.layer(script), Tools.layer())

  it.scoped("8.10: open creates or resumes, shares one live agent, and disposes it after idleTimeToLive without users", () =>
    Effect.gen(function*() {
      const s = yield* Sessions
      const store = yield* SessionStore
      const id = SessionId.make("one")
      const scope1 = yield* Scope.make()
      const ctx1 = yield* Scope.extend(s.open(id), scope1)
      expect(yield* store.exists(id)).toBe(true)
      const scope2 = yield* Scope.make()
      const ctx2 = yield* Scope.extend(s.open(id), scope2)
      const driver = Context.get(ctx1, Driver)
      expect(Context.get(ctx2, Driver)).toBe(driver)
      yield* driver.inject(plugin("C"))
      yield* Scope.close(scope1, Exit.void)
      yield* Scope.close(scope2, Exit.void)
      yield* TestClock.adjust("30 seconds")
      yield* settle
      expect(Exit.isSuccess(yield* Effect.exit(driver.inject(plugin("D"))))).toBe(true)
      yield* TestClock.adjust("31 seconds")
      yield* until(Effect.map(Effect.exit(driver.inject(plugin("E"))), (exit) => Exit.isFailure(exit)))
      expect(yield* Effect.flip(driver.inject(plugin("F")))).toBeInstanceOf(AgentDisposed)
      const again = yield* Scope.extend(s.open(id), yield* Scope.make())
      const inbox = Context.get(again, Inbox)
      expect((yield* inbox.nextStep).map((m) => m.id)).toEqual(["C", "D"])
      expect((yield* Context.get(again, SessionLog).events).map(notation)).toEqual([
        "INS(ns,0,[C])",
        "INS(ns,1,[D])",
        "ES"
      ])
    }).pipe(Effect.provide(sessions.pipe(Layer.provideMerge(deps([]))))))

  it.scoped("8.10 / 6.6: Sessions.fork flushes a source that is open in this process", () =>
    Effect.gen(function*() {
      const s = yield* Sessions
      const store = yield* SessionStore
      const id = SessionId.make("src")
      const ctx = yield* s.open(id)
      const driver = Context.get(ctx, Driver)
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      const total = (yield* Context.get(ctx, SessionLog).events).length
      const child = yield* s.fork({ source: id })
      expect((yield* store.load(child)).header.seedLength).toBe(total)
    }).pipe(Effect.provide(sessions.pipe(Layer.provideMerge(deps([ScriptedModel.text("a")]))))))
})
