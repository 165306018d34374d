/**
 * Waiters for durability. Each waiter registers the seq it needs once; the writer releases every
 * covered waiter when a store append completes (group commit), or fails them all when the session
 * is poisoned. Registration and release are synchronous, so no commit can fall between a waiter's
 * check and its registration, and a commit costs time proportional to the waiters it releases.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import type { PersistenceError } from "../../domain/Errors.js"

/**
 * One registered waiter: the seq it needs and its callback (`undefined` when durable, else the
 * poison), called exactly once unless removed first.
 *
 * @since 0.1.0
 * @category models
 */
export interface Waiter {
  readonly seq: number
  readonly done: (failure: PersistenceError | undefined) => void
}

/**
 * The durability progress of one session and the fibers waiting on it.
 *
 * @since 0.1.0
 * @category models
 */
export interface DurableWaiters {
  /** The highest durable seq (−1 when none). */
  durable: number
  /** The failure that poisoned the session, if any. */
  failure: PersistenceError | undefined
  waiters: Array<Waiter>
}

/**
 * A waiter table starting at `durable`.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (durable: number): DurableWaiters => ({ durable, failure: undefined, waiters: [] })

/**
 * Registers `done` for `seq`, or calls it at once when `seq` is durable or the session poisoned.
 * Returns the waiter to {@link remove} (undefined when already called).
 *
 * @since 0.1.0
 * @category durability
 */
export const register = (
  self: DurableWaiters,
  seq: number,
  done: (failure: PersistenceError | undefined) => void
): Waiter | undefined => {
  if (self.durable >= seq) {
    done(undefined)
    return undefined
  }
  if (self.failure !== undefined) {
    done(self.failure)
    return undefined
  }
  const waiter: Waiter = { seq, done }
  self.waiters.push(waiter)
  return waiter
}

/**
 * Forgets a waiter that stopped waiting.
 *
 * @since 0.1.0
 * @category durability
 */
export const remove = (self: DurableWaiters, waiter: Waiter | undefined): void => {
  if (waiter === undefined) return
  const index = self.waiters.indexOf(waiter)
  if (index >= 0) self.waiters.splice(index, 1)
}

/**
 * Waits until `seq` is durable; fails with the poison if the session is poisoned first.
 *
 * @since 0.1.0
 * @category durability
 */
export const wait = (self: DurableWaiters, seq: number): Effect.Effect<void, PersistenceError> =>
  Effect.suspend(() => {
    if (self.durable >= seq) return Effect.void
    if (self.failure !== undefined) return Effect.fail(self.failure)
    // No canceler: a caller that stops waiting leaves its waiter until `seq` is durable or the
    // session poisoned (the writer is already asked for it), and Effect ignores that late resumption.
    // An `async` with a canceler runs inside an `onInterrupt`: five more operations per acknowledgement.
    return Effect.async<void, PersistenceError>((resume) => {
      register(self, seq, (failure) => resume(failure === undefined ? Effect.void : Effect.fail(failure)))
    })
  })

/**
 * Records that everything up to `seq` is durable and releases every covered waiter.
 *
 * @since 0.1.0
 * @category durability
 */
export const commit = (self: DurableWaiters, seq: number): void => {
  self.durable = Math.max(self.durable, seq)
  if (self.waiters.length === 0) return
  const released: Array<Waiter> = []
  const remaining: Array<Waiter> = []
  for (const waiter of self.waiters) (waiter.seq <= self.durable ? released : remaining).push(waiter)
  self.waiters = remaining
  for (const waiter of released) waiter.done(undefined)
}

/**
 * Fails every waiter, now and later, with `failure`.
 *
 * @since 0.1.0
 * @category durability
 */
export const poison = (self: DurableWaiters, failure: PersistenceError): void => {
  self.failure = failure
  const waiters = self.waiters
  self.waiters = []
  for (const waiter of waiters) waiter.done(failure)
}
