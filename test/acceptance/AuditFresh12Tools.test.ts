/**
 * Acceptance checks of tiller's tool phase (SPEC 4.6, 8.9) and hooks around it (SPEC 8.7):
 * hook and body inputs, what the model sees next, scoped hook removal, context freshness across
 * calls, live notifications for tool failures, the default pool cap and `aborted` in `ToolPost`.
 */
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Exit, Schema, Scope } from "effect"
import type { ToolCallInfo, ToolContext } from "../../src/index.js"
import { CancelCause, Driver, Hooks, PreStep, PreStepDecision, ScriptedModel, SessionId, Tool, ToolPreDecision, Tools } from "../../src/index.js"
import {
  closeOut,
  dataOfType,
  events,
  gate,
  open,
  recordLive,
  requests,
  scenario,
  settle,
  shape,
  token,
  until,
  user
} from "./AuditHarness.js"

type Loose = { readonly [k: string]: any }
const empty = Schema.Struct({})

const okTool = (name: string, mode: "parallel" | "exclusive" = "exclusive", body?: Effect.Effect<any, any>) =>
  Tool.make(name, { description: name, parameters: empty, mode, execute: () => body ?? Effect.succeed("ok") })

const calls = (...cs: ReadonlyArray<readonly [string, string]>) =>
  ScriptedModel.response({ toolCalls: cs.map(([id, name]) => ({ id, name, arguments: {} })) })

const resultsByCall = Effect.map(dataOfType("tool/result"), (ds) =>
  Object.fromEntries(ds.map((d) => [d.message.content[0].toolCallId, {
    text: d.message.content[0].content[0]?.text,
    isError: d.message.content[0].isError,
    error: d.error,
    meta: d.meta
  }])))

const toolEvents = Effect.map(shape, (s) => s.filter((x) => /^(TC|TR|INS\(ns|SE|TE)/.test(x)))

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
        sessionId: SessionId.make("s"), turn, step: 1, callId, name: "num", arguments: raw, params: { n: 41 }
      })
      expect(pres).toEqual([info("c1", 1, "{\"n\":\"41\"}"), info("c4", 2, "{\"n\":\"41\"}")])
      expect(posts.map((p) => ({ callId: p.callId, turn: p.turn, params: p.params, aborted: p.aborted, text: p.output.content[0].text })))
        .toEqual([
          { callId: "c1", turn: 1, params: { n: 41 }, aborted: false, text: "n=42" },
          { callId: "c4", turn: 2, params: { n: 41 }, aborted: false, text: "n=42" }
        ])
      expect(posts[0]!.output).toEqual({ content: [{ type: "text", text: "n=42" }], isError: false, additionalContexts: [], concludesTurn: false })
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
      ScriptedModel.response({ toolCalls: [
        { id: "c1", name: "num", arguments: "{\"n\":\"41\"}" },
        { id: "c2", name: "ghost", arguments: "{}" },
        { id: "c3", name: "num", arguments: "{\"n\":\"x\"}" }
      ] }),
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
        Effect.as(ctx.deferContext(user("d1", "deferred")), { content: "with ctx", additionalContexts: [user("a1", "added")] })
    })
    return Effect.gen(function*() {
      const driver = yield* Driver
      const hooks = yield* Hooks
      yield* hooks.onToolPre((info, next) => info.callId === "c2" ? Effect.succeed(ToolPreDecision.deny("policy")) : next())
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      const reqs = yield* requests
      expect(reqs.length).toBe(2)
      const second = reqs[1]!.messages
      expect(second.map(token)).toEqual(["A", "tool-call c1", "tool-result c1", "tool-result c2", "tool-result c3", "deferred", "added"])
      const blocks = second.slice(2, 5).map((m) => m.content[0] as Loose)
      expect(blocks).toEqual([
        { type: "tool-result", toolCallId: "c1", isError: true, content: [{ type: "text", text: "Error: unknown tool nope" }] },
        { type: "tool-result", toolCallId: "c2", isError: true, content: [{ type: "text", text: "Error: tool call denied: policy" }] },
        { type: "tool-result", toolCallId: "c3", isError: false, content: [{ type: "text", text: "with ctx" }] }
      ])
      expect(second[1]!.content.map((b) => (b as Loose).id)).toEqual(["c1", "c2", "c3"])
      expect(yield* toolEvents).toEqual([
        "TC(c1)", "TR?(c1)", "TC(c2)", "TR?(c2)", "TC(c3)", "TR(c3)", "INS(ns,0,[d1,a1])", "SE(1,1)", "SE(1,2)", "TE(1,completed)"
      ])
    }).pipe(Effect.provide(scenario([calls(["c1", "nope"], ["c2", "ctx"], ["c3", "ctx"]), ScriptedModel.text("done")], { tools: [ctxTool] })))
  })

  it.scoped("8.7: hook registrations end with their scope inside a live agent; onToolPost prepend is outermost", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const hooks = yield* Hooks
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
      expect(r.c1).toEqual({ text: "Error: tool call denied: scoped", isError: true, error: { name: "ToolDeniedError", code: "DENIED" }, meta: undefined })
      expect(r.c2).toEqual({ text: "ok", isError: false, error: undefined, meta: undefined })
    }).pipe(Effect.provide(scenario([calls(["c1", "t"]), ScriptedModel.text("one"), calls(["c2", "t"]), ScriptedModel.text("two")], {
      tools: [okTool("t")]
    }))))

  it.scoped("4.4/8.6/8.7: a PreStep listener and an onTurnStopping listener act inside the loop only while their scope is open", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const hooks = yield* Hooks
      const pre = yield* PreStep
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
      yield* Scope.extend(hooks.onTurnStopping((i) => Effect.sync(() => stops.push(`${i.sessionId}:${i.turn}:${i.step}`))), inner)
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
    }).pipe(Effect.provide(scenario([calls(["c1", "t"]), ScriptedModel.text("done"), ScriptedModel.text("two")], { tools: [okTool("t")] }))))

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
        "TC(c1)", "TR(c1)", "INS(ns,0,[x1])", "TC(c2)", "TR?(c2)", "TC(c3)", "TR?(c3)", "SE(1,1)", "SE(1,2)", "TE(1,completed)"
      ])
      expect((yield* requests)[1]!.messages.map(token)).toEqual(["A", "tool-call c1", "tool-result c1", "tool-result c2", "tool-result c3", "x1"])
    }).pipe(Effect.provide(scenario([calls(["c1", "first"], ["c2", "again"], ["c3", "twice"]), ScriptedModel.text("done")], {
      tools: [withCtx("first", ["x1"]), withCtx("again", ["x1"]), withCtx("twice", ["y1", "y1"])]
    })))
  })

  it.scoped("3.10/4.6: failing and dying tool bodies and a failing ToolPre are results only: no live agent/error, the turn completes", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const hooks = yield* Hooks
      const drain = yield* recordLive
      yield* hooks.onToolPre((info, next) => info.callId === "c3" ? Effect.die(new Error("pre died")) : next())
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      const live = yield* drain
      expect(live.filter((e) => e.type === "agent/error")).toEqual([])
      const r = yield* resultsByCall
      expect(r.c1).toEqual({ text: "Error: bad", isError: true, error: { name: "Error", code: "TOOL_ERROR" }, meta: undefined })
      expect(r.c2).toEqual({ text: "Error: boom", isError: true, error: { name: "ToolDefect", code: "TOOL_DEFECT" }, meta: undefined })
      expect(r.c3).toEqual({ text: "Error: pre died", isError: true, error: { name: "ToolPreHookError", code: "PRE_HOOK_FAILED" }, meta: undefined })
      expect((yield* dataOfType("turn/end")).map((d) => d.reason)).toEqual([{ kind: "completed" }])
    }).pipe(Effect.provide(scenario([calls(["c1", "f"], ["c2", "d"], ["c3", "t"]), ScriptedModel.text("done")], {
      tools: [okTool("f", "exclusive", Effect.fail(new Error("bad"))), okTool("d", "exclusive", Effect.die(new Error("boom"))), okTool("t")]
    }))))

  it.scoped("4.6/8.9: the default pool cap is 10", () => {
    const g = gate()
    const started: Array<string> = []
    const p = Tool.make("p", {
      description: "p",
      parameters: empty,
      mode: "parallel",
      execute: (_p, ctx) => Effect.zipRight(Effect.zipRight(Effect.sync(() => started.push(ctx.callId)), Deferred.await(g)), Effect.succeed("ok"))
    })
    const ids = Array.from({ length: 12 }, (_, i) => `c${i + 1}`)
    return Effect.gen(function*() {
      const driver = yield* Driver
      expect((yield* Tools).maxParallelToolCalls).toBe(10)
      yield* driver.followup(user("A"))
      yield* until(Effect.sync(() => started.length === 10))
      yield* settle
      expect(started).toEqual(ids.slice(0, 10))
      expect((yield* toolEvents).filter((x) => x.startsWith("TC"))).toHaveLength(10)
      yield* open(g)
      expect(yield* closeOut).toEqual([])
      expect(started).toEqual(ids)
      expect((yield* toolEvents).filter((x) => x.startsWith("TR"))).toEqual(ids.map((id) => `TR(${id})`))
    }).pipe(Effect.provide(scenario([calls(...ids.map((id) => [id, "p"] as const)), ScriptedModel.text("done")], { tools: [p] })))
  })

  it.scoped("4.6: ToolPost sees aborted:true for a call whose body succeeded before the cause; its output stays a success", () => {
    const g = gate()
    const started: Array<string> = []
    const slow = Tool.make("slow", {
      description: "slow",
      parameters: empty,
      mode: "parallel",
      execute: (_p, ctx) => Effect.zipRight(Effect.zipRight(Effect.sync(() => started.push(ctx.callId)), Deferred.await(g)), Effect.succeed("late"))
    })
    return Effect.gen(function*() {
      const driver = yield* Driver
      const hooks = yield* Hooks
      const posted: Array<string> = []
      yield* hooks.onToolPost((input, next) => Effect.zipRight(Effect.sync(() => posted.push(`${input.callId}:${input.aborted}`)), next()))
      yield* driver.followup(user("A"))
      yield* until(Effect.sync(() => started.length === 1))
      yield* until(Effect.map(events, (es) => es.some((e) => e.type === "tool/call" && (e.data as Loose).callId === "c2")))
      yield* settle
      yield* driver.cancel(CancelCause.user)
      expect(yield* closeOut).toEqual([])
      expect(yield* toolEvents).toEqual(["TC(c1)", "TC(c2)", "TR✗(c1)", "TR(c2)", "TC(c3)", "TR⊘(c3)", "SE(1,1)", "TE(1,aborted(user))"])
      expect(posted).toEqual(["c1:true", "c2:true"])
      const r = yield* resultsByCall
      expect(r.c2).toEqual({ text: "quick", isError: false, error: undefined, meta: undefined })
    }).pipe(Effect.provide(scenario([calls(["c1", "slow"], ["c2", "quick"], ["c3", "x"])], {
      tools: [slow, okTool("quick", "parallel", Effect.succeed("quick")), okTool("x")]
    })))
  })
})
