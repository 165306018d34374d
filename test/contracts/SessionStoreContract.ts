/**
 * The contract every SessionStore backend must pass (SPEC 6.1, 8.10).
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, type Layer } from "effect"
import {
  MalformedLog,
  PersistenceError,
  SessionExists,
  SessionNotFound,
  UnsupportedLogVersion
} from "../../src/domain/Errors.js"
import { LOG_FORMAT_VERSION, type SessionEvent, type SessionHeader } from "../../src/domain/Event.js"
import { MessageId, SessionId } from "../../src/domain/Ids.js"
import type { UserMessage } from "../../src/domain/Values.js"
import { SessionStore } from "../../src/services/SessionStore.js"

/** A fresh session header with `seedLength` 0. */
export const makeHeader = (id: SessionId, overrides: Partial<SessionHeader> = {}): SessionHeader => ({
  formatVersion: LOG_FORMAT_VERSION,
  sessionId: id,
  createdAt: 1_700_000_000_000,
  seedLength: 0,
  ...overrides
})

/** A user-sourced message with one text block. */
export const makeUserMessage = (id: string, text: string): UserMessage => ({
  id: MessageId.make(id),
  role: "user",
  content: [{ type: "text", text }],
  source: { kind: "user" }
})

/**
 * One complete turn as the loop logs it (SPEC 9, P1), starting at `firstSeq`:
 * INS TS CLM SS UM RH CH×5 AM SE TE, with surface metadata on UM and AM.
 */
export const turnEvents = (
  firstSeq: number,
  turn: number,
  time: number,
  message: UserMessage,
  reply: string
): Array<SessionEvent> => {
  const s = firstSeq
  const step = { turn, step: 1 }
  const chunk = { ...step, attempt: 1 }
  return [
    { type: "agent/inbox/spliced", seq: s, time, data: { target: "next-turn", start: 0, inserted: [message] } },
    { type: "turn/start", seq: s + 1, time, data: { turn } },
    {
      type: "agent/inbox/spliced",
      seq: s + 2,
      time,
      data: { target: "next-turn", start: 0, removedCount: 1, inserted: [] }
    },
    { type: "step/start", seq: s + 3, time: time + 1, data: step },
    { type: "user/message", seq: s + 4, time: time + 1, data: message, surfaceOp: "append" },
    {
      type: "request/header",
      seq: s + 5,
      time: time + 1,
      data: { header: { provider: "p", model: "m", tools: [] }, reason: turn === 1 ? "initial" : "change" }
    },
    {
      type: "assistant/chunk",
      seq: s + 6,
      time: time + 2,
      data: { ...chunk, chunk: { type: "block-start", index: 0, block: "text" } }
    },
    {
      type: "assistant/chunk",
      seq: s + 7,
      time: time + 3,
      data: { ...chunk, chunk: { type: "text-delta", index: 0, text: reply } }
    },
    { type: "assistant/chunk", seq: s + 8, time: time + 3, data: { ...chunk, chunk: { type: "block-end", index: 0 } } },
    {
      type: "assistant/chunk",
      seq: s + 9,
      time: time + 4,
      data: { ...chunk, chunk: { type: "usage", usage: { inputTokens: 3, outputTokens: 2 } } }
    },
    {
      type: "assistant/chunk",
      seq: s + 10,
      time: time + 4,
      data: { ...chunk, chunk: { type: "finish", finish: { kind: "stop" } } }
    },
    {
      type: "assistant/message",
      seq: s + 11,
      time: time + 4,
      data: {
        ...chunk,
        message: {
          id: MessageId.make(`assistant-${turn}`),
          role: "assistant",
          content: [{ type: "text", text: reply }],
          source: { kind: "model", provider: "p", model: "m" }
        },
        usage: { inputTokens: 3, outputTokens: 2 }
      },
      surfaceOp: "append",
      sourceEventSeqs: [s + 6, s + 7, s + 8, s + 9, s + 10]
    },
    { type: "step/end", seq: s + 12, time: time + 5, data: step },
    { type: "turn/end", seq: s + 13, time: time + 5, data: { turn, reason: { kind: "completed" } } }
  ]
}

/** Events that are easy to get subtly wrong: a surface replacement and an ignorable extension. */
const oddEvents = (firstSeq: number, time: number): Array<SessionEvent> => [
  {
    type: "user/message",
    seq: firstSeq,
    time,
    data: makeUserMessage("summary", "summary of the first turn"),
    surfaceOp: { op: "replace", start: 0, end: 2 },
    sourceEventSeqs: [4, 11]
  },
  {
    type: "x-plugin/note",
    seq: firstSeq + 1,
    time: time + 7,
    ignorable: true,
    data: { note: "hi", nested: [1, { a: null }] }
  },
  { type: "session/end-seed", seq: firstSeq + 2, time: time + 7, data: {} }
]

const nonEmpty = <A>(items: ReadonlyArray<A>): readonly [A, ...Array<A>] => {
  if (items.length === 0) throw new Error("fixture batch is empty")
  return items as readonly [A, ...Array<A>]
}

/**
 * Registers the SessionStore contract for one backend; each test gets a fresh store from `layer`.
 */
export const sessionStoreContract = (name: string, layer: Layer.Layer<SessionStore, unknown>): void => {
  const withStore = <A, E>(body: (store: SessionStore["Type"]) => Effect.Effect<A, E>) =>
    Effect.flatMap(SessionStore, body).pipe(Effect.provide(layer))

  const a = SessionId.make("session-a")
  const b = SessionId.make("session-b")
  const A = makeUserMessage("msg-a", "hello")
  const B = makeUserMessage("msg-b", "and again")

  describe(`SessionStore contract: ${name}`, () => {
    it.effect("create then load returns the header and an empty log", () =>
      withStore((store) =>
        Effect.gen(function*() {
          const header = makeHeader(a, { metadata: { title: "first", tags: ["x", "y"] } })
          yield* store.create(header, [])
          expect(yield* store.load(a)).toStrictEqual({ header, events: [] })
        })
      ))

    it.effect("create with an initial log (a fork's copied prefix) round-trips", () =>
      withStore((store) =>
        Effect.gen(function*() {
          const parentEvents = [...turnEvents(0, 1, 1000, A, "hi"), ...turnEvents(14, 2, 2000, B, "again")]
          yield* store.create(makeHeader(a), parentEvents)
          const parent = yield* store.load(a)
          const boundary = 13
          const childHeader = makeHeader(b, {
            parent: { sessionId: a, boundary },
            seedLength: boundary + 1,
            createdAt: 5000
          })
          const childEvents: Array<SessionEvent> = [
            ...parent.events.slice(0, boundary + 1),
            { type: "session/end-seed", seq: boundary + 1, time: 5000, data: {} }
          ]
          yield* store.create(childHeader, childEvents)
          expect(yield* store.load(b)).toStrictEqual({ header: childHeader, events: childEvents })
          expect(yield* store.load(a)).toStrictEqual({ header: makeHeader(a), events: parentEvents })
        })
      ))

    it.effect("a second create of a stored id fails with SessionExists and changes nothing", () =>
      withStore((store) =>
        Effect.gen(function*() {
          const events = turnEvents(0, 1, 1000, A, "hi")
          yield* store.create(makeHeader(a), events)
          const error = yield* Effect.flip(store.create(makeHeader(a, { createdAt: 9 }), []))
          expect(error).toBeInstanceOf(SessionExists)
          expect(error).toMatchObject({ _tag: "SessionExists", sessionId: a })
          expect(yield* store.load(a)).toStrictEqual({ header: makeHeader(a), events })
          expect(yield* store.list).toStrictEqual([makeHeader(a)])
        })
      ))

    it.effect("create with non-contiguous initial seqs fails with PersistenceError and stores nothing", () =>
      withStore((store) =>
        Effect.gen(function*() {
          const events = turnEvents(0, 1, 1000, A, "hi").filter((event) => event.seq !== 5)
          const error = yield* Effect.flip(store.create(makeHeader(a), events))
          expect(error).toBeInstanceOf(PersistenceError)
          const late = yield* Effect.flip(store.create(makeHeader(a), turnEvents(1, 1, 1000, A, "hi")))
          expect(late).toBeInstanceOf(PersistenceError)
          expect(yield* store.exists(a)).toBe(false)
          expect(yield* store.list).toStrictEqual([])
        })
      ))

    it.effect("load of an unknown id fails with SessionNotFound", () =>
      withStore((store) =>
        Effect.gen(function*() {
          yield* store.create(makeHeader(a), [])
          const error = yield* Effect.flip(store.load(b))
          expect(error).toBeInstanceOf(SessionNotFound)
          expect(error).toMatchObject({ _tag: "SessionNotFound", sessionId: b })
        })
      ))

    it.effect("appended batches load as exactly their concatenation", () =>
      withStore((store) =>
        Effect.gen(function*() {
          const first = turnEvents(0, 1, 1000, A, "hi")
          const second = turnEvents(14, 2, 2000, B, "again")
          const third = oddEvents(28, 3000)
          yield* store.create(makeHeader(a), [])
          yield* store.append(a, nonEmpty(first.slice(0, 3)))
          yield* store.append(a, nonEmpty(first.slice(3, 4)))
          yield* store.append(a, nonEmpty(first.slice(4)))
          yield* store.append(a, nonEmpty(second))
          yield* store.append(a, nonEmpty(third))
          expect(yield* store.load(a)).toStrictEqual({ header: makeHeader(a), events: [...first, ...second, ...third] })
        })
      ))

    it.effect("appends continue an initial log and leave other sessions alone", () =>
      withStore((store) =>
        Effect.gen(function*() {
          const first = turnEvents(0, 1, 1000, A, "hi")
          const second = turnEvents(14, 2, 2000, B, "again")
          yield* store.create(makeHeader(a), first)
          yield* store.create(makeHeader(b), first)
          yield* store.append(a, nonEmpty(second))
          expect((yield* store.load(a)).events).toStrictEqual([...first, ...second])
          expect((yield* store.load(b)).events).toStrictEqual(first)
        })
      ))

    it.effect("append fails with PersistenceError on a gap, a stale seq or a non-contiguous batch, changing nothing", () =>
      withStore((store) =>
        Effect.gen(function*() {
          const first = turnEvents(0, 1, 1000, A, "hi")
          const second = turnEvents(14, 2, 2000, B, "again")
          yield* store.create(makeHeader(a), [])
          yield* store.append(a, nonEmpty(first))
          const expectRejected = (events: ReadonlyArray<SessionEvent>) =>
            Effect.gen(function*() {
              const error = yield* Effect.flip(store.append(a, nonEmpty(events)))
              expect(error).toBeInstanceOf(PersistenceError)
              expect(error).toMatchObject({ _tag: "PersistenceError", sessionId: a })
              expect((yield* store.load(a)).events).toStrictEqual(first)
            })
          yield* expectRejected(second.slice(1)) // gap: starts at 15, stored length is 14
          yield* expectRejected([first[13]!, ...second]) // stale: a second writer already wrote seq 13
          yield* expectRejected(turnEvents(0, 1, 1000, A, "hi")) // stale: a full rewrite
          yield* expectRejected([second[0]!, second[2]!]) // non-contiguous within the batch
          yield* expectRejected([second[0]!, second[0]!]) // duplicate seq within the batch
          yield* store.append(a, nonEmpty(second))
          expect((yield* store.load(a)).events).toStrictEqual([...first, ...second])
        })
      ))

    it.effect("append to an unknown session fails with PersistenceError and creates nothing", () =>
      withStore((store) =>
        Effect.gen(function*() {
          const error = yield* Effect.flip(store.append(a, nonEmpty(turnEvents(0, 1, 1000, A, "hi"))))
          expect(error).toBeInstanceOf(PersistenceError)
          expect(error).toMatchObject({ _tag: "PersistenceError", sessionId: a })
          expect(yield* store.exists(a)).toBe(false)
          expect((yield* Effect.flip(store.load(a)))._tag).toBe("SessionNotFound")
        })
      ))

    it.effect("exists is true exactly for stored ids", () =>
      withStore((store) =>
        Effect.gen(function*() {
          expect(yield* store.exists(a)).toBe(false)
          yield* store.create(makeHeader(a), [])
          expect(yield* store.exists(a)).toBe(true)
          expect(yield* store.exists(b)).toBe(false)
        })
      ))

    it.effect("list returns every created header", () =>
      withStore((store) =>
        Effect.gen(function*() {
          expect(yield* store.list).toStrictEqual([])
          const headers = [
            makeHeader(SessionId.make("s-2"), { createdAt: 2 }),
            makeHeader(SessionId.make("s-1"), { createdAt: 1, metadata: { m: 1 } }),
            makeHeader(SessionId.make("s-3"), { parent: { sessionId: SessionId.make("s-1"), boundary: -1 } })
          ]
          for (const header of headers) yield* store.create(header, [])
          yield* store.append(SessionId.make("s-2"), nonEmpty(turnEvents(0, 1, 1000, A, "hi")))
          const listed = yield* store.list
          const bySessionId = (x: SessionHeader, y: SessionHeader) => x.sessionId.localeCompare(y.sessionId)
          expect([...listed].sort(bySessionId)).toStrictEqual([...headers].sort(bySessionId))
        })
      ))

    it.effect("stored values are isolated from the caller's objects", () =>
      withStore((store) =>
        Effect.gen(function*() {
          const header = makeHeader(a, { metadata: { title: "t" } })
          const initial = turnEvents(0, 1, 1000, A, "hi")
          const batch = turnEvents(14, 2, 2000, B, "again")
          yield* store.create(header, initial)
          yield* store.append(a, nonEmpty(batch))
          const expected = {
            header: makeHeader(a, { metadata: { title: "t" } }),
            events: [...turnEvents(0, 1, 1000, A, "hi"), ...turnEvents(14, 2, 2000, B, "again")]
          } // The caller's objects and arrays change after the calls; the store must not.
          ;(header as { metadata: unknown }).metadata = "changed"
          ;(initial[0] as { time: number }).time = 1
          ;(initial[1]!.data as { turn: number }).turn = 99
          ;(batch[13] as { seq: number }).seq = 0
          initial.pop()
          const loaded = yield* store.load(a)
          expect(loaded).toStrictEqual(expected)
          ;(loaded.events as Array<SessionEvent>).length = 0
          expect(yield* store.load(a)).toStrictEqual(expected)
        })
      ))

    it.effect("an event stored with a malformed envelope loads as MalformedLog with its seq, on every load", () =>
      withStore((store) =>
        Effect.gen(function*() {
          const good = turnEvents(0, 1, 1_700_000_000_000, makeUserMessage("u1", "hi"), "ok")
          const bad = {
            type: "turn/start",
            seq: good.length,
            time: "later",
            data: { turn: 2 }
          } as unknown as SessionEvent
          yield* store.create(makeHeader(a), good)
          expect((yield* store.load(a)).events).toEqual(good)
          const stored = yield* Effect.either(store.append(a, [bad]))
          if (stored._tag === "Left") {
            // A store may refuse to write such an event; then it must store nothing.
            expect(stored.left).toBeInstanceOf(PersistenceError)
            expect((yield* store.load(a)).events).toHaveLength(good.length)
            return
          }
          for (let i = 0; i < 2; i++) {
            const error = yield* Effect.flip(store.load(a))
            expect(error).toBeInstanceOf(MalformedLog)
            expect(error).toMatchObject({ _tag: "MalformedLog", sessionId: a, seq: good.length })
            expect((error as MalformedLog).reason).toContain("time")
          }
        })
      ))

    it.effect("an event created with an excess key loads as MalformedLog", () =>
      withStore((store) =>
        Effect.gen(function*() {
          const extra = {
            type: "turn/start",
            seq: 0,
            time: 1,
            data: { turn: 1 },
            extra: true
          } as unknown as SessionEvent
          const created = yield* Effect.either(store.create(makeHeader(a), [extra]))
          if (created._tag === "Left") {
            expect(created.left).toBeInstanceOf(PersistenceError)
            expect(yield* store.exists(a)).toBe(false)
            return
          }
          const error = yield* Effect.flip(store.load(a))
          expect(error).toMatchObject({ _tag: "MalformedLog", sessionId: a, seq: 0 })
          expect((error as MalformedLog).reason).toContain("extra")
        })
      ))

    it.effect("a header that is not a session header (negative seedLength, formatVersion not a number) loads as MalformedLog", () =>
      withStore((store) =>
        Effect.gen(function*() {
          const headers = [
            makeHeader(a, { seedLength: -1 }),
            { ...makeHeader(a), formatVersion: "1" } as unknown as SessionHeader
          ]
          for (const header of headers) {
            const id = SessionId.make(`${a}-${headers.indexOf(header)}`)
            const created = yield* Effect.either(store.create({ ...header, sessionId: id }, []))
            if (created._tag === "Left") {
              expect(created.left).toBeInstanceOf(PersistenceError)
              expect(yield* store.exists(id)).toBe(false)
              continue
            }
            const error = yield* Effect.flip(store.load(id))
            expect(error).toBeInstanceOf(MalformedLog)
            expect(error).toMatchObject({ _tag: "MalformedLog", sessionId: id })
          }
        })
      ))

    it.effect("a header with an unsupported formatVersion loads as UnsupportedLogVersion", () =>
      withStore((store) =>
        Effect.gen(function*() {
          const created = yield* Effect.either(store.create(makeHeader(a, { formatVersion: 2 }), []))
          if (created._tag === "Left") {
            // A store may refuse to write such a header; then it must store nothing.
            expect(created.left).toBeInstanceOf(PersistenceError)
            expect(yield* store.exists(a)).toBe(false)
            return
          }
          const error = yield* Effect.flip(store.load(a))
          expect(error).toBeInstanceOf(UnsupportedLogVersion)
          expect(error).toMatchObject({
            _tag: "UnsupportedLogVersion",
            sessionId: a,
            found: 2,
            supported: LOG_FORMAT_VERSION
          })
        })
      ))
  })
}
