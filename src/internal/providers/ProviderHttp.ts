/**
 * ProviderHttp: one streamed model request over HTTP, shared by every provider adapter.
 *
 * `streamEvents` POSTs a JSON body and streams the response's server-sent events (framed by
 * `@effect/experimental`'s `Sse` parser). Every failure becomes a `ModelError` classified by the
 * one failure table (`ProviderFailure`): an HTTP error status with the provider's own message, a
 * transport failure or a body cut mid-stream as `NETWORK`, and a request that waits too long as
 * `TIMEOUT` (connect: the response headers; first byte: the first body bytes, counted from the
 * request's start; idle: between two body chunks). The key is scrubbed from every message.
 *
 * The `providers/` room: what the model adapters share. HTTP streaming (this module), the failure
 * table (`ProviderFailure`), timeouts (`ProviderTimeouts`), request parameters and usage
 * (`ProviderParameters`, `UsageCounts`), each provider's events turned into stream chunks
 * (`ChatCompletionsEvents`, `ResponsesEvents`, `AnthropicEvents`) and the `@effect/ai` adapter
 * behind `Model.layerLanguageModel` (`LanguageModelAdapter`).
 *
 * @since 0.1.0
 */
import * as Sse from "@effect/experimental/Sse"
import type * as HttpClient from "@effect/platform/HttpClient"
import type * as HttpClientError from "@effect/platform/HttpClientError"
import * as HttpClientRequest from "@effect/platform/HttpClientRequest"
import type * as HttpClientResponse from "@effect/platform/HttpClientResponse"
import { Clock, Duration, Effect, Option, Predicate, Redacted, Stream } from "effect"
import { ModelError } from "../../domain/Errors.js"
import type { LlmFailure } from "../../domain/Values.js"
import type { FailureExtra } from "./ProviderFailure.js"
import { failureOf, fromPayload } from "./ProviderFailure.js"
import type { Timeouts } from "./ProviderTimeouts.js"

/**
 * Where and how one provider request goes: the provider's name for messages, the URL, the
 * headers (authentication included), the key to scrub from messages and the timeouts.
 *
 * @since 0.1.0
 * @category models
 */
export interface Endpoint {
  readonly provider: string
  readonly url: string
  readonly headers: Readonly<Record<string, string>>
  readonly secret?: Redacted.Redacted<string> | undefined
  readonly timeouts: Timeouts
}

/**
 * One server-sent event: its `event` field (`"message"` when absent) and its data.
 *
 * @since 0.1.0
 * @category models
 */
export interface SseEvent {
  readonly event: string
  readonly data: string
}

const REDACTED = "[redacted]"

/**
 * The text with every occurrence of the secret replaced by `[redacted]` (secrets shorter than 4
 * characters are too common as substrings to scrub).
 *
 * @since 0.1.0
 * @category conversions
 */
export const scrub = (secret: Redacted.Redacted<string> | undefined, text: string): string => {
  if (secret === undefined) return text
  const value = Redacted.value(secret)
  return value.length < 4 ? text : text.split(value).join(REDACTED)
}

/**
 * The failure as a `ModelError`, with the endpoint's secret scrubbed from its message.
 *
 * @since 0.1.0
 * @category constructors
 */
export const fail = (endpoint: Pick<Endpoint, "secret">, failure: LlmFailure): ModelError =>
  new ModelError({
    failure: {
      ...failure,
      message: scrub(endpoint.secret, failure.message),
      ...(failure.requestId === undefined ? {} : { requestId: scrub(endpoint.secret, failure.requestId) })
    }
  })

const ERRNO_TEXT: Readonly<Record<string, string>> = {
  ECONNREFUSED: "connection refused",
  ECONNRESET: "connection reset",
  ENOTFOUND: "host not found",
  EAI_AGAIN: "name lookup failed",
  ETIMEDOUT: "connection timed out",
  EHOSTUNREACH: "host unreachable",
  ENETUNREACH: "network unreachable",
  EPIPE: "connection closed",
  UND_ERR_SOCKET: "connection closed",
  UND_ERR_CONNECT_TIMEOUT: "connection timed out",
  CERT_HAS_EXPIRED: "the server's certificate has expired",
  DEPTH_ZERO_SELF_SIGNED_CERT: "the server's certificate is self-signed"
}

/** The first errno-style code in a cause chain (`cause`, `errors` of an AggregateError). */
const errnoOf = (cause: unknown, depth = 0): string | undefined => {
  if (depth > 5 || !Predicate.isObject(cause)) return undefined
  if (Predicate.hasProperty(cause, "code") && Predicate.isString(cause.code) && cause.code in ERRNO_TEXT) {
    return cause.code
  }
  if (Predicate.hasProperty(cause, "errors") && Array.isArray(cause.errors)) {
    for (const inner of cause.errors) {
      const code = errnoOf(inner, depth + 1)
      if (code !== undefined) return code
    }
  }
  return Predicate.hasProperty(cause, "cause") ? errnoOf(cause.cause, depth + 1) : undefined
}

/**
 * A short reason for a transport failure: the errno in words, else the innermost message.
 *
 * @since 0.1.0
 * @category formatting
 */
export const transportReason = (cause: unknown): string => {
  const errno = errnoOf(cause)
  if (errno !== undefined) return ERRNO_TEXT[errno]!
  let current: unknown = cause
  let message: string | undefined
  for (let depth = 0; depth < 5 && Predicate.isObject(current); depth++) {
    if (Predicate.hasProperty(current, "message") && Predicate.isString(current.message) && current.message !== "") {
      message = current.message
    }
    current = Predicate.hasProperty(current, "cause") ? current.cause : undefined
  }
  return message ?? "the connection failed"
}

const hostOf = (url: string): string => {
  try {
    return new URL(url).host
  } catch {
    return url
  }
}

const headerOf = (headers: Readonly<Record<string, string>>, name: string): string | undefined => {
  const value = headers[name]
  return value === undefined || value.trim() === "" ? undefined : value.trim()
}

/** `retry-after-ms`, or `retry-after` in seconds (an HTTP date is not interpreted). */
const retryAfterMs = (headers: Readonly<Record<string, string>>): number | undefined => {
  const ms = Number(headerOf(headers, "retry-after-ms"))
  if (Number.isFinite(ms) && ms >= 0) return ms
  const seconds = Number(headerOf(headers, "retry-after"))
  return Number.isFinite(seconds * 1000) && seconds >= 0 ? seconds * 1000 : undefined
}

const MAX_ERROR_BODY = 64 * 1024

/** The error body as JSON when it parses, else as text. */
const parseBody = (text: string): unknown => {
  const trimmed = text.trim()
  try {
    return JSON.parse(trimmed)
  } catch {
    return trimmed === "" ? undefined : trimmed.slice(0, 500)
  }
}

const isJson = (headers: Readonly<Record<string, string>>): boolean =>
  /^application\/(.+\+)?json\b/i.test(headerOf(headers, "content-type") ?? "")

const seconds = (duration: Duration.Duration): string => Duration.format(duration)

/**
 * POSTs the JSON body to the endpoint and streams the server-sent events of the response. See the
 * module's description for the failures.
 *
 * @since 0.1.0
 * @category constructors
 */
export const streamEvents = (
  client: HttpClient.HttpClient,
  endpoint: Endpoint,
  body: unknown
): Stream.Stream<SseEvent, ModelError> => {
  const host = hostOf(endpoint.url)
  // A host that is its own provider label (an OpenAI-compatible server) is not named twice.
  const at = (preposition: string) => endpoint.provider === host ? "" : ` ${preposition} ${host}`
  const failWith = (failure: LlmFailure) => fail(endpoint, failure)
  const timeout = (what: string, duration: Duration.Duration, variable: string) =>
    failWith(failureOf(
      "timeout",
      `${endpoint.provider}: ${what}${at("from")} within ${seconds(duration)} (${variable})`
    ))

  const requestFailure = (error: HttpClientError.HttpClientError): ModelError =>
    error._tag === "RequestError" && error.reason !== "Transport"
      ? failWith(
        failureOf("invalid-request", `${endpoint.provider}: cannot send the request${at("to")}: ${error.reason}`)
      )
      : failWith(
        failureOf("network", `${endpoint.provider}: cannot connect${at("to")}: ${transportReason(error.cause)}`)
      )

  const bodyFailure = (error: HttpClientError.ResponseError): ModelError =>
    failWith(failureOf(
      "network",
      `${endpoint.provider}: the connection${at("to")} broke during the response: ${transportReason(error.cause)}`
    ))

  const statusFailure = (response: HttpClientResponse.HttpClientResponse) =>
    Effect.gen(function*() {
      const text = yield* response.text.pipe(
        Effect.timeout(endpoint.timeouts.idle),
        Effect.orElseSucceed(() => "")
      )
      const requestId = headerOf(response.headers, "x-request-id") ?? headerOf(response.headers, "request-id")
      const delay = retryAfterMs(response.headers)
      const extra: FailureExtra = {
        status: response.status,
        ...(delay === undefined ? {} : { retryAfterMs: delay }),
        ...(requestId === undefined ? {} : { requestId })
      }
      return failWith(fromPayload(endpoint.provider, parseBody(text.slice(0, MAX_ERROR_BODY)), extra))
    })

  // Some hosts answer a streamed request that fails with 200 and a JSON error body, no stream.
  const jsonBodyFailure = (response: HttpClientResponse.HttpClientResponse) =>
    Effect.gen(function*() {
      const text = yield* response.text.pipe(
        Effect.timeout(endpoint.timeouts.idle),
        Effect.orElseSucceed(() => "")
      )
      const body = parseBody(text.slice(0, MAX_ERROR_BODY))
      return Predicate.hasProperty(body, "error")
        ? failWith(fromPayload(endpoint.provider, body))
        : failWith(failureOf(
          "malformed-output",
          `${endpoint.provider}: expected a stream of server-sent events, got a JSON body: ${text.slice(0, 120)}`
        ))
    })

  const request = HttpClientRequest.post(endpoint.url).pipe(
    HttpClientRequest.setHeaders(endpoint.headers),
    HttpClientRequest.accept("text/event-stream"),
    HttpClientRequest.bodyUnsafeJson(body)
  )

  return Stream.unwrapScoped(Effect.gen(function*() {
    const started = yield* Clock.currentTimeMillis
    const response = yield* client.execute(request).pipe(
      Effect.mapError(requestFailure),
      Effect.timeoutFail({
        duration: endpoint.timeouts.connect,
        onTimeout: () => timeout("no response", endpoint.timeouts.connect, "connect timeout")
      })
    )
    if (response.status < 200 || response.status > 299) return yield* Effect.flip(statusFailure(response))
    if (isJson(response.headers)) return yield* Effect.flip(jsonBodyFailure(response))
    const pull = yield* Stream.toPull(Stream.mapError(response.stream, bodyFailure))
    const headersAt = yield* Clock.currentTimeMillis
    const firstByteLeft = Duration.millis(
      Math.max(0, Duration.toMillis(endpoint.timeouts.firstByte) - (headersAt - started))
    )
    let first = true
    const timedPull = Effect.suspend(() => {
      const [duration, error] = first
        ? [firstByteLeft, () => timeout("no data", endpoint.timeouts.firstByte, "first-byte timeout")]
        : [endpoint.timeouts.idle, () => timeout("nothing more", endpoint.timeouts.idle, "idle timeout")]
      return pull.pipe(
        Effect.timeoutFail({ duration, onTimeout: () => Option.some(error()) }),
        Effect.tap(() => {
          first = false
        })
      )
    })
    const framer = makeFramer()
    return Stream.repeatEffectChunkOption(timedPull).pipe(
      Stream.decodeText(),
      Stream.mapConcat(framer.feed),
      Stream.concat(Stream.sync(() => framer.end()).pipe(Stream.flattenIterables))
    )
  }))
}

/**
 * The SSE framing of one body: `feed` yields the events a text chunk completes; `end` dispatches
 * an event left open at the end of the body when its last line was complete (a line cut in the
 * middle is dropped, as the SSE format prescribes for an incomplete event).
 */
const makeFramer = () => {
  const pending: Array<SseEvent> = []
  let lastChar = ""
  const parser = Sse.makeParser((event) => {
    if (event._tag === "Event") pending.push({ event: event.event, data: event.data })
  })
  const take = () => pending.splice(0, pending.length)
  return {
    feed: (text: string): ReadonlyArray<SseEvent> => {
      if (text === "") return []
      lastChar = text[text.length - 1]!
      parser.feed(text)
      return take()
    },
    end: (): ReadonlyArray<SseEvent> => {
      if (lastChar === "\n" || lastChar === "\r") parser.feed("\n")
      return take()
    }
  }
}
