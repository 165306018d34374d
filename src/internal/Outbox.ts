/**
 * The transactional outbox of live notifications (SPEC 3.10). Transactions enqueue notifications
 * as part of their commit; whoever committed then delivers everything queued, in commit order,
 * to every subscriber's own unbounded queue — before its operation completes.
 *
 * @since 0.1.0
 */
import type { Scope } from "effect"
import { Effect, Queue, STM, TQueue } from "effect"
import type { DriverEvent } from "../domain/DriverEvent.js"

/**
 * The outbox of one session.
 *
 * @since 0.1.0
 * @category models
 */
export interface Outbox {
  readonly queue: TQueue.TQueue<DriverEvent>
  readonly lock: Effect.Semaphore
  readonly subscribers: Set<Queue.Queue<DriverEvent>>
  /** Set when something may be waiting to be delivered (spurious sets are harmless). */
  dirty: boolean
  closed: boolean
}

/**
 * A fresh outbox.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make: Effect.Effect<Outbox> = Effect.gen(function*() {
  return {
    queue: yield* TQueue.unbounded<DriverEvent>(),
    lock: yield* Effect.makeSemaphore(1),
    subscribers: new Set(),
    dirty: false,
    closed: false
  }
})

/**
 * Enqueues notifications inside the caller's transaction.
 *
 * @since 0.1.0
 * @category combinators
 */
export const publish = (outbox: Outbox, events: ReadonlyArray<DriverEvent>): STM.STM<void> =>
  STM.suspend(() =>
    // Nobody to deliver to: a subscriber added later sees only what commits after it is added,
    // and a transaction runs and commits in one synchronous step, so this read is its commit's.
    events.length === 0 || outbox.subscribers.size === 0
      ? STM.void
      : STM.zipRight(TQueue.offerAll(outbox.queue, events), STM.sync(() => {
      outbox.dirty = true
    }))
  )

const drain = (outbox: Outbox): Effect.Effect<void> =>
  Effect.flatMap(STM.commit(TQueue.takeAll(outbox.queue)), (events) =>
    Effect.sync(() => {
      if (events.length === 0) return
      for (const subscriber of outbox.subscribers) {
        for (const event of events) Queue.unsafeOffer(subscriber, event)
      }
    }))

/**
 * Delivers everything committed so far, in commit order.
 *
 * @since 0.1.0
 * @category combinators
 */
export const deliver = (outbox: Outbox): Effect.Effect<void> =>
  Effect.suspend(() => {
    if (!outbox.dirty) return Effect.void
    return outbox.lock.withPermits(1)(
      Effect.suspend(() => {
        outbox.dirty = false
        return drain(outbox)
      })
    )
  })

/**
 * Registers a subscriber for everything committed after this returns, reading `initial` in a
 * transaction at the same instant; the queue is shut down when the scope closes or the outbox does.
 *
 * @since 0.1.0
 * @category combinators
 */
export const subscribe = <A>(
  outbox: Outbox,
  initial: STM.STM<A>
): Effect.Effect<readonly [Queue.Dequeue<DriverEvent>, A], never, Scope.Scope> =>
  Effect.acquireRelease(
    outbox.lock.withPermits(1)(
      Effect.gen(function*() {
        outbox.dirty = false
        yield* drain(outbox)
        const queue = yield* Queue.unbounded<DriverEvent>()
        if (outbox.closed) yield* Queue.shutdown(queue)
        else outbox.subscribers.add(queue)
        const value = yield* STM.commit(initial)
        return [queue, value] as const
      })
    ),
    ([queue]) =>
      Effect.suspend(() => {
        outbox.subscribers.delete(queue)
        return Queue.shutdown(queue)
      })
  )

/**
 * Delivers what is left, then ends every subscription.
 *
 * @since 0.1.0
 * @category combinators
 */
export const close = (outbox: Outbox): Effect.Effect<void> =>
  outbox.lock.withPermits(1)(
    Effect.gen(function*() {
      yield* drain(outbox)
      outbox.closed = true
      for (const queue of outbox.subscribers) yield* Queue.shutdown(queue)
      outbox.subscribers.clear()
    })
  )
