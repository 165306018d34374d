import { describe, expect, it } from "@effect/vitest"
import { Effect, Exit, Scope, STM, TQueue } from "effect"
import * as Outbox from "../../../src/internal/state/Outbox.js"
import { SessionState } from "../../../src/internal/state/SessionState.js"
import { Inbox } from "../../../src/services/Inbox.js"
import { drain, freshSession, subscribe, user } from "../../services/harness.js"

const insertedIds = (events: ReadonlyArray<{ readonly type: string }>) =>
  events.map((e) =>
    e.type === "agent/inbox/inserted" && "message" in e ? (e.message as { readonly id: string }).id : e.type
  )

describe("Outbox", () => {
  it.scoped("a transaction queues notifications only while someone is subscribed", () =>
    Effect.gen(function*() {
      const state = yield* SessionState
      const event = { type: "agent/inbox/inserted", message: user("x") } as const
      // Committed without delivery, so the queue shows what the transaction itself queued.
      yield* STM.commit(Outbox.publish(state.outbox, [event]))
      expect(yield* STM.commit(TQueue.size(state.outbox.queue))).toBe(0)
      const live = yield* subscribe
      yield* STM.commit(Outbox.publish(state.outbox, [event, event]))
      expect(yield* STM.commit(TQueue.size(state.outbox.queue))).toBe(2)
      yield* Outbox.deliver(state.outbox)
      expect((yield* drain(live)).length).toBe(2)
    }).pipe(Effect.provide(freshSession())))

  it.scoped("with no subscriber nothing is queued; a later subscriber gets exactly what commits after it", () =>
    Effect.gen(function*() {
      const inbox = yield* Inbox
      const state = yield* SessionState
      yield* inbox.append("next-step", user("before-1"))
      yield* inbox.append("next-step", user("before-2"))
      expect(yield* STM.commit(TQueue.size(state.outbox.queue))).toBe(0)
      const live = yield* subscribe
      yield* inbox.append("next-step", user("after-1"))
      yield* inbox.append("next-turn", user("after-2"))
      expect(insertedIds(yield* drain(live))).toEqual(["after-1", "after-2"])
    }).pipe(Effect.provide(freshSession())))

  it.scoped("after the last subscriber leaves, notifications stop queueing; a new subscriber starts fresh", () =>
    Effect.gen(function*() {
      const inbox = yield* Inbox
      const state = yield* SessionState
      const scope = yield* Scope.make()
      const first = yield* Scope.extend(subscribe, scope)
      yield* inbox.append("next-step", user("a"))
      expect(insertedIds(yield* drain(first))).toEqual(["a"])
      yield* Scope.close(scope, Exit.void)
      yield* inbox.append("next-step", user("b"))
      expect(yield* STM.commit(TQueue.size(state.outbox.queue))).toBe(0)
      const second = yield* subscribe
      yield* inbox.append("next-step", user("c"))
      expect(insertedIds(yield* drain(second))).toEqual(["c"])
    }).pipe(Effect.provide(freshSession())))

  it.scoped("two subscribers each get every notification, in commit order", () =>
    Effect.gen(function*() {
      const inbox = yield* Inbox
      const one = yield* subscribe
      yield* inbox.append("next-step", user("a"))
      const two = yield* subscribe
      yield* inbox.append("next-step", user("b"))
      yield* inbox.append("next-turn", user("c"))
      expect(insertedIds(yield* drain(one))).toEqual(["a", "b", "c"])
      expect(insertedIds(yield* drain(two))).toEqual(["b", "c"])
    }).pipe(Effect.provide(freshSession())))
})
