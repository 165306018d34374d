/**
 * The listener registries behind one `Hooks` service: one waterfall per hook, shared by the public
 * registration side (`services/Hooks.ts`) and the loop's runner (`HooksRunner.ts`).
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import type {
  RequestConfig,
  RequestErrorAction,
  RequestErrorInput,
  RequestInput,
  ToolCallInfo,
  ToolPostInput,
  ToolPreDecision,
  TurnStoppingInput
} from "../../domain/Seams.js"
import type { NormalizedToolOutput } from "../../domain/Tool.js"
import * as WaterfallRegistry from "./Waterfall.js"

/**
 * The listener registries behind one `Hooks` service.
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
 * Creates empty registries.
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
