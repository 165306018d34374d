/**
 * Compaction: context management for long sessions (issue 28). It knows the model's context
 * window and how much of it the session uses (`contextUsage`), caps oversized tool results at the
 * loop boundary, and prunes old tool results from the surface without a model call when a trigger
 * fires: `threshold` (a pre-step listener), `overflow` (a request-error listener that prunes and
 * retries once) or `manual` (a maintenance task). Every prune is a `compaction/*` bracket with
 * `kind: "prune"` and its `trigger` around single-node `tool/result` replacements (SPEC 6.7):
 * lossless, since the shadowed results stay in the log.
 *
 * @since 0.1.0
 */
import { Context, Duration, Effect, Layer, Option, STM, TRef } from "effect"
import type { Scope } from "effect"
import type { AgentBusy, AgentDisposed, DuplicateMessage, InvalidEvent, MaintenanceAborted, PersistenceError } from "../domain/Errors.js"
import { ContextOverflow } from "../domain/Errors.js"
import type { SessionEvent } from "../domain/Event.js"
import type { LlmFailure, UserMessage } from "../domain/Values.js"
import type { ContextUsage } from "../internal/compaction/Budget.js"
import { advance, contextWindowOf, emptyBudget, tokensOfMessage, usageOf } from "../internal/compaction/Budget.js"
import type { LogView, PruneRules } from "../internal/compaction/Prune.js"
import { planPrune } from "../internal/compaction/Prune.js"
import { capToolOutput, DEFAULT_MAX_TOOL_RESULT_CHARS } from "../internal/compaction/ToolResultCap.js"
import * as GrowOnly from "../domain/GrowOnly.js"
import { SessionState } from "../internal/state/SessionState.js"
import { Driver } from "./Driver.js"
import { Hooks, RequestErrorAction } from "./Hooks.js"
import { PreStep } from "./PreStep.js"
import { SessionLog } from "./SessionLog.js"

export type { ContextUsage } from "../internal/compaction/Budget.js"

/**
 * What started a compaction; recorded in its bracket.
 *
 * @since 0.1.0
 * @category models
 */
export type CompactionTrigger = "threshold" | "overflow" | "manual"

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
  /** The fraction of the window at which a pre-step prunes (default 0.8). */
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
}

/**
 * What one compaction did.
 *
 * @since 0.1.0
 * @category models
 */
export interface CompactionReport {
  readonly trigger: CompactionTrigger
  /** The tool results replaced by a placeholder (0: nothing worth pruning, nothing written). */
  readonly pruned: number
  readonly tokensBefore: number
  readonly tokensAfter: number
}

/**
 * Failures of a manual compaction.
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

/**
 * Context management of one agent: its budget, and manual compaction.
 *
 * @since 0.1.0
 * @category tags
 */
export class Compaction extends Context.Tag("tiller/Compaction")<Compaction, {
  /** The context in use now: tokens used, the window, and their fraction. */
  readonly contextUsage: Effect.Effect<ContextUsage>
  /** Prunes old tool results now, as a maintenance task between turns (trigger `manual`). */
  readonly compact: Effect.Effect<CompactionReport, CompactError>
}>() {
  /**
   * Compaction over an agent's services: registers its tool-result cap, its threshold pre-step
   * listener and its overflow request-error listener for the layer's lifetime.
   *
   * @since 0.1.0
   */
  static readonly layer = (
    options: CompactionOptions = {}
  ): Layer.Layer<Compaction, never, SessionLog | PreStep | Hooks | Driver> => Layer.scoped(Compaction, make(options))
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

interface Snapshot extends LogView {
  readonly length: number
}

/**
 * Builds the service and registers its listeners in the current scope.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (
  options: CompactionOptions = {}
): Effect.Effect<Context.Tag.Service<Compaction>, never, SessionLog | PreStep | Hooks | Driver | Scope.Scope> =>
  Effect.gen(function*() {
    const log = yield* SessionLog
    const preStep = yield* PreStep
    const hooks = yield* Hooks
    const driver = yield* Driver
    const state = yield* Effect.serviceOption(SessionState)

    // The log as the plan reads it: the session state's own vectors when this runs inside an agent
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

    // One prune: plan, then ⟨compaction/start⟩ TR~… ⟨compaction/end⟩, each through SessionLog.append.
    // An interrupted or failed prune closes its bracket with an error (SPEC 6.7).
    const prune = (trigger: CompactionTrigger, turn: number | null) =>
      Effect.gen(function*() {
        const view = yield* snapshot
        const before = refresh(view)
        const plan = planPrune(view, rules(before.window, trigger))
        const report = (pruned: number, tokensAfter: number): CompactionReport => ({
          trigger,
          pruned,
          tokensBefore: before.used,
          tokensAfter
        })
        if (plan.results.length === 0) return report(0, before.used)
        const bracket = { turn, kind: "prune", trigger }
        const start = yield* log.append({ type: "compaction/start", data: { ...bracket, tokensBefore: before.used } })
        const body = Effect.gen(function*() {
          const seqs: Array<number> = []
          for (const result of plan.results) {
            const replaced = yield* log.append({
              type: "tool/result",
              data: result.data,
              surfaceOp: { op: "replace", start: result.seq, end: result.seq },
              sourceEventSeqs: [result.seq, start.seq]
            })
            seqs.push(replaced.seq)
          }
          const after = yield* contextUsage
          yield* log.append({
            type: "compaction/end",
            data: { ...bracket, pruned: plan.results.map((r) => r.seq), tokensBefore: before.used, tokensAfter: after.used }
          })
          return report(plan.results.length, after.used)
        })
        return yield* Effect.onExit(body, (exit) =>
          exit._tag === "Success"
            ? Effect.void
            : Effect.ignore(log.append({ type: "compaction/end", data: { ...bracket, error: { message: "compaction did not complete" } } })))
      })

    // The circuit breaker: consecutive automatic compactions that did not achieve their aim.
    const maxFailures = options.maxConsecutiveFailures ?? 3
    let failures = 0
    // The step whose overflow was answered by a prune and a retry, until we know how it went.
    let recovering: string | undefined
    const settleRecovery = (key: string | undefined) => {
      if (recovering !== undefined && recovering !== key) {
        failures = 0
        recovering = undefined
      }
    }
    const breakerOpen = () => failures >= maxFailures

    // Item 2: every tool result is capped at the loop boundary (outermost ToolPost listener, so it
    // sees what every other listener produced).
    yield* hooks.onToolPost((input, next) =>
      Effect.map(next(), (output) => {
        const own = options.toolResultLimits?.[input.name]
        const limit = own ?? options.maxToolResultChars ?? Math.min(DEFAULT_MAX_TOOL_RESULT_CHARS, windowNow())
        return Number.isFinite(limit) ? capToolOutput(output, Math.max(0, Math.floor(limit)), input.callId, recall) : output
      }), { prepend: true })

    // Trigger `threshold`: before the step opens (no tool call is open), when use passes the threshold.
    const batchTokens = (messages: ReadonlyArray<UserMessage>) => messages.reduce((n, m) => n + tokensOfMessage(m), 0)
    yield* preStep.register((input, next) =>
      Effect.gen(function*() {
        settleRecovery(undefined)
        if (!breakerOpen()) {
          const usage = yield* contextUsage
          if (usage.used + batchTokens(input.messages) >= threshold * usage.window) {
            const outcome = yield* Effect.either(prune("threshold", input.turn))
            if (outcome._tag === "Left") failures += 1
            else if (outcome.right.pruned > 0) {
              if (outcome.right.tokensAfter + batchTokens(input.messages) >= threshold * usage.window) failures += 1
              else failures = 0
            }
          }
        }
        return yield* next()
      }), { prepend: true })

    // Trigger `overflow`: prune, then retry once; a second overflow in the step is a typed failure.
    yield* hooks.onRequestError((input, next) => {
      if (!isContextOverflow(input.failure)) return next()
      return Effect.gen(function*() {
        const key = `${input.turn}/${input.step}`
        settleRecovery(key)
        const overflow = (reason: ContextOverflow["reason"], used: number, window: number) =>
          new ContextOverflow({ turn: input.turn, step: input.step, used, window, reason, providerMessage: input.failure.message })
        if (recovering === key) {
          failures += 1
          recovering = undefined
          const usage = yield* contextUsage
          return yield* overflow("repeated", usage.used, usage.window)
        }
        if (breakerOpen()) {
          const usage = yield* contextUsage
          return yield* overflow("breaker-open", usage.used, usage.window)
        }
        const outcome = yield* Effect.either(prune("overflow", input.turn))
        const usage = yield* contextUsage
        if (outcome._tag === "Left" || outcome.right.pruned === 0) {
          failures += 1
          return yield* overflow("nothing-to-prune", usage.used, usage.window)
        }
        recovering = key
        return RequestErrorAction.retry(Duration.zero)
      })
    }, { prepend: true })

    // Trigger `manual`: a maintenance task between turns; it also closes the circuit breaker.
    const compact = Effect.tap(driver.runMaintenance(prune("manual", null)), () =>
      Effect.sync(() => {
        failures = 0
      }))

    return { contextUsage, compact }
  })
