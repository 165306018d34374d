/**
 * A small provider server on 127.0.0.1 for the CLI tests: each request is answered by the next
 * scripted reply (a streamed body or an error status), every request recorded with its parsed body;
 * for OpenAI Responses, Anthropic Messages and Chat Completions alike (the path is not checked here).
 */
import type { ReceivedRequest } from "../layers/fake/HttpServer.js"
import { serve } from "../layers/fake/HttpServer.js"

/** One reply: a status, its headers and body. */
export interface Reply {
  readonly status: number
  readonly headers: Readonly<Record<string, string>>
  readonly body: string
}

/** One request as the server received it. */
export type Received = ReceivedRequest

/** A `200 text/event-stream` reply. */
export const sse = (body: string): Reply => ({ status: 200, headers: { "content-type": "text/event-stream" }, body })

/** A JSON reply with `status`. */
export const json = (status: number, body: unknown): Reply => ({
  status,
  headers: { "content-type": "application/json" },
  body: JSON.stringify(body)
})

/** Starts the server (port 0); the n-th request gets `replies[n]`, later ones a 500. It closes with the scope. */
export const listen = (replies: ReadonlyArray<Reply>) =>
  serve((n, _received, _request, response) => {
    const reply = replies[n] ?? json(500, { error: { message: "test server: script exhausted" } })
    response.writeHead(reply.status, reply.headers).end(reply.body)
  })
