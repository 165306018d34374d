/**
 * Running a stream chunk by chunk through its pull. Unlike `Stream.runForEachChunk` in Effect 3.22,
 * an interrupted run keeps the defects the stream's own interruption raised (a finalizer that dies,
 * say) in its exit, so the loop can publish them (SPEC 3.10).
 *
 * @since 0.1.0
 */
import type { Chunk } from "effect"
import { Effect, Option, Stream } from "effect"

/**
 * Pulls `stream` until it ends, handing each chunk to `f`; fails with the stream's or `f`'s failure.
 *
 * @since 0.1.0
 * @category combinators
 */
export const forEachChunk = <A, E, E2, R, R2>(
  stream: Stream.Stream<A, E, R>,
  f: (chunk: Chunk.Chunk<A>) => Effect.Effect<void, E2, R2>
): Effect.Effect<void, E | E2, R | R2> =>
  Effect.scoped(Effect.flatMap(Stream.toPull(stream), (pull) => {
    const loop: Effect.Effect<void, E | E2, R | R2> = Effect.matchEffect(pull, {
      onFailure: Option.match({ onNone: () => Effect.void, onSome: (error: E) => Effect.fail(error) }),
      onSuccess: (chunk) => Effect.zipRight(f(chunk), loop)
    })
    return loop
  }))
