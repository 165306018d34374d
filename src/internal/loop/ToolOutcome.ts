/**
 * Pure pieces of a tool call's life that need no scheduler: argument decoding, output normalisation
 * and validation, and the result mapping table of SPEC 4.6 (outcome → result text, `isError`, error).
 *
 * The loop uses them in this order: `outcomeOutput` gives the output of an outcome (the input of
 * `ToolPost` for body outcomes and denials), `toolOutputProblem` checks the final output (a problem
 * becomes an `InvalidOutput` outcome), `outcomeError` gives the event's `error`, and
 * `toolResultMessage` wraps the final output. `mapOutcome` does all of it when no `ToolPost` runs.
 *
 * @since 0.1.0
 */
import { Data, Either, ParseResult, Schema } from "effect"
import type { MessageId } from "../../domain/Ids.js"
import type { Json } from "../../domain/Json.js"
import { deepFreeze, jsonProblem } from "../../domain/Json.js"
import * as SafeDecode from "../../domain/SafeDecode.js"
import type { NormalizedToolOutput, ToolDefinition, ToolOutput } from "../../domain/Tool.js"
import type { ImageBlock, TextBlock, ToolResultBlock, ToolResultMessage } from "../../domain/Values.js"
import { UserContent } from "../../domain/Values.js"

/**
 * How one tool call ended, one case per row of the result mapping table.
 *
 * @since 0.1.0
 * @category models
 */
export type ToolOutcome = Data.TaggedEnum<{
  /** The body succeeded (output already normalised). */
  Succeeded: { readonly output: NormalizedToolOutput }
  /** The body failed with a typed error. */
  Failed: { readonly error: unknown }
  /** The body died. */
  Died: { readonly defect: unknown }
  /** No tool of that name is registered. */
  UnknownTool: {}
  /** The arguments are not JSON or do not decode with the parameter Schema. */
  InvalidArguments: { readonly detail: string }
  /** A `ToolPre` listener denied the call. */
  Denied: { readonly reason: string }
  /** The `ToolPre` waterfall failed. */
  PreHookFailed: { readonly error: unknown }
  /** The output (content, meta or contexts) is invalid. */
  InvalidOutput: { readonly detail: string }
  /** A cause was recorded while the body ran. */
  Aborted: {}
  /** A cause was recorded before the body was forked. */
  AbortedBeforeDispatch: {}
  /** The scheduling machinery failed (D7). */
  InternalFailure: {}
}>

/**
 * Constructors and matchers of {@link ToolOutcome}.
 *
 * @since 0.1.0
 * @category constructors
 */
export const ToolOutcome = Data.taggedEnum<ToolOutcome>()

/**
 * The call a result answers: its id and the tool name the model asked for.
 *
 * @since 0.1.0
 * @category models
 */
export interface ToolCallRef {
  readonly callId: string
  readonly name: string
}

/**
 * The `error` of a `tool/result` event.
 *
 * @since 0.1.0
 * @category models
 */
export interface ToolResultError {
  readonly name: string
  readonly code: string
}

/**
 * One mapped result: the `tool-result` block, the event's `error` and `meta`, when present.
 *
 * @since 0.1.0
 * @category models
 */
export interface MappedToolResult {
  readonly block: ToolResultBlock
  readonly error?: ToolResultError
  readonly meta?: Json
}

const readField = (value: unknown, key: string): unknown => {
  if ((typeof value !== "object" || value === null) && typeof value !== "function") return undefined
  try {
    return (value as Record<string, unknown>)[key]
  } catch {
    return undefined
  }
}

const stringField = (value: unknown, key: string): string | undefined => {
  const field = readField(value, key)
  return typeof field === "string" ? field : undefined
}

/**
 * The message of a failure value (SPEC 4.7): `e.message` when it is a string, otherwise `String(e)`.
 * Never throws (a value `String` cannot convert gives its `Object.prototype.toString` tag).
 *
 * @since 0.1.0
 * @category utils
 */
export const failureMessage = (e: unknown): string => {
  const message = stringField(e, "message")
  if (message !== undefined) return message
  try {
    return String(e)
  } catch {
    return Object.prototype.toString.call(e)
  }
}

/**
 * How many characters of a failure value's JSON a tool result shows; a longer JSON is cut and ends
 * with `…`.
 *
 * @since 0.1.0
 * @category constants
 */
export const TOOL_FAILURE_JSON_CHARS = 500

/**
 * The `<message>` of a tool result's `Error: <message>` text (SPEC 4.6 table). A string `message` is
 * used as it is, as in {@link failureMessage}; where `String(e)` would only give an object's tag
 * (`[object Object]`), the value's JSON is shown instead (cut to {@link TOOL_FAILURE_JSON_CHARS}
 * characters), so that the model reads what the tool failed with. A value JSON cannot encode (a
 * cycle, a throwing getter) keeps `String(e)`. SPEC 4.7's `LlmFailure` rule, which does say
 * `[object Object]`, is {@link failureMessage} and stays unchanged.
 *
 * @since 0.1.0
 * @category utils
 */
export const toolFailureText = (e: unknown): string => {
  const message = failureMessage(e)
  if ((typeof e !== "object" || e === null) && typeof e !== "function") return message
  if (stringField(e, "message") !== undefined || !message.startsWith("[object ")) return message
  let json: string | undefined
  try {
    json = JSON.stringify(e)
  } catch {
    return message
  }
  if (typeof json !== "string") return message
  return json.length > TOOL_FAILURE_JSON_CHARS ? `${json.slice(0, TOOL_FAILURE_JSON_CHARS)}…` : json
}

const errorOutput = (text: string): NormalizedToolOutput =>
  Object.freeze({
    content: Object.freeze([Object.freeze({ type: "text" as const, text })]),
    isError: true,
    additionalContexts: Object.freeze([]),
    concludesTurn: false
  })

/**
 * The output an outcome maps to: the body's output on success, otherwise one error text block.
 *
 * @since 0.1.0
 * @category mapping
 */
export const outcomeOutput = (call: ToolCallRef, outcome: ToolOutcome): NormalizedToolOutput =>
  ToolOutcome.$match(outcome, {
    Succeeded: ({ output }) => output,
    Failed: ({ error }) => errorOutput(`Error: ${toolFailureText(error)}`),
    Died: ({ defect }) => errorOutput(`Error: ${toolFailureText(defect)}`),
    UnknownTool: () => errorOutput(`Error: unknown tool ${call.name}`),
    InvalidArguments: ({ detail }) => errorOutput(`Error: invalid arguments for ${call.name}: ${detail}`),
    Denied: ({ reason }) => errorOutput(`Error: tool call denied: ${reason}`),
    PreHookFailed: ({ error }) => errorOutput(`Error: ${toolFailureText(error)}`),
    InvalidOutput: ({ detail }) => errorOutput(`Error: tool produced invalid output: ${detail}`),
    Aborted: () => errorOutput("Error: tool call aborted"),
    AbortedBeforeDispatch: () => errorOutput("Error: tool call aborted before dispatch"),
    InternalFailure: () => errorOutput("Error: tool call failed internally")
  })

const fixedError = (name: string, code: string): ToolResultError => Object.freeze({ name, code })

/**
 * The `error {name, code}` an outcome records on its `tool/result` event; `undefined` on success.
 *
 * @since 0.1.0
 * @category mapping
 */
export const outcomeError = (outcome: ToolOutcome): ToolResultError | undefined =>
  ToolOutcome.$match(outcome, {
    Succeeded: () => undefined,
    Failed: ({ error }) =>
      fixedError(stringField(error, "_tag") ?? "Error", stringField(error, "code") ?? "TOOL_ERROR"),
    Died: () => fixedError("ToolDefect", "TOOL_DEFECT"),
    UnknownTool: () => fixedError("UnknownToolError", "UNKNOWN_TOOL"),
    InvalidArguments: () => fixedError("ToolArgumentsError", "INVALID_ARGUMENTS"),
    Denied: () => fixedError("ToolDeniedError", "DENIED"),
    PreHookFailed: () => fixedError("ToolPreHookError", "PRE_HOOK_FAILED"),
    InvalidOutput: () => fixedError("ToolOutputError", "INVALID_TOOL_OUTPUT"),
    Aborted: () => fixedError("AbortError", "ABORTED"),
    AbortedBeforeDispatch: () => fixedError("AbortError", "ABORTED_BEFORE_DISPATCH"),
    InternalFailure: () => fixedError("ToolSchedulerError", "TOOL_INTERNAL_ERROR")
  })

/**
 * Whether `ToolPost` runs for an outcome: body outcomes (success, failure, defect, abort) and denials.
 *
 * @since 0.1.0
 * @category mapping
 */
export const runsToolPost = (outcome: ToolOutcome): boolean =>
  outcome._tag === "Succeeded" || outcome._tag === "Failed" || outcome._tag === "Died" ||
  outcome._tag === "Aborted" || outcome._tag === "Denied"

/**
 * The `tool-result` block of a final output.
 *
 * @since 0.1.0
 * @category mapping
 */
export const toolResultBlock = (callId: string, output: NormalizedToolOutput): ToolResultBlock => ({
  type: "tool-result",
  toolCallId: callId,
  isError: output.isError,
  content: output.content
})

/**
 * The `ToolResultMessage` of a final output, with the id the loop minted for it.
 *
 * @since 0.1.0
 * @category mapping
 */
export const toolResultMessage = (id: MessageId, callId: string, output: NormalizedToolOutput): ToolResultMessage => ({
  id,
  role: "user",
  content: [toolResultBlock(callId, output)],
  source: { kind: "tool", callId }
})

/**
 * The whole mapping-table row of an outcome, for results that `ToolPost` does not touch.
 *
 * @since 0.1.0
 * @category mapping
 */
export const mapOutcome = (call: ToolCallRef, outcome: ToolOutcome): MappedToolResult => {
  const output = outcomeOutput(call, outcome)
  const error = outcomeError(outcome)
  return {
    block: toolResultBlock(call.callId, output),
    ...(error === undefined ? {} : { error }),
    ...(output.meta === undefined ? {} : { meta: output.meta })
  }
}

/**
 * Fills the defaults of a body's return value: a string (or string content) becomes one text block,
 * `isError` and `concludesTurn` default to false, `additionalContexts` to `[]`; `meta` is kept if set.
 *
 * @since 0.1.0
 * @category normalisation
 */
export const normalizeToolOutput = (output: ToolOutput | string): NormalizedToolOutput => {
  if (typeof output === "string") return normalizeToolOutput({ content: output })
  // Content and meta are frozen here (the tool/result event would freeze them in place anyway), so
  // the checked output cannot change before its result commits.
  const content: ReadonlyArray<TextBlock | ImageBlock> = typeof output.content === "string"
    ? [{ type: "text", text: output.content }]
    : deepFreeze(output.content)
  return Object.freeze({
    content,
    isError: output.isError ?? false,
    additionalContexts: output.additionalContexts ?? [],
    concludesTurn: output.concludesTurn ?? false,
    ...(output.meta === undefined ? {} : { meta: deepFreeze(output.meta) })
  })
}

const decodeContent = SafeDecode.decodeUnknownEither(Schema.Array(UserContent), { onExcessProperty: "error" })

/**
 * Why a tool output (raw from a body, or returned by `ToolPost`) is invalid, or `undefined`: content
 * must be a string or text/image blocks, flags booleans, `additionalContexts` an array and `meta` JSON.
 * The contexts' own validity and freshness are decided by the loop's commit transaction.
 *
 * @since 0.1.0
 * @category validation
 */
export const toolOutputProblem = (output: unknown): string | undefined => {
  if (typeof output === "string") return undefined
  if (typeof output !== "object" || output === null || Array.isArray(output)) {
    return "expected a string or an object with content"
  }
  const { additionalContexts, concludesTurn, content, isError, meta } = output as Record<string, unknown>
  if (typeof content !== "string") {
    const decoded = decodeContent(content)
    if (Either.isLeft(decoded)) return `content: ${ParseResult.TreeFormatter.formatErrorSync(decoded.left)}`
    const problem = jsonProblem(content, "content")
    if (problem !== undefined) return problem
  }
  if (isError !== undefined && typeof isError !== "boolean") return "isError must be a boolean"
  if (concludesTurn !== undefined && typeof concludesTurn !== "boolean") return "concludesTurn must be a boolean"
  if (additionalContexts !== undefined && !Array.isArray(additionalContexts)) {
    return "additionalContexts must be an array of user messages"
  }
  return meta === undefined ? undefined : jsonProblem(meta, "meta")
}

/**
 * Why an output returned by `ToolPost` (a `NormalizedToolOutput`) is invalid, or `undefined`: as
 * {@link toolOutputProblem}, and nothing is left to defaults: content is an array of blocks, the
 * flags are booleans, `additionalContexts` is an array.
 *
 * @since 0.1.0
 * @category validation
 */
export const normalizedOutputProblem = (output: unknown): string | undefined => {
  if (typeof output !== "object" || output === null || Array.isArray(output)) return "expected a tool output object"
  const { additionalContexts, concludesTurn, content, isError } = output as Record<string, unknown>
  if (!Array.isArray(content)) return "content must be an array of text or image blocks"
  if (typeof isError !== "boolean") return "isError must be a boolean"
  if (typeof concludesTurn !== "boolean") return "concludesTurn must be a boolean"
  if (!Array.isArray(additionalContexts)) return "additionalContexts must be an array of user messages"
  return toolOutputProblem(output)
}

/**
 * Decodes a call's raw argument text: `""` means `{}`, anything else is `JSON.parse`d and then decoded
 * with the tool's parameter Schema (excess properties ignored). `Left` holds a readable detail.
 *
 * @since 0.1.0
 * @category decoding
 */
export const decodeArguments = <P extends Schema.Schema.AnyNoContext>(
  tool: ToolDefinition<P>,
  raw: string
): Either.Either<Schema.Schema.Type<P>, string> => {
  let parsed: unknown = {}
  if (raw !== "") {
    try {
      parsed = JSON.parse(raw)
    } catch (e) {
      return Either.left(`not valid JSON (${failureMessage(e)})`)
    }
  }
  // Effect's Schema keeps one parser per schema (its own memo), so a decoder costs no rebuild per call.
  return Either.mapLeft(
    SafeDecode.decodeUnknownEither(tool.parameters, { errors: "all" })(parsed),
    (error) => ParseResult.TreeFormatter.formatErrorSync(error)
  )
}
