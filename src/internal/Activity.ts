/**
 * Cooperative cancellation of the driver's in-flight work: every piece of interruptible work of an
 * activity (listeners, hooks, the model stream, backoff sleeps, tool bodies, checkpoints) is raced
 * against the recording of a cancel cause. The loop then writes the closing records of the window
 * it was in (SPEC 7.2) instead of being torn down.
 *
 * @since 0.1.0
 */
import { Cause, Effect, Exit, Fiber, FiberRef, Option, STM, TRef } from "effect"
import type { CancelCause } from "../domain/Values.js"
import type { DriverState } from "./Phase.js"
import { causeOf } from "./Phase.js"

/**
 * Marks the fibers of a driver's activity (turns, hooks, tool bodies, maintenance tasks) with the
 * driver's identity, so `whenIdle` can refuse to wait for itself.
 *
 * @since 0.1.0
 * @category fiber refs
 */
export const currentActivity: FiberRef.FiberRef<object | undefined> = FiberRef.unsafeMake<object | undefined>(undefined)

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
 * The cause recorded for the current activity, if any.
 *
 * @since 0.1.0
 * @category cancellation
 */
export const currentCause = (ds: DriverState): Effect.Effect<Option.Option<CancelCause>> =>
  STM.commit(STM.map(TRef.get(ds.phase), causeOf))

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
export const abortable = <A, E, R>(ds: DriverState, work: Effect.Effect<A, E, R>): Effect.Effect<Abortable<A, E>, never, R> =>
  Effect.raceWith(Effect.exit(work), awaitStop(ds), {
    onSelfDone: (exit, other) =>
      Effect.as(Fiber.interrupt(other), { _tag: "Done" as const, exit: Exit.flatten(exit) }),
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
