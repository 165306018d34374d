/**
 * AnthropicEvents: the decoder of one streamed Anthropic Messages API response (its server-sent
 * events) into tiller's stream chunks, and the replay state it leaves for the next request.
 *
 * Content blocks become tiller blocks in order of their starts: `text` a text block, `thinking` a
 * reasoning block, `tool_use` a tool-call block (a call without arguments gets `{}`). Blocks the
 * provider runs or keeps itself (`redacted_thinking`, `server_tool_use`, `web_search_tool_result`
 * and any other type) get no tiller block: they are kept whole for the replay state and never become
 * tiller tool calls. At `message_stop` come the usage, the replay state (when the response holds
 * something the provider needs back) and the finish; a body that ends before `message_stop` is a
 * retryable `NETWORK` failure, an `error` event fails with the provider's own error.
 *
 * @since 0.1.0
 */
import { Either, Predicate } from "effect"
import type { Json } from "../../domain/Json.js"
import type { Finish, LlmFailure, StreamChunk, Usage } from "../../domain/Values.js"
import { failureOf, fromPayload } from "./ProviderFailure.js"
import type { SseEvent } from "./ProviderHttp.js"
import { usageOf } from "./UsageCounts.js"

const PROVIDER = "Anthropic"

/**
 * The key of the Anthropic adapter's replay state: `{ anthropic: { content: [...] } }`.
 *
 * @since 0.1.0
 * @category constants
 */
export const REPLAY_KEY = "anthropic"

/**
 * One entry of the replay state, in the response's content order: a signed `thinking` block, a
 * `redacted_thinking` block, a server block stored whole, or a placeholder (`{type: "text"}`,
 * `{type: "tool_use", id}`) that stands for the message's own text and tool-call blocks.
 *
 * @since 0.1.0
 * @category models
 */
export type ReplayEntry = { readonly type: string } & { readonly [key: string]: Json }

/**
 * The replay entries of an assistant message's `replayState`, or `undefined` when the state is not
 * this adapter's (absent, another adapter's, or not of the expected shape).
 *
 * @since 0.1.0
 * @category conversions
 */
export const replayContent = (state: Json | undefined): ReadonlyArray<ReplayEntry> | undefined => {
  if (!Predicate.isRecord(state)) return undefined
  const own = (state as { readonly [key: string]: Json })[REPLAY_KEY]
  if (!Predicate.isRecord(own)) return undefined
  const content = (own as { readonly [key: string]: Json }).content
  if (!Array.isArray(content)) return undefined
  return (content as ReadonlyArray<Json>).filter((entry): entry is ReplayEntry =>
    Predicate.isRecord(entry) && Predicate.isString((entry as { readonly type?: Json }).type)
  )
}

/**
 * The decoder of one response: `event` turns one event into chunks, `end` is called when the body
 * ends. Either side fails with the `LlmFailure` the response ends with.
 *
 * @since 0.1.0
 * @category models
 */
export interface Decoder {
  readonly event: (event: SseEvent) => Either.Either<ReadonlyArray<StreamChunk>, LlmFailure>
  readonly end: () => Either.Either<ReadonlyArray<StreamChunk>, LlmFailure>
}

type JsonObject = { readonly [key: string]: Json }

type Block =
  | { readonly kind: "text"; readonly index: number; open: boolean; text: string }
  | { readonly kind: "thinking"; readonly index: number; open: boolean; thinking: string; signature: string }
  | {
    readonly kind: "tool_use"
    readonly index: number
    open: boolean
    readonly id: string
    readonly name: string
    readonly startInput: unknown
    json: string
  }
  | { readonly kind: "kept"; readonly block: JsonObject; json: string }

interface Counts {
  input: number | undefined
  output: number | undefined
  cacheRead: number | undefined
  cacheWrite: number | undefined
}

const none: ReadonlyArray<StreamChunk> = []

const malformed = (detail: string): LlmFailure => failureOf("malformed-output", `${PROVIDER}: ${detail}`)

const parseJson = (text: string): Either.Either<unknown, undefined> => {
  try {
    return Either.right(JSON.parse(text))
  } catch {
    return Either.left(undefined)
  }
}

const field = (value: unknown, key: string): unknown => Predicate.hasProperty(value, key) ? value[key] : undefined

const stringOf = (value: unknown, key: string): string | undefined => {
  const found = field(value, key)
  return Predicate.isString(found) ? found : undefined
}

/** Reads the counts of a `usage` object; a count that is present overrides the earlier one. */
const readCounts = (usage: unknown, counts: Counts): void => {
  const read = (key: string): number | undefined => {
    const value = field(usage, key)
    return Predicate.isNumber(value) ? value : undefined
  }
  counts.input = read("input_tokens") ?? counts.input
  counts.output = read("output_tokens") ?? counts.output
  counts.cacheRead = read("cache_read_input_tokens") ?? counts.cacheRead
  counts.cacheWrite = read("cache_creation_input_tokens") ?? counts.cacheWrite
}

const toUsage = (counts: Counts): Usage | undefined => {
  const usage = usageOf({
    inputTokens: counts.input,
    outputTokens: counts.output,
    totalTokens: counts.input !== undefined && counts.output !== undefined ? counts.input + counts.output : undefined,
    cacheReadTokens: counts.cacheRead
  })
  const cacheWrite = counts.cacheWrite
  return usage === undefined || cacheWrite === undefined || !Number.isSafeInteger(cacheWrite) || cacheWrite < 0
    ? usage
    : { ...usage, cacheWriteTokens: cacheWrite }
}

const refusalFinish = (text: string, details: unknown): Finish => {
  const said = text.trim() !== "" ? text : stringOf(details, "explanation") ?? ""
  return {
    kind: "error",
    failure: failureOf("refusal", `${PROVIDER}: the model refused${said.trim() === "" ? "" : `: ${said}`}`)
  }
}

/**
 * Maps a `stop_reason`: `max_tokens` is `max-tokens`, `refusal` a `REFUSAL` error (with the refusal
 * text, else the provider's explanation), `model_context_window_exceeded` a `CONTEXT_OVERFLOW` error,
 * any other reason (`end_turn`, `tool_use`, `stop_sequence`, `pause_turn`) `stop`.
 */
const toFinish = (reason: string | undefined, text: string, details: unknown): Finish => {
  switch (reason) {
    case "max_tokens":
      return { kind: "max-tokens" }
    case "refusal":
      return refusalFinish(text, details)
    case "model_context_window_exceeded":
      return {
        kind: "error",
        failure: failureOf("context-overflow", `${PROVIDER}: the response exceeded the model's context window`)
      }
    default:
      return { kind: "stop" }
  }
}

/** The block a replay entry stores for a kept block: the block with its streamed input parsed. */
const keptEntry = (block: JsonObject, json: string): ReplayEntry => {
  if (json.trim() === "") return block as ReplayEntry
  const parsed = parseJson(json)
  return (Either.isRight(parsed) ? { ...block, input: parsed.right as Json } : block) as ReplayEntry
}

/**
 * The decoder of one streamed response. Events are told apart by their payload's `type` (the SSE
 * `event` name repeats it); unknown event and delta types are ignored, as the API's versioning
 * policy asks. A payload that is not a JSON object is a `MALFORMED_STREAM` failure.
 *
 * @since 0.1.0
 * @category constructors
 */
export const makeDecoder = (): Decoder => {
  let nextIndex = 0
  const blocks = new Map<number, Block>()
  const order: Array<Block> = []
  const counts: Counts = { input: undefined, output: undefined, cacheRead: undefined, cacheWrite: undefined }
  let stopReason: string | undefined
  let stopDetails: unknown
  let done = false

  const close = (block: Block, out: Array<StreamChunk>): void => {
    if (block.kind === "kept" || !block.open) return
    if (block.kind === "tool_use" && block.json.trim() === "") {
      const start = block.startInput
      const given = Predicate.isRecord(start) && Object.keys(start).length > 0 ? JSON.stringify(start) : "{}"
      block.json = given
      out.push({ type: "tool-call-delta", index: block.index, arguments: given })
    }
    block.open = false
    out.push({ type: "block-end", index: block.index })
  }

  const start = (position: number, content: unknown, out: Array<StreamChunk>): LlmFailure | undefined => {
    const type = stringOf(content, "type")
    if (type === undefined) return malformed("a content block has no type")
    const previous = blocks.get(position)
    if (previous !== undefined) close(previous, out)
    let block: Block
    switch (type) {
      case "text": {
        const text = stringOf(content, "text") ?? ""
        block = { kind: "text", index: nextIndex++, open: true, text }
        out.push({ type: "block-start", index: block.index, block: "text" })
        if (text !== "") out.push({ type: "text-delta", index: block.index, text })
        break
      }
      case "thinking": {
        const thinking = stringOf(content, "thinking") ?? ""
        block = {
          kind: "thinking",
          index: nextIndex++,
          open: true,
          thinking,
          signature: stringOf(content, "signature") ?? ""
        }
        out.push({ type: "block-start", index: block.index, block: "reasoning" })
        if (thinking !== "") out.push({ type: "reasoning-delta", index: block.index, text: thinking })
        break
      }
      case "tool_use": {
        const id = stringOf(content, "id")
        const name = stringOf(content, "name")
        if (id === undefined || name === undefined) return malformed("a tool_use block has no id or name")
        block = {
          kind: "tool_use",
          index: nextIndex++,
          open: true,
          id,
          name,
          startInput: field(content, "input"),
          json: ""
        }
        out.push({ type: "block-start", index: block.index, block: "tool-call", id, name })
        break
      }
      default:
        block = { kind: "kept", block: content as JsonObject, json: "" }
    }
    blocks.set(position, block)
    order.push(block)
    return undefined
  }

  const delta = (block: Block, payload: unknown, out: Array<StreamChunk>): void => {
    switch (stringOf(payload, "type")) {
      case "text_delta": {
        const text = stringOf(payload, "text")
        if (block.kind !== "text" || text === undefined || text === "") return
        block.text += text
        out.push({ type: "text-delta", index: block.index, text })
        return
      }
      case "thinking_delta": {
        const thinking = stringOf(payload, "thinking")
        if (block.kind !== "thinking" || thinking === undefined || thinking === "") return
        block.thinking += thinking
        out.push({ type: "reasoning-delta", index: block.index, text: thinking })
        return
      }
      case "signature_delta": {
        const signature = stringOf(payload, "signature")
        if (block.kind === "thinking" && signature !== undefined) block.signature += signature
        return
      }
      case "input_json_delta": {
        const partial = stringOf(payload, "partial_json")
        if (partial === undefined || partial === "") return
        if (block.kind === "tool_use") {
          block.json += partial
          out.push({ type: "tool-call-delta", index: block.index, arguments: partial })
        } else if (block.kind === "kept") {
          block.json += partial
        }
        return
      }
      default:
        // citations_delta and delta types added later carry nothing tiller keeps.
        return
    }
  }

  const replayState = (): Json | undefined => {
    const content: Array<ReplayEntry> = []
    let needed = false
    for (const block of order) {
      switch (block.kind) {
        case "text":
          if (block.text !== "") content.push({ type: "text" })
          break
        case "thinking":
          // Thinking without a signature cannot be sent back.
          if (block.signature !== "") {
            content.push({ type: "thinking", thinking: block.thinking, signature: block.signature })
            needed = true
          }
          break
        case "tool_use":
          content.push({ type: "tool_use", id: block.id })
          break
        case "kept":
          content.push(keptEntry(block.block, block.json))
          needed = true
          break
      }
    }
    return needed ? { [REPLAY_KEY]: { content } } : undefined
  }

  const finish = (): Either.Either<ReadonlyArray<StreamChunk>, LlmFailure> => {
    const out: Array<StreamChunk> = []
    for (const block of order) close(block, out)
    const text = order.map((block) => block.kind === "text" ? block.text : "").join("")
    const end = toFinish(stopReason, text, stopDetails)
    if (end.kind === "stop") {
      for (const block of order) {
        if (block.kind === "tool_use" && Either.isLeft(parseJson(block.json))) {
          return Either.left(malformed(`the arguments of tool call ${block.id} (${block.name}) are not JSON`))
        }
      }
    }
    const usage = toUsage(counts)
    if (usage !== undefined) out.push({ type: "usage", usage })
    const state = end.kind === "error" ? undefined : replayState()
    if (state !== undefined) out.push({ type: "replay-state", state })
    out.push({ type: "finish", finish: end })
    done = true
    return Either.right(out)
  }

  const event = (sse: SseEvent): Either.Either<ReadonlyArray<StreamChunk>, LlmFailure> => {
    if (done) return Either.right(none)
    const parsed = parseJson(sse.data)
    if (Either.isLeft(parsed) || !Predicate.isRecord(parsed.right)) {
      if (sse.event === "error") return Either.left(fromPayload(PROVIDER, sse.data))
      return Either.left(malformed(`a stream event is not JSON: ${sse.data.slice(0, 100)}`))
    }
    const payload = parsed.right
    const type = stringOf(payload, "type") ?? sse.event
    const out: Array<StreamChunk> = []
    switch (type) {
      case "message_start":
        readCounts(field(field(payload, "message"), "usage"), counts)
        return Either.right(none)
      case "content_block_start": {
        const position = field(payload, "index")
        if (!Predicate.isNumber(position)) return Either.left(malformed("a content block has no index"))
        const failure = start(position, field(payload, "content_block"), out)
        return failure === undefined ? Either.right(out) : Either.left(failure)
      }
      case "content_block_delta": {
        const position = field(payload, "index")
        const block = Predicate.isNumber(position) ? blocks.get(position) : undefined
        if (block !== undefined) delta(block, field(payload, "delta"), out)
        return Either.right(out)
      }
      case "content_block_stop": {
        const position = field(payload, "index")
        const block = Predicate.isNumber(position) ? blocks.get(position) : undefined
        if (block !== undefined) close(block, out)
        return Either.right(out)
      }
      case "message_delta": {
        const reason = stringOf(field(payload, "delta"), "stop_reason")
        if (reason !== undefined) stopReason = reason
        const details = field(field(payload, "delta"), "stop_details")
        if (details !== undefined && details !== null) stopDetails = details
        readCounts(field(payload, "usage"), counts)
        return Either.right(none)
      }
      case "message_stop":
        return finish()
      case "error":
        return Either.left(fromPayload(PROVIDER, payload))
      default:
        // ping, and event types added later.
        return Either.right(none)
    }
  }

  return {
    event,
    end: () =>
      done
        ? Either.right(none)
        : Either.left(failureOf("network", `${PROVIDER}: the response ended before it was complete`))
  }
}
