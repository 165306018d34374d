import { describe, expect, it } from "@effect/vitest"
import { Either, ParseResult, Schema } from "effect"
import { CORE_EVENT_TYPES, isCoreType, SessionEvent, SessionHeader } from "../../src/domain/Event.js"
import { everyChunk } from "../fixtures/events.js"

const decode = Schema.decodeUnknownEither(SessionEvent, { onExcessProperty: "error" })
const encode = Schema.encodeEither(SessionEvent)

const roundTrip = (input: unknown): void => {
  const decoded = decode(input)
  if (Either.isLeft(decoded)) {
    throw new Error(
      `expected ${JSON.stringify(input)} to decode:\n${ParseResult.TreeFormatter.formatErrorSync(decoded.left)}`
    )
  }
  expect(decoded.right).toStrictEqual(input)
  const encoded = encode(decoded.right)
  if (Either.isLeft(encoded)) throw new Error(ParseResult.TreeFormatter.formatErrorSync(encoded.left))
  expect(encoded.right).toStrictEqual(input)
  // The encoded form is what a store persists: it survives JSON text unchanged.
  expect(JSON.parse(JSON.stringify(encoded.right))).toStrictEqual(input)
}

const rejection = (input: unknown): string => {
  const decoded = decode(input)
  if (Either.isRight(decoded)) throw new Error(`expected ${JSON.stringify(input)} to be rejected`)
  const message = ParseResult.TreeFormatter.formatErrorSync(decoded.left)
  expect(message).toBeTypeOf("string")
  expect(message.length).toBeGreaterThan(0)
  return message
}

const failure = {
  message: "overloaded",
  code: "RATE_LIMIT",
  status: 529,
  retryAfterMs: 2000,
  requestId: "req_1",
  retryable: true
}
const usage = {
  inputTokens: 120,
  outputTokens: 48,
  totalTokens: 168,
  reasoningTokens: 10,
  cacheReadTokens: 64,
  cacheWriteTokens: 0
}
const userMsg = {
  id: "0b6d4c1e-8f5a-4c39-9a8e-2f3f0e7c1a11",
  role: "user",
  content: [{ type: "text", text: "hello" }],
  source: { kind: "user" }
}
const toolResultMessage = {
  id: "interrupted-tool-result-call_1-9",
  role: "user",
  content: [{
    type: "tool-result",
    toolCallId: "call_1",
    isError: false,
    content: [{ type: "text", text: "42" }, { type: "image", mediaType: "image/png", data: "iVBORw0KGgo=" }]
  }],
  source: { kind: "tool", callId: "call_1" }
}
const assistantMessage = {
  id: "5f1c2f0a-1d7e-4a55-8c0f-3c8f1c0e2b22",
  role: "assistant",
  content: [
    { type: "reasoning", text: "think" },
    { type: "text", text: "Let me check." },
    { type: "tool-call", id: "call_1", name: "calc", arguments: "{\"x\":1}" }
  ],
  source: { kind: "model", provider: "anthropic", model: "claude", replayState: { signature: "abc", n: [1, 2] } }
}
const env = (type: string, data: unknown, extra: Record<string, unknown> = {}) => ({
  type,
  seq: 7,
  time: 1_700_000_000_000,
  data,
  ...extra
})

const coreEvents: ReadonlyArray<Record<string, unknown>> = [
  env("turn/start", { turn: 1 }),
  env("turn/end", { turn: 1, reason: { kind: "completed" } }),
  env("step/start", { turn: 1, step: 1 }),
  env("step/end", { turn: 1, step: 2 }),
  env("user/message", userMsg, { surfaceOp: "append" }),
  env("assistant/chunk", { turn: 1, step: 1, attempt: 1, chunk: { type: "text-delta", index: 0, text: "He" } }),
  env("assistant/message", { turn: 1, step: 1, attempt: 2, message: assistantMessage, usage, interrupted: true }, {
    surfaceOp: "append",
    sourceEventSeqs: [3, 4, 5]
  }),
  env("tool/call", { turn: 1, step: 1, callId: "call_1", name: "calc", arguments: "{\"x\":1}" }),
  env("tool/result", {
    turn: 1,
    step: 1,
    message: toolResultMessage,
    error: { name: "ToolFailed", code: "TOOL_OUTCOME_UNKNOWN" },
    meta: { durationMs: 12, tags: ["a"] }
  }, { surfaceOp: "append", sourceEventSeqs: [6] }),
  env("request/header", {
    header: {
      provider: "anthropic",
      model: "claude",
      system: "be brief",
      maxTokens: 1024,
      temperature: 0.2,
      tools: [{
        name: "calc",
        description: "adds",
        parameters: { type: "object", properties: { x: { type: "number" } } }
      }]
    },
    reason: "initial"
  }),
  env("llm/retry", { turn: 1, step: 1, attempt: 1, delayMs: 2000, failure }),
  env("agent/inbox/spliced", { target: "next-turn", start: 0, inserted: [userMsg] }),
  env("session/end-seed", {}),
  env("compaction/start", { turn: null, strategy: "summary", budget: { tokens: 1000 } }),
  env("compaction/summary", { turn: 2, summary: "we talked", covered: [0, 12], nested: { a: [null, true] } }),
  env("compaction/end", { turn: 3, error: { message: "model failed" }, attempts: 2 }),
  env("approval/request", {
    turn: 1,
    step: 1,
    callId: "call_1",
    tool: "Bash",
    input: { command: "make" },
    reason: "Bash needs approval in default mode",
    source: "mode"
  }),
  env("approval/answer", { callId: "call_1", decision: "deny", by: "bob", reason: "not now" })
]

describe("SessionEvent round trip", () => {
  it("covers every core event type", () => {
    expect(new Set(coreEvents.map((e) => e.type))).toStrictEqual(new Set(CORE_EVENT_TYPES))
  })

  for (const event of coreEvents) {
    it(`decodes and encodes ${String(event.type)}`, () => roundTrip(event))
  }

  it("keeps the minimal forms of optional fields", () => {
    roundTrip(env("request/header", { header: { provider: "p", model: "m", tools: [] }, reason: "resume" }))
    roundTrip(env("request/header", { header: { provider: "p", model: "m", tools: [] }, reason: "change" }))
    roundTrip(env("assistant/message", {
      turn: 1,
      step: 1,
      attempt: 1,
      message: { id: "m", role: "assistant", content: [], source: { kind: "model", provider: "p", model: "m" } }
    }, { surfaceOp: "append", sourceEventSeqs: [] }))
    roundTrip(env("tool/result", { turn: 2, step: 3, message: toolResultMessage }, {
      surfaceOp: { op: "replace", start: 4, end: 4 },
      sourceEventSeqs: [4, 5]
    }))
    roundTrip(
      env("user/message", userMsg, { surfaceOp: { op: "replace", start: 0, end: 5 }, sourceEventSeqs: [0, 1, 2] })
    )
    roundTrip(env("compaction/end", { turn: null }))
    roundTrip({ type: "turn/start", seq: 0, time: 0, data: { turn: 1 } })
  })

  const spliceShapes = {
    insertion: { target: "next-step", start: 2, inserted: [userMsg] },
    claim: { target: "next-step", start: 0, removedCount: 3, inserted: [] },
    cancellation: { target: "next-turn", start: 1, removedCount: 1, inserted: [], outcome: "canceled" },
    replacement: { target: "next-turn", start: 0, removedCount: 2, inserted: [userMsg], outcome: "canceled" }
  }
  for (const [shape, data] of Object.entries(spliceShapes)) {
    it(`round-trips a ${shape} splice`, () => roundTrip(env("agent/inbox/spliced", data)))
  }

  for (const chunk of everyChunk) {
    it(`round-trips an assistant/chunk carrying ${chunk.type} ${JSON.stringify(chunk).slice(0, 60)}`, () =>
      roundTrip(env("assistant/chunk", { turn: 2, step: 3, attempt: 1, chunk })))
  }

  const reasons = [
    { kind: "completed" },
    { kind: "max-tokens" },
    { kind: "blocked" },
    { kind: "blocked", message: "policy" },
    { kind: "aborted", reason: { kind: "user" } },
    { kind: "aborted", reason: { kind: "parent" } },
    { kind: "aborted", reason: { kind: "hook", reason: "budget" } },
    { kind: "aborted", reason: { kind: "disposed" } },
    { kind: "error", error: { message: "boom", code: "UNKNOWN" } },
    { kind: "interrupted" }
  ]
  for (const reason of reasons) {
    it(`round-trips turn/end ${JSON.stringify(reason)}`, () => roundTrip(env("turn/end", { turn: 4, reason })))
  }

  it("round-trips an ignorable extension event with arbitrary JSON data", () => {
    roundTrip(env("myext/note", { text: "hi", nested: [1, { a: null }] }, { ignorable: true }))
    roundTrip(env("myext/counter", 3, { ignorable: true }))
    roundTrip(env("declared/ext", null))
  })

  it("keeps unknown MessageSource kinds with their extra fields", () => {
    const sources = [
      { kind: "ide", file: "a.ts", line: 3 },
      { kind: "webhook", headers: { "x-id": "1" }, retries: [1, 2], ok: true, none: null },
      { kind: "x" }
    ]
    for (const source of sources) {
      const message = { ...userMsg, source }
      roundTrip(env("user/message", message, { surfaceOp: "append" }))
      roundTrip(env("agent/inbox/spliced", { target: "next-turn", start: 0, inserted: [message] }))
      const decoded = decode(env("user/message", message, { surfaceOp: "append" }))
      expect(Either.isRight(decoded) && (decoded.right.data as typeof message).source).toStrictEqual(source)
    }
  })
})

describe("SessionEvent rejections", () => {
  const turnStart = env("turn/start", { turn: 1 })
  const userEvent = env("user/message", userMsg, { surfaceOp: "append" })
  const withData = (event: Record<string, unknown>, data: unknown) => ({ ...event, data })
  const omit = (event: Record<string, unknown>, key: string) => {
    const { [key]: _, ...rest } = event
    return rest
  }

  it("accepts the baselines the rejections are derived from", () => {
    expect(Either.isRight(decode(turnStart))).toBe(true)
    expect(Either.isRight(decode(userEvent))).toBe(true)
  })

  const cases: ReadonlyArray<readonly [string, unknown]> = [
    ["an extra envelope key", { ...turnStart, extra: 1 }],
    ["an extra envelope key on an extension event", env("myext/x", 1, { ignorable: true, note: "x" })],
    ["an extra key in core data", withData(turnStart, { turn: 1, step: 1 })],
    ["a missing seq", omit(turnStart, "seq")],
    ["a missing time", omit(turnStart, "time")],
    ["a missing data", omit(env("myext/x", 1, { ignorable: true }), "data")],
    ["a negative seq", { ...turnStart, seq: -1 }],
    ["a fractional seq", { ...turnStart, seq: 1.5 }],
    ["a string seq", { ...turnStart, seq: "1" }],
    ["a non-integer time", { ...turnStart, time: 1.25 }],
    ["a negative time", { ...turnStart, time: -5 }],
    ["an unsafe integer time", { ...turnStart, time: 2 ** 60 }],
    ["an empty type", env("", 1, { ignorable: true })],
    ["a non-string type", env(5 as unknown as string, 1, { ignorable: true })],
    ["ignorable: false", env("myext/x", 1, { ignorable: false })],
    ["ignorable: false on a core event", { ...turnStart, ignorable: false }],
    ["user/message without surfaceOp", omit(userEvent, "surfaceOp")],
    ["user/message with an unknown surfaceOp", { ...userEvent, surfaceOp: "prepend" }],
    ["a replace surfaceOp with a negative start", { ...userEvent, surfaceOp: { op: "replace", start: -1, end: 2 } }],
    [
      "assistant/message with a replace surfaceOp",
      env("assistant/message", { turn: 1, step: 1, attempt: 1, message: assistantMessage }, {
        surfaceOp: { op: "replace", start: 0, end: 1 }
      })
    ],
    [
      "assistant/message without surfaceOp",
      env("assistant/message", { turn: 1, step: 1, attempt: 1, message: assistantMessage })
    ],
    [
      "assistant/message with interrupted: false",
      env("assistant/message", { turn: 1, step: 1, attempt: 1, message: assistantMessage, interrupted: false }, {
        surfaceOp: "append"
      })
    ],
    ["surfaceOp on turn/start", { ...turnStart, surfaceOp: "append" }],
    ["sourceEventSeqs on turn/start", { ...turnStart, sourceEventSeqs: [0] }],
    ["turn/start with turn 0", withData(turnStart, { turn: 0 })],
    ["turn/start with a fractional turn", withData(turnStart, { turn: 1.5 })],
    ["turn/start with data {}", withData(turnStart, {})],
    ["step/start with step 0", env("step/start", { turn: 1, step: 0 })],
    ["turn/end with an unknown reason", env("turn/end", { turn: 1, reason: { kind: "finished" } })],
    [
      "turn/end aborted with an unknown cause",
      env("turn/end", { turn: 1, reason: { kind: "aborted", reason: { kind: "timeout" } } })
    ],
    [
      "a tool-result message whose toolCallId differs from source.callId",
      env("tool/result", {
        turn: 1,
        step: 1,
        message: { ...toolResultMessage, source: { kind: "tool", callId: "call_2" } }
      }, {
        surfaceOp: "append"
      })
    ],
    [
      "a tool-result message with two result blocks",
      env("tool/result", {
        turn: 1,
        step: 1,
        message: { ...toolResultMessage, content: [toolResultMessage.content[0], toolResultMessage.content[0]] }
      }, { surfaceOp: "append" })
    ],
    ["an empty MessageSource kind", withData(userEvent, { ...userMsg, source: { kind: "" } })],
    ["a MessageSource without kind", withData(userEvent, { ...userMsg, source: { file: "a.ts" } })],
    [
      "a MessageSource with a non-JSON extra field",
      withData(userEvent, { ...userMsg, source: { kind: "ide", line: Number.NaN } })
    ],
    ["a UserMessage with an empty id", withData(userEvent, { ...userMsg, id: "" })],
    ["a UserMessage with an assistant role", withData(userEvent, { ...userMsg, role: "assistant" })],
    [
      "a UserMessage with a reasoning block",
      withData(userEvent, { ...userMsg, content: [{ type: "reasoning", text: "x" }] })
    ],
    ["a UserMessage with an extra key", withData(userEvent, { ...userMsg, extra: true })],
    [
      "a splice with removedCount 0",
      env("agent/inbox/spliced", { target: "next-turn", start: 0, removedCount: 0, inserted: [] })
    ],
    [
      "a splice with a negative start",
      env("agent/inbox/spliced", { target: "next-turn", start: -1, inserted: [userMsg] })
    ],
    ["a splice with an unknown target", env("agent/inbox/spliced", { target: "later", start: 0, inserted: [userMsg] })],
    [
      "a splice with an unknown outcome",
      env("agent/inbox/spliced", { target: "next-turn", start: 0, removedCount: 1, inserted: [], outcome: "done" })
    ],
    ["session/end-seed with data", env("session/end-seed", { x: 1 })],
    ["session/end-seed with a number as data", env("session/end-seed", 5)],
    ["session/end-seed with an array as data", env("session/end-seed", [])],
    ["session/end-seed with a string as data", env("session/end-seed", "seed")],
    ["compaction/start without turn", env("compaction/start", { strategy: "x" })],
    ["compaction/start with turn 0", env("compaction/start", { turn: 0 })],
    ["compaction/end with a malformed error", env("compaction/end", { turn: null, error: "failed" })],
    ["compaction/summary with a non-JSON extra field", env("compaction/summary", { turn: null, at: new Date(0) })],
    [
      "a chunk with a negative index",
      env("assistant/chunk", { turn: 1, step: 1, attempt: 1, chunk: { type: "block-end", index: -1 } })
    ],
    [
      "a tool-call block-start without its id",
      env("assistant/chunk", {
        turn: 1,
        step: 1,
        attempt: 1,
        chunk: { type: "block-start", index: 0, block: "tool-call", name: "x" }
      })
    ],
    [
      "usage with negative tokens",
      env("assistant/chunk", {
        turn: 1,
        step: 1,
        attempt: 1,
        chunk: { type: "usage", usage: { inputTokens: -1, outputTokens: 0 } }
      })
    ],
    ["a non-JSON extension data (NaN)", env("myext/x", Number.NaN, { ignorable: true })],
    ["a non-JSON extension data (nested undefined)", env("myext/x", { a: [undefined] }, { ignorable: true })],
    ["a non-object event", "turn/start"],
    ["null", null]
  ]

  for (const [name, input] of cases) {
    it(`rejects ${name}`, () => {
      rejection(input)
    })
  }

  it("names the offending value in the error", () => {
    expect(rejection({ ...turnStart, seq: -1 })).toContain("-1")
    expect(rejection(env("myext/x", Number.NaN, { ignorable: true }))).toContain("NaN")
    expect(rejection(withData(userEvent, { ...userMsg, source: { kind: "ide", line: Number.NaN } }))).toContain("line")
  })
})

describe("CORE_EVENT_TYPES", () => {
  it("lists the 18 distinct core types", () => {
    expect(CORE_EVENT_TYPES).toHaveLength(18)
    expect(new Set(CORE_EVENT_TYPES).size).toBe(18)
    for (const type of CORE_EVENT_TYPES) expect(isCoreType(type)).toBe(true)
    expect(isCoreType("myext/x")).toBe(false)
    expect(Object.isFrozen(CORE_EVENT_TYPES)).toBe(true)
  })

  it("refuses a core type as an extension event", () => {
    for (const type of CORE_EVENT_TYPES) rejection(env(type, { anything: "goes" }, { ignorable: true }))
  })
})

describe("SessionHeader", () => {
  const decodeHeader = Schema.decodeUnknownEither(SessionHeader, { onExcessProperty: "error" })

  it("round-trips a fresh and a forked header", () => {
    const fresh = { formatVersion: 1, sessionId: "s1", createdAt: 1_700_000_000_000, seedLength: 0 }
    const forked = {
      formatVersion: 1,
      sessionId: "s2",
      createdAt: 1_700_000_000_001,
      seedLength: 5,
      parent: { sessionId: "s1", boundary: 4 },
      metadata: { title: "fork", tags: ["a"] }
    }
    for (const header of [fresh, forked]) {
      const decoded = decodeHeader(header)
      expect(Either.isRight(decoded) && decoded.right).toStrictEqual(header)
    }
  })

  it("rejects an empty session id, a negative seedLength and extra keys", () => {
    const base = { formatVersion: 1, sessionId: "s1", createdAt: 0, seedLength: 0 }
    expect(Either.isLeft(decodeHeader({ ...base, sessionId: "" }))).toBe(true)
    expect(Either.isLeft(decodeHeader({ ...base, seedLength: -1 }))).toBe(true)
    expect(Either.isLeft(decodeHeader({ ...base, extra: 1 }))).toBe(true)
    expect(Either.isLeft(decodeHeader({ ...base, metadata: { at: Number.POSITIVE_INFINITY } }))).toBe(true)
  })
})
