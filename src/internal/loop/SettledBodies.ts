/**
 * The tool bodies of a batch that ended, in the order they ended, and which of them the scheduler
 * may look at before its next START (SPEC 4.6 START step 6). A body is forked, so it runs once the
 * scheduler's fiber suspends: a body that ended on the scheduler's own stack (it runs at once, until
 * it first suspends) is held back until that fiber is known to have suspended since, and becomes
 * visible then. One waiter (the scheduler) is woken when a body ends.
 *
 * @since 0.1.0
 */
import { Effect, Fiber, FiberRef, Option } from "effect"
import type { StopWatch } from "./StopWatch.js"
import { untilStopOr } from "./StopWatch.js"

/**
 * The ended bodies of one batch, by call index.
 *
 * @since 0.1.0
 * @category models
 */
export interface SettledBodies {
  /** Whether a body ended that was not taken yet. */
  readonly pending: () => boolean
  /** Records that the body of call `index` ended; `endedAtOnce` when it ended before its fork returned. Wakes the waiter. */
  readonly ended: (index: number, endedAtOnce: boolean) => void
  /** Completes when a body has ended (it carries nothing: the queue is read again). */
  readonly signal: Effect.Effect<void>
  /** The same, or the stop watch firing: registered as callbacks, without forking. */
  readonly signalOrStop: (watch: StopWatch) => Effect.Effect<"settled" | "stop">
  /** Takes every body that ended, oldest first; for when no further call can start and the scheduler waits. */
  readonly takeAll: () => ReadonlyArray<number>
  /** Takes the bodies a forked body's log would show before the next START, oldest first. */
  readonly takeVisible: () => ReadonlyArray<number>
  /** Queues a task that marks every body ended by then visible once the current fiber has suspended. */
  readonly noteSuspension: () => void
}

/**
 * An empty queue of ended bodies.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (): SettledBodies => {
  // Indexes of calls whose bodies ended, oldest first; `wake` signals the one waiter (the scheduler).
  const settled: Array<number> = []
  // How many of `settled`, from the front, a forked body would have shown by now (see `takeVisible`).
  let visible = 0
  // Whether a task is queued to note that this fiber suspended (see `noteSuspension`).
  let probing = false
  let wake: (() => void) | undefined

  const ended = (index: number, endedAtOnce: boolean) => {
    settled.push(index)
    // A body that ended on another fiber's time shows that this fiber has suspended since every
    // earlier end, so a forked body would have run by now: all of them are visible.
    if (!endedAtOnce) visible = settled.length
    const signal = wake
    wake = undefined
    signal?.()
  }

  const signal = Effect.async<void>((resume) => {
    if (settled.length > 0) return resume(Effect.void)
    wake = () => resume(Effect.void)
    return Effect.sync(() => {
      wake = undefined
    })
  })

  const signalOrStop = (watch: StopWatch) =>
    untilStopOr<"settled" | "stop">(
      watch,
      (done) => {
        wake = () => done(Effect.succeed("settled"))
        return () => {
          wake = undefined
        }
      },
      () => Effect.succeed("stop")
    )

  // The first `count` bodies that ended, oldest first.
  const take = (count: number): ReadonlyArray<number> => {
    const taken = settled.splice(0, count)
    visible = 0
    return taken
  }

  // A body runs at once, on the scheduler's stack; one that ended there is held back until the
  // fiber is known to have suspended since (a body ended on another fiber's time, or the task of
  // `noteSuspension` ran) or the scheduler waits. Every end before that point is taken, so a COMMIT
  // that is ready runs before the next START.
  const takeVisible = (): ReadonlyArray<number> => visible > 0 ? take(visible) : []

  // The task runs only once this fiber has suspended (or yielded), which is when a forked body would
  // run: every body that ended by then becomes visible. Queued before a START while bodies that
  // ended on this stack are held back.
  const noteSuspension = () => {
    if (probing || settled.length === visible) return
    const fiber = Option.getOrUndefined(Fiber.getCurrentFiber())
    if (fiber === undefined) return
    probing = true
    fiber.getFiberRef(FiberRef.currentScheduler).scheduleTask(() => {
      probing = false
      visible = settled.length
    }, fiber.getFiberRef(FiberRef.currentSchedulingPriority))
  }

  return {
    pending: () => settled.length > 0,
    ended,
    signal,
    signalOrStop,
    takeAll: () => take(settled.length),
    takeVisible,
    noteSuspension
  }
}
