import { describe, expect, it } from "@effect/vitest"
import { Effect, Exit, Fiber, Option } from "effect"
import { PersistenceError } from "../../src/domain/Errors.js"
import type { SessionEvent } from "../../src/domain/Event.js"
import { SessionId } from "../../src/domain/Ids.js"
import { MemoryStoreControl, SessionStore } from "../../src/services/SessionStore.js"
import { makeHeader, makeUserMessage, sessionStoreContract, turnEvents } from "../contracts/SessionStoreContract.js"

sessionStoreContract("memory", SessionStore.layerMemory)

const id = SessionId.make("session")
const first = turnEvents(0, 1, 1000, makeUserMessage("a", "hello"), "hi") as [SessionEvent, ...Array<SessionEvent>]
const second = turnEvents(14, 2, 2000, makeUserMessage("b", "again"), "yes") as [SessionEvent, ...Array<SessionEvent>]
const third = turnEvents(28, 3, 3000, makeUserMessage("c", "more"), "ok") as [SessionEvent, ...Array<SessionEvent>]

/** Yields until the store has seen `n` append calls, then once more so the last one reaches its wait. */
const awaitAppendCalls = (n: number) =>
  Effect.gen(function*() {
    const control = yield* MemoryStoreControl
    while ((yield* control.appendCalls) < n) yield* Effect.yieldNow()
    yield* Effect.yieldNow()
  })

const storedEvents = Effect.flatMap(SessionStore, (store) => store.load(id)).pipe(Effect.map((loaded) => loaded.events))

describe("MemoryStoreControl", () => {
  it.effect("failAppends(n) fails exactly the next n append calls, storing nothing", () =>
    Effect.gen(function*() {
      const store = yield* SessionStore
      const control = yield* MemoryStoreControl
      yield* store.create(makeHeader(id), [])
      yield* control.failAppends(2)
      for (let attempt = 0; attempt < 2; attempt++) {
        const error = yield* Effect.flip(store.append(id, first))
        expect(error).toBeInstanceOf(PersistenceError)
        expect(error).toMatchObject({ sessionId: id, operation: "append" })
        expect(yield* storedEvents).toStrictEqual([])
      }
      yield* store.append(id, first)
      yield* store.append(id, second)
      expect(yield* storedEvents).toStrictEqual([...first, ...second])
      expect(yield* control.appendCalls).toBe(4)
    }).pipe(Effect.provide(SessionStore.layerMemory)))

  it.effect("an injected failure is consumed even by an append that would have been rejected", () =>
    Effect.gen(function*() {
      const store = yield* SessionStore
      const control = yield* MemoryStoreControl
      yield* store.create(makeHeader(id), [])
      yield* control.failAppends(1)
      yield* Effect.flip(store.append(SessionId.make("unknown"), first))
      yield* store.append(id, first)
      expect(yield* storedEvents).toStrictEqual(first)
    }).pipe(Effect.provide(SessionStore.layerMemory)))

  it.effect("hold blocks appends until release; queued appends then commit in call order", () =>
    Effect.gen(function*() {
      const store = yield* SessionStore
      const control = yield* MemoryStoreControl
      yield* store.create(makeHeader(id), [])
      yield* control.hold
      const firstFiber = yield* Effect.fork(store.append(id, first))
      yield* awaitAppendCalls(1)
      const secondFiber = yield* Effect.fork(store.append(id, second))
      yield* awaitAppendCalls(2)
      expect(Option.isNone(yield* Fiber.poll(firstFiber))).toBe(true)
      expect(Option.isNone(yield* Fiber.poll(secondFiber))).toBe(true)
      expect(yield* storedEvents).toStrictEqual([])
      yield* control.release
      // `second` starts at seq 14: it commits only if `first` committed before it.
      yield* Fiber.join(secondFiber)
      yield* Fiber.join(firstFiber)
      expect(yield* storedEvents).toStrictEqual([...first, ...second])
      yield* store.append(id, third)
      expect(yield* storedEvents).toStrictEqual([...first, ...second, ...third])
    }).pipe(Effect.provide(SessionStore.layerMemory)))

  it.effect("an interrupted held append stores nothing and does not block later appends", () =>
    Effect.gen(function*() {
      const store = yield* SessionStore
      const control = yield* MemoryStoreControl
      yield* store.create(makeHeader(id), [])
      yield* control.hold
      const interrupted = yield* Effect.fork(store.append(id, first))
      yield* awaitAppendCalls(1)
      const retried = yield* Effect.fork(store.append(id, first))
      yield* awaitAppendCalls(2)
      expect(Exit.isInterrupted(yield* Fiber.interrupt(interrupted))).toBe(true)
      expect(yield* storedEvents).toStrictEqual([])
      yield* control.release
      yield* Fiber.join(retried)
      expect(yield* storedEvents).toStrictEqual(first)
    }).pipe(Effect.provide(SessionStore.layerMemory)))

  it.effect("appendCalls counts every append call: committed, rejected, injected failures and held", () =>
    Effect.gen(function*() {
      const store = yield* SessionStore
      const control = yield* MemoryStoreControl
      expect(yield* control.appendCalls).toBe(0)
      yield* store.create(makeHeader(id), [])
      expect(yield* control.appendCalls).toBe(0)
      yield* store.append(id, first)
      yield* Effect.flip(store.append(id, first))
      yield* Effect.flip(store.append(SessionId.make("unknown"), first))
      yield* control.failAppends(1)
      yield* Effect.flip(store.append(id, second))
      expect(yield* control.appendCalls).toBe(4)
      yield* control.hold
      const held = yield* Effect.fork(store.append(id, second))
      yield* awaitAppendCalls(5)
      expect(yield* control.appendCalls).toBe(5)
      yield* control.release
      yield* Fiber.join(held)
      expect(yield* control.appendCalls).toBe(5)
    }).pipe(Effect.provide(SessionStore.layerMemory)))

  it.effect("snapshot is a crash image: layerMemoryFrom restores committed contents, not a held append", () =>
    Effect.gen(function*() {
      const store = yield* SessionStore
      const control = yield* MemoryStoreControl
      const other = SessionId.make("other")
      yield* store.create(makeHeader(id), first)
      yield* store.create(makeHeader(other, { metadata: { n: 1 } }), [])
      yield* store.append(id, second)
      yield* control.hold
      const held = yield* Effect.fork(store.append(id, third))
      yield* awaitAppendCalls(2)
      const snapshot = yield* control.snapshot
      yield* control.release
      yield* Fiber.join(held)
      expect(yield* storedEvents).toStrictEqual([...first, ...second, ...third])

      const restored = yield* Effect.gen(function*() {
        const reopened = yield* SessionStore
        const reopenedControl = yield* MemoryStoreControl
        const loaded = yield* reopened.load(id)
        const listed = yield* reopened.list
        // The restored store is live and independent of the original.
        yield* reopened.append(id, third)
        yield* reopened.append(
          other,
          turnEvents(0, 1, 1000, makeUserMessage("o", "x"), "y") as [SessionEvent, ...Array<SessionEvent>]
        )
        return { loaded, listed, calls: yield* reopenedControl.appendCalls, after: (yield* reopened.load(id)).events }
      }).pipe(Effect.provide(SessionStore.layerMemoryFrom(snapshot)))
      expect(restored.loaded).toStrictEqual({ header: makeHeader(id), events: [...first, ...second] })
      expect(restored.listed).toStrictEqual([makeHeader(id), makeHeader(other, { metadata: { n: 1 } })])
      expect(restored.calls).toBe(2)
      expect(restored.after).toStrictEqual([...first, ...second, ...third])
      expect((yield* store.load(other)).events).toStrictEqual([])

      // The same snapshot restores the same image again: it is not affected by later writes.
      const again = yield* Effect.flatMap(SessionStore, (reopened) => reopened.load(id)).pipe(
        Effect.provide(SessionStore.layerMemoryFrom(snapshot))
      )
      expect(again.events).toStrictEqual([...first, ...second])
    }).pipe(Effect.provide(SessionStore.layerMemory)))

  it.effect("each layerMemory build is a fresh, empty store", () =>
    Effect.gen(function*() {
      yield* Effect.flatMap(SessionStore, (store) => store.create(makeHeader(id), first)).pipe(
        Effect.provide(SessionStore.layerMemory)
      )
      const exists = yield* Effect.flatMap(SessionStore, (store) => store.exists(id)).pipe(
        Effect.provide(SessionStore.layerMemory)
      )
      expect(exists).toBe(false)
    }))
})
