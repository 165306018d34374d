/**
 * SPEC 9 scenarios P20-P30: tools and model failures.
 */
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Exit, Ref, Schema, TestClock } from "effect"
import { Driver, Hooks, ScriptedModel, SessionLog, Tool, ToolPreDecision, Tools } from "../../../src/index.js"
import { closeOut, dataOfType, events, gate, open, plugin, recordLive, recordStatus, requests, scenario, settle, shape, token, until, untilEvent, user } from "../harness.js"
import type { ToolDefinition } from "../../../src/index.js"

const TEXT = ["CH(block-start)", "CH(text-delta)", "CH(block-end)", "CH(finish stop)", "AM"]
const CALL_CHUNKS = ["CH(block-start)", "CH(tool-call-delta)", "CH(block-end)"]

const preExploded = new Error("pre exploded")
const empty = Schema.Struct({})
const calls = (name: string, ids: ReadonlyArray<string>) => ids.map((id) => ({ id, name, arguments: {} }))
const toolEvents = Effect.map(shape, (s) => s.filter((x) => x.startsWith("TC") || x.startsWith("TR")))

describe("P20-P30 tools and model failures", () => {
  const echo = Tool.make("echo", {
    description: "echoes",
    parameters: Schema.Struct({ text: Schema.String }),
    execute: ({ text }) => Effect.succeed(`echo: ${text}`)
  })
  it.scoped("P20: tool round trip has the shape of C2", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect(yield* shape).toEqual([
        "INS(nt,0,[A])", "TS(1)", "CLM(nt,0,1)", "SS(1,1)", "UM(A)", "RH(initial)",
        "CH(block-start)", "CH(text-delta)", "CH(block-end)", ...CALL_CHUNKS, "CH(finish stop)", "AM",
        "TC(c1)", "TR(c1)", "SE(1,1)", "SS(1,2)", ...TEXT, "SE(1,2)", "TE(1,completed)"
      ])
      const es = yield* events
      const tc = es.find((e) => e.type === "tool/call")!
      expect((tc.data as any).arguments).toBe("{\"text\":\"ping\"}")
      const tr = es.find((e) => e.type === "tool/result")!
      expect((tr as any).sourceEventSeqs).toEqual([tc.seq])
      const rs = yield* requests
      const last = rs[1]!.messages[rs[1]!.messages.length - 1]!
      expect(last.content).toEqual([{ type: "tool-result", toolCallId: "c1", isError: false, content: [{ type: "text", text: "echo: ping" }] }])
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario(
      [
        ScriptedModel.response({ text: "calling echo", toolCalls: [{ id: "c1", name: "echo", arguments: { text: "ping" } }] }),
        ScriptedModel.text("done")
      ],
      { tools: [echo] }
    ))))

  const gates21: Record<string, Deferred.Deferred<void>> = { c1: gate(), c2: gate(), c3: gate() }
  const p21 = Tool.make("p", {
    description: "gated",
    parameters: empty,
    mode: "parallel",
    execute: (_params, ctx) => Effect.as(Deferred.await(gates21[ctx.callId]!), "done " + ctx.callId)
  })
  it.scoped("P21: parallel siblings overlap; results keep model order", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const log = yield* SessionLog
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "tool/call" && (e.data as any).callId === "c3")
      yield* settle
      expect(yield* toolEvents).toEqual(["TC(c1)", "TC(c2)", "TC(c3)"])
      yield* open(gates21.c2!)
      yield* settle
      expect(yield* toolEvents).toEqual(["TC(c1)", "TC(c2)", "TC(c3)"])
      yield* open(gates21.c1!)
      yield* untilEvent((e) => e.type === "tool/result" && (e.data as any).message.content[0].toolCallId === "c2")
      expect(yield* toolEvents).toEqual(["TC(c1)", "TC(c2)", "TC(c3)", "TR(c1)", "TR(c2)"])
      yield* open(gates21.c3!)
      yield* driver.whenIdle
      expect(yield* toolEvents).toEqual(["TC(c1)", "TC(c2)", "TC(c3)", "TR(c1)", "TR(c2)", "TR(c3)"])
      expect((yield* log.messages).map(token).slice(1, 5)).toEqual(["tool-call c1", "tool-result c1", "tool-result c2", "tool-result c3"])
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario(
      [ScriptedModel.response({ toolCalls: calls("p", ["c1", "c2", "c3"]) }), ScriptedModel.text("done")],
      { tools: [p21] }
    ))))

  const order22: Array<string> = []
  const r22 = Tool.make("r", {
    description: "reader",
    parameters: empty,
    mode: "parallel",
    execute: (_p, ctx) =>
      Effect.gen(function*() {
        order22.push(`r-start-${ctx.callId}`)
        yield* Effect.yieldNow()
        order22.push(`r-end-${ctx.callId}`)
        return "r"
      })
  })
  const w22 = Tool.make("w", {
    description: "writer",
    parameters: empty,
    mode: "exclusive",
    execute: (_p, ctx) => Effect.sync(() => (order22.push(`w-${ctx.callId}`), "w"))
  })
  it.scoped("P22: exclusive barrier", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect(order22).toEqual(["r-start-A1", "r-end-A1", "w-A2", "r-start-A3", "r-end-A3"])
      expect(yield* toolEvents).toEqual(["TC(A1)", "TR(A1)", "TC(A2)", "TR(A2)", "TC(A3)", "TR(A3)"])
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario(
      [
        ScriptedModel.response({ toolCalls: [{ id: "A1", name: "r", arguments: {} }, { id: "A2", name: "w", arguments: {} }, { id: "A3", name: "r", arguments: {} }] }),
        ScriptedModel.text("done")
      ],
      { tools: [r22, w22] }
    ))))

  const gates23: Record<string, Deferred.Deferred<void>> = { c1: gate(), c2: gate(), c3: gate(), c4: gate() }
  const started23: Array<string> = []
  const p23 = Tool.make("p", {
    description: "gated",
    parameters: empty,
    mode: "parallel",
    execute: (_params, ctx) => Effect.suspend(() => (started23.push(ctx.callId), Effect.as(Deferred.await(gates23[ctx.callId]!), "ok")))
  })
  it.scoped("P23: rolling pool cap 2", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      yield* until(Effect.sync(() => started23.length === 2))
      yield* settle
      expect(started23).toEqual(["c1", "c2"])
      yield* open(gates23.c1!)
      yield* until(Effect.sync(() => started23.length === 3))
      expect(started23).toEqual(["c1", "c2", "c3"])
      yield* settle
      expect((yield* toolEvents).slice(0, 4)).toEqual(["TC(c1)", "TC(c2)", "TR(c1)", "TC(c3)"])
      yield* open(gates23.c4!)
      yield* open(gates23.c3!)
      yield* open(gates23.c2!)
      yield* driver.whenIdle
      expect((yield* toolEvents).filter((x) => x.startsWith("TR"))).toEqual(["TR(c1)", "TR(c2)", "TR(c3)", "TR(c4)"])
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario(
      [ScriptedModel.response({ toolCalls: calls("p", ["c1", "c2", "c3", "c4"]) }), ScriptedModel.text("done")],
      { tools: [p23], maxParallelToolCalls: 2 }
    ))))

  const live1: Array<string> = []
  const p23serial = Tool.make("p", {
    description: "records overlap",
    parameters: empty,
    mode: "parallel",
    execute: (_params, ctx) =>
      Effect.gen(function*() {
        live1.push(`start-${ctx.callId}`)
        yield* Effect.repeatN(Effect.yieldNow(), 5)
        live1.push(`end-${ctx.callId}`)
        return "ok"
      })
  })
  it.scoped("P23: cap 1 is fully serial", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect(live1).toEqual(["start-c1", "end-c1", "start-c2", "end-c2", "start-c3", "end-c3"])
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario(
      [ScriptedModel.response({ toolCalls: calls("p", ["c1", "c2", "c3"]) }), ScriptedModel.text("done")],
      { tools: [p23serial], maxParallelToolCalls: 1 }
    ))))

  it.effect("P23: Tools.layer dies at build for maxParallelToolCalls 0 and 1.5", () =>
    Effect.gen(function*() {
      for (const cap of [0, 1.5]) {
        const exit = yield* Effect.exit(Effect.provide(Tools, Tools.layer({ maxParallelToolCalls: cap })))
        expect(Exit.isFailure(exit) && exit.cause._tag === "Die").toBe(true)
      }
    }))

  const contextPost = Effect.gen(function*() {
    const hooks = yield* Hooks
    yield* hooks.onToolPost((input, next) =>
      Effect.map(next(), (output) => ({ ...output, additionalContexts: [...output.additionalContexts, plugin(`ctx-${input.callId}`)] }))
    )
  })
  const c2Done24 = gate()
  const p24 = Tool.make("t", {
    description: "c1 settles after c2",
    parameters: empty,
    mode: "parallel",
    execute: (_params, ctx) => ctx.callId === "c1" ? Effect.as(Deferred.await(c2Done24), "one") : Effect.as(open(c2Done24), "two")
  })
  // P24 with two calls of `tool`: the shape from the first tool/call on.
  const contextsAfterAllResults = (tool: ToolDefinition<any>, expected: ReadonlyArray<string>) => () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* contextPost
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      const s = yield* shape
      const from = s.indexOf("TC(c1)")
      expect(s.slice(from, from + 11)).toEqual(expected)
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario(
      [ScriptedModel.response({ toolCalls: calls("t", ["c1", "c2"]) }), ScriptedModel.text("done")],
      { tools: [tool] }
    )))

  it.scoped("P24: tool contexts enter after all results (parallel)", contextsAfterAllResults(p24, [
    "TC(c1)", "TC(c2)", "TR(c1)", "INS(ns,0,[ctx-c1])", "TR(c2)", "INS(ns,1,[ctx-c2])", "SE(1,1)",
    "CLM(ns,0,2)", "SS(1,2)", "UM(ctx-c1)", "UM(ctx-c2)"
  ]))

  const x24 = Tool.make("t", { description: "plain", parameters: empty, execute: () => Effect.succeed("ok") })
  it.scoped("P24: tool contexts enter after all results (exclusive)", contextsAfterAllResults(x24, [
    "TC(c1)", "TR(c1)", "INS(ns,0,[ctx-c1])", "TC(c2)", "TR(c2)", "INS(ns,1,[ctx-c2])", "SE(1,1)",
    "CLM(ns,0,2)", "SS(1,2)", "UM(ctx-c1)", "UM(ctx-c2)"
  ]))

  const ran25: Array<string> = []
  const t25 = Tool.make("t", { description: "records", parameters: empty, execute: (_p, ctx) => Effect.sync(() => (ran25.push(ctx.callId), "ran")) })
  it.scoped("P25: denials and hook failures are ordered results", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const hooks = yield* Hooks
      const posts = yield* Ref.make<ReadonlyArray<string>>([])
      yield* hooks.onToolPre((input, next) =>
        input.callId === "c2"
          ? Effect.succeed(ToolPreDecision.deny("blocked by policy"))
          : input.callId === "c3"
          ? Effect.fail(preExploded)
          : next()
      )
      yield* hooks.onToolPost((input, next) => Effect.zipRight(Ref.update(posts, (a) => [...a, input.callId]), next()))
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect(ran25).toEqual(["c1"])
      expect(yield* Ref.get(posts)).toEqual(["c1", "c2"])
      expect(yield* toolEvents).toEqual(["TC(c1)", "TR(c1)", "TC(c2)", "TR?(c2)", "TC(c3)", "TR?(c3)"])
      const results = yield* dataOfType("tool/result")
      expect(results.map((d) => d.error?.code)).toEqual([undefined, "DENIED", "PRE_HOOK_FAILED"])
      expect(results[1]!.message.content[0].content[0].text).toContain("blocked by policy")
      expect(results[2]!.message.content[0].content[0].text).toContain("pre exploded")
      expect((yield* shape)).toContain("SS(1,2)")
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario(
      [ScriptedModel.response({ toolCalls: calls("t", ["c1", "c2", "c3"]) }), ScriptedModel.text("done")],
      { tools: [t25] }
    ))))

  const fin = Tool.make("fin", { description: "concludes", parameters: empty, execute: () => Effect.succeed({ content: "ok", concludesTurn: true }) })
  it.scoped("P26: a tool concludes the turn", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect(yield* requests).toHaveLength(1)
      expect((yield* shape).slice(-3)).toEqual(["TR(c1)", "SE(1,1)", "TE(1,completed)"])
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario([ScriptedModel.response({ toolCalls: calls("fin", ["c1"]) })], { tools: [fin] }))))

  it.scoped("P27: max-tokens ends the turn, not the next one", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const log = yield* SessionLog
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      yield* driver.followup(user("B"))
      yield* driver.whenIdle
      expect((yield* dataOfType("turn/end")).map((d) => d.reason.kind)).toEqual(["max-tokens", "completed"])
      expect(yield* requests).toHaveLength(2)
      expect((yield* log.messages).map(token)).toEqual(["A", "trunc", "B", "ok"])
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario([ScriptedModel.response({ text: "trunc", finish: "max-tokens" }), ScriptedModel.text("ok")]))))

  const ran28: Array<string> = []
  const echo28: ToolDefinition<any> = Tool.make("echo", {
    description: "echoes",
    parameters: Schema.Struct({ text: Schema.String }),
    execute: ({ text }) => Effect.sync(() => (ran28.push(text), text))
  })
  it.scoped("P28: no dispatch from a truncated response", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const log = yield* SessionLog
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect((yield* shape).filter((s) => s.startsWith("TC"))).toEqual([])
      const am = (yield* dataOfType("assistant/message"))[0]!
      expect({ turn: am.turn, step: am.step, content: am.message.content, usage: am.usage }).toEqual({
        turn: 1,
        step: 1,
        content: [],
        usage: { inputTokens: 5, outputTokens: 7 }
      })
      expect((yield* log.messages).map(token)).toEqual(["A"])
      expect((yield* shape).slice(-1)).toEqual(["TE(1,max-tokens)"])
      expect(ran28).toEqual([])
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario(
      [ScriptedModel.response({
        toolCalls: [{ id: "c1", name: "echo", arguments: "{\"te", partial: true }],
        finish: "max-tokens",
        usage: { inputTokens: 5, outputTokens: 7 }
      })],
      { tools: [echo28] }
    ))))

  it.scoped("P29: terminal provider error", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const live = yield* recordLive
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect((yield* shape).slice(-4)).toEqual(["RH(initial)", "CH(finish error)", "SE(1,1)", "TE(1,error(AUTH))"])
      expect((yield* dataOfType("turn/end"))[0]!.reason).toEqual({ kind: "error", error: { message: "provider 401", code: "AUTH", status: 401 } })
      expect((yield* shape).filter((s) => s === "AM" || s.startsWith("RT"))).toEqual([])
      const errors = (yield* live).filter((e) => e.type === "agent/error")
      expect(errors.map((e) => [(e as any).turn, (e as any).step])).toEqual([[1, 1]])
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario([ScriptedModel.fail({ message: "provider 401", code: "AUTH", status: 401 })]))))

  it.scoped("P30: retries stay in the same step, slept on the Clock", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const trace = yield* recordStatus
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "llm/retry")
      const d1 = (yield* dataOfType("llm/retry"))[0]!.delayMs as number
      expect(d1).toBeGreaterThanOrEqual(800)
      expect(d1).toBeLessThanOrEqual(1200)
      yield* settle
      expect(yield* requests).toHaveLength(1)
      yield* TestClock.adjust(d1 - 1)
      yield* settle
      expect(yield* requests).toHaveLength(1)
      yield* TestClock.adjust(1)
      yield* until(Effect.map(dataOfType("llm/retry"), (a) => a.length === 2))
      const d2 = (yield* dataOfType("llm/retry"))[1]!.delayMs as number
      expect(d2).toBeGreaterThanOrEqual(1600)
      expect(d2).toBeLessThanOrEqual(2400)
      yield* TestClock.adjust(d2)
      yield* driver.whenIdle
      const s = yield* shape
      expect(s.filter((x) => x.startsWith("TS") || x.startsWith("SS"))).toEqual(["TS(1)", "SS(1,1)"])
      const chunks = (yield* events).filter((e) => e.type === "assistant/chunk")
      expect([...new Set(chunks.map((e) => (e.data as any).attempt))]).toEqual([1, 2, 3])
      const am = (yield* events).find((e) => e.type === "assistant/message")!
      expect((am.data as any).attempt).toBe(3)
      expect((am as any).sourceEventSeqs).toEqual(chunks.filter((e) => (e.data as any).attempt === 3).map((e) => e.seq))
      const rs = yield* requests
      expect(rs.map((r) => r.attempt)).toEqual([1, 2, 3])
      expect(rs[1]!.messages).toEqual(rs[0]!.messages)
      expect(rs[2]!.messages).toEqual(rs[0]!.messages)
      expect(yield* trace).toEqual(["idle", "running", "idle"])
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario([
      ScriptedModel.fail({ code: "RATE_LIMIT", status: 429, message: "slow" }),
      ScriptedModel.fail({ code: "SERVICE_UNAVAILABLE", status: 503, message: "down" }),
      ScriptedModel.text("ok")
    ]))))

  it.scoped("P30: a third failure ends the turn error(SERVICE_UNAVAILABLE) after 3 requests and 2 retries", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "llm/retry")
      yield* TestClock.adjust("2 seconds")
      yield* until(Effect.map(dataOfType("llm/retry"), (a) => a.length === 2))
      yield* TestClock.adjust("3 seconds")
      yield* driver.whenIdle
      expect(yield* requests).toHaveLength(3)
      expect((yield* shape).filter((s) => s.startsWith("RT"))).toEqual(["RT(1)", "RT(2)"])
      expect((yield* shape).slice(-1)).toEqual(["TE(1,error(SERVICE_UNAVAILABLE))"])
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario([
      ScriptedModel.fail({ code: "RATE_LIMIT", status: 429, message: "slow" }),
      ScriptedModel.fail({ code: "SERVICE_UNAVAILABLE", status: 503, message: "down" }),
      ScriptedModel.fail({ code: "SERVICE_UNAVAILABLE", status: 503, message: "down" })
    ]))))
})