/**
 * Model: the seam through which the loop streams one model response per request (SPEC 8.8).
 *
 * @since 0.1.0
 */
import type { LanguageModel } from "@effect/ai/LanguageModel"
import type { Stream } from "effect"
import { Context, Layer } from "effect"
import type { ModelError } from "../domain/Errors.js"
import type { ModelRequest } from "../domain/ModelRequest.js"
import type { StreamChunk } from "../domain/Values.js"
import * as LanguageModelAdapter from "../internal/providers/LanguageModelAdapter.js"

/**
 * One model request (defined beside the domain values, which the loop and the adapters share).
 *
 * @since 0.1.0
 * @category models
 */
export type { ModelRequest } from "../domain/ModelRequest.js"

/**
 * Streams the chunks of one model response; a failed request fails the stream with `ModelError`.
 *
 * @since 0.1.0
 * @category tags
 */
export class Model extends Context.Tag("tiller/Model")<Model, {
  /** The chunks of the response to one request. */
  readonly stream: (request: ModelRequest) => Stream.Stream<StreamChunk, ModelError>
}>() {
  /**
   * Adapts the provided `@effect/ai` `LanguageModel` (see `internal/providers/LanguageModelAdapter`).
   *
   * @since 0.1.0
   * @category layers
   */
  static readonly layerLanguageModel: Layer.Layer<Model, never, LanguageModel> = Layer.effect(
    Model,
    LanguageModelAdapter.make
  )
}
