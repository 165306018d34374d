/**
 * CompactionBrackets: the writers of compaction's two kinds of `compaction/*` bracket (SPEC 6.7),
 * each event through `SessionLog.append`:
 * - a prune: ⟨compaction/start⟩ TR~… ⟨compaction/end⟩, old tool results replaced by placeholders;
 * - a summary: ⟨compaction/start⟩ (the model writes the summary) ⟨compaction/summary⟩ UM~(S)
 *   ⟨compaction/end⟩, a range of the surface replaced by one user message.
 *
 * A bracket interrupted or failed after its start is closed with an error. When to write which is
 * `Compaction`'s policy; this module only plans against the log it is given and writes.
 *
 * @since 0.1.0
 */
import { Duration, Effect } from "effect"
import type { Context } from "effect"
import { ModelError } from "../domain/Errors.js"
import { newUserMessage } from "../domain/Message.js"
import type { ContextUsage } from "../internal/compaction/Budget.js"
import type { LogView, PruneRules } from "../internal/compaction/Prune.js"
import { planPrune } from "../internal/compaction/Prune.js"
import type { SummaryRange } from "../internal/compaction/Summary.js"
import {
  collectSummary,
  SUMMARY_REQUEST_SOURCE_KIND,
  SUMMARY_SOURCE_KIND,
  SUMMARY_SYSTEM,
  summaryInstruction,
  summaryText,
  transcriptOf
} from "../internal/compaction/Summary.js"
import type { CompactionTrigger } from "./CompactionHooks.js"
import type { SummaryOptions } from "./CompactionOptions.js"
import type { Model } from "./Model.js"
import type { SessionLog } from "./SessionLog.js"

/**
 * The log as the plans read it, with its length.
 *
 * @since 0.1.0
 * @category models
 */
export interface Snapshot extends LogView {
  readonly length: number
}

/**
 * What the bracket writers need of a compaction: the log, how to read it and its usage, the plans'
 * rules, and the summary's model and options.
 *
 * @since 0.1.0
 * @category models
 */
export interface BracketWriters {
  readonly log: Context.Tag.Service<SessionLog>
  /** The log now. */
  readonly snapshot: Effect.Effect<Snapshot>
  /** The context usage after the events of `view` (reads each new event once). */
  readonly refresh: (view: Snapshot) => ContextUsage
  /** The context usage now. */
  readonly contextUsage: Effect.Effect<ContextUsage>
  /** The prune rules of a trigger for a window. */
  readonly rules: (window: number, trigger: CompactionTrigger) => PruneRules
  /** The summary's range for a trigger, or none. */
  readonly planSummary: (view: Snapshot, window: number, trigger: CompactionTrigger) => SummaryRange | undefined
  /** The summary options; `undefined`: summaries are off. */
  readonly summary: SummaryOptions | undefined
  /** The session's model, used when the summary options name none. */
  readonly model: Context.Tag.Service<Model>
  /** The provider and model names the session's requests carry. */
  readonly names: () => { readonly provider: string; readonly model: string }
  /** Whether the model has `read_history` (the summary then says how to read back). */
  readonly recall: boolean
}

const sortedUnique = (seqs: ReadonlyArray<number>) => Array.from(new Set(seqs)).sort((a, b) => a - b)

// An interrupted or failed bracket is closed with an error (SPEC 6.7).
const closeOnFailure = <A, E, R>(writers: BracketWriters, body: Effect.Effect<A, E, R>, bracket: object) =>
  Effect.onExit(body, (exit) =>
    exit._tag === "Success"
      ? Effect.void
      : Effect.ignore(
        writers.log.append({
          type: "compaction/end",
          data: { ...bracket, error: { message: "compaction did not complete" } }
        })
      ))

/**
 * One prune: plan, then ⟨compaction/start⟩ TR~… ⟨compaction/end⟩. The number of results pruned (0:
 * nothing to prune, nothing written).
 *
 * @since 0.1.0
 * @category constructors
 */
export const prune = (writers: BracketWriters, trigger: CompactionTrigger, turn: number | null) =>
  Effect.gen(function*() {
    const { log } = writers
    const view = yield* writers.snapshot
    const before = writers.refresh(view)
    const plan = planPrune(view, writers.rules(before.window, trigger))
    if (plan.results.length === 0) return 0
    const bracket = { turn, kind: "prune", trigger }
    const start = yield* log.append({ type: "compaction/start", data: { ...bracket, tokensBefore: before.used } })
    return yield* closeOnFailure(
      writers,
      Effect.gen(function*() {
        for (const result of plan.results) {
          yield* log.append({
            type: "tool/result",
            data: result.data,
            surfaceOp: { op: "replace", start: result.seq, end: result.seq },
            sourceEventSeqs: [result.seq, start.seq]
          })
        }
        const after = yield* writers.contextUsage
        yield* log.append({
          type: "compaction/end",
          data: {
            ...bracket,
            pruned: plan.results.map((r) => r.seq),
            tokensBefore: before.used,
            tokensAfter: after.used
          }
        })
        return plan.results.length
      }),
      bracket
    )
  })

/**
 * One summary: ⟨compaction/start⟩ (the model writes the summary) ⟨compaction/summary⟩ UM~(S)
 * ⟨compaction/end⟩. The range replaced, or none when there is nothing to summarise.
 *
 * @since 0.1.0
 * @category constructors
 */
export const summarise = (
  writers: BracketWriters,
  trigger: CompactionTrigger,
  position: { readonly turn: number | null; readonly step: number },
  focus: string | undefined,
  instructions: ReadonlyArray<string>
) =>
  Effect.gen(function*() {
    const { log, summary } = writers
    const view = yield* writers.snapshot
    const before = writers.refresh(view)
    const range = writers.planSummary(view, before.window, trigger)
    if (range === undefined || summary === undefined) return undefined
    const { turn } = position
    const bracket = { turn, kind: "summary", trigger }
    const replaced = { start: range.start, end: range.end, nodes: range.seqs.length }
    const start = yield* log.append({
      type: "compaction/start",
      data: { ...bracket, tokensBefore: before.used, range: replaced, ...(focus === undefined ? {} : { focus }) }
    })
    return yield* closeOnFailure(
      writers,
      Effect.gen(function*() {
        const maxTokens = summary.maxTokens ?? Math.max(256, Math.min(8_000, Math.floor(before.window / 8)))
        const names = summary.model ?? writers.names()
        const transcript = transcriptOf(view, range, Math.max(4_000, Math.floor((before.window - maxTokens) * 4 * 0.8)))
        const request = yield* newUserMessage({
          content: [
            { type: "text", text: transcript },
            { type: "text", text: summaryInstruction(range.previous !== undefined, focus, instructions) }
          ],
          source: { kind: SUMMARY_REQUEST_SOURCE_KIND, trigger }
        })
        const timeout = Duration.decode(summary.timeout ?? "5 minutes")
        const text = yield* collectSummary((summary.model?.service ?? writers.model).stream({
          sessionId: log.sessionId,
          turn: turn ?? 0,
          step: position.step,
          attempt: 1,
          provider: names.provider,
          model: names.model,
          system: SUMMARY_SYSTEM,
          maxTokens,
          tools: [],
          messages: [request]
        })).pipe(Effect.timeoutFail({
          duration: timeout,
          onTimeout: () =>
            new ModelError({
              failure: { message: `the summary request took longer than ${Duration.format(timeout)}`, code: "TIMEOUT" }
            })
        }))
        const written = yield* log.append({
          type: "compaction/summary",
          data: {
            ...bracket,
            provider: names.provider,
            model: names.model,
            characters: text.length,
            updates: range.previous?.seq ?? null
          }
        })
        const message = yield* newUserMessage({
          text: summaryText(range, text, writers.recall),
          source: { kind: SUMMARY_SOURCE_KIND, trigger, start: range.start, end: range.end }
        })
        yield* log.append({
          type: "user/message",
          data: message,
          surfaceOp: { op: "replace", start: range.first, end: range.last },
          sourceEventSeqs: sortedUnique([...range.seqs, start.seq, written.seq])
        })
        const after = yield* writers.contextUsage
        yield* log.append({
          type: "compaction/end",
          data: { ...bracket, replaced, tokensBefore: before.used, tokensAfter: after.used }
        })
        return replaced
      }),
      bracket
    )
  })
