/**
 * Telemetry: a session's log as OpenTelemetry spans (GenAI semantic conventions). The layers follow
 * the session log of an agent and emit spans as events are appended, from a fiber of their own: the
 * loop does no telemetry work, and an agent built without them pays nothing. `replay` emits the spans
 * of a stored log with its original timestamps.
 *
 * @since 0.1.0
 */
import type { HttpClient } from "@effect/platform"
import type { Duration, Scope } from "effect"
import { Effect, Fiber, Layer, Stream } from "effect"
import type * as Tracer from "effect/Tracer"
import type { SessionEvent } from "../domain/Event.js"
import type { PriceTable } from "../domain/Prices.js"
import * as OptionalPeer from "../internal/peers/OptionalPeer.js"
import { makeEmitter } from "../internal/telemetry/SpanEmitter.js"
import { makeSpanFold } from "../internal/telemetry/SpanFold.js"
import { SessionLog } from "../services/SessionLog.js"

/**
 * What the spans record: message content (entered text, model output, tool arguments and results)
 * is left out unless `content` is true; `tiller.cost.usd` is billed with `prices` (default:
 * tiller's table, `domain/Prices`).
 *
 * @since 0.1.0
 * @category models
 */
export interface TelemetryOptions {
  readonly content?: boolean
  readonly prices?: PriceTable
}

/**
 * Where OTLP/HTTP export sends spans: `url` is the traces endpoint (`…/v1/traces`), encoded as JSON.
 *
 * @since 0.1.0
 * @category models
 */
export interface OtlpOptions extends TelemetryOptions {
  readonly url: string
  readonly serviceName?: string
  readonly headers?: Readonly<Record<string, string>>
  /** How often buffered spans are sent (default 5 s); the rest is sent when the layer closes. */
  readonly exportInterval?: Duration.DurationInput
  /** How long closing waits for the last export (default 3 s). */
  readonly shutdownTimeout?: Duration.DurationInput
  /** Spans per request; a full batch is sent at once (default 1000). */
  readonly maxBatchSize?: number
}

/**
 * Follows `log` from its first live event, emitting spans to `tracer` until the scope closes; closing
 * emits what is left and ends any span still open (marked `tiller.unfinished`).
 *
 * @since 0.1.0
 * @category constructors
 */
export const follow = (
  log: SessionLog["Type"],
  tracer: Tracer.Tracer,
  options: TelemetryOptions = {}
): Effect.Effect<void, never, Scope.Scope> =>
  Effect.gen(function*() {
    const fold = makeSpanFold({ sessionId: log.sessionId, ...options })
    const emitter = makeEmitter(tracer)
    // The stored prefix only sets the fold's state (model, pending inbox); its spans are not emitted.
    const stored = yield* log.events
    for (const event of stored) if (event.seq < log.firstLiveSeq) fold.step(event)
    let next = log.firstLiveSeq
    const feed = (event: SessionEvent) => {
      if (event.seq < next) return
      next = event.seq + 1
      for (const action of fold.step(event)) emitter.emit(action)
    }
    const fiber = yield* log.stream(log.firstLiveSeq).pipe(
      Stream.runForEach((event) => Effect.sync(() => feed(event))),
      Effect.forkScoped
    )
    yield* Effect.addFinalizer(() =>
      Effect.gen(function*() {
        yield* Fiber.interrupt(fiber)
        const events = yield* log.events
        for (let i = next; i < events.length; i++) feed(events[i]!)
        const now = yield* Effect.clockWith((clock) => clock.currentTimeMillis)
        for (const action of fold.close(now)) emitter.emit(action)
      })
    )
  })

/**
 * Emits the spans of a stored log to the current tracer, with the events' original timestamps.
 * Returns the number of spans emitted.
 *
 * @since 0.1.0
 * @category constructors
 */
export const replay = (
  events: ReadonlyArray<SessionEvent>,
  options: TelemetryOptions & { readonly sessionId: string }
): Effect.Effect<number> => Effect.map(Effect.tracer, (tracer) => replayTo(tracer, events, options))

/**
 * Emits the spans of a stored log to `tracer`; returns the number of spans emitted.
 *
 * @since 0.1.0
 * @category utils
 */
export const replayTo = (
  tracer: Tracer.Tracer,
  events: ReadonlyArray<SessionEvent>,
  options: TelemetryOptions & { readonly sessionId: string }
): number => {
  const fold = makeSpanFold(options)
  const emitter = makeEmitter(tracer)
  for (const event of events) for (const action of fold.step(event)) emitter.emit(action)
  const last = events[events.length - 1]
  for (const action of fold.close(last === undefined ? 0 : last.time)) emitter.emit(action)
  return emitter.ended()
}

/**
 * Live spans of the agent's session to the current Effect tracer (for example the OpenTelemetry SDK
 * tracer of `@effect/opentelemetry`'s `NodeSdk.layer`).
 *
 * @since 0.1.0
 * @category layers
 */
export const layer = (options: TelemetryOptions = {}): Layer.Layer<never, never, SessionLog> =>
  Layer.scopedDiscard(Effect.gen(function*() {
    const log = yield* SessionLog
    const tracer = yield* Effect.tracer
    yield* follow(log, tracer, options)
  }))

// `@effect/opentelemetry` is an optional peer of tiller, loaded when an OTLP tracer is made; without
// it, making one dies with a message saying what to install.
const loadOtlp = Effect.orDie(OptionalPeer.load(
  OptionalPeer.OPENTELEMETRY,
  () => Promise.all([import("@effect/opentelemetry/OtlpTracer"), import("@effect/opentelemetry/OtlpSerialization")]),
  (cause) => cause
))

/**
 * An OTLP/HTTP (JSON) tracer of its own, used only for the session's spans (the application's
 * `Effect.withSpan` spans are not sent through it); needs the optional peer `@effect/opentelemetry`.
 *
 * @since 0.1.0
 * @category constructors
 */
export const makeOtlpTracer = (
  options: OtlpOptions
): Effect.Effect<Tracer.Tracer, never, HttpClient.HttpClient | Scope.Scope> =>
  Effect.flatMap(loadOtlp, ([OtlpTracer, OtlpSerialization]) =>
    OtlpTracer.make({
      url: options.url,
      resource: { serviceName: options.serviceName ?? "tiller" },
      ...(options.headers === undefined ? {} : { headers: options.headers }),
      ...(options.exportInterval === undefined ? {} : { exportInterval: options.exportInterval }),
      ...(options.shutdownTimeout === undefined ? {} : { shutdownTimeout: options.shutdownTimeout }),
      ...(options.maxBatchSize === undefined ? {} : { maxBatchSize: options.maxBatchSize })
    }).pipe(Effect.provide(OtlpSerialization.layerJson)))

/**
 * Live spans of the agent's session sent by OTLP/HTTP (JSON) to `url`; the last spans are sent when
 * the layer closes.
 *
 * @since 0.1.0
 * @category layers
 */
export const layerOtlp = (options: OtlpOptions): Layer.Layer<never, never, SessionLog | HttpClient.HttpClient> =>
  Layer.scopedDiscard(Effect.gen(function*() {
    const log = yield* SessionLog
    const tracer = yield* makeOtlpTracer(options)
    yield* follow(log, tracer, options)
  }))

/**
 * The traces endpoint named by the standard OpenTelemetry environment: `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`
 * as is, else `OTEL_EXPORTER_OTLP_ENDPOINT` + `/v1/traces`; `undefined` when neither is set.
 *
 * @since 0.1.0
 * @category utils
 */
export const tracesEndpoint = (env: Readonly<Record<string, string | undefined>>): string | undefined => {
  const traces = env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT?.trim()
  if (traces !== undefined && traces !== "") return traces
  const base = env.OTEL_EXPORTER_OTLP_ENDPOINT?.trim()
  if (base === undefined || base === "") return undefined
  return `${base.replace(/\/+$/, "")}/v1/traces`
}

/**
 * The `OTEL_EXPORTER_OTLP_HEADERS` list (`k=v,k2=v2`, values URL-encoded) as a record.
 *
 * @since 0.1.0
 * @category utils
 */
export const otlpHeaders = (value: string | undefined): Record<string, string> => {
  const headers: Record<string, string> = {}
  for (const pair of (value ?? "").split(",")) {
    const at = pair.indexOf("=")
    if (at <= 0) continue
    const key = pair.slice(0, at).trim()
    try {
      headers[key] = decodeURIComponent(pair.slice(at + 1).trim())
    } catch {
      headers[key] = pair.slice(at + 1).trim()
    }
  }
  return headers
}
