/**
 * Everything one driver's loop needs, resolved once when the agent layer is built.
 *
 * @since 0.1.0
 */
import type { Duration, Effect, Fiber } from "effect"
import type { PreStepFailed, PreStepRejected } from "../../domain/Errors.js"
import type { SessionId } from "../../domain/Ids.js"
import type { ModelRequest } from "../../domain/ModelRequest.js"
import type { ModelShape } from "../../domain/ModelResponse.js"
import type {
  PreStepInput,
  RequestConfig,
  RequestErrorAction,
  ToolCallInfo,
  ToolPreDecision
} from "../../domain/Seams.js"
import type { NormalizedToolOutput, ToolDefinition, ToolMode } from "../../domain/Tool.js"
import type { LlmFailure, RequestHeader, ToolSchema, UserMessage } from "../../domain/Values.js"
import type { HookName } from "./HooksRunner.js"
import type { DriverState } from "./Phase.js"

/**
 * Routing and limits from the agent options.
 *
 * @since 0.1.0
 * @category models
 */
export interface RequestDefaults {
  readonly model?: { readonly provider: string; readonly model: string }
  readonly system?: string
  readonly maxTokens?: number
  readonly temperature?: number
  /** The longest a `Retry` may sleep (default 60 s). */
  readonly maxRetryDelay?: Duration.Duration
  /** The most steps a turn runs (default `DEFAULT_MAX_STEPS`, see `StepLimit`). */
  readonly maxSteps?: number
}

/**
 * The loop's view of the hooks (the innermost defaults included).
 *
 * @since 0.1.0
 * @category models
 */
export interface LoopHooks {
  readonly request: (
    input: {
      readonly sessionId: SessionId
      readonly turn: number
      readonly step: number
      readonly attempt: number
      readonly config: RequestConfig
    },
    seed: RequestConfig
  ) => Effect.Effect<RequestConfig, unknown>
  readonly requestError: (
    input: {
      readonly sessionId: SessionId
      readonly turn: number
      readonly step: number
      readonly attempt: number
      readonly failure: LlmFailure
    }
  ) => Effect.Effect<RequestErrorAction, unknown>
  readonly turnStopping: (
    input: { readonly sessionId: SessionId; readonly turn: number; readonly step: number }
  ) => Effect.Effect<void, unknown>
  readonly toolPre: (info: ToolCallInfo) => Effect.Effect<ToolPreDecision, unknown>
  /** Whether a hook has no listener now: its run is then its default, run inline. */
  readonly isQuiet: (hook: HookName) => boolean
  readonly toolPost: (
    input: ToolCallInfo & { readonly output: NormalizedToolOutput; readonly aborted: boolean }
  ) => Effect.Effect<NormalizedToolOutput, unknown>
}

/**
 * The loop's view of the tool registry.
 *
 * @since 0.1.0
 * @category models
 */
export interface LoopTools {
  readonly list: () => ReadonlyArray<ToolSchema>
  readonly lookup: (name: string) => ToolDefinition<any> | undefined
  readonly modeOf: (name: string) => ToolMode | undefined
  readonly maxParallelToolCalls: number
}

/**
 * The resolved dependencies and per-driver request memory of a loop.
 *
 * @since 0.1.0
 * @category models
 */
export interface LoopContext {
  readonly ds: DriverState
  readonly sessionId: SessionId
  readonly preStep: {
    readonly run: (input: PreStepInput) => Effect.Effect<ReadonlyArray<UserMessage>, PreStepRejected | PreStepFailed>
    /** Whether no listener is registered now: the run only enters the batch, run inline. */
    readonly isQuiet: () => boolean
  }
  readonly hooks: LoopHooks
  readonly model: ModelShape
  readonly tools: LoopTools
  readonly defaults: RequestDefaults
  /** Mutable: whether this driver instance made a request yet, and the last logged header. */
  readonly requests: { first: boolean; lastHeader: RequestHeader | undefined }
  /**
   * Starts a tool body at once, on the caller's stack (until it first suspends), with the loop's
   * context and fiber refs, in the driver's `FiberSet`: a body still running when the driver stops
   * is interrupted and awaited with it.
   */
  readonly runBody: <A, E>(body: Effect.Effect<A, E>) => Fiber.RuntimeFiber<A, E>
}

/**
 * A model request as the loop builds it.
 *
 * @since 0.1.0
 * @category models
 */
export type LoopRequest = ModelRequest
