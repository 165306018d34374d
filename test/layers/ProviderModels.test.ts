import type { HttpClient } from "@effect/platform"
import * as NodeHttpClient from "@effect/platform-node/NodeHttpClient"
import { describe, expect, it } from "@effect/vitest"
import type { ConfigError } from "effect"
import { Effect, Layer, Redacted, Schema } from "effect"
import type { CoreEvent, EventOf, SessionEvent } from "../../src/domain/Event.js"
import { SessionId } from "../../src/domain/Ids.js"
import { userMessage } from "../../src/domain/Message.js"
import type { LlmFailure, Message, Usage } from "../../src/domain/Values.js"
import { Agent } from "../../src/layers/Agent.js"
import * as ProviderModels from "../../src/layers/ProviderModels.js"
import { Driver } from "../../src/services/Driver.js"
import { forkSession } from "../../src/services/Fork.js"
import type { Model } from "../../src/services/Model.js"
import { SessionLog } from "../../src/services/SessionLog.js"
import { SessionStore } from "../../src/services/SessionStore.js"
import { Tool, Tools } from "../../src/services/Tools.js"
import { notation } from "../agent/harness.js"
import * as AnthropicServer from "./fake/AnthropicServer.js"
import type { FakeServer, ReceivedRequest, Reply } from "./fake/ResponsesServer.js"
import * as ResponsesServer from "./fake/ResponsesServer.js"

// Real sockets on 127.0.0.1, so these tests run on the live clock; a retry waits for the default
// policy's first backoff (about one second).

const KEY = "sk-test-0123456789-never-printed"

const echo = Tool.make("echo", {
  description: "Repeats its text",
  parameters: Schema.Struct({ text: Schema.String }),
  mode: "parallel",
  execute: ({ text }) => Effect.succeed(text)
})

const add = Tool.make("add", {
  description: "Adds two numbers",
  parameters: Schema.Struct({ a: Schema.Number, b: Schema.Number }),
  mode: "parallel",
  execute: ({ a, b }) => Effect.succeed(String(a + b))
})

/** What a scripted response contains, whatever the wire format. */
interface Turn {
  readonly reasoning?: ReadonlyArray<string>
  readonly text?: ReadonlyArray<string>
  readonly calls?: ReadonlyArray<{ readonly id: string; readonly name: string; readonly args: ReadonlyArray<string> }>
  readonly usage: { readonly input: number; readonly output: number }
}

/** One provider: its model layer, its wire format, and what it is expected to send and report. */
interface Provider {
  readonly name: "openai" | "anthropic"
  readonly model: string
  readonly path: string
  readonly layer: (url: string) => Layer.Layer<Model, ConfigError.ConfigError, HttpClient.HttpClient>
  readonly reply: (turn: Turn) => Reply
  readonly malformed: () => Reply
  /** The failure a malformed stream ends its turn with (a subset of its fields). */
  readonly malformedFailure: Partial<LlmFailure>
  /** The key as the server received it. */
  readonly keyHeader: (request: ReceivedRequest) => unknown
  /** The conversation part of a request body. */
  readonly history: (body: any) => unknown
  /** The chunks of the reasoning block of `toolTurn`. */
  readonly reasoningChunks: ReadonlyArray<string>
  /** The replay-state chunk of `toolTurn`, when the provider needs something back. */
  readonly replayChunks: ReadonlyArray<string>
  /** The replay state stored with the assistant message of `toolTurn`. */
  readonly replayState?: unknown
  /** The usage of `toolTurn` as tiller reports it. */
  readonly toolTurnUsage: Usage
  /** The two requests of the tool round trip, as `history` shows them. */
  readonly expectedHistory: readonly [unknown, unknown]
}

const toolTurn: Turn = {
  reasoning: ["Two tools", " at once."],
  text: ["Let me ", "check."],
  calls: [
    { id: "call_1", name: "echo", args: ["{\"text\":", "\"hi\"}"] },
    { id: "call_2", name: "add", args: ["{\"a\":1,", "\"b\":2}"] }
  ],
  usage: { input: 30, output: 12 }
}

const openai: Provider = {
  name: "openai",
  model: "gpt-test",
  path: "/v1/responses",
  layer: (url) => ProviderModels.layerOpenAi({ model: "gpt-test", apiKey: Redacted.make(KEY), baseUrl: `${url}/v1` }),
  reply: (turn) =>
    ResponsesServer.streamed({
      ...(turn.reasoning === undefined ? {} : { reasoning: turn.reasoning }),
      ...(turn.text === undefined ? {} : { text: turn.text }),
      toolCalls: (turn.calls ?? []).map((call) => ({ callId: call.id, name: call.name, arguments: call.args })),
      usage: turn.usage
    }),
  malformed: ResponsesServer.malformed,
  malformedFailure: { code: "MALFORMED_STREAM", retryable: false },
  keyHeader: (request) => request.headers.authorization,
  history: (body) => ({ instructions: body.instructions, input: body.input }),
  reasoningChunks: ["CH(block-start)", "CH(reasoning-delta)", "CH(reasoning-delta)", "CH(block-end)"],
  replayChunks: [],
  toolTurnUsage: { inputTokens: 30, outputTokens: 12, totalTokens: 42, reasoningTokens: 0, cacheReadTokens: 0 },
  expectedHistory: [
    {
      instructions: "Be brief.",
      input: [
        { role: "user", content: [{ type: "input_text", text: "The repo uses pnpm." }] },
        { role: "user", content: [{ type: "input_text", text: "Echo hi and add 1 and 2." }] }
      ]
    },
    {
      instructions: "Be brief.",
      input: [
        { role: "user", content: [{ type: "input_text", text: "The repo uses pnpm." }] },
        { role: "user", content: [{ type: "input_text", text: "Echo hi and add 1 and 2." }] },
        { type: "message", role: "assistant", content: [{ type: "output_text", text: "Let me check." }] },
        { type: "function_call", call_id: "call_1", name: "echo", arguments: "{\"text\":\"hi\"}" },
        { type: "function_call", call_id: "call_2", name: "add", arguments: "{\"a\":1,\"b\":2}" },
        // The tools' results as their text: `hi` and `3`, never JSON-encoded a second time.
        { type: "function_call_output", call_id: "call_1", output: "hi" },
        { type: "function_call_output", call_id: "call_2", output: "3" }
      ]
    }
  ]
}

const anthropic: Provider = {
  name: "anthropic",
  model: "claude-test",
  path: "/v1/messages",
  layer: (url) => ProviderModels.layerAnthropic({ model: "claude-test", apiKey: Redacted.make(KEY), baseUrl: url }),
  reply: (turn) =>
    AnthropicServer.streamed({
      ...(turn.reasoning === undefined ? {} : { thinking: turn.reasoning }),
      ...(turn.text === undefined ? {} : { text: turn.text }),
      toolUses: (turn.calls ?? []).map((call) => ({ id: call.id, name: call.name, partialJson: call.args })),
      usage: turn.usage
    }),
  malformed: AnthropicServer.malformed,
  malformedFailure: {
    code: "MALFORMED_STREAM",
    retryable: false,
    message: expect.stringContaining("Anthropic: a stream event is not JSON")
  },
  keyHeader: (request) => request.headers["x-api-key"],
  // The history as sent, without the prompt-cache marks (AnthropicModel.test.ts checks those).
  history: (body) => ({
    system: Array.isArray(body.system)
      ? body.system.map((block: { text: string }) => block.text).join("")
      : body.system,
    messages: body.messages.map((message: { content: ReadonlyArray<Record<string, unknown>> }) => ({
      ...message,
      content: message.content.map(({ cache_control: _, ...block }) => block)
    }))
  }),
  reasoningChunks: ["CH(block-start)", "CH(reasoning-delta)", "CH(reasoning-delta)", "CH(block-end)"],
  // The signed thinking block, kept for the next request.
  replayChunks: ["CH(replay-state)"],
  replayState: {
    anthropic: {
      content: [
        { type: "thinking", thinking: "Two tools at once.", signature: "c2lnbmF0dXJl" },
        { type: "text" },
        { type: "tool_use", id: "call_1" },
        { type: "tool_use", id: "call_2" }
      ]
    }
  },
  toolTurnUsage: { inputTokens: 30, outputTokens: 12, totalTokens: 42, cacheReadTokens: 0, cacheWriteTokens: 0 },
  expectedHistory: [
    {
      system: "Be brief.",
      // Anthropic takes consecutive user turns as one message: each stays its own block, in order.
      messages: [
        {
          role: "user",
          content: [{ type: "text", text: "The repo uses pnpm." }, { type: "text", text: "Echo hi and add 1 and 2." }]
        }
      ]
    },
    {
      system: "Be brief.",
      messages: [
        {
          role: "user",
          content: [{ type: "text", text: "The repo uses pnpm." }, { type: "text", text: "Echo hi and add 1 and 2." }]
        },
        {
          role: "assistant",
          content: [
            // The signed thinking block goes back first, as the API requires with thinking on.
            { type: "thinking", thinking: "Two tools at once.", signature: "c2lnbmF0dXJl" },
            { type: "text", text: "Let me check." },
            { type: "tool_use", id: "call_1", name: "echo", input: { text: "hi" } },
            { type: "tool_use", id: "call_2", name: "add", input: { a: 1, b: 2 } }
          ]
        },
        {
          role: "user",
          content: [
            { type: "tool_result", tool_use_id: "call_1", content: "hi", is_error: false },
            { type: "tool_result", tool_use_id: "call_2", content: "3", is_error: false }
          ]
        }
      ]
    }
  ]
}

/** Runs `body` in an agent on session "s" over the provider's model, against a fake server. */
const session = <A, E>(
  provider: Provider,
  replies: ReadonlyArray<Reply>,
  body: (server: FakeServer) => Effect.Effect<A, E, Driver | SessionLog>
) =>
  Effect.gen(function*() {
    const server = yield* ResponsesServer.listen(replies)
    const agent = Agent.layer({
      sessionId: SessionId.make("s"),
      model: { provider: provider.name, model: provider.model },
      system: "Be brief."
    }).pipe(
      Layer.provideMerge(Layer.mergeAll(
        SessionStore.layerMemory,
        Layer.provide(provider.layer(server.url), NodeHttpClient.layerUndici),
        Tools.layer({ tools: [echo, add] })
      ))
    )
    return yield* Effect.provide(body(server), agent)
  })

const prompt = (id: string, text: string) =>
  Effect.flatMap(Driver, (driver) => Effect.zipRight(driver.followup(userMessage({ id, text })), driver.whenIdle))

const events = Effect.flatMap(SessionLog, (log) => log.events)

const ofType = <T extends CoreEvent["type"]>(all: ReadonlyArray<SessionEvent>, type: T) =>
  all.filter((e): e is EventOf<T> => e.type === type)

const turnEnds = (all: ReadonlyArray<SessionEvent>) => ofType(all, "turn/end").map((e) => e.data.reason)

const retries = (all: ReadonlyArray<SessionEvent>) => ofType(all, "llm/retry").map((e) => e.data)

const errorOf = (all: ReadonlyArray<SessionEvent>): LlmFailure | undefined => {
  const reason = turnEnds(all).find((r) => r.kind === "error")
  return reason?.kind === "error" ? reason.error : undefined
}

const assistantMessages = (all: ReadonlyArray<SessionEvent>) => ofType(all, "assistant/message").map((e) => e.data)

const toolResults = (all: ReadonlyArray<SessionEvent>) =>
  ofType(all, "tool/result").map((e) => {
    const block = e.data.message.content[0]
    return { id: block.toolCallId, content: block.content }
  })

const paths = (requests: ReadonlyArray<ReceivedRequest>) => requests.map((r) => `${r.method} ${r.path}`)

for (const provider of [openai, anthropic]) {
  describe(`ProviderModels ${provider.name}`, () => {
    it.scopedLive("reasoning, text and two parallel tool calls; the results go back in the next request", () =>
      session(provider, [
        provider.reply(toolTurn),
        provider.reply({ text: ["Done: hi, 3."], usage: { input: 50, output: 5 } })
      ], (server) =>
        Effect.gen(function*() {
          const driver = yield* Driver
          yield* driver.inject(
            userMessage({ id: "ctx", text: "The repo uses pnpm.", source: { kind: "plugin", plugin: "facts" } })
          )
          yield* prompt("q", "Echo hi and add 1 and 2.")
          const all = yield* events
          expect(all.map(notation)).toEqual([
            "INS(ns,0,[ctx])",
            "INS(nt,0,[q])",
            "TS(1)",
            "CLM(ns,0,1)",
            "CLM(nt,0,1)",
            "SS(1,1)",
            "UM(ctx)",
            "UM(q)",
            "RH(initial)",
            ...provider.reasoningChunks,
            "CH(block-start)",
            "CH(text-delta)",
            "CH(text-delta)",
            "CH(block-end)",
            "CH(block-start)",
            "CH(tool-call-delta)",
            "CH(tool-call-delta)",
            "CH(block-end)",
            "CH(block-start)",
            "CH(tool-call-delta)",
            "CH(tool-call-delta)",
            "CH(block-end)",
            "CH(usage)",
            ...provider.replayChunks,
            "CH(finish stop)",
            "AM",
            "TC(call_1)",
            "TC(call_2)",
            "TR(call_1)",
            "TR(call_2)",
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
          const source = { kind: "model", provider: provider.name, model: provider.model }
          expect(
            assistantMessages(all).map((m) => ({
              content: m.message.content,
              source: m.message.source,
              usage: m.usage
            }))
          )
            .toEqual([
              {
                content: [
                  { type: "reasoning", text: "Two tools at once." },
                  { type: "text", text: "Let me check." },
                  { type: "tool-call", id: "call_1", name: "echo", arguments: "{\"text\":\"hi\"}" },
                  { type: "tool-call", id: "call_2", name: "add", arguments: "{\"a\":1,\"b\":2}" }
                ] satisfies Message["content"],
                source: provider.replayState === undefined ? source : { ...source, replayState: provider.replayState },
                usage: provider.toolTurnUsage
              },
              {
                content: [{ type: "text", text: "Done: hi, 3." }],
                source,
                usage: provider.name === "openai"
                  ? { inputTokens: 50, outputTokens: 5, totalTokens: 55, reasoningTokens: 0, cacheReadTokens: 0 }
                  : { inputTokens: 50, outputTokens: 5, totalTokens: 55, cacheReadTokens: 0, cacheWriteTokens: 0 }
              }
            ])
          expect(toolResults(all)).toEqual([
            { id: "call_1", content: [{ type: "text", text: "hi" }] },
            { id: "call_2", content: [{ type: "text", text: "3" }] }
          ])
          const header = ofType(all, "request/header")[0]!.data.header
          expect({ provider: header.provider, model: header.model }).toEqual({
            provider: provider.name,
            model: provider.model
          })
          const requests = yield* server.requests
          expect(paths(requests)).toEqual([`POST ${provider.path}`, `POST ${provider.path}`])
          expect(requests.map((r) => r.body.stream)).toEqual([true, true])
          expect(requests.map((r) => provider.history(r.body))).toEqual(provider.expectedHistory)
          expect(requests.map((r) => r.body.tools.map((tool: { name: string }) => tool.name))).toEqual([
            ["add", "echo"],
            ["add", "echo"]
          ])
          expect(provider.keyHeader(requests[0]!)).toContain(KEY)
          expect(JSON.stringify(all)).not.toContain(KEY)
        })))

    it.scopedLive("a 429 is retried by tiller's policy and logged as llm/retry; the client sends it once", () =>
      session(provider, [
        ResponsesServer.status(429, { error: { type: "rate_limit_error", message: "Slow down" } }, {
          "retry-after": "1",
          "request-id": "req_429"
        }),
        provider.reply({ text: ["Fine."], usage: { input: 5, output: 1 } })
      ], (server) =>
        Effect.gen(function*() {
          yield* prompt("q", "hello")
          const all = yield* events
          expect(all.map(notation).filter((n) => !n.startsWith("CH("))).toEqual([
            "INS(nt,0,[q])",
            "TS(1)",
            "CLM(nt,0,1)",
            "SS(1,1)",
            "UM(q)",
            "RH(initial)",
            "RT(1)",
            "AM",
            "SE(1,1)",
            "TE(1,completed)"
          ])
          const [retry] = retries(all)
          expect(retry!.failure).toMatchObject({
            code: "RATE_LIMIT",
            status: 429,
            retryAfterMs: 1000,
            requestId: "req_429"
          })
          expect(retry!.failure.message).toContain("Slow down")
          expect(retry!.delayMs).toBeGreaterThanOrEqual(1000)
          expect(paths(yield* server.requests)).toEqual([`POST ${provider.path}`, `POST ${provider.path}`])
        })))

    it.scopedLive("a dropped connection is a NETWORK failure, retried", () =>
      session(
        provider,
        [ResponsesServer.hangup, provider.reply({ text: ["Back."], usage: { input: 5, output: 1 } })],
        (server) =>
          Effect.gen(function*() {
            yield* prompt("q", "hello")
            const all = yield* events
            expect(retries(all).map((r) => r.failure.code)).toEqual(["NETWORK"])
            expect(turnEnds(all)).toEqual([{ kind: "completed" }])
            expect(assistantMessages(all).map((m) => m.message.content)).toEqual([[{ type: "text", text: "Back." }]])
            expect((yield* server.requests).length).toBe(2)
          })
      ))

    it.scopedLive("a 401 is not retried, and a key the server echoes is redacted from the failure", () =>
      session(provider, [
        ResponsesServer.status(401, {
          error: { type: "authentication_error", message: `Incorrect API key provided: ${KEY}` }
        })
      ], (server) =>
        Effect.gen(function*() {
          yield* prompt("q", "hello")
          const all = yield* events
          expect(retries(all)).toEqual([])
          const failure = errorOf(all)!
          expect(failure).toMatchObject({ code: "AUTH", status: 401, retryable: false })
          expect(failure.message).toContain("Incorrect API key provided: [redacted]")
          expect(JSON.stringify(all)).not.toContain(KEY)
          expect((yield* server.requests).length).toBe(1)
        })))

    it.scopedLive("a malformed stream ends the turn in error without a retry; a later prompt completes", () =>
      session(provider, [
        provider.malformed(),
        provider.reply({ text: ["Recovered."], usage: { input: 5, output: 1 } })
      ], (server) =>
        Effect.gen(function*() {
          yield* prompt("q1", "first")
          yield* prompt("q2", "second")
          const all = yield* events
          expect(turnEnds(all).map((r) => r.kind)).toEqual(["error", "completed"])
          expect(errorOf(all)).toMatchObject(provider.malformedFailure)
          expect(retries(all)).toEqual([])
          expect(assistantMessages(all).map((m) => m.message.content)).toEqual([[{ type: "text", text: "Recovered." }]])
          expect((yield* server.requests).length).toBe(2)
        })))
  })
}

describe("ProviderModels openai, failed responses", () => {
  it.scopedLive("a response.failed event fails the attempt with its code instead of finishing it", () => {
    const wire = ResponsesServer.responseEvents({ text: ["Par"], usage: { input: 5, output: 1 } })
    const completed = wire.at(-1) as { response: Record<string, unknown> }
    const failed = {
      type: "response.failed",
      sequence_number: wire.length - 1,
      response: {
        ...completed.response,
        status: "failed",
        error: { code: "invalid_prompt", message: "The prompt was refused." }
      }
    }
    const reply: Reply = {
      _tag: "Sse",
      frames: [...wire.slice(0, -1), failed].map((event) => ResponsesServer.frame(event.type as string, event))
    }
    return session(openai, [reply], () =>
      Effect.gen(function*() {
        yield* prompt("q", "hello")
        const all = yield* events
        expect(errorOf(all)).toEqual({
          message: "OpenAI: The prompt was refused.",
          code: "CONTENT_FILTER",
          retryable: false
        })
        expect(assistantMessages(all)).toEqual([])
      }))
  })
})

describe("ProviderModels anthropic, errors inside the stream", () => {
  it.scopedLive("an overloaded_error event is OVERLOADED and retried", () =>
    session(anthropic, [
      AnthropicServer.overloadedMidStream(),
      anthropic.reply({ text: ["Ok."], usage: { input: 5, output: 1 } })
    ], () =>
      Effect.gen(function*() {
        yield* prompt("q", "hello")
        const all = yield* events
        expect(retries(all).map((r) => r.failure)).toEqual([{
          message: "Anthropic: Overloaded",
          code: "OVERLOADED",
          retryable: true
        }])
        expect(turnEnds(all)).toEqual([{ kind: "completed" }])
      })))
})

describe("ProviderModels anthropic, reasoning replay across resume and fork", () => {
  it.scopedLive("the signed thinking block of a stored answer is sent back after a resume and in a fork", () =>
    Effect.gen(function*() {
      const server = yield* ResponsesServer.listen([
        anthropic.reply(toolTurn),
        anthropic.reply({ text: ["Done."], usage: { input: 50, output: 5 } }),
        anthropic.reply({ text: ["Resumed."], usage: { input: 60, output: 5 } }),
        anthropic.reply({ text: ["Forked."], usage: { input: 60, output: 5 } })
      ])
      const model = Layer.provide(anthropic.layer(server.url), NodeHttpClient.layerUndici)
      const agent = (options: { readonly sessionId: SessionId } | { readonly resume: SessionId }) =>
        Agent.layer({ ...options, model: { provider: "anthropic", model: anthropic.model }, system: "Be brief." }).pipe(
          Layer.provide(Layer.mergeAll(model, Tools.layer({ tools: [echo, add] })))
        )
      const run = (
        options: { readonly sessionId: SessionId } | { readonly resume: SessionId },
        id: string,
        text: string
      ) =>
        Effect.scoped(
          Layer.build(agent(options)).pipe(
            Effect.flatMap((context) => Effect.provide(prompt(id, text), context))
          )
        )
      yield* run({ sessionId: SessionId.make("s") }, "q1", "Echo hi and add 1 and 2.")
      yield* run({ resume: SessionId.make("s") }, "q2", "And now?")
      const child = yield* forkSession({ source: SessionId.make("s"), childId: SessionId.make("f") })
      yield* run({ resume: child }, "q3", "In the fork?")
      const requests = yield* server.requests
      expect(requests.length).toBe(4)
      const thinking = { type: "thinking", thinking: "Two tools at once.", signature: "c2lnbmF0dXJl" }
      for (const request of requests.slice(1)) {
        const assistant = request.body.messages.find((m: { role: string }) => m.role === "assistant")
        expect(assistant.content[0]).toEqual(thinking)
        expect(assistant.content.map((block: { type: string }) => block.type)).toEqual([
          "thinking",
          "text",
          "tool_use",
          "tool_use"
        ])
      }
    }).pipe(Effect.provide(SessionStore.layerMemory)))
})
