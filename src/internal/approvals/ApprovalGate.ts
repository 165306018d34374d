/**
 * Durable approvals of an open session (SPEC 4.12): a tool call that needs a yes or no writes
 * `approval/request` and waits, inside its step, until an `approval/answer` for it is in the log;
 * an answer (from the API, the chat, or another process through the store's approval mailbox) is
 * validated against the log's fold and acknowledged once durable. A request the session stopped
 * on (its step closed by repair with `APPROVAL_INTERRUPTED`) stays pending: its answer runs or
 * refuses the call between turns, and the outcome reaches the model as a follow-up message.
 *
 * @since 0.1.0
 */
import { Cause, Duration, Effect, Either, Schedule, STM, TRef } from "effect"
import type { ApprovalQuestion, ApproveOptions, GivenAnswer, PendingApproval } from "../../domain/Approvals.js"
import { answerAfter, describeAnswer, foldApprovals } from "../../domain/Approvals.js"
import type { AgentDisposed, PersistenceError } from "../../domain/Errors.js"
import { ApprovalNotPending } from "../../domain/Errors.js"
import * as GrowOnly from "../../domain/GrowOnly.js"
import { snapshotJson } from "../../domain/Json.js"
import { newUserMessage } from "../../domain/Message.js"
import type { UserMessage } from "../../domain/Values.js"
import { decodeArguments, normalizeToolOutput, toolFailureText } from "../loop/ToolOutcome.js"
import type { ToolRegistryShape } from "../loop/ToolRegistry.js"
import type { SessionStateShape } from "../state/SessionState.js"
import { appendDrafts, commitAcknowledged, guardWritable } from "../state/SessionState.js"

/** How often the store's approval mailbox is read while a request waits. */
const MAILBOX_POLL = Duration.millis(250)

const eventsOf = (state: SessionStateShape) => STM.map(TRef.get(state.log), ({ events }) => events)

/**
 * The pending approvals of the session now.
 *
 * @since 0.1.0
 * @category getters
 */
export const pending = (state: SessionStateShape): Effect.Effect<ReadonlyArray<PendingApproval>> =>
  STM.commit(STM.map(eventsOf(state), (events) => foldApprovals(GrowOnly.toArray(events)).pending))

/**
 * The allow rules "always" answers recorded for the session.
 *
 * @since 0.1.0
 * @category getters
 */
export const sessionRules = (state: SessionStateShape): Effect.Effect<ReadonlyArray<string>> =>
  STM.commit(STM.map(eventsOf(state), (events) => foldApprovals(GrowOnly.toArray(events)).rules))

// The answer to the request at `seq`, once it is in the log.
const awaitAnswer = (state: SessionStateShape, callId: string, seq: number) =>
  STM.commit(STM.flatMap(eventsOf(state), (events) => {
    const answer = answerAfter(
      events.buffer.length === events.length ? events.buffer : GrowOnly.toArray(events),
      callId,
      seq
    )
    return answer === undefined ? STM.retry : STM.succeed(answer)
  }))

/**
 * The answers another process left in the store's approval mailbox for this session, recorded in
 * the log (an answer that is no longer pending is dropped, as the API would refuse it).
 *
 * @since 0.1.0
 * @category mailbox
 */
export const drainMailbox = (
  state: SessionStateShape,
  onAnswered: (answered: PendingApproval) => Effect.Effect<void>
): Effect.Effect<void> => {
  const mailbox = state.store.approvalMailbox
  if (mailbox === undefined) return Effect.void
  return Effect.flatMap(
    Effect.orElseSucceed(mailbox.take(state.sessionId), () => []),
    (answers) =>
      Effect.forEach(answers, (given) =>
        answer(state, given.callId, given).pipe(
          Effect.flatMap(onAnswered),
          Effect.catchAll(() => Effect.void)
        ), { discard: true })
  )
}

/**
 * Reads the mailbox every quarter second, for as long as it runs (raced against a wait).
 *
 * @since 0.1.0
 * @category mailbox
 */
export const pollMailbox = (
  state: SessionStateShape,
  onAnswered: (answered: PendingApproval) => Effect.Effect<void>
): Effect.Effect<never> =>
  state.store.approvalMailbox === undefined
    ? Effect.never
    : Effect.zipRight(
      Effect.repeat(drainMailbox(state, onAnswered), Schedule.spaced(MAILBOX_POLL)),
      Effect.never
    )

// Appends the request and waits until it is durable; its seq.
const record = (
  state: SessionStateShape,
  question: ApprovalQuestion
): Effect.Effect<number, PersistenceError | AgentDisposed> =>
  Effect.suspend(() => {
    const input = Either.getOrElse(snapshotJson(question.input, "input"), () => null)
    return commitAcknowledged(
      state,
      STM.gen(function*() {
        yield* guardWritable(state)
        const [event] = yield* appendDrafts(state, [{
          type: "approval/request",
          data: {
            turn: question.turn,
            step: question.step,
            callId: question.callId,
            tool: question.tool,
            input,
            reason: question.reason,
            source: question.source
          }
        }], true).pipe(STM.orDie)
        return Either.right(event!.seq)
      })
    )
  })

/**
 * Records an answer to a pending request, durable before it returns; an unknown or answered call
 * is `ApprovalNotPending` and nothing is written. Returns the request it answered.
 *
 * @since 0.1.0
 * @category operations
 */
export const answer = (
  state: SessionStateShape,
  callId: string,
  given: GivenAnswer
): Effect.Effect<PendingApproval, ApprovalNotPending | PersistenceError | AgentDisposed> =>
  commitAcknowledged(
    state,
    STM.gen(function*() {
      yield* guardWritable(state)
      const events = GrowOnly.toArray(yield* eventsOf(state))
      const waiting = foldApprovals(events).pending.find((p) => p.callId === callId)
      if (waiting === undefined) {
        const requested = events.some((e) =>
          e.type === "approval/request" && (e.data as { readonly callId: string }).callId === callId
        )
        return Either.left(
          new ApprovalNotPending({ sessionId: state.sessionId, callId, reason: requested ? "answered" : "unknown" })
        )
      }
      yield* appendDrafts(state, [{
        type: "approval/answer",
        data: {
          callId,
          decision: given.decision,
          by: given.by === "" ? "unknown" : given.by,
          ...(given.reason === undefined ? {} : { reason: given.reason }),
          ...(given.decision === "allow" && given.rule !== undefined && given.rule !== "" ? { rule: given.rule } : {})
        }
      }], false).pipe(STM.orDie)
      return Either.right(waiting)
    })
  )

/**
 * What an answer to an interrupted request does (its step is closed): an allowed call runs now,
 * outside a step, and its result, or the refusal, is delivered as a follow-up message that tells
 * the model what happened to the call it made before the session stopped.
 *
 * @since 0.1.0
 * @category operations
 */
export const settleInterrupted = (
  state: SessionStateShape,
  registry: ToolRegistryShape,
  waiting: PendingApproval,
  deliver: (message: UserMessage) => Effect.Effect<void, unknown>
): Effect.Effect<void> =>
  Effect.gen(function*() {
    const events = yield* STM.commit(eventsOf(state))
    const given = answerAfter(GrowOnly.toArray(events), waiting.callId, waiting.seq)
    if (given === undefined) return
    const call = `${waiting.tool} call ${waiting.callId} ${JSON.stringify(waiting.input)}`
    let text: string
    if (given.decision === "deny") {
      text = `The ${call}, which waited for approval when the session stopped, was ${
        describeAnswer(given)
      }. It did not run.`
    } else {
      const tool = registry.lookup(waiting.tool)
      const params = tool === undefined
        ? Either.left(`unknown tool ${waiting.tool}`)
        : decodeArguments(tool, JSON.stringify(waiting.input))
      const outcome = tool === undefined || Either.isLeft(params)
        ? `Error: ${Either.isLeft(params) ? params.left : "no tool"}`
        : yield* tool.execute(params.right, {
          sessionId: state.sessionId,
          turn: waiting.turn,
          step: waiting.step,
          callId: waiting.callId,
          deferContext: () => Effect.void
        }).pipe(
          Effect.map((output) => {
            const normalized = normalizeToolOutput(output)
            const body = normalized.content.map((b) => b.type === "text" ? b.text : `[${b.mediaType} image]`).join("\n")
            return normalized.isError ? `Error: ${body}` : body
          }),
          Effect.catchAllCause((cause) => Effect.succeed(`Error: ${toolFailureText(Cause.squash(cause))}`))
        )
      text = `The ${call}, which waited for approval when the session stopped, was ${
        describeAnswer(given)
      } and has run now. Its result:\n${outcome}`
    }
    const message = yield* newUserMessage({
      text,
      source: { kind: "approval", callId: waiting.callId, decision: given.decision }
    })
    yield* Effect.ignore(deliver(message))
  })

/**
 * The approval operations a driver offers (see `Driver`): answers, the pending requests, the
 * session's rules, and a wait on the mailbox for requests still pending when the session opened.
 *
 * @since 0.1.0
 * @category constructors
 */
export const operations = (
  state: SessionStateShape,
  registry: ToolRegistryShape | undefined,
  followup: (message: UserMessage) => Effect.Effect<void, unknown>
) => {
  const settle = (waiting: PendingApproval): Effect.Effect<void> =>
    waiting.interrupted && registry !== undefined ? settleInterrupted(state, registry, waiting, followup) : Effect.void
  const answerAndSettle = (callId: string, given: GivenAnswer) => Effect.tap(answer(state, callId, given), settle)
  return {
    requestApproval: (question: ApprovalQuestion) =>
      Effect.gen(function*() {
        const seq = yield* record(state, question)
        return yield* Effect.raceFirst(awaitAnswer(state, question.callId, seq), pollMailbox(state, settle))
      }).pipe(Effect.withSpan("Driver.requestApproval", { attributes: { "tiller.tool.call.id": question.callId } })),
    approve: (callId: string, options: ApproveOptions = {}) =>
      Effect.asVoid(answerAndSettle(callId, {
        decision: "allow",
        by: options.by ?? "api",
        reason: options.reason,
        rule: options.always
      })).pipe(Effect.withSpan("Driver.approve", { attributes: { "tiller.tool.call.id": callId } })),
    deny: (callId: string, reason?: string, options: { readonly by?: string } = {}) =>
      Effect.asVoid(answerAndSettle(callId, { decision: "deny", by: options.by ?? "api", reason })).pipe(
        Effect.withSpan("Driver.deny", { attributes: { "tiller.tool.call.id": callId } })
      ),
    pendingApprovals: pending(state),
    approvalRules: sessionRules(state),
    /** Reads the mailbox while requests recorded before this process opened the session are pending. */
    watchOpenRequests: Effect.gen(function*() {
      while ((yield* pending(state)).length > 0) {
        yield* drainMailbox(state, settle)
        yield* Effect.sleep(MAILBOX_POLL)
      }
    })
  }
}
