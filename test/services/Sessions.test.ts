/**
 * `Sessions`: a poisoned agent does not outlive its last user, and `reopen` replaces an agent that
 * users still hold (issue 27 item 3).
 */
import { describe, expect, it } from "@effect/vitest"
import { Context, Effect, Exit, Layer, Scope } from "effect"
import { AgentDisposed, PersistenceError } from "../../src/domain/Errors.js"
import { SessionId } from "../../src/domain/Ids.js"
import { ScriptedModel } from "../../src/layers/ScriptedModel.js"
import { Sessions } from "../../src/layers/Sessions.js"
import { Driver } from "../../src/services/Driver.js"
import { SessionLog } from "../../src/services/SessionLog.js"
import { MemoryStoreControl, SessionStore } from "../../src/services/SessionStore.js"
import { Tools } from "../../src/services/Tools.js"
import { plugin, user } from "./harness.js"

const id = SessionId.make("s")

/** Sessions with a one-hour idle time-to-live over a memory store whose failures the test controls. */
const sessions = Sessions.layer({ model: { provider: "p", model: "m" }, idleTimeToLive: "1 hour" }).pipe(
  Layer.provideMerge(Layer.mergeAll(
    SessionStore.layerMemory,
    ScriptedModel.layer([ScriptedModel.text("one"), ScriptedModel.text("two")]),
    Tools.layer()
  ))
)

/** Opens the session in a scope of its own (a user) and poisons it: the store fails every append retry. */
const openPoisoned = Effect.gen(function*() {
  const control = yield* MemoryStoreControl
  const holder = yield* Scope.make()
  const services = yield* Scope.extend(Effect.flatMap(Sessions, (s) => s.open(id)), holder)
  yield* control.failAppends(3)
  expect(yield* Effect.flip(Context.get(services, Driver).inject(plugin("C")))).toBeInstanceOf(PersistenceError)
  // The store is healthy again: only the agent is poisoned.
  yield* control.failAppends(0)
  return { holder, services }
})

/** A follow-up through `services`, waited on until the turn it starts ends; the session's event types. */
const followupAndWait = (services: Context.Context<Driver | SessionLog>, text: string) =>
  Effect.gen(function*() {
    const driver = Context.get(services, Driver)
    yield* driver.followup(user(text))
    yield* driver.whenIdle
    const events = yield* Context.get(services, SessionLog).events
    return events.map((e) => e.type)
  })

describe("Sessions.open after a poisoned session", () => {
  it.scoped("the last user's release closes the poisoned agent: the next open resumes afresh without waiting for the time-to-live", () =>
    Effect.gen(function*() {
      const { holder, services } = yield* openPoisoned
      yield* Scope.close(holder, Exit.void)
      // No TestClock adjustment: the idle time-to-live (one hour) never passes.
      const types = yield* Effect.scoped(Effect.flatMap(Effect.flatMap(Sessions, (s) => s.open(id)), (fresh) => {
        expect(Context.get(fresh, Driver)).not.toBe(Context.get(services, Driver))
        return followupAndWait(fresh, "A")
      }))
      // The resume wrote the end-seed, and the follow-up ran its turn to the end.
      expect(types).toEqual([
        "session/end-seed",
        "agent/inbox/spliced",
        "turn/start",
        "agent/inbox/spliced",
        "step/start",
        "user/message",
        "request/header",
        "assistant/chunk",
        "assistant/chunk",
        "assistant/chunk",
        "assistant/chunk",
        "assistant/message",
        "step/end",
        "turn/end"
      ])
    }).pipe(Effect.provide(sessions)))

  it.scoped("while another user holds the poisoned agent, open shares it; once both release, open is fresh", () =>
    Effect.gen(function*() {
      const all = yield* Sessions
      const { holder, services } = yield* openPoisoned
      const second = yield* Scope.make()
      const shared = yield* Scope.extend(all.open(id), second)
      expect(Context.get(shared, Driver)).toBe(Context.get(services, Driver))
      yield* Scope.close(holder, Exit.void)
      const still = yield* Effect.scoped(
        Effect.flatMap(all.open(id), (c) => Effect.flip(Context.get(c, Driver).followup(user("A"))))
      )
      expect(still).toBeInstanceOf(PersistenceError)
      yield* Scope.close(second, Exit.void)
      const types = yield* Effect.scoped(Effect.flatMap(all.open(id), (fresh) => followupAndWait(fresh, "B")))
      expect(types.at(-1)).toBe("turn/end")
    }).pipe(Effect.provide(sessions)))

  it.scoped("a session poisoned after its last user released it is opened afresh by the next open", () =>
    Effect.gen(function*() {
      const all = yield* Sessions
      const control = yield* MemoryStoreControl
      const driver = yield* Effect.scoped(Effect.map(all.open(id), (c) => Context.get(c, Driver)))
      // Nobody holds the agent; it idles in the map and is poisoned there.
      yield* control.failAppends(3)
      expect(yield* Effect.flip(driver.inject(plugin("C")))).toBeInstanceOf(PersistenceError)
      yield* control.failAppends(0)
      const types = yield* Effect.scoped(Effect.flatMap(all.open(id), (fresh) => {
        expect(Context.get(fresh, Driver)).not.toBe(driver)
        return followupAndWait(fresh, "A")
      }))
      expect(types.at(-1)).toBe("turn/end")
    }).pipe(Effect.provide(sessions)))
})

describe("Sessions.reopen", () => {
  it.scoped("replaces a poisoned agent that a user still holds; that user then sees a disposed agent", () =>
    Effect.gen(function*() {
      const all = yield* Sessions
      const { holder, services } = yield* openPoisoned
      const types = yield* Effect.scoped(Effect.flatMap(all.reopen(id), (fresh) => {
        expect(Context.get(fresh, Driver)).not.toBe(Context.get(services, Driver))
        return followupAndWait(fresh, "A")
      }))
      expect(types[0]).toBe("session/end-seed")
      expect(types.at(-1)).toBe("turn/end")
      // The old agent was disposed under its user: its operations fail as on any disposed agent.
      expect(yield* Effect.flip(Context.get(services, Driver).followup(user("B")))).toBeInstanceOf(AgentDisposed)
      yield* Scope.close(holder, Exit.void)
      // The user's late release leaves the new agent in place.
      const opened = yield* Effect.scoped(Effect.flatMap(all.open(id), (c) => Context.get(c, SessionLog).events))
      expect(opened.map((e) => e.type).at(-1)).toBe("turn/end")
    }).pipe(Effect.provide(sessions)))

  it.scoped("closes a healthy agent in use and opens a new one on the same log", () =>
    Effect.gen(function*() {
      const all = yield* Sessions
      const holder = yield* Scope.make()
      const first = yield* Scope.extend(all.open(id), holder)
      yield* followupAndWait(first, "A")
      const second = yield* Scope.extend(all.reopen(id), holder)
      expect(Context.get(second, Driver)).not.toBe(Context.get(first, Driver))
      expect(yield* Effect.flip(Context.get(first, Driver).inject(plugin("C")))).toBeInstanceOf(AgentDisposed)
      // The new agent resumed the stored log: the first turn, then its own end-seed.
      const types = yield* Context.get(second, SessionLog).events.pipe(Effect.map((es) => es.map((e) => e.type)))
      expect(types.filter((t) => t === "turn/end").length).toBe(1)
      expect(types.at(-1)).toBe("session/end-seed")
      // Later opens share the new agent.
      const again = yield* Effect.scoped(Effect.map(all.open(id), (c) => Context.get(c, Driver)))
      expect(again).toBe(Context.get(second, Driver))
      yield* Scope.close(holder, Exit.void)
    }).pipe(Effect.provide(sessions)))

  it.scoped("of a session not open in this process opens it", () =>
    Effect.gen(function*() {
      const all = yield* Sessions
      const types = yield* Effect.scoped(Effect.flatMap(all.reopen(id), (c) => followupAndWait(c, "A")))
      expect(types[0]).toBe("agent/inbox/spliced")
      expect(types.at(-1)).toBe("turn/end")
    }).pipe(Effect.provide(sessions)))
})
