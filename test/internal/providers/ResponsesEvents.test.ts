import { describe, expect, it } from "@effect/vitest"
import { Either } from "effect"
import type { LlmFailure, StreamChunk } from "../../../src/domain/Values.js"
import * as ResponsesEvents from "../../../src/internal/providers/ResponsesEvents.js"
import * as Chunks from "../../fixtures/streamChunks.js"

// Event sequences shaped after real Responses API streams (reasoning with encrypted content and
// function calls, web search, a quota error, a refusal), written out here in short.

type Event = Record<string, unknown> & { readonly type: string }

/** Feeds every event, then ends the body: the chunks up to the failure, and the failure if any. */
const decode = (events: ReadonlyArray<Event | string>, options: { readonly end?: boolean } = {}) => {
  const decoder = ResponsesEvents.makeDecoder()
  const chunks: Array<StreamChunk> = []
  for (const event of events) {
    const result = typeof event === "string"
      ? decoder.event({ event: "message", data: event })
      : decoder.event({ event: event.type, data: JSON.stringify(event) })
    if (Either.isLeft(result)) return { chunks, failure: result.left }
    chunks.push(...result.right)
  }
  if (options.end === false) return { chunks, failure: undefined }
  const rest = decoder.end()
  if (Either.isLeft(rest)) return { chunks, failure: rest.left }
  chunks.push(...rest.right)
  return { chunks, failure: undefined as LlmFailure | undefined }
}

const response = (status: string, extra: Record<string, unknown> = {}) => ({
  id: "resp_1",
  object: "response",
  status,
  error: null,
  incomplete_details: null,
  model: "gpt-5.1",
  output: [],
  usage: null,
  ...extra
})

const created: Event = { type: "response.created", sequence_number: 0, response: response("in_progress") }
const inProgress: Event = { type: "response.in_progress", sequence_number: 1, response: response("in_progress") }

const usage = (input: number, output: number, cached = 0, reasoning = 0) => ({
  input_tokens: input,
  input_tokens_details: { cached_tokens: cached },
  output_tokens: output,
  output_tokens_details: { reasoning_tokens: reasoning },
  total_tokens: input + output
})

const completed = (u: unknown): Event => ({ type: "response.completed", response: response("completed", { usage: u }) })

const summaryDelta = (itemId: string, delta: string, summaryIndex = 0): Event => ({
  type: "response.reasoning_summary_text.delta",
  item_id: itemId,
  output_index: 0,
  summary_index: summaryIndex,
  delta,
  obfuscation: "x"
})

const textDelta = (itemId: string, outputIndex: number, delta: string): Event => ({
  type: "response.output_text.delta",
  item_id: itemId,
  output_index: outputIndex,
  content_index: 0,
  delta,
  logprobs: []
})

const argsDelta = (itemId: string, outputIndex: number, delta: string): Event => ({
  type: "response.function_call_arguments.delta",
  item_id: itemId,
  output_index: outputIndex,
  delta
})

const call = (itemId: string, outputIndex: number, callId: string, name: string, args: string, status: string) => ({
  type: "response.output_item." + (status === "in_progress" ? "added" : "done"),
  output_index: outputIndex,
  item: { id: itemId, type: "function_call", status, arguments: args, call_id: callId, name }
})

const message = (itemId: string, outputIndex: number, phase: "added" | "done", content: ReadonlyArray<unknown>) => ({
  type: `response.output_item.${phase}`,
  output_index: outputIndex,
  item: {
    id: itemId,
    type: "message",
    status: phase === "added" ? "in_progress" : "completed",
    role: "assistant",
    content
  }
})

const SUMMARY_1 = "**Calculating step-by-step**\n\nI'll compute 12 plus 7."
const SUMMARY_2 = "Then multiply by 3."

describe("ResponsesEvents", () => {
  it("reasoning with encrypted content (a block per summary part), then a function call: blocks, usage, replay state, finish", () => {
    const { chunks, failure } = decode([
      created,
      inProgress,
      {
        type: "response.output_item.added",
        output_index: 0,
        item: { id: "rs_1", type: "reasoning", encrypted_content: "gAAAA-added", summary: [] }
      },
      {
        type: "response.reasoning_summary_part.added",
        item_id: "rs_1",
        output_index: 0,
        summary_index: 0,
        part: { type: "summary_text", text: "" }
      },
      summaryDelta("rs_1", "**Calculating step-by-step**"),
      summaryDelta("rs_1", "\n\nI'll compute 12 plus 7."),
      {
        type: "response.reasoning_summary_text.done",
        item_id: "rs_1",
        output_index: 0,
        summary_index: 0,
        text: SUMMARY_1
      },
      {
        type: "response.reasoning_summary_part.done",
        item_id: "rs_1",
        output_index: 0,
        summary_index: 0,
        part: { type: "summary_text", text: SUMMARY_1 }
      },
      summaryDelta("rs_1", SUMMARY_2, 1),
      {
        type: "response.output_item.done",
        output_index: 0,
        item: {
          id: "rs_1",
          type: "reasoning",
          encrypted_content: "gAAAA-final",
          summary: [{ type: "summary_text", text: SUMMARY_1 }, { type: "summary_text", text: SUMMARY_2 }]
        }
      },
      call("fc_1", 1, "call_AB6", "calculator", "", "in_progress"),
      argsDelta("fc_1", 1, "{\""),
      argsDelta("fc_1", 1, "a\":12,\"b\":7,\"op\":\"add\"}"),
      {
        type: "response.function_call_arguments.done",
        item_id: "fc_1",
        output_index: 1,
        arguments: "{\"a\":12,\"b\":7,\"op\":\"add\"}"
      },
      call("fc_1", 1, "call_AB6", "calculator", "{\"a\":12,\"b\":7,\"op\":\"add\"}", "completed"),
      completed(usage(134, 28, 0, 0))
    ])
    expect(failure).toBeUndefined()
    expect(chunks).toEqual([
      ...Chunks.reasoningBlock(0, "**Calculating step-by-step**", "\n\nI'll compute 12 plus 7."),
      ...Chunks.reasoningBlock(1, SUMMARY_2),
      ...Chunks.toolCallBlock(2, "call_AB6", "calculator", "{\"", "a\":12,\"b\":7,\"op\":\"add\"}"),
      Chunks.usage({ inputTokens: 134, outputTokens: 28, totalTokens: 162, reasoningTokens: 0, cacheReadTokens: 0 }),
      {
        type: "replay-state",
        state: {
          openai: {
            items: [
              {
                type: "reasoning",
                encrypted_content: "gAAAA-final",
                summary: [{ type: "summary_text", text: SUMMARY_1 }, { type: "summary_text", text: SUMMARY_2 }]
              },
              { type: "function_call", call_id: "call_AB6" }
            ]
          }
        }
      },
      Chunks.stop
    ])
  })

  it("web search: provider-executed items make no block and no failure; the answer's text is kept", () => {
    const reasoning = (id: string, index: number, phase: "added" | "done"): Event => ({
      type: `response.output_item.${phase}`,
      output_index: index,
      item: { id, type: "reasoning", summary: [] }
    })
    const search = (id: string, index: number): ReadonlyArray<Event> => [
      {
        type: "response.output_item.added",
        output_index: index,
        item: { id, type: "web_search_call", status: "in_progress" }
      },
      { type: "response.web_search_call.in_progress", output_index: index, item_id: id },
      { type: "response.web_search_call.searching", output_index: index, item_id: id },
      { type: "response.web_search_call.completed", output_index: index, item_id: id },
      {
        type: "response.output_item.done",
        output_index: index,
        item: {
          id,
          type: "web_search_call",
          status: "completed",
          action: { type: "search", query: "tech news today", sources: [{ type: "url", url: "https://example.com/a" }] }
        }
      }
    ]
    const { chunks, failure } = decode([
      created,
      inProgress,
      reasoning("rs_1", 0, "added"),
      reasoning("rs_1", 0, "done"),
      ...search("ws_1", 1),
      reasoning("rs_2", 2, "added"),
      reasoning("rs_2", 2, "done"),
      ...search("ws_2", 3),
      message("msg_1", 4, "added", []),
      {
        type: "response.content_part.added",
        item_id: "msg_1",
        output_index: 4,
        content_index: 0,
        part: { type: "output_text", annotations: [], text: "" }
      },
      textDelta("msg_1", 4, "I checked today’s"),
      {
        type: "response.output_text.annotation.added",
        item_id: "msg_1",
        output_index: 4,
        content_index: 0,
        annotation_index: 0,
        annotation: { type: "url_citation", url: "https://example.com/a", start_index: 0, end_index: 5, title: "A" }
      },
      textDelta("msg_1", 4, " tech headlines."),
      {
        type: "response.output_text.done",
        item_id: "msg_1",
        output_index: 4,
        content_index: 0,
        text: "I checked today’s tech headlines."
      },
      message("msg_1", 4, "done", [{
        type: "output_text",
        annotations: [],
        text: "I checked today’s tech headlines."
      }]),
      completed(usage(31073, 4416, 3712, 3712))
    ])
    expect(failure).toBeUndefined()
    expect(chunks).toEqual([
      ...Chunks.textBlock(0, "I checked today’s", " tech headlines."),
      Chunks.usage({
        inputTokens: 31073,
        outputTokens: 4416,
        totalTokens: 35489,
        reasoningTokens: 3712,
        cacheReadTokens: 3712
      }),
      Chunks.stop
    ])
  })

  it("an error event (insufficient_quota) followed by response.failed fails with QUOTA and the provider's message", () => {
    const text =
      "You exceeded your current quota, please check your plan and billing details. For more information on " +
      "this error, read the docs: https://platform.openai.com/docs/guides/error-codes/api-errors."
    const { chunks, failure } = decode([
      created,
      inProgress,
      {
        type: "error",
        sequence_number: 2,
        error: { type: "insufficient_quota", code: "insufficient_quota", message: text, param: null }
      },
      {
        type: "response.failed",
        sequence_number: 3,
        response: response("failed", { error: { code: "insufficient_quota", message: text } })
      }
    ])
    expect(chunks).toEqual([])
    expect(failure).toEqual({ code: "QUOTA", retryable: false, message: `OpenAI: ${text}` })
  })

  it("an error event with top-level fields is classified by its code", () => {
    const { failure } = decode([
      created,
      {
        type: "error",
        code: "rate_limit_exceeded",
        message: "Rate limit reached for gpt-5.1",
        param: null,
        sequence_number: 1
      }
    ])
    expect(failure).toEqual({ code: "RATE_LIMIT", retryable: true, message: "OpenAI: Rate limit reached for gpt-5.1" })
  })

  it("response.failed alone fails with its error, classified", () => {
    const { chunks, failure } = decode([
      created,
      message("msg_1", 0, "added", []),
      textDelta("msg_1", 0, "Par"),
      {
        type: "response.failed",
        response: response("failed", { error: { code: "server_error", message: "The server had an error." } })
      }
    ])
    expect(chunks).toEqual([
      { type: "block-start", index: 0, block: "text" },
      { type: "text-delta", index: 0, text: "Par" }
    ])
    expect(failure).toEqual({
      code: "SERVICE_UNAVAILABLE",
      retryable: true,
      message: "OpenAI: The server had an error."
    })
  })

  it("a stream cut before response.completed is a retryable NETWORK failure", () => {
    const { chunks, failure } = decode([
      created,
      call("fc_1", 0, "call_1", "weather", "", "in_progress"),
      argsDelta("fc_1", 0, "{\"location\":\"San")
    ])
    expect(chunks).toEqual([
      { type: "block-start", index: 0, block: "tool-call", id: "call_1", name: "weather" },
      { type: "tool-call-delta", index: 0, arguments: "{\"location\":\"San" }
    ])
    expect(failure).toEqual({
      code: "NETWORK",
      retryable: true,
      message: "OpenAI: the response ended before it was complete"
    })
  })

  it("a refusal streams no text and finishes with a REFUSAL error holding its words", () => {
    const { chunks, failure } = decode([
      created,
      message("msg_1", 0, "added", []),
      {
        type: "response.content_part.added",
        item_id: "msg_1",
        output_index: 0,
        content_index: 0,
        part: { type: "refusal", refusal: "" }
      },
      { type: "response.refusal.delta", item_id: "msg_1", output_index: 0, content_index: 0, delta: "I'm sorry, " },
      {
        type: "response.refusal.delta",
        item_id: "msg_1",
        output_index: 0,
        content_index: 0,
        delta: "I can't help with that."
      },
      {
        type: "response.refusal.done",
        item_id: "msg_1",
        output_index: 0,
        content_index: 0,
        refusal: "I'm sorry, I can't help with that."
      },
      message("msg_1", 0, "done", [{ type: "refusal", refusal: "I'm sorry, I can't help with that." }]),
      completed(usage(10, 9))
    ])
    expect(failure).toBeUndefined()
    expect(chunks).toEqual([
      Chunks.usage({ inputTokens: 10, outputTokens: 9, totalTokens: 19, reasoningTokens: 0, cacheReadTokens: 0 }),
      {
        type: "finish",
        finish: {
          kind: "error",
          failure: {
            code: "REFUSAL",
            retryable: false,
            message: "OpenAI: the model refused: I'm sorry, I can't help with that."
          }
        }
      }
    ])
  })

  it("a function call without arguments is sent as {}; text and message placeholders keep their order", () => {
    const { chunks, failure } = decode([
      created,
      {
        type: "response.output_item.added",
        output_index: 0,
        item: { id: "rs_1", type: "reasoning", encrypted_content: "enc", summary: [] }
      },
      {
        type: "response.output_item.done",
        output_index: 0,
        item: { id: "rs_1", type: "reasoning", encrypted_content: "enc", summary: [] }
      },
      message("msg_1", 1, "added", []),
      textDelta("msg_1", 1, "Checking the time."),
      message("msg_1", 1, "done", [{ type: "output_text", annotations: [], text: "Checking the time." }]),
      call("fc_1", 2, "call_clock", "clock", "", "in_progress"),
      { type: "response.function_call_arguments.done", item_id: "fc_1", output_index: 2, arguments: "" },
      call("fc_1", 2, "call_clock", "clock", "", "completed"),
      completed(usage(5, 3))
    ])
    expect(failure).toBeUndefined()
    expect(chunks).toEqual([
      ...Chunks.textBlock(0, "Checking the time."),
      ...Chunks.toolCallBlock(1, "call_clock", "clock", "{}"),
      Chunks.usage({ inputTokens: 5, outputTokens: 3, totalTokens: 8, reasoningTokens: 0, cacheReadTokens: 0 }),
      {
        type: "replay-state",
        state: {
          openai: {
            items: [
              { type: "reasoning", encrypted_content: "enc", summary: [] },
              { type: "message" },
              { type: "function_call", call_id: "call_clock" }
            ]
          }
        }
      },
      Chunks.stop
    ])
  })

  it("items sent only whole (no deltas) still give their text and arguments", () => {
    const { chunks } = decode([
      created,
      {
        type: "response.output_item.done",
        output_index: 0,
        item: {
          id: "rs_1",
          type: "reasoning",
          summary: [{ type: "summary_text", text: "One." }, { type: "summary_text", text: "Two." }]
        }
      },
      message("msg_1", 1, "done", [{ type: "output_text", annotations: [], text: "Hello." }]),
      call("fc_1", 2, "call_1", "echo", "{\"text\":\"hi\"}", "completed"),
      completed(usage(1, 1))
    ])
    expect(chunks.filter((chunk) => chunk.type !== "usage")).toEqual([
      ...Chunks.reasoningBlock(0, "One."),
      ...Chunks.reasoningBlock(1, "Two."),
      ...Chunks.textBlock(2, "Hello."),
      ...Chunks.toolCallBlock(3, "call_1", "echo", "{\"text\":\"hi\"}"),
      Chunks.stop
    ])
  })

  it("argument deltas before their item is announced wait for its name and call id", () => {
    const { chunks, failure } = decode([
      created,
      argsDelta("fc_1", 0, "{\"text\":"),
      call("fc_1", 0, "call_9", "echo", "", "in_progress"),
      argsDelta("fc_1", 0, "\"hi\"}"),
      call("fc_1", 0, "call_9", "echo", "{\"text\":\"hi\"}", "completed"),
      completed(usage(1, 1))
    ])
    expect(failure).toBeUndefined()
    expect(chunks.filter((chunk) => chunk.type !== "usage")).toEqual([
      ...Chunks.toolCallBlock(0, "call_9", "echo", "{\"text\":", "\"hi\"}"),
      Chunks.stop
    ])
  })

  it("arguments that are not JSON fail with MALFORMED_STREAM, except when the output was cut at max_output_tokens", () => {
    const broken = [
      created,
      call("fc_1", 0, "call_1", "echo", "", "in_progress"),
      argsDelta("fc_1", 0, "{\"text\":\"h"),
      call("fc_1", 0, "call_1", "echo", "{\"text\":\"h", "completed")
    ]
    expect(decode([...broken, completed(usage(1, 1))]).failure).toEqual({
      code: "MALFORMED_STREAM",
      retryable: false,
      message: "OpenAI: the arguments of tool call call_1 (echo) are not JSON"
    })
    const cut = decode([
      ...broken,
      {
        type: "response.incomplete",
        response: response("incomplete", { incomplete_details: { reason: "max_output_tokens" }, usage: usage(1, 1) })
      }
    ])
    expect(cut.failure).toBeUndefined()
    expect(cut.chunks.slice(-2)).toEqual([
      Chunks.usage({ inputTokens: 1, outputTokens: 1, totalTokens: 2, reasoningTokens: 0, cacheReadTokens: 0 }),
      { type: "finish", finish: { kind: "max-tokens" } }
    ])
  })

  it("response.incomplete for the content filter finishes with CONTENT_FILTER", () => {
    const { chunks, failure } = decode([
      created,
      message("msg_1", 0, "added", []),
      textDelta("msg_1", 0, "Once upon"),
      {
        type: "response.incomplete",
        response: response("incomplete", { incomplete_details: { reason: "content_filter" } })
      }
    ])
    expect(failure).toBeUndefined()
    expect(chunks).toEqual([
      ...Chunks.textBlock(0, "Once upon"),
      {
        type: "finish",
        finish: {
          kind: "error",
          failure: {
            code: "CONTENT_FILTER",
            retryable: false,
            message: "OpenAI: the content filter stopped the response"
          }
        }
      }
    ])
  })

  it("unknown events are ignored; a data line that is not JSON fails with MALFORMED_STREAM; nothing after the end counts", () => {
    expect(
      decode([
        created,
        { type: "response.some_future_event", payload: 1 },
        completed(usage(1, 1)),
        textDelta("m", 0, "late")
      ]).chunks
    )
      .toEqual([
        Chunks.usage({ inputTokens: 1, outputTokens: 1, totalTokens: 2, reasoningTokens: 0, cacheReadTokens: 0 }),
        Chunks.stop
      ])
    expect(decode([created, "{\"type\":"]).failure).toMatchObject({ code: "MALFORMED_STREAM", retryable: false })
    expect(decode([created, completed(usage(1, 1)), "[DONE]"]).failure).toBeUndefined()
    expect(decode([created, "[DONE]"]).failure).toMatchObject({ code: "NETWORK", retryable: true })
  })
})
