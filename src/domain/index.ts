/**
 * The domain of tiller: schemas and pure functions, no services and no I/O.
 *
 * @since 0.1.0
 */
export { answerAfter, APPROVAL_INTERRUPTED, describeAnswer, foldApprovals } from "./Approvals.js"
export type { ApprovalQuestion, ApprovalsView, ApproveOptions, GivenAnswer, PendingApproval } from "./Approvals.js"
export * from "./Check.js"
export type { DriverEvent } from "./DriverEvent.js"
export * from "./Errors.js"
export {
  ApprovalAnswer,
  ApprovalAnswerData,
  ApprovalRequest,
  ApprovalSource,
  CORE_EVENT_TYPES,
  LOG_FORMAT_VERSION,
  SessionEvent,
  SessionHeader,
  SurfaceOp
} from "./Event.js"
export { MessageId, SessionId } from "./Ids.js"
export type { Json } from "./Json.js"
export { newUserMessage, userMessage } from "./Message.js"
export { repairClosers } from "./Repair.js"
export { foldInbox } from "./Splice.js"
export { deriveMessages } from "./Surface.js"
export {
  AssistantMessage,
  CancelCause,
  ImageBlock,
  LlmFailure,
  Message,
  MessageSource,
  ReasoningBlock,
  RequestHeader,
  StreamChunk,
  TextBlock,
  ToolCallBlock,
  ToolResultBlock,
  ToolResultMessage,
  ToolSchema,
  TurnEndReason,
  Usage,
  UserMessage
} from "./Values.js"
export type { AgentStatus, InboxTarget } from "./Values.js"

/**
 * What a session costs: per step, turn and session, folded from the log's usage at given prices.
 *
 * @since 0.1.0
 */
export * as Cost from "./Cost.js"

/**
 * Model prices in USD per million tokens: tiller's dated table and its overrides.
 *
 * @since 0.1.0
 */
export * as Prices from "./Prices.js"
