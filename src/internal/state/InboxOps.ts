/**
 * Inbox changes as STM building blocks: each validates, writes exactly one normalised
 * `agent/inbox/spliced` event (or nothing), updates the wake marks and queues the live
 * notifications, all inside the caller's transaction. The Inbox service, the driver's `send` and
 * the loop's claim compose them with phase changes (D1). {@link insertAcknowledged} is the whole
 * operation of a caller's insertion that wakes nothing.
 *
 * @since 0.1.0
 */
import { Effect, Either, Option, STM, TRef } from "effect"
import type { DriverEvent } from "../../domain/DriverEvent.js"
import { AgentDisposed, DuplicateMessage, PersistenceError } from "../../domain/Errors.js"
import { InvalidEvent } from "../../domain/Errors.js"
import type { SpliceData } from "../../domain/Event.js"
import * as GrowOnly from "../../domain/GrowOnly.js"
import { stateOf } from "../../domain/KnownIds.js"
import type { LogState } from "../../domain/LogState.js"
import { pendingOf } from "../../domain/Splice.js"
import type { InboxTarget, UserMessage } from "../../domain/Values.js"
import * as Outbox from "./Outbox.js"
import type { Draft, LogSnapshot, SessionStateShape } from "./SessionState.js"
import { appendDrafts, appendPure, commitAcknowledgedAt, guardWritable, publish } from "./SessionState.js"
import * as WakeMarks from "./WakeMarks.js"

/**
 * Whether `target` names one of the two pending lists (callers outside TypeScript can pass anything).
 *
 * @since 0.1.0
 * @category validation
 */
export const isInboxTarget = (target: unknown): target is InboxTarget =>
  target === "next-turn" || target === "next-step"

/**
 * The caller's message, accepted for an insertion at `target`: an unknown target makes the splice
 * event invalid (SPEC 5.1), reported like an invalid message.
 *
 * @since 0.1.0
 * @category validation
 */
export const acceptAt = (
  target: InboxTarget,
  accepted: Either.Either<UserMessage, InvalidEvent>
): Either.Either<UserMessage, InvalidEvent> =>
  isInboxTarget(target)
    ? accepted
    : Either.left(
      new InvalidEvent({
        type: "agent/inbox/spliced",
        reason: `target must be "next-turn" or "next-step", found ${describeTarget(target)}`
      })
    )

/**
 * A target as an error names it: a string quoted, anything else by its type.
 *
 * @since 0.1.0
 * @category validation
 */
export const describeTarget = (target: unknown): string =>
  typeof target === "string" ? JSON.stringify(target) : target === null ? "null" : typeof target

/**
 * Checks that every id is fresh: unknown to the session and not repeated in `messages`, except ids
 * in `reusable` (the ids a replacement removes). The first offender is reported.
 *
 * @since 0.1.0
 * @category validation
 */
export const freshnessSTM = (
  state: SessionStateShape,
  messages: ReadonlyArray<UserMessage>,
  reusable: ReadonlySet<string> = new Set()
): STM.STM<Option.Option<DuplicateMessage>> =>
  STM.map(TRef.get(state.log), ({ fold }) => duplicateIn(fold, messages, reusable))

// The first message whose id is known to the session or repeated in `messages` (outside `reusable`).
const duplicateIn = (
  fold: LogState,
  messages: ReadonlyArray<UserMessage>,
  reusable?: ReadonlySet<string>
): Option.Option<DuplicateMessage> => {
  const seen = messages.length > 1 ? new Set<string>() : undefined
  for (const m of messages) {
    if (seen !== undefined) {
      if (seen.has(m.id)) return Option.some(new DuplicateMessage({ id: m.id, state: "pending" }))
      seen.add(m.id)
    }
    if (reusable?.has(m.id) === true) continue
    const state = stateOf(fold.known, m.id)
    if (state !== undefined) return Option.some(new DuplicateMessage({ id: m.id, state }))
  }
  return Option.none()
}

const spliceDraft = (data: SpliceData): Draft => ({ type: "agent/inbox/spliced", data })

const spliceData = (
  target: InboxTarget,
  start: number,
  removedCount: number,
  inserted: ReadonlyArray<UserMessage>,
  claim = false
): SpliceData => {
  const base = { target, start, inserted }
  if (removedCount === 0) return base
  return claim ? { ...base, removedCount } : { ...base, removedCount, outcome: "canceled" }
}

/**
 * Writes one splice of `target` at normalised coordinates with fresh (already checked) messages.
 * Removed messages leave the wake marks; with `replace` (the `replace(id, m)` operation) the mark
 * moves to the new message instead (SPEC 3.2: an edited wake is still a wake; any other splice,
 * even one-for-one, leaves the set). Returns the removed messages.
 *
 * @since 0.1.0
 * @category combinators
 */
export const spliceSTM = (
  state: SessionStateShape,
  target: InboxTarget,
  start: number,
  deleteCount: number,
  inserted: ReadonlyArray<UserMessage>,
  replace = false
): STM.STM<ReadonlyArray<UserMessage>, InvalidEvent> =>
  deleteCount === 0 && inserted.length === 0
    ? STM.succeed([])
    : STM.flatMap(
      TRef.get(state.log),
      ({ fold }) => spliceIn(state, fold, target, start, deleteCount, inserted, replace)
    )

// `spliceSTM` on the fold just read in the same transaction.
const spliceIn = (
  state: SessionStateShape,
  fold: LogState,
  target: InboxTarget,
  start: number,
  deleteCount: number,
  inserted: ReadonlyArray<UserMessage>,
  replace: boolean
): STM.STM<ReadonlyArray<UserMessage>, InvalidEvent> => {
  const pending = pendingOf(fold.inbox, target)
  const removed = deleteCount === 0 ? [] : pending.buffer.slice(start, Math.min(start + deleteCount, pending.length))
  const notifications: Array<DriverEvent> = []
  for (const m of removed) notifications.push({ type: "agent/inbox/discarded", message: m })
  for (const m of inserted) notifications.push({ type: "agent/inbox/inserted", message: m })
  const appended = appendDrafts(state, [spliceDraft(spliceData(target, start, deleteCount, inserted))], true)
  const marked = removed.length === 0
    ? appended
    : STM.zipRight(appended, WakeMarks.move(state.marks, removed, replace ? inserted[0]?.id : undefined))
  return STM.zipRight(marked, STM.as(publish(state, notifications), removed))
}

/**
 * Where a pending id sits: `next-turn` is searched first, then `next-step`.
 *
 * @since 0.1.0
 * @category getters
 */
export const locateSTM = (
  state: SessionStateShape,
  id: string
): STM.STM<Option.Option<{ readonly target: InboxTarget; readonly index: number; readonly message: UserMessage }>> =>
  STM.map(TRef.get(state.log), ({ fold }) => {
    for (const target of ["next-turn", "next-step"] as const) {
      const list = pendingOf(fold.inbox, target)
      for (let index = 0; index < list.length; index++) {
        const message = list.buffer[index]!
        if (message.id === id) return Option.some({ target, index, message })
      }
    }
    return Option.none()
  })

/**
 * A caller's insertion of one message at the end (or start) of `target`: the writability check of
 * `guardWritable` (disposed, then poisoned), then in one step on the log the identity check, the
 * splice, and the log's last seq at the end (for `commitAcknowledgedAt`). A
 * duplicate id is returned as a value, to be acknowledged after durability; an `InvalidEvent` of
 * the splice is a defect of tiller's own draft.
 *
 * @since 0.1.0
 * @category combinators
 */
export const deliverSTM = (
  state: SessionStateShape,
  target: InboxTarget,
  message: UserMessage,
  at: "end" | "start"
): STM.STM<Acknowledged, AgentDisposed | PersistenceError> =>
  STM.zipRight(
    guardWritable(state),
    STM.flatMap(
      TRef.modify(state.log, (snapshot) => deliverTo(state, snapshot, target, message, at)),
      (delivered): STM.STM<Acknowledged> =>
        isAcknowledged(delivered)
          ? Either.isLeft(delivered[0])
            ? STM.succeed(delivered)
            : Outbox.publishing(state.outbox, [{ type: "agent/inbox/inserted", message }], delivered)
          : STM.die(delivered)
    )
  )

// The log step of a delivery: what it answers and the log it leaves (the same when nothing is written).
const deliverTo = (
  state: SessionStateShape,
  snapshot: LogSnapshot,
  target: InboxTarget,
  message: UserMessage,
  at: "end" | "start"
): readonly [Acknowledged | InvalidEvent, LogSnapshot] => {
  const duplicate = duplicateIn(snapshot.fold, [message])
  if (Option.isSome(duplicate)) return [[Either.left(duplicate.value), snapshot.events.length - 1], snapshot]
  const start = at === "end" ? pendingOf(snapshot.fold.inbox, target).length : 0
  const result = appendPure(state, snapshot, [spliceDraft(spliceData(target, start, 0, [message]))], true)
  if (result instanceof InvalidEvent) return [result, snapshot]
  return [[Either.void, result.snapshot.events.length - 1], result.snapshot]
}

/**
 * A caller's insertion that wakes nothing, acknowledged once durable ({@link deliverSTM}); a
 * message that failed validation fails with its `InvalidEvent` after the writability check.
 *
 * @since 0.1.0
 * @category combinators
 */
export const insertAcknowledged = (
  state: SessionStateShape,
  target: InboxTarget,
  accepted: Either.Either<UserMessage, InvalidEvent>,
  at: "end" | "start"
): Effect.Effect<void, InvalidEvent | DuplicateMessage | AgentDisposed | PersistenceError> =>
  Either.isRight(accepted)
    ? commitAcknowledgedAt<void, AgentDisposed | PersistenceError, DuplicateMessage>(
      state,
      deliverSTM(state, target, accepted.right, at)
    )
    : STM.commit(STM.zipRight(guardWritable(state), STM.fail(accepted.left)))

type Acknowledged = readonly [Either.Either<void, DuplicateMessage>, number]

const isAcknowledged = (delivered: Acknowledged | InvalidEvent): delivered is Acknowledged => Array.isArray(delivered)

/**
 * Discards everything pending: `CAN(ns)` then `CAN(nt)`, each only when non-empty.
 *
 * @since 0.1.0
 * @category combinators
 */
export const clearSTM = (state: SessionStateShape): STM.STM<ReadonlyArray<UserMessage>, InvalidEvent> =>
  STM.gen(function*() {
    const { fold } = yield* TRef.get(state.log)
    const step = yield* spliceSTM(state, "next-step", 0, fold.inbox.nextStep.length, [])
    const turn = yield* spliceSTM(state, "next-turn", 0, fold.inbox.nextTurn.length, [])
    return [...step, ...turn]
  })

/**
 * The loop's claim (SPEC 4.2): all of `next-step`, plus at the initial boundary the first
 * `next-turn` item; pure-deletion splices, one `claimed` notification per message (next-step
 * first), and the waking-steer marks emptied. Returns the batch in claim order.
 *
 * @since 0.1.0
 * @category combinators
 */
export const claimSTM = (
  state: SessionStateShape,
  turn: number,
  initial: boolean
): STM.STM<ReadonlyArray<UserMessage>, InvalidEvent> =>
  STM.gen(function*() {
    const { fold } = yield* TRef.get(state.log)
    const steps = GrowOnly.toArray(fold.inbox.nextStep)
    const followup = initial ? GrowOnly.toArray(fold.inbox.nextTurn).slice(0, 1) : []
    const drafts: Array<Draft> = []
    if (steps.length > 0) drafts.push(spliceDraft(spliceData("next-step", 0, steps.length, [], true)))
    if (followup.length > 0) drafts.push(spliceDraft(spliceData("next-turn", 0, 1, [], true)))
    if (drafts.length > 0) yield* appendDrafts(state, drafts, true)
    if (steps.length > 0) yield* WakeMarks.clearSteers(state.marks)
    const batch = [...steps, ...followup]
    yield* publish(state, batch.map((message) => ({ type: "agent/inbox/claimed", message, turn })))
    return batch
  })
