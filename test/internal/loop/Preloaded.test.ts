import { describe, expect, it } from "@effect/vitest"
import { Chunk, Effect, Either, Layer, Schema, Stream } from "effect"
import { ModelError } from "../../../src/domain/Errors.js"
import type { SessionEvent } from "../../../src/domain/Event.js"
import type { StreamChunk } from "../../../src/domain/Values.js"
import * as Preloaded from "../../../src/internal/loop/Preloaded.js"
import { Agent } from "../../../src/layers/Agent.js"
import { ScriptedModel } from "../../../src/layers/ScriptedModel.js"
import { Driver } from "../../../src/services/Driver.js"
import type { ModelRequest } from "../../../src/services/Model.js"
import { Model } from "../../../src/services/Model.js"
import { SessionLog } from "../../../src/services/SessionLog.js"
import { SessionStore } from "../../../src/services/SessionStore.js"
import { Tool, Tools } from "../../../src/services/Tools.js"
import { SessionId } from "../../../src/domain/Ids.js"
import { notation, user } from "../../agent/harness.js"

const chunks: ReadonlyArray<StreamChunk> = [
  { type: "block-start", index: 0, block: "text" },
  { type: "text-delta", index: 0, text: "hi" },
  { type: "block-end", index: 0 },
  { type: "finish", finish: { kind: "stop" } }
]

const failure = new ModelError({ failure: { message: "no", code: "UNKNOWN" } })

describe("Preloaded", () => {
  it.effect("whoever runs the stream gets the stream, built only then; the opener is only attached to it", () =>
    Effect.gen(function*() {
      let opened = 0
      const open = Effect.sync(() => {
        opened++
        return chunks
      })
      let built = 0
      const stream = Preloaded.make(() => {
        built++
        return Stream.rechunk(Stream.fromIterable(chunks), 1)
      }, open)
      // Opening does not build the stream; running it builds it once.
      expect(yield* Preloaded.openOf(stream)!).toEqual(chunks)
      expect(opened).toBe(1)
      expect(built).toBe(0)
      const batches = yield* Stream.runCollect(Stream.mapChunks(stream, (c) => Chunk.of(c.length)))
      expect(Chunk.toArray(batches)).toEqual([1, 1, 1, 1])
      expect(built).toBe(1)
      expect(opened).toBe(1)
    }))

  it.effect("an opener may yield a stream to run instead, or fail", () =>
    Effect.gen(function*() {
      const inner = Stream.fromIterable(chunks.slice(0, 2))
      const opened = yield* Preloaded.openOf(Preloaded.make(() => Stream.empty, Effect.succeed(inner)))!
      expect(Preloaded.isChunks(opened)).toBe(false)
      const failed = yield* Effect.either(Preloaded.openOf(Preloaded.make(() => Stream.empty, Effect.fail(failure)))!)
      expect(Either.isLeft(failed) && failed.left).toBe(failure)
    }))

  it.effect("a stream derived with Stream operators, and any other stream, carries no opener", () =>
    Effect.sync(() => {
      const stream = Preloaded.make(() => Stream.fromIterable(chunks), Effect.succeed(chunks))
      expect(Preloaded.openOf(stream)).toBeDefined()
      expect(Preloaded.openOf(Stream.map(stream, (c) => c))).toBeUndefined()
      expect(Preloaded.openOf(Stream.fromIterable(chunks))).toBeUndefined()
    }))

  it.effect("ScriptedModel run as a Stream still emits one chunk per pull", () =>
    Effect.gen(function*() {
      const model = yield* Effect.provide(Model, ScriptedModel.layer([ScriptedModel.text("hi")]))
      const batches = yield* Stream.runCollect(Stream.mapChunks(model.stream({} as ModelRequest), (c) => Chunk.of(c.length)))
      expect(Chunk.toArray(batches)).toEqual([1, 1, 1, 1])
    }))
})

// W1-like turns: two steps calling a tool, then a text answer, through ScriptedModel (read by the
// loop without running the Stream) and through a plain `Stream.fromIterable` model of the same chunks.
const toolChunks = (i: number): ReadonlyArray<StreamChunk> => [
  { type: "block-start", index: 0, block: "tool-call", id: `call-${i}`, name: "echo" },
  { type: "tool-call-delta", index: 0, arguments: JSON.stringify({ i }) },
  { type: "block-end", index: 0 },
  { type: "finish", finish: { kind: "stop" } }
]

const echo = Tool.make("echo", {
  description: "echo",
  parameters: Schema.Struct({ i: Schema.Number }),
  mode: "exclusive",
  execute: ({ i }) => Effect.succeed(`echo ${i}`)
})

const runWith = (model: Layer.Layer<Model>) =>
  Effect.gen(function*() {
    const driver = yield* Driver
    yield* driver.followup(user("A"))
    yield* driver.whenIdle
    return yield* (yield* SessionLog).events
  }).pipe(
    Effect.provide(
      Agent.layer({ sessionId: SessionId.make("s"), model: { provider: "p", model: "m" } }).pipe(
        Layer.provide(Layer.mergeAll(SessionStore.layerMemory, model, Tools.layer({ tools: [echo] })))
      )
    )
  )

// Everything but the ids of messages tiller makes (random per run).
const withoutId = (data: unknown) => {
  const { message, ...rest } = data as { readonly message: { readonly id: string } }
  const { id: _id, ...content } = message
  return { ...rest, message: content }
}
const comparable = (events: ReadonlyArray<SessionEvent>) =>
  events.map((e) => [
    notation(e),
    e.type === "assistant/chunk" ? e.data : e.type === "tool/result" || e.type === "assistant/message" ? withoutId(e.data) : undefined
  ])

describe("the loop reading a preloaded stream", () => {
  it.effect("writes the same log as the loop running an ordinary stream of the same chunks", () =>
    Effect.gen(function*() {
      const script = [
        ScriptedModel.response({ toolCalls: [{ id: "call-1", name: "echo", arguments: { i: 1 } }] }),
        ScriptedModel.response({ toolCalls: [{ id: "call-2", name: "echo", arguments: { i: 2 } }] }),
        ScriptedModel.text("hi")
      ]
      // ScriptedModel hands its plain responses preloaded (which is what this test compares).
      const scripted = yield* Effect.provide(Model, ScriptedModel.layer(script))
      expect(Preloaded.openOf(scripted.stream({} as ModelRequest))).toBeDefined()
      const preloaded = yield* runWith(ScriptedModel.layer(script))
      const responses = [toolChunks(1), toolChunks(2), chunks]
      const plain = yield* runWith(Layer.succeed(Model, Model.of({
        stream: (request) => Stream.fromIterable(responses[request.step - 1] ?? [])
      })))
      expect(preloaded.length).toBeGreaterThan(20)
      expect(comparable(preloaded)).toEqual(comparable(plain))
    }))

  it.effect("reads the opener's chunks in one batch and never runs the stream", () =>
    Effect.gen(function*() {
      let streamRuns = 0
      // The stream, if run, would answer something else: the log shows which one the loop read.
      const ordinary = Stream.suspend(() => {
        streamRuns++
        return Stream.fromIterable([
          { type: "block-start", index: 0, block: "text" },
          { type: "text-delta", index: 0, text: "from the stream" },
          { type: "block-end", index: 0 },
          { type: "finish", finish: { kind: "stop" } }
        ] satisfies ReadonlyArray<StreamChunk>)
      })
      const events = yield* runWith(Layer.succeed(Model, Model.of({
        stream: () => Preloaded.make(() => ordinary, Effect.succeed(chunks))
      })))
      expect(streamRuns).toBe(0)
      const deltas = events.flatMap((e) =>
        e.type === "assistant/chunk" && (e.data as { chunk: StreamChunk }).chunk.type === "text-delta"
          ? [((e.data as { chunk: StreamChunk }).chunk as { text: string }).text]
          : []
      )
      expect(deltas).toEqual(["hi"])
    }))

  it.effect("an exhausted script fails the request as it does when the Stream runs", () =>
    Effect.gen(function*() {
      const events = yield* runWith(ScriptedModel.layer([]))
      const end = events.find((e) => e.type === "turn/end")
      expect(end?.data).toMatchObject({ reason: { kind: "error", error: { message: "ScriptedModel: script exhausted" } } })
    }))
})
