/**
 * AnthropicModel: the request body (pure), and the adapter against a fake Messages API on
 * 127.0.0.1, alone (headers, failures) and inside an agent (a thinking tool loop whose next request
 * carries the signed thinking block, the calls and their results). The sockets are real, but
 * nothing under test reads wall time, so the tests run under TestClock and the retry backoff is
 * stepped with `TestClock.adjust`.
 */
import * as FetchHttpClient from "@effect/platform/FetchHttpClient"
import * as HttpClient from "@effect/platform/HttpClient"
import { describe, expect, it } from "@effect/vitest"
import { Chunk, Effect, Layer, Option, Redacted, Stream, TestClock } from "effect"
import { checkLog } from "../../src/domain/Check.js"
import { MessageId } from "../../src/domain/Ids.js"
import type { Message, StreamChunk, ToolSchema } from "../../src/domain/Values.js"
import * as AnthropicCache from "../../src/internal/providers/AnthropicCache.js"
import { DEFAULT_TIMEOUTS } from "../../src/internal/providers/ProviderTimeouts.js"
import * as AnthropicModel from "../../src/layers/AnthropicModel.js"
import { Driver } from "../../src/services/Driver.js"
import type { ModelRequest } from "../../src/services/Model.js"
import { Model } from "../../src/services/Model.js"
import { events, notation, user } from "../agent/harness.js"
import {
  add,
  agentOver,
  assistantFrom,
  clock,
  firstRetry,
  ofType,
  pieceClient,
  prompt,
  requestFor,
  resultParts,
  sourceFor,
  streamRun,
  toolResult,
  userParts
} from "../fixtures/adapterHarness.js"
import * as Chunks from "../fixtures/streamChunks.js"
import * as AnthropicServer from "./fake/AnthropicServer.js"
import type { FakeServer, Reply } from "./fake/ResponsesServer.js"
import * as ResponsesServer from "./fake/ResponsesServer.js"

const KEY = "sk-ant-test-5e4d3c2b1a"
const apiKey = Redacted.make(KEY)
const options = { model: "claude-test", promptCaching: false }

const request = requestFor("anthropic", "claude-test")
const modelSource = sourceFor("anthropic", "claude-test")
const assistant = assistantFrom(modelSource)

const bodyOf = (messages: ReadonlyArray<Message>) => AnthropicModel.toAnthropicRequest(request({ messages }), options)

describe("AnthropicModel request body", () => {
  it("system, merged user turns, assistant calls, tool results as their text, tools and limits", () => {
    const tools: ReadonlyArray<ToolSchema> = [{
      name: "add",
      description: "Adds two numbers",
      parameters: {
        $schema: "http://json-schema.org/draft-07/schema#",
        type: "object",
        properties: { a: { type: "number" }, b: { type: "number" } },
        required: ["a", "b"]
      }
    }]
    const messages: ReadonlyArray<Message> = [
      userParts("ctx", [{ type: "text", text: "The repo uses pnpm." }], { kind: "plugin", plugin: "facts" }),
      prompt("q", "Add 19 and 0, and the weather."),
      assistant("a1", [
        { type: "reasoning", text: "unsigned thoughts are not sent" },
        { type: "text", text: "Let me check." },
        { type: "tool-call", id: "call_1", name: "add", arguments: "{\"a\":19,\"b\":0}" },
        { type: "tool-call", id: "call_2", name: "weather", arguments: "{\"city\":\"Oslo\"}" }
      ]),
      toolResult("call_1", "19"),
      toolResult("call_2", "sunny, 18 °C"),
      userParts("steer", [{ type: "text", text: "look" }, { type: "image", mediaType: "image/png", data: "AQID" }], {
        kind: "steer"
      })
    ]
    expect(AnthropicModel.toAnthropicRequest(
      request({ system: "Be brief.", messages, tools, temperature: 0.2 }),
      options
    )).toStrictEqual({
      model: "claude-test",
      max_tokens: 4096,
      system: "Be brief.",
      messages: [
        {
          role: "user",
          content: [{ type: "text", text: "The repo uses pnpm." }, {
            type: "text",
            text: "Add 19 and 0, and the weather."
          }]
        },
        {
          role: "assistant",
          content: [
            { type: "text", text: "Let me check." },
            { type: "tool_use", id: "call_1", name: "add", input: { a: 19, b: 0 } },
            { type: "tool_use", id: "call_2", name: "weather", input: { city: "Oslo" } }
          ]
        },
        {
          role: "user",
          content: [
            { type: "tool_result", tool_use_id: "call_1", content: "19", is_error: false },
            { type: "tool_result", tool_use_id: "call_2", content: "sunny, 18 °C", is_error: false },
            { type: "text", text: "look" },
            { type: "image", source: { type: "base64", media_type: "image/png", data: "AQID" } }
          ]
        }
      ],
      tools: [{
        name: "add",
        description: "Adds two numbers",
        input_schema: {
          type: "object",
          properties: { a: { type: "number" }, b: { type: "number" } },
          required: ["a", "b"]
        }
      }],
      temperature: 0.2,
      stream: true
    })
  })

  it("max_tokens: the request's, else the options', else 4096; no system, tools or temperature when absent", () => {
    expect(AnthropicModel.toAnthropicRequest(request({ maxTokens: 100 }), { model: "m", maxTokens: 200 }))
      .toStrictEqual({ model: "m", max_tokens: 100, messages: [], stream: true })
    expect(AnthropicModel.toAnthropicRequest(request({ system: "" }), { model: "m", maxTokens: 200 }))
      .toStrictEqual({ model: "m", max_tokens: 200, messages: [], stream: true })
  })

  it("tool results come first in their user turn, even when a message came between them", () => {
    expect(
      bodyOf([
        prompt("q", "go"),
        assistant("a1", [
          { type: "tool-call", id: "c1", name: "f", arguments: "{}" },
          { type: "tool-call", id: "c2", name: "g", arguments: "{}" }
        ]),
        toolResult("c1", "one"),
        prompt("steer", "also this"),
        toolResult("c2", "two", true)
      ]).messages
    ).toStrictEqual([
      { role: "user", content: [{ type: "text", text: "go" }] },
      {
        role: "assistant",
        content: [
          { type: "tool_use", id: "c1", name: "f", input: {} },
          { type: "tool_use", id: "c2", name: "g", input: {} }
        ]
      },
      {
        role: "user",
        content: [
          { type: "tool_result", tool_use_id: "c1", content: "one", is_error: false },
          { type: "tool_result", tool_use_id: "c2", content: "two", is_error: true },
          { type: "text", text: "also this" }
        ]
      }
    ])
  })

  it("a tool call without arguments (\"\") is replayed as input {}", () => {
    expect(
      bodyOf([
        prompt("q", "update"),
        assistant("a1", [{ type: "tool-call", id: "toolu_1", name: "updateIssueList", arguments: "" }]),
        toolResult("toolu_1", "done")
      ]).messages[1]
    ).toStrictEqual({
      role: "assistant",
      content: [{ type: "tool_use", id: "toolu_1", name: "updateIssueList", input: {} }]
    })
  })

  it("a tool result with images sends its text and image blocks in order; an empty one has no content", () => {
    const messages: ReadonlyArray<Message> = [
      prompt("q", "draw"),
      assistant("a1", [
        { type: "tool-call", id: "c1", name: "chart", arguments: "{}" },
        { type: "tool-call", id: "c2", name: "noop", arguments: "{}" }
      ]),
      {
        id: MessageId.make("r1"),
        role: "user",
        content: [{
          type: "tool-result",
          toolCallId: "c1",
          isError: false,
          content: [{ type: "text", text: "drawn" }, { type: "image", mediaType: "image/png", data: "AQID" }]
        }],
        source: { kind: "tool", callId: "c1" }
      },
      resultParts("r2", "c2", false, [])
    ]
    expect(bodyOf(messages).messages[2]).toStrictEqual({
      role: "user",
      content: [
        {
          type: "tool_result",
          tool_use_id: "c1",
          content: [
            { type: "text", text: "drawn" },
            { type: "image", source: { type: "base64", media_type: "image/png", data: "AQID" } }
          ],
          is_error: false
        },
        { type: "tool_result", tool_use_id: "c2", is_error: false }
      ]
    })
  })

  it("a signed thinking block is sent back before the tool_use, in the original order", () => {
    const state = {
      anthropic: {
        content: [
          { type: "thinking", thinking: "I should add.", signature: "EvQBCkYICxgC" },
          { type: "text" },
          { type: "redacted_thinking", data: "EmwKAhgB" },
          { type: "tool_use", id: "toolu_9" }
        ]
      }
    }
    expect(
      bodyOf([
        prompt("q", "add"),
        assistant("a1", [
          { type: "reasoning", text: "I should add." },
          { type: "text", text: "Adding." },
          { type: "tool-call", id: "toolu_9", name: "add", arguments: "{\"a\":1,\"b\":2}" }
        ], state),
        toolResult("toolu_9", "3")
      ]).messages[1]
    ).toStrictEqual({
      role: "assistant",
      content: [
        { type: "thinking", thinking: "I should add.", signature: "EvQBCkYICxgC" },
        { type: "text", text: "Adding." },
        { type: "redacted_thinking", data: "EmwKAhgB" },
        { type: "tool_use", id: "toolu_9", name: "add", input: { a: 1, b: 2 } }
      ]
    })
  })

  it("server blocks are replayed whole and never as tiller calls; text no placeholder stood for follows", () => {
    const search = { type: "server_tool_use", id: "srvtoolu_1", name: "web_search", input: { query: "news" } }
    const found = {
      type: "web_search_tool_result",
      tool_use_id: "srvtoolu_1",
      content: [{ type: "web_search_result", url: "https://a.example", encrypted_content: "Erke" }]
    }
    expect(
      bodyOf([
        prompt("q", "news?"),
        assistant("a1", [{ type: "text", text: "Here: " }, { type: "text", text: "Apple." }], {
          anthropic: { content: [search, found, { type: "text" }] }
        }),
        prompt("q2", "thanks")
      ]).messages
    ).toStrictEqual([
      { role: "user", content: [{ type: "text", text: "news?" }] },
      {
        role: "assistant",
        content: [search, found, { type: "text", text: "Here: " }, { type: "text", text: "Apple." }]
      },
      { role: "user", content: [{ type: "text", text: "thanks" }] }
    ])
  })

  it("empty text is never sent, whitespace-only text only beside text of its own message (the API rejects it alone)", () => {
    const search = { type: "server_tool_use", id: "srvtoolu_1", name: "web_search", input: { query: "news" } }
    expect(
      bodyOf([
        userParts("q", [{ type: "text", text: "" }, { type: "text", text: " \n" }, { type: "text", text: "news?" }]),
        assistant("a1", [{ type: "text", text: " " }, { type: "text", text: "Apple." }], {
          anthropic: { content: [{ type: "text" }, search, { type: "text" }] }
        }),
        prompt("blank", "  "),
        assistant("a2", [{ type: "text", text: "\n\n" }, { type: "tool-call", id: "c1", name: "f", arguments: "" }]),
        toolResult("c1", "\n")
      ]).messages
    ).toStrictEqual([
      { role: "user", content: [{ type: "text", text: " \n" }, { type: "text", text: "news?" }] },
      {
        role: "assistant",
        content: [
          { type: "text", text: " " },
          search,
          { type: "text", text: "Apple." },
          { type: "tool_use", id: "c1", name: "f", input: {} }
        ]
      },
      { role: "user", content: [{ type: "tool_result", tool_use_id: "c1", is_error: false }] }
    ])
  })

  it("another adapter's replay state is ignored; an empty assistant message is left out", () => {
    expect(
      bodyOf([
        prompt("q", "hi"),
        assistant("a1", [{ type: "reasoning", text: "hm" }, { type: "text", text: "Hello." }], {
          openai: { items: [] }
        }),
        prompt("q2", "again"),
        assistant("a2", [{ type: "reasoning", text: "only thoughts" }]),
        prompt("q3", "and?")
      ]).messages
    ).toStrictEqual([
      { role: "user", content: [{ type: "text", text: "hi" }] },
      { role: "assistant", content: [{ type: "text", text: "Hello." }] },
      { role: "user", content: [{ type: "text", text: "again" }, { type: "text", text: "and?" }] }
    ])
  })
})

const cacheMarks = (body: unknown): number => (JSON.stringify(body).match(/"cache_control"/g) ?? []).length

describe("AnthropicModel prompt caching", () => {
  const tools: ReadonlyArray<ToolSchema> = [
    { name: "add", description: "Adds", parameters: { type: "object", properties: {} } },
    { name: "clock", description: "Time", parameters: { type: "object", properties: {} } }
  ]
  const history: ReadonlyArray<Message> = [
    prompt("q", "Add 1 and 2."),
    assistant("a1", [{ type: "tool-call", id: "c1", name: "add", arguments: "{\"a\":1,\"b\":2}" }]),
    toolResult("c1", "3"),
    assistant("a2", [{ type: "tool-call", id: "c2", name: "clock", arguments: "" }]),
    toolResult("c2", "12:00")
  ]
  const mark = { type: "ephemeral" }

  it("marks the last tool, the system prompt, the newest message and the previous request's newest: four", () => {
    const body = AnthropicModel.toAnthropicRequest(request({ system: "Be brief.", tools, messages: history }), {
      model: "m"
    })
    expect(body.tools).toStrictEqual([
      { name: "add", description: "Adds", input_schema: { type: "object", properties: {} } },
      { name: "clock", description: "Time", input_schema: { type: "object", properties: {} }, cache_control: mark }
    ])
    expect(body.system).toStrictEqual([{ type: "text", text: "Be brief.", cache_control: mark }])
    expect(body.messages).toStrictEqual([
      { role: "user", content: [{ type: "text", text: "Add 1 and 2." }] },
      { role: "assistant", content: [{ type: "tool_use", id: "c1", name: "add", input: { a: 1, b: 2 } }] },
      {
        role: "user",
        content: [{ type: "tool_result", tool_use_id: "c1", content: "3", is_error: false, cache_control: mark }]
      },
      { role: "assistant", content: [{ type: "tool_use", id: "c2", name: "clock", input: {} }] },
      {
        role: "user",
        content: [{ type: "tool_result", tool_use_id: "c2", content: "12:00", is_error: false, cache_control: mark }]
      }
    ])
    expect(cacheMarks(body)).toBe(AnthropicCache.MAX_BREAKPOINTS)
    // The cached parts come last, in the provider's cache order.
    expect(Object.keys(body).slice(-3)).toStrictEqual(["tools", "system", "messages"])
  })

  it("never more than four marks, whatever the history; without tools or system only the messages are marked", () => {
    for (let n = 1; n <= 12; n++) {
      const messages = history.slice(0, Math.min(n, history.length))
      for (const extra of [{}, { system: "S" }, { tools }, { system: "S", tools }]) {
        const body = AnthropicModel.toAnthropicRequest(request({ ...extra, messages }), { model: "m" })
        expect(cacheMarks(body)).toBeLessThanOrEqual(AnthropicCache.MAX_BREAKPOINTS)
      }
    }
    const bare = AnthropicModel.toAnthropicRequest(request({ messages: history }), { model: "m" })
    expect(cacheMarks(bare)).toBe(2)
    expect(cacheMarks(AnthropicModel.toAnthropicRequest(request({ messages: history.slice(0, 1) }), { model: "m" })))
      .toBe(1)
  })

  it("ttl 1h marks every breakpoint with ttl: \"1h\"", () => {
    const body = AnthropicModel.toAnthropicRequest(request({ system: "S", tools, messages: history }), {
      model: "m",
      cacheTtl: "1h"
    })
    expect(JSON.stringify(body).match(/"cache_control":\{[^}]*\}/g)).toStrictEqual(
      Array(4).fill("\"cache_control\":{\"type\":\"ephemeral\",\"ttl\":\"1h\"}")
    )
  })

  it("promptCaching: false sends no mark and the system prompt as a string", () => {
    const body = AnthropicModel.toAnthropicRequest(request({ system: "S", tools, messages: history }), {
      model: "m",
      promptCaching: false
    })
    expect(cacheMarks(body)).toBe(0)
    expect(body.system).toBe("S")
  })

  it("a thinking block is never marked: the message's last block that may carry a mark gets it", () => {
    const messages = [
      prompt("q", "Go."),
      assistant("a1", [{ type: "text", text: "Thinking last:" }], {
        anthropic: { content: [{ type: "text" }, { type: "thinking", thinking: "t", signature: "sig" }] }
      })
    ]
    const body = AnthropicModel.toAnthropicRequest(request({ messages }), { model: "m" })
    expect(body.messages[1]).toStrictEqual({
      role: "assistant",
      content: [{ type: "text", text: "Thinking last:", cache_control: mark }, {
        type: "thinking",
        thinking: "t",
        signature: "sig"
      }]
    })
    // The message before the newest assistant message is the previous request's newest.
    expect(body.messages[0]).toStrictEqual({
      role: "user",
      content: [{ type: "text", text: "Go.", cache_control: mark }]
    })
  })

  it.scoped("over HTTP, ttl 1h sends the extended-TTL beta flag; cache reads and writes land in the usage", () =>
    Effect.gen(function*() {
      const server = yield* ResponsesServer.listen([
        AnthropicServer.streamed({ text: ["ok"], usage: { input: 5, output: 2, cached: 1200, cacheWrite: 300 } })
      ])
      const out = yield* streamRun(request({ messages: [prompt("q", "hello")] })).pipe(
        Effect.provide(
          AnthropicModel.layer({
            model: "claude-test",
            apiKey,
            baseUrl: server.url,
            timeouts: DEFAULT_TIMEOUTS,
            cacheTtl: "1h"
          }).pipe(
            Layer.provide(FetchHttpClient.layer)
          )
        )
      )
      const received = yield* server.requests
      expect(received[0]!.headers["anthropic-beta"]).toBe(AnthropicCache.EXTENDED_TTL_BETA)
      expect(out.chunks).toContainEqual(
        Chunks.usage({ inputTokens: 5, outputTokens: 2, totalTokens: 7, cacheReadTokens: 1200, cacheWriteTokens: 300 })
      )
    }))
})

// ---------------------------------------------------------------------------------------------------

const modelLayer = (server: FakeServer, key: Redacted.Redacted<string> | undefined = apiKey) =>
  AnthropicModel.layer({ model: "claude-test", apiKey: key, baseUrl: server.url, timeouts: DEFAULT_TIMEOUTS }).pipe(
    Layer.provide(FetchHttpClient.layer)
  )

const run = (replies: ReadonlyArray<Reply>, req: ModelRequest = request()) =>
  Effect.gen(function*() {
    const server = yield* ResponsesServer.listen(replies)
    const out = yield* streamRun(req).pipe(Effect.provide(modelLayer(server)))
    return { run: out, received: yield* server.requests }
  })

const SECRET_PROMPT = "the launch code is 0451"

describe("AnthropicModel over HTTP", () => {
  it.scoped("posts to /v1/messages with the key, the version and the JSON body; streams the chunks", () =>
    Effect.gen(function*() {
      const { received, run: out } = yield* run(
        [AnthropicServer.streamed({ text: ["Hi", " there."], usage: { input: 7, output: 3 } })],
        request({ messages: [prompt("q", "hello")] })
      )
      expect(received).toHaveLength(1)
      const sent = received[0]!
      expect(`${sent.method} ${sent.path}`).toBe("POST /v1/messages")
      expect(sent.headers["x-api-key"]).toBe(KEY)
      expect(sent.headers["anthropic-version"]).toBe("2023-06-01")
      expect(sent.headers["content-type"]).toBe("application/json")
      expect(sent.headers["anthropic-beta"]).toBeUndefined()
      // Caching is on by default: the newest message carries the rolling breakpoint.
      expect(sent.body).toStrictEqual({
        model: "claude-test",
        max_tokens: 4096,
        messages: [{ role: "user", content: [{ type: "text", text: "hello", cache_control: { type: "ephemeral" } }] }],
        stream: true
      })
      expect(out).toStrictEqual({
        chunks: [
          ...Chunks.textBlock(0, "Hi", " there."),
          Chunks.usage({ inputTokens: 7, outputTokens: 3, totalTokens: 10, cacheReadTokens: 0, cacheWriteTokens: 0 }),
          Chunks.stop
        ],
        error: Option.none()
      })
    }))

  it.scoped("401 is AUTH, not retryable, with the provider's message and the echoed key scrubbed", () =>
    Effect.gen(function*() {
      const { run: out } = yield* run([
        ResponsesServer.status(401, {
          type: "error",
          error: { type: "authentication_error", message: `invalid x-api-key ${KEY}` }
        }, { "request-id": "req_011" })
      ])
      expect(out.chunks).toStrictEqual([])
      expect(Option.map(out.error, (error) => error.failure)).toStrictEqual(Option.some({
        message: "Anthropic (HTTP 401): invalid x-api-key [redacted]",
        code: "AUTH",
        status: 401,
        retryable: false,
        requestId: "req_011"
      }))
    }))

  it.scoped("529 overloaded and an overloaded error event mid-stream are retryable OVERLOADED", () =>
    Effect.gen(function*() {
      const { run: status } = yield* run([
        ResponsesServer.status(529, { type: "error", error: { type: "overloaded_error", message: "Overloaded" } })
      ])
      expect(Option.map(status.error, (error) => error.failure)).toStrictEqual(Option.some({
        message: "Anthropic (HTTP 529): Overloaded",
        code: "OVERLOADED",
        status: 529,
        retryable: true
      }))
      const { run: midStream } = yield* run([AnthropicServer.overloadedMidStream()])
      expect(midStream.chunks).toStrictEqual([
        { type: "block-start", index: 0, block: "text" },
        { type: "text-delta", index: 0, text: "par" }
      ])
      expect(Option.map(midStream.error, (error) => error.failure)).toStrictEqual(Option.some({
        message: "Anthropic: Overloaded",
        code: "OVERLOADED",
        retryable: true
      }))
    }))

  it.scoped("a dropped connection is a retryable NETWORK failure with a short message, without the prompt", () =>
    Effect.gen(function*() {
      const req = request({ messages: [prompt("q", SECRET_PROMPT)] })
      const { run: hungUp } = yield* run([ResponsesServer.hangup], req)
      const { run: cut } = yield* run([
        ResponsesServer.cut(
          AnthropicServer.messageEvents({ text: ["par"], usage: { input: 1, output: 1 } })
            .slice(0, 4)
            .map(([event, data]) => ResponsesServer.frame(event, data))
        )
      ], req)
      expect(cut.chunks).toStrictEqual([
        { type: "block-start", index: 0, block: "text" },
        { type: "text-delta", index: 0, text: "par" }
      ])
      for (const out of [hungUp, cut]) {
        const failure = Option.getOrThrow(out.error).failure
        expect({ code: failure.code, retryable: failure.retryable }).toStrictEqual({ code: "NETWORK", retryable: true })
        expect(failure.message).toMatch(/^Anthropic: /)
        expect(failure.message.length).toBeLessThan(200)
        expect(failure.message).not.toContain(SECRET_PROMPT)
        expect(failure.message).not.toContain(KEY)
      }
    }))

  it.scoped("a body that ends before message_stop is a retryable NETWORK failure", () =>
    Effect.gen(function*() {
      const events = AnthropicServer.messageEvents({ text: ["par"], usage: { input: 1, output: 1 } })
      const { run: out } = yield* run([{
        _tag: "Sse",
        frames: events.slice(0, -1).map(([event, data]) => ResponsesServer.frame(event, data))
      }])
      expect(Option.map(out.error, (error) => error.failure)).toStrictEqual(Option.some({
        message: "Anthropic: the response ended before it was complete",
        code: "NETWORK",
        retryable: true
      }))
    }))

  const streamWith = (client: HttpClient.HttpClient) =>
    Effect.flatMap(Model, (model) => Stream.runCollect(model.stream(request()))).pipe(
      Effect.provide(
        AnthropicModel.layer({ model: "claude-test", baseUrl: "http://127.0.0.1:1", timeouts: DEFAULT_TIMEOUTS })
      ),
      Effect.provideService(HttpClient.HttpClient, client),
      Effect.map(Chunk.toReadonlyArray)
    )

  const sseBody = (turn: AnthropicServer.Turn) =>
    new TextEncoder().encode(
      AnthropicServer.messageEvents(turn).map(([event, data]) => ResponsesServer.frame(event, data)).join("")
    )

  const textTurn: Array<StreamChunk> = [
    ...Chunks.textBlock(0, "ü 🙂"),
    Chunks.usage({ inputTokens: 2, outputTokens: 1, totalTokens: 3, cacheReadTokens: 0, cacheWriteTokens: 0 }),
    Chunks.stop
  ]

  it.effect("a body that arrives one byte at a time, inside multi-byte characters, decodes the same", () =>
    Effect.gen(function*() {
      const body = sseBody({ text: ["ü 🙂"], usage: { input: 2, output: 1 } })
      const chunks = yield* streamWith(pieceClient(Array.from(body, (byte) => Uint8Array.of(byte)), false))
      expect(chunks).toStrictEqual(textTurn)
    }))

  it.effect("the response ends at message_stop even when the server leaves the body open", () =>
    Effect.gen(function*() {
      const chunks = yield* streamWith(pieceClient([sseBody({ text: ["ü 🙂"], usage: { input: 2, output: 1 } })], true))
      expect(chunks).toStrictEqual(textTurn)
    }))

  it.scoped("data that is not JSON is a MALFORMED_STREAM failure", () =>
    Effect.gen(function*() {
      const { run: out } = yield* run([AnthropicServer.malformed()])
      expect(Option.map(out.error, (error) => ({ code: error.failure.code, retryable: error.failure.retryable })))
        .toStrictEqual(Option.some({ code: "MALFORMED_STREAM", retryable: false }))
    }))
})

// ---------------------------------------------------------------------------------------------------

const agent = (server: FakeServer) =>
  agentOver({
    provider: "anthropic",
    model: "claude-test",
    system: "Be brief.",
    modelLayer: modelLayer(server),
    tools: [add, clock]
  })

describe("AnthropicModel in an agent", () => {
  it.scoped("a thinking tool loop: the next request carries the signed thinking, the calls ({} for none) and the results as text", () =>
    Effect.gen(function*() {
      const server = yield* ResponsesServer.listen([
        AnthropicServer.streamed({
          thinking: ["Two tools", " at once."],
          text: ["Let me check."],
          toolUses: [
            { id: "toolu_1", name: "add", partialJson: ["{\"a\":1,", "\"b\":2}"] },
            { id: "toolu_2", name: "clock", partialJson: [""] }
          ],
          usage: { input: 30, output: 12 }
        }),
        AnthropicServer.streamed({ text: ["3, at 12:00."], usage: { input: 50, output: 5 } })
      ])
      yield* Effect.gen(function*() {
        const driver = yield* Driver
        yield* driver.followup(user("q", "Add 1 and 2, and tell the time."))
        yield* driver.whenIdle
        const all = yield* events
        expect(all.map(notation)).toStrictEqual([
          "INS(nt,0,[q])",
          "TS(1)",
          "CLM(nt,0,1)",
          "SS(1,1)",
          "UM(q)",
          "RH(initial)",
          "CH(block-start)",
          "CH(reasoning-delta)",
          "CH(reasoning-delta)",
          "CH(block-end)",
          "CH(block-start)",
          "CH(text-delta)",
          "CH(block-end)",
          "CH(block-start)",
          "CH(tool-call-delta)",
          "CH(tool-call-delta)",
          "CH(block-end)",
          "CH(block-start)",
          "CH(tool-call-delta)",
          "CH(block-end)",
          "CH(usage)",
          "CH(replay-state)",
          "CH(finish stop)",
          "AM",
          "TC(toolu_1)",
          "TC(toolu_2)",
          "TR(toolu_1)",
          "TR(toolu_2)",
          "SE(1,1)",
          "SS(1,2)",
          "CH(block-start)",
          "CH(text-delta)",
          "CH(block-end)",
          "CH(usage)",
          "CH(finish stop)",
          "AM",
          "SE(1,2)",
          "TE(1,completed)"
        ])
        expect(checkLog(all, { closed: true })).toStrictEqual([])
        expect(ofType(all, "tool/call").map((e) => e.data.arguments)).toStrictEqual(["{\"a\":1,\"b\":2}", "{}"])
        expect(ofType(all, "assistant/message")[0]!.data.message.source).toStrictEqual({
          ...modelSource,
          replayState: {
            anthropic: {
              content: [
                { type: "thinking", thinking: "Two tools at once.", signature: "c2lnbmF0dXJl" },
                { type: "text" },
                { type: "tool_use", id: "toolu_1" },
                { type: "tool_use", id: "toolu_2" }
              ]
            }
          }
        })
      }).pipe(Effect.provide(agent(server)))

      const received = yield* server.requests
      expect(received).toHaveLength(2)
      // Breakpoints: the last tool, the system prompt, the newest message and the previous
      // request's newest message (four, the provider's limit).
      const mark = { type: "ephemeral" }
      expect(received[1]!.body.messages).toStrictEqual([
        { role: "user", content: [{ type: "text", text: "Add 1 and 2, and tell the time.", cache_control: mark }] },
        {
          role: "assistant",
          content: [
            { type: "thinking", thinking: "Two tools at once.", signature: "c2lnbmF0dXJl" },
            { type: "text", text: "Let me check." },
            { type: "tool_use", id: "toolu_1", name: "add", input: { a: 1, b: 2 } },
            { type: "tool_use", id: "toolu_2", name: "clock", input: {} }
          ]
        },
        {
          role: "user",
          content: [
            { type: "tool_result", tool_use_id: "toolu_1", content: "3", is_error: false },
            { type: "tool_result", tool_use_id: "toolu_2", content: "12:00", is_error: false, cache_control: mark }
          ]
        }
      ])
      expect(received[1]!.body.system).toStrictEqual([{ type: "text", text: "Be brief.", cache_control: mark }])
      expect(received[1]!.body.tools.map((tool: { cache_control?: unknown }) => tool.cache_control)).toStrictEqual([
        undefined,
        mark
      ])
      expect(received[0]!.body.messages[0].content[0].cache_control).toStrictEqual(mark)
    }))

  it.scoped("a 529 is retried in the same step (llm/retry in the log), then the turn completes", () =>
    Effect.gen(function*() {
      const server = yield* ResponsesServer.listen([
        ResponsesServer.status(529, { type: "error", error: { type: "overloaded_error", message: "Overloaded" } }),
        AnthropicServer.streamed({ text: ["Hello."], usage: { input: 5, output: 2 } })
      ])
      yield* Effect.gen(function*() {
        const driver = yield* Driver
        yield* driver.followup(user("q", "hi"))
        const retry = yield* firstRetry
        expect(retry.data.failure).toStrictEqual({
          message: "Anthropic (HTTP 529): Overloaded",
          code: "OVERLOADED",
          status: 529,
          retryable: true
        })
        yield* TestClock.adjust(`${retry.data.delayMs} millis`)
        yield* driver.whenIdle
        const all = yield* events
        expect(all.map(notation)).toStrictEqual([
          "INS(nt,0,[q])",
          "TS(1)",
          "CLM(nt,0,1)",
          "SS(1,1)",
          "UM(q)",
          "RH(initial)",
          "CH(finish error)",
          "RT(1)",
          "CH(block-start)",
          "CH(text-delta)",
          "CH(block-end)",
          "CH(usage)",
          "CH(finish stop)",
          "AM",
          "SE(1,1)",
          "TE(1,completed)"
        ])
      }).pipe(Effect.provide(agent(server)))
      expect((yield* server.requests).map((r) => r.headers["x-api-key"])).toStrictEqual([KEY, KEY])
    }))
})
