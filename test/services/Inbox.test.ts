import { describe, expect, it } from "@effect/vitest"
import { Effect, Exit, Fiber, Layer, Option, STM, TRef } from "effect"
import { checkLog } from "../../src/domain/Check.js"
import { MessageId, SessionId } from "../../src/domain/Ids.js"
import { MAX_JSON_SIZE } from "../../src/domain/Json.js"
import { userMessage } from "../../src/domain/Message.js"
import type { UserMessage } from "../../src/domain/Values.js"
import { SessionState } from "../../src/internal/state/SessionState.js"
import { Inbox } from "../../src/services/Inbox.js"
import { SessionLog } from "../../src/services/SessionLog.js"
import { MemoryStoreControl, SessionStore } from "../../src/services/SessionStore.js"
import { claimTurn, drain, freshSession, plugin, sessionOn, splices, subscribe, user } from "./harness.js"

const id = (s: string) => MessageId.make(s)

describe("Inbox", () => {
  it.scoped("append and prepend write one insertion each, with live notifications", () =>
    Effect.gen(function*() {
      const inbox = yield* Inbox
      const live = yield* subscribe
      const [a, b, c] = [user("a"), user("b"), plugin("c")]
      yield* inbox.append("next-turn", a)
      yield* inbox.prepend("next-turn", b)
      yield* inbox.append("next-step", c)
      expect(yield* splices).toEqual([
        { target: "next-turn", start: 0, inserted: [a] },
        { target: "next-turn", start: 0, inserted: [b] },
        { target: "next-step", start: 0, inserted: [c] }
      ])
      expect(yield* inbox.snapshot).toEqual({ nextTurn: [b, a], nextStep: [c] })
      expect(yield* inbox.hasPending).toBe(true)
      expect((yield* drain(live)).map((e) => e.type === "agent/inbox/inserted" && e.message.id)).toEqual([
        "a",
        "b",
        "c"
      ])
      const log = yield* SessionLog
      expect(yield* log.durableSeq).toBe(2)
    }).pipe(Effect.provide(freshSession())))

  it.scoped("P39 (a): replace and the identity rules", () =>
    Effect.gen(function*() {
      const inbox = yield* Inbox
      const live = yield* subscribe
      const [O, N, R] = [user("O"), plugin("N"), user("R")]
      yield* inbox.append("next-turn", O)
      yield* inbox.append("next-step", N)
      expect(yield* inbox.replace(id("missing"), user("R0"))).toBe(false)
      expect(yield* inbox.idState(id("R0"))).toEqual(Option.none())
      expect(yield* inbox.replace(O.id, R)).toBe(true)
      expect((yield* splices)[2]).toEqual({
        target: "next-turn",
        start: 0,
        removedCount: 1,
        inserted: [R],
        outcome: "canceled"
      })
      expect(yield* inbox.idState(O.id)).toEqual(Option.some("discarded"))
      const N2 = plugin("N", "N, rewritten")
      expect(yield* inbox.replace(N.id, N2)).toBe(true)
      expect(yield* inbox.nextStep).toEqual([N2])
      const dupPending = yield* Effect.flip(inbox.replace(R.id, user("N")))
      expect(dupPending).toMatchObject({ _tag: "DuplicateMessage", id: "N", state: "pending" })
      const dupDiscarded = yield* Effect.flip(inbox.replace(R.id, user("O")))
      expect(dupDiscarded).toMatchObject({ _tag: "DuplicateMessage", id: "O", state: "discarded" })
      const events = (yield* drain(live)).map((e) => `${e.type.slice(12)}:${"message" in e ? e.message.id : ""}`)
      expect(events).toEqual(["inserted:O", "inserted:N", "discarded:O", "inserted:R", "discarded:N", "inserted:N"])
      expect((yield* splices).length).toBe(4)
    }).pipe(Effect.provide(freshSession())))

  it.scoped("P39 (b): splice normalisation, removal and coordinate errors", () =>
    Effect.gen(function*() {
      const inbox = yield* Inbox
      const [R, F, V, H] = [user("R"), user("F"), user("V"), user("H")]
      yield* inbox.append("next-turn", R)
      yield* inbox.splice("next-turn", 0, 0, [F, V])
      expect(yield* inbox.nextTurn).toEqual([F, V, R])
      expect(yield* inbox.splice("next-turn", -1, 1, [])).toEqual([R])
      expect((yield* splices).at(-1)).toEqual({
        target: "next-turn",
        start: 2,
        removedCount: 1,
        inserted: [],
        outcome: "canceled"
      })
      expect(yield* inbox.remove(R.id)).toBe(false)
      expect(yield* Effect.flip(inbox.append("next-step", F))).toMatchObject({
        _tag: "DuplicateMessage",
        state: "pending"
      })
      const before = (yield* splices).length
      expect(yield* Effect.flip(inbox.splice("next-turn", NaN, 0, [H]))).toMatchObject({
        _tag: "InvalidSplice",
        target: "next-turn"
      })
      expect(yield* Effect.flip(inbox.splice("next-turn", 0, "1" as unknown as number, [H]))).toMatchObject({
        _tag: "InvalidSplice"
      })
      expect(yield* inbox.splice("next-turn", 5, 0, [])).toEqual([])
      expect((yield* splices).length).toBe(before)
      expect(yield* inbox.idState(H.id)).toEqual(Option.none())
      // +Infinity appends and removes the rest; -Infinity prepends.
      yield* inbox.splice("next-turn", Infinity, 0, [H])
      expect((yield* inbox.nextTurn).map((m) => m.id)).toEqual(["F", "V", "H"])
      expect((yield* inbox.splice("next-turn", -Infinity, Infinity, [])).map((m) => m.id)).toEqual(["F", "V", "H"])
    }).pipe(Effect.provide(freshSession())))

  it.scoped("P39 (c): clear discards next-step first, then next-turn; a second clear writes nothing", () =>
    Effect.gen(function*() {
      const inbox = yield* Inbox
      yield* inbox.append("next-turn", user("t1"))
      yield* inbox.append("next-turn", user("t2"))
      yield* inbox.append("next-step", plugin("s1"))
      const live = yield* subscribe
      yield* inbox.clear
      expect((yield* splices).slice(3)).toEqual([
        { target: "next-step", start: 0, removedCount: 1, inserted: [], outcome: "canceled" },
        { target: "next-turn", start: 0, removedCount: 2, inserted: [], outcome: "canceled" }
      ])
      expect((yield* drain(live)).map((e) => "message" in e && e.message.id)).toEqual(["s1", "t1", "t2"])
      yield* inbox.clear
      expect((yield* splices).length).toBe(5)
      expect(yield* inbox.idState(id("t1"))).toEqual(Option.some("discarded"))
    }).pipe(Effect.provide(freshSession())))

  it.scoped("a replacement may keep its id, and splice may re-insert the ids it removes", () =>
    Effect.gen(function*() {
      const inbox = yield* Inbox
      yield* inbox.append("next-step", plugin("k"))
      const edited = plugin("k", "edited")
      expect(yield* inbox.splice("next-step", 0, 1, [edited])).toEqual([plugin("k")])
      expect(yield* inbox.nextStep).toEqual([edited])
      expect(yield* inbox.idState(id("k"))).toEqual(Option.some("pending"))
    }).pipe(Effect.provide(freshSession())))

  it.scoped("bad input fails with a typed error and records nothing", () =>
    Effect.gen(function*() {
      const inbox = yield* Inbox
      const cyclic: Record<string, unknown> = { kind: "plugin" }
      cyclic.self = cyclic
      const bad: ReadonlyArray<unknown> = [
        { id: "b1", role: "user", content: [{ type: "text", text: "x" }], source: { kind: "plugin", n: BigInt(1) } },
        { id: "b2", role: "user", content: [{ type: "text", text: "x" }], source: { kind: "plugin", f: () => 1 } },
        { id: "b3", role: "user", content: [{ type: "text", text: "x" }], source: { kind: "plugin", n: NaN } },
        { id: "b4", role: "user", content: [{ type: "text", text: "x" }], source: cyclic },
        { id: "b5", role: "user", content: [{ type: "text", text: "x" }], source: { kind: "" } },
        { id: "", role: "user", content: [{ type: "text", text: "x" }], source: { kind: "user" } },
        { id: "b7", role: "assistant", content: [], source: { kind: "user" } },
        { id: "interrupted-tool-result-x-1", role: "user", content: [], source: { kind: "user" } }
      ]
      for (const m of bad) {
        const error = yield* Effect.flip(inbox.append("next-step", m as UserMessage))
        expect(error._tag).toBe("InvalidEvent")
        expect(error.message.length).toBeGreaterThan(0)
      }
      expect(yield* Effect.flip(inbox.splice("next-step", 0, 0, [user("ok"), bad[0] as UserMessage]))).toMatchObject({
        _tag: "InvalidEvent"
      })
      expect(yield* Effect.flip(inbox.splice("next-step", 0, 0, [user("twice"), user("twice")]))).toMatchObject({
        _tag: "DuplicateMessage",
        id: "twice",
        state: "pending"
      })
      expect(yield* splices).toEqual([])
      expect(yield* inbox.idState(id("ok"))).toEqual(Option.none())
      expect(yield* inbox.idState(id("twice"))).toEqual(Option.none())
    }).pipe(Effect.provide(freshSession())))

  it.scoped("the stored message is a frozen snapshot of the input", () =>
    Effect.gen(function*() {
      const inbox = yield* Inbox
      const input = {
        id: id("m"),
        role: "user" as const,
        content: [{ type: "text" as const, text: "before" }],
        source: { kind: "user" }
      }
      yield* inbox.append("next-step", input)
      input.content[0]!.text = "after"
      const [stored] = yield* inbox.nextStep
      expect(stored!.content).toEqual([{ type: "text", text: "before" }])
      expect(Object.isFrozen(stored!.content[0])).toBe(true)
    }).pipe(Effect.provide(freshSession())))

  it.scoped("an operation is acknowledged only once its events are durable", () =>
    Effect.gen(function*() {
      const inbox = yield* Inbox
      const control = yield* MemoryStoreControl
      const log = yield* SessionLog
      yield* control.hold
      const fiber = yield* Effect.fork(inbox.append("next-turn", user("held")))
      yield* Effect.yieldNow()
      yield* Effect.sleep(0)
      expect(fiber.unsafePoll()).toBeNull()
      expect((yield* inbox.nextTurn).map((m) => m.id)).toEqual(["held"])
      expect(yield* log.durableSeq).toBe(-1)
      yield* control.release
      yield* Fiber.join(fiber)
      expect(yield* log.durableSeq).toBe(0)
    }).pipe(Effect.provide(freshSession())))

  it.scoped("a duplicate answer waits for durability too", () =>
    Effect.gen(function*() {
      const inbox = yield* Inbox
      const control = yield* MemoryStoreControl
      yield* control.hold
      const first = yield* Effect.fork(inbox.append("next-turn", user("d")))
      const second = yield* Effect.fork(Effect.flip(inbox.append("next-turn", user("d"))))
      yield* Effect.sleep(0)
      expect(second.unsafePoll()).toBeNull()
      yield* control.release
      yield* Fiber.join(first)
      expect(yield* Fiber.join(second)).toMatchObject({ _tag: "DuplicateMessage", state: "pending" })
    }).pipe(Effect.provide(freshSession())))

  it.scoped("a store that keeps failing poisons the session: fail-stop, no change", () =>
    Effect.gen(function*() {
      const inbox = yield* Inbox
      const control = yield* MemoryStoreControl
      const log = yield* SessionLog
      yield* control.failAppends(3)
      const error = yield* Effect.flip(inbox.append("next-turn", user("p1")))
      expect(error._tag).toBe("PersistenceError")
      expect(yield* control.appendCalls).toBe(3)
      const events = (yield* log.events).length
      expect(yield* Effect.flip(inbox.append("next-turn", user("p2")))).toMatchObject({ _tag: "PersistenceError" })
      expect(yield* Effect.flip(inbox.remove(id("p1")))).toMatchObject({ _tag: "PersistenceError" })
      expect(yield* Effect.flip(log.flush)).toMatchObject({ _tag: "PersistenceError" })
      expect((yield* log.events).length).toBe(events)
      expect(yield* inbox.idState(id("p2"))).toEqual(Option.none())
    }).pipe(Effect.provide(freshSession())))

  it.scoped("two failures then success: the default write retry hides them", () =>
    Effect.gen(function*() {
      const inbox = yield* Inbox
      const control = yield* MemoryStoreControl
      yield* control.failAppends(2)
      yield* inbox.append("next-turn", user("r"))
      expect(yield* control.appendCalls).toBe(3)
      expect(yield* (yield* SessionLog).durableSeq).toBe(0)
    }).pipe(Effect.provide(freshSession())))

  it.effect("after the session's scope closes, mutations fail with AgentDisposed and reads still work", () =>
    Effect.gen(function*() {
      const inbox = yield* Effect.scoped(
        Effect.gen(function*() {
          const inbox = yield* Inbox
          yield* inbox.append("next-turn", user("kept"))
          return inbox
        }).pipe(Effect.provide(sessionOn({ sessionId: SessionId.make("d1") })))
      )
      expect(yield* Effect.flip(inbox.append("next-turn", user("late")))).toMatchObject({
        _tag: "AgentDisposed",
        sessionId: "d1"
      })
      expect(yield* Effect.flip(inbox.clear)).toMatchObject({ _tag: "AgentDisposed" })
      expect((yield* inbox.nextTurn).map((m) => m.id)).toEqual(["kept"])
      const store = yield* SessionStore
      const stored = yield* store.load(SessionId.make("d1"))
      expect(stored.events.length).toBe(1)
    }).pipe(Effect.provide(SessionStore.layerMemory)))

  it.scoped("claim atomicity: 10,000 concurrent inserts racing repeated claims", () =>
    Effect.gen(function*() {
      const inbox = yield* Inbox
      const state = yield* SessionState
      const N = Number(process.env.CLAIM_N ?? 10_000)
      const claimed: Array<string> = []
      let inserting = true
      const claimer = yield* Effect.fork(
        Effect.gen(function*() {
          while (inserting || (yield* inbox.hasPending)) {
            const batch = yield* claimTurn
            for (const m of batch) claimed.push(m.id)
            yield* Effect.yieldNow()
          }
        })
      )
      yield* Effect.forEach(
        Array.from({ length: N }, (_, i) => i),
        (i) => inbox.append(i % 3 === 0 ? "next-turn" : "next-step", i % 2 === 0 ? user(`m${i}`) : plugin(`m${i}`)),
        { concurrency: "unbounded", discard: true }
      )
      inserting = false
      yield* Fiber.join(claimer)
      expect(claimed.length).toBe(N)
      expect(new Set(claimed).size).toBe(N)
      const events = yield* (yield* SessionLog).events
      expect(checkLog(events, { closed: true })).toEqual([])
      const { fold } = yield* STM.commit(TRef.get(state.log))
      expect(fold.inbox.nextStep.length + fold.inbox.nextTurn.length).toBe(0)
      for (const i of [0, 1, 2, 9_999]) expect(yield* inbox.idState(id(`m${i}`))).toEqual(Option.some("claimed"))
    }).pipe(Effect.provide(freshSession())))

  it.effect("the pending lists are rebuilt from the log on resume", () =>
    Effect.gen(function*() {
      yield* Effect.scoped(
        Effect.gen(function*() {
          const inbox = yield* Inbox
          yield* inbox.append("next-turn", user("q1"))
          yield* inbox.append("next-step", plugin("c1"))
          yield* inbox.append("next-turn", user("q2"))
          yield* inbox.remove(id("q1"))
        }).pipe(Effect.provide(sessionOn({ sessionId: SessionId.make("r1") })))
      )
      const exit = yield* Effect.scoped(
        Effect.gen(function*() {
          const inbox = yield* Inbox
          const log = yield* SessionLog
          expect(yield* inbox.snapshot).toEqual({ nextTurn: [user("q2")], nextStep: [plugin("c1")] })
          expect(yield* inbox.idState(id("q1"))).toEqual(Option.some("discarded"))
          expect(yield* Effect.flip(inbox.append("next-turn", user("q1")))).toMatchObject({ state: "discarded" })
          const events = yield* log.events
          expect(events.at(-1)?.type).toBe("session/end-seed")
          expect(log.firstLiveSeq).toBe(4)
        }).pipe(Effect.provide(sessionOn({ resume: SessionId.make("r1") })), Effect.exit)
      )
      expect(Exit.isSuccess(exit)).toBe(true)
    }).pipe(Effect.provide(SessionStore.layerMemory)))
})

// Keep the harness's layer type import used.
export type _ = Layer.Layer<never>

/** An object nested `levels` deep (the outermost object is level 1). */
const nestedValue = (levels: number): unknown => {
  let value: unknown = 1
  for (let i = 0; i < levels; i++) value = { a: value }
  return value
}

const trap = () => {
  throw new Error("trap")
}

describe("Inbox: input past the limits or unreadable", () => {
  const deepMessage = (name: string, levels: number) =>
    ({
      id: name,
      role: "user",
      content: [{ type: "text", text: name }],
      source: { kind: "user", a: nestedValue(levels) }
    }) as unknown as UserMessage

  it.scoped("messages nested 10,000 and 100,000 levels are InvalidEvent from every operation; nothing changes, the inbox stays usable", () =>
    Effect.gen(function*() {
      const inbox = yield* Inbox
      const log = yield* SessionLog
      const kept = user("kept")
      yield* inbox.append("next-turn", kept)
      const before = yield* log.events
      for (const levels of [10_000, 100_000]) {
        const m = deepMessage(`deep${levels}`, levels)
        const failures = [
          yield* Effect.flip(inbox.append("next-turn", m)),
          yield* Effect.flip(inbox.prepend("next-step", m)),
          yield* Effect.flip(inbox.splice("next-turn", 0, 0, [m])),
          yield* Effect.flip(inbox.replace(kept.id, m))
        ]
        for (const failure of failures) {
          expect(failure).toMatchObject({ _tag: "InvalidEvent", type: "user/message" })
          expect((failure as { readonly reason: string }).reason).toMatch(
            /^message\.source\.a.*: nested deeper than 256 levels$/
          )
        }
      }
      expect(yield* log.events).toStrictEqual(before)
      expect(yield* inbox.snapshot).toEqual({ nextTurn: [kept], nextStep: [] })
      yield* inbox.splice("next-turn", 1, 0, [user("after")])
      expect((yield* inbox.nextTurn).map((m) => m.id)).toEqual(["kept", "after"])
    }).pipe(Effect.provide(freshSession())))

  it.scoped("a non-array or unreadable insertion is InvalidEvent of the splice; hostile messages and coordinates are typed errors", () =>
    Effect.gen(function*() {
      const inbox = yield* Inbox
      const log = yield* SessionLog
      const splice = (inserted: unknown, start: unknown = 0) =>
        Effect.flip(inbox.splice("next-turn", start as number, 0, inserted as ReadonlyArray<UserMessage>))
      for (
        const [inserted, found] of [[5, "number"], ["ab", "string"], [null, "null"], [
          { 0: user("x"), length: 1 },
          "object"
        ]] as const
      ) {
        expect(yield* splice(inserted)).toMatchObject({
          _tag: "InvalidEvent",
          type: "agent/inbox/spliced",
          reason: `inserted must be an array of messages, found ${found}`
        })
      }
      // A list too long to hold messages within the size limit is refused before it is read.
      const huge: Array<UserMessage> = []
      huge.length = 1_000_000_000
      expect(yield* splice(huge)).toMatchObject({
        _tag: "InvalidEvent",
        reason: "inserted: larger than 64 MiB of JSON text"
      })
      const unreadableArray = new Proxy([user("x")], { get: trap })
      expect(yield* splice(unreadableArray)).toMatchObject({ _tag: "InvalidEvent", reason: "inserted cannot be read" })
      const proxy = new Proxy({}, { get: trap, ownKeys: trap, getPrototypeOf: trap, has: trap })
      expect(yield* splice([proxy])).toMatchObject({
        _tag: "InvalidEvent",
        type: "user/message",
        reason: "message: cannot be read (trap)"
      })
      const getter = {
        id: "g",
        role: "user",
        content: [{ type: "text", text: "g" }],
        get source(): unknown {
          throw new Error("boom")
        }
      }
      expect(yield* Effect.flip(inbox.append("next-step", getter as unknown as UserMessage))).toMatchObject({
        _tag: "InvalidEvent",
        reason: "message.source: cannot be read (boom)"
      })
      const cyclic: Record<string, unknown> = { kind: "user" }
      cyclic.self = cyclic
      const withCycle = { id: "c", role: "user", content: [{ type: "text", text: "c" }], source: cyclic }
      expect(yield* splice([withCycle])).toMatchObject({
        _tag: "InvalidEvent",
        reason: "message.source.self: cyclic value"
      })
      // A coordinate whose text cannot be made is an InvalidSplice, not a defect.
      const hostileStart = { toString: trap, valueOf: trap }
      expect(yield* splice([user("y")], hostileStart)).toMatchObject({
        _tag: "InvalidSplice",
        reason: "start (object) is not a number"
      })
      expect(yield* log.events).toEqual([])
      expect(yield* inbox.splice("next-turn", 0, 0, [user("fine")])).toEqual([])
      expect((yield* inbox.nextTurn).map((m) => m.id)).toEqual(["fine"])
    }).pipe(Effect.provide(freshSession())))
})

describe("Inbox: the size limit", () => {
  it.scoped("a splice whose messages together pass MAX_JSON_SIZE is InvalidEvent; each alone is accepted", () =>
    Effect.gen(function*() {
      const inbox = yield* Inbox
      const log = yield* SessionLog
      const half = "x".repeat(MAX_JSON_SIZE / 2)
      const [a, b] = [userMessage({ id: "a", text: half }), userMessage({ id: "b", text: half })]
      expect(yield* Effect.flip(inbox.splice("next-turn", 0, 0, [a, b]))).toMatchObject({
        _tag: "InvalidEvent",
        type: "agent/inbox/spliced",
        reason: "inserted: larger than 64 MiB of JSON text"
      })
      expect(yield* log.events).toEqual([])
      yield* inbox.splice("next-turn", 0, 0, [a])
      yield* inbox.append("next-turn", b)
      expect((yield* inbox.nextTurn).map((m) => m.id)).toEqual(["a", "b"])
    }).pipe(Effect.provide(freshSession())))
})
