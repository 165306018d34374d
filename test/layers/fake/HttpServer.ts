/**
 * The transport every fake provider server shares: an HTTP server on 127.0.0.1 (port 0) that records
 * each request with its parsed JSON body, hands it to the server's own answer, and closes with the
 * scope.
 */
import type { Scope } from "effect"
import { Effect } from "effect"
import * as http from "node:http"
import type { AddressInfo } from "node:net"

/**
 * One request as the server received it; `body` is the parsed JSON body (its text when not JSON),
 * `text` the body's bytes as UTF-8 text.
 */
export interface ReceivedRequest {
  readonly method: string
  readonly path: string
  readonly headers: http.IncomingHttpHeaders
  readonly body: any
  readonly text: string
}

/** A running fake server: its base URL and what it has received so far. */
export interface FakeServer {
  readonly url: string
  readonly requests: Effect.Effect<ReadonlyArray<ReceivedRequest>>
}

/** How a fake server answers its `n`-th request (from 0), once the request's body has been read. */
export type Answer = (
  n: number,
  received: ReceivedRequest,
  request: http.IncomingMessage,
  response: http.ServerResponse
) => void

const readBody = (request: http.IncomingMessage): Promise<string> =>
  new Promise((resolve, reject) => {
    const parts: Array<Buffer> = []
    request.on("data", (part: Buffer) => parts.push(part))
    request.on("end", () => resolve(Buffer.concat(parts).toString("utf8")))
    request.on("error", reject)
  })

const parse = (text: string): unknown => {
  try {
    return JSON.parse(text)
  } catch {
    return text
  }
}

/** Starts a server on 127.0.0.1 (port 0) that records every request and lets `answer` respond; it closes with the scope. */
export const serve = (answer: Answer): Effect.Effect<FakeServer, never, Scope.Scope> =>
  Effect.gen(function*() {
    const received: Array<ReceivedRequest> = []
    const server = http.createServer((request, response) => {
      void readBody(request).then((text) => {
        const entry = {
          method: request.method ?? "",
          path: request.url ?? "",
          headers: request.headers,
          body: parse(text),
          text
        }
        received.push(entry)
        answer(received.length - 1, entry, request, response)
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
