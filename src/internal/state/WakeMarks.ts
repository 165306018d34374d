/**
 * Wake marks: the ids of pending messages whose presence is waking work. A latched delivery (made
 * while the agent could not start a turn) and an unclaimed steer sent to a running turn each keep
 * the agent going until they are entered or removed. The marks live in a `TRef` of the session
 * state and change only through the transactions below.
 *
 * @since 0.1.0
 */
import type { STM } from "effect"
import { HashSet, TRef } from "effect"

/**
 * Ids whose pending presence is waking work: latched deliveries and unclaimed running steers.
 *
 * @since 0.1.0
 * @category models
 */
export interface WakeMarks {
  readonly latched: HashSet.HashSet<string>
  readonly wakingSteers: HashSet.HashSet<string>
}

/**
 * No marks.
 *
 * @since 0.1.0
 * @category constructors
 */
export const empty = (): WakeMarks => ({ latched: HashSet.empty(), wakingSteers: HashSet.empty() })

/**
 * Marks `id` as a latched delivery.
 *
 * @since 0.1.0
 * @category transactions
 */
export const latch = (self: TRef.TRef<WakeMarks>, id: string): STM.STM<void> =>
  TRef.update(self, (marks) => ({ latched: HashSet.add(marks.latched, id), wakingSteers: marks.wakingSteers }))

/**
 * Marks `id` as a steer that keeps the running turn going until it is claimed.
 *
 * @since 0.1.0
 * @category transactions
 */
export const markSteer = (self: TRef.TRef<WakeMarks>, id: string): STM.STM<void> =>
  TRef.update(self, (marks) => ({ latched: marks.latched, wakingSteers: HashSet.add(marks.wakingSteers, id) }))

/**
 * Forgets every latched delivery (a turn opened, or pending input was given up).
 *
 * @since 0.1.0
 * @category transactions
 */
export const clearLatched = (self: TRef.TRef<WakeMarks>): STM.STM<void> =>
  TRef.update(self, (marks) => ({ latched: HashSet.empty(), wakingSteers: marks.wakingSteers }))

/**
 * Forgets every waking steer (the `next-step` list was claimed).
 *
 * @since 0.1.0
 * @category transactions
 */
export const clearSteers = (self: TRef.TRef<WakeMarks>): STM.STM<void> =>
  TRef.update(self, (marks) => ({ latched: marks.latched, wakingSteers: HashSet.empty() }))

/**
 * Removed messages leave the marks; with `replacement`, a removed message's mark moves to that id.
 *
 * @since 0.1.0
 * @category transactions
 */
export const move = (
  self: TRef.TRef<WakeMarks>,
  removed: ReadonlyArray<{ readonly id: string }>,
  replacement: string | undefined
): STM.STM<void> =>
  TRef.update(self, (marks) => ({
    latched: moveIds(marks.latched, removed, replacement),
    wakingSteers: moveIds(marks.wakingSteers, removed, replacement)
  }))

const moveIds = (
  ids: HashSet.HashSet<string>,
  removed: ReadonlyArray<{ readonly id: string }>,
  replacement: string | undefined
): HashSet.HashSet<string> => {
  let moved = ids
  for (const { id } of removed) {
    if (!HashSet.has(moved, id)) continue
    moved = HashSet.remove(moved, id)
    if (replacement !== undefined) moved = HashSet.add(moved, replacement)
  }
  return moved
}
