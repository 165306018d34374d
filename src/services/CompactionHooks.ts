/**
 * The compaction hooks (issue 28 item 7): waterfalls registered on `Compaction`, composed like the
 * agent's other hooks (first registered outermost, `next` at most once, SPEC 8.7). A pre-compaction
 * listener may veto the compaction or add instructions for its summary; a post-compaction listener
 * may add context, which enters the model's history as one `user/message` with source
 * `{kind: "compaction-context", trigger}`. A listener's failure is a defect (in a trigger's
 * listener it ends the turn `error`).
 *
 * @since 0.1.0
 */
import type { SessionId } from "../domain/Ids.js"
import type { ContextUsage } from "../internal/compaction/Budget.js"

/**
 * What started a compaction; recorded in its bracket.
 *
 * @since 0.1.0
 * @category models
 */
export type CompactionTrigger = "threshold" | "overflow" | "manual"

/**
 * What a compaction wrote: `prune` (old tool results replaced by placeholders) and/or `summary` (a
 * range replaced by a model-written summary).
 *
 * @since 0.1.0
 * @category models
 */
export type CompactionKind = "prune" | "summary"

/**
 * What one compaction did (`vetoed`: a pre-compaction hook refused it and nothing was written).
 *
 * @since 0.1.0
 * @category models
 */
export interface CompactionReport {
  readonly trigger: CompactionTrigger
  /** The tool results replaced by a placeholder (0: none). */
  readonly pruned: number
  /** The surface range the summary replaced, when a summary was written. */
  readonly summarised?: { readonly start: number; readonly end: number; readonly nodes: number }
  readonly tokensBefore: number
  readonly tokensAfter: number
  /** The reason a pre-compaction hook gave for refusing the compaction. */
  readonly vetoed?: string
}

/**
 * Input of the pre-compaction hook: the session, the turn (`null` between turns), the trigger, the
 * context in use and the focus of a manual compaction.
 *
 * @since 0.1.0
 * @category models
 */
export interface PreCompactInput {
  readonly sessionId: SessionId
  readonly turn: number | null
  readonly trigger: CompactionTrigger
  readonly usage: ContextUsage
  readonly focus: string | undefined
}

/**
 * The decision of the pre-compaction hook: proceed (with instructions added to the summary
 * request), or veto with a reason.
 *
 * @since 0.1.0
 * @category models
 */
export type PreCompactDecision =
  | { readonly _tag: "Proceed"; readonly instructions: ReadonlyArray<string> }
  | { readonly _tag: "Veto"; readonly reason: string }

/**
 * Constructors of {@link PreCompactDecision}.
 *
 * @since 0.1.0
 * @category constructors
 */
export const PreCompactDecision: {
  /** Compact, adding `instructions` to the summary request. */
  readonly proceed: (instructions?: ReadonlyArray<string>) => PreCompactDecision
  /** Do not compact; the report says `vetoed` with `reason`. */
  readonly veto: (reason: string) => PreCompactDecision
} = {
  proceed: (instructions = []) => Object.freeze({ _tag: "Proceed", instructions: Object.freeze([...instructions]) }),
  veto: (reason) => Object.freeze({ _tag: "Veto", reason })
}

/**
 * Input of the post-compaction hook: what the compaction did.
 *
 * @since 0.1.0
 * @category models
 */
export interface PostCompactInput {
  readonly sessionId: SessionId
  readonly turn: number | null
  readonly trigger: CompactionTrigger
  readonly report: CompactionReport
}

/**
 * The context the post-compaction hook adds (empty: none): texts of one `user/message` that enters
 * the step being proposed (threshold) or is injected for the next step (manual); after an overflow,
 * added to the system prompt of the retried request and the later ones until the next compaction.
 *
 * @since 0.1.0
 * @category models
 */
export type PostCompactContext = ReadonlyArray<string>

/**
 * The source kind of the message that carries the post-compaction hook's context.
 *
 * @since 0.1.0
 * @category constants
 */
export const COMPACTION_CONTEXT_SOURCE_KIND = "compaction-context"
