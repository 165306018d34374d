/**
 * The per-session writer fiber: group commit of everything appended but not yet durable (SPEC 6.2),
 * fail-stop on a store failure that outlives the retry policy (SPEC 6.3).
 *
 * The writer never waits inside an STM transaction: Effect's STM re-runs a waiting transaction
 * whenever any committed transaction read a `TRef` it waits on, and every append reads the log.
 * Instead it sleeps on a plain signal: each fiber that commits an append hands the committed log
 * over after its commit, and durability waiters ask for what they wait for (see
 * {@link WriterSignal}); it reads the log handed over after every wake, so a spurious wake costs
 * one comparison.
 *
 * A fiber that needs durability while no append is in flight, in a session whose store can append
 * synchronously (the memory store, the SQLite store on a file), writes the pending events itself
 * (`WriterSignal.writeNow`) instead of waking the writer and waiting for it: the same group append, without
 * the two fiber hand-offs, so the caller goes on without suspending. Whether an operation's
 * acknowledgement may do so is the store's choice (`WriterSignal.acknowledgesNow`).
 *
 * @since 0.1.0
 */
import { Duration, Effect, Either, Option, Schedule, STM, TRef } from "effect"
import { PersistenceError } from "../../domain/Errors.js"
import type { SessionEvent } from "../../domain/Event.js"
import type * as GrowOnly from "../../domain/GrowOnly.js"
import * as DurableWaiters from "../durability/DurableWaiters.js"
import type { WriterSignal } from "../durability/WriterSignal.js"
import { arm, wake } from "../durability/WriterSignal.js"
import * as Outbox from "../state/Outbox.js"
import type { SessionStateShape } from "../state/SessionState.js"

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

// Sleeps until `wake`; returns at once if a wake came while the caller was awake. No canceler: the
// writer is interrupted only when its session closes, and a resumption after that is ignored by
// Effect; an `async` with a canceler runs inside an `onInterrupt` (five more operations per sleep).
const sleep = (signal: WriterSignal): Effect.Effect<void> =>
  Effect.async<void>((resume) => {
    if (signal.woken) {
      signal.woken = false
      resume(Effect.void)
      return
    }
    signal.wake = () => resume(Effect.void)
  })

const timer = (signal: WriterSignal): Effect.Effect<never> => {
  let elapsed = Number.NEGATIVE_INFINITY
  const armed = Effect.async<void>((resume) => {
    if (signal.deadline > elapsed) {
      resume(Effect.void)
      return
    }
    signal.timerWake = () => resume(Effect.void)
    return Effect.sync(() => {
      signal.timerWake = undefined
    })
  })
  return Effect.forever(Effect.gen(function*() {
    yield* armed
    const deadline = signal.deadline
    // Until the clock reads the deadline: a sleep may end a millisecond short by the clock's reading
    // (Node's timers run on a monotonic clock, Date.now() on the wall), and the writer, which checks
    // the deadline against the clock, would wait for a wake that never comes.
    let now = yield* Effect.clockWith((clock) => clock.currentTimeMillis)
    while (deadline > now) {
      yield* Effect.sleep(Duration.millis(deadline - now))
      now = yield* Effect.clockWith((clock) => clock.currentTimeMillis)
    }
    elapsed = deadline
    wake(signal)
  }))
}

const WRITTEN: Effect.Effect<Either.Either<void, unknown>> = Effect.succeed(Either.right(undefined))

/**
 * Runs the writer until interrupted. A store append covers every pending event; waiters are
 * released together when it completes. Writes start at once when someone awaits durability, when
 * `batchSize` events are pending, or `batchWindow` after the oldest pending event was appended.
 * A synchronous store's write (`WriterSignal.writeNow`) is usable from this call on, until the session is
 * poisoned or `WriterSignal.stopWritingNow` (the session's scope calls it when it closes).
 *
 * @since 0.1.0
 * @category durability
 */
export const runWriter = (state: SessionStateShape, options: DurabilityOptions = {}): Effect.Effect<void> => {
  const signal = state.writer
  const windowMs = Duration.toMillis(options.batchWindow ?? Duration.millis(200))
  const retry = options.writeRetry ?? Schedule.recurs(2)
  const append = (batch: readonly [SessionEvent, ...Array<SessionEvent>]) => state.store.append(state.sessionId, batch)
  // `Effect.either(Effect.retry(append, retry))`, with the schedule started only after a first failure.
  const appendRetried = (batch: readonly [SessionEvent, ...Array<SessionEvent>]) =>
    Effect.matchEffect(append(batch), {
      onFailure: (first) =>
        Effect.either(Effect.flatMap(Schedule.driver(retry), (driver) => {
          const again = (error: unknown): Effect.Effect<void, unknown> =>
            Effect.matchEffect(driver.next(error), {
              onFailure: () => Effect.fail(error),
              onSuccess: () => Effect.catchAll(append(batch), again)
            })
          return again(first)
        })),
      onSuccess: () => WRITTEN
    })

  const poison = (cause: unknown) => {
    signal.appendNow = undefined
    const error = cause instanceof PersistenceError
      ? cause
      : new PersistenceError({ sessionId: state.sessionId, operation: "append", cause })
    return Effect.gen(function*() {
      yield* STM.commit(
        STM.zipRight(
          TRef.set(state.poisoned, Option.some(error)),
          STM.flatMap(TRef.get(state.owner), (owner) => owner.onPoison(error))
        )
      )
      DurableWaiters.poison(state.waiters, error)
      yield* Outbox.deliver(state.outbox)
    })
  }

  // The timer fiber starts with the first window or the next pass after the second write (its own
  // or a synchronous one), whichever comes first (an idle session, written once when opened, holds
  // no timer fiber). From then on appends arm windows themselves instead of waking the writer.
  let writes = 0
  // The committed events after `durable`, up to `last`: one store append.
  const pendingBatch = (events: GrowOnly.GrowOnly<SessionEvent>, durable: number, last: number) =>
    events.buffer.slice(durable + 1, last + 1) as [SessionEvent, ...Array<SessionEvent>]
  // A store append covered everything up to `last`: release its waiters.
  const wrote = (last: number) => {
    DurableWaiters.commit(state.waiters, last)
    writes++
  }
  const startTimer = Effect.suspend(() => {
    signal.windowMs = windowMs
    return Effect.fork(timer(signal))
  })

  // One pass: write what is due, or sleep until something may be. `false` once poisoned.
  const pass = Effect.gen(function*() {
    if (writes >= 2 && signal.windowMs === undefined) yield* startTimer
    // The committed log as handed over (it only grows). From here to `busy = true` nothing may
    // yield: a synchronous write in between would make the batch stale (events already stored).
    const events = signal.events
    const durable = state.waiters.durable
    const last = events.length - 1
    if (last <= durable) {
      yield* sleep(signal)
      return true
    }
    if (signal.requested <= durable && last - durable < signal.batchSize) {
      const deadline = events.buffer[durable + 1]!.time + windowMs
      if (deadline > state.clock.unsafeCurrentTimeMillis()) {
        arm(signal, deadline)
        if (signal.windowMs === undefined) yield* startTimer
        yield* sleep(signal)
        return true
      }
    }
    signal.busy = true
    const written = yield* appendRetried(pendingBatch(events, durable, last))
    signal.busy = false
    if (written._tag === "Left") {
      yield* poison(written.left)
      return false
    }
    wrote(last)
    return true
  })

  // The synchronous write of `writeNow`: everything committed and not yet durable, in one append.
  const registration = state.store.appendNow
  const appendNow = registration?.append
  const writeSync = appendNow === undefined ? undefined : () => {
    // Never after the poison: it ends synchronous writes (`appendNow` is cleared).
    const events = signal.events
    const durable = state.waiters.durable
    const last = events.length - 1
    if (last <= durable) return
    if (!appendNow(state.sessionId, pendingBatch(events, durable, last))) return
    wrote(last)
    // The second write starts the timer, as in `pass` (which only the writer can fork): until it
    // runs, the first event pending after each write wakes the writer to arm the window.
    if (writes >= 2 && signal.windowMs === undefined) wake(signal)
  }

  // Installed at once, so that a durability wait before the writer's first pass can use it; the
  // session's scope ends it (`stopWritingNow`), as does a poison.
  signal.appendNow = writeSync
  signal.acknowledgeNow = registration?.acknowledgements ?? false
  return Effect.gen(function*() {
    while (yield* pass) {
      // Until the session is poisoned.
    }
    return yield* Effect.never
  })
}
