/**
 * Cancel against the rest of the loop (SPEC 3.4, 7.2): windows around checkpoints, turn-stopping and
 * results, cancel on an idle agent.
 */
import { describe, expect, it } from "@effect/vitest"
import { Chunk, Context, Deferred, Effect, Either, Fiber, Option, Stream } from "effect"
import {
  AgentBusy,
  CancelCause,
  Driver,
  PreStep,
  ScriptedModel,
  SessionId,
  SessionLog,
  SessionStore,
  Tool
} from "../../src/index.js"
import {
  cancelOnceEntered,
  disposeWhileHeld,
  gatedContextTool,
  startedUntilReleased,
  streamingAgentHeldByGate
} from "./cancelFixtures.js"
import {
  agentTest,
  asId,
  closeOut,
  dataOfType,
  events,
  gate,
  liveNotation,
  notation,
  open,
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
} from "./harness.js"
import { buildOwn } from "./stores.js"
import { calls, callT, empty } from "./toolFixtures.js"

const ownFailure = new Error("own failure")

const G1 = gate()

describe("7.2 cancel windows", () => {
  agentTest(
    "K9: a cancel during turn-stopping listeners writes no further step and ends the turn aborted",
    scenario([ScriptedModel.text("a")]),
    function*({ driver, hooks }) {
      yield* cancelOnceEntered(driver, (hang) => hooks.onTurnStopping(() => hang))
      expect((yield* shape).slice(-3)).toEqual(["AM", "SE(1,1)", "TE(1,aborted(user))"])
      expect(yield* closeOut).toEqual([])
    }
  )

  agentTest(
    "K10: a cancel while a later boundary's pre-step runs loses that batch: CLM, then TE(aborted), no step",
    scenario([ScriptedModel.text("a")]),
    function*({ driver, inbox, hooks, preStep }) {
      yield* hooks.onTurnStopping((input) => input.step === 1 ? Effect.orDie(driver.inject(plugin("C"))) : Effect.void)
      yield* cancelOnceEntered(
        driver,
        (hang) => preStep.register((input, next) => input.boundary === "later" ? hang : next()),
        { keepInbox: true }
      )
      expect((yield* shape).slice(-4)).toEqual(["SE(1,1)", "INS(ns,0,[C])", "CLM(ns,0,1)", "TE(1,aborted(user))"])
      expect(yield* inbox.hasPending).toBe(false)
      expect(yield* inbox.idState("C" as never)).toMatchObject({ value: "claimed" })
    }
  )

  agentTest(
    "4.6: a call interrupted while its ToolPre hook runs yields ABORTED_BEFORE_DISPATCH; later calls get ⟨TC TR⊘⟩",
    scenario(
      [ScriptedModel.response({
        toolCalls: [{ id: "c1", name: "t", arguments: {} }, { id: "c2", name: "t", arguments: {} }]
      })],
      { tools: [Tool.make("t", { description: "", parameters: empty, execute: () => Effect.succeed("ran") })] }
    ),
    function*({ driver, hooks }) {
      yield* cancelOnceEntered(driver, (hang) => hooks.onToolPre(() => hang))
      expect((yield* shape).slice(-6)).toEqual([
        "TC(c1)",
        "TR⊘(c1)",
        "TC(c2)",
        "TR⊘(c2)",
        "SE(1,1)",
        "TE(1,aborted(user))"
      ])
      expect((yield* dataOfType("tool/result"))[0]!.message.content[0].content[0].text).toBe(
        "Error: tool call aborted before dispatch"
      )
    }
  )

  const started: Array<string> = []
  const tools = [
    Tool.make("fails", {
      description: "",
      parameters: empty,
      mode: "parallel",
      execute: () => Effect.fail(ownFailure)
    }),
    Tool.make("hangs", {
      description: "",
      parameters: empty,
      mode: "parallel",
      execute: (_p, ctx) => Effect.zipRight(Effect.sync(() => started.push(ctx.callId)), Effect.never)
    })
  ]
  agentTest(
    "4.6: on abort a body that already failed with its own error keeps it; a running body gets ABORTED",
    scenario(
      [ScriptedModel.response({
        toolCalls: [{ id: "c1", name: "fails", arguments: {} }, { id: "c2", name: "hangs", arguments: {} }]
      })],
      { tools }
    ),
    function*({ driver }) {
      yield* driver.followup(user("A"))
      yield* until(Effect.sync(() => started.length === 1))
      yield* driver.cancel(CancelCause.user)
      yield* driver.whenIdle
      const results = yield* dataOfType("tool/result")
      expect(results.map((d) => d.error?.code)).toEqual(["TOOL_ERROR", "ABORTED"])
      expect(results[1]!.message.content[0].content[0].text).toBe("Error: tool call aborted")
    }
  )
})

describe("7.2 cancel windows", () => {
  // K9a: "after SE, before the boundary's claim (including during turn-stopping listeners) | no claim;
  // ⟨TE(aborted)⟩; next-step items stay pending (keepInbox)". A steer made before the cause is not latched
  // (7.6: pre-abort work is parked).
  agentTest(
    "K9a: a keepInbox cancel during turn-stopping after the listener steered: no claim, TE(aborted), the steer stays parked",
    scenario([ScriptedModel.text("a")]),
    function*({ driver, hooks, inbox }) {
      const G = gate()
      yield* hooks.onTurnStopping(() =>
        Effect.zipRight(
          Effect.zipRight(driver.steer(user("S")), driver.cancel(CancelCause.user, { keepInbox: true })),
          Deferred.await(G)
        )
      )
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect((yield* shape).slice(-4)).toEqual(["AM", "SE(1,1)", "INS(ns,0,[S])", "TE(1,aborted(user))"])
      expect((yield* inbox.nextStep).map((m) => m.id)).toEqual(["S"])
      expect(yield* driver.status).toBe("idle")
      expect(yield* closeOut).toEqual([])
    }
  )

  // K15: "while disposing | first cause wins; a broad cancel still discards the inbox and the draining
  // step's later contexts". 3.4: dropContexts := true "also while disposing".
  it.scoped("K15/7.5: a broad cancel during disposal discards pending input and the draining step's later contexts; TE records disposed", () =>
    Effect.gen(function*() {
      const G = gate()
      const { driver, log, scope } = yield* buildOwn([callT()], { tools: [gatedContextTool(G)] })
      const live = yield* Effect.flatMap(driver.subscribe, (q) => Effect.succeed(q))
      yield* driver.followup(user("A"))
      yield* Effect.provideService(untilEvent((e) => e.type === "tool/call"), SessionLog, log)
      yield* driver.inject(plugin("P"))
      yield* disposeWhileHeld(
        scope,
        G,
        Effect.gen(function*() {
          yield* until(
            Effect.map(
              Effect.either(driver.runMaintenance(Effect.void)),
              (r) => Either.isLeft(r) && r.left instanceof AgentBusy && r.left.phase === "disposing"
            )
          )
          yield* driver.cancel(CancelCause.user)
        })
      )
      const all = yield* log.events
      expect(all.map(notation).slice(-8)).toEqual([
        "TC(c1)",
        "INS(ns,0,[P])",
        "CAN(ns,0,1)",
        "TR✗(c1)",
        "INS(ns,0,[X])",
        "CAN(ns,0,1)",
        "SE(1,1)",
        "TE(1,aborted(disposed))"
      ])
      const seen = Chunk.toReadonlyArray(yield* Effect.flatMap(Effect.succeed(live), (q) => q.takeAll)).map(
        liveNotation
      )
      expect(seen.filter((s) => s.startsWith("discarded") || s.startsWith("inserted(X") || s.startsWith("inserted(P")))
        .toEqual([
          "inserted(P)",
          "discarded(P)",
          "inserted(X)",
          "discarded(X)"
        ])
    }))

  // 3.7 step 1: "latched := ∅"; "Between steps 1 and 3, deliveries are inserted and stay pending — never
  // latched, never run". A wake latched by an earlier keepInbox cancel is not replayed after disposal.
  it.scoped("3.7/7.6: disposal clears a latch made before it: the aborted turn is not followed by a replay; the wake stays pending", () =>
    Effect.gen(function*() {
      const G = gate()
      const { driver, inbox, scope, storeCtx } = yield* streamingAgentHeldByGate(G)
      yield* driver.cancel(CancelCause.user, { keepInbox: true })
      yield* driver.followup(user("B"))
      yield* disposeWhileHeld(scope, G)
      const stored = (yield* Context.get(storeCtx, SessionStore).load(SessionId.make("s"))).events
      expect(stored.filter((e) => e.type === "turn/start").length).toBe(1)
      expect(stored[stored.length - 1]!.data).toEqual({
        turn: 1,
        reason: { kind: "aborted", reason: { kind: "user" } }
      })
      expect((yield* inbox.nextTurn).map((m) => m.id)).toEqual(["B"])
    }))

  // 7.1: "interrupted tool bodies are awaited, and work that masks interruption delays whenIdle".
  agentTest(
    "7.1: a tool body that masks interruption delays whenIdle until it settles; its result is ABORTED",
    scenario([callT()], {
      tools: [Tool.make("t", {
        description: "t",
        parameters: empty,
        execute: () => Effect.as(Effect.uninterruptible(Deferred.await(G1)), "late")
      })]
    }),
    function*({ driver }) {
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "tool/call")
      yield* driver.cancel(CancelCause.user)
      const idle = yield* Effect.fork(driver.whenIdle)
      yield* settle
      expect(Option.isNone(yield* Fiber.poll(idle))).toBe(true)
      expect(yield* driver.status).toBe("running")
      yield* open(G1)
      yield* Fiber.join(idle)
      expect((yield* shape).slice(-3)).toEqual(["TR✗(c1)", "SE(1,1)", "TE(1,aborted(user))"])
    }
  )

  // K3: "turn open, batch claimed, initial pre-step not finished | ⟨TE(aborted)⟩, no step; the claimed batch
  // is lost (even with keepInbox); broad: other pending items CAN".
  agentTest(
    "K3: a broad cancel during the initial pre-step cancels the other pending items, loses the batch and writes no step",
    scenario([]),
    function*({ driver, preStep, inbox }) {
      const live = yield* recordLive
      const entered = gate()
      yield* preStep.register(() => Effect.zipRight(open(entered), Effect.never))
      yield* driver.inject(plugin("C"))
      yield* driver.followup(user("A"))
      yield* inbox.append("next-turn", user("B"))
      yield* Deferred.await(entered)
      yield* driver.cancel(CancelCause.user)
      yield* driver.whenIdle
      expect(yield* shape).toEqual([
        "INS(ns,0,[C])",
        "INS(nt,0,[A])",
        "TS(1)",
        "CLM(ns,0,1)",
        "CLM(nt,0,1)",
        "INS(nt,0,[B])",
        "CAN(nt,0,1)",
        "TE(1,aborted(user))"
      ])
      expect(yield* inbox.idState(asId("A"))).toEqual(Option.some("claimed"))
      expect(yield* inbox.idState(asId("C"))).toEqual(Option.some("claimed"))
      expect(yield* inbox.idState(asId("B"))).toEqual(Option.some("discarded"))
      expect((yield* live).map(liveNotation)).toEqual([
        "inserted(C)",
        "inserted(A)",
        "status(running)",
        "claimed(C,1)",
        "claimed(A,1)",
        "inserted(B)",
        "discarded(B)",
        "status(idle)"
      ])
      expect(yield* closeOut).toEqual([])
    }
  )
})

describe("7 cancel windows", () => {
  const holder: { driver?: Context.Tag.Service<Driver> } = {}
  const selfCancel = Tool.make("self", {
    description: "",
    parameters: empty,
    execute: () => Effect.as(Effect.orDie(Effect.suspend(() => holder.driver!.cancel(CancelCause.hook("tool")))), "ok")
  })
  agentTest(
    "K13/4.6: a body that cancels and then completes yields ABORTED; ToolPost sees aborted: true",
    scenario(
      [ScriptedModel.response({ toolCalls: [{ id: "c1", name: "self", arguments: {} }] })],
      { tools: [selfCancel] }
    ),
    function*({ driver, hooks }) {
      holder.driver = driver
      const flags: Array<boolean> = []
      yield* hooks.onToolPost((input, next) => Effect.zipRight(Effect.sync(() => flags.push(input.aborted)), next()))
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect((yield* shape).slice(-4)).toEqual(["TC(c1)", "TR✗(c1)", "SE(1,1)", "TE(1,aborted(hook))"])
      expect((yield* dataOfType("turn/end"))[0]!.reason).toEqual({
        kind: "aborted",
        reason: { kind: "hook", reason: "tool" }
      })
      expect(flags).toEqual([true])
      expect(yield* closeOut).toEqual([])
    }
  )

  agentTest(
    "K13: a broad cancel issued from a log observer is not lost",
    scenario([ScriptedModel.hang({ text: "x" })]),
    function*({ driver, log, inbox }) {
      yield* Effect.forkScoped(
        Stream.runForEach(
          log.stream(0),
          (e) => e.type === "assistant/chunk" ? Effect.ignore(driver.cancel(CancelCause.user)) : Effect.void
        )
      )
      yield* driver.followup(user("A"))
      yield* driver.followup(user("B"))
      yield* driver.whenIdle
      expect((yield* shape).filter((s) => s.startsWith("TE") || s.startsWith("CAN"))).toEqual([
        "CAN(nt,0,1)",
        "TE(1,aborted(user))"
      ])
      expect(yield* inbox.hasPending).toBe(false)
    }
  )

  agentTest(
    "K11: a keepInbox cancel right after TX-CLOSE continued the chain aborts the new turn with no step",
    scenario([ScriptedModel.text("a")]),
    function*({ driver, inbox }) {
      yield* (yield* PreStep).register((input, next) =>
        input.turn === 2 ? Effect.zipRight(Effect.never, next()) : next()
      )
      yield* driver.followup(user("A"))
      yield* driver.followup(user("B"))
      yield* driver.followup(user("C"))
      yield* untilEvent((e) => e.type === "turn/start" && (e.data as any).turn === 2)
      yield* driver.cancel(CancelCause.user, { keepInbox: true })
      yield* driver.whenIdle
      const s = yield* shape
      expect(s.slice(s.indexOf("TS(2)"))).toEqual(["TS(2)", "CLM(nt,0,1)", "TE(2,aborted(user))"])
      expect((yield* inbox.nextTurn).map((m) => m.id)).toEqual(["C"])
      expect(yield* closeOut).toEqual([])
    }
  )

  const masked = startedUntilReleased("masked", "done", true)
  agentTest(
    "7.5: a broad cancel after a keepInbox cancel drops the later contexts of the draining step",
    scenario(
      [calls(["c1", "masked"], ["c2", "masked"])],
      { tools: [masked.tool] }
    ),
    function*({ driver, inbox, hooks }) {
      yield* hooks.onToolPost((input, next) =>
        Effect.map(
          next(),
          (o) => ({ ...o, additionalContexts: [...o.additionalContexts, plugin(`ctx-${input.callId}`)] })
        )
      )
      yield* driver.followup(user("A"))
      yield* until(Effect.sync(() => masked.started.length === 2))
      yield* driver.cancel(CancelCause.user, { keepInbox: true })
      yield* settle
      yield* driver.cancel(CancelCause.parent)
      yield* open(masked.release)
      yield* driver.whenIdle
      const s = yield* shape
      expect(s.slice(s.indexOf("TC(c1)"))).toEqual([
        "TC(c1)",
        "TC(c2)",
        "TR✗(c1)",
        "INS(ns,0,[ctx-c1])",
        "CAN(ns,0,1)",
        "TR✗(c2)",
        "INS(ns,0,[ctx-c2])",
        "CAN(ns,0,1)",
        "SE(1,1)",
        "TE(1,aborted(user))"
      ])
      expect(yield* inbox.hasPending).toBe(false)
      expect(yield* closeOut).toEqual([])
    }
  )

  agentTest(
    "K6: a cancel during the backoff sleep keeps the RT and makes no further attempt",
    scenario([ScriptedModel.fail({ message: "x", code: "RATE_LIMIT", status: 429 }), ScriptedModel.text("y")]),
    function*({ driver }) {
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "llm/retry")
      yield* driver.cancel(CancelCause.user)
      yield* driver.whenIdle
      expect((yield* shape).slice(-4)).toEqual(["CH(finish error)", "RT(1)", "SE(1,1)", "TE(1,aborted(user))"])
      expect(yield* requests).toHaveLength(1)
    }
  )

  const G4 = gate()
  agentTest(
    "K4: a cancel during the request hook leaves SS, UM, SE, TE and no request",
    scenario([ScriptedModel.text("x")]),
    function*({ driver, hooks }) {
      yield* hooks.onRequest((_i, next) => Effect.zipRight(Deferred.await(G4), next()))
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "user/message")
      yield* driver.cancel(CancelCause.user)
      yield* driver.whenIdle
      expect(yield* shape).toEqual([
        "INS(nt,0,[A])",
        "TS(1)",
        "CLM(nt,0,1)",
        "SS(1,1)",
        "UM(A)",
        "SE(1,1)",
        "TE(1,aborted(user))"
      ])
      expect(yield* requests).toEqual([])
    }
  )
})

describe("3.4 cancel on an idle agent", () => {
  agentTest(
    "3.4: broad cancel on idle discards next-step then next-turn; keepInbox and an empty idle cancel change nothing",
    scenario([ScriptedModel.text("a")]),
    function*({ driver }) {
      const live = yield* recordLive
      yield* driver.cancel(CancelCause.user)
      expect(yield* events).toEqual([])
      yield* driver.send(user("Q"), "next-turn", false)
      yield* driver.inject(plugin("C"))
      yield* driver.cancel(CancelCause.user, { keepInbox: true })
      expect(yield* shape).toEqual(["INS(nt,0,[Q])", "INS(ns,0,[C])"])
      yield* live
      yield* driver.cancel(CancelCause.user)
      expect((yield* shape).slice(2)).toEqual(["CAN(ns,0,1)", "CAN(nt,0,1)"])
      expect((yield* live).map(liveNotation)).toEqual(["discarded(C)", "discarded(Q)"])
      // Nothing is armed: the next wake runs normally.
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect((yield* dataOfType("turn/end")).map((d) => d.reason.kind)).toEqual(["completed"])
    }
  )

  agentTest(
    "3.3: send(m, next-turn, false) on idle parks; a later wake runs it first",
    scenario([ScriptedModel.text("q"), ScriptedModel.text("a")]),
    function*({ driver }) {
      yield* driver.send(user("Q"), "next-turn", false)
      expect(yield* driver.status).toBe("idle")
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect(yield* texts).toEqual(["Q", "A"])
      expect((yield* dataOfType("step/start")).map((d) => d.turn)).toEqual([1, 2])
    }
  )
})

describe("7.2 windows around checkpoints and turn-stopping", () => {
  agentTest(
    "K4: a cancel while the pre-request checkpoint waits on held storage converges without a request: RH, SE, TE(aborted)",
    scenario([ScriptedModel.text("never")]),
    function*({ driver, control }) {
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
    }
  )

  agentTest(
    "4.7/4.8: a follow-up queued by a turn-stopping listener becomes the next turn of the same activity (one running interval)",
    scenario([ScriptedModel.text("one"), ScriptedModel.text("two")]),
    function*({ driver, hooks }) {
      const live = yield* recordLive
      yield* hooks.onTurnStopping((input) => input.turn === 1 ? driver.followup(user("B")) : Effect.void)
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect((yield* shape).filter((s) => s.startsWith("TS") || s.startsWith("TE") || s.startsWith("SS"))).toEqual([
        "TS(1)",
        "SS(1,1)",
        "TE(1,completed)",
        "TS(2)",
        "SS(2,1)",
        "TE(2,completed)"
      ])
      expect((yield* live).filter((e) => e.type === "agent/status").map(liveNotation)).toEqual([
        "status(running)",
        "status(idle)"
      ])
      expect(yield* texts).toEqual(["A", "B"])
      expect(yield* closeOut).toEqual([])
    }
  )
})
