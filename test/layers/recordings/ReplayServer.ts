/**
 * A local HTTP server on 127.0.0.1 that replays recorded responses, one per request in order, as
 * `200 text/event-stream`, then answers every later request with `after`. Every request is recorded
 * with its parsed JSON body.
 */
import type { Scope } from "effect"
import { Effect } from "effect"
import * as http from "node:http"
import type { AddressInfo } from "node:net"

/** One request as the server received it. */
export interface Received {
  readonly method: string
  readonly path: string
  readonly headers: http.IncomingHttpHeaders
  readonly body: any
}

/** A running replay server: its base URL and the requests so far. */
export interface ReplayServer {
  readonly url: string
  readonly requests: Effect.Effect<ReadonlyArray<Received>>
}

const readBody = (request: http.IncomingMessage): Promise<string> =>
  new Promise((resolve, reject) => {
    let text = ""
    request.setEncoding("utf8")
    request.on("data", (piece: string) => (text += piece))
    request.on("end", () => resolve(text))
    request.on("error", reject)
  })

const parse = (text: string): unknown => {
  try {
    return JSON.parse(text)
  } catch {
    return text
  }
}

/** Starts the server (port 0); it closes with the scope. */
export const listen = (bodies: ReadonlyArray<string>, after: string): Effect.Effect<ReplayServer, never, Scope.Scope> =>
  Effect.gen(function*() {
    const received: Array<Received> = []
    const server = http.createServer((request, response) => {
      void readBody(request).then((text) => {
        const n = received.length
        received.push({ method: request.method ?? "", path: request.url ?? "", headers: request.headers, body: parse(text) })
        response.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" })
        response.end(bodies[n] ?? after)
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
  })
