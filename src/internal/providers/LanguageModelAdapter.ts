/**
 * LanguageModelAdapter: the `Model` seam over an `@effect/ai` `LanguageModel` (SPEC 8.8).
 *
 * Each request becomes one `LanguageModel.streamText` call with the system prompt and the messages
 * in @effect/ai's prompt format, a toolkit of schema-only tools and `disableToolCallResolution`
 * (tiller executes tools itself); the response parts become tiller's stream chunks.
 *
 * `request.maxTokens` and `request.temperature` are not passed on: @effect/ai 0.37 has no per-call
 * generation options, so they are set on the provider's own layer or config override (for example
 * `OpenAiLanguageModel.withConfigOverride`). Likewise the model actually used is the one bound by
 * the provided `LanguageModel` layer, whatever `request.provider` and `request.model` say.
 *
 * `Model.layerLanguageModel` is built from `make`; this module knows the `Model` service only by
 * its shape, so the service module can import it.
 *
 * @since 0.1.0
 */
import * as AiError from "@effect/ai/AiError"
import * as LanguageModel from "@effect/ai/LanguageModel"
import * as Prompt from "@effect/ai/Prompt"
import type * as Response from "@effect/ai/Response"
import * as Tool from "@effect/ai/Tool"
import type * as Toolkit from "@effect/ai/Toolkit"
import { Effect, Either, Encoding, Predicate, Schema, Stream } from "effect"
import { ModelError } from "../../domain/Errors.js"
import type { ModelRequest } from "../../domain/ModelRequest.js"
import type { LlmFailure, Message, StreamChunk, ToolResultBlock, ToolSchema, Usage } from "../../domain/Values.js"
import { providerParameters } from "./ProviderParameters.js"
import { usageOf } from "./UsageCounts.js"

/**
 * The parameters of a schema-only tool: any JSON object, described to the provider by the tool's
 * own JSON Schema (a `jsonSchema` annotation replaces the generated one).
 */
const OpenParameters = Schema.Struct({}, Schema.Record({ key: Schema.String, value: Schema.Unknown }))

/**
 * A tool the model may call but @effect/ai never runs.
 *
 * @since 0.1.0
 * @category models
 */
export type SchemaOnlyTool = Tool.Tool<string, {
  readonly parameters: typeof OpenParameters
  readonly success: typeof Schema.Void
  readonly failure: typeof Schema.Never
  readonly failureMode: "error"
}>

type Tools = Record<string, SchemaOnlyTool>

/**
 * Declares one tiller tool to @effect/ai: its name, description and JSON Schema parameters.
 *
 * @since 0.1.0
 * @category constructors
 */
export const schemaOnlyTool = (schema: ToolSchema): SchemaOnlyTool => {
  const parameters = Predicate.isRecord(schema.parameters)
    ? OpenParameters.annotations({ jsonSchema: providerParameters(schema) })
    : OpenParameters
  return Tool.make(schema.name, { description: schema.description }).setParameters(parameters)
}

/**
 * Converts a request's system prompt and messages to an @effect/ai prompt: one prompt message per
 * tiller message, in order (empty messages are left out); tool results become tool messages.
 *
 * @since 0.1.0
 * @category conversions
 */
export const toPrompt = (request: Pick<ModelRequest, "system" | "messages">): Prompt.Prompt => {
  const messages: Array<Prompt.Message> = []
  if (request.system !== undefined && request.system !== "") {
    messages.push(Prompt.systemMessage({ content: request.system }))
  }
  const toolNames = new Map<string, string>()
  for (const message of request.messages) {
    if (message.role === "assistant") {
      const content = assistantParts(message, toolNames)
      if (content.length > 0) messages.push(Prompt.assistantMessage({ content }))
      continue
    }
    const userParts: Array<Prompt.UserMessagePart> = []
    const toolParts: Array<Prompt.ToolMessagePart> = []
    for (const block of message.content) {
      switch (block.type) {
        case "text":
          userParts.push(Prompt.textPart({ text: block.text }))
          break
        case "image":
          userParts.push(Prompt.filePart({ mediaType: block.mediaType, data: imageData(block.data) }))
          break
        case "tool-result":
          toolParts.push(Prompt.toolResultPart({
            id: block.toolCallId,
            name: toolNames.get(block.toolCallId) ?? "",
            isFailure: block.isError,
            result: toolResultValue(block),
            providerExecuted: false
          }))
          break
      }
    }
    if (userParts.length > 0) messages.push(Prompt.userMessage({ content: userParts }))
    if (toolParts.length > 0) messages.push(Prompt.toolMessage({ content: toolParts }))
  }
  return Prompt.fromMessages(messages)
}

const assistantParts = (
  message: Extract<Message, { readonly role: "assistant" }>,
  toolNames: Map<string, string>
): Array<Prompt.AssistantMessagePart> => {
  const parts: Array<Prompt.AssistantMessagePart> = []
  for (const block of message.content) {
    switch (block.type) {
      case "text":
        parts.push(Prompt.textPart({ text: block.text }))
        break
      case "reasoning":
        parts.push(Prompt.reasoningPart({ text: block.text }))
        break
      case "tool-call":
        toolNames.set(block.id, block.name)
        parts.push(Prompt.toolCallPart({
          id: block.id,
          name: block.name,
          params: parseArguments(block.arguments),
          providerExecuted: false
        }))
        break
    }
  }
  return parts
}

/** The parsed arguments, or the raw text when it is not JSON. */
const parseArguments = (text: string): unknown => {
  try {
    return JSON.parse(text)
  } catch {
    return text
  }
}

/** Providers encode bytes themselves; a string that is not base64 is passed through unchanged. */
const imageData = (base64: string): string | Uint8Array => Either.getOrElse(Encoding.decodeBase64(base64), () => base64)

/** A text-only result is its text (blocks joined by newlines); otherwise the blocks themselves. */
const toolResultValue = (block: ToolResultBlock): unknown =>
  block.content.every((part) => part.type === "text")
    ? block.content.map((part) => part.type === "text" ? part.text : "").join("\n")
    : block.content

/**
 * Maps @effect/ai's token usage to tiller's; absent when neither input nor output tokens are known.
 *
 * @since 0.1.0
 * @category conversions
 */
export const toUsage = (usage: Response.Usage): Usage | undefined =>
  usageOf({
    inputTokens: usage.inputTokens,
    outputTokens: usage.outputTokens,
    totalTokens: usage.totalTokens,
    reasoningTokens: usage.reasoningTokens,
    cacheReadTokens: usage.cachedInputTokens
  })

const codeOfStatus = (status: number | undefined): string =>
  status === 429
    ? "RATE_LIMIT"
    : status !== undefined && status >= 500 && status <= 599
    ? "SERVICE_UNAVAILABLE"
    : "UNKNOWN"

const messageOf = (error: unknown): string => {
  if (Predicate.hasProperty(error, "message") && Predicate.isString(error.message)) return error.message
  try {
    return JSON.stringify(error) ?? String(error)
  } catch {
    return String(error)
  }
}

const header = (headers: Readonly<Record<string, string>>, name: string): string | undefined => {
  const value = headers[name]
  return value === undefined || value.trim() === "" ? undefined : value
}

/** `retry-after-ms`, or `retry-after` in seconds (an HTTP date is not interpreted). */
const retryAfterMs = (headers: Readonly<Record<string, string>>): number | undefined => {
  const ms = Number(header(headers, "retry-after-ms"))
  if (Number.isFinite(ms) && ms >= 0) return ms
  const seconds = Number(header(headers, "retry-after"))
  return Number.isFinite(seconds * 1000) && seconds >= 0 ? seconds * 1000 : undefined
}

const statusOf = (error: unknown): number | undefined => {
  if (Predicate.hasProperty(error, "status") && Predicate.isNumber(error.status)) return error.status
  if (Predicate.hasProperty(error, "statusCode") && Predicate.isNumber(error.statusCode)) return error.statusCode
  return undefined
}

/** `Module.method: malformed output: <what did not decode>`. */
const malformedMessage = (error: AiError.MalformedOutput | AiError.MalformedInput): string => {
  const what = error._tag === "MalformedOutput" ? "malformed output" : "malformed input"
  const detail = error.description ?? (error.cause === undefined ? undefined : messageOf(error.cause))
  return `${error.module}.${error.method}: ${what}${detail === undefined ? "" : `: ${detail}`}`
}

/**
 * Error types (Anthropic's `error.type`) and codes (OpenAI's `code`) that providers send inside a
 * stream, without a status, for conditions a status would have marked retryable.
 */
const CODE_OF_STREAM_ERROR: Readonly<Record<string, string>> = {
  rate_limit_error: "RATE_LIMIT",
  rate_limit_exceeded: "RATE_LIMIT",
  overloaded_error: "OVERLOADED",
  api_error: "SERVICE_UNAVAILABLE",
  server_error: "SERVICE_UNAVAILABLE"
}

const codeOfPayload = (error: unknown, status: number | undefined): string => {
  if (status !== undefined) return codeOfStatus(status)
  for (const key of ["code", "type"] as const) {
    if (Predicate.hasProperty(error, key) && Predicate.isString(error[key])) {
      const code = CODE_OF_STREAM_ERROR[error[key]]
      if (code !== undefined) return code
    }
  }
  return "UNKNOWN"
}

/**
 * Classifies a failure of the stream (an `AiError`) or the payload of an `error` part: 429 is
 * `RATE_LIMIT`, 5xx `SERVICE_UNAVAILABLE`, a transport failure `NETWORK` (all retryable by the
 * default policy); other statuses are `UNKNOWN` with their status; output or input that does not
 * decode is `UNKNOWN` and `retryable: false`. An error payload without a status is classified by
 * its provider error type or code (`overloaded_error`, `rate_limit_exceeded`, `server_error`, ...).
 *
 * @since 0.1.0
 * @category conversions
 */
export const toFailure = (error: unknown): LlmFailure => {
  if (AiError.isAiError(error)) {
    switch (error._tag) {
      case "HttpResponseError": {
        const status = error.response.status
        const headers = error.response.headers
        const delay = retryAfterMs(headers)
        const requestId = header(headers, "x-request-id") ?? header(headers, "request-id")
        return {
          message: error.message,
          code: codeOfStatus(status),
          status,
          ...(delay === undefined ? {} : { retryAfterMs: delay }),
          ...(requestId === undefined ? {} : { requestId })
        }
      }
      case "HttpRequestError":
        return error.reason === "Transport"
          ? { message: error.message, code: "NETWORK" }
          : { message: error.message, code: "UNKNOWN", retryable: false }
      case "MalformedOutput":
      case "MalformedInput":
        return { message: malformedMessage(error), code: "UNKNOWN", retryable: false }
      default:
        return { message: error.message, code: "UNKNOWN" }
    }
  }
  const status = statusOf(error)
  return { message: messageOf(error), code: codeOfPayload(error, status), ...(status === undefined ? {} : { status }) }
}

type Part = Response.StreamPart<Tools>

/**
 * Translates the parts of one response into chunks. Block indexes are allocated in order of the
 * blocks' starts; a delta for a text or reasoning block that was never started opens it, and an
 * end for an unknown block is dropped.
 */
const makeTranslator = () => {
  let nextIndex = 0
  const text = new Map<string, number>()
  const reasoning = new Map<string, number>()
  const tools = new Map<string, number>()
  const seenTools = new Set<string>()
  const none: ReadonlyArray<StreamChunk> = []

  const delta = (
    open: Map<string, number>,
    block: "text" | "reasoning",
    id: string,
    chunk: (index: number) => StreamChunk
  ): ReadonlyArray<StreamChunk> => {
    const index = open.get(id)
    if (index !== undefined) return [chunk(index)]
    const opened = nextIndex++
    open.set(id, opened)
    return [{ type: "block-start", index: opened, block }, chunk(opened)]
  }
  const start = (open: Map<string, number>, id: string, chunk: (index: number) => StreamChunk) => {
    if (open.has(id)) return none
    const index = nextIndex++
    open.set(id, index)
    return [chunk(index)]
  }
  const end = (open: Map<string, number>, id: string): ReadonlyArray<StreamChunk> => {
    const index = open.get(id)
    if (index === undefined) return none
    open.delete(id)
    return [{ type: "block-end", index }]
  }

  return (part: Part): Effect.Effect<ReadonlyArray<StreamChunk>, ModelError> => {
    switch (part.type) {
      case "text-start":
        return Effect.succeed(start(text, part.id, (index) => ({ type: "block-start", index, block: "text" })))
      case "text-delta":
        return Effect.succeed(
          delta(text, "text", part.id, (index) => ({ type: "text-delta", index, text: part.delta }))
        )
      case "text-end":
        return Effect.succeed(end(text, part.id))
      case "reasoning-start":
        return Effect.succeed(
          start(reasoning, part.id, (index) => ({ type: "block-start", index, block: "reasoning" }))
        )
      case "reasoning-delta":
        return Effect.succeed(
          delta(reasoning, "reasoning", part.id, (index) => ({ type: "reasoning-delta", index, text: part.delta }))
        )
      case "reasoning-end":
        return Effect.succeed(end(reasoning, part.id))
      case "tool-params-start":
        seenTools.add(part.id)
        return Effect.succeed(start(tools, part.id, (index) => ({
          type: "block-start",
          index,
          block: "tool-call",
          id: part.id,
          name: part.name
        })))
      case "tool-params-delta": {
        const index = tools.get(part.id)
        return Effect.succeed(
          index === undefined ? none : [{ type: "tool-call-delta", index, arguments: part.delta }]
        )
      }
      case "tool-params-end":
        return Effect.succeed(end(tools, part.id))
      case "tool-call": {
        // Streamed calls repeat as a complete part after their params parts: close, never re-open.
        if (seenTools.has(part.id)) return Effect.succeed(end(tools, part.id))
        seenTools.add(part.id)
        const index = nextIndex++
        const json = JSON.stringify(part.params)
        return Effect.succeed([
          { type: "block-start", index, block: "tool-call", id: part.id, name: part.name },
          { type: "tool-call-delta", index, arguments: json === undefined ? "{}" : json },
          { type: "block-end", index }
        ])
      }
      case "finish": {
        const usage = toUsage(part.usage)
        const finish: StreamChunk = {
          type: "finish",
          finish: part.reason === "length"
            ? { kind: "max-tokens" }
            : part.reason === "error"
            ? { kind: "error", failure: { message: "the model finished with reason \"error\"", code: "UNKNOWN" } }
            : { kind: "stop" }
        }
        return Effect.succeed(usage === undefined ? [finish] : [{ type: "usage", usage }, finish])
      }
      case "error":
        return Effect.fail(new ModelError({ failure: toFailure(part.error) }))
      default:
        return Effect.succeed(none)
    }
  }
}

/**
 * Builds the `Model` service over the `LanguageModel` in context.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make: Effect.Effect<
  { readonly stream: (request: ModelRequest) => Stream.Stream<StreamChunk, ModelError> },
  never,
  LanguageModel.LanguageModel
> = Effect
  .gen(function*() {
    const languageModel = yield* LanguageModel.LanguageModel
    const declared = new WeakMap<ToolSchema, SchemaOnlyTool>()

    const toolkitOf = (schemas: ReadonlyArray<ToolSchema>): Toolkit.WithHandler<Tools> => {
      const tools: Tools = {}
      for (const schema of schemas) {
        let tool = declared.get(schema)
        if (tool === undefined) {
          tool = schemaOnlyTool(schema)
          declared.set(schema, tool)
        }
        tools[schema.name] = tool
      }
      return {
        tools,
        handle: (name) => Effect.dieMessage(`tiller runs tools itself; @effect/ai asked to run ${String(name)}`)
      }
    }

    const stream = (request: ModelRequest): Stream.Stream<StreamChunk, ModelError> =>
      Stream.suspend(() =>
        languageModel.streamText({
          prompt: toPrompt(request),
          toolkit: toolkitOf(request.tools),
          disableToolCallResolution: true
        }).pipe(
          Stream.mapError((error) => new ModelError({ failure: toFailure(error) })),
          Stream.mapConcatEffect(makeTranslator())
        )
      )

    return { stream }
  })
