/**
 * A session on a `tiller serve` server, as the command line's `--server URL` reaches it: its
 * status and header, the deliveries (`followup`, `steer`, `inject`), `cancel`, and its log as
 * server-sent events followed live. Every request carries the bearer token (never printed) and
 * waits at most a connect timeout for an answer; a dropped event stream is opened again from the
 * last event seen (`Last-Event-ID`). An unreachable server, a refused token and a refused request
 * are a {@link ServerError} that says so in one line.
 *
 * @since 0.1.0
 */
import * as Sse from "@effect/experimental/Sse"
import type * as HttpClient from "@effect/platform/HttpClient"
import type * as HttpClientError from "@effect/platform/HttpClientError"
import * as HttpClientRequest from "@effect/platform/HttpClientRequest"
import type * as HttpClientResponse from "@effect/platform/HttpClientResponse"
import { Config, Duration, Effect, Either, Option, Redacted, Schema, Stream } from "effect"
import * as fs from "node:fs"
import type { SessionEvent } from "../domain/Event.js"
import { SessionHeader } from "../domain/Event.js"
import type { SessionId } from "../domain/Ids.js"
import { decodeUntrusted } from "../internal/durability/DecodedEvents.js"
import { transportReason } from "../internal/providers/ProviderHttp.js"
import { SessionStatus } from "../layers/SessionEntity.js"
import { CliError } from "./CliError.js"
import { TOKEN_ENV } from "./Serve.js"

/**
 * A failure of talking to the server: `unreachable` (no connection or no answer in time; a
 * dropped event stream is retried first), `unauthorized` (401), `refused` (another error status,
 * with the server's code) or `protocol` (an answer that is not what the API sends).
 *
 * @since 0.1.0
 * @category errors
 */
export class ServerError extends Schema.TaggedError<ServerError>("tiller/ServerError")("ServerError", {
  kind: Schema.Literal("unreachable", "unauthorized", "refused", "protocol"),
  status: Schema.optional(Schema.Int),
  code: Schema.optional(Schema.String),
  reason: Schema.String
}) {
  override get message(): string {
    return this.reason
  }
}

/**
 * A session's status on the server (as `GET /sessions/{id}` answers) with its header.
 *
 * @since 0.1.0
 * @category models
 */
export const SessionInfo = Schema.Struct({ ...SessionStatus.fields, header: SessionHeader })

/**
 * A session's status with its header.
 *
 * @since 0.1.0
 * @category models
 */
export type SessionInfo = typeof SessionInfo.Type

/**
 * The deliveries the server takes.
 *
 * @since 0.1.0
 * @category models
 */
export type Delivery = "followup" | "steer" | "inject"

/**
 * One session on the server.
 *
 * @since 0.1.0
 * @category models
 */
export interface RemoteSession {
  readonly sessionId: SessionId
  /** The server's base URL, for messages. */
  readonly server: string
  /** The status and header; `None` when the session is not stored (yet). */
  readonly info: Effect.Effect<Option.Option<SessionInfo>, ServerError>
  /** Delivers `text` (under `id` when given); answers the message id once the server acknowledged it. */
  readonly deliver: (operation: Delivery, text: string, id?: string) => Effect.Effect<string, ServerError>
  /** Cancels the running turn as the user; `keepInbox` keeps the pending input. */
  readonly cancel: (keepInbox: boolean) => Effect.Effect<void, ServerError>
  /**
   * The session's events from `fromSeq` on, followed live (the stream does not end by itself); a
   * session not stored yet is waited for.
   */
  readonly events: (fromSeq: number) => Stream.Stream<SessionEvent, ServerError>
}

/**
 * How the client waits: for an answer's headers (`connect`), between two bytes of an event
 * stream before it is opened again (`idle`; the server sends nothing while the log does not
 * grow), and how many times in a row an event stream may fail to open before the server counts as
 * unreachable.
 *
 * @since 0.1.0
 * @category models
 */
export interface Timeouts {
  readonly connect: Duration.DurationInput
  readonly idle: Duration.DurationInput
  readonly reconnects: number
}

/**
 * The default timeouts: 10 s to connect, an idle stream reopened after 30 s, 5 reconnects.
 *
 * @since 0.1.0
 * @category constants
 */
export const DEFAULT_TIMEOUTS: Timeouts = { connect: "10 seconds", idle: "30 seconds", reconnects: 5 }

/**
 * The bearer token of `--server`: the first line of `--token-file`, else the first of the
 * comma-separated tokens of `TILLER_SERVER_TOKEN` (the names `tiller serve` reads).
 *
 * @since 0.1.0
 * @category constructors
 */
export const readToken = (tokenFile: string | undefined): Effect.Effect<Redacted.Redacted<string>, CliError> =>
  Effect.gen(function*() {
    const raw = tokenFile !== undefined
      ? yield* Effect.try({
        try: () => fs.readFileSync(tokenFile, "utf8").split(/\r?\n/),
        catch: () => new CliError({ reason: `cannot read the token file ${tokenFile}` })
      })
      : (yield* Config.string(TOKEN_ENV).pipe(Config.withDefault(""))).split(",")
    const token = raw.map((line) => line.trim()).find((line) => line !== "")
    if (token === undefined) {
      return yield* new CliError({ reason: `--server needs a token: set ${TOKEN_ENV} or give --token-file FILE` })
    }
    return Redacted.make(token)
  }).pipe(Effect.catchTag("ConfigError", () => Effect.fail(new CliError({ reason: `invalid ${TOKEN_ENV}` }))))

/** The answer of an error status, in one line. */
const statusError = (server: string, response: HttpClientResponse.HttpClientResponse, timeout: Duration.Duration) =>
  Effect.gen(function*() {
    const text = yield* response.text.pipe(Effect.timeout(timeout), Effect.orElseSucceed(() => ""))
    const body = Either.getOrUndefined(
      Schema.decodeUnknownEither(Schema.parseJson(Schema.Struct({ error: Schema.String, message: Schema.String })))(
        text
      )
    )
    if (response.status === 401) {
      return new ServerError({
        kind: "unauthorized",
        status: 401,
        reason: `the server ${server} refused the token (401): give the one it accepts in ${TOKEN_ENV} or --token-file`
      })
    }
    return new ServerError({
      kind: "refused",
      status: response.status,
      ...(body === undefined ? {} : { code: body.error }),
      reason: `the server ${server} refused the request (${response.status}${
        body === undefined ? "" : ` ${body.error}`
      }): ${body?.message ?? (text.slice(0, 200) || "no reason given")}`
    })
  })

// How often the events of a session not stored yet are asked for again.
const NOT_STORED_POLL = "500 millis"

// A stream that ended, broke or stayed silent (`idle`), opened again from the last event seen.
class Dropped extends Schema.TaggedError<Dropped>("tiller/Dropped")("Dropped", { idle: Schema.Boolean }) {}

/**
 * A client of session `sessionId` on `server` (a base URL such as `http://127.0.0.1:8080`).
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (
  client: HttpClient.HttpClient,
  options: {
    readonly server: string
    readonly token: Redacted.Redacted<string>
    readonly sessionId: SessionId
    readonly timeouts?: Partial<Timeouts>
  }
): RemoteSession => {
  const server = options.server.replace(/\/+$/, "")
  const timeouts = { ...DEFAULT_TIMEOUTS, ...options.timeouts }
  const connect = Duration.decode(timeouts.connect)
  const idle = Duration.decode(timeouts.idle)
  const path = `/sessions/${encodeURIComponent(options.sessionId)}`

  const unreachable = (why: string) =>
    new ServerError({ kind: "unreachable", reason: `cannot reach the server ${server}: ${why}` })
  const requestFailure = (error: HttpClientError.HttpClientError) =>
    error._tag === "RequestError" && error.reason !== "Transport"
      ? new ServerError({ kind: "protocol", reason: `cannot send a request to ${server}: ${error.reason}` })
      : unreachable(transportReason(error.cause))

  const authorized = (request: HttpClientRequest.HttpClientRequest) =>
    HttpClientRequest.setHeader(request, "authorization", `Bearer ${Redacted.value(options.token)}`)

  // One request, its answer's headers awaited at most `connect`.
  const execute = (request: HttpClientRequest.HttpClientRequest) =>
    client.execute(authorized(request)).pipe(
      Effect.mapError(requestFailure),
      Effect.timeoutFail({
        duration: connect,
        onTimeout: () => unreachable(`no answer within ${Duration.format(connect)}`)
      })
    )

  const answer = <A, I>(response: HttpClientResponse.HttpClientResponse, schema: Schema.Schema<A, I>) =>
    response.json.pipe(
      Effect.timeoutFail({
        duration: connect,
        onTimeout: () => unreachable(`the answer did not arrive within ${Duration.format(connect)}`)
      }),
      Effect.flatMap(Schema.decodeUnknown(schema)),
      Effect.mapError((error) =>
        error._tag === "ServerError"
          ? error
          : new ServerError({ kind: "protocol", reason: `${server} answered what the session API does not send` })
      )
    )

  const send = <A, I>(request: HttpClientRequest.HttpClientRequest, schema: Schema.Schema<A, I>) =>
    Effect.flatMap(execute(request), (response) =>
      response.status >= 200 && response.status < 300
        ? answer(response, schema)
        : Effect.flatMap(statusError(server, response, connect), Effect.fail))

  const info = Effect.flatMap(execute(HttpClientRequest.get(`${server}${path}`)), (response) =>
    response.status === 404
      ? Effect.flatMap(statusError(server, response, connect), (error) =>
        error.code === "SessionNotFound" ? Effect.succeed(Option.none()) : Effect.fail(error))
      : response.status >= 200 && response.status < 300
      ? Effect.map(answer(response, SessionInfo), Option.some)
      : Effect.flatMap(statusError(server, response, connect), Effect.fail))

  const deliver = (operation: Delivery, text: string, id?: string) =>
    Effect.map(
      send(
        HttpClientRequest.post(`${server}${path}/${operation}`).pipe(
          HttpClientRequest.bodyUnsafeJson(id === undefined ? { text } : { id, text })
        ),
        Schema.Struct({ messageId: Schema.String })
      ),
      (answered) => answered.messageId
    )

  const cancel = (keepInbox: boolean) =>
    Effect.asVoid(send(
      HttpClientRequest.post(`${server}${path}/cancel`).pipe(HttpClientRequest.bodyUnsafeJson({ keepInbox })),
      Schema.Struct({ operationId: Schema.String })
    ))

  const events = (fromSeq: number): Stream.Stream<SessionEvent, ServerError> => {
    // The next seq to read: advanced by every event handed on, so a reopened stream resumes there.
    let next = fromSeq
    const open = (failures: number): Stream.Stream<SessionEvent, ServerError> =>
      Stream.unwrapScoped(Effect.gen(function*() {
        const request = HttpClientRequest.get(`${server}${path}/events`).pipe(
          HttpClientRequest.setUrlParam("from", String(next)),
          HttpClientRequest.accept("text/event-stream"),
          // Reopened after events: resumed after the last one seen, as an event stream resumes.
          next > fromSeq ? HttpClientRequest.setHeader("last-event-id", String(next - 1)) : (r) => r
        )
        const opened = yield* Effect.either(execute(request))
        if (Either.isLeft(opened)) return reopen(opened.left, failures, false)
        const response = opened.right
        if (response.status < 200 || response.status > 299) {
          const refused = yield* statusError(server, response, connect)
          // A session not stored yet (a new chat's, before its first line) is waited for.
          return refused.code === "SessionNotFound"
            ? Stream.unwrap(Effect.as(Effect.sleep(NOT_STORED_POLL), open(failures)))
            : Stream.fail(refused)
        }
        let seen = false
        const pending: Array<Sse.Event> = []
        const parser = Sse.makeParser((event) => {
          if (event._tag === "Event") pending.push(event)
        })
        const body = response.stream.pipe(
          Stream.mapError(() => new Dropped({ idle: false })),
          Stream.timeoutFail(() => new Dropped({ idle: true }), idle),
          Stream.decodeText(),
          Stream.mapEffect((text): Either.Either<ReadonlyArray<SessionEvent>, ServerError> => {
            parser.feed(text)
            const decoded: Array<SessionEvent> = []
            for (const event of pending.splice(0, pending.length)) {
              const parsed = Either.flatMap(
                Either.try({ try: () => JSON.parse(event.data) as unknown, catch: () => "not JSON" }),
                decodeUntrusted
              )
              if (Either.isLeft(parsed)) {
                return Either.left(
                  new ServerError({ kind: "protocol", reason: `${server} sent an event that does not decode` })
                )
              }
              // An event already handed on (a resumed stream repeats nothing, but be sure) is skipped.
              if (parsed.right.seq >= next) decoded.push(parsed.right)
            }
            return Either.right(decoded)
          }),
          Stream.flattenIterables,
          Stream.tap((event) =>
            Effect.sync(() => {
              next = event.seq + 1
              seen = true
            })
          )
        )
        return body.pipe(
          Stream.concat(Stream.fail(new Dropped({ idle: false }))),
          Stream.catchAll((error) => error._tag === "Dropped" ? reopen(error, failures, seen) : Stream.fail(error))
        )
      }))
    // A stream that carried events or stayed silent is opened again at once; one that could not be
    // opened, or ended empty, is tried again with a backoff, up to `reconnects` times in a row.
    const reopen = (
      error: ServerError | Dropped,
      failures: number,
      carried: boolean
    ): Stream.Stream<SessionEvent, ServerError> => {
      const count = carried || (error._tag === "Dropped" && error.idle) ? 0 : failures + 1
      if (count > timeouts.reconnects) {
        return Stream.fail(
          error._tag === "ServerError" ? error : unreachable("the event stream keeps ending without events")
        )
      }
      const delay = Duration.millis(count === 0 ? 0 : Math.min(2000, 100 * 2 ** count))
      return Stream.unwrap(Effect.as(Effect.sleep(delay), open(count)))
    }
    return Stream.suspend(() => open(0))
  }

  return { sessionId: options.sessionId, server, info, deliver, cancel, events }
}
