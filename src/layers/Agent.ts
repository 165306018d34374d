/**
 * The agent preset: one session's log, inbox, pre-step registry, hooks and driver over a store,
 * a model and tools. The layer's scope is the agent's lifetime; closing it is disposal (SPEC 3.7).
 *
 * @since 0.1.0
 */
import type { Duration, Schedule, Scope } from "effect"
import { Cause, Context, Effect, Layer } from "effect"
import type {
  AgentBusy,
  MalformedLog,
  PersistenceError,
  SessionExists,
  SessionNotFound,
  UnsupportedLogVersion
} from "../domain/Errors.js"
import type { HooksRunner } from "../internal/loop/HooksRunner.js"
import type { SessionState } from "../internal/state/SessionState.js"
import type { CompactionOptions } from "../services/Compaction.js"
import { Compaction } from "../services/Compaction.js"
import { Driver } from "../services/Driver.js"
import type { DriverOptions } from "../services/DriverOptions.js"
import type { Hooks } from "../services/Hooks.js"
import { layerWithRunner } from "../services/Hooks.js"
import { Inbox } from "../services/Inbox.js"
import type { Model } from "../services/Model.js"
import { PreStep } from "../services/PreStep.js"
import { SessionLog } from "../services/SessionLog.js"
import type { SessionStore } from "../services/SessionStore.js"
import type { Tools } from "../services/Tools.js"
import type { OpenTarget } from "./Session.js"
import { layerState } from "./Session.js"

/**
 * Options of an agent.
 *
 * @since 0.1.0
 * @category models
 */
export interface AgentOptions extends DriverOptions {
  readonly invariants?: "check" | "off"
  readonly eventTypes?: ReadonlyArray<string>
  readonly durability?: {
    readonly batchSize?: number
    readonly batchWindow?: Duration.DurationInput
    readonly writeRetry?: Schedule.Schedule<unknown, unknown>
  }
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

// What an agent's context holds besides `Compaction`: its public services, the hooks runner of its
// loop and the internal session state (`Sessions` reads its poison flag).
type AgentContext = Driver | Inbox | SessionLog | PreStep | Hooks | HooksRunner | SessionState

type AgentRequirements = SessionStore | Model | Tools

// The services over the session state, built anew for each agent: these layers are module-level
// values, and one layer build shares a value among all its uses, so two agents composed in one build
// would otherwise share one log, inbox, pre-step and hooks. The `fresh` build sits in a layer made
// per agent, which that agent's build shares: its driver and its context get the same services.
const sessionServices = (): Layer.Layer<SessionLog | Inbox | PreStep | Hooks | HooksRunner, never, SessionState> =>
  Layer.suspend(() =>
    Layer.fresh(
      layerWithRunner.pipe(
        Layer.provideMerge(PreStep.layer),
        Layer.provideMerge(Inbox.layer),
        Layer.provideMerge(SessionLog.layer)
      )
    )
  )

// Built one after the other (never concurrently), so the scopes close in the reverse order: the
// driver's disposal (SPEC 3.7 steps 1-2) first, then the session state's seal and flush, the
// session's writer and its lease last.
const withoutCompaction = (
  options: AgentOptions & OpenTarget
): Layer.Layer<AgentContext, AgentOpenError, AgentRequirements> =>
  Driver.layer(options).pipe(
    Layer.provideMerge(sessionServices()),
    Layer.provideMerge(layerState(options))
  )

// Compaction over the agent's services, given the session's model and its recall tool.
const withCompaction = (
  options: AgentOptions & OpenTarget,
  compaction: CompactionOptions
): Layer.Layer<AgentContext | Compaction, AgentOpenError, AgentRequirements> =>
  Compaction.layer({
    ...(options.model === undefined ? {} : { model: options.model.model }),
    ...(options.readHistory === undefined || options.readHistory === false ? {} : { readHistory: true }),
    ...compaction
  }).pipe(Layer.provideMerge(withoutCompaction(options)))

// Refused before anything is opened or stored, as `Tools.layer` refuses its pool cap.
const refusedMaxSteps = (maxSteps: number | undefined): Cause.IllegalArgumentException | undefined =>
  maxSteps === undefined || maxSteps === Number.POSITIVE_INFINITY || (Number.isInteger(maxSteps) && maxSteps >= 1)
    ? undefined
    : new Cause.IllegalArgumentException(
      `Agent.layer: maxSteps must be a positive integer or Infinity, got ${String(maxSteps)}`
    )

// The whole agent: `Compaction` is in its context exactly when the options hold `compaction` (the
// overloads of `Agent.layer` say so in its type). Bad options make a layer that dies at build.
const agentLayer = (
  options: AgentOptions & OpenTarget
): Layer.Layer<AgentContext, AgentOpenError, AgentRequirements> => {
  const refusal = refusedMaxSteps(options.maxSteps)
  if (refusal !== undefined) return Layer.die(refusal)
  return options.compaction === undefined
    ? withoutCompaction(options)
    : withCompaction(options, options.compaction)
}

/**
 * Opens one agent in the current scope: the context of {@link Agent.layer}, which also holds the
 * loop's hooks runner and the internal session state (`Sessions` reads its poison flag), and
 * `Compaction` when the options hold `compaction`. Closing the scope is disposal.
 *
 * @since 0.1.0
 * @category constructors
 */
export const acquireAgent = (
  options: AgentOptions & OpenTarget
): Effect.Effect<Context.Context<AgentContext>, AgentOpenError, AgentRequirements | Scope.Scope> =>
  Layer.build(agentLayer(options))

/**
 * One agent on a new (`sessionId`), a stored (`resume`), or either (`open`: resumed when stored,
 * else created) session, with `Compaction` over it.
 *
 * @since 0.1.0
 * @category layers
 */
function layer<const O extends AgentOptions & OpenTarget & { readonly compaction: CompactionOptions }>(
  options: O
): Layer.Layer<AgentServices<O>, AgentOpenError, SessionStore | Model | Tools>
/**
 * One agent on a new (`sessionId`), a stored (`resume`), or either (`open`: resumed when stored,
 * else created) session.
 *
 * @since 0.1.0
 * @category layers
 */
function layer<const O extends AgentOptions & OpenTarget>(
  options: O
): Layer.Layer<AgentServices<O>, AgentOpenError, SessionStore | Model | Tools>
function layer(
  options: AgentOptions & OpenTarget
): Layer.Layer<Driver | Inbox | SessionLog | PreStep | Hooks, AgentOpenError, SessionStore | Model | Tools> {
  return agentLayer(options)
}

/**
 * Builds agents from layers.
 *
 * @since 0.1.0
 * @category layers
 */
export const Agent = {
  /**
   * One agent on a new (`sessionId`), a stored (`resume`), or either (`open`: resumed when stored,
   * else created) session; with `compaction` in its options it provides `Compaction` too.
   *
   * @since 0.1.0
   */
  layer
}
