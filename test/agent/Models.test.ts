/**
 * The models that drive an agent (SPEC 8.8): ScriptedModel and its effects, Model.layerLanguageModel
 * and its request mapping.
 */
import * as AiError from "@effect/ai/AiError"
import * as LanguageModel from "@effect/ai/LanguageModel"
import type * as Response from "@effect/ai/Response"
import * as AiTool from "@effect/ai/Tool"
import { describe, expect, it } from "@effect/vitest"
import { Chunk, Deferred, Effect, Either, JSONSchema, Layer, Option, Ref, Schema, Stream, TestClock } from "effect"
import {
  Agent,
  CancelCause,
  Driver,
  Model,
  ModelError,
  ScriptedModel,
  SessionId,
  SessionLog,
  SessionStore,
  Tool,
  Tools
} from "../../src/index.js"
import type { Message, ModelRequest, StreamChunk } from "../../src/index.js"
import {
  agentTest,
  closeOut,
  dataOfType,
  gate,
  open,
  plugin,
  reasons,
  scenario,
  shape,
  token,
  untilEvent,
  user
} from "./harness.js"
import { empty } from "./toolFixtures.js"

type Loose = { readonly [k: string]: any }

const ReadParams = Schema.Struct({ path: Schema.String })
const readTool = Tool.make("read", {
  description: "Reads a file",
  parameters: ReadParams,
  execute: ({ path }) =>
    Effect.succeed({ content: `contents of ${path}`, additionalContexts: [plugin("ctx-1", "file was read")] })
})

// ---------------------------------------------------------------------------------------------
// Model.layerLanguageModel inside an agent.

interface Fake {
  readonly options: Ref.Ref<ReadonlyArray<LanguageModel.ProviderOptions>>
  readonly layer: Layer.Layer<LanguageModel.LanguageModel>
}

const fakeLanguageModel = (
  responses: ReadonlyArray<
    { readonly parts: ReadonlyArray<Response.StreamPartEncoded>; readonly failure?: AiError.AiError }
  >
): Fake => {
  const options = Ref.unsafeMake<ReadonlyArray<LanguageModel.ProviderOptions>>([])
  let calls = 0
  const layer = Layer.effect(
    LanguageModel.LanguageModel,
    LanguageModel.make({
      generateText: () => Effect.dieMessage("generateText is not used"),
      streamText: (o) =>
        Stream.unwrap(Effect.map(Ref.update(options, (all) => [...all, o]), () => {
          const response = responses[calls++]
          if (response === undefined) return Stream.die("no response left")
          return Stream.concat(
            Stream.fromIterable(response.parts),
            response.failure === undefined ? Stream.empty : Stream.fail(response.failure)
          )
        }))
    })
  )
  return { options, layer }
}

const agentOverLanguageModel = (fake: Fake, tools: ReadonlyArray<any> = [], system?: string) =>
  Agent.layer({
    sessionId: SessionId.make("s"),
    model: { provider: "p", model: "m" },
    ...(system !== undefined ? { system } : {})
  }).pipe(
    Layer.provideMerge(Layer.mergeAll(
      SessionStore.layerMemory,
      Model.layerLanguageModel.pipe(Layer.provide(fake.layer)),
      Tools.layer({ tools })
    ))
  )

const usage = { inputTokens: 3, outputTokens: 4, totalTokens: 7 }

/** The parts of one text block `t` with the single delta `delta`. */
const textParts = (delta: string): Array<Response.StreamPartEncoded> => [
  { type: "text-start", id: "t" },
  { type: "text-delta", id: "t", delta },
  { type: "text-end", id: "t" }
]

/** {@link textParts}, then a stop finish with {@link usage}. */
const textReply = (
  delta: string
): Array<Response.StreamPartEncoded> => [...textParts(delta), { type: "finish", reason: "stop", usage }]

/** A prompt message as plain data (type-id brands left out). */
const plain = (value: unknown): unknown => {
  if (Array.isArray(value)) return value.map(plain)
  if (value instanceof Uint8Array) return Array.from(value)
  if (typeof value === "object" && value !== null) {
    return Object.fromEntries(
      Object.entries(value).filter(([k]) => !k.startsWith("~") && k !== "options").map(([k, v]) => [k, plain(v)])
    )
  }
  return value
}

const G3 = gate()
const G3in = gate()
const turns: ReadonlyArray<ReadonlyArray<Response.StreamPartEncoded>> = [
  [
    { type: "tool-call", id: "c1", name: "echo", params: { text: "ping" } },
    { type: "finish", reason: "tool-calls", usage }
  ],
  [
    ...textReply("pong")
  ]
]

describe("8.8 Model.layerLanguageModel in an agent", () => {
  it.scoped("8.8: step 2's prompt holds the system prompt, the user text and image, the tool call with parsed params, the tool result and the context; tools are schema-only", () => {
    const fake = fakeLanguageModel([
      {
        parts: [
          { type: "reasoning-start", id: "r" },
          { type: "reasoning-delta", id: "r", delta: "hmm" },
          { type: "reasoning-end", id: "r" },
          { type: "tool-call", id: "c1", name: "read", params: { path: "a.txt" } },
          { type: "finish", reason: "tool-calls", usage }
        ] as ReadonlyArray<Response.StreamPartEncoded>
      },
      {
        parts: [
          ...textReply("done")
        ] as ReadonlyArray<Response.StreamPartEncoded>
      }
    ])
    return Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup({
        id: "A" as any,
        role: "user",
        content: [{ type: "text", text: "look" }, { type: "image", mediaType: "image/png", data: "aGk=" }],
        source: { kind: "user" }
      })
      expect(yield* closeOut).toEqual([])
      const sent = yield* Ref.get(fake.options)
      expect(sent).toHaveLength(2)
      const prompt = plain(sent[1]!.prompt.content) as ReadonlyArray<Loose>
      expect(prompt.map((m) => m.role)).toEqual(["system", "user", "assistant", "tool", "user"])
      expect(prompt[0]!.content).toBe("SYS")
      expect(prompt[1]!.content).toEqual([
        { type: "text", text: "look" },
        { type: "file", mediaType: "image/png", data: [104, 105] }
      ])
      expect(prompt[2]!.content.map((p: Loose) => [p.type, p.text ?? p.params])).toEqual([
        ["reasoning", "hmm"],
        ["tool-call", { path: "a.txt" }]
      ])
      expect(prompt[2]!.content[1]).toMatchObject({ id: "c1", name: "read" })
      expect(prompt[3]!.content).toHaveLength(1)
      expect(prompt[3]!.content[0]).toMatchObject({ type: "tool-result", id: "c1", name: "read", isFailure: false })
      expect(JSON.stringify(prompt[3]!.content[0].result)).toContain("contents of a.txt")
      expect(prompt[4]!.content).toEqual([{ type: "text", text: "file was read" }])
      // The tools as @effect/ai declares them to a provider.
      for (const options of sent) {
        expect(options.tools.map((t) => ({
          name: t.name,
          description: AiTool.getDescription(t as never),
          parameters: AiTool.getJsonSchema(t as never)
        }))).toEqual([{
          name: "read",
          description: "Reads a file",
          parameters: (({ $schema: _, ...rest }) => rest)(JSONSchema.make(ReadParams) as Loose)
        }])
      }
      // The chunks as logged, in the order of the parts.
      const chunks = (yield* dataOfType("assistant/chunk")).map((d) => d.chunk)
      expect(chunks.slice(0, 8)).toEqual([
        { type: "block-start", index: 0, block: "reasoning" },
        { type: "reasoning-delta", index: 0, text: "hmm" },
        { type: "block-end", index: 0 },
        { type: "block-start", index: 1, block: "tool-call", id: "c1", name: "read" },
        { type: "tool-call-delta", index: 1, arguments: "{\"path\":\"a.txt\"}" },
        { type: "block-end", index: 1 },
        { type: "usage", usage },
        { type: "finish", finish: { kind: "stop" } }
      ])
      expect((yield* dataOfType("tool/result"))[0]!.message.content[0].content).toEqual([{
        type: "text",
        text: "contents of a.txt"
      }])
    }).pipe(Effect.provide(agentOverLanguageModel(fake, [readTool], "SYS")))
  })

  it.scoped("8.8/4.5: a 429 response error is a RATE_LIMIT ModelError: logged as an error finish after the earlier chunks, retried after backoff", () => {
    const error = new AiError.HttpResponseError({
      module: "Fake",
      method: "streamText",
      reason: "StatusCode",
      request: { method: "POST", url: "https://api.example.test/v1", urlParams: [], hash: Option.none(), headers: {} },
      response: { status: 429, headers: {} }
    })
    const fake = fakeLanguageModel([
      {
        parts: [
          { type: "text-start", id: "t" },
          { type: "text-delta", id: "t", delta: "par" }
        ] as ReadonlyArray<Response.StreamPartEncoded>,
        failure: error
      },
      {
        parts: [
          ...textReply("ok")
        ] as ReadonlyArray<Response.StreamPartEncoded>
      }
    ])
    return Effect.gen(function*() {
      const driver = yield* Driver
      const log = yield* SessionLog
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "llm/retry")
      yield* TestClock.adjust("2 seconds")
      expect(yield* closeOut).toEqual([])
      expect(yield* shape).toEqual([
        "INS(nt,0,[A])",
        "TS(1)",
        "CLM(nt,0,1)",
        "SS(1,1)",
        "UM(A)",
        "RH(initial)",
        "CH(block-start)",
        "CH(text-delta)",
        "CH(finish error)",
        "RT(1)",
        "CH(block-start)",
        "CH(text-delta)",
        "CH(block-end)",
        "CH(usage)",
        "CH(finish stop)",
        "AM",
        "SE(1,1)",
        "TE(1,completed)"
      ])
      const finish = (yield* dataOfType("assistant/chunk"))[2]!.chunk
      expect(finish.finish.kind).toBe("error")
      expect(finish.finish.failure).toMatchObject({ code: "RATE_LIMIT", status: 429 })
      const retry = (yield* dataOfType("llm/retry"))[0]!
      expect(retry.failure).toEqual(finish.finish.failure)
      expect(retry.delayMs).toBeGreaterThanOrEqual(800)
      expect(retry.delayMs).toBeLessThanOrEqual(1200)
      // The failed attempt's partial text never reaches the model.
      const sent = yield* Ref.get(fake.options)
      expect((plain(sent[1]!.prompt.content) as ReadonlyArray<Loose>).map((m) => m.role)).toEqual(["user"])
      expect((yield* log.messages).map((m: Message) => m.content[0])).toEqual([{ type: "text", text: "A" }, {
        type: "text",
        text: "ok"
      }])
    }).pipe(Effect.provide(agentOverLanguageModel(fake)))
  })

  it.scoped("8.8/4.5: finish reason length → max-tokens: the tool-call block is dropped and the turn ends max-tokens without tools", () => {
    const fake = fakeLanguageModel([
      {
        parts: [
          ...textParts("long"),
          { type: "tool-call", id: "c1", name: "read", params: { path: "x" } },
          { type: "finish", reason: "length", usage }
        ] as ReadonlyArray<Response.StreamPartEncoded>
      }
    ])
    return Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      const am = (yield* dataOfType("assistant/message"))[0]!
      expect(am.message.content).toEqual([{ type: "text", text: "long" }])
      expect(am.usage).toEqual(usage)
      expect(yield* dataOfType("tool/call")).toEqual([])
      expect(yield* reasons).toEqual([{ kind: "max-tokens" }])
    }).pipe(Effect.provide(agentOverLanguageModel(fake, [readTool])))
  })

  it.scoped("8.8/4.5: an error part without a status ends the turn error(UNKNOWN), not retried; a transport failure is NETWORK and retried", () => {
    const transport = new AiError.HttpRequestError({
      module: "Fake",
      method: "streamText",
      reason: "Transport",
      request: { method: "POST", url: "https://api.example.test/v1", urlParams: [], hash: Option.none(), headers: {} }
    })
    const fake = fakeLanguageModel([
      { parts: [{ type: "error", error: { message: "bad thing" } }] as ReadonlyArray<Response.StreamPartEncoded> },
      { parts: [], failure: transport },
      { parts: [{ type: "finish", reason: "stop", usage }] as ReadonlyArray<Response.StreamPartEncoded> }
    ])
    return Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      const r = yield* reasons
      expect(r).toHaveLength(1)
      expect(r[0]!.kind).toBe("error")
      expect(r[0]!.error.code).toBe("UNKNOWN")
      expect(r[0]!.error.message).toContain("bad thing")
      expect("status" in r[0]!.error).toBe(false)
      yield* driver.followup(user("B"))
      yield* untilEvent((e) => e.type === "llm/retry")
      expect((yield* dataOfType("llm/retry"))[0]!.failure.code).toBe("NETWORK")
      yield* TestClock.adjust("2 seconds")
      expect(yield* closeOut).toEqual([])
      expect((yield* reasons)[1]).toEqual({ kind: "completed" })
    }).pipe(Effect.provide(agentOverLanguageModel(fake)))
  })
})

describe("8.8 ScriptedModel", () => {
  const req = (): ModelRequest => ({
    sessionId: SessionId.make("s"),
    turn: 1,
    step: 1,
    attempt: 1,
    provider: "p",
    model: "m",
    tools: [],
    messages: []
  })
  const collect = (s: Stream.Stream<StreamChunk, ModelError>) =>
    Effect.map(Stream.runCollect(Stream.either(s)), (c) => Chunk.toReadonlyArray(c))

  it.effect("8.8: requests and remaining; text deltas and usage; response order; exhausted script fails UNKNOWN", () =>
    Effect.gen(function*() {
      const model = yield* Model
      const scripted = yield* ScriptedModel
      expect(yield* scripted.remaining).toBe(2)
      const first = yield* collect(model.stream(req()))
      expect(first.map((e) => Either.getOrThrow(e))).toEqual([
        { type: "block-start", index: 0, block: "text" },
        { type: "text-delta", index: 0, text: "h" },
        { type: "text-delta", index: 0, text: "i" },
        { type: "block-end", index: 0 },
        { type: "usage", usage: { inputTokens: 1, outputTokens: 2 } },
        { type: "finish", finish: { kind: "stop" } }
      ])
      const second = yield* collect(model.stream({ ...req(), attempt: 2 }))
      expect(second.map((e) => Either.getOrThrow(e))).toEqual([
        { type: "block-start", index: 0, block: "reasoning" },
        { type: "reasoning-delta", index: 0, text: "r1" },
        { type: "reasoning-delta", index: 0, text: "r2" },
        { type: "block-end", index: 0 },
        { type: "block-start", index: 1, block: "text" },
        { type: "text-delta", index: 1, text: "t" },
        { type: "block-end", index: 1 },
        { type: "block-start", index: 2, block: "tool-call", id: "c1", name: "f" },
        { type: "tool-call-delta", index: 2, arguments: "{\"a\":1}" },
        { type: "block-end", index: 2 },
        { type: "block-start", index: 3, block: "tool-call", id: "c2", name: "g" },
        { type: "tool-call-delta", index: 3, arguments: "raw" },
        { type: "usage", usage: { inputTokens: 1, outputTokens: 1 } },
        { type: "replay-state", state: { k: 1 } },
        { type: "finish", finish: { kind: "max-tokens" } }
      ])
      expect(yield* scripted.remaining).toBe(0)
      const third = yield* collect(model.stream({ ...req(), attempt: 3 }))
      expect(third).toEqual([
        Either.left(new ModelError({ failure: { message: "ScriptedModel: script exhausted", code: "UNKNOWN" } }))
      ])
      expect((yield* scripted.requests).map((r) => r.attempt)).toEqual([1, 2, 3])
    }).pipe(Effect.provide(ScriptedModel.layer([
      ScriptedModel.text("hi", { deltas: ["h", "i"], usage: { inputTokens: 1, outputTokens: 2 } }),
      ScriptedModel.response({
        reasoning: ["r1", "r2"],
        text: "t",
        toolCalls: [{ id: "c1", name: "f", arguments: { a: 1 } }, {
          id: "c2",
          name: "g",
          arguments: "raw",
          partial: true
        }],
        usage: { inputTokens: 1, outputTokens: 1 },
        replayState: { k: 1 },
        finish: "max-tokens"
      })
    ]))))

  it.effect("8.8: fail emits the partial chunks then finish {kind: finish ?? error, failure}; die fails ModelError UNKNOWN", () =>
    Effect.gen(function*() {
      const model = yield* Model
      const failure = { message: "gone", code: "ABORTED" }
      const a = yield* collect(model.stream(req()))
      expect(a.map((e) => Either.getOrThrow(e))).toEqual([
        { type: "block-start", index: 0, block: "text" },
        { type: "text-delta", index: 0, text: "p" },
        { type: "block-end", index: 0 },
        { type: "finish", finish: { kind: "aborted", failure } }
      ])
      const b = yield* collect(model.stream(req()))
      expect(b).toEqual([Either.left(new ModelError({ failure: { message: "dead", code: "UNKNOWN" } }))])
    }).pipe(Effect.provide(ScriptedModel.layer([
      ScriptedModel.fail({ message: "gone", code: "ABORTED" }, {
        partial: { text: "p", closed: true },
        finish: "aborted"
      }),
      ScriptedModel.die("dead")
    ]))))

  // 4.5: "A provider-side aborted finish is a failure (e.g. code ABORTED), never a cancellation."
  agentTest(
    "4.5/8.8: a provider-side aborted finish ends the turn error, not aborted, and is not retried",
    scenario([ScriptedModel.fail({ message: "gone", code: "ABORTED" }, { finish: "aborted" })]),
    function*({ driver }) {
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect(yield* reasons).toEqual([{ kind: "error", error: { message: "gone", code: "ABORTED" } }])
      expect((yield* shape).filter((s) => s.startsWith("RT"))).toEqual([])
    }
  )

  // 8.8: "awaitBefore runs as soon as the stream is pulled, before the first chunk — also for entries that
  // emit no chunk (hang({}))"; chunks(cs, {then: "hang"}) hangs after its chunks until interrupted.
  agentTest(
    "8.8/K5: chunks(…, {then: hang}) logs its chunks then hangs; a cancel writes the prefix AM!",
    scenario([
      ScriptedModel.chunks([{ type: "block-start", index: 0, block: "text" }, {
        type: "text-delta",
        index: 0,
        text: "so far"
      }], { then: "hang" })
    ]),
    function*({ driver }) {
      yield* driver.followup(user("A"))
      yield* untilEvent((e) =>
        e.type === "assistant/chunk" && (e.data as { chunk: { type: string } }).chunk.type === "text-delta"
      )
      yield* driver.cancel(CancelCause.user)
      yield* driver.whenIdle
      expect((yield* shape).slice(-6)).toEqual([
        "RH(initial)",
        "CH(block-start)",
        "CH(text-delta)",
        "AM!",
        "SE(1,1)",
        "TE(1,aborted(user))"
      ])
      expect(yield* closeOut).toEqual([])
    }
  )
})

describe("8.8 Model.layerLanguageModel", () => {
  const req: ModelRequest = {
    sessionId: SessionId.make("s"),
    turn: 1,
    step: 1,
    attempt: 1,
    provider: "p",
    model: "m",
    tools: [],
    messages: []
  }
  const through = (parts: ReadonlyArray<Response.StreamPartEncoded>, failure?: unknown) =>
    Effect.gen(function*() {
      const lm = yield* LanguageModel.make({
        generateText: () => Effect.dieMessage("unused"),
        streamText: () =>
          Stream.concat(
            Stream.fromIterable(parts),
            failure === undefined ? Stream.empty : Stream.fail(failure as AiError.AiError)
          )
      })
      const out = yield* Effect.flatMap(Model, (m) => Stream.runCollect(Stream.either(m.stream(req)))).pipe(
        Effect.provide(Model.layerLanguageModel),
        Effect.provideService(LanguageModel.LanguageModel, lm)
      )
      return Chunk.toReadonlyArray(out)
    })
  const usage = { inputTokens: 3, outputTokens: 4, totalTokens: 7 }

  it.effect("8.8: finish reasons: length → usage then max-tokens; error → error; others → stop", () =>
    Effect.gen(function*() {
      const length = yield* through([{ type: "finish", reason: "length", usage }])
      expect(length.map((e) => Either.getOrThrow(e).type)).toEqual(["usage", "finish"])
      expect((Either.getOrThrow(length[1]!) as { finish: { kind: string } }).finish.kind).toBe("max-tokens")
      const err = yield* through([{ type: "finish", reason: "error", usage }])
      expect((Either.getOrThrow(err[err.length - 1]!) as { finish: { kind: string } }).finish.kind).toBe("error")
      for (const reason of ["stop", "content-filter", "tool-calls", "other", "unknown"] as const) {
        const r = yield* through([{ type: "finish", reason, usage }])
        expect((Either.getOrThrow(r[r.length - 1]!) as { finish: { kind: string } }).finish.kind).toBe("stop")
      }
    }))

  it.effect("8.8: reasoning and text parts map to blocks; tool params parts map to a tool-call block", () =>
    Effect.gen(function*() {
      const out = yield* through([
        { type: "reasoning-start", id: "r" },
        { type: "reasoning-delta", id: "r", delta: "think" },
        { type: "reasoning-end", id: "r" },
        ...textParts("hi"),
        { type: "tool-params-start", id: "c1", name: "f" },
        { type: "tool-params-delta", id: "c1", delta: "{\"a\":" },
        { type: "tool-params-delta", id: "c1", delta: "1}" },
        { type: "tool-params-end", id: "c1" },
        { type: "finish", reason: "tool-calls", usage }
      ] as ReadonlyArray<Response.StreamPartEncoded>)
      expect(out.map((e) => Either.getOrThrow(e))).toEqual([
        { type: "block-start", index: 0, block: "reasoning" },
        { type: "reasoning-delta", index: 0, text: "think" },
        { type: "block-end", index: 0 },
        { type: "block-start", index: 1, block: "text" },
        { type: "text-delta", index: 1, text: "hi" },
        { type: "block-end", index: 1 },
        { type: "block-start", index: 2, block: "tool-call", id: "c1", name: "f" },
        { type: "tool-call-delta", index: 2, arguments: "{\"a\":" },
        { type: "tool-call-delta", index: 2, arguments: "1}" },
        { type: "block-end", index: 2 },
        { type: "usage", usage: { inputTokens: 3, outputTokens: 4, totalTokens: 7 } },
        { type: "finish", finish: { kind: "stop" } }
      ])
    }))

  it.effect("8.8: stream failures map to ModelError codes: 429 RATE_LIMIT, 5xx SERVICE_UNAVAILABLE, transport NETWORK, else UNKNOWN; status copied", () =>
    Effect.gen(function*() {
      const response = (status: number) =>
        new AiError.HttpResponseError(
          {
            module: "M",
            method: "m",
            reason: "StatusCode",
            request: { method: "POST", url: "http://x", urlParams: [], hash: Option.none(), headers: {} },
            response: { status, headers: {} }
          } as unknown as ConstructorParameters<typeof AiError.HttpResponseError>[0]
        )
      const failureOf = (out: ReadonlyArray<Either.Either<StreamChunk, ModelError>>) => {
        const last = out[out.length - 1]!
        return Either.isLeft(last) ? last.left.failure : undefined
      }
      const r429 = failureOf(yield* through([], response(429)))
      expect([r429?.code, r429?.status]).toEqual(["RATE_LIMIT", 429])
      const r503 = failureOf(yield* through([], response(503)))
      expect([r503?.code, r503?.status]).toEqual(["SERVICE_UNAVAILABLE", 503])
      const r404 = failureOf(yield* through([], response(404)))
      expect([r404?.code, r404?.status]).toEqual(["UNKNOWN", 404])
      const transport = new AiError.HttpRequestError(
        {
          module: "M",
          method: "m",
          reason: "Transport",
          request: { method: "POST", url: "http://x", urlParams: [], hash: Option.none(), headers: {} }
        } as unknown as ConstructorParameters<typeof AiError.HttpRequestError>[0]
      )
      expect(failureOf(yield* through([], transport))?.code).toBe("NETWORK")
      // An error part.
      const part = failureOf(
        yield* through([{ type: "error", error: { message: "boom", status: 529 } } as Response.StreamPartEncoded])
      )
      expect([part?.code, part?.status]).toEqual(["SERVICE_UNAVAILABLE", 529])
      const plain = failureOf(
        yield* through([{ type: "error", error: { message: "boom" } } as Response.StreamPartEncoded])
      )
      expect(plain?.code).toBe("UNKNOWN")
    }))
})

describe("8.8 ScriptedModel effects", () => {
  // 8.8: "afterFinish after the finish chunk has been consumed (so, for a stop/max-tokens finish, after the
  // assistant/message is recorded and before any tool starts)".
  agentTest(
    "8.8: afterFinish runs after the AM is recorded and before any tool starts",
    scenario([
      ScriptedModel.response({
        toolCalls: [{ id: "c1", name: "t", arguments: {} }],
        afterFinish: Effect.zipRight(open(G3in), Deferred.await(G3))
      }),
      ScriptedModel.text("done")
    ], { tools: [Tool.make("t", { description: "t", parameters: empty, execute: () => Effect.succeed("ok") })] }),
    function*({ driver }) {
      yield* driver.followup(user("A"))
      yield* Deferred.await(G3in)
      const during = yield* shape
      expect(during[during.length - 1]).toBe("AM")
      expect(during.some((s) => s.startsWith("TC"))).toBe(false)
      yield* open(G3)
      yield* driver.whenIdle
      expect((yield* shape).filter((s) => s.startsWith("TC") || s.startsWith("TR"))).toEqual(["TC(c1)", "TR(c1)"])
      expect(yield* closeOut).toEqual([])
    }
  )
})

describe("8.8 Model.layerLanguageModel request mapping", () => {
  // 8.8: "it calls streamText with the system prompt and the messages converted to its prompt format (…
  // tool-call params are the parsed arguments, or the raw string when unparsable; tool results as
  // tool-message parts), a toolkit of schema-only tools built from request.tools, and
  // disableToolCallResolution: true".
  it.effect("8.8: streamText gets the system prompt, parsed or raw tool-call params, tool messages, the toolkit and disableToolCallResolution", () =>
    Effect.gen(function*() {
      const seen: Array<LanguageModel.ProviderOptions | Record<string, unknown>> = []
      const lm = yield* LanguageModel.make({
        generateText: () => Effect.dieMessage("unused"),
        streamText: (options) => {
          seen.push(options)
          return Stream.fromIterable(
            [{
              type: "finish",
              reason: "stop",
              usage: { inputTokens: 1, outputTokens: 1, totalTokens: 2 }
            }] as ReadonlyArray<Response.StreamPartEncoded>
          ) as any
        }
      })
      // Capture the raw streamText options too (before provider-option processing).
      const captured: Array<any> = []
      const wrapped: LanguageModel.Service = {
        ...lm,
        streamText: ((options: any) => {
          captured.push(options)
          return lm.streamText(options)
        }) as any
      }
      const messages = [
        { id: "u", role: "user", content: [{ type: "text", text: "hi" }], source: { kind: "user" } },
        {
          id: "a",
          role: "assistant",
          content: [
            { type: "tool-call", id: "c1", name: "f", arguments: "{\"x\":1}" },
            { type: "tool-call", id: "c2", name: "f", arguments: "{not json" }
          ],
          source: { kind: "model", provider: "p", model: "m" }
        },
        {
          id: "r1",
          role: "tool",
          content: [{
            type: "tool-result",
            toolCallId: "c1",
            content: [{ type: "text", text: "one" }],
            isError: false
          }],
          source: { kind: "tool", callId: "c1" }
        },
        {
          id: "r2",
          role: "tool",
          content: [{ type: "tool-result", toolCallId: "c2", content: [{ type: "text", text: "two" }], isError: true }],
          source: { kind: "tool", callId: "c2" }
        }
      ] as unknown as ModelRequest["messages"]
      const request: ModelRequest = {
        sessionId: SessionId.make("s"),
        turn: 1,
        step: 2,
        attempt: 1,
        provider: "p",
        model: "m",
        system: "be brief",
        tools: [{ name: "f", description: "F", parameters: { type: "object", properties: {} } }],
        messages
      }
      yield* Effect.flatMap(Model, (m) => Stream.runDrain(m.stream(request))).pipe(
        Effect.provide(Model.layerLanguageModel),
        Effect.provideService(LanguageModel.LanguageModel, wrapped)
      )
      expect(captured.length).toBe(1)
      const options = captured[0]
      expect(options.disableToolCallResolution).toBe(true)
      expect(Object.keys(options.toolkit.tools)).toEqual(["f"])
      const content = options.prompt.content as ReadonlyArray<any>
      expect(content.map((m) => m.role)).toEqual(["system", "user", "assistant", "tool", "tool"])
      expect(content[0].content).toBe("be brief")
      const calls = content[2].content.filter((p: any) => p.type === "tool-call")
      expect(calls.map((p: any) => p.params)).toEqual([{ x: 1 }, "{not json"])
      expect(content[3].content[0].type).toBe("tool-result")
      expect(content[3].content[0].id).toBe("c1")
    }))
})

describe("8.8 Model.layerLanguageModel", () => {
  let calls = 0
  let ran = 0
  const echo = Tool.make("echo", {
    description: "echoes",
    parameters: Schema.Struct({ text: Schema.String }),
    execute: ({ text }) => Effect.sync(() => (ran++, `echo: ${text}`))
  })
  const fake = Layer.effect(
    LanguageModel.LanguageModel,
    LanguageModel.make({
      generateText: () => Effect.dieMessage("generateText is not used"),
      streamText: () => Stream.suspend(() => Stream.fromIterable(turns[calls++] ?? []))
    })
  )
  it.scoped("8.8: an agent over an @effect/ai LanguageModel runs a tool round trip with the C2 shape; the body runs once", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const log = yield* SessionLog
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect(yield* shape).toEqual([
        "INS(nt,0,[A])",
        "TS(1)",
        "CLM(nt,0,1)",
        "SS(1,1)",
        "UM(A)",
        "RH(initial)",
        "CH(block-start)",
        "CH(tool-call-delta)",
        "CH(block-end)",
        "CH(usage)",
        "CH(finish stop)",
        "AM",
        "TC(c1)",
        "TR(c1)",
        "SE(1,1)",
        "SS(1,2)",
        "CH(block-start)",
        "CH(text-delta)",
        "CH(block-end)",
        "CH(usage)",
        "CH(finish stop)",
        "AM",
        "SE(1,2)",
        "TE(1,completed)"
      ])
      expect(ran).toBe(1)
      expect(calls).toBe(2)
      expect((yield* log.messages).map(token)).toEqual(["A", "tool-call c1", "tool-result c1", "pong"])
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(
      Agent.layer({ sessionId: SessionId.make("s"), model: { provider: "p", model: "m" } }).pipe(
        Layer.provideMerge(
          Layer.mergeAll(
            SessionStore.layerMemory,
            Model.layerLanguageModel.pipe(Layer.provide(fake)),
            Tools.layer({ tools: [echo] })
          )
        )
      )
    )))
})
