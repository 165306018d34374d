/**
 * Telemetry: the spans of a scripted session (tools, a retry, a hook's denial, a compaction, a
 * cancel) as an in-memory tracer receives them, live and replayed with the log's own times; and
 * OTLP/HTTP (JSON) export to a local receiver.
 */
import * as NodeHttpClient from "@effect/platform-node/NodeHttpClient"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import * as http from "node:http"
import type { AddressInfo } from "node:net"
import * as Telemetry from "../../src/layers/Telemetry.js"
import type { RecordedSpan } from "../fixtures/recordingTracer.js"
import { recordingTracer } from "../fixtures/recordingTracer.js"
import { runSeenSession, seenAgent } from "../fixtures/scriptedSession.js"

const runWith = (extra: Layer.Layer<never, never, any>) =>
  Effect.scoped(Effect.flatMap(Layer.build(seenAgent(extra)), (context) => Effect.provide(runSeenSession, context)))

/** The session's spans only (the tracer also sees the Effect.fn spans of the test's own calls). */
const sessionSpans = (spans: ReadonlyArray<RecordedSpan>) =>
  spans.filter((s) => s.attributes["gen_ai.conversation.id"] === "seen")

const shapeOf = (s: RecordedSpan) =>
  `${s.parentName === undefined ? "" : `${s.parentName} > `}${s.name}${s.error === undefined ? "" : ` ! ${s.error}`}`

describe("Telemetry.layer", () => {
  it.effect("a turn is invoke_agent, each request attempt chat {model}, each tool execute_tool {name}, with GenAI attributes", () =>
    Effect.gen(function*() {
      const { ended, tracer } = recordingTracer()
      const { events } = yield* runWith(Telemetry.layer().pipe(Layer.provide(Layer.setTracer(tracer))))
      const spans = sessionSpans(ended)
      expect(spans.map(shapeOf)).toEqual([
        "invoke_agent > chat m ! RATE_LIMIT: slow down",
        "invoke_agent > chat m",
        "invoke_agent > execute_tool clock",
        "invoke_agent > execute_tool shell ! DENIED: ToolDeniedError (DENIED)",
        "invoke_agent > chat m",
        "invoke_agent",
        "tiller.compaction",
        "invoke_agent > chat m",
        "invoke_agent"
      ])
      const [failed, first, clock, shell, second, turn1, compaction, cut, turn2] = spans as [
        RecordedSpan,
        ...Array<RecordedSpan>
      ]
      expect(failed.attributes).toMatchObject({
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "p",
        "gen_ai.request.model": "m",
        "gen_ai.response.finish_reasons": ["error"],
        "error.type": "RATE_LIMIT",
        "tiller.turn": 1,
        "tiller.step": 1,
        "tiller.attempt": 1
      })
      expect(failed.kind).toBe("client")
      expect(first!.attributes).toMatchObject({
        "gen_ai.usage.input_tokens": 120,
        "gen_ai.usage.output_tokens": 30,
        "gen_ai.response.finish_reasons": ["tool_call"],
        "tiller.attempt": 2
      })
      expect(second!.attributes).toMatchObject({ "gen_ai.response.finish_reasons": ["stop"], "tiller.step": 2 })
      expect(clock!.attributes).toMatchObject({
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "clock",
        "gen_ai.tool.call.id": "call-1",
        "tiller.seq": events.find((e) => e.type === "tool/call")!.seq
      })
      expect(shell!.attributes["error.type"]).toBe("DENIED")
      expect(turn1!.attributes).toMatchObject({
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.conversation.id": "seen",
        "gen_ai.provider.name": "p",
        "gen_ai.request.model": "m",
        "gen_ai.usage.input_tokens": 280,
        "gen_ai.usage.output_tokens": 35,
        "tiller.turn": 1,
        "tiller.turn.end_reason": "completed",
        "tiller.turn.steps": 2
      })
      // The turn span starts and ends at its events' times; the retried attempt starts after the backoff.
      const time = (type: string, n = 0) => events.filter((e) => e.type === type)[n]!.time
      expect([turn1!.start, turn1!.end]).toEqual([time("turn/start"), time("turn/end")])
      expect(first!.start).toBe(
        time("llm/retry") + (events.find((e) => e.type === "llm/retry")!.data as { delayMs: number }).delayMs
      )
      expect(turn1!.events.map((e) => e.name)).toEqual([
        "tiller.inbox.inserted",
        "tiller.inbox.inserted",
        "tiller.inbox.claimed",
        "tiller.inbox.claimed",
        "tiller.step.start",
        "tiller.message.entered",
        "tiller.message.entered",
        "tiller.llm.retry",
        "tiller.hook.decision",
        "tiller.step.start"
      ])
      expect(turn1!.events[5]!.attributes).toMatchObject({
        "tiller.message.source": "plugin:geo",
        "tiller.message.id": "ctx"
      })
      expect(turn1!.events[8]!.attributes).toMatchObject({
        "tiller.hook": "tool_pre",
        "tiller.decision": "deny",
        "gen_ai.tool.name": "shell"
      })
      expect(compaction!.attributes).toMatchObject({
        "tiller.compaction.kind": "prune",
        "tiller.compaction.trigger": "manual"
      })
      expect(compaction!.events.map((e) => e.name)).toEqual(["tiller.compaction.end"])
      expect(cut!.attributes["gen_ai.response.finish_reasons"]).toEqual(["interrupted"])
      expect(turn2!.attributes).toMatchObject({
        "tiller.turn": 2,
        "tiller.turn.end_reason": "aborted",
        "tiller.turn.end_detail": "user"
      })
      // Content is opt-in: no text of a message, output or tool call is recorded by default.
      const keys = spans.flatMap((
        s
      ) => [...Object.keys(s.attributes), ...s.events.flatMap((e) => Object.keys(e.attributes))])
      expect(
        keys.filter((k) =>
          k.includes("text") || k.includes("messages") || k.includes("arguments") ||
          k.includes("result.") && !k.includes("seq") && !k.includes("is_error")
        )
      ).toEqual([])
    }))

  it.effect("each chat span and turn carries its cost at the given prices, or says the model has no price", () =>
    Effect.gen(function*() {
      const priced = recordingTracer()
      yield* runWith(
        Telemetry.layer({ prices: { m: { input: 1, output: 2 } } }).pipe(Layer.provide(Layer.setTracer(priced.tracer)))
      )
      const [, first, , , , turn1] = sessionSpans(priced.ended) as [RecordedSpan, ...Array<RecordedSpan>]
      expect(first!.attributes["tiller.cost.usd"]).toBeCloseTo((120 * 1 + 30 * 2) / 1e6, 12)
      expect(turn1!.attributes["tiller.cost.usd"]).toBeCloseTo((280 * 1 + 35 * 2) / 1e6, 12)
      const unpriced = recordingTracer()
      yield* runWith(Telemetry.layer().pipe(Layer.provide(Layer.setTracer(unpriced.tracer))))
      const [, plain, , , , plainTurn] = sessionSpans(unpriced.ended) as [RecordedSpan, ...Array<RecordedSpan>]
      expect(plain!.attributes["tiller.cost.unpriced"]).toBe("no price for model m")
      expect(plain!.attributes["tiller.cost.usd"]).toBeUndefined()
      expect(plainTurn!.attributes["tiller.cost.unpriced"]).toBe("no price for model m")
    }))

  it.effect("content: true records entered text, the model's output and tool arguments and results", () =>
    Effect.gen(function*() {
      const { ended, tracer } = recordingTracer()
      yield* runWith(Telemetry.layer({ content: true }).pipe(Layer.provide(Layer.setTracer(tracer))))
      const spans = sessionSpans(ended)
      const clock = spans.find((s) => s.name === "execute_tool clock")!
      expect(clock.attributes).toMatchObject({
        "gen_ai.tool.call.arguments": "{}",
        "gen_ai.tool.call.result": "now: 12:00"
      })
      const answer = spans.find((s) => s.name === "chat m" && s.attributes["tiller.step"] === 2)!
      expect(JSON.parse(answer.attributes["gen_ai.output.messages"] as string)).toEqual([{
        role: "assistant",
        parts: [{ type: "text", text: "It is noon." }]
      }])
      const entered = spans.find((s) => s.name === "invoke_agent")!.events.find((e) =>
        e.attributes["tiller.message.id"] === "q1"
      )!
      expect(entered.attributes["tiller.message.text"]).toBe("What time is it?")
    }))

  it.effect("replay of the stored log gives the spans the live layer gave, with the same times", () =>
    Effect.gen(function*() {
      const live = recordingTracer()
      const { events } = yield* runWith(Telemetry.layer().pipe(Layer.provide(Layer.setTracer(live.tracer))))
      const replayed = recordingTracer()
      const count = Telemetry.replayTo(replayed.tracer, events, { sessionId: "seen" })
      const plain = (spans: ReadonlyArray<RecordedSpan>) =>
        spans.map(({ parentSpanId: _p, spanId: _s, ...rest }) => rest)
      expect(count).toBe(9)
      expect(plain(replayed.ended)).toEqual(plain(sessionSpans(live.ended)))
    }))
})

/** A local OTLP/HTTP receiver: the JSON bodies posted to /v1/traces. */
const receiver = Effect.acquireRelease(
  Effect.async<{ readonly url: string; readonly bodies: Array<any> }>((resume) => {
    const bodies: Array<any> = []
    const server = http.createServer((req, res) => {
      let body = ""
      req.on("data", (chunk) => (body += chunk))
      req.on("end", () => {
        if (req.url === "/v1/traces" && req.headers["content-type"]?.startsWith("application/json")) {
          bodies.push(JSON.parse(body))
        }
        res.writeHead(200, { "content-type": "application/json" }).end("{}")
      })
    })
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as AddressInfo
      resume(Effect.succeed(Object.assign({ url: `http://127.0.0.1:${port}`, bodies }, { server })))
    })
  }),
  (r) =>
    Effect.async<void>((resume) => {
      ;(r as unknown as { server: http.Server }).server.close(() => resume(Effect.void))
    })
)

describe("Telemetry.layerOtlp", () => {
  it.scoped("sends the session's spans as OTLP/HTTP JSON with the GenAI attributes and the service name", () =>
    Effect.gen(function*() {
      const server = yield* receiver
      const otlp = Telemetry.layerOtlp({
        url: Telemetry.tracesEndpoint({ OTEL_EXPORTER_OTLP_ENDPOINT: `${server.url}/` })!,
        serviceName: "tiller-test"
      })
        .pipe(Layer.provide(NodeHttpClient.layerUndici))
      yield* runWith(otlp)
      const resourceSpans = server.bodies.flatMap((b) => b.resourceSpans)
      expect(resourceSpans[0].resource.attributes).toContainEqual({
        key: "service.name",
        value: { stringValue: "tiller-test" }
      })
      const spans = resourceSpans.flatMap((r: any) => r.scopeSpans.flatMap((s: any) => s.spans))
      expect(spans.map((s: any) => s.name).sort()).toEqual([
        "chat m",
        "chat m",
        "chat m",
        "chat m",
        "execute_tool clock",
        "execute_tool shell",
        "invoke_agent",
        "invoke_agent",
        "tiller.compaction"
      ])
      const attrs = (span: any) =>
        Object.fromEntries(span.attributes.map((a: any) => [a.key, Object.values(a.value)[0]]))
      const turn = spans.find((s: any) => s.name === "invoke_agent")
      expect(attrs(turn)).toMatchObject({
        "gen_ai.conversation.id": "seen",
        "gen_ai.provider.name": "p",
        "gen_ai.usage.input_tokens": 280
      })
      const tool = spans.find((s: any) => s.name === "execute_tool clock")
      expect(tool.parentSpanId).toBe(turn.spanId)
      expect(attrs(tool)).toMatchObject({ "gen_ai.tool.name": "clock", "gen_ai.tool.call.id": "call-1" })
      const denied = spans.find((s: any) => s.name === "execute_tool shell")
      expect(denied.status.code).toBe(2)
      expect(turn.events.map((e: any) => e.name)).toContain("tiller.llm.retry")
    }))

  it("tracesEndpoint follows the OTLP environment: the traces variable as is, else the base plus /v1/traces", () => {
    expect(Telemetry.tracesEndpoint({})).toBeUndefined()
    expect(Telemetry.tracesEndpoint({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://h:4318" })).toBe("http://h:4318/v1/traces")
    expect(
      Telemetry.tracesEndpoint({
        OTEL_EXPORTER_OTLP_ENDPOINT: "http://h:4318",
        OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: "http://t/x"
      })
    ).toBe("http://t/x")
    expect(Telemetry.otlpHeaders("a=1, b=x%20y")).toEqual({ a: "1", b: "x y" })
  })
})
