/**
 * Tools and their hooks (SPEC 4.6, 8.7, 8.9): ToolPre / ToolPost, the Tools service, and tool
 * scheduling while hooks suspend.
 */
import { describe, expect, it } from "@effect/vitest"
import { Cause, Deferred, Effect, Exit, JSONSchema, Schema, Scope } from "effect"
import {
  CancelCause,
  Driver,
  Hooks,
  PreStepDecision,
  RequestErrorAction,
  ScriptedModel,
  SessionId,
  Tool,
  ToolPreDecision,
  Tools
} from "../../src/index.js"
import type { ToolCallInfo, ToolContext } from "../../src/index.js"
import { maskedUntilReleased, scenarioSeeingDriver, startedUntilReleased } from "./cancelFixtures.js"
import {
  agentTest,
  closeOut,
  dataOfType,
  events,
  from,
  gate,
  open,
  plugin,
  recordLive,
  recordStatus,
  requests,
  scenario,
  settle,
  shape,
  shapeHas,
  token,
  toolLine,
  until,
  untilEvent,
  user
} from "./harness.js"
import { calls, empty, okTool, resultsByCall } from "./toolFixtures.js"

type Loose = { readonly [k: string]: any }

const toolEvents = Effect.map(shape, (s) => s.filter((x) => /^(TC|TR|INS\(ns|SE|TE)/.test(x)))

// Keep `until` referenced for future probes.
void until

describe("4.6 / 8.7 / 8.9: tools and their hooks", () => {
  it.scoped("8.7/8.9: ToolPre and ToolPost get {sessionId, turn, step, callId, name, raw arguments, decoded params}; the body gets decoded params and its ToolContext; ToolPre never runs for unknown tools or invalid arguments", () => {
    const bodies: Array<{ params: unknown; ctx: Omit<ToolContext, "deferContext"> }> = []
    const num = Tool.make("num", {
      description: "num",
      parameters: Schema.Struct({ n: Schema.NumberFromString }),
      execute: (params, ctx) =>
        Effect.sync(() => {
          bodies.push({ params, ctx: { sessionId: ctx.sessionId, turn: ctx.turn, step: ctx.step, callId: ctx.callId } })
          return `n=${params.n + 1}`
        })
    })
    return Effect.gen(function*() {
      const driver = yield* Driver
      const hooks = yield* Hooks
      const pres: Array<ToolCallInfo> = []
      const posts: Array<Loose> = []
      yield* hooks.onToolPre((info, next) => Effect.zipRight(Effect.sync(() => pres.push(info)), next()))
      yield* hooks.onToolPost((input, next) => Effect.zipRight(Effect.sync(() => posts.push(input)), next()))
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      yield* driver.followup(user("B"))
      expect(yield* closeOut).toEqual([])
      const info = (callId: string, turn: number, raw: string) => ({
        sessionId: SessionId.make("s"),
        turn,
        step: 1,
        callId,
        name: "num",
        arguments: raw,
        params: { n: 41 }
      })
      expect(pres).toEqual([info("c1", 1, "{\"n\":\"41\"}"), info("c4", 2, "{\"n\":\"41\"}")])
      expect(
        posts.map((p) => ({
          callId: p.callId,
          turn: p.turn,
          params: p.params,
          aborted: p.aborted,
          text: p.output.content[0].text
        }))
      )
        .toEqual([
          { callId: "c1", turn: 1, params: { n: 41 }, aborted: false, text: "n=42" },
          { callId: "c4", turn: 2, params: { n: 41 }, aborted: false, text: "n=42" }
        ])
      expect(posts[0]!.output).toEqual({
        content: [{ type: "text", text: "n=42" }],
        isError: false,
        additionalContexts: [],
        concludesTurn: false
      })
      expect(bodies).toEqual([
        { params: { n: 41 }, ctx: { sessionId: "s", turn: 1, step: 1, callId: "c1" } },
        { params: { n: 41 }, ctx: { sessionId: "s", turn: 2, step: 1, callId: "c4" } }
      ])
      const tcs = yield* dataOfType("tool/call")
      expect(tcs[0]).toEqual({ turn: 1, step: 1, callId: "c1", name: "num", arguments: "{\"n\":\"41\"}" })
      const r = yield* resultsByCall
      expect(r.c2!.error).toEqual({ name: "UnknownToolError", code: "UNKNOWN_TOOL" })
      expect(r.c3!.text).toMatch(/^Error: invalid arguments for num: /)
    }).pipe(Effect.provide(scenario([
      ScriptedModel.response({
        toolCalls: [
          { id: "c1", name: "num", arguments: "{\"n\":\"41\"}" },
          { id: "c2", name: "ghost", arguments: "{}" },
          { id: "c3", name: "num", arguments: "{\"n\":\"x\"}" }
        ]
      }),
      ScriptedModel.text("one"),
      ScriptedModel.response({ toolCalls: [{ id: "c4", name: "num", arguments: "{\"n\":\"41\"}" }] }),
      ScriptedModel.text("two")
    ], { tools: [num] })))
  })

  it.scoped("4.6: the next request holds the assistant tool calls, then every result in model order, then the contexts (deferContext before additionalContexts)", () => {
    const ctxTool = Tool.make("ctx", {
      description: "ctx",
      parameters: empty,
      mode: "parallel",
      execute: (_p, ctx) =>
        Effect.as(ctx.deferContext(user("d1", "deferred")), {
          content: "with ctx",
          additionalContexts: [user("a1", "added")]
        })
    })
    return Effect.gen(function*() {
      const driver = yield* Driver
      const hooks = yield* Hooks
      yield* hooks.onToolPre((info, next) =>
        info.callId === "c2" ? Effect.succeed(ToolPreDecision.deny("policy")) : next()
      )
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      const reqs = yield* requests
      expect(reqs.length).toBe(2)
      const second = reqs[1]!.messages
      expect(second.map(token)).toEqual([
        "A",
        "tool-call c1",
        "tool-result c1",
        "tool-result c2",
        "tool-result c3",
        "deferred",
        "added"
      ])
      const blocks = second.slice(2, 5).map((m) => m.content[0] as Loose)
      expect(blocks).toEqual([
        {
          type: "tool-result",
          toolCallId: "c1",
          isError: true,
          content: [{ type: "text", text: "Error: unknown tool nope" }]
        },
        {
          type: "tool-result",
          toolCallId: "c2",
          isError: true,
          content: [{ type: "text", text: "Error: tool call denied: policy" }]
        },
        { type: "tool-result", toolCallId: "c3", isError: false, content: [{ type: "text", text: "with ctx" }] }
      ])
      expect(second[1]!.content.map((b) => (b as Loose).id)).toEqual(["c1", "c2", "c3"])
      expect(yield* toolEvents).toEqual([
        "TC(c1)",
        "TR?(c1)",
        "TC(c2)",
        "TR?(c2)",
        "TC(c3)",
        "TR(c3)",
        "INS(ns,0,[d1,a1])",
        "SE(1,1)",
        "SE(1,2)",
        "TE(1,completed)"
      ])
    }).pipe(
      Effect.provide(
        scenario([calls(["c1", "nope"], ["c2", "ctx"], ["c3", "ctx"]), ScriptedModel.text("done")], {
          tools: [ctxTool]
        })
      )
    )
  })

  agentTest(
    "8.7: hook registrations end with their scope inside a live agent; onToolPost prepend is outermost",
    scenario([calls(["c1", "t"]), ScriptedModel.text("one"), calls(["c2", "t"]), ScriptedModel.text("two")], {
      tools: [okTool("t")]
    }),
    function*({ driver, hooks }) {
      const order: Array<string> = []
      const inner = yield* Scope.make()
      yield* Scope.extend(hooks.onToolPre(() => Effect.succeed(ToolPreDecision.deny("scoped"))), inner)
      const post = (name: string) => (input: Loose, next: () => Effect.Effect<any, unknown>) =>
        Effect.zipRight(Effect.sync(() => order.push(`${name}:${input.callId}`)), next())
      yield* hooks.onToolPost(post("first"))
      yield* hooks.onToolPost(post("second"))
      yield* Scope.extend(hooks.onToolPost(post("front"), { prepend: true }), inner)
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      yield* Scope.close(inner, Exit.void)
      yield* driver.followup(user("B"))
      expect(yield* closeOut).toEqual([])
      expect(order).toEqual(["front:c1", "first:c1", "second:c1", "first:c2", "second:c2"])
      const r = yield* resultsByCall
      expect(r.c1).toEqual({
        text: "Error: tool call denied: scoped",
        isError: true,
        error: { name: "ToolDeniedError", code: "DENIED" },
        meta: undefined
      })
      expect(r.c2).toEqual({ text: "ok", isError: false, error: undefined, meta: undefined })
    }
  )

  agentTest(
    "4.4/8.6/8.7: a PreStep listener and an onTurnStopping listener act inside the loop only while their scope is open",
    scenario([calls(["c1", "t"]), ScriptedModel.text("done"), ScriptedModel.text("two")], { tools: [okTool("t")] }),
    function*({ driver, hooks, preStep: pre }) {
      const inputs: Array<Loose> = []
      const stops: Array<string> = []
      const inner = yield* Scope.make()
      yield* Scope.extend(
        pre.register((input, next) =>
          Effect.map(next(), (d) => {
            inputs.push({ ...input, messages: input.messages.map((m) => m.id) })
            return d._tag === "Enter" ? PreStepDecision.enter([...d.messages, user(`x${input.turn}${input.step}`)]) : d
          })
        ),
        inner
      )
      yield* Scope.extend(
        hooks.onTurnStopping((i) => Effect.sync(() => stops.push(`${i.sessionId}:${i.turn}:${i.step}`))),
        inner
      )
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      yield* Scope.close(inner, Exit.void)
      yield* driver.followup(user("B"))
      expect(yield* closeOut).toEqual([])
      expect(inputs).toEqual([
        { sessionId: "s", turn: 1, step: 1, boundary: "initial", messages: ["A"] },
        { sessionId: "s", turn: 1, step: 2, boundary: "later", messages: [] }
      ])
      expect(stops).toEqual(["s:1:2"])
      const reqs = yield* requests
      expect(reqs.map((r) => r.messages.map(token))).toEqual([
        ["A", "x11"],
        ["A", "x11", "tool-call c1", "tool-result c1", "x12"],
        ["A", "x11", "tool-call c1", "tool-result c1", "x12", "done", "B"]
      ])
    }
  )

  it.scoped("4.6: a context id entered by an earlier call of the batch is not fresh for a later call; repeated ids in one call are invalid", () => {
    const withCtx = (name: string, ids: ReadonlyArray<string>) =>
      Tool.make(name, {
        description: name,
        parameters: empty,
        execute: () => Effect.succeed({ content: name, additionalContexts: ids.map((id) => user(id)) })
      })
    return Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      const r = yield* resultsByCall
      expect(r.c1).toEqual({ text: "first", isError: false, error: undefined, meta: undefined })
      expect(r.c2!.text).toMatch(/^Error: tool produced invalid output: /)
      expect(r.c2!.error).toEqual({ name: "ToolOutputError", code: "INVALID_TOOL_OUTPUT" })
      expect(r.c3!.text).toMatch(/^Error: tool produced invalid output: /)
      expect(r.c3!.error).toEqual({ name: "ToolOutputError", code: "INVALID_TOOL_OUTPUT" })
      expect(yield* toolEvents).toEqual([
        "TC(c1)",
        "TR(c1)",
        "INS(ns,0,[x1])",
        "TC(c2)",
        "TR?(c2)",
        "TC(c3)",
        "TR?(c3)",
        "SE(1,1)",
        "SE(1,2)",
        "TE(1,completed)"
      ])
      expect((yield* requests)[1]!.messages.map(token)).toEqual([
        "A",
        "tool-call c1",
        "tool-result c1",
        "tool-result c2",
        "tool-result c3",
        "x1"
      ])
    }).pipe(
      Effect.provide(scenario([calls(["c1", "first"], ["c2", "again"], ["c3", "twice"]), ScriptedModel.text("done")], {
        tools: [withCtx("first", ["x1"]), withCtx("again", ["x1"]), withCtx("twice", ["y1", "y1"])]
      }))
    )
  })

  agentTest(
    "3.10/4.6: failing and dying tool bodies and a failing ToolPre are results only: no live agent/error, the turn completes",
    scenario([calls(["c1", "f"], ["c2", "d"], ["c3", "t"]), ScriptedModel.text("done")], {
      tools: [
        okTool("f", "exclusive", Effect.fail(new Error("bad"))),
        okTool("d", "exclusive", Effect.die(new Error("boom"))),
        okTool("t")
      ]
    }),
    function*({ driver, hooks }) {
      const drain = yield* recordLive
      yield* hooks.onToolPre((info, next) => info.callId === "c3" ? Effect.die(new Error("pre died")) : next())
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      const live = yield* drain
      expect(live.filter((e) => e.type === "agent/error")).toEqual([])
      const r = yield* resultsByCall
      expect(r.c1).toEqual({
        text: "Error: bad",
        isError: true,
        error: { name: "Error", code: "TOOL_ERROR" },
        meta: undefined
      })
      expect(r.c2).toEqual({
        text: "Error: boom",
        isError: true,
        error: { name: "ToolDefect", code: "TOOL_DEFECT" },
        meta: undefined
      })
      expect(r.c3).toEqual({
        text: "Error: pre died",
        isError: true,
        error: { name: "ToolPreHookError", code: "PRE_HOOK_FAILED" },
        meta: undefined
      })
      expect((yield* dataOfType("turn/end")).map((d) => d.reason)).toEqual([{ kind: "completed" }])
    }
  )

  const twelve = Array.from({ length: 12 }, (_, i) => `c${i + 1}`)
  const pooled = startedUntilReleased("p")
  agentTest(
    "4.6/8.9: the default pool cap is 10",
    scenario([calls(...twelve.map((id) => [id, "p"] as const)), ScriptedModel.text("done")], { tools: [pooled.tool] }),
    function*({ driver }) {
      expect((yield* Tools).maxParallelToolCalls).toBe(10)
      yield* driver.followup(user("A"))
      yield* until(Effect.sync(() => pooled.started.length === 10))
      yield* settle
      expect(pooled.started).toEqual(twelve.slice(0, 10))
      expect((yield* toolEvents).filter((x) => x.startsWith("TC"))).toHaveLength(10)
      yield* open(pooled.release)
      expect(yield* closeOut).toEqual([])
      expect(pooled.started).toEqual(twelve)
      expect((yield* toolEvents).filter((x) => x.startsWith("TR"))).toEqual(twelve.map((id) => `TR(${id})`))
    }
  )

  const slow = startedUntilReleased("slow", "late")
  agentTest(
    "4.6: ToolPost sees aborted:true for a call whose body succeeded before the cause; its output stays a success",
    scenario([calls(["c1", "slow"], ["c2", "quick"], ["c3", "x"])], {
      tools: [slow.tool, okTool("quick", "parallel", Effect.succeed("quick")), okTool("x")]
    }),
    function*({ driver, hooks }) {
      const posted: Array<string> = []
      yield* hooks.onToolPost((input, next) =>
        Effect.zipRight(Effect.sync(() => posted.push(`${input.callId}:${input.aborted}`)), next())
      )
      yield* driver.followup(user("A"))
      yield* until(Effect.sync(() => slow.started.length === 1))
      yield* until(
        Effect.map(events, (es) => es.some((e) => e.type === "tool/call" && (e.data as Loose).callId === "c2"))
      )
      yield* settle
      yield* driver.cancel(CancelCause.user)
      expect(yield* closeOut).toEqual([])
      expect(yield* toolEvents).toEqual([
        "TC(c1)",
        "TC(c2)",
        "TR✗(c1)",
        "TR(c2)",
        "TC(c3)",
        "TR⊘(c3)",
        "SE(1,1)",
        "TE(1,aborted(user))"
      ])
      expect(posted).toEqual(["c1:true", "c2:true"])
      const r = yield* resultsByCall
      expect(r.c2).toEqual({ text: "quick", isError: false, error: undefined, meta: undefined })
    }
  )
})

describe("SPEC 8.7 Hooks", () => {
  agentTest(
    "8.7/8.10: onRequest's default is the seed config of AgentOptions; the ModelRequest carries it",
    scenario([ScriptedModel.text("ok")], {
      agent: { system: "sys", maxTokens: 77, temperature: 0.25 }
    }),
    function*({ driver, hooks }) {
      const configs: Array<unknown> = []
      yield* hooks.onRequest((input, next) => Effect.zipRight(Effect.sync(() => configs.push(input.config)), next()))
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      const expected = { provider: "p", model: "m", system: "sys", maxTokens: 77, temperature: 0.25 }
      expect(configs).toEqual([expected])
      const [request] = yield* requests
      expect(request).toMatchObject({ ...expected, sessionId: "s", turn: 1, step: 1, attempt: 1, tools: [] })
    }
  )

  agentTest(
    "8.7/4.5: a hook registration ends with its scope; the next request's seed is the last logged config; onTurnStopping runs serially in registration order",
    scenario([ScriptedModel.text("a"), ScriptedModel.text("b")]),
    function*({ driver, hooks }) {
      const seen: Array<string> = []
      let calls = 0
      const inner = yield* Scope.make()
      yield* Scope.extend(
        hooks.onRequest((_, next) =>
          Effect.map(next(), (c) => {
            calls++
            return { ...c, system: "from-hook" }
          })
        ),
        inner
      )
      yield* hooks.onTurnStopping((i) => Effect.sync(() => seen.push(`a${i.turn}.${i.step}`)))
      yield* hooks.onTurnStopping((i) => Effect.sync(() => seen.push(`b${i.turn}.${i.step}`)))
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      yield* Scope.close(inner, Exit.void)
      yield* driver.followup(user("B"))
      yield* driver.whenIdle
      expect(calls).toBe(1)
      // SPEC 4.5 Q1: later requests start from the config of the last logged request/header.
      expect((yield* requests).map((r) => r.system)).toEqual(["from-hook", "from-hook"])
      expect((yield* shape).filter((x) => x.startsWith("RH"))).toEqual(["RH(initial)"])
      expect(seen).toEqual(["a1.1", "b1.1", "a2.1", "b2.1"])
    }
  )
})

describe("SPEC 8.9 Tools", () => {
  agentTest(
    "8.9: a string returned by execute means {content: [{type: text, text}]}; ToolPost sees it normalized with aborted false",
    scenario([
      ScriptedModel.response({ toolCalls: [{ id: "c1", name: "echo", arguments: { s: "hi" } }] }),
      ScriptedModel.text("done")
    ], {
      tools: [
        Tool.make("echo", {
          description: "echo",
          parameters: Schema.Struct({ s: Schema.String }),
          execute: (p) => Effect.succeed(`echo:${p.s}`)
        })
      ]
    }),
    function*({ driver, hooks }) {
      const posts: Array<unknown> = []
      yield* hooks.onToolPost((input, next) =>
        Effect.zipRight(
          Effect.sync(() =>
            posts.push({ output: input.output, aborted: input.aborted, name: input.name, params: input.params })
          ),
          next()
        )
      )
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect(posts).toEqual([{
        output: {
          content: [{ type: "text", text: "echo:hi" }],
          isError: false,
          additionalContexts: [],
          concludesTurn: false
        },
        aborted: false,
        name: "echo",
        params: { s: "hi" }
      }])
      const result = (yield* events).find((e) => e.type === "tool/result")!.data as any
      expect(result.message.content[0]).toEqual({
        type: "tool-result",
        toolCallId: "c1",
        isError: false,
        content: [{ type: "text", text: "echo:hi" }]
      })
    }
  )

  it.effect("8.9: Tools.layer with two tools of one name lists the later one; list is frozen ToolSchemas", () =>
    Effect.gen(function*() {
      const tools = yield* Tools
      const listed = yield* tools.list
      expect(listed.map((t) => [t.name, t.description])).toEqual([["a", "A"], ["dup", "second"]])
      expect(Object.isFrozen(listed)).toBe(true)
      expect(tools.maxParallelToolCalls).toBe(3)
    }).pipe(Effect.provide(Tools.layer({
      maxParallelToolCalls: 3,
      tools: [
        Tool.make("dup", { description: "first", parameters: Schema.Struct({}), execute: () => Effect.succeed("1") }),
        Tool.make("a", { description: "A", parameters: Schema.Struct({}), execute: () => Effect.succeed("a") }),
        Tool.make("dup", { description: "second", parameters: Schema.Struct({}), execute: () => Effect.succeed("2") })
      ]
    }))))
})

describe("8.7 hooks", () => {
  const seenInfo: Array<unknown> = []
  const seenCtx: Array<unknown> = []
  const probe = Tool.make("probe", {
    description: "",
    parameters: Schema.Struct({ n: Schema.NumberFromString }),
    execute: ({ n }, ctx) =>
      Effect.sync(
        () => (seenCtx.push({ sessionId: ctx.sessionId, turn: ctx.turn, step: ctx.step, callId: ctx.callId, n }), "ok")
      )
  })
  agentTest(
    "8.7: ToolPre sees decoded params and raw arguments; tool bodies get their context",
    scenario(
      [
        ScriptedModel.response({ toolCalls: [{ id: "c1", name: "probe", arguments: { n: "5" } }] }),
        ScriptedModel.text("done")
      ],
      { tools: [probe] }
    ),
    function*({ driver, hooks }) {
      yield* hooks.onToolPre((input, next) => Effect.zipRight(Effect.sync(() => seenInfo.push(input)), next()))
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect(seenInfo).toEqual([{
        sessionId: "s",
        turn: 1,
        step: 1,
        callId: "c1",
        name: "probe",
        arguments: "{\"n\":\"5\"}",
        params: { n: 5 }
      }])
      expect(seenCtx).toEqual([{ sessionId: "s", turn: 1, step: 1, callId: "c1", n: 5 }])
    }
  )

  agentTest(
    "8.7: a ToolPre listener calling next() twice is a hook failure (PRE_HOOK_FAILED)",
    scenario(
      [ScriptedModel.response({ toolCalls: [{ id: "c1", name: "quick", arguments: {} }] }), ScriptedModel.text("done")],
      { tools: [Tool.make("quick", { description: "", parameters: empty, execute: () => Effect.succeed("ok") })] }
    ),
    function*({ driver, hooks }) {
      yield* hooks.onToolPre((_input, next) => Effect.zipRight(next(), next()))
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect((yield* dataOfType("tool/result"))[0]!.error).toEqual({
        name: "ToolPreHookError",
        code: "PRE_HOOK_FAILED"
      })
    }
  )

  agentTest(
    "8.7: a request-error listener's Fail ends the turn at once, without llm/retry",
    scenario([ScriptedModel.fail({ message: "slow", code: "RATE_LIMIT", status: 429 })]),
    function*({ driver, hooks }) {
      yield* hooks.onRequestError(() => Effect.succeed(RequestErrorAction.fail))
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect((yield* shape).slice(-1)).toEqual(["TE(1,error(RATE_LIMIT))"])
      expect((yield* shape).filter((s) => s.startsWith("RT"))).toEqual([])
    }
  )

  agentTest(
    "4.5 Q2 / 8.9: a tool registered between turns changes the header (RH(change)) and the request's tools",
    scenario([ScriptedModel.text("a"), ScriptedModel.text("b")]),
    function*({ driver }) {
      const tools = yield* Tools
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      yield* tools.register(
        Tool.make("late", { description: "L", parameters: empty, execute: () => Effect.succeed("ok") })
      )
      yield* driver.followup(user("B"))
      yield* driver.whenIdle
      expect((yield* shape).filter((s) => s.startsWith("RH"))).toEqual(["RH(initial)", "RH(change)"])
      const rs = yield* requests
      expect(rs[0]!.tools).toEqual([])
      expect(rs[1]!.tools.map((t) => t.name)).toEqual(["late"])
      const headers = (yield* dataOfType("request/header")).map((d) => d.header)
      expect(headers[1]).toEqual({ provider: "p", model: "m", tools: rs[1]!.tools })
    }
  )
})

describe("8.9 Tools", () => {
  it.effect("8.9: Tool.make defaults mode to exclusive; list renders parameters with JSON Schema, sorted; default cap is 10", () =>
    Effect.gen(function*() {
      const params = Schema.Struct({ n: Schema.Number })
      const b = Tool.make("b", { description: "B", parameters: params, execute: () => Effect.succeed("b") })
      const a = Tool.make("a", {
        description: "A",
        parameters: empty,
        mode: "parallel",
        execute: () => Effect.succeed("a")
      })
      expect(b.mode).toBe("exclusive")
      expect(a.mode).toBe("parallel")
      const tools = yield* Effect.provide(Tools, Tools.layer({ tools: [b, a] }))
      expect(tools.maxParallelToolCalls).toBe(10)
      const listed = yield* tools.list
      expect(listed.map((s) => s.name)).toEqual(["a", "b"])
      expect(listed[1]).toEqual({
        name: "b",
        description: "B",
        parameters: JSON.parse(JSON.stringify(JSONSchema.make(params)))
      })
    }))

  agentTest(
    "8.9: a later registration shadows an earlier one until its scope closes; setMode of an unknown name is a no-op",
    Tools.layer(),
    function*(_) {
      const tools = yield* Tools
      const one = Tool.make("x", { description: "first", parameters: empty, execute: () => Effect.succeed("1") })
      const two = Tool.make("x", { description: "second", parameters: empty, execute: () => Effect.succeed("2") })
      yield* tools.register(one)
      const inner = yield* Scope.make()
      yield* Scope.extend(tools.register(two), inner)
      expect((yield* tools.list).map((s) => s.description)).toEqual(["second"])
      yield* Scope.close(inner, Exit.void)
      expect((yield* tools.list).map((s) => s.description)).toEqual(["first"])
      yield* tools.setMode("nope", "parallel")
      expect((yield* tools.list).map((s) => s.name)).toEqual(["x"])
    }
  )

  it.effect("8.9: Tools.layer dies at build for NaN, -1 and Infinity caps; 1 is accepted", () =>
    Effect.gen(function*() {
      for (const cap of [NaN, -1, Infinity]) {
        const exit = yield* Effect.exit(Effect.provide(Tools, Tools.layer({ maxParallelToolCalls: cap })))
        expect(Exit.isFailure(exit) && Cause.isDie(exit.cause)).toBe(true)
      }
      const ok = yield* Effect.provide(Tools, Tools.layer({ maxParallelToolCalls: 1 }))
      expect(ok.maxParallelToolCalls).toBe(1)
    }))
})

describe("4.6 tool scheduling under suspension", () => {
  it.scoped("4.6: the next call's mode is read after the ready commit: a ToolPost that makes c3's tool exclusive turns c3 into a barrier", () => {
    const g1 = gate()
    const c1Done = gate()
    const g2 = gate()
    const p = Tool.make("p", {
      description: "p",
      parameters: empty,
      mode: "parallel",
      execute: (_x, ctx) =>
        ctx.callId === "c1"
          ? Effect.zipRight(Deferred.await(g1), Effect.as(open(c1Done), "one"))
          : Effect.as(Deferred.await(g2), "two")
    })
    const q = Tool.make("q", {
      description: "q",
      parameters: empty,
      mode: "parallel",
      execute: () => Effect.succeed("three")
    })
    return Effect.gen(function*() {
      const driver = yield* Driver
      const hooks = yield* Hooks
      const tools = yield* Tools
      // c2's START lets c1's body end and waits for it; c1's COMMIT is then ready before c3's START.
      yield* hooks.onToolPre((info, next) =>
        info.callId === "c2" ? Effect.zipRight(Effect.zipRight(open(g1), Deferred.await(c1Done)), next()) : next()
      )
      yield* hooks.onToolPost((input, next) =>
        input.callId === "c1" ? Effect.zipRight(tools.setMode("q", "exclusive"), next()) : next()
      )
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "tool/result")
      yield* settle
      expect(yield* toolLine).toBe("TC(c1) TC(c2) TR(c1)")
      yield* open(g2)
      expect(yield* closeOut).toEqual([])
      expect(yield* toolLine).toBe("TC(c1) TC(c2) TR(c1) TR(c2) TC(c3) TR(c3)")
    }).pipe(
      Effect.provide(
        scenario([calls(["c1", "p"], ["c2", "p"], ["c3", "q"]), ScriptedModel.text("done")], { tools: [p, q] })
      )
    )
  })

  const answersCallId = Tool.make("t", {
    description: "t",
    parameters: empty,
    mode: "parallel",
    execute: (_x, ctx) => Effect.succeed(ctx.callId)
  })
  const exclusiveX = Tool.make("x", {
    description: "x",
    parameters: empty,
    mode: "exclusive",
    execute: () => Effect.succeed("x")
  })
  const suspendedPostCases = [
    {
      name:
        "4.6: commits strictly in model order and a group starts only after the previous group fully committed, while c1's ToolPost is suspended",
      agent: scenario([calls(["c1", "t"], ["c2", "t"], ["c3", "x"]), ScriptedModel.text("done")], {
        tools: [answersCallId, exclusiveX]
      })
    },
    {
      name:
        "4.6: with cap 2 a COMMIT whose ToolPost is suspended runs to completion before the next START (c3 waits for TR(c1) and the ready TR(c2))",
      agent: scenario([calls(["c1", "t"], ["c2", "t"], ["c3", "t"]), ScriptedModel.text("done")], {
        tools: [answersCallId],
        maxParallelToolCalls: 2
      })
    }
  ]
  for (const { agent, name } of suspendedPostCases) {
    agentTest(name, agent, function*({ driver, hooks }) {
      const gp = gate()
      const entered = gate()
      yield* hooks.onToolPost((input, next) =>
        input.callId === "c1" ? Effect.zipRight(Effect.zipRight(open(entered), Deferred.await(gp)), next()) : next()
      )
      yield* driver.followup(user("A"))
      yield* Deferred.await(entered)
      yield* settle
      expect(yield* toolLine).toBe("TC(c1) TC(c2)")
      yield* open(gp)
      expect(yield* closeOut).toEqual([])
      expect(yield* toolLine).toBe("TC(c1) TC(c2) TR(c1) TR(c2) TC(c3) TR(c3)")
    })
  }

  it.scoped("4.6: ToolPost's `aborted` is true iff a cause is recorded when COMMIT step 1 begins: c1's ToolPost cancels, c2's sees aborted", () => {
    const t = Tool.make("t", {
      description: "t",
      parameters: empty,
      mode: "parallel",
      execute: (_x, ctx) => Effect.succeed(ctx.callId)
    })
    return Effect.gen(function*() {
      const driver = yield* Driver
      const hooks = yield* Hooks
      const posts: Array<string> = []
      yield* hooks.onToolPost((input, next) =>
        Effect.zipRight(
          Effect.zipRight(
            Effect.sync(() => posts.push(`${input.callId}:${input.aborted}`)),
            input.callId === "c1" ? driver.cancel(CancelCause.user, { keepInbox: true }) : Effect.void
          ),
          next()
        )
      )
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect(posts).toEqual(["c1:false", "c2:true"])
      expect((yield* shape).filter((s) => s.startsWith("TE")).join(" ")).toBe("TE(1,aborted(user))")
    }).pipe(Effect.provide(scenario([calls(["c1", "t"], ["c2", "t"]), ScriptedModel.text("done")], { tools: [t] })))
  })

  agentTest(
    "4.6/7.5: a body (masking interruption) that records a broad cancel and then returns completes after the cause: ABORTED, contexts inserted and discarded with its result",
    scenarioSeeingDriver((agentDriver) =>
      scenario([calls(["c1", "k"]), ScriptedModel.text("done")], {
        tools: [Tool.make("k", {
          description: "k",
          parameters: empty,
          // The body masks interruption, so it certainly completes after the cause it records.
          execute: (_x, ctx) =>
            Effect.uninterruptible(
              Effect.zipRight(
                Effect.zipRight(
                  ctx.deferContext(plugin("x")),
                  Effect.suspend(() => agentDriver().cancel(CancelCause.user))
                ),
                Effect.succeed("done")
              )
            )
        })]
      })
    ),
    function*({ driver }) {
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect(yield* from("TC(c1)")).toBe("TC(c1) TR✗(c1) INS(ns,0,[x]) CAN(ns,0,1) SE(1,1) TE(1,aborted(user))")
    }
  )

  it.scoped("4.6: a cancel while a later call's START is suspended in ToolPre: running body ABORTED, that call ABORTED_BEFORE_DISPATCH, never-started calls get pairs", () => {
    const t = Tool.make("t", { description: "t", parameters: empty, mode: "parallel", execute: () => Effect.never })
    return Effect.gen(function*() {
      const driver = yield* Driver
      const hooks = yield* Hooks
      const entered = gate()
      yield* hooks.onToolPre((info, next) =>
        info.callId === "c2" ? Effect.zipRight(open(entered), Effect.never) : next()
      )
      yield* driver.followup(user("A"))
      yield* Deferred.await(entered)
      yield* driver.cancel(CancelCause.user)
      expect(yield* closeOut).toEqual([])
      expect(yield* from("TC(c1)")).toBe("TC(c1) TC(c2) TR✗(c1) TR⊘(c2) TC(c3) TR⊘(c3) SE(1,1) TE(1,aborted(user))")
    }).pipe(
      Effect.provide(
        scenario([calls(["c1", "t"], ["c2", "t"], ["c3", "t"]), ScriptedModel.text("done")], { tools: [t] })
      )
    )
  })

  const masked = maskedUntilReleased()
  agentTest(
    "7.6: a steer while a tool body masks interruption is re-routed, latched, and replayed in the TX-CLOSE of the aborted turn",
    scenario([calls(["c1", "t"]), ScriptedModel.text("after")], { tools: [masked.tool] }),
    function*({ driver }) {
      const status = yield* recordStatus
      yield* driver.followup(user("A"))
      yield* Deferred.await(masked.started)
      yield* driver.cancel(CancelCause.user)
      yield* driver.steer(user("S"))
      yield* settle
      expect(yield* shapeHas("TE(1,aborted(user))")).toBe(false)
      yield* open(masked.release)
      expect(yield* closeOut).toEqual([])
      expect(yield* from("TC(c1)")).toBe(
        "TC(c1) INS(nt,0,[S]) TR✗(c1) SE(1,1) TE(1,aborted(user)) TS(2) CLM(nt,0,1) SS(2,1) UM(S) SE(2,1) TE(2,completed)"
      )
      expect(yield* status).toEqual(["idle", "running", "idle"])
    }
  )
})

describe("4.6 ToolPre outcomes after a cause", () => {
  const setup = (deny: boolean) => {
    let ran = 0
    const t = Tool.make("t", {
      description: "t",
      parameters: empty,
      execute: () => Effect.sync(() => ran++).pipe(Effect.as("ok"))
    })
    return Effect.gen(function*() {
      const driver = yield* Driver
      const hooks = yield* Hooks
      const posts: Array<string> = []
      yield* hooks.onToolPre((info, next) =>
        info.callId === "c1"
          ? Effect.uninterruptible(
            Effect.zipRight(driver.cancel(CancelCause.user), deny ? Effect.succeed(ToolPreDecision.deny("no")) : next())
          )
          : next()
      )
      yield* hooks.onToolPost((input, next) =>
        Effect.zipRight(Effect.sync(() => posts.push(`${input.callId}:${input.aborted}`)), next())
      )
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      const codes = (yield* events).filter((e) => e.type === "tool/result").map((e) => (e.data as any).error?.code)
      return { posts, codes, ran, tools: yield* from("TC(c1)") }
    }).pipe(Effect.provide(scenario([calls(["c1", "t"], ["c2", "t"]), ScriptedModel.text("done")], { tools: [t] })))
  }

  it.scoped("4.6: allowed after the cause → ABORTED_BEFORE_DISPATCH and ToolPost does not run for it", () =>
    Effect.map(setup(false), (r) => {
      expect(r.posts).toEqual([])
      expect(r.codes).toEqual(["ABORTED_BEFORE_DISPATCH", "ABORTED_BEFORE_DISPATCH"])
      expect(r.ran).toBe(0)
    }))

  it.scoped("4.6: denied by a ToolPre that recorded the cause → DENIED; ToolPost runs for it with aborted: true; c2 gets a ⟨TC TR⊘⟩ pair", () =>
    Effect.map(setup(true), (r) => {
      expect(r.posts).toEqual(["c1:true"])
      expect(r.codes).toEqual(["DENIED", "ABORTED_BEFORE_DISPATCH"])
      expect(r.tools).toBe("TC(c1) TR?(c1) TC(c2) TR⊘(c2) SE(1,1) TE(1,aborted(user))")
    }))
})
