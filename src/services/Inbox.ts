/**
 * Inbox: the two pending lists of a session and their public mutations (SPEC 3.8). Every change
 * is one `agent/inbox/spliced` event written in the same transaction that changes the lists.
 *
 * @since 0.1.0
 */
import { Context, Effect, Either, Layer, Option, STM, TRef } from "effect"
import type { AgentDisposed, KnownIdState, PersistenceError } from "../domain/Errors.js"
import { InvalidEvent, InvalidSplice } from "../domain/Errors.js"
import type { MessageId } from "../domain/Ids.js"
import { jsonSize, MAX_JSON_SIZE } from "../domain/Json.js"
import { idState } from "../domain/KnownIds.js"
import { acceptCallerMessage } from "../domain/Message.js"
import { listOf, normaliseSplice, pendingArrays } from "../domain/Splice.js"
import type { InboxTarget, UserMessage } from "../domain/Values.js"
import {
  acceptAt,
  clearSTM,
  describeTarget,
  freshnessSTM,
  insertAcknowledged,
  isInboxTarget,
  locateSTM,
  spliceSTM
} from "../internal/state/InboxOps.js"
import type { SessionStateShape } from "../internal/state/SessionState.js"
import { commitAcknowledged, guardWritable, SessionState } from "../internal/state/SessionState.js"
import type { DeliveryError } from "./Driver.js"

/**
 * Failures of a delivery (the same union as `Driver`'s).
 *
 * @since 0.1.0
 * @category models
 */
export type { DeliveryError } from "./Driver.js"

/**
 * Both pending lists, read atomically.
 *
 * @since 0.1.0
 * @category models
 */
export interface InboxSnapshot {
  readonly nextTurn: ReadonlyArray<UserMessage>
  readonly nextStep: ReadonlyArray<UserMessage>
}

/**
 * The pending input of a session: `next-turn` prompts and `next-step` steering and context.
 *
 * @since 0.1.0
 * @category tags
 */
export class Inbox extends Context.Tag("tiller/Inbox")<Inbox, {
  readonly nextTurn: Effect.Effect<ReadonlyArray<UserMessage>>
  readonly nextStep: Effect.Effect<ReadonlyArray<UserMessage>>
  readonly snapshot: Effect.Effect<InboxSnapshot>
  readonly hasPending: Effect.Effect<boolean>
  /** Inserts `m` at the end of `target` without waking the driver (one durable splice). */
  readonly append: (target: InboxTarget, m: UserMessage) => Effect.Effect<void, DeliveryError>
  /** Inserts `m` at the front of `target` without waking the driver. */
  readonly prepend: (target: InboxTarget, m: UserMessage) => Effect.Effect<void, DeliveryError>
  /** `Array.prototype.splice` on one list, normalised and recorded as one splice; returns the removed messages. */
  readonly splice: (
    target: InboxTarget,
    start: number,
    deleteCount: number,
    inserted: ReadonlyArray<UserMessage>
  ) => Effect.Effect<ReadonlyArray<UserMessage>, InvalidSplice | DeliveryError>
  /** Replaces the pending message `id` with `m` in place; `false` when `id` is not pending. */
  readonly replace: (id: MessageId, m: UserMessage) => Effect.Effect<boolean, DeliveryError>
  /** Discards the pending message `id`; `false` when it is not pending. */
  readonly remove: (id: MessageId) => Effect.Effect<boolean, PersistenceError | AgentDisposed>
  readonly clear: Effect.Effect<void, PersistenceError | AgentDisposed>
  /** Where a message id stands (pending, claimed, entered, discarded); none for an unknown id. */
  readonly idState: (id: MessageId) => Effect.Effect<Option.Option<KnownIdState>>
}>() {
  /**
   * The inbox service over the open session state.
   *
   * @since 0.1.0
   */
  static readonly layer: Layer.Layer<Inbox, never, SessionState> = Layer.effect(
    Inbox,
    Effect.map(SessionState, (state) => makeInbox(state))
  )
}

const TOO_MANY = `inserted: larger than ${MAX_JSON_SIZE / 1024 / 1024} MiB of JSON text`
// What `jsonSize` counts for the smallest message: {"id":"x","role":"user","content":[],"source":{"kind":"x"}}.
const SMALLEST_MESSAGE_SIZE = 40

// The insertion of a splice, each message validated; an insertion that is not an array, or cannot be
// read (a throwing `Proxy` or getter), makes the splice event invalid.
const validateAll = (messages: unknown): Either.Either<ReadonlyArray<UserMessage>, InvalidEvent> => {
  const items = readInsertion(messages)
  if (Either.isLeft(items)) return Either.left(new InvalidEvent({ type: "agent/inbox/spliced", reason: items.left }))
  const accepted: Array<UserMessage> = []
  for (const item of items.right) {
    const message = acceptCallerMessage(item)
    if (Either.isLeft(message)) return Either.left(message.left)
    accepted.push(message.right)
  }
  // One splice event holds them all: together they are one value as far as the size limit goes.
  if (accepted.length > 1) {
    let size = 0
    for (const message of accepted) size += jsonSize(message)
    if (size > MAX_JSON_SIZE) return Either.left(new InvalidEvent({ type: "agent/inbox/spliced", reason: TOO_MANY }))
  }
  return Either.right(accepted)
}

// `normaliseSplice`, for coordinates of any value: one whose text cannot be made (a throwing
// `toString` or `Proxy`) is named by its type.
const coordinatesOf = (length: number, start: unknown, deleteCount: unknown) => {
  try {
    return normaliseSplice(length, start, deleteCount)
  } catch {
    const offender = typeof start === "number" ? ["deleteCount", deleteCount] as const : ["start", start] as const
    return Either.left(`${offender[0]} (${typeof offender[1]}) is not a number`)
  }
}

// The items of an insertion, each read once, or why it is not a readable array.
const readInsertion = (messages: unknown): Either.Either<ReadonlyArray<unknown>, string> => {
  try {
    if (!Array.isArray(messages)) {
      return Either.left(`inserted must be an array of messages, found ${messages === null ? "null" : typeof messages}`)
    }
    const length = messages.length
    // No message counts less than this, so a longer list is past the size limit before it is read.
    if (length > MAX_JSON_SIZE / SMALLEST_MESSAGE_SIZE) return Either.left(TOO_MANY)
    const items = new Array<unknown>(length)
    for (let i = 0; i < length; i++) items[i] = messages[i]
    return Either.right(items)
  } catch {
    return Either.left("inserted cannot be read")
  }
}

// An InvalidEvent raised by the fold for a splice we built ourselves means a broken invariant.
const orDieInternal = <A, E>(stm: STM.STM<A, E | InvalidEvent>): STM.STM<A, Exclude<E, InvalidEvent>> =>
  STM.catchAll(
    stm,
    (error) => error instanceof InvalidEvent ? STM.die(error) : STM.fail(error as Exclude<E, InvalidEvent>)
  ) as STM.STM<
    A,
    Exclude<E, InvalidEvent>
  >

/**
 * The service over an open session's state (what its layer provides).
 *
 * @since 0.1.0
 * @category constructors
 */
export const makeInbox = (state: SessionStateShape): Context.Tag.Service<Inbox> => {
  const lists = STM.map(TRef.get(state.log), ({ fold }) => pendingArrays(fold.inbox))

  const insert = (at: "end" | "start") => (target: InboxTarget, m: UserMessage) =>
    insertAcknowledged(state, target, acceptAt(target, acceptCallerMessage(m)), at)

  const splice = Effect.fn("Inbox.splice")(function*(
    target: InboxTarget,
    start: number,
    deleteCount: number,
    inserted: ReadonlyArray<UserMessage>
  ) {
    const accepted = validateAll(inserted)
    return yield* commitAcknowledged(
      state,
      STM.gen(function*() {
        yield* guardWritable(state)
        if (!isInboxTarget(target)) {
          const reason = `target must be "next-turn" or "next-step"`
          return yield* STM.fail(new InvalidSplice({ target: describeTarget(target), start, deleteCount, reason }))
        }
        const list = listOf(yield* lists, target)
        const coordinates = coordinatesOf(list.length, start, deleteCount)
        if (Either.isLeft(coordinates)) {
          return yield* STM.fail(new InvalidSplice({ target, start, deleteCount, reason: coordinates.left }))
        }
        if (Either.isLeft(accepted)) return yield* STM.fail(accepted.left)
        const { deleteCount: count, start: at } = coordinates.right
        const reusable = new Set(list.slice(at, at + count).map((m) => m.id))
        const duplicate = yield* freshnessSTM(state, accepted.right, reusable)
        if (Option.isSome(duplicate)) return Either.left(duplicate.value)
        return Either.right(yield* orDieInternal(spliceSTM(state, target, at, count, accepted.right)))
      })
    )
  })

  const replace = Effect.fn("Inbox.replace")(function*(id: MessageId, m: UserMessage) {
    const accepted = acceptCallerMessage(m)
    return yield* commitAcknowledged(
      state,
      STM.gen(function*() {
        yield* guardWritable(state)
        if (Either.isLeft(accepted)) return yield* STM.fail(accepted.left)
        const found = yield* locateSTM(state, id)
        if (Option.isNone(found)) return Either.right(false)
        const duplicate = yield* freshnessSTM(state, [accepted.right], new Set([id]))
        if (Option.isSome(duplicate)) return Either.left(duplicate.value)
        const { index, target } = found.value
        yield* orDieInternal(spliceSTM(state, target, index, 1, [accepted.right], true))
        return Either.right(true)
      })
    )
  })

  const remove = Effect.fn("Inbox.remove")(function*(id: MessageId) {
    return yield* commitAcknowledged(
      state,
      STM.gen(function*() {
        yield* guardWritable(state)
        const found = yield* locateSTM(state, id)
        if (Option.isNone(found)) return Either.right(false)
        yield* orDieInternal(spliceSTM(state, found.value.target, found.value.index, 1, []))
        return Either.right(true)
      })
    )
  })

  return {
    nextTurn: STM.commit(STM.map(lists, (l) => l.nextTurn)),
    nextStep: STM.commit(STM.map(lists, (l) => l.nextStep)),
    snapshot: STM.commit(STM.map(lists, (l) => ({ nextTurn: l.nextTurn, nextStep: l.nextStep }))),
    hasPending: STM.commit(
      STM.map(TRef.get(state.log), ({ fold }) => fold.inbox.nextTurn.length > 0 || fold.inbox.nextStep.length > 0)
    ),
    append: insert("end"),
    prepend: insert("start"),
    splice,
    replace,
    remove,
    clear: commitAcknowledged(
      state,
      STM.gen(function*() {
        yield* guardWritable(state)
        yield* orDieInternal(clearSTM(state))
        return Either.void
      })
    ).pipe(Effect.withSpan("Inbox.clear")),
    idState: (id) => STM.commit(STM.map(TRef.get(state.log), ({ fold }) => idState(fold.known, id)))
  }
}
