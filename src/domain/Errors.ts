/**
 * Every typed failure of tiller's public API.
 *
 * @since 0.1.0
 */
import { Effect, Schema } from "effect"
import { optional } from "./Exact.js"
import { MessageId, SessionId } from "./Ids.js"
import { CancelCause, LlmFailure } from "./Values.js"

/**
 * Rule identifiers of the relational checker (SPEC 5.2).
 *
 * @since 0.1.0
 * @category models
 */
export const RuleId = Schema.Literal(
  "R1",
  "R2",
  "R3",
  "R4",
  "R5",
  "R6",
  "R7",
  "R8",
  "R9",
  "R10",
  "R11",
  "R12",
  "R13",
  "R14",
  "R15",
  "R16",
  "R17",
  "R18",
  "R19",
  "R20"
)

/**
 * A rule identifier of the relational checker.
 *
 * @since 0.1.0
 * @category models
 */
export type RuleId = typeof RuleId.Type

/**
 * The state of a known message id (SPEC 3.9).
 *
 * @since 0.1.0
 * @category schemas
 */
export const KnownIdState = Schema.Literal("pending", "claimed", "entered", "discarded")

/**
 * The state of a known message id.
 *
 * @since 0.1.0
 * @category models
 */
export type KnownIdState = typeof KnownIdState.Type

/**
 * A pre-step listener rejected the proposed batch.
 *
 * @since 0.1.0
 * @category errors
 */
export class PreStepRejected extends Schema.TaggedError<PreStepRejected>("tiller/PreStepRejected")("PreStepRejected", {
  turn: Schema.Number,
  step: Schema.Number,
  reason: optional(Schema.String)
}) {
  override get message(): string {
    return `pre-step rejected turn ${this.turn} step ${this.step}${this.reason === undefined ? "" : `: ${this.reason}`}`
  }
}

/**
 * A pre-step listener failed or died.
 *
 * @since 0.1.0
 * @category errors
 */
export class PreStepFailed extends Schema.TaggedError<PreStepFailed>("tiller/PreStepFailed")("PreStepFailed", {
  turn: Schema.Number,
  step: Schema.Number,
  cause: Schema.Defect
}) {
  override get message(): string {
    return `pre-step listener failed at turn ${this.turn} step ${this.step}: ${describe(this.cause)}`
  }
}

/**
 * A message id was submitted that the session already knows.
 *
 * @since 0.1.0
 * @category errors
 */
export class DuplicateMessage
  extends Schema.TaggedError<DuplicateMessage>("tiller/DuplicateMessage")("DuplicateMessage", {
    id: MessageId,
    state: KnownIdState
  })
{
  override get message(): string {
    return `message ${this.id} is already known (${this.state})`
  }
}

/**
 * Splice coordinates that are not numbers.
 *
 * @since 0.1.0
 * @category errors
 */
export class InvalidSplice extends Schema.TaggedError<InvalidSplice>("tiller/InvalidSplice")("InvalidSplice", {
  target: Schema.String,
  start: Schema.Unknown,
  deleteCount: Schema.Unknown,
  reason: Schema.String
}) {
  override get message(): string {
    return `invalid splice of ${this.target}: ${this.reason}`
  }
}

/**
 * An event or message that fails validation (SPEC 5.1, 5.2).
 *
 * @since 0.1.0
 * @category errors
 */
export class InvalidEvent extends Schema.TaggedError<InvalidEvent>("tiller/InvalidEvent")("InvalidEvent", {
  type: Schema.String,
  reason: Schema.String,
  rule: optional(RuleId)
}) {
  override get message(): string {
    return `invalid ${this.type}${this.rule === undefined ? "" : ` (${this.rule})`}: ${this.reason}`
  }
}

/**
 * The agent is busy with other work.
 *
 * @since 0.1.0
 * @category errors
 */
export class AgentBusy extends Schema.TaggedError<AgentBusy>("tiller/AgentBusy")("AgentBusy", {
  sessionId: SessionId,
  operation: Schema.Literal("runMaintenance", "open"),
  phase: Schema.Literal("running", "maintenance", "disposing", "open")
}) {
  override get message(): string {
    return this.operation === "open"
      ? `session ${this.sessionId} is already open in another agent (of this store, or of another process on its file)`
      : `session ${this.sessionId} cannot ${this.operation}: the agent is ${this.phase}`
  }
}

/**
 * The agent was disposed.
 *
 * @since 0.1.0
 * @category errors
 */
export class AgentDisposed extends Schema.TaggedError<AgentDisposed>("tiller/AgentDisposed")("AgentDisposed", {
  sessionId: SessionId
}) {
  override get message(): string {
    return `session ${this.sessionId} is disposed`
  }
}

/**
 * A maintenance task was cancelled.
 *
 * @since 0.1.0
 * @category errors
 */
export class MaintenanceAborted extends Schema.TaggedError<MaintenanceAborted>("tiller/MaintenanceAborted")(
  "MaintenanceAborted",
  { cause: CancelCause }
) {
  override get message(): string {
    return `maintenance aborted (${this.cause.kind})`
  }
}

/**
 * Storage failed; the session fails closed (SPEC 6.3).
 *
 * @since 0.1.0
 * @category errors
 */
export class PersistenceError extends Schema.TaggedError<PersistenceError>("tiller/PersistenceError")(
  "PersistenceError",
  { sessionId: Schema.String, operation: Schema.String, cause: Schema.Defect }
) {
  /**
   * Maps every failure of an effect to a `PersistenceError`.
   *
   * @since 0.1.0
   */
  static refail(sessionId: string, operation: string) {
    return <A, E, R>(self: Effect.Effect<A, E, R>): Effect.Effect<A, PersistenceError, R> =>
      Effect.mapError(
        self,
        (cause) => cause instanceof PersistenceError ? cause : new PersistenceError({ sessionId, operation, cause })
      )
  }

  override get message(): string {
    return `storage failed during ${this.operation} of session ${this.sessionId}: ${describe(this.cause)}`
  }
}

/**
 * A stored or loaded log violates the format.
 *
 * @since 0.1.0
 * @category errors
 */
export class MalformedLog extends Schema.TaggedError<MalformedLog>("tiller/MalformedLog")("MalformedLog", {
  sessionId: Schema.String,
  seq: optional(Schema.Number),
  reason: Schema.String
}) {
  override get message(): string {
    return `malformed log of session ${this.sessionId}${
      this.seq === undefined ? "" : ` at seq ${this.seq}`
    }: ${this.reason}`
  }
}

/**
 * A log written in a format version this reader does not support.
 *
 * @since 0.1.0
 * @category errors
 */
export class UnsupportedLogVersion extends Schema.TaggedError<UnsupportedLogVersion>("tiller/UnsupportedLogVersion")(
  "UnsupportedLogVersion",
  { sessionId: Schema.String, found: Schema.Number, supported: Schema.Number }
) {
  override get message(): string {
    return `session ${this.sessionId} has log format ${this.found}; this reader supports ${this.supported}`
  }
}

/**
 * A fork that cannot be made.
 *
 * @since 0.1.0
 * @category errors
 */
export class ForkError extends Schema.TaggedError<ForkError>("tiller/ForkError")("ForkError", {
  source: SessionId,
  reason: Schema.Literal("open-turn", "invalid-boundary", "child-exists"),
  boundary: optional(Schema.Number),
  childId: optional(Schema.String)
}) {
  override get message(): string {
    return `cannot fork ${this.source}: ${this.reason}`
  }
}

/**
 * An HTTP request to a session server that was refused before anything changed: its status (4xx),
 * a stable code (`Unauthorized`, `MalformedJson`, `InvalidRequest`, `UnknownOperation`,
 * `PayloadTooLarge`, ...) and why.
 *
 * @since 0.1.0
 * @category errors
 */
export class RequestRejected extends Schema.TaggedError<RequestRejected>("tiller/RequestRejected")("RequestRejected", {
  status: Schema.Int,
  code: Schema.String,
  reason: Schema.String
}) {
  override get message(): string {
    return `${this.code}: ${this.reason}`
  }
}

/**
 * No session is stored under this id.
 *
 * @since 0.1.0
 * @category errors
 */
export class SessionNotFound extends Schema.TaggedError<SessionNotFound>("tiller/SessionNotFound")("SessionNotFound", {
  sessionId: Schema.String
}) {
  override get message(): string {
    return `session ${this.sessionId} not found`
  }
}

/**
 * A session is already stored under this id.
 *
 * @since 0.1.0
 * @category errors
 */
export class SessionExists extends Schema.TaggedError<SessionExists>("tiller/SessionExists")("SessionExists", {
  sessionId: Schema.String
}) {
  override get message(): string {
    return `session ${this.sessionId} already exists; to continue it use Agent.layer({ resume: "${this.sessionId}" }), ` +
      `or { open: "${this.sessionId}" } to resume it when stored and create it otherwise`
  }
}

/**
 * A model request failed.
 *
 * @since 0.1.0
 * @category errors
 */
export class ModelError extends Schema.TaggedError<ModelError>("tiller/ModelError")("ModelError", {
  failure: LlmFailure
}) {
  override get message(): string {
    return this.failure.message
  }
}

const describe = (cause: unknown): string =>
  typeof cause === "object" && cause !== null && "message" in cause && typeof cause.message === "string"
    ? cause.message
    : String(cause)

/**
 * The model's context window overflowed and compaction could not make the request fit: a second
 * overflow in the same step after compacting, nothing left to compact (or only a summary whose
 * request failed), automatic compaction stopped
 * by its circuit breaker, or a pre-compaction hook vetoed it (`veto`: its reason). Ends the turn
 * `error` with code `CONTEXT_OVERFLOW` (issue 28).
 *
 * @since 0.1.0
 * @category errors
 */
export class ContextOverflow extends Schema.TaggedError<ContextOverflow>("tiller/ContextOverflow")("ContextOverflow", {
  turn: Schema.Number,
  step: Schema.Number,
  used: Schema.Number,
  window: Schema.Number,
  reason: Schema.Literal("repeated", "nothing-to-compact", "summary-failed", "breaker-open", "vetoed"),
  providerMessage: Schema.String,
  veto: Schema.optional(Schema.String)
}) {
  /** The failure code the turn ends with. */
  get code(): string {
    return "CONTEXT_OVERFLOW"
  }
  override get message(): string {
    const why = this.reason === "repeated"
      ? "the request overflowed again after compacting the conversation"
      : this.reason === "nothing-to-compact"
      ? "there is nothing left to compact (no old tool results to prune, nothing to summarise)"
      : this.reason === "summary-failed"
      ? "there was nothing to prune and the summary request failed"
      : this.reason === "vetoed"
      ? `a pre-compaction hook vetoed compaction (${this.veto ?? "no reason given"})`
      : "automatic compaction stopped after repeated failures"
    return `the conversation no longer fits the model's context window (about ${this.used} of ${this.window} tokens in use): ${why}. ` +
      `Start a new session or fork this one at an earlier point, or use a model with a larger window ` +
      `(set the window with --context-window N if it is larger than assumed). Provider: ${this.providerMessage}`
  }
}

/**
 * A hook settings file could not be used: unreadable, not JSON, or not in the Claude Code shape.
 *
 * @since 0.1.0
 * @category errors
 */
export class HookConfigError extends Schema.TaggedError<HookConfigError>("tiller/HookConfigError")("HookConfigError", {
  path: Schema.String,
  reason: Schema.String
}) {
  override get message(): string {
    return `hook settings ${this.path}: ${this.reason}`
  }
}

/**
 * Permission settings could not be used: a settings file that is unreadable or not JSON, or a
 * `permissions` entry that is not in Claude Code's shape (a rule that does not parse, an unknown mode).
 *
 * @since 0.1.0
 * @category errors
 */
export class PermissionConfigError
  extends Schema.TaggedError<PermissionConfigError>("tiller/PermissionConfigError")("PermissionConfigError", {
    path: Schema.String,
    reason: Schema.String
  })
{
  override get message(): string {
    return `permission settings ${this.path}: ${this.reason}`
  }
}

/**
 * A hook command did not give a usable answer: it could not start, timed out, wrote too much, exited
 * with a code other than 0 or 2, or wrote output that is not the protocol's JSON. Non-blocking: it
 * is reported on the session and the action goes on.
 *
 * @since 0.1.0
 * @category errors
 */
export class HookCommandError
  extends Schema.TaggedError<HookCommandError>("tiller/HookCommandError")("HookCommandError", {
    event: Schema.String,
    command: Schema.String,
    code: Schema.Literal("SPAWN_FAILED", "TIMEOUT", "OUTPUT_TOO_LARGE", "EXIT_CODE", "MALFORMED_OUTPUT"),
    detail: Schema.String
  })
{
  override get message(): string {
    return `${this.event} hook ${JSON.stringify(this.command)}: ${this.detail}`
  }
}

/**
 * A cross-session reference could not be made: the source session is missing, the boundary is not
 * a seq of its log, or the target is the source itself.
 *
 * @since 0.1.0
 * @category errors
 */
export class SessionReferenceError extends Schema.TaggedError<SessionReferenceError>("tiller/SessionReferenceError")(
  "SessionReferenceError",
  {
    source: Schema.String,
    reason: Schema.String
  }
) {
  override get message(): string {
    return `cannot reference session ${this.source}: ${this.reason}`
  }
}

/**
 * An answer to an approval that is not pending: no request names the call (`unknown`), or its
 * request was answered already or closed by the call's result (`answered`). Nothing is recorded.
 *
 * @since 0.1.0
 * @category errors
 */
export class ApprovalNotPending extends Schema.TaggedError<ApprovalNotPending>("tiller/ApprovalNotPending")(
  "ApprovalNotPending",
  {
    sessionId: Schema.String,
    callId: Schema.String,
    reason: Schema.Literal("unknown", "answered")
  }
) {
  override get message(): string {
    return this.reason === "unknown"
      ? `session ${this.sessionId} has no approval request for tool call ${this.callId}`
      : `the approval request for tool call ${this.callId} of session ${this.sessionId} is no longer pending`
  }
}

/**
 * An MCP server could not do what was asked: it did not start, a request failed or timed out, or
 * it is not configured.
 *
 * @since 0.1.0
 * @category errors
 */
export class McpError extends Schema.TaggedError<McpError>("tiller/McpError")("McpError", {
  server: Schema.String,
  reason: Schema.String
}) {
  override get message(): string {
    return `MCP server ${this.server}: ${this.reason}`
  }
}

/**
 * An MCP server wants OAuth authorization and tiller holds no usable tokens for it (none stored,
 * or they can no longer be refreshed): `tiller mcp login SERVER` gets them.
 *
 * @since 0.1.0
 * @category errors
 */
export class McpAuthorizationRequired extends Schema.TaggedError<McpAuthorizationRequired>(
  "tiller/McpAuthorizationRequired"
)("McpAuthorizationRequired", {
  server: Schema.String
}) {
  override get message(): string {
    return `MCP server ${this.server} needs authorization: run \`tiller mcp login ${this.server}\``
  }
}
