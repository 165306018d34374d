/**
 * SessionEntity: a session as an `@effect/cluster` entity. Its RPCs are the driver's operations;
 * the ones that change the session are persisted by the cluster and keyed by their message or
 * operation id, so a redelivered message is answered from its stored reply and never applied twice.
 *
 * @since 0.1.0
 */
import * as ClusterSchema from "@effect/cluster/ClusterSchema"
import * as Entity from "@effect/cluster/Entity"
import * as Rpc from "@effect/rpc/Rpc"
import { Schema } from "effect"
import {
  AgentBusy,
  AgentDisposed,
  DuplicateMessage,
  InvalidEvent,
  MalformedLog,
  PersistenceError,
  UnsupportedLogVersion
} from "../domain/Errors.js"
import { MessageId } from "../domain/Ids.js"
import { InboxTarget, UserMessage } from "../domain/Values.js"

/**
 * Failures of a delivery through the cluster: the driver's, and the session's failure to open.
 *
 * @since 0.1.0
 * @category schemas
 */
export const DeliveryFailure = Schema.Union(
  InvalidEvent,
  DuplicateMessage,
  PersistenceError,
  AgentDisposed,
  AgentBusy,
  MalformedLog,
  UnsupportedLogVersion
)

/**
 * Failures of an operation that delivers nothing.
 *
 * @since 0.1.0
 * @category schemas
 */
export const OperationFailure = Schema.Union(
  PersistenceError,
  AgentDisposed,
  AgentBusy,
  MalformedLog,
  UnsupportedLogVersion
)

/**
 * One pending inbox item as a status shows it.
 *
 * @since 0.1.0
 * @category schemas
 */
export const PendingItem = Schema.Struct({ id: MessageId, text: Schema.String })

/**
 * A session's status: activity, turns, stored events and pending input.
 *
 * @since 0.1.0
 * @category schemas
 */
export const SessionStatus = Schema.Struct({
  sessionId: Schema.String,
  status: Schema.Literal("idle", "running"),
  turns: Schema.Int,
  events: Schema.Int,
  pending: Schema.Struct({ nextTurn: Schema.Array(PendingItem), nextStep: Schema.Array(PendingItem) })
})

/**
 * The status of a session ({@link SessionStatus}).
 *
 * @since 0.1.0
 * @category models
 */
export type SessionStatus = typeof SessionStatus.Type

const delivery = <const Tag extends string>(tag: Tag) =>
  Rpc.make(tag, {
    payload: { message: UserMessage },
    error: DeliveryFailure,
    primaryKey: ({ message }) => message.id
  }).annotate(ClusterSchema.Persisted, true)

/**
 * `Driver.followup` as a persisted RPC keyed by the message id.
 *
 * @since 0.1.0
 * @category rpcs
 */
export const Followup = delivery("Followup")

/**
 * `Driver.steer` as a persisted RPC keyed by the message id.
 *
 * @since 0.1.0
 * @category rpcs
 */
export const Steer = delivery("Steer")

/**
 * `Driver.inject` as a persisted RPC keyed by the message id.
 *
 * @since 0.1.0
 * @category rpcs
 */
export const Inject = delivery("Inject")

/**
 * `Driver.send` with a target and a wake flag, persisted and keyed by the message id.
 *
 * @since 0.1.0
 * @category rpcs
 */
export const Send = Rpc.make("Send", {
  payload: {
    message: UserMessage,
    target: InboxTarget,
    wakeup: Schema.Boolean,
    at: Schema.optional(Schema.Literal("start", "end"))
  },
  error: DeliveryFailure,
  primaryKey: ({ message }) => message.id
}).annotate(ClusterSchema.Persisted, true)

/**
 * `Driver.cancel` with a user cause, persisted and keyed by its operation id.
 *
 * @since 0.1.0
 * @category rpcs
 */
export const Cancel = Rpc.make("Cancel", {
  payload: { operationId: Schema.NonEmptyString, keepInbox: Schema.optional(Schema.Boolean) },
  error: OperationFailure,
  primaryKey: ({ operationId }) => operationId
}).annotate(ClusterSchema.Persisted, true)

/**
 * `Inbox.remove`, persisted and keyed by its operation id; `true` when the message was pending.
 *
 * @since 0.1.0
 * @category rpcs
 */
export const RemovePending = Rpc.make("RemovePending", {
  payload: { operationId: Schema.NonEmptyString, messageId: MessageId },
  success: Schema.Boolean,
  error: OperationFailure,
  primaryKey: ({ operationId }) => operationId
}).annotate(ClusterSchema.Persisted, true)

/**
 * `Inbox.clear`, persisted and keyed by its operation id.
 *
 * @since 0.1.0
 * @category rpcs
 */
export const ClearPending = Rpc.make("ClearPending", {
  payload: { operationId: Schema.NonEmptyString },
  error: OperationFailure,
  primaryKey: ({ operationId }) => operationId
}).annotate(ClusterSchema.Persisted, true)

/**
 * The session's status (not persisted: it changes nothing).
 *
 * @since 0.1.0
 * @category rpcs
 */
export const Status = Rpc.make("Status", { success: SessionStatus, error: OperationFailure })

/**
 * Resolves when the session is idle (not persisted).
 *
 * @since 0.1.0
 * @category rpcs
 */
export const WhenIdle = Rpc.make("WhenIdle", { error: OperationFailure })

/**
 * The session entity type: one entity per session id.
 *
 * @since 0.1.0
 * @category entities
 */
export const SessionEntity = Entity.make("TillerSession", [
  Followup,
  Steer,
  Inject,
  Send,
  Cancel,
  RemovePending,
  ClearPending,
  Status,
  WhenIdle
])
