/**
 * One replay: a real turn through `Agent.layer` (memory store, tools named after the recording's
 * calls, the family's model layer pointed at a local replay server), then every check of the
 * logged events and of the requests the adapter sent against what the recording contains.
 */
import * as NodeHttpClient from "@effect/platform-node/NodeHttpClient"
import { expect } from "@effect/vitest"
import { Effect, Layer, Schema } from "effect"
import type { SessionEvent } from "../../../src/domain/Event.js"
import { SessionId } from "../../../src/domain/Ids.js"
import { userMessage } from "../../../src/domain/Message.js"
import type { LlmFailure, StreamChunk } from "../../../src/domain/Values.js"
import { Agent } from "../../../src/layers/Agent.js"
import { Driver } from "../../../src/services/Driver.js"
import { Hooks, RequestErrorAction } from "../../../src/services/Hooks.js"
import { SessionLog } from "../../../src/services/SessionLog.js"
import { SessionStore } from "../../../src/services/SessionStore.js"
import type { ToolDefinition } from "../../../src/services/Tools.js"
import { Tool, Tools } from "../../../src/services/Tools.js"
import { anthropic } from "./Anthropic.js"
import { chat } from "./Chat.js"
import type { Dialect, ExpectedCall, ExpectedResponse } from "./Expected.js"
import { argumentsValue, KEY, strings } from "./Expected.js"
import type { Family, Recording } from "./Recordings.js"
import * as ReplayServer from "./ReplayServer.js"
import { responses } from "./Responses.js"

/** The dialect of each API family. */
export const DIALECTS: Readonly<Record<Family, Dialect>> = { anthropic, "openai-responses": responses, chat }

/** The prompt of the replayed turn, and of the follow-up turn after a completed answer. */
export const PROMPT = "Replay the recording."
export const FOLLOW_UP = "And then?"

/** What the test tool returns for a call: a calculator computes; any other tool reports the weather of its call. */
export const resultOf = (call: ExpectedCall): string => {
  const args = argumentsValue(call.arguments) as any
  if (call.name === "calculator") {
    const { a, b, op } = args
    return String(op === "add" ? a + b : op === "subtract" ? a - b : op === "multiply" ? a * b : a / b)
  }
  return `sunny, 18 °C (${call.id})`
}

/** One tool per called name, its parameters the keys its calls use (optional when some call omits them). */
const toolsFor = (expected: ReadonlyArray<ExpectedResponse>): Array<ToolDefinition<any>> => {
  const byName = new Map<string, Array<Record<string, unknown>>>()
  for (const call of expected.flatMap((r) => r.calls)) {
    const args = argumentsValue(call.arguments)
    byName.set(call.name, [
      ...(byName.get(call.name) ?? []),
      typeof args === "object" && args !== null ? args as Record<string, unknown> : {}
    ])
  }
  return [...byName.entries()].map(([name, calls]) => {
    const keys = [...new Set(calls.flatMap((c) => Object.keys(c)))]
    const fields = Object.fromEntries(
      keys.map((key) => [key, calls.every((c) => key in c) ? Schema.Unknown : Schema.optional(Schema.Unknown)])
    )
    return Tool.make(name, {
      description: `The recorded ${name} tool`,
      parameters: Schema.Struct(fields),
      mode: "parallel",
      execute: (params, ctx) => {
        const call = expected.flatMap((r) => r.calls).find((c) => c.id === ctx.callId)
        return Effect.succeed(
          call === undefined ? `unexpected call ${ctx.callId} with ${JSON.stringify(params)}` : resultOf(call)
        )
      }
    })
  })
}

const ofType = (all: ReadonlyArray<SessionEvent>, type: SessionEvent["type"]): Array<any> =>
  all.filter((e) => e.type === type)

const inStep = (turn: number, step: number) => (e: any) => e.data.turn === turn && e.data.step === step

/** What the logged chunks of one step say. */
const stepChunks = (all: ReadonlyArray<SessionEvent>, turn: number, step: number) => {
  const chunks = (ofType(all, "assistant/chunk") as Array<any>).filter(inStep(turn, step)).map((e) =>
    e.data.chunk as StreamChunk
  )
  const calls = new Map<number, { id: string; name: string; arguments: string }>()
  for (const c of chunks) {
    if (c.type === "block-start" && c.block === "tool-call") {
      calls.set(c.index, { id: c.id, name: c.name, arguments: "" })
    }
    if (c.type === "tool-call-delta") calls.get(c.index)!.arguments += c.arguments
  }
  return {
    text: chunks.flatMap((c) => c.type === "text-delta" ? [c.text] : []).join(""),
    reasoning: chunks.flatMap((c) => c.type === "reasoning-delta" ? [c.text] : []).join(""),
    calls: [...calls.values()],
    usages: chunks.flatMap((c) => c.type === "usage" ? [c.usage] : []),
    finishes: chunks.flatMap((c) => c.type === "finish" ? [c.finish] : []),
    /** The order of the closing chunks: usage, replay-state and finish. */
    closing: chunks.flatMap((c) =>
      c.type === "usage" || c.type === "replay-state" || c.type === "finish" ? [c.type] : []
    )
  }
}

/** The checks of one error failure: code, retryable, the provider's message kept on one short line. */
const expectFailure = (
  failure: LlmFailure | undefined,
  finish: Extract<ExpectedResponse["finish"], { kind: "error" }>
) => {
  expect(failure, "the turn must end in error").toBeDefined()
  expect({ code: failure!.code, retryable: failure!.retryable }).toEqual({
    code: finish.code,
    retryable: finish.retryable
  })
  expect(failure!.message).toContain(finish.message)
  expect(failure!.message).not.toContain("\n")
  expect(failure!.message.length).toBeLessThanOrEqual(300)
  expect(failure!.message).not.toContain(KEY)
}

/** Runs the recording's turn and checks it; `bodies` overrides the responses served (a truncated variant). */
export const replay = (
  recording: Recording,
  variant?: { readonly bodies: ReadonlyArray<string>; readonly expected: ReadonlyArray<ExpectedResponse> }
) =>
  Effect.gen(function*() {
    const dialect = DIALECTS[recording.family]
    const expected = variant?.expected ?? recording.responses.map(dialect.expect)
    const tools = toolsFor(expected)
    const server = yield* ReplayServer.listen(
      variant?.bodies ?? recording.responses.map((r) => r.body),
      dialect.closing
    )
    const agent = Agent.layer({
      sessionId: SessionId.make("replay"),
      model: { provider: dialect.provider, model: "replay" }
    }).pipe(
      Layer.provideMerge(Layer.mergeAll(
        SessionStore.layerMemory,
        Layer.provide(dialect.layer(server.url), NodeHttpClient.layerUndici),
        Tools.layer({ tools })
      ))
    )

    // The responses the turn uses: up to the first that fails or asks for no tool.
    let used = 0
    while (
      used < expected.length - 1 && expected[used]!.finish.kind === "stop" && expected[used]!.calls.length > 0
    ) used++
    const last = expected[used]!
    const completed = last.finish.kind === "stop"
    const followUp = completed && last.calls.length === 0

    const { events, offered } = yield* Effect.provide(
      Effect.gen(function*() {
        const hooks = yield* Hooks
        const offered: Array<{ readonly failure: LlmFailure; readonly decision: string }> = []
        // Records what the default policy decides and fails at once: no backoff, one request per failure.
        yield* hooks.onRequestError((input, next) =>
          Effect.map(next(), (decision) => {
            offered.push({ failure: input.failure, decision: decision._tag })
            return RequestErrorAction.fail
          })
        )
        const driver = yield* Driver
        yield* driver.followup(userMessage({ id: "p1", text: PROMPT }))
        yield* driver.whenIdle
        if (followUp) {
          yield* driver.followup(userMessage({ id: "p2", text: FOLLOW_UP }))
          yield* driver.whenIdle
        }
        return { events: yield* Effect.flatMap(SessionLog, (log) => log.events), offered }
      }),
      agent
    )

    // The events of each step of the replayed turn.
    for (let j = 0; j <= used; j++) {
      const want = expected[j]!
      const got = stepChunks(events, 1, j + 1)
      const where = `response ${j + 1} of ${recording.name}`
      expect(got.text, `${where}: text`).toBe(want.text)
      expect(got.reasoning, `${where}: reasoning`).toBe(want.reasoning)
      if (want.finish.kind === "error") {
        expect(got.usages.length, `${where}: usage chunks`).toBeLessThanOrEqual(1)
        expect(ofType(events, "assistant/message").filter(inStep(1, j + 1)), `${where}: no answer`).toEqual([])
        continue
      }
      // At most one usage chunk, then at most one replay-state, then the finish.
      expect(got.closing, `${where}: closing chunks`).toEqual([
        ...(got.closing.includes("usage") ? ["usage"] : []),
        ...(got.closing.includes("replay-state") ? ["replay-state"] : []),
        "finish"
      ])
      expect(got.calls, `${where}: tool calls`).toEqual(want.calls)
      expect(got.usages.length, `${where}: one usage chunk`).toBe(want.usage === undefined ? got.usages.length : 1)
      if (want.usage !== undefined) {
        const u = got.usages[0]!
        expect({
          inputTokens: u.inputTokens,
          outputTokens: u.outputTokens,
          ...(want.usage.reasoningTokens === undefined ? {} : { reasoningTokens: u.reasoningTokens ?? 0 }),
          ...(want.usage.cacheReadTokens === undefined ? {} : { cacheReadTokens: u.cacheReadTokens ?? 0 })
        }, `${where}: usage`).toEqual(want.usage)
      }
      expect(got.finishes, `${where}: finish`).toEqual([{ kind: want.finish.kind }])
      const message = ofType(events, "assistant/message").find(inStep(1, j + 1))!.data.message
      const blocks = (type: string) => message.content.filter((b: any) => b.type === type)
      expect(blocks("text").map((b: any) => b.text).join(""), `${where}: answer text`).toBe(want.text)
      expect(blocks("reasoning").map((b: any) => b.text).join(""), `${where}: answer reasoning`).toBe(want.reasoning)
      expect(
        blocks("tool-call").map((b: any) => ({ id: b.id, name: b.name, arguments: b.arguments })),
        `${where}: answer calls`
      )
        .toEqual(want.finish.kind === "stop" ? want.calls : [])
      if (want.finish.kind === "stop") {
        expect(
          ofType(events, "tool/call").filter(inStep(1, j + 1)).map((e) => ({
            id: e.data.callId,
            name: e.data.name,
            arguments: e.data.arguments
          }))
        )
          .toEqual(want.calls)
        expect(
          ofType(events, "tool/result").filter(inStep(1, j + 1)).map((e) => {
            const block = e.data.message.content[0]
            return { id: block.toolCallId, isError: block.isError, content: block.content }
          }),
          `${where}: tool results`
        ).toEqual(want.calls.map((c) => ({ id: c.id, isError: false, content: [{ type: "text", text: resultOf(c) }] })))
      }
    }

    // How the turn ended, and what the request-error policy was offered.
    const ends = ofType(events, "turn/end").map((e) => e.data.reason)
    const first = ends[0]
    if (last.finish.kind === "error") {
      expect(first.kind, `${recording.name}: turn end`).toBe("error")
      expectFailure(first.error, last.finish)
      expect(offered.map((o) => o.failure)).toEqual([first.error])
      expect(offered.map((o) => o.decision), "the default policy's decision").toEqual([
        last.finish.retryable ? "Retry" : "Fail"
      ])
    } else {
      expect(first, `${recording.name}: turn end`).toEqual({
        kind: last.finish.kind === "stop" ? "completed" : "max-tokens"
      })
      expect(offered, "no failure offered to the request-error policy").toEqual([])
    }
    expect(ends.length).toBe(followUp ? 2 : 1)
    if (followUp) expect(ends[1]).toEqual({ kind: "completed" })

    // Every request, and the history each one carries back.
    const requests = yield* server.requests
    expect(requests.length, `${recording.name}: requests`).toBe(used + 1 + (completed ? 1 : 0))
    const results = expected.map((r) => r.calls.map((c) => dialect.toolResult(c.id, resultOf(c))))
    const encodedTwice = expected.flatMap((r) => r.calls.map((c) => JSON.stringify(resultOf(c))))
    for (const [k, request] of requests.entries()) {
      expect(`${request.method} ${request.path}`).toBe(`POST ${dialect.path}`)
      dialect.everyRequest(request)
      // Every tool declared by name, its parameters a JSON Schema object (`{}` for a tool without any).
      const declared = dialect.declared(request.body)
      expect(declared.map((t) => t.name), `request ${k + 1}: declared tools`).toEqual(tools.map((t) => t.name).sort())
      for (const tool of declared) {
        const keys = Object.keys((tools.find((t) => t.name === tool.name)!.parameters as any).fields)
        expect(tool.parameters, `request ${k + 1}: parameters of ${tool.name}`).toMatchObject({ type: "object" })
        expect(Object.keys(tool.parameters.properties ?? {}).sort(), `request ${k + 1}: properties of ${tool.name}`)
          .toEqual(keys.sort())
        expect(Object.keys(tool.parameters).filter((key) => key === "anyOf" || key === "$id")).toEqual([])
      }
      const history: Array<unknown> = [dialect.user(PROMPT)]
      for (let j = 0; j < k && j <= used; j++) history.push(...expected[j]!.replay, ...results[j]!)
      if (followUp && k === used + 1) history.push(dialect.user(FOLLOW_UP))
      expect(dialect.history(request.body), `request ${k + 1} of ${recording.name}: history`).toEqual(history)
      const sent = strings(request.body)
      expect(sent.filter((s) => encodedTwice.includes(s)), `request ${k + 1}: a tool result JSON-encoded again`)
        .toEqual([])
    }
    expect(JSON.stringify(events)).not.toContain(KEY)
  })
