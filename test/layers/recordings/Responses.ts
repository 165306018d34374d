/**
 * The OpenAI Responses API as the recordings show it: what a streamed response must become in
 * tiller, and how a request's `input` items read (normalized for comparison).
 */
import { expect } from "@effect/vitest"
import { Redacted } from "effect"
import * as ProviderModels from "../../../src/layers/ProviderModels.js"
import type { Dialect, ExpectedCall, ExpectedFinish, ExpectedResponse } from "./Expected.js"
import { argumentsValue, errorFinish, KEY, refusalFinish, textOf } from "./Expected.js"
import { frame } from "./Recordings.js"

/**
 * The encrypted reasoning of every recorded reasoning item, by value: a reasoning item carries a
 * different `encrypted_content` in `output_item.added`, `output_item.done` and `response.completed`;
 * the done and completed ones are current. A request's reasoning item is read as `encrypted(<item id>)`
 * when it carries one of them.
 */
const encryptedIds = new Map<string, string>()

const noteEncrypted = (payloads: ReadonlyArray<any>) => {
  for (const p of payloads) {
    if (
      p.type === "response.output_item.done" && p.item?.type === "reasoning" &&
      typeof p.item.encrypted_content === "string"
    ) {
      encryptedIds.set(p.item.encrypted_content, p.item.id)
    }
    for (const item of p.type === "response.completed" ? p.response?.output ?? [] : []) {
      if (item.type === "reasoning" && typeof item.encrypted_content === "string") {
        encryptedIds.set(item.encrypted_content, item.id)
      }
    }
  }
}

const expectResponse = (payloads: ReadonlyArray<any>): ExpectedResponse => {
  noteEncrypted(payloads)
  let text = ""
  let refusal = ""
  let reasoning = ""
  const items: Array<any> = []
  const argumentDeltas = new Map<string, string>()
  let end: any
  let error: any
  for (const p of payloads) {
    switch (p.type) {
      case "response.output_text.delta":
        text += p.delta
        break
      case "response.refusal.delta":
        // A refusal streams no text: its words are the REFUSAL failure's message.
        refusal += p.delta
        break
      case "response.reasoning_summary_text.delta":
        reasoning += p.delta
        break
      case "response.function_call_arguments.delta":
        argumentDeltas.set(p.item_id, (argumentDeltas.get(p.item_id) ?? "") + p.delta)
        break
      case "response.output_item.done":
        items.push(p.item)
        break
      case "error":
        error ??= p.error ?? p
        break
      case "response.failed":
        error ??= p.response?.error
        end ??= p
        break
      case "response.completed":
      case "response.incomplete":
        end ??= p
        break
    }
  }
  const calls: Array<ExpectedCall> = items.filter((i) => i.type === "function_call").map((i) => {
    const args = typeof i.arguments === "string" && i.arguments !== "" ? i.arguments : argumentDeltas.get(i.id) ?? ""
    return { id: i.call_id, name: i.name, arguments: args === "" ? "{}" : args }
  })
  const u = end?.response?.usage
  const finish: ExpectedFinish = error !== undefined
    ? errorFinish(error)
    : end === undefined
    ? { kind: "error", code: "NETWORK", retryable: true, message: "ended before it was complete" }
    : end.type === "response.incomplete"
    ? end.response?.incomplete_details?.reason === "max_output_tokens"
      ? { kind: "max-tokens" }
      : { kind: "error", code: "CONTENT_FILTER", retryable: false, message: "" }
    : refusal !== ""
    ? refusalFinish(refusal)
    : { kind: "stop" }
  const replay = items.flatMap((i): Array<unknown> => {
    if (i.type === "reasoning") {
      return typeof i.encrypted_content === "string"
        ? [{ kind: "reasoning", encrypted: `encrypted(${i.id})`, summary: i.summary ?? [], hasId: false }]
        : []
    }
    if (i.type === "message") {
      const t = (i.content ?? []).filter((c: any) => c.type === "output_text").map((c: any) => c.text).join("")
      return t === "" ? [] : [{ kind: "text", text: t }]
    }
    if (i.type === "function_call") {
      const call = calls.find((c) => c.id === i.call_id)!
      return [{ kind: "call", id: call.id, name: call.name, arguments: argumentsValue(call.arguments) }]
    }
    return []
  })
  return {
    text,
    reasoning,
    calls,
    usage: u === undefined || u === null ? undefined : {
      inputTokens: u.input_tokens,
      outputTokens: u.output_tokens,
      ...(u.output_tokens_details?.reasoning_tokens === undefined
        ? {}
        : { reasoningTokens: u.output_tokens_details.reasoning_tokens }),
      ...(u.input_tokens_details?.cached_tokens === undefined
        ? {}
        : { cacheReadTokens: u.input_tokens_details.cached_tokens })
    },
    finish,
    replay
  }
}

const closingResponse = (status: string, output: ReadonlyArray<unknown>) => ({
  id: "resp_closing",
  object: "response",
  status,
  model: "closing",
  created_at: 1_771_366_458,
  background: false,
  error: null,
  incomplete_details: null,
  instructions: null,
  max_output_tokens: null,
  parallel_tool_calls: true,
  previous_response_id: null,
  reasoning: { effort: null, summary: null },
  service_tier: "auto",
  store: false,
  temperature: 1,
  text: { format: { type: "text" } },
  tool_choice: "auto",
  tools: [],
  top_p: 1,
  truncation: "disabled",
  user: null,
  metadata: {},
  output,
  usage: status === "completed"
    ? {
      input_tokens: 1,
      input_tokens_details: { cached_tokens: 0 },
      output_tokens: 2,
      output_tokens_details: { reasoning_tokens: 0 },
      total_tokens: 3
    }
    : null
})

const closingMessage = {
  id: "msg_closing",
  type: "message",
  status: "completed",
  role: "assistant",
  content: [{ type: "output_text", text: "Done.", annotations: [] }]
}

const closingEvents = [
  { type: "response.created", sequence_number: 0, response: closingResponse("in_progress", []) },
  {
    type: "response.output_item.added",
    sequence_number: 1,
    output_index: 0,
    item: { ...closingMessage, status: "in_progress", content: [] }
  },
  {
    type: "response.content_part.added",
    sequence_number: 2,
    item_id: "msg_closing",
    output_index: 0,
    content_index: 0,
    part: { type: "output_text", text: "", annotations: [] }
  },
  {
    type: "response.output_text.delta",
    sequence_number: 3,
    item_id: "msg_closing",
    output_index: 0,
    content_index: 0,
    delta: "Done.",
    logprobs: []
  },
  {
    type: "response.output_text.done",
    sequence_number: 4,
    item_id: "msg_closing",
    output_index: 0,
    content_index: 0,
    text: "Done.",
    logprobs: []
  },
  {
    type: "response.content_part.done",
    sequence_number: 5,
    item_id: "msg_closing",
    output_index: 0,
    content_index: 0,
    part: { type: "output_text", text: "Done.", annotations: [] }
  },
  { type: "response.output_item.done", sequence_number: 6, output_index: 0, item: closingMessage },
  { type: "response.completed", sequence_number: 7, response: closingResponse("completed", [closingMessage]) }
]

const item = (i: any): unknown => {
  if (i.type === "reasoning") {
    const known = encryptedIds.get(i.encrypted_content)
    return {
      kind: "reasoning",
      encrypted: known === undefined ? i.encrypted_content : `encrypted(${known})`,
      summary: i.summary,
      hasId: "id" in i
    }
  }
  if (i.type === "function_call") {
    return {
      kind: "call",
      id: i.call_id,
      name: i.name,
      arguments: typeof i.arguments === "string" ? argumentsValue(i.arguments) : i.arguments
    }
  }
  if (i.type === "function_call_output") return { kind: "tool-result", id: i.call_id, text: textOf(i.output) }
  if (i.role === "user") return { kind: "user", text: textOf(i.content) }
  if (i.role === "assistant") return { kind: "text", text: textOf(i.content) }
  return { kind: "other", type: i.type, role: i.role }
}

/** The OpenAI Responses dialect: `ProviderModels.layerOpenAi` against the replay server. */
export const responses: Dialect = {
  family: "openai-responses",
  provider: "openai",
  path: "/v1/responses",
  layer: (url) => ProviderModels.layerOpenAi({ model: "gpt-replay", apiKey: Redacted.make(KEY), baseUrl: `${url}/v1` }),
  expect: (response) => expectResponse(response.payloads),
  closing: closingEvents.map((p) => frame("openai-responses", JSON.stringify(p), p)).join(""),
  history: (body) => body.input.map(item),
  user: (text) => ({ kind: "user", text }),
  toolResult: (id, text) => ({ kind: "tool-result", id, text }),
  declared: (body) => (body.tools ?? []).map((t: any) => ({ name: t.name, parameters: t.parameters })),
  everyRequest: ({ body, headers }) => {
    expect(headers.authorization).toBe(`Bearer ${KEY}`)
    expect(body.stream).toBe(true)
    expect(body.store).toBe(false)
    expect(body.include).toContain("reasoning.encrypted_content")
    for (const tool of body.tools ?? []) {
      expect({ type: tool.type, strict: tool.strict }).toEqual({ type: "function", strict: false })
    }
  }
}
