/**
 * The known-id table: every message id the session has seen and where it is now (SPEC 3.9).
 *
 * @since 0.1.0
 */
import { Option } from "effect"
import type { KnownIdState } from "./Errors.js"
import * as VersionedMap from "./VersionedMap.js"

/**
 * What the log says about one id.
 *
 * @since 0.1.0
 * @category models
 */
export interface IdRecord {
  readonly pending: boolean
  readonly entered: boolean
  readonly removal: "claim" | "cancel" | undefined
}

/**
 * The known-id table (persistent; O(1) per change when each version is extended once, as a fold does).
 *
 * @since 0.1.0
 * @category models
 */
export type KnownIds = VersionedMap.VersionedMap<IdRecord>

/**
 * A new empty table (each fold starts its own: extending one version twice moves the shared table).
 *
 * @since 0.1.0
 * @category constructors
 */
export const emptyKnownIds = (): KnownIds => VersionedMap.empty()

/**
 * The record of `id`, if known.
 *
 * @since 0.1.0
 * @category getters
 */
export const recordOf = (known: KnownIds, id: string): IdRecord | undefined => VersionedMap.get(known, id)

/**
 * Whether `id` is known.
 *
 * @since 0.1.0
 * @category getters
 */
export const isKnown = (known: KnownIds, id: string): boolean => VersionedMap.has(known, id)

/**
 * The state of a record: pending, then entered, then claimed, then discarded (first match wins).
 *
 * @since 0.1.0
 * @category getters
 */
export const stateOfRecord = (record: IdRecord): KnownIdState =>
  record.pending ? "pending" : record.entered ? "entered" : record.removal === "claim" ? "claimed" : "discarded"

/**
 * The state of `id`, if known.
 *
 * @since 0.1.0
 * @category getters
 */
export const idState = (known: KnownIds, id: string): Option.Option<KnownIdState> =>
  Option.fromNullable(stateOf(known, id))

/**
 * The state of `id`, or `undefined` when unknown ({@link idState} without the `Option`).
 *
 * @since 0.1.0
 * @category getters
 */
export const stateOf = (known: KnownIds, id: string): KnownIdState | undefined => {
  const record = VersionedMap.get(known, id)
  return record === undefined ? undefined : stateOfRecord(record)
}

const fresh: IdRecord = { pending: false, entered: false, removal: undefined }

/**
 * Marks ids as pending (inserted into a list).
 *
 * @since 0.1.0
 * @category combinators
 */
export const markPending = (known: KnownIds, ids: Iterable<string>): KnownIds => {
  let out = known
  for (const id of ids) {
    const record = VersionedMap.get(out, id) ?? fresh
    out = VersionedMap.set(out, id, { pending: true, entered: record.entered, removal: record.removal })
  }
  return out
}

/**
 * Marks ids as removed from a list, by a claim or a cancellation.
 *
 * @since 0.1.0
 * @category combinators
 */
export const markRemoved = (known: KnownIds, ids: Iterable<string>, removal: "claim" | "cancel"): KnownIds => {
  let out = known
  for (const id of ids) {
    const record = VersionedMap.get(out, id) ?? fresh
    out = VersionedMap.set(out, id, { pending: false, entered: record.entered, removal })
  }
  return out
}

/**
 * Marks an id as carried by a message event.
 *
 * @since 0.1.0
 * @category combinators
 */
export const markEntered = (known: KnownIds, id: string): KnownIds => {
  const record = VersionedMap.get(known, id) ?? fresh
  return record.entered
    ? known
    : VersionedMap.set(known, id, { pending: record.pending, entered: true, removal: record.removal })
}
