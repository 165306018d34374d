/**
 * The cap on a tool result's text at the loop boundary (issue 28 item 2).
 *
 * The `ToolPost` output is what the `tool/result` event records (SPEC 4.6 COMMIT), so the model's
 * view and the log's message are one value (G7). The cap therefore keeps the full text on the same
 * event, in its `meta` (which SPEC 4.6 lets `ToolPost` set), and gives the message a head and a
 * tail of it with a note saying what was cut and where the whole text is kept.
 *
 * @since 0.1.0
 */
import type { Json } from "../../domain/Json.js"
import type { NormalizedToolOutput } from "../../domain/Tool.js"
import type { ImageBlock, TextBlock } from "../../domain/Values.js"
import { toolCallCall } from "./RecallCall.js"

/**
 * The default cap on a tool result's text, in characters.
 *
 * @since 0.1.0
 * @category constants
 */
export const DEFAULT_MAX_TOOL_RESULT_CHARS = 50_000

/**
 * The `meta` key under which a capped result keeps its full text.
 *
 * @since 0.1.0
 * @category constants
 */
export const CAP_META_KEY = "tiller/cut"

/**
 * What a capped result records under {@link CAP_META_KEY}.
 *
 * @since 0.1.0
 * @category models
 */
export interface CutRecord {
  /** The characters of the full text. */
  readonly characters: number
  /** The characters shown from its start and from its end. */
  readonly head: number
  readonly tail: number
  /** The full text (the text blocks joined with a newline). */
  readonly text: string
}

const format = (n: number): string => n.toLocaleString("en-US")

/**
 * The note placed between the head and the tail: with `recall`, the exact `read_history` call that
 * reads the missing part (from `head`); without, advice to ask the tool for less.
 *
 * @since 0.1.0
 * @category constructors
 */
export const cutNote = (omitted: number, total: number, callId: string, head = 0, recall = false): string =>
  `\n\n[… ${format(omitted)} of ${format(total)} characters cut from the middle of this tool result. ` +
  `The full output is kept in the session log (tool result of call ${callId}). ` +
  (recall
    ? `To see the missing part, read it with ${toolCallCall(callId, head)}.]\n\n`
    : `To see the missing part, call the tool again with a narrower request (a line range, a filter or a smaller page).]\n\n`)

/**
 * The output capped to `limit` characters of text (head and tail, 60/40, plus the note), with the
 * full text in `meta`; the same object when its text fits. `recall`: the note names `read_history`.
 *
 * @since 0.1.0
 * @category combinators
 */
export const capToolOutput = (
  output: NormalizedToolOutput,
  limit: number,
  callId: string,
  recall = false
): NormalizedToolOutput => {
  const texts: Array<string> = []
  for (const block of output.content) if (block.type === "text") texts.push(block.text)
  let total = texts.length === 0 ? 0 : texts.length - 1
  for (const text of texts) total += text.length
  if (total <= limit) return output
  const text = texts.join("\n")
  const head = Math.ceil(limit * 0.6)
  const tail = Math.max(0, limit - head)
  const shown = text.slice(0, head) + cutNote(total - head - tail, total, callId, head, recall) +
    (tail > 0 ? text.slice(total - tail) : "")
  // The text blocks become one block where the first one was; images keep their places.
  const content: Array<TextBlock | ImageBlock> = []
  let placed = false
  for (const block of output.content) {
    if (block.type !== "text") content.push(block)
    else if (!placed) {
      content.push({ type: "text", text: shown })
      placed = true
    }
  }
  const record: Json = { characters: total, head, tail, text }
  const meta: Json = output.meta === undefined
    ? { [CAP_META_KEY]: record }
    : typeof output.meta === "object" && output.meta !== null && !Array.isArray(output.meta)
    ? { ...(output.meta as { readonly [k: string]: Json }), [CAP_META_KEY]: record }
    : { [CAP_META_KEY]: record, meta: output.meta }
  return { ...output, content, meta }
}
