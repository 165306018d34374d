/**
 * The in-process OpenAI-compatible server of W1's Chat Completions row: a `node:http` server on
 * 127.0.0.1 (an ephemeral port) in the runner's own process, answering every `POST
 * /v1/chat/completions` at once with one server-sent-events body: the `n`-th request of a run gets
 * a `chat.completion.chunk` calling `echo` with `{ i: n }` (call id `call-n`), a finish chunk and a
 * usage chunk, and the request after the last step the text `done`; each body ends with
 * `data: [DONE]`. The bodies are built before the timed run.
 *
 * It counts the requests of a run and the requests whose last chat message is the `tool` message
 * answering the previous step's call. That check reads the body's text without parsing it: the
 * previous result must appear as `{"role":"tool","tool_call_id":"call-(n-1)","content":"ok"}`
 * closing the `messages` array (`],"stream":true` follows it, the adapter's field order), so the
 * server's own cost stays small beside the client's.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import type { Scope } from "effect"
import * as http from "node:http"
import type { AddressInfo } from "node:net"
import { W1_ECHO_RESULT } from "./line.js"

/**
 * What the server saw during the current run.
 *
 * @since 0.1.0
 * @category models
 */
export interface ChatCounts {
  /** `POST /v1/chat/completions` requests answered. */
  readonly requests: number
  /** Requests after the first whose last message was the previous step's tool result. */
  readonly sawResult: number
}

/**
 * A running server: its base URL (`http://127.0.0.1:PORT/v1`), `script(steps)` to prepare a run
 * of `steps` tool steps (resetting the counts) and the counts of the run so far.
 *
 * @since 0.1.0
 * @category models
 */
export interface ChatServer {
  readonly baseUrl: string
  readonly script: (steps: number) => void
  readonly counts: () => ChatCounts
}

const event = (data: unknown): string => `data: ${JSON.stringify(data)}\n\n`

const chunk = (choices: ReadonlyArray<unknown>, usage?: unknown) => ({
  id: "chatcmpl-w1",
  object: "chat.completion.chunk",
  created: 0,
  model: "w1",
  choices,
  ...(usage === undefined ? {} : { usage })
})

const finishAndUsage = (reason: string): string =>
  event(chunk([{ index: 0, delta: {}, finish_reason: reason }])) +
  event(chunk([], { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 })) +
  "data: [DONE]\n\n"

/**
 * The SSE body answering the `i`-th request (from 1): an `echo` call with `{ i }`.
 *
 * @since 0.1.0
 * @category fixtures
 */
export const echoCallBody = (i: number): string =>
  event(chunk([{
    index: 0,
    delta: {
      role: "assistant",
      content: null,
      tool_calls: [{
        index: 0,
        id: `call-${i}`,
        type: "function",
        function: { name: "echo", arguments: JSON.stringify({ i }) }
      }]
    },
    finish_reason: null
  }])) + finishAndUsage("tool_calls")

/**
 * The SSE body of the final answer, the text `done`.
 *
 * @since 0.1.0
 * @category fixtures
 */
export const answerBody: string =
  event(chunk([{ index: 0, delta: { role: "assistant", content: "done" }, finish_reason: null }])) +
  finishAndUsage("stop")

// The text that closes a request's messages when the last one answers call `id` (wherever the body
// puts its `messages`: the adapter lists them last).
const previousResultTail = (id: string): string =>
  `${JSON.stringify({ role: "tool", tool_call_id: id, content: W1_ECHO_RESULT })}]`

const readBody = (request: http.IncomingMessage): Promise<string> =>
  new Promise((resolve, reject) => {
    const parts: Array<Buffer> = []
    request.on("data", (part: Buffer) => parts.push(part))
    request.on("end", () => resolve(Buffer.concat(parts).toString("utf8")))
    request.on("error", reject)
  })

/**
 * Starts the server on 127.0.0.1 (port 0); it closes with the scope. A request to another path or
 * method is answered 404.
 *
 * @since 0.1.0
 * @category constructors
 */
export const startChatServer: Effect.Effect<ChatServer, never, Scope.Scope> = Effect.gen(function*() {
  let bodies: ReadonlyArray<string> = []
  let tails: ReadonlyArray<string> = []
  let requests = 0
  let sawResult = 0
  const server = http.createServer((request, response) => {
    if (request.method !== "POST" || request.url !== "/v1/chat/completions") {
      response.writeHead(404).end()
      return
    }
    void readBody(request).then((body) => {
      const n = ++requests
      if (n > 1 && body.includes(tails[n - 2] ?? "\u0000")) sawResult++
      response.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" })
      response.end(bodies[n - 1] ?? answerBody)
    })
  })
  const port = yield* Effect.acquireRelease(
    Effect.async<number>((resume) => {
      server.listen(0, "127.0.0.1", () => resume(Effect.succeed((server.address() as AddressInfo).port)))
    }),
    () =>
      Effect.async<void>((resume) => {
        server.closeAllConnections()
        server.close(() => resume(Effect.void))
      })
  )
  return {
    baseUrl: `http://127.0.0.1:${port}/v1`,
    script: (steps) => {
      bodies = Array.from({ length: steps }, (_, k) => echoCallBody(k + 1))
      tails = Array.from({ length: steps }, (_, k) => previousResultTail(`call-${k + 1}`))
      requests = 0
      sawResult = 0
    },
    counts: () => ({ requests, sawResult })
  }
})
