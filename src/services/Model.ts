/**
 * Model: the seam through which the loop streams one model response per request (SPEC 8.8).
 *
 * @since 0.1.0
 */
import type { LanguageModel } from "@effect/ai/LanguageModel"
import type { Stream } from "effect"
import { Context, Layer } from "effect"
import type { ModelError } from "../domain/Errors.js"
import type { SessionId } from "../domain/Ids.js"
import type { Message, StreamChunk, ToolSchema } from "../domain/Values.js"
import * as LanguageModelAdapter from "../layers/LanguageModelAdapter.js"

/**
 * One model request: its position in the session, the logged header and the derived messages.
 *
 * @since 0.1.0
 * @category models
 */
export interface ModelRequest {
  readonly sessionId: SessionId
  readonly turn: number
  readonly step: number
  readonly attempt: number
  readonly provider: string
  readonly model: string
  readonly system?: string
  readonly maxTokens?: number
  readonly temperature?: number
  readonly tools: ReadonlyArray<ToolSchema>
  readonly messages: ReadonlyArray<Message>
}

/**
 * Streams the chunks of one model response; a failed request fails the stream with `ModelError`.
 *
 * @since 0.1.0
 * @category tags
 */
export class Model extends Context.Tag("tiller/Model")<Model, {
  readonly stream: (request: ModelRequest) => Stream.Stream<StreamChunk, ModelError>
}>() {
  /**
   * Adapts the provided `@effect/ai` `LanguageModel` (see `layers/LanguageModelAdapter`).
   *
   * @since 0.1.0
   * @category layers
   */
  static readonly layerLanguageModel: Layer.Layer<Model, never, LanguageModel> = Layer.effect(
    Model,
    LanguageModelAdapter.make
  )
}
