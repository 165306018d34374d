/**
 * One turn of the loop (SPEC 4.3): the pre-step decision at every boundary, the step transaction,
 * the step itself, turn-stopping listeners and the boundary claim, ending in TX-CLOSE.
 *
 * The `loop/` room: the agent loop that the driver runs. A turn (this module) repeats steps
 * (`Step`: request, streamed attempt, retries) and their tool batches (`ToolBatch`, `SettledBodies`,
 * `ToolOutcome`, `ToolRegistry`), every write through `LoopTransaction`; the driver's phase machine (`Phase`),
 * cooperative cancellation (`Activity`, `StopWatch`), hooks and the pre-step waterfall
 * (`HooksRunner`, `Waterfall`), and what one step hands back (`StepResult`) live beside it.
 *
 * @since 0.1.0
 */
import { Effect, Either, Exit, Option, STM, TRef } from "effect"
import { InvalidEvent, PreStepFailed, PreStepRejected } from "../../domain/Errors.js"
import * as GrowOnly from "../../domain/GrowOnly.js"
import { REPAIR_ID_PREFIX, RESERVED_ID_REASON } from "../../domain/Ids.js"
import type { KnownIds } from "../../domain/KnownIds.js"
import { stateOf } from "../../domain/KnownIds.js"
import { validateUserMessage } from "../../domain/Message.js"
import { repairClosers } from "../../domain/Repair.js"
import { enteredByDefault } from "../../domain/Seams.js"
import type { TurnEndReason, UserMessage } from "../../domain/Values.js"
import { claimSTM } from "../state/InboxOps.js"
import { appendDrafts, commit, commitOrDie } from "../state/SessionState.js"
import type { Draft } from "../state/SessionState.js"
import {
  abortable,
  abortableUnless,
  causeRecorded,
  currentDefectSink,
  currentStopping,
  defectsOf,
  quietDone
} from "./Activity.js"
import { originalError, ownFailure, toLlmFailure } from "./Failure.js"
import type { LoopContext } from "./LoopContext.js"
import type { Phase, TurnErrorReport } from "./Phase.js"
import { causeOf, closeTurn, errorReason, getPhase, setStep } from "./Phase.js"
import type { StepMessages } from "./Step.js"
import { runStep, stepMessages } from "./Step.js"
import { stepLimitFailure } from "./StepLimit.js"

const completed: TurnEndReason = { kind: "completed" }

type StepDecision =
  | { readonly _tag: "Open" }
  | { readonly _tag: "Close"; readonly reason: TurnEndReason; readonly report?: TurnErrorReport }

const OPEN: StepDecision = { _tag: "Open" }

/**
 * Runs turn `turn`, whose `turn/start` and initial claim (`batch`) are already committed, until
 * its `turn/end` is written.
 *
 * @since 0.1.0
 * @category loop
 */
export const runTurn = (
  ctx: LoopContext,
  turn: number,
  initialBatch: ReadonlyArray<UserMessage>
): Effect.Effect<void> =>
  Effect.gen(function*() {
    const { ds, sessionId } = ctx
    const session = ds.session
    const close = (reason: TurnEndReason, report?: TurnErrorReport) =>
      commitOrDie(session, closeTurn(ds, turn, reason, report)).pipe(Effect.asVoid)
    let batch = initialBatch
    let boundary: "initial" | "later" = "initial"
    let lastStop: "completed" | "max-tokens" | undefined
    let maxTokensSeen = false
    let k = 0
    const natural = (): TurnEndReason => maxTokensSeen ? { kind: "max-tokens" } : completed
    // TX-BOUNDARY: the turn closes (a recorded cause, or a stop with nothing steered), or the next
    // batch is claimed (empty when nothing is pending); `undefined` once closed.
    const boundaryTx = (stop: typeof lastStop) =>
      STM.flatMap(getPhase(ds), (phase) =>
        STM.flatMap(
          TRef.get(session.log),
          ({ fold }): STM.STM<ReadonlyArray<UserMessage> | undefined, InvalidEvent> => {
            if (Option.isSome(causeOf(phase))) return STM.as(closeTurn(ds, turn, completed), undefined)
            if (stop !== undefined && fold.inbox.nextStep.length === 0) {
              return STM.as(closeTurn(ds, turn, natural()), undefined)
            }
            return fold.inbox.nextStep.length > 0 ? claimSTM(session, turn, false) : STM.succeed([])
          }
        ))

    while (true) {
      // 1. The pre-step decision over an immutable copy of the claimed batch.
      // Listener defects that the waterfall turns into PreStepFailed are reported here (3.10 case 2).
      const listenerDefects: Array<unknown> = []
      const decided = ctx.preStep.isQuiet()
        ? quietDone(enteredByDefault(batch))
        : yield* abortable(
          ds,
          Effect.locally(
            ctx.preStep.run({ sessionId, turn, step: k + 1, boundary, messages: batch }),
            currentDefectSink,
            listenerDefects
          )
        )
      const preStepDefects = () => [...defectsOf(decided.exit), ...listenerDefects]
      if (decided._tag === "Aborted") {
        return yield* close(completed, { step: k + 1, defects: preStepDefects() })
      }
      if (Exit.isFailure(decided.exit)) {
        const error = originalError(decided.exit)
        if (error instanceof PreStepRejected) {
          return yield* close(
            error.reason === undefined ? { kind: "blocked" } : { kind: "blocked", message: error.reason }
          )
        }
        const original = error instanceof PreStepFailed ? error.cause : error
        // With a cause recorded meanwhile the turn ends aborted: only the listeners' defects are published.
        return yield* close(errorReason(toLlmFailure(original)), {
          step: k + 1,
          error: original,
          defects: preStepDefects()
        })
      }
      const entered = decided.exit.value
      // 2. Nothing to enter.
      if (entered.length === 0 && boundary === "initial") return yield* close(completed)
      if (entered.length === 0 && lastStop !== undefined) return yield* close(natural())
      // 3. TX-STEP: step/start and the entered messages, or no step at all.
      const step = k + 1
      const claimedIds = new Set(batch.map((m) => m.id))
      // An addition is a caller's message: its id may not be a reserved one (SPEC 3.9).
      const checked = entered.map((m) => {
        const valid = validateUserMessage(m)
        return Either.isRight(valid) && !claimedIds.has(valid.right.id) && valid.right.id.startsWith(REPAIR_ID_PREFIX)
          ? Either.left(RESERVED_ID_REASON)
          : valid
      })
      const messages = checked.flatMap((c) => Either.isRight(c) ? [c.right] : [])
      // What TX-STEP does on the phase and fold it reads: close the turn, or open the step.
      const decide = (phase: Phase, known: KnownIds): StepDecision => {
        if (Option.isSome(causeOf(phase))) return { _tag: "Close", reason: completed }
        const limited = stepLimitFailure(step, ctx.defaults.maxSteps)
        if (limited !== undefined) {
          return { _tag: "Close", reason: errorReason(limited), report: { step, error: limited } }
        }
        const invalid = checked.find(Either.isLeft)
        if (invalid !== undefined) {
          const failure = ownFailure("INVALID_MESSAGE", `pre-step entered an invalid message: ${invalid.left}`)
          return { _tag: "Close", reason: errorReason(failure), report: { step, error: failure } }
        }
        const seen = new Set<string>()
        for (const m of messages) {
          const state = stateOf(known, m.id)
          const reused = seen.has(m.id) || (state !== undefined && !claimedIds.has(m.id))
          seen.add(m.id)
          if (reused) {
            const failure = ownFailure(
              "DUPLICATE_MESSAGE",
              `pre-step entered message ${m.id}, which is already known (${state ?? "pending"})`
            )
            return { _tag: "Close", reason: errorReason(failure), report: { step, error: failure } }
          }
        }
        return OPEN
      }
      const drafts = (): ReadonlyArray<Draft> => [
        { type: "step/start", data: { turn, step } },
        ...messages.map((m) => ({ type: "user/message", data: m, surfaceOp: "append" as const }))
      ]
      // TX-STEP: close the turn, or open the step (its step/start, the entered messages, the step
      // number) and read the messages its first request sends, should nothing run before it.
      const opened = yield* commitOrDie(
        session,
        STM.flatMap(getPhase(ds), (phase): STM.STM<StepMessages | undefined, InvalidEvent> =>
          STM.flatMap(TRef.get(session.log), ({ fold }) => {
            const decision = decide(phase, fold.known)
            if (decision._tag === "Close") {
              return STM.as(closeTurn(ds, turn, decision.reason, decision.report), undefined)
            }
            const appended = appendDrafts(session, drafts(), true)
            // Appending leaves the phase as read above.
            const started = phase._tag === "Running" ? STM.zipRight(appended, setStep(ds, phase, step)) : appended
            return STM.zipRight(started, STM.map(TRef.get(session.log), stepMessages))
          }))
      )
      if (opened === undefined) {
        return
      }
      k = step
      // 4. The step, then its step/end (also after an abort or a failure).
      const result = yield* runStep(ctx, turn, step, opened)
      const endDrafts = (): ReadonlyArray<Draft> => [{ type: "step/end", data: { turn, step } }]
      const stepEnd = () =>
        appendDrafts(session, endDrafts(), true)
      let next: ReadonlyArray<UserMessage> | undefined
      if (result._tag === "Continue") {
        // Nothing runs between step/end and the boundary of a step that continues: one transaction.
        lastStop = undefined
        next = yield* commitOrDie(session, STM.zipRight(stepEnd(), boundaryTx(undefined)))
      } else {
        yield* commitOrDie(session, stepEnd())
        if (result._tag === "Aborted") {
          return yield* close(completed, { step, defects: result.defects })
        }
        if (result._tag === "Failed") {
          return yield* close(errorReason(result.failure), { step, error: result.error, defects: result.defects ?? [] })
        }
        lastStop = result._tag === "MaxTokens" ? "max-tokens" : "completed"
        maxTokensSeen = maxTokensSeen || result._tag === "MaxTokens"
        // 6. Turn-stopping listeners: the turn would end here.
        const quiet = yield* commit(
          session,
          STM.map(
            STM.zip(TRef.get(session.log), getPhase(ds)),
            ([{ fold }, phase]) =>
              fold.inbox.nextStep.length === 0 && Option.isNone(causeOf(phase))
          )
        )
        if (quiet) {
          const stopping = yield* abortableUnless(
            ds,
            ctx.hooks.isQuiet("turnStopping"),
            Effect.locally(ctx.hooks.turnStopping({ sessionId, turn, step }), currentStopping, causeRecorded(ds))
          )
          if (stopping._tag === "Aborted") {
            return yield* close(completed, { step, defects: defectsOf(stopping.exit) })
          }
          if (Exit.isFailure(stopping.exit)) {
            const error = originalError(stopping.exit)
            return yield* close(errorReason(toLlmFailure(error)), { step, error, defects: defectsOf(stopping.exit) })
          }
        }
        // 7. TX-BOUNDARY: close, or claim the next batch.
        next = yield* commitOrDie(session, boundaryTx(lastStop))
      }
      if (next === undefined) {
        return
      }
      batch = next
      boundary = "later"
    }
  })

/**
 * Runs turn `turn` ({@link runTurn}); a defect that escapes it (a value outside its type from a
 * plain-JavaScript listener, say) still closes the turn instead of leaving the driver running: the
 * open step is closed as repair would close it (SPEC 6.5: results for unanswered calls, `step/end`),
 * then TX-CLOSE with the defect as the failure (SPEC 4.3 "Failure inside the turn").
 *
 * @since 0.1.0
 * @category loop
 */
export const runTurnClosing = (
  ctx: LoopContext,
  turn: number,
  initialBatch: ReadonlyArray<UserMessage>
): Effect.Effect<void> =>
  Effect.catchAllDefect(runTurn(ctx, turn, initialBatch), (defect) => {
    const { ds } = ctx
    const session = ds.session
    return commitOrDie(
      session,
      STM.flatMap(getPhase(ds), (phase): STM.STM<unknown, InvalidEvent> => {
        // Closed already (the defect came after its turn/end), or not this turn's phase: nothing to do.
        if (phase._tag !== "Running" || phase.turn !== turn) return STM.void
        return STM.flatMap(TRef.get(session.log), ({ events }) => {
          const closers = repairClosers(GrowOnly.toArray(events))
          if (closers.length === 0) return STM.void
          const drafts = closers.slice(0, -1).map((event): Draft => ({
            type: event.type,
            data: event.data,
            time: event.time,
            ...("surfaceOp" in event && event.surfaceOp !== undefined ? { surfaceOp: event.surfaceOp } : {}),
            ...("sourceEventSeqs" in event && event.sourceEventSeqs !== undefined
              ? { sourceEventSeqs: event.sourceEventSeqs }
              : {})
          }))
          return STM.zipRight(
            appendDrafts(session, drafts, true),
            closeTurn(ds, turn, errorReason(toLlmFailure(defect)), {
              step: phase.step,
              error: defect,
              defects: [defect]
            })
          )
        })
      })
    )
  })
