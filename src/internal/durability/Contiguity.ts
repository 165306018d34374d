/**
 * The optimistic append check every store applies (SPEC 6.1): a batch must continue the stored log.
 *
 * @since 0.1.0
 */
import type { SessionEvent } from "../../domain/Event.js"

/**
 * Why `events` cannot follow a stored log of `length` events, or `undefined` when they can.
 *
 * @since 0.1.0
 * @category validation
 */
export const seqProblem = (events: ReadonlyArray<SessionEvent>, length: number): string | undefined => {
  for (let i = 0; i < events.length; i++) {
    const seq = events[i]!.seq
    if (seq !== length + i) {
      return i === 0
        ? `events[0].seq is ${seq} but the stored log has ${length} events (another writer?)`
        : `seqs are not contiguous: events[${i}].seq is ${seq}, expected ${length + i}`
    }
  }
  return undefined
}
