/**
 * The loop's side of `Hooks`: runs the registered waterfalls and turn-stopping listeners over their
 * innermost defaults (SPEC 4.5, 4.6, 4.7, 8.7). Failures propagate as the listener's own error.
 *
 * @since 0.1.0
 */
import { Context, Effect } from "effect"
import type {
  RequestConfig,
  RequestErrorAction,
  RequestErrorInput,
  RequestInput,
  ToolCallInfo,
  ToolPostInput,
  TurnStoppingInput
} from "../../domain/Seams.js"
import { ToolPreDecision } from "../../domain/Seams.js"
import type { NormalizedToolOutput } from "../../domain/Tool.js"
import type { HookRegistries } from "./HookRegistries.js"
import { defaultRetryPolicy } from "./RetryPolicy.js"

/**
 * Runs the hooks registered on the `Hooks` service built alongside it.
 *
 * @since 0.1.0
 * @category tags
 */
export class HooksRunner extends Context.Tag("tiller/internal/HooksRunner")<HooksRunner, {
  /** The `onRequest` waterfall over a frozen copy of `seed`; the default returns that seed. */
  readonly runRequest: (
    input: Omit<RequestInput, "config">,
    seed: RequestConfig
  ) => Effect.Effect<RequestConfig, unknown>
  /** The `onRequestError` waterfall; the default is the default retry policy. */
  readonly runRequestError: (input: RequestErrorInput) => Effect.Effect<RequestErrorAction, unknown>
  /** The turn-stopping listeners, serially in registration order; the first failure fails the run. */
  readonly runTurnStopping: (input: TurnStoppingInput) => Effect.Effect<void, unknown>
  /** The `onToolPre` waterfall; the default is `Allow`. */
  readonly runToolPre: (info: ToolCallInfo) => Effect.Effect<ToolPreDecision, unknown>
  /** The `onToolPost` waterfall; the default returns the output unchanged. */
  readonly runToolPost: (input: ToolPostInput) => Effect.Effect<NormalizedToolOutput, unknown>
  /** Whether a hook has no listener now (its run is then only its default). */
  readonly isQuiet: (hook: HookName) => boolean
}>() {}

/**
 * The hooks of the loop.
 *
 * @since 0.1.0
 * @category models
 */
export type HookName = "request" | "requestError" | "turnStopping" | "toolPre" | "toolPost"

/**
 * The innermost defaults: what each waterfall returns with no listener. The loop uses them directly
 * for a hook that is quiet, without running it.
 *
 * @since 0.1.0
 * @category defaults
 */
export const hookDefaults = {
  /** A frozen copy of the seed. */
  request: (seed: RequestConfig): RequestConfig => Object.freeze({ ...seed }),
  /** Allow. */
  toolPre: ToolPreDecision.allow,
  /** The output unchanged. */
  toolPost: (input: Pick<ToolPostInput, "output">): NormalizedToolOutput => input.output
} as const

/**
 * The runner over the given registries.
 *
 * @since 0.1.0
 * @category constructors
 */
export const runnerFromRegistries = (registries: HookRegistries): Context.Tag.Service<HooksRunner> => ({
  runRequest: Effect.fnUntraced(function*(input: Omit<RequestInput, "config">, seed: RequestConfig) {
    const config = hookDefaults.request(seed)
    return yield* registries.request.run(Object.freeze({ ...input, config }), () => Effect.succeed(config))
  }),
  runRequestError: Effect.fnUntraced(function*(input: RequestErrorInput) {
    return yield* registries.requestError.run(input, defaultRetryPolicy)
  }),
  runTurnStopping: Effect.fnUntraced(function*(input: TurnStoppingInput) {
    return yield* registries.turnStopping.run(input, () => Effect.void)
  }),
  runToolPre: Effect.fnUntraced(function*(info: ToolCallInfo) {
    return yield* registries.toolPre.run(info, () => Effect.succeed(hookDefaults.toolPre))
  }),
  runToolPost: Effect.fnUntraced(function*(input: ToolPostInput) {
    return yield* registries.toolPost.run(input, (i) => Effect.succeed(hookDefaults.toolPost(i)))
  }),
  isQuiet: (hook) => registries[hook].isEmpty()
})
