/**
 * The options of a driver, and what the `read_history` option adds to the tools the loop reads.
 *
 * @since 0.1.0
 */
import type { Duration } from "effect"
import { Effect, STM, TRef } from "effect"
import * as GrowOnly from "../domain/GrowOnly.js"
import { contextWindowOf } from "../internal/compaction/Budget.js"
import { DEFAULT_MAX_TOOL_RESULT_CHARS } from "../internal/compaction/ToolResultCap.js"
import { withAgentTool } from "../internal/loop/AgentTool.js"
import type { ToolRegistryShape } from "../internal/loop/ToolRegistry.js"
import type { SessionState } from "../internal/state/SessionState.js"
import type { CompactionOptions } from "./CompactionOptions.js"
import type { ReadHistoryOptions } from "./ReadHistory.js"
import { makeTool as makeReadHistoryTool, ReadHistory } from "./ReadHistory.js"

/**
 * Options of a driver: the request defaults, the retry-delay cap, the step limit, and the
 * `read_history` recall tool (whose pages stay under the compaction's tool-result cap).
 *
 * @since 0.1.0
 * @category models
 */
export interface DriverOptions {
  readonly model?: { readonly provider: string; readonly model: string }
  readonly system?: string
  readonly maxTokens?: number
  readonly temperature?: number
  /**
   * The longest the loop sleeps before retrying a failed request (default 60 s). A `Retry` asking
   * for longer, such as a provider's `retryAfterMs` of an hour, or for forever, is not slept on: the
   * turn ends with the failure code `RETRY_DELAY_TOO_LONG`, whose message says what was asked for.
   */
  readonly maxRetryDelay?: Duration.DurationInput
  /**
   * The most steps one turn runs (default 100; `Infinity` for no limit). A turn that would open one
   * more ends with `error`, failure code `MAX_STEPS`, its message naming the limit.
   */
  readonly maxSteps?: number
  /**
   * Context management (issue 28): with this option the agent also provides `Compaction` (its
   * context budget, the tool-result cap, pruning and summarising compaction on the threshold,
   * overflow and manual triggers, and the compaction hooks).
   */
  readonly compaction?: CompactionOptions
  /**
   * Recall (issue 28): offer the model the built-in `read_history` tool over this agent's own log
   * (a tool of that name in `Tools` takes precedence). With `compaction`, its pages stay under the
   * tool-result cap, and pruned placeholders and cut notes say how to call it.
   */
  readonly readHistory?: boolean | ReadHistoryOptions
}

/**
 * The page limit of `read_history`: its option, under the tool-result cap when compaction is on.
 *
 * @since 0.1.0
 * @category options
 */
export const readHistoryOptions = (options: DriverOptions): ReadHistoryOptions => {
  const own = typeof options.readHistory === "object" ? options.readHistory : {}
  const compaction = options.compaction
  if (compaction === undefined) return own
  const cap = compaction.toolResultLimits?.[ReadHistory.name] ?? compaction.maxToolResultChars ??
    Math.min(
      DEFAULT_MAX_TOOL_RESULT_CHARS,
      compaction.contextWindow ?? contextWindowOf(compaction.model ?? options.model?.model)
    )
  return { ...own, maxChars: Math.min(own.maxChars ?? 10_000, cap) }
}

/**
 * The registry the loop reads: with `read_history` over this session's log when the option is on.
 *
 * @since 0.1.0
 * @category options
 */
export const withReadHistory = (
  registry: ToolRegistryShape,
  session: SessionState["Type"],
  options: DriverOptions
): ToolRegistryShape => {
  if (options.readHistory === undefined || options.readHistory === false) return registry
  const view = Effect.map(STM.commit(TRef.get(session.log)), ({ events, fold }) => ({
    length: events.length,
    eventAt: (seq: number) => GrowOnly.get(events, seq),
    surface: fold.surface
  }))
  return withAgentTool(registry, makeReadHistoryTool(view, readHistoryOptions(options)))
}
