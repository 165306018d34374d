/**
 * OpenAiModel: the `Model` seam over the OpenAI Responses API, streamed as server-sent events
 * (SPEC 8.8).
 *
 * Each request is one `POST {baseUrl}/responses` (default base URL `https://api.openai.com/v1`)
 * with `stream: true`, `store: false` and `include: ["reasoning.encrypted_content"]`, the key in
 * `authorization: Bearer`. The system prompt is `instructions`; every tiller message becomes its
 * own input item, in order: user-role messages (prompts, steering, injected contexts) stay
 * separate, tool results become `function_call_output` items carrying the result's text (their
 * images follow in one user item), and assistant messages are rebuilt from their replay state
 * (encrypted reasoning items in their original place before text and calls), else from their text
 * and tool calls (the replay state is read by `internal/providers/ResponsesReplay`). The events of
 * the response are decoded by `internal/providers/ResponsesEvents`; HTTP, timeouts and failure
 * classification are `internal/providers/ProviderHttp`'s.
 *
 * Models without reasoning refuse `include: ["reasoning.encrypted_content"]` with a 400
 * ("Encrypted content is not supported with this model."): the request is then sent again at once
 * without it, and the layer leaves it out (and sends no reasoning items) from then on. Replayed
 * reasoning the API cannot verify (400 `invalid_encrypted_content`, seen after a change of key or
 * organisation) would stop the session for good: that request is sent again without its reasoning
 * items.
 *
 * The model sent is `options.model`, whatever `request.model` says; `max_output_tokens` is
 * `request.maxTokens`, else `options.maxTokens`, and `temperature` is sent when given.
 *
 * The API caches request prefixes by itself; `prompt_cache_key` (the session id, or
 * `options.promptCacheKey`; none with `promptCaching: false`) routes a session's requests to the
 * same cache. The body lists `tools`, `instructions` and `input` last, in prompt order, so a
 * request's bytes up to its newest item are a prefix of the next request's.
 *
 * @since 0.1.0
 */
import * as HttpClient from "@effect/platform/HttpClient"
import type { Context } from "effect"
import { Effect, Either, Layer, Redacted, Ref, Stream } from "effect"
import type { ModelError } from "../domain/Errors.js"
import type { ImageBlock, LlmFailure, Message, StreamChunk, ToolResultBlock, ToolSchema } from "../domain/Values.js"
import * as ProviderHttp from "../internal/providers/ProviderHttp.js"
import { providerParameters } from "../internal/providers/ProviderParameters.js"
import type { Timeouts } from "../internal/providers/ProviderTimeouts.js"
import * as ResponsesEvents from "../internal/providers/ResponsesEvents.js"
import * as ResponsesReplay from "../internal/providers/ResponsesReplay.js"
import type { ModelRequest } from "../services/Model.js"
import { Model } from "../services/Model.js"

/**
 * Options of {@link layer}: the model name sent with every request, the API key, the base URL (for
 * a proxy or a local test server), the default `max_output_tokens`, the resolved timeouts and the
 * prompt cache key (`promptCacheKey`, default the session id; `promptCaching: false` sends none).
 *
 * @since 0.1.0
 * @category models
 */
export interface Options {
  readonly model: string
  readonly apiKey?: Redacted.Redacted<string> | undefined
  readonly baseUrl?: string | undefined
  readonly maxTokens?: number | undefined
  readonly timeouts: Timeouts
  /** Send a `prompt_cache_key` (default `true`). */
  readonly promptCaching?: boolean | undefined
  /** The `prompt_cache_key` sent (default: the request's session id). */
  readonly promptCacheKey?: string | undefined
}

/**
 * The default base URL of the Responses API.
 *
 * @since 0.1.0
 * @category constants
 */
export const DEFAULT_BASE_URL = "https://api.openai.com/v1"

/**
 * A content part of a user input item.
 *
 * @since 0.1.0
 * @category models
 */
export type InputContent =
  | { readonly type: "input_text"; readonly text: string }
  | { readonly type: "input_image"; readonly image_url: string }

/**
 * One item of a Responses API request's `input`.
 *
 * @since 0.1.0
 * @category models
 */
export type InputItem =
  | { readonly role: "user"; readonly content: ReadonlyArray<InputContent> }
  | {
    readonly type: "message"
    readonly role: "assistant"
    readonly content: ReadonlyArray<{ readonly type: "output_text"; readonly text: string }>
  }
  | { readonly type: "function_call"; readonly call_id: string; readonly name: string; readonly arguments: string }
  | { readonly type: "function_call_output"; readonly call_id: string; readonly output: string }
  | Extract<ResponsesReplay.ReplayItem, { readonly type: "reasoning" }>

type AssistantMessage = Extract<Message, { readonly role: "assistant" }>
type TextContent = Extract<AssistantMessage["content"][number], { readonly type: "text" }>
type ToolCallContent = Extract<AssistantMessage["content"][number], { readonly type: "tool-call" }>

const imagePart = (block: ImageBlock): InputContent => ({
  type: "input_image",
  image_url: `data:${block.mediaType};base64,${block.data}`
})

const assistantText = (block: TextContent): InputItem => ({
  type: "message",
  role: "assistant",
  content: [{ type: "output_text", text: block.text }]
})

/** A call as the API takes it back: `""` (no arguments) is `"{}"`. */
const functionCall = (block: ToolCallContent): InputItem => ({
  type: "function_call",
  call_id: block.id,
  name: block.name,
  arguments: block.arguments.trim() === "" ? "{}" : block.arguments
})

/** The result's text as it is (text blocks joined by newlines), never JSON-encoded again. */
const functionCallOutput = (block: ToolResultBlock): InputItem => ({
  type: "function_call_output",
  call_id: block.toolCallId,
  output: block.content.flatMap((part) => part.type === "text" ? [part.text] : []).join("\n")
})

/**
 * The items of an assistant message. With this adapter's replay state, its entries in order:
 * reasoning items as stored, each `{type: "message"}` filled by the message's next text block and
 * each `{type: "function_call", call_id}` by the message's call of that id; text and calls no entry
 * stood for follow. Without it, the message's text and tool calls in order (reasoning is not sent).
 */
const assistantItems = (message: AssistantMessage, reasoning: boolean): Array<InputItem> => {
  const texts = message.content.filter((block): block is TextContent => block.type === "text" && block.text !== "")
  const calls = message.content.filter((block): block is ToolCallContent => block.type === "tool-call")
  const entries = ResponsesReplay.replayItems(message.source.replayState)
  if (entries === undefined) {
    return message.content.flatMap((block) =>
      block.type === "text"
        ? (block.text === "" ? [] : [assistantText(block)])
        : block.type === "tool-call"
        ? [functionCall(block)]
        : []
    )
  }
  const out: Array<InputItem> = []
  let nextText = 0
  const used = new Set<ToolCallContent>()
  for (const entry of entries) {
    if (entry.type === "message") {
      const text = texts[nextText++]
      if (text !== undefined) out.push(assistantText(text))
    } else if (entry.type === "function_call") {
      const call = calls.find((candidate) => candidate.id === entry.call_id && !used.has(candidate))
      if (call !== undefined) {
        used.add(call)
        out.push(functionCall(call))
      }
    } else if (reasoning) {
      out.push(entry)
    }
  }
  for (const text of texts.slice(nextText)) out.push(assistantText(text))
  for (const call of calls) if (!used.has(call)) out.push(functionCall(call))
  return out
}

/**
 * Converts a request's messages to Responses API input items, in order: each user-role message is
 * one user item (empty text blocks left out), each tool result a `function_call_output` with its
 * text, and each assistant message its items (see the module's description). The images of a run
 * of tool results follow it in one user item, each group named by its call. `reasoning: false`
 * leaves stored reasoning items out.
 *
 * @since 0.1.0
 * @category conversions
 */
export const toInputItems = (
  messages: ReadonlyArray<Message>,
  options: { readonly reasoning?: boolean | undefined } = {}
): ReadonlyArray<InputItem> => {
  const out: Array<InputItem> = []
  let toolImages: Array<InputContent> = []
  const flushToolImages = () => {
    if (toolImages.length > 0) out.push({ role: "user", content: toolImages })
    toolImages = []
  }
  for (const message of messages) {
    if (message.role === "assistant") {
      flushToolImages()
      out.push(...assistantItems(message, options.reasoning ?? true))
      continue
    }
    const content: Array<InputContent> = []
    for (const block of message.content) {
      switch (block.type) {
        case "text":
          if (block.text !== "") content.push({ type: "input_text", text: block.text })
          break
        case "image":
          content.push(imagePart(block))
          break
        case "tool-result": {
          out.push(functionCallOutput(block))
          const images = block.content.flatMap((part) => part.type === "image" ? [imagePart(part)] : [])
          if (images.length > 0) {
            toolImages.push(
              { type: "input_text", text: `images returned by tool call ${block.toolCallId}:` },
              ...images
            )
          }
          break
        }
      }
    }
    if (content.length === 0) continue
    flushToolImages()
    out.push({ role: "user", content })
  }
  flushToolImages()
  return out
}

/** A tool as the Responses API declares it, without strict mode (optional parameters stay optional). */
const toResponsesTool = (schema: ToolSchema) => ({
  type: "function" as const,
  name: schema.name,
  description: schema.description,
  parameters: providerParameters(schema),
  strict: false
})

/**
 * The JSON body of one streamed Responses API request. `instructions` is left out when the system
 * prompt is empty, `tools` when there are none, `max_output_tokens` and `temperature` when not
 * given; `encryptedReasoning: false` leaves out `include` and the stored reasoning items,
 * `replayReasoning: false` only the stored reasoning items. `prompt_cache_key` is the session id
 * unless `promptCacheKey` names another or `promptCaching` is `false`. `tools`, `instructions` and
 * `input` come last, in prompt order.
 *
 * @since 0.1.0
 * @category conversions
 */
export const toResponsesRequest = (
  request: ModelRequest,
  options: {
    readonly model: string
    readonly maxTokens?: number | undefined
    readonly encryptedReasoning?: boolean | undefined
    readonly replayReasoning?: boolean | undefined
    readonly promptCaching?: boolean | undefined
    readonly promptCacheKey?: string | undefined
  }
) => {
  const maxTokens = request.maxTokens ?? options.maxTokens
  const reasoning = options.encryptedReasoning ?? true
  return {
    model: options.model,
    ...(maxTokens === undefined ? {} : { max_output_tokens: maxTokens }),
    ...(request.temperature === undefined ? {} : { temperature: request.temperature }),
    stream: true,
    store: false,
    ...(reasoning ? { include: ["reasoning.encrypted_content"] } : {}),
    ...((options.promptCaching ?? true) ? { prompt_cache_key: options.promptCacheKey ?? request.sessionId } : {}),
    ...(request.tools.length === 0 ? {} : { tools: request.tools.map(toResponsesTool) }),
    ...(request.system === undefined || request.system === "" ? {} : { instructions: request.system }),
    input: toInputItems(request.messages, { reasoning: reasoning && (options.replayReasoning ?? true) })
  }
}

/** The 400 a model without reasoning answers to `include: ["reasoning.encrypted_content"]`. */
const refusesEncryptedContent = (error: ModelError): boolean =>
  error.failure.status === 400 && /encrypted content is not supported/i.test(error.failure.message)

/** The 400 (`invalid_encrypted_content`) for a replayed reasoning item the API cannot verify. */
const rejectsReplayedReasoning = (error: ModelError): boolean =>
  error.failure.status === 400 && /encrypted content .*could not be verified/i.test(error.failure.message)

const replaysReasoning = (request: ModelRequest): boolean =>
  request.messages.some((message) =>
    message.role === "assistant" &&
    (ResponsesReplay.replayItems(message.source.replayState) ?? []).some((item) => item.type === "reasoning")
  )

/**
 * Builds the `Model` service over the `HttpClient` in context.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (
  options: Options
): Effect.Effect<Context.Tag.Service<typeof Model>, never, HttpClient.HttpClient> =>
  Effect.gen(function*() {
    const client = yield* HttpClient.HttpClient
    const endpoint: ProviderHttp.Endpoint = {
      provider: "OpenAI",
      url: `${(options.baseUrl ?? DEFAULT_BASE_URL).replace(/\/+$/, "")}/responses`,
      headers: {
        "content-type": "application/json",
        ...(options.apiKey === undefined ? {} : { authorization: `Bearer ${Redacted.value(options.apiKey)}` })
      },
      secret: options.apiKey,
      timeouts: options.timeouts
    }
    const encryptedReasoning = yield* Ref.make(true)
    const orFail = Either.match({
      onLeft: (failure: LlmFailure) => Effect.fail(ProviderHttp.fail(endpoint, failure)),
      onRight: (chunks: ReadonlyArray<StreamChunk>) => Effect.succeed(chunks)
    })

    const attempt = (
      request: ModelRequest,
      reasoning: boolean,
      replay = reasoning
    ): Stream.Stream<StreamChunk, ModelError> =>
      Stream.suspend(() => {
        const decoder = ResponsesEvents.makeDecoder()
        const body = toResponsesRequest(request, { ...options, encryptedReasoning: reasoning, replayReasoning: replay })
        return ProviderHttp.streamEvents(client, endpoint, body).pipe(
          Stream.mapConcatEffect((event) => orFail(decoder.event(event))),
          Stream.concat(Stream.suspend(() => Stream.fromIterableEffect(orFail(decoder.end())))),
          Stream.takeUntil((chunk) => chunk.type === "finish")
        )
      })

    const stream = (request: ModelRequest): Stream.Stream<StreamChunk, ModelError> =>
      Stream.unwrap(Effect.map(Ref.get(encryptedReasoning), (reasoning) => {
        let emitted = false
        return attempt(request, reasoning).pipe(
          Stream.tap(() =>
            Effect.sync(() => {
              emitted = true
            })
          ),
          // Sent again only when it failed before any chunk, so nothing is streamed twice.
          Stream.catchAll((error) =>
            !reasoning || emitted
              ? Stream.fail(error)
              : refusesEncryptedContent(error)
              ? Stream.unwrap(Effect.as(Ref.set(encryptedReasoning, false), attempt(request, false)))
              : rejectsReplayedReasoning(error) && replaysReasoning(request)
              ? attempt(request, true, false)
              : Stream.fail(error)
          )
        )
      })).pipe(Stream.withSpan("OpenAiModel.stream", { attributes: { model: options.model } }))

    return Model.make(stream)
  })

/**
 * The `Model` layer over the OpenAI Responses API; provide an `HttpClient` (for example
 * `FetchHttpClient.layer`).
 *
 * @since 0.1.0
 * @category layers
 */
export const layer = (options: Options): Layer.Layer<Model, never, HttpClient.HttpClient> =>
  Layer.effect(Model, make(options))
