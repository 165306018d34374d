/**
 * The loop while listeners, hooks and tool bodies suspend (SPEC 3.10, 4.3-4.8, 7.3): stream tails,
 * retries and cancel windows, boundaries, a cause recorded by a hook, maintenance windows,
 * notification timing and request derivation after suspension.
 */
import { describe, expect } from "@effect/vitest"
import { Chunk, Context, Deferred, Effect, Fiber, Option, Queue, TestClock } from "effect"
import {
  CancelCause,
  Driver,
  PreStepDecision,
  RequestErrorAction,
  ScriptedModel,
  SessionLog,
  Tool,
  userMessage
} from "../../src/index.js"
import {
  agentTest,
  closeOut,
  events,
  from,
  gate,
  liveNotation,
  open,
  plugin,
  recordLive,
  recordStatus,
  requests,
  scenario,
  settle,
  shape,
  shapeHas,
  toolLine,
  untilEvent,
  user
} from "./harness.js"
import { calls, empty, holder } from "./toolFixtures.js"

type DriverService = Context.Tag.Service<typeof Driver>

/** Prompts `A`; then, once idle, the closed log satisfies every rule of checkLog. */
const promptAndClose = (driver: DriverService) =>
  Effect.gen(function*() {
    yield* driver.followup(user("A"))
    expect(yield* closeOut).toEqual([])
  })

/** A tool `t` answering "ok" after running `body`. */
const toolT = (body: Effect.Effect<unknown, any> = Effect.void) =>
  Tool.make("t", { description: "t", parameters: empty, execute: () => Effect.as(body, "ok") })

/** A scripted response calling `c1` of `t` whose stream tail runs `afterFinish`, then a text. */
const callWithTail = (afterFinish: Effect.Effect<unknown>) => [
  ScriptedModel.response({ toolCalls: [{ id: "c1", name: "t", arguments: {} }], afterFinish }),
  ScriptedModel.text("done")
]

/** Prompts `A`, sends `input` once a listener signals `entered`, releases it (`held`) and checks the closed log. */
const inputWhileHeld = (
  driver: DriverService,
  entered: Deferred.Deferred<void>,
  held: Deferred.Deferred<void>,
  input: (driver: DriverService) => Effect.Effect<unknown, unknown>
) =>
  Effect.gen(function*() {
    yield* driver.followup(user("A"))
    yield* Deferred.await(entered)
    yield* input(driver)
    yield* open(held)
    expect(yield* closeOut).toEqual([])
  })

/** Two scripted texts. */
const twoTexts = () => scenario([ScriptedModel.text("one"), ScriptedModel.text("two")])

describe("4.5 stream tail, retries and cancel windows", () => {
  const tail = gate()
  agentTest(
    "4.5 Q6: tools start only after the stream was pulled to its end (afterFinish suspended)",
    scenario(callWithTail(Deferred.await(tail)), { tools: [toolT()] }),
    function*({ driver }) {
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "assistant/message")
      yield* settle
      expect(yield* shapeHas("TC(c1)")).toBe(false)
      yield* open(tail)
      expect(yield* closeOut).toEqual([])
      expect(yield* toolLine).toBe("TC(c1) TR(c1)")
    }
  )

  const entered = gate()
  let ran = 0
  agentTest(
    "4.5 Q8 / K7: a cancel while the stream tail is suspended leaves the AM standing; calls get TC TR⊘ pairs",
    scenario(callWithTail(Effect.zipRight(open(entered), Deferred.await(gate()))), {
      tools: [toolT(Effect.sync(() => ran++))]
    }),
    function*({ driver }) {
      yield* driver.followup(user("A"))
      yield* Deferred.await(entered)
      yield* driver.cancel(CancelCause.user)
      expect(yield* closeOut).toEqual([])
      const s = yield* shape
      expect(s.slice(s.indexOf("CH(finish stop)")).join(" ")).toBe(
        "CH(finish stop) AM TC(c1) TR⊘(c1) SE(1,1) TE(1,aborted(user))"
      )
      expect(ran).toBe(0)
    }
  )

  const h = holder()
  agentTest(
    "4.7 / K9a: a cause recorded in the stream tail of a text answer: no turn-stopping listener runs; ⟨SE⟩ ⟨TE(aborted)⟩",
    scenario([
      ScriptedModel.text("one", { afterFinish: Effect.suspend(() => h.d!.cancel(CancelCause.user)) }),
      ScriptedModel.text("two")
    ]),
    function*({ driver, hooks }) {
      h.d = driver
      const calls: Array<number> = []
      yield* hooks.onTurnStopping((i) => Effect.sync(() => calls.push(i.step)))
      yield* promptAndClose(driver)
      expect(calls).toEqual([])
      const s = yield* shape
      expect(s.slice(s.indexOf("CH(finish stop)")).join(" ")).toBe("CH(finish stop) AM SE(1,1) TE(1,aborted(user))")
    }
  )

  const rateLimited = ScriptedModel.fail({ code: "RATE_LIMIT", status: 429, message: "slow" })
  agentTest(
    "4.5 / K6: a cancel during the backoff sleep keeps RT and makes no further attempt",
    scenario([rateLimited, ScriptedModel.text("ok")]),
    function*({ driver }) {
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "llm/retry")
      yield* driver.cancel(CancelCause.user)
      expect(yield* closeOut).toEqual([])
      expect(yield* from("RT(1)")).toBe("RT(1) SE(1,1) TE(1,aborted(user))")
      expect((yield* requests).length).toBe(1)
    }
  )

  const retryGate = gate()
  const retryEntered = gate()
  agentTest(
    "4.5 / K6: a Retry obtained after a cause was recorded is ignored (uninterruptible request-error listener): no RT, no second request",
    scenario([rateLimited, ScriptedModel.text("ok")]),
    function*({ driver, hooks }) {
      yield* hooks.onRequestError(() =>
        Effect.uninterruptible(
          Effect.zipRight(open(retryEntered), Effect.as(Deferred.await(retryGate), RequestErrorAction.retry(0)))
        )
      )
      yield* driver.followup(user("A"))
      yield* Deferred.await(retryEntered)
      yield* driver.cancel(CancelCause.user)
      yield* open(retryGate)
      expect(yield* closeOut).toEqual([])
      expect(yield* from("CH(finish error)")).toBe("SE(1,1) TE(1,aborted(user))")
      expect((yield* shape).some((x) => x.startsWith("RT"))).toBe(false)
      expect((yield* requests).length).toBe(1)
    }
  )
})

describe("4.7 / 4.8 / 7.3 boundaries while listeners suspend", () => {
  const whileStopping = [
    {
      name:
        "4.7: an inject from outside while the turn-stopping listener is suspended is claimed by TX-BOUNDARY (re-read): one turn, step 2",
      holds: (n: number) => n === 0,
      input: (driver: DriverService) => driver.inject(plugin("C")),
      after: "SE(1,1) INS(ns,0,[C]) CLM(ns,0,1) SS(1,2) UM(C) SE(1,2) TE(1,completed)"
    },
    {
      name:
        "4.8: a follow-up while the turn-stopping listener is suspended continues the chain in the TX-CLOSE transaction",
      holds: (_n: number, turn: number) => turn === 1,
      input: (driver: DriverService) => driver.followup(user("B")),
      after: "SE(1,1) INS(nt,0,[B]) TE(1,completed) TS(2) CLM(nt,0,1) SS(2,1) UM(B) SE(2,1) TE(2,completed)"
    }
  ]
  for (const c of whileStopping) {
    const held = gate()
    const entered = gate()
    agentTest(c.name, twoTexts(), function*({ driver, hooks }) {
      const status = yield* recordStatus
      let n = 0
      yield* hooks.onTurnStopping((
        i
      ) => (c.holds(n++, i.turn) ? Effect.zipRight(open(entered), Deferred.await(held)) : Effect.void))
      yield* inputWhileHeld(driver, entered, held, c.input)
      expect(yield* from("SE(1,1)")).toBe(c.after)
      expect((yield* requests).length).toBe(2)
      expect(yield* status).toEqual(["idle", "running", "idle"])
    })
  }

  const h = holder()
  agentTest(
    "4.7: a steer during the stream makes next-step non-empty at the step's end: turn-stopping listeners do not run; the boundary claims it",
    scenario([
      ScriptedModel.text("one", { during: Effect.suspend(() => h.d!.steer(user("S"))) }),
      ScriptedModel.text("two")
    ]),
    function*({ driver, hooks }) {
      h.d = driver
      const calls: Array<string> = []
      yield* hooks.onTurnStopping((i) => Effect.sync(() => calls.push(`${i.turn}.${i.step}`)))
      yield* promptAndClose(driver)
      expect(calls).toEqual(["1.2"])
      expect(yield* from("SE(1,1)")).toBe("SE(1,1) CLM(ns,0,1) SS(1,2) UM(S) SE(1,2) TE(1,completed)")
    }
  )

  const duringLaterPreStep = [
    {
      name:
        "7.3: a steer during a later pre-step that enters [] after a natural ending continues the chain: ⟨TE(1,completed) TS(2) CLM(ns)⟩",
      input: (driver: DriverService) => driver.steer(user("S")),
      after:
        "SE(1,1) INS(ns,0,[C]) CLM(ns,0,1) INS(ns,0,[S]) TE(1,completed) TS(2) CLM(ns,0,1) SS(2,1) UM(S) SE(2,1) TE(2,completed)",
      pendingNextStep: [],
      requests: 2
    },
    {
      name:
        "7.3: an inject (not a steer) during that pre-step waits: the turn ends completed, no turn 2, the inject stays pending",
      input: (driver: DriverService) => driver.inject(plugin("N")),
      after: "SE(1,1) INS(ns,0,[C]) CLM(ns,0,1) INS(ns,0,[N]) TE(1,completed)",
      pendingNextStep: ["N"],
      requests: 1
    }
  ]
  for (const c of duringLaterPreStep) {
    const held = gate()
    const entered = gate()
    agentTest(c.name, twoTexts(), function*({ driver, hooks, inbox, preStep }) {
      let n = 0
      yield* hooks.onTurnStopping(() => (n++ === 0 ? driver.inject(plugin("C")) : Effect.void))
      yield* preStep.register((input, next) =>
        input.turn === 1 && input.boundary === "later"
          ? Effect.zipRight(
            Effect.zipRight(open(entered), Deferred.await(held)),
            Effect.succeed(PreStepDecision.enter([]))
          )
          : next()
      )
      yield* inputWhileHeld(driver, entered, held, c.input)
      expect(yield* from("SE(1,1)")).toBe(c.after)
      expect((yield* inbox.nextStep).map((m) => m.id)).toEqual(c.pendingNextStep)
      expect((yield* requests).length).toBe(c.requests)
    })
  }

  const failGate = gate()
  agentTest(
    "3.10 / 4.2: a pre-step failure while a follow-up is queued: agent/error is published before the claimed/continuation of TX-CLOSE",
    scenario([ScriptedModel.text("two")]),
    function*({ driver, preStep }) {
      const live = yield* recordLive
      yield* preStep.register((input, next) =>
        input.turn === 1 ? Effect.zipRight(Deferred.await(failGate), Effect.fail(new Error("boom"))) : next()
      )
      yield* driver.followup(user("A"))
      yield* driver.followup(user("B"))
      yield* open(failGate)
      expect(yield* closeOut).toEqual([])
      const l = (yield* live).map((e) =>
        e.type === "agent/error"
          ? `error(${e.turn})`
          : e.type === "agent/inbox/claimed"
          ? `claimed(${e.message.id})`
          : e.type === "agent/status"
          ? e.status
          : "ins"
      )
      expect(l.join(" ")).toBe("ins running claimed(A) ins error(1) claimed(B) idle")
      expect(yield* from("INS(nt,0,[B])")).toBe(
        "INS(nt,0,[B]) TE(1,error(UNKNOWN)) TS(2) CLM(nt,0,1) SS(2,1) UM(B) SE(2,1) TE(2,completed)"
      )
    }
  )
})

describe("a cause recorded by a hook that masks interruption: every later loop transaction reads it first (4.3)", () => {
  const entered = gate()
  agentTest(
    "K9a: a keepInbox cancel while a turn-stopping listener (that injected C) is suspended: no claim, ⟨TE(aborted)⟩, C stays pending",
    twoTexts(),
    function*({ driver, hooks, inbox }) {
      yield* hooks.onTurnStopping(() =>
        Effect.zipRight(Effect.zipRight(driver.inject(plugin("C")), open(entered)), Effect.never)
      )
      yield* driver.followup(user("A"))
      yield* Deferred.await(entered)
      yield* driver.cancel(CancelCause.user, { keepInbox: true })
      expect(yield* closeOut).toEqual([])
      expect(yield* from("SE(1,1)")).toBe("SE(1,1) INS(ns,0,[C]) TE(1,aborted(user))")
      expect((yield* inbox.nextStep).map((m) => m.id)).toEqual(["C"])
    }
  )

  agentTest(
    "4.3: with a cause recorded, turn-stopping listeners are not started: the first (uninterruptible) records a keepInbox cancel, the second never runs",
    twoTexts(),
    function*({ driver, hooks }) {
      const second: Array<number> = []
      yield* hooks.onTurnStopping(() => Effect.uninterruptible(driver.cancel(CancelCause.user, { keepInbox: true })))
      yield* hooks.onTurnStopping((i) => Effect.sync(() => second.push(i.step)))
      yield* promptAndClose(driver)
      expect(second).toEqual([])
      expect(yield* from("SE(1,1)")).toBe("SE(1,1) TE(1,aborted(user))")
    }
  )

  agentTest(
    "4.3 K3a: a pre-step listener (uninterruptible) that records a cancel then enters [A, X]: TX-STEP appends nothing; X stays unknown",
    scenario([ScriptedModel.text("one")]),
    function*({ driver, preStep: pre, inbox }) {
      yield* pre.register((input) =>
        Effect.uninterruptible(
          Effect.as(
            driver.cancel(CancelCause.user, { keepInbox: true }),
            PreStepDecision.enter([...input.messages, plugin("X")])
          )
        )
      )
      yield* promptAndClose(driver)
      expect(yield* from("TS(1)")).toBe("TS(1) CLM(nt,0,1) TE(1,aborted(user))")
      expect(Option.isNone(yield* inbox.idState(plugin("X").id))).toBe(true)
      expect((yield* requests).length).toBe(0)
    }
  )

  let ran = 0
  agentTest(
    "4.6 START 6: a ToolPre (uninterruptible) that records a cancel and allows: ABORTED_BEFORE_DISPATCH, body never runs; the later call gets a pair",
    scenario([calls(["c1", "t"], ["c2", "t"]), ScriptedModel.text("done")], {
      tools: [toolT(Effect.sync(() => ran++))]
    }),
    function*({ driver, hooks }) {
      yield* hooks.onToolPre((info, next) =>
        info.callId === "c1" ? Effect.uninterruptible(Effect.zipRight(driver.cancel(CancelCause.user), next())) : next()
      )
      yield* promptAndClose(driver)
      expect(yield* from("TC(c1)")).toBe("TC(c1) TR⊘(c1) TC(c2) TR⊘(c2) SE(1,1) TE(1,aborted(user))")
      expect(ran).toBe(0)
    }
  )

  agentTest(
    "4.3 / K4: an onRequest listener (uninterruptible) that records a cancel: no request/header (not a closing record), no request; ⟨SE⟩ ⟨TE(aborted)⟩",
    scenario([ScriptedModel.text("one")]),
    function*({ driver, hooks }) {
      yield* hooks.onRequest((_i, next) =>
        Effect.uninterruptible(Effect.zipRight(driver.cancel(CancelCause.user), next()))
      )
      yield* promptAndClose(driver)
      expect((yield* requests).length).toBe(0)
      expect(yield* from("SS(1,1)")).toBe("SS(1,1) UM(A) SE(1,1) TE(1,aborted(user))")
      expect((yield* shape).some((x) => x.startsWith("RH"))).toBe(false)
    }
  )
})

describe("inputs from turn-stopping listeners and tool bodies", () => {
  agentTest(
    "4.7 / 4.8: a follow-up from a turn-stopping listener: next-step stays empty, the turn closes and the chain continues in that transaction",
    twoTexts(),
    function*({ driver, hooks }) {
      yield* hooks.onTurnStopping((i) => (i.turn === 1 ? driver.followup(user("B")) : Effect.void))
      yield* promptAndClose(driver)
      expect(yield* from("SE(1,1)")).toBe(
        "SE(1,1) INS(nt,0,[B]) TE(1,completed) TS(2) CLM(nt,0,1) SS(2,1) UM(B) SE(2,1) TE(2,completed)"
      )
    }
  )

  agentTest(
    "4.7 / 3.2: a steer from a turn-stopping listener joins the turn (step 2); its claim empties wakingSteers, so no second turn follows",
    scenario([ScriptedModel.text("one"), ScriptedModel.text("two"), ScriptedModel.text("three")]),
    function*({ driver, hooks }) {
      let n = 0
      yield* hooks.onTurnStopping(() => (n++ === 0 ? driver.steer(user("S")) : Effect.void))
      yield* promptAndClose(driver)
      expect(yield* from("SE(1,1)")).toBe("SE(1,1) INS(ns,0,[S]) CLM(ns,0,1) SS(1,2) UM(S) SE(1,2) TE(1,completed)")
      expect((yield* requests).length).toBe(2)
    }
  )

  const h = holder()
  const fin = Tool.make("fin", {
    description: "fin",
    parameters: empty,
    execute: () => Effect.as(Effect.suspend(() => h.d!.inject(plugin("C"))), { content: "ok", concludesTurn: true })
  })
  agentTest(
    "4.6: a concluding tool whose body injects: the turn still takes another step because next-step is non-empty",
    scenario([calls(["c1", "fin"]), ScriptedModel.text("two")], { tools: [fin] }),
    function*({ driver }) {
      h.d = driver
      yield* promptAndClose(driver)
      expect(yield* from("TC(c1)")).toBe(
        "TC(c1) INS(ns,0,[C]) TR(c1) SE(1,1) CLM(ns,0,1) SS(1,2) UM(C) SE(1,2) TE(1,completed)"
      )
    }
  )
})

describe("3.10 case 2 and maintenance windows", () => {
  agentTest(
    "3.10 case 2: a ToolPost defect after the cause it records: turn ends aborted(user), exactly one live agent/error",
    scenario([calls(["c1", "t"]), ScriptedModel.text("two")], { tools: [toolT()] }),
    function*({ driver, hooks }) {
      const live = yield* recordLive
      yield* hooks.onToolPost(() =>
        Effect.uninterruptible(Effect.zipRight(driver.cancel(CancelCause.user), Effect.dieMessage("post died")))
      )
      yield* promptAndClose(driver)
      expect((yield* shape).filter((x) => x.startsWith("TE")).join(" ")).toBe("TE(1,aborted(user))")
      expect((yield* live).filter((e) => e.type === "agent/error").length).toBe(1)
    }
  )

  agentTest(
    "3.10 case 2: a pre-step defect after the cause it records publishes one agent/error; a typed failure publishes none",
    scenario([]),
    function*({ driver, preStep: pre }) {
      const live = yield* recordLive
      yield* pre.register((input) =>
        Effect.uninterruptible(Effect.zipRight(
          driver.cancel(CancelCause.user),
          input.turn === 1 ? Effect.dieMessage("pre died") : Effect.fail(new Error("pre failed"))
        ))
      )
      yield* promptAndClose(driver)
      yield* driver.followup(user("B"))
      expect(yield* closeOut).toEqual([])
      expect((yield* shape).filter((x) => x.startsWith("TE")).join(" ")).toBe("TE(1,aborted(user)) TE(2,aborted(user))")
      expect((yield* live).filter((e) => e.type === "agent/error").map((e) => (e as any).turn)).toEqual([1])
    }
  )

  agentTest(
    "3.6: a keepInbox cancel of a maintenance task keeps the wake latched before it: the task exit opens turn 1",
    scenario([ScriptedModel.text("w")]),
    function*({ driver }) {
      const fiber = yield* Effect.fork(driver.runMaintenance(Effect.never))
      yield* settle
      yield* driver.followup(user("W"))
      yield* driver.cancel(CancelCause.user, { keepInbox: true })
      const exit = yield* Fiber.await(fiber)
      expect(exit._tag).toBe("Failure")
      expect(yield* closeOut).toEqual([])
      expect((yield* shape).join(" ")).toBe(
        "INS(nt,0,[W]) TS(1) CLM(nt,0,1) SS(1,1) UM(W) RH(initial) CH(block-start) CH(text-delta) CH(block-end) CH(finish stop) AM SE(1,1) TE(1,completed)"
      )
    }
  )

  const task = gate()
  agentTest(
    "3.3 / 3.6: a steer after a maintenance task was cancelled (task masks interruption) is re-routed to next-turn and latched; the task exit runs it",
    scenario([ScriptedModel.text("s")]),
    function*({ driver }) {
      const fiber = yield* Effect.fork(
        driver.runMaintenance(Effect.uninterruptible(Effect.as(Deferred.await(task), 42)))
      )
      yield* settle
      yield* driver.cancel(CancelCause.user, { keepInbox: true })
      yield* driver.steer(user("S"))
      yield* open(task)
      const value = yield* Fiber.join(fiber)
      expect(value).toBe(42)
      expect(yield* closeOut).toEqual([])
      expect((yield* shape).slice(0, 5).join(" ")).toBe("INS(nt,0,[S]) TS(1) CLM(nt,0,1) SS(1,1) UM(S)")
    }
  )
})

describe("3.10 notification timing and 4.5 request derivation after suspension", () => {
  agentTest(
    "3.10: notifications are delivered before the operation's Effect completes (followup, inject, cancel)",
    scenario([]),
    function*({ driver, preStep: pre }) {
      const q = yield* driver.subscribe
      yield* pre.register(() => Effect.never)
      const take = Effect.map(Queue.takeAll(q), (c) => Chunk.toReadonlyArray(c).map(liveNotation).join(" "))
      yield* driver.followup(user("A"))
      expect(yield* take).toBe("inserted(A) status(running) claimed(A,1)")
      yield* driver.inject(plugin("C"))
      expect(yield* take).toBe("inserted(C)")
      yield* driver.cancel(CancelCause.user)
      expect(yield* take).toBe("discarded(C)")
    }
  )

  const seen: Array<string> = []
  const body = { d: undefined as DriverService | undefined, q: undefined as Queue.Dequeue<any> | undefined }
  const injecting = toolT(Effect.gen(function*() {
    yield* body.d!.inject(plugin("C"))
    seen.push(...Chunk.toReadonlyArray(yield* Queue.takeAll(body.q!)).map(liveNotation))
  }))
  agentTest(
    "3.10 / D5: an inject from a tool body has published `inserted` when it returns inside the body",
    scenario([calls(["c1", "t"]), ScriptedModel.text("d")], { tools: [injecting] }),
    function*({ driver }) {
      body.d = driver
      body.q = yield* driver.subscribe
      yield* promptAndClose(driver)
      expect(seen.join(" ")).toBe("inserted(A) status(running) claimed(A,1) inserted(C)")
    }
  )

  const h = holder()
  agentTest(
    "4.3: a cause recorded by a stream effect that masks interruption: no further chunk, no finish, no AM; ⟨SE⟩ ⟨TE(aborted)⟩",
    scenario([
      ScriptedModel.text("one", {
        deltas: ["a", "b"],
        during: Effect.uninterruptible(Effect.suspend(() => h.d!.cancel(CancelCause.user)))
      })
    ]),
    function*({ driver }) {
      h.d = driver
      yield* promptAndClose(driver)
      expect(yield* from("SS(1,1)")).toBe("SS(1,1) UM(A) SE(1,1) TE(1,aborted(user))")
      expect((yield* shape).filter((x) => x.startsWith("CH")).join(" ")).toBe("CH(block-start)")
    }
  )

  const summary = userMessage({ id: "S", text: "summary", source: { kind: "compaction" } })
  /** Appends `summary` in place of the log's first user message. */
  const replaceFirst = (log: Context.Tag.Service<typeof SessionLog>) =>
    Effect.flatMap(log.events, (es) => {
      const seqA = es.find((e) => e.type === "user/message")!.seq
      return log.append({
        type: "user/message",
        data: summary,
        surfaceOp: { op: "replace", start: seqA, end: seqA },
        sourceEventSeqs: [seqA]
      })
    })
  const requestTexts = Effect.map(
    requests,
    (reqs) => reqs.map((r) => r.messages.map((m) => (m.content[0] as any).text).join(" "))
  )

  agentTest(
    "4.5 Q3: a surface replacement appended while the onRequest hook is suspended is in this attempt's request",
    twoTexts(),
    function*({ driver, hooks, log }) {
      yield* promptAndClose(driver)
      yield* hooks.onRequest((i, next) =>
        i.turn === 2
          ? Effect.zipRight(Effect.zipRight(Effect.yieldNow(), Effect.orDie(replaceFirst(log))), next())
          : next()
      )
      yield* driver.followup(user("B"))
      expect(yield* closeOut).toEqual([])
      expect((yield* requestTexts)[1]).toBe("summary one B")
    }
  )

  agentTest(
    "4.5: a surface replacement appended during the backoff sleep applies from the next attempt",
    scenario([
      ScriptedModel.text("one"),
      ScriptedModel.fail({ code: "RATE_LIMIT", status: 429, message: "slow" }),
      ScriptedModel.text("two")
    ]),
    function*({ driver, log }) {
      yield* promptAndClose(driver)
      yield* driver.followup(user("B"))
      yield* untilEvent((e) => e.type === "llm/retry")
      yield* replaceFirst(log)
      const delay = ((yield* events).find((e) => e.type === "llm/retry")!.data as any).delayMs as number
      yield* TestClock.adjust(delay)
      expect(yield* closeOut).toEqual([])
      expect((yield* requestTexts).slice(1)).toEqual(["A one B", "summary one B"])
    }
  )
})
