/**
 * Waiters for durability. Each waiter registers the seq it needs once; the writer releases every
 * covered waiter when a store append completes (group commit), or fails them all when the session
 * is poisoned. Registration and release are synchronous, so no commit can fall between a waiter's
 * check and its registration, and a commit costs time proportional to the waiters it releases.
 *
 * @since 0.1.0
 */
import { Deferred, Effect, Exit } from "effect"
import type { PersistenceError } from "../domain/Errors.js"

interface Waiter {
  readonly seq: number
  readonly deferred: Deferred.Deferred<void, PersistenceError>
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
 * Waits until `seq` is durable; fails with the poison if the session is poisoned first.
 *
 * @since 0.1.0
 * @category durability
 */
export const wait = (self: DurableWaiters, seq: number): Effect.Effect<void, PersistenceError> =>
  Effect.suspend(() => {
    if (self.durable >= seq) return Effect.void
    if (self.failure !== undefined) return Effect.fail(self.failure)
    const deferred = Deferred.unsafeMake<void, PersistenceError>(undefined as never)
    self.waiters.push({ seq, deferred })
    return Deferred.await(deferred)
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
  const remaining: Array<Waiter> = []
  for (const waiter of self.waiters) {
    if (waiter.seq <= self.durable) Deferred.unsafeDone(waiter.deferred, Exit.void)
    else remaining.push(waiter)
  }
  self.waiters = remaining
}

/**
 * Fails every waiter, now and later, with `failure`.
 *
 * @since 0.1.0
 * @category durability
 */
export const poison = (self: DurableWaiters, failure: PersistenceError): void => {
  self.failure = failure
  for (const waiter of self.waiters) Deferred.unsafeDone(waiter.deferred, Exit.fail(failure))
  self.waiters = []
}
