/**
 * Tool START and the bodies it runs (SPEC 4.6): bodies calling their own driver, abort
 * classification and commit priority, outcomes and the pool, cancel and disposal while bodies run,
 * what a body sees, and TX-STEP / step/end without a transaction.
 */
import { describe, expect, it } from "@effect/vitest"
import {
  Context,
  Deferred,
  Effect,
  Exit,
  Fiber,
  FiberRef,
  HashMap,
  Layer,
  Option,
  Ref,
  Schema,
  TestClock
} from "effect"
import type { Scope } from "effect"
import * as EffectScope from "effect/Scope"
import { checkLog } from "../../src/domain/Check.js"
import { AgentBusy, PersistenceError } from "../../src/domain/Errors.js"
import type { EventOf, SessionEvent } from "../../src/domain/Event.js"
import { SessionId } from "../../src/domain/Ids.js"
import { CancelCause } from "../../src/domain/Values.js"
import type { UserMessage } from "../../src/domain/Values.js"
import { Agent } from "../../src/layers/Agent.js"
import { ScriptedModel } from "../../src/layers/ScriptedModel.js"
import type { ScriptEntry } from "../../src/layers/ScriptedModel.js"
import { Driver } from "../../src/services/Driver.js"
import { Hooks } from "../../src/services/Hooks.js"
import { Inbox } from "../../src/services/Inbox.js"
import { PreStep, PreStepDecision } from "../../src/services/PreStep.js"
import { SessionLog } from "../../src/services/SessionLog.js"
import { MemoryStoreControl, SessionStore } from "../../src/services/SessionStore.js"
import { Tool, Tools } from "../../src/services/Tools.js"
import type { ToolContext, ToolDefinition, ToolOutput } from "../../src/services/Tools.js"
import { drivenThrough } from "./cancelFixtures.js"
import {
  agentTest,
  broad,
  events as eventsOf,
  idleAndChecked,
  ifBroad,
  modes,
  notation,
  OPEN_A,
  opts,
  pending,
  plugin,
  recordLiveOf,
  scenario,
  settle,
  shape,
  STEP_A,
  TEXT,
  toolResponse,
  toolShape,
  turnEndsOf,
  user,
  waitUntil
} from "./harness.js"
import { call, calls, empty, makeHandle } from "./toolFixtures.js"

// ---------------------------------------------------------------------------------------------------
// Helpers

/** `log` without `entry`, after checking that `entry` occurs once, after `after` and before `before`. */
const placedBetween = (log: ReadonlyArray<string>, entry: string, after: string, before: string) => {
  const at = log.indexOf(entry)
  expect(log.filter((e) => e === entry).length).toBe(1)
  expect(at).toBeGreaterThan(log.indexOf(after))
  expect(at).toBeLessThan(log.indexOf(before))
  return log.filter((e) => e !== entry)
}
const results = (all: ReadonlyArray<SessionEvent>) =>
  all.filter((e): e is EventOf<"tool/result"> => e.type === "tool/result").map((e) => ({
    id: e.data.message.content[0].toolCallId,
    text: e.data.message.content[0].content.map((b) => (b.type === "text" ? b.text : b.type)).join(""),
    isError: e.data.message.content[0].isError,
    error: e.data.error
  }))

const S = SessionId.make("s")

const run = <A, E>(
  script: ReadonlyArray<ScriptEntry>,
  options: Parameters<typeof scenario>[1],
  body: Effect.Effect<A, E, Driver | SessionLog | Hooks | Inbox | PreStep | ScriptedModel | Tools | Scope.Scope>
) => Effect.provide(body, scenario(script, options))

/** An agent over the store of the environment, for tests that dispose it themselves. */
const agentOn = (
  script: ReadonlyArray<ScriptEntry>,
  tools: ReadonlyArray<ToolDefinition<any>>,
  maxParallelToolCalls?: number
) =>
  Agent.layer({ sessionId: S, model: { provider: "p", model: "m" }, invariants: "check" }).pipe(
    Layer.provideMerge(Layer.mergeAll(
      ScriptedModel.layer(script),
      Tools.layer({ tools, ...(maxParallelToolCalls !== undefined ? { maxParallelToolCalls } : {}) })
    ))
  )

const A = user("A")

/** A tool `t` whose body opens `hung` and then hangs; `interrupted` turns true once it is interrupted. */
const hangingTool = Effect.gen(function*() {
  const hung = yield* Deferred.make<void>()
  const interrupted = yield* Ref.make(false)
  const tool = Tool.make("t", {
    description: "hangs",
    parameters: empty,
    execute: () =>
      Effect.zipRight(Deferred.succeed(hung, undefined), Effect.never).pipe(
        Effect.onInterrupt(() => Ref.set(interrupted, true))
      )
  })
  return { hung, interrupted, tool }
})

/** A parallel tool `t` answering `ok-<call id>` at once. */
const answersAtOnce = Tool.make("t", {
  description: "answers at once",
  parameters: empty,
  mode: "parallel",
  execute: (_params, ctx) => Effect.succeed(`ok-${ctx.callId}`)
})

// ---------------------------------------------------------------------------------------------------

describe("a tool body calling its own driver (SPEC 3.3, 3.5, 3.6, D5)", () => {
  it.scoped("a synchronous body's inject, steer, follow-up and quiet queue land between its TC and TR; maintenance is refused", () =>
    Effect.gen(function*() {
      const handle = yield* makeHandle
      const seen = yield* Ref.make<ReadonlyArray<string>>([])
      const note = (s: string) => Ref.update(seen, (all) => [...all, s])
      const t = Tool.make("t", {
        description: "uses its own driver",
        parameters: empty,
        execute: () =>
          handle.use((driver) =>
            Effect.gen(function*() {
              yield* driver.inject(plugin("I"))
              yield* driver.steer(user("S"))
              yield* driver.followup(user("F"))
              yield* driver.send(user("Q"), "next-turn", false)
              const busy = yield* Effect.flip(driver.runMaintenance(Effect.void))
              yield* note(busy instanceof AgentBusy ? `busy:${busy.phase}` : `other:${String(busy)}`)
              yield* note(`status:${yield* driver.status}`)
              return "used"
            })
          )
      })
      const script = [
        calls(["c1", "t"]),
        ScriptedModel.text("after tools"),
        ScriptedModel.text("f"),
        ScriptedModel.text("q")
      ]
      yield* run(
        script,
        { tools: [t] },
        drivenThrough(handle, function*(driver) {
          const live = yield* recordLiveOf(driver)
          yield* driver.followup(A)
          yield* driver.whenIdle
          expect(yield* Ref.get(seen)).toEqual(["busy:running", "status:running"])
          expect(yield* shape).toEqual([
            ...STEP_A,
            ...toolResponse(1),
            "TC(c1)",
            "INS(ns,0,[I])",
            "INS(ns,1,[S])",
            "INS(nt,0,[F])",
            "INS(nt,1,[Q])",
            "TR(c1)",
            // The steer and the injection are claimed at the boundary of step 1 (step/end and claim together).
            "SE(1,1)",
            "CLM(ns,0,2)",
            "SS(1,2)",
            "UM(I)",
            "UM(S)",
            ...TEXT,
            "SE(1,2)",
            "TE(1,completed)",
            // The chain continues into both next-turn items (a quiet queue runs as a later turn of a running chain).
            "TS(2)",
            "CLM(nt,0,1)",
            "SS(2,1)",
            "UM(F)",
            ...TEXT,
            "SE(2,1)",
            "TE(2,completed)",
            "TS(3)",
            "CLM(nt,0,1)",
            "SS(3,1)",
            "UM(Q)",
            ...TEXT,
            "SE(3,1)",
            "TE(3,completed)"
          ])
          yield* settle
          expect(yield* live.all).toEqual([
            "inserted(A)",
            "status(running)",
            "claimed(A,1)",
            "inserted(I)",
            "inserted(S)",
            "inserted(F)",
            "inserted(Q)",
            "claimed(I,1)",
            "claimed(S,1)",
            "claimed(F,2)",
            "claimed(Q,3)",
            "status(idle)"
          ])
          yield* idleAndChecked
        })
      )
    }))

  it.scoped("whenIdle awaited from a body (at once, or after a suspension) dies as TOOL_DEFECT instead of hanging; nothing is published", () =>
    Effect.gen(function*() {
      const handle = yield* makeHandle
      const t = Tool.make("t", {
        description: "awaits its own driver's idleness",
        parameters: empty,
        mode: "parallel",
        execute: (_params, ctx) =>
          handle.use((driver) =>
            ctx.callId === "c1"
              ? Effect.as(driver.whenIdle, "idle?")
              : Effect.zipRight(settle, Effect.as(driver.whenIdle, "idle?"))
          )
      })
      const script = [calls(["c1", "t"], ["c2", "t"]), ScriptedModel.text("w")]
      yield* run(
        script,
        { tools: [t] },
        drivenThrough(handle, function*(driver) {
          const live = yield* recordLiveOf(driver)
          yield* driver.followup(A)
          yield* driver.whenIdle
          const defect = {
            isError: true,
            text: "Error: whenIdle was awaited from the activity it waits for (a hook, tool body or maintenance task)",
            error: { name: "ToolDefect", code: "TOOL_DEFECT" }
          }
          expect(results(yield* eventsOf)).toEqual([{ id: "c1", ...defect }, { id: "c2", ...defect }])
          expect(turnEndsOf(yield* eventsOf)).toEqual([{ kind: "completed" }])
          yield* settle
          expect(yield* live.all).toEqual(["inserted(A)", "status(running)", "claimed(A,1)", "status(idle)"])
          yield* idleAndChecked
        })
      )
    }))

  for (const mode of modes) {
    it.scoped(`K13 from a synchronous parallel body while a sibling hangs: the sibling is interrupted and awaited, later calls never start [${mode}]`, () =>
      Effect.gen(function*() {
        const handle = yield* makeHandle
        const hung = yield* Deferred.make<void>()
        const interrupted = yield* Ref.make<ReadonlyArray<string>>([])
        const ran = yield* Ref.make<ReadonlyArray<string>>([])
        const cancelExit = yield* Deferred.make<Exit.Exit<void, unknown>>()
        const t = Tool.make("t", {
          description: "c1 hangs, c2 cancels its own turn at once",
          parameters: empty,
          mode: "parallel",
          execute: (_params, ctx: ToolContext): Effect.Effect<ToolOutput | string> =>
            Effect.gen(function*() {
              yield* Ref.update(ran, (all) => [...all, ctx.callId])
              yield* ctx.deferContext(plugin(`ctx-${ctx.callId}`))
              if (ctx.callId === "c1") {
                yield* Deferred.succeed(hung, undefined)
                return yield* Effect.never.pipe(
                  Effect.onInterrupt(() => Ref.update(interrupted, (all) => [...all, ctx.callId]))
                )
              }
              const exit = yield* Effect.exit(handle.use((driver) => driver.cancel(CancelCause.parent, opts(mode))))
              yield* Deferred.succeed(cancelExit, exit)
              return "cancelled"
            })
        })
        const script = [
          calls(["c1", "t"], ["c2", "t"], ["c3", "t"]),
          ScriptedModel.text("never")
        ]
        yield* run(
          script,
          { tools: [t], maxParallelToolCalls: 2 },
          drivenThrough(handle, function*(driver) {
            const live = yield* recordLiveOf(driver)
            yield* driver.followup(A)
            yield* driver.whenIdle
            expect(yield* Deferred.isDone(hung)).toBe(true)
            expect(Exit.isSuccess(yield* Deferred.await(cancelExit))).toBe(true)
            expect(yield* Ref.get(ran)).toEqual(["c1", "c2"])
            expect(yield* Ref.get(interrupted)).toEqual(["c1"])
            expect(yield* shape).toEqual([
              ...STEP_A,
              ...toolResponse(3),
              "TC(c1)",
              "TC(c2)",
              "TR✗(c1)",
              "INS(ns,0,[ctx-c1])",
              ...ifBroad(mode, "CAN(ns,0,1)"),
              "TR✗(c2)",
              broad(mode) ? "INS(ns,0,[ctx-c2])" : "INS(ns,1,[ctx-c2])",
              ...ifBroad(mode, "CAN(ns,0,1)"),
              "TC(c3)",
              "TR⊘(c3)",
              "SE(1,1)",
              "TE(1,aborted(parent))"
            ])
            expect(turnEndsOf(yield* eventsOf)).toEqual([{ kind: "aborted", reason: CancelCause.parent }])
            expect(yield* pending).toEqual({ nt: [], ns: broad(mode) ? [] : ["ctx-c1", "ctx-c2"] })
            yield* settle
            expect(yield* live.all).toEqual([
              "inserted(A)",
              "status(running)",
              "claimed(A,1)",
              ...(broad(mode)
                ? ["inserted(ctx-c1)", "discarded(ctx-c1)", "inserted(ctx-c2)", "discarded(ctx-c2)"]
                : ["inserted(ctx-c1)", "inserted(ctx-c2)"]),
              "status(idle)"
            ])
            expect((yield* (yield* ScriptedModel).requests).length).toBe(1)
            yield* idleAndChecked
          })
        )
      }))
  }
})

describe("abort classification and commit priority for bodies that end at once (SPEC 4.6)", () => {
  // SPEC 4.6 "Abort during tools": only "a body interrupted, or one that completes after the cause
  // was recorded, yields ABORTED". c1's body has returned "ok" before c2's body records the cause
  // (c2 checks, without suspending, that c1 ended), so TR(c1) is its success. (Before the change,
  // with forked bodies, this gave TR✗(c1).)
  it.scoped("a body that completed before a sibling recorded the cause keeps its result", () =>
    Effect.gen(function*() {
      const handle = yield* makeHandle
      const c1Done = yield* Deferred.make<void>()
      const t = Tool.make("t", {
        description: "c1 answers at once; c2 waits for c1 to end, then cancels",
        parameters: empty,
        mode: "parallel",
        execute: (_params, ctx) =>
          ctx.callId === "c1"
            ? Effect.as(Deferred.succeed(c1Done, undefined), "ok")
            : Effect.flatMap(Deferred.isDone(c1Done), (done) =>
              // Without a suspension when c1 already ended (it runs first); else after it ends.
              (done ? Effect.void : Deferred.await(c1Done)).pipe(
                Effect.zipRight(handle.use((driver) => driver.cancel(CancelCause.user, { keepInbox: true }))),
                Effect.as("cancelled")
              ))
      })
      const script = [calls(["c1", "t"], ["c2", "t"]), ScriptedModel.text("never")]
      yield* run(
        script,
        { tools: [t] },
        drivenThrough(handle, function*(driver) {
          yield* driver.followup(A)
          yield* driver.whenIdle
          expect(results(yield* eventsOf)).toEqual([
            { id: "c1", text: "ok", isError: false, error: undefined },
            {
              id: "c2",
              text: "Error: tool call aborted",
              isError: true,
              error: { name: "AbortError", code: "ABORTED" }
            }
          ])
          expect(turnEndsOf(yield* eventsOf)).toEqual([{ kind: "aborted", reason: CancelCause.user }])
          yield* idleAndChecked
        })
      )
    }))

  // Regression: SPEC 4.6 "Abort during tools" / 7.5: ABORTED marks a call whose body was
  // interrupted or ended after the cause. c1's body returned at once, during its own START; the
  // cancel lands while c2 is still in its ToolPre hook, so TR(c1) keeps "ok" and c2 is TR⊘. The
  // scheduler used to read the cause when it dequeued c1's exit (after the cancel); it now records
  // whether a cause was recorded when the body ended.
  it.scoped("a body that ended at once keeps its result when the cancel lands during the next call's ToolPre", () =>
    Effect.gen(function*() {
      const script = [calls(["c1", "t"], ["c2", "t"]), ScriptedModel.text("never")]
      yield* run(
        script,
        { tools: [answersAtOnce] },
        Effect.gen(function*() {
          const driver = yield* Driver
          const hooks = yield* Hooks
          const inPre = yield* Deferred.make<void>()
          yield* hooks.onToolPre((info, next) =>
            info.callId === "c2"
              ? Effect.zipRight(Deferred.succeed(inPre, undefined), Effect.zipRight(Effect.never, next()))
              : next()
          )
          yield* driver.followup(A)
          yield* Deferred.await(inPre)
          yield* driver.cancel(CancelCause.user)
          yield* driver.whenIdle
          expect(results(yield* eventsOf)).toEqual([
            { id: "c1", text: "ok-c1", isError: false, error: undefined },
            {
              id: "c2",
              text: "Error: tool call aborted before dispatch",
              isError: true,
              error: { name: "AbortError", code: "ABORTED_BEFORE_DISPATCH" }
            }
          ])
          expect(turnEndsOf(yield* eventsOf)).toEqual([{ kind: "aborted", reason: CancelCause.user }])
          yield* idleAndChecked
        })
      )
    }))

  // SPEC 4.6 START step 6 forks the body: the log is the one of forked bodies, which run once the
  // starts of the group have suspended, even though a body now runs at once. So synchronous parallel
  // bodies give every TC before the results (TC(c1) TC(c2) TC(c3) TR(c1) TR(c2) TR(c3)), as they did
  // when bodies were forked children.
  agentTest(
    "synchronous parallel bodies are logged as forked bodies: every start before the results",
    scenario([
      calls(["c1", "t"], ["c2", "t"], ["c3", "t"]),
      ScriptedModel.text("done")
    ], { tools: [answersAtOnce] }),
    function*({ driver }) {
      yield* driver.followup(A)
      yield* driver.whenIdle
      expect(yield* toolShape).toEqual(["TC(c1)", "TC(c2)", "TC(c3)", "TR(c1)", "TR(c2)", "TR(c3)"])
      yield* idleAndChecked
    }
  )
})

describe("outcomes, order and the pool with bodies that end at once (SPEC 4.6)", () => {
  it.scoped("failures and defects, at once or after a suspension, become ordered results; nothing is published", () =>
    Effect.gen(function*() {
      const f = Tool.make("f", {
        description: "fails in many ways",
        parameters: Schema.Struct({ kind: Schema.String }),
        mode: "parallel",
        execute: ({ kind }): Effect.Effect<string, unknown> => {
          switch (kind) {
            case "sync-fail":
              return Effect.fail({ _tag: "Nope", message: "no way", code: "NOPE" })
            case "sync-die":
              return Effect.die(new Error("sync boom"))
            case "throw":
              throw new Error("thrown")
            case "async-fail":
              return Effect.zipRight(settle, Effect.fail({ message: "late failure" }))
            case "async-die":
              return Effect.zipRight(settle, Effect.dieMessage("late boom"))
            default:
              return Effect.succeed("fine")
          }
        }
      })
      const kinds = ["sync-fail", "sync-die", "throw", "async-fail", "async-die", "ok"]
      const script = [
        ScriptedModel.response({ toolCalls: kinds.map((kind, i) => call(`c${i + 1}`, "f", { kind })) }),
        ScriptedModel.text("done")
      ]
      yield* run(
        script,
        { tools: [f] },
        Effect.gen(function*() {
          const driver = yield* Driver
          const live = yield* recordLiveOf(driver)
          yield* driver.followup(A)
          yield* driver.whenIdle
          const defect = { name: "ToolDefect", code: "TOOL_DEFECT" }
          expect(results(yield* eventsOf)).toEqual([
            { id: "c1", text: "Error: no way", isError: true, error: { name: "Nope", code: "NOPE" } },
            { id: "c2", text: "Error: sync boom", isError: true, error: defect },
            { id: "c3", text: "Error: thrown", isError: true, error: defect },
            { id: "c4", text: "Error: late failure", isError: true, error: { name: "Error", code: "TOOL_ERROR" } },
            { id: "c5", text: "Error: late boom", isError: true, error: defect },
            { id: "c6", text: "fine", isError: false, error: undefined }
          ])
          // Every call started before the step ended; results in model order.
          const tools = yield* toolShape
          expect(tools.filter((e) => e.startsWith("TC("))).toEqual([
            "TC(c1)",
            "TC(c2)",
            "TC(c3)",
            "TC(c4)",
            "TC(c5)",
            "TC(c6)"
          ])
          expect(tools.filter((e) => e.startsWith("TR"))).toEqual([
            "TR?(c1)",
            "TR?(c2)",
            "TR?(c3)",
            "TR?(c4)",
            "TR?(c5)",
            "TR(c6)"
          ])
          expect(turnEndsOf(yield* eventsOf)).toEqual([{ kind: "completed" }])
          const requests = yield* (yield* ScriptedModel).requests
          expect(requests.length).toBe(2)
          expect(
            requests[1]!.messages.slice(-6).map((m) =>
              m.content[0]!.type === "tool-result" ? m.content[0]!.toolCallId : "?"
            )
          )
            .toEqual(["c1", "c2", "c3", "c4", "c5", "c6"])
          yield* settle
          expect(yield* live.all).toEqual(["inserted(A)", "status(running)", "claimed(A,1)", "status(idle)"])
          yield* idleAndChecked
        })
      )
    }))

  it.scoped("cap 2 with bodies that end at once and gated ones: at most 2 in flight, results and contexts in model order", () =>
    Effect.gen(function*() {
      const gates = new Map<string, Deferred.Deferred<void>>()
      for (const id of ["c1", "c4"]) gates.set(id, yield* Deferred.make<void>())
      const inFlight = yield* Ref.make(0)
      const peak = yield* Ref.make(0)
      const started = yield* Ref.make<ReadonlyArray<string>>([])
      const t = Tool.make("t", {
        description: "c1 and c4 wait for a gate; c2 and c3 answer at once with contexts",
        parameters: empty,
        mode: "parallel",
        execute: (_params, ctx: ToolContext): Effect.Effect<ToolOutput | string> =>
          Effect.gen(function*() {
            const now = yield* Ref.updateAndGet(inFlight, (n) => n + 1)
            yield* Ref.update(peak, (p) => Math.max(p, now))
            yield* Ref.update(started, (all) => [...all, ctx.callId])
            const gate = gates.get(ctx.callId)
            if (gate !== undefined) {
              yield* ctx.deferContext(plugin(`ctx-${ctx.callId}`))
              yield* Deferred.await(gate)
              return `gated-${ctx.callId}`
            }
            if (ctx.callId === "c3") yield* ctx.deferContext(plugin("ctx-c3"))
            return { content: `at-once-${ctx.callId}`, additionalContexts: [plugin(`ctx-${ctx.callId}b`)] }
          }).pipe(Effect.ensuring(Ref.update(inFlight, (n) => n - 1)))
      })
      const script = [
        ScriptedModel.response({ toolCalls: ["c1", "c2", "c3", "c4"].map((id) => call(id, "t")) }),
        ScriptedModel.text("done")
      ]
      yield* run(
        script,
        { tools: [t], maxParallelToolCalls: 2 },
        Effect.gen(function*() {
          const driver = yield* Driver
          yield* driver.followup(A)
          yield* waitUntil(Effect.map(Ref.get(started), (s) => s.length === 4), "four bodies")
          yield* settle
          // c1 holds the first commit: nothing is committed yet, c4 waits with c1 in the pool.
          expect(yield* toolShape).toEqual(["TC(c1)", "TC(c2)", "TC(c3)", "TC(c4)"])
          expect(yield* Ref.get(started)).toEqual(["c1", "c2", "c3", "c4"])
          expect(yield* Ref.get(inFlight)).toBe(2)
          yield* Deferred.succeed(gates.get("c4")!, undefined)
          yield* settle
          expect(yield* toolShape).toEqual(["TC(c1)", "TC(c2)", "TC(c3)", "TC(c4)"])
          yield* Deferred.succeed(gates.get("c1")!, undefined)
          yield* driver.whenIdle
          expect(yield* Ref.get(peak)).toBe(2)
          expect(yield* shape).toEqual([
            ...STEP_A,
            ...toolResponse(4),
            "TC(c1)",
            "TC(c2)",
            "TC(c3)",
            "TC(c4)",
            "TR(c1)",
            "INS(ns,0,[ctx-c1])",
            "TR(c2)",
            "INS(ns,1,[ctx-c2b])",
            "TR(c3)",
            "INS(ns,2,[ctx-c3,ctx-c3b])",
            "TR(c4)",
            "INS(ns,4,[ctx-c4])",
            "SE(1,1)",
            "CLM(ns,0,5)",
            "SS(1,2)",
            "UM(ctx-c1)",
            "UM(ctx-c2b)",
            "UM(ctx-c3)",
            "UM(ctx-c3b)",
            "UM(ctx-c4)",
            ...TEXT,
            "SE(1,2)",
            "TE(1,completed)"
          ])
          expect(results(yield* eventsOf).map((r) => r.text)).toEqual([
            "gated-c1",
            "at-once-c2",
            "at-once-c3",
            "gated-c4"
          ])
          yield* idleAndChecked
        })
      )
    }))

  agentTest(
    "D13: a body starts only once its tool/call is durable, even with a store that holds appends",
    SessionStore.layerMemory,
    function*(_) {
      const store = yield* SessionStore
      const control = yield* MemoryStoreControl
      const storedAtStart = yield* Deferred.make<ReadonlyArray<string>>()
      const t = Tool.make("t", {
        description: "records what the store held when it started",
        parameters: empty,
        execute: () =>
          Effect.gen(function*() {
            const loaded = yield* Effect.orDie(store.load(S))
            yield* Deferred.succeed(storedAtStart, loaded.events.map(notation))
            return "ok"
          })
      })
      const script = [
        ScriptedModel.response({ toolCalls: [call("c1", "t")], awaitBefore: control.hold }),
        ScriptedModel.text("done")
      ]
      yield* Effect.gen(function*() {
        const driver = yield* Driver
        yield* driver.followup(A)
        yield* waitUntil(Effect.map(shape, (s) => s.includes("TC(c1)")), "TC(c1) in memory")
        yield* settle
        expect(yield* Deferred.isDone(storedAtStart)).toBe(false)
        yield* control.release
        const stored = yield* Deferred.await(storedAtStart)
        expect(stored.at(-1)).toBe("TC(c1)")
        yield* driver.whenIdle
        yield* idleAndChecked
      }).pipe(Effect.provide(agentOn(script, [t])))
    }
  )
})

describe("cancel while bodies run (SPEC 4.6, 7.2 K8, 7.5)", () => {
  it.scoped("a body asleep on the clock is interrupted by a cancel without the clock moving", () =>
    Effect.gen(function*() {
      const asleep = yield* Deferred.make<void>()
      const interrupted = yield* Ref.make(false)
      const t = Tool.make("t", {
        description: "sleeps an hour",
        parameters: empty,
        execute: () =>
          Effect.zipRight(Deferred.succeed(asleep, undefined), Effect.as(Effect.sleep("1 hour"), "woke")).pipe(
            Effect.onInterrupt(() => Ref.set(interrupted, true))
          )
      })
      const script = [calls(["c1", "t"]), ScriptedModel.text("never")]
      yield* run(
        script,
        { tools: [t] },
        Effect.gen(function*() {
          const driver = yield* Driver
          yield* driver.followup(A)
          yield* Deferred.await(asleep)
          // The body's sleep is on the test clock (the environment's Clock service).
          yield* TestClock.adjust("59 minutes")
          yield* settle
          expect(yield* driver.status).toBe("running")
          expect(yield* toolShape).toEqual(["TC(c1)"])
          yield* driver.cancel(CancelCause.user)
          yield* driver.whenIdle
          expect(yield* Ref.get(interrupted)).toBe(true)
          expect(yield* shape).toEqual([
            ...STEP_A,
            ...toolResponse(1),
            "TC(c1)",
            "TR✗(c1)",
            "SE(1,1)",
            "TE(1,aborted(user))"
          ])
          yield* idleAndChecked
        })
      )
    }))

  for (const mode of modes) {
    it.scoped(`an uninterruptible body delays convergence; a sibling that ended first keeps its result; its late steer is latched and replayed [${mode}]`, () =>
      Effect.gen(function*() {
        const handle = yield* makeHandle
        const H = yield* Deferred.make<void>()
        const masked = yield* Deferred.make<void>()
        const t = Tool.make("t", {
          description: "c1 answers at once; c2 masks interruption until H, then steers",
          parameters: empty,
          mode: "parallel",
          execute: (_params, ctx) =>
            ctx.callId === "c1"
              ? Effect.succeed({ content: "first", additionalContexts: [plugin("ctx-c1")] })
              : Effect.uninterruptible(
                Deferred.succeed(masked, undefined).pipe(
                  Effect.zipRight(Deferred.await(H)),
                  Effect.zipRight(handle.use((driver) => driver.steer(user("S")))),
                  Effect.as("late")
                )
              )
        })
        const x = Tool.make("x", {
          description: "exclusive barrier",
          parameters: empty,
          execute: () => Effect.succeed("x")
        })
        const script = [
          calls(["c1", "t"], ["c2", "t"], ["c3", "x"]),
          ScriptedModel.text("replay")
        ]
        yield* run(
          script,
          { tools: [t, x] },
          drivenThrough(handle, function*(driver) {
            const live = yield* recordLiveOf(driver)
            yield* driver.followup(A)
            yield* Deferred.await(masked)
            yield* waitUntil(Effect.map(shape, (s) => s.includes("INS(ns,0,[ctx-c1])")), "c1's commit")
            yield* driver.cancel(CancelCause.user, opts(mode))
            const idle = yield* Effect.fork(driver.whenIdle)
            yield* settle
            expect(yield* Fiber.poll(idle)).toEqual(Option.none())
            expect(yield* driver.status).toBe("running")
            expect((yield* shape).filter((e) => e.startsWith("TE("))).toEqual([])
            yield* Deferred.succeed(H, undefined)
            yield* Fiber.join(idle)
            // The steer came after the cause: re-routed to next-turn and latched; the replay runs it
            // (with the parked context under keepInbox).
            const log = placedBetween(yield* shape, "TC(c2)", "TC(c1)", "TR✗(c2)")
            expect(log).toEqual([
              ...STEP_A,
              ...toolResponse(3),
              "TC(c1)",
              "TR(c1)",
              "INS(ns,0,[ctx-c1])",
              ...ifBroad(mode, "CAN(ns,0,1)"),
              "INS(nt,0,[S])",
              "TR✗(c2)",
              "TC(c3)",
              "TR⊘(c3)",
              "SE(1,1)",
              "TE(1,aborted(user))",
              "TS(2)",
              ...(broad(mode) ? [] : ["CLM(ns,0,1)"]),
              "CLM(nt,0,1)",
              "SS(2,1)",
              ...(broad(mode) ? [] : ["UM(ctx-c1)"]),
              "UM(S)",
              ...TEXT,
              "SE(2,1)",
              "TE(2,completed)"
            ])
            expect(results(yield* eventsOf).slice(0, 2).map((r) => r.error?.code ?? r.text)).toEqual([
              "first",
              "ABORTED"
            ])
            yield* settle
            expect(yield* live.all).toEqual([
              "inserted(A)",
              "status(running)",
              "claimed(A,1)",
              "inserted(ctx-c1)",
              ...ifBroad(mode, "discarded(ctx-c1)"),
              "inserted(S)",
              ...(broad(mode) ? [] : ["claimed(ctx-c1,2)"]),
              "claimed(S,2)",
              "status(idle)"
            ])
            yield* idleAndChecked
          })
        )
      }))
  }
})

describe("disposal while bodies run (SPEC 3.7, D9)", () => {
  agentTest(
    "a hanging body is interrupted and awaited; the log ends TR✗ SE TE(aborted(disposed)) with no cancellation splice",
    SessionStore.layerMemory,
    function*(_) {
      const store = yield* SessionStore
      const hung = yield* Deferred.make<void>()
      const interrupted = yield* Ref.make(false)
      const t = Tool.make("t", {
        description: "c1 hangs, c2 answers at once with a context",
        parameters: empty,
        mode: "parallel",
        execute: (_params, ctx: ToolContext): Effect.Effect<ToolOutput | string> =>
          ctx.callId === "c1"
            ? ctx.deferContext(plugin("ctx-c1")).pipe(
              Effect.zipRight(Deferred.succeed(hung, undefined)),
              Effect.zipRight(Effect.never),
              Effect.onInterrupt(() => Ref.set(interrupted, true))
            )
            : Effect.succeed({ content: "at once", additionalContexts: [plugin("ctx-c2")] })
      })
      const x = Tool.make("x", { description: "exclusive", parameters: empty, execute: () => Effect.succeed("x") })
      const script = [calls(["c1", "t"], ["c2", "t"], ["c3", "x"])]
      const agentScope = yield* EffectScope.make()
      const context = yield* Layer.buildWithScope(agentOn(script, [t, x]), agentScope)
      const driver = Context.get(context, Driver)
      const live = yield* recordLiveOf(driver)
      yield* driver.followup(A)
      yield* Deferred.await(hung)
      yield* waitUntil(
        Effect.map(Context.get(context, SessionLog).events, (all) => all.some((e) => notation(e) === "TC(c2)")),
        "TC(c2)"
      )
      yield* settle
      yield* driver.inject(plugin("X"))
      yield* EffectScope.close(agentScope, Exit.void)
      expect(yield* Ref.get(interrupted)).toBe(true)
      const stored = yield* store.load(S)
      expect(stored.events.map(notation)).toEqual([
        ...STEP_A,
        ...toolResponse(3),
        "TC(c1)",
        "TC(c2)",
        "INS(ns,0,[X])",
        "TR✗(c1)",
        "INS(ns,1,[ctx-c1])",
        "TR(c2)",
        "INS(ns,2,[ctx-c2])",
        "TC(c3)",
        "TR⊘(c3)",
        "SE(1,1)",
        "TE(1,aborted(disposed))"
      ])
      expect(checkLog(stored.events, { closed: true })).toEqual([])
      expect(yield* live.all).toEqual([
        "inserted(A)",
        "status(running)",
        "claimed(A,1)",
        "inserted(X)",
        "inserted(ctx-c1)",
        "inserted(ctx-c2)",
        "status(idle)"
      ])
    }
  )

  agentTest(
    "disposal waits for a body that masks interruption, then the turn ends aborted(disposed)",
    SessionStore.layerMemory,
    function*(_) {
      const store = yield* SessionStore
      const H = yield* Deferred.make<void>()
      const masked = yield* Deferred.make<void>()
      const t = Tool.make("t", {
        description: "masks interruption until H",
        parameters: empty,
        execute: () =>
          Effect.uninterruptible(
            Effect.zipRight(Deferred.succeed(masked, undefined), Effect.as(Deferred.await(H), "late"))
          )
      })
      const script = [calls(["c1", "t"])]
      const agentScope = yield* EffectScope.make()
      const context = yield* Layer.buildWithScope(agentOn(script, [t]), agentScope)
      const driver = Context.get(context, Driver)
      yield* driver.followup(A)
      yield* Deferred.await(masked)
      const closing = yield* Effect.fork(EffectScope.close(agentScope, Exit.void))
      yield* settle
      expect(yield* Fiber.poll(closing)).toEqual(Option.none())
      expect((yield* Context.get(context, SessionLog).events).map(notation).filter((e) => e.startsWith("TE("))).toEqual(
        []
      )
      yield* Deferred.succeed(H, undefined)
      yield* Fiber.join(closing)
      const stored = yield* store.load(S)
      expect(stored.events.map(notation)).toEqual([
        ...STEP_A,
        ...toolResponse(1),
        "TC(c1)",
        "TR✗(c1)",
        "SE(1,1)",
        "TE(1,aborted(disposed))"
      ])
      expect(turnEndsOf(stored.events)).toEqual([{ kind: "aborted", reason: { kind: "disposed" } }])
    }
  )

  agentTest(
    "a poisoned session with a hanging body: whenIdle resolves, disposal completes and the body has been interrupted",
    SessionStore.layerMemory,
    function*({ control }) {
      const { hung, interrupted, tool: t } = yield* hangingTool
      const agentScope = yield* EffectScope.make()
      const context = yield* Layer.buildWithScope(agentOn([calls(["c1", "t"])], [t]), agentScope)
      const driver = Context.get(context, Driver)
      yield* driver.followup(A)
      yield* Deferred.await(hung)
      yield* control.failAppends(3)
      const refused = yield* Effect.flip(driver.inject(plugin("X")))
      expect(refused).toBeInstanceOf(PersistenceError)
      yield* driver.whenIdle
      expect(yield* driver.status).toBe("idle")
      yield* EffectScope.close(agentScope, Exit.void)
      expect(yield* Ref.get(interrupted)).toBe(true)
    }
  )

  // Regression: SPEC 6.3: "the poison transaction sets the phase Idle ... the activity is
  // interrupted and writes nothing more"; a tool body is a fiber of the activity (3.5). The hanging
  // body is interrupted once the poison commits; the scheduler used to keep waiting for it until
  // disposal interrupted the loop's fiber.
  agentTest(
    "a poisoned session interrupts a hanging body without waiting for disposal",
    SessionStore.layerMemory,
    function*({ control }) {
      const { hung, interrupted, tool: t } = yield* hangingTool
      yield* Effect.gen(function*() {
        const driver = yield* Driver
        yield* driver.followup(A)
        yield* Deferred.await(hung)
        yield* control.failAppends(3)
        expect(yield* Effect.flip(driver.inject(plugin("X")))).toBeInstanceOf(PersistenceError)
        yield* driver.whenIdle
        yield* settle
        expect(yield* Ref.get(interrupted)).toBe(true)
      }).pipe(Effect.provide(agentOn([calls(["c1", "t"])], [t])))
    }
  )
})

describe("what a body sees (fiber refs, services, span)", () => {
  const Label = FiberRef.unsafeMake<string>("unset")
  class Greeting extends Context.Tag("test/ToolStart/Greeting")<Greeting, string>() {}

  it.scoped("a body sees the agent's fiber refs, log annotations, span and services; its own fiber-ref writes stay in its fiber", () =>
    Effect.gen(function*() {
      const seen = yield* Ref.make<ReadonlyArray<Record<string, unknown>>>([])
      const t = Tool.make("t", {
        description: "reports its environment, then changes a fiber ref",
        parameters: empty,
        execute: (_params, ctx) =>
          Effect.gen(function*() {
            const label = yield* FiberRef.get(Label)
            const greeting = yield* Effect.serviceOption(Greeting)
            const span = yield* Effect.option(Effect.currentSpan)
            const annotations = yield* FiberRef.get(FiberRef.currentLogAnnotations)
            yield* Ref.update(seen, (all) => [...all, {
              call: ctx.callId,
              label,
              greeting: Option.getOrUndefined(greeting),
              span: Option.getOrUndefined(Option.map(span, (s) => s.name)),
              annotation: Option.getOrUndefined(HashMap.get(annotations, "agent"))
            }])
            yield* FiberRef.set(Label, `set-by-${ctx.callId}`)
            return "ok"
          })
      })
      const script = [calls(["c1", "t"], ["c2", "t"]), ScriptedModel.text("done")]
      yield* run(
        script,
        { tools: [t] },
        Effect.gen(function*() {
          const driver = yield* Driver
          // The caller's own fiber refs never reach the loop.
          yield* Effect.locally(driver.followup(A), Label, "caller")
          yield* driver.whenIdle
          const expected = { label: "outer", greeting: "hello", span: "agent-env", annotation: "a1" }
          expect(yield* Ref.get(seen)).toEqual([{ call: "c1", ...expected }, { call: "c2", ...expected }])
          yield* idleAndChecked
        })
      ).pipe(
        Effect.provideService(Greeting, "hello"),
        Effect.locally(Label, "outer"),
        Effect.annotateLogs("agent", "a1"),
        Effect.withSpan("agent-env")
      )
    }))
})

describe("TX-STEP and step/end without a transaction (SPEC 4.2, 4.3, 4.4)", () => {
  agentTest(
    "a pre-step addition that is pending in the inbox (injected during the pre-step) is a duplicate: no step",
    scenario([ScriptedModel.text("never")]),
    function*({ driver, preStep, inbox }) {
      const X = plugin("X")
      yield* preStep.register((input, next) =>
        Effect.gen(function*() {
          if (input.turn === 1) yield* Effect.orDie(driver.inject(X))
          const decision = yield* next()
          return decision._tag === "Enter" && input.turn === 1
            ? PreStepDecision.enter([...decision.messages, X])
            : decision
        })
      )
      const live = yield* recordLiveOf(driver)
      yield* driver.followup(A)
      yield* driver.whenIdle
      expect(yield* shape).toEqual([...OPEN_A, "INS(ns,0,[X])", "TE(1,error(DUPLICATE_MESSAGE))"])
      const [reason] = turnEndsOf(yield* eventsOf)
      expect(reason).toMatchObject({ kind: "error", error: { code: "DUPLICATE_MESSAGE" } })
      expect(JSON.stringify(reason)).toContain("pending")
      expect(yield* inbox.idState(X.id)).toEqual(Option.some("pending"))
      expect((yield* (yield* ScriptedModel).requests).length).toBe(0)
      yield* settle
      expect(yield* live.all).toEqual([
        "inserted(A)",
        "status(running)",
        "claimed(A,1)",
        "inserted(X)",
        "error",
        "status(idle)"
      ])
      yield* idleAndChecked
    }
  )

  agentTest(
    "pre-step additions: a claimed id may repeat once, a fresh id enters; an entered id later or one id twice is a duplicate, a reserved id invalid",
    scenario([ScriptedModel.text("a"), ScriptedModel.text("never")]),
    function*({ driver, preStep, inbox }) {
      const N = plugin("N")
      const M = plugin("M")
      // A valid message but for its id, which is reserved for repair results (SPEC 3.9).
      const reserved = { ...plugin("Z"), id: "interrupted-tool-result-z" } as UserMessage
      yield* preStep.register((input, next) =>
        Effect.map(next(), (decision) => {
          if (decision._tag !== "Enter") return decision
          if (input.turn === 1) return PreStepDecision.enter([...decision.messages, N])
          if (input.turn === 2) return PreStepDecision.enter([...decision.messages, N])
          if (input.turn === 3) return PreStepDecision.enter([...decision.messages, M, M])
          return PreStepDecision.enter([...decision.messages, reserved])
        })
      )
      // Four turns, each run to idle before the next.
      yield* Effect.forEach(
        [A, user("B"), user("C"), user("D")],
        (m) => Effect.zipRight(driver.followup(m), driver.whenIdle),
        { discard: true }
      )
      expect(yield* shape).toEqual([
        ...OPEN_A,
        "SS(1,1)",
        "UM(A)",
        "UM(N)",
        "RH(initial)",
        ...TEXT,
        "SE(1,1)",
        "TE(1,completed)",
        "INS(nt,0,[B])",
        "TS(2)",
        "CLM(nt,0,1)",
        "TE(2,error(DUPLICATE_MESSAGE))",
        "INS(nt,0,[C])",
        "TS(3)",
        "CLM(nt,0,1)",
        "TE(3,error(DUPLICATE_MESSAGE))",
        "INS(nt,0,[D])",
        "TS(4)",
        "CLM(nt,0,1)",
        "TE(4,error(INVALID_MESSAGE))"
      ])
      const reasons = turnEndsOf(yield* eventsOf).map((r) => JSON.stringify(r))
      expect(reasons[1]).toContain("entered")
      expect(reasons[2]).toContain("pending")
      expect(yield* inbox.idState(N.id)).toEqual(Option.some("entered"))
      // The rejected step made M known to nobody.
      expect(yield* inbox.idState(M.id)).toEqual(Option.none())
      yield* idleAndChecked
    }
  )

  agentTest(
    "K3a: a cause recorded by the pre-step itself: no step/start, the additions stay unknown",
    scenario([ScriptedModel.text("never")]),
    function*({ driver, preStep, inbox }) {
      const N = plugin("N")
      yield* preStep.register((_input, next) =>
        Effect.uninterruptible(
          Effect.orDie(driver.cancel(CancelCause.hook("pre"), { keepInbox: true })).pipe(
            Effect.zipRight(next()),
            Effect.map((decision) =>
              decision._tag === "Enter" ? PreStepDecision.enter([...decision.messages, N]) : decision
            )
          )
        )
      )
      yield* driver.followup(A)
      yield* driver.whenIdle
      expect(yield* shape).toEqual([...OPEN_A, "TE(1,aborted(hook))"])
      expect(yield* inbox.idState(N.id)).toEqual(Option.none())
      // N is fresh: the inject is accepted.
      yield* driver.inject(N)
      expect(yield* pending).toEqual({ nt: [], ns: ["N"] })
      expect((yield* (yield* ScriptedModel).requests).length).toBe(0)
      yield* idleAndChecked
    }
  )

  it.scoped("a steer from a body after a suspension is claimed with step/end; one inserted during the next step waits for its boundary", () =>
    Effect.gen(function*() {
      const handle = yield* makeHandle
      const G = yield* Deferred.make<void>()
      const t = Tool.make("t", {
        description: "steers after a suspension",
        parameters: empty,
        execute: () => Effect.zipRight(settle, Effect.as(handle.use((driver) => driver.steer(user("S1"))), "steered"))
      })
      const script = [
        calls(["c1", "t"]),
        ScriptedModel.text("two", { awaitBefore: Deferred.await(G) }),
        ScriptedModel.text("three")
      ]
      yield* run(
        script,
        { tools: [t] },
        drivenThrough(handle, function*(driver) {
          yield* driver.followup(A)
          yield* waitUntil(Effect.map(shape, (s) => s.includes("SS(1,2)")), "step 2")
          yield* driver.steer(user("S2"))
          yield* Deferred.succeed(G, undefined)
          yield* driver.whenIdle
          expect(yield* shape).toEqual([
            ...STEP_A,
            ...toolResponse(1),
            "TC(c1)",
            "INS(ns,0,[S1])",
            "TR(c1)",
            "SE(1,1)",
            "CLM(ns,0,1)",
            "SS(1,2)",
            "UM(S1)",
            "INS(ns,0,[S2])",
            ...TEXT,
            "SE(1,2)",
            "CLM(ns,0,1)",
            "SS(1,3)",
            "UM(S2)",
            ...TEXT,
            "SE(1,3)",
            "TE(1,completed)"
          ])
          yield* idleAndChecked
        })
      )
    }))
})
