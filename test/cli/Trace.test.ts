/**
 * `tiller trace ID`: a stored session's spans sent to a local OTLP/HTTP receiver with the log's own
 * timestamps; an endpoint that cannot be reached is a failure that names it.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Exit, Layer, TestServices } from "effect"
import * as http from "node:http"
import type { AddressInfo } from "node:net"
import { traceSession } from "../../src/cli/Trace.js"
import { runSeenSession, seenAgent } from "../fixtures/scriptedSession.js"

const seen = Effect.scoped(
  Effect.flatMap(Layer.build(seenAgent()), (context) => Effect.provide(runSeenSession, context))
)

const receiver = Effect.acquireRelease(
  Effect.async<{ readonly url: string; readonly bodies: Array<any>; readonly server: http.Server }>((resume) => {
    const bodies: Array<any> = []
    const server = http.createServer((req, res) => {
      let body = ""
      req.on("data", (chunk) => (body += chunk))
      req.on("end", () => {
        bodies.push({ url: req.url, body: JSON.parse(body) })
        res.writeHead(200, { "content-type": "application/json" }).end("{}")
      })
    })
    server.listen(
      0,
      "127.0.0.1",
      () =>
        resume(Effect.succeed({ url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, bodies, server }))
    )
  }),
  ({ server }) =>
    Effect.async<void>((resume) => {
      server.close(() => resume(Effect.void))
    })
)

describe("tiller trace", () => {
  it.scoped("sends every span of the stored session in OTLP JSON, with the events' times", () =>
    Effect.gen(function*() {
      const { events, header } = yield* seen
      const server = yield* receiver
      yield* traceSession(header, events, { endpoint: server.url, content: false })
      expect(server.bodies.map((b) => b.url)).toEqual(["/v1/traces"])
      const spans = server.bodies[0].body.resourceSpans[0].scopeSpans[0].spans
      expect(spans).toHaveLength(9)
      const turn = spans.find((s: any) => s.name === "invoke_agent")
      const start = events.find((e) => e.type === "turn/start")!
      expect(turn.startTimeUnixNano).toBe(String(BigInt(start.time) * 1_000_000n))
    }))

  it.scoped("an endpoint that cannot be reached fails with exit code 1", () =>
    Effect.gen(function*() {
      const { events, header } = yield* seen
      const server = yield* receiver
      const closed = server.url
      yield* Effect.async<void>((resume) => {
        server.server.close(() => resume(Effect.void))
      })
      // The exporter's retries wait on the real clock (three attempts a second apart).
      const exit = yield* Effect.exit(
        TestServices.provideLive(traceSession(header, events, { endpoint: closed, content: false }))
      )
      expect(Exit.isFailure(exit) && JSON.stringify(exit.cause)).toContain("ExitWith")
    }), 60_000)
})
