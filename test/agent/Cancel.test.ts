/**
 * Cancellation, latch, disposal, inbox mutations, maintenance and shutdown/resume scenarios
 * (SPEC 9, P31-P41; cancel windows of SPEC 7.2).
 */
import { describe, expect, it } from "@effect/vitest"
import { Chunk, Context, Deferred, Effect, Exit, Fiber, Layer, Option, Queue, Ref, Schema, Scope, Stream } from "effect"
import { checkLog } from "../../src/domain/Check.js"
import type { DriverEvent } from "../../src/domain/DriverEvent.js"
import {
  AgentBusy,
  AgentDisposed,
  DuplicateMessage,
  InvalidSplice,
  MaintenanceAborted,
  MalformedLog
} from "../../src/domain/Errors.js"
import type { EventOf, SessionEvent } from "../../src/domain/Event.js"
import { LOG_FORMAT_VERSION } from "../../src/domain/Event.js"
import { MessageId, SessionId } from "../../src/domain/Ids.js"
import type { AgentStatus, AssistantMessage, ToolResultMessage } from "../../src/domain/Values.js"
import { CancelCause } from "../../src/domain/Values.js"
import { Agent } from "../../src/layers/Agent.js"
import type { ScriptEntry } from "../../src/layers/ScriptedModel.js"
import { ScriptedModel } from "../../src/layers/ScriptedModel.js"
import { Driver } from "../../src/services/Driver.js"
import { Hooks } from "../../src/services/Hooks.js"
import { Inbox } from "../../src/services/Inbox.js"
import { PreStep } from "../../src/services/PreStep.js"
import { SessionLog } from "../../src/services/SessionLog.js"
import type { StoreSnapshot } from "../../src/services/SessionStore.js"
import { MemoryStoreControl, SessionStore } from "../../src/services/SessionStore.js"
import { Tool, Tools } from "../../src/services/Tools.js"
import {
  agentTest,
  events as eventsOf,
  hasChunk,
  liveOf,
  notation,
  plugin,
  scenario,
  shape,
  TEXT,
  texts,
  turnEndsOf,
  user,
  waitUntil
} from "./harness.js"

// ---------------------------------------------------------------------------------------------
// Helpers

/** Everything a live subscription has received so far. */
const drain = (queue: Queue.Dequeue<DriverEvent>) =>
  Effect.map(Queue.takeAll(queue), (chunk) => Chunk.toArray(chunk).map(liveOf))

/** Records a stream into a ref from a forked fiber; waits for `first` elements. */
const record = <A>(stream: Stream.Stream<A>, first = 0) =>
  Effect.gen(function*() {
    const seen = yield* Ref.make<ReadonlyArray<A>>([])
    yield* Effect.forkScoped(Stream.runForEach(stream, (a) => Ref.update(seen, (all) => [...all, a])))
    yield* waitUntil(Effect.map(Ref.get(seen), (all) => all.length >= first), "the first element")
    return Ref.get(seen)
  })

/** Moves everything a live subscription receives into a ref, from a forked fiber. */
const recordLive = (driver: Context.Tag.Service<Driver>) =>
  Effect.gen(function*() {
    const queue = yield* driver.subscribe
    const seen = yield* Ref.make<ReadonlyArray<string>>([])
    yield* Effect.forkScoped(
      Effect.forever(Effect.flatMap(Queue.take(queue), (e) => Ref.update(seen, (all) => [...all, liveOf(e)])))
    )
    return Ref.get(seen)
  })

/** The status trace of a driver (starting with the current status). */
const traceOf = (
  driver: Context.Tag.Service<Driver>
): Effect.Effect<Effect.Effect<ReadonlyArray<AgentStatus>>, never, Scope.Scope> => record(driver.statusChanges, 1)

const textOf = (message: unknown): string | undefined => {
  const block = (message as { content: ReadonlyArray<{ type: string; text?: string }> }).content[0]
  return block?.type === "text" ? block.text : undefined
}

const userCause = { kind: "aborted", reason: { kind: "user" } }

/** An agent layer over the store of the environment (for lifecycles that outlive one agent). */
const agentOn = (
  target: { readonly sessionId: SessionId } | { readonly resume: SessionId },
  script: ReadonlyArray<ScriptEntry>
) =>
  Agent.layer({ ...target, model: { provider: "p", model: "m" }, invariants: "check" }).pipe(
    Layer.provideMerge(Layer.mergeAll(ScriptedModel.layer(script), Tools.layer()))
  )

const S = SessionId.make("s")

// ---------------------------------------------------------------------------------------------

describe("cancellation (SPEC 7, P31-P37)", () => {
  agentTest(
    "P31: cancel while streaming records the interrupted prefix",
    scenario([ScriptedModel.hang({ text: "partial" }), ScriptedModel.text("after")]),
    function*({ driver, log, model }) {
      const A = user("A")
      const B = user("B")
      yield* driver.followup(A)
      yield* waitUntil(hasChunk("text-delta"), "the text-delta chunk")
      yield* driver.cancel(CancelCause.user)
      yield* driver.whenIdle
      const turn1 = [
        "INS(nt,0,[A])",
        "TS(1)",
        "CLM(nt,0,1)",
        "SS(1,1)",
        "UM(A)",
        "RH(initial)",
        "CH(block-start)",
        "CH(text-delta)",
        "AM!",
        "SE(1,1)",
        "TE(1,aborted(user))"
      ]
      expect(yield* shape).toEqual(turn1)
      const events = yield* log.events
      const am = events.find((e) => e.type === "assistant/message") as EventOf<"assistant/message">
      expect(am.data.interrupted).toBe(true)
      expect(am.data.message.content).toEqual([{ type: "text", text: "partial" }])
      const chunkSeqs = events.filter((e) => e.type === "assistant/chunk").map((e) => e.seq)
      expect(chunkSeqs).toEqual([6, 7])
      expect(am.sourceEventSeqs).toEqual(chunkSeqs)
      expect(turnEndsOf(events)).toEqual([userCause])

      yield* driver.followup(B)
      yield* driver.whenIdle
      expect(yield* shape).toEqual([
        ...turn1,
        "INS(nt,0,[B])",
        "TS(2)",
        "CLM(nt,0,1)",
        "SS(2,1)",
        "UM(B)",
        ...TEXT,
        "SE(2,1)",
        "TE(2,completed)"
      ])
      const requests = yield* model.requests
      expect(requests.length).toBe(2)
      const second = requests[1]!.messages
      expect(second.length).toBe(3)
      expect(second[0]).toEqual(A)
      expect(second[1]!.role).toBe("assistant")
      expect((second[1] as AssistantMessage).content).toEqual([{ type: "text", text: "partial" }])
      expect(second[2]).toEqual(B)
      expect(checkLog(yield* log.events, { closed: true })).toEqual([])
    }
  )

  it.scoped("P32: cancel after the assistant message, before tools", () =>
    Effect.gen(function*() {
      const handle = yield* Deferred.make<Context.Tag.Service<Driver>>()
      const invocations = yield* Ref.make(0)
      const danger = Tool.make("danger", {
        description: "counts invocations",
        parameters: Schema.Struct({}),
        execute: () => Effect.as(Ref.update(invocations, (n) => n + 1), "done")
      })
      const cancelFromStream = Effect.flatMap(Deferred.await(handle), (driver) => driver.cancel(CancelCause.user))
      const script = [
        ScriptedModel.response({
          toolCalls: [{ id: "c1", name: "danger", arguments: {} }],
          afterFinish: cancelFromStream
        }),
        ScriptedModel.text("after")
      ]
      yield* Effect.gen(function*() {
        const driver = yield* Driver
        const log = yield* SessionLog
        const model = yield* ScriptedModel
        yield* Deferred.succeed(handle, driver)
        yield* driver.followup(user("A"))
        yield* driver.whenIdle
        yield* driver.followup(user("B"))
        yield* driver.whenIdle
        expect(yield* shape).toEqual([
          "INS(nt,0,[A])",
          "TS(1)",
          "CLM(nt,0,1)",
          "SS(1,1)",
          "UM(A)",
          "RH(initial)",
          "CH(block-start)",
          "CH(tool-call-delta)",
          "CH(block-end)",
          "CH(finish stop)",
          "AM",
          "TC(c1)",
          "TR⊘(c1)",
          "SE(1,1)",
          "TE(1,aborted(user))",
          "INS(nt,0,[B])",
          "TS(2)",
          "CLM(nt,0,1)",
          "SS(2,1)",
          "UM(B)",
          ...TEXT,
          "SE(2,1)",
          "TE(2,completed)"
        ])
        expect(yield* Ref.get(invocations)).toBe(0)
        const events = yield* log.events
        expect(turnEndsOf(events)).toEqual([userCause, { kind: "completed" }])
        const requests = yield* model.requests
        expect(requests.length).toBe(2)
        const result = requests[1]!.messages.find((m) =>
          m.role === "user" && (m as ToolResultMessage).content[0]?.type === "tool-result"
        ) as ToolResultMessage | undefined
        expect(result).toBeDefined()
        const block = result!.content[0] as { toolCallId: string; isError: boolean }
        expect(block.toolCallId).toBe("c1")
        expect(block.isError).toBe(true)
        expect(checkLog(events, { closed: true })).toEqual([])
      }).pipe(Effect.provide(scenario(script, { tools: [danger] })))
    }))

  const parallelCancel = (keepInbox: boolean) =>
    Effect.gen(function*() {
      const started = yield* Queue.unbounded<string>()
      const block = Tool.make("block", {
        description: "never finishes",
        parameters: Schema.Struct({}),
        mode: "parallel",
        execute: (_params, ctx) => Effect.zipRight(Queue.offer(started, ctx.callId), Effect.never)
      })
      const calls = ["c1", "c2", "c3", "c4"].map((id) => ({ id, name: "block", arguments: {} }))
      const script = [ScriptedModel.response({ toolCalls: calls }), ScriptedModel.text("w")]
      yield* Effect.gen(function*() {
        const driver = yield* Driver
        const hooks = yield* Hooks
        const inbox = yield* Inbox
        const log = yield* SessionLog
        const posted = yield* Ref.make<ReadonlyArray<string>>([])
        yield* hooks.onToolPost((input, next) =>
          Effect.gen(function*() {
            yield* Ref.update(posted, (all) => [...all, `${input.callId}:${input.aborted}`])
            const output = yield* next()
            return { ...output, additionalContexts: [...output.additionalContexts, plugin(`ctx-${input.callId}`)] }
          })
        )
        const live = yield* driver.subscribe
        yield* driver.followup(user("A"))
        const first = yield* Queue.take(started)
        const second = yield* Queue.take(started)
        expect([first, second]).toEqual(["c1", "c2"])
        yield* driver.cancel(CancelCause.user, { keepInbox })
        yield* driver.whenIdle
        const toolChunks = calls.flatMap(() => ["CH(block-start)", "CH(tool-call-delta)", "CH(block-end)"])
        const head = [
          "INS(nt,0,[A])",
          "TS(1)",
          "CLM(nt,0,1)",
          "SS(1,1)",
          "UM(A)",
          "RH(initial)",
          ...toolChunks,
          "CH(finish stop)",
          "AM",
          "TC(c1)",
          "TC(c2)"
        ]
        const results = keepInbox
          ? ["TR✗(c1)", "INS(ns,0,[ctx-c1])", "TR✗(c2)", "INS(ns,1,[ctx-c2])"]
          : ["TR✗(c1)", "INS(ns,0,[ctx-c1])", "CAN(ns,0,1)", "TR✗(c2)", "INS(ns,0,[ctx-c2])", "CAN(ns,0,1)"]
        const turn1 = [
          ...head,
          ...results,
          "TC(c3)",
          "TR⊘(c3)",
          "TC(c4)",
          "TR⊘(c4)",
          "SE(1,1)",
          "TE(1,aborted(user))"
        ]
        expect(yield* shape).toEqual(turn1)
        expect(yield* Queue.size(started)).toBe(0) // c3 and c4 never ran
        expect(yield* Ref.get(posted)).toEqual(["c1:true", "c2:true"])
        const live1 = yield* drain(live)
        expect(live1).toEqual([
          "inserted(A)",
          "status(running)",
          "claimed(A,1)",
          ...(keepInbox
            ? ["inserted(ctx-c1)", "inserted(ctx-c2)"]
            : ["inserted(ctx-c1)", "discarded(ctx-c1)", "inserted(ctx-c2)", "discarded(ctx-c2)"]),
          "status(idle)"
        ])
        expect((yield* inbox.nextStep).map((m) => m.id)).toEqual(keepInbox ? ["ctx-c1", "ctx-c2"] : [])

        yield* driver.followup(user("W"))
        yield* driver.whenIdle
        expect(yield* shape).toEqual([
          ...turn1,
          "INS(nt,0,[W])",
          "TS(2)",
          ...(keepInbox
            ? ["CLM(ns,0,2)", "CLM(nt,0,1)", "SS(2,1)", "UM(ctx-c1)", "UM(ctx-c2)", "UM(W)"]
            : ["CLM(nt,0,1)", "SS(2,1)", "UM(W)"]),
          ...TEXT,
          "SE(2,1)",
          "TE(2,completed)"
        ])
        expect(checkLog(yield* log.events, { closed: true })).toEqual([])
      }).pipe(Effect.provide(scenario(script, { tools: [block], maxParallelToolCalls: 2 })))
    })

  it.scoped("P33: cancel during parallel tools discards the draining step's contexts (D8)", () => parallelCancel(false))

  it.scoped("P33: keepInbox cancel during parallel tools keeps the contexts pending (D8)", () => parallelCancel(true))

  agentTest("P34: cancel right after waking follow-ups", scenario([]), function*() {
    const G = yield* Deferred.make<void>()
    const driver = yield* Driver
    const inbox = yield* Inbox
    const preStep = yield* PreStep
    const model = yield* ScriptedModel
    yield* preStep.register((_input, next) => Effect.zipRight(Deferred.await(G), next()))
    const live = yield* driver.subscribe
    const A = user("A")
    const B = user("B")
    yield* driver.followup(A)
    yield* driver.followup(B)
    yield* driver.cancel(CancelCause.user)
    yield* driver.whenIdle
    expect(yield* shape).toEqual([
      "INS(nt,0,[A])",
      "TS(1)",
      "CLM(nt,0,1)",
      "INS(nt,0,[B])",
      "CAN(nt,0,1)",
      "TE(1,aborted(user))"
    ])
    expect(yield* drain(live)).toEqual([
      "inserted(A)",
      "status(running)",
      "claimed(A,1)",
      "inserted(B)",
      "discarded(B)",
      "status(idle)"
    ])
    expect(yield* inbox.idState(A.id)).toEqual(Option.some("claimed"))
    expect(yield* inbox.idState(B.id)).toEqual(Option.some("discarded"))
    expect(yield* driver.status).toBe("idle")
    expect((yield* model.requests).length).toBe(0)
    expect(checkLog(yield* eventsOf, { closed: true })).toEqual([])
  })

  agentTest(
    "P35: keepInbox parks pre-abort work (D3)",
    scenario([ScriptedModel.hang({ text: "a" }), ScriptedModel.text("b"), ScriptedModel.text("w")]),
    function*({ driver, inbox, model }) {
      yield* driver.followup(user("A"))
      yield* waitUntil(hasChunk("text-delta"), "the first text chunk")
      yield* driver.followup(user("B"))
      yield* driver.cancel(CancelCause.user, { keepInbox: true })
      yield* driver.whenIdle
      expect(yield* texts).toEqual(["A"])
      expect((yield* inbox.nextTurn).map((m) => m.id)).toEqual(["B"])
      expect((yield* model.requests).length).toBe(1)
      const turn1 = [
        "INS(nt,0,[A])",
        "TS(1)",
        "CLM(nt,0,1)",
        "SS(1,1)",
        "UM(A)",
        "RH(initial)",
        "CH(block-start)",
        "CH(text-delta)",
        "INS(nt,0,[B])",
        "AM!",
        "SE(1,1)",
        "TE(1,aborted(user))"
      ]
      expect(yield* shape).toEqual(turn1)
      expect(yield* driver.status).toBe("idle")

      yield* driver.followup(user("W"))
      yield* driver.whenIdle
      expect(yield* shape).toEqual([
        ...turn1,
        "INS(nt,1,[W])",
        "TS(2)",
        "CLM(nt,0,1)",
        "SS(2,1)",
        "UM(B)",
        ...TEXT,
        "SE(2,1)",
        "TE(2,completed)",
        "TS(3)",
        "CLM(nt,0,1)",
        "SS(3,1)",
        "UM(W)",
        ...TEXT,
        "SE(3,1)",
        "TE(3,completed)"
      ])
      expect(yield* texts).toEqual(["A", "B", "W"])
      expect((yield* model.requests).length).toBe(3)
      expect(checkLog(yield* eventsOf, { closed: true })).toEqual([])
    }
  )

  it.scoped("P36: a wake after a keepInbox cancel is latched and replayed", () =>
    Effect.gen(function*() {
      const G = yield* Deferred.make<void>()
      yield* Effect.gen(function*() {
        const driver = yield* Driver
        const model = yield* ScriptedModel
        const trace = yield* traceOf(driver)
        yield* driver.followup(user("A"))
        yield* waitUntil(Effect.map(model.requests, (r) => r.length === 1), "the first request")
        yield* driver.cancel(CancelCause.user, { keepInbox: true })
        yield* driver.followup(user("B"))
        const idle = yield* Effect.fork(driver.whenIdle)
        for (let i = 0; i < 50; i++) yield* Effect.yieldNow()
        expect(yield* Fiber.poll(idle)).toEqual(Option.none()) // converging waits for the stream's interruption
        expect(yield* driver.status).toBe("running")
        yield* Deferred.succeed(G, undefined)
        yield* Fiber.join(idle)
        // whenIdle resolved only after turn 2 (the latched replay) ended.
        const events = yield* eventsOf
        expect(events.map(notation)).toEqual([
          "INS(nt,0,[A])",
          "TS(1)",
          "CLM(nt,0,1)",
          "SS(1,1)",
          "UM(A)",
          "RH(initial)",
          "INS(nt,0,[B])",
          "SE(1,1)",
          "TE(1,aborted(user))",
          "TS(2)",
          "CLM(nt,0,1)",
          "SS(2,1)",
          "UM(B)",
          ...TEXT,
          "SE(2,1)",
          "TE(2,completed)"
        ])
        expect(yield* trace).toEqual(["idle", "running", "idle"])
        expect(checkLog(events, { closed: true })).toEqual([])
      }).pipe(
        Effect.provide(scenario([ScriptedModel.hang({}, { onInterrupt: Deferred.await(G) }), ScriptedModel.text("b")]))
      )
    }))

  it.scoped("P37: the first cause wins", () =>
    Effect.gen(function*() {
      const G = yield* Deferred.make<void>()
      yield* Effect.gen(function*() {
        const driver = yield* Driver
        yield* driver.followup(user("A"))
        yield* waitUntil(hasChunk("text-delta"), "streaming")
        yield* driver.cancel(CancelCause.parent)
        // The turn cannot converge before G: the second cause lands on a running-aborted turn.
        expect(yield* driver.status).toBe("running")
        yield* driver.cancel(CancelCause.user)
        yield* Deferred.succeed(G, undefined)
        yield* driver.whenIdle
        const events = yield* eventsOf
        expect(events.map(notation)).toEqual([
          "INS(nt,0,[A])",
          "TS(1)",
          "CLM(nt,0,1)",
          "SS(1,1)",
          "UM(A)",
          "RH(initial)",
          "CH(block-start)",
          "CH(text-delta)",
          "AM!",
          "SE(1,1)",
          "TE(1,aborted(parent))"
        ])
        expect(turnEndsOf(events)).toEqual([{ kind: "aborted", reason: { kind: "parent" } }])
        expect(checkLog(events, { closed: true })).toEqual([])
      }).pipe(Effect.provide(scenario([ScriptedModel.hang({ text: "partial" }, { onInterrupt: Deferred.await(G) })])))
    }))
})

describe("disposal (SPEC 3.7, P38)", () => {
  it.scoped("P38: disposal keeps the queued tail (D9)", () =>
    Effect.gen(function*() {
      const store = yield* SessionStore
      const agentScope = yield* Scope.make()
      const context = yield* Layer.buildWithScope(
        agentOn({ sessionId: S }, [ScriptedModel.hang({ text: "partial" })]),
        agentScope
      )
      const driver = Context.get(context, Driver)
      const log = Context.get(context, SessionLog)
      const trace = yield* traceOf(driver)
      const live = yield* recordLive(driver)
      yield* driver.followup(user("A"))
      yield* waitUntil(
        Effect.map(log.events, (events) =>
          events.some((e) =>
            e.type === "assistant/chunk" && (e as EventOf<"assistant/chunk">).data.chunk.type === "text-delta"
          )),
        "the text chunk"
      )
      yield* driver.followup(user("T"))
      yield* Scope.close(agentScope, Exit.void)
      const expected = [
        "INS(nt,0,[A])",
        "TS(1)",
        "CLM(nt,0,1)",
        "SS(1,1)",
        "UM(A)",
        "RH(initial)",
        "CH(block-start)",
        "CH(text-delta)",
        "INS(nt,0,[T])",
        "AM!",
        "SE(1,1)",
        "TE(1,aborted(disposed))"
      ]
      const stored = yield* store.load(S)
      expect(stored.events.map(notation)).toEqual(expected)
      expect(turnEndsOf(stored.events)).toEqual([{ kind: "aborted", reason: { kind: "disposed" } }])
      expect(checkLog(stored.events, { closed: true })).toEqual([])
      expect(yield* live).toEqual([
        "inserted(A)",
        "status(running)",
        "claimed(A,1)",
        "inserted(T)",
        "status(idle)"
      ])
      expect(yield* trace).toEqual(["idle", "running", "idle"])
      const refused = yield* Effect.flip(driver.followup(user("X")))
      expect(refused).toBeInstanceOf(AgentDisposed)

      // Resume: T is still pending and nothing runs until a wake.
      yield* Effect.gen(function*() {
        const resumed = yield* Driver
        const inbox = yield* Inbox
        const model = yield* ScriptedModel
        expect((yield* inbox.nextTurn).map((m) =>
          m.id
        )).toEqual(["T"])
        expect(yield* resumed.status).toBe("idle")
        expect((yield* shape).at(-1)).toBe("ES")
        yield* resumed.followup(user("W"))
        yield* resumed.whenIdle
        expect(yield* shape).toEqual([
          ...expected,
          "ES",
          "INS(nt,1,[W])",
          "TS(2)",
          "CLM(nt,0,1)",
          "SS(2,1)",
          "UM(T)",
          "RH(resume)",
          ...TEXT,
          "SE(2,1)",
          "TE(2,completed)",
          "TS(3)",
          "CLM(nt,0,1)",
          "SS(3,1)",
          "UM(W)",
          ...TEXT,
          "SE(3,1)",
          "TE(3,completed)"
        ])
        expect((yield* model.requests).length).toBe(2)
        expect(checkLog(yield* eventsOf, { closed: true })).toEqual([])
      }).pipe(Effect.provide(agentOn({ resume: S }, [ScriptedModel.text("t"), ScriptedModel.text("w")])))
    }).pipe(Effect.provide(SessionStore.layerMemory)))
})

describe("inbox mutations (SPEC 3.8, P39)", () => {
  agentTest("P39 (a)-(c): replace, splice, remove and clear", scenario([]), function*({ inbox }) {
    const live = yield* (yield* Driver).subscribe
    const O = user("O")
    const N = user("N")
    const R = user("R")
    const N2 = user("N", "N edited")
    const F = user("F")
    const V = user("V")
    const H = user("H")
    // (a)
    yield* inbox.append("next-turn", O)
    yield* inbox.append("next-step", N)
    expect(yield* inbox.replace(MessageId.make("missing"), R)).toBe(false)
    expect(yield* shape).toEqual(["INS(nt,0,[O])", "INS(ns,0,[N])"])
    expect(yield* drain(live)).toEqual(["inserted(O)", "inserted(N)"])
    expect(yield* inbox.replace(O.id, R)).toBe(true)
    expect((yield* shape).slice(2)).toEqual(["REP(nt,0,[R])"])
    expect(yield* drain(live)).toEqual(["discarded(O)", "inserted(R)"])
    expect(yield* inbox.idState(O.id)).toEqual(Option.some("discarded"))
    expect(yield* inbox.replace(N.id, N2)).toBe(true)
    expect(yield* inbox.nextStep).toEqual([N2])
    expect((yield* shape).slice(3)).toEqual(["REP(ns,0,[N])"])
    const pendingDup = yield* Effect.flip(inbox.replace(R.id, user("N", "other")))
    expect(pendingDup).toBeInstanceOf(DuplicateMessage)
    expect((pendingDup as DuplicateMessage).state).toBe("pending")
    const discardedDup = yield* Effect.flip(inbox.replace(R.id, user("O", "again")))
    expect(discardedDup).toBeInstanceOf(DuplicateMessage)
    expect((discardedDup as DuplicateMessage).state).toBe("discarded")
    expect((yield* shape).length).toBe(4)
    yield* drain(live)
    // (b)
    expect(yield* inbox.splice("next-turn", 0, 0, [F, V])).toEqual([])
    expect((yield* shape).slice(4)).toEqual(["INS(nt,0,[F,V])"])
    expect(yield* inbox.nextTurn).toEqual([F, V, R])
    expect(yield* inbox.splice("next-turn", -1, 1, [])).toEqual([R])
    expect((yield* shape).slice(5)).toEqual(["CAN(nt,2,1)"])
    expect(yield* inbox.remove(R.id)).toBe(false)
    const dupF = yield* Effect.flip(inbox.append("next-step", F))
    expect(dupF).toBeInstanceOf(DuplicateMessage)
    expect((dupF as DuplicateMessage).state).toBe("pending")
    const nan = yield* Effect.flip(inbox.splice("next-turn", NaN, 0, [H]))
    expect(nan).toBeInstanceOf(InvalidSplice)
    expect(yield* inbox.splice("next-turn", 5, 0, [])).toEqual([])
    expect((yield* shape).length).toBe(6)
    expect(yield* inbox.idState(H.id)).toEqual(Option.none())
    expect(yield* drain(live)).toEqual(["inserted(F)", "inserted(V)", "discarded(R)"])
    // (c)
    yield* inbox.clear
    expect((yield* shape).slice(6)).toEqual(["CAN(ns,0,1)", "CAN(nt,0,2)"])
    expect(yield* drain(live)).toEqual(["discarded(N)", "discarded(F)", "discarded(V)"])
    yield* inbox.clear
    expect((yield* shape).length).toBe(8)
    expect(yield* drain(live)).toEqual([])
    expect(yield* inbox.snapshot).toEqual({ nextTurn: [], nextStep: [] })
    expect(yield* (yield* Driver).status).toBe("idle")
    expect((yield* (yield* ScriptedModel).requests).length).toBe(0)
    expect(checkLog(yield* eventsOf, { closed: true })).toEqual([])
  })

  it.scoped("P39 (d): a stored splice at an impossible index is a malformed log", () =>
    Effect.gen(function*() {
      const store = yield* SessionStore
      const id = SessionId.make("bad")
      const X = user("X")
      yield* store.create(
        { formatVersion: LOG_FORMAT_VERSION, sessionId: id, createdAt: 0, seedLength: 0 },
        [{
          type: "agent/inbox/spliced",
          seq: 0,
          time: 0,
          data: { target: "next-turn", start: 1, inserted: [X] }
        } as unknown as SessionEvent]
      )
      const error = yield* Effect.flip(Effect.scoped(Layer.build(agentOn({ resume: id }, []))))
      expect(error).toBeInstanceOf(MalformedLog)
      expect((error as MalformedLog).seq).toBe(0)
      // The failed open released what it had acquired: a second attempt fails the same way, not AgentBusy.
      const again = yield* Effect.flip(Effect.scoped(Layer.build(agentOn({ resume: id }, []))))
      expect(again).toBeInstanceOf(MalformedLog)
    }).pipe(Effect.provide(SessionStore.layerMemory)))

  agentTest(
    "P39 (e): a removed injection reaches no request",
    scenario([ScriptedModel.text("ok")]),
    function*({ driver, inbox, model }) {
      const live = yield* driver.subscribe
      const C = plugin("C")
      const P = user("P")
      yield* driver.inject(C)
      expect(yield* inbox.remove(C.id)).toBe(true)
      yield* driver.followup(P)
      yield* driver.whenIdle
      expect(yield* shape).toEqual([
        "INS(ns,0,[C])",
        "CAN(ns,0,1)",
        "INS(nt,0,[P])",
        "TS(1)",
        "CLM(nt,0,1)",
        "SS(1,1)",
        "UM(P)",
        "RH(initial)",
        ...TEXT,
        "SE(1,1)",
        "TE(1,completed)"
      ])
      const seen = yield* drain(live)
      expect(seen.filter((s) => s.startsWith("inserted"))).toEqual(["inserted(C)", "inserted(P)"])
      expect(seen.filter((s) => s.startsWith("discarded"))).toEqual(["discarded(C)"])
      expect(seen.filter((s) => s.startsWith("claimed"))).toEqual(["claimed(P,1)"])
      const requests = yield* model.requests
      expect(requests.length).toBe(1)
      expect(requests[0]!.messages).toEqual([P])
      expect(checkLog(yield* eventsOf, { closed: true })).toEqual([])
    }
  )
})

describe("maintenance (SPEC 3.6, P40)", () => {
  const startTask = (driver: Context.Tag.Service<Driver>, G: Deferred.Deferred<void>) =>
    Effect.gen(function*() {
      const started = yield* Deferred.make<void>()
      const fiber = yield* Effect.fork(
        driver.runMaintenance(Effect.zipRight(Deferred.succeed(started, undefined), Effect.as(Deferred.await(G), 42)))
      )
      yield* Deferred.await(started)
      return fiber
    })

  agentTest(
    "P40 (a): a wake during maintenance is latched and runs at the task's exit",
    scenario([ScriptedModel.text("w")]),
    function*({ driver, model }) {
      const trace = yield* traceOf(driver)
      const live = yield* driver.subscribe
      const G = yield* Deferred.make<void>()
      const task = yield* startTask(driver, G)
      yield* driver.followup(user("W"))
      expect(yield* shape).toEqual(["INS(nt,0,[W])"])
      expect(yield* driver.status).toBe("idle")
      expect(yield* drain(live)).toEqual(["inserted(W)"])
      expect((yield* model.requests).length).toBe(0)
      yield* Deferred.succeed(G, undefined)
      expect(yield* Fiber.join(task)).toBe(42)
      // The task-exit transaction itself opened the turn: it is logged when runMaintenance returns.
      expect((yield* shape).slice(0, 3)).toEqual(["INS(nt,0,[W])", "TS(1)", "CLM(nt,0,1)"])
      yield* driver.whenIdle
      expect(yield* shape).toEqual([
        "INS(nt,0,[W])",
        "TS(1)",
        "CLM(nt,0,1)",
        "SS(1,1)",
        "UM(W)",
        "RH(initial)",
        ...TEXT,
        "SE(1,1)",
        "TE(1,completed)"
      ])
      expect(yield* drain(live)).toEqual(["status(running)", "claimed(W,1)", "status(idle)"])
      expect(yield* trace).toEqual(["idle", "running", "idle"])
      expect((yield* model.requests).length).toBe(1)
      expect(checkLog(yield* eventsOf, { closed: true })).toEqual([])
    }
  )

  agentTest(
    "P40 (b): a latched wake removed before the task's exit produces no turn",
    scenario([ScriptedModel.text("w")]),
    function*({ driver, inbox, model }) {
      const trace = yield* traceOf(driver)
      const G = yield* Deferred.make<void>()
      const task = yield* startTask(driver, G)
      const W = user("W")
      yield* driver.followup(W)
      expect(yield* inbox.remove(W.id)).toBe(true)
      yield* Deferred.succeed(G, undefined)
      expect(yield* Fiber.join(task)).toBe(42)
      yield* driver.whenIdle
      expect(yield* shape).toEqual(["INS(nt,0,[W])", "CAN(nt,0,1)"])
      expect((yield* model.requests).length).toBe(0)
      expect(yield* trace).toEqual(["idle"])
      expect(checkLog(yield* eventsOf, { closed: true })).toEqual([])
    }
  )

  agentTest(
    "P40 (c): a broad cancel interrupts the task and clears the latch",
    scenario([ScriptedModel.text("b")]),
    function*({ driver, model }) {
      const G = yield* Deferred.make<void>()
      const task = yield* startTask(driver, G)
      yield* driver.followup(user("A"))
      yield* driver.cancel(CancelCause.user)
      const error = yield* Effect.flip(Fiber.join(task))
      expect(error).toBeInstanceOf(MaintenanceAborted)
      expect((error as MaintenanceAborted).cause).toEqual({ kind: "user" })
      expect(yield* shape).toEqual(["INS(nt,0,[A])", "CAN(nt,0,1)"])
      expect(yield* driver.status).toBe("idle")
      yield* driver.followup(user("B"))
      yield* driver.whenIdle
      expect(yield* texts).toEqual(["B"])
      expect((yield* model.requests).length).toBe(1)
      expect(yield* shape).toEqual([
        "INS(nt,0,[A])",
        "CAN(nt,0,1)",
        "INS(nt,0,[B])",
        "TS(1)",
        "CLM(nt,0,1)",
        "SS(1,1)",
        "UM(B)",
        "RH(initial)",
        ...TEXT,
        "SE(1,1)",
        "TE(1,completed)"
      ])
      expect(checkLog(yield* eventsOf, { closed: true })).toEqual([])
    }
  )

  it.scoped("P40 (d): maintenance needs an idle driver", () =>
    Effect.gen(function*() {
      const G = yield* Deferred.make<void>()
      yield* Effect.gen(function*() {
        const driver = yield* Driver
        yield* driver.followup(user("A"))
        const running = yield* Effect.flip(driver.runMaintenance(Effect.succeed(1)))
        expect(running).toBeInstanceOf(AgentBusy)
        expect(running).toMatchObject({ operation: "runMaintenance", phase: "running" })
        yield* Deferred.succeed(G, undefined)
        yield* driver.whenIdle
        const G2 = yield* Deferred.make<void>()
        const task = yield* startTask(driver, G2)
        const busy = yield* Effect.flip(driver.runMaintenance(Effect.succeed(1)))
        expect(busy).toBeInstanceOf(AgentBusy)
        expect(busy).toMatchObject({ operation: "runMaintenance", phase: "maintenance" })
        yield* Deferred.succeed(G2, undefined)
        expect(yield* Fiber.join(task)).toBe(42)
        expect(yield* shape).toEqual([
          "INS(nt,0,[A])",
          "TS(1)",
          "CLM(nt,0,1)",
          "SS(1,1)",
          "UM(A)",
          "RH(initial)",
          ...TEXT,
          "SE(1,1)",
          "TE(1,completed)"
        ])
        expect(checkLog(yield* eventsOf, { closed: true })).toEqual([])
      }).pipe(Effect.provide(scenario([ScriptedModel.text("a", { awaitBefore: Deferred.await(G) })])))
    }))
})

describe("shutdown and resume (P41)", () => {
  it.scoped("P41: a pending injection survives shutdown and resume (D9, D13)", () =>
    Effect.gen(function*() {
      const store = yield* SessionStore
      const control = yield* MemoryStoreControl
      const N = plugin("N")
      // Lifecycle 1.
      let crash: StoreSnapshot | undefined
      yield* Effect.scoped(
        Effect.gen(function*() {
          const driver = yield* Driver
          yield* driver.followup(user("A"))
          yield* driver.whenIdle
          yield* driver.inject(N)
          crash = yield* control.snapshot
        }).pipe(Effect.provide(agentOn({ sessionId: S }, [ScriptedModel.text("one")])))
      )
      const lifecycle1 = (yield* store.load(S)).events
      expect(checkLog(lifecycle1, { closed: true })).toEqual([])
      const stored = lifecycle1.map(notation)
      expect(stored.slice(-2)).toEqual(["TE(1,completed)", "INS(ns,0,[N])"])
      expect(stored.some((s) => s.startsWith("CAN"))).toBe(false)
      // Lifecycle 2 on the same store.
      yield* Effect.gen(function*() {
        const driver = yield* Driver
        const inbox = yield* Inbox
        const model = yield* ScriptedModel
        expect((yield* shape).at(-1)).toBe("ES")
        expect(yield* shape).toEqual([...stored, "ES"])
        expect(yield* inbox.nextStep).toEqual([N])
        expect(yield* driver.status).toBe("idle")
        expect((yield* model.requests).length).toBe(0)
        yield* driver.followup(user("Q"))
        yield* driver.whenIdle
        expect(yield* shape).toEqual([
          ...stored,
          "ES",
          "INS(nt,0,[Q])",
          "TS(2)",
          "CLM(ns,0,1)",
          "CLM(nt,0,1)",
          "SS(2,1)",
          "UM(N)",
          "UM(Q)",
          "RH(resume)",
          ...TEXT,
          "SE(2,1)",
          "TE(2,completed)"
        ])
        expect((yield* model.requests)[0]!.messages.map((m) => textOf(m))).toEqual(["A", "one", "N", "Q"])
        expect(checkLog(yield* eventsOf, { closed: true })).toEqual([])
      }).pipe(Effect.provide(agentOn({ resume: S }, [ScriptedModel.text("two")])))
      // Crash variant: the image taken right after inject(N) returned.
      expect(crash).toBeDefined()
      yield* Effect.gen(function*() {
        const driver = yield* Driver
        const inbox = yield* Inbox
        expect(yield* shape).toEqual([...stored, "ES"])
        expect(yield* inbox.nextStep).toEqual([N])
        expect(yield* driver.status).toBe("idle")
        expect(checkLog(yield* eventsOf, { closed: true })).toEqual([])
      }).pipe(Effect.provide(agentOn({ resume: S }, []).pipe(Layer.provide(SessionStore.layerMemoryFrom(crash!)))))
    }).pipe(Effect.provide(SessionStore.layerMemory)))
})
