/**
 * Inbox splices: normalisation of public coordinates, the four durable shapes, and the pure fold
 * of `agent/inbox/spliced` events into the two pending lists (SPEC 2.7).
 *
 * @since 0.1.0
 */
import { Either } from "effect"
import { MalformedLog } from "./Errors.js"
import type { SessionEvent, SpliceData } from "./Event.js"
import * as GrowOnly from "./GrowOnly.js"
import type { InboxTarget, UserMessage } from "./Values.js"

/**
 * The two pending lists.
 *
 * @since 0.1.0
 * @category models
 */
export interface InboxLists {
  readonly nextTurn: ReadonlyArray<UserMessage>
  readonly nextStep: ReadonlyArray<UserMessage>
}

/**
 * Empty pending lists.
 *
 * @since 0.1.0
 * @category constructors
 */
export const emptyInbox: InboxLists = Object.freeze({ nextTurn: Object.freeze([]), nextStep: Object.freeze([]) })

/**
 * The list of `lists` addressed by `target`.
 *
 * @since 0.1.0
 * @category getters
 */
export const listOf = (lists: InboxLists, target: InboxTarget): ReadonlyArray<UserMessage> =>
  target === "next-turn" ? lists.nextTurn : lists.nextStep

/**
 * The shape of a splice: insertion, claim, cancellation or replacement (SPEC 2.7).
 *
 * @since 0.1.0
 * @category models
 */
export type SpliceShape = "insertion" | "claim" | "cancellation" | "replacement"

/**
 * Classifies a splice's shape, or returns `undefined` when it is none of the four.
 *
 * @since 0.1.0
 * @category getters
 */
export const spliceShape = (data: SpliceData): SpliceShape | undefined => {
  const removes = data.removedCount !== undefined
  const inserts = data.inserted.length > 0
  const canceled = data.outcome === "canceled"
  if (!removes) return inserts && !canceled ? "insertion" : undefined
  if (!inserts) return canceled ? "cancellation" : "claim"
  return canceled ? "replacement" : undefined
}

/**
 * Normalised public splice coordinates, or the reason they are invalid.
 *
 * @since 0.1.0
 * @category models
 */
export type NormalisedSplice = { readonly start: number; readonly deleteCount: number }

/**
 * Normalises public `splice(start, deleteCount)` coordinates against a list of length `len`
 * (Array.prototype.splice semantics, except that a non-number or `NaN` is refused).
 *
 * @since 0.1.0
 * @category constructors
 */
export const normaliseSplice = (
  len: number,
  start: unknown,
  deleteCount: unknown
): Either.Either<NormalisedSplice, string> => {
  if (typeof start !== "number" || Number.isNaN(start)) return Either.left(`start ${String(start)} is not a number`)
  if (typeof deleteCount !== "number" || Number.isNaN(deleteCount)) {
    return Either.left(`deleteCount ${String(deleteCount)} is not a number`)
  }
  let s = Math.trunc(start)
  if (s < 0) s = Math.max(len + s, 0)
  s = Math.min(s, len)
  const d = Math.min(Math.max(Math.trunc(deleteCount), 0), len - s)
  return Either.right({ start: s === 0 ? 0 : s, deleteCount: d === 0 ? 0 : d })
}

/**
 * Applies one recorded splice to the lists, validating it as on replay: a valid shape,
 * `0 <= start <= len`, `1 <= removedCount <= len - start`, and ids unique across both lists.
 * Returns the new lists and the removed messages, or the reason it is invalid. `isPending`, when
 * given, must say whether an id is currently in either list (it replaces a scan of both lists).
 *
 * @since 0.1.0
 * @category folding
 */
export const applySplice = (
  lists: InboxLists,
  data: SpliceData,
  isPending?: (id: string) => boolean
): Either.Either<{ readonly lists: InboxLists; readonly removed: ReadonlyArray<UserMessage> }, string> => {
  if (spliceShape(data) === undefined) return Either.left("splice has none of the four valid shapes")
  const list = listOf(lists, data.target)
  const removedCount = data.removedCount ?? 0
  if (!Number.isInteger(data.start) || data.start < 0) {
    return Either.left(`start ${data.start} is not a non-negative integer`)
  }
  if (data.removedCount !== undefined && (!Number.isInteger(data.removedCount) || data.removedCount < 1)) {
    return Either.left(`removedCount ${data.removedCount} is not a positive integer`)
  }
  if (data.start > list.length) {
    return Either.left(`start ${data.start} is past the end of ${data.target} (length ${list.length})`)
  }
  if (removedCount > list.length - data.start) {
    return Either.left(`removedCount ${removedCount} exceeds ${data.target} (length ${list.length}) from ${data.start}`)
  }
  const removed = list.slice(data.start, data.start + removedCount)
  if (data.inserted.length > 0 && isPending !== undefined) {
    // Fast path: the caller's known-id table answers "pending" in O(1) per inserted id.
    const removedIds = new Set(removed.map((m) => m.id))
    const seen = new Set<string>()
    for (const m of data.inserted) {
      if (seen.has(m.id) || (isPending(m.id) && !removedIds.has(m.id))) {
        return Either.left(`inserted id ${m.id} is already pending`)
      }
      seen.add(m.id)
    }
  } else if (data.inserted.length > 0) {
    const other = data.target === "next-turn" ? lists.nextStep : lists.nextTurn
    const seen = new Set<string>()
    for (const m of other) seen.add(m.id)
    for (let i = 0; i < list.length; i++) {
      if (i < data.start || i >= data.start + removedCount) seen.add(list[i]!.id)
    }
    for (const m of data.inserted) {
      if (seen.has(m.id)) return Either.left(`inserted id ${m.id} is already pending`)
      seen.add(m.id)
    }
  }
  const next = removedCount === 0 && data.start === list.length
    ? [...list, ...data.inserted]
    : [...list.slice(0, data.start), ...data.inserted, ...list.slice(data.start + removedCount)]
  return Either.right({
    lists: data.target === "next-turn"
      ? { nextTurn: next, nextStep: lists.nextStep }
      : { nextTurn: lists.nextTurn, nextStep: next },
    removed
  })
}

/**
 * The two pending lists as the live fold keeps them: appends at the end cost O(1), so a long
 * queue does not make every insertion copy it.
 *
 * @since 0.1.0
 * @category models
 */
export interface PendingLists {
  readonly nextTurn: GrowOnly.GrowOnly<UserMessage>
  readonly nextStep: GrowOnly.GrowOnly<UserMessage>
}

/**
 * Empty pending lists.
 *
 * @since 0.1.0
 * @category constructors
 */
export const emptyPending: PendingLists = { nextTurn: GrowOnly.empty(), nextStep: GrowOnly.empty() }

/**
 * The list of `pending` addressed by `target`.
 *
 * @since 0.1.0
 * @category getters
 */
export const pendingOf = (pending: PendingLists, target: InboxTarget): GrowOnly.GrowOnly<UserMessage> =>
  target === "next-turn" ? pending.nextTurn : pending.nextStep

/**
 * Frozen arrays of both pending lists.
 *
 * @since 0.1.0
 * @category getters
 */
export const pendingArrays = (pending: PendingLists): InboxLists => ({
  nextTurn: Object.freeze(GrowOnly.toArray(pending.nextTurn)),
  nextStep: Object.freeze(GrowOnly.toArray(pending.nextStep))
})

/**
 * {@link applySplice} over the live fold's lists; `isPending` answers whether an id is in either
 * list before the splice.
 *
 * @since 0.1.0
 * @category folding
 */
export const applyPending = (
  pending: PendingLists,
  data: SpliceData,
  isPending: (id: string) => boolean
): Either.Either<{ readonly pending: PendingLists; readonly removed: ReadonlyArray<UserMessage> }, string> => {
  const list = pendingOf(pending, data.target)
  if (
    data.removedCount === undefined && data.start === list.length && data.inserted.length > 0 &&
    data.outcome === undefined
  ) {
    // The common insertion at the end: validate ids, then push without copying the list.
    // One message (the usual delivery) needs no set of the ids seen.
    const seen = data.inserted.length > 1 ? new Set<string>() : undefined
    for (const m of data.inserted) {
      if (seen?.has(m.id) === true || isPending(m.id)) return Either.left(`inserted id ${m.id} is already pending`)
      seen?.add(m.id)
    }
    let next = list
    for (const m of data.inserted) next = GrowOnly.push(next, m)
    return Either.right({ pending: withList(pending, data.target, next), removed: [] })
  }
  const arrays = { nextTurn: pending.nextTurn, nextStep: pending.nextStep }
  const target = GrowOnly.toArray(list)
  const applied = applySplice(
    data.target === "next-turn"
      ? { nextTurn: target, nextStep: [] }
      : { nextTurn: [], nextStep: target },
    data,
    isPending
  )
  if (Either.isLeft(applied)) return Either.left(applied.left)
  const next = GrowOnly.fromArray(listOf(applied.right.lists, data.target))
  return Either.right({ pending: withList(arrays, data.target, next), removed: applied.right.removed })
}

const withList = (pending: PendingLists, target: InboxTarget, list: GrowOnly.GrowOnly<UserMessage>): PendingLists =>
  target === "next-turn"
    ? { nextTurn: list, nextStep: pending.nextStep }
    : { nextTurn: pending.nextTurn, nextStep: list }

/**
 * Folds every splice with `seq >= seedLength` into the two pending lists (SPEC 2.7).
 *
 * @since 0.1.0
 * @category folding
 */
export const foldInbox = (
  events: ReadonlyArray<SessionEvent>,
  seedLength = 0
): Either.Either<InboxLists, MalformedLog> => {
  let lists = emptyInbox
  for (const event of events) {
    if (event.type !== "agent/inbox/spliced" || event.seq < seedLength) continue
    const applied = applySplice(lists, event.data as SpliceData)
    if (Either.isLeft(applied)) {
      return Either.left(
        new MalformedLog({
          sessionId: "",
          seq: event.seq,
          reason: `invalid persisted inbox splice at seq ${event.seq}: ${applied.left}`
        })
      )
    }
    lists = applied.right.lists
  }
  return Either.right({ nextTurn: Object.freeze([...lists.nextTurn]), nextStep: Object.freeze([...lists.nextStep]) })
}
