/**
 * A fake OpenAI-compatible Chat Completions server on 127.0.0.1 (an ephemeral port), answering
 * `POST /v1/chat/completions` with scripted replies, one per request, and recording every request
 * it receives. The wire builders produce `chat.completion.chunk` objects as the OpenAI API reference
 * documents them for streamed responses (`data: {json}` events, then `data: [DONE]`).
 */
import type { Scope } from "effect"
import { Effect } from "effect"
import * as Http from "node:http"

/** One request as the server received it. */
export interface Received {
  readonly method: string
  readonly path: string
  readonly headers: Readonly<Record<string, string | undefined>>
  readonly body: unknown
}

/** How the server answers one request. */
export type Reply =
  /** `200 text/event-stream` with `body`, written in `pieces` separate writes. */
  | { readonly _tag: "Stream"; readonly body: string; readonly pieces: number }
  /** Any status with a body computed from the request (for example echoing a header). */
  | {
    readonly _tag: "Status"
    readonly status: number
    readonly headers: Readonly<Record<string, string>>
    readonly body: (received: Received) => string
  }
  /** `200 text/event-stream`, `body`, then the connection is destroyed mid-response. */
  | { readonly _tag: "Drop"; readonly body: string }
  /** The connection is destroyed before any response. */
  | { readonly _tag: "Reset" }
  /** `200 text/event-stream`, `body`, then nothing more until the client closes the connection. */
  | { readonly _tag: "Hang"; readonly body: string }

/** A server-sent event with JSON data. */
export const event = (data: unknown): string => `data: ${JSON.stringify(data)}\n\n`

/** The event that ends a streamed response. */
export const DONE = "data: [DONE]\n\n"

/** A streamed reply: one event per chunk, then `[DONE]` unless `done` is false. */
export const sse = (chunks: ReadonlyArray<unknown>, options: { readonly done?: boolean } = {}): Reply => ({
  _tag: "Stream",
  body: chunks.map(event).join("") + (options.done === false ? "" : DONE),
  pieces: 1
})

/** A streamed reply with a verbatim body, written in `pieces` parts of similar size. */
export const raw = (body: string, pieces = 1): Reply => ({ _tag: "Stream", body, pieces })

/** A reply with `status`, a JSON or text body (a function of the request) and headers. */
export const status = (
  code: number,
  body: string | ((received: Received) => string),
  headers: Readonly<Record<string, string>> = {}
): Reply => ({ _tag: "Status", status: code, headers, body: typeof body === "string" ? () => body : body })

/** A reply that streams `chunks` and then breaks the connection. */
export const drop = (chunks: ReadonlyArray<unknown>): Reply => ({ _tag: "Drop", body: chunks.map(event).join("") })

/** A reply that resets the connection before answering. */
export const reset: Reply = { _tag: "Reset" }

/** A reply that streams `chunks` and then stays open until the client goes away. */
export const hang = (chunks: ReadonlyArray<unknown>): Reply => ({ _tag: "Hang", body: chunks.map(event).join("") })

/** A `chat.completion.chunk` with one choice. */
export const chunk = (delta: Record<string, unknown>, finishReason: string | null = null) => ({
  id: "chatcmpl-fake",
  object: "chat.completion.chunk",
  created: 1_700_000_000,
  model: "fake-model",
  choices: [{ index: 0, delta, logprobs: null, finish_reason: finishReason }]
})

/** The final chunk of `stream_options.include_usage`: no choices, the usage of the response. */
export const usageChunk = (usage: {
  readonly prompt_tokens: number
  readonly completion_tokens: number
  readonly total_tokens: number
  readonly prompt_tokens_details?: { readonly cached_tokens: number }
  readonly completion_tokens_details?: { readonly reasoning_tokens: number }
}) => ({
  id: "chatcmpl-fake",
  object: "chat.completion.chunk",
  created: 1_700_000_000,
  model: "fake-model",
  choices: [],
  usage
})

/** A tool call delta: the first one of a call carries its id, type and name. */
export const toolCall = (
  index: number,
  fields: { readonly id?: string; readonly name?: string; readonly arguments?: string }
) => ({
  index,
  ...(fields.id === undefined ? {} : { id: fields.id, type: "function" }),
  function: {
    ...(fields.name === undefined ? {} : { name: fields.name }),
    arguments: fields.arguments ?? ""
  }
})

/** A running fake server. */
export interface ChatCompletionsServer {
  /** The base URL, `http://127.0.0.1:{port}/v1`. */
  readonly baseUrl: string
  /** Every request received so far, in order. */
  readonly received: Effect.Effect<ReadonlyArray<Received>>
  /** Completes once the client has closed the connection of a `hang` reply. */
  readonly hangClosed: Effect.Effect<void>
}

const readBody = (request: Http.IncomingMessage): Promise<string> =>
  new Promise((resolve, reject) => {
    const parts: Array<Buffer> = []
    request.on("data", (part: Buffer) => parts.push(part))
    request.on("end", () => resolve(Buffer.concat(parts).toString("utf8")))
    request.on("error", reject)
  })

const parseJson = (text: string): unknown => {
  try {
    return JSON.parse(text)
  } catch {
    return text
  }
}

const headersOf = (request: Http.IncomingMessage): Record<string, string | undefined> => {
  const out: Record<string, string | undefined> = {}
  for (const [name, value] of Object.entries(request.headers)) {
    out[name] = Array.isArray(value)
      ? value.join(", ")
      : value
  }
  return out
}

/** Writes `body` in `pieces` parts, each after the previous one was flushed, then ends. */
const writePieces = (response: Http.ServerResponse, body: string, pieces: number, then: () => void) => {
  const bytes = Buffer.from(body, "utf8")
  const size = Math.max(1, Math.ceil(bytes.length / Math.max(1, pieces)))
  const next = (offset: number) => {
    if (offset >= bytes.length) return then()
    response.write(bytes.subarray(offset, offset + size), () => setImmediate(() => next(offset + size)))
  }
  next(0)
}

const answer = (
  reply: Reply | undefined,
  received: Received,
  response: Http.ServerResponse,
  onHangClosed: () => void
) => {
  if (reply === undefined) {
    response.writeHead(400, { "content-type": "application/json" })
    response.end(
      JSON.stringify({ error: { message: "the fake server has no reply left", type: "invalid_request_error" } })
    )
    return
  }
  switch (reply._tag) {
    case "Stream":
      response.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" })
      writePieces(response, reply.body, reply.pieces, () => response.end())
      return
    case "Status":
      response.writeHead(reply.status, { "content-type": "application/json", ...reply.headers })
      response.end(reply.body(received))
      return
    case "Drop":
      response.writeHead(200, { "content-type": "text/event-stream" })
      response.flushHeaders()
      writePieces(response, reply.body, 1, () => response.destroy())
      return
    case "Reset":
      response.socket?.destroy()
      return
    case "Hang":
      response.writeHead(200, { "content-type": "text/event-stream" })
      response.on("close", onHangClosed)
      response.write(reply.body)
      return
  }
}

/** Starts a server answering with `replies` in order (a 400 once they are used up). */
export const make = (replies: ReadonlyArray<Reply>): Effect.Effect<ChatCompletionsServer, never, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.async<{
      readonly server: Http.Server
      readonly port: number
      readonly received: Array<Received>
      readonly hangClosed: Promise<void>
    }>((resume) => {
      const received: Array<Received> = []
      const queue = [...replies]
      let onHangClosed = () => {}
      const hangClosed = new Promise<void>((resolve) => {
        onHangClosed = resolve
      })
      const server = Http.createServer((request, response) => {
        void readBody(request).then((text) => {
          const entry: Received = {
            method: request.method ?? "",
            path: request.url ?? "",
            headers: headersOf(request),
            body: parseJson(text)
          }
          received.push(entry)
          answer(queue.shift(), entry, response, onHangClosed)
        })
      })
      server.listen(0, "127.0.0.1", () => {
        const address = server.address()
        const port = typeof address === "object" && address !== null ? address.port : 0
        resume(Effect.succeed({ server, port, received, hangClosed }))
      })
    }),
    ({ server }) =>
      Effect.async<void>((resume) => {
        server.closeAllConnections()
        server.close(() => resume(Effect.void))
      })
  ).pipe(Effect.map(({ hangClosed, port, received }) => ({
    baseUrl: `http://127.0.0.1:${port}/v1`,
    received: Effect.sync(() => [...received]),
    hangClosed: Effect.promise(() => hangClosed)
  })))
