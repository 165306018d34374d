/**
 * Acceptance audit of the model seam: SPEC 8.8 (ModelRequest, StreamChunk, ModelError, the
 * `@effect/ai` adapter), 4.5 (how each step's request is built, how chunks and failures are
 * logged, request hooks and retries) and 8.9 (tools as the model sees them), through the package
 * root only.
 */
import * as AiError from "@effect/ai/AiError"
import * as LanguageModel from "@effect/ai/LanguageModel"
import type * as Response from "@effect/ai/Response"
import * as AiTool from "@effect/ai/Tool"
import { describe, expect, it } from "@effect/vitest"
import { Duration, Effect, JSONSchema, Layer, Option, Ref, Schema, Stream, TestClock } from "effect"
import type { LlmFailure, Message, RequestConfig } from "../../src/index.js"
import {
  Agent,
  CancelCause,
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
  ToolSchema as ToolSchemaSchema,
  Tools
} from "../../src/index.js"
import { closeOut, dataOfType, events, plugin, reasons, requests, scenario, settle, shape, untilEvent, user } from "./AuditHarness.js"

type Loose = { readonly [k: string]: any }

const ReadParams = Schema.Struct({ path: Schema.String })
const readTool = Tool.make("read", {
  description: "Reads a file",
  parameters: ReadParams,
  execute: ({ path }) =>
    Effect.succeed({ content: `contents of ${path}`, additionalContexts: [plugin("ctx-1", "file was read")] })
})
const zetaTool = Tool.make("zeta", {
  description: "Last tool",
  parameters: Schema.Struct({}),
  mode: "parallel",
  execute: () => Effect.succeed("z")
})

describe("4.5 Q2/Q3 / 8.8: the ModelRequest of each step", () => {
  it.scoped("4.5 Q3: the first request carries exactly the ModelRequest fields; RH(initial) logs the same header", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      const [r] = yield* requests
      expect(Object.keys(r!).sort()).toEqual(
        ["attempt", "maxTokens", "messages", "model", "provider", "sessionId", "step", "system", "temperature", "tools", "turn"]
      )
      const expectedTools = [
        { name: "read", description: "Reads a file", parameters: JSONSchema.make(ReadParams) },
        { name: "zeta", description: "Last tool", parameters: JSONSchema.make(Schema.Struct({})) }
      ]
      expect({ ...r!, messages: undefined }).toEqual({
        sessionId: "s", turn: 1, step: 1, attempt: 1, provider: "p", model: "m", system: "be brief",
        maxTokens: 100, temperature: 0, tools: expectedTools, messages: undefined
      })
      const [rh] = yield* dataOfType("request/header")
      expect(rh).toEqual({
        header: { provider: "p", model: "m", system: "be brief", maxTokens: 100, temperature: 0, tools: expectedTools },
        reason: "initial"
      })
      expect(r!.tools).toEqual(yield* Effect.flatMap(Tools, (t) => t.list))
    }).pipe(Effect.provide(scenario([ScriptedModel.text("ok")], {
      tools: [zetaTool, readTool],
      agent: { model: { provider: "p", model: "m" }, system: "be brief", maxTokens: 100, temperature: 0 }
    }))))

  it.scoped("4.5 Q3: absent optional config fields are absent keys of the request and of the header", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      const [r] = yield* requests
      expect("system" in r!).toBe(false)
      expect("maxTokens" in r!).toBe(false)
      expect("temperature" in r!).toBe(false)
      const [rh] = yield* dataOfType("request/header")
      expect(Object.keys(rh!.header).sort()).toEqual(["model", "provider", "tools"])
      expect(rh!.header.tools).toEqual([])
    }).pipe(Effect.provide(scenario([ScriptedModel.text("ok")]))))

  it.scoped("4.5/2.8: step 2 sees the assistant message (reasoning, text, tool call, replayState), the tool result and the tool's context", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const log = yield* SessionLog
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      const reqs = yield* requests
      expect(reqs.map((r) => [r.turn, r.step, r.attempt])).toEqual([[1, 1, 1], [1, 2, 1]])
      const m = reqs[1]!.messages
      expect(m.map((x) => x.role)).toEqual(["user", "assistant", "user", "user"])
      expect(m[0]).toEqual(user("A"))
      expect({ ...m[1]!, id: "x" }).toEqual({
        id: "x",
        role: "assistant",
        content: [
          { type: "reasoning", text: "think" },
          { type: "text", text: "calling" },
          { type: "tool-call", id: "c1", name: "read", arguments: "{\"path\":\"a.txt\"}" }
        ],
        source: { kind: "model", provider: "p", model: "m", replayState: { opaque: [1, "x", null] } }
      })
      expect({ ...m[2]!, id: "x" }).toEqual({
        id: "x",
        role: "user",
        content: [{ type: "tool-result", toolCallId: "c1", isError: false, content: [{ type: "text", text: "contents of a.txt" }] }],
        source: { kind: "tool", callId: "c1" }
      })
      expect(m[3]).toEqual(plugin("ctx-1", "file was read"))
      // Model-visible ⇔ logged: the history and the header as logged.
      expect(m).toEqual(yield* log.messages.pipe(Effect.map((all) => all.slice(0, 4))))
      const rhs = yield* dataOfType("request/header")
      expect(rhs.map((d) => d.reason)).toEqual(["initial"])
      const { messages: _m, sessionId: _s, turn: _t, step: _k, attempt: _a, ...header } = reqs[1]!
      expect(header).toEqual(rhs[0]!.header)
      // The replay-state chunk is logged like any other chunk.
      const chunks = (yield* dataOfType("assistant/chunk")).map((d) => d.chunk)
      expect(chunks.filter((c) => c.type === "replay-state")).toEqual([{ type: "replay-state", state: { opaque: [1, "x", null] } }])
    }).pipe(Effect.provide(scenario([
      ScriptedModel.response({
        reasoning: "think",
        text: "calling",
        toolCalls: [{ id: "c1", name: "read", arguments: { path: "a.txt" } }],
        replayState: { opaque: [1, "x", null] }
      }),
      ScriptedModel.text("done")
    ], { tools: [readTool] }))))

  it.scoped("2.8/4.5: an empty assistant message (lone stop finish) is not sent to the model in a later turn", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      yield* driver.followup(user("B"))
      expect(yield* closeOut).toEqual([])
      const reqs = yield* requests
      expect(reqs[1]!.messages).toEqual([user("A"), user("B")])
      expect((yield* dataOfType("assistant/message"))[0]!.message.content).toEqual([])
    }).pipe(Effect.provide(scenario([
      ScriptedModel.chunks([{ type: "finish", finish: { kind: "stop" } }]),
      ScriptedModel.text("ok")
    ]))))

  it.scoped("4.5 assembler: usage and replayState are the last chunk's values; every chunk is logged and cited", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      const es = yield* events
      const chunkSeqs = es.filter((e) => e.type === "assistant/chunk").map((e) => e.seq)
      expect(chunkSeqs).toHaveLength(9)
      const am = es.find((e) => e.type === "assistant/message")!
      expect((am as Loose).sourceEventSeqs).toEqual(chunkSeqs)
      const d = am.data as Loose
      expect(d.usage).toEqual({ inputTokens: 5, outputTokens: 6 })
      expect(d.message.source).toEqual({ kind: "model", provider: "p", model: "m", replayState: { v: 2 } })
      expect(d.message.content).toEqual([{ type: "text", text: "ab" }])
      yield* driver.followup(user("B"))
      expect(yield* closeOut).toEqual([])
      expect((yield* requests)[1]!.messages[1]!.source).toEqual({ kind: "model", provider: "p", model: "m", replayState: { v: 2 } })
    }).pipe(Effect.provide(scenario([
      ScriptedModel.chunks([
        { type: "usage", usage: { inputTokens: 1, outputTokens: 1 } },
        { type: "replay-state", state: { v: 1 } },
        { type: "block-start", index: 0, block: "text" },
        { type: "text-delta", index: 0, text: "a" },
        { type: "text-delta", index: 0, text: "b" },
        { type: "block-end", index: 0 },
        { type: "usage", usage: { inputTokens: 5, outputTokens: 6 } },
        { type: "replay-state", state: { v: 2 } },
        { type: "finish", finish: { kind: "stop" } }
      ]),
      ScriptedModel.text("ok")
    ]))))

  it.scoped("7.4/4.5: an interrupted prefix is sent to the model in the next turn; the failed attempt's text is not", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "assistant/chunk" && (e.data as Loose).chunk.type === "text-delta")
      yield* driver.cancel(CancelCause.user)
      expect(yield* closeOut).toEqual([])
      yield* driver.followup(user("B"))
      expect(yield* closeOut).toEqual([])
      const reqs = yield* requests
      const m = reqs[1]!.messages
      expect(m.map((x) => x.role)).toEqual(["user", "assistant", "user"])
      expect(m[1]!.content).toEqual([{ type: "text", text: "partial" }])
      expect(m[1]!.source).toEqual({ kind: "model", provider: "p", model: "m" })
    }).pipe(Effect.provide(scenario([ScriptedModel.hang({ text: "partial" }), ScriptedModel.text("ok")]))))

  it.scoped("4.4/4.5: an injected context and the prompt reach the request verbatim (ids and sources kept)", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.inject(plugin("P1", "context"))
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      const [r] = yield* requests
      expect(r!.messages).toHaveLength(2)
      expect(r!.messages).toContainEqual(plugin("P1", "context"))
      expect(r!.messages).toContainEqual(user("A"))
    }).pipe(Effect.provide(scenario([ScriptedModel.text("ok")]))))
})

describe("4.5 Q1 / 8.7: onRequest", () => {
  it.scoped("4.5 Q1: onRequest sees a frozen seed from the agent options; its config becomes the request and RH(initial)", () =>
    Effect.gen(function*() {
      const hooks = yield* Hooks
      const driver = yield* Driver
      const seen: Array<Loose> = []
      yield* hooks.onRequest((input, next) =>
        Effect.map(next(), (config): RequestConfig => {
          seen.push({ ...input, frozen: Object.isFrozen(input.config), same: config === input.config })
          return { ...config, system: "S2", maxTokens: 77 }
        })
      )
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect(seen).toHaveLength(1)
      expect(seen[0]).toEqual({
        sessionId: "s", turn: 1, step: 1, attempt: 1,
        config: { provider: "p", model: "m", system: "S", maxTokens: 10, temperature: 0.5 },
        frozen: true,
        same: true
      })
      const [r] = yield* requests
      expect([r!.system, r!.maxTokens, r!.temperature]).toEqual(["S2", 77, 0.5])
      const [rh] = yield* dataOfType("request/header")
      expect(rh).toEqual({
        header: { provider: "p", model: "m", system: "S2", maxTokens: 77, temperature: 0.5, tools: [] },
        reason: "initial"
      })
    }).pipe(Effect.provide(scenario([ScriptedModel.text("ok")], {
      agent: { model: { provider: "p", model: "m" }, system: "S", maxTokens: 10, temperature: 0.5 }
    }))))

  it.scoped("4.5 Q1/Q7: onRequest runs again for a retry with attempt 2; an unchanged config logs no second RH", () =>
    Effect.gen(function*() {
      const hooks = yield* Hooks
      const driver = yield* Driver
      const attempts: Array<number> = []
      yield* hooks.onRequest((input, next) => Effect.zipRight(Effect.sync(() => attempts.push(input.attempt)), next()))
      yield* hooks.onRequestError(() => Effect.succeed(RequestErrorAction.retry(Duration.millis(0))))
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect(attempts).toEqual([1, 2])
      expect(yield* shape).toEqual([
        "INS(nt,0,[A])", "TS(1)", "CLM(nt,0,1)", "SS(1,1)", "UM(A)", "RH(initial)",
        "CH(finish error)", "RT(1)",
        "CH(block-start)", "CH(text-delta)", "CH(block-end)", "CH(finish stop)", "AM", "SE(1,1)", "TE(1,completed)"
      ])
      const reqs = yield* requests
      expect(reqs.map((r) => r.attempt)).toEqual([1, 2])
      expect(reqs[1]!.messages).toEqual(reqs[0]!.messages)
      expect((yield* dataOfType("llm/retry"))[0]).toEqual({
        turn: 1, step: 1, attempt: 1, delayMs: 0, failure: { message: "nope", code: "WHATEVER" }
      })
    }).pipe(Effect.provide(scenario([ScriptedModel.fail({ message: "nope", code: "WHATEVER" }), ScriptedModel.text("ok")]))))
})

describe("4.5 D10 / 8.7: request-error recovery", () => {
  // The default policy's decision is read through a listener that calls `next` and then fails the
  // turn (so nothing sleeps).
  const cases: ReadonlyArray<readonly [LlmFailure, "Retry" | "Fail"]> = [
    [{ message: "m", code: "RATE_LIMIT" }, "Retry"],
    [{ message: "m", code: "OVERLOADED" }, "Retry"],
    [{ message: "m", code: "SERVICE_UNAVAILABLE" }, "Retry"],
    [{ message: "m", code: "NETWORK" }, "Retry"],
    [{ message: "m", code: "TIMEOUT" }, "Retry"],
    [{ message: "m", code: "X", status: 429 }, "Retry"],
    [{ message: "m", code: "X", status: 500 }, "Retry"],
    [{ message: "m", code: "X", status: 599 }, "Retry"],
    [{ message: "m", code: "X", retryable: true }, "Retry"],
    [{ message: "m", code: "X", status: 499 }, "Fail"],
    [{ message: "m", code: "X", status: 600 }, "Fail"],
    [{ message: "m", code: "X" }, "Fail"],
    [{ message: "m", code: "rate_limit" }, "Fail"],
    [{ message: "m", code: "OVERLOADED", retryable: false }, "Fail"],
    [{ message: "m", code: "X", status: 503, retryable: false }, "Fail"]
  ]
  it.scoped("4.5 D10: the default policy retries exactly the retryable failures; the listener sees the failure verbatim", () =>
    Effect.gen(function*() {
      const hooks = yield* Hooks
      const driver = yield* Driver
      const seen: Array<{ input: Loose; tag: string; delay?: number }> = []
      yield* hooks.onRequestError((input, next) =>
        Effect.map(next(), (action) => {
          seen.push({ input, tag: action._tag, ...(action._tag === "Retry" ? { delay: Duration.toMillis(action.delay) } : {}) })
          return RequestErrorAction.fail
        })
      )
      for (let i = 0; i < cases.length; i++) {
        yield* driver.followup(user(`q${i}`))
        yield* driver.whenIdle
      }
      expect(yield* closeOut).toEqual([])
      expect(seen.map((s) => s.tag)).toEqual(cases.map(([, tag]) => tag))
      expect(seen.map((s) => s.input)).toEqual(cases.map(([failure], i) => ({ sessionId: "s", turn: i + 1, step: 1, attempt: 1, failure })))
      for (const s of seen) {
        if (s.tag === "Retry") {
          expect(s.delay!).toBeGreaterThanOrEqual(800)
          expect(s.delay!).toBeLessThanOrEqual(1200)
        }
      }
      expect(yield* dataOfType("llm/retry")).toEqual([])
      expect((yield* reasons).map((r) => r.error)).toEqual(cases.map(([failure]) => failure))
    }).pipe(Effect.provide(scenario(cases.map(([failure]) => ScriptedModel.fail(failure))))))

  it.scoped("4.5 D10: attempt 2 backs off 2 s (jittered), attempt 3 is never retried; the listener's own Retry is what the loop logs", () =>
    Effect.gen(function*() {
      const hooks = yield* Hooks
      const driver = yield* Driver
      const defaults: Array<readonly [number, string, number]> = []
      yield* hooks.onRequestError((input, next) =>
        Effect.map(next(), (action) => {
          defaults.push([input.attempt, action._tag, action._tag === "Retry" ? Duration.toMillis(action.delay) : -1])
          return input.attempt < 3 ? RequestErrorAction.retry(Duration.millis(input.attempt)) : action
        })
      )
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "llm/retry")
      yield* TestClock.adjust(1)
      yield* untilEvent((e) => e.type === "llm/retry" && (e.data as Loose).attempt === 2)
      yield* TestClock.adjust(2)
      expect(yield* closeOut).toEqual([])
      expect(defaults.map(([a, t]) => [a, t])).toEqual([[1, "Retry"], [2, "Retry"], [3, "Fail"]])
      expect(defaults[1]![2]).toBeGreaterThanOrEqual(1600)
      expect(defaults[1]![2]).toBeLessThanOrEqual(2400)
      expect((yield* dataOfType("llm/retry")).map((d) => [d.attempt, d.delayMs])).toEqual([[1, 1], [2, 2]])
      expect((yield* requests).map((r) => r.attempt)).toEqual([1, 2, 3])
      expect(yield* reasons).toEqual([{ kind: "error", error: { message: "c", code: "OVERLOADED" } }])
    }).pipe(Effect.provide(scenario([
      ScriptedModel.fail({ message: "a", code: "OVERLOADED" }),
      ScriptedModel.fail({ message: "b", code: "OVERLOADED" }),
      ScriptedModel.fail({ message: "c", code: "OVERLOADED" })
    ]))))

  it.scoped("4.5 D10: retryAfterMs above the 30 s cap is the delay (max, not min); the retry waits exactly that long", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "llm/retry")
      expect((yield* dataOfType("llm/retry"))[0]).toEqual({
        turn: 1, step: 1, attempt: 1, delayMs: 45000,
        failure: { message: "slow down", code: "RATE_LIMIT", retryAfterMs: 45000, requestId: "req-1" }
      })
      yield* TestClock.adjust(44999)
      yield* settle
      expect(yield* requests).toHaveLength(1)
      yield* TestClock.adjust(1)
      expect(yield* closeOut).toEqual([])
      expect(yield* requests).toHaveLength(2)
    }).pipe(Effect.provide(scenario([
      ScriptedModel.fail({ message: "slow down", code: "RATE_LIMIT", retryAfterMs: 45000, requestId: "req-1" }),
      ScriptedModel.text("ok")
    ]))))

  it.scoped("4.5 Q7: a provider-side aborted finish with a retryable failure goes through recovery and is retried", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "llm/retry")
      yield* TestClock.adjust("2 seconds")
      expect(yield* closeOut).toEqual([])
      const chunks = (yield* dataOfType("assistant/chunk")).map((d) => d.chunk)
      expect(chunks[0]).toEqual({ type: "finish", finish: { kind: "aborted", failure: { message: "cut", code: "OVERLOADED" } } })
      expect(yield* reasons).toEqual([{ kind: "completed" }])
    }).pipe(Effect.provide(scenario([
      ScriptedModel.fail({ message: "cut", code: "OVERLOADED" }, { finish: "aborted" }),
      ScriptedModel.text("ok")
    ]))))

  it.scoped("4.5/4.7: an onRequestError failure is a turn failure mapped to {message, code}; no retry is logged", () =>
    Effect.gen(function*() {
      const hooks = yield* Hooks
      const driver = yield* Driver
      yield* hooks.onRequestError(() => Effect.fail({ message: "hook broke", code: "HOOKX" }))
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect(yield* reasons).toEqual([{ kind: "error", error: { message: "hook broke", code: "HOOKX" } }])
      expect(yield* dataOfType("llm/retry")).toEqual([])
      expect(yield* requests).toHaveLength(1)
    }).pipe(Effect.provide(scenario([ScriptedModel.fail({ message: "m", code: "OVERLOADED" }), ScriptedModel.text("ok")]))))

  it.scoped("4.5 Q5: a stream failure with a ModelError is logged as a synthetic error finish carrying its failure verbatim", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      const chunks = (yield* dataOfType("assistant/chunk")).map((d) => d.chunk)
      expect(chunks).toEqual([{ type: "finish", finish: { kind: "error", failure: { message: "gone", code: "UNKNOWN" } } }])
      expect(yield* reasons).toEqual([{ kind: "error", error: { message: "gone", code: "UNKNOWN" } }])
    }).pipe(Effect.provide(scenario([ScriptedModel.die("gone")]))))
})

describe("4.5 assembler and synthetic finishes", () => {
  it.scoped("4.5 assembler: blocks keep the order of their block-start whatever the indexes; a closed index may be reused; empty text is dropped", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      const am = (yield* dataOfType("assistant/message"))[0]!
      expect(am.message.content).toEqual([
        { type: "text", text: "t1t2" },
        { type: "reasoning", text: "r" },
        { type: "tool-call", id: "c1", name: "zeta", arguments: "{}" }
      ])
      expect((yield* dataOfType("tool/result"))[0]!.message.content[0]).toMatchObject({ toolCallId: "c1", isError: false })
      const second = (yield* requests)[1]!
      expect(second.messages[1]!.content).toEqual(am.message.content)
    }).pipe(Effect.provide(scenario([
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
    ], { tools: [zetaTool] }))))

  it.scoped("4.5 Q5/Q7: synthetic NO_FINISH and MALFORMED_STREAM finishes are offered to request-error recovery (a listener may retry them)", () =>
    Effect.gen(function*() {
      const hooks = yield* Hooks
      const driver = yield* Driver
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
      expect((yield* dataOfType("llm/retry")).map((d) => [d.attempt, d.failure.code])).toEqual([[1, "NO_FINISH"], [2, "MALFORMED_STREAM"]])
      expect(yield* shape).toEqual([
        "INS(nt,0,[A])", "TS(1)", "CLM(nt,0,1)", "SS(1,1)", "UM(A)", "RH(initial)",
        "CH(block-start)", "CH(finish error)", "RT(1)",
        "CH(finish error)", "RT(2)",
        "CH(block-start)", "CH(text-delta)", "CH(block-end)", "CH(finish stop)", "AM", "SE(1,1)", "TE(1,completed)"
      ])
      expect((yield* requests).map((r) => r.attempt)).toEqual([1, 2, 3])
    }).pipe(Effect.provide(scenario([
      ScriptedModel.chunks([{ type: "block-start", index: 0, block: "text" }]),
      ScriptedModel.chunks([{ type: "text-delta", index: 3, text: "x" }]),
      ScriptedModel.text("ok")
    ]))))

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
      const failure = { message: "m", code: "RATE_LIMIT", status: 429, retryAfterMs: 10, requestId: "r", retryable: true }
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
        { type: "usage", usage: { inputTokens: 1, outputTokens: 2, totalTokens: 3, reasoningTokens: 0, cacheReadTokens: 0, cacheWriteTokens: 0 } },
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
      expect(Schema.decodeUnknownEither(ToolSchemaSchema)({ name: "t", description: "d", parameters: { type: "object" } })._tag).toBe("Right")
      expect(Schema.decodeUnknownEither(RequestHeaderSchema)({ provider: "p", model: "m", tools: [] })._tag).toBe("Right")
      expect(Schema.decodeUnknownEither(RequestHeaderSchema)({ provider: "p", tools: [] })._tag).toBe("Left")
    }))
})

// ---------------------------------------------------------------------------------------------
// Model.layerLanguageModel inside an agent.

interface Fake {
  readonly options: Ref.Ref<ReadonlyArray<LanguageModel.ProviderOptions>>
  readonly layer: Layer.Layer<LanguageModel.LanguageModel>
}

const fakeLanguageModel = (
  responses: ReadonlyArray<{ readonly parts: ReadonlyArray<Response.StreamPartEncoded>; readonly failure?: AiError.AiError }>
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
  Agent.layer({ sessionId: SessionId.make("s"), model: { provider: "p", model: "m" }, ...(system !== undefined ? { system } : {}) }).pipe(
    Layer.provideMerge(Layer.mergeAll(
      SessionStore.layerMemory,
      Model.layerLanguageModel.pipe(Layer.provide(fake.layer)),
      Tools.layer({ tools })
    ))
  )

const usage = { inputTokens: 3, outputTokens: 4, totalTokens: 7 }

/** A prompt message as plain data (type-id brands left out). */
const plain = (value: unknown): unknown => {
  if (Array.isArray(value)) return value.map(plain)
  if (value instanceof Uint8Array) return Array.from(value)
  if (typeof value === "object" && value !== null) {
    return Object.fromEntries(Object.entries(value).filter(([k]) => !k.startsWith("~") && k !== "options").map(([k, v]) => [k, plain(v)]))
  }
  return value
}

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
          { type: "text-start", id: "t" },
          { type: "text-delta", id: "t", delta: "done" },
          { type: "text-end", id: "t" },
          { type: "finish", reason: "stop", usage }
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
        }))).toEqual([{ name: "read", description: "Reads a file", parameters: (({ $schema: _, ...rest }) => rest)(JSONSchema.make(ReadParams) as Loose) }])
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
      expect((yield* dataOfType("tool/result"))[0]!.message.content[0].content).toEqual([{ type: "text", text: "contents of a.txt" }])
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
          { type: "text-start", id: "t" },
          { type: "text-delta", id: "t", delta: "ok" },
          { type: "text-end", id: "t" },
          { type: "finish", reason: "stop", usage }
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
        "INS(nt,0,[A])", "TS(1)", "CLM(nt,0,1)", "SS(1,1)", "UM(A)", "RH(initial)",
        "CH(block-start)", "CH(text-delta)", "CH(finish error)", "RT(1)",
        "CH(block-start)", "CH(text-delta)", "CH(block-end)", "CH(usage)", "CH(finish stop)", "AM", "SE(1,1)", "TE(1,completed)"
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
      expect((yield* log.messages).map((m: Message) => m.content[0])).toEqual([{ type: "text", text: "A" }, { type: "text", text: "ok" }])
    }).pipe(Effect.provide(agentOverLanguageModel(fake)))
  })

  it.scoped("8.8/4.5: finish reason length → max-tokens: the tool-call block is dropped and the turn ends max-tokens without tools", () => {
    const fake = fakeLanguageModel([
      {
        parts: [
          { type: "text-start", id: "t" },
          { type: "text-delta", id: "t", delta: "long" },
          { type: "text-end", id: "t" },
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
