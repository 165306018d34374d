/**
 * The relational rules R1-R17 and R20 of SPEC 5.2 as an incremental state machine: one `relate` call per
 * event, constant work per event apart from the event's own payload. The state the rules fold lives
 * in `RelationState`.
 *
 * @since 0.1.0
 */
import { APPROVAL_INTERRUPTED } from "./Approvals.js"
import type { RuleId } from "./Errors.js"
import type { CoreEvent, SessionEvent, SpliceData } from "./Event.js"
import { isCoreEvent } from "./Event.js"
import * as GrowOnly from "./GrowOnly.js"
import type { KnownIds } from "./KnownIds.js"
import { isKnown } from "./KnownIds.js"
import type { Relations, StepRelations } from "./RelationState.js"
import { copy, copyStep, emptyStep, patched, withChunk, withStep } from "./RelationState.js"
import type { SpliceShape } from "./Splice.js"
import type { ToolCallBlock, UserMessage } from "./Values.js"

/**
 * One violated rule at one event.
 *
 * @since 0.1.0
 * @category models
 */
export interface RuleViolation {
  readonly rule: RuleId
  readonly message: string
}

/**
 * Facts about the event that the acceptance fold computed before it.
 *
 * @since 0.1.0
 * @category models
 */
export interface EventFacts {
  readonly known: KnownIds
  readonly spliceShape?: SpliceShape | undefined
  readonly removed?: ReadonlyArray<UserMessage> | undefined
  readonly nextStepLength?: number | undefined
  /** The event lies in the inherited seed, where the inbox is not folded (claims removed unknown messages). */
  readonly inSeed?: boolean | undefined
}

// Records a violation of `rule` (a plain function: no closure per event).
const violate = (out: Array<RuleViolation>, rule: RuleId, message: string): void => {
  out.push({ rule, message })
}

/**
 * Advances the relational state by one event, collecting every rule it violates. The state is
 * advanced leniently even when rules are violated, so a checker can keep reporting.
 *
 * @since 0.1.0
 * @category folding
 */
export const relate = (
  state: Relations,
  event: SessionEvent,
  facts: EventFacts,
  out: Array<RuleViolation>
): Relations => {
  let s = state
  // session/end-seed may stand anywhere (2.5 class F): it is transparent to the adjacency rules R7
  // and R8 (it only abandons an open compaction bracket, R6).
  if (event.type === "session/end-seed") return s.bracket === undefined ? s : patched(s, { bracket: undefined })
  // R7: the events right after turn/start must be its claims.
  if (s.claimPhase === "after-turn-start" && !(event.type === "agent/inbox/spliced" && facts.spliceShape === "claim")) {
    violate(out, "R7", `turn/start ${s.lastTurn} is not followed by a claim`)
    s = patched(s, { claimPhase: "none" })
  } else if (
    s.claimPhase === "after-initial-ns" && !(event.type === "agent/inbox/spliced" && facts.spliceShape === "claim")
  ) {
    s = patched(s, { claimPhase: "none" })
  }
  const entering = s.entering
  if (entering) {
    const next = copy(s)
    next.entering = false
    s = next
  }
  if (!isCoreEvent(event)) return s
  return relateCore(s, event, facts, entering, out)
}

const relateCore = (
  s: Relations,
  event: CoreEvent,
  facts: EventFacts,
  entering: boolean,
  out: Array<RuleViolation>
): Relations => {
  switch (event.type) {
    case "turn/start": {
      const { turn } = event.data
      if (s.turnOpen) violate(out, "R1", `turn/start ${turn} while turn ${s.lastTurn} is open`)
      else if (turn !== s.lastTurn + 1) violate(out, "R1", `turn/start ${turn} after turn ${s.lastTurn}`)
      return patched(s, {
        lastTurn: turn,
        turnOpen: true,
        lastStep: 0,
        stepOpen: false,
        step: undefined,
        maxTokensInTurn: false,
        claimPhase: "after-turn-start",
        claimedForStep: new Set()
      })
    }
    case "turn/end": {
      const { turn, reason } = event.data
      if (!s.turnOpen) violate(out, "R2", `turn/end ${turn} with no open turn`)
      else if (turn !== s.lastTurn) violate(out, "R2", `turn/end ${turn} names another turn than ${s.lastTurn}`)
      else if (s.stepOpen) violate(out, "R2", `turn/end ${turn} while step ${s.lastStep} is open`)
      if (reason.kind === "completed" && s.maxTokensInTurn) {
        violate(out, "R16", `turn ${turn} ended completed after a max-tokens step`)
      } else if (reason.kind === "max-tokens" && !s.maxTokensInTurn) {
        violate(out, "R16", `turn ${turn} ended max-tokens but no step finished max-tokens`)
      }
      const bracket = s.bracket !== undefined && s.bracket.turn === turn ? undefined : s.bracket
      return patched(s, { turnOpen: false, stepOpen: false, step: undefined, claimPhase: "none", bracket })
    }
    case "step/start": {
      const { step, turn } = event.data
      if (!s.turnOpen) violate(out, "R3", `step/start with no open turn`)
      else if (turn !== s.lastTurn) violate(out, "R3", `step/start names turn ${turn}, open turn is ${s.lastTurn}`)
      else if (s.stepOpen) violate(out, "R3", `step/start ${step} while step ${s.lastStep} is open`)
      else if (step !== s.lastStep + 1) violate(out, "R3", `step/start ${step} after step ${s.lastStep}`)
      const next = copy(s)
      next.lastStep = step
      next.stepOpen = true
      next.step = emptyStep
      next.entering = true
      next.claimPhase = "none"
      return next
    }
    case "step/end": {
      const { step, turn } = event.data
      if (!s.stepOpen || turn !== s.lastTurn || step !== s.lastStep) {
        violate(out, "R4", `step/end (${turn}, ${step}) does not name the open step`)
      } else if (s.step?.anchor !== undefined && !s.step.anchor.interrupted) {
        for (const call of s.step.anchor.calls) {
          if (!s.step.answered.has(call.id)) {
            violate(out, "R15", `step/end while tool call ${call.id} has no tool/result`)
            break
          }
        }
      }
      const next = copy(s)
      next.stepOpen = false
      next.step = undefined
      next.claimPhase = s.turnOpen ? "boundary" : "none"
      next.claimedForStep = noIds
      return next
    }
    case "user/message": {
      const id = event.data.id
      if (event.surfaceOp !== "append") {
        if (isKnown(facts.known, id)) violate(out, "R9", `replacement user/message reuses known id ${id}`)
        return s
      }
      if (!s.stepOpen || !entering) {
        violate(out, "R8", `appended user/message ${id} is not directly after its step/start`)
      }
      if (isKnown(facts.known, id) && facts.inSeed !== true) {
        if (!s.claimedForStep.has(id)) {
          violate(out, "R9", `appended user/message reuses known id ${id} that this step did not claim`)
          return patched(s, { entering: s.stepOpen })
        }
        const claimed = new Set(s.claimedForStep)
        claimed.delete(id)
        return patched(s, { entering: s.stepOpen, claimedForStep: claimed })
      }
      if (s.entering === s.stepOpen) return s
      const next = copy(s)
      next.entering = s.stepOpen
      return next
    }
    case "assistant/chunk": {
      const d = event.data
      const step = stepEnclosed(s, d.turn, d.step, "assistant/chunk", out)
      if (!s.headerSeen) violate(out, "R17", `assistant/chunk before any request/header`)
      if (step === undefined) return s
      if (d.attempt !== step.attempt) {
        violate(out, "R10", `chunk attempt ${d.attempt} but the step is at attempt ${step.attempt}`)
      }
      if (step.finish !== undefined) violate(out, "R10", `chunk after the finish chunk of attempt ${step.attempt}`)
      const finish = d.chunk.type === "finish" ? d.chunk.finish.kind : step.finish
      return withChunk(s, step, event.seq, finish)
    }
    case "assistant/message": {
      const d = event.data
      const step = stepEnclosed(s, d.turn, d.step, "assistant/message", out)
      if (step === undefined) return s
      if (d.attempt !== step.attempt) {
        violate(out, "R10", `assistant/message attempt ${d.attempt} but the step is at attempt ${step.attempt}`)
      }
      const interrupted = d.interrupted === true
      const calls = d.message.content.filter((b): b is ToolCallBlock => b.type === "tool-call")
      if (step.anchor !== undefined) violate(out, "R11", `a second assistant/message in step ${s.lastStep}`)
      else if (!interrupted && step.finish !== "stop" && step.finish !== "max-tokens") {
        violate(out, "R11", `assistant/message without a stop or max-tokens finish chunk`)
      } else if (interrupted && step.finish !== undefined) {
        violate(out, "R11", `interrupted assistant/message after a finish chunk`)
      }
      if (!sameSeqs(event.sourceEventSeqs ?? [], step.chunkSeqs)) {
        violate(out, "R11", `assistant/message must cite exactly the chunks of attempt ${step.attempt}`)
      }
      if (calls.length > 0 && (interrupted || step.finish === "max-tokens")) {
        violate(out, "R14", `${interrupted ? "interrupted" : "max-tokens"} assistant/message carries a tool call`)
      }
      const maxTokens = !interrupted && step.finish === "max-tokens"
      const next = copy(s)
      next.maxTokensInTurn = s.maxTokensInTurn || maxTokens
      const nextStep = copyStep(step)
      nextStep.anchor = { calls, interrupted }
      next.step = nextStep
      return next
    }
    case "tool/call": {
      const d = event.data
      const step = stepEnclosed(s, d.turn, d.step, "tool/call", out)
      if (step === undefined) return s
      if (step.anchor === undefined) {
        violate(out, "R12", `tool/call ${d.callId} before the step's assistant/message`)
        return s
      }
      const index = step.anchor.calls.findIndex((c) => c.id === d.callId)
      const block = step.anchor.calls[index]
      if (block === undefined || block.name !== d.name || block.arguments !== d.arguments) {
        violate(out, "R12", `tool/call ${d.callId} matches no tool-call block of the assistant/message`)
        return s
      }
      if (step.callSeqs.has(d.callId)) {
        violate(out, "R12", `tool/call ${d.callId} repeated`)
        return s
      }
      if (index < step.lastCallIndex) violate(out, "R12", `tool/call ${d.callId} out of block order`)
      const callSeqs = new Map(step.callSeqs)
      callSeqs.set(d.callId, event.seq)
      const nextStep = copyStep(step)
      nextStep.callSeqs = callSeqs
      nextStep.lastCallIndex = Math.max(index, step.lastCallIndex)
      return withStep(s, nextStep)
    }
    case "tool/result": {
      if (event.surfaceOp !== "append") return s
      const d = event.data
      const step = stepEnclosed(s, d.turn, d.step, "tool/result", out)
      if (step === undefined) return s
      const callId = d.message.content[0].toolCallId
      const index = step.anchor === undefined ? -1 : step.anchor.calls.findIndex((c) => c.id === callId)
      if (index < 0) {
        violate(out, "R13", `tool/result answers no tool call of the step (${callId})`)
        return s
      }
      if (step.answered.has(callId)) {
        violate(out, "R13", `tool/result answers ${callId} twice`)
        return s
      }
      if (index < step.lastResultIndex) violate(out, "R13", `tool/result for ${callId} out of block order`)
      const callSeq = step.callSeqs.get(callId)
      const cites = event.sourceEventSeqs
      if (callSeq === undefined) {
        const repair = d.error?.code === "TOOL_NOT_STARTED" && cites === undefined
        if (!repair) violate(out, "R13", `tool/result for ${callId} without a tool/call`)
      } else if (cites === undefined || cites.length !== 1 || cites[0] !== callSeq) {
        violate(out, "R13", `tool/result for ${callId} must cite [${callSeq}]`)
      }
      const answered = new Set(step.answered)
      answered.add(callId)
      const nextStep = copyStep(step)
      nextStep.answered = answered
      nextStep.lastResultIndex = Math.max(index, step.lastResultIndex)
      const next = withStep(s, nextStep)
      // A result closes a request still waiting, unless it says the session stopped while it waited.
      if (s.approvals.get(callId) !== "waiting" || d.error?.code === APPROVAL_INTERRUPTED) return next
      return patched(next, { approvals: new Map(s.approvals).set(callId, "closed") })
    }
    case "approval/request": {
      const d = event.data
      const step = stepEnclosed(s, d.turn, d.step, "approval/request", out)
      if (step === undefined) return s
      if (!step.callSeqs.has(d.callId)) {
        violate(out, "R20", `approval/request for ${d.callId}, which has no tool/call in the step`)
      } else if (step.answered.has(d.callId)) {
        violate(out, "R20", `approval/request for ${d.callId} after its tool/result`)
      } else if (s.approvals.get(d.callId) === "waiting") {
        violate(out, "R20", `a second approval/request for ${d.callId}`)
      }
      return patched(s, { approvals: new Map(s.approvals).set(d.callId, "waiting") })
    }
    case "approval/answer": {
      const { callId } = event.data
      const state = s.approvals.get(callId)
      if (state === undefined) violate(out, "R20", `approval/answer for ${callId}, which has no approval/request`)
      else if (state === "answered") violate(out, "R20", `approval/answer for ${callId}, which is already answered`)
      else if (state === "closed") {
        violate(out, "R20", `approval/answer for ${callId}, whose call already has a result`)
      }
      return patched(s, { approvals: new Map(s.approvals).set(callId, "answered") })
    }
    case "request/header": {
      if (!s.stepOpen) violate(out, "R5", `request/header with no open step`)
      return patched(s, { headerSeen: true })
    }
    case "llm/retry": {
      const d = event.data
      const step = stepEnclosed(s, d.turn, d.step, "llm/retry", out)
      if (step === undefined) return s
      if (d.attempt !== step.attempt) {
        violate(out, "R10", `llm/retry attempt ${d.attempt} but the step is at attempt ${step.attempt}`)
      } else if (step.finish !== "error" && step.finish !== "aborted") {
        violate(out, "R10", `llm/retry for attempt ${d.attempt} without a failure finish`)
      } else if (step.anchor !== undefined) violate(out, "R10", `llm/retry after an assistant/message`)
      return patched(s, {
        step: Object.assign(copyStep(step), {
          attempt: step.attempt + 1,
          chunkSeqs: GrowOnly.empty(),
          finish: undefined
        })
      })
    }
    case "agent/inbox/spliced":
      return relateSplice(s, event.data, facts, out)
    case "session/end-seed":
      return patched(s, { bracket: undefined })
    case "compaction/start":
    case "compaction/summary":
    case "compaction/end": {
      const turn = event.data.turn
      if (turn === null) {
        if (s.turnOpen) violate(out, "R6", `${event.type} with turn null inside turn ${s.lastTurn}`)
      } else if (!s.turnOpen || turn !== s.lastTurn) {
        violate(out, "R6", `${event.type} names turn ${turn}, which is not open`)
      }
      if (event.type === "compaction/start") {
        if (s.bracket !== undefined) violate(out, "R6", `compaction/start while a compaction is open`)
        return patched(s, { bracket: { turn } })
      }
      if (event.type === "compaction/end") {
        if (s.bracket === undefined || s.bracket.turn !== turn) {
          violate(out, "R6", `compaction/end without an open compaction/start of the same turn`)
          return s
        }
        return patched(s, { bracket: undefined })
      }
      return s
    }
  }
}

// No id claimed (sets of claimed ids are copied before they change, so one empty set serves all).
const noIds: ReadonlySet<string> = new Set()

const relateSplice = (
  s: Relations,
  data: SpliceData,
  facts: EventFacts,
  out: Array<RuleViolation>
): Relations => {
  const shape = facts.spliceShape
  if (shape === "insertion" || shape === "replacement") {
    // Only a replacement may re-insert an id it removes (an insertion removes nothing).
    const removedIds = shape === "replacement" ? new Set((facts.removed ?? []).map((m) => m.id)) : undefined
    for (const m of data.inserted) {
      if (isKnown(facts.known, m.id) && removedIds?.has(m.id) !== true) {
        violate(out, "R9", `splice inserts known id ${m.id}`)
      }
    }
    return s
  }
  if (shape !== "claim") return s
  const target = data.target
  const n = data.removedCount ?? 0
  if (!s.turnOpen) {
    violate(out, "R7", `claim of ${target} outside a turn`)
    return s
  }
  if (data.start !== 0) violate(out, "R7", `claim of ${target} with start ${data.start}`)
  if (target === "next-step" && facts.nextStepLength !== undefined && n !== facts.nextStepLength) {
    violate(out, "R7", `claim of next-step takes ${n} of ${facts.nextStepLength} items`)
  }
  const claimed = new Set(s.claimedForStep)
  for (const m of facts.removed ?? []) claimed.add(m.id)
  if (target === "next-turn") {
    if (n !== 1) violate(out, "R7", `claim of next-turn takes ${n} items`)
    if (s.claimPhase !== "after-turn-start" && s.claimPhase !== "after-initial-ns") {
      violate(out, "R7", `claim of next-turn away from a turn/start`)
    }
    return patched(s, { claimPhase: "none", claimedForStep: claimed })
  }
  switch (s.claimPhase) {
    case "after-turn-start":
      return patched(s, { claimPhase: "after-initial-ns", claimedForStep: claimed })
    case "boundary":
      return patched(s, { claimPhase: "boundary-claimed", claimedForStep: claimed })
    case "boundary-claimed":
      violate(out, "R7", `a second claim of next-step in one boundary`)
      return patched(s, { claimedForStep: claimed })
    default:
      violate(out, "R7", `claim of next-step outside a boundary`)
      return patched(s, { claimedForStep: claimed })
  }
}

const stepEnclosed = (
  s: Relations,
  turn: number,
  step: number,
  type: string,
  out: Array<RuleViolation>
): StepRelations | undefined => {
  if (!s.stepOpen || s.step === undefined) {
    violate(out, "R5", `${type} with no open step`)
    return undefined
  }
  if (turn !== s.lastTurn || step !== s.lastStep) {
    violate(out, "R5", `${type} names (${turn}, ${step}) but the open step is (${s.lastTurn}, ${s.lastStep})`)
    return undefined
  }
  return s.step
}

const sameSeqs = (cited: ReadonlyArray<number>, seqs: GrowOnly.GrowOnly<number>): boolean => {
  if (cited.length !== seqs.length) return false
  for (let i = 0; i < cited.length; i++) if (cited[i] !== seqs.buffer[i]) return false
  return true
}
