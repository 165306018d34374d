/**
 * The Chat Completions API (OpenAI-compatible hosts) as the recordings show it: what a streamed
 * completion must become in tiller, and how a request's `messages` read (normalized for comparison).
 */
import { expect } from "@effect/vitest"
import { Redacted } from "effect"
import * as OpenAiCompatibleModel from "../../../src/layers/OpenAiCompatibleModel.js"
import type { Dialect, ExpectedFinish, ExpectedResponse } from "./Expected.js"
import { argumentsValue, errorFinish, KEY, refusalFinish, textOf } from "./Expected.js"
import { DONE, frame } from "./Recordings.js"

const expectResponse = (payloads: ReadonlyArray<any>, done: boolean): ExpectedResponse => {
  let text = ""
  let refusal = ""
  let reasoning = ""
  let reasoningField: string | undefined
  const calls = new Map<number, { id: string; name: string; arguments: string }>()
  let finishReason: string | undefined
  let usage: any
  let error: any
  for (const p of payloads) {
    if (p.error !== undefined && p.error !== null) error ??= p.error
    if (p.usage !== undefined && p.usage !== null) usage = p.usage
    for (const choice of p.choices ?? []) {
      const d = choice.delta ?? {}
      if (typeof d.content === "string") text += d.content
      // A refusal streams no text: its words are the REFUSAL failure's message.
      if (typeof d.refusal === "string") refusal += d.refusal
      for (const field of ["reasoning_content", "reasoning"]) {
        if (typeof d[field] === "string" && d[field] !== "") {
          reasoning += d[field]
          reasoningField ??= field
        }
      }
      for (const call of d.tool_calls ?? []) {
        const index = call.index ?? 0
        const entry = calls.get(index) ?? { id: "", name: "", arguments: "" }
        if (typeof call.id === "string" && call.id !== "" && entry.id === "") entry.id = call.id
        if (typeof call.function?.name === "string" && call.function.name !== "" && entry.name === "") {
          entry.name = call.function.name
        }
        if (typeof call.function?.arguments === "string") entry.arguments += call.function.arguments
        calls.set(index, entry)
      }
      if (typeof choice.finish_reason === "string") finishReason = choice.finish_reason
    }
  }
  const expectedCalls = [...calls.entries()].sort(([a], [b]) => a - b).map(([, c]) => ({
    ...c,
    arguments: c.arguments === "" ? "{}" : c.arguments
  }))
  const finish: ExpectedFinish = error !== undefined
    ? errorFinish(error)
    : finishReason === undefined && !done
    ? { kind: "error", code: "NETWORK", retryable: true, message: "ended before it was complete" }
    : refusal !== ""
    ? refusalFinish(refusal)
    : finishReason === "length"
    ? { kind: "max-tokens" }
    : finishReason === "content_filter"
    ? { kind: "error", code: "CONTENT_FILTER", retryable: false, message: "" }
    : { kind: "stop" }
  return {
    text,
    reasoning,
    calls: expectedCalls,
    usage: usage === undefined ? undefined : {
      inputTokens: usage.prompt_tokens,
      outputTokens: usage.completion_tokens,
      ...(usage.completion_tokens_details?.reasoning_tokens === undefined
        ? {}
        : { reasoningTokens: usage.completion_tokens_details.reasoning_tokens }),
      ...(usage.prompt_tokens_details?.cached_tokens === undefined
        ? {}
        : { cacheReadTokens: usage.prompt_tokens_details.cached_tokens })
    },
    finish,
    replay: [assistant(
      text,
      expectedCalls.map((c) => ({ id: c.id, name: c.name, arguments: argumentsValue(c.arguments) })),
      // The host's reasoning goes back in its own field within a tool loop (DeepSeek requires it).
      expectedCalls.length > 0 && reasoningField !== undefined ? { field: reasoningField, text: reasoning } : undefined
    )]
  }
}

const assistant = (text: string, calls: ReadonlyArray<unknown>, reasoning: unknown) => ({
  kind: "assistant",
  text,
  calls,
  reasoning
})

const chunk = (delta: Record<string, unknown>, finish: string | null, usage?: unknown) => ({
  id: "chatcmpl-closing",
  object: "chat.completion.chunk",
  created: 1_700_000_000,
  model: "closing",
  choices: usage === undefined ? [{ index: 0, delta, finish_reason: finish }] : [],
  ...(usage === undefined ? {} : { usage })
})

const closingChunks = [
  chunk({ role: "assistant", content: "Done." }, null),
  chunk({}, "stop"),
  chunk({}, null, { prompt_tokens: 1, completion_tokens: 2, total_tokens: 3 })
]

const message = (m: any): Array<unknown> => {
  if (m.role === "assistant") {
    const calls = (m.tool_calls ?? []).map((c: any) => ({
      id: c.id,
      name: c.function?.name,
      arguments: argumentsValue(c.function?.arguments ?? "")
    }))
    const field = ["reasoning_content", "reasoning"].find((f) => typeof m[f] === "string")
    return [assistant(
      m.content === null || m.content === undefined ? "" : textOf(m.content) as string,
      calls,
      calls.length > 0 && field !== undefined ? { field, text: m[field] } : undefined
    )]
  }
  if (m.role === "tool") return [{ kind: "tool-result", id: m.tool_call_id, text: textOf(m.content) }]
  if (m.role === "user") return [{ kind: "user", text: textOf(m.content) }]
  return [{ kind: "other", role: m.role }]
}

/** The Chat Completions dialect: `OpenAiCompatibleModel.layer` against the replay server. */
export const chat: Dialect = {
  family: "chat",
  provider: "openai-compatible",
  path: "/v1/chat/completions",
  layer: (url) =>
    OpenAiCompatibleModel.layer({ baseUrl: `${url}/v1`, model: "replay-model", apiKey: Redacted.make(KEY) }),
  expect: (response) => expectResponse(response.payloads, response.body.includes(DONE)),
  closing: closingChunks.map((p) => frame("chat", JSON.stringify(p), p)).join("") + DONE,
  history: (body) => body.messages.flatMap(message),
  user: (text) => ({ kind: "user", text }),
  toolResult: (id, text) => ({ kind: "tool-result", id, text }),
  declared: (body) =>
    (body.tools ?? []).map((t: any) => ({ name: t.function?.name, parameters: t.function?.parameters })),
  everyRequest: ({ body, headers }) => {
    expect(headers.authorization).toBe(`Bearer ${KEY}`)
    expect(body.stream).toBe(true)
  }
}
