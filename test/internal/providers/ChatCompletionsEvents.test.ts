/**
 * The Chat Completions event decoder on its own: server-sent events in, tiller's chunks or a failure
 * out. The fixtures are written here, shaped after what real hosts stream (OpenAI, Azure's model
 * router, DeepSeek, Groq, xAI, Alibaba, vLLM, OpenRouter): choices-less first and last chunks,
 * usage on the finish chunk or in `x_groq`, reasoning in `reasoning_content` or `reasoning`, tool
 * calls split over chunks, refusals and error payloads inside a 200 stream.
 */
import * as Sse from "@effect/experimental/Sse"
import { describe, expect, it } from "@effect/vitest"
import { Either } from "effect"
import type { LlmFailure, StreamChunk } from "../../../src/domain/Values.js"
import * as ChatCompletionsEvents from "../../../src/internal/providers/ChatCompletionsEvents.js"
import type { SseEvent } from "../../../src/internal/providers/ProviderHttp.js"
import * as Chunks from "../../fixtures/streamChunks.js"

const HOST = "api.example.test"

interface Decoded {
  readonly chunks: ReadonlyArray<StreamChunk>
  readonly failure: LlmFailure | undefined
  /** How many events were read before the decoder completed or failed. */
  readonly read: number
}

/** Feeds `events` until `[DONE]` or a failure, then ends the body (as the adapter does). */
const decode = (events: ReadonlyArray<SseEvent>, callIdPrefix = "call_1_1_1"): Decoded => {
  const decoder = ChatCompletionsEvents.make({ provider: HOST, callIdPrefix })
  const chunks: Array<StreamChunk> = []
  let read = 0
  for (const event of events) {
    read++
    const step = decoder.event(event)
    if (Either.isLeft(step)) return { chunks, failure: step.left, read }
    chunks.push(...step.right.chunks)
    if (step.right.done) return { chunks, failure: undefined, read }
  }
  const end = decoder.end()
  if (Either.isLeft(end)) return { chunks, failure: end.left, read }
  chunks.push(...end.right)
  return { chunks, failure: undefined, read }
}

/** The events of a raw SSE body, framed by the parser `ProviderHttp.streamEvents` uses. */
const frameText = (texts: ReadonlyArray<string>): ReadonlyArray<SseEvent> => {
  const events: Array<SseEvent> = []
  const parser = Sse.makeParser((event) => {
    if (event._tag === "Event") events.push({ event: event.event, data: event.data })
  })
  for (const text of texts) parser.feed(text)
  return events
}

const data = (payload: unknown): SseEvent => ({ event: "message", data: JSON.stringify(payload) })
const DONE: SseEvent = { event: "message", data: "[DONE]" }

/** A chunk as OpenAI streams it: one choice, `logprobs: null`, `usage: null` until the end. */
const chunk = (
  delta: Record<string, unknown>,
  finishReason: string | null = null,
  extra: Record<string, unknown> = {}
) => ({
  id: "chatcmpl-1",
  object: "chat.completion.chunk",
  created: 1_760_000_000,
  model: "m",
  choices: [{ index: 0, delta, logprobs: null, finish_reason: finishReason }],
  usage: null,
  ...extra
})

const usageChunk = (usage: Record<string, unknown>) => ({
  id: "chatcmpl-1",
  object: "chat.completion.chunk",
  created: 1_760_000_000,
  model: "m",
  choices: [],
  usage
})

const call = (index: number, fields: { readonly id?: string; readonly name?: string; readonly arguments: string }) => ({
  index,
  ...(fields.id === undefined ? {} : { id: fields.id, type: "function" }),
  function: { ...(fields.name === undefined ? {} : { name: fields.name }), arguments: fields.arguments }
})

const stop = { type: "finish", finish: { kind: "stop" } } as const
const replay = (reasoningField: string) => ({
  type: "replay-state",
  state: { "openai-compatible": { reasoningField } }
})

describe("ChatCompletionsEvents text, usage and finish", () => {
  it("Azure's model router: a choices-less first chunk with prompt_filter_results, usage in a last choices-less chunk", () => {
    const filterResults = {
      hate: { filtered: false, severity: "safe" },
      violence: { filtered: false, severity: "safe" }
    }
    const out = decode([
      data({
        choices: [],
        created: 0,
        id: "",
        model: "",
        object: "",
        prompt_filter_results: [{ prompt_index: 0, content_filter_results: filterResults }]
      }),
      data(
        chunk({ content: "", refusal: null, role: "assistant" }, null, {
          obfuscation: "D3Wb",
          system_fingerprint: null
        })
      ),
      data({
        ...chunk({ content: "Capital" }),
        choices: [{
          content_filter_results: filterResults,
          delta: { content: "Capital" },
          finish_reason: null,
          index: 0,
          logprobs: null
        }]
      }),
      data(chunk({ content: " of Denmark." })),
      data({
        ...chunk({}),
        choices: [{ content_filter_results: {}, delta: {}, finish_reason: "stop", index: 0, logprobs: null }]
      }),
      data(usageChunk({
        completion_tokens: 78,
        completion_tokens_details: {
          accepted_prediction_tokens: 0,
          audio_tokens: 0,
          reasoning_tokens: 64,
          rejected_prediction_tokens: 0
        },
        prompt_tokens: 15,
        prompt_tokens_details: { audio_tokens: 0, cached_tokens: 0 },
        total_tokens: 93
      })),
      DONE
    ])
    expect(out.failure).toBeUndefined()
    expect(out.chunks).toStrictEqual([
      ...Chunks.textBlock(0, "Capital", " of Denmark."),
      Chunks.usage({ inputTokens: 15, outputTokens: 78, totalTokens: 93, reasoningTokens: 64, cacheReadTokens: 0 }),
      stop
    ])
  })

  it("the usage of the finish chunk (DeepSeek) and Groq's x_groq.usage are read; the last one reported wins", () => {
    const deepseek = decode([
      data(chunk({ role: "assistant", content: null, reasoning_content: "" })),
      data(chunk({ content: "Hi", reasoning_content: null })),
      data(chunk({ content: "", reasoning_content: null }, "stop", {
        usage: {
          prompt_tokens: 18,
          completion_tokens: 219,
          total_tokens: 237,
          prompt_tokens_details: { cached_tokens: 0 },
          completion_tokens_details: { reasoning_tokens: 205 },
          prompt_cache_hit_tokens: 0,
          prompt_cache_miss_tokens: 18
        }
      }))
    ])
    expect(deepseek.failure).toBeUndefined()
    expect(deepseek.chunks.slice(-2)).toStrictEqual([
      Chunks.usage({ inputTokens: 18, outputTokens: 219, totalTokens: 237, reasoningTokens: 205, cacheReadTokens: 0 }),
      stop
    ])
    const groqUsage = {
      queue_time: 0.04,
      prompt_tokens: 210,
      prompt_time: 0.01,
      completion_tokens: 15,
      total_tokens: 225
    }
    const groq = decode([
      data({ ...chunk({ role: "assistant", content: "" }), x_groq: { id: "req_1", seed: 1 } }),
      data(chunk({ content: "ok" })),
      data({ ...chunk({}, "stop"), x_groq: { id: "req_1", usage: groqUsage } }),
      DONE
    ])
    expect(groq.chunks.slice(-2)).toStrictEqual([
      Chunks.usage({ inputTokens: 210, outputTokens: 15, totalTokens: 225 }),
      stop
    ])
    const later = decode([
      data(chunk({ content: "ok" }, "stop", { usage: { prompt_tokens: 1, completion_tokens: 1 } })),
      data(usageChunk({ prompt_tokens: 7, completion_tokens: 3 })),
      DONE
    ])
    expect(later.chunks.slice(-2)).toStrictEqual([{ type: "usage", usage: { inputTokens: 7, outputTokens: 3 } }, stop])
  })

  it("cached prompt tokens wherever a host reports them; cache writes from OpenRouter and LiteLLM", () => {
    const usageOf = (usage: Record<string, unknown>) =>
      decode([
        data(chunk({ content: "ok" }, "stop")),
        data(usageChunk({ prompt_tokens: 100, completion_tokens: 5, ...usage })),
        DONE
      ])
        .chunks.find((c) => c.type === "usage")
    // xAI (recorded): prompt_tokens_details.cached_tokens.
    expect(usageOf({ prompt_tokens_details: { text_tokens: 100, cached_tokens: 96 } })).toStrictEqual(
      Chunks.usage({ inputTokens: 100, outputTokens: 5, cacheReadTokens: 96 })
    )
    // DeepSeek's own field, Moonshot's top-level field, LiteLLM's Anthropic-style field.
    expect(usageOf({ prompt_cache_hit_tokens: 64, prompt_cache_miss_tokens: 36 })).toStrictEqual(
      Chunks.usage({ inputTokens: 100, outputTokens: 5, cacheReadTokens: 64 })
    )
    expect(usageOf({ cached_tokens: 80 })).toStrictEqual(
      Chunks.usage({ inputTokens: 100, outputTokens: 5, cacheReadTokens: 80 })
    )
    expect(usageOf({ cache_read_input_tokens: 70, cache_creation_input_tokens: 20 })).toStrictEqual(
      Chunks.usage({ inputTokens: 100, outputTokens: 5, cacheReadTokens: 70, cacheWriteTokens: 20 })
    )
    // OpenRouter: reads and writes in prompt_tokens_details.
    expect(usageOf({ prompt_tokens_details: { cached_tokens: 0, cache_write_tokens: 90 } })).toStrictEqual(
      Chunks.usage({ inputTokens: 100, outputTokens: 5, cacheReadTokens: 0, cacheWriteTokens: 90 })
    )
  })

  it("[DONE] completes the response: nothing after it is read; a finish reason without [DONE] completes at the end", () => {
    const out = decode([data(chunk({ content: "a" }, "stop")), DONE, { event: "message", data: "not read" }])
    expect(out.read).toBe(2)
    expect(out.chunks).toStrictEqual([
      ...Chunks.textBlock(0, "a"),
      stop
    ])
    expect(decode([data(chunk({ content: "a" }, "stop"))]).chunks).toStrictEqual(out.chunks)
  })

  it("[DONE] without a finish reason closes the open blocks and finishes with stop", () => {
    const out = decode([
      data(chunk({ content: "a" })),
      data(chunk({ tool_calls: [call(0, { id: "c1", name: "now", arguments: "" })] })),
      DONE
    ])
    expect(out.failure).toBeUndefined()
    expect(out.chunks).toStrictEqual([
      ...Chunks.textBlock(0, "a"),
      ...Chunks.toolCallBlock(1, "c1", "now", "{}"),
      stop
    ])
  })

  it("a body that ends with neither a finish reason nor [DONE] was cut: a retryable NETWORK failure", () => {
    const out = decode([data(chunk({ role: "assistant", content: "" })), data(chunk({ content: "Partial" }))])
    expect(out.chunks).toStrictEqual([
      { type: "block-start", index: 0, block: "text" },
      { type: "text-delta", index: 0, text: "Partial" }
    ])
    expect(out.failure).toStrictEqual({
      message: `${HOST}: the response ended before it was complete`,
      code: "NETWORK",
      retryable: true
    })
    expect(decode([]).failure).toStrictEqual(out.failure)
  })

  it("finish reasons: length is max-tokens, content_filter a CONTENT_FILTER error, error a PROVIDER_ERROR", () => {
    expect(decode([data(chunk({ content: "{\"" })), data(chunk({}, "length")), DONE]).chunks.slice(-1))
      .toStrictEqual([{ type: "finish", finish: { kind: "max-tokens" } }])
    expect(decode([data(chunk({}, "content_filter")), DONE]).chunks).toStrictEqual([{
      type: "finish",
      finish: {
        kind: "error",
        failure: {
          message: `${HOST}: the content filter stopped the response`,
          code: "CONTENT_FILTER",
          retryable: false
        }
      }
    }])
    expect(decode([data(chunk({}, "error")), DONE]).chunks).toStrictEqual([{
      type: "finish",
      finish: {
        kind: "error",
        failure: {
          message: `${HOST}: the response finished with reason "error"`,
          code: "PROVIDER_ERROR",
          retryable: false
        }
      }
    }])
  })
})

describe("ChatCompletionsEvents refusals", () => {
  it("delta.refusal streams no text: the response finishes with a non-retryable REFUSAL error holding its words", () => {
    const out = decode([
      data(chunk({ role: "assistant", content: null, refusal: "" })),
      data(chunk({ refusal: "I'm sorry," })),
      data(chunk({ refusal: " I can't assist with that request." })),
      data(chunk({}, "stop")),
      data(
        usageChunk({
          prompt_tokens: 79,
          completion_tokens: 11,
          total_tokens: 90,
          completion_tokens_details: { reasoning_tokens: 0 }
        })
      ),
      DONE
    ])
    expect(out.failure).toBeUndefined()
    expect(out.chunks).toStrictEqual([
      Chunks.usage({ inputTokens: 79, outputTokens: 11, totalTokens: 90, reasoningTokens: 0 }),
      {
        type: "finish",
        finish: {
          kind: "error",
          failure: {
            message: `${HOST}: the model refused: I'm sorry, I can't assist with that request.`,
            code: "REFUSAL",
            retryable: false
          }
        }
      }
    ])
  })

  it("a long refusal is shortened in the failure message, and streams no text", () => {
    const long = "no ".repeat(200)
    const out = decode([data(chunk({ refusal: long })), data(chunk({}, "stop")), DONE])
    expect(out.chunks.filter((c) => c.type !== "finish")).toStrictEqual([])
    const finish = out.chunks.at(-1)
    expect(finish?.type === "finish" && finish.finish.kind === "error" ? finish.finish.failure.message.length : 0).toBe(
      300
    )
  })
})

describe("ChatCompletionsEvents reasoning", () => {
  it("reasoning_content (DeepSeek, xAI) is a reasoning block, recorded for replay after the usage", () => {
    const out = decode([
      data(chunk({ role: "assistant", content: null, reasoning_content: "" })),
      data(chunk({ content: null, reasoning_content: "We need" })),
      data(chunk({ content: null, reasoning_content: " to count." })),
      data(chunk({ content: "Three", reasoning_content: null })),
      data(
        chunk({ content: "", reasoning_content: null }, "stop", { usage: { prompt_tokens: 18, completion_tokens: 9 } })
      )
    ])
    expect(out.failure).toBeUndefined()
    expect(out.chunks).toStrictEqual([
      ...Chunks.reasoningBlock(0, "We need", " to count."),
      ...Chunks.textBlock(1, "Three"),
      Chunks.usage({ inputTokens: 18, outputTokens: 9 }),
      replay("reasoning_content"),
      stop
    ])
  })

  it("reasoning (Groq, OpenRouter) is recorded as the field `reasoning`; a host that sends both fields counts once", () => {
    const groq = decode([
      data(chunk({ role: "assistant", content: "" })),
      data(chunk({ reasoning: "Okay" })),
      data(chunk({ reasoning: ", let me" })),
      data(chunk({ content: "4" })),
      data(chunk({}, "stop")),
      DONE
    ])
    expect(groq.chunks).toStrictEqual([
      ...Chunks.reasoningBlock(0, "Okay", ", let me"),
      ...Chunks.textBlock(1, "4"),
      replay("reasoning"),
      stop
    ])
    const both = decode([data(chunk({ reasoning_content: "hm", reasoning: "hm" })), data(chunk({}, "stop")), DONE])
    expect(both.chunks).toStrictEqual([
      ...Chunks.reasoningBlock(0, "hm"),
      replay("reasoning_content"),
      stop
    ])
  })

  it("no replay state without reasoning; reasoningFieldOf reads only this adapter's entry", () => {
    expect(
      decode([data(chunk({ content: "a", reasoning_content: "" }, "stop")), DONE]).chunks.some((c) =>
        c.type === "replay-state"
      )
    )
      .toBe(false)
    expect(ChatCompletionsEvents.reasoningFieldOf({ "openai-compatible": { reasoningField: "reasoning" } })).toBe(
      "reasoning"
    )
    expect(ChatCompletionsEvents.reasoningFieldOf({ "openai-compatible": { reasoningField: "reasoning_content" } }))
      .toBe("reasoning_content")
    expect(ChatCompletionsEvents.reasoningFieldOf({ "openai-compatible": { reasoningField: "thoughts" } }))
      .toBeUndefined()
    expect(ChatCompletionsEvents.reasoningFieldOf({ anthropic: { content: [] } })).toBeUndefined()
    expect(ChatCompletionsEvents.reasoningFieldOf(undefined)).toBeUndefined()
    expect(ChatCompletionsEvents.reasoningFieldOf("reasoning")).toBeUndefined()
  })
})

describe("ChatCompletionsEvents tool calls", () => {
  it("a call split over chunks after reasoning, usage on the finish chunk (DeepSeek)", () => {
    const out = decode([
      data(chunk({ role: "assistant", content: null, reasoning_content: "" })),
      data(chunk({ content: null, reasoning_content: "The user asks." })),
      data(chunk({ tool_calls: [call(0, { id: "call_00_io", name: "weather", arguments: "" })] })),
      ...["{", "\"", "location", "\":\"", "San", " Francisco", "\"", "}"].map((piece) =>
        data(chunk({ tool_calls: [{ index: 0, function: { arguments: piece } }] }))
      ),
      data(chunk({ content: "", reasoning_content: null }, "tool_calls", {
        usage: {
          prompt_tokens: 339,
          completion_tokens: 83,
          total_tokens: 422,
          prompt_tokens_details: { cached_tokens: 320 }
        }
      }))
    ])
    expect(out.failure).toBeUndefined()
    expect(out.chunks).toStrictEqual([
      ...Chunks.reasoningBlock(0, "The user asks."),
      { type: "block-start", index: 1, block: "tool-call", id: "call_00_io", name: "weather" },
      ...["{", "\"", "location", "\":\"", "San", " Francisco", "\"", "}"].map((piece) => ({
        type: "tool-call-delta" as const,
        index: 1,
        arguments: piece
      })),
      { type: "block-end", index: 1 },
      Chunks.usage({ inputTokens: 339, outputTokens: 83, totalTokens: 422, cacheReadTokens: 320 }),
      replay("reasoning_content"),
      stop
    ])
  })

  it("empty ids on continuation deltas and a trailing empty-arguments delta (Alibaba) stay one call", () => {
    const out = decode([
      data(
        chunk({
          content: null,
          role: "assistant",
          tool_calls: [call(0, { id: "call_eee", name: "weather", arguments: "" })]
        })
      ),
      data(
        chunk({
          content: null,
          tool_calls: [{
            index: 0,
            id: "",
            type: "function",
            function: { arguments: "{\"location\": \"San Francisco" }
          }]
        })
      ),
      data(
        chunk({ content: null, tool_calls: [{ index: 0, id: "", type: "function", function: { arguments: "\"}" } }] })
      ),
      data({
        ...chunk({}),
        choices: [{
          delta: { tool_calls: [{ function: { arguments: "" }, index: 0, id: "", type: "function" }] },
          index: 0
        }]
      }),
      data(chunk({}, "tool_calls")),
      data(
        usageChunk({
          prompt_tokens: 295,
          completion_tokens: 22,
          total_tokens: 317,
          prompt_tokens_details: { cached_tokens: 0 }
        })
      ),
      DONE
    ])
    expect(out.failure).toBeUndefined()
    expect(out.chunks).toStrictEqual([
      ...Chunks.toolCallBlock(0, "call_eee", "weather", "{\"location\": \"San Francisco", "\"}"),
      Chunks.usage({ inputTokens: 295, outputTokens: 22, totalTokens: 317, cacheReadTokens: 0 }),
      stop
    ])
  })

  it("a complete call in one delta without finish_reason fields until the end (xAI, Groq)", () => {
    const out = decode([
      data({
        id: "x",
        object: "chat.completion.chunk",
        created: 1,
        model: "grok-3-mini",
        choices: [{ index: 0, delta: { reasoning_content: "First", role: "assistant" } }]
      }),
      data({
        id: "x",
        object: "chat.completion.chunk",
        created: 1,
        model: "grok-3-mini",
        choices: [{
          index: 0,
          delta: {
            tool_calls: [{
              id: "call_7938",
              function: { name: "weather", arguments: "{\"location\":\"SF\"}" },
              index: 0,
              type: "function"
            }]
          }
        }]
      }),
      data({
        id: "x",
        object: "chat.completion.chunk",
        created: 1,
        model: "grok-3-mini",
        choices: [{ index: 0, delta: {}, finish_reason: "tool_calls" }]
      }),
      data(
        usageChunk({
          prompt_tokens: 307,
          completion_tokens: 26,
          total_tokens: 560,
          prompt_tokens_details: { text_tokens: 307, cached_tokens: 306 }
        })
      ),
      DONE
    ])
    expect(out.failure).toBeUndefined()
    expect(out.chunks).toStrictEqual([
      ...Chunks.reasoningBlock(0, "First"),
      ...Chunks.toolCallBlock(1, "call_7938", "weather", "{\"location\":\"SF\"}"),
      Chunks.usage({ inputTokens: 307, outputTokens: 26, totalTokens: 560, cacheReadTokens: 306 }),
      replay("reasoning_content"),
      stop
    ])
  })

  it("several calls at index 0 with new ids are separate calls; empty arguments become {}", () => {
    const out = decode([
      data(chunk({ tool_calls: [call(0, { id: "a1", name: "clock", arguments: "" })] })),
      data(chunk({ tool_calls: [call(0, { id: "a2", name: "lookup", arguments: "{\"q\":" })] })),
      data(chunk({ tool_calls: [call(0, { arguments: "\"x\"}" })] })),
      data(chunk({}, "tool_calls")),
      DONE
    ])
    expect(out.chunks).toStrictEqual([
      { type: "block-start", index: 0, block: "tool-call", id: "a1", name: "clock" },
      { type: "block-start", index: 1, block: "tool-call", id: "a2", name: "lookup" },
      { type: "tool-call-delta", index: 1, arguments: "{\"q\":" },
      { type: "tool-call-delta", index: 1, arguments: "\"x\"}" },
      { type: "tool-call-delta", index: 0, arguments: "{}" },
      { type: "block-end", index: 0 },
      { type: "block-end", index: 1 },
      stop
    ])
  })

  it("a call whose id, arguments and name come in separate deltas starts once its name is known", () => {
    const out = decode([
      data(chunk({ tool_calls: [{ index: 0, id: "c9", type: "function" }] })),
      data(chunk({ tool_calls: [{ index: 0, function: { arguments: "{\"q\":" } }] })),
      data(chunk({ tool_calls: [{ index: 0, function: { name: "lookup", arguments: "1}" } }] })),
      data(chunk({}, "tool_calls")),
      DONE
    ])
    expect(out.failure).toBeUndefined()
    expect(out.chunks).toStrictEqual([
      ...Chunks.toolCallBlock(0, "c9", "lookup", "{\"q\":1}"),
      stop
    ])
  })

  it("arguments that are not JSON, or a call without a name, are non-retryable MALFORMED_STREAM failures", () => {
    expect(
      decode([
        data(chunk({ tool_calls: [call(0, { id: "c1", name: "f", arguments: "{\"a\":" })] })),
        data(chunk({}, "tool_calls"))
      ]).failure
    )
      .toStrictEqual({
        message: `${HOST}: the arguments of tool call c1 (f) are not JSON`,
        code: "MALFORMED_STREAM",
        retryable: false
      })
    expect(
      decode([data(chunk({ tool_calls: [call(0, { id: "c1", arguments: "{}" })] })), data(chunk({}, "tool_calls"))])
        .failure
    )
      .toStrictEqual({ message: `${HOST}: tool call c1 has no name`, code: "MALFORMED_STREAM", retryable: false })
    expect(decode([{ event: "message", data: "{\"choices\": [" }]).failure).toStrictEqual({
      message: `${HOST}: a stream event is not a chat completion chunk: {"choices": [`,
      code: "MALFORMED_STREAM",
      retryable: false
    })
  })
})

describe("ChatCompletionsEvents errors in the stream", () => {
  it("vLLM's error payload after ordinary chunks: its numeric code is the status, its message kept", () => {
    const out = decode(frameText([
      `data: ${JSON.stringify(chunk({ role: "assistant", content: "" }))}\n\n`,
      `data: ${JSON.stringify(chunk({ content: "Partial" }))}\n\n`,
      "data: {\"error\": {\"message\": \"The engine is dead (EngineDeadError)\", \"type\": \"InternalServerError\", \"param\": null, \"code\": 500}}\n\n",
      "data: [DONE]\n\n"
    ]))
    expect(out.chunks).toStrictEqual([
      { type: "block-start", index: 0, block: "text" },
      { type: "text-delta", index: 0, text: "Partial" }
    ])
    expect(out.failure).toStrictEqual({
      message: `${HOST} (HTTP 500): The engine is dead (EngineDeadError)`,
      code: "SERVICE_UNAVAILABLE",
      retryable: true,
      status: 500
    })
  })

  it("OpenRouter: processing comments, then an error next to finish_reason \"error\" mid-stream", () => {
    const out = decode(frameText([
      ": OPENROUTER PROCESSING\n\n: OPENROUTER PROCESSING\n\n",
      `data: ${JSON.stringify({ ...chunk({ role: "assistant", content: "Partial" }), provider: "openai" })}\n\n`,
      `data: ${
        JSON.stringify({
          ...chunk({ content: "" }, "error"),
          provider: "openai",
          error: { code: "server_error", message: "Provider disconnected unexpectedly" }
        })
      }\n\n`,
      "data: [DONE]\n\n"
    ]))
    expect(out.chunks).toStrictEqual([
      { type: "block-start", index: 0, block: "text" },
      { type: "text-delta", index: 0, text: "Partial" }
    ])
    expect(out.failure).toStrictEqual({
      message: `${HOST}: Provider disconnected unexpectedly`,
      code: "SERVICE_UNAVAILABLE",
      retryable: true
    })
  })

  it("an `event: error` is classified from its JSON data, or kept as text", () => {
    expect(
      decode([{
        event: "error",
        data: JSON.stringify({ error: { type: "rate_limit_exceeded", message: "slow down" } })
      }]).failure
    )
      .toStrictEqual({ message: `${HOST}: slow down`, code: "RATE_LIMIT", retryable: true })
    expect(decode([{ event: "error", data: "the model crashed" }]).failure)
      .toStrictEqual({ message: `${HOST}: the model crashed`, code: "PROVIDER_ERROR", retryable: false })
    expect(
      decode([{
        event: "error",
        data: JSON.stringify({ error: { code: "insufficient_quota", message: "You exceeded your current quota" } })
      }]).failure
    )
      .toStrictEqual({ message: `${HOST}: You exceeded your current quota`, code: "QUOTA", retryable: false })
  })

  it("the flat error object of older vLLM servers ({object: \"error\", ...}) is classified, not skipped", () => {
    const out = decode([
      data(chunk({ content: "Par" })),
      data({
        object: "error",
        message: "This model's maximum context length is 4096 tokens",
        type: "BadRequestError",
        param: null,
        code: 400
      }),
      DONE
    ])
    expect(out.failure).toStrictEqual({
      message: `${HOST} (HTTP 400): This model's maximum context length is 4096 tokens`,
      code: "CONTEXT_OVERFLOW",
      retryable: false,
      status: 400
    })
  })

  it("an empty finish reason on every delta is no finish reason", () => {
    const out = decode([
      data(chunk({ content: "a" }, "")),
      data(chunk({ content: "b" }, "")),
      data(chunk({}, "stop")),
      DONE
    ])
    expect(out.chunks).toStrictEqual([
      ...Chunks.textBlock(0, "a", "b"),
      stop
    ])
  })

  it("empty data events are skipped", () => {
    expect(decode([{ event: "message", data: "" }, data(chunk({ content: "a" }, "stop")), DONE]).failure)
      .toBeUndefined()
  })
})
