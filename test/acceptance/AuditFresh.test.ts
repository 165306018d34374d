/**
 * Fresh acceptance audit: edge cases of SPEC 3 (operations), 4.4-4.7 (waterfalls, retries, tools),
 * 5.1 (acceptance), 6 (persistence) and 8 (signatures), written against the package root only.
 */
import { describe, expect, it } from "@effect/vitest"
import { Cause, Context, Deferred, Duration, Effect, Exit, Fiber, Layer, Option, Ref, Schema, Scope, TestClock } from "effect"
import {
  AgentDisposed,
  CancelCause,
  Driver,
  DuplicateMessage,
  forkSession,
  Hooks,
  Inbox,
  InvalidEvent,
  InvalidSplice,
  MaintenanceAborted,
  MemoryStoreControl,
  PersistenceError,
  PreStep,
  PreStepDecision,
  PreStepRejected,
  RequestErrorAction,
  ScriptedModel,
  SessionId,
  SessionLog,
  SessionStore,
  Tool
} from "../../src/index.js"
import {
  agentOver,
  asId,
  closeOut,
  dataOfType,
  events,
  liveNotation,
  plugin,
  recordLive,
  requests,
  scenario,
  settle,
  shape,
  texts,
  until,
  untilEvent,
  user
} from "./AuditHarness.js"
import { gate, open } from "./AuditHarness.js"

const empty = Schema.Struct({})
const failureOf = <E>(exit: Exit.Exit<unknown, E>) =>
  Exit.isFailure(exit) ? Option.getOrUndefined(Cause.failureOption(exit.cause)) : undefined

/** Builds an agent over the given store context in a scope the test closes itself. */
const buildIn = (
  storeCtx: Context.Context<SessionStore | MemoryStoreControl>,
  script: Parameters<typeof agentOver>[0],
  options: Parameters<typeof agentOver>[1] = {}
) =>
  Effect.gen(function*() {
    const scope = yield* Scope.make()
    const ctx = yield* Layer.buildWithScope(agentOver(script, options).pipe(Layer.provide(Layer.succeedContext(storeCtx))), scope)
    return { scope, ctx, driver: Context.get(ctx, Driver), inbox: Context.get(ctx, Inbox), log: Context.get(ctx, SessionLog) }
  })

describe("3.8 inbox mutations", () => {
  it.scoped("3.8: replace with a new id writes REP, the old id becomes discarded, live discarded(old) then inserted(new)", () =>
    Effect.gen(function*() {
      const inbox = yield* Inbox
      const live = yield* recordLive
      yield* inbox.append("next-turn", user("A"))
      yield* inbox.append("next-turn", user("B"))
      expect(yield* inbox.replace(asId("B"), user("B2"))).toBe(true)
      expect(yield* shape).toEqual(["INS(nt,0,[A])", "INS(nt,1,[B])", "REP(nt,1,[B2])"])
      expect((yield* live).map(liveNotation)).toEqual(["inserted(A)", "inserted(B)", "discarded(B)", "inserted(B2)"])
      expect(yield* inbox.idState(asId("B"))).toEqual(Option.some("discarded"))
      expect(yield* inbox.idState(asId("B2"))).toEqual(Option.some("pending"))
      expect((yield* inbox.nextTurn).map((m) => m.id)).toEqual(["A", "B2"])
      // A same-id content rewrite keeps the id pending.
      expect(yield* inbox.replace(asId("A"), user("A", "rewritten"))).toBe(true)
      expect((yield* shape).at(-1)).toBe("REP(nt,0,[A])")
      expect(yield* inbox.idState(asId("A"))).toEqual(Option.some("pending"))
      expect((yield* inbox.nextTurn)[0]!.content).toEqual([{ type: "text", text: "rewritten" }])
      // A discarded id cannot come back.
      const dup = yield* Effect.flip(inbox.replace(asId("A"), user("B")))
      expect(dup).toBeInstanceOf(DuplicateMessage)
      expect(dup).toMatchObject({ id: "B", state: "discarded" })
    }).pipe(Effect.provide(scenario([]))))

  it.scoped("3.8: replace and remove of an id that is not pending return false and write nothing", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const inbox = yield* Inbox
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      const before = yield* events
      expect(yield* inbox.replace(asId("A"), user("Z"))).toBe(false)
      expect(yield* inbox.remove(asId("A"))).toBe(false)
      expect(yield* inbox.remove(asId("nobody"))).toBe(false)
      expect(yield* inbox.replace(asId("nobody"), user("Z"))).toBe(false)
      yield* inbox.clear
      expect(yield* events).toEqual(before)
      // Z was never accepted: it is still fresh.
      expect(yield* inbox.idState(asId("Z"))).toEqual(Option.none())
    }).pipe(Effect.provide(scenario([ScriptedModel.text("ok")]))))

  it.scoped("3.8/3.9: a splice may re-insert an id it removes (REP); inserting a pending id fails DuplicateMessage {state: pending}", () =>
    Effect.gen(function*() {
      const inbox = yield* Inbox
      yield* inbox.append("next-step", plugin("C"))
      yield* inbox.append("next-step", plugin("D"))
      const removed = yield* inbox.splice("next-step", 0, 1, [plugin("C", "edited")])
      expect(removed.map((m) => m.id)).toEqual(["C"])
      expect((yield* shape).at(-1)).toBe("REP(ns,0,[C])")
      const before = yield* events
      const dup = yield* Effect.flip(inbox.splice("next-step", 0, 0, [plugin("D")]))
      expect(dup).toBeInstanceOf(DuplicateMessage)
      expect(dup).toMatchObject({ id: "D", state: "pending" })
      // A pending id of the other list is not fresh either.
      const dup2 = yield* Effect.flip(inbox.append("next-turn", plugin("C")))
      expect(dup2).toMatchObject({ _tag: "DuplicateMessage", id: "C", state: "pending" })
      expect(yield* events).toEqual(before)
    }).pipe(Effect.provide(scenario([]))))

  it.scoped("3.10/3.8: clear and a broad cancel publish discarded for next-step items first, then next-turn", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const inbox = yield* Inbox
      yield* inbox.append("next-turn", user("A"))
      yield* inbox.append("next-step", plugin("C"))
      const live = yield* recordLive
      yield* inbox.clear
      expect((yield* live).map(liveNotation)).toEqual(["discarded(C)", "discarded(A)"])
      expect((yield* shape).slice(-2)).toEqual(["CAN(ns,0,1)", "CAN(nt,0,1)"])
      yield* inbox.append("next-turn", user("B"))
      yield* driver.inject(plugin("X"))
      yield* live
      yield* driver.cancel(CancelCause.user)
      expect((yield* live).map(liveNotation)).toEqual(["discarded(X)", "discarded(B)"])
      expect(yield* inbox.hasPending).toBe(false)
    }).pipe(Effect.provide(scenario([]))))

  // An invalid target makes the splice event invalid (5.1 A4): the operation fails with a typed error
  // (InvalidEvent; InvalidSplice for splice) and changes nothing.
  it.scoped("5.1/3.1: an insertion at a target that is not an InboxTarget fails with a typed error and writes nothing", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const inbox = yield* Inbox
      const bogus = "elsewhere" as unknown as "next-turn"
      const exits: Array<Exit.Exit<unknown, unknown>> = [
        yield* Effect.exit(inbox.append(bogus, user("A"))),
        yield* Effect.exit(driver.send(user("B"), bogus, false)),
        yield* Effect.exit(inbox.splice(bogus, 0, 0, [user("C")]))
      ]
      for (const exit of exits) {
        expect(Exit.isFailure(exit) && Cause.isFailType(exit.cause) ? "typed failure" : String(exit)).toBe("typed failure")
        const error = failureOf(exit)
        expect(error instanceof InvalidEvent || error instanceof InvalidSplice).toBe(true)
      }
      expect(yield* events).toEqual([])
    }).pipe(Effect.provide(scenario([]))))
})

describe("3.1/3.4-3.7 operations", () => {
  it.scoped("3.1: input-only failures (InvalidSplice, InvalidEvent) complete at once while storage is held", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const inbox = yield* Inbox
      const control = yield* MemoryStoreControl
      yield* control.hold
      const pending = yield* Effect.fork(driver.inject(plugin("C")))
      yield* settle
      expect(pending.unsafePoll()).toBeNull()
      const splice = yield* Effect.fork(inbox.splice("next-step", Number.NaN, 0, []))
      const invalid = yield* Effect.fork(driver.followup({ id: "", role: "user", content: [], source: { kind: "user" } } as any))
      yield* settle
      const s = splice.unsafePoll()
      const i = invalid.unsafePoll()
      expect(s !== null && failureOf(s)).toBeInstanceOf(InvalidSplice)
      expect(i !== null && failureOf(i)).toBeInstanceOf(InvalidEvent)
      yield* control.release
      yield* Fiber.join(pending)
    }).pipe(Effect.provide(scenario([]))))

  it.scoped("3.4/2.6: a hook cause (constructor or plain object) is recorded on turn/end as aborted(hook)", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "assistant/chunk")
      yield* driver.cancel(CancelCause.hook("too long"))
      yield* driver.whenIdle
      yield* driver.followup(user("B"))
      yield* untilEvent((e) => e.type === "turn/start" && (e.data as any).turn === 2)
      yield* driver.cancel({ kind: "hook", reason: "plain" })
      yield* driver.whenIdle
      const ends = yield* dataOfType("turn/end")
      expect(ends.map((d) => d.reason)).toEqual([
        { kind: "aborted", reason: { kind: "hook", reason: "too long" } },
        { kind: "aborted", reason: { kind: "hook", reason: "plain" } }
      ])
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario([ScriptedModel.hang({ text: "par" }), ScriptedModel.hang({})]))))

  it.scoped("3.4: cancel with a parent cause while idle and empty is a no-op; nothing is armed for later work", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.cancel(CancelCause.parent)
      yield* driver.cancel(CancelCause.parent, { keepInbox: true })
      expect(yield* events).toEqual([])
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect((yield* dataOfType("turn/end")).map((d) => d.reason)).toEqual([{ kind: "completed" }])
    }).pipe(Effect.provide(scenario([ScriptedModel.text("ok")]))))

  it.scoped("3.5/3.7: on a disposed agent whenIdle resolves, status is idle, mutating operations fail AgentDisposed, reads return the final state", () =>
    Effect.gen(function*() {
      const storeCtx = yield* Layer.build(SessionStore.layerMemory)
      const { driver, inbox, log, scope } = yield* buildIn(storeCtx, [ScriptedModel.text("ok")])
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      yield* inbox.append("next-turn", user("Q"))
      const final = yield* log.events
      yield* Scope.close(scope, Exit.void)
      yield* driver.whenIdle
      expect(yield* driver.status).toBe("idle")
      for (const op of [
        driver.followup(user("B")),
        driver.cancel(CancelCause.user),
        driver.runMaintenance(Effect.void),
        inbox.append("next-step", user("C")),
        inbox.remove(asId("Q")),
        inbox.clear,
        log.append({ type: "x/ext", data: {}, ignorable: true })
      ]) {
        expect(yield* Effect.flip(op as Effect.Effect<unknown, unknown>)).toBeInstanceOf(AgentDisposed)
      }
      expect(yield* log.events).toEqual(final)
      expect((yield* inbox.nextTurn).map((m) => m.id)).toEqual(["Q"])
    }))

  it.scoped("3.6: whenIdle waits for a maintenance task (phase not Idle) while status stays idle; the task's value is returned", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const g = gate()
      const task = yield* Effect.fork(driver.runMaintenance(Effect.as(Deferred.await(g), 42)))
      yield* settle
      expect(yield* driver.status).toBe("idle")
      const idle = yield* Effect.fork(driver.whenIdle)
      yield* settle
      expect(idle.unsafePoll()).toBeNull()
      yield* open(g)
      expect(yield* Fiber.join(task)).toBe(42)
      yield* Fiber.join(idle)
      expect(yield* events).toEqual([])
    }).pipe(Effect.provide(scenario([]))))

  it.scoped("3.6: a keepInbox cancel of a maintenance task that then fails gives MaintenanceAborted {cause}", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const g = gate()
      const task = yield* Effect.fork(Effect.flip(driver.runMaintenance(
        Effect.zipRight(Effect.uninterruptible(Deferred.await(g)), Effect.fail("own failure" as const))
      )))
      yield* settle
      yield* driver.cancel(CancelCause.hook("stop"), { keepInbox: true })
      yield* open(g)
      const error = yield* Fiber.join(task)
      expect(error).toBeInstanceOf(MaintenanceAborted)
      expect(error).toMatchObject({ cause: { kind: "hook", reason: "stop" } })
      expect(yield* driver.status).toBe("idle")
    }).pipe(Effect.provide(scenario([]))))

  it.scoped("3.4/3.6 (6.3): on a poisoned session cancel and runMaintenance fail PersistenceError and change nothing", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const control = yield* MemoryStoreControl
      yield* control.failAppends(3)
      expect(yield* Effect.flip(driver.inject(plugin("C")))).toBeInstanceOf(PersistenceError)
      const before = yield* events
      expect(yield* Effect.flip(driver.cancel(CancelCause.user))).toBeInstanceOf(PersistenceError)
      expect(yield* Effect.flip(driver.runMaintenance(Effect.void))).toBeInstanceOf(PersistenceError)
      expect(yield* Effect.flip((yield* SessionLog).flush)).toBeInstanceOf(PersistenceError)
      expect(yield* events).toEqual(before)
      yield* driver.whenIdle
    }).pipe(Effect.provide(scenario([]))))
})

describe("4.4 pre-step entry checks", () => {
  it.scoped("4.4: entering the same claimed message twice ends the turn error(DUPLICATE_MESSAGE) with no step", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const pre = yield* PreStep
      yield* pre.register((input, next) =>
        Effect.map(next(), (d) => d._tag === "Enter" ? PreStepDecision.enter([...d.messages, ...d.messages]) : d)
      )
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect(yield* shape).toEqual(["INS(nt,0,[A])", "TS(1)", "CLM(nt,0,1)", "TE(1,error(DUPLICATE_MESSAGE))"])
      expect(yield* requests).toEqual([])
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario([ScriptedModel.text("never")]))))

  it.scoped("4.4: entering a message inserted into next-step after the claim ends DUPLICATE_MESSAGE; it stays pending and enters later", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const inbox = yield* Inbox
      const pre = yield* PreStep
      const C = plugin("C")
      yield* pre.register((input, next) =>
        input.turn === 1
          ? Effect.zipRight(driver.inject(C), Effect.map(next(), () => PreStepDecision.enter([...input.messages, C])))
          : next()
      )
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect((yield* dataOfType("turn/end"))[0]!.reason).toMatchObject({ kind: "error", error: { code: "DUPLICATE_MESSAGE" } })
      expect((yield* inbox.nextStep).map((m) => m.id)).toEqual(["C"])
      expect(yield* inbox.idState(asId("C"))).toEqual(Option.some("pending"))
      yield* driver.followup(user("B"))
      yield* driver.whenIdle
      expect(yield* texts).toEqual(["C", "B"])
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario([ScriptedModel.text("ok")]))))

  it.scoped("4.4: PreStep.run called directly returns the entered messages and reports a rejection as PreStepRejected {turn, step, reason}", () =>
    Effect.gen(function*() {
      const pre = yield* PreStep
      const log = yield* SessionLog
      const A = user("A")
      const input = { sessionId: log.sessionId, turn: 7, step: 2, boundary: "later" as const, messages: [A] }
      const entered = yield* pre.run(input)
      expect(entered).toEqual([A])
      expect(entered).not.toBe(input.messages)
      yield* pre.register((i, next) => i.messages.length > 1 ? Effect.succeed(PreStepDecision.reject("too many")) : next())
      const rejected = yield* Effect.flip(pre.run({ ...input, messages: [A, user("B")] }))
      expect(rejected).toBeInstanceOf(PreStepRejected)
      expect(rejected).toMatchObject({ turn: 7, step: 2, reason: "too many" })
      expect(yield* events).toEqual([])
    }).pipe(Effect.provide(scenario([]))))

  const gLater = gate()
  it.scoped("4.3/4.4: a later boundary's pre-step input has boundary later and step k+1; a rejection there ends the turn blocked after its step", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const pre = yield* PreStep
      const seen: Array<unknown> = []
      yield* pre.register((input, next) => {
        seen.push({ turn: input.turn, step: input.step, boundary: input.boundary, ids: input.messages.map((m) => m.id) })
        return input.boundary === "later" ? Effect.succeed(PreStepDecision.reject("no more")) : next()
      })
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "assistant/chunk")
      yield* driver.steer(user("S"))
      yield* open(gLater)
      yield* driver.whenIdle
      expect(seen).toEqual([
        { turn: 1, step: 1, boundary: "initial", ids: ["A"] },
        { turn: 1, step: 2, boundary: "later", ids: ["S"] }
      ])
      expect((yield* dataOfType("turn/end")).map((d) => d.reason)).toEqual([{ kind: "blocked", message: "no more" }])
      expect((yield* shape).slice(-3)).toEqual(["SE(1,1)", "CLM(ns,0,1)", "TE(1,blocked)"])
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario([ScriptedModel.text("ok", { during: Deferred.await(gLater) })]))))
})

describe("4.6 tools: contexts, conclusion, arguments", () => {
  const bodyGate = gate()
  const ctxTool = Tool.make("ctx", {
    description: "adds a context after a gate",
    parameters: empty,
    execute: (_p, c) => Effect.as(Deferred.await(bodyGate), { content: "done", additionalContexts: [plugin(`ctx-${c.callId}`)] })
  })
  it.scoped("4.6 COMMIT step 3: contexts are inserted at s = |next-step| before the insertion (after a steer that arrived during the body)", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "tool/call")
      yield* driver.steer(user("S"))
      yield* open(bodyGate)
      yield* driver.whenIdle
      const s = yield* shape
      expect(s.slice(s.indexOf("TR(c1)"), s.indexOf("TR(c1)") + 5)).toEqual(["TR(c1)", "INS(ns,1,[ctx-c1])", "SE(1,1)", "CLM(ns,0,2)", "SS(1,2)"])
      expect(yield* texts).toEqual(["A", "S", "ctx-c1"])
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario(
      [ScriptedModel.response({ toolCalls: [{ id: "c1", name: "ctx", arguments: {} }] }), ScriptedModel.text("ok")],
      { tools: [ctxTool] }
    ))))

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
  it.scoped("4.6/3.9: a known context id or one repeated by a later call of the batch gives INVALID_TOOL_OUTPUT; its contexts are dropped", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
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
    }).pipe(Effect.provide(scenario(
      [
        ScriptedModel.response({ toolCalls: [{ id: "c1", name: "shared", arguments: {} }, { id: "c2", name: "shared", arguments: {} }, { id: "c3", name: "known", arguments: {} }] }),
        ScriptedModel.text("ok")
      ],
      { tools: [shared, known] }
    ))))

  const guarded = Tool.make("guarded", { description: "", parameters: empty, execute: () => Effect.succeed("ran") })
  // 4.6 COMMIT step 4 defines `concluded := concluded ∨ (output.concludesTurn ∧ ¬isError)` over the final
  // (ToolPost) output, whatever the body's own outcome.
  it.scoped("4.6 COMMIT step 4: a DENIED call whose ToolPost output is a non-error concluding output concludes the turn", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const hooks = yield* Hooks
      yield* hooks.onToolPre(() => Effect.succeed({ _tag: "Deny", reason: "no" } as const))
      yield* hooks.onToolPost((input, next) =>
        Effect.map(next(), (o) => ({ ...o, content: [{ type: "text" as const, text: "handled" }], isError: false, concludesTurn: true }))
      )
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect((yield* dataOfType("tool/result"))[0]!.message.content[0]).toMatchObject({ isError: false, content: [{ type: "text", text: "handled" }] })
      expect((yield* dataOfType("turn/end")).map((d) => d.reason)).toEqual([{ kind: "completed" }])
      expect((yield* requests).length).toBe(1)
    }).pipe(Effect.provide(scenario(
      [ScriptedModel.response({ toolCalls: [{ id: "c1", name: "guarded", arguments: {} }] })],
      { tools: [guarded] }
    ))))

  const strict = Tool.make("strict", { description: "", parameters: Schema.Struct({ n: Schema.optional(Schema.Number) }), execute: (p) => Effect.succeed(`n=${p.n ?? "none"}`) })
  it.scoped("4.6 START step 4: empty argument text means {}; unparsable JSON and a schema mismatch give INVALID_ARGUMENTS", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
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
    }).pipe(Effect.provide(scenario(
      [
        ScriptedModel.response({ toolCalls: [
          { id: "c1", name: "strict", arguments: "" },
          { id: "c2", name: "strict", arguments: "{not json" },
          { id: "c3", name: "strict", arguments: { n: "x" } }
        ] }),
        ScriptedModel.text("ok")
      ],
      { tools: [strict] }
    ))))
})

describe("4.5 requests and retries", () => {
  it.scoped("4.5 default policy: jittered 1 s then 2 s; OVERLOADED, NETWORK, TIMEOUT, retryable:true and 5xx retried; input of onRequestError", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const hooks = yield* Hooks
      const seen: Array<unknown> = []
      yield* hooks.onRequestError((input, next) => {
        seen.push({ turn: input.turn, step: input.step, attempt: input.attempt, code: input.failure.code, sid: input.sessionId })
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
        [1, 1, "OVERLOADED"], [1, 2, "NETWORK"],
        [2, 1, "TIMEOUT"], [2, 2, "WHATEVER"],
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
    }).pipe(Effect.provide(scenario([
      ScriptedModel.fail({ message: "o", code: "OVERLOADED" }),
      ScriptedModel.fail({ message: "n", code: "NETWORK" }),
      ScriptedModel.text("one"),
      ScriptedModel.fail({ message: "t", code: "TIMEOUT" }),
      ScriptedModel.fail({ message: "w", code: "WHATEVER", retryable: true }),
      ScriptedModel.text("two"),
      ScriptedModel.fail({ message: "h", code: "HTTP", status: 502 }),
      ScriptedModel.fail({ message: "h", code: "HTTP", status: 499 })
    ]))))

  it.scoped("4.5: a status of 600 is not retryable by the default policy", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect(yield* dataOfType("llm/retry")).toEqual([])
      expect((yield* requests).length).toBe(1)
    }).pipe(Effect.provide(scenario([ScriptedModel.fail({ message: "x", code: "HTTP", status: 600 })]))))

  it.scoped("4.5/K6: a Retry returned after the listener recorded a cause is ignored: no llm/retry, no further attempt, aborted", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const hooks = yield* Hooks
      yield* hooks.onRequestError(() => Effect.as(driver.cancel(CancelCause.user), RequestErrorAction.retry("1 second")))
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect(yield* dataOfType("llm/retry")).toEqual([])
      expect((yield* requests).length).toBe(1)
      expect((yield* shape).slice(-2)).toEqual(["SE(1,1)", "TE(1,aborted(user))"])
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario([ScriptedModel.fail({ message: "x", code: "RATE_LIMIT" }), ScriptedModel.text("never")]))))

  it.scoped("4.5: an onRequest failure is a turn failure with its own code and is not offered to request-error recovery", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const hooks = yield* Hooks
      const offered = yield* Ref.make(0)
      yield* hooks.onRequest(() => Effect.fail({ message: "no config", code: "CONFIG" }))
      yield* hooks.onRequestError((_i, next) => Effect.zipRight(Ref.update(offered, (n) => n + 1), next()))
      const live = yield* recordLive
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect(yield* Ref.get(offered)).toBe(0)
      expect(yield* requests).toEqual([])
      expect((yield* dataOfType("turn/end"))[0]!.reason).toEqual({ kind: "error", error: { message: "no config", code: "CONFIG" } })
      const errors = (yield* live).filter((e) => e.type === "agent/error")
      expect(errors).toEqual([{ type: "agent/error", turn: 1, step: 1, error: { message: "no config", code: "CONFIG" } }])
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario([ScriptedModel.text("never")]))))
})

describe("5.1/8.5 SessionLog.append acceptance", () => {
  it.scoped("5.1: SessionLog.append refuses an empty type, ignorable false, non-lossless data, reserved core types and R6 violations, writing nothing", () =>
    Effect.gen(function*() {
      const log = yield* SessionLog
      const refuse = (input: Parameters<typeof log.append>[0]) => Effect.flip(log.append(input))
      const inputs: Array<[Parameters<typeof log.append>[0], string | undefined]> = [
        [{ type: "", data: {}, ignorable: true }, undefined],
        [{ type: "x/ext", data: {}, ignorable: false as unknown as true }, undefined],
        [{ type: "x/ext", data: { n: Number.NaN }, ignorable: true }, undefined],
        [{ type: "x/ext", data: { d: new Date(0) }, ignorable: true }, undefined],
        [{ type: "x/ext", data: {} }, undefined],
        [{ type: "tool/result", data: {}, surfaceOp: "append" }, "reserved"],
        [{ type: "agent/inbox/spliced", data: { target: "next-step", start: 0, inserted: [user("Z")] } }, "reserved"],
        [{ type: "step/end", data: { turn: 1, step: 1 } }, "reserved"],
        [{ type: "request/header", data: { header: { provider: "p", model: "m", tools: [] }, reason: "initial" } }, "reserved"],
        [{ type: "compaction/end", data: { turn: null } }, undefined]
      ]
      for (const [input, reason] of inputs) {
        const error = yield* refuse(input)
        expect(error, JSON.stringify(input.type)).toBeInstanceOf(InvalidEvent)
        if (reason !== undefined) expect(error).toMatchObject({ reason })
      }
      const r6 = yield* refuse({ type: "compaction/end", data: { turn: null } })
      expect(r6).toMatchObject({ _tag: "InvalidEvent", rule: "R6" })
      expect(yield* events).toEqual([])
      expect(yield* Inbox.pipe(Effect.flatMap((i) => i.idState(asId("Z"))))).toEqual(Option.none())
    }).pipe(Effect.provide(scenario([]))))

  it.scoped("2.1/A3: an appended extension event is a deep-frozen snapshot; the ack follows durability", () =>
    Effect.gen(function*() {
      const log = yield* SessionLog
      const data = { list: [1, 2], nested: { a: "x" } }
      const event = yield* log.append({ type: "x/ext", data, ignorable: true })
      data.list.push(3)
      data.nested.a = "changed"
      expect(event).toMatchObject({ type: "x/ext", seq: 0, time: 0, ignorable: true, data: { list: [1, 2], nested: { a: "x" } } })
      expect((yield* events)[0]!.data).toEqual({ list: [1, 2], nested: { a: "x" } })
      expect(Object.isFrozen(event.data)).toBe(true)
      expect(Object.isFrozen((event.data as any).nested)).toBe(true)
      expect(yield* log.durableSeq).toBe(0)
    }).pipe(Effect.provide(scenario([]))))

  // 3.1 check order is "... message/event validity → InvalidEvent; identity → DuplicateMessage": an event
  // invalid for another reason than its known id is that InvalidEvent.
  it.scoped("3.1 check order: an invalid replacement user/message with a known id fails InvalidEvent, not DuplicateMessage", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const log = yield* SessionLog
      yield* driver.followup(user("X"))
      yield* driver.whenIdle
      const before = yield* events
      const s = before.find((e) => e.type === "user/message")!.seq
      // Known id and an endpoint that is not on the surface.
      const e1 = yield* Effect.flip(log.append({ type: "user/message", data: user("X", "again"), surfaceOp: { op: "replace", start: 0, end: 0 }, sourceEventSeqs: [0] }))
      expect(e1).toBeInstanceOf(InvalidEvent)
      // Known id and an invalid message shape.
      const e2 = yield* Effect.flip(log.append({
        type: "user/message",
        data: { id: "X", role: "user", content: "not blocks", source: { kind: "compaction" } },
        surfaceOp: { op: "replace", start: s, end: s },
        sourceEventSeqs: [s]
      }))
      expect(e2).toBeInstanceOf(InvalidEvent)
      expect(yield* events).toEqual(before)
    }).pipe(Effect.provide(scenario([ScriptedModel.text("ok")]))))
})

describe("3.10/6.3 poisoning and quiet queueing", () => {
  it.scoped("3.10 case 3: poisoning an idle session with no turn publishes exactly one agent/error {turn: 0, step: 0, error: PersistenceError}", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const control = yield* MemoryStoreControl
      const live = yield* recordLive
      yield* control.failAppends(3)
      expect(yield* Effect.flip(driver.inject(plugin("C")))).toBeInstanceOf(PersistenceError)
      const errors = (yield* live).filter((e) => e.type === "agent/error")
      expect(errors.length).toBe(1)
      expect(errors[0]).toMatchObject({ turn: 0, step: 0 })
      expect((errors[0] as any).error).toBeInstanceOf(PersistenceError)
    }).pipe(Effect.provide(scenario([]))))

  it.scoped("6.3: poisoning during a step stops the activity without turn/end; agent/error names the turn and step; status idle", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const control = yield* MemoryStoreControl
      const live = yield* recordLive
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "assistant/chunk")
      yield* control.failAppends(3)
      expect(yield* Effect.flip(driver.inject(plugin("C")))).toBeInstanceOf(PersistenceError)
      yield* driver.whenIdle
      expect(yield* driver.status).toBe("idle")
      const notes = yield* live
      const errors = notes.filter((e) => e.type === "agent/error")
      expect(errors.length).toBe(1)
      expect(errors[0]).toMatchObject({ turn: 1, step: 1 })
      expect(notes.map(liveNotation)).toContain("status(idle)")
      expect((yield* shape).some((s) => s.startsWith("TE("))).toBe(false)
    }).pipe(Effect.provide(scenario([ScriptedModel.hang({ text: "par" })]))))

  it.scoped("3.3: send(m, next-turn, false) during maintenance only inserts; no turn opens when the task ends", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const inbox = yield* Inbox
      yield* driver.runMaintenance(driver.send(user("Q"), "next-turn", false))
      yield* driver.whenIdle
      expect(yield* shape).toEqual(["INS(nt,0,[Q])"])
      expect((yield* inbox.nextTurn).map((m) => m.id)).toEqual(["Q"])
      expect(yield* driver.status).toBe("idle")
    }).pipe(Effect.provide(scenario([ScriptedModel.text("never")]))))
})

describe("4.5 assembler edge cases", () => {
  it.scoped("4.5 assembler: on max-tokens tool calls and replayState are dropped; usage is the last usage chunk", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      const am = (yield* dataOfType("assistant/message"))[0]!
      expect(am.message.content).toEqual([{ type: "text", text: "cut" }])
      expect(am.message.source).toEqual({ kind: "model", provider: "p", model: "m" })
      expect(am.usage).toEqual({ inputTokens: 5, outputTokens: 6 })
      expect((yield* dataOfType("turn/end"))[0]!.reason).toEqual({ kind: "max-tokens" })
      expect(yield* dataOfType("tool/call")).toEqual([])
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario([ScriptedModel.chunks([
      { type: "block-start", index: 0, block: "text" },
      { type: "text-delta", index: 0, text: "cut" },
      { type: "block-end", index: 0 },
      { type: "block-start", index: 1, block: "tool-call", id: "c1", name: "t" },
      { type: "tool-call-delta", index: 1, arguments: "{}" },
      { type: "block-end", index: 1 },
      { type: "usage", usage: { inputTokens: 1, outputTokens: 2 } },
      { type: "replay-state", state: { r: 1 } },
      { type: "usage", usage: { inputTokens: 5, outputTokens: 6 } },
      { type: "finish", finish: { kind: "max-tokens" } }
    ])]))))

  it.scoped("4.5 assembler: the last replay-state wins, also when it is null; blocks keep block-start order with interleaved deltas", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      const am = (yield* dataOfType("assistant/message"))[0]!
      expect(am.message.content).toEqual([{ type: "reasoning", text: "r1r2" }, { type: "text", text: "t1t2" }])
      expect(am.message.source).toEqual({ kind: "model", provider: "p", model: "m", replayState: null })
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario([ScriptedModel.chunks([
      { type: "block-start", index: 0, block: "reasoning" },
      { type: "block-start", index: 1, block: "text" },
      { type: "text-delta", index: 1, text: "t1" },
      { type: "reasoning-delta", index: 0, text: "r1" },
      { type: "replay-state", state: { r: 1 } },
      { type: "text-delta", index: 1, text: "t2" },
      { type: "reasoning-delta", index: 0, text: "r2" },
      { type: "block-end", index: 0 },
      { type: "block-end", index: 1 },
      { type: "replay-state", state: null },
      { type: "finish", finish: { kind: "stop" } }
    ])]))))

  it.scoped("2.8/4.5 Q6: a stop with no content still records an AM citing its chunks; derived history omits it", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const log = yield* SessionLog
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      const es = yield* events
      const am = es.find((e) => e.type === "assistant/message")!
      expect((am.data as any).message.content).toEqual([])
      const chunkSeqs = es.filter((e) => e.type === "assistant/chunk").map((e) => e.seq)
      expect((am as { readonly sourceEventSeqs?: ReadonlyArray<number> }).sourceEventSeqs).toEqual(chunkSeqs)
      expect((yield* log.messages).map((m) => m.role)).toEqual(["user"])
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario([ScriptedModel.chunks([
      { type: "block-start", index: 0, block: "text" },
      { type: "block-end", index: 0 },
      { type: "finish", finish: { kind: "stop" } }
    ])]))))
})

describe("3.6/3.7 disposal window", () => {
  const held: { driver?: Context.Tag.Service<Driver>; inbox?: Context.Tag.Service<Inbox>; busy?: unknown; appended?: boolean } = {}
  it.scoped("3.6/3.7/3.8: while disposing runMaintenance fails AgentBusy {phase: disposing}; inbox mutations are allowed and stay pending", () =>
    Effect.gen(function*() {
      const storeCtx = yield* Layer.build(SessionStore.layerMemory)
      const built = yield* buildIn(storeCtx, [ScriptedModel.hang({}, {
        onInterrupt: Effect.suspend(() =>
          Effect.gen(function*() {
            held.busy = yield* Effect.flip(held.driver!.runMaintenance(Effect.void))
            yield* held.inbox!.append("next-turn", user("late"))
            held.appended = true
          }).pipe(Effect.ignore)
        )
      })])
      held.driver = built.driver
      held.inbox = built.inbox
      yield* built.driver.followup(user("A"))
      yield* until(Effect.map(built.log.events, (es) => es.some((e) => e.type === "request/header")))
      yield* settle
      yield* Scope.close(built.scope, Exit.void)
      expect(held.busy).toMatchObject({ _tag: "AgentBusy", operation: "runMaintenance", phase: "disposing", sessionId: "s" })
      expect(held.appended).toBe(true)
      const again = yield* buildIn(storeCtx, [], { resume: true })
      expect((yield* again.inbox.nextTurn).map((m) => m.id)).toEqual(["late"])
      const ends = (yield* again.log.events).filter((e) => e.type === "turn/end").map((e) => (e.data as any).reason)
      expect(ends).toEqual([{ kind: "aborted", reason: { kind: "disposed" } }])
      yield* Scope.close(again.scope, Exit.void)
    }))
})

describe("4.4 waterfall failure and materialisation", () => {
  it.scoped("4.4/8.6: an upstream listener that catches the downstream PreStepFailed (cause = original error) and enters opens the step", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const pre = yield* PreStep
      const caught: Array<unknown> = []
      yield* pre.register((input, next) =>
        next().pipe(Effect.catchAll((failed) => {
          caught.push(failed)
          return Effect.succeed(PreStepDecision.enter(input.messages))
        }))
      )
      yield* pre.register(() => Effect.fail("inner boom"))
      const live = yield* recordLive
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect(caught.length).toBe(1)
      expect(caught[0]).toMatchObject({ _tag: "PreStepFailed", turn: 1, step: 1, cause: "inner boom" })
      expect((yield* dataOfType("turn/end")).map((d) => d.reason)).toEqual([{ kind: "completed" }])
      expect(yield* texts).toEqual(["A"])
      expect((yield* live).filter((e) => e.type === "agent/error")).toEqual([])
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario([ScriptedModel.text("ok")]))))

  it.scoped("4.4: a message added by an inner listener does not materialise when an outer listener rejects; its id stays fresh", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const inbox = yield* Inbox
      const pre = yield* PreStep
      const X = plugin("X")
      yield* pre.register((input, next) => input.turn === 1 ? Effect.zipRight(next(), Effect.succeed(PreStepDecision.reject())) : next())
      yield* pre.register((input, next) => input.turn === 1 ? Effect.map(next(), () => PreStepDecision.enter([...input.messages, X])) : next())
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect((yield* dataOfType("turn/end")).map((d) => d.reason)).toEqual([{ kind: "blocked" }])
      expect(yield* inbox.idState(asId("X"))).toEqual(Option.none())
      expect(yield* inbox.idState(asId("A"))).toEqual(Option.some("claimed"))
      yield* driver.followup(X)
      yield* driver.whenIdle
      expect(yield* texts).toEqual(["X"])
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario([ScriptedModel.text("ok")]))))
})

describe("6.4 opening with options", () => {
  const sid = SessionId.make("s")
  const header = { formatVersion: 1 as const, sessionId: sid, createdAt: 0, seedLength: 0 }
  const ev = (seq: number, type: string, data: unknown, extra: Record<string, unknown> = {}) => ({ type, seq, time: 0, data, ...extra }) as any

  it.scoped("6.4/5.2: a stored log violating only relational rules opens with invariants off and fails MalformedLog with check", () =>
    Effect.gen(function*() {
      const storeCtx = yield* Layer.build(SessionStore.layerMemory)
      const store = Context.get(storeCtx, SessionStore)
      // R2: a turn/end with no open turn (the schema of every event is valid).
      yield* store.create(header, [ev(0, "turn/end", { turn: 1, reason: { kind: "completed" } })])
      const checked = yield* Effect.exit(Effect.scoped(buildIn(storeCtx, [], { resume: true })))
      expect(failureOf(checked)).toMatchObject({ _tag: "MalformedLog", seq: 0 })
      const off = yield* buildIn(storeCtx, [], { resume: true, agent: { invariants: "off" } })
      expect((yield* off.log.events).map((e) => e.type)).toEqual(["turn/end", "session/end-seed"])
      yield* Scope.close(off.scope, Exit.void)
    }))

  it.scoped("2.9/6.4: a stored declared extension event resumes with the same eventTypes and is malformed without them", () =>
    Effect.gen(function*() {
      const storeCtx = yield* Layer.build(SessionStore.layerMemory)
      const store = Context.get(storeCtx, SessionStore)
      yield* store.create(header, [ev(0, "x/declared", { a: 1 }), ev(1, "x/other", { b: 2 }, { ignorable: true })])
      const without = yield* Effect.exit(Effect.scoped(buildIn(storeCtx, [], { resume: true })))
      expect(failureOf(without)).toMatchObject({ _tag: "MalformedLog", seq: 0 })
      const withTypes = yield* buildIn(storeCtx, [], { resume: true, agent: { eventTypes: ["x/declared"] } })
      expect(withTypes.log.firstLiveSeq).toBe(2)
      expect((yield* withTypes.log.events).map((e) => e.type)).toEqual(["x/declared", "x/other", "session/end-seed"])
      yield* Scope.close(withTypes.scope, Exit.void)
    }))

  it.scoped("6.2: durableSeq is -1 on a fresh session; flush of an empty log succeeds", () =>
    Effect.gen(function*() {
      const log = yield* SessionLog
      expect(yield* log.durableSeq).toBe(-1)
      yield* log.flush
      expect(log.firstLiveSeq).toBe(0)
      expect(log.header).toEqual({ formatVersion: 1, sessionId: "s", createdAt: 0, seedLength: 0 })
    }).pipe(Effect.provide(scenario([]))))
})

describe("3.1 acknowledgement of operations that write nothing", () => {
  it.scoped("3.1: remove/replace of an unknown id, an empty clear and a no-op cancel are acknowledged only after earlier events are durable", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const inbox = yield* Inbox
      const control = yield* MemoryStoreControl
      yield* control.hold
      const first = yield* Effect.fork(driver.send(user("Q"), "next-turn", false))
      yield* settle
      const ops = [
        inbox.remove(asId("nobody")),
        inbox.replace(asId("nobody"), user("Z")),
        driver.cancel(CancelCause.user, { keepInbox: true })
      ] as ReadonlyArray<Effect.Effect<unknown, unknown>>
      const fibers = []
      for (const op of ops) fibers.push(yield* Effect.fork(op))
      yield* settle
      for (const f of [first, ...fibers]) expect(f.unsafePoll()).toBeNull()
      yield* control.release
      yield* Fiber.join(first)
      for (const f of fibers) yield* Fiber.join(f)
      expect(yield* (yield* SessionLog).durableSeq).toBe(0)
    }).pipe(Effect.provide(scenario([]))))

  // 3.1 lists "runMaintenance's phase switch" among the mutating operations whose Effect "completes only
  // after every event in the log when its transaction committed is durably committed".
  it.scoped("3.1/3.6: runMaintenance completes only after the events logged before its phase switch are durable", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const log = yield* SessionLog
      const control = yield* MemoryStoreControl
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      const last = (yield* events).length - 1
      // Loop events after the last checkpoint are written by the window (never elapsed under TestClock).
      expect(yield* log.durableSeq).toBeLessThan(last)
      yield* control.hold
      const task = yield* Effect.fork(driver.runMaintenance(Effect.succeed(1)))
      yield* settle
      const early = task.unsafePoll()
      const durableWhileHeld = yield* log.durableSeq
      yield* control.release
      expect(early).toBeNull()
      expect(durableWhileHeld).toBeLessThan(last)
      expect(yield* Fiber.join(task)).toBe(1)
      expect(yield* log.durableSeq).toBe(last)
    }).pipe(Effect.provide(scenario([ScriptedModel.text("ok")]))))
})

describe("3.5 whenIdle from the activity", () => {
  it.scoped("3.5: whenIdle awaited from a maintenance task of the same driver dies instead of hanging", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const exit = yield* Effect.exit(driver.runMaintenance(driver.whenIdle))
      expect(Exit.isFailure(exit) && Cause.isDie(exit.cause)).toBe(true)
      expect(yield* driver.status).toBe("idle")
      yield* driver.whenIdle
    }).pipe(Effect.provide(scenario([]))))

  const waiter = { driver: undefined as Context.Tag.Service<Driver> | undefined }
  const waits = Tool.make("waits", {
    description: "awaits whenIdle",
    parameters: empty,
    execute: () => Effect.as(waiter.driver!.whenIdle, "never")
  })
  it.scoped("3.5: whenIdle awaited from a tool body dies; the defect is the body's outcome (TOOL_DEFECT)", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      waiter.driver = driver
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect((yield* dataOfType("tool/result"))[0]!.error).toEqual({ name: "ToolDefect", code: "TOOL_DEFECT" })
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario(
      [ScriptedModel.response({ toolCalls: [{ id: "c1", name: "waits", arguments: {} }] }), ScriptedModel.text("ok")],
      { tools: [waits] }
    ))))
})

describe("4.5 stream order and tools order", () => {
  it.scoped("4.5 Q5: a block-start may reuse a closed index (a new block); reusing an open index is MALFORMED_STREAM", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect((yield* dataOfType("assistant/message"))[0]!.message.content).toEqual([{ type: "text", text: "a" }, { type: "text", text: "b" }])
      yield* driver.followup(user("B"))
      yield* driver.whenIdle
      expect((yield* dataOfType("turn/end"))[1]!.reason).toMatchObject({ kind: "error", error: { code: "MALFORMED_STREAM" } })
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario([
      ScriptedModel.chunks([
        { type: "block-start", index: 0, block: "text" },
        { type: "text-delta", index: 0, text: "a" },
        { type: "block-end", index: 0 },
        { type: "block-start", index: 0, block: "text" },
        { type: "text-delta", index: 0, text: "b" },
        { type: "block-end", index: 0 },
        { type: "finish", finish: { kind: "stop" } }
      ]),
      ScriptedModel.chunks([
        { type: "block-start", index: 0, block: "text" },
        { type: "block-start", index: 0, block: "text" },
        { type: "finish", finish: { kind: "stop" } }
      ])
    ]))))

  const mk = (name: string) => Tool.make(name, { description: name, parameters: empty, execute: () => Effect.succeed(name) })
  it.scoped("4.5 Q2: the header's tools are sorted by name in code-unit order", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect((yield* requests)[0]!.tools.map((t) => t.name)).toEqual(["B", "_x", "a", "b"])
      expect((yield* dataOfType("request/header"))[0]!.header.tools.map((t: any) => t.name)).toEqual(["B", "_x", "a", "b"])
    }).pipe(Effect.provide(scenario([ScriptedModel.text("ok")], { tools: [mk("b"), mk("a"), mk("_x"), mk("B")] }))))
})

describe("6.2 batch window", () => {
  const windowGate = gate()
  it.scoped("6.2 (c): later events do not extend the window: one append at oldest + batchWindow covers everything pending", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const log = yield* SessionLog
      const control = yield* MemoryStoreControl
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "assistant/chunk")
      yield* settle
      const durable = yield* log.durableSeq
      const calls = yield* control.appendCalls
      // The first chunk is pending since t = 0.
      yield* TestClock.adjust("150 millis")
      yield* settle
      expect(yield* log.durableSeq).toBe(durable)
      yield* open(windowGate)
      yield* driver.whenIdle
      yield* settle
      const total = (yield* log.events).length
      expect(yield* log.durableSeq).toBe(durable)
      yield* TestClock.adjust("50 millis")
      yield* until(Effect.map(log.durableSeq, (d) => d === total - 1))
      expect(yield* control.appendCalls).toBe(calls + 1)
    }).pipe(Effect.provide(scenario([ScriptedModel.text("hello", { deltas: ["he", "llo"], during: Deferred.await(windowGate) })]))))
})

describe("6.6/3.9 identity across a fork", () => {
  it.scoped("6.6/3.9: an id pending in the source prefix is known in the child (not pending there): idState discarded, resubmission DuplicateMessage", () =>
    Effect.gen(function*() {
      const storeCtx = yield* Layer.build(SessionStore.layerMemory)
      const store = Context.get(storeCtx, SessionStore)
      const source = yield* buildIn(storeCtx, [ScriptedModel.text("ok")])
      yield* source.driver.followup(user("A"))
      yield* source.driver.whenIdle
      yield* source.driver.inject(plugin("C"))
      yield* source.driver.send(user("Q"), "next-turn", false)
      yield* Scope.close(source.scope, Exit.void)
      const childId = yield* forkSession({ source: SessionId.make("s"), childId: SessionId.make("child") }).pipe(
        Effect.provideService(SessionStore, store)
      )
      const child = yield* buildIn(storeCtx, [ScriptedModel.text("child")], { sessionId: childId, resume: true })
      expect(yield* child.inbox.hasPending).toBe(false)
      expect(yield* child.inbox.idState(asId("C"))).toEqual(Option.some("discarded"))
      expect(yield* child.inbox.idState(asId("Q"))).toEqual(Option.some("discarded"))
      expect(yield* child.inbox.idState(asId("A"))).toEqual(Option.some("entered"))
      const dup = yield* Effect.flip(child.driver.inject(plugin("C")))
      expect(dup).toMatchObject({ _tag: "DuplicateMessage", id: "C", state: "discarded" })
      expect(child.log.header).toMatchObject({ parent: { sessionId: "s" }, seedLength: child.log.firstLiveSeq - 1 })
      yield* Scope.close(child.scope, Exit.void)
    }))
})

describe("7.2 windows around checkpoints and turn-stopping", () => {
  it.scoped("K4: a cancel while the pre-request checkpoint waits on held storage converges without a request: RH, SE, TE(aborted)", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const control = yield* MemoryStoreControl
      yield* control.hold
      const wake = yield* Effect.fork(driver.followup(user("A")))
      yield* untilEvent((e) => e.type === "request/header")
      yield* settle
      const cancel = yield* Effect.fork(driver.cancel(CancelCause.user))
      yield* driver.whenIdle
      expect(yield* requests).toEqual([])
      expect((yield* shape).slice(-4)).toEqual(["UM(A)", "RH(initial)", "SE(1,1)", "TE(1,aborted(user))"])
      yield* control.release
      yield* Fiber.join(wake)
      yield* Fiber.join(cancel)
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario([ScriptedModel.text("never")]))))

  it.scoped("4.7/4.8: a follow-up queued by a turn-stopping listener becomes the next turn of the same activity (one running interval)", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const hooks = yield* Hooks
      const live = yield* recordLive
      yield* hooks.onTurnStopping((input) => input.turn === 1 ? driver.followup(user("B")) : Effect.void)
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect((yield* shape).filter((s) => s.startsWith("TS") || s.startsWith("TE") || s.startsWith("SS"))).toEqual([
        "TS(1)", "SS(1,1)", "TE(1,completed)", "TS(2)", "SS(2,1)", "TE(2,completed)"
      ])
      expect((yield* live).filter((e) => e.type === "agent/status").map(liveNotation)).toEqual(["status(running)", "status(idle)"])
      expect(yield* texts).toEqual(["A", "B"])
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario([ScriptedModel.text("one"), ScriptedModel.text("two")]))))
})

describe("5.1/D6 loop appends are validated like any other", () => {
  // 5.1 "Every append (loop, inbox, repair, opening, SessionLog.append) ... is checked with the same Schemas"
  // and D6 "a log accepted live can always be loaded": a cause outside the CancelCause union is refused (a
  // defect that changes nothing), so it never reaches turn/end.
  it.scoped("5.1/D6: a cancel cause outside the CancelCause union never reaches the log; the session stays loadable", () =>
    Effect.gen(function*() {
      const storeCtx = yield* Layer.build(SessionStore.layerMemory)
      const first = yield* buildIn(storeCtx, [ScriptedModel.hang({ text: "x" })])
      yield* first.driver.followup(user("A"))
      yield* until(Effect.map(first.log.events, (es) => es.some((e) => e.type === "assistant/chunk")))
      const refused = [
        yield* Effect.exit(first.driver.cancel({ kind: "bogus" } as unknown as CancelCause)),
        yield* Effect.exit(first.driver.cancel({ kind: "hook", reason: 7 } as unknown as CancelCause))
      ]
      // Refused as defects that change nothing: the turn still streams until a valid cancel.
      for (const exit of refused) expect(Exit.isFailure(exit) && Cause.isDie(exit.cause)).toBe(true)
      expect((yield* first.driver.status)).toBe("running")
      yield* first.driver.cancel(CancelCause.user)
      yield* first.driver.whenIdle
      const reasons = (yield* first.log.events).filter((e) => e.type === "turn/end").map((e) => (e.data as any).reason)
      for (const r of reasons) expect(["aborted", "completed", "error"]).toContain(r.kind)
      for (const r of reasons) if (r.kind === "aborted") expect(["user", "parent", "hook", "disposed"]).toContain(r.reason.kind)
      yield* Scope.close(first.scope, Exit.void)
      const resumed = yield* Effect.exit(Effect.scoped(buildIn(storeCtx, [], { resume: true })))
      expect(failureOf(resumed)).toBeUndefined()
      expect(Exit.isSuccess(resumed)).toBe(true)
    }))
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
        Effect.map(next(), (c) => input.turn === 1 ? { ...c, maxTokens: "lots" as unknown as number } : { ...c, temperature: Number.NaN })
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
