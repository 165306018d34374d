import * as AiError from "@effect/ai/AiError"
import * as LanguageModel from "@effect/ai/LanguageModel"
import type * as Prompt from "@effect/ai/Prompt"
import type * as Response from "@effect/ai/Response"
import * as Tool from "@effect/ai/Tool"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Option, Ref, Schema, Stream } from "effect"
import { ModelError } from "../../../src/domain/Errors.js"
import type { Message, StreamChunk, ToolSchema } from "../../../src/domain/Values.js"
import type { ModelRequest } from "../../../src/services/Model.js"
import { Model } from "../../../src/services/Model.js"
import type { Run as StreamRun } from "../../fixtures/adapterHarness.js"
import {
  assistantFrom,
  requestFor,
  resultParts,
  sourceFor,
  streamRun,
  userParts
} from "../../fixtures/adapterHarness.js"
import * as Chunks from "../../fixtures/streamChunks.js"

const modelSource = sourceFor("p", "m")
const assistant = assistantFrom(modelSource)
const request = requestFor("p", "m")

/** What the fake provider saw, and what came out of `Model.stream`. */
interface Run extends StreamRun {
  readonly options: ReadonlyArray<LanguageModel.ProviderOptions>
}

/**
 * Streams one request through `Model.layerLanguageModel` over a fake `LanguageModel` that records
 * the provider options it receives and answers with `parts`, then fails with `failure` if given.
 */
const run = (
  req: ModelRequest,
  parts: ReadonlyArray<Response.StreamPartEncoded>,
  failure?: AiError.AiError
) =>
  Effect.gen(function*() {
    const received = yield* Ref.make<ReadonlyArray<LanguageModel.ProviderOptions>>([])
    const languageModel = yield* LanguageModel.make({
      generateText: () => Effect.dieMessage("generateText is not used"),
      streamText: (options) =>
        Stream.unwrap(
          Ref.update(received, (all) => [...all, options]).pipe(
            Effect.as(Stream.concat(
              Stream.fromIterable(parts),
              failure === undefined ? Stream.empty : Stream.fail(failure)
            ))
          )
        )
    })
    const out = yield* streamRun(req).pipe(
      Effect.provide(Model.layerLanguageModel),
      Effect.provideService(LanguageModel.LanguageModel, languageModel)
    )
    return { options: yield* Ref.get(received), ...out } satisfies Run
  })

/** A prompt's messages as plain data: the type-id brands of messages and parts left out. */
const view = (prompt: Prompt.Prompt): ReadonlyArray<unknown> => {
  const plain = (value: object) => Object.fromEntries(Object.entries(value).filter(([key]) => !key.startsWith("~")))
  return prompt.content.map((message) =>
    plain({
      ...message,
      content: typeof message.content === "string" ? message.content : message.content.map(plain)
    })
  )
}

const usage = { inputTokens: 10, outputTokens: 4, totalTokens: 14 }
const stopPart: Response.StreamPartEncoded = { type: "finish", reason: "stop", usage }

const httpRequest = {
  method: "POST" as const,
  url: "https://api.example.test/v1/responses",
  urlParams: [],
  hash: Option.none(),
  headers: {}
}

const statusError = (status: number, headers: Record<string, string> = {}) =>
  new AiError.HttpResponseError({
    module: "Fake",
    method: "streamText",
    reason: "StatusCode",
    request: httpRequest,
    response: { status, headers }
  })

describe("LanguageModelAdapter request", () => {
  it.effect("sends the system prompt, each message in order, and the tool-call round trip", () =>
    Effect.gen(function*() {
      const messages: ReadonlyArray<Message> = [
        userParts("u1", [{ type: "text", text: "first" }]),
        userParts("u2", [{ type: "text", text: "second" }, { type: "image", mediaType: "image/png", data: "AQID" }], {
          kind: "steer"
        }),
        assistant("a1", [
          { type: "reasoning", text: "think" },
          { type: "text", text: "calling" },
          { type: "tool-call", id: "c1", name: "lookup", arguments: "{\"q\":\"x\"}" },
          { type: "tool-call", id: "c2", name: "raw", arguments: "{not json" }
        ]),
        resultParts("r1", "c1", false, [{ type: "text", text: "found" }]),
        resultParts("r2", "c2", true, [{ type: "text", text: "bad" }]),
        userParts("u3", [{ type: "text", text: "third" }])
      ]
      const { options } = yield* run(request({ system: "be brief", messages }), [stopPart])
      expect(options).toHaveLength(1)
      expect(view(options[0]!.prompt)).toStrictEqual([
        { role: "system", content: "be brief", options: {} },
        { role: "user", content: [{ type: "text", text: "first", options: {} }], options: {} },
        {
          role: "user",
          content: [
            { type: "text", text: "second", options: {} },
            { type: "file", mediaType: "image/png", data: new Uint8Array([1, 2, 3]), options: {} }
          ],
          options: {}
        },
        {
          role: "assistant",
          content: [
            { type: "reasoning", text: "think", options: {} },
            { type: "text", text: "calling", options: {} },
            { type: "tool-call", id: "c1", name: "lookup", params: { q: "x" }, providerExecuted: false, options: {} },
            { type: "tool-call", id: "c2", name: "raw", params: "{not json", providerExecuted: false, options: {} }
          ],
          options: {}
        },
        {
          role: "tool",
          content: [
            {
              type: "tool-result",
              id: "c1",
              name: "lookup",
              isFailure: false,
              result: "found",
              providerExecuted: false,
              options: {}
            }
          ],
          options: {}
        },
        {
          role: "tool",
          content: [
            {
              type: "tool-result",
              id: "c2",
              name: "raw",
              isFailure: true,
              result: "bad",
              providerExecuted: false,
              options: {}
            }
          ],
          options: {}
        },
        { role: "user", content: [{ type: "text", text: "third", options: {} }], options: {} }
      ])
    }))

  it.effect("omits the system message when there is no system prompt", () =>
    Effect.gen(function*() {
      const messages: ReadonlyArray<Message> = [
        userParts("u1", [{ type: "text", text: "hi" }])
      ]
      const { options } = yield* run(request({ messages }), [stopPart])
      expect(options[0]!.prompt.content.map((message) => message.role)).toStrictEqual(["user"])
    }))

  it.effect("a tool result with an image keeps its blocks", () =>
    Effect.gen(function*() {
      const content = [{ type: "text" as const, text: "chart" }, {
        type: "image" as const,
        mediaType: "image/png",
        data: "AQID"
      }]
      const messages: ReadonlyArray<Message> = [
        userParts("r1", [{ type: "tool-result", toolCallId: "c9", isError: false, content }], {
          kind: "tool",
          callId: "c9"
        })
      ]
      const { options } = yield* run(request({ messages }), [stopPart])
      expect(view(options[0]!.prompt)).toStrictEqual([
        {
          role: "tool",
          content: [{
            type: "tool-result",
            id: "c9",
            name: "",
            isFailure: false,
            result: content,
            providerExecuted: false,
            options: {}
          }],
          options: {}
        }
      ])
    }))

  it.effect("declares each tool with its name, description and JSON Schema parameters", () =>
    Effect.gen(function*() {
      const tools: ReadonlyArray<ToolSchema> = [
        {
          name: "lookup",
          description: "Look a word up",
          parameters: {
            type: "object",
            properties: { q: { type: "string", description: "the word" } },
            required: ["q"],
            additionalProperties: false
          }
        },
        { name: "now", description: "The time", parameters: { type: "object", properties: {} } }
      ]
      // As Tools.list has them (JSONSchema.make's output); the provider gets the bare schema.
      const listed = tools.map((tool) => ({
        ...tool,
        parameters: { $schema: "http://json-schema.org/draft-07/schema#", ...(tool.parameters as object) }
      }))
      const { options } = yield* run(request({ tools: listed }), [stopPart])
      const sent = options[0]!
      expect(sent.tools.map((tool) => ({
        name: tool.name,
        description: Tool.getDescription(tool as never),
        parameters: Tool.getJsonSchema(tool as never)
      }))).toStrictEqual(tools)
      expect(sent.tools.every(Tool.isUserDefined)).toBe(true)
      expect(sent.toolChoice).toBe("auto")
    }))

  it.effect("sends no tools when the request has none", () =>
    Effect.gen(function*() {
      const { options } = yield* run(request(), [stopPart])
      expect(options[0]!.tools).toStrictEqual([])
    }))
})

describe("LanguageModelAdapter chunks", () => {
  it.effect("text and reasoning blocks get indexes in order of their starts; metadata is ignored", () =>
    Effect.gen(function*() {
      const { chunks, error } = yield* run(request(), [
        { type: "response-metadata", id: "resp_1", modelId: "m", timestamp: "2024-01-01T00:00:00.000Z" },
        { type: "reasoning-start", id: "r" },
        { type: "reasoning-delta", id: "r", delta: "hm" },
        { type: "text-start", id: "t" },
        { type: "reasoning-delta", id: "r", delta: "m" },
        { type: "reasoning-end", id: "r" },
        { type: "text-delta", id: "t", delta: "Hel" },
        { type: "text-delta", id: "t", delta: "lo" },
        { type: "text-end", id: "t" },
        stopPart
      ])
      expect(Option.isNone(error)).toBe(true)
      expect(chunks).toStrictEqual([
        { type: "block-start", index: 0, block: "reasoning" },
        { type: "reasoning-delta", index: 0, text: "hm" },
        { type: "block-start", index: 1, block: "text" },
        { type: "reasoning-delta", index: 0, text: "m" },
        { type: "block-end", index: 0 },
        { type: "text-delta", index: 1, text: "Hel" },
        { type: "text-delta", index: 1, text: "lo" },
        { type: "block-end", index: 1 },
        { type: "usage", usage },
        Chunks.stop
      ])
    }))

  it.effect("tool params stream as one tool-call block; the complete tool-call part after them adds nothing", () =>
    Effect.gen(function*() {
      const tools: ReadonlyArray<ToolSchema> = [
        { name: "lookup", description: "", parameters: { type: "object" } },
        { name: "now", description: "", parameters: { type: "object" } }
      ]
      const { chunks, error } = yield* run(request({ tools }), [
        { type: "text-start", id: "t" },
        { type: "text-delta", id: "t", delta: "ok" },
        { type: "text-end", id: "t" },
        { type: "tool-params-start", id: "c1", name: "lookup" },
        { type: "tool-params-delta", id: "c1", delta: "{\"q\":" },
        { type: "tool-params-delta", id: "c1", delta: "\"x\"}" },
        { type: "tool-params-end", id: "c1" },
        { type: "tool-call", id: "c1", name: "lookup", params: { q: "x" } },
        { type: "tool-call", id: "c2", name: "now", params: {} },
        { type: "finish", reason: "tool-calls", usage }
      ])
      expect(Option.isNone(error)).toBe(true)
      expect(chunks).toStrictEqual([
        ...Chunks.textBlock(0, "ok"),
        ...Chunks.toolCallBlock(1, "c1", "lookup", "{\"q\":", "\"x\"}"),
        ...Chunks.toolCallBlock(2, "c2", "now", "{}"),
        { type: "usage", usage },
        Chunks.stop
      ])
    }))

  it.effect("a complete tool-call part without params parts becomes start, one JSON delta, end", () =>
    Effect.gen(function*() {
      const tools: ReadonlyArray<ToolSchema> = [{ name: "lookup", description: "", parameters: { type: "object" } }]
      const { chunks } = yield* run(request({ tools }), [
        { type: "tool-call", id: "c1", name: "lookup", params: { q: "x", n: [1, 2] } },
        { type: "finish", reason: "tool-calls", usage }
      ])
      expect(chunks.slice(0, 3)).toStrictEqual([
        ...Chunks.toolCallBlock(0, "c1", "lookup", "{\"q\":\"x\",\"n\":[1,2]}")
      ])
    }))

  it.effect("finish length maps to usage then max-tokens, with every usage field", () =>
    Effect.gen(function*() {
      const { chunks } = yield* run(request(), [
        { type: "text-start", id: "t" },
        { type: "text-delta", id: "t", delta: "cut" },
        {
          type: "finish",
          reason: "length",
          usage: { inputTokens: 7, outputTokens: 9, totalTokens: 16, reasoningTokens: 3, cachedInputTokens: 5 }
        }
      ])
      expect(chunks.slice(2)).toStrictEqual([
        Chunks.usage({ inputTokens: 7, outputTokens: 9, totalTokens: 16, reasoningTokens: 3, cacheReadTokens: 5 }),
        { type: "finish", finish: { kind: "max-tokens" } }
      ])
    }))

  it.effect("finish without token counts has no usage chunk; other reasons are stop", () =>
    Effect.gen(function*() {
      const { chunks } = yield* run(request(), [
        {
          type: "finish",
          reason: "content-filter",
          usage: { inputTokens: undefined, outputTokens: undefined, totalTokens: undefined }
        }
      ])
      expect(chunks).toStrictEqual([{ type: "finish", finish: { kind: "stop" } }])
    }))

  it.effect("finish error maps to an error finish with a failure", () =>
    Effect.gen(function*() {
      const { chunks, error } = yield* run(request(), [{ type: "finish", reason: "error", usage }])
      expect(Option.isNone(error)).toBe(true)
      expect(chunks).toStrictEqual([
        { type: "usage", usage },
        {
          type: "finish",
          finish: { kind: "error", failure: { message: "the model finished with reason \"error\"", code: "UNKNOWN" } }
        }
      ])
    }))
})

describe("LanguageModelAdapter failures", () => {
  const textSoFar: ReadonlyArray<Response.StreamPartEncoded> = [
    { type: "text-start", id: "t" },
    { type: "text-delta", id: "t", delta: "par" }
  ]
  const partialChunks: ReadonlyArray<StreamChunk> = [
    { type: "block-start", index: 0, block: "text" },
    { type: "text-delta", index: 0, text: "par" }
  ]

  it.effect("429 is RATE_LIMIT with its status, retry-after and request id; earlier chunks come first", () =>
    Effect.gen(function*() {
      const failure = statusError(429, { "retry-after": "2", "x-request-id": "req_1" })
      const { chunks, error } = yield* run(request(), textSoFar, failure)
      expect(chunks).toStrictEqual(partialChunks)
      expect(Option.map(error, (e) => e.failure)).toStrictEqual(Option.some({
        message: failure.message,
        code: "RATE_LIMIT",
        status: 429,
        retryAfterMs: 2000,
        requestId: "req_1"
      }))
    }))

  it.effect("503 is SERVICE_UNAVAILABLE with its status", () =>
    Effect.gen(function*() {
      const failure = statusError(503)
      const { error } = yield* run(request(), [], failure)
      expect(Option.map(error, (e) => e.failure)).toStrictEqual(
        Option.some({ message: failure.message, code: "SERVICE_UNAVAILABLE", status: 503 })
      )
    }))

  it.effect("another status is UNKNOWN with its status", () =>
    Effect.gen(function*() {
      const failure = statusError(400)
      const { error } = yield* run(request(), [], failure)
      expect(Option.map(error, (e) => e.failure)).toStrictEqual(
        Option.some({ message: failure.message, code: "UNKNOWN", status: 400 })
      )
    }))

  it.effect("a transport error is NETWORK without a status", () =>
    Effect.gen(function*() {
      const failure = new AiError.HttpRequestError({
        module: "Fake",
        method: "streamText",
        reason: "Transport",
        request: httpRequest,
        description: "connection reset"
      })
      const { error } = yield* run(request(), [], failure)
      expect(Option.map(error, (e) => e.failure)).toStrictEqual(
        Option.some({ message: failure.message, code: "NETWORK" })
      )
    }))

  it.effect("a request error other than transport is UNKNOWN and not retryable", () =>
    Effect.gen(function*() {
      const failure = new AiError.HttpRequestError({
        module: "Fake",
        method: "streamText",
        reason: "InvalidUrl",
        request: httpRequest
      })
      const { error } = yield* run(request(), [], failure)
      expect(Option.map(error, (e) => e.failure)).toStrictEqual(
        Option.some({ message: failure.message, code: "UNKNOWN", retryable: false })
      )
    }))

  it.effect("malformed output is UNKNOWN and not retryable, named by module, method and description", () =>
    Effect.gen(function*() {
      const failure = new AiError.MalformedOutput({ module: "Fake", method: "streamText", description: "bad event" })
      const { error } = yield* run(request(), [], failure)
      expect(Option.map(error, (e) => e.failure)).toStrictEqual(
        Option.some({ message: "Fake.streamText: malformed output: bad event", code: "UNKNOWN", retryable: false })
      )
    }))

  it.effect("malformed output from a parse error carries the parse error's message", () =>
    Effect.gen(function*() {
      const parseError = yield* Effect.flip(
        Schema.decodeUnknown(Schema.parseJson(Schema.Struct({ type: Schema.String })))("{\"type\":")
      )
      const failure = AiError.MalformedOutput.fromParseError({
        module: "Fake",
        method: "streamRequest",
        error: parseError
      })
      const { error } = yield* run(request(), [], failure)
      expect(Option.map(error, (e) => e.failure)).toStrictEqual(Option.some({
        message: `Fake.streamRequest: malformed output: ${parseError.message}`,
        code: "UNKNOWN",
        retryable: false
      }))
    }))

  it.effect("an error part fails the stream after the chunks before it", () =>
    Effect.gen(function*() {
      const { chunks, error } = yield* run(request(), [
        ...textSoFar,
        { type: "error", error: { type: "error", code: "server_error", message: "The server had an error" } },
        { type: "text-delta", id: "t", delta: "never" }
      ])
      expect(chunks).toStrictEqual(partialChunks)
      expect(error).toStrictEqual(
        Option.some(new ModelError({ failure: { message: "The server had an error", code: "SERVICE_UNAVAILABLE" } }))
      )
    }))

  it.effect("an error part without a status is classified by its provider error type or code", () =>
    Effect.gen(function*() {
      const codeOf = (payload: unknown) =>
        Effect.map(
          run(request(), [{ type: "error", error: payload }]),
          ({ error }) => Option.map(error, (e) => e.failure.code)
        )
      expect(yield* codeOf({ type: "overloaded_error", message: "Overloaded" })).toStrictEqual(
        Option.some("OVERLOADED")
      )
      expect(yield* codeOf({ type: "rate_limit_error", message: "slow down" })).toStrictEqual(Option.some("RATE_LIMIT"))
      expect(yield* codeOf({ type: "api_error", message: "internal" })).toStrictEqual(
        Option.some("SERVICE_UNAVAILABLE")
      )
      expect(yield* codeOf({ type: "error", code: "rate_limit_exceeded", message: "slow down" })).toStrictEqual(
        Option.some("RATE_LIMIT")
      )
      expect(yield* codeOf({ type: "invalid_request_error", message: "bad" })).toStrictEqual(Option.some("UNKNOWN"))
      expect(yield* codeOf({ type: "error", code: "invalid_prompt", message: "bad" })).toStrictEqual(
        Option.some("UNKNOWN")
      )
    }))

  it.effect("an error part with a known status is classified by it", () =>
    Effect.gen(function*() {
      const { error } = yield* run(request(), [{ type: "error", error: { status: 529, message: "Overloaded" } }])
      expect(Option.map(error, (e) => e.failure)).toStrictEqual(
        Option.some({ message: "Overloaded", code: "SERVICE_UNAVAILABLE", status: 529 })
      )
    }))
})
