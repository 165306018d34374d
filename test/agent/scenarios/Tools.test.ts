/**
 * SPEC 9 scenarios P20-P30 over both stores: tools, max-tokens, provider errors and retries,
 * checkpoints as committed rows, failure paths and resume.
 */
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Duration, Effect, Exit, Schema, TestClock } from "effect"
import {
  CancelCause,
  Driver,
  Hooks,
  Inbox,
  RequestErrorAction,
  ScriptedModel,
  SessionLog,
  Tool,
  ToolPreDecision,
  Tools
} from "../../../src/index.js"
import type { ScriptEntry, ToolDefinition } from "../../../src/index.js"
import {
  agentTest,
  closeOut,
  dataOfType,
  gate,
  open,
  plugin,
  requests,
  scenario,
  settle,
  shape,
  TEXT,
  token,
  until,
  untilEvent,
  user
} from "../harness.js"
import { calls, captured, empty, fileRows, freshFile, from, onBoth, runOn } from "./bothStores.js"

const CALL = ["CH(block-start)", "CH(tool-call-delta)", "CH(block-end)"]
const toolShape = (s: ReadonlyArray<string>) => s.filter((x) => x.startsWith("TC") || x.startsWith("TR"))

/** Follows up A, waits for the first llm/retry and counts the requests 1 ms before `delayMs` has passed; then lets the retry run. */
const requestsJustBeforeRetry = (delayMs: number) =>
  Effect.gen(function*() {
    const d = yield* Driver
    yield* d.followup(user("A"))
    yield* untilEvent((e) => e.type === "llm/retry")
    yield* TestClock.adjust(delayMs - 1)
    yield* settle
    const before = (yield* requests).length
    yield* TestClock.adjust(1)
    yield* d.whenIdle
    return before
  })

// ---------------------------------------------------------------------------------------------------
describe("§4.6 / §9 P20-P28 on both stores: tools and max-tokens", () => {
  it.scoped("P20/C2: tool round trip — TR cites its TC; step 2 has no claim and no RH", () =>
    Effect.gen(function*() {
      const run = yield* onBoth(() => ({
        script: [
          ScriptedModel.response({
            text: "calling echo",
            toolCalls: [{ id: "c1", name: "echo", arguments: { text: "ping" } }]
          }),
          ScriptedModel.text("done")
        ],
        options: {
          tools: [Tool.make("echo", {
            description: "echoes",
            parameters: Schema.Struct({ text: Schema.String }),
            execute: ({ text }) => Effect.succeed(`echo: ${text}`)
          })]
        },
        body: Effect.gen(function*() {
          const d = yield* Driver
          yield* d.followup(user("A"))
          yield* d.whenIdle
          const rs = yield* requests
          expect(rs[1]!.messages.at(-1)!.content).toEqual([
            { type: "tool-result", toolCallId: "c1", isError: false, content: [{ type: "text", text: "echo: ping" }] }
          ])
        })
      }))
      expect(run.shape).toEqual([
        "INS(nt,0,[A])",
        "TS(1)",
        "CLM(nt,0,1)",
        "SS(1,1)",
        "UM(A)",
        "RH(initial)",
        "CH(block-start)",
        "CH(text-delta)",
        "CH(block-end)",
        ...CALL,
        "CH(finish stop)",
        "AM",
        "TC(c1)",
        "TR(c1)",
        "SE(1,1)",
        "SS(1,2)",
        ...TEXT,
        "SE(1,2)",
        "TE(1,completed)"
      ])
      const tc = run.events.find((e) => e.type === "tool/call")!
      const tr = run.events.find((e) => e.type === "tool/result")!
      expect(tc.data).toEqual({ turn: 1, step: 1, callId: "c1", name: "echo", arguments: "{\"text\":\"ping\"}" })
      expect((tr as any).sourceEventSeqs).toEqual([tc.seq])
      expect((tr.data as any).message.content).toEqual([
        { type: "tool-result", toolCallId: "c1", isError: false, content: [{ type: "text", text: "echo: ping" }] }
      ])
      expect(run.requests.map((r) => [r.step, r.messages])).toEqual([
        [1, ["A"]],
        [2, ["A", "calling echo", "tool-result c1"]]
      ])
    }))

  it.scoped("P21: parallel siblings overlap; results keep model order whatever order bodies settle in", () =>
    Effect.gen(function*() {
      const run = yield* onBoth(() => {
        const gates: Record<string, Deferred.Deferred<void>> = { c1: gate(), c2: gate(), c3: gate() }
        const p = Tool.make("p", {
          description: "gated",
          parameters: empty,
          mode: "parallel",
          execute: (_params, ctx) => Effect.as(Deferred.await(gates[ctx.callId]!), "done " + ctx.callId)
        })
        return {
          script: [calls("p", ["c1", "c2", "c3"]), ScriptedModel.text("done")],
          options: { tools: [p] },
          body: Effect.gen(function*() {
            const d = yield* Driver
            const snaps: Array<ReadonlyArray<string>> = []
            yield* d.followup(user("A"))
            yield* untilEvent((e) => e.type === "tool/call" && (e.data as any).callId === "c3")
            yield* settle
            snaps.push(toolShape(yield* shape))
            yield* open(gates.c2!)
            yield* settle
            snaps.push(toolShape(yield* shape))
            yield* open(gates.c1!)
            yield* untilEvent((e) => e.type === "tool/result" && (e.data as any).message.content[0].toolCallId === "c2")
            snaps.push(toolShape(yield* shape))
            yield* open(gates.c3!)
            return snaps
          })
        }
      })
      expect(run.extra).toEqual([
        ["TC(c1)", "TC(c2)", "TC(c3)"],
        ["TC(c1)", "TC(c2)", "TC(c3)"],
        ["TC(c1)", "TC(c2)", "TC(c3)", "TR(c1)", "TR(c2)"]
      ])
      expect(toolShape(run.shape)).toEqual(["TC(c1)", "TC(c2)", "TC(c3)", "TR(c1)", "TR(c2)", "TR(c3)"])
      expect(run.requests[1]!.messages).toEqual([
        "A",
        "tool-call c1",
        "tool-result c1",
        "tool-result c2",
        "tool-result c3"
      ])
    }))

  it.scoped.each(["exclusive", "default"] as const)(
    "P22: an exclusive writer (mode %s) is a barrier between parallel reads",
    (writerMode) =>
      Effect.gen(function*() {
        const run = yield* onBoth(() => {
          const order: Array<string> = []
          const r = Tool.make("r", {
            description: "reader",
            parameters: empty,
            mode: "parallel",
            execute: (_p, ctx) =>
              Effect.gen(function*() {
                order.push(`r-start-${ctx.callId}`)
                yield* Effect.yieldNow()
                order.push(`r-end-${ctx.callId}`)
                return "r"
              })
          })
          const w = Tool.make("w", {
            description: "writer",
            parameters: empty,
            ...(writerMode === "exclusive" ? { mode: "exclusive" as const } : {}),
            execute: (_p, ctx) => Effect.sync(() => (order.push(`w-${ctx.callId}`), "w"))
          })
          return {
            script: [
              ScriptedModel.response({
                toolCalls: [{ id: "A1", name: "r", arguments: {} }, { id: "A2", name: "w", arguments: {} }, {
                  id: "A3",
                  name: "r",
                  arguments: {}
                }]
              }),
              ScriptedModel.text("done")
            ],
            options: { tools: [r, w] },
            body: Effect.as(Effect.flatMap(Driver, (d) => Effect.zipRight(d.followup(user("A")), d.whenIdle)), order)
          }
        })
        expect(run.extra).toEqual(["r-start-A1", "r-end-A1", "w-A2", "r-start-A3", "r-end-A3"])
        expect(toolShape(run.shape)).toEqual(["TC(A1)", "TR(A1)", "TC(A2)", "TR(A2)", "TC(A3)", "TR(A3)"])
      })
  )

  const pool = (cap: number) => () => {
    const gates: Record<string, Deferred.Deferred<void>> = { c1: gate(), c2: gate(), c3: gate(), c4: gate() }
    const started: Array<string> = []
    const p = Tool.make("p", {
      description: "gated",
      parameters: empty,
      mode: "parallel",
      execute: (_params, ctx) =>
        Effect.suspend(() => (started.push(ctx.callId), Effect.as(Deferred.await(gates[ctx.callId]!), "ok")))
    })
    return {
      script: [calls("p", ["c1", "c2", "c3", "c4"]), ScriptedModel.text("done")],
      options: { tools: [p], maxParallelToolCalls: cap },
      body: Effect.gen(function*() {
        const d = yield* Driver
        const snaps: Array<unknown> = []
        yield* d.followup(user("A"))
        yield* until(Effect.sync(() => started.length === cap))
        yield* settle
        snaps.push([...started])
        yield* open(gates.c1!)
        yield* until(Effect.sync(() => started.length === cap + 1))
        yield* settle
        snaps.push([...started], toolShape(yield* shape))
        yield* open(gates.c4!)
        yield* open(gates.c3!)
        yield* settle
        snaps.push(toolShape(yield* shape))
        yield* open(gates.c2!)
        return snaps
      })
    }
  }

  it.scoped("P23/4.6: rolling pool cap 2 — only c1, c2 start; releasing c1 gives TC(c1) TC(c2) TR(c1) TC(c3)", () =>
    Effect.gen(function*() {
      const run = yield* onBoth(pool(2))
      expect(run.extra).toEqual([
        ["c1", "c2"],
        ["c1", "c2", "c3"],
        ["TC(c1)", "TC(c2)", "TR(c1)", "TC(c3)"],
        // c3 settled while c2 still runs: its slot frees and c4 starts; TR(c3) waits for TR(c2)
        ["TC(c1)", "TC(c2)", "TR(c1)", "TC(c3)", "TC(c4)"]
      ])
      expect(toolShape(run.shape)).toEqual([
        "TC(c1)",
        "TC(c2)",
        "TR(c1)",
        "TC(c3)",
        "TC(c4)",
        "TR(c2)",
        "TR(c3)",
        "TR(c4)"
      ])
    }))

  it.scoped("P23/4.6: cap 1 is serial — each call starts only after the previous result committed", () =>
    Effect.gen(function*() {
      const run = yield* onBoth(pool(1))
      expect(run.extra).toEqual([
        ["c1"],
        ["c1", "c2"],
        ["TC(c1)", "TR(c1)", "TC(c2)"],
        ["TC(c1)", "TR(c1)", "TC(c2)"]
      ])
      expect(toolShape(run.shape)).toEqual([
        "TC(c1)",
        "TR(c1)",
        "TC(c2)",
        "TR(c2)",
        "TC(c3)",
        "TR(c3)",
        "TC(c4)",
        "TR(c4)"
      ])
    }))

  const contexts = (mode: "parallel" | "exclusive", cap?: number) => () => {
    const c2Done = gate()
    const t = Tool.make("t", {
      description: "c1 settles after c2",
      parameters: empty,
      mode,
      execute: (_params, ctx) =>
        mode === "parallel" && ctx.callId === "c1"
          ? Effect.as(Deferred.await(c2Done), "one")
          : Effect.zipRight(
            ctx.deferContext(plugin(`def-${ctx.callId}`)),
            Effect.as(open(c2Done), { content: "two", additionalContexts: [plugin(`own-${ctx.callId}`)] })
          )
    })
    return {
      script: [calls("t", ["c1", "c2", "c3"]), ScriptedModel.text("done")],
      options: { tools: [t], ...(cap !== undefined ? { maxParallelToolCalls: cap } : {}) },
      body: Effect.gen(function*() {
        const hooks = yield* Hooks
        yield* hooks.onToolPost((input, next) =>
          Effect.map(
            next(),
            (output) => ({
              ...output,
              additionalContexts: [...output.additionalContexts, plugin(`ctx-${input.callId}`)]
            })
          )
        )
        yield* (yield* Driver).followup(user("A"))
      })
    }
  }

  it.scoped("P24/4.6 parallel: hook contexts follow their own result; all become UMs of the next step after every result", () =>
    Effect.gen(function*() {
      const run = yield* onBoth(contexts("parallel"))
      expect(from(run.shape, "TC(c1)").slice(0, 16)).toEqual([
        "TC(c1)",
        "TC(c2)",
        "TC(c3)",
        "TR(c1)",
        "INS(ns,0,[ctx-c1])",
        "TR(c2)",
        "INS(ns,1,[def-c2,own-c2,ctx-c2])",
        "TR(c3)",
        "INS(ns,4,[def-c3,own-c3,ctx-c3])",
        "SE(1,1)",
        "CLM(ns,0,7)",
        "SS(1,2)",
        "UM(ctx-c1)",
        "UM(def-c2)",
        "UM(own-c2)",
        "UM(ctx-c2)"
      ])
      expect(run.requests[1]!.messages).toEqual([
        "A",
        "tool-call c1",
        "tool-result c1",
        "tool-result c2",
        "tool-result c3",
        "ctx-c1",
        "def-c2",
        "own-c2",
        "ctx-c2",
        "def-c3",
        "own-c3",
        "ctx-c3"
      ])
    }))

  it.scoped("P24/4.6 exclusive: each result carries its contexts; the UMs still come after the batch's last TR", () =>
    Effect.gen(function*() {
      const run = yield* onBoth(contexts("exclusive"))
      expect(from(run.shape, "TC(c1)").slice(0, 12)).toEqual([
        "TC(c1)",
        "TR(c1)",
        "INS(ns,0,[def-c1,own-c1,ctx-c1])",
        "TC(c2)",
        "TR(c2)",
        "INS(ns,3,[def-c2,own-c2,ctx-c2])",
        "TC(c3)",
        "TR(c3)",
        "INS(ns,6,[def-c3,own-c3,ctx-c3])",
        "SE(1,1)",
        "CLM(ns,0,9)",
        "SS(1,2)"
      ])
      const lastTr = run.shape.lastIndexOf("TR(c3)")
      const firstUm = run.shape.findIndex((x, i) => i > 4 && x.startsWith("UM("))
      expect(firstUm).toBeGreaterThan(lastTr)
    }))

  it.scoped("P24/4.6 with pool cap 2: contexts are inserted in model order of results", () =>
    Effect.gen(function*() {
      const run = yield* onBoth(contexts("parallel", 2))
      // c2 settles first, so its slot may start c3 before TR(c1) (4.6); results stay in model order
      expect(toolShape(run.shape).slice(0, 2)).toEqual(["TC(c1)", "TC(c2)"])
      expect(toolShape(run.shape).filter((x) => x.startsWith("TR"))).toEqual(["TR(c1)", "TR(c2)", "TR(c3)"])
      expect(run.shape.indexOf("TC(c3)")).toBeGreaterThan(run.shape.indexOf("TC(c2)"))
      const inserted = run.events.filter((e) =>
        e.type === "agent/inbox/spliced" && (e.data as any).target === "next-step" &&
        (e.data as any).removedCount === undefined
      )
      expect(inserted.map((e) => [(e.data as any).start, (e.data as any).inserted.map((m: any) => m.id)])).toEqual([
        [0, ["ctx-c1"]],
        [1, ["def-c2", "own-c2", "ctx-c2"]],
        [4, ["def-c3", "own-c3", "ctx-c3"]]
      ])
    }))

  it.scoped("P25: denials and pre-hook failures are ordered results; ToolPost sees c1 and c2 only", () =>
    Effect.gen(function*() {
      const run = yield* onBoth(() => {
        const ran: Array<string> = []
        const posts: Array<string> = []
        const t = Tool.make("t", {
          description: "records",
          parameters: empty,
          execute: (_p, ctx) => Effect.sync(() => (ran.push(ctx.callId), "ran"))
        })
        return {
          script: [calls("t", ["c1", "c2", "c3"]), ScriptedModel.text("done")],
          options: { tools: [t] },
          body: Effect.gen(function*() {
            const hooks = yield* Hooks
            yield* hooks.onToolPre((input, next) =>
              input.callId === "c2"
                ? Effect.succeed(ToolPreDecision.deny("blocked by policy"))
                : input.callId === "c3"
                ? Effect.fail(new Error("pre exploded"))
                : next()
            )
            yield* hooks.onToolPost((input, next) =>
              Effect.zipRight(Effect.sync(() => posts.push(input.callId)), next())
            )
            const d = yield* Driver
            yield* d.followup(user("A"))
            yield* d.whenIdle
            return { ran, posts }
          })
        }
      })
      expect(run.extra).toEqual({ ran: ["c1"], posts: ["c1", "c2"] })
      expect(toolShape(run.shape)).toEqual(["TC(c1)", "TR(c1)", "TC(c2)", "TR?(c2)", "TC(c3)", "TR?(c3)"])
      const results = run.events.filter((e) => e.type === "tool/result").map((e) => e.data as any)
      expect(results.map((d) => d.error)).toEqual([
        undefined,
        { name: "ToolDeniedError", code: "DENIED" },
        { name: "ToolPreHookError", code: "PRE_HOOK_FAILED" }
      ])
      expect(results.map((d) => d.message.content[0].content[0].text)).toEqual([
        "ran",
        "Error: tool call denied: blocked by policy",
        "Error: pre exploded"
      ])
      expect(run.shape).toContain("SS(1,2)")
    }))

  it.scoped("P26: a tool concludes the turn — 1 request, TR SE TE(completed)", () =>
    Effect.gen(function*() {
      const run = yield* onBoth(() => ({
        script: [calls("fin", ["c1"])],
        options: {
          tools: [Tool.make("fin", {
            description: "concludes",
            parameters: empty,
            execute: () => Effect.succeed({ content: "ok", concludesTurn: true })
          })]
        },
        body: Effect.flatMap(Driver, (d) => d.followup(user("A")))
      }))
      expect(run.requests).toHaveLength(1)
      expect(run.shape.slice(-4)).toEqual(["TC(c1)", "TR(c1)", "SE(1,1)", "TE(1,completed)"])
    }))

  it.scoped("P27: max-tokens ends the turn, not the next one", () =>
    Effect.gen(function*() {
      const run = yield* onBoth(() => ({
        script: [ScriptedModel.response({ text: "trunc", finish: "max-tokens" }), ScriptedModel.text("ok")],
        body: Effect.gen(function*() {
          const d = yield* Driver
          yield* d.followup(user("A"))
          yield* d.whenIdle
          yield* d.followup(user("B"))
          yield* d.whenIdle
          return (yield* (yield* SessionLog).messages).map(token)
        })
      }))
      expect(run.events.filter((e) => e.type === "turn/end").map((e) => (e.data as any).reason)).toEqual([
        { kind: "max-tokens" },
        { kind: "completed" }
      ])
      expect(run.shape.filter((x) => x.startsWith("CH(finish"))).toEqual(["CH(finish max-tokens)", "CH(finish stop)"])
      expect(run.requests.map((r) => r.turn)).toEqual([1, 2])
      expect(run.extra).toEqual(["A", "trunc", "B", "ok"])
    }))

  it.scoped("4.3/4.5 max-tokens continuation: a turn-stopping steer after a max-tokens step takes step 2; the turn stays max-tokens (R16)", () =>
    Effect.gen(function*() {
      const run = yield* onBoth(() => {
        const driver = captured()
        let first = true
        return {
          script: [ScriptedModel.response({ text: "trunc", finish: "max-tokens" }), ScriptedModel.text("rest")],
          body: Effect.gen(function*() {
            const d = yield* driver.capture
            yield* (yield* Hooks).onTurnStopping(
              () => (first ? ((first = false), driver.get.steer(user("G", "go on"))) : Effect.void)
            )
            yield* d.followup(user("A"))
          })
        }
      })
      expect(from(run.shape, "RH(initial)")).toEqual([
        "RH(initial)",
        "CH(block-start)",
        "CH(text-delta)",
        "CH(block-end)",
        "CH(finish max-tokens)",
        "AM",
        "SE(1,1)",
        "INS(ns,0,[G])",
        "CLM(ns,0,1)",
        "SS(1,2)",
        "UM(G)",
        ...TEXT,
        "SE(1,2)",
        "TE(1,max-tokens)"
      ])
      expect(run.requests.map((r) => [r.step, r.messages])).toEqual([
        [1, ["A"]],
        [2, ["A", "trunc", "go on"]]
      ])
      expect(run.live).toEqual([
        "inserted(A)",
        "status(running)",
        "claimed(A,1)",
        "inserted(G)",
        "claimed(G,1)",
        "status(idle)"
      ])
    }))

  it.scoped("P28: no dispatch from a truncated response — AM with empty content, usage kept, TE(max-tokens)", () =>
    Effect.gen(function*() {
      const run = yield* onBoth(() => {
        const ran: Array<string> = []
        return {
          script: [ScriptedModel.response({
            toolCalls: [{ id: "c1", name: "echo", arguments: "{\"te", partial: true }],
            finish: "max-tokens",
            usage: { inputTokens: 5, outputTokens: 7 }
          })],
          options: {
            tools: [Tool.make("echo", {
              description: "echoes",
              parameters: Schema.Struct({ text: Schema.String }),
              execute: ({ text }) => Effect.sync(() => (ran.push(text), text))
            })]
          },
          body: Effect.gen(function*() {
            const d = yield* Driver
            yield* d.followup(user("A"))
            yield* d.whenIdle
            expect((yield* (yield* SessionLog).messages).map(token)).toEqual(["A"])
            return ran
          })
        }
      })
      expect(run.shape).toEqual([
        "INS(nt,0,[A])",
        "TS(1)",
        "CLM(nt,0,1)",
        "SS(1,1)",
        "UM(A)",
        "RH(initial)",
        "CH(block-start)",
        "CH(tool-call-delta)",
        "CH(usage)",
        "CH(finish max-tokens)",
        "AM",
        "SE(1,1)",
        "TE(1,max-tokens)"
      ])
      const am = run.events.find((e) => e.type === "assistant/message")!.data as any
      expect([am.turn, am.step, am.attempt, am.message.content, am.usage]).toEqual([1, 1, 1, [], {
        inputTokens: 5,
        outputTokens: 7
      }])
      expect(run.extra).toEqual([])
    }))
})

// ---------------------------------------------------------------------------------------------------
describe("§4.5 / §9 P29-P30 on both stores: provider errors and retries under TestClock", () => {
  it.scoped("P29: terminal provider error — no AM, no RT, error verbatim, one agent/error(1,1)", () =>
    Effect.gen(function*() {
      const run = yield* onBoth(() => ({
        script: [ScriptedModel.fail({ message: "provider 401", code: "AUTH", status: 401 })],
        body: Effect.flatMap(Driver, (d) => d.followup(user("A")))
      }))
      expect(run.shape).toEqual([
        "INS(nt,0,[A])",
        "TS(1)",
        "CLM(nt,0,1)",
        "SS(1,1)",
        "UM(A)",
        "RH(initial)",
        "CH(finish error)",
        "SE(1,1)",
        "TE(1,error(AUTH))"
      ])
      expect((run.events[8]!.data as any).reason).toEqual({
        kind: "error",
        error: { message: "provider 401", code: "AUTH", status: 401 }
      })
      expect(run.live).toEqual(["inserted(A)", "status(running)", "claimed(A,1)", "error(1,1)", "status(idle)"])
    }))

  const p30 = (third: ScriptEntry) => () => ({
    script: [
      ScriptedModel.fail({ code: "RATE_LIMIT", status: 429, message: "slow" }),
      ScriptedModel.fail({ code: "SERVICE_UNAVAILABLE", status: 503, message: "down" }),
      third
    ],
    body: Effect.gen(function*() {
      const d = yield* Driver
      const retries = dataOfType("llm/retry")
      const seen: Array<unknown> = []
      yield* d.followup(user("A"))
      yield* untilEvent((e) => e.type === "llm/retry")
      const d1 = (yield* retries)[0]!.delayMs as number
      yield* settle
      seen.push((yield* requests).length)
      yield* TestClock.adjust(d1 - 1)
      yield* settle
      seen.push((yield* requests).length)
      yield* TestClock.adjust(1)
      yield* until(Effect.map(retries, (a) => a.length === 2))
      seen.push((yield* requests).length)
      const d2 = (yield* retries)[1]!.delayMs as number
      yield* TestClock.adjust(d2 - 1)
      yield* settle
      seen.push((yield* requests).length)
      yield* TestClock.adjust(1)
      return { seen, d1, d2 }
    })
  })

  it.scoped("P30/C6: retries stay in the same step; each attempt waits exactly delayMs on the TestClock", () =>
    Effect.gen(function*() {
      const run = yield* onBoth(p30(ScriptedModel.text("ok")))
      expect(run.extra.seen).toEqual([1, 1, 2, 2])
      expect(run.extra.d1).toBeGreaterThanOrEqual(800)
      expect(run.extra.d1).toBeLessThanOrEqual(1200)
      expect(run.extra.d2).toBeGreaterThanOrEqual(1600)
      expect(run.extra.d2).toBeLessThanOrEqual(2400)
      expect(run.shape).toEqual([
        "INS(nt,0,[A])",
        "TS(1)",
        "CLM(nt,0,1)",
        "SS(1,1)",
        "UM(A)",
        "RH(initial)",
        "CH(finish error)",
        "RT(1)",
        "CH(finish error)",
        "RT(2)",
        ...TEXT,
        "SE(1,1)",
        "TE(1,completed)"
      ])
      const retries = run.events.filter((e) => e.type === "llm/retry").map((e) => e.data as any)
      expect(retries.map((r) => [r.turn, r.step, r.attempt, r.failure])).toEqual([
        [1, 1, 1, { code: "RATE_LIMIT", status: 429, message: "slow" }],
        [1, 1, 2, { code: "SERVICE_UNAVAILABLE", status: 503, message: "down" }]
      ])
      const chunks = run.events.filter((e) => e.type === "assistant/chunk")
      expect(chunks.map((e) => (e.data as any).attempt)).toEqual([1, 2, 3, 3, 3, 3])
      const am = run.events.find((e) => e.type === "assistant/message")!
      expect((am.data as any).attempt).toBe(3)
      expect((am as any).sourceEventSeqs).toEqual(chunks.slice(2).map((e) => e.seq))
      // the request/header is logged once; times follow the Clock: the AM is stamped d1 + d2 after the RT(1)
      const rt1 = run.events.find((e) => e.type === "llm/retry")!
      expect(am.time - rt1.time).toBe(run.extra.d1 + run.extra.d2)
      expect(run.requests.map((r) => [r.turn, r.step, r.attempt, r.messages])).toEqual([
        [1, 1, 1, ["A"]],
        [1, 1, 2, ["A"]],
        [1, 1, 3, ["A"]]
      ])
      expect(run.trace).toEqual(["idle", "running", "idle"])
    }))

  it.scoped("P30: a third failure ends the turn error(SERVICE_UNAVAILABLE) after 3 requests and 2 llm/retry", () =>
    Effect.gen(function*() {
      const run = yield* onBoth(p30(ScriptedModel.fail({ code: "SERVICE_UNAVAILABLE", status: 503, message: "down" })))
      expect(run.requests).toHaveLength(3)
      expect(run.shape.slice(5)).toEqual([
        "RH(initial)",
        "CH(finish error)",
        "RT(1)",
        "CH(finish error)",
        "RT(2)",
        "CH(finish error)",
        "SE(1,1)",
        "TE(1,error(SERVICE_UNAVAILABLE))"
      ])
      expect(run.live.filter((x) => x.startsWith("error"))).toEqual(["error(1,1)"])
    }))

  it.scoped("4.5 D10: retryAfterMs floors the delay (5000 ms for a 429 on attempt 1)", () =>
    Effect.gen(function*() {
      const run = yield* onBoth(() => ({
        script: [
          ScriptedModel.fail({ code: "RATE_LIMIT", status: 429, message: "slow", retryAfterMs: 5000 }),
          ScriptedModel.text("ok")
        ],
        body: requestsJustBeforeRetry(5000)
      }))
      expect(run.extra).toBe(1)
      expect(run.events.find((e) => e.type === "llm/retry")!.data).toMatchObject({ attempt: 1, delayMs: 5000 })
      expect(run.shape.slice(-3)).toEqual(["AM", "SE(1,1)", "TE(1,completed)"])
    }))

  it.scoped("4.5: an onRequestError listener's Retry is logged rounded to whole ms and slept; a non-retryable failure is retried too", () =>
    Effect.gen(function*() {
      const run = yield* onBoth(() => ({
        script: [ScriptedModel.fail({ code: "AUTH", status: 401, message: "no" }), ScriptedModel.text("ok")],
        body: Effect.gen(function*() {
          const hooks = yield* Hooks
          const inputs: Array<unknown> = []
          yield* hooks.onRequestError((input, next) =>
            input.attempt === 1
              ? Effect.sync(
                () => (inputs.push([input.turn, input.step, input.attempt, input.failure.code]),
                  RequestErrorAction.retry(Duration.micros(2_600n)))
              )
              : next()
          )
          return { inputs, before: yield* requestsJustBeforeRetry(3) }
        })
      }))
      expect(run.extra).toEqual({ inputs: [[1, 1, 1, "AUTH"]], before: 1 })
      expect((run.events.find((e) => e.type === "llm/retry")!.data as any).delayMs).toBe(3)
      expect(run.requests.map((r) => r.attempt)).toEqual([1, 2])
    }))

  it.scoped("4.5: a cancel during the backoff sleep aborts the turn; no further attempt; SE then TE(aborted)", () =>
    Effect.gen(function*() {
      const run = yield* onBoth(() => ({
        script: [ScriptedModel.fail({ code: "RATE_LIMIT", status: 429, message: "slow" }), ScriptedModel.text("never")],
        body: Effect.gen(function*() {
          const d = yield* Driver
          yield* d.followup(user("A"))
          yield* untilEvent((e) => e.type === "llm/retry")
          yield* d.cancel(CancelCause.user)
          yield* d.whenIdle
          yield* TestClock.adjust("10 seconds")
        })
      }))
      expect(run.shape.slice(5)).toEqual(["RH(initial)", "CH(finish error)", "RT(1)", "SE(1,1)", "TE(1,aborted(user))"])
      expect(run.requests).toHaveLength(1)
      expect(run.live).toEqual(["inserted(A)", "status(running)", "claimed(A,1)", "status(idle)"])
    }))

  it.scoped("4.5: a provider-side aborted finish is a failure (retried by status), never a cancellation", () =>
    Effect.gen(function*() {
      const run = yield* onBoth(() => ({
        script: [ScriptedModel.fail({ code: "ABORTED", message: "provider aborted" }, { finish: "aborted" })],
        body: Effect.flatMap(Driver, (d) => d.followup(user("A")))
      }))
      expect(run.shape.slice(5)).toEqual(["RH(initial)", "CH(finish aborted)", "SE(1,1)", "TE(1,error(ABORTED))"])
      expect(run.live.filter((x) => x.startsWith("error"))).toEqual(["error(1,1)"])
    }))
})

// ---------------------------------------------------------------------------------------------------
describe("§4.5 Q4 / §4.6 START 2 on both stores: checkpoints are committed rows", () => {
  /** What a probe saw: live log length, durableSeq and, on SQLite, the rows in the file. */
  const probeAt = (
    file: string | undefined,
    holder: { log?: SessionLog["Type"] },
    label: string,
    into: Array<unknown>
  ) =>
    Effect.suspend(() =>
      Effect.zipWith(holder.log!.events, holder.log!.durableSeq, (es, durable) => {
        into.push({ label, live: es.length, durable, file: file === undefined ? es.length : fileRows(file).length })
      })
    )

  it.scoped("Q4: each attempt is dispatched only after every event so far (RH, RT) is in the file", () =>
    Effect.gen(function*() {
      const run = yield* onBoth((file) => {
        const holder: { log?: SessionLog["Type"] } = {}
        const seen: Array<unknown> = []
        return {
          script: [
            ScriptedModel.fail({ code: "RATE_LIMIT", status: 429, message: "slow" }, {
              awaitBefore: probeAt(file, holder, "attempt 1", seen)
            }),
            ScriptedModel.text("ok", { awaitBefore: probeAt(file, holder, "attempt 2", seen) })
          ],
          body: Effect.gen(function*() {
            holder.log = yield* SessionLog
            yield* (yield* Hooks).onRequestError(() => Effect.succeed(RequestErrorAction.retry(Duration.millis(10))))
            yield* (yield* Driver).followup(user("A"))
            yield* untilEvent((e) => e.type === "llm/retry")
            yield* TestClock.adjust(10)
            return seen
          })
        }
      })
      // attempt 1: INS TS CLM SS UM RH (6 events); attempt 2: + CH(finish error) RT (8 events)
      expect(run.extra).toEqual([
        { label: "attempt 1", live: 6, durable: 5, file: 6 },
        { label: "attempt 2", live: 8, durable: 7, file: 8 }
      ])
    }))

  it.scoped("START 2: every parallel body starts only after its own tool/call row is in the file", () =>
    Effect.gen(function*() {
      const run = yield* onBoth((file) => {
        const holder: { log?: SessionLog["Type"] } = {}
        const seen: Array<unknown> = []
        const p = Tool.make("p", {
          description: "probes",
          parameters: empty,
          mode: "parallel",
          execute: (_params, ctx) =>
            Effect.zipWith(holder.log!.events, holder.log!.durableSeq, (es, durable) => {
              const tc = es.find((e) => e.type === "tool/call" && (e.data as any).callId === ctx.callId)!
              const rows = file === undefined ? es.length : fileRows(file).length
              seen.push([ctx.callId, tc.seq < rows, tc.seq <= durable])
              return "ok"
            })
        })
        return {
          script: [calls("p", ["c1", "c2", "c3"]), ScriptedModel.text("done")],
          options: { tools: [p] },
          body: Effect.gen(function*() {
            holder.log = yield* SessionLog
            yield* (yield* Driver).followup(user("A"))
            yield* (yield* Driver).whenIdle
            return seen
          })
        }
      })
      expect(run.extra).toEqual([["c1", true, true], ["c2", true, true], ["c3", true, true]])
      expect(toolShape(run.shape)).toEqual(["TC(c1)", "TC(c2)", "TC(c3)", "TR(c1)", "TR(c2)", "TR(c3)"])
    }))
})

// ---------------------------------------------------------------------------------------------------
describe("§4.5 / §4.6 / §4.7 on both stores: failure paths and resume", () => {
  it.scoped("4.6 D7: a ToolPost failure → TOOL_INTERNAL_ERROR, ⟨TC TR⟩ for the unstarted call; the context stays pending non-waking", () =>
    Effect.gen(function*() {
      const run = yield* onBoth(() => ({
        script: [calls("t", ["c1", "c2", "c3"]), ScriptedModel.text("two")],
        options: {
          tools: [Tool.make("t", {
            description: "t",
            parameters: empty,
            execute: (_p, ctx) =>
              Effect.succeed({ content: "ok", additionalContexts: ctx.callId === "c1" ? [plugin("X")] : [] })
          })]
        },
        body: Effect.gen(function*() {
          yield* (yield* Hooks).onToolPost((input, next) =>
            input.callId === "c2" ? Effect.fail({ message: "post broke", code: "POST" }) : next()
          )
          const d = yield* Driver
          yield* d.followup(user("A"))
          yield* d.whenIdle
          const pending = (yield* (yield* Inbox).nextStep).map((m) => m.id)
          yield* d.followup(user("B"))
          return pending
        })
      }))
      expect(run.extra).toEqual(["X"])
      const s = run.shape
      expect(s.slice(s.indexOf("TC(c1)"), s.indexOf("TS(2)") + 6)).toEqual([
        "TC(c1)",
        "TR(c1)",
        "INS(ns,0,[X])",
        "TC(c2)",
        "TR?(c2)",
        "TC(c3)",
        "TR?(c3)",
        "SE(1,1)",
        "TE(1,error(TOOL_INTERNAL_ERROR))",
        "INS(nt,0,[B])",
        "TS(2)",
        "CLM(ns,0,1)",
        "CLM(nt,0,1)",
        "SS(2,1)",
        "UM(X)",
        "UM(B)"
      ])
      const codes = run.events.filter((e) => e.type === "tool/result").map((e) => (e.data as any).error?.code)
      expect(codes).toEqual([undefined, "TOOL_INTERNAL_ERROR", "TOOL_INTERNAL_ERROR"])
      expect(run.live.filter((x) => x.startsWith("error") || x.startsWith("status"))).toEqual([
        "status(running)",
        "error(1,1)",
        "status(idle)",
        "status(running)",
        "status(idle)"
      ])
    }))

  it.scoped("4.5 Q5: a stream ending without a finish → synthetic NO_FINISH after the logged chunks; no AM", () =>
    Effect.gen(function*() {
      const run = yield* onBoth(() => ({
        script: [
          ScriptedModel.chunks([{ type: "block-start", index: 0, block: "text" }, {
            type: "text-delta",
            index: 0,
            text: "x"
          }])
        ],
        body: Effect.flatMap(Driver, (d) => d.followup(user("A")))
      }))
      expect(run.shape.slice(5)).toEqual([
        "RH(initial)",
        "CH(block-start)",
        "CH(text-delta)",
        "CH(finish error)",
        "SE(1,1)",
        "TE(1,error(NO_FINISH))"
      ])
    }))

  it.scoped("4.5 Q5: a delta for an unopened index → synthetic MALFORMED_STREAM in its place; reading stops", () =>
    Effect.gen(function*() {
      const run = yield* onBoth(() => ({
        script: [ScriptedModel.chunks([
          { type: "block-start", index: 0, block: "text" },
          { type: "text-delta", index: 3, text: "x" },
          { type: "block-end", index: 0 },
          { type: "finish", finish: { kind: "stop" } }
        ])],
        body: Effect.flatMap(Driver, (d) => d.followup(user("A")))
      }))
      expect(run.shape.slice(5)).toEqual([
        "RH(initial)",
        "CH(block-start)",
        "CH(finish error)",
        "SE(1,1)",
        "TE(1,error(MALFORMED_STREAM))"
      ])
      expect(run.events.filter((e) => e.type === "assistant/chunk")).toHaveLength(2)
    }))

  it.scoped("4.6: a concluding result with a context still takes another step; without one the turn ends after the batch", () =>
    Effect.gen(function*() {
      const run = yield* onBoth(() => ({
        script: [calls("fin", ["c1", "c2"]), ScriptedModel.text("more")],
        options: {
          tools: [Tool.make("fin", {
            description: "concludes",
            parameters: empty,
            execute: (_p, ctx) =>
              Effect.succeed({
                content: "ok",
                concludesTurn: true,
                additionalContexts: ctx.callId === "c2" ? [plugin("K")] : []
              })
          })]
        },
        body: Effect.flatMap(Driver, (d) => d.followup(user("A")))
      }))
      expect(from(run.shape, "TC(c1)")).toEqual([
        "TC(c1)",
        "TR(c1)",
        "TC(c2)",
        "TR(c2)",
        "INS(ns,0,[K])",
        "SE(1,1)",
        "CLM(ns,0,1)",
        "SS(1,2)",
        "UM(K)",
        ...TEXT,
        "SE(1,2)",
        "TE(1,completed)"
      ])
      expect(run.requests.map((r) => r.messages)).toEqual([["A"], [
        "A",
        "tool-call c1",
        "tool-result c1",
        "tool-result c2",
        "K"
      ]])
    }))

  it.scoped("4.5 Q1/Q2: a driver resuming the SQLite file logs RH(resume) with the stored config, then RH(change) when a hook changes it", () =>
    Effect.gen(function*() {
      const file = freshFile()
      const first = yield* runOn({
        script: [ScriptedModel.text("one")],
        options: { agent: { system: "sys", maxTokens: 64 } },
        body: Effect.flatMap(Driver, (d) => d.followup(user("A")))
      }, file)
      expect(first.shape.slice(-2)).toEqual(["SE(1,1)", "TE(1,completed)"])
      const second = yield* runOn({
        script: [ScriptedModel.text("two"), ScriptedModel.text("three")],
        options: { resume: true },
        body: Effect.gen(function*() {
          const d = yield* Driver
          yield* d.followup(user("B"))
          yield* d.whenIdle
          yield* (yield* Hooks).onRequest((input, next) => Effect.map(next(), (c) => ({ ...c, temperature: 0.5 })))
          yield* d.followup(user("C"))
        })
      }, file)
      expect(second.violations).toEqual([])
      expect(second.file).toEqual(JSON.parse(JSON.stringify(second.events)))
      expect(second.events.slice(0, first.events.length)).toEqual(first.events)
      const tail = second.shape.slice(first.events.length)
      expect(tail).toEqual([
        "ES",
        "INS(nt,0,[B])",
        "TS(2)",
        "CLM(nt,0,1)",
        "SS(2,1)",
        "UM(B)",
        "RH(resume)",
        ...TEXT,
        "SE(2,1)",
        "TE(2,completed)",
        "INS(nt,0,[C])",
        "TS(3)",
        "CLM(nt,0,1)",
        "SS(3,1)",
        "UM(C)",
        "RH(change)",
        ...TEXT,
        "SE(3,1)",
        "TE(3,completed)"
      ])
      const headers = second.events.filter((e) => e.type === "request/header").map((e) => (e.data as any).header)
      expect(headers.map((h) => [h.system, h.maxTokens, h.temperature])).toEqual([
        ["sys", 64, undefined],
        ["sys", 64, undefined],
        ["sys", 64, 0.5]
      ])
      expect(second.requests.map((r) => r.messages)).toEqual([["A", "one", "B"], ["A", "one", "B", "two", "C"]])
    }))
})

// ---------------------------------------------------------------------------------------------------
describe("§4.6 P23-P24 on the memory store: the pool of one and contexts of two calls", () => {
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
  agentTest(
    "P23: cap 1 is fully serial",
    scenario(
      [calls("p", ["c1", "c2", "c3"]), ScriptedModel.text("done")],
      { tools: [p23serial], maxParallelToolCalls: 1 }
    ),
    function*({ driver }) {
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect(live1).toEqual(["start-c1", "end-c1", "start-c2", "end-c2", "start-c3", "end-c3"])
      expect(yield* closeOut).toEqual([])
    }
  )

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
      Effect.map(
        next(),
        (output) => ({ ...output, additionalContexts: [...output.additionalContexts, plugin(`ctx-${input.callId}`)] })
      )
    )
  })
  const c2Done24 = gate()
  const p24 = Tool.make("t", {
    description: "c1 settles after c2",
    parameters: empty,
    mode: "parallel",
    execute: (_params, ctx) =>
      ctx.callId === "c1" ? Effect.as(Deferred.await(c2Done24), "one") : Effect.as(open(c2Done24), "two")
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
      [calls("t", ["c1", "c2"]), ScriptedModel.text("done")],
      { tools: [tool] }
    )))

  it.scoped(
    "P24: tool contexts enter after all results (parallel)",
    contextsAfterAllResults(p24, [
      "TC(c1)",
      "TC(c2)",
      "TR(c1)",
      "INS(ns,0,[ctx-c1])",
      "TR(c2)",
      "INS(ns,1,[ctx-c2])",
      "SE(1,1)",
      "CLM(ns,0,2)",
      "SS(1,2)",
      "UM(ctx-c1)",
      "UM(ctx-c2)"
    ])
  )

  const x24 = Tool.make("t", { description: "plain", parameters: empty, execute: () => Effect.succeed("ok") })
  it.scoped(
    "P24: tool contexts enter after all results (exclusive)",
    contextsAfterAllResults(x24, [
      "TC(c1)",
      "TR(c1)",
      "INS(ns,0,[ctx-c1])",
      "TC(c2)",
      "TR(c2)",
      "INS(ns,1,[ctx-c2])",
      "SE(1,1)",
      "CLM(ns,0,2)",
      "SS(1,2)",
      "UM(ctx-c1)",
      "UM(ctx-c2)"
    ])
  )
})
