/**
 * The options of `Compaction` and of a manual compaction, and its failures (issue 28).
 *
 * @since 0.1.0
 */
import type { Context, Duration } from "effect"
import type {
  AgentBusy,
  AgentDisposed,
  DuplicateMessage,
  InvalidEvent,
  MaintenanceAborted,
  ModelError,
  PersistenceError
} from "../domain/Errors.js"
import type { Model } from "./Model.js"

/**
 * Options of summarising compaction.
 *
 * @since 0.1.0
 * @category models
 */
export interface SummaryOptions {
  /** A model for summaries instead of the session's (e.g. a cheaper one): its service and the names its requests carry. */
  readonly model?: { readonly service: Context.Tag.Service<Model>; readonly provider: string; readonly model: string }
  /** Tokens of the newest history that a summary never replaces (default min(20,000, window / 4)). */
  readonly keepRecentTokens?: number
  /** `user/message` source kinds never replaced by a summary (default `["system", "instructions"]`). */
  readonly pinnedSources?: ReadonlyArray<string>
  /** The most tokens a summary may take (default min(8,000, window / 8)). */
  readonly maxTokens?: number
  /** How long a summary request may take (default 5 minutes). */
  readonly timeout?: Duration.DurationInput
}

/**
 * Options of compaction. Token figures default to fractions of the window, capped.
 *
 * @since 0.1.0
 * @category models
 */
export interface CompactionOptions {
  /** The model's context window in tokens (default: the built-in table for the model in use). */
  readonly contextWindow?: number
  /** The model assumed before any request names one (for the window table). */
  readonly model?: string
  /** The most characters of text a tool result shows the model (default 50,000, at most the window in tokens). */
  readonly maxToolResultChars?: number
  /** Per-tool caps by tool name, overriding `maxToolResultChars` (`Infinity`: no cap). */
  readonly toolResultLimits?: Readonly<Record<string, number>>
  /** The fraction of the window at which a pre-step compacts (default 0.8). */
  readonly threshold?: number
  /** Tokens of the most recent tool results that are never pruned (default min(40,000, window / 4)). */
  readonly protectRecentTokens?: number
  /** A threshold prune happens only when it frees at least this many tokens (default min(20,000, window / 20)). */
  readonly minimumPruneTokens?: number
  /** Tools whose results are never pruned. */
  readonly protectedTools?: ReadonlyArray<string>
  /** Consecutive failed automatic compactions after which automatic compaction stops (default 3). */
  readonly maxConsecutiveFailures?: number
  /** Whether the model has `read_history`: placeholders and cut notes then say how to read back (set by `Agent.layer`'s `readHistory`). */
  readonly readHistory?: boolean
  /** Summarising compaction (on by default, with the session's model); `false`: prune only. */
  readonly summary?: false | SummaryOptions
}

/**
 * Options of a manual compaction.
 *
 * @since 0.1.0
 * @category models
 */
export interface CompactOptions {
  /** What the summary should keep in view (e.g. "the failing migration test"). */
  readonly focus?: string
}

/**
 * Failures of a manual compaction (`ModelError`: the summary request failed or timed out).
 *
 * @since 0.1.0
 * @category models
 */
export type CompactError =
  | AgentBusy
  | MaintenanceAborted
  | PersistenceError
  | AgentDisposed
  | InvalidEvent
  | DuplicateMessage
  | ModelError
