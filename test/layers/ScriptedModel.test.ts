import { describe, expect, it } from "@effect/vitest"
import { Cause, Deferred, Effect, Exit, Fiber, Option, Ref, Stream } from "effect"
import { ModelError } from "../../src/domain/Errors.js"
import { SessionId } from "../../src/domain/Ids.js"
import type { StreamChunk } from "../../src/domain/Values.js"
import type { ScriptEntry } from "../../src/layers/ScriptedModel.js"
import { ScriptedModel } from "../../src/layers/ScriptedModel.js"
import type { ModelRequest } from "../../src/services/Model.js"
import { Model } from "../../src/services/Model.js"
import * as Chunks from "../fixtures/streamChunks.js"

const request = (attempt: number): ModelRequest => ({
  sessionId: SessionId.make("s"),
  turn: 1,
  step: 1,
  attempt,
  provider: "p",
  model: "m",
  tools: [],
  messages: []
})

const usage = { inputTokens: 3, outputTokens: 2 }
const stop: StreamChunk = { type: "finish", finish: { kind: "stop" } }
const unknownFailure = (message: string) => new ModelError({ failure: { message, code: "UNKNOWN" } })

/** Runs one request against a one-entry script and collects its chunks. */
const collect = (entry: ScriptEntry) =>
  Effect.flatMap(Model, (model) => Stream.runCollect(model.stream(request(1)))).pipe(
    Effect.map((chunks) => Array.from(chunks)),
    Effect.provide(ScriptedModel.layer([entry]))
  )

type Log = (label: string) => Effect.Effect<void>

/**
 * Consumes the stream of a one-entry script one chunk at a time, logging `chunk:<type>` once each
 * chunk has been processed; the entry's effects log into the same list.
 */
const traced = (build: (log: Log) => ScriptEntry) =>
  Effect.gen(function*() {
    const events = yield* Ref.make<ReadonlyArray<string>>([])
    const log: Log = (label) => Ref.update(events, (es) => [...es, label])
    const exit = yield* Effect.flatMap(Model, (model) =>
      model.stream(request(1)).pipe(
        Stream.runForEach((chunk) => Effect.zipRight(Effect.yieldNow(), log(`chunk:${chunk.type}`))),
        Effect.exit
      )).pipe(Effect.provide(ScriptedModel.layer([build(log)])))
    return { exit, events: yield* Ref.get(events) }
  })

/** Yields often enough for every runnable forked fiber to reach its next suspension. */
const settle = Effect.repeatN(Effect.yieldNow(), 20)

describe("ScriptedModel chunk sequences", () => {
  it.effect("text: one block, one delta, block-end, finish stop", () =>
    Effect.gen(function*() {
      expect(yield* collect(ScriptedModel.text("hello"))).toStrictEqual([
        ...Chunks.textBlock(0, "hello"),
        stop
      ])
    }))

  it.effect("text with deltas and usage: one delta per element, usage before the finish", () =>
    Effect.gen(function*() {
      expect(yield* collect(ScriptedModel.text("hello", { deltas: ["hel", "lo"], usage }))).toStrictEqual([
        ...Chunks.textBlock(0, "hel", "lo"),
        { type: "usage", usage },
        stop
      ])
    }))

  it.effect("response: reasoning, text, tool calls, usage, replay-state, finish, indexes from 0", () =>
    Effect.gen(function*() {
      const chunks = yield* collect(ScriptedModel.response({
        reasoning: ["thin", "king"],
        text: "calling",
        toolCalls: [
          { id: "c1", name: "echo", arguments: { text: "hi" } },
          { id: "c2", name: "raw", arguments: "{\"te", partial: true },
          { id: "c3", name: "list", arguments: [1, 2] }
        ],
        usage,
        replayState: { opaque: ["x", 1] },
        finish: "max-tokens"
      }))
      expect(chunks).toStrictEqual([
        ...Chunks.reasoningBlock(0, "thin", "king"),
        ...Chunks.textBlock(1, "calling"),
        ...Chunks.toolCallBlock(2, "c1", "echo", "{\"text\":\"hi\"}"),
        { type: "block-start", index: 3, block: "tool-call", id: "c2", name: "raw" },
        { type: "tool-call-delta", index: 3, arguments: "{\"te" },
        ...Chunks.toolCallBlock(4, "c3", "list", "[1,2]"),
        { type: "usage", usage },
        { type: "replay-state", state: { opaque: ["x", 1] } },
        { type: "finish", finish: { kind: "max-tokens" } }
      ])
    }))

  it.effect("response: absent parts emit nothing, the finish defaults to stop", () =>
    Effect.gen(function*() {
      expect(yield* collect(ScriptedModel.response({ toolCalls: [{ id: "c1", name: "t", arguments: {} }] })))
        .toStrictEqual([
          ...Chunks.toolCallBlock(0, "c1", "t", "{}"),
          stop
        ])
      expect(yield* collect(ScriptedModel.response({}))).toStrictEqual([stop])
    }))

  it.effect("fail: the open partial blocks, then a finish error", () =>
    Effect.gen(function*() {
      const failure = { message: "slow", code: "RATE_LIMIT", status: 429 }
      expect(
        yield* collect(ScriptedModel.fail(failure, {
          partial: { reasoning: "r", text: "t", toolCall: { id: "c1", name: "n", arguments: "{\"a" }, usage }
        }))
      ).toStrictEqual([
        { type: "block-start", index: 0, block: "reasoning" },
        { type: "reasoning-delta", index: 0, text: "r" },
        { type: "block-start", index: 1, block: "text" },
        { type: "text-delta", index: 1, text: "t" },
        { type: "block-start", index: 2, block: "tool-call", id: "c1", name: "n" },
        { type: "tool-call-delta", index: 2, arguments: "{\"a" },
        { type: "usage", usage },
        { type: "finish", finish: { kind: "error", failure } }
      ])
    }))

  it.effect("fail: closed partial blocks and an aborted finish; no partial means just the finish", () =>
    Effect.gen(function*() {
      const failure = { message: "cut", code: "ABORTED" }
      expect(yield* collect(ScriptedModel.fail(failure, { partial: { text: "t", closed: true }, finish: "aborted" })))
        .toStrictEqual([
          ...Chunks.textBlock(0, "t"),
          { type: "finish", finish: { kind: "aborted", failure } }
        ])
      expect(yield* collect(ScriptedModel.fail(failure))).toStrictEqual([
        { type: "finish", finish: { kind: "error", failure } }
      ])
    }))

  it.effect("die: the stream fails with ModelError UNKNOWN and emits nothing", () =>
    Effect.gen(function*() {
      const { events, exit } = yield* traced(() => ScriptedModel.die("connection reset"))
      expect(events).toStrictEqual([])
      expect(exit).toStrictEqual(Exit.fail(unknownFailure("connection reset")))
    }))

  it.effect("hang: the partial chunks with blocks left open, then the stream never ends", () =>
    Effect.gen(function*() {
      const model = yield* Model
      const received = yield* Ref.make<ReadonlyArray<StreamChunk>>([])
      const fiber = yield* model.stream(request(1)).pipe(
        Stream.runForEach((chunk) => Ref.update(received, (cs) => [...cs, chunk])),
        Effect.fork
      )
      yield* settle
      expect(yield* Ref.get(received)).toStrictEqual([
        { type: "block-start", index: 0, block: "text" },
        { type: "text-delta", index: 0, text: "partial" },
        { type: "block-start", index: 1, block: "tool-call", id: "c1", name: "n" },
        { type: "tool-call-delta", index: 1, arguments: "{" }
      ])
      expect(Option.isNone(yield* Fiber.poll(fiber))).toBe(true)
      expect(Exit.isInterrupted(yield* Fiber.interrupt(fiber))).toBe(true)
    }).pipe(Effect.provide(ScriptedModel.layer([
      ScriptedModel.hang({ text: "partial", toolCall: { id: "c1", name: "n", arguments: "{" } })
    ]))))

  it.effect("hang: closed partial blocks are ended", () =>
    Effect.gen(function*() {
      const chunks = yield* Effect.flatMap(
        Model,
        (model) => Stream.runCollect(Stream.take(model.stream(request(1)), 4))
      )
      expect(Array.from(chunks)).toStrictEqual([
        ...Chunks.reasoningBlock(0, "r"),
        { type: "usage", usage }
      ])
    }).pipe(Effect.provide(ScriptedModel.layer([ScriptedModel.hang({ reasoning: "r", closed: true, usage })]))))

  it.effect("chunks: verbatim, even invalid ones, then the end", () =>
    Effect.gen(function*() {
      const raw = [{ type: "text-delta", index: 7, text: "x" }, { type: "bogus" }, stop, {
        type: "block-end",
        index: 0
      }]
      expect(yield* collect(ScriptedModel.chunks(raw))).toStrictEqual(raw)
    }))

  it.effect("chunks with then: hang never ends after the chunks", () =>
    Effect.gen(function*() {
      const model = yield* Model
      const count = yield* Ref.make(0)
      const fiber = yield* model.stream(request(1)).pipe(
        Stream.runForEach(() => Ref.update(count, (n) => n + 1)),
        Effect.fork
      )
      yield* settle
      expect(yield* Ref.get(count)).toBe(1)
      expect(Option.isNone(yield* Fiber.poll(fiber))).toBe(true)
      yield* Fiber.interrupt(fiber)
    }).pipe(Effect.provide(ScriptedModel.layer([ScriptedModel.chunks([stop], { then: "hang" })]))))
})

describe("ScriptedModel script", () => {
  it.effect("each request consumes the next entry; requests and remaining report them", () =>
    Effect.gen(function*() {
      const model = yield* Model
      const scripted = yield* ScriptedModel
      expect(yield* scripted.remaining).toBe(2)
      expect(yield* scripted.requests).toStrictEqual([])
      const first = yield* Stream.runCollect(model.stream(request(1)))
      expect(Array.from(first)).toContainEqual({ type: "text-delta", index: 0, text: "one" })
      expect(yield* scripted.remaining).toBe(1)
      const second = yield* Stream.runCollect(model.stream(request(2)))
      expect(Array.from(second)).toContainEqual({ type: "text-delta", index: 0, text: "two" })
      expect(yield* scripted.remaining).toBe(0)
      const requests = yield* scripted.requests
      expect(requests).toStrictEqual([request(1), request(2)])
      expect(Object.isFrozen(requests)).toBe(true)
      expect(Object.isFrozen(requests[0])).toBe(true)
    }).pipe(Effect.provide(ScriptedModel.layer([ScriptedModel.text("one"), ScriptedModel.text("two")]))))

  it.effect("a request is recorded when its stream starts, before any chunk", () =>
    Effect.gen(function*() {
      const model = yield* Model
      const scripted = yield* ScriptedModel
      const fiber = yield* Effect.fork(Stream.runDrain(model.stream(request(1))))
      yield* settle
      expect(yield* scripted.requests).toStrictEqual([request(1)])
      expect(yield* scripted.remaining).toBe(0)
      yield* Fiber.interrupt(fiber)
    }).pipe(Effect.provide(ScriptedModel.layer([ScriptedModel.hang()]))))

  it.effect("an exhausted script fails the stream with ModelError and still records the request", () =>
    Effect.gen(function*() {
      const model = yield* Model
      const scripted = yield* ScriptedModel
      yield* Stream.runDrain(model.stream(request(1)))
      const error = yield* Effect.flip(Stream.runDrain(model.stream(request(2))))
      expect(error).toStrictEqual(unknownFailure("ScriptedModel: script exhausted"))
      expect(error.failure).toStrictEqual({ message: "ScriptedModel: script exhausted", code: "UNKNOWN" })
      expect(yield* scripted.requests).toStrictEqual([request(1), request(2)])
      expect(yield* scripted.remaining).toBe(0)
    }).pipe(Effect.provide(ScriptedModel.layer([ScriptedModel.text("only")]))))

  it.effect("each layer build has its own script state", () =>
    Effect.gen(function*() {
      const layer = ScriptedModel.layer([ScriptedModel.text("only")])
      const run = Effect.flatMap(Model, (model) => Stream.runCollect(model.stream(request(1)))).pipe(
        Effect.provide(layer)
      )
      yield* run
      yield* run
    }))
})

describe("ScriptedModel entry effects", () => {
  it.effect("effects run between chunks: awaitBefore first, during after chunk 1, afterFinish after the finish", () =>
    Effect.gen(function*() {
      const { events, exit } = yield* traced((log) =>
        ScriptedModel.text("hi", {
          awaitBefore: log("awaitBefore"),
          during: log("during"),
          afterFinish: log("afterFinish")
        })
      )
      expect(exit).toStrictEqual(Exit.void)
      expect(events).toStrictEqual([
        "awaitBefore",
        "chunk:block-start",
        "during",
        "chunk:text-delta",
        "chunk:block-end",
        "chunk:finish",
        "afterFinish"
      ])
    }))

  it.effect("afterFinish follows the first finish chunk, even when chunks follow it", () =>
    Effect.gen(function*() {
      const { events } = yield* traced((log) =>
        ScriptedModel.chunks([{ type: "usage", usage }, stop, stop], { afterFinish: log("afterFinish") })
      )
      expect(events).toStrictEqual(["chunk:usage", "chunk:finish", "afterFinish", "chunk:finish"])
    }))

  it.effect("during and afterFinish of a one-chunk entry both run after that chunk, in that order", () =>
    Effect.gen(function*() {
      const { events } = yield* traced((log) =>
        ScriptedModel.chunks([stop], { during: log("during"), afterFinish: log("afterFinish") })
      )
      expect(events).toStrictEqual(["chunk:finish", "during", "afterFinish"])
    }))

  it.effect("awaitBefore gates the first chunk", () =>
    Effect.gen(function*() {
      const dispatched = yield* Deferred.make<void>()
      const gate = yield* Deferred.make<void>()
      const received = yield* Ref.make(0)
      const fiber = yield* Effect.flatMap(Model, (model) =>
        model.stream(request(1)).pipe(Stream.runForEach(() => Ref.update(received, (n) => n + 1)))).pipe(
          Effect.provide(ScriptedModel.layer([
            ScriptedModel.text("x", { awaitBefore: Effect.zipRight(Deferred.succeed(dispatched, undefined), gate) })
          ])),
          Effect.fork
        )
      yield* Deferred.await(dispatched)
      yield* settle
      expect(yield* Ref.get(received)).toBe(0)
      yield* Deferred.succeed(gate, undefined)
      yield* Fiber.join(fiber)
      expect(yield* Ref.get(received)).toBe(4)
    }))

  it.effect("awaitBefore runs for an entry that emits nothing", () =>
    Effect.gen(function*() {
      const dispatched = yield* Deferred.make<void>()
      const fiber = yield* Effect.flatMap(Model, (model) => Stream.runDrain(model.stream(request(1)))).pipe(
        Effect.provide(
          ScriptedModel.layer([ScriptedModel.hang({}, { awaitBefore: Deferred.succeed(dispatched, undefined) })])
        ),
        Effect.fork
      )
      yield* Deferred.await(dispatched)
      yield* Fiber.interrupt(fiber)
    }))

  it.effect("during blocks the second chunk until it completes", () =>
    Effect.gen(function*() {
      const gate = yield* Deferred.make<void>()
      const received = yield* Ref.make<ReadonlyArray<string>>([])
      const fiber = yield* Effect.flatMap(Model, (model) =>
        model.stream(request(1)).pipe(Stream.runForEach((c) => Ref.update(received, (cs) => [...cs, c.type])))).pipe(
          Effect.provide(ScriptedModel.layer([ScriptedModel.text("x", { during: gate })])),
          Effect.fork
        )
      yield* settle
      expect(yield* Ref.get(received)).toStrictEqual(["block-start"])
      yield* Deferred.succeed(gate, undefined)
      yield* Fiber.join(fiber)
      expect(yield* Ref.get(received)).toStrictEqual(["block-start", "text-delta", "block-end", "finish"])
    }))

  it.effect("onInterrupt runs on interruption and the interruption completes only after it", () =>
    Effect.gen(function*() {
      const firstChunk = yield* Deferred.make<void>()
      const entered = yield* Deferred.make<void>()
      const release = yield* Deferred.make<void>()
      const finished = yield* Ref.make(false)
      const onInterrupt = Deferred.succeed(entered, undefined).pipe(
        Effect.zipRight(Deferred.await(release)),
        Effect.zipRight(Ref.set(finished, true))
      )
      const consumer = yield* Effect.flatMap(
        Model,
        (model) => model.stream(request(1)).pipe(Stream.runForEach(() => Deferred.succeed(firstChunk, undefined)))
      ).pipe(
        Effect.provide(ScriptedModel.layer([ScriptedModel.hang({ text: "a" }, { onInterrupt })])),
        Effect.fork
      )
      yield* Deferred.await(firstChunk)
      const interrupter = yield* Effect.fork(Fiber.interrupt(consumer))
      yield* Deferred.await(entered)
      yield* settle
      expect(Option.isNone(yield* Fiber.poll(interrupter))).toBe(true)
      expect(Option.isNone(yield* Fiber.poll(consumer))).toBe(true)
      yield* Deferred.succeed(release, undefined)
      const exit = yield* Fiber.join(interrupter)
      expect(Exit.isInterrupted(exit)).toBe(true)
      expect(yield* Ref.get(finished)).toBe(true)
    }))

  it.effect("onInterrupt also runs when the consumer is interrupted while processing a chunk", () =>
    Effect.gen(function*() {
      const processing = yield* Deferred.make<void>()
      const ran = yield* Ref.make(false)
      const consumer = yield* Effect.flatMap(Model, (model) =>
        model.stream(request(1)).pipe(
          Stream.runForEach(() => Effect.zipRight(Deferred.succeed(processing, undefined), Effect.never))
        )).pipe(
          Effect.provide(ScriptedModel.layer([ScriptedModel.text("x", { onInterrupt: Ref.set(ran, true) })])),
          Effect.fork
        )
      yield* Deferred.await(processing)
      yield* Fiber.interrupt(consumer)
      expect(yield* Ref.get(ran)).toBe(true)
    }))

  it.effect("a defect raised by onInterrupt is in the interrupted consumer's exit", () =>
    Effect.gen(function*() {
      const boom = new Error("boom")
      const started = yield* Deferred.make<void>()
      const consumer = yield* Effect.flatMap(Model, (model) =>
        model.stream(request(1)).pipe(Stream.runForEach(() => Deferred.succeed(started, undefined)))).pipe(
          Effect.provide(ScriptedModel.layer([ScriptedModel.hang({ text: "a" }, { onInterrupt: Effect.die(boom) })])),
          Effect.fork
        )
      yield* Deferred.await(started)
      const exit = yield* Fiber.interrupt(consumer)
      expect(Exit.isFailure(exit) && Array.from(Cause.defects(exit.cause))).toEqual([boom])
    }))

  it.effect("onInterrupt does not run when the stream ends or fails", () =>
    Effect.gen(function*() {
      const ran = yield* Ref.make(0)
      const onInterrupt = Ref.update(ran, (n) => n + 1)
      yield* collect(ScriptedModel.text("x", { onInterrupt }))
      yield* Effect.flip(collect(ScriptedModel.die("x", { onInterrupt })))
      expect(yield* Ref.get(ran)).toBe(0)
    }))

  it.effect("a failing effect fails the stream with ModelError; a ModelError passes through", () =>
    Effect.gen(function*() {
      const passthrough = new ModelError({ failure: { message: "gone", code: "AUTH", status: 401 } })
      const before = yield* traced(() => ScriptedModel.text("x", { awaitBefore: Effect.fail(passthrough) }))
      expect(before.events).toStrictEqual([])
      expect(before.exit).toStrictEqual(Exit.fail(passthrough))

      const during = yield* traced(() => ScriptedModel.text("x", { during: Effect.fail("boom") }))
      expect(during.events).toStrictEqual(["chunk:block-start"])
      expect(during.exit).toStrictEqual(Exit.fail(unknownFailure("boom")))

      const after = yield* traced(() => ScriptedModel.text("x", { afterFinish: Effect.fail({ message: "late" }) }))
      expect(after.events).toStrictEqual(["chunk:block-start", "chunk:text-delta", "chunk:block-end", "chunk:finish"])
      expect(after.exit).toStrictEqual(Exit.fail(unknownFailure("late")))
    }))
})
