/**
 * Model: the seam through which the loop gets one model response per request (SPEC 8.8).
 *
 * A model answers a request in one of three ways (`ModelResponse`), and the loop reads every model
 * the same way (`Model.responseOf`): every chunk at once (an array, read inline: the fast way for a
 * model whose answer is known when asked), an Effect that computes every chunk (raced against
 * cancellation), or a `Stream` of chunks. A model that offers only `stream` (SPEC 8.8's shape) is
 * read as a Stream.
 *
 * @since 0.1.0
 */
import type { LanguageModel } from "@effect/ai/LanguageModel"
import { Context, Effect, Layer, Stream } from "effect"
import type { ModelRequest } from "../domain/ModelRequest.js"
import type { ModelResponse, ModelShape } from "../domain/ModelResponse.js"
import { responseOf, toStream } from "../domain/ModelResponse.js"
import * as LanguageModelAdapter from "../internal/providers/LanguageModelAdapter.js"

/**
 * One model request (defined beside the domain values, which the loop and the adapters share).
 *
 * @since 0.1.0
 * @category models
 */
export type { ModelRequest } from "../domain/ModelRequest.js"

/**
 * One response as a model hands it over, the operations of a model and how the loop reads them
 * (defined beside the domain values, which the loop and the adapters share).
 *
 * @since 0.1.0
 * @category models
 */
export type { ModelResponse, ModelShape } from "../domain/ModelResponse.js"

/**
 * Answers every request of the loop with the chunks of one model response.
 *
 * @since 0.1.0
 * @category tags
 */
export class Model extends Context.Tag("tiller/Model")<Model, ModelShape>() {
  /**
   * A response as a Stream ({@link toStream}).
   *
   * @since 0.1.0
   * @category conversions
   */
  static readonly toStream = toStream

  /**
   * The response of a model to a request, as the loop reads it ({@link responseOf}).
   *
   * @since 0.1.0
   * @category getters
   */
  static readonly responseOf = responseOf

  /**
   * A model from its `respond` function; its `stream` runs the same response as a Stream. The
   * smallest custom model answers with an array of chunks: the loop reads it without running a
   * Stream or forking a fiber.
   *
   * @since 0.1.0
   * @category constructors
   */
  static readonly make = (respond: (request: ModelRequest) => ModelResponse): ModelShape => ({
    respond,
    stream: (request) => Stream.suspend(() => toStream(respond(request)))
  })

  /**
   * Adapts the provided `@effect/ai` `LanguageModel` (see `internal/providers/LanguageModelAdapter`).
   *
   * @since 0.1.0
   * @category layers
   */
  static readonly layerLanguageModel: Layer.Layer<Model, never, LanguageModel> = Layer.effect(
    Model,
    Effect.map(LanguageModelAdapter.make, (adapter) => Model.make(adapter.stream))
  )
}
