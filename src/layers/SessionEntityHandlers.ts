/**
 * The behaviour of the session entity: activation opens the session through the agent preset on
 * the provided store (created, or resumed with repair), a chain its previous owner left mid-way
 * goes on, the entity stays alive while the agent runs and passivates when idle.
 *
 * @since 0.1.0
 */
import * as Entity from "@effect/cluster/Entity"
import type { Sharding } from "@effect/cluster/Sharding"
import type { Layer } from "effect"
import { Context, Duration, Effect, Either, ExecutionStrategy, Exit, Schedule, Scope, STM, Stream, TRef } from "effect"
import type { DuplicateMessage } from "../domain/Errors.js"
import type { EventOf, SessionEvent } from "../domain/Event.js"
import { SessionId } from "../domain/Ids.js"
import type { UserMessage } from "../domain/Values.js"
import { SessionState } from "../internal/state/SessionState.js"
import type { DeliveryError } from "../services/Driver.js"
import { Driver } from "../services/Driver.js"
import { Inbox } from "../services/Inbox.js"
import type { Model } from "../services/Model.js"
import { SessionLog } from "../services/SessionLog.js"
import type { SessionStore } from "../services/SessionStore.js"
import type { Tools } from "../services/Tools.js"
import type { AgentOptions } from "./Agent.js"
import { acquireAgent } from "./Agent.js"
import type { SessionStatus } from "./SessionEntity.js"
import { SessionEntity } from "./SessionEntity.js"

/**
 * Options of the session entity: the agent's, and how long an idle session stays active.
 *
 * @since 0.1.0
 * @category models
 */
export interface SessionEntityOptions extends AgentOptions {
  /** An idle session's entity passivates after this time without messages (default 1 minute). */
  readonly maxIdleTime?: Duration.DurationInput
}

// How often, and for how long, an activation asks again for a lease another owner still holds.
const LEASE_RETRY = Duration.millis(100)
const LEASE_WAIT = Duration.seconds(30)

const textOf = (m: UserMessage): string => m.content.map((block) => (block.type === "text" ? block.text : "")).join("")

const sameMessage = (a: UserMessage, b: UserMessage): boolean => JSON.stringify(a.content) === JSON.stringify(b.content)

// The stored copy of message `id`: entered on the surface, or inserted into the inbox.
const storedMessage = (events: ReadonlyArray<SessionEvent>, id: string): UserMessage | undefined => {
  for (const event of events) {
    if (event.type === "user/message") {
      const message = (event as EventOf<"user/message">).data
      if (message.id === id) return message
    } else if (event.type === "agent/inbox/spliced") {
      for (const inserted of (event as EventOf<"agent/inbox/spliced">).data.inserted) {
        if (inserted.id === id) return inserted
      }
    }
  }
  return undefined
}

/**
 * Whether the chain that ran when the session's previous owner stopped goes on: the opening closed
 * a turn left open (a turn/end `interrupted` at or after `firstLiveSeq`), or that owner's disposal
 * aborted the last turn. Other pending input stays parked (SPEC 6.4 step 6).
 *
 * @since 0.1.0
 * @category internals
 */
export const chainInterrupted = (events: ReadonlyArray<SessionEvent>, firstLiveSeq: number): boolean => {
  for (let i = events.length - 1; i >= 0; i--) {
    const event = events[i]!
    if (event.type === "turn/start") return false
    if (event.type === "turn/end") {
      const reason = (event as EventOf<"turn/end">).data.reason
      return (reason.kind === "interrupted" && event.seq >= firstLiveSeq) ||
        (reason.kind === "aborted" && reason.reason.kind === "disposed")
    }
  }
  return false
}

/**
 * The session entity's handlers as a layer over the sharding, a store, a model and tools.
 *
 * @since 0.1.0
 * @category layers
 */
export const layer = (
  options: SessionEntityOptions = {}
): Layer.Layer<never, never, Sharding | SessionStore | Model | Tools> => {
  const { maxIdleTime, ...agentOptions } = options
  return SessionEntity.toLayer(
    Effect.gen(function*() {
      const address = yield* Entity.CurrentAddress
      const cluster = yield* Effect.context<Sharding | Entity.CurrentAddress>()
      const sessionId = SessionId.make(address.entityId)
      // Each attempt has a scope of its own, closed when it fails: a retried activation must not find
      // the failed attempt's lease still held (the entity's scope outlives its build's retries).
      const entityScope = yield* Effect.scope
      const openOnce = Effect.flatMap(
        Scope.fork(entityScope, ExecutionStrategy.sequential),
        (attempt) =>
          Effect.tapError(
            Scope.extend(acquireAgent({ ...agentOptions, open: sessionId }), attempt),
            () => Scope.close(attempt, Exit.void)
          )
      )
      // A previous owner still closing the session (its shard moved while a turn ran) holds the
      // lease for a moment: the activation waits for it here, instead of failing into the
      // cluster's own retry, whose delays grow to 10 s.
      const opened = yield* Effect.either(Effect.retry(openOnce, {
        schedule: Schedule.upTo(Schedule.spaced(LEASE_RETRY), LEASE_WAIT),
        while: (error) => error._tag === "AgentBusy"
      }))
      if (Either.isLeft(opened)) {
        const error = opened.left
        // A lease still held by a dying owner, or storage away: the cluster retries the activation.
        if (error._tag === "AgentBusy" || error._tag === "PersistenceError") {
          return yield* Effect.die(error)
        }
        const refused = error._tag === "SessionExists" || error._tag === "SessionNotFound"
          ? Effect.die(error)
          : Effect.fail(error)
        return SessionEntity.of({
          Followup: () => refused,
          Steer: () => refused,
          Inject: () => refused,
          Send: () => refused,
          Cancel: () => refused,
          RemovePending: () => refused,
          ClearPending: () => refused,
          Status: () => refused,
          WhenIdle: () => refused
        })
      }
      const agent = opened.right
      const driver = Context.get(agent, Driver)
      const inbox = Context.get(agent, Inbox)
      const log = Context.get(agent, SessionLog)
      const state = Context.get(agent, SessionState)

      // A redelivered message whose first delivery was applied before its reply was stored: the
      // same message in the log is its acknowledgement; another message under that id is refused.
      const idempotent = (m: UserMessage, delivery: Effect.Effect<void, DeliveryError>) =>
        Effect.catchTag(
          delivery,
          "DuplicateMessage",
          (duplicate: DuplicateMessage) =>
            Effect.flatMap(log.events, (events) => {
              const stored = storedMessage(events, m.id)
              return stored !== undefined && sameMessage(stored, m) ? Effect.void : Effect.fail(duplicate)
            })
        )

      // Kept alive (and moved with its shard, the keep-alive being a persisted message) while the
      // agent runs; passivated after `maxIdleTime` once idle. A delivery that started a turn asks
      // for it before its reply, so no acknowledged chain is left without a keep-alive.
      let keptAlive = false
      const keepAlive = (running: boolean) =>
        Effect.suspend(() => {
          if (running === keptAlive) return Effect.void
          keptAlive = running
          return Effect.provide(Entity.keepAlive(running), cluster)
        })
      yield* driver.statusChanges.pipe(
        Stream.runForEach((status) => keepAlive(status === "running")),
        Effect.forkScoped
      )
      const thenKeepAlive = <A, E>(operation: Effect.Effect<A, E>) =>
        Effect.tap(operation, () => Effect.flatMap(driver.status, (status) => keepAlive(status === "running")))

      if (chainInterrupted(yield* log.events, log.firstLiveSeq)) {
        yield* Effect.ignoreLogged(driver.continuePending)
      }

      const status: Effect.Effect<SessionStatus> = Effect.gen(function*() {
        const snapshot = yield* inbox.snapshot
        const { events: stored, fold } = yield* STM.commit(TRef.get(state.log))
        const pending = (list: ReadonlyArray<UserMessage>) => list.map((m) => ({ id: m.id, text: textOf(m) }))
        return {
          sessionId,
          status: yield* driver.status,
          turns: fold.lastTurn,
          events: stored.length,
          pending: { nextTurn: pending(snapshot.nextTurn), nextStep: pending(snapshot.nextStep) }
        }
      })

      return SessionEntity.of({
        Followup: ({ payload }) => thenKeepAlive(idempotent(payload.message, driver.followup(payload.message))),
        Steer: ({ payload }) => thenKeepAlive(idempotent(payload.message, driver.steer(payload.message))),
        Inject: ({ payload }) => idempotent(payload.message, driver.inject(payload.message)),
        Send: ({ payload }) =>
          thenKeepAlive(idempotent(
            payload.message,
            driver.send(
              payload.message,
              payload.target,
              payload.wakeup,
              payload.at === undefined ? undefined : { at: payload.at }
            )
          )),
        Cancel: ({ payload }) =>
          driver.cancel(
            { kind: "user" },
            payload.keepInbox === undefined ? undefined : { keepInbox: payload.keepInbox }
          ),
        RemovePending: ({ payload }) => inbox.remove(payload.messageId),
        ClearPending: () => inbox.clear,
        Status: () => status,
        WhenIdle: () => driver.whenIdle
      })
    }),
    {
      concurrency: "unbounded",
      ...(maxIdleTime === undefined ? {} : { maxIdleTime })
    }
  )
}
