/**
 * Model streams whose chunks are all known once the stream starts (a scripted response). Such a
 * stream is an ordinary `Stream` that also carries an effect opening it; the loop runs that effect
 * and reads the chunks as one batch, skipping Effect's Stream machinery (about half a millisecond
 * of CPU per response in Effect 3.22, more than the rest of a step). Any other consumer runs the
 * Stream itself. A stream derived from it with Stream operators is an ordinary stream again.
 *
 * @since 0.1.0
 */
import type { Effect } from "effect"
import type { LazyArg } from "effect/Function"
import { Stream } from "effect"
import type { ModelError } from "../../domain/Errors.js"
import type { StreamChunk } from "../../domain/Values.js"

const PreloadedTypeId: unique symbol = Symbol.for("tiller/internal/Preloaded")

/**
 * What opening a preloaded stream yields: every chunk of the response, or a stream to run instead
 * (a response that is not known at once).
 *
 * @since 0.1.0
 * @category models
 */
export type Opened = ReadonlyArray<StreamChunk> | Stream.Stream<StreamChunk, ModelError>

/**
 * The stream `stream()` builds (when it runs), carrying `open`: an effect that does what starting
 * that stream does (taking a scripted entry, say) and yields every chunk it would emit, or a stream to
 * run instead. Whoever runs the stream gets it unchanged; the loop runs `open` instead, exactly once
 * per request, and never builds the stream.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (
  stream: LazyArg<Stream.Stream<StreamChunk, ModelError>>,
  open: Effect.Effect<Opened, ModelError>
): Stream.Stream<StreamChunk, ModelError> =>
  // A fresh stream object, so a shared one (`Stream.empty`) never carries the opener.
  Object.defineProperty(Stream.suspend(stream), PreloadedTypeId, { value: open })

/**
 * The effect that opens `stream`, when {@link make} built it.
 *
 * @since 0.1.0
 * @category getters
 */
export const openOf = (stream: Stream.Stream<StreamChunk, ModelError>): Effect.Effect<Opened, ModelError> | undefined =>
  (stream as { readonly [PreloadedTypeId]?: Effect.Effect<Opened, ModelError> })[PreloadedTypeId]

/**
 * Whether an opened stream yielded its chunks (rather than a stream to run).
 *
 * @since 0.1.0
 * @category guards
 */
export const isChunks = (opened: Opened): opened is ReadonlyArray<StreamChunk> => Array.isArray(opened)
