import { describe, expect, it } from "@effect/vitest"
import { Cause, Chunk, Deferred, Effect, Exit, Fiber, Stream } from "effect"
import { forEachChunk } from "../../../src/internal/loop/StreamPull.js"

describe("StreamPull.forEachChunk", () => {
  it.effect("hands every chunk to f in order and completes when the stream ends", () =>
    Effect.gen(function*() {
      const seen: Array<number> = []
      yield* forEachChunk(Stream.rechunk(Stream.make(1, 2, 3, 4, 5), 2), (chunk) =>
        Effect.sync(() => void seen.push(...Chunk.toArray(chunk))))
      expect(seen).toEqual([1, 2, 3, 4, 5])
    }))

  it.effect("fails with the stream's failure, and with f's", () =>
    Effect.gen(function*() {
      expect(yield* Effect.flip(forEachChunk(Stream.concat(Stream.make(1), Stream.fail("bad")), () => Effect.void)))
        .toBe("bad")
      expect(yield* Effect.flip(forEachChunk(Stream.make(1), () => Effect.fail("f failed")))).toBe("f failed")
    }))

  it.effect("an interrupted run keeps the defect the stream's interruption raised", () =>
    Effect.gen(function*() {
      const boom = new Error("boom")
      const started = yield* Deferred.make<void>()
      const stream = Stream.concat(
        Stream.make(1),
        Stream.fromEffect(Effect.onInterrupt(Effect.never, () => Effect.die(boom)))
      )
      const run = yield* Effect.fork(forEachChunk(stream, () => Deferred.succeed(started, undefined)))
      yield* Deferred.await(started)
      const exit = yield* Fiber.interrupt(run)
      expect(Exit.isInterrupted(exit)).toBe(true)
      expect(Exit.isFailure(exit) && Array.from(Cause.defects(exit.cause))).toEqual([boom])
    }))
})
