/**
 * Summarising compaction (issue 28 item 4): which surface range a summary replaces, and the request
 * that asks a model for it.
 *
 * The range starts after the last pinned message (instructions are never replaced) and ends before a
 * recent tail kept by tokens. It ends just before a `user/message` or `assistant/message` node, never
 * before a `tool/result`: a step's results follow its assistant message directly on the surface, so
 * such a cut never separates a tool call from its result (and a range never starts with a result).
 * Nodes of an open step are never in it. A previous summary inside the range is updated, not
 * summarised again: the request shows it apart, as the summary to update.
 *
 * The request is one user message holding a transcript of the range (tool results shortened, a
 * pruned result read from its original in the log) and the instruction, so that any model, with or
 * without the session's tools, can answer it, and so that it fits the window.
 *
 * @since 0.1.0
 */
import { Effect, Stream } from "effect"
import { ModelError } from "../../domain/Errors.js"
import type { EventOf, SessionEvent } from "../../domain/Event.js"
import { messageOf } from "../../domain/Surface.js"
import type { LlmFailure, Message, StreamChunk } from "../../domain/Values.js"
import { tokensOfMessage } from "./Budget.js"
import type { LogView } from "./Prune.js"
import { PRUNED_PREFIX } from "./Prune.js"
import { rangeCall } from "./RecallCall.js"

/**
 * The source kind of a summary `user/message` (SPEC 6.7).
 *
 * @since 0.1.0
 * @category constants
 */
export const SUMMARY_SOURCE_KIND = "compaction"

/**
 * The source kind of the message of a summary request (never logged; a model may recognise it).
 *
 * @since 0.1.0
 * @category constants
 */
export const SUMMARY_REQUEST_SOURCE_KIND = "compaction-request"

/**
 * The `user/message` source kinds that are never replaced by default: instructions.
 *
 * @since 0.1.0
 * @category constants
 */
export const DEFAULT_PINNED_SOURCES: ReadonlyArray<string> = ["system", "instructions"]

/**
 * The rules of a summary range.
 *
 * @since 0.1.0
 * @category models
 */
export interface SummaryRules {
  /** Tokens of the newest surface nodes that stay verbatim. */
  readonly keepRecentTokens: number
  /** `user/message` source kinds that are never replaced (instructions). */
  readonly pinnedSources: ReadonlySet<string>
  /** The seq of the open step's `step/start`, or −1 when no step is open. */
  readonly openStepStart: number
}

/**
 * A range to summarise: the span of log seqs it covers (`start` ≤ `end`), its first and last surface
 * nodes (the replace op's endpoints, in surface order), every shadowed seq, their estimated tokens,
 * and the previous summary inside it (its seq and text).
 *
 * The span covers the originals: a replacement node in the range (a previous summary, a pruned
 * result) counts by the messages it replaced, so `read_history` over the span reads all of them.
 * Surface order is not seq order (a summary written late sits first), so the span is never taken
 * from the endpoints.
 *
 * @since 0.1.0
 * @category models
 */
export interface SummaryRange {
  /** The lowest log seq the summary covers. */
  readonly start: number
  /** The highest log seq the summary covers (never below `start`). */
  readonly end: number
  /** The range's first surface node (the replace op's `start`). */
  readonly first: number
  /** The range's last surface node (the replace op's `end`). */
  readonly last: number
  readonly seqs: ReadonlyArray<number>
  readonly tokens: number
  readonly previous: { readonly seq: number; readonly text: string } | undefined
}

const sourceKind = (event: SessionEvent | undefined): string | undefined =>
  event?.type === "user/message"
    ? (event.data as { readonly source: { readonly kind: string } }).source.kind
    : undefined

const textOf = (message: Message): string =>
  message.content.map((block) => (block.type === "text" ? block.text : block.type === "image" ? "[image]" : "")).join(
    ""
  )

/**
 * The seq of the open step's `step/start`, or −1.
 *
 * @since 0.1.0
 * @category getters
 */
export const openStepStartOf = (length: number, eventAt: (seq: number) => SessionEvent | undefined): number => {
  for (let seq = length - 1; seq >= 0; seq--) {
    const type = eventAt(seq)?.type
    if (type === "step/start") return seq
    if (type === "step/end" || type === "turn/end") return -1
  }
  return -1
}

/**
 * The range a summary would replace, or `undefined` when there is nothing worth summarising (fewer
 * than two nodes, or only the previous summary).
 *
 * @since 0.1.0
 * @category constructors
 */
export const planSummary = (view: LogView, rules: SummaryRules): SummaryRange | undefined => {
  const n = view.surface.length
  const seqAt = (i: number) => view.surface.buffer[i]!
  const typeAt = (i: number) => view.eventAt(seqAt(i))?.type
  // Nodes of the open step stay: the range ends before the first of them.
  let limit = n
  while (limit > 0 && rules.openStepStart >= 0 && seqAt(limit - 1) > rules.openStepStart) limit--
  // The recent tail, by tokens, counted back from the end.
  let kept = 0
  let cut = n
  while (cut > 0 && kept < rules.keepRecentTokens) {
    cut--
    const message = messageOf(view.eventAt(seqAt(cut)))
    kept += message === undefined ? 0 : tokensOfMessage(message)
  }
  cut = Math.min(cut, limit)
  // A safe cut: the first kept node is a user or assistant message. Back before the step's results
  // (keeping them); when that leaves too little to summarise and the results outweigh the tail
  // itself, after them (a large result at the tail's edge is summarised instead of blocking every
  // summary; a tail of ordinary size is kept whole).
  const startBefore = (end: number) => {
    let first = 0
    for (let i = 0; i < end; i++) {
      const kind = sourceKind(view.eventAt(seqAt(i)))
      if (kind !== undefined && rules.pinnedSources.has(kind)) first = i + 1
    }
    // A safe start: never a result whose call stays outside.
    while (first < end && typeAt(first) === "tool/result") first++
    return first
  }
  const at = cut
  while (cut > 0 && typeAt(cut) === "tool/result") cut--
  let start = startBefore(cut)
  // The step the tail's edge falls in (its call and results): past it only when it outweighs the tail.
  let after = at
  while (after < limit && typeAt(after) === "tool/result") after++
  let backed = 0
  for (let i = cut; i < after; i++) {
    const message = messageOf(view.eventAt(seqAt(i)))
    backed += message === undefined ? 0 : tokensOfMessage(message)
  }
  if (cut - start < 2 && backed > rules.keepRecentTokens) {
    cut = after
    start = startBefore(cut)
  }
  if (cut - start < 2) return undefined
  const seqs: Array<number> = []
  let tokens = 0
  let previous: SummaryRange["previous"]
  for (let i = start; i < cut; i++) {
    const seq = seqAt(i)
    const event = view.eventAt(seq)
    seqs.push(seq)
    if (sourceKind(event) === SUMMARY_SOURCE_KIND) {
      previous = { seq, text: summaryBodyOf(textOf(event!.data as Message)) }
    }
    const message = messageOf(event)
    if (message !== undefined) tokens += tokensOfMessage(message)
  }
  const span = originalSpan(view, seqs)
  return { start: span.low, end: span.high, first: seqs[0]!, last: seqs[seqs.length - 1]!, seqs, tokens, previous }
}

const isMessageEvent = (event: SessionEvent | undefined): boolean =>
  event?.type === "user/message" || event?.type === "assistant/message" || event?.type === "tool/result"

/**
 * The lowest and highest seq of the original messages behind surface nodes: a replacement counts by
 * the messages among its `sourceEventSeqs` (followed through earlier replacements), any other node
 * by its own seq.
 */
const originalSpan = (view: LogView, seqs: ReadonlyArray<number>): { readonly low: number; readonly high: number } => {
  let low = Number.POSITIVE_INFINITY
  let high = Number.NEGATIVE_INFINITY
  const seen = new Set<number>()
  const pending = [...seqs]
  while (pending.length > 0) {
    const seq = pending.pop()!
    if (seen.has(seq)) continue
    seen.add(seq)
    const event = view.eventAt(seq)
    const op = (event as { readonly surfaceOp?: unknown } | undefined)?.surfaceOp
    const sources = (event as { readonly sourceEventSeqs?: ReadonlyArray<number> } | undefined)?.sourceEventSeqs
    if (typeof op === "object" && sources !== undefined) {
      const replaced = sources.filter((source) => isMessageEvent(view.eventAt(source)))
      if (replaced.length > 0) {
        pending.push(...replaced)
        continue
      }
    }
    low = Math.min(low, seq)
    high = Math.max(high, seq)
  }
  return { low, high }
}

/**
 * The most characters of one tool result (and of one call's arguments) a transcript shows.
 *
 * @since 0.1.0
 * @category constants
 */
export const TRANSCRIPT_ITEM_CHARS = 2_000

const shorten = (text: string, limit: number): string => {
  if (text.length <= limit) return text
  const head = Math.ceil(limit * 0.7)
  const tail = limit - head
  return `${text.slice(0, head)} […${(text.length - limit).toLocaleString("en-US")} characters…] ${
    text.slice(text.length - tail)
  }`
}

// A pruned result's original, read from the log (its replacement cites it first).
const originalOf = (view: LogView, event: EventOf<"tool/result">): EventOf<"tool/result"> => {
  const inner = event.data.message.content[0].content[0]
  if (inner?.type !== "text" || !inner.text.startsWith(PRUNED_PREFIX)) return event
  const source = event.sourceEventSeqs?.[0]
  const original = source === undefined ? undefined : view.eventAt(source)
  return original?.type === "tool/result" ? original as EventOf<"tool/result"> : event
}

const entryOf = (view: LogView, event: SessionEvent): string | undefined => {
  switch (event.type) {
    case "user/message": {
      const message = event.data as Message
      const kind = message.source.kind
      return `[user${kind === "user" ? "" : ` (${kind})`}] ${textOf(message)}`
    }
    case "assistant/message": {
      const parts: Array<string> = []
      for (const block of (event as EventOf<"assistant/message">).data.message.content) {
        if (block.type === "text" && block.text !== "") parts.push(block.text)
        if (block.type === "tool-call") {
          parts.push(`[calls ${block.name} (${block.id}) with ${shorten(block.arguments, TRANSCRIPT_ITEM_CHARS)}]`)
        }
      }
      return parts.length === 0 ? undefined : `[assistant] ${parts.join("\n")}`
    }
    case "tool/result": {
      const block = originalOf(view, event as EventOf<"tool/result">).data.message.content[0]
      const text = block.content.map((c) => (c.type === "text" ? c.text : "[image]")).join("")
      return `[result of ${block.toolCallId}${block.isError ? ", an error" : ""}] ${
        shorten(text, TRANSCRIPT_ITEM_CHARS)
      }`
    }
    default:
      return undefined
  }
}

/**
 * The transcript of a range for a summary request, within `maxCharacters`: the previous summary
 * apart, then each message on a line of its own; when too long, the oldest entries give way (the
 * log keeps them) and a note says how many.
 *
 * @since 0.1.0
 * @category constructors
 */
export const transcriptOf = (
  view: LogView,
  range: Pick<SummaryRange, "seqs" | "previous">,
  maxCharacters: number
): string => {
  const entries: Array<string> = []
  for (const seq of range.seqs) {
    if (seq === range.previous?.seq) continue
    const event = view.eventAt(seq)
    const entry = event === undefined ? undefined : entryOf(view, event)
    if (entry !== undefined) entries.push(entry)
  }
  const previous = range.previous === undefined
    ? ""
    : `<previous-summary>\n${range.previous.text}\n</previous-summary>\n\n`
  let budget = Math.max(0, maxCharacters - previous.length)
  let from = entries.length
  while (from > 0 && entries[from - 1]!.length + 1 <= budget) budget -= entries[--from]!.length + 1
  const omitted = from === 0
    ? ""
    : `[… ${from} earlier message${from === 1 ? "" : "s"} omitted here; they stay in the session log]\n`
  return `${previous}<conversation>\n${omitted}${entries.slice(from).join("\n")}\n</conversation>`
}

/**
 * The system prompt of a summary request.
 *
 * @since 0.1.0
 * @category constants
 */
export const SUMMARY_SYSTEM =
  "You write the working memory of an AI agent. Summarise the conversation so far so that the agent can continue " +
  "the work from your summary alone. Use these sections: Goal; Decisions; State of the work; Files and tools touched; " +
  "Open questions. Keep names, paths, numbers and commands exact; leave out pleasantries."

/**
 * The final instruction of a summary request: update the previous summary when there is one, with
 * the focus and any instructions of pre-compaction hooks.
 *
 * @since 0.1.0
 * @category constructors
 */
export const summaryInstruction = (
  previous: boolean,
  focus: string | undefined,
  instructions: ReadonlyArray<string> = []
): string => {
  const lines = [
    previous
      ? "Update the previous summary above with what happened in the conversation after it: keep what still holds, " +
        "change what changed, add what is new. Do not summarise the summary."
      : "Summarise the conversation above.",
    "Use the sections Goal, Decisions, State of the work, Files and tools touched, Open questions. Answer with the summary only; call no tool."
  ]
  if (focus !== undefined && focus.trim() !== "") lines.push(`Focus on: ${focus.trim()}`)
  for (const instruction of instructions) if (instruction.trim() !== "") lines.push(instruction.trim())
  return lines.join("\n")
}

const SUMMARY_HEADING = "[Summary of the earlier conversation"

/** A summary message's text without its heading. */
const summaryBodyOf = (text: string): string => {
  if (!text.startsWith(SUMMARY_HEADING)) return text
  const at = text.indexOf("\n\n")
  return at < 0 ? text : text.slice(at + 2)
}

/**
 * The text of the `user/message` that replaces the range (with `recall`, naming the `read_history`
 * call that reads the originals back).
 *
 * @since 0.1.0
 * @category constructors
 */
export const summaryText = (range: Pick<SummaryRange, "start" | "end">, summary: string, recall = false): string =>
  `${SUMMARY_HEADING}: log seqs ${range.start}–${range.end} are compacted into it; the originals stay in the session log` +
  `${recall ? `, read them back with ${rangeCall(range.start, range.end)}` : ""}]\n\n${summary.trim()}`

/**
 * The text of a streamed summary answer; a failed or aborted finish, or an answer without text, is
 * a `ModelError`. Reasoning and tool calls are ignored.
 *
 * @since 0.1.0
 * @category constructors
 */
export const collectSummary = <E>(stream: Stream.Stream<StreamChunk, E>): Effect.Effect<string, E | ModelError> =>
  Effect.flatMap(
    Stream.runFold(stream, { text: "", failure: undefined as LlmFailure | undefined }, (state, chunk) => {
      if (chunk.type === "text-delta") return { ...state, text: state.text + chunk.text }
      if (chunk.type === "finish" && (chunk.finish.kind === "error" || chunk.finish.kind === "aborted")) {
        return { ...state, failure: chunk.finish.failure }
      }
      return state
    }),
    ({ failure, text }) =>
      failure !== undefined
        ? Effect.fail(new ModelError({ failure }))
        : text.trim() === ""
        ? Effect.fail(
          new ModelError({ failure: { message: "the summary model answered with no text", code: "EMPTY_SUMMARY" } })
        )
        : Effect.succeed(text)
  )
