/**
 * `read_history`: the built-in tool that lets the model read back its own session log (issue 28
 * item 6), so nothing compacted is lost to it. An agent offers it with `Agent.layer`'s
 * `readHistory` option; `ReadHistory.tool` builds the same tool over any `SessionLog`.
 *
 * @since 0.1.0
 */
import { Effect, Schema } from "effect"
import type { RecallView } from "../internal/compaction/Recall.js"
import { DEFAULT_PAGE_CHARS, MIN_PAGE_CHARS, READ_HISTORY, recall } from "../internal/compaction/Recall.js"
import { SessionLog } from "./SessionLog.js"
import type { ToolDefinition } from "./Tools.js"
import { Tool } from "./Tools.js"

/**
 * Options of the `read_history` tool.
 *
 * @since 0.1.0
 * @category models
 */
export interface ReadHistoryOptions {
  /** The most characters one call returns (default 10,000; at least 500). Keep it under the tool-result cap. */
  readonly maxChars?: number
}

const Seq = Schema.Int.pipe(Schema.nonNegative())

/**
 * The tool's parameters: a seq range, a search text, or a tool call's id; `offset` continues a
 * long text, `maxChars` asks for a smaller page.
 *
 * @since 0.1.0
 * @category schemas
 */
export const ReadHistoryParameters = Schema.Struct({
  from: Schema.optional(Seq.annotations({ description: "First seq to read (inclusive)" })),
  to: Schema.optional(Seq.annotations({ description: "Last seq to read (inclusive); default: the end of the log" })),
  query: Schema.optional(
    Schema.String.annotations({ description: "Text to search for (case-insensitive) instead of reading a range" })
  ),
  toolCallId: Schema.optional(Schema.String.annotations({ description: "Read the full output of this tool call" })),
  offset: Schema.optional(Seq.annotations({ description: "Character offset to continue a long text from" })),
  maxChars: Schema.optional(
    Schema.Int.pipe(Schema.positive()).annotations({ description: "Largest page to return, in characters" })
  )
})

const DESCRIPTION = "Read back earlier parts of this session that were compacted out of your context " +
  "(pruned tool results, summarised messages, cut tool output). Give a seq range {from, to}, a search " +
  "text {query}, or a tool call id {toolCallId}; long texts come in pages, each ending with the call that reads on."

/**
 * The tool over a view of the log, read anew on every call.
 *
 * @since 0.1.0
 * @category constructors
 */
export const makeTool = (
  view: Effect.Effect<RecallView>,
  options: ReadHistoryOptions = {}
): ToolDefinition<typeof ReadHistoryParameters> => {
  const limit = Math.max(MIN_PAGE_CHARS, Math.floor(options.maxChars ?? DEFAULT_PAGE_CHARS))
  return Tool.make(READ_HISTORY, {
    description: DESCRIPTION,
    parameters: ReadHistoryParameters,
    mode: "parallel",
    execute: (params) =>
      Effect.map(view, (log) => {
        const page = recall(log, params, limit)
        return { content: page.text, isError: page.isError }
      })
  })
}

/**
 * The `read_history` tool.
 *
 * @since 0.1.0
 * @category tools
 */
export const ReadHistory = {
  /** The tool's name, `read_history`. */
  name: READ_HISTORY,
  /** The tool over the `SessionLog` in context (register it with `Tools.register` or `Tools.layer`). */
  tool: (
    options: ReadHistoryOptions = {}
  ): Effect.Effect<ToolDefinition<typeof ReadHistoryParameters>, never, SessionLog> =>
    Effect.map(SessionLog, (log) =>
      makeTool(
        Effect.map(Effect.all([log.events, log.surface]), ([events, surface]) => ({
          length: events.length,
          eventAt: (seq: number) => events[seq],
          surface: { length: surface.length, buffer: surface }
        })),
        options
      ))
} as const
