/**
 * Hooks: the waterfalls around model requests and tool calls, and the turn-stopping listeners
 * (SPEC 4.5, 4.6, 4.7, 8.7).
 *
 * @since 0.1.0
 */
import { Context, Effect, FiberRef, Layer } from "effect"
import type { Scope } from "effect"
import type {
  RequestConfig,
  RequestErrorAction,
  RequestErrorInput,
  RequestInput,
  ToolCallInfo,
  ToolPostInput,
  ToolPreDecision,
  TurnStoppingInput
} from "../domain/Seams.js"
import { currentStopping } from "../internal/loop/Activity.js"
import type { HookRegistries } from "../internal/loop/HookRegistries.js"
import { makeRegistries } from "../internal/loop/HookRegistries.js"
import { HooksRunner, runnerFromRegistries } from "../internal/loop/HooksRunner.js"
import type { NormalizedToolOutput } from "./Tools.js"

export type {
  RequestConfig,
  RequestErrorInput,
  RequestInput,
  ToolCallInfo,
  ToolPostInput,
  TurnStoppingInput
} from "../domain/Seams.js"
export { RequestErrorAction, ToolPreDecision } from "../domain/Seams.js"
export type { HookRegistries } from "../internal/loop/HookRegistries.js"
export { makeRegistries } from "../internal/loop/HookRegistries.js"
export type { NormalizedToolOutput } from "./Tools.js"

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
      Effect.zipRight(
        listener(input),
        Effect.flatMap(
          FiberRef.get(currentStopping),
          (stopping) => Effect.flatMap(stopping, (stopped) => stopped ? Effect.void : next())
        )
      )
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
  /** Adds a listener run, in registration order, when a turn is about to end naturally. */
  readonly onTurnStopping: <E>(
    listener: (input: TurnStoppingInput) => Effect.Effect<void, E>
  ) => Effect.Effect<void, never, Scope.Scope>
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

/**
 * `Hooks` and the loop's runner over one set of fresh registries.
 *
 * @since 0.1.0
 * @category constructors
 */
export const makeWithRunner: Effect.Effect<Context.Context<Hooks | HooksRunner>> = Effect.map(
  makeRegistries,
  (registries) =>
    Context.make(Hooks, fromRegistries(registries)).pipe(Context.add(HooksRunner, runnerFromRegistries(registries)))
)

/**
 * `Hooks` and the loop's runner over one set of fresh registries, as a layer.
 *
 * @since 0.1.0
 * @category layers
 */
export const layerWithRunner: Layer.Layer<Hooks | HooksRunner> = Layer.effectContext(makeWithRunner)
