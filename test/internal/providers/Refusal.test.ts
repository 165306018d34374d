/**
 * One rule for a refusal, whichever adapter decodes it: what the chunks say is what the message
 * holds. A refusal finishes as a non-retryable `REFUSAL` error, which writes no assistant message,
 * so it streams no text chunk; the refusal's words are the failure's message. The events are
 * written out here, shaped after the recorded refusals of each API (Chat Completions `delta.refusal`,
 * Responses `response.refusal.delta` and a `refusal` content part, Anthropic `stop_reason: "refusal"`).
 */
import { describe, expect, it } from "@effect/vitest"
import { Either } from "effect"
import type { LlmFailure, StreamChunk } from "../../../src/domain/Values.js"
import * as AnthropicEvents from "../../../src/internal/providers/AnthropicEvents.js"
import * as ChatCompletionsEvents from "../../../src/internal/providers/ChatCompletionsEvents.js"
import type { SseEvent } from "../../../src/internal/providers/ProviderHttp.js"
import * as ResponsesEvents from "../../../src/internal/providers/ResponsesEvents.js"

interface Decoder {
  readonly event: (event: SseEvent) => Either.Either<ReadonlyArray<StreamChunk>, LlmFailure>
  readonly end: () => Either.Either<ReadonlyArray<StreamChunk>, LlmFailure>
}

/** Every chunk a decoder yields for `events`, then its end. */
const decode = (decoder: Decoder, events: ReadonlyArray<SseEvent>): ReadonlyArray<StreamChunk> => {
  const chunks: Array<StreamChunk> = []
  for (const event of events) chunks.push(...Either.getOrThrow(decoder.event(event)))
  chunks.push(...Either.getOrThrow(decoder.end()))
  return chunks
}

const typed = (payload: { readonly type: string; readonly [key: string]: unknown }): SseEvent => ({
  event: payload.type,
  data: JSON.stringify(payload)
})

const chatDecoder = (): Decoder => {
  const decoder = ChatCompletionsEvents.make({ provider: "api.example.test", callIdPrefix: "call_1_1_1" })
  return {
    event: (event) => Either.map(decoder.event(event), (step) => step.chunks),
    end: decoder.end
  }
}

const chatChunk = (delta: Record<string, unknown>, finishReason: string | null = null) => ({
  event: "message",
  data: JSON.stringify({
    id: "chatcmpl-1",
    object: "chat.completion.chunk",
    created: 1_727_346_172,
    model: "gpt-4o-2024-08-06",
    choices: [{ index: 0, delta, logprobs: null, finish_reason: finishReason }]
  })
})

const WORDS = "I'm sorry, I can't assist with that request."

const chat: ReadonlyArray<SseEvent> = [
  chatChunk({ role: "assistant", content: null, refusal: "" }),
  chatChunk({ refusal: "I'm sorry," }),
  chatChunk({ refusal: " I can't assist with that request." }),
  chatChunk({}, "stop"),
  { event: "message", data: "[DONE]" }
]

const response = (status: string) => ({
  id: "resp_1",
  object: "response",
  status,
  error: null,
  incomplete_details: null,
  model: "gpt-5.1",
  output: [],
  usage: null
})
const messageItem = (content: ReadonlyArray<unknown>) => ({
  id: "msg_1",
  type: "message",
  status: "completed",
  role: "assistant",
  content
})

const responsesStreamed: ReadonlyArray<SseEvent> = [
  typed({ type: "response.created", response: response("in_progress") }),
  typed({ type: "response.output_item.added", output_index: 0, item: messageItem([]) }),
  typed({
    type: "response.content_part.added",
    item_id: "msg_1",
    output_index: 0,
    content_index: 0,
    part: { type: "refusal", refusal: "" }
  }),
  typed({ type: "response.refusal.delta", item_id: "msg_1", output_index: 0, content_index: 0, delta: "I'm sorry, " }),
  typed({
    type: "response.refusal.delta",
    item_id: "msg_1",
    output_index: 0,
    content_index: 0,
    delta: "I can't assist with that request."
  }),
  typed({ type: "response.refusal.done", item_id: "msg_1", output_index: 0, content_index: 0, refusal: WORDS }),
  typed({
    type: "response.output_item.done",
    output_index: 0,
    item: messageItem([{ type: "refusal", refusal: WORDS }])
  }),
  typed({ type: "response.completed", response: response("completed") })
]

// The refusal only in the finished item (no deltas streamed).
const responsesItemOnly: ReadonlyArray<SseEvent> = [
  typed({ type: "response.created", response: response("in_progress") }),
  typed({
    type: "response.output_item.done",
    output_index: 0,
    item: messageItem([{ type: "refusal", refusal: WORDS }])
  }),
  typed({ type: "response.completed", response: response("completed") })
]

const anthropicUsage = { input_tokens: 18, output_tokens: 1 }
const anthropic: ReadonlyArray<SseEvent> = [
  typed({
    type: "message_start",
    message: {
      model: "claude",
      id: "msg_01",
      type: "message",
      role: "assistant",
      content: [],
      stop_reason: null,
      stop_sequence: null,
      usage: anthropicUsage
    }
  }),
  typed({
    type: "message_delta",
    delta: {
      stop_reason: "refusal",
      stop_sequence: null,
      stop_details: { type: "refusal", category: "cyber", explanation: WORDS }
    },
    usage: { ...anthropicUsage, output_tokens: 5 }
  }),
  typed({ type: "message_stop" })
]

const cases: ReadonlyArray<readonly [string, () => Decoder, ReadonlyArray<SseEvent>]> = [
  ["Chat Completions delta.refusal", chatDecoder, chat],
  ["Responses refusal deltas", ResponsesEvents.makeDecoder, responsesStreamed],
  ["Responses refusal part of a finished item", ResponsesEvents.makeDecoder, responsesItemOnly],
  ["Anthropic stop_reason refusal", AnthropicEvents.makeDecoder, anthropic]
]

describe("a refusal, in every adapter", () => {
  for (const [name, make, events] of cases) {
    it(`${name}: no text chunk; a non-retryable REFUSAL finish whose message holds the refusal's words`, () => {
      const chunks = decode(make(), events)
      expect(chunks.filter((c) => c.type === "text-delta" || (c.type === "block-start" && c.block === "text"))).toEqual(
        []
      )
      const finish = chunks.at(-1)
      expect(finish?.type).toBe("finish")
      if (finish?.type !== "finish" || finish.finish.kind !== "error") throw new Error("not an error finish")
      expect(finish.finish.failure).toMatchObject({ code: "REFUSAL", retryable: false })
      expect(finish.finish.failure.message).toContain(`the model refused: ${WORDS}`)
    })
  }
})
