/**
 * The fold of a session log: pending inbox, known ids, surface and relational state, advanced one
 * event at a time with the acceptance rules (SPEC 5.1) and, when enabled, the relational rules
 * (SPEC 5.2). The same fold validates live appends and loaded logs (D6).
 *
 * @since 0.1.0
 */
import { Either } from "effect"
import type { RuleId } from "./Errors.js"
import type { SessionEvent, SpliceData, SurfaceOp } from "./Event.js"
import { isCoreType } from "./Event.js"
import * as GrowOnly from "./GrowOnly.js"
import { jsonEquals } from "./Json.js"
import type { KnownIds } from "./KnownIds.js"
import { emptyKnownIds, isKnown, markEntered, markPending, markRemoved, recordOf } from "./KnownIds.js"
import type { RuleViolation } from "./Relations.js"
import { relate } from "./Relations.js"
import type { Relations } from "./RelationState.js"
import { initialRelations } from "./RelationState.js"
import type { PendingLists, SpliceShape } from "./Splice.js"
import { applyPending, emptyPending, spliceShape } from "./Splice.js"
import type { Surface } from "./Surface.js"
import { messageOf, rangeOfPositions } from "./Surface.js"
import { SurfaceHistory } from "./SurfaceHistory.js"
import type { Message, ToolResultMessage, UserMessage } from "./Values.js"

/**
 * A violation found while advancing: a relational rule, or an acceptance rule (`rule` undefined).
 *
 * @since 0.1.0
 * @category models
 */
export interface Violation {
  readonly rule: RuleId | undefined
  readonly message: string
}

/**
 * Options of the fold.
 *
 * @since 0.1.0
 * @category models
 */
export interface FoldOptions {
  /** Run the relational rules R1-R18 and R20 (the agent option `invariants: "check"`). */
  readonly relations: boolean
  /** Declared extension event types. */
  readonly eventTypes: ReadonlySet<string>
}

/**
 * The fold state after a prefix of the log.
 *
 * @since 0.1.0
 * @category models
 */
export interface LogState {
  readonly length: number
  readonly seedLength: number
  readonly inbox: PendingLists
  /**
   * The seed's own lists, replayed where its splices apply (best effort: a seed that holds an
   * earlier fork's seed may not replay), so the seed's id states and replacements are known; emptied
   * at `seedLength`, where the session's inbox starts empty.
   */
  readonly seedInbox: PendingLists
  readonly known: KnownIds
  /** The surface and its messages: what `surface` and `messages` read. */
  readonly history: SurfaceHistory
  readonly surface: Surface
  /** The messages of the surface, in order (what a model request sends), kept in step with it. */
  readonly messages: GrowOnly.GrowOnly<Message>
  readonly relations: Relations
  readonly openStepStart: number
  readonly lastTurn: number
}

// A fold state: `surface` and `messages` are read from `history`, which builds them on first read
// after single-node replacements (a prune's run of them costs the fold one build, not one each).
class FoldState implements LogState {
  constructor(
    readonly length: number,
    readonly seedLength: number,
    readonly inbox: PendingLists,
    readonly seedInbox: PendingLists,
    readonly known: KnownIds,
    readonly history: SurfaceHistory,
    readonly relations: Relations,
    readonly openStepStart: number,
    readonly lastTurn: number
  ) {}
  get surface(): Surface {
    return this.history.surface
  }
  get messages(): GrowOnly.GrowOnly<Message> {
    return this.history.messages
  }
}

/**
 * The state of an empty log with the given seed length.
 *
 * @since 0.1.0
 * @category constructors
 */
export const initialLogState = (seedLength = 0): LogState =>
  new FoldState(
    0,
    seedLength,
    emptyPending,
    emptyPending,
    emptyKnownIds(),
    SurfaceHistory.empty(),
    initialRelations,
    -1,
    0
  )

/**
 * Advances the fold by one event. Always returns a best-effort next state; the event is acceptable
 * iff `violations` is empty.
 *
 * @since 0.1.0
 * @category folding
 */
export const advance = (
  state: LogState,
  event: SessionEvent,
  eventAt: (seq: number) => SessionEvent | undefined,
  options: FoldOptions
): { readonly state: LogState; readonly violations: ReadonlyArray<Violation> } =>
  advanceFrom(
    event.seq >= state.seedLength && state.seedInbox !== emptyPending ? endSeed(state) : state,
    event,
    eventAt,
    options
  )

// At `seedLength` the seed's lists are dropped (the session's inbox starts empty, 6.6 step 6): ids
// still pending there were never removed, so they are known as discarded.
const endSeed = (state: LogState): LogState => {
  const left = [...GrowOnly.toArray(state.seedInbox.nextTurn), ...GrowOnly.toArray(state.seedInbox.nextStep)]
  return new FoldState(
    state.length,
    state.seedLength,
    state.inbox,
    emptyPending,
    markRemoved(state.known, left.map((m) => m.id), "cancel"),
    state.history,
    state.relations,
    state.openStepStart,
    state.lastTurn
  )
}

// The result of an acceptable event: one shared empty list.
const noViolations: ReadonlyArray<Violation> = Object.freeze([])

// The violations of the event being advanced: one list that every call reuses (advancing is
// synchronous and never reentrant), emptied first and copied out only when it holds something.
const found: Array<Violation> = []

const acceptance = (violations: Array<Violation>, message: string): void => {
  violations.push({ rule: undefined, message })
}

const advanceFrom = (
  state: LogState,
  event: SessionEvent,
  eventAt: (seq: number) => SessionEvent | undefined,
  options: FoldOptions
): { readonly state: LogState; readonly violations: ReadonlyArray<Violation> } => {
  const violations = found
  violations.length = 0
  if (event.seq !== state.length) acceptance(violations, `seq ${event.seq} where ${state.length} was expected`)
  if (!isCoreType(event.type) && event.ignorable !== true && !options.eventTypes.has(event.type)) {
    acceptance(violations, `event type ${event.type} is neither core nor declared and is not marked ignorable`)
  }
  let inbox = state.inbox
  let seedInbox = state.seedInbox
  // Known-id changes apply after the relation checks, which read `state.known`: the table is then
  // still owned by that version, so each lookup is direct.
  let mark: ((known: KnownIds) => KnownIds) | undefined
  let history = state.history
  let openStepStart = state.openStepStart
  let lastTurn = state.lastTurn
  let shape: SpliceShape | undefined
  let removed: ReadonlyArray<UserMessage> | undefined
  switch (event.type) {
    case "agent/inbox/spliced": {
      const data = event.data as SpliceData
      shape = spliceShape(data)
      // The session's lists fold from seedLength. Inside the seed the splices replay on the seed's
      // own lists, which tells which ids a claim or a replacement removed (3.9 states, the R9
      // exemption of a replacement); one that does not replay there (a seed holding an earlier
      // fork's seed) only makes its inserted ids known, but its shape must still be valid (A9).
      const seed = event.seq < state.seedLength
      const applied = applyPending(seed ? seedInbox : inbox, data, (id) => recordOf(state.known, id)?.pending === true)
      if (Either.isRight(applied)) {
        if (seed) seedInbox = applied.right.pending
        else inbox = applied.right.pending
        removed = applied.right.removed
        const gone = removed
        const removal = shape === "claim" ? "claim" : "cancel"
        mark = (known) => {
          let out = gone.length > 0 ? markRemoved(known, gone.map((m) => m.id), removal) : known
          if (data.inserted.length > 0) out = markPending(out, data.inserted.map((m) => m.id))
          return out
        }
      } else if (!seed) {
        violations.push({ rule: "R18", message: `invalid inbox splice: ${applied.left}` })
      } else {
        if (shape === undefined) {
          acceptance(violations, "invalid inbox splice: splice has none of the four valid shapes")
        }
        if (data.inserted.length > 0) {
          mark = (known) =>
            markRemoved(known, data.inserted.map((m) => m.id).filter((id) => !isKnown(known, id)), "cancel")
        }
      }
      break
    }
    case "user/message":
    case "assistant/message":
    case "tool/result": {
      const e = event as SessionEvent & {
        readonly surfaceOp: SurfaceOp
        readonly sourceEventSeqs?: ReadonlyArray<number>
      }
      const citationProblem = e.type === "user/message" && e.surfaceOp === "append" && e.sourceEventSeqs !== undefined
        ? `an appended user/message carries no sourceEventSeqs`
        : checkCitations(e.type, e.seq, e.sourceEventSeqs)
      if (citationProblem !== undefined) acceptance(violations, citationProblem)
      if (e.surfaceOp !== "append") {
        const problem = checkReplacement(state, e, e.surfaceOp, eventAt)
        if (problem !== undefined) acceptance(violations, problem)
      }
      if (e.surfaceOp === "append") history = history.append(e.seq, messageOf(e))
      else if (violations.length === 0) history = replaceOn(history, e, e.surfaceOp, eventAt)
      const id = e.type === "user/message"
        ? (e.data as UserMessage).id
        : (e.data as { readonly message: { readonly id: string } }).message.id
      mark = (known) => markEntered(known, id)
      break
    }
    case "turn/start":
      lastTurn = (event.data as { readonly turn: number }).turn
      break
    case "step/start":
      openStepStart = event.seq
      break
    case "step/end":
    case "turn/end":
      openStepStart = -1
      break
  }
  // The inbox is folded only from the seed length: inside the seed, what a claim removed is unknown.
  const inSeed = event.seq < state.seedLength
  const relations = options.relations
    ? relate(state.relations, event, {
      known: state.known,
      spliceShape: shape,
      removed,
      nextStepLength: inSeed ? undefined : state.inbox.nextStep.length,
      inSeed
    }, violations as Array<RuleViolation>)
    : state.relations
  return {
    state: new FoldState(
      state.length + 1,
      state.seedLength,
      inbox,
      seedInbox,
      mark === undefined ? state.known : mark(state.known),
      history,
      relations,
      openStepStart,
      lastTurn
    ),
    violations: violations.length === 0 ? noViolations : violations.splice(0)
  }
}

const checkCitations = (type: string, seq: number, cites: ReadonlyArray<number> | undefined): string | undefined => {
  if (cites === undefined) return undefined
  if (cites.length === 0 && type !== "assistant/message") return `${type} sourceEventSeqs must not be empty`
  // The usual list ascends, so it repeats nothing and only its last entry can be too late.
  let ascending = true
  for (let i = 1; i < cites.length && ascending; i++) ascending = cites[i - 1]! < cites[i]!
  if (ascending && (cites.length === 0 || cites[cites.length - 1]! < seq)) return undefined
  const seen = new Set<number>()
  for (const c of cites) {
    if (c >= seq) return `sourceEventSeqs cites ${c}, not earlier than the event's own seq ${seq}`
    if (seen.has(c)) return `sourceEventSeqs cites ${c} twice`
    seen.add(c)
  }
  return undefined
}

// A valid replacement applied: a single node with a message replaced by one with a message is a
// patch (O(1)); any other range rebuilds the surface and its messages (the event itself is not in
// the log yet).
const replaceOn = (
  history: SurfaceHistory,
  event: SessionEvent,
  op: { readonly start: number; readonly end: number },
  eventAt: (seq: number) => SessionEvent | undefined
): SurfaceHistory => {
  const from = history.positionOf(op.start)
  const to = history.positionOf(op.end)
  if (from < 0 || to < from) return history
  const message = messageOf(event)
  if (from === to && message !== undefined && history.hasMessageAt(from)) return history.patch(from, event.seq, message)
  const seqs = GrowOnly.toArray(history.surface)
  seqs.splice(from, to - from + 1, event.seq)
  return SurfaceHistory.rebuilt(seqs, (seq) => messageOf(seq === event.seq ? event : eventAt(seq)))
}

const checkReplacement = (
  state: LogState,
  event: SessionEvent & { readonly sourceEventSeqs?: ReadonlyArray<number> },
  op: { readonly start: number; readonly end: number },
  eventAt: (seq: number) => SessionEvent | undefined
): string | undefined => {
  const history = state.history
  const range = rangeOfPositions(history.positionOf(op.start), history.positionOf(op.end), op.start, op.end)
  if (Either.isLeft(range)) return range.left
  const { from, to } = range.right
  // A single node is its own seq: the surface is not built for it (a prune's run of replacements).
  const shadowed = from === to ? [op.start] : history.surface.buffer.slice(from, to + 1)
  const cites = new Set(event.sourceEventSeqs ?? [])
  for (const seq of shadowed) {
    if (!cites.has(seq)) return `replacement must cite every shadowed seq (missing ${seq})`
    if (state.openStepStart >= 0 && seq > state.openStepStart) {
      return `replacement range holds seq ${seq} of the open step`
    }
  }
  if (event.type === "tool/result") {
    const target = eventAt(op.start)
    if (from !== to || target?.type !== "tool/result") {
      return `a tool/result replacement must shadow exactly one tool/result`
    }
    const before = (target.data as { readonly message: ToolResultMessage }).message
    const after = (event.data as { readonly message: ToolResultMessage }).message
    const strip = (m: ToolResultMessage) => ({ ...m, content: [{ ...m.content[0], content: [] }] })
    if (!jsonEquals(strip(before), strip(after))) return `a tool/result replacement may change only the result content`
    return undefined
  }
  // A range must not separate a tool call from its result. A result's call is carried by the nearest
  // assistant/message before it on the surface that has the call id (ids may repeat across steps).
  const inRange = new Set(shadowed)
  const callOwner = new Map<string, number>()
  const surface = history.surface
  for (let i = 0; i < surface.length; i++) {
    const seq = surface.buffer[i]!
    const e = eventAt(seq)
    if (e?.type === "assistant/message") {
      for (
        const block of (e.data as {
          readonly message: { readonly content: ReadonlyArray<{ readonly type: string; readonly id?: string }> }
        }).message.content
      ) {
        if (block.type === "tool-call" && block.id !== undefined) callOwner.set(block.id, seq)
      }
    } else if (e?.type === "tool/result") {
      const callId = (e.data as { readonly message: ToolResultMessage }).message.content[0].toolCallId
      const ownerSeq = callOwner.get(callId)
      if (ownerSeq !== undefined && inRange.has(seq) !== inRange.has(ownerSeq)) {
        return `replacement range separates tool call ${callId} from its result`
      }
    }
  }
  return undefined
}
