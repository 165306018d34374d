/**
 * Tool calls in a step (SPEC 4.6): contexts, conclusion and arguments, result mapping, ToolPost,
 * checkpoints and cancels from hooks, order of START checks.
 */
import { describe, expect, it } from "@effect/vitest"
import { Context, Data, Deferred, Effect, Fiber, Layer, Schema } from "effect"
import {
  CancelCause,
  Driver,
  Hooks,
  MemoryStoreControl,
  MemoryStoreControl as MemoryStoreControlTag,
  PreStepDecision,
  RequestErrorAction,
  ScriptedModel,
  Tool,
  ToolPreDecision,
  Tools
} from "../../src/index.js"
import {
  agentTest,
  closeOut,
  dataOfType,
  events,
  gate,
  open,
  plugin,
  reasons,
  recordLive,
  requests,
  scenario,
  settle,
  shape,
  texts,
  toolShape,
  until,
  untilEvent,
  user
} from "./harness.js"
import { resumeAfterRun } from "./resumeAfterRun.js"
import { calls, empty, okTool, resultsByCall } from "./toolFixtures.js"

type Loose = { readonly [k: string]: any }

// ---------------------------------------------------------------------------------------------------
const gatedTool = (
  name: string,
  mode: "parallel" | "exclusive",
  g: Deferred.Deferred<void>,
  started?: Array<string>,
  result: Effect.Effect<any, any> = Effect.succeed("ok")
) =>
  Tool.make(name, {
    description: name,
    parameters: empty,
    mode,
    execute: (_p, ctx) =>
      Effect.zipRight(Effect.zipRight(Effect.sync(() => started?.push(ctx.callId)), Deferred.await(g)), result)
  })

class Oops extends Schema.TaggedError<Oops>("Oops")("Oops", { message: Schema.String, code: Schema.String }) {}
const ok = Tool.make("ok", { description: "", parameters: empty, execute: () => Effect.succeed("ok") })
const typed = Tool.make("typed", {
  description: "",
  parameters: Schema.Struct({ n: Schema.Number }),
  execute: () => Effect.succeed("x")
})
const resultText = (d: any) => d.message.content[0].content[0].text as string

const plainError = new Error("plain went wrong")

class Boom extends Data.TaggedError("Boom")<{ readonly message: string; readonly code: string }> {}

let ran = 0

/** Prompts `A` and waits until `n` tool bodies have started and every other fiber has run. */
const promptUntilStarted = (driver: Context.Tag.Service<Driver>, started: ReadonlyArray<string>, n: number) =>
  Effect.gen(function*() {
    yield* driver.followup(user("A"))
    yield* until(Effect.sync(() => started.length === n))
    yield* settle
  })

describe("4.6 tools: contexts, conclusion, arguments", () => {
  const bodyGate = gate()
  const ctxTool = Tool.make("ctx", {
    description: "adds a context after a gate",
    parameters: empty,
    execute: (_p, c) =>
      Effect.as(Deferred.await(bodyGate), { content: "done", additionalContexts: [plugin(`ctx-${c.callId}`)] })
  })
  agentTest(
    "4.6 COMMIT step 3: contexts are inserted at s = |next-step| before the insertion (after a steer that arrived during the body)",
    scenario(
      [ScriptedModel.response({ toolCalls: [{ id: "c1", name: "ctx", arguments: {} }] }), ScriptedModel.text("ok")],
      { tools: [ctxTool] }
    ),
    function*({ driver }) {
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "tool/call")
      yield* driver.steer(user("S"))
      yield* open(bodyGate)
      yield* driver.whenIdle
      const s = yield* shape
      expect(s.slice(s.indexOf("TR(c1)"), s.indexOf("TR(c1)") + 5)).toEqual([
        "TR(c1)",
        "INS(ns,1,[ctx-c1])",
        "SE(1,1)",
        "CLM(ns,0,2)",
        "SS(1,2)"
      ])
      expect(yield* texts).toEqual(["A", "S", "ctx-c1"])
      expect(yield* closeOut).toEqual([])
    }
  )

  const shared = Tool.make("shared", {
    description: "always the same context id",
    parameters: empty,
    mode: "parallel",
    execute: () => Effect.succeed({ content: "done", additionalContexts: [plugin("same")] })
  })
  const known = Tool.make("known", {
    description: "a context id that is already known",
    parameters: empty,
    execute: () => Effect.succeed({ content: "done", additionalContexts: [plugin("A")] })
  })
  agentTest(
    "4.6/3.9: a known context id or one repeated by a later call of the batch gives INVALID_TOOL_OUTPUT; its contexts are dropped",
    scenario(
      [
        ScriptedModel.response({
          toolCalls: [{ id: "c1", name: "shared", arguments: {} }, { id: "c2", name: "shared", arguments: {} }, {
            id: "c3",
            name: "known",
            arguments: {}
          }]
        }),
        ScriptedModel.text("ok")
      ],
      { tools: [shared, known] }
    ),
    function*({ driver }) {
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      const results = yield* dataOfType("tool/result")
      expect(results.map((d) => [d.message.content[0].toolCallId, d.error?.code])).toEqual([
        ["c1", undefined],
        ["c2", "INVALID_TOOL_OUTPUT"],
        ["c3", "INVALID_TOOL_OUTPUT"]
      ])
      expect(results[1]!.message.content[0].content[0].text).toMatch(/^Error: tool produced invalid output: /)
      expect((yield* shape).filter((x) => x.startsWith("INS(ns"))).toEqual(["INS(ns,0,[same])"])
      expect(yield* texts).toEqual(["A", "same"])
      expect(yield* closeOut).toEqual([])
    }
  )

  const guarded = Tool.make("guarded", { description: "", parameters: empty, execute: () => Effect.succeed("ran") })
  // 4.6 COMMIT step 4 defines `concluded := concluded ∨ (output.concludesTurn ∧ ¬isError)` over the final
  // (ToolPost) output, whatever the body's own outcome.
  agentTest(
    "4.6 COMMIT step 4: a DENIED call whose ToolPost output is a non-error concluding output concludes the turn",
    scenario(
      [ScriptedModel.response({ toolCalls: [{ id: "c1", name: "guarded", arguments: {} }] })],
      { tools: [guarded] }
    ),
    function*({ driver, hooks }) {
      yield* hooks.onToolPre(() => Effect.succeed({ _tag: "Deny", reason: "no" } as const))
      yield* hooks.onToolPost((input, next) =>
        Effect.map(
          next(),
          (o) => ({ ...o, content: [{ type: "text" as const, text: "handled" }], isError: false, concludesTurn: true })
        )
      )
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect((yield* dataOfType("tool/result"))[0]!.message.content[0]).toMatchObject({
        isError: false,
        content: [{ type: "text", text: "handled" }]
      })
      expect((yield* dataOfType("turn/end")).map((d) => d.reason)).toEqual([{ kind: "completed" }])
      expect((yield* requests).length).toBe(1)
    }
  )

  const strict = Tool.make("strict", {
    description: "",
    parameters: Schema.Struct({ n: Schema.optional(Schema.Number) }),
    execute: (p) => Effect.succeed(`n=${p.n ?? "none"}`)
  })
  agentTest(
    "4.6 START step 4: empty argument text means {}; unparsable JSON and a schema mismatch give INVALID_ARGUMENTS",
    scenario(
      [
        ScriptedModel.response({
          toolCalls: [
            { id: "c1", name: "strict", arguments: "" },
            { id: "c2", name: "strict", arguments: "{not json" },
            { id: "c3", name: "strict", arguments: { n: "x" } }
          ]
        }),
        ScriptedModel.text("ok")
      ],
      { tools: [strict] }
    ),
    function*({ driver }) {
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      const results = yield* dataOfType("tool/result")
      expect(results.map((d) => d.message.content[0].content[0].text as string)[0]).toBe("n=none")
      expect(results[0]!.error).toBeUndefined()
      for (const r of results.slice(1)) {
        expect(r.error).toEqual({ name: "ToolArgumentsError", code: "INVALID_ARGUMENTS" })
        expect(r.message.content[0].content[0].text).toMatch(/^Error: invalid arguments for strict: /)
      }
      expect(results.length).toBe(3)
      expect(yield* closeOut).toEqual([])
    }
  )
})

describe("4.6: tools", () => {
  {
    const g = gate()
    const started: Array<string> = []
    agentTest(
      "4.6 grouping: an unknown tool between parallel calls is exclusive (a barrier)",
      scenario([calls(["c1", "p"], ["c2", "nope"], ["c3", "p"]), ScriptedModel.text("done")], {
        tools: [gatedTool("p", "parallel", g, started)]
      }),
      function*({ driver }) {
        yield* promptUntilStarted(driver, started, 1)
        expect(yield* toolShape).toEqual(["TC(c1)"])
        yield* open(g)
        expect(yield* closeOut).toEqual([])
        expect(yield* toolShape).toEqual(["TC(c1)", "TR(c1)", "TC(c2)", "TR?(c2)", "TC(c3)", "TR(c3)"])
        const r = yield* resultsByCall
        expect(r.c2).toEqual({
          text: "Error: unknown tool nope",
          isError: true,
          error: { name: "UnknownToolError", code: "UNKNOWN_TOOL" },
          meta: undefined
        })
      }
    )
  }

  {
    const g = gate()
    const started: Array<string> = []
    agentTest(
      "4.6 grouping: a parallel call after an exclusive one starts only after it committed",
      scenario([calls(["c1", "x"], ["c2", "p"], ["c3", "p"]), ScriptedModel.text("done")], {
        tools: [gatedTool("x", "exclusive", g, started), gatedTool("p", "parallel", g, started)]
      }),
      function*({ driver }) {
        yield* promptUntilStarted(driver, started, 1)
        expect(started).toEqual(["c1"])
        yield* open(g)
        expect(yield* closeOut).toEqual([])
        const tctr = yield* toolShape
        expect(tctr.slice(0, 3)).toEqual(["TC(c1)", "TR(c1)", "TC(c2)"])
        expect(tctr.filter((x) => x.startsWith("TR"))).toEqual(["TR(c1)", "TR(c2)", "TR(c3)"])
      }
    )
  }

  {
    const g = gate()
    const started: Array<string> = []
    agentTest(
      "4.6 grouping: the mode is read just before the start, so setMode by an earlier result applies",
      scenario([calls(["c1", "a"], ["c2", "b"], ["c3", "b"]), ScriptedModel.text("done")], {
        tools: [gatedTool("b", "exclusive", g, started)]
      }),
      function*({ driver }) {
        const tools = yield* Tools
        const setter = Tool.make("a", {
          description: "a",
          parameters: empty,
          mode: "exclusive",
          execute: () => Effect.as(tools.setMode("b", "parallel"), "set")
        })
        yield* tools.register(setter)
        yield* promptUntilStarted(driver, started, 2)
        expect(yield* toolShape).toEqual(["TC(c1)", "TR(c1)", "TC(c2)", "TC(c3)"])
        yield* open(g)
        expect(yield* closeOut).toEqual([])
      }
    )
  }

  {
    const gs = { c1: gate(), c2: gate(), c3: gate() } as Record<string, Deferred.Deferred<void>>
    const started: Array<string> = []
    const p = Tool.make("p", {
      description: "p",
      parameters: empty,
      mode: "parallel",
      execute: (_x, ctx) =>
        Effect.zipRight(
          Effect.zipRight(Effect.sync(() => started.push(ctx.callId)), Deferred.await(gs[ctx.callId]!)),
          Effect.succeed("ok")
        )
    })
    agentTest(
      "4.6 pool: with cap 2 releasing c1 gives TC(c1) TC(c2) TR(c1) TC(c3)",
      scenario([calls(["c1", "p"], ["c2", "p"], ["c3", "p"]), ScriptedModel.text("done")], {
        tools: [p],
        maxParallelToolCalls: 2
      }),
      function*({ driver }) {
        yield* promptUntilStarted(driver, started, 2)
        expect(started).toEqual(["c1", "c2"])
        yield* open(gs.c1!)
        yield* until(Effect.sync(() => started.length === 3))
        expect(yield* toolShape).toEqual(["TC(c1)", "TC(c2)", "TR(c1)", "TC(c3)"])
        yield* open(gs.c2!)
        yield* open(gs.c3!)
        expect(yield* closeOut).toEqual([])
      }
    )
  }

  agentTest(
    "4.6 mapping: typed failures (plain Error, tagged error with code, string) and a defect",
    scenario([calls(["c1", "e1"], ["c2", "e2"], ["c3", "e3"], ["c4", "e4"]), ScriptedModel.text("done")], {
      tools: [
        okTool("e1", "exclusive", Effect.fail(new Error("plain"))),
        okTool("e2", "exclusive", Effect.fail(new Oops({ message: "tagged", code: "E_OOPS" }))),
        okTool("e3", "exclusive", Effect.fail("just a string")),
        okTool("e4", "exclusive", Effect.die(new Error("dead")))
      ]
    }),
    function*({ driver }) {
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      const r = yield* resultsByCall
      expect(r.c1).toEqual({
        text: "Error: plain",
        isError: true,
        error: { name: "Error", code: "TOOL_ERROR" },
        meta: undefined
      })
      expect(r.c2).toEqual({
        text: "Error: tagged",
        isError: true,
        error: { name: "Oops", code: "E_OOPS" },
        meta: undefined
      })
      expect(r.c3).toEqual({
        text: "Error: just a string",
        isError: true,
        error: { name: "Error", code: "TOOL_ERROR" },
        meta: undefined
      })
      expect(r.c4).toEqual({
        text: "Error: dead",
        isError: true,
        error: { name: "ToolDefect", code: "TOOL_DEFECT" },
        meta: undefined
      })
    }
  )

  agentTest(
    "4.6 mapping: invalid arguments text and code; \"\" means {}",
    scenario([
      ScriptedModel.response({
        toolCalls: [{ id: "c1", name: "need", arguments: "{not json" }, { id: "c2", name: "need", arguments: {} }, {
          id: "c3",
          name: "t",
          arguments: ""
        }]
      }),
      ScriptedModel.text("done")
    ], {
      tools: [
        Tool.make("need", {
          description: "n",
          parameters: Schema.Struct({ x: Schema.Number }),
          execute: () => Effect.succeed("x")
        }),
        okTool("t")
      ]
    }),
    function*({ driver }) {
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      const r = yield* resultsByCall
      expect(r.c1!.text).toMatch(/^Error: invalid arguments for need: /)
      expect(r.c1!.error).toEqual({ name: "ToolArgumentsError", code: "INVALID_ARGUMENTS" })
      expect(r.c2!.text).toMatch(/^Error: invalid arguments for need: /)
      expect(r.c3).toEqual({ text: "ok", isError: false, error: undefined, meta: undefined })
    }
  )

  agentTest(
    "4.6: ToolPost runs for DENIED (with aborted false) but not for UNKNOWN_TOOL / INVALID_ARGUMENTS / PRE_HOOK_FAILED; its meta is stored",
    scenario([
      ScriptedModel.response({
        toolCalls: [
          { id: "c1", name: "t", arguments: {} },
          { id: "c2", name: "zzz", arguments: {} },
          { id: "c3", name: "need", arguments: "[" },
          { id: "c4", name: "t", arguments: {} },
          { id: "c5", name: "t", arguments: {} }
        ]
      }),
      ScriptedModel.text("done")
    ], {
      tools: [
        okTool("t"),
        Tool.make("need", {
          description: "n",
          parameters: Schema.Struct({ x: Schema.Number }),
          execute: () => Effect.succeed("x")
        })
      ]
    }),
    function*({ driver, hooks }) {
      const posts: Array<string> = []
      yield* hooks.onToolPre((info, next) =>
        info.callId === "c1"
          ? Effect.succeed(ToolPreDecision.deny("nope"))
          : info.callId === "c4"
          ? Effect.fail(new Error("pre broke"))
          : next()
      )
      yield* hooks.onToolPost((input, next) =>
        Effect.map(next(), (o) => {
          posts.push(`${input.callId}:${input.aborted}`)
          return { ...o, meta: { seen: input.callId } }
        })
      )
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect(posts).toEqual(["c1:false", "c5:false"])
      const r = yield* resultsByCall
      expect(r.c1).toEqual({
        text: "Error: tool call denied: nope",
        isError: true,
        error: { name: "ToolDeniedError", code: "DENIED" },
        meta: { seen: "c1" }
      })
      expect(r.c4).toEqual({
        text: "Error: pre broke",
        isError: true,
        error: { name: "ToolPreHookError", code: "PRE_HOOK_FAILED" },
        meta: undefined
      })
      expect(r.c5!.meta).toEqual({ seen: "c5" })
    }
  )

  agentTest(
    "4.6: concludesTurn with isError true does not conclude; ToolPost setting concludesTurn does",
    scenario([calls(["c1", "errc"]), calls(["c2", "fin"]), ScriptedModel.text("never")], {
      tools: [
        okTool("errc", "exclusive", Effect.succeed({ content: "bad", isError: true, concludesTurn: true })),
        okTool("fin")
      ]
    }),
    function*({ driver, hooks }) {
      yield* hooks.onToolPost((input, next) =>
        Effect.map(next(), (o) => input.name === "fin" ? { ...o, concludesTurn: true } : o)
      )
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      // step 1: the erroring concluder does not conclude → step 2: "fin" concluded by ToolPost → no step 3.
      expect(yield* requests).toHaveLength(2)
      expect((yield* reasons).map((r) => r.kind)).toEqual(["completed"])
    }
  )

  agentTest(
    "4.6: contexts follow their own result; deferContext before additionalContexts; they enter only at the next step after all results",
    scenario([calls(["c1", "ctx"], ["c2", "t"]), ScriptedModel.text("done")], {
      tools: [
        Tool.make("ctx", {
          description: "c",
          parameters: empty,
          execute: (_p, ctx) =>
            Effect.as(ctx.deferContext(user("X1")), { content: "ok", additionalContexts: [user("X2")] })
        }),
        okTool("t")
      ]
    }),
    function*({ driver }) {
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      const s = yield* shape
      const from = s.indexOf("TC(c1)")
      expect(s.slice(from, from + 9)).toEqual([
        "TC(c1)",
        "TR(c1)",
        "INS(ns,0,[X1,X2])",
        "TC(c2)",
        "TR(c2)",
        "SE(1,1)",
        "CLM(ns,0,2)",
        "SS(1,2)",
        "UM(X1)"
      ])
      expect(s[from + 9]).toBe("UM(X2)")
      expect((yield* reasons).map((r) => r.kind)).toEqual(["completed"])
    }
  )

  agentTest(
    "4.6: a non-fresh context id turns the result into INVALID_TOOL_OUTPUT with its contexts dropped",
    scenario([calls(["c1", "ctx"]), ScriptedModel.text("done")], {
      tools: [Tool.make("ctx", {
        description: "c",
        parameters: empty,
        execute: () => Effect.succeed({ content: "ok", additionalContexts: [user("A")] })
      })]
    }),
    function*({ driver }) {
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      const r = yield* resultsByCall
      expect(r.c1!.error).toEqual({ name: "ToolOutputError", code: "INVALID_TOOL_OUTPUT" })
      expect(r.c1!.text).toMatch(/^Error: tool produced invalid output: /)
      expect((yield* shape).filter((x) => x.startsWith("INS"))).toEqual(["INS(nt,0,[A])"])
    }
  )

  it.scoped("4.6 abort during tools: a body that failed first keeps its error; a running body yields ABORTED; later groups get ⟨TC TR⊘⟩", () => {
    const g = gate()
    const started: Array<string> = []
    return Effect.gen(function*() {
      const driver = yield* Driver
      const hooks = yield* Hooks
      const posted: Array<string> = []
      yield* hooks.onToolPost((input, next) =>
        Effect.zipRight(Effect.sync(() => posted.push(`${input.callId}:${input.aborted}`)), next())
      )
      yield* driver.followup(user("A"))
      yield* until(Effect.sync(() => started.length === 1))
      yield* until(
        Effect.map(events, (es) => es.some((e) => e.type === "tool/call" && (e.data as Loose).callId === "c2"))
      )
      yield* settle
      yield* driver.cancel(CancelCause.user)
      expect(yield* closeOut).toEqual([])
      expect((yield* shape).filter((x) => /^(TC|TR|SE|TE)/.test(x))).toEqual([
        "TC(c1)",
        "TC(c2)",
        "TR✗(c1)",
        "TR?(c2)",
        "TC(c3)",
        "TR⊘(c3)",
        "SE(1,1)",
        "TE(1,aborted(user))"
      ])
      const r = yield* resultsByCall
      expect(r.c1).toEqual({
        text: "Error: tool call aborted",
        isError: true,
        error: { name: "AbortError", code: "ABORTED" },
        meta: undefined
      })
      expect(r.c2!.error).toEqual({ name: "Error", code: "FIRST" })
      expect(r.c3).toEqual({
        text: "Error: tool call aborted before dispatch",
        isError: true,
        error: { name: "AbortError", code: "ABORTED_BEFORE_DISPATCH" },
        meta: undefined
      })
      expect(posted).toEqual(["c1:true", "c2:true"])
    }).pipe(Effect.provide(scenario([calls(["c1", "p"], ["c2", "f"], ["c3", "x"])], {
      tools: [
        gatedTool("p", "parallel", g, started),
        okTool("f", "parallel", Effect.fail({ message: "first", code: "FIRST" })),
        okTool("x")
      ]
    })))
  })

  it.scoped("4.6 abort: a body that completes after the cause was recorded yields ABORTED", () => {
    const g = gate()
    const started: Array<string> = []
    return Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      yield* until(Effect.sync(() => started.length === 1))
      const cancel = yield* Effect.fork(driver.cancel(CancelCause.user))
      yield* untilEvent((e) => e.type === "turn/end").pipe(
        Effect.timeoutTo({ duration: 0, onSuccess: () => true, onTimeout: () => false }),
        Effect.ignore
      )
      yield* settle
      yield* open(g)
      yield* cancel.await
      expect(yield* closeOut).toEqual([])
      const r = yield* resultsByCall
      expect(r.c1!.error).toEqual({ name: "AbortError", code: "ABORTED" })
      expect((yield* reasons).map((r) => r.kind)).toEqual(["aborted"])
    }).pipe(Effect.provide(scenario([calls(["c1", "u"])], {
      tools: [
        Tool.make("u", {
          description: "u",
          parameters: empty,
          execute: () =>
            Effect.uninterruptible(
              Effect.zipRight(Effect.sync(() => started.push("c1")), Effect.as(Deferred.await(g), "done"))
            )
        })
      ]
    })))
  })

  agentTest(
    "4.6 D7: a ToolPost failure → TOOL_INTERNAL_ERROR for it and ⟨TC TR⟩ for unstarted calls; contexts stay pending (non-waking) for the next turn's claim",
    scenario([calls(["c1", "ctx"], ["c2", "t"], ["c3", "t"]), ScriptedModel.text("two")], {
      tools: [
        Tool.make("ctx", {
          description: "c",
          parameters: empty,
          execute: () => Effect.succeed({ content: "ok", additionalContexts: [user("X")] })
        }),
        okTool("t")
      ]
    }),
    function*({ driver, hooks, inbox }) {
      const boom = { message: "post broke", code: "POST" }
      yield* hooks.onToolPost((input, next) => input.callId === "c2" ? Effect.fail(boom) : next())
      const live = yield* recordLive
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect((yield* shape).filter((x) => /^(TC|TR|INS\(ns|SE|TE)/.test(x))).toEqual([
        "TC(c1)",
        "TR(c1)",
        "INS(ns,0,[X])",
        "TC(c2)",
        "TR?(c2)",
        "TC(c3)",
        "TR?(c3)",
        "SE(1,1)",
        "TE(1,error(TOOL_INTERNAL_ERROR))"
      ])
      const r = yield* resultsByCall
      for (const c of ["c2", "c3"]) {
        expect(r[c]).toEqual({
          text: "Error: tool call failed internally",
          isError: true,
          error: { name: "ToolSchedulerError", code: "TOOL_INTERNAL_ERROR" },
          meta: undefined
        })
      }
      const errors = (yield* live).filter((e) => e.type === "agent/error") as Array<Loose>
      expect(errors.map((e) => e.error)).toEqual([boom])
      expect(yield* driver.status).toBe("idle")
      expect((yield* inbox.nextStep).map((m) => m.id)).toEqual(["X"])
      yield* driver.followup(user("B"))
      expect(yield* closeOut).toEqual([])
      const s = yield* shape
      const t2 = s.indexOf("TS(2)")
      expect(s.slice(t2, t2 + 6)).toEqual(["TS(2)", "CLM(ns,0,1)", "CLM(nt,0,1)", "SS(2,1)", "UM(X)", "UM(B)"])
    }
  )
})

describe("4.5 Q4 / 4.6 START 2: checkpoints, and cancels from hooks (K13)", () => {
  agentTest(
    "4.5 Q4: the request is dispatched only after every event so far is durable",
    scenario([ScriptedModel.text("ok")]),
    function*({ driver, control, log }) {
      yield* control.hold
      yield* Effect.fork(driver.followup(user("A")))
      yield* untilEvent((e) => e.type === "request/header")
      yield* settle
      expect(yield* requests).toHaveLength(0)
      yield* control.release
      expect(yield* closeOut).toEqual([])
      expect(yield* requests).toHaveLength(1)
      expect(yield* log.durableSeq).toBeGreaterThan(0)
    }
  )

  it.scoped("4.6 START 2: a tool body runs only after its tool/call is durable", () => {
    const ran: Array<string> = []
    return Effect.gen(function*() {
      const driver = yield* Driver
      const control = yield* MemoryStoreControl
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "tool/call")
      yield* settle
      expect(ran).toEqual([])
      yield* control.release
      expect(yield* closeOut).toEqual([])
      expect(ran).toEqual(["c1"])
    }).pipe(Effect.provide(Layer.unwrapEffect(Effect.sync(() => {
      let holdRef: Effect.Effect<void> = Effect.void
      const base = scenario([
        ScriptedModel.response({
          toolCalls: [{ id: "c1", name: "t", arguments: {} }],
          afterFinish: Effect.suspend(() => holdRef)
        }),
        ScriptedModel.text("done")
      ], {
        tools: [Tool.make("t", {
          description: "t",
          parameters: empty,
          execute: (_p, ctx) => Effect.sync(() => (ran.push(ctx.callId), "ok"))
        })]
      })
      return Layer.tap(base, (ctx) =>
        Effect.sync(() => {
          holdRef = Context.get(ctx, MemoryStoreControl).hold
        }))
    }))))
  })

  agentTest(
    "4.5 K4/K13: an onRequest listener that cancels: no request dispatched, SE then TE(aborted)",
    scenario([ScriptedModel.text("never")]),
    function*({ driver, hooks }) {
      yield* hooks.onRequest((_, next) => Effect.zipRight(driver.cancel(CancelCause.user), next()))
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect(yield* requests).toHaveLength(0)
      expect((yield* shape).slice(-2)).toEqual(["SE(1,1)", "TE(1,aborted(user))"])
    }
  )

  agentTest(
    "4.5 K6/K13: a Retry returned after its listener recorded a cause is ignored (no RT, no attempt 2)",
    scenario([ScriptedModel.fail({ message: "x", code: "OVERLOADED" }), ScriptedModel.text("never")]),
    function*({ driver, hooks }) {
      yield* hooks.onRequestError(() => Effect.as(driver.cancel(CancelCause.user), RequestErrorAction.retry(0)))
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect((yield* shape).filter((x) => x.startsWith("RT"))).toEqual([])
      expect((yield* shape).slice(-3)).toEqual(["CH(finish error)", "SE(1,1)", "TE(1,aborted(user))"])
      expect(yield* requests).toHaveLength(1)
    }
  )

  it.scoped("4.6 K13: a body that records a cause and then succeeds yields ABORTED; ToolPost sees aborted:true", () => {
    const posted: Array<boolean> = []
    return Effect.gen(function*() {
      const driver = yield* Driver
      const hooks = yield* Hooks
      yield* hooks.onToolPost((input, next) => Effect.zipRight(Effect.sync(() => posted.push(input.aborted)), next()))
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      const r = yield* resultsByCall
      expect(r.c1!.error).toEqual({ name: "AbortError", code: "ABORTED" })
      expect(r.c2).toEqual({
        text: "Error: tool call aborted before dispatch",
        isError: true,
        error: { name: "AbortError", code: "ABORTED_BEFORE_DISPATCH" },
        meta: undefined
      })
      expect(posted).toEqual([true])
      expect((yield* shape).slice(-5)).toEqual(["TR✗(c1)", "TC(c2)", "TR⊘(c2)", "SE(1,1)", "TE(1,aborted(user))"])
    }).pipe(Effect.provide(Layer.unwrapEffect(Effect.sync(() => {
      let cancel: Effect.Effect<void, any> = Effect.void
      const base = scenario([calls(["c1", "self"], ["c2", "t"])], {
        tools: [
          Tool.make("self", {
            description: "s",
            parameters: empty,
            execute: () => Effect.as(Effect.suspend(() => cancel), "fine")
          }),
          okTool("t")
        ]
      })
      return Layer.tap(base, (ctx) =>
        Effect.sync(() => {
          cancel = Context.get(ctx, Driver).cancel(CancelCause.user)
        }))
    }))))
  })
})

describe("4.6 COMMIT 2 / 5.1 D6: the final output of ToolPost", () => {
  const postScript = () => [calls(["c1", "t"]), ScriptedModel.text("done")]

  // Regression test (fixed; the text says what tiller did before): SPEC 4.6 COMMIT 2 "invalid content/meta … turns the result into INVALID_TOOL_OUTPUT"; 2.3 ToolResultBlock
  // content is (TextBlock|ImageBlock)[]. tiller writes a tool/result whose block content is the string "replaced".
  agentTest(
    "4.6 COMMIT 2: a ToolPost output with invalid content (a string) → INVALID_TOOL_OUTPUT",
    scenario(postScript(), { tools: [okTool("t")] }),
    function*({ driver, hooks }) {
      yield* hooks.onToolPost((_, next) => Effect.map(next(), (o) => ({ ...o, content: "replaced" as any })))
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      const r = yield* resultsByCall
      expect(r.c1!.error).toEqual({ name: "ToolOutputError", code: "INVALID_TOOL_OUTPUT" })
      expect(r.c1!.text).toMatch(/^Error: tool produced invalid output: /)
    }
  )

  // Regression test (fixed; the text says what tiller did before): SPEC 5.1 "Every append (loop, …) … checked with the same Schemas … Hence a log accepted live can
  // always be loaded" (D6). A ToolPost output without `isError` is written as a tool/result with
  // `isError: undefined`; resuming the session then fails with MalformedLog {seq: 12}.
  it.scoped("5.1 D6 / 4.6: whatever ToolPost returns, the live log stays loadable (resume opens)", () =>
    Effect.gen(function*() {
      const resumed = yield* resumeAfterRun(
        postScript(),
        { tools: [okTool("t")] },
        (ctx) =>
          Context.get(ctx, Hooks).onToolPost((_, next) =>
            Effect.map(next(), (o) => ({ content: o.content, additionalContexts: [], concludesTurn: false }) as any)
          )
      )
      expect(resumed).toBe("Right")
    }))
})

describe("4.6 / 4.3: small cases", () => {
  it.scoped("4.6 abort: a call interrupted in ToolPre (START 5) yields ABORTED_BEFORE_DISPATCH; its body never runs, ToolPost does not run", () => {
    let bodies = 0
    return Effect.gen(function*() {
      const driver = yield* Driver
      const hooks = yield* Hooks
      const inPre = gate()
      let interrupted = false
      let posts = 0
      yield* hooks.onToolPre(() =>
        Effect.zipRight(open(inPre), Effect.onInterrupt(Effect.never, () => Effect.sync(() => (interrupted = true))))
      )
      yield* hooks.onToolPost((_, next) => Effect.zipRight(Effect.sync(() => posts++), next()))
      yield* driver.followup(user("A"))
      yield* Deferred.await(inPre)
      yield* driver.cancel(CancelCause.user)
      expect(yield* closeOut).toEqual([])
      expect((yield* shape).slice(-6)).toEqual([
        "TC(c1)",
        "TR⊘(c1)",
        "TC(c2)",
        "TR⊘(c2)",
        "SE(1,1)",
        "TE(1,aborted(user))"
      ])
      expect(interrupted).toBe(true)
      expect(bodies).toBe(0)
      expect(posts).toBe(0)
    }).pipe(
      Effect.provide(
        scenario([calls(["c1", "t"], ["c2", "t"])], {
          tools: [okTool("t", "exclusive", Effect.sync(() => (bodies++, "ran")))]
        })
      )
    )
  })

  agentTest(
    "2.6/4.3: a rejection without a reason ends {kind:\"blocked\"} with no message key",
    scenario([]),
    function*({ driver, preStep: pre }) {
      yield* pre.register(() => Effect.succeed(PreStepDecision.reject()))
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect(JSON.stringify(yield* reasons)).toBe(JSON.stringify([{ kind: "blocked" }]))
    }
  )

  agentTest(
    "4.4: a pre-step listener is interrupted by a cancel; no step, TE aborted, the claimed batch is lost",
    scenario([]),
    function*({ driver, preStep: pre }) {
      const inside = gate()
      let interrupted = false
      yield* pre.register(() =>
        Effect.zipRight(open(inside), Effect.onInterrupt(Effect.never, () => Effect.sync(() => (interrupted = true))))
      )
      yield* driver.followup(user("A"))
      yield* Deferred.await(inside)
      yield* driver.cancel(CancelCause.user, { keepInbox: true })
      expect(yield* closeOut).toEqual([])
      expect(interrupted).toBe(true)
      expect(yield* shape).toEqual(["INS(nt,0,[A])", "TS(1)", "CLM(nt,0,1)", "TE(1,aborted(user))"])
    }
  )
})

describe("4.6 START: order of checks", () => {
  agentTest(
    "4.6 START 3-5: ToolPre runs only for known tools with valid arguments and sees the decoded params",
    scenario([
      ScriptedModel.response({
        toolCalls: [
          { id: "c1", name: "missing", arguments: {} },
          { id: "c2", name: "num", arguments: { n: "five" } },
          { id: "c3", name: "num", arguments: { n: "5" } }
        ]
      }),
      ScriptedModel.text("done")
    ], {
      tools: [
        Tool.make("num", {
          description: "n",
          parameters: Schema.Struct({ n: Schema.NumberFromString }),
          execute: (p) => Effect.succeed(`got ${p.n + 0}`)
        })
      ]
    }),
    function*({ driver, hooks }) {
      const seen: Array<Loose> = []
      yield* hooks.onToolPre((info, next) =>
        Effect.zipRight(
          Effect.sync(() =>
            seen.push({ callId: info.callId, name: info.name, arguments: info.arguments, params: info.params })
          ),
          next()
        )
      )
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect(seen).toEqual([{ callId: "c3", name: "num", arguments: "{\"n\":\"5\"}", params: { n: 5 } }])
      const r = yield* resultsByCall
      expect(r.c1!.error!.code).toBe("UNKNOWN_TOOL")
      expect(r.c2!.error!.code).toBe("INVALID_ARGUMENTS")
      expect(r.c3!.text).toBe("got 5")
    }
  )
})

describe("4.6 ToolPost", () => {
  agentTest(
    "4.6: ToolPost runs for body outcomes and DENIED only, sees the normalized output, and may set meta",
    scenario(
      [
        ScriptedModel.response({
          toolCalls: [
            { id: "a", name: "ok", arguments: {} },
            { id: "d", name: "ok", arguments: {} },
            { id: "u", name: "nope", arguments: {} },
            { id: "i", name: "typed", arguments: { n: "x" } },
            { id: "f", name: "ok", arguments: {} }
          ]
        }),
        ScriptedModel.text("done")
      ],
      { tools: [ok, typed] }
    ),
    function*({ driver, hooks }) {
      const seen: Array<string> = []
      yield* hooks.onToolPre((input, next) =>
        input.callId === "d"
          ? Effect.succeed(ToolPreDecision.deny("no"))
          : input.callId === "f"
          ? Effect.die("pre died")
          : next()
      )
      yield* hooks.onToolPost((input, next) =>
        Effect.map(next(), (output) => {
          seen.push(`${input.callId}:${output.isError}:${JSON.stringify(output.content)}`)
          return { ...output, meta: { post: input.callId } }
        })
      )
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect(seen).toEqual([
        "a:false:[{\"type\":\"text\",\"text\":\"ok\"}]",
        "d:true:[{\"type\":\"text\",\"text\":\"Error: tool call denied: no\"}]"
      ])
      const results = yield* dataOfType("tool/result")
      expect(results.map((d) => [d.message.content[0].toolCallId, d.error?.code, d.meta])).toEqual([
        ["a", undefined, { post: "a" }],
        ["d", "DENIED", { post: "d" }],
        ["u", "UNKNOWN_TOOL", undefined],
        ["i", "INVALID_ARGUMENTS", undefined],
        ["f", "PRE_HOOK_FAILED", undefined]
      ])
      expect(yield* closeOut).toEqual([])
    }
  )

  const badMeta = Tool.make("badmeta", {
    description: "",
    parameters: empty,
    execute: () => Effect.succeed({ content: "x", meta: { when: new Date(0) } as never })
  })
  const badContent = Tool.make("badcontent", {
    description: "",
    parameters: empty,
    execute: () => Effect.succeed({ content: [{ type: "image", mediaType: "image/png" }] as never })
  })
  agentTest(
    "4.6: invalid meta or content turns the result into INVALID_TOOL_OUTPUT",
    scenario(
      [
        ScriptedModel.response({
          toolCalls: [{ id: "m", name: "badmeta", arguments: {} }, { id: "c", name: "badcontent", arguments: {} }]
        }),
        ScriptedModel.text("done")
      ],
      { tools: [badMeta, badContent] }
    ),
    function*({ driver }) {
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect((yield* dataOfType("tool/result")).map((d) => d.error?.code)).toEqual([
        "INVALID_TOOL_OUTPUT",
        "INVALID_TOOL_OUTPUT"
      ])
      expect(yield* closeOut).toEqual([])
    }
  )

  const fin = Tool.make("fin", {
    description: "",
    parameters: empty,
    execute: () => Effect.succeed({ content: "ok", concludesTurn: true })
  })
  const finError = Tool.make("finerr", {
    description: "",
    parameters: empty,
    execute: () => Effect.succeed({ content: "bad", concludesTurn: true, isError: true })
  })
  const ctx = Tool.make("ctx", {
    description: "",
    parameters: empty,
    execute: () => Effect.succeed({ content: "ok", additionalContexts: [plugin("K")] })
  })
  agentTest(
    "4.6: a concluding result still lets the other calls commit, and the turn takes another step when next-step is non-empty",
    scenario(
      [
        ScriptedModel.response({
          toolCalls: [{ id: "c1", name: "fin", arguments: {} }, { id: "c2", name: "ctx", arguments: {} }]
        }),
        ScriptedModel.text("done")
      ],
      { tools: [fin, ctx] }
    ),
    function*({ driver }) {
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      const s = yield* shape
      expect(s.filter((x) => x.startsWith("TR") || x.startsWith("SS") || x.startsWith("TE"))).toEqual([
        "SS(1,1)",
        "TR(c1)",
        "TR(c2)",
        "SS(1,2)",
        "TE(1,completed)"
      ])
      expect(yield* requests).toHaveLength(2)
    }
  )

  agentTest(
    "4.6: concludesTurn on an error result does not conclude the turn",
    scenario(
      [
        ScriptedModel.response({ toolCalls: [{ id: "c1", name: "finerr", arguments: {} }] }),
        ScriptedModel.text("done")
      ],
      { tools: [finError] }
    ),
    function*({ driver }) {
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect(yield* requests).toHaveLength(2)
      expect((yield* shape).slice(-2)).toEqual(["SE(1,2)", "TE(1,completed)"])
    }
  )
})

describe("4.6 result mapping", () => {
  const tools = [
    Tool.make("typed", {
      description: "",
      parameters: empty,
      execute: () => Effect.fail(new Boom({ message: "typed went wrong", code: "E_BOOM" }))
    }),
    Tool.make("plain", { description: "", parameters: empty, execute: () => Effect.fail(plainError) }),
    Tool.make("defect", { description: "", parameters: empty, execute: () => Effect.die(new Error("died badly")) }),
    Tool.make("args", {
      description: "",
      parameters: Schema.Struct({ n: Schema.Number }),
      execute: ({ n }) => Effect.succeed(`n=${n}`)
    }),
    Tool.make("none", {
      description: "",
      parameters: empty,
      execute: () =>
        Effect.succeed({ content: [{ type: "text" as const, text: "flagged" }], isError: true, meta: { k: [1] } })
    }),
    Tool.make("dupctx", {
      description: "",
      parameters: empty,
      execute: () => Effect.succeed({ content: "x", additionalContexts: [user("A")] })
    })
  ]
  agentTest(
    "4.6: each outcome maps to its text, isError and error {name, code}; meta is stored",
    scenario(
      [
        ScriptedModel.response({
          toolCalls: [
            { id: "c1", name: "typed", arguments: {} },
            { id: "c2", name: "plain", arguments: {} },
            { id: "c3", name: "defect", arguments: {} },
            { id: "c4", name: "ghost", arguments: {} },
            { id: "c5", name: "args", arguments: { n: "x" } },
            { id: "c6", name: "args", arguments: "{not json" },
            { id: "c7", name: "none", arguments: "" },
            { id: "c8", name: "dupctx", arguments: {} }
          ]
        }),
        ScriptedModel.text("done")
      ],
      { tools }
    ),
    function*({ driver }) {
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      const results = yield* dataOfType("tool/result")
      const byId = Object.fromEntries(results.map((d) => [d.message.content[0].toolCallId, d]))
      expect(resultText(byId.c1)).toBe("Error: typed went wrong")
      expect(byId.c1.error).toEqual({ name: "Boom", code: "E_BOOM" })
      expect(resultText(byId.c2)).toBe("Error: plain went wrong")
      expect(byId.c2.error).toEqual({ name: "Error", code: "TOOL_ERROR" })
      expect(resultText(byId.c3)).toBe("Error: died badly")
      expect(byId.c3.error).toEqual({ name: "ToolDefect", code: "TOOL_DEFECT" })
      expect(resultText(byId.c4)).toBe("Error: unknown tool ghost")
      expect(byId.c4.error).toEqual({ name: "UnknownToolError", code: "UNKNOWN_TOOL" })
      expect(resultText(byId.c5)).toMatch(/^Error: invalid arguments for args: /)
      expect(byId.c5.error).toEqual({ name: "ToolArgumentsError", code: "INVALID_ARGUMENTS" })
      expect(resultText(byId.c6)).toMatch(/^Error: invalid arguments for args: /)
      expect(byId.c7.message.content[0].isError).toBe(true)
      expect(byId.c7.error).toBeUndefined()
      expect(byId.c7.meta).toEqual({ k: [1] })
      expect(resultText(byId.c8)).toMatch(/^Error: tool produced invalid output: /)
      expect(byId.c8.error).toEqual({ name: "ToolOutputError", code: "INVALID_TOOL_OUTPUT" })
      expect(byId.c1.message.source).toEqual({ kind: "tool", callId: "c1" })
      expect((yield* shape).filter((s) => s.startsWith("INS"))).toEqual(["INS(nt,0,[A])"])
      expect(yield* closeOut).toEqual([])
    }
  )

  const ctxTool = Tool.make("ctx", {
    description: "",
    parameters: empty,
    execute: (_p, ctx) =>
      Effect.as(ctx.deferContext(plugin("deferred")), { content: "ok", additionalContexts: [plugin("returned")] })
  })
  agentTest(
    "4.6: deferContext messages precede additionalContexts",
    scenario(
      [ScriptedModel.response({ toolCalls: [{ id: "c1", name: "ctx", arguments: {} }] }), ScriptedModel.text("done")],
      { tools: [ctxTool] }
    ),
    function*({ driver }) {
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      const s = yield* shape
      expect(s.slice(s.indexOf("TR(c1)"), s.indexOf("TR(c1)") + 2)).toEqual(["TR(c1)", "INS(ns,0,[deferred,returned])"])
      expect(yield* texts).toEqual(["A", "deferred", "returned"])
    }
  )

  const quick = Tool.make("quick", { description: "", parameters: empty, execute: () => Effect.succeed("ok") })
  agentTest(
    "4.6 (D7): a ToolPost failure gives TOOL_INTERNAL_ERROR results, SE, turn error and one agent/error carrying it",
    scenario(
      [ScriptedModel.response({
        toolCalls: [{ id: "c1", name: "quick", arguments: {} }, { id: "c2", name: "quick", arguments: {} }]
      })],
      { tools: [quick] }
    ),
    function*({ driver, hooks }) {
      const live = yield* recordLive
      const failure = new Error("post broke")
      yield* hooks.onToolPost((input, next) => input.callId === "c1" ? Effect.fail(failure) : next())
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      const s = yield* shape
      expect(s.slice(s.indexOf("AM"))).toEqual([
        "AM",
        "TC(c1)",
        "TR?(c1)",
        "TC(c2)",
        "TR?(c2)",
        "SE(1,1)",
        "TE(1,error(TOOL_INTERNAL_ERROR))"
      ])
      const results = yield* dataOfType("tool/result")
      expect(results.map((d) => d.error)).toEqual([
        { name: "ToolSchedulerError", code: "TOOL_INTERNAL_ERROR" },
        { name: "ToolSchedulerError", code: "TOOL_INTERNAL_ERROR" }
      ])
      expect(resultText(results[0])).toBe("Error: tool call failed internally")
      const errors = (yield* live).filter((e) => e.type === "agent/error")
      expect(errors).toHaveLength(1)
      expect((errors[0] as any).error).toBe(failure)
      expect(yield* closeOut).toEqual([])
    }
  )
})

describe("4.6 START step 2 under cancel", () => {
  // 4.6: "A call interrupted during START steps 2–5 yields ABORTED_BEFORE_DISPATCH"; step 2 is the checkpoint
  // (D13). The body never runs.
  it.scoped("4.6/K8: a cancel while a call's START checkpoint waits on held storage gives TR⊘; the body never runs", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const control = yield* MemoryStoreControlTag
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "tool/call")
      yield* settle
      const cancelling = yield* Effect.fork(driver.cancel(CancelCause.user))
      yield* driver.whenIdle
      expect((yield* shape).slice(-5)).toEqual(["AM", "TC(c1)", "TR⊘(c1)", "SE(1,1)", "TE(1,aborted(user))"])
      expect(ran).toBe(0)
      yield* control.release
      yield* Fiber.join(cancelling)
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(Layer.unwrapEffect(Effect.sync(() => {
      let hold: Effect.Effect<void> = Effect.void
      const base = scenario([
        ScriptedModel.response({
          toolCalls: [{ id: "c1", name: "t", arguments: {} }],
          afterFinish: Effect.suspend(() => hold)
        })
      ], {
        tools: [
          Tool.make("t", { description: "t", parameters: empty, execute: () => Effect.sync(() => (ran++, "ok")) })
        ]
      })
      return Layer.effectContext(Effect.map(Layer.build(base), (ctx) => {
        hold = Context.get(ctx, MemoryStoreControlTag).hold
        return ctx
      }))
    })))))
})
