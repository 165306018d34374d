/**
 * A local HTTP server on 127.0.0.1 that replays recorded responses, one per request in order, as
 * `200 text/event-stream`, then answers every later request with `after`. Every request is recorded
 * with its parsed JSON body.
 */
import type { Effect, Scope } from "effect"
import type { FakeServer } from "../fake/HttpServer.js"
import { serve } from "../fake/HttpServer.js"

/** One request as the server received it. */
export type { ReceivedRequest as Received } from "../fake/HttpServer.js"

/** A running replay server: its base URL and the requests so far. */
export type ReplayServer = FakeServer

/** Starts the server (port 0); it closes with the scope. */
export const listen = (bodies: ReadonlyArray<string>, after: string): Effect.Effect<ReplayServer, never, Scope.Scope> =>
  serve((n, _received, _request, response) => {
    response.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" })
    response.end(bodies[n] ?? after)
  })
