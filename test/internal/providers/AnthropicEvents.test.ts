/**
 * AnthropicEvents: the decoder on event sequences shaped after real Messages API streams (text,
 * a tool call without arguments, thinking with its signature, redacted thinking, a web search run
 * by the server, a refusal, usage corrected by `message_delta`, an error event mid-stream, a body
 * cut before `message_stop`).
 */
import { describe, expect, it } from "@effect/vitest"
import { Either } from "effect"
import type { LlmFailure, StreamChunk } from "../../../src/domain/Values.js"
import * as AnthropicEvents from "../../../src/internal/providers/AnthropicEvents.js"
import * as Chunks from "../../fixtures/streamChunks.js"

type Payload = { readonly type: string } & Record<string, unknown>

/** What the decoder made of a body: its chunks, then the failure it ended with, if any. */
interface Decoded {
  readonly chunks: ReadonlyArray<StreamChunk>
  readonly failure?: LlmFailure
}

/** Feeds the payloads as SSE events named after their type, then ends the body. */
const decode = (payloads: ReadonlyArray<Payload | string>): Decoded => {
  const decoder = AnthropicEvents.makeDecoder()
  const chunks: Array<StreamChunk> = []
  for (const payload of payloads) {
    const event = typeof payload === "string"
      ? { event: "content_block_delta", data: payload }
      : { event: payload.type, data: JSON.stringify(payload) }
    const step = decoder.event(event)
    if (Either.isLeft(step)) return { chunks, failure: step.left }
    chunks.push(...step.right)
  }
  const end = decoder.end()
  if (Either.isLeft(end)) return { chunks, failure: end.left }
  return { chunks: [...chunks, ...end.right] }
}

const messageStart = (usage: Record<string, unknown>): Payload => ({
  type: "message_start",
  message: {
    model: "claude-sonnet-4-5-20250929",
    id: "msg_01",
    type: "message",
    role: "assistant",
    content: [],
    stop_reason: null,
    stop_sequence: null,
    usage
  }
})

const blockStart = (index: number, content_block: Record<string, unknown>): Payload => ({
  type: "content_block_start",
  index,
  content_block
})

const blockDelta = (index: number, delta: Record<string, unknown>): Payload => ({
  type: "content_block_delta",
  index,
  delta
})

const textDelta = (index: number, text: string) => blockDelta(index, { type: "text_delta", text })
const jsonDelta = (index: number, partial_json: string) => blockDelta(index, { type: "input_json_delta", partial_json })
const blockStop = (index: number): Payload => ({ type: "content_block_stop", index })
const ping: Payload = { type: "ping" }
const messageStop: Payload = { type: "message_stop" }

const messageDelta = (
  stop_reason: string,
  usage: Record<string, unknown>,
  extra: Record<string, unknown> = {}
): Payload => ({
  type: "message_delta",
  delta: { stop_reason, stop_sequence: null, ...extra },
  usage
})

const usage0 = { input_tokens: 12, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, output_tokens: 1 }

describe("AnthropicEvents", () => {
  it("text: deltas in order, then usage and stop at message_stop; pings ignored", () => {
    expect(decode([
      messageStart(usage0),
      blockStart(0, { type: "text", text: "" }),
      ping,
      textDelta(0, "Hello"),
      textDelta(0, "! I'm fine."),
      blockStop(0),
      messageDelta("end_turn", { ...usage0, output_tokens: 30 }),
      messageStop
    ])).toEqual({
      chunks: [
        ...Chunks.textBlock(0, "Hello", "! I'm fine."),
        Chunks.usage({ inputTokens: 12, outputTokens: 30, totalTokens: 42, cacheReadTokens: 0, cacheWriteTokens: 0 }),
        Chunks.stop
      ]
    })
  })

  it("message_delta's input_tokens and cache counts override message_start's", () => {
    expect(
      decode([
        messageStart({ input_tokens: 43, output_tokens: 1, cache_read_input_tokens: 5 }),
        blockStart(0, { text: "", type: "text" }),
        textDelta(0, "p"),
        ping,
        textDelta(0, "ong"),
        blockStop(0),
        messageDelta("end_turn", {
          input_tokens: 61,
          output_tokens: 2,
          cache_read_input_tokens: 7,
          cache_creation_input_tokens: 3
        }),
        messageStop
      ]).chunks.filter((chunk) => chunk.type === "usage")
    ).toEqual([
      Chunks.usage({ inputTokens: 61, outputTokens: 2, totalTokens: 63, cacheReadTokens: 7, cacheWriteTokens: 3 })
    ])
  })

  it("a tool call with no arguments (partial_json \"\") gets {} and no replay state", () => {
    expect(decode([
      messageStart(usage0),
      blockStart(0, { type: "text", text: "" }),
      textDelta(0, "I'll update the issue list for"),
      textDelta(0, " you."),
      ping,
      blockStop(0),
      ping,
      blockStart(1, { type: "tool_use", id: "toolu_01QE", name: "updateIssueList", input: {} }),
      ping,
      jsonDelta(1, ""),
      blockStop(1),
      messageDelta("tool_use", { ...usage0, output_tokens: 48 }),
      messageStop
    ])).toEqual({
      chunks: [
        ...Chunks.textBlock(0, "I'll update the issue list for", " you."),
        ...Chunks.toolCallBlock(1, "toolu_01QE", "updateIssueList", "{}"),
        Chunks.usage({ inputTokens: 12, outputTokens: 48, totalTokens: 60, cacheReadTokens: 0, cacheWriteTokens: 0 }),
        Chunks.stop
      ]
    })
  })

  it("streamed tool arguments pass through piece by piece", () => {
    const { chunks } = decode([
      messageStart(usage0),
      blockStart(0, { type: "tool_use", id: "toolu_1", name: "json", input: {} }),
      jsonDelta(0, ""),
      ping,
      jsonDelta(0, "{\"elements\": [1]"),
      jsonDelta(0, "}"),
      blockStop(0),
      messageDelta("tool_use", { output_tokens: 47 }),
      messageStop
    ])
    expect(chunks.slice(0, 4)).toEqual([
      ...Chunks.toolCallBlock(0, "toolu_1", "json", "{\"elements\": [1]", "}")
    ])
  })

  it("thinking: reasoning deltas, the signature kept in the replay state with the placeholders, in order", () => {
    expect(decode([
      messageStart(usage0),
      blockStart(0, { type: "thinking", thinking: "", signature: "" }),
      ping,
      blockDelta(0, { type: "thinking_delta", thinking: "The previous result" }),
      blockDelta(0, { type: "thinking_delta", thinking: " was 925." }),
      blockDelta(0, { type: "thinking_delta", thinking: "" }),
      blockDelta(0, { type: "signature_delta", signature: "EvQBCkYICxgC" }),
      blockStop(0),
      blockStart(1, { type: "text", text: "" }),
      textDelta(1, "Dividing."),
      blockStop(1),
      blockStart(2, { type: "tool_use", id: "toolu_9", name: "divide", input: {} }),
      jsonDelta(2, "{\"a\":925,\"b\":5}"),
      blockStop(2),
      messageDelta("tool_use", { output_tokens: 53 }),
      messageStop
    ])).toEqual({
      chunks: [
        ...Chunks.reasoningBlock(0, "The previous result", " was 925."),
        ...Chunks.textBlock(1, "Dividing."),
        ...Chunks.toolCallBlock(2, "toolu_9", "divide", "{\"a\":925,\"b\":5}"),
        Chunks.usage({ inputTokens: 12, outputTokens: 53, totalTokens: 65, cacheReadTokens: 0, cacheWriteTokens: 0 }),
        {
          type: "replay-state",
          state: {
            anthropic: {
              content: [
                { type: "thinking", thinking: "The previous result was 925.", signature: "EvQBCkYICxgC" },
                { type: "text" },
                { type: "tool_use", id: "toolu_9" }
              ]
            }
          }
        },
        Chunks.stop
      ]
    })
  })

  it("thinking without a signature leaves no replay state", () => {
    const { chunks } = decode([
      messageStart({}),
      blockStart(0, { type: "thinking", thinking: "" }),
      blockDelta(0, { type: "thinking_delta", thinking: "step by step" }),
      blockStop(0),
      messageDelta("end_turn", {}),
      messageStop
    ])
    expect(chunks).toEqual([
      ...Chunks.reasoningBlock(0, "step by step"),
      Chunks.stop
    ])
  })

  it("redacted thinking gets no tiller block and is kept whole in the replay state", () => {
    const { chunks } = decode([
      messageStart(usage0),
      blockStart(0, { type: "redacted_thinking", data: "EmwKAhgBEgy3va3pzix" }),
      blockStop(0),
      blockStart(1, { type: "text", text: "" }),
      textDelta(1, "Done."),
      blockStop(1),
      messageDelta("end_turn", { output_tokens: 9 }),
      messageStop
    ])
    expect(chunks).toEqual([
      ...Chunks.textBlock(0, "Done."),
      Chunks.usage({ inputTokens: 12, outputTokens: 9, totalTokens: 21, cacheReadTokens: 0, cacheWriteTokens: 0 }),
      {
        type: "replay-state",
        state: {
          anthropic: { content: [{ type: "redacted_thinking", data: "EmwKAhgBEgy3va3pzix" }, { type: "text" }] }
        }
      },
      Chunks.stop
    ])
  })

  it("a web search run by the server: no tool call, the text kept, the server blocks in the replay state", () => {
    const searchResult = {
      type: "web_search_tool_result",
      tool_use_id: "srvtoolu_01Bj",
      content: [{
        type: "web_search_result",
        title: "Apple Ginza",
        url: "https://www.apple.com/newsroom/",
        encrypted_content: "ErkeCioICBgC",
        page_age: null
      }]
    }
    const decoded = decode([
      messageStart({ ...usage0, input_tokens: 2037 }),
      blockStart(0, { type: "server_tool_use", id: "srvtoolu_01Bj", name: "web_search", input: {} }),
      jsonDelta(0, ""),
      jsonDelta(0, "{\"query\": \"t"),
      jsonDelta(0, "ech news today\"}"),
      blockStop(0),
      blockStart(1, searchResult),
      blockStop(1),
      blockStart(2, { type: "text", text: "" }),
      textDelta(2, "Based on my search results:\n"),
      blockStop(2),
      blockStart(3, { citations: [], type: "text", text: "" }),
      blockDelta(3, {
        type: "citations_delta",
        citation: {
          type: "web_search_result_location",
          cited_text: "Apple today announced",
          url: "https://www.apple.com/newsroom/",
          title: "Apple Ginza",
          encrypted_index: "Eo8BCioIBxgC"
        }
      }),
      textDelta(3, "Apple reopened Ginza."),
      blockStop(3),
      messageDelta("end_turn", {
        input_tokens: 15665,
        cache_creation_input_tokens: 0,
        cache_read_input_tokens: 0,
        output_tokens: 795,
        server_tool_use: { web_search_requests: 1, web_fetch_requests: 0 }
      }),
      messageStop
    ])
    expect(decoded).toEqual({
      chunks: [
        ...Chunks.textBlock(0, "Based on my search results:\n"),
        ...Chunks.textBlock(1, "Apple reopened Ginza."),
        Chunks.usage({
          inputTokens: 15665,
          outputTokens: 795,
          totalTokens: 16460,
          cacheReadTokens: 0,
          cacheWriteTokens: 0
        }),
        {
          type: "replay-state",
          state: {
            anthropic: {
              content: [
                {
                  type: "server_tool_use",
                  id: "srvtoolu_01Bj",
                  name: "web_search",
                  input: { query: "tech news today" }
                },
                searchResult,
                { type: "text" },
                { type: "text" }
              ]
            }
          }
        },
        Chunks.stop
      ]
    })
  })

  it("stop_reason refusal: usage, then a REFUSAL error finish with the provider's explanation", () => {
    const explanation =
      "This request triggered restrictions on violative cyber content and was blocked under Anthropic's Usage Policy."
    expect(decode([
      messageStart({ ...usage0, input_tokens: 18 }),
      ping,
      messageDelta("refusal", { ...usage0, input_tokens: 18, output_tokens: 5 }, {
        stop_details: { type: "refusal", category: "cyber", explanation, recommended_model: "claude-fable-5" }
      }),
      messageStop
    ])).toEqual({
      chunks: [
        Chunks.usage({ inputTokens: 18, outputTokens: 5, totalTokens: 23, cacheReadTokens: 0, cacheWriteTokens: 0 }),
        {
          type: "finish",
          finish: {
            kind: "error",
            failure: { code: "REFUSAL", retryable: false, message: `Anthropic: the model refused: ${explanation}` }
          }
        }
      ]
    })
  })

  it("a refusal that streamed text names that text", () => {
    const { chunks } = decode([
      messageStart({}),
      blockStart(0, { type: "text", text: "" }),
      textDelta(0, "I can't help with that."),
      blockStop(0),
      messageDelta("refusal", {}),
      messageStop
    ])
    expect(chunks.at(-1)).toEqual({
      type: "finish",
      finish: {
        kind: "error",
        failure: { code: "REFUSAL", retryable: false, message: "Anthropic: the model refused: I can't help with that." }
      }
    })
  })

  it("stop reasons: max_tokens, model_context_window_exceeded, pause_turn, stop_sequence", () => {
    const finishOf = (reason: string) => decode([messageStart({}), messageDelta(reason, {}), messageStop]).chunks.at(-1)
    expect(finishOf("max_tokens")).toEqual({ type: "finish", finish: { kind: "max-tokens" } })
    expect(finishOf("model_context_window_exceeded")).toEqual({
      type: "finish",
      finish: {
        kind: "error",
        failure: {
          code: "CONTEXT_OVERFLOW",
          retryable: false,
          message: "Anthropic: the response exceeded the model's context window"
        }
      }
    })
    expect(finishOf("pause_turn")).toEqual({ type: "finish", finish: { kind: "stop" } })
    expect(finishOf("stop_sequence")).toEqual({ type: "finish", finish: { kind: "stop" } })
  })

  it("a tool call cut by max_tokens finishes max-tokens; arguments that are not JSON otherwise fail", () => {
    const cut = (reason: string) =>
      decode([
        messageStart({}),
        blockStart(0, { type: "tool_use", id: "toolu_1", name: "add", input: {} }),
        jsonDelta(0, "{\"a\":"),
        blockStop(0),
        messageDelta(reason, {}),
        messageStop
      ])
    expect(cut("max_tokens").chunks.at(-1)).toEqual({ type: "finish", finish: { kind: "max-tokens" } })
    expect(cut("tool_use").failure).toEqual({
      code: "MALFORMED_STREAM",
      retryable: false,
      message: "Anthropic: the arguments of tool call toolu_1 (add) are not JSON"
    })
  })

  it("an overloaded error event mid-stream fails with the provider's message, retryable", () => {
    expect(decode([
      messageStart({ input_tokens: 25, output_tokens: 1 }),
      blockStart(0, { type: "text", text: "" }),
      ping,
      textDelta(0, "Hello"),
      { type: "error", error: { type: "overloaded_error", message: "Overloaded" } }
    ])).toEqual({
      chunks: [
        { type: "block-start", index: 0, block: "text" },
        { type: "text-delta", index: 0, text: "Hello" }
      ],
      failure: { code: "OVERLOADED", retryable: true, message: "Anthropic: Overloaded" }
    })
  })

  it("a body cut before message_stop is a retryable NETWORK failure", () => {
    expect(decode([
      messageStart(usage0),
      blockStart(0, { type: "text", text: "" }),
      textDelta(0, "par"),
      blockStop(0),
      messageDelta("end_turn", { output_tokens: 3 })
    ])).toEqual({
      chunks: [
        ...Chunks.textBlock(0, "par")
      ],
      failure: { code: "NETWORK", retryable: true, message: "Anthropic: the response ended before it was complete" }
    })
  })

  it("data that is not JSON is a MALFORMED_STREAM failure", () => {
    expect(decode([messageStart({}), blockStart(0, { type: "text", text: "" }), "{\"type\":"]).failure).toEqual({
      code: "MALFORMED_STREAM",
      retryable: false,
      message: "Anthropic: a stream event is not JSON: {\"type\":"
    })
  })

  it("unknown event and delta types are ignored; events after message_stop add nothing", () => {
    expect(
      decode([
        messageStart({}),
        { type: "content_block_future", index: 0 },
        blockStart(0, { type: "text", text: "" }),
        blockDelta(0, { type: "future_delta", value: 1 }),
        textDelta(0, "ok"),
        blockStop(0),
        messageDelta("end_turn", {}),
        messageStop,
        textDelta(0, "late")
      ]).chunks
    ).toEqual([
      ...Chunks.textBlock(0, "ok"),
      Chunks.stop
    ])
  })

  it("replayContent reads only this adapter's state", () => {
    const content = [{ type: "thinking", thinking: "t", signature: "s" }, { type: "text" }]
    expect(AnthropicEvents.replayContent({ anthropic: { content } })).toEqual(content)
    expect(AnthropicEvents.replayContent({ openai: { items: [] } })).toBeUndefined()
    expect(AnthropicEvents.replayContent(undefined)).toBeUndefined()
    expect(AnthropicEvents.replayContent({ anthropic: { content: "x" } })).toBeUndefined()
  })
})
