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
 * A streamed reasoning field (`reasoning_content` or `reasoning`) is recorded in the message's
 * replay state; an assistant message with tool calls sends its reasoning back in that field. A refusal streams no text
 * (as with every adapter) and finishes as a `REFUSAL` error whose message holds the refusal's words.
 *
 * The transport, the SSE framing, the timeouts and HTTP failures are `ProviderHttp`'s; the events
 * are decoded by `ChatCompletionsEvents`; every failure is classified by the one table of
 * `ProviderFailure` (a cut body is a retryable `NETWORK` failure, a malformed stream a
 * non-retryable `MALFORMED_STREAM`); failure messages begin with the host (`host:port` of the base
 * URL). The API key is sent only in the `Authorization` header and is removed from every failure
 * message.
 *
 * The model sent is `options.model`, as the provided layer binds it, whatever `request.model` says;
 * `request.maxTokens` (else `options.maxTokens`) and `request.temperature` are sent when present.
 *
 * @since 0.1.0
 */
import * as HttpClient from "@effect/platform/HttpClient"
import type { ConfigError, Context } from "effect"
import { Effect, Layer, Redacted, Stream } from "effect"
import type { ModelError } from "../domain/Errors.js"
import type { ImageBlock, LlmFailure, Message, StreamChunk, ToolResultBlock, ToolSchema } from "../domain/Values.js"
import * as ChatCompletionsEvents from "../internal/providers/ChatCompletionsEvents.js"
import * as ProviderHttp from "../internal/providers/ProviderHttp.js"
import { providerParameters } from "../internal/providers/ProviderParameters.js"
import type { TimeoutOptions, Timeouts } from "../internal/providers/ProviderTimeouts.js"
import { resolveTimeouts } from "../internal/providers/ProviderTimeouts.js"
import type { ModelRequest } from "../services/Model.js"
import { Model } from "../services/Model.js"

/**
 * Options of {@link layer}: the endpoint's base URL (for example `http://127.0.0.1:11434/v1`), the
 * model name sent with every request, the optional API key, the default `max_tokens` and the
 * connect, first-byte and idle timeouts.
 *
 * @since 0.1.0
 * @category models
 */
export interface Options extends TimeoutOptions {
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
  | {
    readonly role: "assistant"
    readonly content: string | null
    readonly reasoning_content?: string
    readonly reasoning?: string
    readonly tool_calls?: ReadonlyArray<ChatToolCall>
  }
  | { readonly role: "tool"; readonly tool_call_id: string; readonly content: string }

const imagePart = (block: ImageBlock): ChatContentPart => ({
  type: "image_url",
  image_url: { url: `data:${block.mediaType};base64,${block.data}` }
})

const textOf = (
  blocks: ReadonlyArray<{ readonly type: string; readonly text?: string }>,
  type: "text" | "reasoning" = "text"
): string => blocks.flatMap((block) => block.type === type && block.text !== undefined ? [block.text] : []).join("\n")

const assistantMessage = (message: Extract<Message, { readonly role: "assistant" }>): ChatMessage | undefined => {
  const toolCalls: Array<ChatToolCall> = []
  for (const block of message.content) {
    if (block.type === "tool-call") {
      // No arguments mean an empty object (SPEC 4.6); hosts reject an empty string.
      const args = block.arguments.trim() === "" ? "{}" : block.arguments
      toolCalls.push({ id: block.id, type: "function", function: { name: block.name, arguments: args } })
    }
  }
  const text = textOf(message.content)
  if (text === "" && toolCalls.length === 0) return undefined
  // Hosts need the reasoning back inside a tool loop (DeepSeek requires it); a final answer's is not sent.
  const field = toolCalls.length === 0 ? undefined : ChatCompletionsEvents.reasoningFieldOf(message.source.replayState)
  const reasoning = field === undefined ? "" : textOf(message.content, "reasoning")
  return {
    role: "assistant",
    content: toolCalls.length > 0 && text === "" ? null : text,
    ...(field === undefined || reasoning === "" ? {} : { [field]: reasoning }),
    ...(toolCalls.length === 0 ? {} : { tool_calls: toolCalls })
  }
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
 * assistant message keeps its text and tool calls (empty arguments sent as `{}`) and, when it has
 * tool calls and its replay state names the field the host streamed reasoning in, its reasoning
 * in that field; a tool result is a
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
 * No cache field is sent (hosts cache prefixes by themselves, and some refuse fields they do not
 * know); `tools` and `messages` come last, in prompt order, so a request's bytes up to its newest
 * message are a prefix of the next request's.
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
    stream: true,
    stream_options: { include_usage: true },
    ...(maxTokens === undefined ? {} : { max_tokens: maxTokens }),
    ...(request.temperature === undefined ? {} : { temperature: request.temperature }),
    ...(request.tools.length === 0 ? {} : { tools: request.tools.map(toChatTool) }),
    messages: toChatMessages(request)
  }
}

// ---------------------------------------------------------------------------------------------------
// The service

/** The name failures give the host: the host and port of the base URL. */
const hostLabel = (baseUrl: string): string => {
  try {
    return new URL(baseUrl).host
  } catch {
    return "openai-compatible"
  }
}

/**
 * Builds the `Model` service over the `HttpClient` in context, with resolved timeouts.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (
  options: Options,
  timeouts: Timeouts
): Effect.Effect<Context.Tag.Service<typeof Model>, never, HttpClient.HttpClient> =>
  Effect.gen(function*() {
    const client = yield* HttpClient.HttpClient
    const endpoint: ProviderHttp.Endpoint = {
      provider: hostLabel(options.baseUrl),
      url: `${options.baseUrl.replace(/\/+$/, "")}/chat/completions`,
      headers: options.apiKey === undefined ? {} : { authorization: `Bearer ${Redacted.value(options.apiKey)}` },
      secret: options.apiKey,
      timeouts
    }
    const fail = (failure: LlmFailure) => ProviderHttp.fail(endpoint, failure)

    const stream = (request: ModelRequest): Stream.Stream<StreamChunk, ModelError> =>
      Stream.suspend(() => {
        const decoder = ChatCompletionsEvents.make({
          provider: endpoint.provider,
          callIdPrefix: `call_${request.turn}_${request.step}_${request.attempt}`
        })
        return ProviderHttp.streamEvents(client, endpoint, toChatRequest(request, options)).pipe(
          Stream.mapEffect((event) => Effect.mapError(decoder.event(event), fail)),
          Stream.takeUntil((step) => step.done),
          Stream.mapConcat((step) => step.chunks),
          Stream.concat(Stream.suspend(() => Stream.fromIterableEffect(Effect.mapError(decoder.end(), fail))))
        )
      }).pipe(Stream.withSpan("OpenAiCompatibleModel.stream", { attributes: { model: options.model } }))

    return Model.make(stream)
  })

/**
 * The `Model` layer over an OpenAI-compatible Chat Completions endpoint; provide an `HttpClient`
 * (for example `FetchHttpClient.layer`). Timeouts not given in `options` are read from the
 * environment (see `ProviderTimeouts`); an invalid one fails the layer with `ConfigError`.
 *
 * @since 0.1.0
 * @category layers
 */
export const layer = (options: Options): Layer.Layer<Model, ConfigError.ConfigError, HttpClient.HttpClient> =>
  Layer.effect(Model, Effect.flatMap(resolveTimeouts(options), (timeouts) => make(options, timeouts)))
