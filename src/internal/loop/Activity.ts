/**
 * Cooperative cancellation of the driver's in-flight work: every piece of interruptible work of an
 * activity (listeners, hooks, the model stream, backoff sleeps, tool bodies, checkpoints) is raced
 * against the recording of a cancel cause. The loop then writes the closing records of the window
 * it was in (SPEC 7.2) instead of being torn down.
 *
 * @since 0.1.0
 */
import { Cause, Effect, Exit, Fiber, FiberId, FiberRef, Option, STM, TRef } from "effect"
import type { PersistenceError } from "../../domain/Errors.js"
import type { CancelCause } from "../../domain/Values.js"
import * as DurableWaiters from "../durability/DurableWaiters.js"
import * as WriterSignal from "../durability/WriterSignal.js"
import { awaitDurable } from "../state/SessionState.js"
import type { DriverState } from "./Phase.js"
import { causeOf } from "./Phase.js"
import type { StopWatch } from "./StopWatch.js"
import { untilStopOr } from "./StopWatch.js"

/**
 * Marks the fibers of a driver's activity (turns, hooks, tool bodies, maintenance tasks) with the
 * driver's identity, so `whenIdle` can refuse to wait for itself.
 *
 * @since 0.1.0
 * @category fiber refs
 */
export const currentActivity: FiberRef.FiberRef<object | undefined> = FiberRef.unsafeMake<object | undefined>(undefined)

/**
 * Whether the current activity is stopping (a cause is recorded), for a chain of listeners that
 * must not start the next one then (turn-stopping listeners, SPEC 4.3); never, outside the loop.
 *
 * @since 0.1.0
 * @category fiber refs
 */
export const currentStopping: FiberRef.FiberRef<Effect.Effect<boolean>> = FiberRef.unsafeMake<Effect.Effect<boolean>>(
  Effect.succeed(false)
)

/**
 * Where a service that turns a listener's defect into a typed failure (the pre-step waterfall)
 * reports that defect, so that a turn ending `aborted` still publishes it (SPEC 3.10 case 2).
 *
 * @since 0.1.0
 * @category fiber refs
 */
export const currentDefectSink: FiberRef.FiberRef<Array<unknown> | undefined> = FiberRef.unsafeMake<
  Array<unknown> | undefined
>(undefined)

/**
 * Reports the defects of `cause` to the current defect sink, if there is one.
 *
 * @since 0.1.0
 * @category cancellation
 */
export const reportDefects = (cause: Cause.Cause<unknown>): Effect.Effect<void> =>
  Effect.flatMap(FiberRef.get(currentDefectSink), (sink) =>
    Effect.sync(() => {
      if (sink !== undefined) sink.push(...Cause.defects(cause))
    }))

/**
 * Completes when a cause is recorded for the current activity.
 *
 * @since 0.1.0
 * @category cancellation
 */
export const awaitCause = (ds: DriverState): Effect.Effect<CancelCause> =>
  STM.commit(
    STM.flatMap(TRef.get(ds.phase), (phase) => {
      const cause = causeOf(phase)
      return Option.isSome(cause) ? STM.succeed(cause.value) : STM.retry
    })
  )

// A recorded cause, or a poisoned session (whose activity stops at its next append).
const awaitStop = (ds: DriverState): Effect.Effect<void> =>
  STM.commit(
    STM.gen(function*() {
      if (Option.isSome(causeOf(yield* TRef.get(ds.phase)))) return
      if (Option.isSome(yield* TRef.get(ds.session.poisoned))) return
      return yield* STM.retry
    })
  )

/**
 * Runs until interrupted: fires every registered listener when a cause is recorded or the session
 * is poisoned, then waits for the condition to clear.
 *
 * @since 0.1.0
 * @category cancellation
 */
export const watchStops = (ds: DriverState, watch: StopWatch): Effect.Effect<never> =>
  Effect.forever(
    Effect.zipRight(
      Effect.flatMap(awaitStop(ds), () =>
        Effect.sync(() => {
          watch.stopped = true
          const listeners = Array.from(watch.listeners)
          watch.listeners.clear()
          for (const listener of listeners) listener()
        })),
      Effect.zipRight(
        STM.commit(
          STM.gen(function*() {
            if (Option.isSome(causeOf(yield* TRef.get(ds.phase)))) return yield* STM.retry
            if (Option.isSome(yield* TRef.get(ds.session.poisoned))) return yield* STM.retry
          })
        ),
        Effect.sync(() => {
          watch.stopped = false
        })
      )
    )
  )

/**
 * Whether a cause is recorded for the current activity, read in a transaction of its own.
 *
 * @since 0.1.0
 * @category cancellation
 */
export const causeRecorded = (ds: DriverState): Effect.Effect<boolean> =>
  STM.commit(STM.map(TRef.get(ds.phase), (phase) => Option.isSome(causeOf(phase))))

/**
 * Whether the driver's stop watcher has reported a stop (a recorded cause or the poison), for code
 * that cannot wait for a transaction (a fiber's exit observer): the watcher reports a stop in the
 * scheduler turn after the commit that recorded it.
 *
 * @since 0.1.0
 * @category cancellation
 */
export const stopReported = (ds: DriverState): boolean => ds.stopWatch?.stopped === true

/**
 * The outcome of abortable work: it finished (with its exit), or a cause was recorded first and
 * the work was interrupted and awaited (with the exit it ended with).
 *
 * @since 0.1.0
 * @category models
 */
export type Abortable<A, E> =
  | { readonly _tag: "Done"; readonly exit: Exit.Exit<A, E> }
  | { readonly _tag: "Aborted"; readonly exit: Exit.Exit<A, E> }

/**
 * Runs `work` until it completes or a cause is recorded; in the latter case `work` is interrupted
 * and awaited (never abandoned).
 *
 * @since 0.1.0
 * @category cancellation
 */
export const abortable = <A, E, R>(
  ds: DriverState,
  work: Effect.Effect<A, E, R>
): Effect.Effect<Abortable<A, E>, never, R> =>
  Effect.suspend(() => {
    const watch = ds.stopWatch
    // Without a running watcher, or while it reports a stop (which may already have cleared), race
    // the work against the transaction itself.
    if (watch === undefined || watch.stopped) return racedAgainstStop(ds, work)
    return Effect.flatMap(Effect.fork(work), (fiber) =>
      untilStopOr<Abortable<A, E>>(
        watch,
        (done) => {
          const onExit = (exit: Exit.Exit<A, E>) => done(Effect.succeed({ _tag: "Done", exit }))
          fiber.addObserver(onExit)
          return () => fiber.removeObserver(onExit)
        },
        () => Effect.map(Fiber.interrupt(fiber), (exit) => ({ _tag: "Aborted" as const, exit })),
        // The caller was interrupted: interrupt the work and await it.
        Effect.asVoid(Fiber.interrupt(fiber))
      ))
  })

/**
 * The outcome of a hook that has no listener: its default value, as an inline run would give it,
 * without running anything (a hook run costs several operations even with no listener).
 *
 * @since 0.1.0
 * @category cancellation
 */
export const quietDone = <A>(value: A): Abortable<A, never> => ({ _tag: "Done", exit: Exit.succeed(value) })

/**
 * {@link abortable}, or `work` run inline when `inline` (work that cannot block, such as a hook
 * with no listener: racing it against a cancel would only cost a fiber).
 *
 * @since 0.1.0
 * @category cancellation
 */
export const abortableUnless = <A, E, R>(
  ds: DriverState,
  inline: boolean,
  work: Effect.Effect<A, E, R>
): Effect.Effect<Abortable<A, E>, never, R> =>
  inline
    ? Effect.matchCause(work, {
      onFailure: (cause): Abortable<A, E> => ({ _tag: "Done", exit: Exit.failCause(cause) }),
      onSuccess: (value): Abortable<A, E> => ({ _tag: "Done", exit: Exit.succeed(value) })
    })
    : abortable(ds, work)

/**
 * A checkpoint (D13): waits until everything up to `seq` is durable, or until a cause is recorded
 * (`Aborted`). It registers with the durability waiters and the stop watch directly, so unlike
 * {@link abortable} it forks nothing. A poisoned session fails the exit with the poison.
 *
 * @since 0.1.0
 * @category cancellation
 */
export const checkpoint = (ds: DriverState, seq: number): Effect.Effect<Abortable<void, PersistenceError>> =>
  Effect.suspend(() => {
    const session = ds.session
    const watch = ds.stopWatch
    if (watch === undefined || watch.stopped) return abortable(ds, awaitDurable(session, seq))
    // A store that appends synchronously: written from this fiber (see `WriterSignal.writeNow`).
    if (seq > session.waiters.durable) WriterSignal.writeNow(session.writer)
    if (seq <= session.waiters.durable) return Effect.succeed(DURABLE)
    return untilStopOr<Abortable<void, PersistenceError>>(
      watch,
      (done) => {
        const waiter = DurableWaiters.register(
          session.waiters,
          seq,
          (failure) =>
            done(Effect.succeed(failure === undefined ? DURABLE : { _tag: "Done", exit: Exit.fail(failure) }))
        )
        // Registered (not answered at once): ask the writer for it.
        if (waiter !== undefined) WriterSignal.request(session.writer, seq)
        return () => DurableWaiters.remove(session.waiters, waiter)
      },
      () => Effect.succeed(STOPPED)
    )
  })

/**
 * {@link checkpoint} answered without an Effect when it needs no wait: everything up to `seq` is
 * durable already, or a synchronous store has just written it from this fiber. `undefined` when
 * the checkpoint must wait (run {@link checkpoint} then).
 *
 * @since 0.1.0
 * @category cancellation
 */
export const checkpointNow = (ds: DriverState, seq: number): Abortable<void, PersistenceError> | undefined => {
  const session = ds.session
  const watch = ds.stopWatch
  if (watch === undefined || watch.stopped) return undefined
  if (seq > session.waiters.durable) WriterSignal.writeNow(session.writer)
  return seq <= session.waiters.durable ? DURABLE : undefined
}

const DURABLE: Abortable<void, never> = { _tag: "Done", exit: Exit.void }
const STOPPED: Abortable<void, never> = { _tag: "Aborted", exit: Exit.interrupt(FiberId.none) }

const racedAgainstStop = <A, E, R>(
  ds: DriverState,
  work: Effect.Effect<A, E, R>
): Effect.Effect<Abortable<A, E>, never, R> =>
  Effect.raceWith(Effect.exit(work), awaitStop(ds), {
    onSelfDone: (exit, other) => Effect.as(Fiber.interrupt(other), { _tag: "Done" as const, exit: Exit.flatten(exit) }),
    onOtherDone: (_, self) =>
      Effect.map(Fiber.interrupt(self), (exit) => ({ _tag: "Aborted" as const, exit: Exit.flatten(exit) }))
  })

/**
 * The defects found in an exit (for the live error stream of an aborted turn, SPEC 3.10 case 2).
 *
 * @since 0.1.0
 * @category cancellation
 */
export const defectsOf = (exit: Exit.Exit<unknown, unknown>): ReadonlyArray<unknown> =>
  Exit.isFailure(exit) ? Array.from(Cause.defects(exit.cause)) : []
