/**
 * The pruning plan (issue 28 item 3): which old `tool/result` contents to replace on the surface by
 * a short placeholder (SPEC 6.7's single-node replacement, `TR~`), without a model call.
 *
 * Walking the surface from its newest node back, the most recent results are protected until their
 * estimated tokens reach `protectRecentTokens`; older results of tools that are not protected, and
 * not already pruned, are the candidates. The plan is empty unless the candidates free at least
 * `minimumTokens`.
 *
 * @since 0.1.0
 */
import type { EventOf, SessionEvent } from "../../domain/Event.js"
import type { ToolResultMessage } from "../../domain/Values.js"
import { tokensOfMessage } from "./Budget.js"
import { rangeCall } from "./RecallCall.js"

/**
 * The start of every placeholder text (how an already pruned result is recognised).
 *
 * @since 0.1.0
 * @category constants
 */
export const PRUNED_PREFIX = "[tool result pruned"

/**
 * The surface and events a plan reads.
 *
 * @since 0.1.0
 * @category models
 */
export interface LogView {
  /** The surface's seqs: the first `length` elements of `buffer` (a `GrowOnly` fits). */
  readonly surface: { readonly length: number; readonly buffer: ArrayLike<number> }
  readonly eventAt: (seq: number) => SessionEvent | undefined
}

/**
 * The rules of a plan.
 *
 * @since 0.1.0
 * @category models
 */
export interface PruneRules {
  readonly protectRecentTokens: number
  readonly minimumTokens: number
  readonly protectedTools: ReadonlySet<string>
  /** Whether the model has `read_history`: the placeholder then says how to read the result back. */
  readonly recall?: boolean
}

/**
 * One result to prune: its event and the replacement's data.
 *
 * @since 0.1.0
 * @category models
 */
export interface PrunedResult {
  readonly seq: number
  readonly tool: string
  readonly tokens: number
  readonly data: EventOf<"tool/result">["data"]
}

/**
 * A plan: the results to prune, oldest first, and the tokens it frees.
 *
 * @since 0.1.0
 * @category models
 */
export interface PrunePlan {
  readonly results: ReadonlyArray<PrunedResult>
  readonly freedTokens: number
}

const textOf = (message: ToolResultMessage): string => {
  let text = ""
  for (const block of message.content[0].content) if (block.type === "text") text += block.text
  return text
}

/**
 * The placeholder that replaces a result's content: with `recall`, the exact `read_history` call
 * that reads the result back; without, advice to call the tool again.
 *
 * @since 0.1.0
 * @category constructors
 */
export const placeholderOf = (tool: string, characters: number, seq: number, recall = false): string =>
  `${PRUNED_PREFIX} to save context: ${characters.toLocaleString("en-US")} characters of ${tool} output; ` +
  `the full result is kept in the session log at seq ${seq}. ` +
  (recall ? `Read it back with ${rangeCall(seq, seq)}.]` : "Call the tool again if you need it.]")

/**
 * The plan for a log view under the given rules.
 *
 * @since 0.1.0
 * @category constructors
 */
export const planPrune = (view: LogView, rules: PruneRules): PrunePlan => {
  // Tool names by call id, from the assistant messages on the surface (a result's call is on the
  // surface with it: replacement ranges never separate them).
  const names = new Map<string, string>()
  for (let i = 0; i < view.surface.length; i++) {
    const event = view.eventAt(view.surface.buffer[i]!)
    if (event?.type !== "assistant/message") continue
    for (const block of (event as EventOf<"assistant/message">).data.message.content) {
      if (block.type === "tool-call") names.set(block.id, block.name)
    }
  }
  const results: Array<PrunedResult> = []
  let recent = 0
  let freedTokens = 0
  for (let i = view.surface.length - 1; i >= 0; i--) {
    const seq = view.surface.buffer[i]!
    const event = view.eventAt(seq)
    if (event?.type !== "tool/result") continue
    const data = (event as EventOf<"tool/result">).data
    const text = textOf(data.message)
    if (text.startsWith(PRUNED_PREFIX)) continue
    const tokens = tokensOfMessage(data.message)
    if (recent < rules.protectRecentTokens) {
      recent += tokens
      continue
    }
    const block = data.message.content[0]
    const tool = names.get(block.toolCallId) ?? "tool"
    if (rules.protectedTools.has(tool)) continue
    const placeholder = placeholderOf(tool, text.length, seq, rules.recall === true)
    const message: ToolResultMessage = {
      ...data.message,
      content: [{ ...block, content: [{ type: "text", text: placeholder }] }]
    }
    const saved = tokens - tokensOfMessage(message)
    if (saved <= 0) continue
    const { meta: _meta, ...rest } = data
    results.push({ seq, tool, tokens: saved, data: { ...rest, message } })
    freedTokens += saved
  }
  if (freedTokens < Math.max(1, rules.minimumTokens)) return { results: [], freedTokens: 0 }
  return { results: results.reverse(), freedTokens }
}
