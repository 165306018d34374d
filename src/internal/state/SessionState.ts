/**
 * The shared transactional state of one open session: the in-memory log (the authority inside the
 * process), its fold (inbox, known ids, surface, relations), wake marks, durability progress and
 * the live notification outbox. Every public service of a session operates on this state, so one
 * STM transaction can change the log, the inbox and the phase together (D1).
 *
 * The `state/` room: the STM state of an open session and the operations every transaction
 * composes: this module (log, fold, appends, commits), the inbox operations (`InboxOps`), the
 * notification outbox (`Outbox`) and wake marks (`WakeMarks`).
 *
 * Every change to the log is an STM transaction committed through this module's `commit` family,
 * which hands the committed log to the session's writer after the commit (never from inside a
 * transaction, which may still fail or retry).
 *
 * @since 0.1.0
 */
import type { Clock } from "effect"
import { Context, Effect, Either, Option, STM, TRef } from "effect"
import type { DriverEvent } from "../../domain/DriverEvent.js"
import { AgentDisposed, InvalidEvent, PersistenceError } from "../../domain/Errors.js"
import type { SessionEvent, SessionHeader } from "../../domain/Event.js"
import * as GrowOnly from "../../domain/GrowOnly.js"
import type { SessionId } from "../../domain/Ids.js"
import { deepFreeze } from "../../domain/Json.js"
import type { FoldOptions, LogState } from "../../domain/LogState.js"
import { advance } from "../../domain/LogState.js"
import { decodeUntrusted } from "../durability/DecodedEvents.js"
import * as DurableWaiters from "../durability/DurableWaiters.js"
import type { StoreShape } from "../durability/Store.js"
import * as WriterSignal from "../durability/WriterSignal.js"
import * as Outbox from "./Outbox.js"
import type { WakeMarks } from "./WakeMarks.js"

/**
 * An event before the log gives it `seq` and `time`.
 *
 * @since 0.1.0
 * @category models
 */
export interface Draft {
  readonly type: string
  readonly data: unknown
  readonly surfaceOp?: unknown
  readonly sourceEventSeqs?: ReadonlyArray<number>
  readonly ignorable?: true
  /** Only for repair closers, which reuse the time of the last event before them (SPEC 6.5). */
  readonly time?: number
}

/**
 * The log and its fold, changed together.
 *
 * @since 0.1.0
 * @category models
 */
export interface LogSnapshot {
  readonly events: GrowOnly.GrowOnly<SessionEvent>
  readonly fold: LogState
}

/**
 * The state of one open session.
 *
 * @since 0.1.0
 * @category models
 */
export interface SessionStateShape {
  readonly sessionId: SessionId
  readonly header: SessionHeader
  readonly firstLiveSeq: number
  readonly options: FoldOptions
  readonly store: StoreShape
  readonly clock: Clock.Clock
  readonly log: TRef.TRef<LogSnapshot>
  readonly marks: TRef.TRef<WakeMarks>
  /** The storage failure that poisoned the session (SPEC 6.3), set once by its writer. */
  readonly poisoned: TRef.TRef<Option.Option<PersistenceError>>
  readonly disposed: TRef.TRef<boolean>
  readonly closed: TRef.TRef<boolean>
  readonly outbox: Outbox.Outbox
  readonly waiters: DurableWaiters.DurableWaiters
  readonly writer: WriterSignal.WriterSignal
  /** The driver that owns the session, once one does (`Driver.make` sets it, in a transaction). */
  readonly owner: TRef.TRef<SessionOwner>
}

/**
 * What the driver owning a session adds to session-level transactions: its part of the poison
 * transaction (SPEC 6.3) and the phase that `SessionLog.append` consults (SPEC 6.7).
 *
 * @since 0.1.0
 * @category models
 */
export interface SessionOwner {
  readonly onPoison: (error: PersistenceError) => STM.STM<void>
  readonly phase: STM.STM<"idle" | "running" | "maintenance">
}

/**
 * A session without a driver: nothing to stop on a poison, and always idle.
 *
 * @since 0.1.0
 * @category constructors
 */
export const noOwner: SessionOwner = { onPoison: () => STM.void, phase: STM.succeed("idle") }

/**
 * The state of the session being served (internal; never exported from the package root).
 *
 * @since 0.1.0
 * @category tags
 */
export class SessionState extends Context.Tag("tiller/internal/SessionState")<SessionState, SessionStateShape>() {}

/**
 * Fails when the session no longer accepts writes: disposed first, then poisoned (SPEC 3.1).
 *
 * @since 0.1.0
 * @category guards
 */
export const guardWritable = (state: SessionStateShape): STM.STM<void, AgentDisposed | PersistenceError> =>
  STM.flatMap(TRef.get(state.disposed), (disposed): STM.STM<void, AgentDisposed | PersistenceError> =>
    disposed
      ? STM.fail(new AgentDisposed({ sessionId: state.sessionId }))
      : STM.flatMap(
        TRef.get(state.poisoned),
        (poisoned) => Option.isSome(poisoned) ? STM.fail(poisoned.value) : STM.void
      ))

/**
 * Appends drafts to the in-memory log inside the caller's transaction. Each event gets the next
 * seq and the Clock time read in the transaction; trusted drafts (built by tiller's own typed code)
 * skip the Schema decode, untrusted ones are decoded and copied. Every event passes the same fold
 * rules as on load; the first violation fails with `InvalidEvent` and nothing is appended.
 *
 * @since 0.1.0
 * @category combinators
 */
export const appendDrafts = (
  state: SessionStateShape,
  drafts: ReadonlyArray<Draft>,
  trusted: boolean
): STM.STM<ReadonlyArray<SessionEvent>, InvalidEvent> =>
  STM.flatMap(TRef.get(state.poisoned), (poisoned) =>
    // A poisoned session appends nothing more; the activity that tried is stopped (SPEC 6.3).
    Option.isSome(poisoned)
      ? STM.interrupt
      : drafts.length === 0
      ? STM.succeed([])
      : STM.flatMap(
        // One interpreter step reads and writes the log (a read, a write and a notification would be five).
        TRef.modify(state.log, (snapshot): readonly [ReadonlyArray<SessionEvent> | InvalidEvent, LogSnapshot] => {
          const result = appendPure(state, snapshot, drafts, trusted)
          return result instanceof InvalidEvent ? [result, snapshot] : [result.events, result.snapshot]
        }),
        (result) => result instanceof InvalidEvent ? STM.fail(result) : STM.succeed(result)
      ))

/**
 * A log with drafts appended, and the events appended.
 *
 * @since 0.1.0
 * @category models
 */
export interface Appended {
  readonly snapshot: LogSnapshot
  readonly events: ReadonlyArray<SessionEvent>
}

/**
 * Appends drafts to a log snapshot without a transaction (see {@link appendDrafts}); the first
 * violation instead.
 *
 * @since 0.1.0
 * @category combinators
 */
export const appendPure = (
  state: SessionStateShape,
  snapshot: LogSnapshot,
  drafts: ReadonlyArray<Draft>,
  trusted: boolean
): Appended | InvalidEvent => {
  const time = state.clock.unsafeCurrentTimeMillis()
  let events = snapshot.events
  let fold = snapshot.fold
  const eventAt = (seq: number) => GrowOnly.get(events, seq)
  const appended: Array<SessionEvent> = []
  for (const draft of drafts) {
    const raw: Record<string, unknown> = {
      type: draft.type,
      seq: events.length,
      time: draft.time ?? time,
      data: draft.data
    }
    if (draft.surfaceOp !== undefined) raw.surfaceOp = draft.surfaceOp
    if (draft.sourceEventSeqs !== undefined) raw.sourceEventSeqs = draft.sourceEventSeqs
    if (draft.ignorable !== undefined) raw.ignorable = draft.ignorable
    let event: SessionEvent
    if (trusted) {
      event = deepFreeze(raw as unknown as SessionEvent)
    } else {
      const decoded = decodeUntrusted(raw)
      if (Either.isLeft(decoded)) return new InvalidEvent({ type: draft.type, reason: decoded.left })
      event = decoded.right
    }
    const next = advance(fold, event, eventAt, state.options)
    const first = next.violations[0]
    if (first !== undefined) {
      return first.rule === undefined
        ? new InvalidEvent({ type: draft.type, reason: first.message })
        : new InvalidEvent({ type: draft.type, reason: first.message, rule: first.rule })
    }
    fold = next.state
    events = GrowOnly.push(events, event)
    appended.push(event)
  }
  return { snapshot: appended.length === 0 ? snapshot : { events, fold }, events: appended }
}

/**
 * The seq of the last event in the log (−1 when empty), read in the caller's transaction.
 *
 * @since 0.1.0
 * @category getters
 */
export const lastSeq = (state: SessionStateShape): STM.STM<number> =>
  STM.map(TRef.get(state.log), (snapshot) => snapshot.events.length - 1)

/**
 * Publishes live notifications inside the caller's transaction (delivered after commit).
 *
 * @since 0.1.0
 * @category combinators
 */
export const publish = (state: SessionStateShape, notifications: ReadonlyArray<DriverEvent>): STM.STM<void> =>
  Outbox.publish(state.outbox, notifications)

/**
 * Commits a transaction of the session and hands the log it committed to the session's writer
 * (`WriterSignal.committed`): every transaction that may append commits through here (or through
 * {@link commit} and the acknowledged commits built on it), so the writer learns of new events
 * after their commit and only then.
 *
 * @since 0.1.0
 * @category combinators
 */
export const commitLogged = <A, E>(state: SessionStateShape, transaction: STM.STM<A, E>): Effect.Effect<A, E> =>
  Effect.map(STM.commit(STM.zip(transaction, TRef.get(state.log))), ([value, log]) => {
    WriterSignal.committed(state.writer, state.waiters.durable, log.events)
    return value
  })

/**
 * Commits a transaction of the session ({@link commitLogged}), then delivers the notifications it
 * (or anyone) queued.
 *
 * @since 0.1.0
 * @category combinators
 */
export const commit = <A, E>(state: SessionStateShape, transaction: STM.STM<A, E>): Effect.Effect<A, E> =>
  Effect.flatMap(commitLogged(state, transaction), (value) =>
    // Nothing queued (the common case): the value as it is, without a delivery step.
    delivered(state, value))

/**
 * `value`, after the notifications anyone queued are delivered.
 *
 * @since 0.1.0
 * @category combinators
 */
export const delivered = <A>(state: SessionStateShape, value: A): Effect.Effect<A> =>
  state.outbox.dirty ? Effect.as(Outbox.deliver(state.outbox), value) : Effect.succeed(value)

/**
 * Commits a transaction whose only failures are defects of tiller's own drafts, as defects: the
 * failure turns into a defect inside the transaction (one interpreter step), where `Effect.orDie`
 * after the commit would cost two operations on every commit.
 *
 * @since 0.1.0
 * @category combinators
 */
export const commitOrDie = <A, E>(state: SessionStateShape, transaction: STM.STM<A, E>): Effect.Effect<A> =>
  commit(state, dieOnFailure(transaction))

/**
 * A transaction whose failure is a defect (`STM.orDie` in one interpreter step).
 *
 * @since 0.1.0
 * @category combinators
 */
export const dieOnFailure = <A, E>(transaction: STM.STM<A, E>): STM.STM<A> =>
  STM.catchAll(transaction, (error) => STM.die(error))

/**
 * Waits until every event up to `seq` is durably stored; fails if the session is poisoned first.
 *
 * @since 0.1.0
 * @category durability
 */
export const awaitDurable = (state: SessionStateShape, seq: number): Effect.Effect<void, PersistenceError> =>
  Effect.suspend(() =>
    // Events committed without `commitLogged` (nothing of tiller's own does so) are handed over
    // here, so that no wait is for events the writer was never given.
    seq >= state.writer.events.length
      ? Effect.flatMap(STM.commit(TRef.get(state.log)), (log) => {
        WriterSignal.committed(state.writer, state.waiters.durable, log.events)
        return awaitHandedOver(state, seq)
      })
      : awaitHandedOver(state, seq)
  )

const awaitHandedOver = (state: SessionStateShape, seq: number): Effect.Effect<void, PersistenceError> =>
  Effect.suspend(() => {
    // A store that appends synchronously: written from this fiber (see `WriterSignal.writeNow`).
    if (seq > state.waiters.durable) WriterSignal.writeNow(state.writer)
    if (seq <= state.waiters.durable) return Effect.void
    WriterSignal.request(state.writer, seq)
    return DurableWaiters.wait(state.waiters, seq)
  })

/**
 * Commits a transaction, then acknowledges it: waits until everything in the log at its commit is
 * durable (SPEC 3.1, D13). A failure value returned by the transaction (`Either.left`) is delivered
 * after durability too, so a `DuplicateMessage` answer is never earlier than the state it reports.
 *
 * @since 0.1.0
 * @category durability
 */
export const commitAcknowledged = <A, E, E2>(
  state: SessionStateShape,
  transaction: STM.STM<Either.Either<A, E2>, E>
): Effect.Effect<A, E | E2 | PersistenceError> =>
  commitAcknowledgedAt(
    state,
    STM.flatMap(transaction, (result) =>
      // The last seq in one step (`lastSeq` takes four); the log is written back unchanged.
      TRef.modify(state.log, (snapshot) => [[result, snapshot.events.length - 1] as const, snapshot]))
  )

/**
 * {@link commitAcknowledged} of a transaction that returns its result with the log's last seq at
 * its end (one that read the log anyway).
 *
 * @since 0.1.0
 * @category durability
 */
export const commitAcknowledgedAt = <A, E, E2>(
  state: SessionStateShape,
  transaction: STM.STM<readonly [Either.Either<A, E2>, number], E>
): Effect.Effect<A, E | E2 | PersistenceError> => acknowledgeAt(state, commitLogged(state, transaction))

// The answer of a committed change once the log up to the returned seq is durable.
const acknowledgeAt = <A, E, E2>(
  state: SessionStateShape,
  committed: Effect.Effect<readonly [Either.Either<A, E2>, number], E>
): Effect.Effect<A, E | E2 | PersistenceError> =>
  Effect.flatMap(
    committed,
    // The commit, then `awaitDurable`, in one continuation.
    ([result, seq]) => {
      const answer: Effect.Effect<A, E2 | PersistenceError> = Either.isRight(result)
        ? Effect.succeed(result.right)
        : Effect.fail(result.left)
      let acknowledged = answer
      if (seq > state.waiters.durable) {
        // A store that acknowledges at once is written after the delivery (notifications come before
        // durability, SPEC 3.10); any other writer is asked now, so a caller interrupted meanwhile
        // changes nothing.
        if (WriterSignal.acknowledgesNow(state.writer)) acknowledged = Effect.zipRight(awaitDurable(state, seq), answer)
        else {
          WriterSignal.request(state.writer, seq)
          acknowledged = Effect.zipRight(DurableWaiters.wait(state.waiters, seq), answer)
        }
      }
      return state.outbox.dirty ? Effect.zipRight(Outbox.deliver(state.outbox), acknowledged) : acknowledged
    }
  )
