/**
 * The per-session writer fiber: group commit of everything appended but not yet durable (SPEC 6.2),
 * fail-stop on a store failure that outlives the retry policy (SPEC 6.3).
 *
 * @since 0.1.0
 */
import { Duration, Effect, Option, Schedule, STM, TRef } from "effect"
import { PersistenceError } from "../domain/Errors.js"
import type { SessionEvent } from "../domain/Event.js"
import * as DurableWaiters from "./DurableWaiters.js"
import * as Outbox from "./Outbox.js"
import type { SessionStateShape } from "./SessionState.js"

/**
 * Durability options of a session.
 *
 * @since 0.1.0
 * @category models
 */
export interface DurabilityOptions {
  readonly batchSize?: number
  readonly batchWindow?: Duration.DurationInput
  readonly writeRetry?: Schedule.Schedule<unknown, unknown>
}

/**
 * Runs the writer until interrupted. A store append covers every pending event; waiters are
 * released together when it completes. Writes start at once when someone awaits durability, when
 * `batchSize` events are pending, or `batchWindow` after the oldest pending event was appended.
 *
 * @since 0.1.0
 * @category durability
 */
export const runWriter = (state: SessionStateShape, options: DurabilityOptions = {}): Effect.Effect<void> => {
  const batchSize = Math.max(1, options.batchSize ?? 256)
  const windowMs = Duration.toMillis(options.batchWindow ?? Duration.millis(200))
  const retry = options.writeRetry ?? Schedule.recurs(2)

  // The time (Clock, as recorded on the event) of the oldest event not yet durable.
  const oldestPending = STM.gen(function*() {
    if (Option.isSome(yield* TRef.get(state.poisoned))) return yield* STM.retry
    const durable = yield* TRef.get(state.durableSeq)
    const { events } = yield* TRef.get(state.log)
    if (events.length - 1 <= durable) return yield* STM.retry
    return events.buffer[durable + 1]!.time
  })

  const demanded = STM.gen(function*() {
    const durable = yield* TRef.get(state.durableSeq)
    const { events } = yield* TRef.get(state.log)
    const requested = yield* TRef.get(state.requestedSeq)
    if (requested > durable || events.length - 1 - durable >= batchSize) return
    return yield* STM.retry
  })

  const isDemanded = STM.gen(function*() {
    const durable = yield* TRef.get(state.durableSeq)
    const { events } = yield* TRef.get(state.log)
    const requested = yield* TRef.get(state.requestedSeq)
    return requested > durable || events.length - 1 - durable >= batchSize
  })

  const takeBatch = STM.gen(function*() {
    const durable = yield* TRef.get(state.durableSeq)
    const { events } = yield* TRef.get(state.log)
    return events.buffer.slice(durable + 1, events.length) as Array<SessionEvent>
  })

  // The batch window runs on one timer fiber for the writer's lifetime, so arming it forks nothing.
  // Deadlines only grow (each is the oldest pending event's time plus the window): the timer sleeps
  // until the armed deadline and then records it as elapsed.
  const windowState = TRef.make(Number.NEGATIVE_INFINITY)
  const timer = (armed: TRef.TRef<number>, elapsed: TRef.TRef<number>) => Effect.forever(Effect.gen(function*() {
    const deadline = yield* STM.commit(STM.gen(function*() {
      const next = yield* TRef.get(armed)
      if (next <= (yield* TRef.get(elapsed))) return yield* STM.retry
      return next
    }))
    const now = yield* Effect.clockWith((clock) => clock.currentTimeMillis)
    if (deadline > now) yield* Effect.sleep(Duration.millis(deadline - now))
    yield* STM.commit(TRef.set(elapsed, deadline))
  }))

  const demandedOrElapsed = (elapsed: TRef.TRef<number>, deadline: number) =>
    STM.gen(function*() {
      if ((yield* TRef.get(elapsed)) >= deadline) return
      return yield* demanded
    })

  const writeOnce = (armed: TRef.TRef<number>, elapsed: TRef.TRef<number>) => Effect.gen(function*() {
    const oldest = yield* STM.commit(oldestPending)
    const now = yield* Effect.clockWith((clock) => clock.currentTimeMillis)
    const deadline = oldest + windowMs
    // Only arm the window when nobody is waiting yet.
    if (deadline > now && !(yield* STM.commit(isDemanded))) {
      yield* STM.commit(TRef.update(armed, (at) => Math.max(at, deadline)))
      yield* STM.commit(demandedOrElapsed(elapsed, deadline))
    }
    const batch = yield* STM.commit(takeBatch)
    if (batch.length === 0) return
    const last = batch[batch.length - 1]!.seq
    const written = yield* state.store.append(state.sessionId, batch as [SessionEvent, ...Array<SessionEvent>]).pipe(
      Effect.retry(retry),
      Effect.either
    )
    if (written._tag === "Right") {
      yield* STM.commit(TRef.set(state.durableSeq, last))
      DurableWaiters.commit(state.waiters, last)
    } else {
      const error = written.left instanceof PersistenceError
        ? written.left
        : new PersistenceError({ sessionId: state.sessionId, operation: "append", cause: written.left })
      yield* STM.commit(STM.zipRight(TRef.set(state.poisoned, Option.some(error)), state.owner.onPoison(error)))
      DurableWaiters.poison(state.waiters, error)
      yield* Outbox.deliver(state.outbox)
    }
  })

  return Effect.gen(function*() {
    const armed = yield* windowState
    const elapsed = yield* windowState
    yield* Effect.fork(timer(armed, elapsed))
    return yield* Effect.forever(writeOnce(armed, elapsed))
  })
}
