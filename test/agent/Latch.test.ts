/**
 * The latch (SPEC 7.6) and waking steers: membership across edits, failures, cancels and
 * maintenance, and the windows around parked work.
 */
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Exit, Fiber, Stream, TestClock } from "effect"
import {
  CancelCause,
  Driver,
  Hooks,
  Inbox,
  MaintenanceAborted,
  PreStep,
  PreStepDecision,
  ScriptedModel,
  Tool
} from "../../src/index.js"
import type { AgentStatus, ScriptEntry, UserMessage } from "../../src/index.js"
import {
  agentTest,
  closeOut,
  dataOfType,
  events,
  from,
  gate,
  liveNotation,
  liveNotations,
  open,
  plugin,
  reasons,
  recordLive,
  recordStatus,
  requests,
  scenario,
  settle,
  shape,
  TEXT,
  turnStarts,
  until,
  untilEvent,
  user
} from "./harness.js"
import type { AgentServices } from "./harness.js"
import { calls, empty, holder } from "./toolFixtures.js"

const hold = gate()

/**
 * A test over a call `c1` of a tool `t` whose uninterruptible body waits (then answers "late"), with
 * `replies` after it: prompt `A`; once the body started, `during`; the body is released, the closed
 * log is checked, then `check` (given the status trace recorded from the start).
 */
const whileBodyRuns = (
  name: string,
  replies: ReadonlyArray<ScriptEntry>,
  during: (services: AgentServices) => Generator<any, void, any>,
  check: (status: Effect.Effect<ReadonlyArray<AgentStatus>>) => Generator<any, void, any>
) => {
  const release = gate()
  const started = gate()
  const t = Tool.make("t", {
    description: "t",
    parameters: empty,
    execute: () => Effect.uninterruptible(Effect.zipRight(open(started), Effect.as(Deferred.await(release), "late")))
  })
  agentTest(name, scenario([calls(["c1", "t"]), ...replies], { tools: [t] }), function*(services) {
    const status = yield* recordStatus
    yield* services.driver.followup(user("A"))
    yield* Deferred.await(started)
    yield* Effect.gen(() => during(services))
    yield* open(release)
    expect(yield* closeOut).toEqual([])
    yield* Effect.gen(() => check(status))
  })
}

describe("7.6 the latch", () => {
  const G1 = gate()
  agentTest(
    "7.6: a replay's initial claim takes the oldest next-turn item (parked pre-abort work); the chain continues with the latched wake",
    scenario([
      ScriptedModel.hang({ text: "a" }, { onInterrupt: Deferred.await(G1) }),
      ScriptedModel.text("p"),
      ScriptedModel.text("b")
    ]),
    function*({ driver }) {
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "assistant/chunk")
      yield* driver.followup(user("P"))
      yield* driver.cancel(CancelCause.user, { keepInbox: true })
      yield* driver.followup(user("B"))
      yield* open(G1)
      yield* driver.whenIdle
      expect((yield* events).filter((e) => e.type === "user/message").map((e) => [(e.data as any).id])).toEqual([
        ["A"],
        ["P"],
        ["B"]
      ])
      expect((yield* dataOfType("turn/end")).map((d) => d.reason.kind)).toEqual(["aborted", "completed", "completed"])
    }
  )

  const G2 = gate()
  agentTest(
    "7.6: a latched wake removed before convergence produces no turn",
    scenario([ScriptedModel.hang({ text: "a" }, { onInterrupt: Deferred.await(G2) }), ScriptedModel.text("b")]),
    function*({ driver, inbox }) {
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "assistant/chunk")
      yield* driver.cancel(CancelCause.user, { keepInbox: true })
      yield* driver.followup(user("B"))
      expect(yield* inbox.remove("B" as UserMessage["id"])).toBe(true)
      yield* open(G2)
      yield* driver.whenIdle
      expect((yield* dataOfType("turn/start")).map((d) => d.turn)).toEqual([1])
    }
  )
})

describe("7.6 the latch / 3.10 ordering", () => {
  // 7.6: "Cleared (latched := ∅) … by TX-OPEN". Two wakes latched during maintenance: the end of the task
  // opens a turn for the oldest; the other is then ordinary next-turn work of the chain. A keepInbox cancel of
  // that turn parks it (it is no longer latched), so no replay follows.
  agentTest(
    "7.6: TX-OPEN clears the latch: after a maintenance replay's turn is cancelled (keepInbox), the second wake is parked",
    scenario([ScriptedModel.hang({ text: "x" })]),
    function*({ driver, inbox }) {
      const T = gate()
      const task = yield* Effect.fork(driver.runMaintenance(Deferred.await(T)))
      yield* settle
      yield* driver.followup(user("A"))
      yield* driver.followup(user("B"))
      yield* open(T)
      yield* Fiber.join(task)
      yield* untilEvent((e) => e.type === "assistant/chunk")
      yield* driver.cancel(CancelCause.user, { keepInbox: true })
      yield* driver.whenIdle
      expect(yield* turnStarts).toEqual([1])
      expect((yield* inbox.nextTurn).map((m) => m.id)).toEqual(["B"])
      expect(yield* driver.status).toBe("idle")
      expect(yield* closeOut).toEqual([])
    }
  )

  // 3.5: "consecutive turns of one activity share one running interval, including latched replays";
  // 3.10: claimed events of the replay follow the turn/end; status idle follows the last turn/end.
  agentTest(
    "3.5/3.10: a latched replay shares the running interval; live: inserted(B) then claimed(B,2), one status(idle) at the end",
    scenario([ScriptedModel.hang({ text: "x" }), ScriptedModel.text("b")]),
    function*({ driver }) {
      const live = yield* recordLive
      const status = yield* recordStatus
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "assistant/chunk")
      yield* driver.cancel(CancelCause.user, { keepInbox: true })
      yield* driver.followup(user("B"))
      yield* driver.whenIdle
      expect((yield* live).map(liveNotation)).toEqual([
        "inserted(A)",
        "status(running)",
        "claimed(A,1)",
        "inserted(B)",
        "claimed(B,2)",
        "status(idle)"
      ])
      expect(yield* status).toEqual(["idle", "running", "idle"])
      expect(yield* reasons).toEqual([{ kind: "aborted", reason: { kind: "user" } }, { kind: "completed" }])
      expect(yield* closeOut).toEqual([])
    }
  )
})

describe("7.6 / 3.6: latches under cancels and maintenance", () => {
  agentTest(
    "3.4/7.6: a broad cancel while the aborted turn converges discards a wake latched meanwhile: no replay; the first cause stays",
    scenario([ScriptedModel.hang({ text: "partial" }, { onInterrupt: Deferred.await(hold) })]),
    function*({ driver, inbox }) {
      yield* driver.followup(user("A"))
      yield* until(Effect.map(shape, (s) => s.includes("CH(text-delta)")))
      yield* driver.cancel(CancelCause.user, { keepInbox: true })
      yield* driver.followup(user("B"))
      yield* driver.cancel(CancelCause.parent)
      expect(yield* driver.status).toBe("running")
      yield* open(hold)
      expect(yield* closeOut).toEqual([])
      const s = yield* shape
      expect(s.slice(s.indexOf("CH(text-delta)"))).toEqual([
        "CH(text-delta)",
        "INS(nt,0,[B])",
        "CAN(nt,0,1)",
        "AM!",
        "SE(1,1)",
        "TE(1,aborted(user))"
      ])
      expect(yield* inbox.hasPending).toBe(false)
      expect(yield* driver.status).toBe("idle")
      expect(yield* requests).toHaveLength(1)
    }
  )

  agentTest(
    "3.6/7.6: a broad cancel of a task that masks interruption clears the earlier latch; a wake after it latches and replays; the value is returned",
    scenario([ScriptedModel.text("x")]),
    function*({ driver }) {
      const g = gate()
      const started = gate()
      const task = yield* Effect.fork(
        driver.runMaintenance(
          Effect.uninterruptible(Effect.zipRight(open(started), Deferred.await(g))).pipe(Effect.as(42))
        )
      )
      yield* Deferred.await(started)
      yield* driver.followup(user("A"))
      yield* driver.cancel(CancelCause.user)
      yield* driver.followup(user("B"))
      expect(yield* shape).toEqual(["INS(nt,0,[A])", "CAN(nt,0,1)", "INS(nt,0,[B])"])
      yield* open(g)
      expect(yield* Fiber.join(task)).toBe(42)
      expect(yield* closeOut).toEqual([])
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
    }
  )

  agentTest(
    "7.6/3.10: a maintenance replay claims the oldest next-turn item (quiet-queued before) first; the chain continues with the latched wake",
    scenario([ScriptedModel.text("one"), ScriptedModel.text("two")]),
    function*({ driver }) {
      const g = gate()
      const started = gate()
      yield* driver.send(user("Q"), "next-turn", false)
      const live = yield* recordLive
      const task = yield* Effect.fork(driver.runMaintenance(Effect.zipRight(open(started), Deferred.await(g))))
      yield* Deferred.await(started)
      yield* driver.followup(user("A"))
      yield* open(g)
      yield* Fiber.join(task)
      expect(yield* closeOut).toEqual([])
      expect(yield* shape).toEqual([
        "INS(nt,0,[Q])",
        "INS(nt,1,[A])",
        "TS(1)",
        "CLM(nt,0,1)",
        "SS(1,1)",
        "UM(Q)",
        "RH(initial)",
        ...TEXT,
        "SE(1,1)",
        "TE(1,completed)",
        "TS(2)",
        "CLM(nt,0,1)",
        "SS(2,1)",
        "UM(A)",
        ...TEXT,
        "SE(2,1)",
        "TE(2,completed)"
      ])
      expect(yield* liveNotations(live)).toEqual([
        "inserted(A)",
        "status(running)",
        "claimed(Q,1)",
        "claimed(A,2)",
        "status(idle)"
      ])
    }
  )

  agentTest(
    "3.6/D5: runMaintenance called from a Driver.events observer of status idle runs; a follow-up from its task latches and replays",
    scenario([ScriptedModel.text("one"), ScriptedModel.text("two")]),
    function*({ driver }) {
      const result = yield* Deferred.make<number, unknown>()
      let fired = false
      yield* Effect.forkScoped(
        Stream.runForEach(driver.events, (e) =>
          e.type === "agent/status" && e.status === "idle" && !fired
            ? Effect.zipRight(
              Effect.sync(() => (fired = true)),
              Effect.forkScoped(
                Deferred.complete(result, driver.runMaintenance(Effect.as(driver.followup(user("B")), 7)))
              )
            )
            : Effect.void)
      )
      yield* settle
      yield* driver.followup(user("A"))
      expect(yield* Deferred.await(result)).toBe(7)
      expect(yield* closeOut).toEqual([])
      expect(yield* shape).toEqual([
        "INS(nt,0,[A])",
        "TS(1)",
        "CLM(nt,0,1)",
        "SS(1,1)",
        "UM(A)",
        "RH(initial)",
        ...TEXT,
        "SE(1,1)",
        "TE(1,completed)",
        "INS(nt,0,[B])",
        "TS(2)",
        "CLM(nt,0,1)",
        "SS(2,1)",
        "UM(B)",
        ...TEXT,
        "SE(2,1)",
        "TE(2,completed)"
      ])
    }
  )

  agentTest(
    "3.6: a task that cancels its own maintenance and then fails gives MaintenanceAborted with that cause; a wake it made after stays latched and replays",
    scenario([ScriptedModel.text("x")]),
    function*({ driver }) {
      const exit = yield* Effect.exit(
        driver.runMaintenance(
          Effect.zipRight(
            driver.cancel(CancelCause.hook("self"), { keepInbox: true }),
            Effect.zipRight(driver.steer(user("S")), Effect.fail("task failed"))
          )
        )
      )
      expect(exit).toEqual(Exit.fail(new MaintenanceAborted({ cause: { kind: "hook", reason: "self" } })))
      expect(yield* closeOut).toEqual([])
      // re-routed: a waking delivery cannot join a cancelled task (3.3 step 2)
      expect((yield* shape).slice(0, 5)).toEqual(["INS(nt,0,[S])", "TS(1)", "CLM(nt,0,1)", "SS(1,1)", "UM(S)"])
    }
  )
})

describe("more windows: latch, parked work, internal failure, request hook, retries", () => {
  it.scoped("3.3: a quiet queue (send nt, no wake) during the stream of a running turn runs as a later turn of this chain", () => {
    const h = holder()
    return Effect.gen(function*() {
      const driver = yield* Driver
      h.d = driver
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect(yield* from("SE(1,1)")).toBe(
        "SE(1,1) TE(1,completed) TS(2) CLM(nt,0,1) SS(2,1) UM(Q) SE(2,1) TE(2,completed)"
      )
    }).pipe(Effect.provide(scenario([
      ScriptedModel.text("one", { during: Effect.suspend(() => h.d!.send(user("Q"), "next-turn", false)) }),
      ScriptedModel.text("two")
    ])))
  })

  whileBodyRuns(
    "7.6: a latched steer removed before convergence produces no turn",
    [ScriptedModel.text("after")],
    function*({ driver, inbox }) {
      yield* driver.cancel(CancelCause.user, { keepInbox: true })
      yield* driver.steer(user("S"))
      expect(yield* inbox.remove(user("S").id)).toBe(true)
    },
    function*() {
      expect(yield* from("TC(c1)")).toBe("TC(c1) INS(nt,0,[S]) CAN(nt,0,1) TR✗(c1) SE(1,1) TE(1,aborted(user))")
      expect((yield* requests).length).toBe(1)
    }
  )

  whileBodyRuns(
    "4.8 / 7.6: after a keepInbox abort the latched replay claims the oldest next-turn item (parked B), then the chain continues to the latched W",
    [ScriptedModel.text("b"), ScriptedModel.text("w")],
    function*({ driver }) {
      yield* driver.followup(user("B"))
      yield* driver.cancel(CancelCause.user, { keepInbox: true })
      yield* driver.followup(user("W"))
    },
    function*(status) {
      expect(yield* from("TE(1,aborted(user))")).toBe(
        "TE(1,aborted(user)) TS(2) CLM(nt,0,1) SS(2,1) UM(B) SE(2,1) TE(2,completed) TS(3) CLM(nt,0,1) SS(3,1) UM(W) SE(3,1) TE(3,completed)"
      )
      expect(yield* status).toEqual(["idle", "running", "idle"])
    }
  )

  it.scoped("4.6 D7: a ToolPost failure (after suspending) while a later body runs: it is interrupted and awaited; every call without a result gets TOOL_INTERNAL_ERROR in model order", () => {
    const t = Tool.make("t", {
      description: "t",
      parameters: empty,
      mode: "parallel",
      execute: (_x, ctx) => ctx.callId === "c1" ? Effect.succeed("one") : Effect.never
    })
    return Effect.gen(function*() {
      const driver = yield* Driver
      const hooks = yield* Hooks
      yield* hooks.onToolPost((input, next) =>
        input.callId === "c1" ? Effect.zipRight(Effect.yieldNow(), Effect.fail(new Error("post broke"))) : next()
      )
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect(yield* from("TC(c1)")).toBe(
        "TC(c1) TC(c2) TR?(c1) TR?(c2) TC(c3) TR?(c3) SE(1,1) TE(1,error(TOOL_INTERNAL_ERROR))"
      )
      const codes = (yield* events).filter((e) => e.type === "tool/result").map((e) => (e.data as any).error?.code)
      expect(codes).toEqual(["TOOL_INTERNAL_ERROR", "TOOL_INTERNAL_ERROR", "TOOL_INTERNAL_ERROR"])
    }).pipe(
      Effect.provide(
        scenario([calls(["c1", "t"], ["c2", "t"], ["c3", "t"]), ScriptedModel.text("done")], {
          tools: [t],
          maxParallelToolCalls: 2
        })
      )
    )
  })

  it.scoped("K4: a cancel while the onRequest hook is suspended: ⟨SE⟩ ⟨TE(aborted)⟩ after the entered messages; no request dispatched", () => {
    const entered = gate()
    return Effect.gen(function*() {
      const driver = yield* Driver
      const hooks = yield* Hooks
      yield* hooks.onRequest(() => Effect.zipRight(open(entered), Effect.never))
      yield* driver.followup(user("A"))
      yield* Deferred.await(entered)
      yield* driver.cancel(CancelCause.user)
      expect(yield* closeOut).toEqual([])
      expect(yield* from("SS(1,1)")).toBe("SS(1,1) UM(A) SE(1,1) TE(1,aborted(user))")
      expect((yield* requests).length).toBe(0)
    }).pipe(Effect.provide(scenario([ScriptedModel.text("one")])))
  })

  agentTest(
    "4.4: an inject from the initial pre-step listener misses this request and enters the next step of the same turn (no turn-stopping run)",
    scenario([ScriptedModel.text("one"), ScriptedModel.text("two")]),
    function*({ driver, preStep: pre, hooks }) {
      const calls: Array<number> = []
      yield* hooks.onTurnStopping((i) => Effect.sync(() => calls.push(i.step)))
      yield* pre.register((input, next) =>
        input.step === 1
          ? Effect.zipRight(Effect.zipRight(driver.inject(plugin("C")), Effect.yieldNow()), next())
          : next()
      )
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect(yield* from("TS(1)")).toBe(
        "TS(1) CLM(nt,0,1) INS(ns,0,[C]) SS(1,1) UM(A) SE(1,1) CLM(ns,0,1) SS(1,2) UM(C) SE(1,2) TE(1,completed)"
      )
      expect(calls).toEqual([2])
    }
  )

  it.scoped("4.5 / 4.4: an inject during the backoff sleep does not reach the retried attempt (same step, equal messages); the next step claims it", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "llm/retry")
      yield* driver.inject(plugin("C"))
      const delay = ((yield* events).find((e) => e.type === "llm/retry")!.data as any).delayMs as number
      yield* TestClock.adjust(delay)
      expect(yield* closeOut).toEqual([])
      const reqs = yield* requests
      expect(reqs.length).toBe(3)
      expect(reqs[1]!.messages).toEqual(reqs[0]!.messages)
      expect(reqs[1]!.attempt).toBe(2)
      expect(yield* from("RT(1)")).toBe("RT(1) INS(ns,0,[C]) SE(1,1) CLM(ns,0,1) SS(1,2) UM(C) SE(1,2) TE(1,completed)")
    }).pipe(Effect.provide(scenario([
      ScriptedModel.fail({ code: "RATE_LIMIT", status: 429, message: "slow" }),
      ScriptedModel.text("ok"),
      ScriptedModel.text("two")
    ]))))
})

describe("wakingSteers and latch membership across edits and failures", () => {
  const laterGate = (fail: boolean) => {
    const gp = gate()
    const entered = gate()
    const setup = Effect.gen(function*() {
      const driver = yield* Driver
      const hooks = yield* Hooks
      const pre = yield* PreStep
      let n = 0
      yield* hooks.onTurnStopping(() => (n++ === 0 ? driver.inject(plugin("C")) : Effect.void))
      yield* pre.register((input, next) =>
        input.turn === 1 && input.boundary === "later"
          ? Effect.zipRight(
            Effect.zipRight(open(entered), Deferred.await(gp)),
            fail ? Effect.fail(new Error("later broke")) : Effect.succeed(PreStepDecision.enter([]))
          )
          : next()
      )
      yield* driver.followup(user("A"))
      yield* Deferred.await(entered)
    })
    return { gp, setup }
  }

  it.scoped("3.2: replace(S.id, S2) of a steer inserted after the last claim keeps it waking: the chain continues with S2", () => {
    const { gp, setup } = laterGate(false)
    return Effect.gen(function*() {
      const driver = yield* Driver
      const inbox = yield* Inbox
      yield* setup
      yield* driver.steer(user("S"))
      expect(yield* inbox.replace(user("S").id, user("S2"))).toBe(true)
      yield* open(gp)
      expect(yield* closeOut).toEqual([])
      expect(yield* from("INS(ns,0,[S])")).toBe(
        "INS(ns,0,[S]) REP(ns,0,[S2]) TE(1,completed) TS(2) CLM(ns,0,1) SS(2,1) UM(S2) SE(2,1) TE(2,completed)"
      )
    }).pipe(Effect.provide(scenario([ScriptedModel.text("one"), ScriptedModel.text("two")])))
  })

  it.scoped("4.2 / D3: a later pre-step failure with a steer inserted during it: ⟨TE(1,error) TS(2) CLM(ns)⟩", () => {
    const { gp, setup } = laterGate(true)
    return Effect.gen(function*() {
      const driver = yield* Driver
      yield* setup
      yield* driver.steer(user("S"))
      yield* open(gp)
      expect(yield* closeOut).toEqual([])
      expect(yield* from("INS(ns,0,[S])")).toBe(
        "INS(ns,0,[S]) TE(1,error(UNKNOWN)) TS(2) CLM(ns,0,1) SS(2,1) UM(S) SE(2,1) TE(2,completed)"
      )
    }).pipe(Effect.provide(scenario([ScriptedModel.text("one"), ScriptedModel.text("two")])))
  })

  whileBodyRuns("3.2 / 7.6: replace(B.id, B2) of a latched follow-up moves the latch: the replay runs B2", [
    ScriptedModel.text("b")
  ], function*({ driver, inbox }) {
    yield* driver.cancel(CancelCause.user, { keepInbox: true })
    yield* driver.followup(user("B"))
    expect(yield* inbox.replace(user("B").id, user("B2"))).toBe(true)
  }, function*() {
    expect(yield* from("TE(1,aborted(user))")).toBe(
      "TE(1,aborted(user)) TS(2) CLM(nt,0,1) SS(2,1) UM(B2) SE(2,1) TE(2,completed)"
    )
  })

  it.scoped("4.9 / 7.5: contexts and a body's inject keep insertion order; a broad cancel from a later body removes the earlier call's context", () => {
    const h = holder()
    const ctxTool = Tool.make("x1", {
      description: "x1",
      parameters: empty,
      execute: () => Effect.succeed({ content: "ok", additionalContexts: [plugin("k1")] })
    })
    const injTool = Tool.make("inj", {
      description: "inj",
      parameters: empty,
      execute: () => Effect.as(Effect.suspend(() => h.d!.inject(plugin("C"))), "ok")
    })
    const canTool = Tool.make("can", {
      description: "can",
      parameters: empty,
      execute: () => Effect.as(Effect.suspend(() => h.d!.cancel(CancelCause.user)), "ok")
    })
    return Effect.gen(function*() {
      const driver = yield* Driver
      h.d = driver
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect(yield* from("TC(c1)")).toBe(
        "TC(c1) TR(c1) INS(ns,0,[k1]) TC(c2) INS(ns,1,[C]) TR(c2) TC(c3) CAN(ns,0,2) TR✗(c3) SE(1,1) TE(1,aborted(user))"
      )
    }).pipe(
      Effect.provide(
        scenario([calls(["c1", "x1"], ["c2", "inj"], ["c3", "can"]), ScriptedModel.text("two")], {
          tools: [ctxTool, injTool, canTool]
        })
      )
    )
  })
})
