/**
 * The Anthropic Messages API wire format for the fake server: `POST /v1/messages` with
 * `stream: true` answered by the server-sent events Anthropic documents (`message_start`,
 * `content_block_start` / `_delta` / `_stop`, `message_delta`, `message_stop`, `ping`), served by
 * `listen` from the Responses fake.
 */
import type { Reply, Usage } from "./ResponsesServer.js"
import { frame } from "./ResponsesServer.js"

/** What one scripted message contains, in content order: thinking, text, tool uses. */
export interface Turn {
  readonly thinking?: ReadonlyArray<string>
  readonly text?: ReadonlyArray<string>
  readonly toolUses?: ReadonlyArray<
    { readonly id: string; readonly name: string; readonly partialJson: ReadonlyArray<string> }
  >
  readonly usage: Usage
}

/** The SSE events of one streamed message, each as `[event name, data]`. */
export const messageEvents = (
  turn: Turn,
  options: { readonly id?: string; readonly model?: string } = {}
): ReadonlyArray<readonly [string, Record<string, unknown>]> => {
  const events: Array<readonly [string, Record<string, unknown>]> = []
  const push = (data: Record<string, unknown>) => events.push([data.type as string, data])
  push({
    type: "message_start",
    message: {
      id: options.id ?? "msg_1",
      type: "message",
      role: "assistant",
      content: [],
      model: options.model ?? "claude-test",
      stop_reason: null,
      stop_sequence: null,
      usage: {
        input_tokens: turn.usage.input,
        output_tokens: 1,
        cache_creation_input_tokens: turn.usage.cacheWrite ?? 0,
        cache_read_input_tokens: turn.usage.cached ?? 0
      }
    }
  })
  let index = 0
  if (turn.thinking !== undefined) {
    push({ type: "content_block_start", index, content_block: { type: "thinking", thinking: "", signature: "" } })
    for (const thinking of turn.thinking) {
      push({ type: "content_block_delta", index, delta: { type: "thinking_delta", thinking } })
    }
    push({ type: "content_block_delta", index, delta: { type: "signature_delta", signature: "c2lnbmF0dXJl" } })
    push({ type: "content_block_stop", index })
    index++
  }
  push({ type: "ping" })
  if (turn.text !== undefined) {
    push({ type: "content_block_start", index, content_block: { type: "text", text: "" } })
    for (const text of turn.text) push({ type: "content_block_delta", index, delta: { type: "text_delta", text } })
    push({ type: "content_block_stop", index })
    index++
  }
  for (const use of turn.toolUses ?? []) {
    push({
      type: "content_block_start",
      index,
      content_block: { type: "tool_use", id: use.id, name: use.name, input: {} }
    })
    for (const partial_json of use.partialJson) {
      push({ type: "content_block_delta", index, delta: { type: "input_json_delta", partial_json } })
    }
    push({ type: "content_block_stop", index })
    index++
  }
  push({
    type: "message_delta",
    delta: { stop_reason: (turn.toolUses ?? []).length > 0 ? "tool_use" : "end_turn", stop_sequence: null },
    usage: { output_tokens: turn.usage.output }
  })
  push({ type: "message_stop" })
  return events
}

/** A streamed message as an SSE reply. */
export const streamed = (turn: Turn, options: { readonly id?: string; readonly model?: string } = {}): Reply => ({
  _tag: "Sse",
  frames: messageEvents(turn, options).map(([event, data]) => frame(event, data))
})

/** A stream that starts a text block, then sends a frame whose data is not JSON. */
export const malformed = (): Reply => {
  const events = messageEvents({ text: ["cut"], usage: { input: 1, output: 1 } })
  return {
    _tag: "Sse",
    frames: [
      ...events.slice(0, 4).map(([event, data]) => frame(event, data)),
      frame("content_block_delta", "{\"type\":")
    ]
  }
}

/** An error event in the middle of a stream, as Anthropic sends when it is overloaded. */
export const overloadedMidStream = (): Reply => {
  const events = messageEvents({ text: ["par"], usage: { input: 1, output: 1 } })
  return {
    _tag: "Sse",
    frames: [
      ...events.slice(0, 4).map(([event, data]) => frame(event, data)),
      frame("error", { type: "error", error: { type: "overloaded_error", message: "Overloaded" } })
    ]
  }
}
