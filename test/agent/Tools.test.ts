/**
 * SPEC 9 scenarios P20-P30: tool round trips, the tool scheduler (overlap, barriers, the rolling
 * pool, in-order commits with contexts), hooks around tool calls, concluding tools, max-tokens,
 * terminal provider errors and request retries in the same step.
 */
import { describe, expect, it } from "@effect/vitest"
import type { Queue, Scope } from "effect"
import { Cause, Chunk, Deferred, Effect, Exit, Fiber, Layer, Ref, Schema, Stream, TestClock } from "effect"
import { checkLog } from "../../src/domain/Check.js"
import type { DriverEvent } from "../../src/domain/DriverEvent.js"
import { ModelError } from "../../src/domain/Errors.js"
import type { CoreEvent, EventOf, SessionEvent } from "../../src/domain/Event.js"
import type { Message } from "../../src/domain/Values.js"
import type { ScriptEntry } from "../../src/layers/ScriptedModel.js"
import { ScriptedModel } from "../../src/layers/ScriptedModel.js"
import { Driver } from "../../src/services/Driver.js"
import { Hooks, ToolPreDecision } from "../../src/services/Hooks.js"
import { SessionLog } from "../../src/services/SessionLog.js"
import type { ToolMode, ToolOutput } from "../../src/services/Tools.js"
import { Tool, Tools } from "../../src/services/Tools.js"
import {
  events,
  idleAndChecked,
  plugin,
  scenario,
  settle,
  shape,
  shapeHas,
  toolShape,
  user,
  waitUntil
} from "./harness.js"
import { call, calls, empty } from "./toolFixtures.js"

// ---------------------------------------------------------------------------------------------------
// Helpers

const ofType = <T extends CoreEvent["type"]>(all: ReadonlyArray<SessionEvent>, type: T) =>
  all.filter((e) => e.type === type) as unknown as ReadonlyArray<EventOf<T>>

interface Gates {
  readonly await: (callId: string) => Effect.Effect<void>
  readonly open: (callId: string) => Effect.Effect<void>
}

/** One Deferred per call id ("Gate G" of SPEC 9): a body awaits its call's gate, the test opens it. */
const makeGates = (callIds: ReadonlyArray<string>): Effect.Effect<Gates> =>
  Effect.map(
    Effect.forEach(callIds, (id) => Effect.map(Deferred.make<void>(), (gate) => [id, gate] as const)),
    (entries) => {
      const gates = new Map(entries)
      const withGate = <A>(id: string, f: (gate: Deferred.Deferred<void>) => Effect.Effect<A>) => {
        const gate = gates.get(id)
        return gate === undefined ? Effect.dieMessage(`no gate for call ${id}`) : f(gate)
      }
      return {
        await: (id) => withGate(id, Deferred.await),
        open: (id) => withGate(id, (gate) => Effect.asVoid(Deferred.succeed(gate, undefined)))
      }
    }
  )

/** A tool whose body records `start-<id>`, runs `between(id)`, records `end-<id>` and answers `answer(id)`. */
const tracingTool = (options: {
  readonly name: string
  readonly description: string
  readonly mode: ToolMode
  readonly record: (entry: string) => Effect.Effect<void>
  readonly between: (callId: string) => Effect.Effect<void>
  readonly answer: (callId: string) => string
}) =>
  Tool.make(options.name, {
    description: options.description,
    parameters: empty,
    mode: options.mode,
    execute: (_params, ctx) =>
      Effect.gen(function*() {
        yield* options.record(`start-${ctx.callId}`)
        yield* options.between(ctx.callId)
        yield* options.record(`end-${ctx.callId}`)
        return options.answer(ctx.callId)
      })
  })

const appendTo = (trace: Ref.Ref<ReadonlyArray<string>>) => (entry: string) => Ref.update(trace, (t) => [...t, entry])

/** A tool whose body records `start-<id>`, awaits the call's gate, records `end-<id>` and returns `done-<id>`. */
const gatedTool = (
  name: string,
  mode: ToolMode,
  gates: Gates,
  trace: Ref.Ref<ReadonlyArray<string>>
) =>
  tracingTool({
    name,
    description: `gated ${name}`,
    mode,
    record: appendTo(trace),
    between: gates.await,
    answer: (id) => `done-${id}`
  })

const started = (trace: Ref.Ref<ReadonlyArray<string>>) =>
  Effect.map(Ref.get(trace), (t) => t.filter((e) => e.startsWith("start-")).map((e) => e.slice(6)))

/** The tool-result call ids of the derived history, in order. */
const resultIdsOf = (messages: ReadonlyArray<Message>) =>
  messages.flatMap((m) => m.content.flatMap((b) => (b.type === "tool-result" ? [b.toolCallId] : [])))

const drain = (queue: Queue.Dequeue<DriverEvent>) => Effect.map(queue.takeAll, (chunk) => Chunk.toArray(chunk))

const A = user("A")
const B = user("B")

const prefix = ["INS(nt,0,[A])", "TS(1)", "CLM(nt,0,1)", "SS(1,1)", "UM(A)", "RH(initial)"]
const textChunks = ["CH(block-start)", "CH(text-delta)", "CH(block-end)"]
const callChunks = ["CH(block-start)", "CH(tool-call-delta)", "CH(block-end)"]
const stopAM = ["CH(finish stop)", "AM"]

/** Runs `body` against a scenario whose tools may close over values created first. */
const run = <A, E>(
  script: ReadonlyArray<ScriptEntry>,
  options: Parameters<typeof scenario>[1],
  body: Effect.Effect<A, E, Driver | SessionLog | Hooks | ScriptedModel | Tools | Scope.Scope>
) => Effect.provide(body, scenario(script, options))

// ---------------------------------------------------------------------------------------------------

describe("tools", () => {
  it.scoped("P20: tool round trip", () => {
    const echo = Tool.make("echo", {
      description: "echoes its text",
      parameters: Schema.Struct({ text: Schema.String }),
      mode: "exclusive",
      execute: ({ text }) => Effect.succeed("echo: " + text)
    })
    const script = [
      ScriptedModel.response({ text: "calling echo", toolCalls: [call("c1", "echo", { text: "ping" })] }),
      ScriptedModel.text("done")
    ]
    return run(
      script,
      { tools: [echo] },
      Effect.gen(function*() {
        const driver = yield* Driver
        yield* driver.followup(A)
        yield* driver.whenIdle
        // C2: step 2 has no claim and no request/header.
        expect(yield* shape).toEqual([
          ...prefix,
          ...textChunks,
          ...callChunks,
          ...stopAM,
          "TC(c1)",
          "TR(c1)",
          "SE(1,1)",
          "SS(1,2)",
          ...textChunks,
          ...stopAM,
          "SE(1,2)",
          "TE(1,completed)"
        ])
        const all = yield* events
        const [tc] = ofType(all, "tool/call")
        const [tr] = ofType(all, "tool/result")
        expect(tc!.data.arguments).toBe("{\"text\":\"ping\"}")
        expect(tc!.data.name).toBe("echo")
        expect(tr!.sourceEventSeqs).toEqual([tc!.seq])
        expect(tr!.data.error).toBeUndefined()
        const requests = yield* (yield* ScriptedModel).requests
        expect(requests.length).toBe(2)
        expect(requests.map((r) => r.step)).toEqual([1, 2])
        const last = requests[1]!.messages[requests[1]!.messages.length - 1]!
        expect(last.content).toEqual([
          { type: "tool-result", toolCallId: "c1", isError: false, content: [{ type: "text", text: "echo: ping" }] }
        ])
        expect(last.source).toEqual({ kind: "tool", callId: "c1" })
        yield* idleAndChecked
      })
    )
  })

  it.scoped("P21: parallel siblings overlap; results keep model order", () =>
    Effect.gen(function*() {
      const gates = yield* makeGates(["c1", "c2", "c3"])
      const trace = yield* Ref.make<ReadonlyArray<string>>([])
      const p = gatedTool("p", "parallel", gates, trace)
      const script = [
        calls(["c1", "p"], ["c2", "p"], ["c3", "p"]),
        ScriptedModel.text("done")
      ]
      yield* run(
        script,
        { tools: [p] },
        Effect.gen(function*() {
          const driver = yield* Driver
          yield* driver.followup(A)
          yield* waitUntil(Effect.map(started(trace), (s) => s.length === 3), "three bodies")
          expect(yield* started(trace)).toEqual(["c1", "c2", "c3"])
          yield* settle
          expect(yield* toolShape).toEqual(["TC(c1)", "TC(c2)", "TC(c3)"])
          // c2 settling first commits nothing: c1 has no result yet.
          yield* gates.open("c2")
          yield* waitUntil(Effect.map(Ref.get(trace), (t) => t.includes("end-c2")), "c2 settled")
          yield* settle
          expect(yield* toolShape).toEqual(["TC(c1)", "TC(c2)", "TC(c3)"])
          yield* gates.open("c1")
          yield* waitUntil(shapeHas("TR(c2)"), "TR(c2)")
          yield* settle
          expect(yield* toolShape).toEqual(["TC(c1)", "TC(c2)", "TC(c3)", "TR(c1)", "TR(c2)"])
          yield* gates.open("c3")
          yield* driver.whenIdle
          expect(yield* shape).toEqual([
            ...prefix,
            ...callChunks,
            ...callChunks,
            ...callChunks,
            ...stopAM,
            "TC(c1)",
            "TC(c2)",
            "TC(c3)",
            "TR(c1)",
            "TR(c2)",
            "TR(c3)",
            "SE(1,1)",
            "SS(1,2)",
            ...textChunks,
            ...stopAM,
            "SE(1,2)",
            "TE(1,completed)"
          ])
          const messages = yield* (yield* SessionLog).messages
          expect(resultIdsOf(messages)).toEqual(["c1", "c2", "c3"])
          // The results directly follow the assistant message that called them, in model order.
          const callerAt = messages.findIndex((m) => m.content.some((b) => b.type === "tool-call"))
          expect(messages.slice(callerAt + 1, callerAt + 4).map((m) => m.source)).toEqual([
            { kind: "tool", callId: "c1" },
            { kind: "tool", callId: "c2" },
            { kind: "tool", callId: "c3" }
          ])
          const all = yield* events
          expect(ofType(all, "tool/result").map((e) => e.data.message.content[0].content)).toEqual([
            [{ type: "text", text: "done-c1" }],
            [{ type: "text", text: "done-c2" }],
            [{ type: "text", text: "done-c3" }]
          ])
          yield* idleAndChecked
        })
      )
    }))

  it.scoped("P22: an exclusive call is a barrier", () =>
    Effect.gen(function*() {
      const gates = yield* makeGates(["A1", "A3"])
      const order = yield* Ref.make<ReadonlyArray<string>>([])
      const record = (entry: string) => Ref.update(order, (o) => [...o, entry])
      const r = tracingTool({
        name: "r",
        description: "reads",
        mode: "parallel",
        record: (entry) => record(`r-${entry}`),
        between: gates.await,
        answer: () => "read"
      })
      const w = Tool.make("w", {
        description: "writes",
        parameters: empty,
        mode: "exclusive",
        execute: (_params, ctx) => Effect.as(record(`w-${ctx.callId}`), "written")
      })
      const script = [
        calls(["A1", "r"], ["A2", "w"], ["A3", "r"]),
        ScriptedModel.text("done")
      ]
      yield* run(
        script,
        { tools: [r, w] },
        Effect.gen(function*() {
          const driver = yield* Driver
          yield* driver.followup(A)
          yield* waitUntil(Effect.map(Ref.get(order), (o) => o.length === 1), "A1 started")
          yield* settle
          // A2 waits for A1 to settle and commit; A3 (parallel) may not jump the barrier.
          expect(yield* Ref.get(order)).toEqual(["r-start-A1"])
          expect(yield* toolShape).toEqual(["TC(A1)"])
          yield* gates.open("A1")
          yield* waitUntil(Effect.map(Ref.get(order), (o) => o.length === 4), "A3 started")
          yield* settle
          expect(yield* toolShape).toEqual(["TC(A1)", "TR(A1)", "TC(A2)", "TR(A2)", "TC(A3)"])
          yield* gates.open("A3")
          yield* driver.whenIdle
          expect(yield* Ref.get(order)).toEqual(["r-start-A1", "r-end-A1", "w-A2", "r-start-A3", "r-end-A3"])
          expect(yield* toolShape).toEqual(["TC(A1)", "TR(A1)", "TC(A2)", "TR(A2)", "TC(A3)", "TR(A3)"])
          yield* idleAndChecked
        })
      )
    }))

  it.scoped("P23: rolling pool cap", () =>
    Effect.gen(function*() {
      const gates = yield* makeGates(["c1", "c2", "c3", "c4"])
      const trace = yield* Ref.make<ReadonlyArray<string>>([])
      const p = gatedTool("p", "parallel", gates, trace)
      const script = [
        calls(["c1", "p"], ["c2", "p"], ["c3", "p"], ["c4", "p"]),
        ScriptedModel.text("done")
      ]
      yield* run(
        script,
        { tools: [p], maxParallelToolCalls: 2 },
        Effect.gen(function*() {
          const driver = yield* Driver
          yield* driver.followup(A)
          yield* waitUntil(Effect.map(started(trace), (s) => s.length === 2), "two bodies")
          yield* settle
          expect(yield* started(trace)).toEqual(["c1", "c2"])
          expect(yield* toolShape).toEqual(["TC(c1)", "TC(c2)"])
          yield* gates.open("c1")
          yield* waitUntil(Effect.map(started(trace), (s) => s.length === 3), "c3 started")
          yield* settle
          expect(yield* started(trace)).toEqual(["c1", "c2", "c3"])
          expect(yield* toolShape).toEqual(["TC(c1)", "TC(c2)", "TR(c1)", "TC(c3)"])
          // c4 waits for a free slot.
          yield* gates.open("c3")
          yield* waitUntil(Effect.map(started(trace), (s) => s.length === 4), "c4 started")
          yield* settle
          expect(yield* toolShape).toEqual(["TC(c1)", "TC(c2)", "TR(c1)", "TC(c3)", "TC(c4)"])
          yield* gates.open("c4")
          yield* settle
          expect(yield* toolShape).toEqual(["TC(c1)", "TC(c2)", "TR(c1)", "TC(c3)", "TC(c4)"])
          yield* gates.open("c2")
          yield* driver.whenIdle
          expect(yield* toolShape).toEqual([
            "TC(c1)",
            "TC(c2)",
            "TR(c1)",
            "TC(c3)",
            "TC(c4)",
            "TR(c2)",
            "TR(c3)",
            "TR(c4)"
          ])
          yield* idleAndChecked
        })
      )
    }))

  it.scoped("P23: cap 1 is fully serial", () =>
    Effect.gen(function*() {
      const trace = yield* Ref.make<ReadonlyArray<string>>([])
      // Bodies yield between start and end so that any overlap would interleave the trace.
      const p = tracingTool({
        name: "p",
        description: "parallel, serialised by the cap",
        mode: "parallel",
        record: appendTo(trace),
        between: () => settle,
        answer: () => "ok"
      })
      const script = [
        calls(["c1", "p"], ["c2", "p"], ["c3", "p"]),
        ScriptedModel.text("done")
      ]
      yield* run(
        script,
        { tools: [p], maxParallelToolCalls: 1 },
        Effect.gen(function*() {
          const driver = yield* Driver
          yield* driver.followup(A)
          yield* driver.whenIdle
          expect(yield* Ref.get(trace)).toEqual(["start-c1", "end-c1", "start-c2", "end-c2", "start-c3", "end-c3"])
          expect(yield* toolShape).toEqual(["TC(c1)", "TR(c1)", "TC(c2)", "TR(c2)", "TC(c3)", "TR(c3)"])
          yield* idleAndChecked
        })
      )
    }))

  it.effect("P23: maxParallelToolCalls 0 and 1.5 die at build", () =>
    Effect.gen(function*() {
      for (const cap of [0, 1.5]) {
        const exit = yield* Effect.exit(Effect.scoped(Layer.build(Tools.layer({ maxParallelToolCalls: cap }))))
        expect(Exit.isFailure(exit)).toBe(true)
        if (Exit.isFailure(exit)) expect(Cause.isDie(exit.cause)).toBe(true)
      }
      // A positive integer builds.
      const ok = yield* Effect.exit(Effect.scoped(Layer.build(Tools.layer({ maxParallelToolCalls: 1 }))))
      expect(Exit.isSuccess(ok)).toBe(true)
    }))

  const contextScenario = (mode: ToolMode) =>
    Effect.gen(function*() {
      const gates = yield* makeGates(["c1", "c2"])
      const trace = yield* Ref.make<ReadonlyArray<string>>([])
      const t = gatedTool("t", mode, gates, trace)
      const script = [
        calls(["c1", "t"], ["c2", "t"]),
        ScriptedModel.text("done")
      ]
      return yield* run(
        script,
        { tools: [t] },
        Effect.gen(function*() {
          const driver = yield* Driver
          const hooks = yield* Hooks
          yield* hooks.onToolPost((input, next) =>
            Effect.map(next(), (output) => ({
              ...output,
              additionalContexts: [...output.additionalContexts, plugin(`ctx-${input.callId}`)]
            }))
          )
          yield* driver.followup(A)
          if (mode === "parallel") {
            yield* waitUntil(Effect.map(started(trace), (s) => s.length === 2), "both bodies")
            // c2's body settles first.
            yield* gates.open("c2")
            yield* waitUntil(Effect.map(Ref.get(trace), (t) => t.includes("end-c2")), "c2 settled")
            yield* settle
            expect(yield* toolShape).toEqual(["TC(c1)", "TC(c2)"])
            yield* gates.open("c1")
          } else {
            yield* waitUntil(Effect.map(started(trace), (s) => s.length === 1), "c1 body")
            yield* settle
            expect(yield* started(trace)).toEqual(["c1"])
            yield* gates.open("c1")
            yield* waitUntil(Effect.map(started(trace), (s) => s.length === 2), "c2 body")
            yield* gates.open("c2")
          }
          yield* driver.whenIdle
          const log = yield* shape
          const all = yield* events
          // Every context UM follows the batch's last TR; request 2 sees results, then contexts.
          const lastTr = log.lastIndexOf("TR(c2)")
          expect(log.indexOf("UM(ctx-c1)")).toBeGreaterThan(lastTr)
          expect(log.indexOf("UM(ctx-c2)")).toBeGreaterThan(lastTr)
          const requests = yield* (yield* ScriptedModel).requests
          expect(requests.length).toBe(2)
          expect(
            requests[1]!.messages.slice(-4).map((m) =>
              m.content[0]!.type === "tool-result" ? `TR ${m.content[0]!.toolCallId}` : m.id
            )
          )
            .toEqual(["TR c1", "TR c2", "ctx-c1", "ctx-c2"])
          expect(checkLog(all, { closed: true })).toEqual([])
          return log
        })
      )
    })

  const contextCases = [
    {
      mode: "parallel" as const,
      tools: ["TC(c1)", "TC(c2)", "TR(c1)", "INS(ns,0,[ctx-c1])", "TR(c2)", "INS(ns,1,[ctx-c2])"]
    },
    {
      mode: "exclusive" as const,
      tools: ["TC(c1)", "TR(c1)", "INS(ns,0,[ctx-c1])", "TC(c2)", "TR(c2)", "INS(ns,1,[ctx-c2])"]
    }
  ]
  for (const { mode, tools } of contextCases) {
    it.scoped(`P24: tool contexts enter after all results (${mode})`, () =>
      Effect.map(contextScenario(mode), (log) =>
        expect(log).toEqual([
          ...prefix,
          ...callChunks,
          ...callChunks,
          ...stopAM,
          ...tools,
          "SE(1,1)",
          "CLM(ns,0,2)",
          "SS(1,2)",
          "UM(ctx-c1)",
          "UM(ctx-c2)",
          ...textChunks,
          ...stopAM,
          "SE(1,2)",
          "TE(1,completed)"
        ])))
  }

  it.scoped("P25: denials and hook failures are ordered results", () =>
    Effect.gen(function*() {
      const ran = yield* Ref.make<ReadonlyArray<string>>([])
      const posted = yield* Ref.make<ReadonlyArray<string>>([])
      const t = Tool.make("t", {
        description: "exclusive",
        parameters: empty,
        mode: "exclusive",
        execute: (_params, ctx) => Effect.as(Ref.update(ran, (r) => [...r, ctx.callId]), `ran ${ctx.callId}`)
      })
      const script = [
        calls(["c1", "t"], ["c2", "t"], ["c3", "t"]),
        ScriptedModel.text("done")
      ]
      yield* run(
        script,
        { tools: [t] },
        Effect.gen(function*() {
          const driver = yield* Driver
          const hooks = yield* Hooks
          yield* hooks.onToolPre((info, next) =>
            info.callId === "c2"
              ? Effect.succeed(ToolPreDecision.deny("blocked by policy"))
              : info.callId === "c3"
              ? Effect.fail({ _tag: "PreExploded", message: "pre exploded" } as const)
              : next()
          )
          yield* hooks.onToolPost((input, next) =>
            Effect.zipRight(Ref.update(posted, (p) => [...p, input.callId]), next())
          )
          yield* driver.followup(A)
          yield* driver.whenIdle
          expect(yield* Ref.get(ran)).toEqual(["c1"])
          expect(yield* Ref.get(posted)).toEqual(["c1", "c2"])
          expect(yield* shape).toEqual([
            ...prefix,
            ...callChunks,
            ...callChunks,
            ...callChunks,
            ...stopAM,
            "TC(c1)",
            "TR(c1)",
            "TC(c2)",
            "TR?(c2)",
            "TC(c3)",
            "TR?(c3)",
            "SE(1,1)",
            "SS(1,2)",
            ...textChunks,
            ...stopAM,
            "SE(1,2)",
            "TE(1,completed)"
          ])
          const results = ofType(yield* events, "tool/result")
          expect(results.map((r) => r.data.error)).toEqual([
            undefined,
            { name: "ToolDeniedError", code: "DENIED" },
            { name: "ToolPreHookError", code: "PRE_HOOK_FAILED" }
          ])
          expect(results.map((r) => r.data.message.content[0])).toEqual([
            { type: "tool-result", toolCallId: "c1", isError: false, content: [{ type: "text", text: "ran c1" }] },
            {
              type: "tool-result",
              toolCallId: "c2",
              isError: true,
              content: [{ type: "text", text: "Error: tool call denied: blocked by policy" }]
            },
            {
              type: "tool-result",
              toolCallId: "c3",
              isError: true,
              content: [{ type: "text", text: "Error: pre exploded" }]
            }
          ])
          expect((yield* (yield* ScriptedModel).requests).length).toBe(2)
          yield* idleAndChecked
        })
      )
    }))

  it.scoped("P26: a tool concludes the turn", () => {
    const fin = Tool.make("fin", {
      description: "finishes",
      parameters: empty,
      execute: (): Effect.Effect<ToolOutput> => Effect.succeed({ content: "ok", concludesTurn: true })
    })
    return run(
      [calls(["c1", "fin"])],
      { tools: [fin] },
      Effect.gen(function*() {
        const driver = yield* Driver
        yield* driver.followup(A)
        yield* driver.whenIdle
        expect(yield* shape).toEqual([
          ...prefix,
          ...callChunks,
          ...stopAM,
          "TC(c1)",
          "TR(c1)",
          "SE(1,1)",
          "TE(1,completed)"
        ])
        expect((yield* (yield* ScriptedModel).requests).length).toBe(1)
        expect(yield* (yield* ScriptedModel).remaining).toBe(0)
        yield* idleAndChecked
      })
    )
  })

  it.scoped("P27: max-tokens ends the turn, not the next one", () =>
    run(
      [ScriptedModel.response({ text: "trunc", finish: "max-tokens" }), ScriptedModel.text("ok")],
      {},
      Effect.gen(function*() {
        const driver = yield* Driver
        yield* driver.followup(A)
        yield* driver.whenIdle
        yield* driver.followup(B)
        yield* driver.whenIdle
        const all = yield* events
        expect(ofType(all, "turn/end").map((e) => e.data.reason)).toEqual([{ kind: "max-tokens" }, {
          kind: "completed"
        }])
        const requests = yield* (yield* ScriptedModel).requests
        expect(requests.map((r) => [r.turn, r.step])).toEqual([[1, 1], [2, 1]])
        expect(yield* shape).toEqual([
          ...prefix,
          ...textChunks,
          "CH(finish max-tokens)",
          "AM",
          "SE(1,1)",
          "TE(1,max-tokens)",
          "INS(nt,0,[B])",
          "TS(2)",
          "CLM(nt,0,1)",
          "SS(2,1)",
          "UM(B)",
          ...textChunks,
          ...stopAM,
          "SE(2,1)",
          "TE(2,completed)"
        ])
        const messages = yield* (yield* SessionLog).messages
        expect(
          messages.map((m) => m.role === "user" ? m.id : m.content.map((b) => b.type === "text" ? b.text : b.type))
        )
          .toEqual(["A", ["trunc"], "B", ["ok"]])
        yield* idleAndChecked
      })
    ))

  it.scoped("P28: no dispatch from a truncated response", () =>
    Effect.gen(function*() {
      const ran = yield* Ref.make(false)
      const echo = Tool.make("echo", {
        description: "echoes its text",
        parameters: Schema.Struct({ text: Schema.String }),
        mode: "exclusive",
        execute: ({ text }) => Effect.as(Ref.set(ran, true), "echo: " + text)
      })
      const usage = { inputTokens: 5, outputTokens: 7 }
      const script = [
        ScriptedModel.response({
          toolCalls: [{ id: "c1", name: "echo", arguments: "{\"te", partial: true }],
          finish: "max-tokens",
          usage
        })
      ]
      yield* run(
        script,
        { tools: [echo] },
        Effect.gen(function*() {
          const driver = yield* Driver
          yield* driver.followup(A)
          yield* driver.whenIdle
          expect(yield* shape).toEqual([
            ...prefix,
            "CH(block-start)",
            "CH(tool-call-delta)",
            "CH(usage)",
            "CH(finish max-tokens)",
            "AM",
            "SE(1,1)",
            "TE(1,max-tokens)"
          ])
          const all = yield* events
          expect(ofType(all, "tool/call")).toEqual([])
          const [am] = ofType(all, "assistant/message")
          expect(am!.data.turn).toBe(1)
          expect(am!.data.step).toBe(1)
          expect(am!.data.message.content).toEqual([])
          expect(am!.data.usage).toEqual(usage)
          expect(am!.data.message.source.replayState).toBeUndefined()
          expect(yield* (yield* SessionLog).messages).toEqual([A])
          expect(yield* Ref.get(ran)).toBe(false)
          yield* idleAndChecked
        })
      )
    }))

  it.scoped("P29: terminal provider error", () =>
    run(
      [ScriptedModel.fail({ message: "provider 401", code: "AUTH", status: 401 })],
      {},
      Effect.gen(function*() {
        const driver = yield* Driver
        const live = yield* driver.subscribe
        yield* driver.followup(A)
        yield* driver.whenIdle
        const failure = { message: "provider 401", code: "AUTH", status: 401 }
        expect(yield* shape).toEqual([...prefix, "CH(finish error)", "SE(1,1)", "TE(1,error(AUTH))"])
        const all = yield* events
        const [te] = ofType(all, "turn/end")
        expect(te!.data.reason).toEqual({ kind: "error", error: failure })
        const [finish] = ofType(all, "assistant/chunk")
        expect(finish!.data.chunk).toEqual({ type: "finish", finish: { kind: "error", failure } })
        expect(ofType(all, "assistant/message")).toEqual([])
        expect(ofType(all, "llm/retry")).toEqual([])
        const errors = (yield* drain(live)).filter((e) => e.type === "agent/error")
        expect(errors.length).toBe(1)
        const error = errors[0] as Extract<DriverEvent, { type: "agent/error" }>
        expect([error.turn, error.step]).toEqual([1, 1])
        expect(error.error instanceof ModelError ? error.error.failure : error.error).toEqual(failure)
        expect((yield* (yield* ScriptedModel).requests).length).toBe(1)
        yield* idleAndChecked
      })
    ))

  const retryScript = (third: ScriptEntry) => [
    ScriptedModel.fail({ code: "RATE_LIMIT", status: 429, message: "slow" }),
    ScriptedModel.fail({ code: "SERVICE_UNAVAILABLE", status: 503, message: "down" }),
    third
  ]

  /** Waits for `RT(attempt)`, checks its delay range, then advances the clock exactly that far. */
  const retryAfter = (attempt: number, range: readonly [number, number]) =>
    Effect.gen(function*() {
      const model = yield* ScriptedModel
      yield* waitUntil(shapeHas(`RT(${attempt})`), `RT(${attempt})`)
      const rt = ofType(yield* events, "llm/retry").find((e) => e.data.attempt === attempt)!
      const delayMs = rt.data.delayMs
      expect(delayMs).toBeGreaterThanOrEqual(range[0])
      expect(delayMs).toBeLessThanOrEqual(range[1])
      expect(Number.isInteger(delayMs)).toBe(true)
      // Wait until the backoff sleep is registered with the clock.
      const now = yield* TestClock.currentTimeMillis
      yield* waitUntil(
        Effect.map(TestClock.sleeps(), (s) => Chunk.some(s, (t) => t === now + delayMs)),
        "backoff sleep"
      )
      yield* TestClock.adjust(delayMs - 1)
      yield* settle
      expect((yield* model.requests).length).toBe(attempt)
      yield* TestClock.adjust(1)
      yield* waitUntil(Effect.map(model.requests, (r) => r.length === attempt + 1), `request ${attempt + 1}`)
      return rt
    })

  it.scoped("P30: retries stay in the same step", () =>
    run(
      retryScript(ScriptedModel.text("ok")),
      {},
      Effect.gen(function*() {
        const driver = yield* Driver
        const trace = yield* Ref.make<ReadonlyArray<string>>([])
        const observer = yield* Effect.forkScoped(
          Stream.runForEach(driver.statusChanges, (s) => Ref.update(trace, (t) => [...t, s]))
        )
        yield* waitUntil(Effect.map(Ref.get(trace), (t) => t.length > 0), "initial status")
        yield* driver.followup(A)
        const rt1 = yield* retryAfter(1, [800, 1200])
        expect(rt1.data.failure).toEqual({ code: "RATE_LIMIT", status: 429, message: "slow" })
        expect([rt1.data.turn, rt1.data.step]).toEqual([1, 1])
        const rt2 = yield* retryAfter(2, [1600, 2400])
        expect(rt2.data.failure).toEqual({ code: "SERVICE_UNAVAILABLE", status: 503, message: "down" })
        yield* driver.whenIdle
        expect(yield* shape).toEqual([
          ...prefix,
          "CH(finish error)",
          "RT(1)",
          "CH(finish error)",
          "RT(2)",
          ...textChunks,
          ...stopAM,
          "SE(1,1)",
          "TE(1,completed)"
        ])
        const all = yield* events
        const chunks = ofType(all, "assistant/chunk")
        expect(chunks.map((c) => c.data.attempt)).toEqual([1, 2, 3, 3, 3, 3])
        expect(chunks.every((c) => c.data.turn === 1 && c.data.step === 1)).toBe(true)
        const [am] = ofType(all, "assistant/message")
        expect(am!.data.attempt).toBe(3)
        expect(am!.sourceEventSeqs).toEqual(chunks.filter((c) => c.data.attempt === 3).map((c) => c.seq))
        const requests = yield* (yield* ScriptedModel).requests
        expect(requests.map((r) => [r.turn, r.step, r.attempt])).toEqual([[1, 1, 1], [1, 1, 2], [1, 1, 3]])
        expect(requests[1]!.messages).toEqual(requests[0]!.messages)
        expect(requests[2]!.messages).toEqual(requests[0]!.messages)
        expect(requests[0]!.messages).toEqual([A])
        yield* settle
        expect(yield* Ref.get(trace)).toEqual(["idle", "running", "idle"])
        yield* Fiber.interrupt(observer)
        yield* idleAndChecked
      })
    ))

  it.scoped("P30: the third failure ends the turn", () =>
    run(
      retryScript(ScriptedModel.fail({ code: "SERVICE_UNAVAILABLE", status: 503, message: "down" })),
      {},
      Effect.gen(function*() {
        const driver = yield* Driver
        const live = yield* driver.subscribe
        yield* driver.followup(A)
        yield* retryAfter(1, [800, 1200])
        yield* retryAfter(2, [1600, 2400])
        yield* driver.whenIdle
        expect(yield* shape).toEqual([
          ...prefix,
          "CH(finish error)",
          "RT(1)",
          "CH(finish error)",
          "RT(2)",
          "CH(finish error)",
          "SE(1,1)",
          "TE(1,error(SERVICE_UNAVAILABLE))"
        ])
        const all = yield* events
        expect(ofType(all, "turn/end")[0]!.data.reason).toEqual({
          kind: "error",
          error: { code: "SERVICE_UNAVAILABLE", status: 503, message: "down" }
        })
        expect(ofType(all, "llm/retry").length).toBe(2)
        expect((yield* (yield* ScriptedModel).requests).map((r) => r.attempt)).toEqual([1, 2, 3])
        const errors = (yield* drain(live)).filter((e) => e.type === "agent/error")
        expect(errors.map((e) => [(e as { turn: number }).turn, (e as { step: number }).step])).toEqual([[1, 1]])
        yield* idleAndChecked
      })
    ))
})
