/**
 * A small provider server on 127.0.0.1 for the CLI tests: each request is answered by the next
 * scripted reply (a streamed body or an error status), every request recorded with its parsed body;
 * for OpenAI Responses, Anthropic Messages and Chat Completions alike (the path is not checked here).
 */
import type { Scope } from "effect"
import { Effect } from "effect"
import * as http from "node:http"
import type { AddressInfo } from "node:net"

/** One reply: a status, its headers and body. */
export interface Reply {
  readonly status: number
  readonly headers: Readonly<Record<string, string>>
  readonly body: string
}

/** One request as the server received it. */
export interface Received {
  readonly method: string
  readonly path: string
  readonly headers: http.IncomingHttpHeaders
  readonly body: any
}

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
  Effect.gen(function*() {
    const received: Array<Received> = []
    const server = http.createServer((request, response) => {
      let text = ""
      request.setEncoding("utf8")
      request.on("data", (piece: string) => (text += piece))
      request.on("end", () => {
        let body: unknown = text
        try {
          body = JSON.parse(text)
        } catch {
          // kept as text
        }
        received.push({ method: request.method ?? "", path: request.url ?? "", headers: request.headers, body })
        const reply = replies[received.length - 1] ?? json(500, { error: { message: "test server: script exhausted" } })
        response.writeHead(reply.status, reply.headers).end(reply.body)
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
    return { url: `http://127.0.0.1:${port}`, requests: Effect.sync(() => [...received]) }
  }) satisfies Effect.Effect<unknown, never, Scope.Scope>
