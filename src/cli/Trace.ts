/**
 * OpenTelemetry in the CLI: the standard OTLP environment (`OTEL_EXPORTER_OTLP_ENDPOINT`,
 * `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, `OTEL_EXPORTER_OTLP_HEADERS`, `OTEL_SERVICE_NAME`) turns on
 * live OTLP/HTTP export of `chat` and `run`, and `tiller trace ID` sends a stored session's spans with
 * the log's original timestamps.
 *
 * @since 0.1.0
 */
import { HttpClient, HttpClientError } from "@effect/platform"
import * as NodeHttpClient from "@effect/platform-node/NodeHttpClient"
import { Config, Context, Effect, Exit, Layer, Option, Scope } from "effect"
import type { SessionEvent, SessionHeader } from "../domain/Event.js"
import type { SessionId } from "../domain/Ids.js"
import type { PriceTable } from "../domain/Prices.js"
import { Sessions } from "../layers/Sessions.js"
import * as Telemetry from "../layers/Telemetry.js"
import { SessionLog } from "../services/SessionLog.js"
import { CliError, ExitWith } from "./CliError.js"
import * as Output from "./Output.js"

/**
 * The OTLP settings the environment names, or `undefined` when no endpoint is set.
 *
 * @since 0.1.0
 * @category models
 */
export interface OtlpSettings {
  readonly url: string
  readonly serviceName: string
  readonly headers: Readonly<Record<string, string>>
  readonly content: boolean
}

const optionalVar = (name: string) =>
  Effect.map(
    Effect.orElseSucceed(Config.option(Config.string(name)), () => Option.none<string>()),
    Option.getOrUndefined
  )

/**
 * Reads the OTLP environment; `endpoint` (the `--endpoint` option) wins over it.
 * `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true` records message content.
 *
 * @since 0.1.0
 * @category constructors
 */
export const otlpSettings = (endpoint?: string): Effect.Effect<OtlpSettings | undefined> =>
  Effect.gen(function*() {
    const env = {
      OTEL_EXPORTER_OTLP_ENDPOINT: endpoint ?? (yield* optionalVar("OTEL_EXPORTER_OTLP_ENDPOINT")),
      OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: endpoint === undefined
        ? yield* optionalVar("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        : undefined
    }
    const url = Telemetry.tracesEndpoint(env)
    if (url === undefined) return undefined
    const content =
      (yield* optionalVar("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"))?.trim().toLowerCase() === "true"
    return {
      url,
      serviceName: (yield* optionalVar("OTEL_SERVICE_NAME"))?.trim() || "tiller",
      headers: Telemetry.otlpHeaders(yield* optionalVar("OTEL_EXPORTER_OTLP_HEADERS")),
      content
    }
  })

/** An HTTP failure in one line: the client's message and, for a transport error, its cause. */
const describeHttpError = (error: HttpClientError.HttpClientError): string => {
  const cause = error.cause as { readonly message?: unknown; readonly code?: unknown } | undefined
  if (error._tag === "ResponseError") return `the endpoint answered ${error.response.status}`
  return typeof cause?.message === "string" && cause.message !== ""
    ? `${error.message}: ${cause.message}`
    : error.message
}

/** The HTTP client of the exporter: a timeout per request, failures and accepted requests counted. */
const reportingClient = (report: { failures: Array<string>; accepted: number }) =>
  Effect.map(HttpClient.HttpClient, (client) =>
    client.pipe(
      HttpClient.filterStatusOk,
      HttpClient.transform((effect, request) =>
        effect.pipe(
          Effect.timeoutFail({
            duration: "10 seconds",
            onTimeout: () =>
              new HttpClientError.RequestError({ request, reason: "Transport", description: "no answer within 10 s" })
          }),
          Effect.tap(() => Effect.sync(() => void report.accepted++)),
          Effect.tapError((error) => Effect.sync(() => void report.failures.push(describeHttpError(error))))
        )
      )
    ))

/**
 * Runs `body` with the session `id`'s spans exported live when the OTLP environment names an
 * endpoint (otherwise `body` alone, at no cost). The session is held open around `body`, so the events
 * of its closing (a disposed turn's end) are exported too; the last spans are sent at the end.
 *
 * @since 0.1.0
 * @category constructors
 */
export const withLiveTelemetry = <A, E, R>(
  id: SessionId,
  body: Effect.Effect<A, E, R>,
  prices?: PriceTable
): Effect.Effect<A, E | CliError, R | Sessions> =>
  Effect.flatMap(otlpSettings(), (settings): Effect.Effect<A, E | CliError, R | Sessions> => {
    if (settings === undefined) return body
    return Effect.gen(function*() {
      const report = { failures: [] as Array<string>, accepted: 0 }
      // Closed in this order: the session (so a disposal's events are written), the fold (which
      // folds them and ends open spans), the exporter (which sends the last spans).
      const exporterScope = yield* Scope.make()
      const followScope = yield* Scope.make()
      const sessionScope = yield* Scope.make()
      const close = (exit: Exit.Exit<unknown, unknown>): Effect.Effect<void> =>
        Scope.close(sessionScope, exit).pipe(
          Effect.zipRight(Scope.close(followScope, exit)),
          Effect.zipRight(Scope.close(exporterScope, exit)),
          Effect.zipRight(
            report.failures.length === 0
              ? Effect.void
              : Output.errorLine(
                `telemetry: could not send spans to ${settings.url}: ${report.failures[report.failures.length - 1]}`
              )
          )
        )
      const start = Effect.gen(function*() {
        // The HTTP client lives as long as the exporter (its last export runs when the exporter closes).
        const http = yield* Layer.buildWithScope(NodeHttpClient.layerUndici, exporterScope)
        const client = yield* reportingClient(report).pipe(Effect.provide(http))
        const tracer = yield* Telemetry.makeOtlpTracer({ ...settings, shutdownTimeout: "1 second" }).pipe(
          Effect.provideService(HttpClient.HttpClient, client),
          Scope.extend(exporterScope)
        )
        const sessions = yield* Sessions
        const context = yield* sessions.open(id).pipe(
          Scope.extend(sessionScope),
          Effect.mapError((error) => new CliError({ reason: `cannot open ${id} for telemetry: ${error.message}` }))
        )
        yield* Telemetry.follow(Context.get(context, SessionLog), tracer, {
          content: settings.content,
          ...(prices === undefined ? {} : { prices })
        }).pipe(
          Scope.extend(followScope)
        )
      })
      return yield* Effect.zipRight(start, body).pipe(Effect.onExit((exit) => close(exit)))
    })
  })

/**
 * `tiller trace ID`: sends the stored session's spans, with the log's timestamps, to the OTLP
 * endpoint; fails naming the endpoint when it refuses them or cannot be reached.
 *
 * @since 0.1.0
 * @category commands
 */
export const traceSession = (
  header: SessionHeader,
  events: ReadonlyArray<SessionEvent>,
  options: { readonly endpoint?: string; readonly content: boolean; readonly prices?: PriceTable }
): Effect.Effect<void, CliError | ExitWith> =>
  Effect.gen(function*() {
    const settings = yield* otlpSettings(options.endpoint)
    if (settings === undefined) {
      return yield* new CliError({
        reason:
          "no OTLP endpoint: set OTEL_EXPORTER_OTLP_ENDPOINT (for example http://127.0.0.1:4318) or pass --endpoint URL"
      })
    }
    const id = header.sessionId
    const report = { failures: [] as Array<string>, accepted: 0 }
    const spans = yield* Effect.scoped(Effect.gen(function*() {
      const client = yield* reportingClient(report)
      const tracer = yield* Telemetry.makeOtlpTracer({
        ...settings,
        // Every span goes in the one request sent when the scope closes.
        exportInterval: "1 hour",
        maxBatchSize: Number.MAX_SAFE_INTEGER,
        shutdownTimeout: "60 seconds"
      }).pipe(Effect.provideService(HttpClient.HttpClient, client))
      return Telemetry.replayTo(tracer, events, {
        sessionId: header.sessionId,
        content: options.content || settings.content,
        ...(options.prices === undefined ? {} : { prices: options.prices })
      })
    })).pipe(Effect.provide(NodeHttpClient.layerUndici))
    if (spans > 0 && report.accepted === 0) {
      yield* Output.errorLine(
        `could not send the spans of ${id} to ${settings.url}: ${
          report.failures[report.failures.length - 1] ?? "no answer"
        }`
      )
      return yield* new ExitWith({ code: 1 })
    }
    yield* Output.lines([
      `sent ${spans} span${spans === 1 ? "" : "s"} of ${id} (${events.length} events) to ${settings.url}`
    ])
  })
