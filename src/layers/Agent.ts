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
import { SessionState } from "../internal/state/SessionState.js"
import type { CompactionOptions } from "../services/Compaction.js"
import * as CompactionModule from "../services/Compaction.js"
import { Compaction } from "../services/Compaction.js"
import * as DriverModule from "../services/Driver.js"
import { Driver } from "../services/Driver.js"
import type { DriverOptions } from "../services/DriverOptions.js"
import type { Hooks } from "../services/Hooks.js"
import { makeWithRunner } from "../services/Hooks.js"
import { Inbox, makeInbox } from "../services/Inbox.js"
import type { Model } from "../services/Model.js"
import * as PreStepModule from "../services/PreStep.js"
import { PreStep } from "../services/PreStep.js"
import { makeSessionLog, SessionLog } from "../services/SessionLog.js"
import type { SessionStore } from "../services/SessionStore.js"
import type { Tools } from "../services/Tools.js"
import type { OpenTarget } from "./Session.js"
import { acquireState } from "./Session.js"

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
    const driver = yield* DriverModule.make(options).pipe(Effect.provide(withState))
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
