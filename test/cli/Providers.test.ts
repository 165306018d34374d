import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import { DEFAULT_LINES, numberLines } from "../../src/internal/tools/ReadTool.js"
import { tempDir, tiller } from "./harness.js"
import type { Received } from "./ProviderServer.js"
import * as ProviderServer from "./ProviderServer.js"

// The bundled CLI (bin/tiller.mjs) against a local server for each provider: the bundle once died
// before any request on anthropic: (a bundling error), which no in-process test could see.

const TIMEOUT = 180_000
const KEY = "sk-cli-0123456789-never-printed"
const WEATHER = "sunny, 18 °C"
const ANSWER = "It is sunny, 18 °C."

/** One provider as the CLI reaches it: its variables, its wire format and where a request keeps what. */
interface Provider {
  readonly name: "openai" | "anthropic" | "openai-compatible"
  readonly path: string
  readonly env: (url: string) => Record<string, string>
  /** A response calling `Read {"file_path":"notes.txt"}` (id `read`) and `clock` without arguments (id `clock`). */
  readonly toolTurn: string
  readonly answer: (text: string) => string
  readonly unauthorized: unknown
  readonly keyHeader: (request: Received) => unknown
  readonly declared: (body: any) => Array<{ readonly name: string; readonly parameters: any }>
  readonly toolResults: (body: any) => Array<{ readonly id: string; readonly text: unknown; readonly isError: boolean }>
}

const named = (type: string, payload: unknown) => `event: ${type}\ndata: ${JSON.stringify(payload)}\n\n`
const data = (payload: unknown) => `data: ${JSON.stringify(payload)}\n\n`
const textOf = (content: unknown) =>
  typeof content === "string" ? content : Array.isArray(content) ? content.map((part) => part.text).join("\n") : content

const anthropicMessage = (blocks: ReadonlyArray<Record<string, unknown>>, stopReason: string) => {
  const events: Array<Record<string, unknown>> = [{
    type: "message_start",
    message: {
      id: "msg_1",
      type: "message",
      role: "assistant",
      content: [],
      model: "claude-test",
      stop_reason: null,
      stop_sequence: null,
      usage: { input_tokens: 20, output_tokens: 1 }
    }
  }]
  for (const [index, block] of blocks.entries()) {
    if (block.type === "text") {
      events.push({ type: "content_block_start", index, content_block: { type: "text", text: "" } })
      events.push({ type: "content_block_delta", index, delta: { type: "text_delta", text: block.text } })
    } else {
      events.push({
        type: "content_block_start",
        index,
        content_block: { type: "tool_use", id: block.id, name: block.name, input: {} }
      })
      for (const partial_json of block.json as Array<string>) {
        events.push({ type: "content_block_delta", index, delta: { type: "input_json_delta", partial_json } })
      }
    }
    events.push({ type: "content_block_stop", index })
  }
  events.push({
    type: "message_delta",
    delta: { stop_reason: stopReason, stop_sequence: null },
    usage: { output_tokens: 12 }
  })
  events.push({ type: "message_stop" })
  return events.map((event) => named(event.type as string, event)).join("")
}

const responsesStream = (items: ReadonlyArray<Record<string, unknown>>) => {
  const events: Array<Record<string, unknown>> = []
  const push = (event: Record<string, unknown>) => events.push({ ...event, sequence_number: events.length })
  const response = (status: string, output: ReadonlyArray<unknown>) => ({
    id: "resp_1",
    object: "response",
    status,
    model: "gpt-test",
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
        input_tokens: 20,
        input_tokens_details: { cached_tokens: 0 },
        output_tokens: 12,
        output_tokens_details: { reasoning_tokens: 0 },
        total_tokens: 32
      }
      : null
  })
  push({ type: "response.created", response: response("in_progress", []) })
  const output: Array<unknown> = []
  for (const [output_index, item] of items.entries()) {
    if (item.type === "message") {
      const done = {
        id: "msg_1",
        type: "message",
        status: "completed",
        role: "assistant",
        content: [{ type: "output_text", text: item.text, annotations: [] }]
      }
      push({ type: "response.output_item.added", output_index, item: { ...done, status: "in_progress", content: [] } })
      push({
        type: "response.content_part.added",
        item_id: "msg_1",
        output_index,
        content_index: 0,
        part: { type: "output_text", text: "", annotations: [] }
      })
      push({
        type: "response.output_text.delta",
        item_id: "msg_1",
        output_index,
        content_index: 0,
        delta: item.text,
        logprobs: []
      })
      push({
        type: "response.output_text.done",
        item_id: "msg_1",
        output_index,
        content_index: 0,
        text: item.text,
        logprobs: []
      })
      push({
        type: "response.content_part.done",
        item_id: "msg_1",
        output_index,
        content_index: 0,
        part: done.content[0]
      })
      push({ type: "response.output_item.done", output_index, item: done })
      output.push(done)
    } else {
      const id = `fc_${output_index}`
      const args = (item.json as Array<string>).join("")
      const done = {
        id,
        type: "function_call",
        status: "completed",
        arguments: args,
        call_id: item.id,
        name: item.name
      }
      push({
        type: "response.output_item.added",
        output_index,
        item: { ...done, status: "in_progress", arguments: "" }
      })
      for (const delta of item.json as Array<string>) {
        push({ type: "response.function_call_arguments.delta", item_id: id, output_index, delta })
      }
      push({ type: "response.function_call_arguments.done", item_id: id, output_index, arguments: args })
      push({ type: "response.output_item.done", output_index, item: done })
      output.push(done)
    }
  }
  push({ type: "response.completed", response: response("completed", output) })
  return events.map((event) => named(event.type as string, event)).join("")
}

const chatChunk = (delta: Record<string, unknown> | undefined, finish: string | null, usage?: unknown) => ({
  id: "chatcmpl-1",
  object: "chat.completion.chunk",
  created: 1_700_000_000,
  model: "llama-test",
  choices: delta === undefined ? [] : [{ index: 0, delta, finish_reason: finish }],
  ...(usage === undefined ? {} : { usage })
})

const chatStream = (chunks: ReadonlyArray<unknown>) =>
  [...chunks, chatChunk(undefined, null, { prompt_tokens: 20, completion_tokens: 12, total_tokens: 32 })].map(data)
    .join("") +
  "data: [DONE]\n\n"

const incorrectKey = {
  error: { message: `Incorrect API key provided: ${KEY}`, type: "invalid_request_error", code: "invalid_api_key" }
}

const PROVIDERS: ReadonlyArray<Provider> = [
  {
    name: "openai",
    path: "/v1/responses",
    env: (url) => ({ OPENAI_API_KEY: KEY, OPENAI_BASE_URL: `${url}/v1` }),
    toolTurn: responsesStream([
      { type: "function_call", id: "read", name: "Read", json: ["{\"file_path\":", "\"notes.txt\"}"] },
      { type: "function_call", id: "clock", name: "clock", json: ["{}"] }
    ]),
    answer: (text) => responsesStream([{ type: "message", text }]),
    unauthorized: incorrectKey,
    keyHeader: (request) => request.headers.authorization,
    declared: (body) => body.tools.map((t: any) => ({ name: t.name, parameters: t.parameters })),
    toolResults: (body) =>
      body.input.filter((i: any) => i.type === "function_call_output").map((i: any) => ({
        id: i.call_id,
        text: textOf(i.output),
        isError: false
      }))
  },
  {
    name: "anthropic",
    path: "/v1/messages",
    env: (url) => ({ ANTHROPIC_API_KEY: KEY, ANTHROPIC_BASE_URL: url }),
    toolTurn: anthropicMessage([
      { type: "tool_use", id: "read", name: "Read", json: ["", "{\"file_path\": ", "\"notes.txt\"}"] },
      // A call without arguments: Anthropic streams an empty partial_json.
      { type: "tool_use", id: "clock", name: "clock", json: [""] }
    ], "tool_use"),
    answer: (text) => anthropicMessage([{ type: "text", text }], "end_turn"),
    unauthorized: { type: "error", error: { type: "authentication_error", message: `invalid x-api-key: ${KEY}` } },
    keyHeader: (request) => request.headers["x-api-key"],
    declared: (body) => body.tools.map((t: any) => ({ name: t.name, parameters: t.input_schema })),
    toolResults: (body) =>
      body.messages.at(-1).content.filter((b: any) => b.type === "tool_result").map((b: any) => ({
        id: b.tool_use_id,
        text: textOf(b.content),
        isError: b.is_error === true
      }))
  },
  {
    name: "openai-compatible",
    path: "/v1/chat/completions",
    env: (url) => ({ TILLER_BASE_URL: `${url}/v1`, TILLER_API_KEY: KEY }),
    toolTurn: chatStream([
      chatChunk({
        role: "assistant",
        content: null,
        tool_calls: [{ index: 0, id: "read", type: "function", function: { name: "Read", arguments: "" } }]
      }, null),
      chatChunk({ tool_calls: [{ index: 0, function: { arguments: "{\"file_path\":" } }] }, null),
      chatChunk({ tool_calls: [{ index: 0, function: { arguments: "\"notes.txt\"}" } }] }, null),
      chatChunk({
        tool_calls: [{ index: 1, id: "clock", type: "function", function: { name: "clock", arguments: "{}" } }]
      }, null),
      chatChunk({}, "tool_calls")
    ]),
    answer: (text) => chatStream([chatChunk({ role: "assistant", content: text }, null), chatChunk({}, "stop")]),
    unauthorized: incorrectKey,
    keyHeader: (request) => request.headers.authorization,
    declared: (body) => body.tools.map((t: any) => ({ name: t.function.name, parameters: t.function.parameters })),
    toolResults: (body) =>
      body.messages.filter((m: any) => m.role === "tool").map((m: any) => ({
        id: m.tool_call_id,
        text: textOf(m.content),
        isError: false
      }))
  }
]

/** `tiller --db <dir>/t.db --model <provider>:<model> run <prompt> --session s` in `dir`, CI set, stdin empty. */
const run = (dir: string, provider: Provider, url: string, prompt: string) =>
  tiller(dir, [
    "--db",
    path.join(dir, "t.db"),
    "--model",
    `${provider.name}:test-model`,
    "run",
    prompt,
    "--session",
    "s"
  ], {
    env: { CI: "true", ...provider.env(url) }
  })

/** The lines of stderr other than the session line `tiller run` always prints. */
const failureLines = (stderr: string) => stderr.split("\n").filter((line) => line !== "" && line !== "session s")

for (const provider of PROVIDERS) {
  describe(`tiller run --model ${provider.name}:MODEL (the bundled CLI)`, () => {
    it.scopedLive(
      "a tool round trip: the answer on stdout, the tool results sent back as their text",
      () =>
        Effect.gen(function*() {
          const dir = yield* tempDir
          fs.writeFileSync(path.join(dir, "notes.txt"), WEATHER)
          const server = yield* ProviderServer.listen([
            ProviderServer.sse(provider.toolTurn),
            ProviderServer.sse(provider.answer(ANSWER))
          ])
          const outcome = yield* run(
            dir,
            provider,
            server.url,
            "What is the weather in the notes, and what time is it?"
          )
          expect(outcome).toEqual({ code: 0, stdout: `${ANSWER}\n`, stderr: "session s\n" })

          const requests = yield* server.requests
          expect(requests.map((r) => `${r.method} ${r.path}`)).toEqual([
            `POST ${provider.path}`,
            `POST ${provider.path}`
          ])
          expect(requests.map((r) => r.body.model)).toEqual(["test-model", "test-model"])
          expect(requests.map(provider.keyHeader).map(String)).toEqual([
            expect.stringContaining(KEY),
            expect.stringContaining(KEY)
          ])
          // A tool without parameters is declared as an object with no properties.
          const declared = provider.declared(requests[0]!.body)
          expect(declared.map((t) => t.name)).toEqual([
            "Bash",
            "Edit",
            "Glob",
            "Grep",
            "Read",
            "Write",
            "clock",
            "read_history",
            "wait"
          ])
          const clock = declared.find((t) => t.name === "clock")!.parameters
          expect(clock).toMatchObject({ type: "object", properties: {} })
          expect(Object.keys(clock).filter((key) => key === "anyOf" || key === "$id")).toEqual([])
          const [read, time] = provider.toolResults(requests[1]!.body)
          expect(read).toEqual({ id: "read", text: numberLines(WEATHER, 1, DEFAULT_LINES), isError: false })
          expect(time).toMatchObject({ id: "clock", isError: false })
          expect(time!.text).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$/)
          expect(provider.toolResults(requests[1]!.body).length).toBe(2)
          expect(JSON.stringify(requests[1]!.body)).not.toContain(
            JSON.stringify(JSON.stringify(numberLines(WEATHER, 1, DEFAULT_LINES)))
          )
        }),
      TIMEOUT
    )

    it.scopedLive(
      "a 401: a non-zero exit, one short line on stderr naming the failure, no stack, no key",
      () =>
        Effect.gen(function*() {
          const dir = yield* tempDir
          const server = yield* ProviderServer.listen([ProviderServer.json(401, provider.unauthorized)])
          const outcome = yield* run(dir, provider, server.url, "hello")
          expect(outcome.code).not.toBe(0)
          expect(outcome.code).not.toBe(null)
          expect(outcome.stdout).toBe("")
          const lines = failureLines(outcome.stderr)
          expect(lines, outcome.stderr).toHaveLength(1)
          expect(lines[0]).toContain("AUTH")
          expect(lines[0]).toMatch(/invalid x-api-key|Incorrect API key provided/)
          expect(lines[0]!.length).toBeLessThanOrEqual(400)
          expect(outcome.stderr).not.toMatch(/^\s+at /m)
          expect(outcome.stdout + outcome.stderr).not.toContain(KEY)
          // Not retried: an authentication failure is final.
          expect((yield* server.requests).length).toBe(1)
        }),
      TIMEOUT
    )
  })
}
