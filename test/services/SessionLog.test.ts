import { describe, expect, it } from "@effect/vitest"
import { Chunk, Effect, Fiber, Layer, Option, Stream, TestClock } from "effect"
import { checkLog } from "../../src/domain/Check.js"
import type { InvalidEvent } from "../../src/domain/Errors.js"
import type { SessionEvent } from "../../src/domain/Event.js"
import { MessageId, SessionId } from "../../src/domain/Ids.js"
import { MAX_JSON_DEPTH } from "../../src/domain/Json.js"
import { userMessage } from "../../src/domain/Message.js"
import { Inbox } from "../../src/services/Inbox.js"
import { SessionLog } from "../../src/services/SessionLog.js"
import { MemoryStoreControl, SessionStore } from "../../src/services/SessionStore.js"
import { makeHeader, makeUserMessage, turnEvents } from "../contracts/SessionStoreContract.js"
import { claimTurn, freshSession, plugin, sessionOn, user } from "./harness.js"

const sid = SessionId.make

describe("SessionLog", () => {
  it.scoped("append accepts ignorable and declared extension events, stamped with seq and Clock time", () =>
    Effect.gen(function*() {
      const log = yield* SessionLog
      yield* TestClock.adjust("1234 millis")
      const first = yield* log.append({ type: "ext/note", data: { text: "hi" }, ignorable: true })
      yield* TestClock.adjust("1 millis")
      const second = yield* log.append({ type: "app/marker", data: [1, "two", null] })
      expect(first).toEqual({ type: "ext/note", seq: 0, time: 1234, data: { text: "hi" }, ignorable: true })
      expect(second).toEqual({ type: "app/marker", seq: 1, time: 1235, data: [1, "two", null] })
      expect(Object.isFrozen(second.data)).toBe(true)
      expect(yield* log.durableSeq).toBe(1)
      expect(yield* log.events).toEqual([first, second])
    }).pipe(Effect.provide(freshSession({ eventTypes: ["app/marker"] }))))

  it.scoped("append refuses what it may not write, changing nothing", () =>
    Effect.gen(function*() {
      const log = yield* SessionLog
      const refused = [
        { type: "undeclared/type", data: {} },
        { type: "turn/start", data: { turn: 1 } },
        { type: "agent/inbox/spliced", data: { target: "next-turn", start: 0, inserted: [] } },
        { type: "user/message", data: user("u"), surfaceOp: "append" as const },
        { type: "ext/bad", data: { n: NaN }, ignorable: true as const },
        { type: "ext/bad", data: { n: BigInt(2) }, ignorable: true as const },
        { type: "ext/bad", data: { f: () => 1 }, ignorable: true as const },
        { type: "ext/bad", data: [1, , 3], ignorable: true as const },
        { type: "", data: {}, ignorable: true as const }
      ]
      for (const input of refused) {
        const error = yield* Effect.flip(log.append(input))
        expect(error._tag).toBe("InvalidEvent")
      }
      // A numeric compaction bracket needs an open turn (R6).
      const r6 = yield* Effect.flip(log.append({ type: "compaction/start", data: { turn: 1 } }))
      expect(r6).toMatchObject({ _tag: "InvalidEvent", rule: "R6" })
      expect(yield* log.events).toEqual([])
    }).pipe(Effect.provide(freshSession())))

  it.scoped("the stored event is a snapshot: mutating the input afterwards changes nothing", () =>
    Effect.gen(function*() {
      const log = yield* SessionLog
      const data = { items: [1, 2] }
      yield* log.append({ type: "ext/snap", data, ignorable: true })
      data.items.push(3)
      expect((yield* log.events)[0]!.data).toEqual({ items: [1, 2] })
    }).pipe(Effect.provide(freshSession())))

  it.scoped("stream replays from a seq, then follows live appends without gaps or duplicates", () =>
    Effect.gen(function*() {
      const log = yield* SessionLog
      for (let i = 0; i < 3; i++) yield* log.append({ type: "ext/n", data: { i }, ignorable: true })
      const fiber = yield* Effect.fork(Stream.runCollect(Stream.take(log.stream(1), 5)))
      for (let i = 3; i < 6; i++) yield* log.append({ type: "ext/n", data: { i }, ignorable: true })
      const seen = Chunk.toArray(yield* Fiber.join(fiber))
      expect(seen.map((e) => e.seq)).toEqual([1, 2, 3, 4, 5])
    }).pipe(Effect.provide(freshSession())))

  it.effect("stream ends when the session's scope closes", () =>
    Effect.gen(function*() {
      const fiber = yield* Effect.scoped(
        Effect.gen(function*() {
          const log = yield* SessionLog
          yield* log.append({ type: "ext/n", data: {}, ignorable: true })
          return yield* Effect.forkDaemon(Stream.runCollect(log.stream()))
        }).pipe(Effect.provide(sessionOn({ sessionId: sid("ends") })))
      )
      const all = yield* Fiber.join(fiber)
      expect(Chunk.size(all)).toBe(1)
    }).pipe(Effect.provide(SessionStore.layerMemory)))

  it.scoped("a replacement needs its range on the surface and a fresh id", () =>
    Effect.gen(function*() {
      const log = yield* SessionLog
      const inbox = yield* Inbox
      const X = user("X")
      yield* inbox.append("next-turn", X)
      yield* claimTurn
      // A zero-step turn enters nothing, so the surface is empty and no range exists.
      expect(yield* log.surface).toEqual([])
      const notOnSurface = yield* Effect.flip(
        log.append({
          type: "user/message",
          data: user("S"),
          surfaceOp: { op: "replace", start: 0, end: 0 },
          sourceEventSeqs: [0]
        })
      )
      expect(notOnSurface._tag).toBe("InvalidEvent")
      // A known id with the same bad range: validity is checked before identity (SPEC 3.1).
      const duplicate = yield* Effect.flip(
        log.append({
          type: "user/message",
          data: X,
          surfaceOp: { op: "replace", start: 0, end: 0 },
          sourceEventSeqs: [0]
        })
      )
      expect(duplicate._tag).toBe("InvalidEvent")
      expect((yield* log.events).length).toBe(4)
    }).pipe(Effect.provide(freshSession())))

  it.effect("P44 on a resumed log: replace, then history shows S where X was", () =>
    Effect.gen(function*() {
      const store = yield* SessionStore
      const X = makeUserMessage("X", "original")
      const events = turnEvents(0, 1, 1_000, X, "reply")
      yield* store.create(makeHeader(sid("p44")), events)
      yield* Effect.scoped(
        Effect.gen(function*() {
          const log = yield* SessionLog
          const all = yield* log.events
          const s = all.find((e) => e.type === "user/message")!.seq
          const S = userMessage({ id: "S", text: "summary", source: { kind: "compaction" } })
          const bad = [
            { surfaceOp: { op: "replace" as const, start: s, end: s }, sourceEventSeqs: [] },
            { surfaceOp: { op: "replace" as const, start: s + 1000, end: s + 1000 }, sourceEventSeqs: [s] },
            { surfaceOp: { op: "replace" as const, start: s, end: s }, sourceEventSeqs: [s - 1] }
          ]
          for (const b of bad) {
            expect((yield* Effect.flip(log.append({ type: "user/message", data: S, ...b })))._tag).toBe("InvalidEvent")
          }
          const before = yield* log.surface
          const replaced = yield* log.append({
            type: "user/message",
            data: S,
            surfaceOp: { op: "replace", start: s, end: s },
            sourceEventSeqs: [s]
          })
          const after = yield* log.surface
          expect(after).toEqual(before.map((seq) => (seq === s ? replaced.seq : seq)))
          const messages = yield* log.messages
          expect(messages[0]).toEqual(S)
          expect(messages.length).toBe(2)
          expect((yield* log.events).some((e) => e.seq === s)).toBe(true)
          expect(checkLog(yield* log.events, { closed: true })).toEqual([])
        }).pipe(Effect.provide(sessionOn({ resume: sid("p44") })))
      )
    }).pipe(Effect.provide(SessionStore.layerMemory)))

  it.effect("resume: same history, an end-seed once, repairs an open turn durably", () =>
    Effect.gen(function*() {
      const store = yield* SessionStore
      const A = makeUserMessage("A", "question")
      const closed = turnEvents(0, 1, 500, A, "answer")
      const B = makeUserMessage("B", "second")
      const open = turnEvents(closed.length, 2, 600, B, "partial").slice(0, 5) // INS TS CLM SS UM
      yield* store.create(makeHeader(sid("r")), [...closed, ...open])
      const first = yield* Effect.scoped(
        Effect.gen(function*() {
          const log = yield* SessionLog
          return {
            events: yield* log.events,
            messages: yield* log.messages,
            durable: yield* log.durableSeq,
            live: log.firstLiveSeq
          }
        }).pipe(Effect.provide(sessionOn({ resume: sid("r") })))
      )
      const n = closed.length + open.length
      expect(first.live).toBe(n)
      expect(first.events.slice(n).map((e) => e.type)).toEqual(["step/end", "turn/end", "session/end-seed"])
      expect(first.events[n + 1]!.data).toEqual({ turn: 2, reason: { kind: "interrupted" } })
      expect(first.events[n]!.time).toBe(open.at(-1)!.time)
      expect(first.durable).toBe(n + 2)
      expect(first.messages.map((m) => m.id)).toEqual(["A", first.messages[1]!.id, "B"])
      expect(checkLog(first.events, { closed: true })).toEqual([])
      const stored = yield* store.load(sid("r"))
      expect(stored.events).toEqual(first.events)
      // Reopening an untouched session does not grow it.
      const again = yield* Effect.scoped(
        Effect.map(SessionLog, (log) => log.events).pipe(
          Effect.flatten,
          Effect.provide(sessionOn({ resume: sid("r") }))
        )
      )
      expect(again.length).toBe(first.events.length)
    }).pipe(Effect.provide(SessionStore.layerMemory)))

  it.effect("P39 (d): a stored log with an invalid splice fails to open with MalformedLog {seq}", () =>
    Effect.gen(function*() {
      const store = yield* SessionStore
      const X = makeUserMessage("X", "x")
      const bad: SessionEvent = {
        type: "agent/inbox/spliced",
        seq: 0,
        time: 0,
        data: { target: "next-turn", start: 1, inserted: [X] }
      }
      yield* store.create(makeHeader(sid("bad")), [bad])
      const error = yield* Effect.flip(Effect.scoped(Layer.build(sessionOn({ resume: sid("bad") }))))
      expect(error).toMatchObject({ _tag: "MalformedLog", seq: 0 })
      expect(error.message).toContain("invalid persisted inbox splice at seq 0")
      const newer = yield* Effect.flip(
        Effect.scoped(Layer.build(sessionOn({ resume: sid("missing") })))
      )
      expect(newer._tag).toBe("SessionNotFound")
    }).pipe(Effect.provide(SessionStore.layerMemory)))

  it.effect("unsupported format versions and unknown types without the marker are refused on load", () =>
    Effect.gen(function*() {
      const store = yield* SessionStore
      yield* store.create(makeHeader(sid("v2"), { formatVersion: 2 }), [])
      const version = yield* Effect.flip(Effect.scoped(Layer.build(sessionOn({ resume: sid("v2") }))))
      expect(version).toMatchObject({ _tag: "UnsupportedLogVersion", found: 2, supported: 1 })
      yield* store.create(makeHeader(sid("unk")), [{ type: "x/unknown", seq: 0, time: 0, data: {} }])
      const unknown = yield* Effect.flip(Effect.scoped(Layer.build(sessionOn({ resume: sid("unk") }))))
      expect(unknown).toMatchObject({ _tag: "MalformedLog", seq: 0 })
      // Declared, the same log opens (D6: same configuration, same verdict).
      yield* Effect.scoped(Layer.build(sessionOn({ resume: sid("unk"), eventTypes: ["x/unknown"] })))
    }).pipe(Effect.provide(SessionStore.layerMemory)))

  it.effect("creating an existing session fails with SessionExists", () =>
    Effect.gen(function*() {
      yield* Effect.scoped(Layer.build(sessionOn({ sessionId: sid("dup") })))
      const error = yield* Effect.flip(Effect.scoped(Layer.build(sessionOn({ sessionId: sid("dup") }))))
      expect(error._tag).toBe("SessionExists")
    }).pipe(Effect.provide(SessionStore.layerMemory)))

  it.scoped("group commit: concurrent callers share store appends", () =>
    Effect.gen(function*() {
      const inbox = yield* Inbox
      const control = yield* MemoryStoreControl
      const log = yield* SessionLog
      yield* control.hold
      const fibers = yield* Effect.forEach(
        Array.from({ length: 50 }, (_, i) => i),
        (i) => Effect.fork(inbox.append("next-step", plugin(`g${i}`))),
        { concurrency: "unbounded" }
      )
      yield* Effect.sleep(0)
      yield* control.release
      yield* Effect.forEach(fibers, Fiber.join, { discard: true })
      expect(yield* log.durableSeq).toBe(49)
      // The first append was held with one event; everything else went in one more call.
      expect(yield* control.appendCalls).toBeLessThanOrEqual(3)
    }).pipe(Effect.provide(freshSession())))

  it.scoped("the batch window writes loop events without any waiter (Clock-driven)", () =>
    Effect.gen(function*() {
      const inbox = yield* Inbox
      const log = yield* SessionLog
      yield* inbox.append("next-turn", user("w"))
      yield* claimTurn // writes TS CLM TE without awaiting durability
      expect(yield* log.durableSeq).toBe(0)
      yield* TestClock.adjust("199 millis")
      expect(yield* log.durableSeq).toBe(0)
      yield* TestClock.adjust("1 millis")
      yield* Effect.yieldNow()
      expect(yield* log.durableSeq).toBe(3)
      yield* log.flush
    }).pipe(Effect.provide(freshSession())))

  it.scoped("once the session has written twice, the batch window still holds for appends (Clock-driven)", () =>
    Effect.gen(function*() {
      const inbox = yield* Inbox
      const log = yield* SessionLog
      // Two acknowledged writes: from then on the window timer runs and appends arm the window
      // themselves (the writer is no longer woken for it; this checks the window, not the wake-ups).
      yield* inbox.append("next-turn", user("a"))
      yield* inbox.append("next-turn", user("b"))
      for (let round = 0; round < 2; round++) {
        const durable = yield* log.durableSeq
        yield* claimTurn // TS CLM TE, not awaited
        yield* TestClock.adjust("199 millis")
        expect(yield* log.durableSeq).toBe(durable)
        yield* TestClock.adjust("1 millis")
        yield* Effect.yieldNow()
        expect(yield* log.durableSeq).toBe(durable + 3)
        yield* inbox.append("next-turn", user(`c${round}`))
        yield* TestClock.adjust("1 millis")
      }
    }).pipe(Effect.provide(freshSession())))

  it.scoped("flush makes everything appended before it durable", () =>
    Effect.gen(function*() {
      const inbox = yield* Inbox
      const log = yield* SessionLog
      yield* inbox.append("next-turn", user("f"))
      yield* claimTurn
      yield* log.flush
      expect(yield* log.durableSeq).toBe(3)
      expect(Option.isSome(yield* inbox.idState(MessageId.make("f")))).toBe(true)
    }).pipe(Effect.provide(freshSession())))
})

/** An object nested `levels` deep (the outermost object is level 1). */
const nested = (levels: number): unknown => {
  let value: unknown = 1
  for (let i = 0; i < levels; i++) value = { a: value }
  return value
}

const trap = () => {
  throw new Error("trap")
}

describe("SessionLog.append: input past the limits or unreadable", () => {
  it.scoped("data nested 10,000 and 100,000 levels is InvalidEvent naming the limit; nothing is written, the log stays usable", () =>
    Effect.gen(function*() {
      const log = yield* SessionLog
      for (const levels of [10_000, 100_000]) {
        const error = yield* Effect.flip(log.append({ type: "ext/deep", data: nested(levels), ignorable: true }))
        expect(error).toMatchObject({ _tag: "InvalidEvent", type: "ext/deep" })
        expect((error as InvalidEvent).reason).toMatch(/^event\.data\.a\.a.*: nested deeper than 256 levels$/)
        // The same for a replacement message whose source is that deep.
        const message = {
          id: "S",
          role: "user",
          content: [{ type: "text", text: "s" }],
          source: { kind: "c", a: nested(levels) }
        }
        const replacement = yield* Effect.flip(
          log.append({
            type: "user/message",
            data: message,
            surfaceOp: { op: "replace", start: 0, end: 0 },
            sourceEventSeqs: [0]
          })
        )
        expect((replacement as InvalidEvent).reason).toMatch(
          /^event\.data\.source\.a.*: nested deeper than 256 levels$/
        )
      }
      expect(yield* log.events).toEqual([])
      const after = yield* log.append({ type: "ext/ok", data: { fine: true }, ignorable: true })
      expect(after).toMatchObject({ seq: 0, data: { fine: true } })
    }).pipe(Effect.provide(freshSession())))

  it.scoped("a throwing getter, a hostile Proxy, a cycle and a non-string type are InvalidEvent, never a defect", () =>
    Effect.gen(function*() {
      const log = yield* SessionLog
      const proxy = new Proxy({}, { get: trap, ownKeys: trap, getPrototypeOf: trap, has: trap })
      const getter = {
        get bad(): unknown {
          throw new Error("boom")
        }
      }
      const cyclic: Record<string, unknown> = {}
      cyclic.self = cyclic
      const cases: ReadonlyArray<readonly [unknown, string]> = [
        [{ type: "ext/x", data: getter, ignorable: true }, "event.data.bad: cannot be read (boom)"],
        [{ type: "ext/x", data: { p: proxy }, ignorable: true }, "event.data.p: cannot be read (trap)"],
        [{ type: "ext/x", data: cyclic, ignorable: true }, "event.data.self: cyclic value"],
        [
          { type: "ext/x", data: {}, ignorable: true, sourceEventSeqs: proxy },
          "event.sourceEventSeqs: cannot be read (trap)"
        ],
        [proxy, "input: cannot be read (trap)"],
        [{ type: 7, data: {}, ignorable: true }, "type must be a string, found number"],
        [null, "input: expected an object with type and data, found null"]
      ]
      for (const [input, reason] of cases) {
        const error = yield* Effect.flip(log.append(input as Parameters<typeof log.append>[0]))
        expect(error).toMatchObject({ _tag: "InvalidEvent", reason })
      }
      expect(yield* log.events).toEqual([])
      expect(yield* log.append({ type: "ext/ok", data: 1, ignorable: true })).toMatchObject({ seq: 0 })
    }).pipe(Effect.provide(freshSession())))

  it.effect("data nested exactly MAX_JSON_DEPTH levels is accepted and loads again from the store (D6); one more is refused", () =>
    Effect.gen(function*() {
      const data = nested(MAX_JSON_DEPTH)
      const written = yield* Effect.scoped(
        Effect.gen(function*() {
          const log = yield* SessionLog
          const past = yield* Effect.flip(
            log.append({ type: "ext/deep", data: nested(MAX_JSON_DEPTH + 1), ignorable: true })
          )
          expect((past as InvalidEvent).reason).toMatch(/nested deeper than 256 levels$/)
          return yield* log.append({ type: "ext/deep", data, ignorable: true })
        }).pipe(Effect.provide(sessionOn({ sessionId: sid("limit") })))
      )
      expect(written.data).toEqual(data)
      const reloaded = yield* Effect.scoped(
        Effect.flatMap(SessionLog, (log) => log.events).pipe(Effect.provide(sessionOn({ resume: sid("limit") })))
      )
      expect(reloaded[0]).toEqual(written)
    }).pipe(Effect.provide(SessionStore.layerMemory)))
})
