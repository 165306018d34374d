/**
 * The decoder of one streamed Chat Completions response: server-sent events in, tiller's chunks out.
 *
 * Every data event is decoded with tiller's own schema of a `chat.completion.chunk` (fields it does
 * not read, such as Azure's `prompt_filter_results` or `obfuscation`, are ignored). The usage may
 * come in a choices-less final chunk, on the finish chunk, or in Groq's `x_groq.usage`; the last one
 * reported wins. Error payloads in the stream (`{error:{...}}`, also next to a `finish_reason:
 * "error"`, and `event: error`) are classified through the shared failure table with the host's
 * message kept.
 *
 * @since 0.1.0
 */
import { Either, Predicate, Schema } from "effect"
import * as SafeDecode from "../../domain/SafeDecode.js"
import type { LlmFailure, StreamChunk, Usage } from "../../domain/Values.js"
import { failureOf, fromPayload } from "./ProviderFailure.js"
import type { SseEvent } from "./ProviderHttp.js"
import { usageOf } from "./UsageCounts.js"

/**
 * The key of this adapter's entry in a message's replay state.
 *
 * @since 0.1.0
 * @category constants
 */
export const REPLAY_KEY = "openai-compatible"

/**
 * The delta field a host streams reasoning in, and expects it back in.
 *
 * @since 0.1.0
 * @category models
 */
export type ReasoningField = "reasoning_content" | "reasoning"

/**
 * The reasoning field recorded in an assistant message's replay state, if this adapter wrote one.
 *
 * @since 0.1.0
 * @category replay
 */
export const reasoningFieldOf = (replayState: unknown): ReasoningField | undefined => {
  const own = Predicate.hasProperty(replayState, REPLAY_KEY) ? replayState[REPLAY_KEY] : undefined
  const field = Predicate.hasProperty(own, "reasoningField") ? own.reasoningField : undefined
  return field === "reasoning_content" || field === "reasoning" ? field : undefined
}

const OptionalString = Schema.optional(Schema.NullOr(Schema.String))
const OptionalCount = Schema.optional(Schema.NullOr(Schema.Number))

const WireToolCallDelta = Schema.Struct({
  index: Schema.optional(Schema.NullOr(Schema.Number)),
  id: OptionalString,
  function: Schema.optional(Schema.NullOr(Schema.Struct({ name: OptionalString, arguments: OptionalString })))
})

const WireChoice = Schema.Struct({
  index: Schema.optional(Schema.NullOr(Schema.Number)),
  delta: Schema.optional(Schema.NullOr(Schema.Struct({
    content: OptionalString,
    refusal: OptionalString,
    reasoning_content: OptionalString,
    reasoning: OptionalString,
    tool_calls: Schema.optional(Schema.NullOr(Schema.Array(WireToolCallDelta)))
  }))),
  finish_reason: OptionalString
})

const WireUsage = Schema.Struct({
  prompt_tokens: OptionalCount,
  completion_tokens: OptionalCount,
  total_tokens: OptionalCount,
  prompt_cache_hit_tokens: OptionalCount,
  cached_tokens: OptionalCount,
  cache_read_input_tokens: OptionalCount,
  cache_creation_input_tokens: OptionalCount,
  prompt_tokens_details: Schema.optional(
    Schema.NullOr(Schema.Struct({ cached_tokens: OptionalCount, cache_write_tokens: OptionalCount }))
  ),
  completion_tokens_details: Schema.optional(Schema.NullOr(Schema.Struct({ reasoning_tokens: OptionalCount })))
})

/**
 * A `chat.completion.chunk`, or an error object some hosts send in the stream: `{error: {...}}`,
 * or the flat `{object: "error", message, type, code}` of older vLLM servers.
 */
const WireChunk = Schema.Struct({
  object: OptionalString,
  choices: Schema.optional(Schema.NullOr(Schema.Array(WireChoice))),
  usage: Schema.optional(Schema.NullOr(WireUsage)),
  x_groq: Schema.optional(Schema.NullOr(Schema.Struct({ usage: Schema.optional(Schema.NullOr(WireUsage)) }))),
  error: Schema.optional(Schema.Unknown)
})

const decodeWireChunk = SafeDecode.decodeUnknownEither(Schema.parseJson(WireChunk))

type WireDelta = NonNullable<(typeof WireChoice.Type)["delta"]>

/**
 * The reasoning of a delta and the field it came in; `reasoning_content` first, since hosts that
 * send both fields repeat the same text in each.
 */
const reasoningOf = (
  delta: WireDelta | undefined
): { readonly field: ReasoningField; readonly text: string } | undefined => {
  const content = delta?.reasoning_content ?? ""
  if (content !== "") return { field: "reasoning_content", text: content }
  const reasoning = delta?.reasoning ?? ""
  return reasoning === "" ? undefined : { field: "reasoning", text: reasoning }
}

/**
 * The usage of a chunk. Hosts report the cached part of the prompt (included in `prompt_tokens`)
 * in different places: OpenAI, xAI, Alibaba, DeepSeek and OpenRouter in
 * `prompt_tokens_details.cached_tokens`, DeepSeek also as `prompt_cache_hit_tokens`, Moonshot as
 * `cached_tokens`, LiteLLM in front of Anthropic as `cache_read_input_tokens`; the tokens written to
 * the cache as OpenRouter's `prompt_tokens_details.cache_write_tokens` or LiteLLM's
 * `cache_creation_input_tokens`.
 */
const toUsage = (usage: typeof WireUsage.Type): Usage | undefined =>
  usageOf({
    inputTokens: usage.prompt_tokens,
    outputTokens: usage.completion_tokens,
    totalTokens: usage.total_tokens,
    reasoningTokens: usage.completion_tokens_details?.reasoning_tokens,
    cacheReadTokens: usage.prompt_tokens_details?.cached_tokens ?? usage.prompt_cache_hit_tokens ??
      usage.cached_tokens ??
      usage.cache_read_input_tokens,
    cacheWriteTokens: usage.prompt_tokens_details?.cache_write_tokens ?? usage.cache_creation_input_tokens
  })

/**
 * What one event produced: chunks, and whether the response is complete (`[DONE]`, after which
 * nothing more is read).
 *
 * @since 0.1.0
 * @category models
 */
export interface Step {
  readonly chunks: ReadonlyArray<StreamChunk>
  readonly done: boolean
}

/**
 * The decoder of one response: `event` for each server-sent event, `end` once the body has ended
 * (nothing when `[DONE]` already completed the response).
 *
 * @since 0.1.0
 * @category models
 */
export interface Decoder {
  readonly event: (event: SseEvent) => Either.Either<Step, LlmFailure>
  readonly end: () => Either.Either<ReadonlyArray<StreamChunk>, LlmFailure>
}

interface ToolCallState {
  id: string
  name: string | undefined
  block: number | undefined
  arguments: string
  pending: string
}

const MAX_QUOTED = 200

const parsePayload = (data: string): unknown => {
  try {
    return JSON.parse(data)
  } catch {
    return data
  }
}

/**
 * A decoder for one response from the host named `provider` (the prefix of every failure message).
 *
 * Block indexes are allocated in order of the blocks' starts. Reasoning and text deltas extend the
 * open block of their kind and close the other one; a refusal streams no text. The first tool call delta
 * closes both. Tool calls are tracked by their `index` (a delta with a new `id` at a known index is
 * a new call, as some hosts send every call at index 0); a call's block starts once its name is
 * known, with the call's `id` or, when the host sends none, `{callIdPrefix}_{n}`. The finish reason
 * closes every open block (a call without arguments gets `{}`; arguments that are not JSON fail
 * unless the reason is `length`). At `[DONE]`, or at the end of a body that had a finish reason,
 * come the usage, the replay state (the reasoning field, when reasoning was streamed) and the
 * finish; a refusal finishes as a `REFUSAL` error whose message holds its words. A body that ends with neither is a retryable
 * `NETWORK` failure: the host cut the response.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (context: { readonly provider: string; readonly callIdPrefix: string }): Decoder => {
  const label = context.provider
  let nextBlock = 0
  let text: number | undefined
  let reasoning: number | undefined
  let reasoningField: ReasoningField | undefined
  let refusal = ""
  const calls: Array<ToolCallState> = []
  const byIndex = new Map<number, ToolCallState>()
  let finishReason: string | undefined
  let usage: Usage | undefined
  let completed = false
  const none: Step = { chunks: [], done: false }

  const malformed = (message: string) => failureOf("malformed-output", `${label}: ${message}`)

  const close = (out: Array<StreamChunk>, index: number | undefined): undefined => {
    if (index !== undefined) out.push({ type: "block-end", index })
    return undefined
  }

  const startCall = (out: Array<StreamChunk>, call: ToolCallState) => {
    if (call.block !== undefined || call.name === undefined) return
    call.block = nextBlock++
    out.push({ type: "block-start", index: call.block, block: "tool-call", id: call.id, name: call.name })
    if (call.pending !== "") out.push({ type: "tool-call-delta", index: call.block, arguments: call.pending })
    call.pending = ""
  }

  const toolCallDelta = (out: Array<StreamChunk>, delta: typeof WireToolCallDelta.Type, position: number) => {
    const key = delta.index ?? position
    const id = delta.id ?? undefined
    let call = byIndex.get(key)
    if (call === undefined || (id !== undefined && id !== "" && id !== call.id)) {
      call = {
        id: id !== undefined && id !== "" ? id : `${context.callIdPrefix}_${calls.length}`,
        name: undefined,
        block: undefined,
        arguments: "",
        pending: ""
      }
      calls.push(call)
      byIndex.set(key, call)
    }
    const name = delta.function?.name ?? undefined
    if (call.name === undefined && name !== undefined && name !== "") call.name = name
    const piece = delta.function?.arguments ?? ""
    call.arguments += piece
    if (call.block === undefined) {
      call.pending += piece
      startCall(out, call)
    } else if (piece !== "") {
      out.push({ type: "tool-call-delta", index: call.block, arguments: piece })
    }
  }

  const textDelta = (out: Array<StreamChunk>, piece: string) => {
    reasoning = close(out, reasoning)
    if (text === undefined) {
      text = nextBlock++
      out.push({ type: "block-start", index: text, block: "text" })
    }
    out.push({ type: "text-delta", index: text, text: piece })
  }

  /** Closes every open block; fails on a call without a name or with arguments that are not JSON. */
  const closeAll = (out: Array<StreamChunk>, reason: string): LlmFailure | undefined => {
    reasoning = close(out, reasoning)
    text = close(out, text)
    for (const call of calls) {
      if (call.name === undefined) return malformed(`tool call ${call.id} has no name`)
      startCall(out, call)
      const index = call.block!
      if (reason !== "length") {
        if (call.arguments.trim() === "") {
          out.push({ type: "tool-call-delta", index, arguments: "{}" })
        } else {
          try {
            JSON.parse(call.arguments)
          } catch {
            return malformed(`the arguments of tool call ${call.id} (${call.name}) are not JSON`)
          }
        }
      }
      out.push({ type: "block-end", index })
    }
    return undefined
  }

  const finishChunk = (reason: string): StreamChunk => {
    if (refusal !== "") {
      return {
        type: "finish",
        finish: { kind: "error", failure: failureOf("refusal", `${label}: the model refused: ${refusal}`) }
      }
    }
    switch (reason) {
      case "length":
        return { type: "finish", finish: { kind: "max-tokens" } }
      case "content_filter":
        return {
          type: "finish",
          finish: {
            kind: "error",
            failure: failureOf("content-filter", `${label}: the content filter stopped the response`)
          }
        }
      case "error":
        return {
          type: "finish",
          finish: {
            kind: "error",
            failure: failureOf("provider", `${label}: the response finished with reason "error"`)
          }
        }
      default:
        return { type: "finish", finish: { kind: "stop" } }
    }
  }

  /** The usage, replay state and finish that complete the response. */
  const complete = (): Either.Either<ReadonlyArray<StreamChunk>, LlmFailure> => {
    completed = true
    const out: Array<StreamChunk> = []
    if (finishReason === undefined) {
      // `[DONE]` without a finish reason: the host ended the response without saying why.
      const failure = closeAll(out, "stop")
      if (failure !== undefined) return Either.left(failure)
    }
    if (usage !== undefined) out.push({ type: "usage", usage })
    if (reasoningField !== undefined) {
      out.push({ type: "replay-state", state: { [REPLAY_KEY]: { reasoningField } } })
    }
    out.push(finishChunk(finishReason ?? "stop"))
    return Either.right(out)
  }

  const payload = (data: string): Either.Either<Step, LlmFailure> => {
    const decoded = decodeWireChunk(data)
    if (Either.isLeft(decoded)) {
      return Either.left(malformed(`a stream event is not a chat completion chunk: ${data.slice(0, MAX_QUOTED)}`))
    }
    const chunk = decoded.right
    if (chunk.error !== undefined && chunk.error !== null) return Either.left(fromPayload(label, chunk))
    if (chunk.object === "error") return Either.left(fromPayload(label, parsePayload(data)))
    const reported = chunk.usage ?? chunk.x_groq?.usage ?? undefined
    if (reported !== undefined) usage = toUsage(reported) ?? usage
    // Only the first choice is read; tiller never asks for more than one.
    const choice = chunk.choices?.find((c) => (c.index ?? 0) === 0)
    if (choice === undefined || finishReason !== undefined) return Either.right(none)
    const out: Array<StreamChunk> = []
    const delta = choice.delta ?? undefined
    const thought = reasoningOf(delta)
    if (thought !== undefined) {
      reasoningField ??= thought.field
      text = close(out, text)
      if (reasoning === undefined) {
        reasoning = nextBlock++
        out.push({ type: "block-start", index: reasoning, block: "reasoning" })
      }
      out.push({ type: "reasoning-delta", index: reasoning, text: thought.text })
    }
    const content = delta?.content ?? undefined
    if (content !== undefined && content !== "") textDelta(out, content)
    const refused = delta?.refusal ?? undefined
    // A refusal is not text: its words are the REFUSAL failure's message, never a text chunk (no
    // message would hold it: an error finish writes none).
    if (refused !== undefined && refused !== "") refusal += refused
    const toolCalls = delta?.tool_calls ?? undefined
    if (toolCalls !== undefined && toolCalls.length > 0) {
      reasoning = close(out, reasoning)
      text = close(out, text)
      toolCalls.forEach((call, position) => toolCallDelta(out, call, position))
    }
    // Some hosts send an empty finish reason on every delta.
    const reason = choice.finish_reason === "" ? undefined : choice.finish_reason ?? undefined
    if (reason !== undefined) {
      finishReason = reason
      const failure = closeAll(out, reason)
      if (failure !== undefined) return Either.left(failure)
    }
    return Either.right({ chunks: out, done: false })
  }

  return {
    event: (e) => {
      if (completed) return Either.right({ chunks: [], done: true })
      if (e.data.trim() === "[DONE]") return Either.map(complete(), (chunks) => ({ chunks, done: true }))
      if (e.event === "error") return Either.left(fromPayload(label, parsePayload(e.data)))
      return e.data.trim() === "" ? Either.right(none) : payload(e.data)
    },
    end: () => {
      if (completed) return Either.right([])
      if (finishReason === undefined) {
        completed = true
        return Either.left(failureOf("network", `${label}: the response ended before it was complete`))
      }
      return complete()
    }
  }
}
