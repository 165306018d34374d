/**
 * OpenAiCompatibleModel: the `Model` seam over an OpenAI-compatible Chat Completions endpoint
 * (Ollama, vLLM, llama.cpp server and other hosts), streamed as server-sent events (SPEC 8.8).
 *
 * Each request is one `POST {baseUrl}/chat/completions` with `stream: true` and
 * `stream_options.include_usage`. Every tiller message becomes its own chat message, in order:
 * consecutive user-role messages (prompts, steering, injected contexts) stay separate, assistant
 * tool calls become `tool_calls`, and each tool result a `tool` message with its `tool_call_id`.
 * The response's deltas become tiller's chunks; the final usage chunk becomes `usage`.
 *
 * Failures are classified for the retry policy: HTTP 429, 5xx and transport failures are
 * retryable, other statuses are not, and a malformed stream (a data line that is not a chunk, tool
 * arguments that are not JSON, an end without a finish reason) is a non-retryable `ModelError`.
 * The API key is sent only in the `Authorization` header and is removed from every failure message.
 *
 * The model sent is `options.model`, as the provided layer binds it, whatever `request.model` says;
 * `request.maxTokens` (else `options.maxTokens`) and `request.temperature` are sent when present.
 *
 * @since 0.1.0
 */
import * as HttpClient from "@effect/platform/HttpClient"
import type * as HttpClientError from "@effect/platform/HttpClientError"
import * as HttpClientRequest from "@effect/platform/HttpClientRequest"
import type * as HttpClientResponse from "@effect/platform/HttpClientResponse"
import type { Context } from "effect"
import { Effect, Either, Layer, Predicate, Redacted, Schema, Stream } from "effect"
import { ModelError } from "../domain/Errors.js"
import { usageOf } from "../internal/UsageCounts.js"
import type { Finish, ImageBlock, LlmFailure, Message, StreamChunk, ToolResultBlock, ToolSchema, Usage } from "../domain/Values.js"
import type { ModelRequest } from "../services/Model.js"
import { Model } from "../services/Model.js"
import { providerParameters } from "../internal/ProviderParameters.js"
import * as SafeDecode from "../internal/SafeDecode.js"

/**
 * Options of {@link layer}: the endpoint's base URL (for example `http://127.0.0.1:11434/v1`), the
 * model name sent with every request, the optional API key and the default `max_tokens`.
 *
 * @since 0.1.0
 * @category models
 */
export interface Options {
  readonly baseUrl: string
  readonly model: string
  readonly apiKey?: Redacted.Redacted<string> | undefined
  readonly maxTokens?: number | undefined
}

/**
 * A content part of a Chat Completions user message.
 *
 * @since 0.1.0
 * @category models
 */
export type ChatContentPart =
  | { readonly type: "text"; readonly text: string }
  | { readonly type: "image_url"; readonly image_url: { readonly url: string } }

/**
 * A tool call of a Chat Completions assistant message; `arguments` is JSON text.
 *
 * @since 0.1.0
 * @category models
 */
export interface ChatToolCall {
  readonly id: string
  readonly type: "function"
  readonly function: { readonly name: string; readonly arguments: string }
}

/**
 * One message of a Chat Completions request.
 *
 * @since 0.1.0
 * @category models
 */
export type ChatMessage =
  | { readonly role: "system"; readonly content: string }
  | { readonly role: "user"; readonly content: string | ReadonlyArray<ChatContentPart> }
  | { readonly role: "assistant"; readonly content: string | null; readonly tool_calls?: ReadonlyArray<ChatToolCall> }
  | { readonly role: "tool"; readonly tool_call_id: string; readonly content: string }

const imagePart = (block: ImageBlock): ChatContentPart => ({
  type: "image_url",
  image_url: { url: `data:${block.mediaType};base64,${block.data}` }
})

const textOf = (blocks: ReadonlyArray<{ readonly type: string; readonly text?: string }>): string =>
  blocks.flatMap((block) => block.type === "text" && block.text !== undefined ? [block.text] : []).join("\n")

const assistantMessage = (message: Extract<Message, { readonly role: "assistant" }>): ChatMessage | undefined => {
  const toolCalls: Array<ChatToolCall> = []
  for (const block of message.content) {
    if (block.type === "tool-call") {
      toolCalls.push({ id: block.id, type: "function", function: { name: block.name, arguments: block.arguments } })
    }
  }
  const text = textOf(message.content)
  if (text === "" && toolCalls.length === 0) return undefined
  return toolCalls.length === 0
    ? { role: "assistant", content: text }
    : { role: "assistant", content: text === "" ? null : text, tool_calls: toolCalls }
}

const toolMessage = (block: ToolResultBlock): ChatMessage => ({
  role: "tool",
  tool_call_id: block.toolCallId,
  content: textOf(block.content)
})

/**
 * Converts a request's system prompt and messages to Chat Completions messages: the system prompt
 * first (when not empty), then one chat message per tiller message, in order. A user message with
 * only text is a string (blocks joined by newlines), otherwise text and `image_url` parts; an
 * assistant message keeps its text and tool calls (reasoning is not sent back); a tool result is a
 * `tool` message with its text. Chat Completions has no images in tool messages, so the images of a
 * run of tool results follow it in one user message. Empty messages are left out.
 *
 * @since 0.1.0
 * @category conversions
 */
export const toChatMessages = (request: Pick<ModelRequest, "system" | "messages">): ReadonlyArray<ChatMessage> => {
  const out: Array<ChatMessage> = []
  if (request.system !== undefined && request.system !== "") out.push({ role: "system", content: request.system })
  let toolImages: Array<ChatContentPart> = []
  const flushToolImages = () => {
    if (toolImages.length > 0) out.push({ role: "user", content: toolImages })
    toolImages = []
  }
  for (const message of request.messages) {
    if (message.role === "assistant") {
      flushToolImages()
      const chat = assistantMessage(message)
      if (chat !== undefined) out.push(chat)
      continue
    }
    const parts: Array<ChatContentPart> = []
    for (const block of message.content) {
      switch (block.type) {
        case "text":
          parts.push({ type: "text", text: block.text })
          break
        case "image":
          parts.push(imagePart(block))
          break
        case "tool-result": {
          out.push(toolMessage(block))
          const images = block.content.flatMap((part) => part.type === "image" ? [imagePart(part)] : [])
          if (images.length > 0) {
            toolImages.push({ type: "text", text: `images returned by tool call ${block.toolCallId}:` }, ...images)
          }
          break
        }
      }
    }
    if (parts.length === 0) continue
    flushToolImages()
    out.push({
      role: "user",
      content: parts.every((part) => part.type === "text")
        ? parts.map((part) => part.type === "text" ? part.text : "").join("\n")
        : parts
    })
  }
  flushToolImages()
  return out
}

/**
 * A tool as Chat Completions declares it; parameters that are not a JSON object become an object
 * schema without properties.
 */
const toChatTool = (schema: ToolSchema) => ({
  type: "function" as const,
  function: {
    name: schema.name,
    description: schema.description,
    parameters: providerParameters(schema)
  }
})

/**
 * The JSON body of one streamed Chat Completions request. `tools` is left out when there are none.
 *
 * @since 0.1.0
 * @category conversions
 */
export const toChatRequest = (
  request: ModelRequest,
  options: { readonly model: string; readonly maxTokens?: number | undefined }
) => {
  const maxTokens = request.maxTokens ?? options.maxTokens
  return {
    model: options.model,
    messages: toChatMessages(request),
    stream: true,
    stream_options: { include_usage: true },
    ...(request.tools.length === 0 ? {} : { tools: request.tools.map(toChatTool) }),
    ...(maxTokens === undefined ? {} : { max_tokens: maxTokens }),
    ...(request.temperature === undefined ? {} : { temperature: request.temperature })
  }
}

// ---------------------------------------------------------------------------------------------------
// Failures

/** Replaces every occurrence of the key by `[redacted]`. */
const makeScrub = (apiKey: Redacted.Redacted<string> | undefined) => (text: string): string => {
  if (apiKey === undefined) return text
  const key = Redacted.value(apiKey)
  return key === "" ? text : text.split(key).join("[redacted]")
}

const codeOfStatus = (status: number): string => {
  if (status === 429) return "RATE_LIMIT"
  if (status >= 500 && status <= 599) return "SERVICE_UNAVAILABLE"
  switch (status) {
    case 400:
      return "BAD_REQUEST"
    case 401:
      return "UNAUTHORIZED"
    case 403:
      return "FORBIDDEN"
    case 404:
      return "NOT_FOUND"
    default:
      return "HTTP_ERROR"
  }
}

const isRetryableStatus = (status: number): boolean => status === 429 || (status >= 500 && status <= 599)

const headerOf = (headers: Readonly<Record<string, string>>, name: string): string | undefined => {
  const value = headers[name]
  return value === undefined || value.trim() === "" ? undefined : value.trim()
}

/** `retry-after-ms`, or `retry-after` in seconds (an HTTP date is not interpreted). */
const retryAfterMs = (headers: Readonly<Record<string, string>>): number | undefined => {
  const ms = Number(headerOf(headers, "retry-after-ms"))
  if (Number.isFinite(ms) && ms >= 0) return ms
  const seconds = Number(headerOf(headers, "retry-after"))
  return Number.isFinite(seconds) && seconds >= 0 ? seconds * 1000 : undefined
}

const MAX_DETAIL = 500

/** The `error.message` of a JSON error body, else the body text; shortened. */
const errorDetail = (body: string): string => {
  let detail = body.trim()
  try {
    const parsed: unknown = JSON.parse(detail)
    if (Predicate.hasProperty(parsed, "error")) {
      const error = parsed.error
      if (Predicate.isString(error)) detail = error
      else if (Predicate.hasProperty(error, "message") && Predicate.isString(error.message)) detail = error.message
    } else if (Predicate.hasProperty(parsed, "message") && Predicate.isString(parsed.message)) {
      detail = parsed.message
    }
  } catch {
    // not JSON: the text itself
  }
  return detail.length > MAX_DETAIL ? `${detail.slice(0, MAX_DETAIL)}…` : detail
}

const describe = (cause: unknown): string => {
  if (!(cause instanceof Error)) return String(cause)
  const inner = (cause as { readonly cause?: unknown }).cause
  return inner instanceof Error ? `${cause.message} (${inner.message})` : cause.message
}

// ---------------------------------------------------------------------------------------------------
// Server-sent events

/**
 * One server-sent event: its `event` field (`"message"` when absent) and its data lines joined by
 * newlines.
 */
interface SseEvent {
  readonly event: string
  readonly data: string
}

/**
 * A line-by-line parser of the server-sent events format: `line` returns the event that a blank
 * line completes, `end` the event left open when the stream ends. Comments and the `id` and `retry`
 * fields are ignored.
 */
const makeSseParser = () => {
  let event = ""
  let data: Array<string> = []
  const dispatch = (): SseEvent | undefined => {
    const complete = data.length === 0 ? undefined : { event: event === "" ? "message" : event, data: data.join("\n") }
    event = ""
    data = []
    return complete
  }
  return {
    line: (line: string): SseEvent | undefined => {
      if (line === "") return dispatch()
      if (line.startsWith(":")) return undefined
      const colon = line.indexOf(":")
      const field = colon === -1 ? line : line.slice(0, colon)
      const raw = colon === -1 ? "" : line.slice(colon + 1)
      const value = raw.startsWith(" ") ? raw.slice(1) : raw
      if (field === "data") data.push(value)
      else if (field === "event") event = value
      return undefined
    },
    end: (): SseEvent | undefined => dispatch()
  }
}

// ---------------------------------------------------------------------------------------------------
// Stream chunks

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
  prompt_tokens_details: Schema.optional(Schema.NullOr(Schema.Struct({ cached_tokens: OptionalCount }))),
  completion_tokens_details: Schema.optional(Schema.NullOr(Schema.Struct({ reasoning_tokens: OptionalCount })))
})

/** A `chat.completion.chunk`, or an error object some hosts send in the stream. */
const WireChunk = Schema.Struct({
  choices: Schema.optional(Schema.NullOr(Schema.Array(WireChoice))),
  usage: Schema.optional(Schema.NullOr(WireUsage)),
  error: Schema.optional(Schema.Unknown)
})

const decodeWireChunk = SafeDecode.decodeUnknownEither(Schema.parseJson(WireChunk))

/**
 * Maps Chat Completions usage to tiller's; absent when neither prompt nor completion tokens are known.
 */
const toUsage = (usage: typeof WireUsage.Type): Usage | undefined =>
  usageOf({
    inputTokens: usage.prompt_tokens,
    outputTokens: usage.completion_tokens,
    totalTokens: usage.total_tokens,
    reasoningTokens: usage.completion_tokens_details?.reasoning_tokens,
    cacheReadTokens: usage.prompt_tokens_details?.cached_tokens
  })

/**
 * Maps a Chat Completions `finish_reason`: `length` is `max-tokens`, `content_filter` a
 * non-retryable `CONTENT_FILTER` error, `error` an error, any other reason (`stop`, `tool_calls`,
 * `function_call`, a host's own) is `stop`.
 */
const toFinish = (reason: string): Finish => {
  switch (reason) {
    case "length":
      return { kind: "max-tokens" }
    case "content_filter":
      return {
        kind: "error",
        failure: { message: "the host's content filter stopped the response", code: "CONTENT_FILTER", retryable: false }
      }
    case "error":
      return { kind: "error", failure: { message: "the host finished the response with reason \"error\"", code: "UNKNOWN" } }
    default:
      return { kind: "stop" }
  }
}

/** What one SSE line produced: chunks, and whether the response is complete (`[DONE]`). */
interface Step {
  readonly chunks: ReadonlyArray<StreamChunk>
  readonly done: boolean
}

interface ToolCallState {
  id: string
  name: string | undefined
  block: number | undefined
  arguments: string
  pending: string
}

const streamErrorFailure = (payload: unknown): LlmFailure => {
  const error = Predicate.hasProperty(payload, "error") ? payload.error : payload
  const message = Predicate.isString(error)
    ? error
    : Predicate.hasProperty(error, "message") && Predicate.isString(error.message)
    ? error.message
    : JSON.stringify(error) ?? "unknown error"
  const numeric = Predicate.hasProperty(error, "status") && Predicate.isNumber(error.status)
    ? error.status
    : Predicate.hasProperty(error, "code") && Predicate.isNumber(error.code)
    ? error.code
    : undefined
  const text = `the host reported an error in the stream: ${message.slice(0, MAX_DETAIL)}`
  if (numeric !== undefined && numeric >= 400 && numeric <= 599) {
    return { message: text, code: codeOfStatus(numeric), status: numeric, retryable: isRetryableStatus(numeric) }
  }
  const kind = [
    Predicate.hasProperty(error, "type") ? error.type : undefined,
    Predicate.hasProperty(error, "code") ? error.code : undefined
  ].filter(Predicate.isString).join(" ")
  if (/rate_limit/.test(kind)) return { message: text, code: "RATE_LIMIT", retryable: true }
  if (/server_error|overloaded|unavailable/.test(kind)) return { message: text, code: "SERVICE_UNAVAILABLE", retryable: true }
  return { message: text, code: "PROVIDER_ERROR", retryable: false }
}

const malformed = (message: string): LlmFailure => ({ message, code: "MALFORMED_STREAM", retryable: false })

/**
 * Decodes the SSE lines of one streamed Chat Completions response into tiller's chunks.
 *
 * Block indexes are allocated in order of the blocks' starts. Reasoning and text deltas extend the
 * open block of their kind and close the other one; the first tool call delta closes both. Tool
 * calls are tracked by their `index` (a delta with a new `id` at a known index is a new call, as
 * some hosts send every call at index 0); a call's block starts once its name is known, with the
 * call's `id` or, when the host sends none, `{callIdPrefix}_{n}`. The finish reason closes every
 * open block (a call without arguments gets `{}`; arguments that are not JSON fail unless the
 * reason is `length`); the usage and finish chunks follow at `[DONE]` or at the end of the body,
 * so the usage chunk the host sends after the finish reason is included.
 */
const makeChunkDecoder = (context: {
  readonly callIdPrefix: string
  readonly fail: (failure: LlmFailure) => ModelError
}) => {
  const sse = makeSseParser()
  let nextBlock = 0
  let text: number | undefined
  let reasoning: number | undefined
  const calls: Array<ToolCallState> = []
  const byIndex = new Map<number, ToolCallState>()
  let finishReason: string | undefined
  let usage: Usage | undefined
  let completed = false
  const none: Step = { chunks: [], done: false }

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

  /** Closes every open block; fails on a call without a name or with arguments that are not JSON. */
  const finish = (out: Array<StreamChunk>, reason: string): ModelError | undefined => {
    reasoning = close(out, reasoning)
    text = close(out, text)
    for (const call of calls) {
      if (call.name === undefined) return context.fail(malformed(`tool call ${call.id} has no name`))
      startCall(out, call)
      const index = call.block!
      if (reason !== "length") {
        if (call.arguments.trim() === "") {
          out.push({ type: "tool-call-delta", index, arguments: "{}" })
        } else {
          try {
            JSON.parse(call.arguments)
          } catch {
            return context.fail(malformed(`the arguments of tool call ${call.id} (${call.name}) are not JSON`))
          }
        }
      }
      out.push({ type: "block-end", index })
    }
    return undefined
  }

  const payload = (data: string): Effect.Effect<Step, ModelError> => {
    const decoded = decodeWireChunk(data)
    if (Either.isLeft(decoded)) {
      return Effect.fail(context.fail(malformed(`a stream event is not a chat completion chunk: ${data.slice(0, 200)}`)))
    }
    const chunk = decoded.right
    if (chunk.error !== undefined && chunk.error !== null) return Effect.fail(context.fail(streamErrorFailure(chunk)))
    if (chunk.usage !== undefined && chunk.usage !== null) usage = toUsage(chunk.usage) ?? usage
    // Only the first choice is read; tiller never asks for more than one.
    const choice = chunk.choices?.find((c) => (c.index ?? 0) === 0)
    if (choice === undefined || finishReason !== undefined) return Effect.succeed(none)
    const out: Array<StreamChunk> = []
    const delta = choice.delta ?? undefined
    const thought = delta?.reasoning_content ?? delta?.reasoning ?? undefined
    if (thought !== undefined && thought !== "") {
      text = close(out, text)
      if (reasoning === undefined) {
        reasoning = nextBlock++
        out.push({ type: "block-start", index: reasoning, block: "reasoning" })
      }
      out.push({ type: "reasoning-delta", index: reasoning, text: thought })
    }
    const content = delta?.content ?? undefined
    if (content !== undefined && content !== "") {
      reasoning = close(out, reasoning)
      if (text === undefined) {
        text = nextBlock++
        out.push({ type: "block-start", index: text, block: "text" })
      }
      out.push({ type: "text-delta", index: text, text: content })
    }
    const toolCalls = delta?.tool_calls ?? undefined
    if (toolCalls !== undefined && toolCalls.length > 0) {
      reasoning = close(out, reasoning)
      text = close(out, text)
      toolCalls.forEach((call, position) => toolCallDelta(out, call, position))
    }
    const reason = choice.finish_reason ?? undefined
    if (reason !== undefined) {
      finishReason = reason
      const error = finish(out, reason)
      if (error !== undefined) return Effect.fail(error)
    }
    return Effect.succeed({ chunks: out, done: false })
  }

  const complete = (): Effect.Effect<ReadonlyArray<StreamChunk>, ModelError> => {
    if (finishReason === undefined) {
      return Effect.fail(context.fail(malformed("the stream ended without a finish reason")))
    }
    completed = true
    return Effect.succeed([
      ...(usage === undefined ? [] : [{ type: "usage" as const, usage }]),
      { type: "finish" as const, finish: toFinish(finishReason) }
    ])
  }

  const event = (e: SseEvent): Effect.Effect<Step, ModelError> => {
    if (e.data.trim() === "[DONE]") return Effect.map(complete(), (chunks) => ({ chunks, done: true }))
    if (e.event === "error") {
      let parsed: unknown = e.data
      try {
        parsed = JSON.parse(e.data)
      } catch {
        // a plain-text error
      }
      return Effect.fail(context.fail(streamErrorFailure(parsed)))
    }
    return payload(e.data)
  }

  return {
    /** Feeds one line of the body. */
    line: (line: string): Effect.Effect<Step, ModelError> => {
      const e = sse.line(line)
      return e === undefined ? Effect.succeed(none) : event(e)
    },
    /** Ends the body: the open event, then the usage and finish chunks, unless `[DONE]` came. */
    end: (): Effect.Effect<ReadonlyArray<StreamChunk>, ModelError> => {
      if (completed) return Effect.succeed([])
      const e = sse.end()
      if (e === undefined) return complete()
      return Effect.flatMap(event(e), (step) => step.done ? Effect.succeed(step.chunks) : Effect.map(complete(), (rest) => [...step.chunks, ...rest]))
    }
  }
}

// ---------------------------------------------------------------------------------------------------
// The service

/**
 * Builds the `Model` service over the `HttpClient` in context.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (options: Options): Effect.Effect<Context.Tag.Service<typeof Model>, never, HttpClient.HttpClient> =>
  Effect.gen(function*() {
    const client = yield* HttpClient.HttpClient
    const url = `${options.baseUrl.replace(/\/+$/, "")}/chat/completions`
    const scrub = makeScrub(options.apiKey)
    const fail = (failure: LlmFailure) =>
      new ModelError({
        failure: {
          ...failure,
          message: scrub(failure.message),
          ...(failure.requestId === undefined ? {} : { requestId: scrub(failure.requestId) })
        }
      })

    const requestFailure = (error: HttpClientError.HttpClientError): ModelError =>
      error._tag === "RequestError" && error.reason !== "Transport"
        ? fail({ message: `cannot send the request to ${url}: ${error.reason}`, code: "INVALID_REQUEST", retryable: false })
        : fail({ message: `cannot reach ${url}: ${describe(error.cause)}`, code: "NETWORK", retryable: true })

    const bodyFailure = (error: HttpClientError.ResponseError): ModelError =>
      fail({ message: `the response stream from ${url} broke: ${describe(error.cause)}`, code: "NETWORK", retryable: true })

    const statusFailure = (response: HttpClientResponse.HttpClientResponse) =>
      Effect.gen(function*() {
        const body = yield* Effect.orElseSucceed(response.text, () => "")
        const detail = errorDetail(body)
        const status = response.status
        const delay = retryAfterMs(response.headers)
        const requestId = headerOf(response.headers, "x-request-id") ?? headerOf(response.headers, "request-id")
        return fail({
          message: `POST ${url} returned HTTP ${status}${detail === "" ? "" : `: ${detail}`}`,
          code: codeOfStatus(status),
          status,
          retryable: isRetryableStatus(status),
          ...(delay === undefined ? {} : { retryAfterMs: delay }),
          ...(requestId === undefined ? {} : { requestId })
        })
      })

    const httpRequest = (request: ModelRequest): HttpClientRequest.HttpClientRequest => {
      const base = HttpClientRequest.post(url).pipe(
        HttpClientRequest.accept("text/event-stream"),
        HttpClientRequest.bodyUnsafeJson(toChatRequest(request, options))
      )
      return options.apiKey === undefined
        ? base
        : HttpClientRequest.setHeader(base, "authorization", `Bearer ${Redacted.value(options.apiKey)}`)
    }

    const stream = (request: ModelRequest): Stream.Stream<StreamChunk, ModelError> =>
      Stream.unwrap(Effect.gen(function*() {
        const response = yield* Effect.mapError(client.execute(httpRequest(request)), requestFailure)
        if (response.status < 200 || response.status > 299) return yield* Effect.flip(statusFailure(response))
        const decoder = makeChunkDecoder({
          callIdPrefix: `call_${request.turn}_${request.step}_${request.attempt}`,
          fail
        })
        return response.stream.pipe(
          Stream.mapError(bodyFailure),
          Stream.decodeText(),
          Stream.splitLines,
          Stream.mapEffect(decoder.line),
          Stream.takeUntil((step) => step.done),
          Stream.mapConcat((step) => step.chunks),
          Stream.concat(Stream.suspend(() => Stream.fromIterableEffect(decoder.end())))
        )
      }).pipe(Effect.withSpan("OpenAiCompatibleModel.stream", { attributes: { model: options.model } })))

    return Model.of({ stream })
  })

/**
 * The `Model` layer over an OpenAI-compatible Chat Completions endpoint; provide an `HttpClient`
 * (for example `FetchHttpClient.layer`).
 *
 * @since 0.1.0
 * @category layers
 */
export const layer = (options: Options): Layer.Layer<Model, never, HttpClient.HttpClient> =>
  Layer.effect(Model, make(options))
