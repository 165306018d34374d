import { describe, expect, it } from "@effect/vitest"
import { Effect, Fiber, STM, TRef } from "effect"
import { peek, poke } from "../../../src/internal/state/Peek.js"

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

describe("poke", () => {
  it.effect("replaces the committed value and wakes a transaction waiting on the ref", () =>
    Effect.gen(function*() {
      const ref = yield* TRef.make(0)
      const waiting = yield* Effect.fork(STM.commit(STM.gen(function*() {
        const n = yield* TRef.get(ref)
        if (n < 2) return yield* STM.retry
        return n
      })))
      yield* Effect.yieldNow()
      yield* Effect.withFiberRuntime((fiber) => Effect.sync(() => poke(ref, 1, fiber)))
      yield* Effect.yieldNow()
      // Woken, re-run, still waiting (1 < 2): registered again.
      expect(waiting.unsafePoll()).toBeNull()
      expect(yield* STM.commit(TRef.get(ref))).toBe(1)
      yield* Effect.withFiberRuntime((fiber) => Effect.sync(() => poke(ref, 2, fiber)))
      expect(yield* Fiber.join(waiting)).toBe(2)
      expect(peek(ref)).toBe(2)
    }))

  it.effect("makes a transaction that read the old value see the new one when it commits", () =>
    Effect.gen(function*() {
      const ref = yield* TRef.make({ n: 0 })
      // A transaction that writes after reading: poke between two commits is a commit like any other.
      yield* Effect.withFiberRuntime((fiber) => Effect.sync(() => poke(ref, { n: 5 }, fiber)))
      yield* STM.commit(TRef.update(ref, (v) => ({ n: v.n + 1 })))
      expect(peek(ref)).toEqual({ n: 6 })
    }))
})
