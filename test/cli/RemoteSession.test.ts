/**
 * The `--server` client against a stand-in HTTP server: a dropped event stream is opened again
 * with `Last-Event-ID` and no event is lost or repeated; a server that never answers is
 * `unreachable` within the connect timeout; a 401 and a 4xx are typed, and the token goes only
 * into the `Authorization` header.
 */
import * as NodeHttpClient from "@effect/platform-node/NodeHttpClient"
import * as HttpClient from "@effect/platform/HttpClient"
import { describe, expect, it } from "@effect/vitest"
import { Chunk, Effect, Option, Redacted, Stream } from "effect"
import * as http from "node:http"
import type { AddressInfo } from "node:net"
import * as RemoteSession from "../../src/cli/RemoteSession.js"
import { SessionId } from "../../src/domain/Ids.js"

const TOKEN = "stand-in-token"

const eventOf = (seq: number) => ({ type: "turn/start", seq, time: 1_000 + seq, data: { turn: seq + 1 } })

interface Seen {
  readonly url: string
  readonly lastEventId: string | undefined
  readonly authorization: string | undefined
}

/** A stand-in server on a free port; `handler` answers every request. */
const standIn = (handler: (request: http.IncomingMessage, response: http.ServerResponse) => void) =>
  Effect.acquireRelease(
    Effect.async<{ readonly base: string; readonly server: http.Server }>((resume) => {
      const server = http.createServer(handler)
      server.listen(
        0,
        "127.0.0.1",
        () => resume(Effect.succeed({ base: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, server }))
      )
    }),
    ({ server }) =>
      Effect.async<void>((resume) => {
        server.closeAllConnections()
        server.close(() => resume(Effect.void))
      })
  )

const sessionOn = (base: string, token = TOKEN, timeouts?: Partial<RemoteSession.Timeouts>) =>
  Effect.map(HttpClient.HttpClient, (client) =>
    RemoteSession.make(client, {
      server: base,
      token: Redacted.make(token),
      sessionId: SessionId.make("s-1"),
      ...(timeouts === undefined ? {} : { timeouts })
    }))

describe("RemoteSession", () => {
  it.scopedLive("a dropped event stream is opened again from the last event seen (Last-Event-ID)", () =>
    Effect.gen(function*() {
      const seen: Array<Seen> = []
      const { base } = yield* standIn((request, response) => {
        const lastEventId = request.headers["last-event-id"] as string | undefined
        seen.push({ url: request.url ?? "", lastEventId, authorization: request.headers.authorization })
        const from = lastEventId !== undefined
          ? Number(lastEventId) + 1
          : Number(new URL(request.url!, base).searchParams.get("from"))
        response.writeHead(200, { "content-type": "text/event-stream" })
        // Two events per connection, then the connection is cut.
        for (const seq of [from, from + 1]) {
          response.write(`id: ${seq}\nevent: turn/start\ndata: ${JSON.stringify(eventOf(seq))}\n\n`)
        }
        // Cut once the events are out (no end of the chunked body: the connection breaks).
        setTimeout(() => response.destroy(), 50)
      })
      const session = yield* sessionOn(base)
      const events = yield* session.events(3).pipe(Stream.take(6), Stream.runCollect)
      expect(Chunk.toReadonlyArray(events).map((event) => event.seq)).toEqual([3, 4, 5, 6, 7, 8])
      expect(seen.map((s) => [s.url, s.lastEventId])).toEqual([
        ["/sessions/s-1/events?from=3", undefined],
        ["/sessions/s-1/events?from=5", "4"],
        ["/sessions/s-1/events?from=7", "6"]
      ])
      expect(seen.every((s) => s.authorization === `Bearer ${TOKEN}`)).toBe(true)
    }).pipe(Effect.provide(NodeHttpClient.layerUndici)))

  it.scopedLive("a server that never answers is unreachable within the connect timeout", () =>
    Effect.gen(function*() {
      const { base } = yield* standIn(() => {})
      const session = yield* sessionOn(base, TOKEN, { connect: "300 millis" })
      const error = yield* Effect.flip(session.deliver("followup", "hi"))
      expect(error).toMatchObject({ _tag: "ServerError", kind: "unreachable" })
      expect(error.message).toBe(`cannot reach the server ${base}: no answer within 300ms`)
    }).pipe(Effect.provide(NodeHttpClient.layerUndici)))

  it.scopedLive("a 401 and a refused request are typed; a missing session's info is None", () =>
    Effect.gen(function*() {
      const { base } = yield* standIn((request, response) => {
        const json = (status: number, body: unknown) => {
          response.writeHead(status, { "content-type": "application/json" })
          response.end(JSON.stringify(body))
        }
        if (request.headers.authorization !== `Bearer ${TOKEN}`) {
          return json(401, { error: "Unauthorized", message: "a valid bearer token is needed" })
        }
        if (request.method === "GET") return json(404, { error: "SessionNotFound", message: "session s-1 not found" })
        return json(400, { error: "InvalidRequest", message: "invalid message id" })
      })
      const wrong = yield* sessionOn(base, "wrong-token")
      const unauthorized = yield* Effect.flip(wrong.info)
      expect(unauthorized).toMatchObject({ kind: "unauthorized", status: 401 })
      expect(unauthorized.message).not.toContain("wrong-token")
      const session = yield* sessionOn(base)
      expect(yield* session.info).toEqual(Option.none())
      const refused = yield* Effect.flip(session.deliver("steer", "hi", "bad id"))
      expect(refused).toMatchObject({ kind: "refused", status: 400, code: "InvalidRequest" })
      expect(refused.message).toBe(`the server ${base} refused the request (400 InvalidRequest): invalid message id`)
    }).pipe(Effect.provide(NodeHttpClient.layerUndici)))
})
