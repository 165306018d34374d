/**
 * OpenAiCompatibleModel against a fake Chat Completions server on 127.0.0.1: the adapter alone
 * (request body, chunks, failures, the API key) and inside an agent (the durable events). The
 * sockets are real, but nothing under test reads wall time, so the tests run under TestClock and the
 * retry backoff is stepped with `TestClock.adjust`.
 */
import * as FetchHttpClient from "@effect/platform/FetchHttpClient"
import * as HttpClient from "@effect/platform/HttpClient"
import * as HttpClientResponse from "@effect/platform/HttpClientResponse"
import { describe, expect, it } from "@effect/vitest"
import {
  Chunk,
  ConfigError,
  ConfigProvider,
  Effect,
  Either,
  Fiber,
  Layer,
  Option,
  Queue,
  Redacted,
  Schema,
  Stream,
  TestClock
} from "effect"
import { checkLog } from "../../src/domain/Check.js"
import type { DriverEvent } from "../../src/domain/DriverEvent.js"
import { MessageId } from "../../src/domain/Ids.js"
import type { Json } from "../../src/domain/Json.js"
import type { Message, ToolSchema } from "../../src/domain/Values.js"
import * as OpenAiCompatibleModel from "../../src/layers/OpenAiCompatibleModel.js"
import { Driver } from "../../src/services/Driver.js"
import type { ModelRequest } from "../../src/services/Model.js"
import { Model } from "../../src/services/Model.js"
import { SessionLog } from "../../src/services/SessionLog.js"
import { Tool } from "../../src/services/Tools.js"
import { events, notation, plugin, shape, user } from "../agent/harness.js"
import type { Run } from "../fixtures/adapterHarness.js"
import {
  agentOver,
  assistantFrom,
  firstRetry,
  ofType,
  pieceClient,
  requestFor,
  resultParts,
  sourceFor,
  streamRun,
  userParts
} from "../fixtures/adapterHarness.js"
import * as Chunks from "../fixtures/streamChunks.js"
import type { ChatCompletionsServer, Reply } from "./fake/ChatCompletionsServer.js"
import * as Fake from "./fake/ChatCompletionsServer.js"

const KEY = "sk-test-9f8e7d6c5b4a"
const apiKey = Redacted.make(KEY)

const request = requestFor("openai-compatible", "fake-model")

const modelLayer = (
  server: ChatCompletionsServer,
  options: { readonly apiKey?: Redacted.Redacted<string>; readonly maxTokens?: number } = {}
) =>
  OpenAiCompatibleModel.layer({ baseUrl: server.baseUrl, model: "fake-model", ...options }).pipe(
    Layer.provide(FetchHttpClient.layer)
  )

/** Starts a fake server with `replies` and streams one request through the adapter. */
const run = (
  replies: ReadonlyArray<Reply>,
  req: ModelRequest = request(),
  options: { readonly apiKey?: Redacted.Redacted<string> } = {}
) =>
  Effect.gen(function*() {
    const server = yield* Fake.make(replies)
    const out = yield* streamRun(req).pipe(Effect.provide(modelLayer(server, options)))
    return { run: out, received: yield* server.received, label: hostOf(server) }
  })

/** The name failures give the fake host: its host and port. */
const hostOf = (server: ChatCompletionsServer) => new URL(server.baseUrl).host

const usage = { prompt_tokens: 12, completion_tokens: 5, total_tokens: 17 }
const tillerUsage = { inputTokens: 12, outputTokens: 5, totalTokens: 17 }
const say = (
  text: string
) => [Fake.chunk({ role: "assistant", content: text }), Fake.chunk({}, "stop"), Fake.usageChunk(usage)]

const modelSource = sourceFor("openai-compatible", "fake-model")
const assistant = assistantFrom(modelSource)

// ---------------------------------------------------------------------------------------------------

describe("OpenAiCompatibleModel request", () => {
  it.scoped("posts the system prompt, every message as its own message in order, tools and limits", () =>
    Effect.gen(function*() {
      const messages: ReadonlyArray<Message> = [
        userParts("u1", [{ type: "text", text: "first" }]),
        userParts("u2", [{ type: "text", text: "context" }], { kind: "plugin", plugin: "p" }),
        assistant("a1", [
          { type: "reasoning", text: "think" },
          { type: "text", text: "calling" },
          { type: "tool-call", id: "c1", name: "lookup", arguments: "{\"q\":\"x\"}" },
          { type: "tool-call", id: "c2", name: "chart", arguments: "{}" }
        ]),
        resultParts("r1", "c1", false, [{ type: "text", text: "found" }]),
        {
          id: MessageId.make("r2"),
          role: "user",
          content: [{
            type: "tool-result",
            toolCallId: "c2",
            isError: true,
            content: [{ type: "text", text: "drawn" }, { type: "image", mediaType: "image/png", data: "AQID" }]
          }],
          source: { kind: "tool", callId: "c2" }
        },
        userParts("u3", [{ type: "text", text: "look" }, { type: "image", mediaType: "image/jpeg", data: "BAUG" }], {
          kind: "steer"
        }),
        assistant("a2", [{ type: "reasoning", text: "only" }]),
        userParts("u4", [{ type: "text", text: "last" }])
      ]
      const tools: ReadonlyArray<ToolSchema> = [
        {
          name: "lookup",
          description: "Look a word up",
          // As Tools.list has it (JSONSchema.make's output); the request carries the bare schema.
          parameters: {
            $schema: "http://json-schema.org/draft-07/schema#",
            type: "object",
            properties: { q: { type: "string" } },
            required: ["q"]
          }
        },
        { name: "chart", description: "Draw", parameters: null }
      ]
      const { received } = yield* run(
        [Fake.sse(say("ok"))],
        request({ system: "be brief", messages, tools, maxTokens: 256, temperature: 0.2 }),
        { apiKey }
      )
      expect(received).toHaveLength(1)
      const sent = received[0]!
      expect(sent.method).toBe("POST")
      expect(sent.path).toBe("/v1/chat/completions")
      expect(sent.headers["authorization"]).toBe(`Bearer ${KEY}`)
      expect(sent.headers["content-type"]).toBe("application/json")
      expect(sent.headers["accept"]).toBe("text/event-stream")
      expect(sent.body).toStrictEqual({
        model: "fake-model",
        messages: [
          { role: "system", content: "be brief" },
          { role: "user", content: "first" },
          { role: "user", content: "context" },
          {
            role: "assistant",
            content: "calling",
            tool_calls: [
              { id: "c1", type: "function", function: { name: "lookup", arguments: "{\"q\":\"x\"}" } },
              { id: "c2", type: "function", function: { name: "chart", arguments: "{}" } }
            ]
          },
          { role: "tool", tool_call_id: "c1", content: "found" },
          { role: "tool", tool_call_id: "c2", content: "drawn" },
          {
            role: "user",
            content: [
              { type: "text", text: "images returned by tool call c2:" },
              { type: "image_url", image_url: { url: "data:image/png;base64,AQID" } }
            ]
          },
          {
            role: "user",
            content: [
              { type: "text", text: "look" },
              { type: "image_url", image_url: { url: "data:image/jpeg;base64,BAUG" } }
            ]
          },
          { role: "user", content: "last" }
        ],
        stream: true,
        stream_options: { include_usage: true },
        tools: [
          {
            type: "function",
            function: {
              name: "lookup",
              description: "Look a word up",
              parameters: { type: "object", properties: { q: { type: "string" } }, required: ["q"] }
            }
          },
          {
            type: "function",
            function: { name: "chart", description: "Draw", parameters: { type: "object", properties: {} } }
          }
        ],
        max_tokens: 256,
        temperature: 0.2
      })
    }))

  it.scoped("without a key there is no Authorization header; no tools means no tools field", () =>
    Effect.gen(function*() {
      const server = yield* Fake.make([Fake.sse(say("ok"))])
      yield* Effect.flatMap(Model, (model) => Stream.runDrain(model.stream(request()))).pipe(
        Effect.provide(modelLayer(server, { maxTokens: 99 }))
      )
      const [sent] = yield* server.received
      expect(sent!.headers["authorization"]).toBeUndefined()
      expect(sent!.body).toStrictEqual({
        model: "fake-model",
        messages: [],
        stream: true,
        stream_options: { include_usage: true },
        max_tokens: 99
      })
    }))

  it("reasoning goes back with tool calls in the field its replay state names, only then; empty arguments are sent as {}", () => {
    const assistant = (id: string, replayState?: Json, calls = true): Message => ({
      id: MessageId.make(id),
      role: "assistant",
      content: [
        { type: "reasoning", text: `thought ${id}` },
        { type: "text", text: id },
        ...(calls ? [{ type: "tool-call" as const, id: `call_${id}`, name: "clock", arguments: "{}" }] : [])
      ],
      source: replayState === undefined ? modelSource : { ...modelSource, replayState }
    })
    const call = (id: string) => ({ id: `call_${id}`, type: "function", function: { name: "clock", arguments: "{}" } })
    const messages: ReadonlyArray<Message> = [
      {
        id: MessageId.make("a1"),
        role: "assistant",
        content: [
          { type: "reasoning", text: "weather first" },
          { type: "reasoning", text: "then the time" },
          { type: "tool-call", id: "c1", name: "clock", arguments: "" },
          { type: "tool-call", id: "c2", name: "clock", arguments: "  " }
        ],
        source: { ...modelSource, replayState: { "openai-compatible": { reasoningField: "reasoning_content" } } }
      },
      assistant("groq", { "openai-compatible": { reasoningField: "reasoning" } }),
      assistant("final", { "openai-compatible": { reasoningField: "reasoning_content" } }, false),
      assistant("other", { anthropic: { content: [{ type: "text" }] } }),
      assistant("none"),
      assistant("unknown", { "openai-compatible": { reasoningField: "thinking" } })
    ]
    expect(OpenAiCompatibleModel.toChatMessages({ messages })).toStrictEqual([
      {
        role: "assistant",
        content: null,
        reasoning_content: "weather first\nthen the time",
        tool_calls: [
          { id: "c1", type: "function", function: { name: "clock", arguments: "{}" } },
          { id: "c2", type: "function", function: { name: "clock", arguments: "{}" } }
        ]
      },
      { role: "assistant", content: "groq", reasoning: "thought groq", tool_calls: [call("groq")] },
      { role: "assistant", content: "final" },
      { role: "assistant", content: "other", tool_calls: [call("other")] },
      { role: "assistant", content: "none", tool_calls: [call("none")] },
      { role: "assistant", content: "unknown", tool_calls: [call("unknown")] }
    ])
  })
})

describe("OpenAiCompatibleModel chunks", () => {
  it.scoped("reasoning_content, reasoning and content deltas become blocks; usage precedes finish", () =>
    Effect.gen(function*() {
      const { run: out } = yield* run([Fake.sse([
        Fake.chunk({ role: "assistant", content: "" }),
        Fake.chunk({ reasoning_content: "hm" }),
        Fake.chunk({ reasoning: "m" }),
        Fake.chunk({ content: "Hel" }),
        Fake.chunk({ content: "lo", reasoning_content: null }),
        Fake.chunk({}, "stop"),
        Fake.usageChunk({
          ...usage,
          prompt_tokens_details: { cached_tokens: 4 },
          completion_tokens_details: { reasoning_tokens: 2 }
        })
      ])])
      expect(out.error).toStrictEqual(Option.none())
      expect(out.chunks).toStrictEqual([
        ...Chunks.reasoningBlock(0, "hm", "m"),
        ...Chunks.textBlock(1, "Hel", "lo"),
        Chunks.usage({ ...tillerUsage, reasoningTokens: 2, cacheReadTokens: 4 }),
        { type: "replay-state", state: { "openai-compatible": { reasoningField: "reasoning_content" } } },
        Chunks.stop
      ])
    }))

  it.scoped("parallel tool calls stream by index, interleaved and in pieces; empty arguments become {}", () =>
    Effect.gen(function*() {
      const { run: out } = yield* run([Fake.sse([
        Fake.chunk({ content: "two calls" }),
        Fake.chunk({ tool_calls: [Fake.toolCall(0, { id: "call_a", name: "lookup", arguments: "{\"q\":" })] }),
        Fake.chunk({ tool_calls: [Fake.toolCall(1, { id: "call_b", name: "now" })] }),
        Fake.chunk({ tool_calls: [Fake.toolCall(0, { arguments: "\"x\"}" })] }),
        Fake.chunk({}, "tool_calls"),
        Fake.usageChunk(usage)
      ])])
      expect(out.error).toStrictEqual(Option.none())
      expect(out.chunks).toStrictEqual([
        ...Chunks.textBlock(0, "two calls"),
        { type: "block-start", index: 1, block: "tool-call", id: "call_a", name: "lookup" },
        { type: "tool-call-delta", index: 1, arguments: "{\"q\":" },
        { type: "block-start", index: 2, block: "tool-call", id: "call_b", name: "now" },
        { type: "tool-call-delta", index: 1, arguments: "\"x\"}" },
        { type: "block-end", index: 1 },
        { type: "tool-call-delta", index: 2, arguments: "{}" },
        { type: "block-end", index: 2 },
        { type: "usage", usage: tillerUsage },
        Chunks.stop
      ])
    }))

  it.scoped("complete calls repeated at index 0 with new ids are separate calls; a missing id is made up", () =>
    Effect.gen(function*() {
      const { run: out } = yield* run(
        [Fake.sse([
          Fake.chunk({ tool_calls: [Fake.toolCall(0, { id: "x1", name: "a", arguments: "{}" })] }),
          Fake.chunk({ tool_calls: [Fake.toolCall(0, { id: "x2", name: "b", arguments: "{\"n\":1}" })] }),
          Fake.chunk({ tool_calls: [{ index: 1, function: { name: "c", arguments: "[]" } }] }),
          Fake.chunk({}, "tool_calls")
        ])],
        request({ turn: 3, step: 2, attempt: 1 })
      )
      expect(out.error).toStrictEqual(Option.none())
      expect(out.chunks).toStrictEqual([
        { type: "block-start", index: 0, block: "tool-call", id: "x1", name: "a" },
        { type: "tool-call-delta", index: 0, arguments: "{}" },
        { type: "block-start", index: 1, block: "tool-call", id: "x2", name: "b" },
        { type: "tool-call-delta", index: 1, arguments: "{\"n\":1}" },
        { type: "block-start", index: 2, block: "tool-call", id: "call_3_2_1_2", name: "c" },
        { type: "tool-call-delta", index: 2, arguments: "[]" },
        { type: "block-end", index: 0 },
        { type: "block-end", index: 1 },
        { type: "block-end", index: 2 },
        Chunks.stop
      ])
    }))

  it.scoped("an event split across reads, CRLF lines, comments, multi-byte text and no blank line before EOF", () =>
    Effect.gen(function*() {
      const body = [
        ": keep-alive\r\n\r\n",
        `data: ${JSON.stringify(Fake.chunk({ content: "héllo 🙂" }))}\r\n\r\n`,
        "event: message\r\n",
        `data: ${JSON.stringify(Fake.chunk({ content: " wörld" }))}\r\n\r\n`,
        `data: ${JSON.stringify(Fake.chunk({}, "stop"))}\r\n\r\n`,
        "data: [DONE]"
      ].join("")
      const { run: out } = yield* run([Fake.raw(body, 40)])
      expect(out.error).toStrictEqual(Option.none())
      expect(out.chunks).toStrictEqual([
        ...Chunks.textBlock(0, "héllo 🙂", " wörld"),
        Chunks.stop
      ])
    }))

  it.effect("every byte boundary of the body, inside events and inside multi-byte characters, is handled", () =>
    Effect.gen(function*() {
      const body = new TextEncoder().encode(
        Fake.event(Fake.chunk({ reasoning_content: "ü" })) + Fake.event(Fake.chunk({ content: "🙂 ok" })) +
          Fake.event(
            Fake.chunk({ tool_calls: [Fake.toolCall(0, { id: "c1", name: "f", arguments: "{\"a\":\"ß\"}" })] })
          ) +
          Fake.event(Fake.chunk({}, "tool_calls")) + Fake.event(Fake.usageChunk(usage)) + Fake.DONE
      )
      // A client whose response body arrives one byte per read.
      const client = pieceClient(Array.from(body, (byte) => Uint8Array.of(byte)))
      const chunks = yield* Effect.flatMap(Model, (model) => Stream.runCollect(model.stream(request()))).pipe(
        Effect.provide(OpenAiCompatibleModel.layer({ baseUrl: "http://127.0.0.1:1/v1", model: "m" })),
        Effect.provideService(HttpClient.HttpClient, client)
      )
      expect(Chunk.toReadonlyArray(chunks)).toStrictEqual([
        ...Chunks.reasoningBlock(0, "ü"),
        ...Chunks.textBlock(1, "🙂 ok"),
        ...Chunks.toolCallBlock(2, "c1", "f", "{\"a\":\"ß\"}"),
        { type: "usage", usage: tillerUsage },
        { type: "replay-state", state: { "openai-compatible": { reasoningField: "reasoning_content" } } },
        Chunks.stop
      ])
    }))

  it.scoped("finish reasons: length is max-tokens (cut arguments kept), content_filter a non-retryable error", () =>
    Effect.gen(function*() {
      const { run: cut } = yield* run([Fake.sse([
        Fake.chunk({ tool_calls: [Fake.toolCall(0, { id: "c", name: "a", arguments: "{\"q\":\"unfin" })] }),
        Fake.chunk({}, "length")
      ])])
      expect(cut.error).toStrictEqual(Option.none())
      expect(cut.chunks.slice(-2)).toStrictEqual([{ type: "block-end", index: 0 }, {
        type: "finish",
        finish: { kind: "max-tokens" }
      }])
      const { label, run: filtered } = yield* run([
        Fake.sse([Fake.chunk({ content: "no" }), Fake.chunk({}, "content_filter")])
      ])
      expect(filtered.chunks.slice(-1)).toStrictEqual([{
        type: "finish",
        finish: {
          kind: "error",
          failure: {
            message: `${label}: the content filter stopped the response`,
            code: "CONTENT_FILTER",
            retryable: false
          }
        }
      }])
    }))

  it.scoped("a body that ends after the finish reason without [DONE] still finishes", () =>
    Effect.gen(function*() {
      const { run: out } = yield* run([Fake.sse(say("fine"), { done: false })])
      expect(out.error).toStrictEqual(Option.none())
      expect(out.chunks.slice(-2)).toStrictEqual([
        { type: "usage", usage: tillerUsage },
        Chunks.stop
      ])
    }))
  it.scoped("delta.refusal streams no text and finishes as a non-retryable REFUSAL error holding its words", () =>
    Effect.gen(function*() {
      const { label, run: out } = yield* run([Fake.sse([
        Fake.chunk({ role: "assistant", content: null, refusal: "" }),
        Fake.chunk({ refusal: "I'm sorry, I can't" }),
        Fake.chunk({ refusal: " assist with that request." }),
        Fake.chunk({}, "stop"),
        Fake.usageChunk(usage)
      ])])
      expect(out.error).toStrictEqual(Option.none())
      expect(out.chunks).toStrictEqual([
        { type: "usage", usage: tillerUsage },
        {
          type: "finish",
          finish: {
            kind: "error",
            failure: {
              message: `${label}: the model refused: I'm sorry, I can't assist with that request.`,
              code: "REFUSAL",
              retryable: false
            }
          }
        }
      ])
    }))

  it.scoped("delta.reasoning (Groq) is recorded as the field `reasoning`; x_groq.usage is the usage", () =>
    Effect.gen(function*() {
      const { run: out } = yield* run([Fake.sse([
        { ...Fake.chunk({ role: "assistant", content: "" }), x_groq: { id: "req_1", seed: 7 } },
        Fake.chunk({ reasoning: "Okay" }),
        Fake.chunk({ content: "4" }),
        { ...Fake.chunk({}, "stop"), x_groq: { id: "req_1", usage: { queue_time: 0.1, ...usage } } }
      ])])
      expect(out.error).toStrictEqual(Option.none())
      expect(out.chunks).toStrictEqual([
        ...Chunks.reasoningBlock(0, "Okay"),
        ...Chunks.textBlock(1, "4"),
        { type: "usage", usage: tillerUsage },
        { type: "replay-state", state: { "openai-compatible": { reasoningField: "reasoning" } } },
        Chunks.stop
      ])
    }))

  it.scoped("Azure's choices-less first chunk with prompt_filter_results is skipped", () =>
    Effect.gen(function*() {
      const { run: out } = yield* run([Fake.sse([
        {
          choices: [],
          created: 0,
          id: "",
          model: "",
          object: "",
          prompt_filter_results: [{ prompt_index: 0, content_filter_results: {} }]
        },
        Fake.chunk({ content: "", refusal: null, role: "assistant" }),
        Fake.chunk({ content: "Capital" }),
        Fake.chunk({}, "stop"),
        Fake.usageChunk(usage)
      ])])
      expect(out.error).toStrictEqual(Option.none())
      expect(out.chunks).toStrictEqual([
        ...Chunks.textBlock(0, "Capital"),
        { type: "usage", usage: tillerUsage },
        Chunks.stop
      ])
    }))

  it.scoped("[DONE] without a finish reason finishes with stop", () =>
    Effect.gen(function*() {
      const { run: out } = yield* run([Fake.raw(Fake.event(Fake.chunk({ content: "ok" })) + Fake.DONE)])
      expect(out.error).toStrictEqual(Option.none())
      expect(out.chunks).toStrictEqual([
        ...Chunks.textBlock(0, "ok"),
        Chunks.stop
      ])
    }))
})

describe("OpenAiCompatibleModel failures", () => {
  const failureOf = (out: Run) => Option.map(out.error, (error) => error.failure)

  it.scoped("429 is a retryable RATE_LIMIT with retry-after and request id", () =>
    Effect.gen(function*() {
      const { label, run: out } = yield* run([
        Fake.status(429, JSON.stringify({ error: { message: "slow down", type: "rate_limit_exceeded" } }), {
          "retry-after": "3",
          "x-request-id": "req_42"
        })
      ])
      expect(out.chunks).toStrictEqual([])
      expect(failureOf(out)).toStrictEqual(Option.some({
        message: `${label} (HTTP 429): slow down`,
        code: "RATE_LIMIT",
        status: 429,
        retryable: true,
        retryAfterMs: 3000,
        requestId: "req_42"
      }))
    }))

  it.scoped("5xx is retryable; another 4xx is not", () =>
    Effect.gen(function*() {
      const { label, run: unavailable } = yield* run([Fake.status(503, "upstream busy")])
      expect(failureOf(unavailable)).toStrictEqual(Option.some({
        message: `${label} (HTTP 503): upstream busy`,
        code: "SERVICE_UNAVAILABLE",
        status: 503,
        retryable: true
      }))
      const { label: badLabel, run: bad } = yield* run([
        Fake.status(400, JSON.stringify({ error: { message: "unknown model" } }))
      ])
      expect(failureOf(bad)).toStrictEqual(Option.some({
        message: `${badLabel} (HTTP 400): unknown model`,
        code: "INVALID_REQUEST",
        status: 400,
        retryable: false
      }))
    }))

  it.scoped("a reset connection is a retryable NETWORK failure; so is a stream broken midway, after its chunks", () =>
    Effect.gen(function*() {
      const { label, run: refused } = yield* run([Fake.reset])
      expect(failureOf(refused)).toStrictEqual(Option.some({
        message: `${label}: cannot connect: connection closed`,
        code: "NETWORK",
        retryable: true
      }))
      const { label: brokenLabel, run: broken } = yield* run([Fake.drop([Fake.chunk({ content: "par" })])])
      expect(broken.chunks).toStrictEqual([
        { type: "block-start", index: 0, block: "text" },
        { type: "text-delta", index: 0, text: "par" }
      ])
      expect(failureOf(broken)).toStrictEqual(Option.some({
        message: `${brokenLabel}: the connection broke during the response: connection closed`,
        code: "NETWORK",
        retryable: true
      }))
    }))

  it.scoped("a body that ends cleanly in the middle of the response (no finish reason, no [DONE]) is a retryable NETWORK failure", () =>
    Effect.gen(function*() {
      const cut = Fake.event(Fake.chunk({ role: "assistant", content: "" })) +
        Fake.event(Fake.chunk({ content: "Partial" })) +
        "data: {\"id\":\"chatcmpl-fake\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" te"
      const { label, run: out } = yield* run([Fake.raw(cut)])
      expect(out.chunks).toStrictEqual([
        { type: "block-start", index: 0, block: "text" },
        { type: "text-delta", index: 0, text: "Partial" }
      ])
      expect(failureOf(out)).toStrictEqual(Option.some({
        message: `${label}: the response ended before it was complete`,
        code: "NETWORK",
        retryable: true
      }))
      const { label: endLabel, run: ended } = yield* run([Fake.sse([Fake.chunk({ content: "par" })], { done: false })])
      expect(failureOf(ended)).toStrictEqual(Option.some({
        message: `${endLabel}: the response ended before it was complete`,
        code: "NETWORK",
        retryable: true
      }))
    }))

  it.scoped("vLLM's error payload after ordinary chunks keeps the engine's message and is retryable by its code 500", () =>
    Effect.gen(function*() {
      const { label, run: out } = yield* run([Fake.raw(
        Fake.event(Fake.chunk({ role: "assistant", content: "" })) + Fake.event(Fake.chunk({ content: "Partial" })) +
          "data: {\"error\": {\"message\": \"The engine is dead (EngineDeadError)\", \"type\": \"InternalServerError\", " +
          "\"param\": null, \"code\": 500}}\n\n" + Fake.DONE
      )])
      expect(out.chunks).toStrictEqual([
        { type: "block-start", index: 0, block: "text" },
        { type: "text-delta", index: 0, text: "Partial" }
      ])
      expect(failureOf(out)).toStrictEqual(Option.some({
        message: `${label} (HTTP 500): The engine is dead (EngineDeadError)`,
        code: "SERVICE_UNAVAILABLE",
        retryable: true,
        status: 500
      }))
    }))

  it.scoped("OpenRouter's processing comments are skipped; its mid-stream error with finish_reason error is classified", () =>
    Effect.gen(function*() {
      const { label, run: out } = yield* run([Fake.raw(
        ": OPENROUTER PROCESSING\n\n: OPENROUTER PROCESSING\n\n" +
          Fake.event({ ...Fake.chunk({ role: "assistant", content: "Partial" }), provider: "openai" }) +
          Fake.event({
            ...Fake.chunk({ content: "" }, "error"),
            provider: "openai",
            error: { code: "server_error", message: "Provider disconnected unexpectedly" }
          }) + Fake.DONE
      )])
      expect(out.chunks).toStrictEqual([
        { type: "block-start", index: 0, block: "text" },
        { type: "text-delta", index: 0, text: "Partial" }
      ])
      expect(failureOf(out)).toStrictEqual(Option.some({
        message: `${label}: Provider disconnected unexpectedly`,
        code: "SERVICE_UNAVAILABLE",
        retryable: true
      }))
    }))

  it.scoped("malformed streams are non-retryable MALFORMED_STREAM failures after the chunks before them", () =>
    Effect.gen(function*() {
      const text = Fake.event(Fake.chunk({ content: "par" }))
      const { run: badJson } = yield* run([Fake.raw(text + "data: {\"choices\": [\n\n" + Fake.DONE)])
      expect(badJson.chunks).toStrictEqual([
        { type: "block-start", index: 0, block: "text" },
        { type: "text-delta", index: 0, text: "par" }
      ])
      expect(Option.map(failureOf(badJson), ({ code, retryable }) => ({ code, retryable })))
        .toStrictEqual(Option.some({ code: "MALFORMED_STREAM", retryable: false }))

      const { label, run: badArguments } = yield* run([Fake.sse([
        Fake.chunk({ tool_calls: [Fake.toolCall(0, { id: "c1", name: "lookup", arguments: "{\"q\": nope" })] }),
        Fake.chunk({}, "tool_calls")
      ])])
      expect(failureOf(badArguments)).toStrictEqual(Option.some({
        message: `${label}: the arguments of tool call c1 (lookup) are not JSON`,
        code: "MALFORMED_STREAM",
        retryable: false
      }))
    }))

  it.scoped("an error object in the stream is classified by its status or type", () =>
    Effect.gen(function*() {
      const { label, run: overloaded } = yield* run([Fake.sse([{ error: { message: "busy", type: "server_error" } }])])
      expect(failureOf(overloaded)).toStrictEqual(Option.some({
        message: `${label}: busy`,
        code: "SERVICE_UNAVAILABLE",
        retryable: true
      }))
      const { label: invalidLabel, run: invalid } = yield* run([
        Fake.raw("event: error\ndata: {\"message\":\"bad input\",\"code\":400}\n\n")
      ])
      expect(failureOf(invalid)).toStrictEqual(Option.some({
        message: `${invalidLabel} (HTTP 400): bad input`,
        code: "INVALID_REQUEST",
        status: 400,
        retryable: false
      }))
    }))

  it.scoped("the API key echoed by the server never reaches the failure", () =>
    Effect.gen(function*() {
      const echo = Fake.status(
        401,
        (received) =>
          JSON.stringify({ error: { message: `invalid credentials: ${received.headers["authorization"]}` } }),
        { "x-request-id": `id-${KEY}` }
      )
      const { label, received, run: out } = yield* run([echo], request(), { apiKey })
      expect(received[0]!.headers["authorization"]).toBe(`Bearer ${KEY}`)
      const error = Option.getOrThrow(out.error)
      expect(error.failure).toStrictEqual({
        message: `${label} (HTTP 401): invalid credentials: Bearer [redacted]`,
        code: "AUTH",
        status: 401,
        retryable: false,
        requestId: "id-[redacted]"
      })
      expect(error.message).not.toContain(KEY)
      expect(JSON.stringify(error)).not.toContain(KEY)
      expect(String(error)).not.toContain(KEY)
    }))
})

describe("OpenAiCompatibleModel timeouts", () => {
  const BASE = "http://127.0.0.1:1/v1"
  const LABEL = "127.0.0.1:1"

  /** A client whose request never gets headers (`connect`), or whose body sends `body` and then nothing. */
  const stalledClient = (stall: "connect" | { readonly body: string }) =>
    HttpClient.make((req) =>
      stall === "connect"
        ? Effect.never
        : Effect.succeed(HttpClientResponse.fromWeb(
          req,
          new Response(
            new ReadableStream<Uint8Array>({
              start(controller) {
                if (stall.body !== "") controller.enqueue(new TextEncoder().encode(stall.body))
              }
            }),
            { status: 200, headers: { "content-type": "text/event-stream" } }
          )
        ))
    )

  /** Streams one request in a fiber and steps the TestClock until it ends. */
  const stepped = (layer: Layer.Layer<Model, unknown, HttpClient.HttpClient>, client: HttpClient.HttpClient) =>
    Effect.gen(function*() {
      const fiber = yield* Effect.flatMap(Model, (model) => Stream.runCollect(Stream.either(model.stream(request()))))
        .pipe(
          Effect.provide(layer),
          Effect.provideService(HttpClient.HttpClient, client),
          Effect.fork
        )
      let steps = 0
      while (Option.isNone(yield* Fiber.poll(fiber)) && steps < 400) {
        // Real promises (the body's reads) settle between steps.
        yield* Effect.promise(() => new Promise((resolve) => setImmediate(resolve)))
        yield* TestClock.adjust("100 millis")
        steps++
      }
      const out = Chunk.toReadonlyArray(yield* Fiber.join(fiber))
      return {
        chunks: out.flatMap((item) => Either.isRight(item) ? [item.right] : []),
        failure: out.flatMap((item) => Either.isLeft(item) ? [item.left.failure] : []),
        elapsed: steps * 100
      }
    })

  it.effect("connectTimeout: no response headers in time is a retryable TIMEOUT", () =>
    Effect.gen(function*() {
      const out = yield* stepped(
        OpenAiCompatibleModel.layer({ baseUrl: BASE, model: "m", connectTimeout: "2 seconds" }),
        stalledClient("connect")
      )
      expect(out.chunks).toStrictEqual([])
      expect(out.failure).toStrictEqual([{
        message: `${LABEL}: no response within 2s (connect timeout)`,
        code: "TIMEOUT",
        retryable: true
      }])
      expect(out.elapsed).toBeGreaterThanOrEqual(2000)
      expect(out.elapsed).toBeLessThan(3000)
    }))

  it.effect("firstByteTimeout: headers and then no body in time is a retryable TIMEOUT", () =>
    Effect.gen(function*() {
      const out = yield* stepped(
        OpenAiCompatibleModel.layer({ baseUrl: BASE, model: "m", firstByteTimeout: "3 seconds" }),
        stalledClient({ body: "" })
      )
      expect(out.failure).toStrictEqual([{
        message: `${LABEL}: no data within 3s (first-byte timeout)`,
        code: "TIMEOUT",
        retryable: true
      }])
    }))

  it.effect("idleTimeout: a body that stops between chunks fails TIMEOUT after the chunks it sent", () =>
    Effect.gen(function*() {
      const out = yield* stepped(
        OpenAiCompatibleModel.layer({ baseUrl: BASE, model: "m", idleTimeout: "1 second" }),
        stalledClient({ body: Fake.event(Fake.chunk({ content: "par" })) })
      )
      expect(out.chunks).toStrictEqual([
        { type: "block-start", index: 0, block: "text" },
        { type: "text-delta", index: 0, text: "par" }
      ])
      expect(out.failure).toStrictEqual([{
        message: `${LABEL}: nothing more within 1s (idle timeout)`,
        code: "TIMEOUT",
        retryable: true
      }])
    }))

  it.effect("a timeout not given in the options is read from TILLER_IDLE_TIMEOUT; [DONE] ends the stream at once", () =>
    Effect.gen(function*() {
      const layer = OpenAiCompatibleModel.layer({ baseUrl: BASE, model: "m" }).pipe(
        Layer.provide(
          Layer.setConfigProvider(ConfigProvider.fromMap(new Map([["TILLER_IDLE_TIMEOUT", "1500 millis"]])))
        )
      )
      const idle = yield* stepped(layer, stalledClient({ body: Fake.event(Fake.chunk({ content: "par" })) }))
      expect(idle.failure).toStrictEqual([{
        message: `${LABEL}: nothing more within 1s 500ms (idle timeout)`,
        code: "TIMEOUT",
        retryable: true
      }])
      // A host that keeps the connection open after [DONE] is not waited on.
      const done = yield* stepped(
        layer,
        stalledClient({ body: Fake.event(Fake.chunk({ content: "ok" }, "stop")) + Fake.DONE })
      )
      expect(done.failure).toStrictEqual([])
      expect(done.chunks.at(-1)).toStrictEqual({ type: "finish", finish: { kind: "stop" } })
      expect(done.elapsed).toBeLessThan(1500)
    }))

  it.effect("a timeout that is not a positive duration fails the layer with ConfigError", () =>
    Effect.gen(function*() {
      const error = yield* Effect.flip(
        Layer.build(OpenAiCompatibleModel.layer({ baseUrl: BASE, model: "m", idleTimeout: "0 seconds" }))
          .pipe(Effect.scoped, Effect.provideService(HttpClient.HttpClient, stalledClient("connect")))
      )
      expect(ConfigError.isConfigError(error)).toBe(true)
      expect(String(error)).toContain("idleTimeout")
    }))
})

// ---------------------------------------------------------------------------------------------------
// Through a whole agent

const Params = Schema.Struct({ q: Schema.String })

const lookup = Tool.make("lookup", {
  description: "Looks a word up",
  parameters: Params,
  mode: "parallel",
  execute: ({ q }) => Effect.succeed(`meaning of ${q}`)
})

const agent = (server: ChatCompletionsServer) =>
  agentOver({
    provider: "openai-compatible",
    model: "fake-model",
    system: "be brief",
    modelLayer: modelLayer(server, { apiKey }),
    tools: [lookup]
  })

/** A turn opened by one follow-up `id`: its claim, its first step and (first request only) `RH(initial)`. */
const turnPrefix = (turn: number, id: string, header: "initial" | "none") => [
  `TS(${turn})`,
  "CLM(nt,0,1)",
  `SS(${turn},1)`,
  `UM(${id})`,
  ...(header === "none" ? [] : ["RH(initial)"])
]
const textChunks = ["CH(block-start)", "CH(text-delta)", "CH(block-end)"]
const stopAM = ["CH(usage)", "CH(finish stop)", "AM"]

describe("OpenAiCompatibleModel in an agent", () => {
  it.scoped("text, reasoning and two parallel tool calls run, and their results go back in the next request", () =>
    Effect.gen(function*() {
      const server = yield* Fake.make([
        Fake.sse([
          Fake.chunk({ role: "assistant", reasoning_content: "two lookups" }),
          Fake.chunk({ content: "Looking up." }),
          Fake.chunk({
            tool_calls: [
              Fake.toolCall(0, { id: "call_1", name: "lookup", arguments: "{\"q\":" }),
              Fake.toolCall(1, { id: "call_2", name: "lookup", arguments: "{\"q\":\"beta\"}" })
            ]
          }),
          Fake.chunk({ tool_calls: [Fake.toolCall(0, { arguments: "\"alpha\"}" })] }),
          Fake.chunk({}, "tool_calls"),
          Fake.usageChunk(usage)
        ]),
        Fake.sse(say("Both found."))
      ])
      yield* Effect.gen(function*() {
        const driver = yield* Driver
        // An idle inject stages the context; the follow-up's turn claims it first (SPEC 4.2 TX-OPEN).
        yield* driver.inject(plugin("ctx", "the user reads Greek"))
        yield* driver.followup(user("A", "define alpha and beta"))
        yield* driver.whenIdle
        const all = yield* events
        expect(all.map(notation)).toStrictEqual([
          "INS(ns,0,[ctx])",
          "INS(nt,0,[A])",
          "TS(1)",
          "CLM(ns,0,1)",
          "CLM(nt,0,1)",
          "SS(1,1)",
          "UM(ctx)",
          "UM(A)",
          "RH(initial)",
          "CH(block-start)",
          "CH(reasoning-delta)",
          "CH(block-end)",
          ...textChunks,
          "CH(block-start)",
          "CH(tool-call-delta)",
          "CH(block-start)",
          "CH(tool-call-delta)",
          "CH(tool-call-delta)",
          "CH(block-end)",
          "CH(block-end)",
          "CH(usage)",
          "CH(replay-state)",
          "CH(finish stop)",
          "AM",
          "TC(call_1)",
          "TC(call_2)",
          "TR(call_1)",
          "TR(call_2)",
          "SE(1,1)",
          "SS(1,2)",
          ...textChunks,
          ...stopAM,
          "SE(1,2)",
          "TE(1,completed)"
        ])
        expect(checkLog(all, { closed: true })).toStrictEqual([])
        const messages = ofType(all, "assistant/message")
        expect(messages.map((m) => m.data.message.content)).toStrictEqual([
          [
            { type: "reasoning", text: "two lookups" },
            { type: "text", text: "Looking up." },
            { type: "tool-call", id: "call_1", name: "lookup", arguments: "{\"q\":\"alpha\"}" },
            { type: "tool-call", id: "call_2", name: "lookup", arguments: "{\"q\":\"beta\"}" }
          ],
          [{ type: "text", text: "Both found." }]
        ])
        expect(messages.map((m) => m.data.message.source)).toStrictEqual([
          { ...modelSource, replayState: { "openai-compatible": { reasoningField: "reasoning_content" } } },
          modelSource
        ])
        expect(messages.map((m) => m.data.usage)).toStrictEqual([tillerUsage, tillerUsage])
        expect(ofType(all, "tool/result").map((e) => e.data.message.content[0])).toStrictEqual([
          {
            type: "tool-result",
            toolCallId: "call_1",
            isError: false,
            content: [{ type: "text", text: "meaning of alpha" }]
          },
          {
            type: "tool-result",
            toolCallId: "call_2",
            isError: false,
            content: [{ type: "text", text: "meaning of beta" }]
          }
        ])
      }).pipe(Effect.provide(agent(server)))

      const received = yield* server.received
      expect(received).toHaveLength(2)
      const system = { role: "system", content: "be brief" }
      const firstTurn = [
        system,
        { role: "user", content: "the user reads Greek" },
        { role: "user", content: "define alpha and beta" }
      ]
      expect((received[0]!.body as { messages: unknown }).messages).toStrictEqual(firstTurn)
      expect((received[1]!.body as { messages: unknown }).messages).toStrictEqual([
        ...firstTurn,
        {
          role: "assistant",
          content: "Looking up.",
          reasoning_content: "two lookups",
          tool_calls: [
            { id: "call_1", type: "function", function: { name: "lookup", arguments: "{\"q\":\"alpha\"}" } },
            { id: "call_2", type: "function", function: { name: "lookup", arguments: "{\"q\":\"beta\"}" } }
          ]
        },
        { role: "tool", tool_call_id: "call_1", content: "meaning of alpha" },
        { role: "tool", tool_call_id: "call_2", content: "meaning of beta" }
      ])
      expect((received[0]!.body as { tools: unknown }).tools).toStrictEqual([{
        type: "function",
        function: {
          name: "lookup",
          description: "Looks a word up",
          parameters: expect.objectContaining({ type: "object", required: ["q"] })
        }
      }])
    }))

  it.scoped("a 429 is retried in the same step (llm/retry in the log) and the key appears nowhere", () =>
    Effect.gen(function*() {
      const server = yield* Fake.make([
        Fake.status(
          429,
          (received) =>
            JSON.stringify({ error: { message: `too many requests for ${received.headers["authorization"]}` } })
        ),
        Fake.sse(say("Hello."))
      ])
      yield* Effect.gen(function*() {
        const driver = yield* Driver
        const live = yield* driver.subscribe
        yield* driver.followup(user("A"))
        const retry = yield* firstRetry
        expect(retry.data.attempt).toBe(1)
        expect(retry.data.failure).toMatchObject({ code: "RATE_LIMIT", status: 429, retryable: true })
        expect(retry.data.failure.message).toContain("Bearer [redacted]")
        yield* TestClock.adjust(`${retry.data.delayMs} millis`)
        yield* driver.whenIdle
        const all = yield* events
        expect(all.map(notation)).toStrictEqual([
          "INS(nt,0,[A])",
          ...turnPrefix(1, "A", "initial"),
          "CH(finish error)",
          "RT(1)",
          ...textChunks,
          ...stopAM,
          "SE(1,1)",
          "TE(1,completed)"
        ])
        expect(JSON.stringify(all)).not.toContain(KEY)
        const notifications: ReadonlyArray<DriverEvent> = Chunk.toReadonlyArray(yield* Queue.takeAll(live))
        expect(notifications.length).toBeGreaterThan(0)
        expect(JSON.stringify(notifications)).not.toContain(KEY)
      }).pipe(Effect.provide(agent(server)))
      expect((yield* server.received).map((r) => r.headers["authorization"])).toStrictEqual([
        `Bearer ${KEY}`,
        `Bearer ${KEY}`
      ])
    }))

  it.scoped("a malformed stream ends the turn with error; the session stays usable for a followup", () =>
    Effect.gen(function*() {
      const server = yield* Fake.make([
        Fake.raw(Fake.event(Fake.chunk({ content: "par" })) + "data: not json\n\n"),
        Fake.sse(say("Recovered."))
      ])
      yield* Effect.gen(function*() {
        const driver = yield* Driver
        yield* driver.followup(user("A"))
        yield* driver.whenIdle
        yield* driver.followup(user("B"))
        yield* driver.whenIdle
        const all = yield* events
        expect(all.map(notation)).toStrictEqual([
          "INS(nt,0,[A])",
          ...turnPrefix(1, "A", "initial"),
          "CH(block-start)",
          "CH(text-delta)",
          "CH(finish error)",
          "SE(1,1)",
          "TE(1,error(MALFORMED_STREAM))",
          "INS(nt,0,[B])",
          ...turnPrefix(2, "B", "none"),
          ...textChunks,
          ...stopAM,
          "SE(2,1)",
          "TE(2,completed)"
        ])
        expect(checkLog(all, { closed: true })).toStrictEqual([])
        const [failed] = ofType(all, "turn/end")
        expect(failed!.data.reason).toStrictEqual({
          kind: "error",
          error: {
            message: `${hostOf(server)}: a stream event is not a chat completion chunk: not json`,
            code: "MALFORMED_STREAM",
            retryable: false
          }
        })
        const history = yield* Effect.flatMap(SessionLog, (log) => log.messages)
        expect(history.map((m) => m.id)).toEqual(["A", "B", ofType(all, "assistant/message")[0]!.data.message.id])
      }).pipe(Effect.provide(agent(server)))
      const received = yield* server.received
      expect((received[1]!.body as { messages: unknown }).messages).toStrictEqual([
        { role: "system", content: "be brief" },
        { role: "user", content: "A" },
        { role: "user", content: "B" }
      ])
    }))

  it.scoped("a cancel while the host is streaming aborts the turn and closes the connection", () =>
    Effect.gen(function*() {
      const server = yield* Fake.make([Fake.hang([Fake.chunk({ content: "partial" })])])
      yield* Effect.gen(function*() {
        const driver = yield* Driver
        const log = yield* SessionLog
        yield* driver.followup(user("A"))
        yield* log.stream().pipe(Stream.filter((e) => notation(e) === "CH(text-delta)"), Stream.runHead)
        yield* driver.cancel({ kind: "user" })
        yield* driver.whenIdle
        expect(yield* shape).toStrictEqual([
          "INS(nt,0,[A])",
          ...turnPrefix(1, "A", "initial"),
          "CH(block-start)",
          "CH(text-delta)",
          "AM!",
          "SE(1,1)",
          "TE(1,aborted(user))"
        ])
        yield* server.hangClosed
      }).pipe(Effect.provide(agent(server)))
    }))

  it.scoped("a rejected key ends the turn with AUTH and the echoed key appears in no event", () =>
    Effect.gen(function*() {
      const server = yield* Fake.make([
        Fake.status(401, (received) => `bad key ${received.headers["authorization"]}`)
      ])
      yield* Effect.gen(function*() {
        const driver = yield* Driver
        yield* driver.followup(user("A"))
        yield* driver.whenIdle
        const all = yield* events
        expect(all.map(notation).slice(-3)).toStrictEqual(["CH(finish error)", "SE(1,1)", "TE(1,error(AUTH))"])
        const [ended] = ofType(all, "turn/end")
        expect(ended!.data.reason).toMatchObject({ kind: "error", error: { status: 401, retryable: false } })
        expect(JSON.stringify(all)).toContain("bad key Bearer [redacted]")
        expect(JSON.stringify(all)).not.toContain(KEY)
      }).pipe(Effect.provide(agent(server)))
    }))

  it.scoped("a refusal streams no text chunk and ends the turn with REFUSAL holding its words, without a retry", () =>
    Effect.gen(function*() {
      const server = yield* Fake.make([
        Fake.sse([
          Fake.chunk({ role: "assistant", content: null, refusal: "" }),
          Fake.chunk({ refusal: "I can't help with that." }),
          Fake.chunk({}, "stop"),
          Fake.usageChunk(usage)
        ]),
        Fake.sse(say("not asked"))
      ])
      yield* Effect.gen(function*() {
        const driver = yield* Driver
        yield* driver.followup(user("A"))
        yield* driver.whenIdle
        const all = yield* events
        expect(all.map(notation)).toStrictEqual([
          "INS(nt,0,[A])",
          ...turnPrefix(1, "A", "initial"),
          "CH(usage)",
          "CH(finish error)",
          "SE(1,1)",
          "TE(1,error(REFUSAL))"
        ])
        expect(checkLog(all, { closed: true })).toStrictEqual([])
        expect(ofType(all, "turn/end")[0]!.data.reason).toStrictEqual({
          kind: "error",
          error: {
            message: `${hostOf(server)}: the model refused: I can't help with that.`,
            code: "REFUSAL",
            retryable: false
          }
        })
      }).pipe(Effect.provide(agent(server)))
      expect(yield* server.received).toHaveLength(1)
    }))

  it.scoped("a host's error in the stream is retried (llm/retry with its message), and the retry's answer stands", () =>
    Effect.gen(function*() {
      const server = yield* Fake.make([
        Fake.raw(
          Fake.event(Fake.chunk({ content: "Partial" })) +
            Fake.event({
              error: {
                message: "The engine is dead (EngineDeadError)",
                type: "InternalServerError",
                param: null,
                code: 500
              }
            }) +
            Fake.DONE
        ),
        Fake.sse(say("Recovered."))
      ])
      yield* Effect.gen(function*() {
        const driver = yield* Driver
        yield* driver.followup(user("A"))
        const retry = yield* firstRetry
        expect(retry.data.failure).toStrictEqual({
          message: `${hostOf(server)} (HTTP 500): The engine is dead (EngineDeadError)`,
          code: "SERVICE_UNAVAILABLE",
          status: 500,
          retryable: true
        })
        yield* TestClock.adjust(`${retry.data.delayMs} millis`)
        yield* driver.whenIdle
        const all = yield* events
        expect(all.map(notation)).toStrictEqual([
          "INS(nt,0,[A])",
          ...turnPrefix(1, "A", "initial"),
          "CH(block-start)",
          "CH(text-delta)",
          "CH(finish error)",
          "RT(1)",
          ...textChunks,
          ...stopAM,
          "SE(1,1)",
          "TE(1,completed)"
        ])
        expect(ofType(all, "assistant/message").map((m) => m.data.message.content)).toStrictEqual([
          [{ type: "text", text: "Recovered." }]
        ])
      }).pipe(Effect.provide(agent(server)))
    }))
})
