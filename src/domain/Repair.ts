/**
 * Open-turn repair: the closers that balance a log whose process died inside a turn (SPEC 6.5).
 *
 * @since 0.1.0
 */
import { APPROVAL_INTERRUPTED } from "./Approvals.js"
import type { EventOf, SessionEvent } from "./Event.js"
import { REPAIR_ID_PREFIX } from "./Ids.js"
import type { MessageId } from "./Ids.js"
import type { ToolCallBlock, ToolResultMessage } from "./Values.js"

const OUTCOME_UNKNOWN =
  "Error: the session was interrupted while this tool call was running; its outcome is unknown. Check the current state before retrying anything with side effects."
const APPROVAL_WAITING =
  "Error: the session was interrupted while this tool call waited for approval; it did not run. The request is still pending: if it is approved the call runs and its result follows in a message."
const NOT_STARTED =
  "Error: the session was interrupted before this tool call started; it did not run and may be retried."

/**
 * The closers for a log ending inside an open turn: synthetic results for unanswered calls of an
 * open step, its `step/end`, then `turn/end {interrupted}`. Balanced or empty logs yield `[]`.
 *
 * @since 0.1.0
 * @category repair
 */
export const repairClosers = (events: ReadonlyArray<SessionEvent>): ReadonlyArray<SessionEvent> => {
  let turnStart = -1
  for (let i = events.length - 1; i >= 0; i--) {
    const type = events[i]!.type
    if (type === "turn/end") return []
    if (type === "turn/start") {
      turnStart = i
      break
    }
  }
  if (turnStart < 0) return []
  const turn = (events[turnStart] as EventOf<"turn/start">).data.turn
  let stepStart = -1
  let step = 0
  for (let i = turnStart + 1; i < events.length; i++) {
    const e = events[i]!
    if (e.type === "step/start") {
      stepStart = i
      step = (e as EventOf<"step/start">).data.step
    } else if (e.type === "step/end") stepStart = -1
  }
  const last = events[events.length - 1]!
  const time = last.time
  let seq = last.seq + 1
  const out: Array<SessionEvent> = []
  if (stepStart >= 0) {
    let calls: ReadonlyArray<ToolCallBlock> = []
    const callSeqs = new Map<string, number>()
    const answered = new Set<string>()
    // Calls whose approval request has no answer: their body never started.
    const waiting = new Set<string>()
    for (let i = stepStart + 1; i < events.length; i++) {
      const e = events[i]!
      if (e.type === "assistant/message") {
        const d = (e as EventOf<"assistant/message">).data
        calls = d.interrupted === true
          ? []
          : d.message.content.filter((b): b is ToolCallBlock => b.type === "tool-call")
      } else if (e.type === "tool/call") {
        callSeqs.set((e as EventOf<"tool/call">).data.callId, e.seq)
      } else if (e.type === "approval/request") {
        waiting.add((e as EventOf<"approval/request">).data.callId)
      } else if (e.type === "approval/answer") {
        waiting.delete((e as EventOf<"approval/answer">).data.callId)
      } else if (e.type === "tool/result" && (e as EventOf<"tool/result">).surfaceOp === "append") {
        answered.add((e as EventOf<"tool/result">).data.message.content[0].toolCallId)
      }
    }
    for (const call of calls) {
      if (answered.has(call.id)) continue
      const callSeq = callSeqs.get(call.id)
      const approval = callSeq !== undefined && waiting.has(call.id)
      const message: ToolResultMessage = {
        id: `${REPAIR_ID_PREFIX}${call.id}-${seq}` as MessageId,
        role: "user",
        content: [{
          type: "tool-result",
          toolCallId: call.id,
          isError: true,
          content: [{
            type: "text",
            text: callSeq === undefined ? NOT_STARTED : approval ? APPROVAL_WAITING : OUTCOME_UNKNOWN
          }]
        }],
        source: { kind: "tool", callId: call.id }
      }
      const error = callSeq === undefined
        ? { name: "ToolNotStartedError", code: "TOOL_NOT_STARTED" }
        : approval
        ? { name: "ApprovalInterruptedError", code: APPROVAL_INTERRUPTED }
        : { name: "ToolOutcomeUnknownError", code: "TOOL_OUTCOME_UNKNOWN" }
      const result: EventOf<"tool/result"> = callSeq === undefined
        ? { type: "tool/result", seq, time, data: { turn, step, message, error }, surfaceOp: "append" }
        : {
          type: "tool/result",
          seq,
          time,
          data: { turn, step, message, error },
          surfaceOp: "append",
          sourceEventSeqs: [callSeq]
        }
      out.push(result)
      seq++
    }
    out.push({ type: "step/end", seq: seq++, time, data: { turn, step } })
  }
  out.push({ type: "turn/end", seq, time, data: { turn, reason: { kind: "interrupted" } } })
  return out
}
