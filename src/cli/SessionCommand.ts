/**
 * What the session commands (`tiller chat`, `tiller run`) share about their session's life: the
 * log followed as it grows, an interrupted command ending (Ctrl-C cancels the running turn as the
 * user within a grace; a termination leaves it to the session's disposal) and the final check that
 * every event was saved.
 *
 * @since 0.1.0
 */
import type { Scope } from "effect"
import { Effect, FiberRef, Stream, SubscriptionRef } from "effect"
import type { SessionEvent } from "../domain/Event.js"
import { CancelCause } from "../domain/Values.js"
import type { Driver } from "../services/Driver.js"
import type { SessionLog } from "../services/SessionLog.js"
import { CliError } from "./CliError.js"

/**
 * How long an interrupted command waits for the cancelled turn to end before it exits anyway.
 *
 * @since 0.1.0
 * @category constants
 */
export const CANCEL_GRACE = "5 seconds"

/**
 * Whether the process is being terminated (SIGTERM) rather than interrupted by the user (Ctrl-C);
 * the entry point sets it. A terminated command does not cancel the running turn as the user: it
 * leaves the turn to the session's disposal, which ends it `aborted(disposed)` and keeps the
 * pending input (SPEC 3.7, D9), as a clean shutdown should.
 *
 * @since 0.1.0
 * @category references
 */
export const currentTerminating: FiberRef.FiberRef<() => boolean> = FiberRef.unsafeMake<() => boolean>(() => false)

/**
 * Whether this command was interrupted by a termination (SIGTERM), see {@link currentTerminating}.
 *
 * @since 0.1.0
 * @category interruption
 */
export const terminating: Effect.Effect<boolean> = Effect.map(
  FiberRef.get(currentTerminating),
  (isTerminating) => isTerminating()
)

/**
 * Follows the log from `fromSeq`, handing each chunk of events to `print`; `caughtUp` waits until
 * every event appended before it was called has been printed.
 *
 * @since 0.1.0
 * @category following
 */
export const follow = (
  log: SessionLog["Type"],
  fromSeq: number,
  print: (events: ReadonlyArray<SessionEvent>) => Effect.Effect<void>
): Effect.Effect<{ readonly caughtUp: Effect.Effect<void> }, never, Scope.Scope> =>
  Effect.gen(function*() {
    const printed = yield* SubscriptionRef.make(fromSeq - 1)
    yield* log.stream(fromSeq).pipe(
      Stream.runForEachChunk((chunk) => {
        const events = Array.from(chunk)
        return Effect.zipRight(print(events), SubscriptionRef.set(printed, events[events.length - 1]!.seq))
      }),
      Effect.forkScoped
    )
    const caughtUp = Effect.flatMap(log.events, (events) =>
      printed.changes.pipe(
        Stream.takeUntil((seq) => seq >= events.length - 1),
        Stream.runDrain
      ))
    return { caughtUp }
  })

/**
 * Cancels the running turn as the user, keeping pending input (an interrupt never discards it: only
 * `/cancel` does), and waits up to {@link CANCEL_GRACE} for the agent to become idle. Run by an
 * interrupted command (SIGINT), so the log records why the turn ended instead of leaving it to the
 * session's disposal.
 *
 * @since 0.1.0
 * @category interruption
 */
export const cancelRunningTurn = (driver: Driver["Type"]): Effect.Effect<void> =>
  Effect.gen(function*() {
    if ((yield* driver.status) === "idle") return
    yield* Effect.ignore(driver.cancel(CancelCause.user, { keepInbox: true }))
    yield* Effect.ignore(Effect.timeout(Effect.interruptible(driver.whenIdle), CANCEL_GRACE))
  })

/**
 * `effect` with at most {@link CANCEL_GRACE} to finish, also where interruption is masked.
 *
 * @since 0.1.0
 * @category interruption
 */
export const withinGrace = (effect: Effect.Effect<void>): Effect.Effect<void> =>
  Effect.ignore(Effect.timeout(Effect.interruptible(effect), CANCEL_GRACE))

/**
 * Waits until every event is stored; fails with a readable refusal when the store rejected a write
 * (for one, another process wrote to the same session meanwhile).
 *
 * @since 0.1.0
 * @category saving
 */
export const saved = (log: SessionLog["Type"]): Effect.Effect<void, CliError> =>
  Effect.catchAll(log.flush, (error) =>
    Effect.flatMap(log.durableSeq, (durable) =>
      Effect.fail(
        new CliError({
          reason: `session ${log.sessionId}: not every event was saved (${error.message}); ` +
            `the stored log ends at seq ${durable} (see tiller log ${log.sessionId})`
        })
      )))
