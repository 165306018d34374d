/**
 * ClusterSessions: sessions served by an `@effect/cluster` cluster. Each session is an entity
 * (`SessionEntity`) owned by one runner at a time; any process with the sharding service reaches
 * it through `client(sessionId)`, whatever runner owns it, and follows its events from the log.
 *
 * @since 0.1.0
 */
import type { MailboxFull, PersistenceError as ClusterPersistenceError } from "@effect/cluster/ClusterError"
import type { AlreadyProcessingMessage } from "@effect/cluster/ClusterError"
import type { Sharding } from "@effect/cluster/Sharding"
import type { Duration } from "effect"
import { Effect, Option, Schedule, Stream } from "effect"
import type {
  AgentBusy,
  AgentDisposed,
  DuplicateMessage,
  InvalidEvent,
  MalformedLog,
  PersistenceError,
  SessionNotFound,
  UnsupportedLogVersion
} from "../domain/Errors.js"
import type { SessionEvent } from "../domain/Event.js"
import type { MessageId, SessionId } from "../domain/Ids.js"
import type { InboxTarget, UserMessage } from "../domain/Values.js"
import { SessionStore } from "../services/SessionStore.js"
import type { SessionStatus } from "./SessionEntity.js"
import { SessionEntity } from "./SessionEntity.js"
import * as Handlers from "./SessionEntityHandlers.js"

/**
 * Failures of reaching a session's entity: the cluster's own.
 *
 * @since 0.1.0
 * @category models
 */
export type ClusterError = MailboxFull | AlreadyProcessingMessage | ClusterPersistenceError

/**
 * Failures of opening a session on its owner.
 *
 * @since 0.1.0
 * @category models
 */
export type OwnerError = AgentBusy | MalformedLog | UnsupportedLogVersion | PersistenceError | AgentDisposed

/**
 * Failures of a delivery through the cluster.
 *
 * @since 0.1.0
 * @category models
 */
export type ClusterDeliveryError = InvalidEvent | DuplicateMessage | OwnerError | ClusterError

/**
 * The driver's operations on one session of the cluster.
 *
 * @since 0.1.0
 * @category models
 */
export interface SessionClient {
  readonly sessionId: SessionId
  /** `Driver.followup`: acknowledged once the message is durable in the session's log. */
  readonly followup: (m: UserMessage) => Effect.Effect<void, ClusterDeliveryError>
  /** `Driver.steer`. */
  readonly steer: (m: UserMessage) => Effect.Effect<void, ClusterDeliveryError>
  /** `Driver.inject`. */
  readonly inject: (m: UserMessage) => Effect.Effect<void, ClusterDeliveryError>
  /** `Driver.send`. */
  readonly send: (
    m: UserMessage,
    target: InboxTarget,
    wakeup: boolean,
    options?: { readonly at?: "start" | "end" }
  ) => Effect.Effect<void, ClusterDeliveryError>
  /** `Driver.cancel` with a user cause; `operationId` makes a retry of the same cancel a no-op. */
  readonly cancel: (
    options?: { readonly keepInbox?: boolean; readonly operationId?: string }
  ) => Effect.Effect<void, OwnerError | ClusterError>
  /** `Inbox.remove`: `true` when the message was pending. */
  readonly removePending: (
    messageId: MessageId,
    options?: { readonly operationId?: string }
  ) => Effect.Effect<boolean, OwnerError | ClusterError>
  /** `Inbox.clear`. */
  readonly clearPending: (options?: { readonly operationId?: string }) => Effect.Effect<void, OwnerError | ClusterError>
  /** Status, turns, stored events and pending input. */
  readonly status: Effect.Effect<SessionStatus, OwnerError | ClusterError>
  /** Resolves when the session is idle. */
  readonly whenIdle: Effect.Effect<void, OwnerError | ClusterError>
  /** The session's stored events from `fromSeq` on, followed live from the log (polled every `interval`). */
  readonly events: (
    fromSeq?: number,
    options?: { readonly interval?: Duration.DurationInput }
  ) => Stream.Stream<SessionEvent, PersistenceError | SessionNotFound | MalformedLog | UnsupportedLogVersion>
}

const operationIdOf = (given: string | undefined) =>
  given === undefined ? Effect.sync(() => crypto.randomUUID()) : Effect.succeed(given)

/**
 * The stored events of `sessionId` from `fromSeq` on, then each new one as the log grows (the
 * store is read every `interval`, 250 ms by default). A session not stored yet is waited for.
 *
 * @since 0.1.0
 * @category streams
 */
export const followLog = (
  sessionId: SessionId,
  fromSeq = 0,
  options?: { readonly interval?: Duration.DurationInput }
): Stream.Stream<
  SessionEvent,
  PersistenceError | SessionNotFound | MalformedLog | UnsupportedLogVersion,
  SessionStore
> =>
  Stream.unwrap(Effect.map(SessionStore, (store) =>
    Stream.paginateEffect(fromSeq, (next) =>
      Effect.gen(function*() {
        const stored = yield* store.exists(sessionId)
        const events = stored ? (yield* store.load(sessionId)).events : []
        const fresh = events.filter((event) => event.seq >= next)
        const cursor = fresh.length === 0 ? next : fresh[fresh.length - 1]!.seq + 1
        if (fresh.length === 0) yield* Effect.sleep(options?.interval ?? "250 millis")
        return [fresh as ReadonlyArray<SessionEvent>, Option.some(cursor)] as const
      })).pipe(Stream.flattenIterables)))

/**
 * A client of the session entity `sessionId`, wherever it runs.
 *
 * @since 0.1.0
 * @category constructors
 */
export const client = (sessionId: SessionId): Effect.Effect<SessionClient, never, Sharding | SessionStore> =>
  Effect.gen(function*() {
    const makeClient = yield* SessionEntity.client
    const store = yield* SessionStore
    const entity = makeClient(sessionId)
    return {
      sessionId,
      followup: (message) => entity.Followup({ message }),
      steer: (message) => entity.Steer({ message }),
      inject: (message) => entity.Inject({ message }),
      send: (message, target, wakeup, options) =>
        entity.Send({ message, target, wakeup, ...(options?.at === undefined ? {} : { at: options.at }) }),
      cancel: (options) =>
        Effect.flatMap(operationIdOf(options?.operationId), (operationId) =>
          entity.Cancel({
            operationId,
            ...(options?.keepInbox === undefined ? {} : { keepInbox: options.keepInbox })
          })),
      removePending: (messageId, options) =>
        Effect.flatMap(
          operationIdOf(options?.operationId),
          (operationId) => entity.RemovePending({ operationId, messageId })
        ),
      clearPending: (options) =>
        Effect.flatMap(operationIdOf(options?.operationId), (operationId) => entity.ClearPending({ operationId })),
      status: entity.Status(),
      whenIdle: entity.WhenIdle(),
      events: (fromSeq, options) =>
        followLog(sessionId, fromSeq, options).pipe(Stream.provideService(SessionStore, store))
    }
  })

/**
 * Sessions as cluster entities.
 *
 * @since 0.1.0
 * @category layers
 */
export const ClusterSessions = {
  /**
   * Registers the session entity with the sharding: this process owns the sessions of its shards,
   * each opened through `Agent.layer` on the provided store, model and tools.
   *
   * @since 0.1.0
   */
  layer: Handlers.layer,
  /**
   * A client of one session ({@link client}).
   *
   * @since 0.1.0
   */
  client,
  /**
   * A session's events followed live from the log ({@link followLog}).
   *
   * @since 0.1.0
   */
  followLog
}

/**
 * Retries an operation the cluster could not deliver (a full mailbox or a runner away) with a
 * short backoff; the operation's key makes every retry the same message.
 *
 * @since 0.1.0
 * @category combinators
 */
export const retryDelivery = <A, E extends { readonly _tag: string }, R>(
  self: Effect.Effect<A, E, R>
): Effect.Effect<A, E, R> =>
  Effect.retry(self, {
    schedule: Schedule.exponential("50 millis").pipe(Schedule.union(Schedule.spaced("1 second"))),
    times: 20,
    while: (error) => error._tag === "MailboxFull"
  })
