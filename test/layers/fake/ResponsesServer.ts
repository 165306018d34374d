/**
 * A fake OpenAI Responses API on 127.0.0.1: `POST /v1/responses` answered from a script, one reply
 * per request, in the server-sent-event format OpenAI documents for `stream: true`.
 *
 * The replies (`listen`, `Reply`) are shared with the Anthropic fake; the transport is `HttpServer`'s.
 */
import type { Effect, Scope } from "effect"
import type { FakeServer } from "./HttpServer.js"
import { serve } from "./HttpServer.js"

export type { FakeServer, ReceivedRequest } from "./HttpServer.js"

/**
 * One scripted reply: a stream of raw SSE frames, a plain response with a status, a connection
 * closed before any response (a transport failure for the client), a stream whose connection is
 * destroyed after its frames (a body cut mid-stream), or a stream that sends its frames and then
 * nothing, never ending (a stalled server).
 */
export type Reply =
  | { readonly _tag: "Sse"; readonly frames: ReadonlyArray<string> }
  | {
    readonly _tag: "Status"
    readonly status: number
    readonly headers?: Record<string, string>
    readonly body: string
  }
  | { readonly _tag: "Hangup" }
  | { readonly _tag: "Cut"; readonly frames: ReadonlyArray<string> }
  | { readonly _tag: "Stall"; readonly frames: ReadonlyArray<string> }

/** A connection closed before any response. */
export const hangup: Reply = { _tag: "Hangup" }

/** The frames of a stream, then the connection destroyed without ending the body. */
export const cut = (frames: ReadonlyArray<string>): Reply => ({ _tag: "Cut", frames })

/** The headers and frames of a stream, then nothing until the server closes. */
export const stall = (frames: ReadonlyArray<string> = []): Reply => ({ _tag: "Stall", frames })

/** One SSE frame: an optional `event:` line and one `data:` line (objects are JSON-encoded). */
export const frame = (event: string | undefined, data: unknown): string =>
  `${event === undefined ? "" : `event: ${event}\n`}data: ${typeof data === "string" ? data : JSON.stringify(data)}\n\n`

/** A plain JSON error response with a status. */
export const status = (code: number, body: unknown, headers: Record<string, string> = {}): Reply => ({
  _tag: "Status",
  status: code,
  headers: { "content-type": "application/json", ...headers },
  body: JSON.stringify(body)
})

/**
 * Starts a server on 127.0.0.1 (port 0) that answers the n-th request with `replies[n]` (a 500
 * once the script is exhausted); it closes with the scope.
 */
export const listen = (replies: ReadonlyArray<Reply>): Effect.Effect<FakeServer, never, Scope.Scope> =>
  serve((n, _received, request, response) => {
    const reply = replies[n]
    if (reply === undefined) {
      response.writeHead(500, { "content-type": "text/plain" }).end("fake server: script exhausted")
    } else if (reply._tag === "Hangup") {
      request.socket.destroy()
    } else if (reply._tag === "Status") {
      response.writeHead(reply.status, reply.headers).end(reply.body)
    } else if (reply._tag === "Cut") {
      response.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" })
      for (const text of reply.frames) response.write(text)
      // Let the frames leave before the socket goes.
      setTimeout(() => request.socket.destroy(), 20)
    } else if (reply._tag === "Stall") {
      response.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" })
      response.flushHeaders()
      for (const text of reply.frames) response.write(text)
    } else {
      response.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" })
      for (const text of reply.frames) response.write(text)
      response.end()
    }
  })

/** The usage a response reports. */
export interface Usage {
  readonly input: number
  readonly output: number
  readonly reasoning?: number
  readonly cached?: number
  /** Tokens written to the provider's prompt cache (Anthropic's `cache_creation_input_tokens`). */
  readonly cacheWrite?: number
}

/**
 * What one scripted model response contains, in output order: reasoning (with `encrypted`, its
 * `encrypted_content`), text, tool calls.
 */
export interface Turn {
  readonly reasoning?: ReadonlyArray<string>
  readonly encrypted?: string
  readonly text?: ReadonlyArray<string>
  readonly toolCalls?: ReadonlyArray<
    { readonly callId: string; readonly name: string; readonly arguments: ReadonlyArray<string> }
  >
  readonly usage: Usage
}

const responseObject = (
  id: string,
  model: string,
  state: "in_progress" | "completed",
  output: ReadonlyArray<unknown>,
  usage: Usage | null
) => ({
  id,
  object: "response",
  created_at: 1_741_290_958,
  status: state,
  error: null,
  incomplete_details: null,
  instructions: null,
  max_output_tokens: null,
  model,
  output,
  parallel_tool_calls: true,
  previous_response_id: null,
  reasoning: { effort: null, summary: null },
  store: true,
  temperature: 1,
  text: { format: { type: "text" } },
  tool_choice: "auto",
  tools: [],
  top_p: 1,
  truncation: "disabled",
  usage: usage === null ? null : {
    input_tokens: usage.input,
    input_tokens_details: { cached_tokens: usage.cached ?? 0 },
    output_tokens: usage.output,
    output_tokens_details: { reasoning_tokens: usage.reasoning ?? 0 },
    total_tokens: usage.input + usage.output
  },
  user: null,
  metadata: {}
})

/**
 * The SSE events of one streamed response (`response.created`, the output items with their deltas,
 * `response.completed`), each with its `sequence_number`.
 */
export const responseEvents = (turn: Turn, options: { readonly id?: string; readonly model?: string } = {}) => {
  const id = options.id ?? "resp_1"
  const model = options.model ?? "gpt-test"
  const events: Array<Record<string, unknown>> = []
  const output: Array<unknown> = []
  const push = (event: Record<string, unknown>) => events.push({ ...event, sequence_number: events.length })

  push({ type: "response.created", response: responseObject(id, model, "in_progress", [], null) })
  if (turn.reasoning !== undefined) {
    const itemId = "rs_1"
    const output_index = output.length
    const text = turn.reasoning.join("")
    const encrypted = turn.encrypted === undefined ? {} : { encrypted_content: turn.encrypted }
    push({
      type: "response.output_item.added",
      output_index,
      item: { type: "reasoning", id: itemId, summary: [], ...encrypted }
    })
    push({
      type: "response.reasoning_summary_part.added",
      item_id: itemId,
      output_index,
      summary_index: 0,
      part: { type: "summary_text", text: "" }
    })
    for (const delta of turn.reasoning) {
      push({ type: "response.reasoning_summary_text.delta", item_id: itemId, output_index, summary_index: 0, delta })
    }
    push({ type: "response.reasoning_summary_text.done", item_id: itemId, output_index, summary_index: 0, text })
    push({
      type: "response.reasoning_summary_part.done",
      item_id: itemId,
      output_index,
      summary_index: 0,
      part: { type: "summary_text", text }
    })
    const item = { type: "reasoning", id: itemId, summary: [{ type: "summary_text", text }], ...encrypted }
    push({ type: "response.output_item.done", output_index, item })
    output.push(item)
  }
  if (turn.text !== undefined) {
    const itemId = "msg_1"
    const output_index = output.length
    const text = turn.text.join("")
    push({
      type: "response.output_item.added",
      output_index,
      item: { type: "message", id: itemId, status: "in_progress", role: "assistant", content: [] }
    })
    push({
      type: "response.content_part.added",
      item_id: itemId,
      output_index,
      content_index: 0,
      part: { type: "output_text", text: "", annotations: [] }
    })
    for (const delta of turn.text) {
      push({ type: "response.output_text.delta", item_id: itemId, output_index, content_index: 0, delta, logprobs: [] })
    }
    push({ type: "response.output_text.done", item_id: itemId, output_index, content_index: 0, text, logprobs: [] })
    push({
      type: "response.content_part.done",
      item_id: itemId,
      output_index,
      content_index: 0,
      part: { type: "output_text", text, annotations: [] }
    })
    const item = {
      type: "message",
      id: itemId,
      status: "completed",
      role: "assistant",
      content: [{ type: "output_text", text, annotations: [] }]
    }
    push({ type: "response.output_item.done", output_index, item })
    output.push(item)
  }
  for (const [n, call] of (turn.toolCalls ?? []).entries()) {
    const itemId = `fc_${n + 1}`
    const output_index = output.length
    const args = call.arguments.join("")
    push({
      type: "response.output_item.added",
      output_index,
      item: {
        type: "function_call",
        id: itemId,
        call_id: call.callId,
        name: call.name,
        arguments: "",
        status: "in_progress"
      }
    })
    for (const delta of call.arguments) {
      push({ type: "response.function_call_arguments.delta", item_id: itemId, output_index, delta })
    }
    push({ type: "response.function_call_arguments.done", item_id: itemId, output_index, arguments: args })
    const item = {
      type: "function_call",
      id: itemId,
      call_id: call.callId,
      name: call.name,
      arguments: args,
      status: "completed"
    }
    push({ type: "response.output_item.done", output_index, item })
    output.push(item)
  }
  push({ type: "response.completed", response: responseObject(id, model, "completed", output, turn.usage) })
  return events
}

/** A streamed response as an SSE reply: each event framed with its `event:` name. */
export const streamed = (turn: Turn, options: { readonly id?: string; readonly model?: string } = {}): Reply => ({
  _tag: "Sse",
  frames: responseEvents(turn, options).map((event) => frame(event.type as string, event))
})

/** A stream that starts a message, then sends a frame whose data is not JSON and ends. */
export const malformed = (): Reply => {
  const events = responseEvents({ text: ["cut"], usage: { input: 1, output: 1 } })
  const upToDelta = events.filter((event) => event.type !== "response.completed").slice(0, 4)
  return {
    _tag: "Sse",
    frames: [
      ...upToDelta.map((event) => frame(event.type as string, event)),
      frame("response.output_text.delta", "{\"type\":")
    ]
  }
}
