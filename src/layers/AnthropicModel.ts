/**
 * AnthropicModel: the `Model` seam over the Anthropic Messages API, streamed as server-sent events
 * (SPEC 8.8).
 *
 * Each request is one `POST {baseUrl}/v1/messages` (default base URL `https://api.anthropic.com`)
 * with `stream: true`, the key in `x-api-key` and `anthropic-version: 2023-06-01`. The API wants
 * alternating roles, so consecutive user-role tiller messages (prompts, injected contexts, tool
 * results) become one user turn, tool results first as the API requires; assistant messages are
 * rebuilt from their replay state (signed thinking, redacted thinking and server-tool blocks, in
 * their original order), else from their text and tool calls. The events of the response are
 * decoded by `internal/providers/AnthropicEvents`; HTTP, timeouts and failure classification are
 * `internal/providers/ProviderHttp`'s.
 *
 * The model sent is `options.model`, whatever `request.model` says; `max_tokens` is
 * `request.maxTokens`, else `options.maxTokens`, else 4096 (the API requires it).
 *
 * Prompt caching is on unless `promptCaching: false`: `cache_control` breakpoints on the last tool,
 * the system prompt, the newest message and the previous request's newest message (at most four;
 * see `internal/providers/AnthropicCache`), with the TTL `cacheTtl` ("5m" by default, or "1h").
 * The body lists `tools`, `system` and `messages` last, in the order the provider caches them, so a
 * request's bytes up to its newest message are a prefix of the next request's.
 *
 * @since 0.1.0
 */
import * as HttpClient from "@effect/platform/HttpClient"
import type { Context } from "effect"
import { Effect, Either, Layer, Predicate, Redacted, Stream } from "effect"
import type { ModelError } from "../domain/Errors.js"
import type { ImageBlock, LlmFailure, Message, StreamChunk, ToolResultBlock, ToolSchema } from "../domain/Values.js"
import * as AnthropicCache from "../internal/providers/AnthropicCache.js"
import * as AnthropicEvents from "../internal/providers/AnthropicEvents.js"
import * as ProviderHttp from "../internal/providers/ProviderHttp.js"
import { providerParameters } from "../internal/providers/ProviderParameters.js"
import type { Timeouts } from "../internal/providers/ProviderTimeouts.js"
import type { ModelRequest } from "../services/Model.js"
import { Model } from "../services/Model.js"

/**
 * Options of {@link layer}: the model name sent with every request, the API key, the base URL (for
 * a proxy or a local test server), the default `max_tokens`, the resolved timeouts, and prompt
 * caching (`promptCaching`, default on; `cacheTtl`, default "5m").
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
  /** Place `cache_control` breakpoints (default `true`). */
  readonly promptCaching?: boolean | undefined
  /** How long a cached prefix lives: "5m" (default) or "1h". */
  readonly cacheTtl?: AnthropicCache.CacheTtl | undefined
}

/**
 * The default base URL of the Messages API.
 *
 * @since 0.1.0
 * @category constants
 */
export const DEFAULT_BASE_URL = "https://api.anthropic.com"

/**
 * The `max_tokens` sent when neither the request nor the options set one.
 *
 * @since 0.1.0
 * @category constants
 */
export const DEFAULT_MAX_TOKENS = 4096

/**
 * A content block of a Messages API request (the API's own shape, JSON).
 *
 * @since 0.1.0
 * @category models
 */
export type ContentBlock = { readonly type: string } & { readonly [key: string]: unknown }

/**
 * One message of a Messages API request.
 *
 * @since 0.1.0
 * @category models
 */
export interface AnthropicMessage {
  readonly role: "user" | "assistant"
  readonly content: ReadonlyArray<ContentBlock>
}

const imageBlock = (block: ImageBlock): ContentBlock => ({
  type: "image",
  source: { type: "base64", media_type: block.mediaType, data: block.data }
})

const isBlank = (text: string): boolean => text.trim() === ""

/**
 * The API rejects empty text blocks, and whitespace-only ones in a message without other text
 * ("text content blocks must contain non-whitespace text"): empty blocks are never sent, and a
 * message's whitespace-only blocks only beside text of its own (the spaces between the cited
 * parts of a web search answer).
 */
const sendableText = (blocks: ReadonlyArray<ContentBlock>): ReadonlyArray<ContentBlock> => {
  const isText = (block: ContentBlock): block is ContentBlock & { readonly text: string } =>
    block.type === "text" && typeof block.text === "string"
  const kept = blocks.filter((block) => !isText(block) || block.text !== "")
  return kept.some((block) => isText(block) && !isBlank(block.text))
    ? kept
    : kept.filter((block) => !isText(block))
}

/**
 * A tool result: its text as it is (text blocks joined by newlines, never JSON-encoded again), or
 * its text and image blocks in order when it returned images; no `content` when it is blank.
 */
const toolResultBlock = (block: ToolResultBlock): ContentBlock => {
  const hasImages = block.content.some((part) => part.type === "image")
  const text = block.content.flatMap((part) => part.type === "text" ? [part.text] : []).join("\n")
  const content = hasImages
    ? block.content.flatMap((part) =>
      part.type === "image" ? [imageBlock(part)] : isBlank(part.text) ? [] : [{ type: "text", text: part.text }]
    )
    : text
  return {
    type: "tool_result",
    tool_use_id: block.toolCallId,
    ...(typeof content === "string" && isBlank(content) ? {} : { content }),
    is_error: block.isError
  }
}

/**
 * Tool-call arguments as the `input` object the API requires: `""` (no arguments) is `{}`, and so
 * is text that is not a JSON object (a complete call never logs such arguments: its stream fails).
 */
const inputOf = (text: string): unknown => {
  if (text.trim() === "") return {}
  try {
    const parsed: unknown = JSON.parse(text)
    return Predicate.isRecord(parsed) ? parsed : {}
  } catch {
    return {}
  }
}

type AssistantMessage = Extract<Message, { readonly role: "assistant" }>
type TextContent = Extract<AssistantMessage["content"][number], { readonly type: "text" }>
type ToolCallContent = Extract<AssistantMessage["content"][number], { readonly type: "tool-call" }>

const textBlock = (block: TextContent): ContentBlock => ({ type: "text", text: block.text })

const toolUseBlock = (block: ToolCallContent): ContentBlock => ({
  type: "tool_use",
  id: block.id,
  name: block.name,
  input: inputOf(block.arguments)
})

/**
 * The content of an assistant message. With this adapter's replay state, its entries in order:
 * stored blocks as they are, each `{type: "text"}` filled by the message's next text block and each
 * `{type: "tool_use", id}` by the message's call of that id; text and calls no entry stood for
 * follow. Without it, the message's text and tool calls (reasoning without a signature is not sent).
 * Placeholders stand for the non-empty text blocks, as the decoder wrote them.
 */
const assistantContent = (message: AssistantMessage): Array<ContentBlock> => {
  const texts = message.content.filter((block): block is TextContent => block.type === "text" && block.text !== "")
  const calls = message.content.filter((block): block is ToolCallContent => block.type === "tool-call")
  const entries = AnthropicEvents.replayContent(message.source.replayState)
  if (entries === undefined) {
    return message.content.flatMap((block) =>
      block.type === "text"
        ? [textBlock(block)]
        : block.type === "tool-call"
        ? [toolUseBlock(block)]
        : []
    )
  }
  const out: Array<ContentBlock> = []
  let nextText = 0
  const usedCalls = new Set<ToolCallContent>()
  for (const entry of entries) {
    if (entry.type === "text") {
      const text = texts[nextText++]
      if (text !== undefined) out.push(textBlock(text))
    } else if (entry.type === "tool_use") {
      const call = calls.find((candidate) => candidate.id === entry.id && !usedCalls.has(candidate))
      if (call !== undefined) {
        usedCalls.add(call)
        out.push(toolUseBlock(call))
      }
    } else {
      out.push(entry)
    }
  }
  for (const text of texts.slice(nextText)) out.push(textBlock(text))
  for (const call of calls) if (!usedCalls.has(call)) out.push(toolUseBlock(call))
  return out
}

/**
 * Converts a request's messages to Messages API turns, in order. Consecutive messages of one role
 * become one turn (the API wants alternating roles); in a user turn the `tool_result` blocks come
 * first, as the API requires after a `tool_use`, then the other blocks in order. Text the API
 * would reject (see `sendableText`) and empty messages are left out.
 *
 * @since 0.1.0
 * @category conversions
 */
export const toAnthropicMessages = (messages: ReadonlyArray<Message>): ReadonlyArray<AnthropicMessage> => {
  const out: Array<AnthropicMessage> = []
  let role: "user" | "assistant" | undefined
  let results: Array<ContentBlock> = []
  let others: Array<ContentBlock> = []
  const flush = () => {
    if (role !== undefined && results.length + others.length > 0) {
      out.push({ role, content: [...results, ...others] })
    }
    results = []
    others = []
  }
  for (const message of messages) {
    const content: Array<ContentBlock> = []
    const toolResults: Array<ContentBlock> = []
    if (message.role === "assistant") {
      content.push(...assistantContent(message))
    } else {
      for (const block of message.content) {
        if (block.type === "tool-result") toolResults.push(toolResultBlock(block))
        else if (block.type === "image") content.push(imageBlock(block))
        else content.push({ type: "text", text: block.text })
      }
    }
    const sendable = sendableText(content)
    if (sendable.length + toolResults.length === 0) continue
    if (message.role !== role) {
      flush()
      role = message.role
    }
    results.push(...toolResults)
    others.push(...sendable)
  }
  flush()
  return out
}

/** A tool as the Messages API declares it. */
const toAnthropicTool = (schema: ToolSchema) => ({
  name: schema.name,
  description: schema.description,
  input_schema: providerParameters(schema)
})

/**
 * The JSON body of one streamed Messages API request. `system` is left out when empty, `tools`
 * when there are none, `temperature` when not given. With `promptCaching` (default on) the last
 * tool, the system prompt (then a one-block array) and the rolling messages carry `cache_control`.
 * `tools`, `system` and `messages` come last, in the provider's cache order.
 *
 * @since 0.1.0
 * @category conversions
 */
export const toAnthropicRequest = (
  request: ModelRequest,
  options: {
    readonly model: string
    readonly maxTokens?: number | undefined
    readonly promptCaching?: boolean | undefined
    readonly cacheTtl?: AnthropicCache.CacheTtl | undefined
  }
) => {
  const caching = options.promptCaching ?? true
  const control = AnthropicCache.cacheControl(options.cacheTtl ?? "5m")
  const tools = request.tools.map(toAnthropicTool)
  const hasSystem = request.system !== undefined && request.system !== ""
  const messages = toAnthropicMessages(request.messages)
  const budget = AnthropicCache.MAX_BREAKPOINTS - (caching && tools.length > 0 ? 1 : 0) - (caching && hasSystem ? 1 : 0)
  return {
    model: options.model,
    max_tokens: request.maxTokens ?? options.maxTokens ?? DEFAULT_MAX_TOKENS,
    ...(request.temperature === undefined ? {} : { temperature: request.temperature }),
    stream: true,
    ...(tools.length === 0 ? {} : { tools: caching ? AnthropicCache.markTools(tools, control) : tools }),
    ...(!hasSystem ? {} : {
      system: caching ? [{ type: "text", text: request.system, cache_control: control }] : request.system
    }),
    messages: caching ? AnthropicCache.markMessages(messages, control, budget) : messages
  }
}

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
      provider: "Anthropic",
      url: `${(options.baseUrl ?? DEFAULT_BASE_URL).replace(/\/+$/, "")}/v1/messages`,
      headers: {
        "anthropic-version": "2023-06-01",
        "content-type": "application/json",
        ...((options.promptCaching ?? true) && options.cacheTtl === "1h"
          ? { "anthropic-beta": AnthropicCache.EXTENDED_TTL_BETA }
          : {}),
        ...(options.apiKey === undefined ? {} : { "x-api-key": Redacted.value(options.apiKey) })
      },
      secret: options.apiKey,
      timeouts: options.timeouts
    }
    const orFail = Either.match({
      onLeft: (failure: LlmFailure) => Effect.fail(ProviderHttp.fail(endpoint, failure)),
      onRight: (chunks: ReadonlyArray<StreamChunk>) => Effect.succeed(chunks)
    })

    const stream = (request: ModelRequest): Stream.Stream<StreamChunk, ModelError> =>
      Stream.suspend(() => {
        const decoder = AnthropicEvents.makeDecoder()
        return ProviderHttp.streamEvents(client, endpoint, toAnthropicRequest(request, options)).pipe(
          Stream.mapConcatEffect((event) => orFail(decoder.event(event))),
          // The finish is the response's end: a body left open after message_stop is not read further.
          Stream.takeUntil((chunk) => chunk.type === "finish"),
          Stream.concat(Stream.fromIterableEffect(Effect.suspend(() => orFail(decoder.end()))))
        )
      }).pipe(Stream.withSpan("AnthropicModel.stream", { attributes: { model: options.model } }))

    return Model.make(stream)
  })

/**
 * The `Model` layer over the Anthropic Messages API; provide an `HttpClient` (for example
 * `FetchHttpClient.layer`).
 *
 * @since 0.1.0
 * @category layers
 */
export const layer = (options: Options): Layer.Layer<Model, never, HttpClient.HttpClient> =>
  Layer.effect(Model, make(options))
