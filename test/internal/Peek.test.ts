import { describe, expect, it } from "@effect/vitest"
import { Effect, Fiber, STM, TRef } from "effect"
import { peek } from "../../src/internal/Peek.js"

describe("peek", () => {
  it.effect("reads the value the last commit wrote, not a pending transaction's", () =>
    Effect.gen(function*() {
      const ref = yield* TRef.make({ n: 0 })
      expect(peek(ref)).toEqual({ n: 0 })
      yield* STM.commit(TRef.set(ref, { n: 1 }))
      expect(peek(ref)).toEqual({ n: 1 })
      // A transaction waiting to write has committed nothing. (It waits before writing: Effect 3.22
      // commits the writes of a re-run transaction that retries again, which tiller never relies on.)
      const gate = yield* TRef.make(false)
      const waiting = yield* Effect.fork(STM.commit(STM.gen(function*() {
        if (!(yield* TRef.get(gate))) return yield* STM.retry
        yield* TRef.set(ref, { n: 99 })
      })))
      yield* Effect.yieldNow()
      expect(peek(ref)).toEqual({ n: 1 })
      yield* STM.commit(TRef.set(gate, true))
      yield* Fiber.join(waiting)
      expect(peek(ref)).toEqual({ n: 99 })
      expect(peek(ref)).toEqual(yield* STM.commit(TRef.get(ref)))
    }))
})
