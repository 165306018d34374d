/**
 * The loop's writes: each first reads the cancel cause and, with one recorded, writes nothing and
 * yields a sentinel, so no record of a window is written after its cause (SPEC 7.2).
 *
 * @since 0.1.0
 */
import type { Effect } from "effect"
import { Option, STM, TRef } from "effect"
import type { SessionEvent } from "../../domain/Event.js"
import { appendDrafts, commit, commitOrDie } from "../state/SessionState.js"
import type { Draft } from "../state/SessionState.js"
import type { LoopContext } from "./LoopContext.js"
import { causeOf, getPhase } from "./Phase.js"

/**
 * Sentinel: a loop transaction found a cause recorded and wrote nothing.
 *
 * @since 0.1.0
 * @category transactions
 */
export const CAUSE: unique symbol = Symbol.for("tiller/internal/LoopTransaction/cause")

/**
 * Commits a loop transaction that first reads the cause: with a cause recorded it writes nothing
 * and yields the sentinel. An `InvalidEvent` from the log is returned as a failure value.
 *
 * @since 0.1.0
 * @category transactions
 */
export const loopTx = <A, E>(ctx: LoopContext, body: STM.STM<A, E>): Effect.Effect<A | typeof CAUSE, E> =>
  commit(ctx.ds.session, causeFirst(ctx, body))

// `body`, unless a cause is recorded (then the sentinel, and nothing written).
const causeFirst = <A, E>(ctx: LoopContext, body: STM.STM<A, E>): STM.STM<A | typeof CAUSE, E> =>
  STM.flatMap(
    getPhase(ctx.ds),
    (phase): STM.STM<A | typeof CAUSE, E> => Option.isSome(causeOf(phase)) ? STM.succeed(CAUSE) : body
  )

/**
 * A loop append of tiller's own drafts ({@link loopTx} of `appendDrafts`): the cause read first
 * (with one recorded, nothing is written and the sentinel is returned), then the append; an
 * `InvalidEvent` is a defect. `drafts` receives the first new seq.
 *
 * @since 0.1.0
 * @category transactions
 */
export const loopAppendOrDie = (
  ctx: LoopContext,
  drafts: (length: number) => ReadonlyArray<Draft>
): Effect.Effect<ReadonlyArray<SessionEvent> | typeof CAUSE> => {
  const session = ctx.ds.session
  return commitOrDie(
    session,
    causeFirst(
      ctx,
      STM.flatMap(TRef.get(session.log), ({ events }) => appendDrafts(session, drafts(events.length), true))
    )
  )
}

/**
 * Whether a loop transaction was skipped because a cause is recorded.
 *
 * @since 0.1.0
 * @category transactions
 */
export const isCause = (value: unknown): value is typeof CAUSE => value === CAUSE
