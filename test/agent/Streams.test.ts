/**
 * The model stream of a step (SPEC 4.5 Q5-Q8, 7.4): stream order and failures, the assembler and
 * synthetic finishes, interrupted prefixes, chunks that do not decode, append failures.
 */
import { describe, expect, it } from "@effect/vitest"
import { Context, Deferred, Duration, Effect, Exit, Layer, Ref, Schema, Scope, Stream, TestClock } from "effect"
import {
  Agent,
  CancelCause,
  checkLog,
  Driver,
  Hooks,
  LlmFailure as LlmFailureSchema,
  Model,
  ModelError,
  RequestErrorAction,
  RequestHeader as RequestHeaderSchema,
  ScriptedModel,
  SessionId,
  SessionLog,
  SessionStore,
  StreamChunk as StreamChunkSchema,
  Tool,
  Tools,
  ToolSchema as ToolSchemaSchema
} from "../../src/index.js"
import type { ModelRequest, SessionEvent, StreamChunk } from "../../src/index.js"
import {
  agentOver,
  agentTest,
  closeOut,
  dataOfType,
  events,
  gate,
  open,
  reasons,
  requests,
  scenario,
  settle,
  shape,
  until,
  untilEvent,
  user
} from "./harness.js"
import { resumeAfterRun } from "./resumeAfterRun.js"
import { calls, empty, okTool, zetaTool } from "./toolFixtures.js"

type Loose = { readonly [k: string]: any }

/** A model whose n-th request gets the n-th stream; requests are recorded. */
const streamsModel = (streams: ReadonlyArray<(r: ModelRequest) => Stream.Stream<StreamChunk, any>>) => {
  const seen: Array<ModelRequest> = []
  const layer = Layer.succeed(Model, {
    stream: (r: ModelRequest) => {
      const i = seen.length
      seen.push(r)
      const make = streams[i]
      return (make === undefined ? Stream.dieMessage("no stream") : make(r)) as Stream.Stream<StreamChunk, any>
    }
  })
  return { seen, layer }
}

const customAgent = (modelLayer: Layer.Layer<Model>, tools: ReadonlyArray<any> = []) =>
  Agent.layer({ sessionId: SessionId.make("s"), model: { provider: "p", model: "m" }, invariants: "check" }).pipe(
    Layer.provideMerge(Layer.mergeAll(SessionStore.layerMemory, Tools.layer({ tools }), modelLayer))
  )

const textChunks: ReadonlyArray<StreamChunk> = [
  { type: "block-start", index: 0, block: "text" },
  { type: "text-delta", index: 0, text: "hi" },
  { type: "block-end", index: 0 }
]
const stop: StreamChunk = { type: "finish", finish: { kind: "stop" } }

const chunkData = Effect.map(dataOfType("assistant/chunk"), (ds) => ds.map((d) => d.chunk as Loose))

// `during` runs inside the model stream; it reads the number of chunks logged so far through a
// reference filled by the test before the request.
const seenAtDuring = Ref.unsafeMake(-1)
const logRef = Ref.unsafeMake<Effect.Effect<ReadonlyArray<SessionEvent>> | undefined>(undefined)
const SessionLogLater = {
  get: Effect.flatMap(Ref.get(logRef), (read) =>
    read === undefined
      ? Effect.succeed(-2)
      : Effect.map(read, (es) => es.filter((e) => e.type === "assistant/chunk").length))
}

const gateBroke = new Error("gate broke")
const installLogReader = Effect.flatMap(SessionLog, (log) => Ref.set(logRef, log.events))

describe("4.5 assembler edge cases", () => {
  agentTest(
    "4.5 assembler: on max-tokens tool calls and replayState are dropped; usage is the last usage chunk",
    scenario([ScriptedModel.chunks([
      { type: "block-start", index: 0, block: "text" },
      { type: "text-delta", index: 0, text: "cut" },
      { type: "block-end", index: 0 },
      { type: "block-start", index: 1, block: "tool-call", id: "c1", name: "t" },
      { type: "tool-call-delta", index: 1, arguments: "{}" },
      { type: "block-end", index: 1 },
      { type: "usage", usage: { inputTokens: 1, outputTokens: 2 } },
      { type: "replay-state", state: { r: 1 } },
      { type: "usage", usage: { inputTokens: 5, outputTokens: 6 } },
      { type: "finish", finish: { kind: "max-tokens" } }
    ])]),
    function*({ driver }) {
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      const am = (yield* dataOfType("assistant/message"))[0]!
      expect(am.message.content).toEqual([{ type: "text", text: "cut" }])
      expect(am.message.source).toEqual({ kind: "model", provider: "p", model: "m" })
      expect(am.usage).toEqual({ inputTokens: 5, outputTokens: 6 })
      expect((yield* dataOfType("turn/end"))[0]!.reason).toEqual({ kind: "max-tokens" })
      expect(yield* dataOfType("tool/call")).toEqual([])
      expect(yield* closeOut).toEqual([])
    }
  )

  agentTest(
    "4.5 assembler: the last replay-state wins, also when it is null; blocks keep block-start order with interleaved deltas",
    scenario([ScriptedModel.chunks([
      { type: "block-start", index: 0, block: "reasoning" },
      { type: "block-start", index: 1, block: "text" },
      { type: "text-delta", index: 1, text: "t1" },
      { type: "reasoning-delta", index: 0, text: "r1" },
      { type: "replay-state", state: { r: 1 } },
      { type: "text-delta", index: 1, text: "t2" },
      { type: "reasoning-delta", index: 0, text: "r2" },
      { type: "block-end", index: 0 },
      { type: "block-end", index: 1 },
      { type: "replay-state", state: null },
      { type: "finish", finish: { kind: "stop" } }
    ])]),
    function*({ driver }) {
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      const am = (yield* dataOfType("assistant/message"))[0]!
      expect(am.message.content).toEqual([{ type: "reasoning", text: "r1r2" }, { type: "text", text: "t1t2" }])
      expect(am.message.source).toEqual({ kind: "model", provider: "p", model: "m", replayState: null })
      expect(yield* closeOut).toEqual([])
    }
  )

  agentTest(
    "2.8/4.5 Q6: a stop with no content still records an AM citing its chunks; derived history omits it",
    scenario([ScriptedModel.chunks([
      { type: "block-start", index: 0, block: "text" },
      { type: "block-end", index: 0 },
      { type: "finish", finish: { kind: "stop" } }
    ])]),
    function*({ driver, log }) {
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      const es = yield* events
      const am = es.find((e) => e.type === "assistant/message")!
      expect((am.data as any).message.content).toEqual([])
      const chunkSeqs = es.filter((e) => e.type === "assistant/chunk").map((e) => e.seq)
      expect((am as { readonly sourceEventSeqs?: ReadonlyArray<number> }).sourceEventSeqs).toEqual(chunkSeqs)
      expect((yield* log.messages).map((m) => m.role)).toEqual(["user"])
      expect(yield* closeOut).toEqual([])
    }
  )
})

describe("4.5 stream order and tools order", () => {
  agentTest(
    "4.5 Q5: a block-start may reuse a closed index (a new block); reusing an open index is MALFORMED_STREAM",
    scenario([
      ScriptedModel.chunks([
        { type: "block-start", index: 0, block: "text" },
        { type: "text-delta", index: 0, text: "a" },
        { type: "block-end", index: 0 },
        { type: "block-start", index: 0, block: "text" },
        { type: "text-delta", index: 0, text: "b" },
        { type: "block-end", index: 0 },
        { type: "finish", finish: { kind: "stop" } }
      ]),
      ScriptedModel.chunks([
        { type: "block-start", index: 0, block: "text" },
        { type: "block-start", index: 0, block: "text" },
        { type: "finish", finish: { kind: "stop" } }
      ])
    ]),
    function*({ driver }) {
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect((yield* dataOfType("assistant/message"))[0]!.message.content).toEqual([{ type: "text", text: "a" }, {
        type: "text",
        text: "b"
      }])
      yield* driver.followup(user("B"))
      yield* driver.whenIdle
      expect((yield* dataOfType("turn/end"))[1]!.reason).toMatchObject({
        kind: "error",
        error: { code: "MALFORMED_STREAM" }
      })
      expect(yield* closeOut).toEqual([])
    }
  )

  const mk = (name: string) =>
    Tool.make(name, { description: name, parameters: empty, execute: () => Effect.succeed(name) })
  agentTest(
    "4.5 Q2: the header's tools are sorted by name in code-unit order",
    scenario([ScriptedModel.text("ok")], { tools: [mk("b"), mk("a"), mk("_x"), mk("B")] }),
    function*({ driver }) {
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect((yield* requests)[0]!.tools.map((t) => t.name)).toEqual(["B", "_x", "a", "b"])
      expect((yield* dataOfType("request/header"))[0]!.header.tools.map((t: any) => t.name)).toEqual([
        "B",
        "_x",
        "a",
        "b"
      ])
    }
  )
})

// ---------------------------------------------------------------------------------------------------
describe("4.5: steps", () => {
  agentTest(
    "4.5 Q1: a later request's seed is the config of the last logged header (a hook's change carries over, no RH(change))",
    scenario([calls(["c1", "t"]), ScriptedModel.text("done")], { tools: [okTool("t")] }),
    function*({ driver, hooks }) {
      const seeds: Array<Loose> = []
      yield* hooks.onRequest((input, next) =>
        Effect.gen(function*() {
          seeds.push({ step: input.step, config: input.config, frozen: Object.isFrozen(input.config) })
          const config = yield* next()
          return input.step === 1 ? { ...config, model: "m2", temperature: 0.5 } : config
        })
      )
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect(seeds).toEqual([
        { step: 1, config: { provider: "p", model: "m" }, frozen: true },
        { step: 2, config: { provider: "p", model: "m2", temperature: 0.5 }, frozen: true }
      ])
      expect((yield* shape).filter((x) => x.startsWith("RH"))).toEqual(["RH(initial)"])
      expect((yield* requests).map((r) => [r.model, r.temperature])).toEqual([["m2", 0.5], ["m2", 0.5]])
    }
  )

  agentTest(
    "4.5 Q1: provider or model missing after onRequest → error(NO_ROUTE), no request/header, no dispatch",
    scenario([ScriptedModel.text("never")]),
    function*({ driver, hooks }) {
      let offered = 0
      yield* hooks.onRequest(() => Effect.succeed({ provider: "p" }))
      yield* hooks.onRequestError((_, next) => Effect.zipRight(Effect.sync(() => offered++), next()))
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect((yield* reasons).map((r) => r.kind === "error" ? r.error.code : r.kind)).toEqual(["NO_ROUTE"])
      expect((yield* shape).slice(-3)).toEqual(["UM(A)", "SE(1,1)", "TE(1,error(NO_ROUTE))"])
      expect(yield* requests).toHaveLength(0)
      expect(offered).toBe(0)
    }
  )

  agentTest(
    "4.5: an onRequest failure is a turn failure not offered to request-error recovery",
    scenario([ScriptedModel.text("never")]),
    function*({ driver, hooks }) {
      let offered = 0
      yield* hooks.onRequest(() => Effect.fail({ message: "cfg", code: "CFG" }))
      yield* hooks.onRequestError((_, next) => Effect.zipRight(Effect.sync(() => offered++), next()))
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect(yield* reasons).toEqual([{ kind: "error", error: { message: "cfg", code: "CFG" } }])
      expect(offered).toBe(0)
    }
  )

  agentTest(
    "4.5 Q2/Q6: a retry whose onRequest changes the config logs RH(change); attempt 2 chunks/AM carry attempt 2 and AM cites only them",
    scenario([ScriptedModel.fail({ message: "busy", code: "OVERLOADED" }), ScriptedModel.text("ok")]),
    function*({ driver, hooks }) {
      yield* hooks.onRequest((input, next) =>
        Effect.map(next(), (c) => input.attempt === 2 ? { ...c, temperature: 0.7 } : c)
      )
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
        "CH(finish error)",
        "RT(1)",
        "RH(change)",
        "CH(block-start)",
        "CH(text-delta)",
        "CH(block-end)",
        "CH(finish stop)",
        "AM",
        "SE(1,1)",
        "TE(1,completed)"
      ])
      const es = yield* events
      const a2 = es.filter((e) => e.type === "assistant/chunk" && (e.data as Loose).attempt === 2).map((e) => e.seq)
      expect(a2).toHaveLength(4)
      const am = es.find((e) => e.type === "assistant/message")!
      expect((am.data as Loose).attempt).toBe(2)
      expect((am as Loose).sourceEventSeqs).toEqual(a2)
      expect((yield* requests).map((r) => [r.attempt, r.temperature])).toEqual([[1, undefined], [2, 0.7]])
      const retry = (yield* dataOfType("llm/retry"))[0]!
      expect(retry).toMatchObject({ turn: 1, step: 1, attempt: 1, failure: { message: "busy", code: "OVERLOADED" } })
      expect(retry.delayMs).toBeGreaterThanOrEqual(800)
      expect(retry.delayMs).toBeLessThanOrEqual(1200)
      expect(Number.isInteger(retry.delayMs)).toBe(true)
    }
  )

  agentTest(
    "4.5 D10: retryAfterMs floors the delay; the retry sleeps exactly delayMs on the Clock",
    scenario([
      ScriptedModel.fail({ message: "slow", code: "X", status: 429, retryAfterMs: 5000 }),
      ScriptedModel.text("ok")
    ]),
    function*({ driver }) {
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "llm/retry")
      expect((yield* dataOfType("llm/retry"))[0]!.delayMs).toBe(5000)
      yield* TestClock.adjust(4999)
      yield* settle
      expect(yield* requests).toHaveLength(1)
      yield* TestClock.adjust(1)
      expect(yield* closeOut).toEqual([])
      expect(yield* requests).toHaveLength(2)
    }
  )

  agentTest(
    "4.5 D10: at most 3 attempts; the third failure fails the turn with that LlmFailure verbatim",
    scenario([
      ScriptedModel.fail({ message: "down", code: "X", status: 503, requestId: "req-1" }),
      ScriptedModel.fail({ message: "down", code: "X", status: 503, requestId: "req-1" }),
      ScriptedModel.fail({ message: "down", code: "X", status: 503, requestId: "req-1" })
    ]),
    function*({ driver }) {
      const f = { message: "down", code: "X", status: 503, requestId: "req-1" }
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "llm/retry")
      yield* TestClock.adjust("2 seconds")
      yield* untilEvent((e) => e.type === "llm/retry" && (e.data as Loose).attempt === 2)
      const rt2 = (yield* dataOfType("llm/retry"))[1]!
      expect(rt2.delayMs).toBeGreaterThanOrEqual(1600)
      expect(rt2.delayMs).toBeLessThanOrEqual(2400)
      yield* TestClock.adjust("3 seconds")
      expect(yield* closeOut).toEqual([])
      expect(yield* reasons).toEqual([{ kind: "error", error: f }])
      expect((yield* shape).filter((x) => x.startsWith("RT") || x.startsWith("RH"))).toEqual([
        "RH(initial)",
        "RT(1)",
        "RT(2)"
      ])
      expect((yield* requests).map((r) => r.attempt)).toEqual([1, 2, 3])
    }
  )

  agentTest(
    "4.5 D10: retryable:false wins over status 429 → no retry",
    scenario([ScriptedModel.fail({ message: "no", code: "RATE_LIMIT", status: 429, retryable: false })]),
    function*({ driver }) {
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect((yield* shape).filter((x) => x.startsWith("RT"))).toEqual([])
      expect((yield* reasons)[0]).toEqual({
        kind: "error",
        error: { message: "no", code: "RATE_LIMIT", status: 429, retryable: false }
      })
    }
  )

  agentTest(
    "4.5: a listener's Retry is logged with the delay rounded to whole ms, and slept exactly",
    scenario([ScriptedModel.fail({ message: "x", code: "NOT_RETRYABLE" }), ScriptedModel.text("ok")]),
    function*({ driver, hooks }) {
      yield* hooks.onRequestError((input) =>
        Effect.succeed(
          input.attempt === 1 ? RequestErrorAction.retry(Duration.micros(1_234_600n)) : RequestErrorAction.fail
        )
      )
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "llm/retry")
      expect((yield* dataOfType("llm/retry"))[0]!.delayMs).toBe(1235)
      yield* TestClock.adjust(1234)
      yield* settle
      expect(yield* requests).toHaveLength(1)
      yield* TestClock.adjust(1)
      expect(yield* closeOut).toEqual([])
      expect(yield* requests).toHaveLength(2)
      expect((yield* reasons).map((r) => r.kind)).toEqual(["completed"])
    }
  )

  agentTest(
    "4.5: a cancel during the backoff sleep aborts the turn (no further attempt)",
    scenario([ScriptedModel.fail({ message: "busy", code: "OVERLOADED" }), ScriptedModel.text("ok")]),
    function*({ driver }) {
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "llm/retry")
      yield* driver.cancel(CancelCause.user)
      expect(yield* closeOut).toEqual([])
      expect((yield* shape).slice(-3)).toEqual(["RT(1)", "SE(1,1)", "TE(1,aborted(user))"])
      expect(yield* requests).toHaveLength(1)
    }
  )

  agentTest(
    "4.5: a provider-side aborted finish is a failure, never a cancellation",
    scenario([ScriptedModel.fail({ message: "provider stopped", code: "ABORTED" }, { finish: "aborted" })]),
    function*({ driver }) {
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect(yield* reasons).toEqual([{ kind: "error", error: { message: "provider stopped", code: "ABORTED" } }])
      const finish = (yield* chunkData).at(-1)!
      expect(finish).toEqual({
        type: "finish",
        finish: { kind: "aborted", failure: { message: "provider stopped", code: "ABORTED" } }
      })
    }
  )

  agentTest(
    "4.5 Q3: the request is frozen, its messages frozen and equal to the derived history",
    scenario([ScriptedModel.text("ok")]),
    function*({ driver, log }) {
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      const [r] = yield* requests
      expect(Object.isFrozen(r)).toBe(true)
      expect(Object.isFrozen(r!.messages)).toBe(true)
      expect(r!.messages).toEqual((yield* log.messages).slice(0, 1))
      expect(r).toMatchObject({ sessionId: "s", turn: 1, step: 1, attempt: 1, provider: "p", model: "m", tools: [] })
    }
  )
})

describe("4.5 Q5/Q6: streams", () => {
  it.scoped("4.5 Q5: a stream defect that is not a ModelError → synthetic finish error {message, code: UNKNOWN}", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      const cs = yield* chunkData
      expect(cs).toEqual([...textChunks.slice(0, 2), {
        type: "finish",
        finish: { kind: "error", failure: { message: "kaput", code: "UNKNOWN" } }
      }])
      expect(yield* reasons).toEqual([{ kind: "error", error: { message: "kaput", code: "UNKNOWN" } }])
    }).pipe(Effect.provide(customAgent(
      streamsModel([
        () => Stream.concat(Stream.fromIterable(textChunks.slice(0, 2)), Stream.die(new Error("kaput")))
      ]).layer
    ))))

  it.scoped("4.5 Q5: a plain-object stream failure gives message \"[object Object]\"", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect(yield* reasons).toEqual([{ kind: "error", error: { message: "[object Object]", code: "UNKNOWN" } }])
    }).pipe(Effect.provide(customAgent(streamsModel([() => Stream.fail({ what: 1 })]).layer))))

  it.scoped("4.5 Q5: chunks after the finish are not logged, and a later stream failure is ignored", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect(yield* chunkData).toEqual([...textChunks, stop])
      expect((yield* reasons).map((r) => r.kind)).toEqual(["completed"])
    }).pipe(Effect.provide(customAgent(
      streamsModel([
        () =>
          Stream.concat(
            Stream.fromIterable([...textChunks, stop, { type: "text-delta", index: 0, text: "late" } as StreamChunk]),
            Stream.fail({ message: "late", code: "LATE" })
          )
      ]).layer
    ))))

  it.scoped("4.5 Q5: after a stop finish the loop keeps pulling until the stream ends (the turn waits for it)", () => {
    const g = gate()
    const ended = gate()
    const tail = Effect.zipRight(
      Deferred.await(g),
      Effect.as(open(ended), { type: "usage", usage: { inputTokens: 1, outputTokens: 1 } } as StreamChunk)
    )
    return Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "assistant/message")
      yield* settle
      expect((yield* shape).some((x) => x.startsWith("TE"))).toBe(false)
      yield* open(g)
      expect(yield* closeOut).toEqual([])
      expect(yield* Deferred.isDone(ended)).toBe(true)
      expect((yield* reasons).map((r) => r.kind)).toEqual(["completed"])
      expect(yield* chunkData).toEqual([...textChunks, stop])
    }).pipe(
      Effect.provide(customAgent(
        streamsModel([() => Stream.concat(Stream.fromIterable([...textChunks, stop]), Stream.fromEffect(tail))]).layer
      ))
    )
  })

  for (
    const [label, bad] of [
      ["a delta for an unopened index", { type: "text-delta", index: 5, text: "x" }],
      ["a block-end for an unopened index", { type: "block-end", index: 5 }],
      ["a block-start reusing an open index", { type: "block-start", index: 0, block: "reasoning" }]
    ] as const
  ) {
    agentTest(
      `4.5 Q5: malformed order (${label}) → synthetic MALFORMED_STREAM finish in its place; reading stops`,
      scenario([
        ScriptedModel.chunks([...textChunks.slice(0, 2), bad, ...textChunks.slice(2), stop], { then: "hang" })
      ]),
      function*({ driver }) {
        yield* driver.followup(user("A"))
        expect(yield* closeOut).toEqual([])
        const cs = yield* chunkData
        expect(cs.slice(0, 2)).toEqual(textChunks.slice(0, 2))
        expect(cs).toHaveLength(3)
        expect(cs[2]).toMatchObject({
          type: "finish",
          finish: { kind: "error", failure: { code: "MALFORMED_STREAM" } }
        })
        expect((yield* reasons).map((r) => r.kind === "error" ? r.error.code : r.kind)).toEqual(["MALFORMED_STREAM"])
        expect((yield* shape).filter((x) => x === "AM")).toEqual([])
      }
    )
  }

  agentTest(
    "4.5 Q5: a stream that ends without a finish → synthetic finish error NO_FINISH after the logged chunks",
    scenario([ScriptedModel.chunks(textChunks)]),
    function*({ driver }) {
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      const cs = yield* chunkData
      expect(cs.slice(0, 3)).toEqual(textChunks)
      expect(cs[3]).toMatchObject({ type: "finish", finish: { kind: "error", failure: { code: "NO_FINISH" } } })
      expect((yield* reasons).map((r) => r.kind === "error" ? r.error.code : r.kind)).toEqual(["NO_FINISH"])
    }
  )

  agentTest(
    "4.5 Q6: a lone stop finish gives an AM with empty content citing the finish chunk",
    scenario([ScriptedModel.chunks([stop])]),
    function*({ driver }) {
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      const es = yield* events
      const ch = es.find((e) => e.type === "assistant/chunk")!
      const am = es.find((e) => e.type === "assistant/message")!
      expect((am.data as Loose).message.content).toEqual([])
      expect((am as Loose).sourceEventSeqs).toEqual([ch.seq])
      expect(am.seq).toBe(ch.seq + 1)
    }
  )

  agentTest(
    "4.5 assembler: max-tokens drops tool-call blocks and replayState; the turn ends max-tokens without tools",
    scenario([
      ScriptedModel.response({
        text: "t",
        toolCalls: [{ id: "c1", name: "t", arguments: {} }],
        replayState: { r: 1 },
        finish: "max-tokens"
      })
    ], { tools: [okTool("t")] }),
    function*({ driver }) {
      const ran = 0
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      const am = (yield* dataOfType("assistant/message"))[0]!
      expect(am.message.content).toEqual([{ type: "text", text: "t" }])
      expect(am.message.source).toEqual({ kind: "model", provider: "p", model: "m" })
      expect((yield* shape).filter((x) => x.startsWith("TC"))).toEqual([])
      expect(yield* reasons).toEqual([{ kind: "max-tokens" }])
      expect(ran).toBe(0)
    }
  )
})

describe("4.5: append failures", () => {
  agentTest(
    "4.5: a chunk that is not lossless JSON → error(INVALID_EVENT), not offered to onRequestError",
    scenario([
      ScriptedModel.chunks([
        ...textChunks,
        { type: "usage", usage: { inputTokens: Number.NaN, outputTokens: 1 } },
        stop
      ])
    ]),
    function*({ driver, hooks }) {
      let offered = 0
      yield* hooks.onRequestError((_, next) => Effect.zipRight(Effect.sync(() => offered++), next()))
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect((yield* reasons).map((r) => r.kind === "error" ? r.error.code : r.kind)).toEqual(["INVALID_EVENT"])
      expect(offered).toBe(0)
      expect((yield* shape).slice(-2)).toEqual(["SE(1,1)", "TE(1,error(INVALID_EVENT))"])
    }
  )
})

describe("4.5 Q8: a cause recorded after the finish transaction", () => {
  const toolCallChunks: ReadonlyArray<StreamChunk> = [
    { type: "block-start", index: 0, block: "tool-call", id: "c1", name: "t" },
    { type: "tool-call-delta", index: 0, arguments: "{}" },
    { type: "block-end", index: 0 },
    { type: "block-start", index: 1, block: "tool-call", id: "c2", name: "t" },
    { type: "tool-call-delta", index: 1, arguments: "{}" },
    { type: "block-end", index: 1 },
    stop
  ]

  agentTest(
    "4.5 Q8/K7: the AM stands while the stream is still pulled; a cancel then gives ⟨TC TR⊘⟩ per call in model order",
    scenario([ScriptedModel.chunks(toolCallChunks, { then: "hang" })], { tools: [okTool("t")] }),
    function*({ driver }) {
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "assistant/message")
      yield* settle
      expect((yield* shape).some((x) => x.startsWith("TC"))).toBe(false)
      yield* driver.cancel(CancelCause.user)
      expect(yield* closeOut).toEqual([])
      expect((yield* shape).slice(-8)).toEqual([
        "CH(finish stop)",
        "AM",
        "TC(c1)",
        "TR⊘(c1)",
        "TC(c2)",
        "TR⊘(c2)",
        "SE(1,1)",
        "TE(1,aborted(user))"
      ])
    }
  )

  agentTest(
    "4.5 Q8/K9a: without tool calls the AM stands and the turn ends aborted",
    scenario([ScriptedModel.chunks([...textChunks, stop], { then: "hang" })]),
    function*({ driver }) {
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "assistant/message")
      yield* settle
      yield* driver.cancel(CancelCause.user)
      expect(yield* closeOut).toEqual([])
      expect((yield* shape).slice(-4)).toEqual(["CH(finish stop)", "AM", "SE(1,1)", "TE(1,aborted(user))"])
    }
  )
})

describe("4.5 / 5.1 D6: chunks that are JSON but not StreamChunks", () => {
  const schemaBad: ReadonlyArray<readonly [string, ReadonlyArray<unknown>]> = [
    ["a usage with a negative count", [
      ...textChunks,
      { type: "usage", usage: { inputTokens: -1, outputTokens: 1 } },
      stop
    ]],
    ["a text-delta whose text is a number", [
      textChunks[0],
      { type: "text-delta", index: 0, text: 5 },
      textChunks[2],
      stop
    ]],
    ["a finish chunk with an extra key", [{ type: "finish", finish: { kind: "stop" }, extra: 1 }]]
  ]
  for (const [label, chunks] of schemaBad) {
    // Regression test (fixed; the text says what tiller did before): SPEC 5.1 "Every append (loop, …) … is checked with the same Schemas and the same rules. A live
    // violation fails the append with InvalidEvent"; 4.5 "failures … of appends (… InvalidEvent → code
    // INVALID_EVENT) are turn failures". tiller checks chunks only for lossless JSON: the chunk is logged, the
    // turn completes, and the stored log no longer loads (MalformedLog on resume).
    agentTest(
      `4.5/5.1: ${label} is refused: the turn ends error(INVALID_EVENT)`,
      scenario([ScriptedModel.chunks(chunks)]),
      function*({ driver }) {
        yield* driver.followup(user("A"))
        yield* driver.whenIdle
        expect((yield* reasons).map((r) => r.kind === "error" ? r.error.code : r.kind)).toEqual(["INVALID_EVENT"])
      }
    )
  }

  // Regression test (fixed; the text says what tiller did before): SPEC 5.1 "Hence a log accepted live can always be loaded by an agent with the same … options (D6)".
  it.scoped("5.1 D6: after a model sent a schema-invalid chunk the session can still be resumed", () =>
    Effect.gen(function*() {
      expect(yield* resumeAfterRun([ScriptedModel.chunks(schemaBad[0]![1])])).toBe("Right")
    }))
})

describe("4.5 / 4.3: an error finish whose failure is not an LlmFailure", () => {
  // Regression test (fixed; the text says what tiller did before): SPEC 4.5 "failures … of appends (… InvalidEvent → code INVALID_EVENT) are turn failures"; 4.3
  // "Failure inside the turn: close the open step …, then CLOSE(error(failure))". With a finish chunk
  // {kind:"error", failure:{message:"m"}} (no `code`) tiller logs the chunk, then never writes SE/TE: the
  // driver stays `running` forever (and disposing its scope hangs).
  it.effect("4.5/4.3: a finish error without a code still closes the step and the turn; the driver goes idle", () =>
    Effect.gen(function*() {
      const storeCtx = yield* Effect.scoped(Layer.build(SessionStore.layerMemory))
      const scope = yield* Scope.make()
      const ctx = yield* Layer.buildWithScope(
        agentOver([ScriptedModel.chunks([{ type: "finish", finish: { kind: "error", failure: { message: "m" } } }])])
          .pipe(Layer.provide(Layer.succeedContext(storeCtx))),
        scope
      )
      const driver = Context.get(ctx, Driver)
      const log = Context.get(ctx, SessionLog)
      yield* driver.followup(user("A"))
      const idle = yield* Effect.exit(until(Effect.map(driver.status, (s) => s === "idle")))
      const es = yield* log.events
      // The scope is closed in the background: with the deviation, disposal never completes.
      yield* Effect.forkDaemon(Scope.close(scope, Exit.void))
      expect(idle._tag).toBe("Success")
      expect(es.map((e) => e.type).slice(-2)).toEqual(["step/end", "turn/end"])
    }))
})

describe("4.5 Q5 / 4.6: more", () => {
  it.scoped("4.5 Q5: a ModelError stream failure carries its failure verbatim (status 503 → default retry)", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "llm/retry")
      yield* TestClock.adjust("2 seconds")
      expect(yield* closeOut).toEqual([])
      const f = { message: "unavailable", code: "X", status: 503, requestId: "r1" }
      expect((yield* chunkData)[2]).toEqual({ type: "finish", finish: { kind: "error", failure: f } })
      expect((yield* dataOfType("llm/retry"))[0]!.failure).toEqual(f)
      expect((yield* reasons).map((r) => r.kind)).toEqual(["completed"])
    }).pipe(Effect.provide(customAgent(
      streamsModel([
        () =>
          Stream.concat(
            Stream.fromIterable(textChunks.slice(0, 2)),
            Stream.fail(
              new ModelError({ failure: { message: "unavailable", code: "X", status: 503, requestId: "r1" } })
            )
          ),
        () => Stream.fromIterable([...textChunks, stop])
      ]).layer
    ))))

  it.scoped("4.5 Q5: a stream defect after the finish chunk is ignored", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect((yield* reasons).map((r) => r.kind)).toEqual(["completed"])
      expect(yield* chunkData).toEqual([...textChunks, stop])
    }).pipe(Effect.provide(customAgent(
      streamsModel([
        () => Stream.concat(Stream.fromIterable([...textChunks, stop]), Stream.die(new Error("late defect")))
      ]).layer
    ))))

  agentTest(
    "4.6: a concluding result with a context still takes another step (next-step non-empty afterwards)",
    scenario([calls(["c1", "fin"], ["c2", "ctx"]), ScriptedModel.text("done")], {
      tools: [
        okTool("fin", "exclusive", Effect.succeed({ content: "done", concludesTurn: true })),
        Tool.make("ctx", {
          description: "c",
          parameters: empty,
          execute: () => Effect.succeed({ content: "ok", additionalContexts: [user("X")] })
        })
      ]
    }),
    function*({ driver }) {
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      const s = yield* shape
      expect(s.slice(s.indexOf("SE(1,1)"), s.indexOf("SE(1,1)") + 4)).toEqual([
        "SE(1,1)",
        "CLM(ns,0,1)",
        "SS(1,2)",
        "UM(X)"
      ])
      expect(yield* requests).toHaveLength(2)
      expect((yield* reasons).map((r) => r.kind)).toEqual(["completed"])
    }
  )

  agentTest(
    "4.6: a concluding result without contexts ends the turn after the batch (both calls commit)",
    scenario([calls(["c1", "fin"], ["c2", "t"])], {
      tools: [okTool("fin", "exclusive", Effect.succeed({ content: "done", concludesTurn: true })), okTool("t")]
    }),
    function*({ driver }) {
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect((yield* shape).filter((x) => /^(TC|TR|SE|TE)/.test(x))).toEqual([
        "TC(c1)",
        "TR(c1)",
        "TC(c2)",
        "TR(c2)",
        "SE(1,1)",
        "TE(1,completed)"
      ])
      expect(yield* requests).toHaveLength(1)
    }
  )
})

describe("4.5 stream failures", () => {
  agentTest(
    "8.8/4.5: a failing awaitBefore fails the stream, normalised to an UNKNOWN error finish",
    scenario([ScriptedModel.text("x", { awaitBefore: Effect.fail(gateBroke) })]),
    function*({ driver }) {
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect((yield* shape).slice(-3)).toEqual(["CH(finish error)", "SE(1,1)", "TE(1,error(UNKNOWN))"])
      expect((yield* dataOfType("turn/end"))[0]!.reason.error).toEqual({ message: "gate broke", code: "UNKNOWN" })
    }
  )

  agentTest(
    "8.8/4.5: ScriptedModel.die ends the turn error with the ModelError's failure",
    scenario([ScriptedModel.die("model died")]),
    function*({ driver }) {
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect((yield* dataOfType("turn/end"))[0]!.reason).toEqual({
        kind: "error",
        error: { message: "model died", code: "UNKNOWN" }
      })
      const finish = (yield* dataOfType("assistant/chunk")).at(-1)!
      expect(finish.chunk).toEqual({
        type: "finish",
        finish: { kind: "error", failure: { message: "model died", code: "UNKNOWN" } }
      })
    }
  )

  agentTest(
    "4.5: a chunk that is not a valid StreamChunk is a turn failure INVALID_EVENT, not offered to retry",
    scenario([
      ScriptedModel.chunks([{ type: "usage", usage: { inputTokens: Number.NaN, outputTokens: 1 } }, {
        type: "finish",
        finish: { kind: "stop" }
      }])
    ]),
    function*({ driver }) {
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      const s = yield* shape
      expect(s[s.length - 1]).toBe("TE(1,error(INVALID_EVENT))")
      expect(s.filter((x) => x.startsWith("RT"))).toEqual([])
      expect(checkLog(yield* events, { closed: true })).toEqual([])
    }
  )

  agentTest(
    "4.5 Q5: chunks after the finish chunk are not logged; a failing afterFinish is ignored",
    scenario([
      ScriptedModel.chunks([
        { type: "block-start", index: 0, block: "text" },
        { type: "text-delta", index: 0, text: "x" },
        { type: "block-end", index: 0 },
        { type: "finish", finish: { kind: "stop" } },
        { type: "block-start", index: 1, block: "text" }
      ], { afterFinish: Effect.fail("late") })
    ]),
    function*({ driver }) {
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect((yield* shape).slice(-5)).toEqual(["CH(block-end)", "CH(finish stop)", "AM", "SE(1,1)", "TE(1,completed)"])
    }
  )

  agentTest(
    "8.8: during runs after the first chunk has been logged",
    scenario([
      ScriptedModel.text("x", {
        during: Effect.flatMap(SessionLogLater.get, (count) => Ref.set(seenAtDuring, count))
      })
    ]),
    function*({ driver }) {
      yield* installLogReader
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect(yield* Ref.get(seenAtDuring)).toBe(1)
    }
  )
})

describe("7.4 interrupted prefix", () => {
  agentTest(
    "7.4: a prefix of whitespace text writes no AM!; only SE and TE follow",
    scenario([ScriptedModel.hang({ text: "  \n " })]),
    function*({ driver }) {
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "assistant/chunk" && (e.data as any).chunk.type === "text-delta")
      yield* driver.cancel(CancelCause.user)
      yield* driver.whenIdle
      expect((yield* shape).slice(-4)).toEqual(["CH(block-start)", "CH(text-delta)", "SE(1,1)", "TE(1,aborted(user))"])
    }
  )

  agentTest(
    "7.4: tool-call blocks are dropped from the prefix; reasoning is kept; usage is carried",
    scenario([
      ScriptedModel.hang({
        reasoning: "think",
        toolCall: { id: "c1", name: "t", arguments: "{\"a\"" },
        usage: { inputTokens: 4, outputTokens: 2 }
      })
    ]),
    function*({ driver }) {
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "assistant/chunk" && (e.data as any).chunk.type === "usage")
      yield* driver.cancel(CancelCause.user)
      yield* driver.whenIdle
      const am = (yield* dataOfType("assistant/message"))[0]!
      expect(am.interrupted).toBe(true)
      expect(am.message.content).toEqual([{ type: "reasoning", text: "think" }])
      expect(am.usage).toEqual({ inputTokens: 4, outputTokens: 2 })
      expect(checkLog(yield* events, { closed: true })).toEqual([])
    }
  )
})

describe("SPEC 4.5 Q5: a defect of the model stream", () => {
  // 4.5 Q5: "stream failure or defect → append a synthetic finish chunk {kind:"error", failure}
  // (ModelError → its failure; otherwise {message, code:"UNKNOWN"})", and Q7 offers every error
  // finish to the onRequestError waterfall. A Model whose `stream` throws when called is a defect
  // of the model stream: it must be logged as a synthetic error finish and offered to recovery.
  it.scoped("4.5 Q5/Q7: a Model.stream that throws is logged as a synthetic error finish and offered to onRequestError", () =>
    Effect.gen(function*() {
      const hooks = yield* Hooks
      const driver = yield* Driver
      const offered: Array<string> = []
      yield* hooks.onRequestError((input) =>
        Effect.sync(() => {
          offered.push(input.failure.message)
          return RequestErrorAction.fail
        })
      )
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect(yield* reasons).toEqual([{ kind: "error", error: { message: "sync boom", code: "UNKNOWN" } }])
      expect((yield* dataOfType("assistant/chunk")).map((d) => d.chunk)).toEqual([
        { type: "finish", finish: { kind: "error", failure: { message: "sync boom", code: "UNKNOWN" } } }
      ])
      expect(offered).toEqual(["sync boom"])
      expect(yield* shape).toEqual([
        "INS(nt,0,[A])",
        "TS(1)",
        "CLM(nt,0,1)",
        "SS(1,1)",
        "UM(A)",
        "RH(initial)",
        "CH(finish error)",
        "SE(1,1)",
        "TE(1,error(UNKNOWN))"
      ])
    }).pipe(Effect.provide(
      Agent.layer({ sessionId: SessionId.make("s"), model: { provider: "p", model: "m" } }).pipe(
        Layer.provideMerge(Layer.mergeAll(
          SessionStore.layerMemory,
          Layer.succeed(Model, {
            stream: () => {
              throw new Error("sync boom")
            }
          }),
          Tools.layer()
        ))
      )
    )))
})

describe("SPEC 4.5 Q5 / 7.4: a model stream that interrupts itself", () => {
  // 4.5 Q5: a stream that fails or dies, or ends without a finish, gets a synthetic error finish;
  // 7.4 / Q8: the interrupted prefix (`interrupted: true`) is written only when a cancel cause was
  // recorded; 2.6: `completed` means "the last step stopped naturally". With no cancel, a stream
  // that interrupts itself gives no finish at all, so the attempt cannot end the turn completed.
  it.scoped("4.5 Q5/7.4: a stream interrupting itself without a cancel → synthetic error finish, no AM!, turn error (not completed)", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      const messages = yield* dataOfType("assistant/message")
      expect(messages.filter((d) => d.interrupted === true)).toEqual([])
      const chunks = (yield* dataOfType("assistant/chunk")).map((d) => d.chunk)
      expect(chunks.map((c) => c.type === "finish" ? `finish ${c.finish.kind}` : c.type)).toEqual([
        "block-start",
        "text-delta",
        "finish error"
      ])
      const [reason] = yield* reasons
      expect(reason!.kind).toBe("error")
    }).pipe(Effect.provide(
      Agent.layer({ sessionId: SessionId.make("s"), model: { provider: "p", model: "m" } }).pipe(
        Layer.provideMerge(Layer.mergeAll(
          SessionStore.layerMemory,
          Layer.succeed(Model, {
            stream: () =>
              Stream.concat(
                Stream.make(
                  { type: "block-start" as const, index: 0, block: "text" as const },
                  { type: "text-delta" as const, index: 0, text: "hi" }
                ),
                Stream.fromEffect(Effect.interrupt)
              )
          }),
          Tools.layer()
        ))
      )
    )))
})

describe("4.5 assembler and synthetic finishes", () => {
  agentTest(
    "4.5 assembler: blocks keep the order of their block-start whatever the indexes; a closed index may be reused; empty text is dropped",
    scenario([
      ScriptedModel.chunks([
        { type: "block-start", index: 5, block: "text" },
        { type: "block-start", index: 2, block: "reasoning" },
        { type: "reasoning-delta", index: 2, text: "r" },
        { type: "text-delta", index: 5, text: "t1" },
        { type: "block-end", index: 2 },
        { type: "text-delta", index: 5, text: "t2" },
        { type: "block-end", index: 5 },
        { type: "block-start", index: 2, block: "tool-call", id: "c1", name: "zeta" },
        { type: "tool-call-delta", index: 2, arguments: "{" },
        { type: "tool-call-delta", index: 2, arguments: "}" },
        { type: "block-end", index: 2 },
        { type: "block-start", index: 9, block: "text" },
        { type: "block-end", index: 9 },
        { type: "finish", finish: { kind: "stop" } }
      ]),
      ScriptedModel.text("ok")
    ], { tools: [zetaTool] }),
    function*({ driver }) {
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      const am = (yield* dataOfType("assistant/message"))[0]!
      expect(am.message.content).toEqual([
        { type: "text", text: "t1t2" },
        { type: "reasoning", text: "r" },
        { type: "tool-call", id: "c1", name: "zeta", arguments: "{}" }
      ])
      expect((yield* dataOfType("tool/result"))[0]!.message.content[0]).toMatchObject({
        toolCallId: "c1",
        isError: false
      })
      const second = (yield* requests)[1]!
      expect(second.messages[1]!.content).toEqual(am.message.content)
    }
  )

  agentTest(
    "4.5 Q5/Q7: synthetic NO_FINISH and MALFORMED_STREAM finishes are offered to request-error recovery (a listener may retry them)",
    scenario([
      ScriptedModel.chunks([{ type: "block-start", index: 0, block: "text" }]),
      ScriptedModel.chunks([{ type: "text-delta", index: 3, text: "x" }]),
      ScriptedModel.text("ok")
    ]),
    function*({ hooks, driver }) {
      const seen: Array<string> = []
      yield* hooks.onRequestError((input) =>
        Effect.sync(() => {
          seen.push(input.failure.code)
          return RequestErrorAction.retry(Duration.zero)
        })
      )
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect(seen).toEqual(["NO_FINISH", "MALFORMED_STREAM"])
      expect((yield* dataOfType("llm/retry")).map((d) => [d.attempt, d.failure.code])).toEqual([[1, "NO_FINISH"], [
        2,
        "MALFORMED_STREAM"
      ]])
      expect(yield* shape).toEqual([
        "INS(nt,0,[A])",
        "TS(1)",
        "CLM(nt,0,1)",
        "SS(1,1)",
        "UM(A)",
        "RH(initial)",
        "CH(block-start)",
        "CH(finish error)",
        "RT(1)",
        "CH(finish error)",
        "RT(2)",
        "CH(block-start)",
        "CH(text-delta)",
        "CH(block-end)",
        "CH(finish stop)",
        "AM",
        "SE(1,1)",
        "TE(1,completed)"
      ])
      expect((yield* requests).map((r) => r.attempt)).toEqual([1, 2, 3])
    }
  )

  it.scoped("4.5 Q5: a stream failure that is not a ModelError gives code UNKNOWN even when it carries a code and a status; not retried", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect((yield* dataOfType("assistant/chunk")).map((d) => d.chunk)).toEqual([
        { type: "block-start", index: 0, block: "text" },
        { type: "finish", finish: { kind: "error", failure: { message: "limited", code: "UNKNOWN" } } }
      ])
      expect(yield* dataOfType("llm/retry")).toEqual([])
      expect(yield* reasons).toEqual([{ kind: "error", error: { message: "limited", code: "UNKNOWN" } }])
    }).pipe(Effect.provide(
      Agent.layer({ sessionId: SessionId.make("s"), model: { provider: "p", model: "m" } }).pipe(
        Layer.provideMerge(Layer.mergeAll(
          SessionStore.layerMemory,
          Layer.succeed(Model, {
            stream: () =>
              Stream.concat(
                Stream.make({ type: "block-start" as const, index: 0, block: "text" as const }),
                Stream.fail({ message: "limited", code: "RATE_LIMIT", status: 429 } as unknown as ModelError)
              )
          }),
          Tools.layer()
        ))
      )
    )))

  it.effect("8.1/8.2: ModelError is a tagged error carrying its failure; LlmFailure, StreamChunk, ToolSchema and RequestHeader decode their shapes", () =>
    Effect.gen(function*() {
      const failure = {
        message: "m",
        code: "RATE_LIMIT",
        status: 429,
        retryAfterMs: 10,
        requestId: "r",
        retryable: true
      }
      const error = new ModelError({ failure })
      expect(error._tag).toBe("ModelError")
      expect(error.failure).toEqual(failure)
      const exit = yield* Effect.either(Effect.fail(error))
      expect(exit._tag).toBe("Left")
      const decodeFailure = Schema.decodeUnknownEither(LlmFailureSchema)
      expect(decodeFailure(failure)._tag).toBe("Right")
      expect(decodeFailure({ message: "m" })._tag).toBe("Left")
      const decodeChunk = Schema.decodeUnknownEither(StreamChunkSchema)
      const valid = [
        { type: "block-start", index: 0, block: "text" },
        { type: "block-start", index: 1, block: "reasoning" },
        { type: "block-start", index: 2, block: "tool-call", id: "c", name: "n" },
        { type: "text-delta", index: 0, text: "t" },
        { type: "reasoning-delta", index: 1, text: "r" },
        { type: "tool-call-delta", index: 2, arguments: "{}" },
        { type: "block-end", index: 0 },
        {
          type: "usage",
          usage: {
            inputTokens: 1,
            outputTokens: 2,
            totalTokens: 3,
            reasoningTokens: 0,
            cacheReadTokens: 0,
            cacheWriteTokens: 0
          }
        },
        { type: "replay-state", state: { a: [1, null, "x"] } },
        { type: "finish", finish: { kind: "stop" } },
        { type: "finish", finish: { kind: "max-tokens" } },
        { type: "finish", finish: { kind: "error", failure } },
        { type: "finish", finish: { kind: "aborted", failure: { message: "a", code: "ABORTED" } } }
      ]
      expect(valid.map((c) => decodeChunk(c)._tag)).toEqual(valid.map(() => "Right"))
      const invalid = [
        { type: "block-start", index: 2, block: "tool-call" },
        { type: "finish", finish: { kind: "error" } },
        { type: "usage", usage: { inputTokens: 1 } },
        { type: "text-delta", index: 0 },
        { type: "nope" }
      ]
      expect(invalid.map((c) => decodeChunk(c)._tag)).toEqual(invalid.map(() => "Left"))
      expect(
        Schema.decodeUnknownEither(ToolSchemaSchema)({ name: "t", description: "d", parameters: { type: "object" } })
          ._tag
      ).toBe("Right")
      expect(Schema.decodeUnknownEither(RequestHeaderSchema)({ provider: "p", model: "m", tools: [] })._tag).toBe(
        "Right"
      )
      expect(Schema.decodeUnknownEither(RequestHeaderSchema)({ provider: "p", tools: [] })._tag).toBe("Left")
    }))
})
