/**
 * The known-id table: every message id the session has seen and where it is now (SPEC 3.9).
 *
 * @since 0.1.0
 */
import { HashMap, Option } from "effect"
import type { KnownIdState } from "./Errors.js"

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
 * The known-id table (persistent).
 *
 * @since 0.1.0
 * @category models
 */
export type KnownIds = HashMap.HashMap<string, IdRecord>

/**
 * The empty table.
 *
 * @since 0.1.0
 * @category constructors
 */
export const emptyKnownIds: KnownIds = HashMap.empty()

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
  Option.map(HashMap.get(known, id), stateOfRecord)

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
    const record = Option.getOrElse(HashMap.get(out, id), () => fresh)
    out = HashMap.set(out, id, { pending: true, entered: record.entered, removal: record.removal })
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
    const record = Option.getOrElse(HashMap.get(out, id), () => fresh)
    out = HashMap.set(out, id, { pending: false, entered: record.entered, removal })
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
  const record = Option.getOrElse(HashMap.get(known, id), () => fresh)
  return record.entered ? known : HashMap.set(known, id, { pending: record.pending, entered: true, removal: record.removal })
}
