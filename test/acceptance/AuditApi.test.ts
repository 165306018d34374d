/**
 * Acceptance audit of SPEC 8 (public API contract): every name, tag key, error identifier and
 * signature of the package root, checked at runtime and, for signatures, by the type checker.
 */
import { describe, expect, it } from "@effect/vitest"
import type { Context, Duration, Queue, Scope } from "effect"
import { Effect, Either, JSONSchema, Layer, Option, Schema, Stream } from "effect"
import type * as LanguageModel from "@effect/ai/LanguageModel"
import * as Tiller from "../../src/index.js"
import type {
  AgentOptions,
  AgentStatus,
  DeliveryError,
  DriverEvent,
  InboxTarget,
  Json,
  KnownIdState,
  LogViolation,
  Message,
  ModelRequest,
  NormalizedToolOutput,
  PreStepInput,
  PreStepListener,
  RequestConfig,
  RuleId,
  SessionEvent,
  SessionHeader,
  StreamChunk,
  SurfaceOp,
  ToolCallInfo,
  ToolContext,
  ToolDefinition,
  ToolMode,
  ToolOutput,
  ToolSchema,
  UserMessage
} from "../../src/index.js"
import {
  Agent,
  AgentBusy,
  AgentDisposed,
  CancelCause,
  CORE_EVENT_TYPES,
  Domain,
  Driver,
  DuplicateMessage,
  ForkError,
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
  SqliteSessionStore,
  Tool,
  ToolPreDecision,
  Tools,
  UnsupportedLogVersion,
  checkLog,
  deriveMessages,
  foldInbox,
  forkSession,
  newUserMessage,
  repairClosers,
  userMessage
} from "../../src/index.js"

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
      "agent/inbox/spliced", "assistant/chunk", "assistant/message", "compaction/end", "compaction/start",
      "compaction/summary", "llm/retry", "request/header", "session/end-seed", "step/end", "step/start",
      "tool/call", "tool/result", "turn/end", "turn/start", "user/message"
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
        "TextBlock", "ImageBlock", "ReasoningBlock", "ToolCallBlock", "ToolResultBlock", "MessageSource", "UserMessage",
        "AssistantMessage", "ToolResultMessage", "Message", "Usage", "LlmFailure", "StreamChunk", "CancelCause",
        "TurnEndReason", "ToolSchema", "RequestHeader", "SessionHeader", "SurfaceOp", "SessionEvent", "MessageId", "SessionId"
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
    expect(Object.isFrozen(m) && Object.isFrozen(m.content) && Object.isFrozen(m.content[0]) && Object.isFrozen(m.source)).toBe(true)
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
      { type: "agent/inbox/spliced", seq: 0, time: 0, data: { target: "next-turn", start: 0, inserted: [A] } } as SessionEvent
    ])
    expect(Either.isRight(ok) && ok.right.nextTurn).toEqual([A])
    const bad = foldInbox([
      { type: "agent/inbox/spliced", seq: 0, time: 0, data: { target: "next-turn", start: 1, inserted: [A] } } as SessionEvent
    ])
    expect(Either.isLeft(bad) && bad.left).toBeInstanceOf(MalformedLog)
    expect(Either.isLeft(bad) && bad.left.seq).toBe(0)
    expect(Either.isRight(foldInbox([
      { type: "agent/inbox/spliced", seq: 0, time: 0, data: { target: "next-turn", start: 1, inserted: [A] } } as SessionEvent
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
      const a = Tool.make("a", { description: "A", parameters: Schema.Struct({}), mode: "parallel", execute: () => Effect.succeed("x") })
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
    Effect.runPromise(Effect.gen(function*() {
      const model = yield* Model
      const request: ModelRequest = {
        sessionId: SessionId.make("s"), turn: 1, step: 1, attempt: 1, provider: "p", model: "m", tools: [], messages: []
      }
      const first = yield* Effect.flip(Stream.runCollect(model.stream(request)))
      expect(first).toBeInstanceOf(ModelError)
      expect(first.failure).toEqual({ message: "gone", code: "UNKNOWN" })
      const second = yield* Effect.flip(Stream.runCollect(model.stream(request)))
      expect(second.failure).toEqual({ message: "ScriptedModel: script exhausted", code: "UNKNOWN" })
      const scripted = yield* ScriptedModel
      expect((yield* scripted.requests).length).toBe(2)
      expect(yield* scripted.remaining).toBe(0)
    }).pipe(Effect.provide(ScriptedModel.layer([ScriptedModel.die("gone")])))))

  it("8.8: ScriptedModel chunk sequences of text, response and fail", () =>
    Effect.runPromise(Effect.gen(function*() {
      const model = yield* Model
      const request: ModelRequest = {
        sessionId: SessionId.make("s"), turn: 1, step: 1, attempt: 1, provider: "p", model: "m", tools: [], messages: []
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
    ])))))

  it("8: internal modules are not exported from the root", () => {
    const names = Object.keys(Tiller)
    for (const internal of ["claim", "Claim", "Writer", "SessionState", "Outbox", "Phase", "ToolRegistry"]) {
      expect(names).not.toContain(internal)
    }
    for (
      const required of [
        "Agent", "Sessions", "SessionStore", "MemoryStoreControl", "SqliteSessionStore", "forkSession", "Driver", "Inbox",
        "SessionLog", "PreStep", "PreStepDecision", "Hooks", "RequestErrorAction", "ToolPreDecision", "Model", "ScriptedModel",
        "Tool", "Tools", "Domain", "userMessage", "newUserMessage", "deriveMessages", "foldInbox", "repairClosers", "checkLog",
        "LOG_FORMAT_VERSION", "CORE_EVENT_TYPES"
      ]
    ) {
      expect(names, required).toContain(required)
    }
  })

  it("8.10: Agent.layer on an existing id fails SessionExists; resume of a missing id fails SessionNotFound", () =>
    Effect.runPromise(Effect.gen(function*() {
      const store = yield* SessionStore
      yield* store.create({ formatVersion: 1, sessionId: SessionId.make("taken"), createdAt: 0, seedLength: 0 }, [])
      const build = (options: Parameters<typeof Agent.layer>[0]) =>
        Effect.scoped(Effect.flip(Layer.build(Agent.layer(options).pipe(
          Layer.provide(Layer.merge(ScriptedModel.layer([]), Tools.layer())),
          Layer.provide(Layer.succeed(SessionStore, store))
        ))))
      expect(yield* build({ sessionId: SessionId.make("taken") })).toBeInstanceOf(SessionExists)
      expect(yield* build({ resume: SessionId.make("missing") })).toBeInstanceOf(SessionNotFound)
    }).pipe(Effect.provide(SessionStore.layerMemory))))
})

// ---------------------------------------------------------------------------------------------
// Type-level contract: each binding states a SPEC 8 signature and is assigned the exported value
// or type; the type checker fails on any difference in arity, argument order, option names or
// result types. Never called.
export const typeContract = (
  driver: Context.Tag.Service<Driver>,
  inbox: Context.Tag.Service<Inbox>,
  log: Context.Tag.Service<SessionLog>,
  preStep: Context.Tag.Service<PreStep>,
  hooks: Context.Tag.Service<Hooks>,
  tools: Context.Tag.Service<Tools>,
  store: Context.Tag.Service<SessionStore>,
  control: Context.Tag.Service<MemoryStoreControl>,
  sessions: Context.Tag.Service<Sessions>,
  scripted: Context.Tag.Service<ScriptedModel>,
  model: Context.Tag.Service<Model>
) => {
  // 8.1
  const _json: Json = { a: [1, "x", null, true] }
  const _target: InboxTarget = "next-step"
  const _status: AgentStatus = "running"
  const _known: KnownIdState = "entered"
  const _rule: RuleId = "R19"
  const _violation: LogViolation = { seq: 0, rule: "R1", message: "m" }
  const _userMessage: (input: {
    readonly id: string
    readonly text?: string
    readonly content?: ReadonlyArray<Tiller.TextBlock | Tiller.ImageBlock>
    readonly source?: Tiller.MessageSource
  }) => UserMessage = userMessage
  const _newUserMessage: (input: Omit<Parameters<typeof userMessage>[0], "id">) => Effect.Effect<UserMessage> = newUserMessage
  const _derive: (events: ReadonlyArray<SessionEvent>) => ReadonlyArray<Message> = deriveMessages
  const _fold: (events: ReadonlyArray<SessionEvent>, seedLength?: number) => Either.Either<
    { readonly nextTurn: ReadonlyArray<UserMessage>; readonly nextStep: ReadonlyArray<UserMessage> },
    MalformedLog
  > = foldInbox
  const _repair: (events: ReadonlyArray<SessionEvent>) => ReadonlyArray<SessionEvent> = repairClosers
  const _check: (
    events: ReadonlyArray<SessionEvent>,
    options?: { readonly seedLength?: number; readonly closed?: boolean }
  ) => ReadonlyArray<LogViolation> = checkLog
  const _cause: CancelCause = CancelCause.hook("r")
  const _plainCause: CancelCause = { kind: "user" }
  const _driverEvent: DriverEvent = { type: "agent/error", turn: 0, step: 0, error: 1 }
  // SPEC 2.2 types `sessionId` (and `parent.sessionId`) as plain `string`.
  const _header: SessionHeader = {
    formatVersion: 1,
    sessionId: "s",
    createdAt: 0,
    seedLength: 0,
    parent: { sessionId: "p", boundary: 1 },
    metadata: { a: 1 }
  }
  const _surface: SurfaceOp = { op: "replace", start: 0, end: 1 }
  const _chunk: StreamChunk = { type: "block-start", index: 0, block: "tool-call", id: "c", name: "n" }
  const _toolSchema: ToolSchema = { name: "n", description: "d", parameters: {} }
  const _usage: Tiller.Usage = { inputTokens: 1, outputTokens: 2, totalTokens: 3, reasoningTokens: 0, cacheReadTokens: 0, cacheWriteTokens: 0 }
  const _failure: Tiller.LlmFailure = { message: "m", code: "c", status: 429, retryAfterMs: 5, requestId: "r", retryable: true }
  const _reasons: ReadonlyArray<Tiller.TurnEndReason> = [
    { kind: "completed" }, { kind: "max-tokens" }, { kind: "blocked" }, { kind: "blocked", message: "m" },
    { kind: "aborted", reason: { kind: "hook", reason: "r" } }, { kind: "error", error: { message: "m", code: "c" } }, { kind: "interrupted" }
  ]
  const _assistant: Tiller.AssistantMessage = {
    id: MessageId.make("a"),
    role: "assistant",
    content: [{ type: "text", text: "t" }, { type: "reasoning", text: "r" }, { type: "tool-call", id: "c", name: "n", arguments: "{}" }],
    source: { kind: "model", provider: "p", model: "m", replayState: { x: [1] } }
  }
  const _toolResult: Tiller.ToolResultMessage = {
    id: MessageId.make("t"),
    role: "user",
    content: [{ type: "tool-result", toolCallId: "c", isError: false, content: [{ type: "text", text: "x" }, { type: "image", mediaType: "image/png", data: "AA" }] }],
    source: { kind: "tool", callId: "c" }
  }
  const _messageUnion: ReadonlyArray<Message> = [_assistant, _toolResult, userMessage({ id: "u", text: "x" })]
  const _chunkList: ReadonlyArray<StreamChunk> = [
    { type: "block-start", index: 0, block: "text" }, { type: "text-delta", index: 0, text: "t" },
    { type: "reasoning-delta", index: 0, text: "r" }, { type: "tool-call-delta", index: 0, arguments: "{" },
    { type: "block-end", index: 0 }, { type: "usage", usage: _usage }, { type: "replay-state", state: null },
    { type: "finish", finish: { kind: "stop" } }, { type: "finish", finish: { kind: "max-tokens" } },
    { type: "finish", finish: { kind: "error", failure: _failure } }, { type: "finish", finish: { kind: "aborted", failure: _failure } }
  ]
  const _requestHeader: Tiller.RequestHeader = { provider: "p", model: "m", system: "s", maxTokens: 1, temperature: 0, tools: [_toolSchema] }
  const _source: Tiller.MessageSource = { kind: "plugin", plugin: "x", extra: [1, { a: null }] }

  // 8.2 fields
  const _fields = (
    a: PreStepRejected,
    b: PreStepFailed,
    c: DuplicateMessage,
    d: InvalidSplice,
    e: InvalidEvent,
    f: AgentBusy,
    g: AgentDisposed,
    h: MaintenanceAborted,
    i: PersistenceError,
    j: MalformedLog,
    k: UnsupportedLogVersion,
    l: ForkError,
    m: SessionNotFound,
    n: SessionExists,
    o: ModelError
  ) => {
    const _a: { turn: number; step: number; reason?: string | undefined } = a
    const _b: { turn: number; step: number; cause: unknown } = b
    const _c: { id: Tiller.MessageId; state: KnownIdState } = c
    const _d: { target: string; start: unknown; deleteCount: unknown; reason: string } = d
    const _e: { type: string; reason: string; rule?: RuleId | undefined } = e
    const _f: { sessionId: Tiller.SessionId; operation: "runMaintenance" | "open"; phase: "running" | "maintenance" | "disposing" | "open" } = f
    const _g: { sessionId: Tiller.SessionId } = g
    const _h: { cause: CancelCause } = h
    const _i: { sessionId: string; operation: string; cause: unknown } = i
    const _j: { sessionId: string; seq?: number | undefined; reason: string } = j
    const _k: { sessionId: string; found: number; supported: number } = k
    const _l: { source: Tiller.SessionId; reason: "open-turn" | "invalid-boundary" | "child-exists"; boundary?: number | undefined; childId?: string | undefined } = l
    const _m: { sessionId: string } = m
    const _n: { sessionId: string } = n
    const _o: { failure: Tiller.LlmFailure } = o
    const _messages: ReadonlyArray<string> = [a.message, b.message, c.message, d.message, e.message, f.message, g.message, h.message, i.message, j.message, k.message, l.message, m.message, n.message, o.message]
    return [_a, _b, _c, _d, _e, _f, _g, _h, _i, _j, _k, _l, _m, _n, _o, _messages]
  }

  // 8.3 Driver
  const _sessionId: Tiller.SessionId = driver.sessionId
  const _send: (m: UserMessage, target: InboxTarget, wakeup: boolean) => Effect.Effect<void, DeliveryError> = driver.send
  const _followup: (m: UserMessage) => Effect.Effect<void, DeliveryError> = driver.followup
  const _steer: (m: UserMessage) => Effect.Effect<void, DeliveryError> = driver.steer
  const _inject: (m: UserMessage) => Effect.Effect<void, DeliveryError> = driver.inject
  const _deliveryError: DeliveryError = new AgentDisposed({ sessionId: SessionId.make("s") })
  const _deliveryErrorBack: InvalidEvent | DuplicateMessage | PersistenceError | AgentDisposed = _deliveryError
  const _cancel: (cause: CancelCause, options?: { readonly keepInbox?: boolean }) => Effect.Effect<void, PersistenceError | AgentDisposed> = driver.cancel
  const _whenIdle: Effect.Effect<void> = driver.whenIdle
  const _statusE: Effect.Effect<AgentStatus> = driver.status
  const _statusChanges: Stream.Stream<AgentStatus> = driver.statusChanges
  const _maintenance = <A, E, R>(task: Effect.Effect<A, E, R>): Effect.Effect<A, E | AgentBusy | MaintenanceAborted | PersistenceError | AgentDisposed, R> =>
    driver.runMaintenance(task)
  const _events: Stream.Stream<DriverEvent> = driver.events
  const _subscribe: Effect.Effect<Queue.Dequeue<DriverEvent>, never, Scope.Scope> = driver.subscribe

  // 8.4 Inbox
  const _nextTurn: Effect.Effect<ReadonlyArray<UserMessage>> = inbox.nextTurn
  const _nextStep: Effect.Effect<ReadonlyArray<UserMessage>> = inbox.nextStep
  const _snapshot: Effect.Effect<{ readonly nextTurn: ReadonlyArray<UserMessage>; readonly nextStep: ReadonlyArray<UserMessage> }> = inbox.snapshot
  const _hasPending: Effect.Effect<boolean> = inbox.hasPending
  const _append: (target: InboxTarget, m: UserMessage) => Effect.Effect<void, DeliveryError> = inbox.append
  const _prepend: (target: InboxTarget, m: UserMessage) => Effect.Effect<void, DeliveryError> = inbox.prepend
  const _splice: (target: InboxTarget, start: number, deleteCount: number, inserted: ReadonlyArray<UserMessage>) => Effect.Effect<ReadonlyArray<UserMessage>, InvalidSplice | DeliveryError> = inbox.splice
  const _replace: (id: Tiller.MessageId, m: UserMessage) => Effect.Effect<boolean, DeliveryError> = inbox.replace
  const _remove: (id: Tiller.MessageId) => Effect.Effect<boolean, PersistenceError | AgentDisposed> = inbox.remove
  const _clear: Effect.Effect<void, PersistenceError | AgentDisposed> = inbox.clear
  const _idState: (id: Tiller.MessageId) => Effect.Effect<Option.Option<KnownIdState>> = inbox.idState

  // 8.5 SessionLog
  const _logId: Tiller.SessionId = log.sessionId
  const _logHeader: SessionHeader = log.header
  const _first: number = log.firstLiveSeq
  const _logEvents: Effect.Effect<ReadonlyArray<SessionEvent>> = log.events
  const _stream: (fromSeq?: number) => Stream.Stream<SessionEvent> = log.stream
  const _messagesE: Effect.Effect<ReadonlyArray<Message>> = log.messages
  const _surfaceE: Effect.Effect<ReadonlyArray<number>> = log.surface
  const _durable: Effect.Effect<number> = log.durableSeq
  const _flush: Effect.Effect<void, PersistenceError> = log.flush
  const _logAppend: (input: {
    readonly type: string
    readonly data: unknown
    readonly surfaceOp?: SurfaceOp
    readonly sourceEventSeqs?: ReadonlyArray<number>
    readonly ignorable?: true
  }) => Effect.Effect<SessionEvent, InvalidEvent | DuplicateMessage | PersistenceError | AgentDisposed> = log.append

  // 8.6 PreStep
  const _decision: { enter(messages: ReadonlyArray<UserMessage>): PreStepDecision; reject(reason?: string): PreStepDecision } = PreStepDecision
  const _input: PreStepInput = { sessionId: SessionId.make("s"), turn: 1, step: 1, boundary: "later", messages: [] }
  const _listener: PreStepListener<PreStepFailed> = (_i, next) => next()
  const _register: <E>(listener: PreStepListener<E>, options?: { readonly prepend?: boolean }) => Effect.Effect<void, never, Scope.Scope> = preStep.register
  const _run: (input: PreStepInput) => Effect.Effect<ReadonlyArray<UserMessage>, PreStepRejected | PreStepFailed> = preStep.run

  // 8.7 Hooks
  const _config: RequestConfig = { provider: "p", model: "m", system: "s", maxTokens: 1, temperature: 0 }
  const _rea: { retry(delay: Duration.DurationInput): RequestErrorAction; fail: RequestErrorAction } = RequestErrorAction
  const _tpd: { allow: ToolPreDecision; deny(reason: string): ToolPreDecision } = ToolPreDecision
  const _info: ToolCallInfo = { sessionId: SessionId.make("s"), turn: 1, step: 1, callId: "c", name: "n", arguments: "{}", params: {} }
  const _onRequest = hooks.onRequest((input: { sessionId: Tiller.SessionId; turn: number; step: number; attempt: number; config: RequestConfig }, next: () => Effect.Effect<RequestConfig, unknown>) => next())
  const _onRequestError = hooks.onRequestError((input: { sessionId: Tiller.SessionId; turn: number; step: number; attempt: number; failure: Tiller.LlmFailure }, _next) => Effect.succeed(RequestErrorAction.fail))
  const _onTurnStopping: Effect.Effect<void, never, Scope.Scope> = hooks.onTurnStopping((input: { sessionId: Tiller.SessionId; turn: number; step: number }) => Effect.fail(input.step))
  const _onToolPre: Effect.Effect<void, never, Scope.Scope> = hooks.onToolPre((input: ToolCallInfo, _next) => Effect.succeed(ToolPreDecision.allow), { prepend: true })
  const _onToolPost: Effect.Effect<void, never, Scope.Scope> = hooks.onToolPost((input: ToolCallInfo & { readonly output: NormalizedToolOutput; readonly aborted: boolean }, _next) => Effect.succeed(input.output))

  const _waterfallPre: Tiller.Waterfall<ToolCallInfo, ToolPreDecision> = hooks.onToolPre
  const _waterfallShape: <E>(
    listener: (input: ToolCallInfo, next: () => Effect.Effect<ToolPreDecision, unknown>) => Effect.Effect<ToolPreDecision, E>,
    options?: { readonly prepend?: boolean }
  ) => Effect.Effect<void, never, Scope.Scope> = _waterfallPre
  const _extension: SessionEvent = { type: "x/y", seq: 0, time: 0, data: { a: 1 }, ignorable: true }

  // 8.8 Model seam
  const _modelStream: (request: ModelRequest) => Stream.Stream<StreamChunk, ModelError> = model.stream
  const _layerLM: Layer.Layer<Model, never, LanguageModel.LanguageModel> = Model.layerLanguageModel
  const _requests: Effect.Effect<ReadonlyArray<ModelRequest>> = scripted.requests
  const _remaining: Effect.Effect<number> = scripted.remaining
  const _scriptLayer: (script: ReadonlyArray<Tiller.ScriptEntry>) => Layer.Layer<Model | ScriptedModel> = ScriptedModel.layer
  const _text: (text: string, options?: Tiller.EntryOptions & { readonly deltas?: ReadonlyArray<string>; readonly usage?: Tiller.Usage }) => Tiller.ScriptEntry = ScriptedModel.text
  const _response: (spec: Tiller.ResponseSpec & Tiller.EntryOptions) => Tiller.ScriptEntry = ScriptedModel.response
  const _fail: (failure: Tiller.LlmFailure, options?: Tiller.EntryOptions & { readonly partial?: Tiller.PartialSpec; readonly finish?: "error" | "aborted" }) => Tiller.ScriptEntry = ScriptedModel.fail
  const _die: (message: string, options?: Tiller.EntryOptions) => Tiller.ScriptEntry = ScriptedModel.die
  const _hang: (partial?: Tiller.PartialSpec, options?: Tiller.EntryOptions) => Tiller.ScriptEntry = ScriptedModel.hang
  const _chunks: (chunks: ReadonlyArray<unknown>, options?: Tiller.EntryOptions & { readonly then?: "end" | "hang" }) => Tiller.ScriptEntry = ScriptedModel.chunks
  const _spec: Tiller.ResponseSpec = { text: ["a"], reasoning: "r", toolCalls: [{ id: "c", name: "n", arguments: {}, partial: true }], finish: "max-tokens", usage: { inputTokens: 1, outputTokens: 1 }, replayState: null }
  const _partial: Tiller.PartialSpec = { text: "t", reasoning: "r", closed: true, toolCall: { id: "c", name: "n", arguments: "{" }, usage: { inputTokens: 1, outputTokens: 1 } }
  const _entryOptions: Tiller.EntryOptions = { awaitBefore: Effect.fail(1), during: Effect.void, afterFinish: Effect.void, onInterrupt: Effect.void }

  // 8.9 Tools
  const _output: ToolOutput = { content: "x", isError: false, additionalContexts: [], concludesTurn: true, meta: { a: 1 } }
  const _normalized: NormalizedToolOutput = { content: [], isError: false, additionalContexts: [], concludesTurn: false }
  const _ctx = (ctx: ToolContext) => {
    const _s: Tiller.SessionId = ctx.sessionId
    const _d: (m: UserMessage) => Effect.Effect<void> = ctx.deferContext
    return [_s, _d, ctx.turn, ctx.step, ctx.callId]
  }
  const _mode: ToolMode = "parallel"
  const _definition: ToolDefinition<typeof Schema.String> = Tool.make("n", { description: "d", parameters: Schema.String, execute: (s: string) => Effect.succeed(s) })
  const _register2: (tool: ToolDefinition<any>) => Effect.Effect<void, never, Scope.Scope> = tools.register
  const _setMode: (name: string, mode: ToolMode) => Effect.Effect<void> = tools.setMode
  const _list: Effect.Effect<ReadonlyArray<ToolSchema>> = tools.list
  const _max: number = tools.maxParallelToolCalls
  const _toolsLayer: (options?: { readonly tools?: ReadonlyArray<ToolDefinition<any>>; readonly maxParallelToolCalls?: number }) => Layer.Layer<Tools> = Tools.layer

  // 8.10 storage, agent, sessions
  const _create: (header: SessionHeader, events: ReadonlyArray<SessionEvent>) => Effect.Effect<void, SessionExists | PersistenceError> = store.create
  const _load: (id: Tiller.SessionId) => Effect.Effect<{ readonly header: SessionHeader; readonly events: ReadonlyArray<SessionEvent> }, SessionNotFound | MalformedLog | UnsupportedLogVersion | PersistenceError> = store.load
  const _storeAppend: (id: Tiller.SessionId, events: readonly [SessionEvent, ...Array<SessionEvent>]) => Effect.Effect<void, PersistenceError> = store.append
  const _exists: (id: Tiller.SessionId) => Effect.Effect<boolean, PersistenceError> = store.exists
  const _storeList: Effect.Effect<ReadonlyArray<SessionHeader>, PersistenceError> = store.list
  const _layerMemory: Layer.Layer<SessionStore | MemoryStoreControl> = SessionStore.layerMemory
  const _layerMemoryFrom: (snapshot: Tiller.StoreSnapshot) => Layer.Layer<SessionStore | MemoryStoreControl> = SessionStore.layerMemoryFrom
  const _failAppends: (n: number) => Effect.Effect<void> = control.failAppends
  const _hold: Effect.Effect<void> = control.hold
  const _release: Effect.Effect<void> = control.release
  const _appendCalls: Effect.Effect<number> = control.appendCalls
  const _snap: Effect.Effect<Tiller.StoreSnapshot> = control.snapshot
  const _sqlite: { readonly layer: (options: { readonly filename: string }) => Layer.Layer<SessionStore, PersistenceError> } = SqliteSessionStore
  const _fork: (options: { readonly source: Tiller.SessionId; readonly boundary?: number; readonly childId?: Tiller.SessionId }) => Effect.Effect<Tiller.SessionId, ForkError | SessionNotFound | MalformedLog | UnsupportedLogVersion | PersistenceError, SessionStore> = forkSession
  const _options: AgentOptions = {
    model: { provider: "p", model: "m" },
    system: "s",
    maxTokens: 1,
    temperature: 0,
    invariants: "off",
    eventTypes: ["x/y"],
    durability: { batchSize: 1, batchWindow: "1 second", writeRetry: undefined as unknown as import("effect").Schedule.Schedule<unknown, unknown> }
  }
  const _agent: {
    readonly layer: (options: AgentOptions & ({ readonly sessionId: Tiller.SessionId } | { readonly resume: Tiller.SessionId })) => Layer.Layer<
      Driver | Inbox | SessionLog | PreStep | Hooks,
      SessionExists | SessionNotFound | MalformedLog | UnsupportedLogVersion | PersistenceError | AgentBusy,
      SessionStore | Model | Tools
    >
  } = Agent
  const _open: (id: Tiller.SessionId) => Effect.Effect<
    Context.Context<Driver | Inbox | SessionLog | PreStep | Hooks>,
    SessionNotFound | MalformedLog | UnsupportedLogVersion | PersistenceError | AgentBusy,
    Scope.Scope
  > = sessions.open
  const _sfork: (options: Parameters<typeof forkSession>[0]) => Effect.Effect<Tiller.SessionId, ForkError | SessionNotFound | MalformedLog | UnsupportedLogVersion | PersistenceError> = sessions.fork
  const _sessionsLayer: (options: AgentOptions & { readonly idleTimeToLive: Duration.DurationInput }) => Layer.Layer<Sessions, never, SessionStore | Model | Tools> = Sessions.layer
  return [
    _waterfallShape, _extension,
    _usage, _failure, _reasons, _messageUnion, _chunkList, _requestHeader, _source,
    _json, _target, _status, _known, _rule, _violation, _userMessage, _newUserMessage, _derive, _fold, _repair, _check, _cause,
    _plainCause, _driverEvent, _header, _surface, _chunk, _toolSchema, _fields, _sessionId, _send, _followup, _steer, _inject,
    _deliveryErrorBack, _cancel, _whenIdle, _statusE, _statusChanges, _maintenance, _events, _subscribe, _nextTurn, _nextStep,
    _snapshot, _hasPending, _append, _prepend, _splice, _replace, _remove, _clear, _idState, _logId, _logHeader, _first,
    _logEvents, _stream, _messagesE, _surfaceE, _durable, _flush, _logAppend, _decision, _input, _listener, _register, _run,
    _config, _rea, _tpd, _info, _onRequest, _onRequestError, _onTurnStopping, _onToolPre, _onToolPost, _modelStream, _layerLM,
    _requests, _remaining, _scriptLayer, _text, _response, _fail, _die, _hang, _chunks, _spec, _partial, _entryOptions, _output,
    _normalized, _ctx, _mode, _definition, _register2, _setMode, _list, _max, _toolsLayer, _create, _load, _storeAppend, _exists,
    _storeList, _layerMemory, _layerMemoryFrom, _failAppends, _hold, _release, _appendCalls, _snap, _sqlite, _fork, _options,
    _agent, _open, _sfork, _sessionsLayer
  ]
}

