import { HttpClient } from "@effect/platform"
import * as NodeHttpClient from "@effect/platform-node/NodeHttpClient"
import { describe, expect, it } from "@effect/vitest"
import { Chunk, Duration, Effect, Redacted, Stream } from "effect"
import * as Http from "node:http"
import type { AddressInfo } from "node:net"
import * as Net from "node:net"
import { streamEvents } from "../../../src/internal/providers/ProviderHttp.js"
import type { Timeouts } from "../../../src/internal/providers/ProviderTimeouts.js"

// Real sockets on 127.0.0.1 and the live clock, with timeouts of a fraction of a second.

const KEY = "sk-secret-key-0123456789"

const timeouts = (connect = 5000, firstByte = 5000, idle = 5000): Timeouts => ({
  connect: Duration.millis(connect),
  firstByte: Duration.millis(firstByte),
  idle: Duration.millis(idle)
})

type Handler = (request: Http.IncomingMessage, response: Http.ServerResponse) => void

/** A server for one test; closed (connections included) when the test's scope closes. */
const serve = (handler: Handler) =>
  Effect.acquireRelease(
    Effect.async<{ server: Http.Server; url: string }>((resume) => {
      const server = Http.createServer(handler)
      server.listen(0, "127.0.0.1", () =>
        resume(Effect.succeed({ server, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1/x` })))
    }),
    ({ server }) =>
      Effect.async<void>((resume) => {
        server.closeAllConnections()
        server.close(() =>
          resume(Effect.void)
        )
      })
  )

const run = (url: string, t: Timeouts = timeouts()) =>
  Effect.gen(function*() {
    const client = yield* HttpClient.HttpClient
    const stream = streamEvents(client, {
      provider: "Test",
      url,
      headers: { authorization: `Bearer ${KEY}` },
      secret: Redacted.make(KEY),
      timeouts: t
    }, { hello: "world", prompt: "a long private prompt" })
    return yield* Stream.runCollect(stream).pipe(Effect.map(Chunk.toReadonlyArray), Effect.either)
  }).pipe(Effect.provide(NodeHttpClient.layerUndici))

describe("ProviderHttp.streamEvents", () => {
  it.live("posts the JSON body and frames the events; an event completed by the end of the body is kept", () =>
    Effect.scoped(Effect.gen(function*() {
      let received: unknown
      let auth: string | undefined
      const { url } = yield* serve((request, response) => {
        auth = request.headers.authorization
        let body = ""
        request.on("data", (data) => body += data)
        request.on("end", () => {
          received = JSON.parse(body)
          response.writeHead(200, { "content-type": "text/event-stream" })
          response.write("event: first\ndata: {\"a\":1}\n\n: a comment\n\n")
          response.write("data: line one\ndata: line")
          response.end(" two\n")
        })
      })
      const result = yield* run(url)
      expect(result._tag).toBe("Right")
      expect(result._tag === "Right" ? result.right : []).toEqual([
        { event: "first", data: "{\"a\":1}" },
        { event: "message", data: "line one\nline two" }
      ])
      expect(received).toEqual({ hello: "world", prompt: "a long private prompt" })
      expect(auth).toBe(`Bearer ${KEY}`)
    })))

  it.live("drops an event whose last line the end of the body cut", () =>
    Effect.scoped(Effect.gen(function*() {
      const { url } = yield* serve((_request, response) => {
        response.writeHead(200, { "content-type": "text/event-stream" })
        response.write("data: whole\n\n")
        response.end("data: {\"cut")
      })
      const result = yield* run(url)
      expect(result._tag === "Right" ? result.right : result).toEqual([{ event: "message", data: "whole" }])
    })))

  it.live("classifies an error status with the provider's message, retry-after and request id, the key scrubbed", () =>
    Effect.scoped(Effect.gen(function*() {
      const { url } = yield* serve((_request, response) => {
        response.writeHead(429, { "retry-after": "7", "x-request-id": "req_1", "content-type": "application/json" })
        response.end(JSON.stringify({ error: { type: "rate_limit_error", message: `slow down, ${KEY}` } }))
      })
      const result = yield* run(url)
      expect(result._tag === "Left" ? result.left.failure : result).toEqual({
        message: "Test (HTTP 429): slow down, [redacted]",
        code: "RATE_LIMIT",
        retryable: true,
        status: 429,
        retryAfterMs: 7000,
        requestId: "req_1"
      })
    })))

  it.live("a retry-after too large for a number of milliseconds is ignored, not Infinity", () =>
    Effect.scoped(Effect.gen(function*() {
      const { url } = yield* serve((_request, response) => {
        response.writeHead(429, { "retry-after": "1e306", "content-type": "application/json" })
        response.end(JSON.stringify({ error: { type: "rate_limit_error", message: "slow down" } }))
      })
      const result = yield* run(url)
      const failure = result._tag === "Left" ? result.left.failure : undefined
      expect(failure?.code).toBe("RATE_LIMIT")
      expect(failure !== undefined && "retryAfterMs" in failure).toBe(false)
    })))

  it.live("a 401 with an HTML body is AUTH, not retryable, on one short line", () =>
    Effect.scoped(Effect.gen(function*() {
      const { url } = yield* serve((_request, response) => {
        response.writeHead(401, { "content-type": "text/html" })
        response.end(`<html>\n<body>${"denied ".repeat(200)}</body>\n</html>`)
      })
      const result = yield* run(url)
      const failure = result._tag === "Left" ? result.left.failure : undefined
      expect(failure?.code).toBe("AUTH")
      expect(failure?.retryable).toBe(false)
      expect(failure?.status).toBe(401)
      expect(failure?.message.length).toBeLessThanOrEqual(300)
      expect(failure?.message).not.toContain("\n")
    })))

  it.live("a 200 with a JSON error body instead of a stream is classified by that error", () =>
    Effect.scoped(Effect.gen(function*() {
      const { url } = yield* serve((_request, response) => {
        response.writeHead(200, { "content-type": "application/json; charset=utf-8" })
        response.end(
          JSON.stringify({
            error: { code: "context_length_exceeded", message: "This model's maximum context length is 8192 tokens." }
          })
        )
      })
      const result = yield* run(url)
      expect(result._tag === "Left" ? result.left.failure : result).toEqual({
        message: "Test: This model's maximum context length is 8192 tokens.",
        code: "CONTEXT_OVERFLOW",
        retryable: false
      })
    })))

  it.live("an unreachable server is a retryable NETWORK failure that names the host and the reason, not the request", () =>
    Effect.gen(function*() {
      const port = yield* Effect.async<number>((resume) => {
        const probe = Net.createServer()
        probe.listen(0, "127.0.0.1", () => {
          const free = (probe.address() as AddressInfo).port
          probe.close(() => resume(Effect.succeed(free)))
        })
      })
      const result = yield* run(`http://127.0.0.1:${port}/v1/x`)
      expect(result._tag === "Left" ? result.left.failure : result).toEqual({
        message: `Test: cannot connect to 127.0.0.1:${port}: connection refused`,
        code: "NETWORK",
        retryable: true
      })
    }))

  it.live("a connection dropped in the middle of the body is a retryable NETWORK failure without the request in it", () =>
    Effect.scoped(Effect.gen(function*() {
      const { url } = yield* serve((_request, response) => {
        response.writeHead(200, { "content-type": "text/event-stream" })
        response.write("data: one\n\n")
        setTimeout(() => response.socket?.destroy(), 50)
      })
      const result = yield* run(url)
      const failure = result._tag === "Left" ? result.left.failure : undefined
      expect(failure?.code).toBe("NETWORK")
      expect(failure?.retryable).toBe(true)
      expect(failure?.message).toMatch(/^Test: the connection to 127\.0\.0\.1:\d+ broke during the response/)
      expect(failure?.message).not.toContain("private prompt")
      expect(failure?.message.length).toBeLessThanOrEqual(300)
    })))

  it.live("a server that accepts the request and never answers fails with TIMEOUT after the connect timeout", () =>
    Effect.scoped(Effect.gen(function*() {
      const { url } = yield* serve(() => {})
      const started = Date.now()
      const result = yield* run(url, timeouts(300, 5000, 5000))
      expect(Date.now() - started).toBeLessThan(3000)
      expect(result._tag === "Left" ? result.left.failure : result).toMatchObject({
        code: "TIMEOUT",
        retryable: true,
        message: expect.stringMatching(/^Test: no response from 127\.0\.0\.1:\d+ within 300ms \(connect timeout\)$/)
      })
    })))

  it.live("headers and then nothing fail with TIMEOUT after the first-byte timeout, counted from the request", () =>
    Effect.scoped(Effect.gen(function*() {
      const { url } = yield* serve((_request, response) => {
        response.writeHead(200, { "content-type": "text/event-stream" })
        response.flushHeaders()
      })
      const started = Date.now()
      const result = yield* run(url, timeouts(5000, 400, 5000))
      expect(Date.now() - started).toBeLessThan(3000)
      expect(result._tag === "Left" ? result.left.failure : result).toMatchObject({
        code: "TIMEOUT",
        message: expect.stringContaining("(first-byte timeout)")
      })
    })))

  it.live("a stream that stops between chunks fails with TIMEOUT after the idle timeout", () =>
    Effect.scoped(Effect.gen(function*() {
      const { url } = yield* serve((_request, response) => {
        response.writeHead(200, { "content-type": "text/event-stream" })
        response.write("data: one\n\n")
      })
      const result = yield* run(url, timeouts(5000, 5000, 300))
      expect(result._tag === "Left" ? result.left.failure : result).toMatchObject({
        code: "TIMEOUT",
        retryable: true,
        message: expect.stringContaining("(idle timeout)")
      })
    })))
})
