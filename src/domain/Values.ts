/**
 * The value shapes used inside event payloads (SPEC 2.3).
 *
 * @since 0.1.0
 */
import { Schema } from "effect"
import { optional } from "./Exact.js"
import { MessageId } from "./Ids.js"
import { JsonValue } from "./Json.js"

/**
 * A plain text block.
 *
 * @since 0.1.0
 * @category schemas
 */
export const TextBlock = Schema.Struct({ type: Schema.Literal("text"), text: Schema.String })
/** A plain text block. @since 0.1.0 @category models */
export type TextBlock = typeof TextBlock.Type

/**
 * A base64 image block.
 *
 * @since 0.1.0
 * @category schemas
 */
export const ImageBlock = Schema.Struct({
  type: Schema.Literal("image"),
  mediaType: Schema.String,
  data: Schema.String
})
/** A base64 image block. @since 0.1.0 @category models */
export type ImageBlock = typeof ImageBlock.Type

/**
 * A reasoning block of an assistant message.
 *
 * @since 0.1.0
 * @category schemas
 */
export const ReasoningBlock = Schema.Struct({ type: Schema.Literal("reasoning"), text: Schema.String })
/** A reasoning block. @since 0.1.0 @category models */
export type ReasoningBlock = typeof ReasoningBlock.Type

/**
 * A tool call requested by the model; `arguments` is raw JSON text.
 *
 * @since 0.1.0
 * @category schemas
 */
export const ToolCallBlock = Schema.Struct({
  type: Schema.Literal("tool-call"),
  id: Schema.String,
  name: Schema.String,
  arguments: Schema.String
})
/** A tool call block. @since 0.1.0 @category models */
export type ToolCallBlock = typeof ToolCallBlock.Type

/**
 * Content a user-role message may carry.
 *
 * @since 0.1.0
 * @category schemas
 */
export const UserContent = Schema.Union(TextBlock, ImageBlock)
/** Content a user-role message may carry. @since 0.1.0 @category models */
export type UserContent = typeof UserContent.Type

/**
 * The answer to one tool call.
 *
 * @since 0.1.0
 * @category schemas
 */
export const ToolResultBlock = Schema.Struct({
  type: Schema.Literal("tool-result"),
  toolCallId: Schema.String,
  isError: Schema.Boolean,
  content: Schema.Array(UserContent)
})
/** A tool result block. @since 0.1.0 @category models */
export type ToolResultBlock = typeof ToolResultBlock.Type

/**
 * The producer of a message: an open, `kind`-tagged record whose extra fields are JSON.
 *
 * @since 0.1.0
 * @category schemas
 */
export const MessageSource = Schema.Struct(
  { kind: Schema.NonEmptyString },
  Schema.Record({ key: Schema.String, value: JsonValue })
)
/** The producer of a message. @since 0.1.0 @category models */
export type MessageSource = typeof MessageSource.Type

/**
 * A user-role message: a prompt, steering or injected context, told apart only by `source`.
 *
 * @since 0.1.0
 * @category schemas
 */
export const UserMessage = Schema.Struct({
  id: MessageId,
  role: Schema.Literal("user"),
  content: Schema.Array(UserContent),
  source: MessageSource
})
/** A user-role message. @since 0.1.0 @category models */
export type UserMessage = typeof UserMessage.Type

/**
 * The source of an assistant message.
 *
 * @since 0.1.0
 * @category schemas
 */
export const ModelSource = Schema.Struct({
  kind: Schema.Literal("model"),
  provider: Schema.String,
  model: Schema.String,
  replayState: optional(JsonValue)
})

/**
 * A model response.
 *
 * @since 0.1.0
 * @category schemas
 */
export const AssistantMessage = Schema.Struct({
  id: MessageId,
  role: Schema.Literal("assistant"),
  content: Schema.Array(Schema.Union(TextBlock, ReasoningBlock, ToolCallBlock)),
  source: ModelSource
})
/** A model response. @since 0.1.0 @category models */
export type AssistantMessage = typeof AssistantMessage.Type

/**
 * The user-role message that answers one tool call.
 *
 * @since 0.1.0
 * @category schemas
 */
export const ToolResultMessage = Schema.Struct({
  id: MessageId,
  role: Schema.Literal("user"),
  content: Schema.Tuple(ToolResultBlock),
  source: Schema.Struct({ kind: Schema.Literal("tool"), callId: Schema.String })
}).pipe(
  Schema.filter((m) => m.content[0].toolCallId === m.source.callId || "toolCallId must equal source.callId")
)
/** A tool result message. @since 0.1.0 @category models */
export type ToolResultMessage = typeof ToolResultMessage.Type

/**
 * Any message of the derived model history.
 *
 * @since 0.1.0
 * @category schemas
 */
export const Message = Schema.Union(UserMessage, AssistantMessage, ToolResultMessage)
/** Any message of the derived model history. @since 0.1.0 @category models */
export type Message = UserMessage | AssistantMessage | ToolResultMessage

const Count = Schema.NonNegativeInt

/**
 * Token usage of a model response.
 *
 * @since 0.1.0
 * @category schemas
 */
export const Usage = Schema.Struct({
  inputTokens: Count,
  outputTokens: Count,
  totalTokens: optional(Count),
  reasoningTokens: optional(Count),
  cacheReadTokens: optional(Count),
  cacheWriteTokens: optional(Count)
})
/** Token usage. @since 0.1.0 @category models */
export type Usage = typeof Usage.Type

/**
 * A failed model request, as the retry policy sees it.
 *
 * @since 0.1.0
 * @category schemas
 */
export const LlmFailure = Schema.Struct({
  message: Schema.String,
  code: Schema.String,
  status: optional(Schema.Number),
  retryAfterMs: optional(Schema.Number),
  requestId: optional(Schema.String),
  retryable: optional(Schema.Boolean)
})
/** A failed model request. @since 0.1.0 @category models */
export type LlmFailure = typeof LlmFailure.Type

const Index = Schema.NonNegativeInt

/**
 * The finish of one model attempt.
 *
 * @since 0.1.0
 * @category schemas
 */
export const Finish = Schema.Union(
  Schema.Struct({ kind: Schema.Literal("stop") }),
  Schema.Struct({ kind: Schema.Literal("max-tokens") }),
  Schema.Struct({ kind: Schema.Literal("error"), failure: LlmFailure }),
  Schema.Struct({ kind: Schema.Literal("aborted"), failure: LlmFailure })
)
/** The finish of one model attempt. @since 0.1.0 @category models */
export type Finish = typeof Finish.Type

/**
 * One chunk of a streamed model response.
 *
 * @since 0.1.0
 * @category schemas
 */
export const StreamChunk = Schema.Union(
  Schema.Struct({ type: Schema.Literal("block-start"), index: Index, block: Schema.Literal("text", "reasoning") }),
  Schema.Struct({
    type: Schema.Literal("block-start"),
    index: Index,
    block: Schema.Literal("tool-call"),
    id: Schema.String,
    name: Schema.String
  }),
  Schema.Struct({ type: Schema.Literal("text-delta"), index: Index, text: Schema.String }),
  Schema.Struct({ type: Schema.Literal("reasoning-delta"), index: Index, text: Schema.String }),
  Schema.Struct({ type: Schema.Literal("tool-call-delta"), index: Index, arguments: Schema.String }),
  Schema.Struct({ type: Schema.Literal("block-end"), index: Index }),
  Schema.Struct({ type: Schema.Literal("usage"), usage: Usage }),
  Schema.Struct({ type: Schema.Literal("replay-state"), state: JsonValue }),
  Schema.Struct({ type: Schema.Literal("finish"), finish: Finish })
)
/** One chunk of a streamed model response. @since 0.1.0 @category models */
export type StreamChunk = typeof StreamChunk.Type

const CancelCauseSchema = Schema.Union(
  Schema.Struct({ kind: Schema.Literal("user") }),
  Schema.Struct({ kind: Schema.Literal("parent") }),
  Schema.Struct({ kind: Schema.Literal("hook"), reason: Schema.String }),
  Schema.Struct({ kind: Schema.Literal("disposed") })
)

/**
 * Why an activity was cancelled; also carries constructors for each cause.
 *
 * @since 0.1.0
 * @category schemas
 */
export const CancelCause = Object.assign(CancelCauseSchema, {
  user: Object.freeze({ kind: "user" as const }),
  parent: Object.freeze({ kind: "parent" as const }),
  disposed: Object.freeze({ kind: "disposed" as const }),
  /** A cancel requested by a hook, with its reason. */
  hook: (reason: string): CancelCause => Object.freeze({ kind: "hook" as const, reason })
})
/**
 * A frozen copy of `cause` when it is a `CancelCause` (extra fields dropped), else `undefined`.
 *
 * @since 0.1.0
 * @category constructors
 */
export const copyCancelCause = (cause: unknown): CancelCause | undefined => {
  if (typeof cause !== "object" || cause === null) return undefined
  const { kind, reason } = cause as { readonly kind?: unknown; readonly reason?: unknown }
  switch (kind) {
    case "user":
      return CancelCause.user
    case "parent":
      return CancelCause.parent
    case "disposed":
      return CancelCause.disposed
    case "hook":
      return typeof reason === "string" ? CancelCause.hook(reason) : undefined
    default:
      return undefined
  }
}

/**
 * How an invalid cancel cause is named in an error: its `kind` when it is a string, else its type.
 *
 * @since 0.1.0
 * @category constructors
 */
export const describeCause = (cause: unknown): string => {
  if (typeof cause !== "object" || cause === null) return cause === null ? "null" : typeof cause
  const kind = (cause as { readonly kind?: unknown }).kind
  return typeof kind === "string" ? `kind ${JSON.stringify(kind)}` : "an object without a string kind"
}

/** Why an activity was cancelled. @since 0.1.0 @category models */
export type CancelCause = typeof CancelCauseSchema.Type

/**
 * Why a turn ended (SPEC 2.6).
 *
 * @since 0.1.0
 * @category schemas
 */
export const TurnEndReason = Schema.Union(
  Schema.Struct({ kind: Schema.Literal("completed") }),
  Schema.Struct({ kind: Schema.Literal("max-tokens") }),
  Schema.Struct({ kind: Schema.Literal("blocked"), message: optional(Schema.String) }),
  Schema.Struct({ kind: Schema.Literal("aborted"), reason: CancelCauseSchema }),
  Schema.Struct({ kind: Schema.Literal("error"), error: LlmFailure }),
  Schema.Struct({ kind: Schema.Literal("interrupted") })
)
/** Why a turn ended. @since 0.1.0 @category models */
export type TurnEndReason = typeof TurnEndReason.Type

/**
 * A tool as offered to the model.
 *
 * @since 0.1.0
 * @category schemas
 */
export const ToolSchema = Schema.Struct({ name: Schema.String, description: Schema.String, parameters: JsonValue })
/** A tool as offered to the model. @since 0.1.0 @category models */
export type ToolSchema = typeof ToolSchema.Type

/**
 * The routing and limits of a model request, logged as `request/header`.
 *
 * @since 0.1.0
 * @category schemas
 */
export const RequestHeader = Schema.Struct({
  provider: Schema.String,
  model: Schema.String,
  system: optional(Schema.String),
  maxTokens: optional(Schema.Number),
  temperature: optional(Schema.Number),
  tools: Schema.Array(ToolSchema)
})
/** The routing and limits of a model request. @since 0.1.0 @category models */
export type RequestHeader = typeof RequestHeader.Type

/**
 * Which inbox list an operation addresses.
 *
 * @since 0.1.0
 * @category schemas
 */
export const InboxTarget = Schema.Literal("next-turn", "next-step")
/** Which inbox list an operation addresses. @since 0.1.0 @category models */
export type InboxTarget = typeof InboxTarget.Type

/**
 * The public status of an agent.
 *
 * @since 0.1.0
 * @category models
 */
export type AgentStatus = "idle" | "running"
