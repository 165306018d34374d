/**
 * Prefix stability, per adapter, over a multi-step tool session driven through the real loop
 * (`Agent.layer` over the adapter against a fake provider on 127.0.0.1): every request's bytes up to
 * its newest history entry (Anthropic: without the rolling breakpoints) are the start of the next
 * request's bytes, across steps, tool batches, replayed reasoning and a second turn. That is what a
 * provider's prompt cache needs; `test/fixtures/prefixStability.ts` defines the property.
 */
import * as FetchHttpClient from "@effect/platform/FetchHttpClient"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { checkLog } from "../../src/domain/Check.js"
import { DEFAULT_TIMEOUTS } from "../../src/internal/providers/ProviderTimeouts.js"
import * as AnthropicModel from "../../src/layers/AnthropicModel.js"
import * as OpenAiCompatibleModel from "../../src/layers/OpenAiCompatibleModel.js"
import * as OpenAiModel from "../../src/layers/OpenAiModel.js"
import { Driver } from "../../src/services/Driver.js"
import type { Model } from "../../src/services/Model.js"
import { events, user } from "../agent/harness.js"
import { add, agentOver, clock } from "../fixtures/adapterHarness.js"
import * as Prefix from "../fixtures/prefixStability.js"
import * as AnthropicServer from "./fake/AnthropicServer.js"
import * as Chat from "./fake/ChatCompletionsServer.js"
import type { FakeServer, Reply } from "./fake/ResponsesServer.js"
import * as ResponsesServer from "./fake/ResponsesServer.js"

const SYSTEM = "You are a careful assistant. Use the tools."

/** One scripted step: the calls the model makes (none: its final answer), and whether it reasons first. */
interface Step {
  readonly calls: ReadonlyArray<{ readonly id: string; readonly name: "add" | "clock"; readonly args: string }>
  readonly reasoning?: string
  readonly text?: string
}

/** Turn 1: four tool steps (one with two parallel calls, two with reasoning), then an answer; turn 2: one tool step, an answer. */
const TURNS: ReadonlyArray<ReadonlyArray<Step>> = [
  [
    { reasoning: "Add first.", calls: [{ id: "c1", name: "add", args: "{\"a\":1,\"b\":2}" }] },
    {
      text: "Now both.",
      calls: [{ id: "c2", name: "add", args: "{\"a\":3,\"b\":4}" }, { id: "c3", name: "clock", args: "" }]
    },
    { calls: [{ id: "c4", name: "add", args: "{\"a\":7,\"b\":12}" }] },
    { reasoning: "Once more.", calls: [{ id: "c5", name: "clock", args: "{}" }] },
    { calls: [], text: "3, 7 and 19; it is 12:00." }
  ],
  [
    { calls: [{ id: "c6", name: "add", args: "{\"a\":19,\"b\":23}" }] },
    { calls: [], text: "42." }
  ]
]

const usage = (n: number) => ({ input: 1000 + 100 * n, output: 20 })

const anthropicReply = (step: Step, n: number): Reply =>
  AnthropicServer.streamed({
    ...(step.reasoning === undefined ? {} : { thinking: [step.reasoning] }),
    ...(step.text === undefined ? {} : { text: [step.text] }),
    toolUses: step.calls.map((c) => ({ id: c.id, name: c.name, partialJson: [c.args] })),
    usage: usage(n)
  }, { id: `msg_${n}` })

const responsesReply = (step: Step, n: number): Reply =>
  ResponsesServer.streamed({
    ...(step.reasoning === undefined ? {} : { reasoning: [step.reasoning], encrypted: `enc-${n}` }),
    ...(step.text === undefined ? {} : { text: [step.text] }),
    toolCalls: step.calls.map((c) => ({ callId: c.id, name: c.name, arguments: [c.args] })),
    usage: usage(n)
  }, { id: `resp_${n}` })

const chatReply = (step: Step, n: number): Reply => ({
  _tag: "Sse",
  frames: [
    Chat.event(Chat.chunk({ role: "assistant", content: "" })),
    ...(step.reasoning === undefined ? [] : [Chat.event(Chat.chunk({ reasoning_content: step.reasoning }))]),
    ...(step.text === undefined ? [] : [Chat.event(Chat.chunk({ content: step.text }))]),
    ...step.calls.map((c, i) =>
      Chat.event(Chat.chunk({ tool_calls: [Chat.toolCall(i, { id: c.id, name: c.name, arguments: c.args })] }))
    ),
    Chat.event(Chat.chunk({}, step.calls.length > 0 ? "tool_calls" : "stop")),
    Chat.event(
      Chat.usageChunk({ prompt_tokens: usage(n).input, completion_tokens: 20, total_tokens: usage(n).input + 20 })
    ),
    Chat.DONE
  ]
})

interface Adapter {
  readonly wire: Prefix.Wire
  readonly provider: string
  readonly reply: (step: Step, n: number) => Reply
  readonly layer: (server: FakeServer) => Layer.Layer<Model, unknown>
}

const ADAPTERS: ReadonlyArray<Adapter> = [
  {
    wire: "anthropic",
    provider: "anthropic",
    reply: anthropicReply,
    layer: (server) =>
      AnthropicModel.layer({ model: "claude-test", baseUrl: server.url, timeouts: DEFAULT_TIMEOUTS }).pipe(
        Layer.provide(FetchHttpClient.layer)
      )
  },
  {
    wire: "responses",
    provider: "openai",
    reply: responsesReply,
    layer: (server) =>
      OpenAiModel.layer({ model: "gpt-test", baseUrl: `${server.url}/v1`, timeouts: DEFAULT_TIMEOUTS }).pipe(
        Layer.provide(FetchHttpClient.layer)
      )
  },
  {
    wire: "chat",
    provider: "openai-compatible",
    reply: chatReply,
    layer: (server) =>
      OpenAiCompatibleModel.layer({ model: "fake-model", baseUrl: `${server.url}/v1` }).pipe(
        Layer.provide(FetchHttpClient.layer)
      )
  }
]

/** Runs the two turns through an agent over the adapter; the request texts and the log. */
const runSession = (adapter: Adapter) =>
  Effect.gen(function*() {
    const replies = TURNS.flat().map((step, n) => adapter.reply(step, n))
    const server = yield* ResponsesServer.listen(replies)
    const log = yield* Effect.gen(function*() {
      const driver = yield* Driver
      for (const [i] of TURNS.entries()) {
        yield* driver.followup(user(`q${i + 1}`, i === 0 ? "Add 1+2, 3+4 and 7+12, and tell the time." : "And 19+23?"))
        yield* driver.whenIdle
      }
      return yield* events
    }).pipe(
      Effect.provide(agentOver({
        provider: adapter.provider,
        model: "test-model",
        system: SYSTEM,
        modelLayer: adapter.layer(server),
        tools: [add, clock]
      }))
    )
    return { texts: (yield* server.requests).map((r) => r.text), log, received: yield* server.requests }
  })

describe("prefix stability through the agent loop", () => {
  for (const adapter of ADAPTERS) {
    it.scoped(`${adapter.wire}: each request repeats the previous one's bytes up to its newest entry, over 7 requests in 2 turns`, () =>
      Effect.gen(function*() {
        const { log, received, texts } = yield* runSession(adapter)
        expect(checkLog(log, { closed: true })).toStrictEqual([])
        expect(
          log.filter((e) => e.type === "turn/end").map((e) => (e.data as { reason: { kind: string } }).reason.kind)
        ).toStrictEqual([
          "completed",
          "completed"
        ])
        expect(texts).toHaveLength(TURNS.flat().length)
        const excused = Prefix.compactedBefore(log)
        expect(excused).toStrictEqual(Array(texts.length - 1).fill(false))
        expect(Prefix.violations(adapter.wire, texts, excused)).toStrictEqual([])
        // The prefix grows: each request says more than the last.
        for (let n = 0; n + 1 < texts.length; n++) {
          expect(Prefix.promisedPrefix(adapter.wire, texts[n + 1]!).length).toBeGreaterThan(
            Prefix.promisedPrefix(adapter.wire, texts[n]!).length
          )
        }
        if (adapter.wire === "anthropic") {
          for (const text of texts) {
            expect((text.match(/"cache_control"/g) ?? []).length).toBeLessThanOrEqual(4)
            // The newest breakpoint is on the newest message's last block: the promised prefix ends there.
            expect(
              Prefix.promisedPrefix(
                "anthropic",
                text.replace(/,"cache_control":\{"type":"ephemeral"\}(\]\}\]\})$/, "$1")
              )
            )
              .toBe(Prefix.promisedPrefix("anthropic", text))
            expect(text.endsWith(",\"cache_control\":{\"type\":\"ephemeral\"}}]}]}")).toBe(true)
          }
        }
        if (adapter.wire === "responses") {
          expect(received.map((r) => r.body.prompt_cache_key)).toStrictEqual(Array(texts.length).fill("s"))
        }
        if (adapter.wire === "chat") {
          // Nothing a Chat Completions host could refuse: no cache fields at all.
          for (const text of texts) expect(text).not.toMatch(/cache_control|prompt_cache_key/)
        }
      }))
  }

  it("the check fails when a request reorders the tools, re-serialises an earlier message or moves the system text", () => {
    const body = (tools: ReadonlyArray<string>, system: string, messages: ReadonlyArray<string>) =>
      `{"model":"m","tools":[${tools.map((t) => `{"name":"${t}"}`).join(",")}],"system":"${system}","input":[${
        messages.join(",")
      }]}`
    const first = body(["add", "clock"], "S", ["{\"a\":1}"])
    expect(Prefix.violations("responses", [first, body(["add", "clock"], "S", ["{\"a\":1}", "{\"b\":2}"])]))
      .toStrictEqual([])
    expect(Prefix.violations("responses", [first, body(["clock", "add"], "S", ["{\"a\":1}", "{\"b\":2}"])]))
      .toHaveLength(1)
    expect(Prefix.violations("responses", [first, body(["add", "clock"], "S", ["{\"a\":1 }", "{\"b\":2}"])]))
      .toHaveLength(1)
    expect(Prefix.violations("responses", [first, body(["add", "clock"], "S2", ["{\"a\":1}", "{\"b\":2}"])]))
      .toHaveLength(1)
    // A compaction between the two excuses the pair.
    expect(Prefix.violations("responses", [first, body(["add"], "S", ["{\"z\":0}"])], [true])).toStrictEqual([])
  })
})
