/**
 * The transactional outbox of live notifications (SPEC 3.10). Transactions enqueue notifications
 * as part of their commit; whoever committed then delivers everything queued, in commit order,
 * to every subscriber's own unbounded queue — before its operation completes.
 *
 * @since 0.1.0
 */
import type { Scope } from "effect"
import { Effect, Option, Queue, STM, Stream, TQueue } from "effect"
import type { DriverEvent } from "../../domain/DriverEvent.js"

/**
 * One subscriber: where its notifications go, and what the outbox's closing does to it.
 *
 * @since 0.1.0
 * @category models
 */
export interface Subscriber {
  readonly offer: (event: DriverEvent) => void
  /** What the outbox's closing does to it (under the outbox lock). */
  readonly end: Effect.Effect<void>
}

/**
 * The outbox of one session.
 *
 * @since 0.1.0
 * @category models
 */
export interface Outbox {
  readonly queue: TQueue.TQueue<DriverEvent>
  readonly lock: Effect.Semaphore
  readonly subscribers: Set<Subscriber>
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
  STM.suspend(() => publishing(outbox, events, undefined))

/**
 * {@link publish} then `value`, built while the transaction runs (in a continuation of it): with
 * nobody to deliver to, it is `STM.succeed(value)` alone.
 *
 * @since 0.1.0
 * @category combinators
 */
export const publishing = <A>(outbox: Outbox, events: ReadonlyArray<DriverEvent>, value: A): STM.STM<A> =>
  // Nobody to deliver to: a subscriber added later sees only what commits after it is added, and a
  // transaction runs and commits in one synchronous step, so this read is its commit's.
  events.length === 0 || outbox.subscribers.size === 0
    ? STM.succeed(value)
    : STM.zipRight(
      TQueue.offerAll(outbox.queue, events),
      STM.sync(() => {
        outbox.dirty = true
        return value
      })
    )

const drain = (outbox: Outbox): Effect.Effect<void> =>
  Effect.flatMap(STM.commit(TQueue.takeAll(outbox.queue)), (events) =>
    Effect.sync(() => {
      if (events.length === 0) return
      for (const subscriber of outbox.subscribers) {
        for (const event of events) subscriber.offer(event)
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

// Registers `subscriber` for everything committed after this returns, reading `initial` in a
// transaction at the same instant (`closed` runs instead when the outbox is already closed);
// `release` runs when the scope closes.
const register = <A>(
  outbox: Outbox,
  subscriber: Subscriber,
  initial: STM.STM<A>,
  closed: Effect.Effect<void>,
  release: Effect.Effect<void>
): Effect.Effect<A, never, Scope.Scope> =>
  Effect.acquireRelease(
    outbox.lock.withPermits(1)(
      Effect.gen(function*() {
        outbox.dirty = false
        yield* drain(outbox)
        if (outbox.closed) yield* closed
        else outbox.subscribers.add(subscriber)
        return yield* STM.commit(initial)
      })
    ),
    () =>
      Effect.suspend(() => {
        outbox.subscribers.delete(subscriber)
        return release
      })
  )

/**
 * A queue of everything committed after this returns, with `initial` read in a transaction at the
 * same instant. It keeps what it received when the outbox closes (nothing more arrives then; a
 * queue subscribed after closing is shut down at once) and is shut down when the scope closes.
 *
 * @since 0.1.0
 * @category combinators
 */
export const subscribe = <A>(
  outbox: Outbox,
  initial: STM.STM<A>
): Effect.Effect<readonly [Queue.Dequeue<DriverEvent>, A], never, Scope.Scope> =>
  Effect.flatMap(Queue.unbounded<DriverEvent>(), (queue) => {
    const subscriber: Subscriber = { offer: (event) => void Queue.unsafeOffer(queue, event), end: Effect.void }
    const shutdown = Queue.shutdown(queue)
    return Effect.map(register(outbox, subscriber, initial, shutdown, shutdown), (value) => [queue, value] as const)
  })

const END: unique symbol = Symbol.for("tiller/internal/Outbox/END")

/**
 * A stream of `initial` (read in a transaction at the subscription instant), then of everything
 * committed after it, selected by `select`. It ends once the outbox has closed and everything
 * committed before that was read.
 *
 * @since 0.1.0
 * @category combinators
 */
export const stream = <A>(
  outbox: Outbox,
  initial: STM.STM<ReadonlyArray<A>>,
  select: (event: DriverEvent) => Option.Option<A>
): Stream.Stream<A> =>
  Stream.unwrapScoped(Effect.flatMap(Queue.unbounded<DriverEvent | typeof END>(), (queue) => {
    const subscriber: Subscriber = {
      offer: (event) => void Queue.unsafeOffer(queue, event),
      end: Effect.asVoid(Queue.offer(queue, END))
    }
    return Effect.map(register(outbox, subscriber, initial, subscriber.end, Queue.shutdown(queue)), (first) =>
      Stream.concat(
        Stream.fromIterable(first),
        Stream.fromQueue(queue).pipe(
          Stream.takeWhile((item): item is DriverEvent =>
            item !== END
          ),
          Stream.filterMap(select)
        )
      ))
  }))

/**
 * Delivers what is left, then ends every subscription: streams end after what they received, and
 * queues keep it.
 *
 * @since 0.1.0
 * @category combinators
 */
export const close = (outbox: Outbox): Effect.Effect<void> =>
  outbox.lock.withPermits(1)(
    Effect.gen(function*() {
      yield* drain(outbox)
      outbox.closed = true
      for (const subscriber of outbox.subscribers) yield* subscriber.end
      outbox.subscribers.clear()
    })
  )
