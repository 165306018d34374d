/**
 * Readable renderings of a session's events: the full timeline that `tiller log` prints (turns,
 * steps, inbox insertions, claims and discards with their sources, tool calls and results, why each
 * turn ended) and the live view of `tiller chat`. Both are folds over the log: the renderer keeps
 * the pending inbox lists, so a claim or discard names the messages it removed.
 *
 * @since 0.1.0
 */
import { Either } from "effect"
import { describeAnswer } from "../domain/Approvals.js"
import * as Cost from "../domain/Cost.js"
import type { EventOf, SessionEvent, SessionHeader } from "../domain/Event.js"
import type { PriceTable } from "../domain/Prices.js"
import type { InboxLists } from "../domain/Splice.js"
import { applySplice, emptyInbox, spliceShape } from "../domain/Splice.js"
import type { MessageSource, StreamChunk, TurnEndReason, Usage } from "../domain/Values.js"

type Block = { readonly type: string; readonly text?: string; readonly content?: ReadonlyArray<Block> }

/**
 * The source of a message in brackets' words: `user`, `cli:inject`, `plugin:prefs`, `tool`.
 *
 * @since 0.1.0
 * @category formatting
 */
export const describeSource = (source: MessageSource): string => {
  const { kind, ...rest } = source
  if (kind === "tool") return "tool"
  const details = Object.values(rest).filter((value): value is string => typeof value === "string")
  return [kind, ...details].join(":")
}

/**
 * The text of message content; images and other non-text blocks are named in brackets.
 *
 * @since 0.1.0
 * @category formatting
 */
export const textOf = (content: ReadonlyArray<Block>): string =>
  content.map((block) =>
    block.type === "text" || block.type === "reasoning"
      ? block.text ?? ""
      : block.type === "tool-result"
      ? textOf(block.content ?? [])
      : `[${block.type}]`
  ).join(" ")

/**
 * Why a turn ended, in words.
 *
 * @since 0.1.0
 * @category formatting
 */
export const describeReason = (reason: TurnEndReason): string => {
  switch (reason.kind) {
    case "completed":
    case "max-tokens":
    case "interrupted":
      return reason.kind
    case "blocked":
      return reason.message === undefined ? "blocked" : `blocked: ${reason.message}`
    case "aborted":
      return `aborted (${reason.reason.kind}${reason.reason.kind === "hook" ? `: ${reason.reason.reason}` : ""})`
    case "error":
      return `error: ${reason.error.message} (${reason.error.code})`
  }
}

/** `text` cut to `maxLines` lines and `maxChars` characters, with a note when cut. */
const preview = (text: string, maxLines: number, maxChars: number): string => {
  const lines = text.split("\n")
  let shown = lines.slice(0, maxLines).join("\n")
  if (shown.length > maxChars) shown = shown.slice(0, maxChars)
  return shown.length < text.length ? `${shown} … [${text.length} chars]` : shown
}

const tokens = (n: unknown): string => (typeof n === "number" ? n.toLocaleString("en-US") : "?")

/** Seqs as a short list: `5, 9, 12` or, past six, the first three, a count and the last. */
const seqList = (seqs: ReadonlyArray<number>): string =>
  seqs.length <= 6 ? seqs.join(", ") : `${seqs.slice(0, 3).join(", ")}, … (${seqs.length - 4} more), ${seqs.at(-1)}`

/**
 * A compaction bracket's event in words: its kind and trigger, the range it replaced, the tokens
 * in use before and after (the `compaction/*` data is open: fields a producer did not write are left out).
 *
 * @since 0.1.0
 * @category formatting
 */
export const describeCompaction = (event: SessionEvent): string => {
  const data = (typeof event.data === "object" && event.data !== null ? event.data : {}) as {
    readonly kind?: unknown
    readonly trigger?: unknown
    readonly focus?: unknown
    readonly tokensBefore?: unknown
    readonly tokensAfter?: unknown
    readonly pruned?: unknown
    readonly replaced?: { readonly start?: unknown; readonly end?: unknown; readonly nodes?: unknown }
    readonly range?: { readonly start?: unknown; readonly end?: unknown; readonly nodes?: unknown }
    readonly provider?: unknown
    readonly model?: unknown
    readonly characters?: unknown
    readonly updates?: unknown
    readonly error?: { readonly message?: unknown }
  }
  const what = `${typeof data.kind === "string" ? data.kind : "compaction"}${
    typeof data.trigger === "string" ? ` (${data.trigger})` : ""
  }`
  const range = (r: typeof data.range) =>
    r !== undefined && typeof r.start === "number" && typeof r.end === "number"
      ? `history ${r.start}-${r.end}${
        typeof r.nodes === "number" ? ` (${r.nodes} node${r.nodes === 1 ? "" : "s"})` : ""
      }`
      : undefined
  switch (event.type) {
    case "compaction/start": {
      const parts = [
        `${what} start`,
        range(data.range) === undefined ? undefined : `replacing ${range(data.range)}`,
        data.tokensBefore === undefined ? undefined : `${tokens(data.tokensBefore)} tokens in use`,
        typeof data.focus === "string" ? `focus: ${preview(data.focus, 1, 200)}` : undefined
      ]
      return parts.filter((p) => p !== undefined).join(" · ")
    }
    case "compaction/summary": {
      const by = typeof data.model === "string"
        ? ` by ${typeof data.provider === "string" ? `${data.provider}:` : ""}${data.model}`
        : ""
      const size = typeof data.characters === "number" ? ` (${tokens(data.characters)} characters)` : ""
      const updates = typeof data.updates === "number" ? `, updating the summary at seq ${data.updates}` : ""
      return `${what} summary written${by}${size}${updates}`
    }
    default: {
      if (data.error !== undefined) {
        return `${what} end: failed (${typeof data.error.message === "string" ? data.error.message : "no message"})`
      }
      const pruned = Array.isArray(data.pruned)
        ? data.pruned.filter((n): n is number => typeof n === "number")
        : undefined
      const replaced = pruned !== undefined
        ? `replaced ${pruned.length} tool result${pruned.length === 1 ? "" : "s"} (seqs ${seqList(pruned)})`
        : range(data.replaced) === undefined
        ? undefined
        : `replaced ${range(data.replaced)}`
      const change = data.tokensBefore === undefined && data.tokensAfter === undefined
        ? undefined
        : `tokens ${tokens(data.tokensBefore)} → ${tokens(data.tokensAfter)}`
      return [`${what} end`, replaced, change].filter((p) => p !== undefined).join(" · ")
    }
  }
}

const clockOf = (time: number): string => new Date(time).toISOString().slice(11, 23)

const quoteList = (
  messages: ReadonlyArray<{ readonly source: MessageSource; readonly content: ReadonlyArray<Block> }>
) => messages.map((m) => `[${describeSource(m.source)}] ${preview(textOf(m.content), 1, 80)}`).join(", ")

/**
 * A stateful renderer: feed it every event of a log in order; it returns the lines to print.
 *
 * @since 0.1.0
 * @category models
 */
export interface Renderer {
  /** The lines for `event` (possibly none); `print: false` only advances the fold. */
  readonly render: (event: SessionEvent, print?: boolean) => ReadonlyArray<string>
  /** The latest turn and step seen, and the pending lists after the last event. */
  readonly position: () => {
    readonly turn: number
    readonly step: number
    readonly inTurn: boolean
    readonly pending: InboxLists
  }
}

interface Fold {
  /** The seq where the session's own inbox starts (a fork's copied seed is before it: SPEC 6.6, D11). */
  readonly seedLength: number
  lists: InboxLists
  turn: number
  step: number
  inTurn: boolean
  readonly toolNames: Map<string, string>
}

/** Advances the fold by one event; returns the messages a splice removed. */
const advance = (fold: Fold, event: SessionEvent) => {
  // A fork child starts with an empty inbox: what its copied seed left pending is not its own.
  if (fold.seedLength > 0 && event.seq === fold.seedLength) fold.lists = emptyInbox
  switch (event.type) {
    case "turn/start":
      fold.turn = (event as EventOf<"turn/start">).data.turn
      fold.step = 0
      fold.inTurn = true
      break
    case "turn/end":
      fold.inTurn = false
      break
    case "step/start":
      fold.step = (event as EventOf<"step/start">).data.step
      break
    case "tool/call": {
      const data = (event as EventOf<"tool/call">).data
      fold.toolNames.set(data.callId, data.name)
      break
    }
    case "agent/inbox/spliced": {
      const applied = applySplice(fold.lists, (event as EventOf<"agent/inbox/spliced">).data)
      if (Either.isRight(applied)) {
        fold.lists = applied.right.lists
        return applied.right.removed
      }
      break
    }
  }
  return []
}

const positionOf = (fold: Fold): ReturnType<Renderer["position"]> => ({
  turn: fold.turn,
  step: fold.step,
  inTurn: fold.inTurn,
  pending: fold.lists
})

const indent = (label: string, text: string, width: number): Array<string> => {
  const [first = "", ...rest] = text.split("\n")
  return [`${label}${first}`, ...rest.map((line) => `${" ".repeat(width)}${line}`)]
}

/**
 * A usage in words: `1,200 in (1,000 cache read, 100 cache write) / 50 out tokens`.
 *
 * @since 0.1.0
 * @category formatting
 */
export const describeTokens = (
  tally: Pick<Cost.Tally, "inputTokens" | "outputTokens" | "cacheReadTokens" | "cacheWriteTokens">
): string => {
  const cache = [
    tally.cacheReadTokens > 0 ? `${tokens(tally.cacheReadTokens)} cache read` : undefined,
    tally.cacheWriteTokens > 0 ? `${tokens(tally.cacheWriteTokens)} cache write` : undefined
  ].filter((s) => s !== undefined)
  return `${tokens(tally.inputTokens)} in${cache.length === 0 ? "" : ` (${cache.join(", ")})`} / ${
    tokens(tally.outputTokens)
  } out tokens`
}

/**
 * The full timeline of `tiller log`: one entry per event except streamed chunks. With `prices`,
 * each answer, each turn's end and the `total` line say what they cost (a fold over the log's
 * usage), or that the model has no price.
 *
 * @since 0.1.0
 * @category constructors
 */
export const timeline = (
  header: SessionHeader,
  prices?: PriceTable
): Renderer & { readonly heading: ReadonlyArray<string>; readonly total: () => ReadonlyArray<string> } => {
  const fold: Fold = {
    seedLength: header.seedLength,
    lists: emptyInbox,
    turn: 0,
    step: 0,
    inTurn: false,
    toolNames: new Map()
  }
  let turnTally = Cost.empty
  let sessionTally = Cost.empty
  let steps = 0
  const stepTally = (event: EventOf<"assistant/message">, usage: Usage): Cost.Tally | undefined => {
    if (prices === undefined) return undefined
    const tally = Cost.tallyOf(usage, event.data.message.source.provider, event.data.message.source.model, prices)
    turnTally = Cost.add(turnTally, tally)
    // A fork's copied seed is billed to the session it came from.
    if (event.seq >= header.seedLength) {
      sessionTally = Cost.add(sessionTally, tally)
      steps++
    }
    return tally
  }
  const total = (): ReadonlyArray<string> =>
    prices === undefined ? [] : [
      `total: ${steps} model response${steps === 1 ? "" : "s"} · ${describeTokens(sessionTally)} · ${
        Cost.describeCost(sessionTally)
      }` +
      (header.seedLength > 0 ? " (the copied seed not included)" : "")
    ]
  const heading = [
    `session ${header.sessionId} · created ${new Date(header.createdAt).toISOString()}`,
    ...(header.parent !== undefined
      ? [
        `forked from ${header.parent.sessionId} at seq ${header.parent.boundary}; seqs 0-${
          header.seedLength - 1
        } are its copied seed`
      ]
      : [])
  ]
  const render = (event: SessionEvent, print = true): ReadonlyArray<string> => {
    const removed = advance(fold, event)
    if (!print) return []
    const head = `${String(event.seq).padStart(5)}  ${clockOf(event.time)}  `
    const entry = (label: string, text: string) => indent(`${head}${label.padEnd(10)} `, text, head.length + 11)
    switch (event.type) {
      case "turn/start":
        turnTally = Cost.empty
        return entry(`turn ${fold.turn}`, "start")
      case "turn/end": {
        const spent = prices === undefined || turnTally.inputTokens + turnTally.outputTokens === 0
          ? ""
          : ` · ${describeTokens(turnTally)} · ${Cost.describeCost(turnTally)}`
        return entry(`turn ${fold.turn}`, `end: ${describeReason((event as EventOf<"turn/end">).data.reason)}${spent}`)
      }
      case "step/start":
      case "step/end": {
        const data = (event as EventOf<"step/start">).data
        return entry(`step ${data.turn}.${data.step}`, event.type === "step/start" ? "start" : "end")
      }
      case "user/message": {
        const e = event as EventOf<"user/message">
        const replaced = typeof e.surfaceOp === "object"
          ? ` (replaces history ${e.surfaceOp.start}-${e.surfaceOp.end})`
          : ""
        return entry(
          "entered",
          `[${describeSource(e.data.source)}] ${preview(textOf(e.data.content), 20, 2000)}${replaced}`
        )
      }
      case "assistant/chunk":
        return []
      case "assistant/message": {
        const data = (event as EventOf<"assistant/message">).data
        const text = textOf(data.message.content.filter((b) => b.type === "text"))
        const calls = data.message.content.filter((b) => b.type === "tool-call").length
        const tally = data.usage === undefined
          ? undefined
          : stepTally(event as EventOf<"assistant/message">, data.usage)
        const note = [
          calls > 0 ? `${calls} tool call${calls === 1 ? "" : "s"}` : undefined,
          data.usage === undefined
            ? undefined
            : tally === undefined
            ? `${data.usage.inputTokens} in / ${data.usage.outputTokens} out tokens`
            : `${describeTokens(tally)}, ${Cost.describeCost(tally)}`,
          data.interrupted === true ? "interrupted" : undefined
        ].filter((s) => s !== undefined)
        return entry("assistant", `${preview(text, 20, 2000)}${note.length > 0 ? ` (${note.join(", ")})` : ""}`)
      }
      case "tool/call": {
        const data = (event as EventOf<"tool/call">).data
        return entry("tool call", `${data.name} ${data.arguments} (${data.callId})`)
      }
      case "tool/result": {
        const e = event as EventOf<"tool/result">
        const block = e.data.message.content[0]
        const name = fold.toolNames.get(block.toolCallId) ?? block.toolCallId
        if (typeof e.surfaceOp === "object") {
          return entry(
            "pruned",
            `${name} result at seq ${e.surfaceOp.start} → ${preview(textOf(block.content), 1, 200)}`
          )
        }
        const status = block.isError ? "error" : "ok"
        return entry("tool done", `${name} ${status}: ${preview(textOf(block.content), 10, 1000)}`)
      }
      case "compaction/start":
      case "compaction/summary":
      case "compaction/end":
        return entry("compact", describeCompaction(event))
      case "request/header": {
        const data = (event as EventOf<"request/header">).data
        const tools = data.header.tools.map((t) => t.name).join(", ")
        return entry(
          "model",
          `${data.header.provider}:${data.header.model} (${data.reason}) · tools: ${tools === "" ? "none" : tools}`
        )
      }
      case "llm/retry": {
        const data = (event as EventOf<"llm/retry">).data
        return entry(
          "retry",
          `attempt ${data.attempt} of step ${data.turn}.${data.step} in ${data.delayMs} ms: ${data.failure.message}`
        )
      }
      case "agent/inbox/spliced": {
        const data = (event as EventOf<"agent/inbox/spliced">).data
        switch (spliceShape(data)) {
          case "insertion":
            return entry("inbox", `+ ${data.target}: ${quoteList(data.inserted)}`)
          case "claim":
            return entry("inbox", `claimed from ${data.target}: ${quoteList(removed)}`)
          case "cancellation":
            return entry("inbox", `discarded from ${data.target}: ${quoteList(removed)}`)
          case "replacement":
            return entry("inbox", `replaced in ${data.target}: ${quoteList(removed)} → ${quoteList(data.inserted)}`)
          default:
            return entry("inbox", JSON.stringify(data))
        }
      }
      case "approval/request": {
        const data = (event as EventOf<"approval/request">).data
        return entry(
          "approval",
          `asked for ${data.tool} ${JSON.stringify(data.input)} (${data.callId}): ${data.reason}`
        )
      }
      case "approval/answer": {
        const data = (event as EventOf<"approval/answer">).data
        return entry("approval", `${data.callId} ${describeAnswer(data)}`)
      }
      case "session/end-seed":
        // A fork's first end-seed closes its copied seed; every later one marks a reopening.
        return header.parent !== undefined && event.seq === header.seedLength
          ? entry("fork", "end of the copied seed; this session continues from here")
          : entry("resumed", "the session was opened again; the events of that run start here")
      default:
        return entry(event.type, JSON.stringify(event.data))
    }
  }
  return { heading, render, total, position: () => positionOf(fold) }
}

/**
 * The live view of `tiller chat`: entered messages, assistant text as it streams, tool calls and
 * results, later steps and how each turn ended. Streamed text arrives without a newline; the view
 * returns fragments and tells whether the output ends mid-line. `seedLength` (the header's) is where
 * the session's own inbox starts: a fork's copied seed leaves nothing pending in it (SPEC 6.6).
 *
 * @since 0.1.0
 * @category constructors
 */
export const chatView = (seedLength = 0): {
  readonly render: (event: SessionEvent, print?: boolean) => string
  /** `text` as a line of its own (after a newline if the output is mid-line). */
  readonly line: (text: string) => string
  readonly position: Renderer["position"]
} => {
  const fold: Fold = { seedLength, lists: emptyInbox, turn: 0, step: 0, inTurn: false, toolNames: new Map() }
  const textBlocks = new Set<number>()
  let midLine = false
  const line = (text: string): string => {
    const out = `${midLine ? "\n" : ""}${text}\n`
    midLine = false
    return out
  }
  const onChunk = (chunk: StreamChunk): string => {
    switch (chunk.type) {
      case "block-start":
        if (chunk.block !== "text") return ""
        textBlocks.add(chunk.index)
        midLine = true
        return "assistant: "
      case "text-delta":
        if (chunk.text.length > 0) midLine = !chunk.text.endsWith("\n")
        return chunk.text
      case "block-end":
        if (!textBlocks.delete(chunk.index) || !midLine) return ""
        midLine = false
        return "\n"
      case "finish":
        return chunk.finish.kind === "stop" ? "" : line(`(model finished: ${chunk.finish.kind})`)
      default:
        return ""
    }
  }
  const render = (event: SessionEvent, print = true): string => {
    advance(fold, event)
    if (!print) return ""
    switch (event.type) {
      case "turn/start":
        return line(statusLine("running", positionOf(fold)))
      case "step/start": {
        const data = (event as EventOf<"step/start">).data
        return data.step > 1 ? line(`  · turn ${data.turn} step ${data.step}`) : ""
      }
      case "turn/end": {
        const reason = (event as EventOf<"turn/end">).data.reason
        return line(`── turn ${fold.turn} ${describeReason(reason)}`)
      }
      case "user/message": {
        const data = (event as EventOf<"user/message">).data
        return line(`» [${describeSource(data.source)}] ${textOf(data.content)}`)
      }
      case "assistant/chunk":
        return onChunk((event as EventOf<"assistant/chunk">).data.chunk)
      case "tool/call": {
        const data = (event as EventOf<"tool/call">).data
        return line(`  → ${data.name} ${data.arguments}`)
      }
      case "compaction/start":
        return line(`  ⋯ compacting: ${describeCompaction(event)}`)
      case "compaction/end":
        return line(`  ⋯ compacted: ${describeCompaction(event)}`)
      case "tool/result": {
        // A pruned result's placeholder: the compaction lines say what happened.
        if (typeof (event as EventOf<"tool/result">).surfaceOp === "object") return ""
        const block = (event as EventOf<"tool/result">).data.message.content[0]
        const name = fold.toolNames.get(block.toolCallId) ?? block.toolCallId
        return line(`  ← ${name}${block.isError ? " (error)" : ""}: ${preview(textOf(block.content), 12, 1500)}`)
      }
      case "llm/retry": {
        const data = (event as EventOf<"llm/retry">).data
        return line(`  (retrying in ${data.delayMs} ms: ${data.failure.message})`)
      }
      case "approval/request": {
        const data = (event as EventOf<"approval/request">).data
        return line(
          `  ? approve ${data.tool} ${JSON.stringify(data.input)}? ${data.reason}. ` +
            `Answer y, n [REASON] or always (or: tiller approve ID ${data.callId} --allow|--deny)`
        )
      }
      case "approval/answer": {
        const data = (event as EventOf<"approval/answer">).data
        return line(`  · ${data.callId} ${describeAnswer(data)}`)
      }
      case "hook/run": {
        // A hook's error or its message for the user (its decisions show as their effects).
        const data = event.data as {
          readonly event?: string
          readonly error?: { readonly message?: string }
          readonly systemMessage?: string
          readonly stop?: string
        }
        if (data.error?.message !== undefined) return line(`  (hook error, ignored: ${data.error.message})`)
        const hook = data.event ?? "hook"
        return [
          ...(data.systemMessage === undefined ? [] : [line(`  (${hook} hook: ${data.systemMessage})`)]),
          ...(data.stop === undefined ? [] : [line(`  (${hook} hook stopped the turn: ${data.stop})`)])
        ].join("")
      }
      default:
        return ""
    }
  }
  return { render, line, position: () => positionOf(fold) }
}

/**
 * What a session has spent, for the status line: `$0.0123 · 12,000 in (10,000 cache read) / 300 out
 * tokens`, or the tokens and `no price for model X`; `undefined` when nothing was billed (no
 * tokens, or only a free model's).
 *
 * @since 0.1.0
 * @category formatting
 */
export const spentNote = (tally: Cost.Tally): string | undefined =>
  tally.inputTokens + tally.outputTokens === 0 || (tally.usd === 0 && tally.unpriced.length === 0)
    ? undefined
    : `${Cost.describeCost(tally)} · ${describeTokens(tally)}`

/**
 * The chat's status line; with `usage`, the share of the context window in use (`ctx 63%`); with
 * `spent`, what the session has cost so far (see `spentNote`); with `approvals`, the calls that wait
 * for an answer (`awaiting approval: c1`).
 *
 * @since 0.1.0
 * @category formatting
 */
export const statusLine = (
  status: "idle" | "running",
  position: ReturnType<Renderer["position"]>,
  usage?: { readonly fraction: number },
  spent?: string,
  approvals?: ReadonlyArray<{ readonly callId: string }>
): string => {
  const where = status === "running"
    ? `turn ${position.turn}${position.step > 0 ? ` step ${position.step}` : ""}`
    : `${position.turn} turn${position.turn === 1 ? "" : "s"}`
  const ctx = usage === undefined ? "" : ` · ctx ${Math.round(usage.fraction * 100)}%`
  const cost = spent === undefined ? "" : ` · ${spent}`
  const awaiting = approvals === undefined || approvals.length === 0
    ? ""
    : ` · awaiting approval: ${approvals.map((a) => a.callId).join(", ")}`
  return `[${status} · ${where}${awaiting} · pending: ${position.pending.nextTurn.length} queued, ${position.pending.nextStep.length} next-step${ctx}${cost}]`
}
