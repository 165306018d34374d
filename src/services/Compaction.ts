/**
 * Compaction: context management for long sessions (issue 28). It knows the model's context
 * window and how much of it the session uses (`contextUsage`), caps oversized tool results at the
 * loop boundary, and compacts the surface when a trigger fires: `threshold` (a pre-step listener),
 * `overflow` (a request-error listener that compacts and retries once) or `manual` (a maintenance
 * task, optionally with a focus for the summary).
 *
 * Two kinds, each a `compaction/*` bracket recording its `kind` and `trigger` (SPEC 6.7), lossless
 * since the shadowed events stay in the log:
 * - `prune`: old tool results replaced by a placeholder (single-node `tool/result` replacements),
 *   without a model call;
 * - `summary`: a range of the surface replaced by one `user/message` with source
 *   `{kind: "compaction", ...}` holding a structured summary written by the session's model (or a
 *   configured one); a later summary updates the previous one. A recent tail is kept by tokens, a
 *   tool call is never separated from its result, pinned instructions are never replaced.
 *
 * Choice: an automatic trigger prunes first and summarises only when pruning did not bring the
 * context under the threshold (overflow: also when there was nothing to prune); a manual compaction
 * summarises, and prunes only when there is nothing to summarise (or summaries are off). The
 * brackets themselves are written by `CompactionBrackets`.
 *
 * @since 0.1.0
 */
import { Context, Duration, Effect, Layer, Option, STM, TRef } from "effect"
import type { Scope } from "effect"
import type { AgentBusy, MaintenanceAborted } from "../domain/Errors.js"
import { ContextOverflow } from "../domain/Errors.js"
import type { SessionEvent } from "../domain/Event.js"
import * as GrowOnly from "../domain/GrowOnly.js"
import { newUserMessage } from "../domain/Message.js"
import type { LlmFailure, UserMessage } from "../domain/Values.js"
import { Breaker } from "../internal/compaction/Breaker.js"
import type { ContextUsage } from "../internal/compaction/Budget.js"
import { advance, contextWindowOf, emptyBudget, tokensOfMessage, usageOf } from "../internal/compaction/Budget.js"
import type { PruneRules } from "../internal/compaction/Prune.js"
import { planPrune } from "../internal/compaction/Prune.js"
import type { SummaryRange } from "../internal/compaction/Summary.js"
import { DEFAULT_PINNED_SOURCES, openStepStartOf, planSummary } from "../internal/compaction/Summary.js"
import * as SystemContext from "../internal/compaction/SystemContext.js"
import { capToolOutput, DEFAULT_MAX_TOOL_RESULT_CHARS } from "../internal/compaction/ToolResultCap.js"
import * as WaterfallRegistry from "../internal/loop/Waterfall.js"
import { SessionState } from "../internal/state/SessionState.js"
import * as CompactionBrackets from "./CompactionBrackets.js"
import type { Snapshot } from "./CompactionBrackets.js"
import type {
  CompactionReport,
  CompactionTrigger,
  PostCompactContext,
  PostCompactInput,
  PreCompactInput
} from "./CompactionHooks.js"
import { COMPACTION_CONTEXT_SOURCE_KIND, PreCompactDecision } from "./CompactionHooks.js"
import type { CompactError, CompactionOptions, CompactOptions } from "./CompactionOptions.js"
import { Driver } from "./Driver.js"
import type { Waterfall } from "./Hooks.js"
import { Hooks, RequestErrorAction } from "./Hooks.js"
import { Model } from "./Model.js"
import { PreStep } from "./PreStep.js"
import { SessionLog } from "./SessionLog.js"

export type { ContextUsage } from "../internal/compaction/Budget.js"
export type {
  CompactionKind,
  CompactionReport,
  CompactionTrigger,
  PostCompactContext,
  PostCompactInput,
  PreCompactInput
} from "./CompactionHooks.js"
export { COMPACTION_CONTEXT_SOURCE_KIND, PreCompactDecision } from "./CompactionHooks.js"
export type { CompactError, CompactionOptions, CompactOptions, SummaryOptions } from "./CompactionOptions.js"

/**
 * Context management of one agent: its budget, manual compaction and the compaction hooks.
 *
 * @since 0.1.0
 * @category tags
 */
export class Compaction extends Context.Tag("tiller/Compaction")<Compaction, {
  /** The context in use now: tokens used, the window, and their fraction. */
  readonly contextUsage: Effect.Effect<ContextUsage>
  /** Compacts now, as a maintenance task between turns (trigger `manual`): `compactWith({})`. */
  readonly compact: Effect.Effect<CompactionReport, CompactError>
  /** Compacts now as a maintenance task between turns (trigger `manual`); the focus steers the summary. */
  readonly compactWith: (options: CompactOptions) => Effect.Effect<CompactionReport, CompactError>
  /** The manual compaction itself, for a caller's own `Driver.runMaintenance` (it needs the maintenance phase). */
  readonly task: (
    options?: CompactOptions
  ) => Effect.Effect<CompactionReport, Exclude<CompactError, AgentBusy | MaintenanceAborted>>
  /** Registers a pre-compaction listener: it may veto the compaction or add instructions for the summary. */
  readonly onPreCompact: Waterfall<PreCompactInput, PreCompactDecision>
  /** Registers a post-compaction listener: it may add context for the model (texts of one message). */
  readonly onPostCompact: Waterfall<PostCompactInput, PostCompactContext>
}>() {
  /**
   * Compaction over an agent's services: registers its tool-result cap, its threshold pre-step
   * listener and its overflow request-error listener for the layer's lifetime.
   *
   * @since 0.1.0
   */
  static readonly layer = (
    options: CompactionOptions = {}
  ): Layer.Layer<Compaction, never, SessionLog | PreStep | Hooks | Driver | Model> =>
    Layer.scoped(Compaction, make(options))
}

/**
 * Whether a failure says the request did not fit the context window: the adapters' code
 * `CONTEXT_OVERFLOW`, or an HTTP 413.
 *
 * @since 0.1.0
 * @category predicates
 */
export const isContextOverflow = (failure: LlmFailure): boolean =>
  failure.code === "CONTEXT_OVERFLOW" || failure.status === 413

// What one compaction did, and the context its post-compaction hooks added.
interface Outcome {
  readonly report: CompactionReport
  readonly wrote: boolean
  readonly failed: boolean
  readonly context: ReadonlyArray<string>
}

/**
 * Builds the service and registers its listeners in the current scope.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (
  options: CompactionOptions = {}
): Effect.Effect<Context.Tag.Service<Compaction>, never, SessionLog | PreStep | Hooks | Driver | Model | Scope.Scope> =>
  Effect.gen(function*() {
    const log = yield* SessionLog
    const preStep = yield* PreStep
    const hooks = yield* Hooks
    const driver = yield* Driver
    const sessionModel = yield* Model
    const state = yield* Effect.serviceOption(SessionState)
    const preCompact = yield* WaterfallRegistry.make<PreCompactInput, PreCompactDecision, unknown>()
    const postCompact = yield* WaterfallRegistry.make<PostCompactInput, PostCompactContext, unknown>()

    // The log as the plans read it: the session state's own vectors when this runs inside an agent
    // (no copy), else the public snapshots.
    const snapshot: Effect.Effect<Snapshot> = Option.isSome(state)
      ? Effect.map(STM.commit(TRef.get(state.value.log)), ({ events, fold }) => ({
        length: events.length,
        surface: fold.surface,
        eventAt: (seq: number) => GrowOnly.get(events, seq)
      }))
      : Effect.map(Effect.all([log.events, log.surface]), ([events, surface]) => ({
        length: events.length,
        surface: { length: surface.length, buffer: surface },
        eventAt: (seq: number): SessionEvent | undefined => events[seq]
      }))

    const budget = emptyBudget()
    const windowNow = () => options.contextWindow ?? contextWindowOf(budget.model ?? options.model)
    // Reads the events appended since the last call (synchronously: two callers never read one twice).
    const refresh = (view: Snapshot): ContextUsage => {
      for (let seq = budget.next; seq < view.length; seq++) advance(budget, view.eventAt(seq)!)
      return usageOf(budget, windowNow())
    }
    const contextUsage = Effect.map(snapshot, refresh)

    const threshold = options.threshold ?? 0.8
    const protectedTools = new Set(options.protectedTools ?? [])
    const recall = options.readHistory === true
    const rules = (window: number, trigger: CompactionTrigger): PruneRules => {
      const protect = options.protectRecentTokens ?? Math.min(40_000, Math.floor(window / 4))
      const minimum = options.minimumPruneTokens ?? Math.min(20_000, Math.floor(window / 20))
      switch (trigger) {
        case "threshold":
          return { protectRecentTokens: protect, minimumTokens: minimum, protectedTools, recall }
        case "overflow":
          // The request does not fit: free what can be freed, keeping only the newest results.
          return { protectRecentTokens: Math.floor(protect / 4), minimumTokens: 1, protectedTools, recall }
        case "manual":
          return { protectRecentTokens: protect, minimumTokens: 1, protectedTools, recall }
      }
    }

    const summary = options.summary === false ? undefined : options.summary ?? {}
    const pinnedSources = new Set(summary?.pinnedSources ?? DEFAULT_PINNED_SOURCES)
    // An overflow keeps a quarter of the recent tail, as its prune keeps a quarter of the protection:
    // the request did not fit, and the estimate the tail is measured by may be below the provider's count.
    const planSummaryOf = (view: Snapshot, window: number, trigger: CompactionTrigger): SummaryRange | undefined => {
      if (summary === undefined) return undefined
      const keep = summary.keepRecentTokens ?? Math.min(20_000, Math.floor(window / 4))
      return planSummary(view, {
        keepRecentTokens: trigger === "overflow" ? Math.floor(keep / 4) : keep,
        pinnedSources,
        openStepStart: openStepStartOf(view.length, view.eventAt)
      })
    }

    const writers: CompactionBrackets.BracketWriters = {
      log,
      snapshot,
      refresh,
      contextUsage,
      rules,
      planSummary: planSummaryOf,
      summary,
      model: sessionModel,
      names: () => ({
        provider: budget.header?.provider ?? "unknown",
        model: budget.header?.model ?? options.model ?? "unknown"
      }),
      recall
    }

    // The pre-compaction hooks' decision; a listener's failure is a defect.
    const askPre = (input: PreCompactInput) =>
      Effect.orDie(preCompact.run(input, () => Effect.succeed(PreCompactDecision.proceed())))
    // An overflow's post-compaction context, in the system prompt of the requests from its retry on.
    const systemContext = yield* SystemContext.make((listener) => hooks.onRequest(listener))
    // The post-compaction hooks' context; a listener's failure is a defect.
    const askPost = (input: PostCompactInput) =>
      Effect.map(
        Effect.orDie(postCompact.run(input, () => Effect.succeed<PostCompactContext>([]))),
        (context) => context.filter((text) => text.trim() !== "")
      )

    // One compaction of any trigger: ask the pre-compaction hooks, prune and/or summarise, ask the
    // post-compaction hooks. `extra`: tokens about to enter (the proposed step's batch).
    const compactOnce = (
      trigger: CompactionTrigger,
      position: { readonly turn: number | null; readonly step: number },
      extra: number,
      focus: string | undefined
    ) =>
      Effect.gen(function*() {
        const view = yield* snapshot
        const before = refresh(view)
        const nothing = (vetoed?: string): Outcome => ({
          report: {
            trigger,
            pruned: 0,
            tokensBefore: before.used,
            tokensAfter: before.used,
            ...(vetoed === undefined ? {} : { vetoed })
          },
          wrote: false,
          failed: false,
          context: []
        })
        const canPrune = planPrune(view, rules(before.window, trigger)).results.length > 0
        const canSummarise = planSummaryOf(view, before.window, trigger) !== undefined
        if (!canPrune && !canSummarise) return nothing()
        const decision = yield* askPre({ sessionId: log.sessionId, turn: position.turn, trigger, usage: before, focus })
        if (decision._tag === "Veto") return nothing(decision.reason)
        const over = (used: number) => used + extra >= threshold * before.window
        let pruned = 0
        if (canPrune && (trigger !== "manual" || !canSummarise)) {
          pruned = yield* CompactionBrackets.prune(writers, trigger, position.turn)
        }
        const afterPrune = yield* contextUsage
        const wanted = trigger === "manual" || over(afterPrune.used) || (trigger === "overflow" && pruned === 0)
        let summarised: { readonly start: number; readonly end: number; readonly nodes: number } | undefined
        let failed = false
        if (canSummarise && wanted) {
          // A manual summary's failure is the caller's; an automatic one keeps what pruning achieved.
          const attempt = CompactionBrackets.summarise(writers, trigger, position, focus, decision.instructions)
          if (trigger === "manual") {
            summarised = yield* attempt
          } else {
            const result = yield* Effect.either(attempt)
            if (result._tag === "Left") {
              failed = true
            } else summarised = result.right
          }
        }
        const after = yield* contextUsage
        const report: CompactionReport = {
          trigger,
          pruned,
          ...(summarised === undefined ? {} : { summarised }),
          tokensBefore: before.used,
          tokensAfter: after.used
        }
        const wrote = pruned > 0 || summarised !== undefined
        const context = wrote ? yield* askPost({ sessionId: log.sessionId, turn: position.turn, trigger, report }) : []
        // An overflow's context is held in the requests from its retry on; any compaction drops the last one.
        if (wrote) yield* systemContext.set(trigger === "overflow" ? context : [])
        return { report, wrote, failed, context }
      })

    const contextMessage = (trigger: CompactionTrigger, context: ReadonlyArray<string>) =>
      newUserMessage({
        content: context.map((text) => ({ type: "text" as const, text })),
        source: { kind: COMPACTION_CONTEXT_SOURCE_KIND, trigger }
      })
    // Context for manual compactions: injected for the next step.
    const injectContext = (trigger: CompactionTrigger, context: ReadonlyArray<string>) =>
      context.length === 0 ? Effect.void : Effect.flatMap(contextMessage(trigger, context), driver.inject)

    const breaker = new Breaker(options.maxConsecutiveFailures ?? 3)
    // The step whose overflow was answered by a compaction and a retry, until we know how it went.
    let recovering: string | undefined
    const settleRecovery = (key: string | undefined) => {
      if (recovering !== undefined && recovering !== key) {
        breaker.reset()
        recovering = undefined
      }
    }

    // Item 2: every tool result is capped at the loop boundary (outermost ToolPost listener, so it
    // sees what every other listener produced).
    yield* hooks.onToolPost((input, next) =>
      Effect.map(next(), (output) => {
        const own = options.toolResultLimits?.[input.name]
        const limit = own ?? options.maxToolResultChars ?? Math.min(DEFAULT_MAX_TOOL_RESULT_CHARS, windowNow())
        return Number.isFinite(limit)
          ? capToolOutput(output, Math.max(0, Math.floor(limit)), input.callId, recall)
          : output
      }), { prepend: true })

    // Trigger `threshold`: before the step opens (no tool call is open), when use passes the threshold.
    // The post-compaction context enters the proposed step.
    const batchTokens = (messages: ReadonlyArray<UserMessage>) => messages.reduce((n, m) => n + tokensOfMessage(m), 0)
    yield* preStep.register((input, next) =>
      Effect.gen(function*() {
        settleRecovery(undefined)
        let context: ReadonlyArray<string> = []
        if (!breaker.open) {
          const usage = yield* contextUsage
          const extra = batchTokens(input.messages)
          if (usage.used + extra >= threshold * usage.window) {
            const outcome = yield* Effect.either(
              compactOnce("threshold", { turn: input.turn, step: input.step }, extra, undefined)
            )
            if (outcome._tag === "Left") breaker.fail(false)
            else if (outcome.right.wrote) {
              context = outcome.right.context
              const report = outcome.right.report
              if (outcome.right.failed || report.tokensAfter >= report.tokensBefore) breaker.fail(false)
              else breaker.reset()
            }
          }
        }
        const decision = yield* next()
        if (context.length === 0 || decision._tag !== "Enter") return decision
        const added = yield* contextMessage("threshold", context)
        return { ...decision, messages: [...decision.messages, added] }
      }), { prepend: true })

    // Trigger `overflow`: compact, then retry once; a second overflow in the step is a typed failure.
    yield* hooks.onRequestError((input, next) => {
      if (!isContextOverflow(input.failure)) return next()
      return Effect.gen(function*() {
        const key = `${input.turn}/${input.step}`
        settleRecovery(key)
        const overflow = (reason: ContextOverflow["reason"], veto?: string) =>
          Effect.flatMap(contextUsage, (usage) =>
            new ContextOverflow({
              turn: input.turn,
              step: input.step,
              used: usage.used,
              window: usage.window,
              reason,
              providerMessage: input.failure.message,
              ...(veto === undefined ? {} : { veto })
            }))
        if (recovering === key) {
          breaker.fail(true)
          recovering = undefined
          return yield* overflow("repeated")
        }
        if (breaker.refusesOverflow) return yield* overflow("breaker-open")
        const outcome = yield* Effect.either(
          compactOnce("overflow", { turn: input.turn, step: input.step }, 0, undefined)
        )
        if (outcome._tag === "Right" && outcome.right.report.vetoed !== undefined) {
          return yield* overflow("vetoed", outcome.right.report.vetoed)
        }
        if (outcome._tag === "Left" || !outcome.right.wrote) {
          breaker.fail(true)
          return yield* overflow(
            outcome._tag === "Right" && outcome.right.failed ? "summary-failed" : "nothing-to-compact"
          )
        }
        if (outcome.right.failed) breaker.fail(false)
        recovering = key
        return RequestErrorAction.retry(Duration.zero)
      })
    }, { prepend: true })

    // Trigger `manual`: a maintenance task between turns; a successful one closes the circuit breaker.
    const task = (compactOptions: CompactOptions = {}) =>
      Effect.gen(function*() {
        const focus = compactOptions.focus?.trim() === "" ? undefined : compactOptions.focus?.trim()
        const outcome = yield* compactOnce("manual", { turn: null, step: 0 }, 0, focus)
        yield* injectContext("manual", outcome.context)
        if (outcome.report.vetoed === undefined) breaker.reset()
        return outcome.report
      })
    const compactWith = (compactOptions: CompactOptions) => driver.runMaintenance(task(compactOptions))

    return {
      contextUsage,
      compact: compactWith({}),
      compactWith,
      task,
      onPreCompact: (listener, registerOptions) => preCompact.register(listener, registerOptions),
      onPostCompact: (listener, registerOptions) => postCompact.register(listener, registerOptions)
    }
  })
