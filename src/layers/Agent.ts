/**
 * The agent preset: one session's log, inbox, pre-step registry, hooks and driver over a store,
 * a model and tools. The layer's scope is the agent's lifetime; closing it is disposal (SPEC 3.7).
 *
 * @since 0.1.0
 */
import type { Schedule, Scope } from "effect"
import { Cause, Context, Duration, Effect, FiberSet, Layer, Option, STM, TRef } from "effect"
import type { DriverEvent } from "../domain/DriverEvent.js"
import type {
  AgentBusy,
  MalformedLog,
  PersistenceError,
  SessionExists,
  SessionNotFound,
  UnsupportedLogVersion
} from "../domain/Errors.js"
import type { EventOf, SessionEvent } from "../domain/Event.js"
import * as GrowOnly from "../domain/GrowOnly.js"
import type { RequestHeader } from "../domain/Values.js"
import { contextWindowOf } from "../internal/compaction/Budget.js"
import { DEFAULT_MAX_TOOL_RESULT_CHARS } from "../internal/compaction/ToolResultCap.js"
import { currentActivity, watchStops } from "../internal/loop/Activity.js"
import { withAgentTool } from "../internal/loop/AgentTool.js"
import { HooksRunner } from "../internal/loop/HooksRunner.js"
import type { LoopContext } from "../internal/loop/LoopContext.js"
import type { DriverState, Phase } from "../internal/loop/Phase.js"
import { causeOf, getPhase, setPhase } from "../internal/loop/Phase.js"
import { makeStopWatch } from "../internal/loop/StopWatch.js"
import { ToolRegistry } from "../internal/loop/ToolRegistry.js"
import type { ToolRegistryShape } from "../internal/loop/ToolRegistry.js"
import { runTurnClosing } from "../internal/loop/Turn.js"
import { publish, SessionState } from "../internal/state/SessionState.js"
import * as WakeMarks from "../internal/state/WakeMarks.js"
import type { CompactionOptions } from "../services/Compaction.js"
import * as CompactionModule from "../services/Compaction.js"
import { Compaction } from "../services/Compaction.js"
import { Driver, makeDriver } from "../services/Driver.js"
import type { Hooks } from "../services/Hooks.js"
import { makeWithRunner } from "../services/Hooks.js"
import { Inbox, makeInbox } from "../services/Inbox.js"
import { Model } from "../services/Model.js"
import * as PreStepModule from "../services/PreStep.js"
import { PreStep } from "../services/PreStep.js"
import type { ReadHistoryOptions } from "../services/ReadHistory.js"
import { makeTool as makeReadHistoryTool, ReadHistory } from "../services/ReadHistory.js"
import { makeSessionLog, SessionLog } from "../services/SessionLog.js"
import type { SessionStore } from "../services/SessionStore.js"
import { Tools } from "../services/Tools.js"
import type { OpenTarget } from "./Session.js"
import { acquireState } from "./Session.js"

/**
 * Options of an agent.
 *
 * @since 0.1.0
 * @category models
 */
export interface AgentOptions {
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
  readonly invariants?: "check" | "off"
  readonly eventTypes?: ReadonlyArray<string>
  readonly durability?: {
    readonly batchSize?: number
    readonly batchWindow?: Duration.DurationInput
    readonly writeRetry?: Schedule.Schedule<unknown, unknown>
  }
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
 * Failures of opening an agent.
 *
 * @since 0.1.0
 * @category models
 */
export type AgentOpenError =
  | SessionExists
  | SessionNotFound
  | MalformedLog
  | UnsupportedLogVersion
  | PersistenceError
  | AgentBusy

const lastHeaderOf = (events: GrowOnly.GrowOnly<SessionEvent>): RequestHeader | undefined => {
  for (let i = events.length - 1; i >= 0; i--) {
    const event = events.buffer[i]!
    if (event.type === "request/header") return (event as EventOf<"request/header">).data.header
  }
  return undefined
}

/** The page limit of `read_history`: its option, under the tool-result cap when compaction is on. */
const readHistoryOptions = (options: AgentOptions): ReadHistoryOptions => {
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

/** The registry the loop reads: with `read_history` over this session's log when the option is on. */
const withReadHistory = (
  registry: ToolRegistryShape,
  session: SessionState["Type"],
  options: AgentOptions
): ToolRegistryShape => {
  if (options.readHistory === undefined || options.readHistory === false) return registry
  const view = Effect.map(STM.commit(TRef.get(session.log)), ({ events, fold }) => ({
    length: events.length,
    eventAt: (seq: number) => GrowOnly.get(events, seq),
    surface: fold.surface
  }))
  return withAgentTool(registry, makeReadHistoryTool(view, readHistoryOptions(options)))
}

// The driver of the session in the context, its fibers and disposal finalizer in the current scope.
const acquireDriver = (
  options: AgentOptions
): Effect.Effect<
  Context.Tag.Service<Driver>,
  never,
  SessionState | PreStep | HooksRunner | Model | Tools | Scope.Scope
> =>
  Effect.gen(function*() {
    const session = yield* SessionState
    const preStep = yield* PreStep
    const hooks = yield* HooksRunner
    const model = yield* Model
    const tools = yield* Tools
    const registry = withReadHistory(yield* ToolRegistry.fromToolsOrDie(tools), session, options)
    const { events, fold } = yield* STM.commit(TRef.get(session.log))
    const stopWatch = makeStopWatch()
    const { maxRetryDelay, ...requestDefaults } = options
    const ds: DriverState = {
      session,
      phase: yield* TRef.make<Phase>({ _tag: "Idle", lastTurn: fold.lastTurn }),
      phaseNow: yield* TRef.make<Phase>({ _tag: "Idle", lastTurn: fold.lastTurn }),
      disposing: yield* TRef.make(false),
      stopWatch
    }
    // Started before the disposal finalizer is added, so it still runs while disposal cancels.
    yield* Effect.forkScoped(watchStops(ds, stopWatch))
    const identity = {}
    const scope = yield* Effect.scope
    const preStepQuiet = preStep.isQuiet ?? (() => false)
    // The loop's context, once the driver fiber runs: tool bodies start in its FiberSet, with the
    // driver fiber's context and fiber refs (its activity identity included).
    const loopContext = (runBody: LoopContext["runBody"]): LoopContext => ({
      ds,
      sessionId: session.sessionId,
      preStep: { run: preStep.run, isQuiet: preStepQuiet },
      hooks: {
        request: (input, seed) =>
          hooks.runRequest(
            { sessionId: input.sessionId, turn: input.turn, step: input.step, attempt: input.attempt },
            seed
          ),
        requestError: hooks.runRequestError,
        turnStopping: hooks.runTurnStopping,
        toolPre: hooks.runToolPre,
        toolPost: hooks.runToolPost,
        isQuiet: hooks.isQuiet
      },
      model,
      tools: {
        list: registry.list,
        lookup: registry.lookup,
        modeOf: registry.modeOf,
        maxParallelToolCalls: tools.maxParallelToolCalls
      },
      defaults: maxRetryDelay === undefined
        ? requestDefaults
        : { ...requestDefaults, maxRetryDelay: Duration.decode(maxRetryDelay) },
      requests: { first: true, lastHeader: lastHeaderOf(events) },
      runBody
    })
    // The driver fiber: picks up each opened turn and runs it; chained turns follow without idling.
    const nextTurn = STM.commit(
      STM.gen(function*() {
        const waited = yield* TRef.get(ds.phase)
        if (waited._tag !== "Running" || waited.pending === undefined) return yield* STM.retry
        // The current copy: the waited-on one may hold an older step number (see `setStep`).
        const phase = yield* getPhase(ds)
        if (phase._tag !== "Running" || phase.pending === undefined) return yield* STM.retry
        yield* setPhase(ds, { ...phase, pending: undefined })
        return { turn: phase.turn, batch: phase.pending }
      })
    )
    yield* Effect.forkScoped(
      // Tool bodies still running go with the loop: the FiberSet's scope ends with the driver fiber.
      Effect.scoped(Effect.gen(function*() {
        const runBody = yield* FiberSet.runtime(yield* FiberSet.make<unknown, unknown>())<never>()
        const ctx = loopContext(runBody)
        return yield* Effect.forever(Effect.flatMap(nextTurn, ({ batch, turn }) => runTurnClosing(ctx, turn, batch)))
      })).pipe(Effect.locally(currentActivity, identity))
    )
    const driver = makeDriver(ds, identity, scope)
    // The poison transaction stops the activity: phase Idle and one live error (SPEC 6.3).
    session.owner.onPoison = (error) =>
      STM.gen(function*() {
        const phase = yield* getPhase(ds)
        const turn = phase._tag === "Running" ? phase.turn : phase.lastTurn
        const step = phase._tag === "Running" ? phase.step : 0
        yield* setPhase(ds, { _tag: "Idle", lastTurn: turn })
        const events: Array<DriverEvent> = [{ type: "agent/error", turn, step, error }]
        if (phase._tag === "Running") events.push({ type: "agent/status", status: "idle" })
        yield* publish(session, events)
      })
    session.owner.phase = STM.map(getPhase(ds), (phase) =>
      phase._tag === "Idle" ? "idle" : phase._tag === "Running" ? "running" : "maintenance")
    // Disposal (SPEC 3.7) steps 1-2; the session layer then seals, flushes and ends the streams.
    yield* Effect.addFinalizer(() =>
      Effect.gen(function*() {
        yield* STM.commit(
          STM.gen(function*() {
            yield* TRef.set(ds.disposing, true)
            yield* WakeMarks.clearLatched(session.marks)
            const phase = yield* getPhase(ds)
            if (phase._tag !== "Idle" && Option.isNone(causeOf(phase))) {
              yield* setPhase(ds, { ...phase, cause: Option.some({ kind: "disposed" as const }) })
            }
          })
        )
        yield* STM.commit(
          STM.gen(function*() {
            const phase = yield* TRef.get(ds.phase)
            if (phase._tag !== "Idle" && !(yield* TRef.get(session.poisonedWatch))) {
              return yield* STM.retry
            }
          })
        )
      })
    )
    return driver
  })

/**
 * Opens one agent in the current scope: its session state, log, inbox, pre-step registry, hooks and
 * driver, built together (one context instead of a layer per service). Closing the scope is disposal.
 * The context also holds the internal session state (`Sessions` reads its poison flag).
 *
 * @since 0.1.0
 * @category constructors
 */
export const acquireAgent = (
  options: AgentOptions & OpenTarget
): Effect.Effect<
  Context.Context<Driver | Inbox | SessionLog | PreStep | Hooks | HooksRunner | SessionState>,
  AgentOpenError,
  SessionStore | Model | Tools | Scope.Scope
> =>
  Effect.gen(function*() {
    // Refused before anything is opened or stored, as `Tools.layer` refuses its pool cap.
    const maxSteps = options.maxSteps
    if (
      maxSteps !== undefined && maxSteps !== Number.POSITIVE_INFINITY && !(Number.isInteger(maxSteps) && maxSteps >= 1)
    ) {
      return yield* Effect.die(
        new Cause.IllegalArgumentException(
          `Agent.layer: maxSteps must be a positive integer or Infinity, got ${String(maxSteps)}`
        )
      )
    }
    const state = yield* acquireState(options)
    const services = Context.make(SessionLog, makeSessionLog(state)).pipe(
      Context.add(Inbox, makeInbox(state)),
      Context.add(PreStep, yield* PreStepModule.make),
      Context.merge(yield* makeWithRunner)
    )
    const withState = Context.add(services, SessionState, state)
    const driver = yield* acquireDriver(options).pipe(Effect.provide(withState))
    const agent = Context.add(withState, Driver, driver)
    if (options.compaction === undefined) return agent
    const compaction = yield* CompactionModule.make({
      ...(options.model === undefined ? {} : { model: options.model.model }),
      ...(options.readHistory === undefined || options.readHistory === false ? {} : { readHistory: true }),
      ...options.compaction
    }).pipe(Effect.provide(agent))
    return Context.add(agent, Compaction, compaction) as typeof agent
  })

/**
 * The services an agent layer provides: `Compaction` too when its options hold `compaction`.
 *
 * @since 0.1.0
 * @category models
 */
export type AgentServices<O> =
  | Driver
  | Inbox
  | SessionLog
  | PreStep
  | Hooks
  | (O extends { readonly compaction: CompactionOptions } ? Compaction : never)

/**
 * Builds agents from layers.
 *
 * @since 0.1.0
 * @category layers
 */
export const Agent = {
  /**
   * One agent on a new (`sessionId`), a stored (`resume`), or either (`open`: resumed when stored,
   * else created) session.
   *
   * @since 0.1.0
   */
  layer: <const O extends AgentOptions & OpenTarget>(
    options: O
  ): Layer.Layer<AgentServices<O>, AgentOpenError, SessionStore | Model | Tools> =>
    // `Compaction` is in the context exactly when the option is given (see `acquireAgent`).
    Layer.scopedContext(acquireAgent(options)) as Layer.Layer<
      never,
      AgentOpenError,
      SessionStore | Model | Tools
    > as Layer.Layer<
      AgentServices<O>,
      AgentOpenError,
      SessionStore | Model | Tools
    >
}
