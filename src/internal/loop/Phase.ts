/**
 * The driver's phase machine and the loop's opening and closing transactions (SPEC 3.2, 4.2, 4.8).
 * Every function here runs inside the caller's STM transaction, together with the log and inbox
 * changes it implies (D1).
 *
 * @since 0.1.0
 */
import { HashSet, Option, STM, TRef } from "effect"
import type { DriverEvent } from "../../domain/DriverEvent.js"
import type { InvalidEvent } from "../../domain/Errors.js"
import * as GrowOnly from "../../domain/GrowOnly.js"
import type { CancelCause, LlmFailure, TurnEndReason, UserMessage } from "../../domain/Values.js"
import { claimSTM } from "../state/InboxOps.js"
import type { SessionStateShape } from "../state/SessionState.js"
import { appendDrafts, publish } from "../state/SessionState.js"
import * as WakeMarks from "../state/WakeMarks.js"
import type { StopWatch } from "./StopWatch.js"

/**
 * The phase of a driver.
 *
 * @since 0.1.0
 * @category models
 */
export type Phase =
  | { readonly _tag: "Idle"; readonly lastTurn: number }
  | {
    readonly _tag: "Running"
    readonly turn: number
    readonly step: number
    readonly cause: Option.Option<CancelCause>
    readonly dropContexts: boolean
    /** The claimed initial batch until the driver fiber picks the turn up. */
    readonly pending: ReadonlyArray<UserMessage> | undefined
  }
  | { readonly _tag: "Maintenance"; readonly lastTurn: number; readonly cause: Option.Option<CancelCause> }

/**
 * The transactional state of a driver over its session.
 *
 * @since 0.1.0
 * @category models
 */
export interface DriverState {
  readonly session: SessionStateShape
  /** The phase; changed only by the transactions of this module and the driver's operations. */
  readonly phase: TRef.TRef<Phase>
  readonly disposing: TRef.TRef<boolean>
  /** Stop notifications for abortable work, when the driver runs their watcher. */
  readonly stopWatch?: StopWatch
}

/**
 * The phase, read in the caller's transaction.
 *
 * @since 0.1.0
 * @category getters
 */
export const getPhase = (ds: DriverState): STM.STM<Phase> => TRef.get(ds.phase)

/**
 * Sets the phase.
 *
 * @since 0.1.0
 * @category transactions
 */
export const setPhase = (ds: DriverState, phase: Phase): STM.STM<void> => TRef.set(ds.phase, phase)

/**
 * Sets the step number of a running phase.
 *
 * @since 0.1.0
 * @category transactions
 */
export const setStep = (
  ds: DriverState,
  phase: Extract<Phase, { readonly _tag: "Running" }>,
  step: number
): STM.STM<void> => TRef.set(ds.phase, { ...phase, step })

/**
 * The cause recorded for the current activity, if any.
 *
 * @since 0.1.0
 * @category getters
 */
export const causeOf = (phase: Phase): Option.Option<CancelCause> => phase._tag === "Idle" ? Option.none() : phase.cause

/**
 * The number of the last turn opened.
 *
 * @since 0.1.0
 * @category getters
 */
export const lastTurnOf = (phase: Phase): number => phase._tag === "Running" ? phase.turn : phase.lastTurn

const pendingIds = (state: SessionStateShape) => STM.map(TRef.get(state.log), ({ fold }) => fold.inbox)

/**
 * Whether waking work is pending: a `next-turn` item, or an unclaimed running steer (SPEC 4.8).
 *
 * @since 0.1.0
 * @category getters
 */
export const wakingPending = (state: SessionStateShape): STM.STM<boolean> =>
  STM.gen(function*() {
    const inbox = yield* pendingIds(state)
    if (inbox.nextTurn.length > 0) return true
    const { wakingSteers } = yield* TRef.get(state.marks)
    if (HashSet.size(wakingSteers) === 0) return false
    for (const m of GrowOnly.toArray(inbox.nextStep)) if (HashSet.has(wakingSteers, m.id)) return true
    return false
  })

/**
 * Whether some latched delivery is still pending in either list (SPEC 7.6).
 *
 * @since 0.1.0
 * @category getters
 */
export const latchedPending = (state: SessionStateShape): STM.STM<boolean> =>
  STM.gen(function*() {
    const { latched } = yield* TRef.get(state.marks)
    if (HashSet.size(latched) === 0) return false
    const inbox = yield* pendingIds(state)
    for (const list of [inbox.nextTurn, inbox.nextStep]) {
      for (const m of GrowOnly.toArray(list)) if (HashSet.has(latched, m.id)) return true
    }
    return false
  })

/**
 * TX-OPEN(n): `turn/start`, the initial claim, phase Running with the batch waiting for the
 * driver fiber. `fromIdle` publishes `status running` before the `claimed` notifications.
 *
 * @since 0.1.0
 * @category transactions
 */
export const openTurn = (ds: DriverState, turn: number, fromIdle: boolean): STM.STM<void, InvalidEvent> =>
  STM.gen(function*() {
    if (fromIdle) yield* publish(ds.session, [{ type: "agent/status", status: "running" }])
    yield* appendDrafts(ds.session, [{ type: "turn/start", data: { turn } }], true)
    const batch = yield* claimSTM(ds.session, turn, true)
    yield* WakeMarks.clearLatched(ds.session.marks)
    yield* setPhase(ds, {
      _tag: "Running",
      turn,
      step: 0,
      cause: Option.none(),
      dropContexts: false,
      pending: batch
    })
  })

/**
 * The live error published when a turn ends `error` (SPEC 3.10 case 1) or for defects of an
 * aborted turn (case 2).
 *
 * @since 0.1.0
 * @category models
 */
export interface TurnErrorReport {
  readonly step: number
  /** The original error, published when the turn ends `error`. */
  readonly error?: unknown
  /** Defects of loop components, published when the turn ends `aborted`. */
  readonly defects?: ReadonlyArray<unknown>
}

/**
 * TX-CLOSE(n, r): `turn/end` with the recorded cause taking precedence, then continue the chain,
 * replay a latch, or go Idle — all in this transaction. Returns the reason written.
 *
 * @since 0.1.0
 * @category transactions
 */
export const closeTurn = (
  ds: DriverState,
  turn: number,
  reason: TurnEndReason,
  report?: TurnErrorReport
): STM.STM<TurnEndReason, InvalidEvent> =>
  STM.gen(function*() {
    const phase = yield* getPhase(ds)
    const cause = causeOf(phase)
    const written: TurnEndReason = Option.isSome(cause) ? { kind: "aborted", reason: cause.value } : reason
    yield* appendDrafts(ds.session, [{ type: "turn/end", data: { turn, reason: written } }], true)
    if (report !== undefined) {
      // Case 1: one error for an `error` ending; case 2: one per defect of an aborted turn.
      const errors = written.kind === "error" ? [report.error] : written.kind === "aborted" ? report.defects ?? [] : []
      yield* publish(
        ds.session,
        errors.map((error): DriverEvent => ({ type: "agent/error", turn, step: report.step, error }))
      )
    }
    const disposing = yield* TRef.get(ds.disposing)
    const next = disposing
      ? false
      : written.kind === "aborted"
      ? yield* latchedPending(ds.session)
      : written.kind === "interrupted"
      ? false
      : yield* wakingPending(ds.session)
    if (next) {
      yield* openTurn(ds, turn + 1, false)
    } else {
      yield* setPhase(ds, { _tag: "Idle", lastTurn: turn })
      yield* publish(ds.session, [{ type: "agent/status", status: "idle" }])
    }
    return written
  })

/**
 * The turn-end reason of a failure.
 *
 * @since 0.1.0
 * @category constructors
 */
export const errorReason = (failure: LlmFailure): TurnEndReason => ({ kind: "error", error: failure })
