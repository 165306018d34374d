/**
 * Durable approvals as a fold over the log (SPEC 4.12): which `approval/request`s still wait for an
 * answer, the answer a request got, and the rules that "always" answers recorded for the session.
 *
 * @since 0.1.0
 */
import type { ApprovalAnswerData, ApprovalSource, EventOf, SessionEvent } from "./Event.js"
import type { Json } from "./Json.js"

/**
 * The code of the repair result of a call that was waiting for approval when the session stopped:
 * its request stays pending, and an answer then runs (or refuses) the call outside the closed step.
 *
 * @since 0.1.0
 * @category constants
 */
export const APPROVAL_INTERRUPTED = "APPROVAL_INTERRUPTED"

/**
 * A question for a tool call of the open step (what `Driver.requestApproval` records).
 *
 * @since 0.1.0
 * @category models
 */
export interface ApprovalQuestion {
  readonly turn: number
  readonly step: number
  readonly callId: string
  readonly tool: string
  readonly input: unknown
  /** Why it asks: the rule, the mode, or the hook's reason. */
  readonly reason: string
  readonly source: ApprovalSource
}

/**
 * An answer as a caller gives it: the decision and who gave it, why, and an "always" rule.
 *
 * @since 0.1.0
 * @category models
 */
export interface GivenAnswer {
  readonly decision: "allow" | "deny"
  readonly by: string
  readonly reason?: string | undefined
  readonly rule?: string | undefined
}

/**
 * Options of an approval given through `Driver.approve`: who answers (default `"api"`), why, and an
 * allow rule in Claude Code's syntax that the session keeps ("always").
 *
 * @since 0.1.0
 * @category models
 */
export interface ApproveOptions {
  readonly by?: string
  readonly reason?: string
  readonly always?: string
}

/**
 * A request that waits for an answer.
 *
 * @since 0.1.0
 * @category models
 */
export interface PendingApproval {
  /** The seq of its `approval/request`. */
  readonly seq: number
  readonly turn: number
  readonly step: number
  readonly callId: string
  readonly tool: string
  readonly input: Json
  /** Why it asks: the rule, the mode, or the hook's reason. */
  readonly reason: string
  readonly source: ApprovalSource
  /**
   * The session stopped while it waited (a crash or a restart closed its step): an answer runs or
   * refuses the call between turns and tells the model in a message.
   */
  readonly interrupted: boolean
}

/**
 * The approvals of a log: the pending requests (oldest first) and the session's "always" rules.
 *
 * @since 0.1.0
 * @category models
 */
export interface ApprovalsView {
  readonly pending: ReadonlyArray<PendingApproval>
  /** The allow rules recorded by "always" answers, in answer order. */
  readonly rules: ReadonlyArray<string>
}

/**
 * Folds the approvals of `events`: linear in the log, no state outside it.
 *
 * @since 0.1.0
 * @category folding
 */
export const foldApprovals = (events: ReadonlyArray<SessionEvent>): ApprovalsView => {
  const waiting = new Map<string, PendingApproval>()
  const rules: Array<string> = []
  for (const event of events) {
    switch (event.type) {
      case "approval/request": {
        const d = (event as EventOf<"approval/request">).data
        waiting.set(d.callId, {
          seq: event.seq,
          turn: d.turn,
          step: d.step,
          callId: d.callId,
          tool: d.tool,
          input: d.input as Json,
          reason: d.reason,
          source: d.source,
          interrupted: false
        })
        break
      }
      case "approval/answer": {
        const d = (event as EventOf<"approval/answer">).data
        waiting.delete(d.callId)
        if (d.decision === "allow" && d.rule !== undefined) rules.push(d.rule)
        break
      }
      case "tool/result": {
        const e = event as EventOf<"tool/result">
        if (e.surfaceOp !== "append" || waiting.size === 0) break
        const callId = e.data.message.content[0].toolCallId
        const request = waiting.get(callId)
        if (request === undefined) break
        if (e.data.error?.code === APPROVAL_INTERRUPTED) waiting.set(callId, { ...request, interrupted: true })
        else waiting.delete(callId)
        break
      }
    }
  }
  return { pending: Array.from(waiting.values()).sort((a, b) => a.seq - b.seq), rules }
}

/**
 * The answer to the request at `requestSeq` for `callId`, if one follows it in `events`.
 *
 * @since 0.1.0
 * @category folding
 */
export const answerAfter = (
  events: ReadonlyArray<SessionEvent>,
  callId: string,
  requestSeq: number
): ApprovalAnswerData | undefined => {
  for (let i = requestSeq + 1; i < events.length; i++) {
    const event = events[i]!
    if (event.type === "approval/answer" && (event as EventOf<"approval/answer">).data.callId === callId) {
      return (event as EventOf<"approval/answer">).data
    }
  }
  return undefined
}

/**
 * The words of an answer, as the denied call's result and the log show them: who and why.
 *
 * @since 0.1.0
 * @category rendering
 */
export const describeAnswer = (answer: ApprovalAnswerData): string =>
  `${answer.decision === "allow" ? "approved" : "refused"} by ${answer.by}${
    answer.reason === undefined || answer.reason === "" ? "" : `: ${answer.reason}`
  }${answer.rule === undefined ? "" : ` (always: ${answer.rule})`}`
