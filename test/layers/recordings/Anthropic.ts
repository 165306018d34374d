/**
 * The Anthropic Messages API as the recordings show it: what a streamed message must become in
 * tiller, and how a request's `messages` read (normalized for comparison).
 */
import { expect } from "@effect/vitest"
import { Redacted } from "effect"
import * as ProviderModels from "../../../src/layers/ProviderModels.js"
import type { Dialect, ExpectedCall, ExpectedFinish, ExpectedResponse, ExpectedUsage } from "./Expected.js"
import { argumentsValue, errorFinish, KEY, refusalFinish, textOf } from "./Expected.js"
import { frame } from "./Recordings.js"

interface Block {
  readonly start: any
  text: string
  thinking: string
  signature: string
  json: string
}

/** The blocks of a message in index order, with their deltas applied. */
const blocksOf = (payloads: ReadonlyArray<any>): Array<Block> => {
  const blocks = new Map<number, Block>()
  for (const p of payloads) {
    if (p.type === "content_block_start") {
      const b = p.content_block
      blocks.set(p.index, {
        start: b,
        text: typeof b.text === "string" ? b.text : "",
        thinking: typeof b.thinking === "string" ? b.thinking : "",
        signature: typeof b.signature === "string" ? b.signature : "",
        json: ""
      })
    } else if (p.type === "content_block_delta") {
      const block = blocks.get(p.index)!
      const d = p.delta
      if (d.type === "text_delta") block.text += d.text
      else if (d.type === "thinking_delta") block.thinking += d.thinking
      else if (d.type === "signature_delta") block.signature += d.signature
      else if (d.type === "input_json_delta") block.json += d.partial_json
    }
  }
  return [...blocks.entries()].sort(([a], [b]) => a - b).map(([, block]) => block)
}

/** A block as the next request must carry it back (`undefined`: not sent). */
const replayBlock = (block: Block): unknown => {
  const b = block.start
  switch (b.type) {
    case "text":
      return block.text === "" ? undefined : { type: "text", text: block.text }
    case "thinking":
      return block.signature === ""
        ? undefined
        : { type: "thinking", thinking: block.thinking, signature: block.signature }
    case "redacted_thinking":
      return { type: "redacted_thinking", data: b.data }
    case "tool_use":
      return { type: "tool_use", id: b.id, name: b.name, input: argumentsValue(block.json) }
    default:
      // Provider-executed blocks (server_tool_use, web_search_tool_result, ...) go back whole.
      return serverBlock({ ...b, ...(block.json === "" ? {} : { input: JSON.parse(block.json) }) })
  }
}

/** The fields of a provider-executed block that identify it and carry its content. */
const serverBlock = (b: any) => {
  const out: Record<string, unknown> = { type: b.type }
  for (const key of ["id", "tool_use_id", "name", "input", "content"]) if (b[key] !== undefined) out[key] = b[key]
  return out
}

const expectResponse = (payloads: ReadonlyArray<any>): ExpectedResponse => {
  const blocks = blocksOf(payloads)
  let usage: { input?: number; output?: number; cacheRead?: number } = {}
  let stopReason: string | undefined
  let error: any
  let stopped = false
  for (const p of payloads) {
    const u = p.type === "message_start" ? p.message?.usage : p.type === "message_delta" ? p.usage : undefined
    if (u !== undefined && u !== null) {
      usage = {
        input: u.input_tokens ?? usage.input,
        output: u.output_tokens ?? usage.output,
        cacheRead: u.cache_read_input_tokens ?? usage.cacheRead
      }
    }
    if (p.type === "message_delta" && p.delta?.stop_reason != null) stopReason = p.delta.stop_reason
    if (p.type === "error" && error === undefined) error = p.error
    if (p.type === "message_stop") stopped = true
  }
  const text = blocks.filter((b) => b.start.type === "text").map((b) => b.text).join("")
  const calls: Array<ExpectedCall> = blocks.filter((b) => b.start.type === "tool_use").map((b) => ({
    id: b.start.id,
    name: b.start.name,
    arguments: b.json === "" ? "{}" : b.json
  }))
  const finish: ExpectedFinish = error !== undefined
    ? errorFinish(error)
    : !stopped
    ? { kind: "error", code: "NETWORK", retryable: true, message: "ended before it was complete" }
    : stopReason === "refusal"
    ? refusalFinish(text)
    : stopReason === "max_tokens"
    ? { kind: "max-tokens" }
    : stopReason === "model_context_window_exceeded"
    ? { kind: "error", code: "CONTEXT_OVERFLOW", retryable: false, message: "" }
    : { kind: "stop" }
  const expectedUsage: ExpectedUsage | undefined = usage.input === undefined || usage.output === undefined
    ? undefined
    : {
      inputTokens: usage.input,
      outputTokens: usage.output,
      ...(usage.cacheRead === undefined ? {} : { cacheReadTokens: usage.cacheRead })
    }
  return {
    text,
    reasoning: blocks.filter((b) => b.start.type === "thinking").map((b) => b.thinking).join(""),
    calls,
    usage: expectedUsage,
    finish,
    replay: [{ kind: "assistant", content: blocks.map(replayBlock).filter((b) => b !== undefined) }]
  }
}

const closingEvents = [
  {
    type: "message_start",
    message: {
      id: "msg_closing",
      type: "message",
      role: "assistant",
      content: [],
      model: "closing",
      stop_reason: null,
      stop_sequence: null,
      usage: { input_tokens: 1, output_tokens: 1 }
    }
  },
  { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } },
  { type: "content_block_delta", index: 0, delta: { type: "text_delta", text: "Done." } },
  { type: "content_block_stop", index: 0 },
  { type: "message_delta", delta: { stop_reason: "end_turn", stop_sequence: null }, usage: { output_tokens: 2 } },
  { type: "message_stop" }
]

/** A user message's blocks, or an assistant message as one item. */
const historyOf = (messages: ReadonlyArray<any>): Array<unknown> =>
  messages.flatMap((m): Array<unknown> => {
    if (m.role === "assistant") {
      const content = typeof m.content === "string" ? [{ type: "text", text: m.content }] : m.content
      return [{
        kind: "assistant",
        content: content.map((b: any) =>
          b.type === "text"
            ? { type: "text", text: b.text }
            : b.type === "thinking"
            ? { type: "thinking", thinking: b.thinking, signature: b.signature }
            : b.type === "redacted_thinking"
            ? { type: "redacted_thinking", data: b.data }
            : b.type === "tool_use"
            ? { type: "tool_use", id: b.id, name: b.name, input: b.input }
            : serverBlock(b)
        )
      }]
    }
    const content = typeof m.content === "string" ? [{ type: "text", text: m.content }] : m.content
    return content.map((b: any) =>
      b.type === "tool_result"
        ? { kind: "tool-result", id: b.tool_use_id, text: textOf(b.content ?? ""), isError: b.is_error === true }
        : b.type === "text"
        ? { kind: "user", text: b.text }
        : { kind: "other", type: b.type }
    )
  })

/** The Anthropic dialect: `ProviderModels.layerAnthropic` against the replay server. */
export const anthropic: Dialect = {
  family: "anthropic",
  provider: "anthropic",
  path: "/v1/messages",
  layer: (url) => ProviderModels.layerAnthropic({ model: "claude-replay", apiKey: Redacted.make(KEY), baseUrl: url }),
  expect: (response) => expectResponse(response.payloads),
  closing: closingEvents.map((p) => frame("anthropic", JSON.stringify(p), p)).join(""),
  history: (body) => historyOf(body.messages),
  user: (text) => ({ kind: "user", text }),
  toolResult: (id, text) => ({ kind: "tool-result", id, text, isError: false }),
  declared: (body) => (body.tools ?? []).map((t: any) => ({ name: t.name, parameters: t.input_schema })),
  everyRequest: ({ body, headers }) => {
    expect({ key: headers["x-api-key"], version: headers["anthropic-version"] }).toEqual({
      key: KEY,
      version: "2023-06-01"
    })
    expect(body.stream).toBe(true)
    expect(typeof body.max_tokens).toBe("number")
  }
}
