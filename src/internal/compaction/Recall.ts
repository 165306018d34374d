/**
 * Recall (issue 28 item 6): what the `read_history` tool shows the model of its own log, so nothing
 * compacted is lost to it. Three ways in: a seq range (`from`, `to`), a search text (`query`), and
 * the whole output of one tool call (`toolCallId`, the full text a tool-result cap kept).
 *
 * Only message events are shown (`user/message`, `assistant/message`, `tool/result`); those no
 * longer on the surface are marked `shadowed`. Every page is bounded by a character budget and ends
 * with the exact call that reads on, so a page never exceeds what a tool result may show.
 *
 * @since 0.1.0
 */
import type { EventOf, SessionEvent, SurfaceOp } from "../../domain/Event.js"
import { messageOf } from "../../domain/Surface.js"
import type { Message } from "../../domain/Values.js"
import { rangeCall, READ_HISTORY, recallCall, toolCallCall } from "./RecallCall.js"
import { CAP_META_KEY } from "./ToolResultCap.js"

export { READ_HISTORY } from "./RecallCall.js"

/**
 * The default and largest page, in characters.
 *
 * @since 0.1.0
 * @category constants
 */
export const DEFAULT_PAGE_CHARS = 10_000

/**
 * The smallest page a caller may ask for, in characters.
 *
 * @since 0.1.0
 * @category constants
 */
export const MIN_PAGE_CHARS = 500

/**
 * The log a recall reads: its length, its events by seq and its surface.
 *
 * @since 0.1.0
 * @category models
 */
export interface RecallView {
  readonly length: number
  readonly eventAt: (seq: number) => SessionEvent | undefined
  /** The surface's seqs: the first `length` elements of `buffer`. */
  readonly surface: { readonly length: number; readonly buffer: ArrayLike<number> }
}

/**
 * A request: a range, a search or one call's output; `offset` continues a long text.
 *
 * @since 0.1.0
 * @category models
 */
export interface RecallRequest {
  readonly from?: number | undefined
  readonly to?: number | undefined
  readonly query?: string | undefined
  readonly toolCallId?: string | undefined
  readonly offset?: number | undefined
  readonly maxChars?: number | undefined
}

/**
 * A page of recall: its text, and whether the request was refused (the text says why).
 *
 * @since 0.1.0
 * @category models
 */
export interface RecallPage {
  readonly text: string
  readonly isError: boolean
}

const opOf = (event: SessionEvent): SurfaceOp | undefined => (event as { readonly surfaceOp?: SurfaceOp }).surfaceOp

const refuse = (text: string): RecallPage => ({ text: `read_history: ${text}`, isError: true })

const call = recallCall

const blockText = (block: Message["content"][number], names: Map<string, string>): string => {
  switch (block.type) {
    case "text":
      return block.text
    case "reasoning":
      return `(reasoning) ${block.text}`
    case "image":
      return "[image]"
    case "tool-call":
      names.set(block.id, block.name)
      return `→ ${block.name} ${block.arguments} (call ${block.id})`
    case "tool-result":
      return block.content.map((inner) => (inner.type === "text" ? inner.text : "[image]")).join("\n")
  }
}

/** The full text a cap kept for a result, when it was capped. */
const cutTextOf = (event: EventOf<"tool/result">): string | undefined => {
  const meta = event.data.meta
  if (typeof meta !== "object" || meta === null || Array.isArray(meta)) return undefined
  const record = (meta as { readonly [k: string]: unknown })[CAP_META_KEY]
  if (typeof record !== "object" || record === null) return undefined
  const text = (record as { readonly text?: unknown }).text
  return typeof text === "string" ? text : undefined
}

interface Entry {
  readonly seq: number
  readonly label: string
  readonly body: string
  /** The text searched: the body without `read_history`'s own calls. */
  readonly searchable: string
  /** A `read_history` result: never searched (it would match every later search for its query). */
  readonly ownResult: boolean
}

/** The entry of a message event, or `undefined` for any other event. */
const entryOf = (event: SessionEvent, names: Map<string, string>, onSurface: boolean): Entry | undefined => {
  const message = messageOf(event)
  if (message === undefined) return undefined
  const where = onSurface ? "" : " [shadowed]"
  switch (event.type) {
    case "user/message": {
      const source = (event as EventOf<"user/message">).data.source.kind
      const body = message.content.map((b) => blockText(b, names)).join("\n")
      const op = opOf(event)
      const replaces = typeof op === "object" ? ` (replaces ${op.start}-${op.end})` : ""
      return { seq: event.seq, label: `user [${source}]${replaces}${where}`, body, searchable: body, ownResult: false }
    }
    case "assistant/message": {
      const parts = message.content.map((b) => blockText(b, names))
      const searchable = message.content
        .filter((b) => !(b.type === "tool-call" && b.name === READ_HISTORY))
        .map((b) => blockText(b, names))
        .join("\n")
      return { seq: event.seq, label: `assistant${where}`, body: parts.join("\n"), searchable, ownResult: false }
    }
    case "tool/result": {
      const block = (event as EventOf<"tool/result">).data.message.content[0]
      const name = names.get(block.toolCallId) ?? "tool"
      const body = blockText(block, names)
      const op = opOf(event)
      const pruned = typeof op === "object" ? ` (replaces ${op.start})` : ""
      const status = block.isError ? " error" : ""
      return {
        seq: event.seq,
        label: `tool result${status} of ${name} (call ${block.toolCallId})${pruned}${where}`,
        body,
        searchable: body,
        ownResult: name === READ_HISTORY
      }
    }
    default:
      return undefined
  }
}

const surfaceSet = (view: RecallView): Set<number> => {
  const set = new Set<number>()
  for (let i = 0; i < view.surface.length; i++) set.add(view.surface.buffer[i]!)
  return set
}

// The framing lines of a page (its title and the call that reads on) come out of its size.
const FRAMING = 300

const pageSize = (request: RecallRequest, limit: number): number =>
  Math.max(MIN_PAGE_CHARS, Math.min(limit, request.maxChars ?? limit)) - FRAMING

const isSeq = (n: number | undefined): boolean => n === undefined || (Number.isInteger(n) && n >= 0)

const fmt = (n: number): string => n.toLocaleString("en-US")

/** The seq range of a request, checked against the log. */
const rangeOf = (view: RecallView, request: RecallRequest): { from: number; to: number } | RecallPage => {
  const last = view.length - 1
  if (!isSeq(request.from) || !isSeq(request.to)) return refuse("from and to must be non-negative integers (seqs)")
  const from = request.from ?? 0
  const to = Math.min(request.to ?? last, last)
  if (last < 0) return refuse("the session log is empty")
  if (from > last) return refuse(`from ${from} is past the end of the log (its seqs are 0-${last})`)
  if (request.to !== undefined && request.to < from) {
    return refuse(`to ${request.to} is before from ${from}; give from ≤ to`)
  }
  return { from, to }
}

/** Tool names by call id, from the assistant messages before `seq`. */
const namesBefore = (view: RecallView, seq: number): Map<string, string> => {
  const names = new Map<string, string>()
  for (let s = 0; s < seq; s++) {
    const event = view.eventAt(s)
    if (event?.type !== "assistant/message") continue
    for (const block of (event as EventOf<"assistant/message">).data.message.content) {
      if (block.type === "tool-call") names.set(block.id, block.name)
    }
  }
  return names
}

const readRange = (view: RecallView, request: RecallRequest, limit: number): RecallPage => {
  const range = rangeOf(view, request)
  if ("text" in range) return range
  const { from, to } = range
  const offset = request.offset ?? 0
  if (!isSeq(offset)) return refuse("offset must be a non-negative integer (characters)")
  const budget = pageSize(request, limit)
  const onSurface = surfaceSet(view)
  const names = namesBefore(view, from)
  const lines: Array<string> = []
  let used = 0
  let shown = 0
  let next: string | undefined
  for (let seq = from; seq <= to; seq++) {
    const event = view.eventAt(seq)
    if (event === undefined) continue
    const entry = entryOf(event, names, onSurface.has(seq))
    if (entry === undefined) continue
    const start = shown === 0 ? offset : 0
    if (start > 0 && start >= entry.body.length) {
      return refuse(`offset ${start} is past the end of seq ${seq}'s text (${fmt(entry.body.length)} characters)`)
    }
    const head = `#${seq} ${entry.label}${start > 0 ? ` (from character ${fmt(start)})` : ""}:\n`
    const room = budget - used - head.length
    const rest = entry.body.length - start
    if (rest <= room) {
      lines.push(head + entry.body.slice(start))
      used += head.length + rest + 1
      shown += 1
      continue
    }
    if (shown > 0) {
      next = rangeCall(seq, to)
      break
    }
    // The first entry does not fit: show a part of it and continue inside it.
    const part = Math.max(1, room)
    lines.push(`${head}${entry.body.slice(start, start + part)}`)
    shown += 1
    next = call({ from: seq, to, offset: start + part })
    if (start + part >= entry.body.length) next = seq < to ? rangeCall(seq + 1, to) : undefined
    break
  }
  const title = `read_history: seqs ${from}-${to} (messages only; [shadowed]: no longer in your context)`
  if (shown === 0) return { text: `${title}\nno messages in this range`, isError: false }
  const more = next === undefined ? "" : `\n[page full; read on with ${next}]`
  return { text: `${title}\n${lines.join("\n")}${more}`, isError: false }
}

const SNIPPET = 120
const MAX_QUERY_CHARS = 200
const SNIPPETS_PER_ENTRY = 2

const snippetsOf = (text: string, lower: string, needle: string): Array<string> => {
  const out: Array<string> = []
  let at = lower.indexOf(needle)
  while (at >= 0 && out.length < SNIPPETS_PER_ENTRY) {
    const start = Math.max(0, at - SNIPPET)
    const end = Math.min(text.length, at + needle.length + SNIPPET)
    out.push(`${start > 0 ? "…" : ""}${text.slice(start, end).replace(/\s+/g, " ")}${end < text.length ? "…" : ""}`)
    at = lower.indexOf(needle, end)
  }
  return out
}

const search = (view: RecallView, request: RecallRequest, limit: number): RecallPage => {
  const query = request.query!.trim()
  if (query === "") return refuse("query is empty; give the text to search for")
  if (query.length > MAX_QUERY_CHARS) {
    return refuse(`query is longer than ${MAX_QUERY_CHARS} characters; search for a shorter text`)
  }
  const range = rangeOf(view, request)
  if ("text" in range) return range
  const { from, to } = range
  const budget = pageSize(request, limit)
  const needle = query.toLowerCase()
  const onSurface = surfaceSet(view)
  const names = namesBefore(view, from)
  const lines: Array<string> = []
  let used = 0
  let next: string | undefined
  for (let seq = from; seq <= to; seq++) {
    const event = view.eventAt(seq)
    if (event === undefined) continue
    const entry = entryOf(event, names, onSurface.has(seq))
    if (entry === undefined || entry.ownResult) continue
    const lower = entry.searchable.toLowerCase()
    if (!lower.includes(needle)) continue
    const text = `#${seq} ${entry.label}:\n  ${snippetsOf(entry.searchable, lower, needle).join("\n  ")}`
    if (used + text.length > budget && lines.length > 0) {
      next = call({ query, from: seq, to })
      break
    }
    lines.push(text.slice(0, budget))
    used += text.length + 1
  }
  const title = `read_history: matches of ${JSON.stringify(query)} in seqs ${from}-${to}`
  if (lines.length === 0) return { text: `${title}\nno matches`, isError: false }
  const more = next === undefined ? "" : `\n[page full; more matches with ${next}]`
  return {
    text: `${title}\n${lines.join("\n")}${more}\n[read a whole message with ${READ_HISTORY} {"from": SEQ, "to": SEQ}]`,
    isError: false
  }
}

const readCall = (view: RecallView, request: RecallRequest, limit: number): RecallPage => {
  const id = request.toolCallId!
  const offset = request.offset ?? 0
  if (!isSeq(offset)) return refuse("offset must be a non-negative integer (characters)")
  // The result the loop wrote for the call (a pruned copy of it is a later replacement).
  let found: EventOf<"tool/result"> | undefined
  let name = "tool"
  for (let seq = 0; seq < view.length; seq++) {
    const event = view.eventAt(seq)
    if (event?.type === "assistant/message") {
      for (const block of (event as EventOf<"assistant/message">).data.message.content) {
        if (block.type === "tool-call" && block.id === id) name = block.name
      }
    }
    if (event?.type !== "tool/result" || opOf(event) !== "append") continue
    const result = event as EventOf<"tool/result">
    if (result.data.message.content[0].toolCallId === id) {
      found = result
      break
    }
  }
  if (found === undefined) return refuse(`no tool result of call ${JSON.stringify(id)} in this session`)
  const text = cutTextOf(found) ?? blockText(found.data.message.content[0], new Map())
  if (offset > 0 && offset >= text.length) {
    return refuse(`offset ${offset} is past the end of the output of call ${id} (${fmt(text.length)} characters)`)
  }
  const budget = pageSize(request, limit)
  const end = Math.min(text.length, offset + budget)
  const more = end < text.length ? `\n[page full; read on with ${toolCallCall(id, end)}]` : ""
  return {
    text: `read_history: full output of call ${id} (${name}, seq ${found.seq}), characters ${fmt(offset)}-${
      fmt(end)
    } of ${fmt(text.length)}:\n${text.slice(offset, end)}${more}`,
    isError: false
  }
}

/**
 * One page of recall for a request, never longer than `limit` characters of log text plus its
 * framing lines; a refusal for a request that names nothing, or a bad range, offset or call.
 *
 * @since 0.1.0
 * @category constructors
 */
export const recall = (view: RecallView, request: RecallRequest, limit: number = DEFAULT_PAGE_CHARS): RecallPage => {
  if (request.toolCallId !== undefined) return readCall(view, request, limit)
  if (request.query !== undefined) return search(view, request, limit)
  if (request.from === undefined && request.to === undefined) {
    return refuse(
      `give a seq range (${rangeCall(10, 20)}), a search text ({"query": "..."}) or a tool call ({"toolCallId": "..."})`
    )
  }
  return readRange(view, request, limit)
}
