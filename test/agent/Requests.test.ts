/**
 * The request of each step (SPEC 4.5 Q1-Q4, 8.7, 8.8): ModelRequest contents, onRequest,
 * request-error recovery, retries and their delays, header tools, the seed on resume.
 */
import { describe, expect, it } from "@effect/vitest"
import {
  Context,
  Duration,
  Effect,
  Exit,
  Fiber,
  JSONSchema,
  Layer,
  Random,
  Ref,
  Schema,
  Scope,
  Stream,
  TestClock
} from "effect"
import {
  Agent,
  CancelCause,
  Driver,
  Hooks,
  RequestErrorAction,
  ScriptedModel,
  SessionId,
  SessionLog,
  SessionStore,
  Tool,
  Tools
} from "../../src/index.js"
import type { LlmFailure, ModelRequest, RequestConfig } from "../../src/index.js"
import {
  agentOver,
  agentTest,
  closeOut,
  dataOfType,
  events,
  liveNotation,
  plugin,
  reasons,
  recordLive,
  requests,
  scenario,
  settle,
  shape,
  texts,
  until,
  untilEvent,
  user
} from "./harness.js"
import { buildIn } from "./stores.js"
import { calls, empty, okTool, zetaTool } from "./toolFixtures.js"

type Loose = { readonly [k: string]: any }

const decimalDelay = Duration.millis(1500.6)

const ReadParams = Schema.Struct({ path: Schema.String })
const readTool = Tool.make("read", {
  description: "Reads a file",
  parameters: ReadParams,
  execute: ({ path }) =>
    Effect.succeed({ content: `contents of ${path}`, additionalContexts: [plugin("ctx-1", "file was read")] })
})

describe("4.5 requests and retries", () => {
  agentTest(
    "4.5 default policy: jittered 1 s then 2 s; OVERLOADED, NETWORK, TIMEOUT, retryable:true and 5xx retried; input of onRequestError",
    scenario([
      ScriptedModel.fail({ message: "o", code: "OVERLOADED" }),
      ScriptedModel.fail({ message: "n", code: "NETWORK" }),
      ScriptedModel.text("one"),
      ScriptedModel.fail({ message: "t", code: "TIMEOUT" }),
      ScriptedModel.fail({ message: "w", code: "WHATEVER", retryable: true }),
      ScriptedModel.text("two"),
      ScriptedModel.fail({ message: "h", code: "HTTP", status: 502 }),
      ScriptedModel.fail({ message: "h", code: "HTTP", status: 499 })
    ]),
    function*({ driver, hooks }) {
      const seen: Array<unknown> = []
      yield* hooks.onRequestError((input, next) => {
        seen.push({
          turn: input.turn,
          step: input.step,
          attempt: input.attempt,
          code: input.failure.code,
          sid: input.sessionId
        })
        return next()
      })
      const fiber = yield* Effect.fork(Effect.gen(function*() {
        yield* driver.followup(user("A"))
        yield* driver.whenIdle
        yield* driver.followup(user("B"))
        yield* driver.whenIdle
        yield* driver.followup(user("C"))
        yield* driver.whenIdle
      }))
      for (let i = 0; i < 20; i++) {
        yield* settle
        yield* TestClock.adjust(Duration.seconds(3))
      }
      yield* Fiber.join(fiber)
      const retries = yield* dataOfType("llm/retry")
      expect(retries.map((r) => [r.turn, r.attempt, r.failure.code])).toEqual([
        [1, 1, "OVERLOADED"],
        [1, 2, "NETWORK"],
        [2, 1, "TIMEOUT"],
        [2, 2, "WHATEVER"],
        [3, 1, "HTTP"]
      ])
      for (const r of retries) {
        const base = r.attempt === 1 ? 1000 : 2000
        expect(r.delayMs).toBeGreaterThanOrEqual(base * 0.8)
        expect(r.delayMs).toBeLessThanOrEqual(base * 1.2)
        expect(Number.isInteger(r.delayMs)).toBe(true)
      }
      expect((yield* dataOfType("turn/end")).map((d) => d.reason.kind)).toEqual(["completed", "completed", "error"])
      expect((yield* dataOfType("turn/end"))[2]!.reason.error).toMatchObject({ code: "HTTP", status: 499 })
      expect(seen[0]).toEqual({ turn: 1, step: 1, attempt: 1, code: "OVERLOADED", sid: "s" })
      expect(yield* closeOut).toEqual([])
    }
  )

  agentTest(
    "4.5: a status of 600 is not retryable by the default policy",
    scenario([ScriptedModel.fail({ message: "x", code: "HTTP", status: 600 })]),
    function*({ driver }) {
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect(yield* dataOfType("llm/retry")).toEqual([])
      expect((yield* requests).length).toBe(1)
    }
  )

  agentTest(
    "4.5/K6: a Retry returned after the listener recorded a cause is ignored: no llm/retry, no further attempt, aborted",
    scenario([ScriptedModel.fail({ message: "x", code: "RATE_LIMIT" }), ScriptedModel.text("never")]),
    function*({ driver, hooks }) {
      yield* hooks.onRequestError(() =>
        Effect.as(driver.cancel(CancelCause.user), RequestErrorAction.retry("1 second"))
      )
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect(yield* dataOfType("llm/retry")).toEqual([])
      expect((yield* requests).length).toBe(1)
      expect((yield* shape).slice(-2)).toEqual(["SE(1,1)", "TE(1,aborted(user))"])
      expect(yield* closeOut).toEqual([])
    }
  )

  agentTest(
    "4.5: an onRequest failure is a turn failure with its own code and is not offered to request-error recovery",
    scenario([ScriptedModel.text("never")]),
    function*({ driver, hooks }) {
      const offered = yield* Ref.make(0)
      yield* hooks.onRequest(() => Effect.fail({ message: "no config", code: "CONFIG" }))
      yield* hooks.onRequestError((_i, next) => Effect.zipRight(Ref.update(offered, (n) => n + 1), next()))
      const live = yield* recordLive
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect(yield* Ref.get(offered)).toBe(0)
      expect(yield* requests).toEqual([])
      expect((yield* dataOfType("turn/end"))[0]!.reason).toEqual({
        kind: "error",
        error: { message: "no config", code: "CONFIG" }
      })
      const errors = (yield* live).filter((e) => e.type === "agent/error")
      expect(errors).toEqual([{
        type: "agent/error",
        turn: 1,
        step: 1,
        error: { message: "no config", code: "CONFIG" }
      }])
      expect(yield* closeOut).toEqual([])
    }
  )
})

describe("4.5 invalid request configuration", () => {
  // 4.5 "Failures of ... appends (... InvalidEvent → code INVALID_EVENT) are turn failures"; 5.1 checks every
  // loop append. An onRequest config that makes request/header invalid is not written.
  it.scoped("4.5/5.1: an onRequest config that makes request/header invalid ends the turn error(INVALID_EVENT) without writing it", () =>
    Effect.gen(function*() {
      const storeCtx = yield* Layer.build(SessionStore.layerMemory)
      const first = yield* buildIn(storeCtx, [ScriptedModel.text("never"), ScriptedModel.text("never")])
      const hooks = Context.get(first.ctx, Hooks)
      yield* hooks.onRequest((input, next) =>
        Effect.map(
          next(),
          (c) => input.turn === 1 ? { ...c, maxTokens: "lots" as unknown as number } : { ...c, temperature: Number.NaN }
        )
      ).pipe(Scope.extend(first.scope))
      for (const id of ["A", "B"]) {
        yield* first.driver.followup(user(id))
        yield* first.driver.whenIdle
      }
      const es = yield* first.log.events
      for (const h of es.filter((e) => e.type === "request/header")) {
        const header = (h.data as any).header
        expect(typeof (header.maxTokens ?? 0)).toBe("number")
        expect(Number.isNaN(header.temperature)).toBe(false)
      }
      const ends = es.filter((e) => e.type === "turn/end").map((e) => (e.data as any).reason)
      expect(ends.map((r) => r.kind === "error" ? r.error.code : r.kind)).toEqual(["INVALID_EVENT", "INVALID_EVENT"])
      expect(yield* Effect.map(Context.get(first.ctx, ScriptedModel).requests, (r) => r.length)).toBe(0)
      yield* Scope.close(first.scope, Exit.void)
      const resumed = yield* Effect.exit(Effect.scoped(buildIn(storeCtx, [], { resume: true })))
      expect(Exit.isSuccess(resumed)).toBe(true)
    }))
})

describe("4.5 Q1/Q2: first request of a driver instance", () => {
  it.scoped("4.5 Q1/Q2: a resumed driver's first request logs RH(resume); absent option fields come from the last logged header", () =>
    Effect.gen(function*() {
      const storeCtx = yield* Layer.build(SessionStore.layerMemory)
      const run = (options: Parameters<typeof agentOver>[1], script: Parameters<typeof agentOver>[0]) =>
        Effect.scoped(Effect.gen(function*() {
          const scope = yield* Scope.make()
          const ctx = yield* Layer.buildWithScope(
            agentOver(script, options).pipe(Layer.provide(Layer.succeedContext(storeCtx))),
            scope
          )
          const driver = Context.get(ctx, Driver)
          yield* driver.followup(user(options?.resume === true ? "B" : "A"))
          yield* driver.whenIdle
          const es = yield* Context.get(ctx, SessionLog).events
          const reqs = yield* Context.get(ctx, ScriptedModel).requests
          yield* Scope.close(scope, Exit.void)
          return { es, reqs }
        }))
      yield* run({ agent: { system: "S1", temperature: 0.3, maxTokens: 100 } }, [ScriptedModel.text("one")])
      const second = yield* run({ resume: true, agent: { model: { provider: "p", model: "m2" }, maxTokens: 50 } }, [
        ScriptedModel.text("two")
      ])
      const headers = second.es.filter((e) => e.type === "request/header").map((e) => e.data as Loose)
      expect(headers.map((h) => h.reason)).toEqual(["initial", "resume"])
      expect(headers[1]!.header).toEqual({
        provider: "p",
        model: "m2",
        system: "S1",
        maxTokens: 50,
        temperature: 0.3,
        tools: []
      })
      expect(second.reqs.map((r) => [r.model, r.system, r.maxTokens, r.temperature])).toEqual([["m2", "S1", 50, 0.3]])
    }))
})

describe("4.5: retries, Random and model-visible history", () => {
  it.scoped("4.5 D10: the jitter factor is drawn with Effect's Random (factor 0.8 + 0.4·r)", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "llm/retry")
      yield* TestClock.adjust("1 second")
      yield* untilEvent((e) => e.type === "llm/retry" && (e.data as Loose).attempt === 2)
      yield* TestClock.adjust("2 seconds")
      expect(yield* closeOut).toEqual([])
      expect((yield* dataOfType("llm/retry")).map((d) => d.delayMs)).toEqual([1000, 1800])
    }).pipe(
      Effect.provide(scenario([
        ScriptedModel.fail({ message: "a", code: "TIMEOUT" }),
        ScriptedModel.fail({ message: "b", code: "NETWORK" }),
        ScriptedModel.text("ok")
      ])),
      Effect.withRandom(Random.fixed([0.5, 0.25]))
    ))

  agentTest(
    "4.5: a surface replacement appended during the backoff applies from the next attempt",
    scenario([
      ScriptedModel.text("one"),
      ScriptedModel.fail({ message: "busy", code: "OVERLOADED" }),
      ScriptedModel.text("two")
    ]),
    function*({ driver, log }) {
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      yield* driver.followup(user("B"))
      yield* untilEvent((e) => e.type === "llm/retry")
      const es = yield* events
      const um = es.find((e) => e.type === "user/message" && (e.data as Loose).id === "A")!
      const am = es.find((e) => e.type === "assistant/message")!
      yield* log.append({
        type: "user/message",
        data: user("SUM", "summary"),
        surfaceOp: { op: "replace", start: um.seq, end: am.seq },
        sourceEventSeqs: [um.seq, am.seq]
      })
      yield* TestClock.adjust("2 seconds")
      expect(yield* closeOut).toEqual([])
      const reqs = yield* requests
      const ids = (r: ModelRequest) => r.messages.map((m) => m.id)
      expect(reqs).toHaveLength(3)
      expect(ids(reqs[1]!)).toEqual(["A", am.data && (am.data as Loose).message.id, "B"])
      expect(ids(reqs[2]!)).toEqual(["SUM", "B"])
    }
  )
})

describe("4.5 Q2: header tools", () => {
  agentTest(
    "4.5 Q2: tools are sorted by name in code-unit order; a tool registered between steps logs RH(change)",
    scenario([calls(["c1", "reg"]), ScriptedModel.text("done")], { tools: [okTool("b"), okTool("_a")] }),
    function*({ driver }) {
      const tools = yield* Tools
      const testScope = yield* Scope.make()
      const reg = Tool.make("reg", {
        description: "r",
        parameters: empty,
        execute: () => Effect.as(Scope.extend(tools.register(okTool("B")), testScope), "registered")
      })
      yield* tools.register(reg)
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      const headers = yield* dataOfType("request/header")
      expect(headers.map((h) => h.reason)).toEqual(["initial", "change"])
      expect(headers[0]!.header.tools.map((t: Loose) => t.name)).toEqual(["_a", "b", "reg"])
      expect(headers[1]!.header.tools.map((t: Loose) => t.name)).toEqual(["B", "_a", "b", "reg"])
      expect((yield* requests)[1]!.tools.map((t) => t.name)).toEqual(["B", "_a", "b", "reg"])
      yield* Scope.close(testScope, Exit.void)
    }
  )

  agentTest(
    "4.4/7.3: an inject made during step 1's pre-step misses step 1's request and enters step 2",
    scenario([ScriptedModel.text("one"), ScriptedModel.text("two")]),
    function*({ driver, preStep: pre }) {
      yield* pre.register((input, next) =>
        input.step === 1 ? Effect.zipRight(Effect.orDie(driver.inject(user("I"))), next()) : next()
      )
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      const reqs = yield* requests
      expect(reqs.map((r) => r.messages.filter((m) => m.role === "user" && m.source.kind !== "tool").map((m) => m.id)))
        .toEqual([["A"], ["A", "I"]])
      const s = yield* shape
      expect(s.slice(s.indexOf("SE(1,1)"), s.indexOf("SE(1,1)") + 4)).toEqual([
        "SE(1,1)",
        "CLM(ns,0,1)",
        "SS(1,2)",
        "UM(I)"
      ])
    }
  )
})

describe("4.5 / 5.1 D6: an unloggable Retry delay", () => {
  // Regression test (fixed; the text says what tiller did before): SPEC 5.1 "Every append (loop, …) … checked with the same Schemas … a log accepted live can always be
  // loaded" (D6); 4.5 "The loop rounds every Retry delay to a whole number of milliseconds". A Retry with
  // Duration.infinity is logged as llm/retry {delayMs: Infinity}; resume then fails with MalformedLog
  // ("event.data.delayMs: Infinity is not a finite number").
  it.effect("4.5/5.1: a Retry of Duration.infinity never makes the stored log unloadable", () =>
    Effect.gen(function*() {
      const storeCtx = yield* Effect.scoped(Layer.build(SessionStore.layerMemory))
      const scope = yield* Scope.make()
      const ctx = yield* Layer.buildWithScope(
        agentOver([ScriptedModel.fail({ message: "x", code: "X" })]).pipe(
          Layer.provide(Layer.succeedContext(storeCtx))
        ),
        scope
      )
      yield* Effect.provideService(
        Context.get(ctx, Hooks).onRequestError(() => Effect.succeed(RequestErrorAction.retry(Duration.infinity))),
        Scope.Scope,
        scope
      )
      const driver = Context.get(ctx, Driver)
      const log = Context.get(ctx, SessionLog)
      yield* driver.followup(user("A"))
      yield* until(Effect.map(log.events, (es) => es.some((e) => e.type === "llm/retry" || e.type === "turn/end")))
      yield* driver.cancel(CancelCause.user)
      yield* driver.whenIdle
      const delays = (yield* log.events).filter((e) => e.type === "llm/retry").map((e) => (e.data as Loose).delayMs)
      yield* Scope.close(scope, Exit.void)
      expect(delays.every((d) => Number.isSafeInteger(d))).toBe(true)
      const scope2 = yield* Scope.make()
      const reopened = yield* Effect.either(
        Layer.buildWithScope(
          agentOver([], { resume: true }).pipe(Layer.provide(Layer.succeedContext(storeCtx))),
          scope2
        )
      )
      expect(reopened._tag === "Left" ? (reopened.left as any)._tag : "Right").toBe("Right")
      yield* Scope.close(scope2, Exit.void)
    }))
})

describe("4.5 requests", () => {
  it.scoped("4.5 Q1: no provider or model anywhere ends the turn error(NO_ROUTE)", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect((yield* shape).slice(-1)).toEqual(["TE(1,error(NO_ROUTE))"])
      expect(yield* requests).toEqual([])
    }).pipe(Effect.provide(
      Agent.layer({ sessionId: SessionId.make("s") }).pipe(
        Layer.provideMerge(
          Layer.mergeAll(SessionStore.layerMemory, ScriptedModel.layer([ScriptedModel.text("x")]), Tools.layer())
        )
      )
    )))

  agentTest(
    "4.5 Q2: a header changed by onRequest logs RH(change); an unchanged one logs nothing",
    scenario([ScriptedModel.text("a"), ScriptedModel.text("b"), ScriptedModel.text("c")], {
      agent: { system: "sys", maxTokens: 100, temperature: 0.5 }
    }),
    function*({ driver, hooks }) {
      yield* hooks.onRequest((input, next) =>
        input.turn === 2 ? Effect.map(next(), (c) => ({ ...c, system: "changed" })) : next()
      )
      for (const id of ["A", "B", "C"]) {
        yield* driver.followup(user(id))
        yield* driver.whenIdle
      }
      // Q1: after the first request the seed is the config of the last logged header.
      expect((yield* shape).filter((s) => s.startsWith("RH"))).toEqual(["RH(initial)", "RH(change)"])
      const rs = yield* requests
      expect(rs.map((r) => r.system)).toEqual(["sys", "changed", "changed"])
      expect(rs[0]).toMatchObject({
        provider: "p",
        model: "m",
        system: "sys",
        maxTokens: 100,
        temperature: 0.5,
        tools: []
      })
    }
  )

  agentTest(
    "4.5 Q5: a stream that ends without finish gets a synthetic finish error NO_FINISH",
    scenario([
      ScriptedModel.chunks([{ type: "block-start", index: 0, block: "text" }, {
        type: "text-delta",
        index: 0,
        text: "x"
      }])
    ]),
    function*({ driver }) {
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect((yield* shape).slice(-2)).toEqual(["SE(1,1)", "TE(1,error(NO_FINISH))"])
    }
  )

  agentTest(
    "4.5 Q5: a delta for an unopened index gives MALFORMED_STREAM and is not logged",
    scenario([
      ScriptedModel.chunks([{ type: "block-start", index: 0, block: "text" }, {
        type: "text-delta",
        index: 3,
        text: "x"
      }, { type: "finish", finish: { kind: "stop" } }])
    ]),
    function*({ driver }) {
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      const s = yield* shape
      expect(s.slice(-5)).toEqual([
        "RH(initial)",
        "CH(block-start)",
        "CH(finish error)",
        "SE(1,1)",
        "TE(1,error(MALFORMED_STREAM))"
      ])
    }
  )

  agentTest(
    "4.5: a listener's Retry is logged with the rounded delay and slept on the Clock; retryAfterMs raises the default delay",
    scenario([
      ScriptedModel.fail({ message: "x", code: "OVERLOADED" }),
      ScriptedModel.fail({ message: "y", code: "X", status: 500, retryAfterMs: 5000 }),
      ScriptedModel.text("ok")
    ]),
    function*({ driver, hooks }) {
      yield* hooks.onRequestError((input, next) =>
        input.attempt === 1 ? Effect.succeed({ _tag: "Retry" as const, delay: decimalDelay }) : next()
      )
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "llm/retry")
      expect((yield* dataOfType("llm/retry"))[0]!.delayMs).toBe(1501)
      yield* TestClock.adjust("1501 millis")
      yield* until(Effect.map(dataOfType("llm/retry"), (a) => a.length === 2))
      expect((yield* dataOfType("llm/retry"))[1]!.delayMs).toBe(5000)
      yield* TestClock.adjust("5 seconds")
      yield* driver.whenIdle
      expect(yield* texts).toEqual(["A"])
      expect((yield* shape).slice(-1)).toEqual(["TE(1,completed)"])
    }
  )

  agentTest(
    "4.5: retryable false, a provider-side aborted finish and an unknown code are not retried",
    scenario([
      ScriptedModel.fail({ message: "x", code: "RATE_LIMIT", status: 429, retryable: false }),
      ScriptedModel.fail({ message: "y", code: "ABORTED" }, { finish: "aborted" }),
      ScriptedModel.fail({ message: "z", code: "WEIRD", status: 400 })
    ]),
    function*({ driver }) {
      for (const id of ["A", "B", "C"]) {
        yield* driver.followup(user(id))
        yield* driver.whenIdle
      }
      expect((yield* shape).filter((s) => s.startsWith("RT"))).toEqual([])
      expect((yield* shape).filter((s) => s.startsWith("TE"))).toEqual([
        "TE(1,error(RATE_LIMIT))",
        "TE(2,error(ABORTED))",
        "TE(3,error(WEIRD))"
      ])
    }
  )

  agentTest(
    "3.10/6.2: every event time is the Clock time at commit",
    scenario([ScriptedModel.text("a")]),
    function*({ driver }) {
      yield* TestClock.adjust("3 seconds")
      yield* driver.inject(plugin("C"))
      yield* TestClock.adjust("2 seconds")
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      const times = (yield* events).map((e) => e.time)
      expect(times[0]).toBe(3000)
      expect(times.slice(1).every((t) => t === 5000)).toBe(true)
    }
  )

  agentTest(
    "3.10: live order of a wake and the stream of the log replays then follows",
    scenario([ScriptedModel.text("a")]),
    function*({ driver, log }) {
      const live = yield* recordLive
      yield* driver.inject(plugin("C"))
      const seen = yield* Ref.make<ReadonlyArray<number>>([])
      yield* Effect.forkScoped(Stream.runForEach(log.stream(1), (e) => Ref.update(seen, (a) => [...a, e.seq])))
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      yield* settle
      const total = (yield* events).length
      expect(yield* Ref.get(seen)).toEqual(Array.from({ length: total - 1 }, (_, i) => i + 1))
      expect((yield* live).map(liveNotation)).toEqual([
        "inserted(C)",
        "inserted(A)",
        "status(running)",
        "claimed(C,1)",
        "claimed(A,1)",
        "status(idle)"
      ])
    }
  )
})

describe("4.5 Q1 seed on resume", () => {
  it.scoped("4.5 Q1: an agent resumed without model options takes provider and model from the last logged header", () =>
    Effect.gen(function*() {
      const storeCtx = yield* Layer.build(SessionStore.layerMemory)
      const scope = yield* Scope.make()
      const first = yield* Layer.buildWithScope(
        agentOver([ScriptedModel.text("a")], { agent: { system: "sys" } }).pipe(
          Layer.provide(Layer.succeedContext(storeCtx))
        ),
        scope
      )
      const d1 = Context.get(first, Driver)
      yield* d1.followup(user("A"))
      yield* d1.whenIdle
      yield* Scope.close(scope, Exit.void)
      yield* Effect.gen(function*() {
        const driver = yield* Driver
        yield* driver.followup(user("B"))
        yield* driver.whenIdle
        const req = (yield* requests)[0]!
        expect([req.provider, req.model, req.system]).toEqual(["p", "m", "sys"])
        expect((yield* shape).filter((s) => s.startsWith("RH"))).toEqual(["RH(initial)", "RH(resume)"])
        expect((yield* shape).slice(-1)).toEqual(["TE(2,completed)"])
      }).pipe(
        Effect.provide(
          Agent.layer({ resume: SessionId.make("s") }).pipe(
            Layer.provideMerge(
              Layer.mergeAll(
                Layer.succeedContext(storeCtx),
                ScriptedModel.layer([ScriptedModel.text("b")]),
                Tools.layer()
              )
            )
          )
        )
      )
    }))
})

describe("4.5 Q2/Q3 / 8.8: the ModelRequest of each step", () => {
  agentTest(
    "4.5 Q3: the first request carries exactly the ModelRequest fields; RH(initial) logs the same header",
    scenario([ScriptedModel.text("ok")], {
      tools: [zetaTool, readTool],
      agent: { model: { provider: "p", model: "m" }, system: "be brief", maxTokens: 100, temperature: 0 }
    }),
    function*({ driver }) {
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      const [r] = yield* requests
      expect(Object.keys(r!).sort()).toEqual(
        [
          "attempt",
          "maxTokens",
          "messages",
          "model",
          "provider",
          "sessionId",
          "step",
          "system",
          "temperature",
          "tools",
          "turn"
        ]
      )
      const expectedTools = [
        { name: "read", description: "Reads a file", parameters: JSONSchema.make(ReadParams) },
        { name: "zeta", description: "Last tool", parameters: JSONSchema.make(Schema.Struct({})) }
      ]
      expect({ ...r!, messages: undefined }).toEqual({
        sessionId: "s",
        turn: 1,
        step: 1,
        attempt: 1,
        provider: "p",
        model: "m",
        system: "be brief",
        maxTokens: 100,
        temperature: 0,
        tools: expectedTools,
        messages: undefined
      })
      const [rh] = yield* dataOfType("request/header")
      expect(rh).toEqual({
        header: { provider: "p", model: "m", system: "be brief", maxTokens: 100, temperature: 0, tools: expectedTools },
        reason: "initial"
      })
      expect(r!.tools).toEqual(yield* Effect.flatMap(Tools, (t) => t.list))
    }
  )

  agentTest(
    "4.5 Q3: absent optional config fields are absent keys of the request and of the header",
    scenario([ScriptedModel.text("ok")]),
    function*({ driver }) {
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      const [r] = yield* requests
      expect("system" in r!).toBe(false)
      expect("maxTokens" in r!).toBe(false)
      expect("temperature" in r!).toBe(false)
      const [rh] = yield* dataOfType("request/header")
      expect(Object.keys(rh!.header).sort()).toEqual(["model", "provider", "tools"])
      expect(rh!.header.tools).toEqual([])
    }
  )

  agentTest(
    "4.5/2.8: step 2 sees the assistant message (reasoning, text, tool call, replayState), the tool result and the tool's context",
    scenario([
      ScriptedModel.response({
        reasoning: "think",
        text: "calling",
        toolCalls: [{ id: "c1", name: "read", arguments: { path: "a.txt" } }],
        replayState: { opaque: [1, "x", null] }
      }),
      ScriptedModel.text("done")
    ], { tools: [readTool] }),
    function*({ driver, log }) {
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      const reqs = yield* requests
      expect(reqs.map((r) => [r.turn, r.step, r.attempt])).toEqual([[1, 1, 1], [1, 2, 1]])
      const m = reqs[1]!.messages
      expect(m.map((x) => x.role)).toEqual(["user", "assistant", "user", "user"])
      expect(m[0]).toEqual(user("A"))
      expect({ ...m[1]!, id: "x" }).toEqual({
        id: "x",
        role: "assistant",
        content: [
          { type: "reasoning", text: "think" },
          { type: "text", text: "calling" },
          { type: "tool-call", id: "c1", name: "read", arguments: "{\"path\":\"a.txt\"}" }
        ],
        source: { kind: "model", provider: "p", model: "m", replayState: { opaque: [1, "x", null] } }
      })
      expect({ ...m[2]!, id: "x" }).toEqual({
        id: "x",
        role: "user",
        content: [{
          type: "tool-result",
          toolCallId: "c1",
          isError: false,
          content: [{ type: "text", text: "contents of a.txt" }]
        }],
        source: { kind: "tool", callId: "c1" }
      })
      expect(m[3]).toEqual(plugin("ctx-1", "file was read"))
      // Model-visible ⇔ logged: the history and the header as logged.
      expect(m).toEqual(yield* log.messages.pipe(Effect.map((all) => all.slice(0, 4))))
      const rhs = yield* dataOfType("request/header")
      expect(rhs.map((d) => d.reason)).toEqual(["initial"])
      const { messages: _m, sessionId: _s, turn: _t, step: _k, attempt: _a, ...header } = reqs[1]!
      expect(header).toEqual(rhs[0]!.header)
      // The replay-state chunk is logged like any other chunk.
      const chunks = (yield* dataOfType("assistant/chunk")).map((d) => d.chunk)
      expect(chunks.filter((c) => c.type === "replay-state")).toEqual([{
        type: "replay-state",
        state: { opaque: [1, "x", null] }
      }])
    }
  )

  agentTest(
    "2.8/4.5: an empty assistant message (lone stop finish) is not sent to the model in a later turn",
    scenario([
      ScriptedModel.chunks([{ type: "finish", finish: { kind: "stop" } }]),
      ScriptedModel.text("ok")
    ]),
    function*({ driver }) {
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      yield* driver.followup(user("B"))
      expect(yield* closeOut).toEqual([])
      const reqs = yield* requests
      expect(reqs[1]!.messages).toEqual([user("A"), user("B")])
      expect((yield* dataOfType("assistant/message"))[0]!.message.content).toEqual([])
    }
  )

  agentTest(
    "4.5 assembler: usage and replayState are the last chunk's values; every chunk is logged and cited",
    scenario([
      ScriptedModel.chunks([
        { type: "usage", usage: { inputTokens: 1, outputTokens: 1 } },
        { type: "replay-state", state: { v: 1 } },
        { type: "block-start", index: 0, block: "text" },
        { type: "text-delta", index: 0, text: "a" },
        { type: "text-delta", index: 0, text: "b" },
        { type: "block-end", index: 0 },
        { type: "usage", usage: { inputTokens: 5, outputTokens: 6 } },
        { type: "replay-state", state: { v: 2 } },
        { type: "finish", finish: { kind: "stop" } }
      ]),
      ScriptedModel.text("ok")
    ]),
    function*({ driver }) {
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      const es = yield* events
      const chunkSeqs = es.filter((e) => e.type === "assistant/chunk").map((e) => e.seq)
      expect(chunkSeqs).toHaveLength(9)
      const am = es.find((e) => e.type === "assistant/message")!
      expect((am as Loose).sourceEventSeqs).toEqual(chunkSeqs)
      const d = am.data as Loose
      expect(d.usage).toEqual({ inputTokens: 5, outputTokens: 6 })
      expect(d.message.source).toEqual({ kind: "model", provider: "p", model: "m", replayState: { v: 2 } })
      expect(d.message.content).toEqual([{ type: "text", text: "ab" }])
      yield* driver.followup(user("B"))
      expect(yield* closeOut).toEqual([])
      expect((yield* requests)[1]!.messages[1]!.source).toEqual({
        kind: "model",
        provider: "p",
        model: "m",
        replayState: { v: 2 }
      })
    }
  )

  agentTest(
    "7.4/4.5: an interrupted prefix is sent to the model in the next turn; the failed attempt's text is not",
    scenario([ScriptedModel.hang({ text: "partial" }), ScriptedModel.text("ok")]),
    function*({ driver }) {
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "assistant/chunk" && (e.data as Loose).chunk.type === "text-delta")
      yield* driver.cancel(CancelCause.user)
      expect(yield* closeOut).toEqual([])
      yield* driver.followup(user("B"))
      expect(yield* closeOut).toEqual([])
      const reqs = yield* requests
      const m = reqs[1]!.messages
      expect(m.map((x) => x.role)).toEqual(["user", "assistant", "user"])
      expect(m[1]!.content).toEqual([{ type: "text", text: "partial" }])
      expect(m[1]!.source).toEqual({ kind: "model", provider: "p", model: "m" })
    }
  )

  agentTest(
    "4.4/4.5: an injected context and the prompt reach the request verbatim (ids and sources kept)",
    scenario([ScriptedModel.text("ok")]),
    function*({ driver }) {
      yield* driver.inject(plugin("P1", "context"))
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      const [r] = yield* requests
      expect(r!.messages).toHaveLength(2)
      expect(r!.messages).toContainEqual(plugin("P1", "context"))
      expect(r!.messages).toContainEqual(user("A"))
    }
  )
})

describe("4.5 Q1 / 8.7: onRequest", () => {
  agentTest(
    "4.5 Q1: onRequest sees a frozen seed from the agent options; its config becomes the request and RH(initial)",
    scenario([ScriptedModel.text("ok")], {
      agent: { model: { provider: "p", model: "m" }, system: "S", maxTokens: 10, temperature: 0.5 }
    }),
    function*({ hooks, driver }) {
      const seen: Array<Loose> = []
      yield* hooks.onRequest((input, next) =>
        Effect.map(next(), (config): RequestConfig => {
          seen.push({ ...input, frozen: Object.isFrozen(input.config), same: config === input.config })
          return { ...config, system: "S2", maxTokens: 77 }
        })
      )
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect(seen).toHaveLength(1)
      expect(seen[0]).toEqual({
        sessionId: "s",
        turn: 1,
        step: 1,
        attempt: 1,
        config: { provider: "p", model: "m", system: "S", maxTokens: 10, temperature: 0.5 },
        frozen: true,
        same: true
      })
      const [r] = yield* requests
      expect([r!.system, r!.maxTokens, r!.temperature]).toEqual(["S2", 77, 0.5])
      const [rh] = yield* dataOfType("request/header")
      expect(rh).toEqual({
        header: { provider: "p", model: "m", system: "S2", maxTokens: 77, temperature: 0.5, tools: [] },
        reason: "initial"
      })
    }
  )

  agentTest(
    "4.5 Q1/Q7: onRequest runs again for a retry with attempt 2; an unchanged config logs no second RH",
    scenario([ScriptedModel.fail({ message: "nope", code: "WHATEVER" }), ScriptedModel.text("ok")]),
    function*({ hooks, driver }) {
      const attempts: Array<number> = []
      yield* hooks.onRequest((input, next) => Effect.zipRight(Effect.sync(() => attempts.push(input.attempt)), next()))
      yield* hooks.onRequestError(() => Effect.succeed(RequestErrorAction.retry(Duration.millis(0))))
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect(attempts).toEqual([1, 2])
      expect(yield* shape).toEqual([
        "INS(nt,0,[A])",
        "TS(1)",
        "CLM(nt,0,1)",
        "SS(1,1)",
        "UM(A)",
        "RH(initial)",
        "CH(finish error)",
        "RT(1)",
        "CH(block-start)",
        "CH(text-delta)",
        "CH(block-end)",
        "CH(finish stop)",
        "AM",
        "SE(1,1)",
        "TE(1,completed)"
      ])
      const reqs = yield* requests
      expect(reqs.map((r) => r.attempt)).toEqual([1, 2])
      expect(reqs[1]!.messages).toEqual(reqs[0]!.messages)
      expect((yield* dataOfType("llm/retry"))[0]).toEqual({
        turn: 1,
        step: 1,
        attempt: 1,
        delayMs: 0,
        failure: { message: "nope", code: "WHATEVER" }
      })
    }
  )
})

describe("4.5 D10 / 8.7: request-error recovery", () => {
  // The default policy's decision is read through a listener that calls `next` and then fails the
  // turn (so nothing sleeps).
  const cases: ReadonlyArray<readonly [LlmFailure, "Retry" | "Fail"]> = [
    [{ message: "m", code: "RATE_LIMIT" }, "Retry"],
    [{ message: "m", code: "OVERLOADED" }, "Retry"],
    [{ message: "m", code: "SERVICE_UNAVAILABLE" }, "Retry"],
    [{ message: "m", code: "NETWORK" }, "Retry"],
    [{ message: "m", code: "TIMEOUT" }, "Retry"],
    [{ message: "m", code: "X", status: 429 }, "Retry"],
    [{ message: "m", code: "X", status: 500 }, "Retry"],
    [{ message: "m", code: "X", status: 599 }, "Retry"],
    [{ message: "m", code: "X", retryable: true }, "Retry"],
    [{ message: "m", code: "X", status: 499 }, "Fail"],
    [{ message: "m", code: "X", status: 600 }, "Fail"],
    [{ message: "m", code: "X" }, "Fail"],
    [{ message: "m", code: "rate_limit" }, "Fail"],
    [{ message: "m", code: "OVERLOADED", retryable: false }, "Fail"],
    [{ message: "m", code: "X", status: 503, retryable: false }, "Fail"]
  ]
  agentTest(
    "4.5 D10: the default policy retries exactly the retryable failures; the listener sees the failure verbatim",
    scenario(cases.map(([failure]) => ScriptedModel.fail(failure))),
    function*({ hooks, driver }) {
      const seen: Array<{ input: Loose; tag: string; delay?: number }> = []
      yield* hooks.onRequestError((input, next) =>
        Effect.map(next(), (action) => {
          seen.push({
            input,
            tag: action._tag,
            ...(action._tag === "Retry" ? { delay: Duration.toMillis(action.delay) } : {})
          })
          return RequestErrorAction.fail
        })
      )
      for (let i = 0; i < cases.length; i++) {
        yield* driver.followup(user(`q${i}`))
        yield* driver.whenIdle
      }
      expect(yield* closeOut).toEqual([])
      expect(seen.map((s) => s.tag)).toEqual(cases.map(([, tag]) => tag))
      expect(seen.map((s) => s.input)).toEqual(
        cases.map(([failure], i) => ({ sessionId: "s", turn: i + 1, step: 1, attempt: 1, failure }))
      )
      for (const s of seen) {
        if (s.tag === "Retry") {
          expect(s.delay!).toBeGreaterThanOrEqual(800)
          expect(s.delay!).toBeLessThanOrEqual(1200)
        }
      }
      expect(yield* dataOfType("llm/retry")).toEqual([])
      expect((yield* reasons).map((r) => r.error)).toEqual(cases.map(([failure]) => failure))
    }
  )

  agentTest(
    "4.5 D10: attempt 2 backs off 2 s (jittered), attempt 3 is never retried; the listener's own Retry is what the loop logs",
    scenario([
      ScriptedModel.fail({ message: "a", code: "OVERLOADED" }),
      ScriptedModel.fail({ message: "b", code: "OVERLOADED" }),
      ScriptedModel.fail({ message: "c", code: "OVERLOADED" })
    ]),
    function*({ hooks, driver }) {
      const defaults: Array<readonly [number, string, number]> = []
      yield* hooks.onRequestError((input, next) =>
        Effect.map(next(), (action) => {
          defaults.push([input.attempt, action._tag, action._tag === "Retry" ? Duration.toMillis(action.delay) : -1])
          return input.attempt < 3 ? RequestErrorAction.retry(Duration.millis(input.attempt)) : action
        })
      )
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "llm/retry")
      yield* TestClock.adjust(1)
      yield* untilEvent((e) => e.type === "llm/retry" && (e.data as Loose).attempt === 2)
      yield* TestClock.adjust(2)
      expect(yield* closeOut).toEqual([])
      expect(defaults.map(([a, t]) => [a, t])).toEqual([[1, "Retry"], [2, "Retry"], [3, "Fail"]])
      expect(defaults[1]![2]).toBeGreaterThanOrEqual(1600)
      expect(defaults[1]![2]).toBeLessThanOrEqual(2400)
      expect((yield* dataOfType("llm/retry")).map((d) => [d.attempt, d.delayMs])).toEqual([[1, 1], [2, 2]])
      expect((yield* requests).map((r) => r.attempt)).toEqual([1, 2, 3])
      expect(yield* reasons).toEqual([{ kind: "error", error: { message: "c", code: "OVERLOADED" } }])
    }
  )

  agentTest(
    "4.5 D10: retryAfterMs above the 30 s cap is the delay (max, not min); the retry waits exactly that long",
    scenario([
      ScriptedModel.fail({ message: "slow down", code: "RATE_LIMIT", retryAfterMs: 45000, requestId: "req-1" }),
      ScriptedModel.text("ok")
    ]),
    function*({ driver }) {
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "llm/retry")
      expect((yield* dataOfType("llm/retry"))[0]).toEqual({
        turn: 1,
        step: 1,
        attempt: 1,
        delayMs: 45000,
        failure: { message: "slow down", code: "RATE_LIMIT", retryAfterMs: 45000, requestId: "req-1" }
      })
      yield* TestClock.adjust(44999)
      yield* settle
      expect(yield* requests).toHaveLength(1)
      yield* TestClock.adjust(1)
      expect(yield* closeOut).toEqual([])
      expect(yield* requests).toHaveLength(2)
    }
  )

  agentTest(
    "4.5 Q7: a provider-side aborted finish with a retryable failure goes through recovery and is retried",
    scenario([
      ScriptedModel.fail({ message: "cut", code: "OVERLOADED" }, { finish: "aborted" }),
      ScriptedModel.text("ok")
    ]),
    function*({ driver }) {
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "llm/retry")
      yield* TestClock.adjust("2 seconds")
      expect(yield* closeOut).toEqual([])
      const chunks = (yield* dataOfType("assistant/chunk")).map((d) => d.chunk)
      expect(chunks[0]).toEqual({
        type: "finish",
        finish: { kind: "aborted", failure: { message: "cut", code: "OVERLOADED" } }
      })
      expect(yield* reasons).toEqual([{ kind: "completed" }])
    }
  )

  agentTest(
    "4.5/4.7: an onRequestError failure is a turn failure mapped to {message, code}; no retry is logged",
    scenario([ScriptedModel.fail({ message: "m", code: "OVERLOADED" }), ScriptedModel.text("ok")]),
    function*({ hooks, driver }) {
      yield* hooks.onRequestError(() => Effect.fail({ message: "hook broke", code: "HOOKX" }))
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect(yield* reasons).toEqual([{ kind: "error", error: { message: "hook broke", code: "HOOKX" } }])
      expect(yield* dataOfType("llm/retry")).toEqual([])
      expect(yield* requests).toHaveLength(1)
    }
  )

  agentTest(
    "4.5 Q5: a stream failure with a ModelError is logged as a synthetic error finish carrying its failure verbatim",
    scenario([ScriptedModel.die("gone")]),
    function*({ driver }) {
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      const chunks = (yield* dataOfType("assistant/chunk")).map((d) => d.chunk)
      expect(chunks).toEqual([{
        type: "finish",
        finish: { kind: "error", failure: { message: "gone", code: "UNKNOWN" } }
      }])
      expect(yield* reasons).toEqual([{ kind: "error", error: { message: "gone", code: "UNKNOWN" } }])
    }
  )
})
