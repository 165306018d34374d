/**
 * OpenAiModel: the request body (pure), the adapter alone against a fake Responses API on
 * 127.0.0.1 (chunks, failures, the key), and inside an agent (reasoning replayed across a tool
 * round trip, retries). The sockets are real, but nothing under test reads wall time, so the tests
 * run under TestClock and a retry's backoff is stepped with `TestClock.adjust`.
 */
import * as NodeHttpClient from "@effect/platform-node/NodeHttpClient"
import { describe, expect, it } from "@effect/vitest"
import { Chunk, Effect, Either, Layer, Option, Redacted, Stream, TestClock } from "effect"
import type { ModelError } from "../../src/domain/Errors.js"
import { MessageId, SessionId } from "../../src/domain/Ids.js"
import type { Message, ToolSchema } from "../../src/domain/Values.js"
import { DEFAULT_TIMEOUTS } from "../../src/internal/providers/ProviderTimeouts.js"
import * as OpenAiModel from "../../src/layers/OpenAiModel.js"
import { Driver } from "../../src/services/Driver.js"
import type { ModelRequest } from "../../src/services/Model.js"
import { Model } from "../../src/services/Model.js"
import { events, notation, user } from "../agent/harness.js"
import {
  add,
  agentOver,
  assistantFrom,
  firstRetry,
  ofType,
  prompt,
  requestFor,
  sourceFor,
  streamRun,
  toolResult,
  userParts
} from "../fixtures/adapterHarness.js"
import * as Chunks from "../fixtures/streamChunks.js"
import type { FakeServer, Reply } from "./fake/ResponsesServer.js"
import * as Fake from "./fake/ResponsesServer.js"

const KEY = "sk-test-5e4d3c2b1a-never-printed"
const apiKey = Redacted.make(KEY)

const request = requestFor("openai", "gpt-test")
const modelSource = sourceFor("openai", "gpt-test")
const assistant = assistantFrom(modelSource)

/** An assistant message with this adapter's replay state: two reasoning items around its text. */
const replayed: Message = {
  id: MessageId.make("a1"),
  role: "assistant",
  content: [
    { type: "reasoning", text: "**Calculating**" },
    { type: "text", text: "First the sum." },
    { type: "tool-call", id: "call_AB6", name: "add", arguments: "{\"a\":12,\"b\":7}" },
    { type: "tool-call", id: "call_CD7", name: "clock", arguments: "" },
    { type: "text", text: "A late remark." }
  ],
  source: {
    ...modelSource,
    replayState: {
      openai: {
        items: [
          {
            type: "reasoning",
            id: "rs_1",
            encrypted_content: "gAAAA-one",
            summary: [{ type: "summary_text", text: "**Calculating**" }]
          },
          { type: "message" },
          { type: "reasoning", encrypted_content: "gAAAA-two", summary: [] },
          { type: "function_call", call_id: "call_AB6" }
        ]
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------------

describe("OpenAiModel request body", () => {
  it("instructions, each user-role message its own item, tool results as their text, tools without strict", () => {
    const messages: ReadonlyArray<Message> = [
      prompt("u1", "The repo uses pnpm."),
      userParts("u2", [{ type: "text", text: "What is 12 + 7? Look:" }, {
        type: "image",
        mediaType: "image/png",
        data: "AQID"
      }]),
      assistant("a1", [
        { type: "reasoning", text: "an addition" },
        { type: "text", text: "Adding." },
        { type: "tool-call", id: "call_1", name: "add", arguments: "{\"a\":12,\"b\":7}" },
        { type: "tool-call", id: "call_2", name: "clock", arguments: "" }
      ]),
      toolResult("call_1", "19"),
      {
        id: MessageId.make("r-call_2"),
        role: "user",
        content: [{
          type: "tool-result",
          toolCallId: "call_2",
          isError: false,
          content: [{ type: "text", text: "sunny, 18 °C" }, { type: "text", text: "at noon" }, {
            type: "image",
            mediaType: "image/jpeg",
            data: "BAUG"
          }]
        }],
        source: { kind: "tool", callId: "call_2" }
      },
      prompt("u3", "Thanks.")
    ]
    const tools: ReadonlyArray<ToolSchema> = [
      {
        name: "add",
        description: "Adds two numbers",
        parameters: {
          $schema: "http://json-schema.org/draft-07/schema#",
          type: "object",
          properties: { a: { type: "number" }, b: { type: "number" } },
          required: ["a", "b"]
        }
      },
      { name: "clock", description: "The time", parameters: null }
    ]
    const body = OpenAiModel.toResponsesRequest(
      request({ system: "Be brief.", messages, tools, maxTokens: 512, temperature: 0.3 }),
      { model: "gpt-bound", maxTokens: 99 }
    )
    expect(body).toStrictEqual({
      model: "gpt-bound",
      instructions: "Be brief.",
      input: [
        { role: "user", content: [{ type: "input_text", text: "The repo uses pnpm." }] },
        {
          role: "user",
          content: [
            { type: "input_text", text: "What is 12 + 7? Look:" },
            { type: "input_image", image_url: "data:image/png;base64,AQID" }
          ]
        },
        { type: "message", role: "assistant", content: [{ type: "output_text", text: "Adding." }] },
        { type: "function_call", call_id: "call_1", name: "add", arguments: "{\"a\":12,\"b\":7}" },
        { type: "function_call", call_id: "call_2", name: "clock", arguments: "{}" },
        { type: "function_call_output", call_id: "call_1", output: "19" },
        { type: "function_call_output", call_id: "call_2", output: "sunny, 18 °C\nat noon" },
        {
          role: "user",
          content: [
            { type: "input_text", text: "images returned by tool call call_2:" },
            { type: "input_image", image_url: "data:image/jpeg;base64,BAUG" }
          ]
        },
        { role: "user", content: [{ type: "input_text", text: "Thanks." }] }
      ],
      tools: [
        {
          type: "function",
          name: "add",
          description: "Adds two numbers",
          parameters: {
            type: "object",
            properties: { a: { type: "number" }, b: { type: "number" } },
            required: ["a", "b"]
          },
          strict: false
        },
        {
          type: "function",
          name: "clock",
          description: "The time",
          parameters: { type: "object", properties: {} },
          strict: false
        }
      ],
      max_output_tokens: 512,
      temperature: 0.3,
      stream: true,
      store: false,
      include: ["reasoning.encrypted_content"],
      prompt_cache_key: "s"
    })
  })

  it("without system, tools or limits those fields are absent; the options' maxTokens is the default", () => {
    const body = OpenAiModel.toResponsesRequest(request({ messages: [prompt("u1", "hi")] }), {
      model: "m",
      maxTokens: 64
    })
    expect(body).toStrictEqual({
      model: "m",
      input: [{ role: "user", content: [{ type: "input_text", text: "hi" }] }],
      max_output_tokens: 64,
      stream: true,
      store: false,
      include: ["reasoning.encrypted_content"],
      prompt_cache_key: "s"
    })
  })

  it("prompt_cache_key is the session id, or the option's key; promptCaching: false sends none; tools, instructions, input last", () => {
    const req = request({ sessionId: SessionId.make("s-42"), system: "S", messages: [prompt("u1", "hi")] })
    const byDefault = OpenAiModel.toResponsesRequest(req, { model: "m" })
    expect(byDefault.prompt_cache_key).toBe("s-42")
    expect(Object.keys(byDefault).slice(-2)).toStrictEqual(["instructions", "input"])
    expect(OpenAiModel.toResponsesRequest(req, { model: "m", promptCacheKey: "team-a" }).prompt_cache_key).toBe(
      "team-a"
    )
    expect("prompt_cache_key" in OpenAiModel.toResponsesRequest(req, { model: "m", promptCaching: false })).toBe(false)
  })

  it("a reasoning item with encrypted content goes back (without its id) before its function_call, in the original order", () => {
    const body = OpenAiModel.toResponsesRequest(
      request({
        messages: [
          prompt("u1", "12 + 7, then the time"),
          replayed,
          toolResult("call_AB6", "19"),
          toolResult("call_CD7", "noon")
        ]
      }),
      { model: "gpt-test" }
    )
    expect(body.input).toStrictEqual([
      { role: "user", content: [{ type: "input_text", text: "12 + 7, then the time" }] },
      {
        type: "reasoning",
        encrypted_content: "gAAAA-one",
        summary: [{ type: "summary_text", text: "**Calculating**" }]
      },
      { type: "message", role: "assistant", content: [{ type: "output_text", text: "First the sum." }] },
      { type: "reasoning", encrypted_content: "gAAAA-two", summary: [] },
      { type: "function_call", call_id: "call_AB6", name: "add", arguments: "{\"a\":12,\"b\":7}" },
      // Text and calls no entry stood for follow, in their order.
      { type: "message", role: "assistant", content: [{ type: "output_text", text: "A late remark." }] },
      { type: "function_call", call_id: "call_CD7", name: "clock", arguments: "{}" },
      { type: "function_call_output", call_id: "call_AB6", output: "19" },
      { type: "function_call_output", call_id: "call_CD7", output: "noon" }
    ])
    expect(body.include).toStrictEqual(["reasoning.encrypted_content"])
    expect(body.store).toBe(false)
  })

  it("another adapter's replay state is ignored; without encrypted reasoning neither include nor reasoning items are sent", () => {
    const foreign: Message = {
      ...replayed,
      source: { ...modelSource, replayState: { anthropic: { content: [{ type: "text" }] } } }
    }
    expect(OpenAiModel.toInputItems([foreign])).toStrictEqual([
      { type: "message", role: "assistant", content: [{ type: "output_text", text: "First the sum." }] },
      { type: "function_call", call_id: "call_AB6", name: "add", arguments: "{\"a\":12,\"b\":7}" },
      { type: "function_call", call_id: "call_CD7", name: "clock", arguments: "{}" },
      { type: "message", role: "assistant", content: [{ type: "output_text", text: "A late remark." }] }
    ])
    const body = OpenAiModel.toResponsesRequest(request({ messages: [replayed] }), {
      model: "gpt-4.1",
      encryptedReasoning: false
    })
    expect(body).not.toHaveProperty("include")
    expect(body.input.map((item) => "type" in item ? item.type : item.role)).toStrictEqual([
      "message",
      "function_call",
      "message",
      "function_call"
    ])
  })
})

// ---------------------------------------------------------------------------------------------------
// The adapter alone, against the fake server

const modelLayer = (server: FakeServer) =>
  OpenAiModel.layer({ model: "gpt-test", apiKey, baseUrl: `${server.url}/v1`, timeouts: DEFAULT_TIMEOUTS }).pipe(
    Layer.provide(NodeHttpClient.layerUndici)
  )

/** Starts a fake server with `replies` and streams each request through one adapter, in turn. */
const runAll = (replies: ReadonlyArray<Reply>, requests: ReadonlyArray<ModelRequest>) =>
  Effect.gen(function*() {
    const server = yield* Fake.listen(replies)
    const runs = yield* Effect.forEach(requests, streamRun).pipe(Effect.provide(modelLayer(server)))
    return { runs, received: yield* server.requests, host: new URL(server.url).host }
  })

const run = (
  replies: ReadonlyArray<Reply>,
  req: ModelRequest = request({ messages: [prompt("u1", "SECRET PROMPT TEXT")] })
) => Effect.map(runAll(replies, [req]), ({ host, received, runs }) => ({ ...runs[0]!, received, host }))

const failureOf = (error: Option.Option<ModelError>) => Option.getOrThrow(error).failure

describe("OpenAiModel over HTTP", () => {
  it.scoped("posts to {baseUrl}/responses with the bearer key and decodes the streamed response", () =>
    Effect.gen(function*() {
      const { chunks, error, received } = yield* run([
        Fake.streamed({
          reasoning: ["Add", " them."],
          encrypted: "gAAAA-enc",
          toolCalls: [{ callId: "call_1", name: "add", arguments: ["{\"a\":12,", "\"b\":7}"] }],
          usage: { input: 20, output: 8, reasoning: 4, cached: 2 }
        })
      ])
      expect(error).toStrictEqual(Option.none())
      expect(chunks).toStrictEqual([
        ...Chunks.reasoningBlock(0, "Add", " them."),
        ...Chunks.toolCallBlock(1, "call_1", "add", "{\"a\":12,", "\"b\":7}"),
        Chunks.usage({ inputTokens: 20, outputTokens: 8, totalTokens: 28, reasoningTokens: 4, cacheReadTokens: 2 }),
        {
          type: "replay-state",
          state: {
            openai: {
              items: [
                {
                  type: "reasoning",
                  summary: [{ type: "summary_text", text: "Add them." }],
                  encrypted_content: "gAAAA-enc"
                },
                { type: "function_call", call_id: "call_1" }
              ]
            }
          }
        },
        Chunks.stop
      ])
      expect(received).toHaveLength(1)
      expect(received[0]!.method).toBe("POST")
      expect(received[0]!.path).toBe("/v1/responses")
      expect(received[0]!.headers.authorization).toBe(`Bearer ${KEY}`)
      expect(received[0]!.body).toMatchObject({
        model: "gpt-test",
        stream: true,
        store: false,
        include: ["reasoning.encrypted_content"],
        prompt_cache_key: "s"
      })
    }))

  it.scoped("a 401 is AUTH, not retryable, with the provider's message shortened and the echoed key redacted", () =>
    Effect.gen(function*() {
      const long =
        `Incorrect API key provided: ${KEY}. You can find your API key at https://platform.openai.com/account/api-keys.`
      const { error } = yield* run([
        Fake.status(401, {
          error: { message: `${long}\n${"x".repeat(1000)}`, type: "invalid_request_error", code: "invalid_api_key" }
        })
      ])
      const failure = failureOf(error)
      expect(failure).toMatchObject({ code: "AUTH", retryable: false, status: 401 })
      expect(failure.message).toMatch(/^OpenAI\b.*: Incorrect API key provided: \[redacted\]\. You can find/)
      expect(failure.message.length).toBeLessThanOrEqual(300)
      expect(failure.message).not.toContain("\n")
      expect(failure.message).not.toContain(KEY)
      expect(failure.message).not.toContain("SECRET PROMPT TEXT")
    }))

  it.scoped("a 429 is a retryable RATE_LIMIT with the delay and request id the server gave", () =>
    Effect.gen(function*() {
      const { error } = yield* run([
        Fake.status(429, {
          error: { message: "Rate limit reached for gpt-test", type: "requests", code: "rate_limit_exceeded" }
        }, {
          "retry-after-ms": "1500",
          "x-request-id": "req_429"
        })
      ])
      expect(failureOf(error)).toStrictEqual({
        code: "RATE_LIMIT",
        retryable: true,
        status: 429,
        retryAfterMs: 1500,
        requestId: "req_429",
        message: expect.stringMatching(/^OpenAI\b.*: Rate limit reached for gpt-test$/)
      })
    }))

  it.scoped("a dropped connection is a retryable NETWORK failure with a short message that holds no prompt", () =>
    Effect.gen(function*() {
      const { chunks, error, host } = yield* run([Fake.hangup])
      expect(chunks).toStrictEqual([])
      const failure = failureOf(error)
      expect(failure).toMatchObject({ code: "NETWORK", retryable: true })
      expect(failure.message).toMatch(/^OpenAI: /)
      expect(failure.message).toContain(host)
      expect(failure.message.length).toBeLessThan(200)
      expect(failure.message).not.toContain("SECRET PROMPT TEXT")
      expect(failure.message).not.toContain(KEY)
    }))

  it.scoped("a body cut mid-stream is a retryable NETWORK failure after the chunks that came", () =>
    Effect.gen(function*() {
      const events = Fake.responseEvents({ text: ["Hel", "lo"], usage: { input: 1, output: 1 } })
      const upToFirstDelta = events.slice(0, events.findIndex((e) => e.type === "response.output_text.delta") + 1)
      const { chunks, error } = yield* run([Fake.cut(upToFirstDelta.map((e) => Fake.frame(e.type as string, e)))])
      expect(chunks).toStrictEqual([
        { type: "block-start", index: 0, block: "text" },
        { type: "text-delta", index: 0, text: "Hel" }
      ])
      const failure = failureOf(error)
      expect(failure).toMatchObject({ code: "NETWORK", retryable: true })
      expect(failure.message.length).toBeLessThan(200)
      expect(failure.message).not.toContain("SECRET PROMPT TEXT")
    }))

  it.scoped("a model that refuses encrypted reasoning gets the request again at once without include, and never again", () =>
    Effect.gen(function*() {
      const refused = Fake.status(400, {
        error: {
          message: "Encrypted content is not supported with this model.",
          type: "invalid_request_error",
          param: "include",
          code: null
        }
      })
      const hello = Fake.streamed({ text: ["Hello."], usage: { input: 3, output: 1 } })
      const { received, runs } = yield* runAll([refused, hello, hello], [request(), request()])
      expect(runs.map((r) => r.error)).toStrictEqual([Option.none(), Option.none()])
      expect(runs.map((r) => r.chunks.at(-1))).toStrictEqual([
        Chunks.stop,
        Chunks.stop
      ])
      expect(received.map((r) => r.body.include)).toStrictEqual([["reasoning.encrypted_content"], undefined, undefined])
    }))

  it.scoped("replayed reasoning the API cannot verify is sent again without its reasoning items, include kept", () =>
    Effect.gen(function*() {
      const unverifiable = Fake.status(400, {
        error: {
          message: "The encrypted content gAAA...DQ== could not be verified.",
          type: "invalid_request_error",
          param: null,
          code: "invalid_encrypted_content"
        }
      })
      const hello = Fake.streamed({ text: ["Hello."], usage: { input: 3, output: 1 } })
      const withReasoning = request({
        messages: [prompt("u1", "12 + 7, then the time"), replayed, toolResult("call_AB6", "19")]
      })
      const { received, runs } = yield* runAll([unverifiable, hello, unverifiable], [withReasoning, request()])
      expect(runs[0]!.error).toStrictEqual(Option.none())
      expect(received.map((r) => r.body.include)).toStrictEqual([
        ["reasoning.encrypted_content"],
        ["reasoning.encrypted_content"],
        ["reasoning.encrypted_content"]
      ])
      const types = (body: any) => body.input.map((item: any) => item.type ?? item.role)
      expect(types(received[0]!.body)).toStrictEqual([
        "user",
        "reasoning",
        "message",
        "reasoning",
        "function_call",
        "message",
        "function_call",
        "function_call_output"
      ])
      expect(types(received[1]!.body)).toStrictEqual([
        "user",
        "message",
        "function_call",
        "message",
        "function_call",
        "function_call_output"
      ])
      // Without reasoning to leave out, the same 400 is the request's failure.
      expect(failureOf(runs[1]!.error)).toMatchObject({ code: "INVALID_REQUEST", retryable: false, status: 400 })
    }))

  it.scoped("after a chunk has been streamed, the same 400 as a stream error is the failure: nothing is sent again", () =>
    Effect.gen(function*() {
      const events = Fake.responseEvents({ text: ["Hel", "lo"], usage: { input: 1, output: 1 } })
      const upToFirstDelta = events.slice(0, events.findIndex((e) => e.type === "response.output_text.delta") + 1)
      const error = {
        type: "error",
        error: { code: 400, message: "Encrypted content is not supported with this model." }
      }
      const { chunks, error: failure, received } = yield* run([
        { _tag: "Sse", frames: [...upToFirstDelta, error].map((e) => Fake.frame(e.type as string, e)) }
      ])
      expect(chunks).toStrictEqual([
        { type: "block-start", index: 0, block: "text" },
        { type: "text-delta", index: 0, text: "Hel" }
      ])
      expect(failureOf(failure)).toMatchObject({ status: 400, retryable: false })
      expect(received).toHaveLength(1)
    }))

  it.scoped("a server that stops sending is a retryable TIMEOUT once the layer's timeouts pass", () =>
    Effect.gen(function*() {
      const events = Fake.responseEvents({ text: ["Hel", "lo"], usage: { input: 1, output: 1 } })
      const upToFirstDelta = events.slice(0, events.findIndex((e) => e.type === "response.output_text.delta") + 1)
      const server = yield* Fake.listen([Fake.stall(upToFirstDelta.map((e) => Fake.frame(e.type as string, e)))])
      const fiber = yield* Effect.flatMap(Model, (model) => Stream.runCollect(Stream.either(model.stream(request()))))
        .pipe(
          Effect.provide(modelLayer(server)),
          Effect.fork
        )
      // The request is out; the text delta may or may not have been read: the idle timeout ends it.
      while ((yield* server.requests).length === 0) yield* Effect.yieldNow()
      yield* TestClock.adjust(DEFAULT_TIMEOUTS.idle)
      yield* TestClock.adjust(DEFAULT_TIMEOUTS.idle)
      const out = Chunk.toReadonlyArray(yield* fiber.await.pipe(Effect.flatten))
      const failure = out.at(-1)
      expect(failure !== undefined && Either.isLeft(failure) ? failure.left.failure : undefined).toMatchObject({
        code: "TIMEOUT",
        retryable: true,
        message: expect.stringMatching(/^OpenAI: /)
      })
    }))

  it.scoped("another 400 is not sent again: INVALID_REQUEST, not retryable", () =>
    Effect.gen(function*() {
      const { error, received } = yield* run([
        Fake.status(400, {
          error: {
            message: "Invalid value for 'temperature'.",
            type: "invalid_request_error",
            param: "temperature",
            code: null
          }
        })
      ])
      expect(failureOf(error)).toMatchObject({ code: "INVALID_REQUEST", retryable: false, status: 400 })
      expect(received).toHaveLength(1)
    }))
})

// ---------------------------------------------------------------------------------------------------
// Inside an agent

const agent = (server: FakeServer) =>
  agentOver({
    provider: "openai",
    model: "gpt-test",
    system: "Be brief.",
    modelLayer: modelLayer(server),
    tools: [add]
  })

describe("OpenAiModel in an agent", () => {
  it.scoped("the reasoning item comes back before its function_call in the next request, and the result 19 as \"19\"", () =>
    Effect.gen(function*() {
      const server = yield* Fake.listen([
        Fake.streamed({
          reasoning: ["Add 12 and 7."],
          encrypted: "gAAAA-secret-thoughts",
          toolCalls: [{ callId: "call_1", name: "add", arguments: ["{\"a\":12,\"b\":7}"] }],
          usage: { input: 30, output: 12 }
        }),
        Fake.streamed({ text: ["It is 19."], usage: { input: 50, output: 5 } })
      ])
      yield* Effect.gen(function*() {
        const driver = yield* Driver
        yield* driver.followup(user("q", "What is 12 + 7?"))
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
          "CH(block-end)",
          "CH(block-start)",
          "CH(tool-call-delta)",
          "CH(block-end)",
          "CH(usage)",
          "CH(replay-state)",
          "CH(finish stop)",
          "AM",
          "TC(call_1)",
          "TR(call_1)",
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
        const [first] = ofType(all, "assistant/message")
        expect(first!.data.message.source).toStrictEqual({
          ...modelSource,
          replayState: {
            openai: {
              items: [
                {
                  type: "reasoning",
                  summary: [{ type: "summary_text", text: "Add 12 and 7." }],
                  encrypted_content: "gAAAA-secret-thoughts"
                },
                { type: "function_call", call_id: "call_1" }
              ]
            }
          }
        })
      }).pipe(Effect.provide(agent(server)))
      const received = yield* server.requests
      expect(received).toHaveLength(2)
      expect(received[0]!.body.instructions).toBe("Be brief.")
      expect(received[1]!.body.input).toStrictEqual([
        { role: "user", content: [{ type: "input_text", text: "What is 12 + 7?" }] },
        {
          type: "reasoning",
          summary: [{ type: "summary_text", text: "Add 12 and 7." }],
          encrypted_content: "gAAAA-secret-thoughts"
        },
        { type: "function_call", call_id: "call_1", name: "add", arguments: "{\"a\":12,\"b\":7}" },
        { type: "function_call_output", call_id: "call_1", output: "19" }
      ])
    }))

  it.scoped("a 429 is retried by tiller's policy (llm/retry), then the turn completes", () =>
    Effect.gen(function*() {
      const server = yield* Fake.listen([
        Fake.status(429, { error: { message: "Slow down", type: "requests", code: "rate_limit_exceeded" } }, {
          "retry-after": "1"
        }),
        Fake.streamed({ text: ["Fine."], usage: { input: 5, output: 1 } })
      ])
      yield* Effect.gen(function*() {
        const driver = yield* Driver
        yield* driver.followup(user("q", "hello"))
        const retry = yield* firstRetry
        expect(retry.data.failure).toStrictEqual({
          code: "RATE_LIMIT",
          retryable: true,
          status: 429,
          retryAfterMs: 1000,
          message: expect.stringMatching(/^OpenAI\b.*: Slow down$/)
        })
        yield* TestClock.adjust(`${retry.data.delayMs} millis`)
        yield* driver.whenIdle
        const all = yield* events
        expect(ofType(all, "turn/end").map((e) => e.data.reason)).toStrictEqual([{ kind: "completed" }])
        expect(ofType(all, "assistant/message").map((e) => e.data.message.content)).toStrictEqual([[{
          type: "text",
          text: "Fine."
        }]])
      }).pipe(Effect.provide(agent(server)))
      expect((yield* server.requests).length).toBe(2)
    }))

  it.scoped("a quota error in the stream ends the turn with QUOTA and the provider's message, without a retry", () =>
    Effect.gen(function*() {
      const quota = "You exceeded your current quota, please check your plan and billing details."
      const created = Fake.responseEvents({ text: ["x"], usage: { input: 1, output: 1 } })[0]!
      const server = yield* Fake.listen([{
        _tag: "Sse",
        frames: [
          created,
          {
            type: "error",
            sequence_number: 1,
            error: { type: "insufficient_quota", code: "insufficient_quota", message: quota, param: null }
          },
          {
            type: "response.failed",
            sequence_number: 2,
            response: { id: "resp_1", status: "failed", error: { code: "insufficient_quota", message: quota } }
          }
        ].map((e) => Fake.frame(e.type as string, e))
      }])
      yield* Effect.gen(function*() {
        const driver = yield* Driver
        yield* driver.followup(user("q", "hello"))
        yield* driver.whenIdle
        const all = yield* events
        expect(ofType(all, "llm/retry")).toStrictEqual([])
        expect(ofType(all, "turn/end").map((e) => e.data.reason)).toStrictEqual([
          { kind: "error", error: { code: "QUOTA", retryable: false, message: `OpenAI: ${quota}` } }
        ])
      }).pipe(Effect.provide(agent(server)))
      expect((yield* server.requests).length).toBe(1)
    }))

  it.scoped("a refusal streams no text chunk and ends the turn with REFUSAL holding its words, without a retry", () =>
    Effect.gen(function*() {
      const refusal = "I'm sorry, I can't help with that."
      const wire = Fake.responseEvents({ text: [refusal], usage: { input: 4, output: 9 } }).map((e) =>
        e.type === "response.output_text.delta"
          ? { ...e, type: "response.refusal.delta" }
          : e.type === "response.output_item.done"
          ? {
            ...e,
            item: {
              id: "msg_1",
              type: "message",
              status: "completed",
              role: "assistant",
              content: [{ type: "refusal", refusal }]
            }
          }
          : e
      )
      const server = yield* Fake.listen([{ _tag: "Sse", frames: wire.map((e) => Fake.frame(e.type as string, e)) }])
      yield* Effect.gen(function*() {
        const driver = yield* Driver
        yield* driver.followup(user("q", "something bad"))
        yield* driver.whenIdle
        const all = yield* events
        expect(ofType(all, "assistant/chunk").map((e) => e.data.chunk).filter((c) => c.type === "text-delta"))
          .toStrictEqual([])
        expect(ofType(all, "llm/retry")).toStrictEqual([])
        expect(ofType(all, "turn/end").map((e) => e.data.reason)).toStrictEqual([
          {
            kind: "error",
            error: { code: "REFUSAL", retryable: false, message: `OpenAI: the model refused: ${refusal}` }
          }
        ])
      }).pipe(Effect.provide(agent(server)))
      expect((yield* server.requests).length).toBe(1)
    }))
})
