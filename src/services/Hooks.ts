/**
 * Hooks: the waterfalls around model requests and tool calls, and the turn-stopping listeners
 * (SPEC 4.5, 4.6, 4.7, 8.7).
 *
 * @since 0.1.0
 */
import { Context, Duration, Effect, FiberRef, Layer } from "effect"
import type { NormalizedToolOutput } from "./Tools.js"
import type { Scope } from "effect"
import type { SessionId } from "../domain/Ids.js"
import type { LlmFailure } from "../domain/Values.js"
import { currentStopping } from "../internal/loop/Activity.js"
import * as WaterfallRegistry from "../internal/loop/Waterfall.js"

/**
 * The routing and limits of a model request, before tools are attached.
 *
 * @since 0.1.0
 * @category models
 */
export interface RequestConfig {
  readonly provider?: string
  readonly model?: string
  readonly system?: string
  readonly maxTokens?: number
  readonly temperature?: number
}

/**
 * What to do after a failed model request: retry after a delay, or fail the turn.
 *
 * @since 0.1.0
 * @category models
 */
export type RequestErrorAction =
  | { readonly _tag: "Retry"; readonly delay: Duration.Duration }
  | { readonly _tag: "Fail" }

/**
 * Constructors of {@link RequestErrorAction}.
 *
 * @since 0.1.0
 * @category constructors
 */
export const RequestErrorAction: {
  readonly retry: (delay: Duration.DurationInput) => RequestErrorAction
  readonly fail: RequestErrorAction
} = {
  retry: (delay) => Object.freeze({ _tag: "Retry", delay: Duration.decode(delay) }),
  fail: Object.freeze({ _tag: "Fail" })
}

/**
 * Whether a tool call may run; an `Allow` with `params` runs it with those arguments instead (decoded
 * with the tool's parameter Schema; invalid ones make the result `INVALID_ARGUMENTS`).
 *
 * @since 0.1.0
 * @category models
 */
export type ToolPreDecision =
  | { readonly _tag: "Allow"; readonly params?: unknown }
  | { readonly _tag: "Deny"; readonly reason: string }

/**
 * Constructors of {@link ToolPreDecision}.
 *
 * @since 0.1.0
 * @category constructors
 */
export const ToolPreDecision: {
  readonly allow: ToolPreDecision
  readonly allowWith: (params: unknown) => ToolPreDecision
  readonly deny: (reason: string) => ToolPreDecision
} = {
  allow: Object.freeze({ _tag: "Allow" }),
  allowWith: (params) => Object.freeze({ _tag: "Allow", params }),
  deny: (reason) => Object.freeze({ _tag: "Deny", reason })
}

/**
 * A tool call as the tool hooks see it; `params` are the decoded arguments.
 *
 * @since 0.1.0
 * @category models
 */
export interface ToolCallInfo {
  readonly sessionId: SessionId
  readonly turn: number
  readonly step: number
  readonly callId: string
  readonly name: string
  readonly arguments: string
  readonly params: unknown
}

export type { NormalizedToolOutput } from "./Tools.js"

/**
 * Input of the `onRequest` waterfall; `config` is the frozen seed.
 *
 * @since 0.1.0
 * @category models
 */
export interface RequestInput {
  readonly sessionId: SessionId
  readonly turn: number
  readonly step: number
  readonly attempt: number
  readonly config: RequestConfig
}

/**
 * Input of the `onRequestError` waterfall.
 *
 * @since 0.1.0
 * @category models
 */
export interface RequestErrorInput {
  readonly sessionId: SessionId
  readonly turn: number
  readonly step: number
  readonly attempt: number
  readonly failure: LlmFailure
}

/**
 * Input of the turn-stopping listeners.
 *
 * @since 0.1.0
 * @category models
 */
export interface TurnStoppingInput {
  readonly sessionId: SessionId
  readonly turn: number
  readonly step: number
}

/**
 * Input of the `onToolPost` waterfall: the call, its output so far and whether the turn is aborting.
 *
 * @since 0.1.0
 * @category models
 */
export type ToolPostInput = ToolCallInfo & { readonly output: NormalizedToolOutput; readonly aborted: boolean }

/**
 * Registers a waterfall listener for the lifetime of the current scope.
 *
 * @since 0.1.0
 * @category models
 */
export type Waterfall<I, O> = <E>(
  listener: (input: I, next: () => Effect.Effect<O, unknown>) => Effect.Effect<O, E>,
  options?: { readonly prepend?: boolean }
) => Effect.Effect<void, never, Scope.Scope>

/**
 * The listener registries behind one `Hooks` service; internal, shared with the loop's runner.
 *
 * @since 0.1.0
 * @category internal
 */
export interface HookRegistries {
  readonly request: WaterfallRegistry.Waterfall<RequestInput, RequestConfig, unknown>
  readonly requestError: WaterfallRegistry.Waterfall<RequestErrorInput, RequestErrorAction, unknown>
  readonly turnStopping: WaterfallRegistry.Waterfall<TurnStoppingInput, void, unknown>
  readonly toolPre: WaterfallRegistry.Waterfall<ToolCallInfo, ToolPreDecision, unknown>
  readonly toolPost: WaterfallRegistry.Waterfall<ToolPostInput, NormalizedToolOutput, unknown>
}

/**
 * Creates empty registries; internal.
 *
 * @since 0.1.0
 * @category internal
 */
export const makeRegistries: Effect.Effect<HookRegistries> = Effect.all({
  request: WaterfallRegistry.make<RequestInput, RequestConfig, unknown>(),
  requestError: WaterfallRegistry.make<RequestErrorInput, RequestErrorAction, unknown>(),
  turnStopping: WaterfallRegistry.make<TurnStoppingInput, void, unknown>(),
  toolPre: WaterfallRegistry.make<ToolCallInfo, ToolPreDecision, unknown>(),
  toolPost: WaterfallRegistry.make<ToolPostInput, NormalizedToolOutput, unknown>()
})

/**
 * The public registration service over the given registries; internal.
 *
 * @since 0.1.0
 * @category internal
 */
export const fromRegistries = (registries: HookRegistries): Context.Tag.Service<Hooks> => ({
  onRequest: (listener, options) => registries.request.register(listener, options),
  onRequestError: (listener, options) => registries.requestError.register(listener, options),
  // Turn-stopping listeners are a chain in which every link runs its listener, then the rest: serial,
  // in registration order; a failure stops the chain, and so does a cause recorded meanwhile (the
  // later listeners are not started, SPEC 4.3).
  onTurnStopping: (listener) =>
    registries.turnStopping.register((input, next) =>
      Effect.zipRight(listener(input), Effect.flatMap(FiberRef.get(currentStopping), (stopping) => stopping() ? Effect.void : next()))
    ),
  onToolPre: (listener, options) => registries.toolPre.register(listener, options),
  onToolPost: (listener, options) => registries.toolPost.register(listener, options)
})

/**
 * Builds a hooks service over fresh, empty registries.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make: Effect.Effect<Context.Tag.Service<Hooks>> = Effect.map(makeRegistries, fromRegistries)

/**
 * The hooks of one agent: request and tool waterfalls, and turn-stopping listeners.
 *
 * @since 0.1.0
 * @category tags
 */
export class Hooks extends Context.Tag("tiller/Hooks")<Hooks, {
  readonly onRequest: Waterfall<RequestInput, RequestConfig>
  readonly onRequestError: Waterfall<RequestErrorInput, RequestErrorAction>
  readonly onTurnStopping: <E>(listener: (input: TurnStoppingInput) => Effect.Effect<void, E>) =>
    Effect.Effect<void, never, Scope.Scope>
  readonly onToolPre: Waterfall<ToolCallInfo, ToolPreDecision>
  readonly onToolPost: Waterfall<ToolPostInput, NormalizedToolOutput>
}>() {
  /**
   * The registration side only, over fresh registries (the agent layer also provides the runner).
   *
   * @since 0.1.0
   */
  static readonly layer: Layer.Layer<Hooks> = Layer.effect(Hooks, make)
}
