/**
 * SPEC 9 scenarios P31-P41: cancellation, disposal, inbox, maintenance and resume.
 */
import { describe, expect, it } from "@effect/vitest"
import { Cause, Context, Deferred, Effect, Exit, Fiber, Layer, Option, Schema, Scope, Stream } from "effect"
import { AgentBusy, AgentDisposed, CancelCause, Driver, DuplicateMessage, Hooks, Inbox, InvalidSplice, MaintenanceAborted, MalformedLog, MemoryStoreControl, PreStep, ScriptedModel, SessionId, SessionLog, SessionStore, Tool } from "../../../src/index.js"
import { agentOver, asId, closeOut, dataOfType, events, gate, liveNotation, notation, open, plugin, recordLive, recordStatus, requests, scenario, settle, shape, texts, token, until, untilEvent, user } from "../harness.js"
import type { DriverEvent, Driver as DriverTag, UserMessage } from "../../../src/index.js"

const empty = Schema.Struct({})
const ids = (ms: ReadonlyArray<UserMessage>) => ms.map((m) => m.id)

describe("P31-P37 cancellation", () => {
  it.scoped("P31: cancel while streaming", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const log = yield* SessionLog
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "assistant/chunk" && (e.data as any).chunk.type === "text-delta")
      yield* driver.cancel(CancelCause.user)
      yield* driver.whenIdle
      expect((yield* shape).slice(-3)).toEqual(["AM!", "SE(1,1)", "TE(1,aborted(user))"])
      const es = yield* events
      const am = es.find((e) => e.type === "assistant/message")!
      expect((am.data as any).message.content).toEqual([{ type: "text", text: "partial" }])
      expect((am.data as any).interrupted).toBe(true)
      expect((am as any).sourceEventSeqs).toEqual(es.filter((e) => e.type === "assistant/chunk").map((e) => e.seq))
      yield* driver.followup(user("B"))
      yield* driver.whenIdle
      expect((yield* requests)[1]!.messages.map(token)).toEqual(["A", "partial", "B"])
      expect((yield* log.messages).length).toBe(4)
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario([ScriptedModel.hang({ text: "partial" }), ScriptedModel.text("after")]))))

  const holder32: { driver?: DriverTag["Type"] } = {}
  let count32 = 0
  const danger = Tool.make("danger", { description: "counts", parameters: empty, execute: () => Effect.sync(() => (count32++, "boom")) })
  it.scoped("P32: cancel after the assistant message, before tools", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      holder32.driver = driver
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect((yield* shape).slice(-6)).toEqual(["CH(finish stop)", "AM", "TC(c1)", "TR⊘(c1)", "SE(1,1)", "TE(1,aborted(user))"])
      expect(count32).toBe(0)
      yield* driver.followup(user("B"))
      yield* driver.whenIdle
      const req = (yield* requests)[1]!
      const result = req.messages.find((m) => m.content[0]?.type === "tool-result")!
      expect((result.content[0] as any).toolCallId).toBe("c1")
      expect((result.content[0] as any).isError).toBe(true)
      expect((yield* dataOfType("turn/end")).map((d) => d.reason)).toEqual([
        { kind: "aborted", reason: { kind: "user" } },
        { kind: "completed" }
      ])
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario(
      [
        ScriptedModel.response({
          toolCalls: [{ id: "c1", name: "danger", arguments: {} }],
          afterFinish: Effect.suspend(() => holder32.driver!.cancel(CancelCause.user))
        }),
        ScriptedModel.text("after")
      ],
      { tools: [danger] }
    ))))

  const p33 = (started: Array<string>) =>
    Tool.make("p", {
      description: "never finishes",
      parameters: empty,
      mode: "parallel",
      execute: (_p, ctx) => Effect.zipRight(Effect.sync(() => started.push(ctx.callId)), Effect.never)
    })
  const p33Calls = ["c1", "c2", "c3", "c4"].map((id) => ({ id, name: "p", arguments: {} }))
  const contextPost = Effect.gen(function*() {
    const hooks = yield* Hooks
    yield* hooks.onToolPost((input, next) =>
      Effect.map(next(), (output) => ({ ...output, additionalContexts: [...output.additionalContexts, plugin(`ctx-${input.callId}`)] }))
    )
  })
  const started33: Array<string> = []
  it.scoped("P33: broad cancel during parallel tools discards every context of the draining step", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const inbox = yield* Inbox
      yield* contextPost
      yield* driver.followup(user("A"))
      yield* until(Effect.sync(() => started33.length === 2))
      yield* driver.cancel(CancelCause.user)
      yield* driver.whenIdle
      const s = yield* shape
      expect(s.slice(s.indexOf("CH(finish stop)"))).toEqual([
        "CH(finish stop)", "AM", "TC(c1)", "TC(c2)",
        "TR✗(c1)", "INS(ns,0,[ctx-c1])", "CAN(ns,0,1)",
        "TR✗(c2)", "INS(ns,0,[ctx-c2])", "CAN(ns,0,1)",
        "TC(c3)", "TR⊘(c3)", "TC(c4)", "TR⊘(c4)", "SE(1,1)", "TE(1,aborted(user))"
      ])
      expect(yield* inbox.nextStep).toEqual([])
      yield* driver.followup(user("W"))
      yield* driver.whenIdle
      expect(yield* texts).toEqual(["A", "W"])
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario(
      [ScriptedModel.response({ toolCalls: p33Calls }), ScriptedModel.text("after")],
      { tools: [p33(started33)], maxParallelToolCalls: 2 }
    ))))

  const started33k: Array<string> = []
  it.scoped("P33: keepInbox cancel during parallel tools keeps the contexts pending for the next turn", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* contextPost
      yield* driver.followup(user("A"))
      yield* until(Effect.sync(() => started33k.length === 2))
      yield* driver.cancel(CancelCause.user, { keepInbox: true })
      yield* driver.whenIdle
      const s = yield* shape
      expect(s.slice(s.indexOf("TR✗(c1)"), s.indexOf("TR✗(c1)") + 4)).toEqual(["TR✗(c1)", "INS(ns,0,[ctx-c1])", "TR✗(c2)", "INS(ns,1,[ctx-c2])"])
      yield* driver.followup(user("W"))
      yield* driver.whenIdle
      const after = (yield* shape).slice(s.length)
      expect(after.slice(after.indexOf("SS(2,1)"), after.indexOf("SS(2,1)") + 4)).toEqual(["SS(2,1)", "UM(ctx-c1)", "UM(ctx-c2)", "UM(W)"])
      expect(yield* texts).toEqual(["A", "ctx-c1", "ctx-c2", "W"])
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario(
      [ScriptedModel.response({ toolCalls: p33Calls }), ScriptedModel.text("after")],
      { tools: [p33(started33k)], maxParallelToolCalls: 2 }
    ))))

  it.scoped("P34: cancel right after waking follow-ups", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const inbox = yield* Inbox
      const live = yield* recordLive
      const G = gate()
      yield* (yield* PreStep).register((_i, next) => Effect.zipRight(Deferred.await(G), next()))
      yield* driver.followup(user("A"))
      yield* driver.followup(user("B"))
      yield* driver.cancel(CancelCause.user)
      yield* driver.whenIdle
      expect(yield* shape).toEqual(["INS(nt,0,[A])", "TS(1)", "CLM(nt,0,1)", "INS(nt,0,[B])", "CAN(nt,0,1)", "TE(1,aborted(user))"])
      expect((yield* live).map(liveNotation).filter((s) => s.startsWith("discarded"))).toEqual(["discarded(B)"])
      expect(yield* inbox.idState(asId("A"))).toEqual(Option.some("claimed"))
      expect(yield* inbox.idState(asId("B"))).toEqual(Option.some("discarded"))
      expect(yield* driver.status).toBe("idle")
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario([]))))

  it.scoped("P35: keepInbox parks pre-abort work", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const inbox = yield* Inbox
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "assistant/chunk")
      yield* driver.followup(user("B"))
      yield* driver.cancel(CancelCause.user, { keepInbox: true })
      yield* driver.whenIdle
      expect(yield* texts).toEqual(["A"])
      expect(ids(yield* inbox.nextTurn)).toEqual(["B"])
      expect(yield* requests).toHaveLength(1)
      expect((yield* shape).filter((s) => s.startsWith("CAN"))).toEqual([])
      yield* driver.followup(user("W"))
      yield* driver.whenIdle
      const ss = (yield* events).filter((e) => e.type === "user/message").map((e) => [(e.data as any).id])
      expect(ss).toEqual([["A"], ["B"], ["W"]])
      expect((yield* dataOfType("step/start")).map((d) => d.turn)).toEqual([1, 2, 3])
      expect(yield* requests).toHaveLength(3)
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario([ScriptedModel.hang({ text: "a" }), ScriptedModel.text("b"), ScriptedModel.text("w")]))))

  const G36 = gate()
  it.scoped("P36: a wake after a keepInbox cancel is latched and replayed", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const trace = yield* recordStatus
      yield* driver.followup(user("A"))
      yield* until(Effect.map(requests, (r) => r.length === 1))
      yield* driver.cancel(CancelCause.user, { keepInbox: true })
      yield* driver.followup(user("B"))
      const idle = yield* Effect.fork(driver.whenIdle)
      yield* settle
      expect(Option.isNone(yield* Fiber.poll(idle))).toBe(true)
      yield* open(G36)
      yield* Fiber.join(idle)
      const s = yield* shape
      expect(s.indexOf("INS(nt,0,[B])")).toBeGreaterThan(0)
      const te = s.indexOf("TE(1,aborted(user))")
      expect(s.slice(te, te + 5)).toEqual(["TE(1,aborted(user))", "TS(2)", "CLM(nt,0,1)", "SS(2,1)", "UM(B)"])
      expect(s[s.length - 1]).toBe("TE(2,completed)")
      expect(yield* trace).toEqual(["idle", "running", "idle"])
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario([ScriptedModel.hang({}, { onInterrupt: Deferred.await(G36) }), ScriptedModel.text("b")]))))

  it.scoped("P37: first cause wins", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "assistant/chunk")
      yield* driver.cancel(CancelCause.parent)
      yield* driver.cancel(CancelCause.user)
      yield* driver.whenIdle
      expect((yield* dataOfType("turn/end"))[0]!.reason).toEqual({ kind: "aborted", reason: { kind: "parent" } })
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario([ScriptedModel.hang({ text: "partial" })]))))
})

describe("P38-P41 disposal, inbox, maintenance, resume", () => {
  it.scoped("P38: disposal keeps the queued tail; resume runs it", () =>
    Effect.gen(function*() {
      const storeCtx = yield* Layer.build(SessionStore.layerMemory)
      const store = Context.get(storeCtx, SessionStore)
      const scope = yield* Scope.make()
      const ctx = yield* Layer.buildWithScope(
        agentOver([ScriptedModel.hang({ text: "partial" })]).pipe(Layer.provide(Layer.succeedContext(storeCtx))),
        scope
      )
      const driver = Context.get(ctx, Driver)
      // Observers live in the test's scope, so they see what disposal publishes.
      const trace = yield* Effect.provide(recordStatus, ctx)
      const collected: Array<DriverEvent> = []
      const collector = yield* Effect.fork(Stream.runForEach(driver.events, (e) => Effect.sync(() => collected.push(e))))
      yield* settle
      yield* driver.followup(user("A"))
      yield* Effect.provide(untilEvent((e) => e.type === "assistant/chunk" && (e.data as any).chunk.type === "text-delta"), ctx)
      yield* driver.followup(user("T"))
      yield* Scope.close(scope, Exit.void)
      yield* settle
      // Driver.events ends on disposal (3.7 step 5), so the collector completes.
      yield* Fiber.join(collector)
      const liveSoFar = collected
      const traceSoFar = yield* trace
      const stored = (yield* store.load(SessionId.make("s"))).events.map(notation)
      expect(stored.indexOf("INS(nt,0,[T])")).toBeGreaterThan(0)
      expect(stored.slice(-3)).toEqual(["AM!", "SE(1,1)", "TE(1,aborted(disposed))"])
      expect(stored.filter((s) => s.startsWith("CAN"))).toEqual([])
      expect(liveSoFar.map(liveNotation)).toContain("inserted(T)")
      expect(liveSoFar.map(liveNotation)[liveSoFar.length - 1]).toBe("status(idle)")
      expect(liveSoFar.filter((e) => e.type === "agent/error")).toEqual([])
      expect(traceSoFar).toEqual(["idle", "running", "idle"])
      const late = yield* Effect.flip(driver.followup(user("X")))
      expect(late).toBeInstanceOf(AgentDisposed)
      // Lifecycle 2.
      yield* Effect.gen(function*() {
        const d2 = yield* Driver
        const inbox = yield* Inbox
        expect(ids(yield* inbox.nextTurn)).toEqual(["T"])
        expect(yield* d2.status).toBe("idle")
        yield* d2.followup(user("W"))
        yield* d2.whenIdle
        const ss = (yield* events).filter((e) => e.type === "step/start" || e.type === "user/message").map(notation)
        expect(ss.slice(-4)).toEqual(["SS(2,1)", "UM(T)", "SS(3,1)", "UM(W)"])
        expect(yield* closeOut).toEqual([])
      }).pipe(
        Effect.provide(agentOver([ScriptedModel.text("t"), ScriptedModel.text("w")], { resume: true }).pipe(
          Layer.provide(Layer.succeedContext(storeCtx))
        ))
      )
    }))

  it.scoped("P38: the status trace of a disposed agent ends idle", () =>
    Effect.gen(function*() {
      const storeCtx = yield* Layer.build(SessionStore.layerMemory)
      const scope = yield* Scope.make()
      const ctx = yield* Layer.buildWithScope(
        agentOver([ScriptedModel.hang({ text: "partial" })]).pipe(Layer.provide(Layer.succeedContext(storeCtx))),
        scope
      )
      const driver = Context.get(ctx, Driver)
      const seen: Array<string> = []
      // statusChanges ends on disposal (SPEC 3.7 step 5), so the collector completes.
      const collector = yield* Effect.fork(Stream.runForEach(driver.statusChanges, (status) => Effect.sync(() => seen.push(status))))
      yield* settle
      yield* driver.followup(user("A"))
      yield* Effect.provide(untilEvent((e) => e.type === "assistant/chunk"), ctx)
      yield* Scope.close(scope, Exit.void)
      yield* Fiber.join(collector)
      expect(seen).toEqual(["idle", "running", "idle"])
    }))

  it.scoped("P39 (a, b, c, e): inbox mutations", () =>
    Effect.gen(function*() {
      const inbox = yield* Inbox
      const driver = yield* Driver
      const live = yield* recordLive
      const O = user("O")
      const N = plugin("N")
      const R = user("R")
      yield* inbox.append("next-turn", O)
      yield* inbox.append("next-step", N)
      expect(yield* inbox.replace(asId("missing"), user("Z"))).toBe(false)
      expect(yield* shape).toEqual(["INS(nt,0,[O])", "INS(ns,0,[N])"])
      yield* live
      expect(yield* inbox.replace(O.id, R)).toBe(true)
      expect((yield* shape).slice(-1)).toEqual(["REP(nt,0,[R])"])
      expect((yield* live).map(liveNotation)).toEqual(["discarded(O)", "inserted(R)"])
      expect(yield* inbox.idState(O.id)).toEqual(Option.some("discarded"))
      const N2 = plugin("N", "N prime")
      expect(yield* inbox.replace(N.id, N2)).toBe(true)
      expect(yield* inbox.nextStep).toEqual([N2])
      const dupPending = yield* Effect.flip(inbox.replace(R.id, user("N")))
      expect(dupPending).toBeInstanceOf(DuplicateMessage)
      expect(dupPending).toMatchObject({ id: "N", state: "pending" })
      const dupDiscarded = yield* Effect.flip(inbox.replace(R.id, user("O")))
      expect(dupDiscarded).toMatchObject({ _tag: "DuplicateMessage", id: "O", state: "discarded" })
      // (b)
      const F = user("F")
      const V = user("V")
      const before = (yield* shape).length
      yield* inbox.splice("next-turn", 0, 0, [F, V])
      expect((yield* shape).slice(before)).toEqual(["INS(nt,0,[F,V])"])
      expect(ids(yield* inbox.splice("next-turn", -1, 1, []))).toEqual(["R"])
      expect((yield* shape).slice(-1)).toEqual(["CAN(nt,2,1)"])
      expect(yield* inbox.remove(R.id)).toBe(false)
      const dupF = yield* Effect.flip(inbox.append("next-step", F))
      expect(dupF).toMatchObject({ _tag: "DuplicateMessage", state: "pending" })
      const length = (yield* shape).length
      const bad = yield* Effect.flip(inbox.splice("next-turn", NaN, 0, [user("H")]))
      expect(bad).toBeInstanceOf(InvalidSplice)
      expect(yield* inbox.splice("next-turn", 5, 0, [])).toEqual([])
      expect((yield* shape).length).toBe(length)
      expect(yield* inbox.idState(asId("H"))).toEqual(Option.none())
      // (c)
      yield* live
      yield* inbox.clear
      expect((yield* shape).slice(-2)).toEqual(["CAN(ns,0,1)", "CAN(nt,0,2)"])
      expect((yield* live).map(liveNotation)).toEqual(["discarded(N)", "discarded(F)", "discarded(V)"])
      yield* inbox.clear
      expect((yield* shape).length).toBe(length + 2)
      // (e)
      const C = plugin("C")
      const P = user("P")
      yield* driver.inject(C)
      yield* inbox.remove(C.id)
      yield* driver.followup(P)
      expect((yield* shape).slice(length + 2, length + 7)).toEqual(["INS(ns,0,[C])", "CAN(ns,0,1)", "INS(nt,0,[P])", "TS(1)", "CLM(nt,0,1)"])
      const l = (yield* live).map(liveNotation)
      expect(l.filter((s) => s.startsWith("inserted"))).toEqual(["inserted(C)", "inserted(P)"])
      expect(l.filter((s) => s.startsWith("discarded"))).toEqual(["discarded(C)"])
      expect(l.filter((s) => s.startsWith("claimed"))).toEqual(["claimed(P,1)"])
      yield* driver.whenIdle
      expect(JSON.stringify(yield* requests)).not.toContain("\"C\"")
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario([ScriptedModel.text("ok")]))))

  it.scoped("P39 (d): resuming a log whose event 0 is an out-of-range splice fails MalformedLog {seq: 0}", () =>
    Effect.gen(function*() {
      const storeCtx = yield* Layer.build(SessionStore.layerMemory)
      const store = Context.get(storeCtx, SessionStore)
      const id = SessionId.make("s")
      yield* store.create({ formatVersion: 1, sessionId: id, createdAt: 0, seedLength: 0 }, [
        {
          type: "agent/inbox/spliced",
          seq: 0,
          time: 0,
          data: { target: "next-turn", start: 1, inserted: [user("X")] }
        } as any
      ])
      const exit = yield* Effect.exit(Layer.build(agentOver([], { resume: true }).pipe(Layer.provide(Layer.succeedContext(storeCtx)))))
      expect(Exit.isFailure(exit)).toBe(true)
      const error = Exit.isFailure(exit) ? Option.getOrUndefined(Cause.failureOption(exit.cause)) : undefined
      expect(error).toBeInstanceOf(MalformedLog)
      expect(error).toMatchObject({ seq: 0 })
    }))

  const G40 = gate()
  it.scoped("P40 (a): a wake during maintenance is latched and runs when the task ends", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const live = yield* recordLive
      const task = yield* Effect.fork(driver.runMaintenance(Deferred.await(G40).pipe(Effect.as(42))))
      yield* settle
      yield* driver.followup(user("W"))
      expect(yield* shape).toEqual(["INS(nt,0,[W])"])
      expect(yield* driver.status).toBe("idle")
      expect((yield* live).map(liveNotation)).toEqual(["inserted(W)"])
      yield* open(G40)
      expect(yield* Fiber.join(task)).toBe(42)
      yield* driver.whenIdle
      expect((yield* shape).slice(1, 3)).toEqual(["TS(1)", "CLM(nt,0,1)"])
      expect(yield* texts).toEqual(["W"])
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario([ScriptedModel.text("w")]))))

  it.scoped("P40 (b): a latched wake removed before the task ends opens no turn", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const inbox = yield* Inbox
      const G = gate()
      const task = yield* Effect.fork(driver.runMaintenance(Deferred.await(G)))
      yield* settle
      yield* driver.followup(user("W"))
      yield* inbox.remove(asId("W"))
      yield* open(G)
      yield* Fiber.join(task)
      yield* driver.whenIdle
      expect((yield* shape).filter((s) => s.startsWith("TS"))).toEqual([])
      expect(yield* requests).toEqual([])
    }).pipe(Effect.provide(scenario([ScriptedModel.text("w")]))))

  it.scoped("P40 (c): a broad cancel of a task clears the latch; MaintenanceAborted; a later follow-up runs", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const task = yield* Effect.fork(driver.runMaintenance(Effect.never))
      yield* settle
      yield* driver.followup(user("A"))
      yield* driver.cancel(CancelCause.user)
      expect((yield* shape).slice(-1)).toEqual(["CAN(nt,0,1)"])
      const failure = yield* Effect.flip(Fiber.join(task))
      expect(failure).toBeInstanceOf(MaintenanceAborted)
      expect(failure).toMatchObject({ cause: { kind: "user" } })
      yield* driver.followup(user("B"))
      yield* driver.whenIdle
      expect(yield* texts).toEqual(["B"])
      expect(yield* requests).toHaveLength(1)
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario([ScriptedModel.text("b")]))))

  it.scoped("P40 (d): runMaintenance while running or during another task fails AgentBusy", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "assistant/chunk")
      const busy = yield* Effect.flip(driver.runMaintenance(Effect.void))
      expect(busy).toBeInstanceOf(AgentBusy)
      expect(busy).toMatchObject({ operation: "runMaintenance", phase: "running" })
      yield* driver.cancel(CancelCause.user)
      yield* driver.whenIdle
      const task = yield* Effect.fork(driver.runMaintenance(Effect.never))
      yield* settle
      const busy2 = yield* Effect.flip(driver.runMaintenance(Effect.void))
      expect(busy2).toMatchObject({ _tag: "AgentBusy", phase: "maintenance" })
      yield* driver.cancel(CancelCause.user)
      yield* Effect.exit(Fiber.join(task))
    }).pipe(Effect.provide(scenario([ScriptedModel.hang({ text: "x" })]))))

  it.scoped("P41: a pending injection survives shutdown and resume; the crash image holds it too", () =>
    Effect.gen(function*() {
      const storeCtx = yield* Layer.build(SessionStore.layerMemory)
      const store = Context.get(storeCtx, SessionStore)
      const control = Context.get(storeCtx, MemoryStoreControl)
      const scope = yield* Scope.make()
      const ctx = yield* Layer.buildWithScope(
        agentOver([ScriptedModel.text("a")]).pipe(Layer.provide(Layer.succeedContext(storeCtx))),
        scope
      )
      const driver = Context.get(ctx, Driver)
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      const N = plugin("N")
      yield* driver.inject(N)
      const image = yield* control.snapshot
      yield* Scope.close(scope, Exit.void)
      const stored = (yield* store.load(SessionId.make("s"))).events.map(notation)
      expect(stored.slice(-2)).toEqual(["TE(1,completed)", "INS(ns,0,[N])"])
      expect(stored.filter((s) => s.startsWith("CAN"))).toEqual([])
      const lifecycle2 = Effect.gen(function*() {
        const d2 = yield* Driver
        const inbox = yield* Inbox
        const before = yield* shape
        expect(before[before.length - 1]).toBe("ES")
        expect(ids(yield* inbox.nextStep)).toEqual(["N"])
        expect(yield* d2.status).toBe("idle")
        expect(before.filter((s) => s === "TS(2)")).toEqual([])
        yield* d2.followup(user("Q"))
        yield* d2.whenIdle
        const after = (yield* shape).slice(before.length)
        expect(after.slice(0, 8)).toEqual(["INS(nt,0,[Q])", "TS(2)", "CLM(ns,0,1)", "CLM(nt,0,1)", "SS(2,1)", "UM(N)", "UM(Q)", "RH(resume)"])
        expect(yield* closeOut).toEqual([])
      })
      yield* lifecycle2.pipe(
        Effect.provide(agentOver([ScriptedModel.text("q")], { resume: true }).pipe(Layer.provide(Layer.succeedContext(storeCtx))))
      )
      // Crash variant.
      yield* Effect.gen(function*() {
        const inbox = yield* Inbox
        expect(ids(yield* inbox.nextStep)).toEqual(["N"])
      }).pipe(Effect.provide(agentOver([], { resume: true }).pipe(Layer.provide(SessionStore.layerMemoryFrom(image)))))
    }))
})