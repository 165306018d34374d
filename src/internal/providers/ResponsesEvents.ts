/**
 * ResponsesEvents: the decoder of one streamed OpenAI Responses API response (`stream: true`) into
 * tiller's stream chunks, and the replay state it leaves for the next request.
 *
 * Output items become blocks in the order they start: a `message` item is one text block (its
 * `output_text` parts; a `refusal` part streams no text, its words are the `REFUSAL` failure's), each summary part of a `reasoning` item one reasoning block
 * (its text exactly as streamed), a `function_call` item one tool-call block whose id is the item's
 * `call_id`. Provider-executed items (`web_search_call`, `file_search_call`, ...) and items of an
 * unknown type produce no block and never fail the stream; unknown event types are ignored.
 *
 * `response.completed` ends the response with `usage`, then one `replay-state` chunk when a
 * reasoning item carried `encrypted_content`, then `finish`; `response.incomplete` finishes with
 * `max-tokens` (reason `max_output_tokens`) or a `CONTENT_FILTER` error; an `error` event or
 * `response.failed` fails the stream with the provider's own message, classified by
 * `ProviderFailure`. A body that ends before any of those is a retryable `NETWORK` failure.
 *
 * @since 0.1.0
 */
import { Either, Schema } from "effect"
import type { Json } from "../../domain/Json.js"
import * as SafeDecode from "../../domain/SafeDecode.js"
import type { LlmFailure, StreamChunk, Usage } from "../../domain/Values.js"
import { failureOf, fromPayload, shorten } from "./ProviderFailure.js"
import { REPLAY_KEY, type ReplayItem, replayOf, type ReplayState } from "./ResponsesReplay.js"
import { usageOf } from "./UsageCounts.js"

const PROVIDER = "OpenAI"

// ---------------------------------------------------------------------------------------------------
// Wire shapes: only the fields the decoder reads; everything else passes.

const Str = Schema.optional(Schema.NullOr(Schema.String))
const Num = Schema.optional(Schema.NullOr(Schema.Number))

const ContentPart = Schema.Struct({ type: Schema.String, text: Str, refusal: Str })

const WireItem = Schema.Struct({
  type: Schema.String,
  id: Str,
  call_id: Str,
  name: Str,
  arguments: Str,
  content: Schema.optional(Schema.NullOr(Schema.Array(ContentPart))),
  summary: Schema.optional(Schema.NullOr(Schema.Array(ContentPart)))
})

const ItemEvent = Schema.Struct({ output_index: Num, item: WireItem })

const DeltaEvent = Schema.Struct({ item_id: Str, output_index: Num, summary_index: Num, delta: Schema.String })

const ArgumentsDone = Schema.Struct({ item_id: Str, output_index: Num, arguments: Str })

const WireUsage = Schema.Struct({
  input_tokens: Num,
  output_tokens: Num,
  total_tokens: Num,
  input_tokens_details: Schema.optional(Schema.NullOr(Schema.Struct({ cached_tokens: Num }))),
  output_tokens_details: Schema.optional(Schema.NullOr(Schema.Struct({ reasoning_tokens: Num })))
})

const ResponseEvent = Schema.Struct({
  response: Schema.Struct({
    usage: Schema.optional(Schema.NullOr(WireUsage)),
    error: Schema.optional(Schema.Unknown),
    incomplete_details: Schema.optional(Schema.NullOr(Schema.Struct({ reason: Str })))
  })
})

const Typed = Schema.Struct({ type: Schema.String })

const decodeJson = SafeDecode.decodeUnknownEither(Schema.parseJson())
const decodeTyped = SafeDecode.decodeUnknownEither(Typed)
const decodeItem = SafeDecode.decodeUnknownEither(ItemEvent)
const decodeDelta = SafeDecode.decodeUnknownEither(DeltaEvent)
const decodeArgumentsDone = SafeDecode.decodeUnknownEither(ArgumentsDone)
const decodeResponse = SafeDecode.decodeUnknownEither(ResponseEvent)

// ---------------------------------------------------------------------------------------------------
// Decoder state

/** Where an event says its item is: the item's id and its place in the output. */
interface Located {
  readonly item_id?: string | null | undefined
  readonly output_index?: number | null | undefined
}

type ItemKind = "message" | "reasoning" | "function_call" | "other"

interface ItemState {
  readonly kind: ItemKind
  /** The tiller block of this item, once started. */
  block: number | undefined
  closed: boolean
  /** Whether any delta was streamed (a `done` item then adds nothing). */
  streamed: boolean
  /** The summary part the open reasoning block holds. */
  summaryIndex: number | undefined
  refusal: string
  callId: string
  name: string | undefined
  arguments: string
  /** Arguments received before the call's name was known. */
  pending: string
  /** The reasoning item to send back, from its latest `added` / `done` event. */
  replay: ReplayItem | undefined
}

/**
 * What one event produced: the chunks, or the failure that ends the stream.
 *
 * @since 0.1.0
 * @category models
 */
export type Decoded = Either.Either<ReadonlyArray<StreamChunk>, LlmFailure>

/**
 * A decoder of one response: `event` feeds one server-sent event (its `data` is the JSON payload;
 * its `event` name is used when the payload has no `type`), `end` is called when the body ends.
 * Events after the response's end are ignored.
 *
 * @since 0.1.0
 * @category models
 */
export interface ResponsesDecoder {
  readonly event: (event: { readonly event: string; readonly data: string }) => Decoded
  readonly end: () => Decoded
}

const none: ReadonlyArray<StreamChunk> = []

const malformed = (message: string): LlmFailure => failureOf("malformed-output", `${PROVIDER}: ${message}`)

const toUsage = (usage: typeof WireUsage.Type): Usage | undefined =>
  usageOf({
    inputTokens: usage.input_tokens,
    outputTokens: usage.output_tokens,
    totalTokens: usage.total_tokens,
    reasoningTokens: usage.output_tokens_details?.reasoning_tokens,
    cacheReadTokens: usage.input_tokens_details?.cached_tokens
  })

const kindOfItem = (type: string): ItemKind =>
  type === "message" || type === "reasoning" || type === "function_call" ? type : "other"

/**
 * A decoder for one streamed response.
 *
 * @since 0.1.0
 * @category constructors
 */
export const makeDecoder = (): ResponsesDecoder => {
  let nextBlock = 0
  let ended = false
  const items: Array<ItemState> = []
  const byId = new Map<string, ItemState>()
  const byIndex = new Map<number, ItemState>()

  const register = (state: ItemState, id: string | null | undefined, index: number | null | undefined) => {
    items.push(state)
    if (id !== undefined && id !== null && id !== "") byId.set(id, state)
    if (index !== undefined && index !== null) byIndex.set(index, state)
    return state
  }

  const fresh = (kind: ItemKind, callId = ""): ItemState => ({
    kind,
    block: undefined,
    closed: false,
    streamed: false,
    summaryIndex: undefined,
    refusal: "",
    callId,
    name: undefined,
    arguments: "",
    pending: "",
    replay: undefined
  })

  const lookup = (id: string | null | undefined, index: number | null | undefined): ItemState | undefined =>
    (id === undefined || id === null ? undefined : byId.get(id)) ??
      (index === undefined || index === null ? undefined : byIndex.get(index))

  /** The item a delta belongs to; an item never announced is created as `kind`. */
  const itemFor = (kind: ItemKind, id: string | null | undefined, index: number | null | undefined) => {
    const known = lookup(id, index)
    if (known !== undefined) return known
    return register(fresh(kind, id ?? `item_${items.length}`), id, index)
  }

  const open = (out: Array<StreamChunk>, state: ItemState, block: "text" | "reasoning") => {
    if (state.block !== undefined) return state.block
    state.block = nextBlock++
    out.push({ type: "block-start", index: state.block, block })
    return state.block
  }

  const startCall = (out: Array<StreamChunk>, state: ItemState) => {
    if (state.block !== undefined || state.name === undefined) return
    state.block = nextBlock++
    out.push({ type: "block-start", index: state.block, block: "tool-call", id: state.callId, name: state.name })
    if (state.pending !== "") out.push({ type: "tool-call-delta", index: state.block, arguments: state.pending })
    state.pending = ""
  }

  const appendArguments = (out: Array<StreamChunk>, state: ItemState, piece: string) => {
    if (piece === "") return
    state.arguments += piece
    if (state.block === undefined) state.pending += piece
    else out.push({ type: "tool-call-delta", index: state.block, arguments: piece })
  }

  const appendText = (out: Array<StreamChunk>, state: ItemState, text: string) => {
    if (text === "") return
    state.streamed = true
    out.push({ type: "text-delta", index: open(out, state, "text"), text })
  }

  const appendReasoning = (out: Array<StreamChunk>, state: ItemState, text: string, part: number) => {
    if (text === "") return
    if (state.block !== undefined && state.summaryIndex !== part) {
      // A new summary part: a block of its own.
      out.push({ type: "block-end", index: state.block })
      state.block = undefined
    }
    state.summaryIndex = part
    state.streamed = true
    out.push({ type: "reasoning-delta", index: open(out, state, "reasoning"), text })
  }

  /** Closes an item's block; a call without arguments gets `{}`. */
  const close = (out: Array<StreamChunk>, state: ItemState) => {
    if (state.closed) return
    state.closed = true
    if (state.kind === "function_call") {
      startCall(out, state)
      if (state.block !== undefined && state.arguments.trim() === "") {
        state.arguments = "{}"
        out.push({ type: "tool-call-delta", index: state.block, arguments: "{}" })
      }
    }
    if (state.block !== undefined) out.push({ type: "block-end", index: state.block })
  }

  const added = (event: typeof ItemEvent.Type, raw: unknown) => {
    const item = event.item
    const kind = kindOfItem(item.type)
    const state = lookup(item.id, event.output_index) ??
      register(fresh(kind, item.call_id ?? item.id ?? `item_${items.length}`), item.id, event.output_index)
    const out: Array<StreamChunk> = []
    if (kind === "function_call") {
      // An item first seen through its deltas is known by its item id until its call id comes.
      if (state.block === undefined && item.call_id !== undefined && item.call_id !== null && item.call_id !== "") {
        state.callId = item.call_id
      }
      if (state.name === undefined && item.name !== undefined && item.name !== null && item.name !== "") {
        state.name = item.name
      }
      startCall(out, state)
    }
    if (kind === "reasoning") state.replay = replayOf(raw) ?? state.replay
    return out
  }

  /** A finished item: what was not streamed is taken from the item itself, then the block closes. */
  const done = (event: typeof ItemEvent.Type, raw: unknown) => {
    const out: Array<StreamChunk> = [...added(event, raw)]
    const item = event.item
    const state = lookup(item.id, event.output_index)!
    if (state.closed) return out
    if (state.kind === "message" && !state.streamed) {
      for (const part of item.content ?? []) {
        if (part.type === "output_text") appendText(out, state, part.text ?? "")
        if (part.type === "refusal") state.refusal += part.refusal ?? ""
      }
    }
    if (state.kind === "reasoning" && !state.streamed) {
      for (const [part, summary] of (item.summary ?? []).entries()) {
        appendReasoning(out, state, summary.text ?? "", part)
      }
    }
    if (state.kind === "function_call" && state.arguments === "") {
      appendArguments(out, state, item.arguments ?? "")
    }
    close(out, state)
    return out
  }

  const replayState = (): ReadonlyArray<StreamChunk> => {
    const replay: Array<ReplayItem> = []
    for (const state of items) {
      if (state.kind === "reasoning" && state.replay !== undefined) replay.push(state.replay)
      if (state.kind === "message" && state.block !== undefined) replay.push({ type: "message" })
      if (state.kind === "function_call" && state.block !== undefined) {
        replay.push({ type: "function_call", call_id: state.callId })
      }
    }
    if (!replay.some((item) => item.type === "reasoning")) return none
    const state: ReplayState = { [REPLAY_KEY]: { items: replay } }
    return [{ type: "replay-state", state: state as unknown as Json }]
  }

  /** Closes every open block and checks the calls' arguments (unless the output was cut short). */
  const closeAll = (out: Array<StreamChunk>, checkArguments: boolean): LlmFailure | undefined => {
    for (const state of items) {
      if (state.kind === "function_call" && state.name === undefined && state.arguments !== "") {
        return malformed(`tool call ${state.callId} has no name`)
      }
      close(out, state)
    }
    if (!checkArguments) return undefined
    for (const state of items) {
      if (state.kind !== "function_call" || state.block === undefined) continue
      try {
        JSON.parse(state.arguments)
      } catch {
        return malformed(`the arguments of tool call ${state.callId} (${state.name}) are not JSON`)
      }
    }
    return undefined
  }

  const usageChunks = (response: typeof ResponseEvent.Type.response): ReadonlyArray<StreamChunk> => {
    const usage = response.usage === undefined || response.usage === null ? undefined : toUsage(response.usage)
    return usage === undefined ? none : [{ type: "usage", usage }]
  }

  const completed = (response: typeof ResponseEvent.Type.response): Decoded => {
    const out: Array<StreamChunk> = []
    const failure = closeAll(out, true)
    if (failure !== undefined) return Either.left(failure)
    const refusal = items.map((state) => state.refusal).join("")
    out.push(...usageChunks(response), ...replayState(), {
      type: "finish",
      finish: refusal === ""
        ? { kind: "stop" }
        : { kind: "error", failure: failureOf("refusal", `${PROVIDER}: the model refused: ${refusal}`) }
    })
    return Either.right(out)
  }

  const incomplete = (response: typeof ResponseEvent.Type.response): Decoded => {
    const reason = response.incomplete_details?.reason ?? "unknown"
    const out: Array<StreamChunk> = []
    const cutShort = reason === "max_output_tokens"
    const failure = closeAll(out, !cutShort)
    if (failure !== undefined) return Either.left(failure)
    out.push(...usageChunks(response), {
      type: "finish",
      finish: cutShort
        ? { kind: "max-tokens" }
        : {
          kind: "error",
          failure: reason === "content_filter"
            ? failureOf("content-filter", `${PROVIDER}: the content filter stopped the response`)
            : failureOf("provider", `${PROVIDER}: the response is incomplete (${reason})`)
        }
    })
    return Either.right(out)
  }

  const payload = (type: string, json: unknown): Decoded => {
    const decoded = <A>(result: Either.Either<A, unknown>, f: (value: A) => Decoded): Decoded =>
      Either.isLeft(result)
        ? Either.left(malformed(`a ${type} event does not have the expected shape`))
        : f(result.right)
    /** A delta of an item's content; one for an item already done is dropped. */
    const delta = <A extends Located>(
      result: Either.Either<A, unknown>,
      kind: ItemKind,
      apply: (out: Array<StreamChunk>, state: ItemState, event: A) => void
    ) =>
      decoded(result, (event) => {
        const out: Array<StreamChunk> = []
        const state = itemFor(kind, event.item_id, event.output_index)
        if (!state.closed) apply(out, state, event)
        return Either.right(out)
      })
    switch (type) {
      case "response.output_item.added":
        return decoded(decodeItem(json), (event) => Either.right(added(event, (json as { item: unknown }).item)))
      case "response.output_item.done":
        return decoded(decodeItem(json), (event) => Either.right(done(event, (json as { item: unknown }).item)))
      case "response.output_text.delta":
        return delta(decodeDelta(json), "message", (out, state, event) => appendText(out, state, event.delta))
      case "response.refusal.delta":
        // A refusal is not text: its words are the REFUSAL failure's message, never a text chunk.
        return delta(decodeDelta(json), "message", (_out, state, event) => {
          state.refusal += event.delta
          state.streamed = true
        })
      case "response.reasoning_summary_text.delta":
      case "response.reasoning_text.delta":
        return delta(
          decodeDelta(json),
          "reasoning",
          (out, state, event) => appendReasoning(out, state, event.delta, event.summary_index ?? 0)
        )
      case "response.function_call_arguments.delta":
        return delta(
          decodeDelta(json),
          "function_call",
          (out, state, event) => appendArguments(out, state, event.delta)
        )
      case "response.function_call_arguments.done":
        return delta(decodeArgumentsDone(json), "function_call", (out, state, event) => {
          if (state.arguments === "") appendArguments(out, state, event.arguments ?? "")
        })
      case "response.completed":
        ended = true
        return decoded(decodeResponse(json), (event) => completed(event.response))
      case "response.incomplete":
        ended = true
        return decoded(decodeResponse(json), (event) => incomplete(event.response))
      case "response.failed":
        ended = true
        return decoded(decodeResponse(json), (event) => {
          const error = event.response.error
          return Either.left(
            error === undefined || error === null
              ? failureOf("provider", `${PROVIDER}: the response failed`)
              : fromPayload(PROVIDER, error)
          )
        })
      case "error":
        ended = true
        return Either.left(fromPayload(PROVIDER, json))
      default:
        return Either.right(none)
    }
  }

  return {
    event: (event) => {
      // Some servers end the stream the Chat Completions way; the completion event decides.
      if (ended || event.data.trim() === "[DONE]") return Either.right(none)
      const json = decodeJson(event.data)
      if (Either.isLeft(json)) {
        return Either.left(malformed(`a stream event is not JSON: ${shorten(event.data).slice(0, 120)}`))
      }
      const typed = decodeTyped(json.right)
      return payload(Either.isRight(typed) ? typed.right.type : event.event, json.right)
    },
    end: () =>
      ended
        ? Either.right(none)
        : Either.left(failureOf("network", `${PROVIDER}: the response ended before it was complete`))
  }
}
