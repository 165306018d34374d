/**
 * Acceptance audit of SPEC 2.7 (splice normalisation), 3.9 (known ids across lifecycles), 6.2 (group
 * commit), 3.4 D4, 3.7 (stream ends), 8.7 (hooks), written against the package root only.
 */
import { describe, expect, it } from "@effect/vitest"
import { Context, Effect, Exit, Fiber, Layer, Option, Schema, Scope, Stream } from "effect"
import type { UserMessage } from "../../src/index.js"
import {
  CancelCause,
  Driver,
  DuplicateMessage,
  Hooks,
  Inbox,
  MemoryStoreControl,
  PersistenceError,
  PreStep,
  PreStepDecision,
  RequestErrorAction,
  ScriptedModel,
  SessionLog,
  SessionStore,
  Tool,
  Tools
} from "../../src/index.js"
import { agentOver, dataOfType, liveNotation, recordLive, requests, scenario, settle, shape, until, untilEvent, user } from "./AuditHarness.js"

const empty = Schema.Struct({})
const ids = (ms: ReadonlyArray<UserMessage>) => ms.map((m) => m.id)

describe("2.7 splice normalisation", () => {
  it.scoped("2.7: truncation, negative and infinite coordinates, clamping; live discarded then inserted", () =>
    Effect.gen(function*() {
      const inbox = yield* Inbox
      const live = yield* recordLive
      yield* inbox.splice("next-turn", 0, 0, [user("a"), user("b"), user("c")])
      yield* inbox.splice("next-turn", -Infinity, 0, [user("p")])
      yield* inbox.splice("next-turn", Infinity, 0, [user("z")])
      expect(ids(yield* inbox.nextTurn)).toEqual(["p", "a", "b", "c", "z"])
      yield* live
      expect(ids(yield* inbox.splice("next-turn", 1.7, 1.9, [user("n")]))).toEqual(["a"])
      expect((yield* live).map(liveNotation)).toEqual(["discarded(a)", "inserted(n)"])
      expect(ids(yield* inbox.splice("next-turn", -2, Infinity, []))).toEqual(["c", "z"])
      expect(ids(yield* inbox.splice("next-turn", -100, -5, [user("q")]))).toEqual([])
      expect(ids(yield* inbox.nextTurn)).toEqual(["q", "p", "n", "b"])
      expect(yield* shape).toEqual([
        "INS(nt,0,[a,b,c])", "INS(nt,0,[p])", "INS(nt,4,[z])", "REP(nt,1,[n])", "CAN(nt,3,2)", "INS(nt,0,[q])"
      ])
      const spliced = yield* dataOfType("agent/inbox/spliced")
      expect(spliced[3]).toEqual({ target: "next-turn", start: 1, removedCount: 1, inserted: [user("n")], outcome: "canceled" })
      expect("removedCount" in spliced[0]!).toBe(false)
    }).pipe(Effect.provide(scenario([]))))
})

describe("3.9 known ids", () => {
  it.scoped("3.9: assistant and tool-result ids are known; states survive a resume", () =>
    Effect.gen(function*() {
      const storeCtx = yield* Layer.build(SessionStore.layerMemory)
      const build = (script: Parameters<typeof agentOver>[0], resume: boolean) =>
        Effect.gen(function*() {
          const scope = yield* Scope.make()
          const ctx = yield* Layer.buildWithScope(
            agentOver(script, { resume, tools: [Tool.make("quick", { description: "", parameters: empty, execute: () => Effect.succeed("ok") })] })
              .pipe(Layer.provide(Layer.succeedContext(storeCtx))),
            scope
          )
          return { scope, driver: Context.get(ctx, Driver), inbox: Context.get(ctx, Inbox), log: Context.get(ctx, SessionLog), pre: Context.get(ctx, PreStep) }
        })
      const first = yield* build(
        [ScriptedModel.response({ toolCalls: [{ id: "c1", name: "quick", arguments: {} }] }), ScriptedModel.text("done")],
        false
      )
      yield* Scope.extend(first.pre.register((input, next) => input.turn === 2 ? Effect.succeed(PreStepDecision.reject()) : next()), first.scope)
      yield* first.driver.followup(user("A"))
      yield* first.driver.whenIdle
      yield* first.driver.followup(user("B"))
      yield* first.driver.whenIdle
      yield* first.driver.inject(user("C"))
      yield* first.inbox.remove("C" as UserMessage["id"])
      yield* first.driver.inject(user("D"))
      const es = yield* first.log.events
      const amId = (es.find((e) => e.type === "assistant/message")!.data as any).message.id as string
      const trId = (es.find((e) => e.type === "tool/result")!.data as any).message.id as string
      yield* Scope.close(first.scope, Exit.void)
      const second = yield* build([], true)
      const stateOf = (id: string) => Effect.map(Effect.flip(second.driver.followup(user(id))), (e) => [e._tag, (e as DuplicateMessage).state])
      expect(yield* stateOf("A")).toEqual(["DuplicateMessage", "entered"])
      expect(yield* stateOf("B")).toEqual(["DuplicateMessage", "claimed"])
      expect(yield* stateOf("C")).toEqual(["DuplicateMessage", "discarded"])
      expect(yield* stateOf("D")).toEqual(["DuplicateMessage", "pending"])
      expect(yield* stateOf(amId)).toEqual(["DuplicateMessage", "entered"])
      expect(yield* stateOf(trId)).toEqual(["DuplicateMessage", "entered"])
      expect(yield* second.inbox.idState(amId as UserMessage["id"])).toEqual(Option.some("entered"))
      yield* Scope.close(second.scope, Exit.void)
    }))
})

describe("6.2 group commit and 3.4 D4", () => {
  it.scoped("6.2: at most one append in flight; events appended meanwhile go into one next batch", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const control = yield* MemoryStoreControl
      const log = yield* SessionLog
      const before = yield* control.appendCalls
      yield* control.hold
      const f1 = yield* Effect.fork(driver.inject(user("C1")))
      yield* until(Effect.map(control.appendCalls, (n) => n === before + 1))
      const f2 = yield* Effect.fork(driver.inject(user("C2")))
      const f3 = yield* Effect.fork(driver.inject(user("C3")))
      yield* settle
      expect(yield* control.appendCalls).toBe(before + 1)
      yield* control.release
      yield* Fiber.join(f1)
      yield* Fiber.join(f2)
      yield* Fiber.join(f3)
      expect(yield* control.appendCalls).toBe(before + 2)
      expect(yield* log.durableSeq).toBe(2)
    }).pipe(Effect.provide(scenario([]))))

  it.scoped("6.2: batchSize pending events are written without a waiter or the window", () =>
    Effect.gen(function*() {
      const log = yield* SessionLog
      const control = yield* MemoryStoreControl
      const before = yield* control.appendCalls
      // The loop's events after the request checkpoint have no waiter: with batchSize 3 they are
      // written in batches of 3 although the Clock never reaches the 200 ms window.
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      yield* settle
      const total = (yield* log.events).length
      expect(yield* log.durableSeq).toBeGreaterThanOrEqual(total - 3)
      expect(yield* control.appendCalls).toBeGreaterThan(before + 2)
    }).pipe(Effect.provide(scenario([ScriptedModel.text("a", { deltas: ["1", "2", "3", "4", "5", "6"] })], { agent: { durability: { batchSize: 3 } } }))))

  it.scoped("3.4 D4: a broad cancel whose CAN write fails still aborts and fails PersistenceError", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const control = yield* MemoryStoreControl
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "assistant/chunk")
      yield* driver.followup(user("B"))
      yield* control.failAppends(3)
      expect(yield* Effect.flip(driver.cancel(CancelCause.user))).toBeInstanceOf(PersistenceError)
      yield* driver.whenIdle
      expect(yield* driver.status).toBe("idle")
      expect(yield* requests).toHaveLength(1)
    }).pipe(Effect.provide(scenario([ScriptedModel.hang({ text: "x" }), ScriptedModel.text("b")]))))
})

describe("3.7 disposal ends the streams", () => {
  it.scoped("3.7: SessionLog.stream and Driver.events end on disposal", () =>
    Effect.gen(function*() {
      const storeCtx = yield* Layer.build(SessionStore.layerMemory)
      const scope = yield* Scope.make()
      const ctx = yield* Layer.buildWithScope(agentOver([]).pipe(Layer.provide(Layer.succeedContext(storeCtx))), scope)
      const log = Context.get(ctx, SessionLog)
      const driver = Context.get(ctx, Driver)
      const logEnd = yield* Effect.fork(Stream.runDrain(log.stream()))
      const eventsEnd = yield* Effect.fork(Stream.runDrain(driver.events))
      yield* settle
      yield* Scope.close(scope, Exit.void)
      expect(Exit.isSuccess(yield* Fiber.await(logEnd))).toBe(true)
      expect(Exit.isSuccess(yield* Fiber.await(eventsEnd))).toBe(true)
    }))
})

describe("8.7 hooks", () => {
  const seenInfo: Array<unknown> = []
  const seenCtx: Array<unknown> = []
  const probe = Tool.make("probe", {
    description: "",
    parameters: Schema.Struct({ n: Schema.NumberFromString }),
    execute: ({ n }, ctx) => Effect.sync(() => (seenCtx.push({ sessionId: ctx.sessionId, turn: ctx.turn, step: ctx.step, callId: ctx.callId, n }), "ok"))
  })
  it.scoped("8.7: ToolPre sees decoded params and raw arguments; tool bodies get their context", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const hooks = yield* Hooks
      yield* hooks.onToolPre((input, next) => Effect.zipRight(Effect.sync(() => seenInfo.push(input)), next()))
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect(seenInfo).toEqual([{ sessionId: "s", turn: 1, step: 1, callId: "c1", name: "probe", arguments: "{\"n\":\"5\"}", params: { n: 5 } }])
      expect(seenCtx).toEqual([{ sessionId: "s", turn: 1, step: 1, callId: "c1", n: 5 }])
    }).pipe(Effect.provide(scenario(
      [ScriptedModel.response({ toolCalls: [{ id: "c1", name: "probe", arguments: { n: "5" } }] }), ScriptedModel.text("done")],
      { tools: [probe] }
    ))))

  it.scoped("8.7: a ToolPre listener calling next() twice is a hook failure (PRE_HOOK_FAILED)", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const hooks = yield* Hooks
      yield* hooks.onToolPre((_input, next) => Effect.zipRight(next(), next()))
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect((yield* dataOfType("tool/result"))[0]!.error).toEqual({ name: "ToolPreHookError", code: "PRE_HOOK_FAILED" })
    }).pipe(Effect.provide(scenario(
      [ScriptedModel.response({ toolCalls: [{ id: "c1", name: "quick", arguments: {} }] }), ScriptedModel.text("done")],
      { tools: [Tool.make("quick", { description: "", parameters: empty, execute: () => Effect.succeed("ok") })] }
    ))))

  it.scoped("8.7: a request-error listener's Fail ends the turn at once, without llm/retry", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const hooks = yield* Hooks
      yield* hooks.onRequestError(() => Effect.succeed(RequestErrorAction.fail))
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect((yield* shape).slice(-1)).toEqual(["TE(1,error(RATE_LIMIT))"])
      expect((yield* shape).filter((s) => s.startsWith("RT"))).toEqual([])
    }).pipe(Effect.provide(scenario([ScriptedModel.fail({ message: "slow", code: "RATE_LIMIT", status: 429 })]))))

  it.scoped("4.5 Q2 / 8.9: a tool registered between turns changes the header (RH(change)) and the request's tools", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const tools = yield* Tools
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      yield* tools.register(Tool.make("late", { description: "L", parameters: empty, execute: () => Effect.succeed("ok") }))
      yield* driver.followup(user("B"))
      yield* driver.whenIdle
      expect((yield* shape).filter((s) => s.startsWith("RH"))).toEqual(["RH(initial)", "RH(change)"])
      const rs = yield* requests
      expect(rs[0]!.tools).toEqual([])
      expect(rs[1]!.tools.map((t) => t.name)).toEqual(["late"])
      const headers = (yield* dataOfType("request/header")).map((d) => d.header)
      expect(headers[1]).toEqual({ provider: "p", model: "m", tools: rs[1]!.tools })
    }).pipe(Effect.provide(scenario([ScriptedModel.text("a"), ScriptedModel.text("b")]))))
})


