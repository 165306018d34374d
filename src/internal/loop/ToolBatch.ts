/**
 * The tool phase of a step (SPEC 4.6): calls start sequentially in model order, parallel calls
 * overlap in a rolling pool, results commit strictly in model order with their contexts, and a
 * cancel or an internal failure closes every call with a recorded result (D7, D8).
 *
 * @since 0.1.0
 */
import { Cause, Effect, Either, Exit, Fiber, Option, STM, TRef } from "effect"
import type { DriverEvent } from "../../domain/DriverEvent.js"
import type { MessageId } from "../../domain/Ids.js"
import { stateOf } from "../../domain/KnownIds.js"
import { acceptCallerMessage } from "../../domain/Message.js"
import type { ToolCallInfo } from "../../domain/Seams.js"
import type { NormalizedToolOutput, ToolContext, ToolOutput } from "../../domain/Tool.js"
import type { ToolCallBlock, UserMessage } from "../../domain/Values.js"
import { appendDrafts, commit, commitOrDie, publish } from "../state/SessionState.js"
import type { Draft } from "../state/SessionState.js"
import {
  abortable,
  awaitCause,
  causeRecorded,
  checkpoint,
  checkpointNow,
  defectsOf,
  quietDone,
  stopReported
} from "./Activity.js"
import { originalError } from "./Failure.js"
import { hookDefaults } from "./HooksRunner.js"
import type { LoopContext } from "./LoopContext.js"
import { isCause, loopAppendOrDie } from "./LoopTransaction.js"
import { getPhase } from "./Phase.js"
import * as SettledBodies from "./SettledBodies.js"
import type { StepResult } from "./StepResult.js"
import {
  decodeArguments,
  normalizedOutputProblem,
  normalizeToolOutput,
  outcomeError,
  outcomeOutput,
  runsToolPost,
  ToolOutcome,
  toolOutputProblem,
  toolResultMessage
} from "./ToolOutcome.js"

interface CallState {
  readonly block: ToolCallBlock
  readonly index: number
  callSeq: number | undefined
  params: unknown
  outcome: ToolOutcome | undefined
  fiber: Fiber.RuntimeFiber<ToolOutput | string, unknown> | undefined
  /** The body's exit, once its fiber is done (handed over by the fiber's observer). */
  exit: Exit.Exit<ToolOutput | string, unknown> | undefined
  /** Whether a cause was recorded when the body ended (it is then aborted, SPEC 4.6). */
  endedAfterCause: boolean
  readonly deferred: Array<UserMessage>
  committed: boolean
  mode: "parallel" | "exclusive" | undefined
}

/** A failure of the scheduling machinery itself (D7). */
class SchedulerFailure {
  /** `error` is the original failure; `defects` those of the failed component (published if the turn ends aborted). */
  constructor(readonly error: unknown, readonly defects: ReadonlyArray<unknown>) {}
}

/**
 * Runs the tool calls of a step's assistant message and returns how the step ends.
 *
 * @since 0.1.0
 * @category loop
 */
export const runTools = (
  ctx: LoopContext,
  turn: number,
  step: number,
  blocks: ReadonlyArray<ToolCallBlock>
): Effect.Effect<StepResult> =>
  Effect.gen(function*() {
    const { ds, sessionId } = ctx
    const session = ds.session
    const calls: Array<CallState> = blocks.map((block, index) => ({
      block,
      index,
      callSeq: undefined,
      params: undefined,
      outcome: undefined,
      fiber: undefined,
      exit: undefined,
      endedAfterCause: false,
      deferred: [],
      committed: false,
      mode: undefined
    }))
    // The calls whose bodies ended, and which of them a forked body's log would show by now.
    const settled = SettledBodies.make()
    const defects: Array<unknown> = []
    let concluded = false
    let nextStart = 0
    let nextCommit = 0
    let stopped = false // a cause is recorded: no further call starts

    const infoOf = (call: CallState): ToolCallInfo => ({
      sessionId,
      turn,
      step,
      callId: call.block.id,
      name: call.block.name,
      arguments: call.block.arguments,
      params: call.params
    })

    const resultDraft = (call: CallState, outcome: ToolOutcome, output: NormalizedToolOutput): Draft => {
      const error = outcomeError(outcome)
      const message = toolResultMessage(crypto.randomUUID() as MessageId, call.block.id, output)
      return {
        type: "tool/result",
        data: {
          turn,
          step,
          message,
          ...(error !== undefined ? { error } : {}),
          ...(output.meta !== undefined ? { meta: output.meta } : {})
        },
        surfaceOp: "append",
        ...(call.callSeq !== undefined ? { sourceEventSeqs: [call.callSeq] } : {})
      }
    }

    const callDraft = (call: CallState): Draft => ({
      type: "tool/call",
      data: { turn, step, callId: call.block.id, name: call.block.name, arguments: call.block.arguments }
    })

    // ⟨TC TR⟩ for a call that never started.
    const writePair = (call: CallState, outcome: ToolOutcome) =>
      commit(
        session,
        STM.gen(function*() {
          const [tc] = yield* appendDrafts(session, [callDraft(call)], true)
          call.callSeq = tc!.seq
          yield* appendDrafts(session, [resultDraft(call, outcome, outcomeOutput(ref(call), outcome))], true)
        })
      ).pipe(Effect.orDie, Effect.tap(() => Effect.sync(() => (call.committed = true))))

    // START(c): ⟨TC⟩, checkpoint, lookup, arguments, ToolPre, then fork the body.
    const start = (call: CallState): Effect.Effect<boolean> =>
      Effect.gen(function*() {
        const logged = yield* loopAppendOrDie(ctx, () => [callDraft(call)])
        if (isCause(logged)) return false
        call.callSeq = logged[0]!.seq
        // The checkpoint covers this call's own tool/call (D13); later caller events are acknowledged by their callers.
        // Whether anything ran since the tool/call's transaction read the cause (a wait, a listener).
        const atOnce = checkpointNow(ds, call.callSeq)
        let waited = atOnce === undefined
        const reached = atOnce ?? (yield* checkpoint(ds, call.callSeq))
        if (reached._tag === "Aborted") {
          call.outcome = ToolOutcome.AbortedBeforeDispatch()
          return true
        }
        if (Exit.isFailure(reached.exit)) return yield* Effect.interrupt
        const tool = ctx.tools.lookup(call.block.name)
        if (tool === undefined) {
          call.outcome = ToolOutcome.UnknownTool()
          return true
        }
        const decoded = decodeArguments(tool, call.block.arguments)
        if (Either.isLeft(decoded)) {
          call.outcome = ToolOutcome.InvalidArguments({ detail: decoded.left })
          return true
        }
        call.params = decoded.right
        if (!ctx.hooks.isQuiet("toolPre")) waited = true
        const pre = ctx.hooks.isQuiet("toolPre")
          ? quietDone(hookDefaults.toolPre)
          : yield* abortable(ds, ctx.hooks.toolPre(infoOf(call)))
        if (pre._tag === "Aborted") {
          defects.push(...defectsOf(pre.exit))
          call.outcome = ToolOutcome.AbortedBeforeDispatch()
          return true
        }
        if (Exit.isFailure(pre.exit)) {
          defects.push(...defectsOf(pre.exit))
          call.outcome = ToolOutcome.PreHookFailed({ error: originalError(pre.exit) })
          return true
        }
        if (pre.exit.value._tag === "Deny") {
          call.outcome = ToolOutcome.Denied({ reason: pre.exit.value.reason })
          return true
        }
        if (pre.exit.value.params !== undefined) {
          // Arguments replaced by a listener are decoded as the model's were.
          let raw: string | undefined
          try {
            raw = JSON.stringify(pre.exit.value.params)
          } catch {
            raw = undefined
          }
          const replaced = raw === undefined ? Either.left("not JSON") : decodeArguments(tool, raw)
          if (Either.isLeft(replaced)) {
            call.outcome = ToolOutcome.InvalidArguments({
              detail: `arguments replaced by a ToolPre listener: ${replaced.left}`
            })
            return true
          }
          call.params = replaced.right
        }
        // A cause recorded while something ran since (the transaction above read none): the body
        // never starts.
        if (waited && (yield* causeRecorded(ds))) {
          call.outcome = ToolOutcome.AbortedBeforeDispatch()
          return true
        }
        const context: ToolContext = {
          sessionId,
          turn,
          step,
          callId: call.block.id,
          deferContext: (m) => Effect.sync(() => void call.deferred.push(m))
        }
        // The body starts at once, on this stack, and runs until it first suspends: a synchronous
        // body has ended when `runBody` returns, with no scheduler round trip before its exit is
        // seen. Its fiber is no child of this one: it is in the driver's FiberSet while it runs.
        // Whether a cause was recorded when the body ended is read by the body's fiber as it ends.
        const fiber = ctx.runBody(
          Effect.onExit(Effect.suspend(() => tool.execute(call.params, context)), () =>
            Effect.map(causeRecorded(ds), (recorded) => {
              call.endedAfterCause = recorded
            }))
        )
        call.fiber = fiber
        // Whether the body ended on this stack, before `runBody` returned.
        const endedAtOnce = fiber.unsafePoll() !== null
        // An observer, called once the body's exit is set (at once if it already is): no effect
        // wrapped around the body for it.
        fiber.addObserver((exit) => {
          call.exit = exit
          settled.ended(call.index, endedAtOnce)
        })
        return true
      })

    // Classify a settled body.
    const settle = (call: CallState, exit: Exit.Exit<ToolOutput | string, unknown>, abortedNow: boolean) => {
      if (Exit.isSuccess(exit)) {
        const problem = toolOutputProblem(exit.value)
        call.outcome = abortedNow
          ? ToolOutcome.Aborted()
          : problem !== undefined
          ? ToolOutcome.InvalidOutput({ detail: problem })
          : ToolOutcome.Succeeded({ output: normalizeToolOutput(exit.value) })
      } else if (Exit.isInterrupted(exit) && defectsOf(exit).length === 0 && Option.isNone(failureOf(exit))) {
        call.outcome = ToolOutcome.Aborted()
      } else {
        const failure = failureOf(exit)
        call.outcome = Option.isSome(failure)
          ? ToolOutcome.Failed({ error: failure.value })
          : ToolOutcome.Died({ defect: defectsOf(exit)[0] })
      }
      call.fiber = undefined
    }

    // COMMIT(c): ToolPost, then ⟨TR INS? CAN?⟩ in one transaction.
    const commitCall = (call: CallState): Effect.Effect<void, SchedulerFailure> => {
      const outcome = call.outcome!
      const output = outcomeOutput(ref(call), outcome)
      // Without a ToolPost listener the output stands as it is.
      if (!runsToolPost(outcome) || ctx.hooks.isQuiet("toolPost")) return commitOutput(call, outcome, output)
      return Effect.flatMap(
        Effect.flatMap(causeRecorded(ds), (abortedNow) =>
          Effect.exit(ctx.hooks.toolPost({ ...infoOf(call), output, aborted: abortedNow }))),
        (posted) => {
          if (Exit.isFailure(posted)) {
            return Effect.fail(new SchedulerFailure(originalError(posted), defectsOf(posted)))
          }
          // Only a replaced output needs checking: the one handed in is valid (checked and normalized).
          const problem = posted.value === output ? undefined : normalizedOutputProblem(posted.value)
          if (problem === undefined) {
            return commitOutput(call, outcome, posted.value)
          }
          const invalid = ToolOutcome.InvalidOutput({ detail: problem })
          return commitOutput(call, invalid, outcomeOutput(ref(call), invalid))
        }
      )
    }

    // ⟨TR INS? CAN?⟩ of the final outcome and output.
    const commitOutput = (
      call: CallState,
      postedOutcome: ToolOutcome,
      postedOutput: NormalizedToolOutput
    ): Effect.Effect<void> => {
      let outcome = postedOutcome
      let output = postedOutput
      const contexts: Array<UserMessage> = []
      let invalidContext: string | undefined
      for (const m of [...call.deferred, ...output.additionalContexts]) {
        const accepted = acceptCallerMessage(m)
        if (Either.isLeft(accepted)) {
          invalidContext = accepted.left.reason
          break
        }
        contexts.push(accepted.right)
      }
      if (invalidContext !== undefined) {
        outcome = ToolOutcome.InvalidOutput({ detail: `additional context: ${invalidContext}` })
        output = outcomeOutput(ref(call), outcome)
        contexts.length = 0
      }
      const finalOutcome = outcome
      const finalOutput = output
      // COMMIT step 4: the final output (after ToolPost) decides, whatever the body's own outcome.
      const conclude = (use: { readonly output: NormalizedToolOutput }) => {
        if (use.output.concludesTurn && !use.output.isError) {
          concluded = true
        }
      }
      // Without contexts the result is the whole change: one append.
      if (contexts.length === 0) {
        return Effect.map(
          commitOrDie(session, appendDrafts(session, [resultDraft(call, finalOutcome, finalOutput)], true)),
          () => {
            conclude({ output: finalOutput })
            call.committed = true
          }
        )
      }
      return Effect.map(
        commitOrDie(
          session,
          STM.gen(function*() {
            let use = { outcome: finalOutcome, output: finalOutput, contexts: contexts as ReadonlyArray<UserMessage> }
            const duplicate = yield* freshness(contexts)
            if (duplicate !== undefined) {
              const invalid = ToolOutcome.InvalidOutput({ detail: duplicate })
              use = { outcome: invalid, output: outcomeOutput(ref(call), invalid), contexts: [] }
            }
            yield* appendDrafts(session, [resultDraft(call, use.outcome, use.output)], true)
            if (use.contexts.length > 0) {
              const { fold } = yield* TRef.get(session.log)
              const s = fold.inbox.nextStep.length
              yield* appendDrafts(session, [{
                type: "agent/inbox/spliced",
                data: { target: "next-step", start: s, inserted: use.contexts }
              }], true)
              const notifications: Array<DriverEvent> = use.contexts.map((message) => ({
                type: "agent/inbox/inserted",
                message
              }))
              const phase = yield* getPhase(ds)
              if (phase._tag === "Running" && phase.dropContexts) {
                yield* appendDrafts(session, [{
                  type: "agent/inbox/spliced",
                  data: {
                    target: "next-step",
                    start: s,
                    removedCount: use.contexts.length,
                    inserted: [],
                    outcome: "canceled"
                  }
                }], true)
                for (const message of use.contexts) {
                  notifications.push({ type: "agent/inbox/discarded", message })
                }
              }
              yield* publish(session, notifications)
            }
            conclude(use)
          })
        ),
        () => {
          call.committed = true
        }
      )
    }

    const freshness = (contexts: ReadonlyArray<UserMessage>) =>
      STM.map(TRef.get(session.log), ({ fold }) => {
        const seen = new Set<string>()
        for (const m of contexts) {
          if (seen.has(m.id)) {
            return `context id ${m.id} repeated`
          }
          seen.add(m.id)
          const state = stateOf(fold.known, m.id)
          if (state !== undefined) {
            return `context id ${m.id} is already known (${state})`
          }
        }
        return undefined
      })

    const inFlight = () =>
      calls.filter((c) => c.fiber !== undefined)

    // Waits until a body has ended, a cause is recorded or the session is poisoned (its activity
    // stops: SPEC 6.3). Bodies started before it already ran until they first suspended.
    const nextSettled: Effect.Effect<"settled" | "cause" | "poisoned"> = Effect.suspend(() => {
      if (settled.pending()) return Effect.succeed("settled" as const)
      return Effect.flatMap(STM.commit(TRef.get(session.poisoned)), (poisoned) => {
        if (Option.isSome(poisoned)) return Effect.succeed("poisoned" as const)
        const watch = ds.stopWatch
        if (watch !== undefined && !watch.stopped) {
          return Effect.flatMap(settled.signalOrStop(watch), (woken) =>
            woken === "stop"
              ? Effect.flatMap(causeRecorded(ds), (cause) => cause ? Effect.succeed("cause" as const) : nextSettled)
              : nextSettled)
        }
        return Effect.flatMap(
          Effect.raceFirst(Effect.as(settled.signal, "settled" as const), Effect.as(awaitCause(ds), "cause" as const)),
          (woken) => woken === "cause" ? Effect.succeed("cause" as const) : nextSettled
        )
      })
    })

    // Classifies bodies that ended, oldest first, by their exit and whether a cause was recorded
    // when each ended.
    const take = (indexes: ReadonlyArray<number>) => {
      for (const index of indexes) {
        const call = calls[index]!
        if (call.fiber !== undefined && call.exit !== undefined) settle(call, call.exit, call.endedAfterCause)
      }
    }

    // Whether every started, uncommitted call in [from, to) is parallel (one open group).
    const groupIsParallel = (from: number, to: number) => {
      for (let i = from; i < to; i++) if (calls[i]!.mode !== "parallel") return false
      return true
    }

    const interruptRunning = Effect.suspend(() =>
      Effect.forEach(inFlight(), (call) =>
        Effect.flatMap(Fiber.interrupt(call.fiber!), (exit) =>
          Effect.sync(() => settle(call, exit, true))), {
        discard: true
      })
    )

    const commitReady = Effect.gen(function*() {
      while (nextCommit < calls.length && calls[nextCommit]!.outcome !== undefined) {
        yield* commitCall(calls[nextCommit]!)
        nextCommit++
      }
    })

    const schedule = Effect.gen(function*() {
      while (nextCommit < calls.length) {
        take(settled.takeVisible())
        if (calls[nextCommit]!.outcome !== undefined) {
          // Commits have priority; bodies that end meanwhile are looked at again before a START.
          yield* commitReady
          continue
        }
        // A stop the watcher reported starts no further call (a START's own transaction finds a
        // cause recorded since, and starts nothing either).
        if (!stopped && stopReported(ds)) {
          stopped = true
        }
        const groupOpen = nextStart < calls.length && !stopped
        if (groupOpen) {
          const call = calls[nextStart]!
          const mode = ctx.tools.modeOf(call.block.name) ?? "exclusive"
          const running = inFlight().length
          const pendingCommits = nextStart - nextCommit
          // A parallel call joins the current group while a slot is free; an exclusive call (and a
          // parallel call after an exclusive one) starts only when everything before it committed.
          const canStart = mode === "parallel"
            ? running < ctx.tools.maxParallelToolCalls &&
              (pendingCommits === 0 || groupIsParallel(nextCommit, nextStart))
            : pendingCommits === 0
          if (canStart) {
            call.mode = mode
            settled.noteSuspension()
            const began = yield* start(call)
            if (!began) {
              stopped = true
            } else nextStart++
            continue
          }
        }
        if (inFlight().length === 0) {
          if (stopped || nextStart >= calls.length) {
            break
          }
          continue
        }
        // Wait for a body to end, a cause or the poison.
        const woken = yield* nextSettled
        if (woken === "settled") {
          take(settled.takeAll())
        } else {
          // No further call starts; running bodies are interrupted (a poisoned session's commits
          // then stop the activity).
          stopped = true
          yield* interruptRunning
        }
      }
    })

    const run = yield* Effect.exit(schedule)
    if (Exit.isFailure(run)) {
      // D7: the machinery failed; close every call with a recorded result.
      const failure = Option.getOrUndefined(failureOf(run))
      const error = failure instanceof SchedulerFailure ? failure.error : originalError(run)
      // SPEC 3.10 case 2: a turn that ends aborted still publishes the component's defects.
      const defects = failure instanceof SchedulerFailure ? failure.defects : defectsOf(run)
      yield* interruptRunning
      for (const call of calls) {
        if (call.committed) {
          continue
        }
        const internal = ToolOutcome.InternalFailure()
        if (call.callSeq === undefined) {
          yield* writePair(call, internal)
        } else {
          yield* commit(
            session,
            appendDrafts(session, [resultDraft(call, internal, outcomeOutput(ref(call), internal))], true)
          ).pipe(
            Effect.orDie
          )
          call.committed = true
        }
      }
      return {
        _tag: "Failed",
        failure: { message: "tool call failed internally", code: "TOOL_INTERNAL_ERROR" },
        error,
        defects
      }
    }
    // Calls that never started get adjacent pairs, in model order.
    for (const call of calls) {
      if (!call.committed) {
        yield* writePair(call, ToolOutcome.AbortedBeforeDispatch())
      }
    }
    // With a cause recorded the turn closes aborted at its boundary either way; the defects of an
    // aborted batch are published with it (SPEC 3.10 case 2), which only `Aborted` carries.
    if (defects.length > 0 && (yield* causeRecorded(ds))) {
      return { _tag: "Aborted", defects }
    }
    return concluded ? { _tag: "Completed" } : { _tag: "Continue" }
  })

const ref = (call: CallState) => ({ callId: call.block.id, name: call.block.name })

const failureOf = (exit: Exit.Exit<unknown, unknown>): Option.Option<unknown> =>
  Exit.isFailure(exit) ? Cause.failureOption(exit.cause) : Option.none()
