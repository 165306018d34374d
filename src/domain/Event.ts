/**
 * The durable event envelope, the session header and every core event type (SPEC 2.1-2.4).
 *
 * @since 0.1.0
 */
import { Schema } from "effect"
import { optional } from "./Exact.js"
import { JsonValue } from "./Json.js"
import {
  AssistantMessage,
  InboxTarget,
  LlmFailure,
  RequestHeader,
  StreamChunk,
  ToolResultMessage,
  TurnEndReason,
  Usage,
  UserMessage
} from "./Values.js"

/**
 * The log format version this reader and writer implement.
 *
 * @since 0.1.0
 * @category constants
 */
export const LOG_FORMAT_VERSION = 1 as const

const Int = Schema.NonNegativeInt
const Positive = Schema.Int.pipe(Schema.positive())
const Seq = Int

/**
 * How a message event changes the surface (SPEC 2.8).
 *
 * @since 0.1.0
 * @category schemas
 */
export const SurfaceOp = Schema.Union(
  Schema.Literal("append"),
  Schema.Struct({ op: Schema.Literal("replace"), start: Int, end: Int })
)
/** How a message event changes the surface. @since 0.1.0 @category models */
export type SurfaceOp = typeof SurfaceOp.Type

const ReplaceOp = Schema.Struct({ op: Schema.Literal("replace"), start: Int, end: Int })

const envelope = {
  seq: Seq,
  time: Int,
  ignorable: optional(Schema.Literal(true))
}

const plain = <T extends string, D extends Schema.Schema.AnyNoContext>(type: T, data: D) =>
  Schema.Struct({ type: Schema.Literal(type), ...envelope, data })

const surfaced = <T extends string, D extends Schema.Schema.AnyNoContext, S extends Schema.Schema.AnyNoContext>(
  type: T,
  data: D,
  surfaceOp: S
) =>
  Schema.Struct({
    type: Schema.Literal(type),
    ...envelope,
    data,
    surfaceOp,
    sourceEventSeqs: optional(Schema.Array(Seq))
  })

const TurnStep = { turn: Positive, step: Positive }

/** `turn/start`. @since 0.1.0 @category schemas */
export const TurnStart = plain("turn/start", Schema.Struct({ turn: Positive }))
/** `turn/end`. @since 0.1.0 @category schemas */
export const TurnEnd = plain("turn/end", Schema.Struct({ turn: Positive, reason: TurnEndReason }))
/** `step/start`. @since 0.1.0 @category schemas */
export const StepStart = plain("step/start", Schema.Struct(TurnStep))
/** `step/end`. @since 0.1.0 @category schemas */
export const StepEnd = plain("step/end", Schema.Struct(TurnStep))
/** `user/message`: an entered message (append) or a surface replacement. @since 0.1.0 @category schemas */
export const UserMessageEvent = surfaced("user/message", UserMessage, SurfaceOp)
/** `assistant/chunk`. @since 0.1.0 @category schemas */
export const AssistantChunk = plain(
  "assistant/chunk",
  Schema.Struct({ ...TurnStep, attempt: Positive, chunk: StreamChunk })
)
/** `assistant/message`. @since 0.1.0 @category schemas */
export const AssistantMessageEvent = surfaced(
  "assistant/message",
  Schema.Struct({
    ...TurnStep,
    attempt: Positive,
    message: AssistantMessage,
    usage: optional(Usage),
    interrupted: optional(Schema.Literal(true))
  }),
  Schema.Literal("append")
)
/** `tool/call`. @since 0.1.0 @category schemas */
export const ToolCall = plain(
  "tool/call",
  Schema.Struct({ ...TurnStep, callId: Schema.String, name: Schema.String, arguments: Schema.String })
)
/** `tool/result`. @since 0.1.0 @category schemas */
export const ToolResult = surfaced(
  "tool/result",
  Schema.Struct({
    ...TurnStep,
    message: ToolResultMessage,
    error: optional(Schema.Struct({ name: Schema.String, code: Schema.String })),
    meta: optional(JsonValue)
  }),
  SurfaceOp
)
/** `request/header`. @since 0.1.0 @category schemas */
export const RequestHeaderEvent = plain(
  "request/header",
  Schema.Struct({ header: RequestHeader, reason: Schema.Literal("initial", "resume", "change") })
)
/** `llm/retry`. @since 0.1.0 @category schemas */
export const LlmRetry = plain(
  "llm/retry",
  Schema.Struct({ ...TurnStep, attempt: Positive, delayMs: Int, failure: LlmFailure })
)

/**
 * The payload of `agent/inbox/spliced` (SPEC 2.7).
 *
 * @since 0.1.0
 * @category schemas
 */
export const SpliceData = Schema.Struct({
  target: InboxTarget,
  start: Int,
  removedCount: optional(Positive),
  inserted: Schema.Array(UserMessage),
  outcome: optional(Schema.Literal("canceled"))
})
/** The payload of `agent/inbox/spliced`. @since 0.1.0 @category models */
export type SpliceData = typeof SpliceData.Type

/** `agent/inbox/spliced`. @since 0.1.0 @category schemas */
export const InboxSpliced = plain("agent/inbox/spliced", SpliceData)
/** `session/end-seed`. @since 0.1.0 @category schemas */
export const EndSeed = plain(
  "session/end-seed",
  // `Schema.Struct({})` would accept any non-nullish value (even `5`); only `{}` is valid.
  Schema.Record({ key: Schema.String, value: Schema.Never })
)

const compaction = <T extends string>(type: T, extra: Schema.Struct.Fields) =>
  plain(
    type,
    Schema.Struct(
      { turn: Schema.NullOr(Positive), ...extra },
      Schema.Record({ key: Schema.String, value: JsonValue })
    )
  )

/** `compaction/start`. @since 0.1.0 @category schemas */
export const CompactionStart = compaction("compaction/start", {})
/** `compaction/summary`. @since 0.1.0 @category schemas */
export const CompactionSummary = compaction("compaction/summary", {})
/** `compaction/end`. @since 0.1.0 @category schemas */
export const CompactionEnd = compaction("compaction/end", {
  error: optional(Schema.Struct({ message: Schema.String }))
})

/**
 * Where an approval request came from: a permission rule, the permission mode, or a hook.
 *
 * @since 0.1.0
 * @category schemas
 */
export const ApprovalSource = Schema.Literal("rule", "mode", "hook")
/** Where an approval request came from. @since 0.1.0 @category models */
export type ApprovalSource = typeof ApprovalSource.Type

/**
 * `approval/request`: a tool call of the open step waits for a yes or no (SPEC 4.6, 4.12).
 *
 * @since 0.1.0
 * @category schemas
 */
export const ApprovalRequest = plain(
  "approval/request",
  Schema.Struct({
    ...TurnStep,
    callId: Schema.String,
    tool: Schema.String,
    input: JsonValue,
    reason: Schema.String,
    source: ApprovalSource
  })
)

/**
 * The payload of `approval/answer`: the decision, who gave it, why, and the rule "always" recorded.
 *
 * @since 0.1.0
 * @category schemas
 */
export const ApprovalAnswerData = Schema.Struct({
  callId: Schema.String,
  decision: Schema.Literal("allow", "deny"),
  by: Schema.NonEmptyString,
  reason: optional(Schema.String),
  rule: optional(Schema.NonEmptyString)
})
/** The payload of `approval/answer`. @since 0.1.0 @category models */
export type ApprovalAnswerData = typeof ApprovalAnswerData.Type

/** `approval/answer`: the answer to a pending `approval/request` (SPEC 4.12). @since 0.1.0 @category schemas */
export const ApprovalAnswer = plain("approval/answer", ApprovalAnswerData)

/**
 * The 18 core event types (SPEC 2.4).
 *
 * @since 0.1.0
 * @category constants
 */
export const CORE_EVENT_TYPES: ReadonlyArray<string> = Object.freeze([
  "turn/start",
  "turn/end",
  "step/start",
  "step/end",
  "user/message",
  "assistant/chunk",
  "assistant/message",
  "tool/call",
  "tool/result",
  "request/header",
  "llm/retry",
  "agent/inbox/spliced",
  "session/end-seed",
  "compaction/start",
  "compaction/summary",
  "compaction/end",
  "approval/request",
  "approval/answer"
])

const coreTypes: ReadonlySet<string> = new Set(CORE_EVENT_TYPES)

/**
 * Whether `type` is one of the core event types.
 *
 * @since 0.1.0
 * @category predicates
 */
export const isCoreType = (type: string): boolean => coreTypes.has(type)

/**
 * An extension event: a declared type or one marked `ignorable` (SPEC 2.9).
 *
 * @since 0.1.0
 * @category schemas
 */
export const ExtensionEvent = Schema.Struct({
  type: Schema.NonEmptyString.pipe(Schema.filter((t) => !coreTypes.has(t) || `${t} is a core type`)),
  ...envelope,
  data: JsonValue
})
/** An extension event. @since 0.1.0 @category models */
export type ExtensionEvent = typeof ExtensionEvent.Type

/**
 * Any event of the durable log, decoded by `type`.
 *
 * @since 0.1.0
 * @category schemas
 */
export const SessionEvent = Schema.Union(
  TurnStart,
  TurnEnd,
  StepStart,
  StepEnd,
  UserMessageEvent,
  AssistantChunk,
  AssistantMessageEvent,
  ToolCall,
  ToolResult,
  RequestHeaderEvent,
  LlmRetry,
  InboxSpliced,
  EndSeed,
  CompactionStart,
  CompactionSummary,
  CompactionEnd,
  ApprovalRequest,
  ApprovalAnswer,
  ExtensionEvent
)
/** Any event of the durable log. @since 0.1.0 @category models */
export type SessionEvent = typeof SessionEvent.Type

/**
 * The core events, without extensions.
 *
 * @since 0.1.0
 * @category models
 */
export type CoreEvent =
  | typeof TurnStart.Type
  | typeof TurnEnd.Type
  | typeof StepStart.Type
  | typeof StepEnd.Type
  | typeof UserMessageEvent.Type
  | typeof AssistantChunk.Type
  | typeof AssistantMessageEvent.Type
  | typeof ToolCall.Type
  | typeof ToolResult.Type
  | typeof RequestHeaderEvent.Type
  | typeof LlmRetry.Type
  | typeof InboxSpliced.Type
  | typeof EndSeed.Type
  | typeof CompactionStart.Type
  | typeof CompactionSummary.Type
  | typeof CompactionEnd.Type
  | typeof ApprovalRequest.Type
  | typeof ApprovalAnswer.Type

/**
 * Narrows an event to the core union (extension events have non-core types).
 *
 * @since 0.1.0
 * @category predicates
 */
export const isCoreEvent = (event: SessionEvent): event is CoreEvent => coreTypes.has(event.type)

/**
 * The core event of a given type.
 *
 * @since 0.1.0
 * @category models
 */
export type EventOf<T extends CoreEvent["type"]> = Extract<CoreEvent, { readonly type: T }>

/**
 * The out-of-band header of a session (SPEC 2.2).
 *
 * @since 0.1.0
 * @category schemas
 */
export const SessionHeader = Schema.Struct({
  formatVersion: Schema.Number,
  // A plain non-empty string, as SPEC 2.2 types it (a `SessionId` is one).
  sessionId: Schema.NonEmptyString,
  createdAt: Int,
  seedLength: Int,
  parent: optional(Schema.Struct({ sessionId: Schema.NonEmptyString, boundary: Schema.Int })),
  metadata: optional(JsonValue)
})
/** The out-of-band header of a session. @since 0.1.0 @category models */
export type SessionHeader = typeof SessionHeader.Type

/** The replace form of a surface op. @since 0.1.0 @category schemas */
export const SurfaceReplace = ReplaceOp
