/**
 * The Model seam (SPEC 8.8): every model reaches the loop through `Model.responseOf`, whichever form
 * its response takes (every chunk at once, an Effect of the chunks, a Stream), and `Model.make`
 * builds a model from its `respond` function.
 */
import { describe, expect, it } from "@effect/vitest"
import { Chunk, Effect, Layer, Schema, Stream } from "effect"
import type { ModelRequest, ModelResponse, ModelShape, StreamChunk } from "../../src/index.js"
import {
  Agent,
  CancelCause,
  Driver,
  Model,
  ModelError,
  SessionId,
  SessionLog,
  SessionStore,
  Tool,
  Tools,
  userMessage
} from "../../src/index.js"
import { reasons, shape, waitUntil } from "../agent/harness.js"

const echo = Tool.make("echo", {
  description: "Returns ok",
  parameters: Schema.Struct({}),
  execute: () => Effect.succeed("ok")
})

const toolCall = (id: string): ReadonlyArray<StreamChunk> => [
  { type: "block-start", index: 0, block: "tool-call", id, name: "echo" },
  { type: "tool-call-delta", index: 0, arguments: "{}" },
  { type: "block-end", index: 0 },
  { type: "finish", finish: { kind: "stop" } }
]

const text = (t: string): ReadonlyArray<StreamChunk> => [
  { type: "block-start", index: 0, block: "text" },
  { type: "text-delta", index: 0, text: t },
  { type: "block-end", index: 0 },
  { type: "finish", finish: { kind: "stop" } }
]

// One tool call, then "done" once the newest message is the tool's result.
const twoSteps = (request: ModelRequest): ReadonlyArray<StreamChunk> =>
  request.messages.at(-1)?.source.kind === "tool" ? text("done") : toolCall(`call-${request.step}`)

const agentWith = (model: ModelShape) =>
  Agent.layer({ sessionId: SessionId.make("s"), model: { provider: "p", model: "m" }, invariants: "check" }).pipe(
    Layer.provideMerge(
      Layer.mergeAll(SessionStore.layerMemory, Layer.succeed(Model, model), Tools.layer({ tools: [echo] }))
    )
  )

const followup = (text: string) => Effect.flatMap(Driver, (driver) => driver.followup(userMessage({ id: text, text })))

const runTurn = Effect.gen(function*() {
  yield* followup("go")
  yield* Effect.flatMap(Driver, (driver) => driver.whenIdle)
})

// What a tool turn of two steps leaves in the log, after the opening events.
const TOOL_TURN = [
  "SS(1,1)",
  "UM(go)",
  "RH(initial)",
  "CH(block-start)",
  "CH(tool-call-delta)",
  "CH(block-end)",
  "CH(finish stop)",
  "AM",
  "TC(call-1)",
  "TR(call-1)",
  "SE(1,1)",
  "SS(1,2)",
  "CH(block-start)",
  "CH(text-delta)",
  "CH(block-end)",
  "CH(finish stop)",
  "AM",
  "SE(1,2)",
  "TE(1,completed)"
]

const neverStreamed = (respond: (request: ModelRequest) => ModelResponse): ModelShape => ({
  stream: () => Stream.die("the loop ran `stream` of a model that has `respond`"),
  respond
})

describe("Model.responseOf", () => {
  it.effect("every chunk at once: the loop reads the array and never runs the model's stream", () =>
    Effect.gen(function*() {
      yield* runTurn
      expect((yield* shape).slice(3)).toEqual(TOOL_TURN)
      expect(yield* reasons).toEqual([{ kind: "completed" }])
    }).pipe(Effect.provide(agentWith(neverStreamed(twoSteps)))))

  it.effect("an Effect of the chunks: the same turn", () =>
    Effect.gen(function*() {
      yield* runTurn
      expect((yield* shape).slice(3)).toEqual(TOOL_TURN)
    }).pipe(Effect.provide(agentWith(neverStreamed((request) => Effect.succeed(twoSteps(request)))))))

  it.effect("a Stream handed over by respond: the same turn", () =>
    Effect.gen(function*() {
      yield* runTurn
      expect((yield* shape).slice(3)).toEqual(TOOL_TURN)
    }).pipe(Effect.provide(agentWith(neverStreamed((request) => Stream.fromIterable(twoSteps(request)))))))

  it.effect("a model with only `stream` (SPEC 8.8's shape) is read as a Stream", () =>
    Effect.gen(function*() {
      yield* runTurn
      expect((yield* shape).slice(3)).toEqual(TOOL_TURN)
    }).pipe(Effect.provide(agentWith(Model.of({ stream: (request) => Stream.fromIterable(twoSteps(request)) })))))

  it.effect("a failed Effect ends the step with the model's failure, after retries are refused", () =>
    Effect.gen(function*() {
      yield* runTurn
      const [reason] = yield* reasons
      expect(reason).toMatchObject({ kind: "error", error: { code: "AUTH", message: "no key" } })
    }).pipe(
      Effect.provide(
        agentWith(neverStreamed(() => Effect.fail(new ModelError({ failure: { message: "no key", code: "AUTH" } }))))
      )
    ))

  it.effect("a respond that throws is a failure of that response (synthetic error finish, code UNKNOWN)", () =>
    Effect.gen(function*() {
      yield* runTurn
      const [reason] = yield* reasons
      expect(reason).toMatchObject({ kind: "error", error: { code: "UNKNOWN" } })
      expect(yield* shape).toContain("CH(finish error)")
    }).pipe(Effect.provide(agentWith(neverStreamed(() => {
      throw new Error("broken model")
    })))))

  it.effect("an answer that is neither chunks, an Effect nor a Stream fails the step (UNKNOWN)", () =>
    Effect.gen(function*() {
      yield* runTurn
      const [reason] = yield* reasons
      expect(reason).toMatchObject({ kind: "error", error: { code: "UNKNOWN" } })
    }).pipe(Effect.provide(agentWith(neverStreamed(() => 42 as unknown as ModelResponse)))))

  it.live("a cancel during an Effect that never completes aborts the turn", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* followup("go")
      yield* waitUntil(Effect.map(shape, (s) => s.includes("RH(initial)")), "the request")
      yield* driver.cancel(CancelCause.user)
      yield* driver.whenIdle
      expect(yield* reasons).toEqual([{ kind: "aborted", reason: { kind: "user" } }])
    }).pipe(Effect.provide(agentWith(neverStreamed(() => Effect.never)))))
})

describe("Model.make", () => {
  it.effect("its stream runs the response of respond, whatever its form", () =>
    Effect.gen(function*() {
      const request = { messages: [], step: 1 } as unknown as ModelRequest
      for (
        const respond of [
          () => text("a"),
          () => Effect.succeed(text("a")),
          () => Stream.fromIterable(text("a"))
        ] as ReadonlyArray<(request: ModelRequest) => ModelResponse>
      ) {
        const chunks = yield* Stream.runCollect(Model.make(respond).stream(request))
        expect(Chunk.toArray(chunks)).toEqual(text("a"))
      }
    }))

  it.effect("respond is called when the stream runs, once per run", () =>
    Effect.gen(function*() {
      let calls = 0
      const model = Model.make(() => {
        calls++
        return text("a")
      })
      const request = { messages: [], step: 1 } as unknown as ModelRequest
      const stream = model.stream(request)
      expect(calls).toBe(0)
      yield* Stream.runDrain(stream)
      yield* Stream.runDrain(stream)
      expect(calls).toBe(2)
    }))

  it.effect("the log of a turn through Model.make matches the chunks it answered", () =>
    Effect.gen(function*() {
      yield* runTurn
      const log = yield* SessionLog
      const messages = yield* log.messages
      expect(messages.at(-1)).toMatchObject({ role: "assistant", content: [{ type: "text", text: "done" }] })
    }).pipe(Effect.provide(agentWith(Model.make(twoSteps)))))
})
