/**
 * The demo model: offline and deterministic. It answers by describing exactly what entered the
 * current step — each message with its source — so injection, steering and follow-ups are visible,
 * and it calls a tool when the newest message asks for one in a recognisable form
 * (`call <tool> <json-or-text>` or `/<tool> <text>`). It is a demonstration, not an intelligence.
 *
 * @since 0.1.0
 */
import { Layer, Stream } from "effect"
import type { Message, StreamChunk, ToolSchema } from "../domain/Values.js"
import { SUMMARY_REQUEST_SOURCE_KIND } from "../internal/compaction/Summary.js"
import { SEARCH_TOOL } from "../internal/mcp/ToolSearch.js"
import type { ModelRequest } from "../services/Model.js"
import { Model } from "../services/Model.js"

const describeSource = (message: Message): string => {
  const { kind, ...rest } = message.source as { readonly kind: string } & Record<string, unknown>
  if (kind === "plugin" && typeof rest.plugin === "string") return `plugin:${rest.plugin}`
  return kind
}

const textOf = (message: Message): string =>
  message.content.map((block) =>
    block.type === "text" ? block.text : block.type === "image" ? "[image]" : block.type === "tool-result"
      ? block.content.map((c) => (c.type === "text" ? c.text : "[image]")).join(" ")
      : ""
  ).join(" ")

// The messages after the newest assistant message: what this step added to history.
const enteredThisStep = (messages: ReadonlyArray<Message>): ReadonlyArray<Message> => {
  let start = messages.length
  while (start > 0 && messages[start - 1]!.role !== "assistant") start--
  return messages.slice(start)
}

const toolRequest = (
  text: string,
  tools: ReadonlyArray<ToolSchema>
): { readonly name: string; readonly arguments: string } | undefined => {
  const match = /^\s*(?:call\s+([\w.-]+)|\/([\w.-]+))\s*(.*)$/s.exec(text)
  if (match === null) return undefined
  const name = match[1] ?? match[2]!
  const tool = tools.find((t) => t.name === name)
  if (tool === undefined) return undefined
  const rest = match[3]!.trim()
  if (rest.startsWith("{")) return { name, arguments: rest }
  // A bare argument fills the tool's first required string parameter.
  const parameters = tool.parameters as {
    readonly properties?: Record<string, unknown>
    readonly required?: ReadonlyArray<string>
  }
  const first = parameters.required?.[0] ?? Object.keys(parameters.properties ?? {})[0]
  return { name, arguments: first === undefined || rest === "" ? "{}" : JSON.stringify({ [first]: rest }) }
}

// A line naming an MCP tool the request does not offer, when the MCP tool search is offered: a
// search that loads the tool's definition (the next step calls the tool).
const searchRequest = (
  text: string,
  tools: ReadonlyArray<ToolSchema>
): { readonly name: string; readonly arguments: string } | undefined => {
  const match = /^\s*(?:call\s+|\/)(mcp__[\w.-]+)/.exec(text)
  if (match === null || !tools.some((t) => t.name === SEARCH_TOOL)) return undefined
  return { name: SEARCH_TOOL, arguments: JSON.stringify({ query: `select:${match[1]}` }) }
}

// The user line before the newest assistant message, when that message called the MCP tool search.
const lineBeforeSearch = (messages: ReadonlyArray<Message>): Message | undefined => {
  let at = messages.length - 1
  while (at >= 0 && messages[at]!.role !== "assistant") at--
  const assistant = messages[at]
  if (assistant === undefined || !assistant.content.some((b) => b.type === "tool-call" && b.name === SEARCH_TOOL)) {
    return undefined
  }
  for (let i = at - 1; i >= 0; i--) {
    const m = messages[i]!
    if (m.role === "user" && m.source.kind !== "tool") return m
  }
  return undefined
}

// A compaction's summary request: a short structured summary of the transcript's user lines and tools.
const summaryOf = (request: string): string => {
  const users = Array.from(request.matchAll(/^\[user\] (.*)$/gm), (m) => m[1]!.slice(0, 80))
  const tools = Array.from(new Set(Array.from(request.matchAll(/^\[calls ([\w.-]+)/gm), (m) => m[1]!)))
  const focus = /^Focus on: (.*)$/m.exec(request)?.[1]
  return [
    `Goal: ${users[0] ?? "not stated"}`,
    `Decisions: none recorded (the demo model writes no real summary)`,
    `State of the work: ${users.length} user message${users.length === 1 ? "" : "s"} summarised${
      request.includes("<previous-summary>") ? ", previous summary updated" : ""
    }`,
    `Files and tools touched: ${tools.length === 0 ? "none" : tools.join(", ")}`,
    `Open questions: none${focus === undefined ? "" : ` (focus: ${focus})`}`
  ].join("\n")
}

const answer = (text: string): ReadonlyArray<StreamChunk> => [
  { type: "block-start", index: 0, block: "text" },
  { type: "text-delta", index: 0, text },
  { type: "block-end", index: 0 },
  { type: "usage", usage: { inputTokens: 0, outputTokens: Math.ceil(text.length / 4) } },
  { type: "finish", finish: { kind: "stop" } }
]

/**
 * The demo model's chunks for one request.
 *
 * @since 0.1.0
 * @category constructors
 */
export const respond = (request: ModelRequest): ReadonlyArray<StreamChunk> => {
  const last = request.messages[request.messages.length - 1]
  if (last?.source.kind === SUMMARY_REQUEST_SOURCE_KIND) return answer(summaryOf(textOf(last)))
  const entered = enteredThisStep(request.messages)
  const newest = entered[entered.length - 1]
  // The line the model acts on: the newest user line, or, right after the MCP tool search loaded
  // definitions, the line that asked for a tool not offered before.
  const asking = newest !== undefined && newest.role === "user" && newest.source.kind !== "tool"
    ? newest
    : newest !== undefined && newest.source.kind === "tool"
    ? lineBeforeSearch(request.messages)
    : undefined
  if (asking !== undefined) {
    const call = toolRequest(textOf(asking), request.tools) ?? searchRequest(textOf(asking), request.tools)
    if (call !== undefined) {
      const id = `demo-${request.turn}-${request.step}`
      return [
        { type: "block-start", index: 0, block: "text" },
        { type: "text-delta", index: 0, text: `Calling ${call.name}.` },
        { type: "block-end", index: 0 },
        { type: "block-start", index: 1, block: "tool-call", id, name: call.name },
        { type: "tool-call-delta", index: 1, arguments: call.arguments },
        { type: "block-end", index: 1 },
        { type: "finish", finish: { kind: "stop" } }
      ]
    }
  }
  const lines = entered.length === 0
    ? ["Nothing new entered this step."]
    : [
      `Step ${request.step} of turn ${request.turn} brought ${entered.length} message${
        entered.length === 1 ? "" : "s"
      }:`,
      ...entered.map((m, i) => `${i + 1}. [${describeSource(m)}] ${textOf(m)}`)
    ]
  const text = lines.join("\n")
  // Tokens as the usual estimate (characters / 4), so a long session fills a context window as a real one would.
  const inputTokens = request.messages.reduce((n, m) => n + Math.ceil(textOf(m).length / 4), 0)
  return [
    { type: "block-start", index: 0, block: "text" },
    { type: "text-delta", index: 0, text },
    { type: "block-end", index: 0 },
    { type: "usage", usage: { inputTokens, outputTokens: Math.ceil(text.length / 4) } },
    { type: "finish", finish: { kind: "stop" } }
  ]
}

/**
 * The demo model as a `Model` layer.
 *
 * @since 0.1.0
 * @category layers
 */
export const layer: Layer.Layer<Model> = Layer.succeed(Model, {
  stream: (request) => Stream.suspend(() => Stream.fromIterable(respond(request))).pipe(Stream.rechunk(1))
})
