/**
 * The data that crosses the loop's seams: what the hooks and the pre-step decision are shown and
 * what they answer (SPEC 4.4 - 4.7, 8.6, 8.7). The services register listeners over these shapes; the
 * loop runs them.
 *
 * @since 0.1.0
 */
import { Duration } from "effect"
import type { SessionId } from "./Ids.js"
import { freezeCopy } from "./Json.js"
import type { NormalizedToolOutput } from "./Tool.js"
import type { LlmFailure, UserMessage } from "./Values.js"

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
  /** Retry the same step's request after `delay` (the loop logs it as `llm/retry`). */
  readonly retry: (delay: Duration.DurationInput) => RequestErrorAction
  /** Fail the turn with the request's failure. */
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
  /** Run the call as the model asked. */
  readonly allow: ToolPreDecision
  /** Run the call with these parameters instead of the model's. */
  readonly allowWith: (params: unknown) => ToolPreDecision
  /** Do not run the call; its result is a `DENIED` error carrying `reason`. */
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
 * The outcome of the pre-step waterfall: enter a complete batch, or reject the step.
 *
 * @since 0.1.0
 * @category models
 */
export type PreStepDecision =
  | { readonly _tag: "Enter"; readonly messages: ReadonlyArray<UserMessage> }
  | { readonly _tag: "Reject"; readonly reason?: string }

/**
 * Constructors of {@link PreStepDecision}.
 *
 * @since 0.1.0
 * @category constructors
 */
export const PreStepDecision: {
  /** Open the step with exactly these messages (the complete batch). */
  readonly enter: (messages: ReadonlyArray<UserMessage>) => PreStepDecision
  /** Open no step: drop the claimed batch and end the turn `blocked`. */
  readonly reject: (reason?: string) => PreStepDecision
} = {
  enter: (messages) => Object.freeze({ _tag: "Enter", messages }),
  reject: (reason) => Object.freeze(reason === undefined ? { _tag: "Reject" } : { _tag: "Reject", reason })
}

/**
 * What a pre-step listener sees: the step's coordinates and the proposed batch.
 *
 * @since 0.1.0
 * @category models
 */
export interface PreStepInput {
  readonly sessionId: SessionId
  readonly turn: number
  readonly step: number
  readonly boundary: "initial" | "later"
  readonly messages: ReadonlyArray<UserMessage>
}

/**
 * What the default decision enters for a claimed batch: a frozen array of deep-frozen copies (also
 * what listeners are shown). The loop uses it directly when no listener is registered.
 *
 * @since 0.1.0
 * @category defaults
 */
export const enteredByDefault = (messages: ReadonlyArray<UserMessage>): ReadonlyArray<UserMessage> =>
  Object.freeze(messages.map(freezeCopy))
