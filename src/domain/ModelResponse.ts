/**
 * One model response as a model hands it to the loop (SPEC 8.8), and how the loop reads a model:
 * every chunk at once (read inline), an Effect computing every chunk (raced against cancellation),
 * or a `Stream` of chunks (run chunk by chunk). Effect 3.22 spends about half a millisecond of CPU
 * on every Stream run, so a model hands one over only when it truly streams.
 *
 * @since 0.1.0
 */
import type { Effect } from "effect"
import { Predicate, Stream } from "effect"
import type { ModelError } from "./Errors.js"
import type { ModelRequest } from "./ModelRequest.js"
import type { StreamChunk } from "./Values.js"

/**
 * One response: every chunk at once, an Effect computing every chunk, or a Stream of chunks. A
 * failed request is a `ModelError` (of the Effect or the Stream).
 *
 * @since 0.1.0
 * @category models
 */
export type ModelResponse =
  | ReadonlyArray<StreamChunk>
  | Effect.Effect<ReadonlyArray<StreamChunk>, ModelError>
  | Stream.Stream<StreamChunk, ModelError>

/**
 * The operations of a model: `stream` (any consumer can run it) and, optionally, `respond` (what
 * the loop calls when present).
 *
 * @since 0.1.0
 * @category models
 */
export interface ModelShape {
  /** The response to `request` as a Stream of chunks; a failed request fails it with `ModelError`. */
  readonly stream: (request: ModelRequest) => Stream.Stream<StreamChunk, ModelError>
  /** The response to `request` as the model has it; the loop reads this one when present. */
  readonly respond?: (request: ModelRequest) => ModelResponse
}

/**
 * Whether a response is every chunk at once.
 *
 * @since 0.1.0
 * @category guards
 */
export const isChunks = (response: ModelResponse): response is ReadonlyArray<StreamChunk> => Array.isArray(response)

/**
 * Whether a response is a Stream of chunks.
 *
 * @since 0.1.0
 * @category guards
 */
export const isStream = (response: ModelResponse): response is Stream.Stream<StreamChunk, ModelError> =>
  Predicate.hasProperty(response, Stream.StreamTypeId)

/**
 * A response as a Stream.
 *
 * @since 0.1.0
 * @category conversions
 */
export const toStream = (response: ModelResponse): Stream.Stream<StreamChunk, ModelError> =>
  isChunks(response)
    ? Stream.fromIterable(response)
    : isStream(response)
    ? response
    : Stream.flattenIterables(Stream.fromEffect(response))

/**
 * The response of `model` to `request`, as the loop reads it: `respond` when the model has it, else
 * its `stream`.
 *
 * @since 0.1.0
 * @category getters
 */
export const responseOf = (model: ModelShape, request: ModelRequest): ModelResponse =>
  model.respond !== undefined ? model.respond(request) : model.stream(request)
