/**
 * SessionHttp: the sessions of a cluster over HTTP/JSON. Deliveries answer `202` with the message
 * id once the operation is acknowledged; a status (with the session's header), server-sent events of the log (resumable with
 * `Last-Event-ID`) and a health check. Every request needs a bearer token (compared in constant
 * time, never logged); bad input is a typed JSON error with a 4xx status and changes nothing.
 *
 * @since 0.1.0
 */
import type { Sharding } from "@effect/cluster/Sharding"
import * as HttpIncomingMessage from "@effect/platform/HttpIncomingMessage"
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import type { Duration } from "effect"
import { Effect, Either, Option, Schema, Stream } from "effect"
import { createHash, timingSafeEqual } from "node:crypto"
import { RequestRejected } from "../domain/Errors.js"
import { MessageId, SessionId } from "../domain/Ids.js"
import { userMessage } from "../domain/Message.js"
import { SessionStore } from "../services/SessionStore.js"
import type { SessionClient } from "./ClusterSessions.js"
import { client, followLog } from "./ClusterSessions.js"

/**
 * Options of the session server.
 *
 * @since 0.1.0
 * @category models
 */
export interface SessionHttpOptions {
  /** The accepted bearer tokens (at least one). */
  readonly tokens: ReadonlyArray<string>
  /** The largest request body accepted, in bytes (default 64 KiB). */
  readonly maxBodyBytes?: number
  /** How often a followed log is read for new events (default 250 ms). */
  readonly pollInterval?: Duration.DurationInput
}

const digest = (value: string) => createHash("sha256").update(value, "utf8").digest()

/**
 * Whether `given` is one of `tokens`, compared in constant time (over SHA-256 digests, so the
 * lengths never differ and every token is compared).
 *
 * @since 0.1.0
 * @category auth
 */
export const tokenMatches = (tokens: ReadonlyArray<string>, given: string): boolean => {
  const candidate = digest(given)
  let matched = false
  for (const token of tokens) matched = timingSafeEqual(digest(token), candidate) || matched
  return matched
}

const rejected = (status: number, code: string, reason: string) => new RequestRejected({ status, code, reason })

const DeliveryBody = Schema.Struct({
  text: Schema.String,
  id: Schema.optional(Schema.String)
})

const CancelBody = Schema.Struct({
  keepInbox: Schema.optional(Schema.Boolean),
  operationId: Schema.optional(Schema.NonEmptyString)
})

// Statuses of the session's own typed failures.
const STATUS_OF: Record<string, number> = {
  InvalidEvent: 400,
  DuplicateMessage: 409,
  SessionNotFound: 404,
  AgentBusy: 503,
  AgentDisposed: 503,
  MalformedLog: 500,
  UnsupportedLogVersion: 500,
  PersistenceError: 503,
  MailboxFull: 503,
  AlreadyProcessingMessage: 409
}

const errorResponse = (error: { readonly _tag: string; readonly message?: string }) => {
  const status = error._tag === "RequestRejected" ? (error as RequestRejected).status : STATUS_OF[error._tag] ?? 500
  const code = error._tag === "RequestRejected" ? (error as RequestRejected).code : error._tag
  // The message of a storage failure may name the database: only its kind is said.
  const reason = error._tag === "RequestRejected"
    ? (error as RequestRejected).reason
    : error._tag === "PersistenceError"
    ? "storage failure"
    : error.message ?? code
  return HttpServerResponse.unsafeJson({ error: code, message: reason }, { status })
}

const OPERATIONS = new Set(["followup", "steer", "inject", "cancel"])

/**
 * The server's request handler over the sharding and the session store.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (
  options: SessionHttpOptions
): Effect.Effect<
  Effect.Effect<HttpServerResponse.HttpServerResponse, never, HttpServerRequest.HttpServerRequest>,
  never,
  Sharding | SessionStore
> =>
  Effect.gen(function*() {
    if (options.tokens.length === 0 || options.tokens.some((token) => token.length === 0)) {
      return yield* Effect.dieMessage("SessionHttp: at least one non-empty token is needed")
    }
    const context = yield* Effect.context<Sharding | SessionStore>()
    const store = yield* SessionStore
    const maxBodyBytes = options.maxBodyBytes ?? 64 * 1024
    const pollInterval = options.pollInterval ?? "250 millis"

    const authorize = (request: HttpServerRequest.HttpServerRequest) => {
      const header = request.headers["authorization"] ?? ""
      const match = /^Bearer (.+)$/.exec(header)
      return match !== null && tokenMatches(options.tokens, match[1]!)
        ? Effect.void
        : Effect.fail(rejected(401, "Unauthorized", "a valid bearer token is needed"))
    }

    const readJson = (request: HttpServerRequest.HttpServerRequest, optional: boolean) =>
      Effect.gen(function*() {
        const length = Number(request.headers["content-length"] ?? "0")
        if (length > maxBodyBytes) {
          return yield* rejected(413, "PayloadTooLarge", `the body exceeds ${maxBodyBytes} bytes`)
        }
        const text = yield* request.text.pipe(
          HttpIncomingMessage.withMaxBodySize(Option.some(maxBodyBytes)),
          Effect.mapError(() => rejected(413, "PayloadTooLarge", `the body exceeds ${maxBodyBytes} bytes`))
        )
        if (Buffer.byteLength(text, "utf8") > maxBodyBytes) {
          return yield* rejected(413, "PayloadTooLarge", `the body exceeds ${maxBodyBytes} bytes`)
        }
        if (text.trim() === "" && optional) return {}
        return yield* Effect.try({
          try: () => JSON.parse(text) as unknown,
          catch: () => rejected(400, "MalformedJson", "the body is not JSON")
        })
      })

    const decode = <A, I>(schema: Schema.Schema<A, I>, value: unknown) =>
      Schema.decodeUnknown(schema)(value).pipe(
        Effect.mapError((error) => rejected(400, "InvalidRequest", error.message.split("\n")[0] ?? "invalid body"))
      )

    const sessionIdOf = (raw: string) =>
      Either.match(Schema.decodeUnknownEither(SessionId)(decodeURIComponent(raw)), {
        onLeft: () => Effect.fail(rejected(400, "InvalidRequest", "invalid session id")),
        onRight: Effect.succeed
      })

    const stored = (id: SessionId) =>
      Effect.flatMap(store.exists(id), (exists) =>
        exists ? Effect.void : Effect.fail(rejected(404, "SessionNotFound", `session ${id} not found`)))

    const deliver = (session: SessionClient, operation: "followup" | "steer" | "inject", body: unknown) =>
      Effect.gen(function*() {
        const { id, text } = yield* decode(DeliveryBody, body)
        const messageId = id ?? crypto.randomUUID()
        if (id !== undefined && Option.isNone(Schema.decodeUnknownOption(MessageId)(id))) {
          return yield* rejected(400, "InvalidRequest", "invalid message id")
        }
        const message = yield* Effect.try({
          try: () =>
            userMessage({ id: messageId, text }),
          catch: (error) => rejected(400, "InvalidRequest", error instanceof Error ? error.message : "invalid message")
        })
        yield* session[operation](message)
        return HttpServerResponse.unsafeJson({ messageId }, { status: 202 })
      })

    const events = (id: SessionId, request: HttpServerRequest.HttpServerRequest, query: URLSearchParams) =>
      Effect.gen(function*() {
        const lastEventId = request.headers["last-event-id"]
        const fromText = lastEventId !== undefined && lastEventId !== "" ? undefined : query.get("from") ?? "0"
        const from = fromText === undefined ? Number(lastEventId) + 1 : Number(fromText)
        if (!Number.isInteger(from) || from < 0) {
          return yield* rejected(400, "InvalidRequest", "from and Last-Event-ID must be non-negative integers")
        }
        yield* stored(id)
        const encoder = new TextEncoder()
        const body = followLog(id, from, { interval: pollInterval }).pipe(
          Stream.map((event) =>
            encoder.encode(`id: ${event.seq}\nevent: ${event.type}\ndata: ${JSON.stringify(event)}\n\n`)
          ),
          Stream.provideContext(context),
          Stream.catchAll(() => Stream.empty)
        )
        return HttpServerResponse.stream(body, {
          contentType: "text/event-stream",
          headers: { "cache-control": "no-cache" }
        })
      })

    const route = (request: HttpServerRequest.HttpServerRequest) =>
      Effect.gen(function*() {
        yield* authorize(request)
        const url = new URL(request.url, "http://localhost")
        const parts = url.pathname.split("/").filter((part) => part !== "")
        if (parts.length === 1 && parts[0] === "health") {
          if (request.method !== "GET") return yield* rejected(405, "MethodNotAllowed", "use GET")
          return HttpServerResponse.unsafeJson({ ok: true })
        }
        if (parts[0] !== "sessions" || parts.length < 2 || parts.length > 3) {
          return yield* rejected(404, "NotFound", `no route ${url.pathname}`)
        }
        const id = yield* sessionIdOf(parts[1]!)
        const operation = parts[2]
        if (operation === undefined) {
          if (request.method !== "GET") return yield* rejected(405, "MethodNotAllowed", "use GET")
          yield* stored(id)
          const session = yield* client(id)
          const status = yield* session.status
          // The header too: a client renders a session's timeline from it and the events.
          const { header } = yield* store.load(id)
          return HttpServerResponse.unsafeJson({ ...status, header })
        }
        if (operation === "events") {
          if (request.method !== "GET") return yield* rejected(405, "MethodNotAllowed", "use GET")
          return yield* events(id, request, url.searchParams)
        }
        if (!OPERATIONS.has(operation)) {
          return yield* rejected(404, "UnknownOperation", `no session operation ${operation}`)
        }
        if (request.method !== "POST") return yield* rejected(405, "MethodNotAllowed", "use POST")
        const body = yield* readJson(request, operation === "cancel")
        const session = yield* client(id)
        if (operation === "cancel") {
          const given = yield* decode(CancelBody, body)
          const operationId = given.operationId ?? crypto.randomUUID()
          yield* stored(id)
          yield* session.cancel({
            operationId,
            ...(given.keepInbox === undefined ? {} : { keepInbox: given.keepInbox })
          })
          return HttpServerResponse.unsafeJson({ operationId }, { status: 202 })
        }
        return yield* deliver(session, operation as "followup" | "steer" | "inject", body)
      })

    // The handler itself is the result (an Effect run once per request).
    const handler = Effect.flatMap(HttpServerRequest.HttpServerRequest, (request) =>
      route(request).pipe(
        Effect.provide(context),
        Effect.catchAll((error) => Effect.succeed(errorResponse(error)))
      ))
    return handler
  })
