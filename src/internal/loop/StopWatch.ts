/**
 * Stop notifications for abortable work: a plain callback registry that the driver's watcher
 * (`Activity.watchStops`) fires when a cancel cause is recorded or the session is poisoned, and the
 * wait that races one callback against it.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"

/**
 * One watcher fiber per driver that turns "a cause is recorded or the session is poisoned" into
 * plain callbacks, so abortable work forks only itself and never waits on the phase `TRef` (which
 * every loop transaction reads, so every commit would re-run each waiting transaction).
 *
 * @since 0.1.0
 * @category models
 */
export interface StopWatch {
  /** Set by the watcher while a stop condition holds (it may lag the commit that changed it). */
  stopped: boolean
  readonly listeners: Set<() => void>
}

/**
 * An idle stop watch; `Activity.watchStops` must run for it to fire.
 *
 * @since 0.1.0
 * @category constructors
 */
export const makeStopWatch = (): StopWatch => ({ stopped: false, listeners: new Set() })

/**
 * Waits, on callbacks alone, for whichever comes first: the stop watch firing (`onStop` gives the
 * result) or `listen`'s own event (`listen` registers it, may report it at once, and returns how to
 * unregister). The loser is unregistered. A caller that stops waiting unregisters both and runs
 * `onCancel` when one is given; without it nothing runs then (an `async` with a canceler runs inside
 * an `onInterrupt`, five more operations per wait): both stay registered until either fires, and
 * Effect ignores that late resumption. Callers without `onCancel` must tolerate it: their `listen`
 * and `onStop` do nothing but report.
 *
 * @since 0.1.0
 * @category cancellation
 */
export const untilStopOr = <A>(
  watch: StopWatch,
  listen: (done: (result: Effect.Effect<A>) => void) => () => void,
  onStop: () => Effect.Effect<A>,
  onCancel?: Effect.Effect<void>
): Effect.Effect<A> =>
  Effect.async<A>((resume) => {
    let settled = false
    let unlisten: (() => void) | undefined
    const stop = () => {
      if (settled) return
      settled = true
      unlisten?.()
      resume(onStop())
    }
    watch.listeners.add(stop)
    unlisten = listen((result) => {
      if (settled) return
      settled = true
      watch.listeners.delete(stop)
      resume(result)
    })
    if (onCancel === undefined) return
    return Effect.suspend(() => {
      settled = true
      watch.listeners.delete(stop)
      unlisten?.()
      return onCancel
    })
  })
