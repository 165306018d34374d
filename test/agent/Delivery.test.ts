/**
 * Delivery scenarios P2-P19 of SPEC 9: waking, staging, where input lands, pre-step decisions.
 */
import { describe, expect, it } from "@effect/vitest"
import { Chunk, Deferred, Effect, Exit, Fiber, FiberId, Option, Queue, Schema, Stream, TestClock } from "effect"
import type { DriverEvent } from "../../src/domain/DriverEvent.js"
import type { EventOf } from "../../src/domain/Event.js"
import { SessionId } from "../../src/domain/Ids.js"
import type { UserMessage } from "../../src/domain/Values.js"
import { ScriptedModel } from "../../src/layers/ScriptedModel.js"
import { Driver } from "../../src/services/Driver.js"
import type { PreStepInput } from "../../src/services/PreStep.js"
import { PreStep, PreStepDecision } from "../../src/services/PreStep.js"
import { SessionLog } from "../../src/services/SessionLog.js"
import { Tool, Tools } from "../../src/services/Tools.js"
import {
  agentTest,
  idleAndChecked,
  liveNotation,
  plugin,
  recordStatus,
  requests,
  scenario,
  settle,
  shape,
  TEXT,
  texts,
  token,
  toolResponse,
  user
} from "./harness.js"

/** Everything a subscription received so far, in notation. */
const liveOf = (queue: Queue.Dequeue<DriverEvent>) =>
  Effect.map(Queue.takeAll(queue), (chunk) => Chunk.toReadonlyArray(chunk).map(liveNotation))

const turnEnds = Effect.map(
  Effect.flatMap(SessionLog, (log) => log.events),
  (events) => events.filter((e) => e.type === "turn/end").map((e) => (e as EventOf<"turn/end">).data)
)

const userMessages = Effect.map(
  Effect.flatMap(SessionLog, (log) => log.events),
  (events) => events.filter((e) => e.type === "user/message").map((e) => (e as EventOf<"user/message">).data)
)

/** A listener input reduced to `(turn, step, boundary, [ids])`. */
const inputOf = (input: PreStepInput) =>
  `(${input.turn},${input.step},${input.boundary},[${input.messages.map((m) => m.id).join(",")}])`

describe("delivery", () => {
  agentTest(
    "P2: a wake is committed before followup completes",
    scenario([ScriptedModel.text("hello")]),
    function*({ driver, log }) {
      const live = yield* driver.subscribe
      const G = yield* Deferred.make<void>()
      yield* (yield* PreStep).register((_input, next) => Effect.zipRight(Deferred.await(G), next()))
      yield* driver.followup(user("A"))
      expect(yield* driver.status).toBe("running")
      expect(yield* shape).toEqual(["INS(nt,0,[A])", "TS(1)", "CLM(nt,0,1)"])
      expect(yield* log.durableSeq).toBe(2)
      expect(yield* liveOf(live)).toEqual(["inserted(A)", "status(running)", "claimed(A,1)"])
      // The pre-step is still pending: nothing more is written meanwhile.
      yield* settle
      yield* TestClock.adjust("1 second")
      expect(yield* shape).toEqual(["INS(nt,0,[A])", "TS(1)", "CLM(nt,0,1)"])
      expect((yield* shape).some((s) => s.startsWith("UM"))).toBe(false)
      yield* Deferred.succeed(G, undefined)
      yield* idleAndChecked
    }
  )

  agentTest(
    "an insertion built before a subscriber subscribed still notifies it, and one with nobody to notify is still acknowledged",
    scenario([]),
    function*({ driver, inbox, log }) {
      // Nobody subscribed: the insertion is written and durable when it completes.
      yield* driver.inject(plugin("C0"))
      expect(yield* log.durableSeq).toBe(0)
      // Built before the subscription, run after it: the subscriber sees its notification.
      const inject = driver.inject(plugin("C1"))
      const append = inbox.append("next-turn", plugin("C2"))
      const live = yield* driver.subscribe
      yield* inject
      yield* append
      expect(yield* liveOf(live)).toEqual(["inserted(C1)", "inserted(C2)"])
      expect(yield* shape).toEqual(["INS(ns,0,[C0])", "INS(ns,1,[C1])", "INS(nt,0,[C2])"])
      expect(yield* log.durableSeq).toBe(2)
    }
  )

  agentTest(
    "P2: with the store held, followup does not complete until release",
    scenario([ScriptedModel.text("hello")]),
    function*({ driver, log, control }) {
      const G = yield* Deferred.make<void>()
      yield* (yield* PreStep).register((_input, next) => Effect.zipRight(Deferred.await(G), next()))
      yield* control.hold
      const call = yield* Effect.fork(driver.followup(user("A")))
      yield* settle
      yield* TestClock.adjust("1 second")
      yield* settle
      expect(Option.isNone(yield* Fiber.poll(call))).toBe(true)
      expect(yield* shape).toEqual(["INS(nt,0,[A])", "TS(1)", "CLM(nt,0,1)"])
      expect(yield* driver.status).toBe("running")
      expect(yield* log.durableSeq).toBe(-1)
      yield* control.release
      yield* Fiber.join(call)
      expect(yield* log.durableSeq).toBe(2)
      yield* Deferred.succeed(G, undefined)
      yield* idleAndChecked
    }
  )

  it.scoped("P3: two follow-ups are two turns", () => {
    const G = Deferred.unsafeMake<void>(FiberId.none)
    return Effect.gen(function*() {
      const driver = yield* Driver
      const trace = yield* recordStatus
      const A = user("A")
      const B = user("B")
      yield* driver.followup(A)
      yield* driver.followup(B)
      yield* Deferred.succeed(G, undefined)
      yield* driver.whenIdle
      const log = yield* shape
      // INS(B) lies somewhere between the first claim and turn 1's finish; the rest is exact.
      const at = log.indexOf("INS(nt,0,[B])")
      expect(at).toBeGreaterThan(2)
      expect(at).toBeLessThan(log.indexOf("CH(finish stop)"))
      expect(log.filter((_, i) => i !== at)).toEqual([
        "INS(nt,0,[A])",
        "TS(1)",
        "CLM(nt,0,1)",
        "SS(1,1)",
        "UM(A)",
        "RH(initial)",
        ...TEXT,
        "SE(1,1)",
        "TE(1,completed)",
        "TS(2)",
        "CLM(nt,0,1)",
        "SS(2,1)",
        "UM(B)",
        ...TEXT,
        "SE(2,1)",
        "TE(2,completed)"
      ])
      expect(log.filter((s) => s.startsWith("RH"))).toEqual(["RH(initial)"])
      const reqs = yield* requests
      expect(reqs.length).toBe(2)
      expect(reqs[1]!.messages.length).toBe(3)
      expect(reqs[1]!.messages[0]).toEqual(A)
      expect(reqs[1]!.messages[1]!.role).toBe("assistant")
      expect(token(reqs[1]!.messages[1]!)).toBe("first")
      expect(reqs[1]!.messages[2]).toEqual(B)
      yield* idleAndChecked
      expect(yield* trace).toEqual(["idle", "running", "idle"])
    }).pipe(
      Effect.provide(
        scenario([ScriptedModel.text("first", { awaitBefore: Deferred.await(G) }), ScriptedModel.text("second")])
      )
    )
  })

  agentTest(
    "P4: a follow-up issued from a log observer is not lost",
    scenario([ScriptedModel.text("one"), ScriptedModel.text("two")]),
    function*({ driver, log, inbox }) {
      const live = yield* driver.subscribe
      const B = user("B")
      yield* Effect.forkScoped(
        Stream.runForEach(log.stream(0), (e) => {
          if (e.type !== "agent/inbox/spliced") return Effect.void
          const inserted = (e as EventOf<"agent/inbox/spliced">).data.inserted
          return inserted.some((m) => m.id === "A") ? driver.followup(B) : Effect.void
        })
      )
      yield* driver.followup(user("A"))
      while (Option.isNone(yield* inbox.idState(B.id))) yield* Effect.yieldNow()
      yield* driver.whenIdle
      expect(yield* texts).toEqual(["A", "B"])
      const log1 = yield* shape
      expect(log1[log1.indexOf("UM(A)") - 1]).toBe("SS(1,1)")
      expect(log1[log1.indexOf("UM(B)") - 1]).toBe("SS(2,1)")
      expect(log1.filter((s) => s.startsWith("TE"))).toEqual(["TE(1,completed)", "TE(2,completed)"])
      yield* idleAndChecked
      expect((yield* liveOf(live)).filter((s) => s.startsWith("error"))).toEqual([])
    }
  )

  agentTest("P5: idle inject stages durably without a turn", scenario([]), function*({ driver, log, inbox }) {
    const live = yield* driver.subscribe
    const trace = yield* recordStatus
    const C = plugin("C")
    yield* driver.inject(C)
    expect(yield* shape).toEqual(["INS(ns,0,[C])"])
    expect(yield* log.durableSeq).toBe(0)
    expect(yield* driver.status).toBe("idle")
    const idle = yield* Effect.fork(driver.whenIdle)
    yield* Effect.yieldNow()
    expect(Option.map(yield* Fiber.poll(idle), Exit.isSuccess)).toEqual(Option.some(true))
    yield* settle
    yield* TestClock.adjust("1 second")
    expect(yield* shape).toEqual(["INS(ns,0,[C])"])
    expect(yield* requests).toEqual([])
    expect(yield* liveOf(live)).toEqual(["inserted(C)"])
    expect(yield* trace).toEqual(["idle"])
    expect(yield* inbox.nextStep).toEqual([C])
    yield* idleAndChecked
  })

  agentTest("P6: idle inject, then follow-up", scenario([ScriptedModel.text("ok")]), function*({ driver }) {
    const live = yield* driver.subscribe
    const C = plugin("C", "context verbatim")
    const A = user("A")
    yield* driver.inject(C)
    yield* driver.followup(A)
    yield* driver.whenIdle
    expect(yield* shape).toEqual([
      "INS(ns,0,[C])",
      "INS(nt,0,[A])",
      "TS(1)",
      "CLM(ns,0,1)",
      "CLM(nt,0,1)",
      "SS(1,1)",
      "UM(C)",
      "UM(A)",
      "RH(initial)",
      ...TEXT,
      "SE(1,1)",
      "TE(1,completed)"
    ])
    yield* idleAndChecked
    expect(yield* liveOf(live)).toEqual([
      "inserted(C)",
      "inserted(A)",
      "status(running)",
      "claimed(C,1)",
      "claimed(A,1)",
      "status(idle)"
    ])
    const reqs = yield* requests
    expect(reqs.length).toBe(1)
    expect(reqs[0]!.messages).toEqual([C, A])
    expect(reqs[0]!.messages[0]!.content).toEqual([{ type: "text", text: "context verbatim" }])
    expect(reqs[0]!.messages[0]!.source).toEqual({ kind: "plugin", plugin: "test" })
  })

  it.scoped("P7: injection from a tool body waits for the next step", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const tools = yield* Tools
      // A caller's own, non-frozen object.
      const C1 = {
        id: "C1",
        role: "user",
        content: [{ type: "text", text: "C1" }],
        source: { kind: "plugin", plugin: "test" }
      }
      const C2 = plugin("C2")
      yield* tools.register(Tool.make("noticer", {
        description: "injects context",
        parameters: Schema.Struct({}),
        mode: "exclusive",
        execute: () =>
          Effect.gen(function*() {
            yield* driver.inject(C1 as unknown as UserMessage)
            C1.content[0]!.text = "mutated"
            C1.id = "C1-mutated"
            yield* driver.inject(C2)
            return "ok"
          })
      }))
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect(yield* shape).toEqual([
        "INS(nt,0,[A])",
        "TS(1)",
        "CLM(nt,0,1)",
        "SS(1,1)",
        "UM(A)",
        "RH(initial)",
        ...toolResponse(1),
        "TC(c1)",
        "INS(ns,0,[C1])",
        "INS(ns,1,[C2])",
        "TR(c1)",
        "SE(1,1)",
        "CLM(ns,0,2)",
        "SS(1,2)",
        "UM(C1)",
        "UM(C2)",
        ...TEXT,
        "SE(1,2)",
        "TE(1,completed)"
      ])
      expect(yield* texts).toEqual(["A", "C1", "C2"])
      const reqs = yield* requests
      expect(reqs.length).toBe(2)
      const tail = reqs[1]!.messages.slice(-4)
      expect(tail.map((m) => m.role)).toEqual(["assistant", "user", "user", "user"])
      expect(tail.map(token)).toEqual(["tool-call c1", "tool-result c1", "C1", "C2"])
      expect(tail[2]).toEqual(plugin("C1"))
      expect(tail[3]).toEqual(C2)
      yield* idleAndChecked
    }).pipe(Effect.provide(scenario([
      ScriptedModel.response({ toolCalls: [{ id: "c1", name: "noticer", arguments: {} }] }),
      ScriptedModel.text("done")
    ]))))

  agentTest(
    "P8: injection from turn-stopping keeps the turn alive",
    scenario([ScriptedModel.text("one"), ScriptedModel.text("two")]),
    function*({ driver, hooks }) {
      const seen: Array<string> = []
      yield* (yield* PreStep).register((input, next) =>
        Effect.zipRight(Effect.sync(() => seen.push(inputOf(input))), next())
      )
      let calls = 0
      yield* hooks.onTurnStopping(() => (calls++ === 0 ? driver.inject(plugin("C")) : Effect.void))
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect(yield* shape).toEqual([
        "INS(nt,0,[A])",
        "TS(1)",
        "CLM(nt,0,1)",
        "SS(1,1)",
        "UM(A)",
        "RH(initial)",
        ...TEXT,
        "SE(1,1)",
        "INS(ns,0,[C])",
        "CLM(ns,0,1)",
        "SS(1,2)",
        "UM(C)",
        ...TEXT,
        "SE(1,2)",
        "TE(1,completed)"
      ])
      expect(seen).toEqual(["(1,1,initial,[A])", "(1,2,later,[C])"])
      expect((yield* requests).length).toBe(2)
      expect(calls).toBe(2)
      yield* idleAndChecked
    }
  )

  agentTest("P9: idle steer starts a turn", scenario([ScriptedModel.text("ok")]), function*({ driver }) {
    yield* driver.steer(user("S"))
    yield* driver.whenIdle
    expect(yield* shape).toEqual([
      "INS(ns,0,[S])",
      "TS(1)",
      "CLM(ns,0,1)",
      "SS(1,1)",
      "UM(S)",
      "RH(initial)",
      ...TEXT,
      "SE(1,1)",
      "TE(1,completed)"
    ])
    expect((yield* requests).length).toBe(1)
    yield* idleAndChecked
  })

  agentTest(
    "P10: input inserted during a pending pre-step enters the following step",
    scenario([ScriptedModel.text("one"), ScriptedModel.text("two")]),
    function*({ driver, inbox }) {
      const G = yield* Deferred.make<void>()
      yield* (yield* PreStep).register((input, next) =>
        input.step === 1 ? Effect.zipRight(Deferred.await(G), next()) : next()
      )
      const P = user("P")
      const C = plugin("C")
      const S = user("S")
      yield* driver.followup(P)
      yield* driver.inject(C)
      yield* driver.steer(S)
      expect(yield* inbox.nextStep).toEqual([C, S])
      yield* Deferred.succeed(G, undefined)
      yield* driver.whenIdle
      expect(yield* shape).toEqual([
        "INS(nt,0,[P])",
        "TS(1)",
        "CLM(nt,0,1)",
        "INS(ns,0,[C])",
        "INS(ns,1,[S])",
        "SS(1,1)",
        "UM(P)",
        "RH(initial)",
        ...TEXT,
        "SE(1,1)",
        "CLM(ns,0,2)",
        "SS(1,2)",
        "UM(C)",
        "UM(S)",
        ...TEXT,
        "SE(1,2)",
        "TE(1,completed)"
      ])
      const reqs = yield* requests
      expect(reqs.length).toBe(2)
      expect(reqs[0]!.messages).toEqual([P])
      expect(reqs[1]!.messages.slice(-2)).toEqual([C, S])
      expect(yield* inbox.snapshot).toEqual({ nextTurn: [], nextStep: [] })
      yield* idleAndChecked
    }
  )

  it.scoped("P11: steering while a concluding tool runs is not lost", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const tools = yield* Tools
      const S = user("S")
      yield* tools.register(Tool.make("finalize", {
        description: "concludes",
        parameters: Schema.Struct({}),
        execute: () => Effect.as(driver.steer(S), { content: "done", concludesTurn: true })
      }))
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      const reqs = yield* requests
      expect(reqs.length).toBe(2)
      expect(yield* turnEnds).toEqual([{ turn: 1, reason: { kind: "completed" } }])
      const messages = reqs[1]!.messages
      expect(messages.map(token)).toEqual(["A", "tool-call c1", "tool-result c1", "S"])
      expect(messages[3]).toEqual(S)
      yield* idleAndChecked
    }).pipe(Effect.provide(scenario([
      ScriptedModel.response({ toolCalls: [{ id: "c1", name: "finalize", arguments: {} }] }),
      ScriptedModel.text("after")
    ]))))

  agentTest(
    "P12: a pre-step rewrite keeps identity",
    scenario([ScriptedModel.text("ok")]),
    function*({ driver, inbox }) {
      yield* (yield* PreStep).register((input) =>
        Effect.succeed(
          PreStepDecision.enter([{ ...input.messages[0]!, content: [{ type: "text", text: "REWRITTEN" }] }])
        )
      )
      const A = user("A", "original text")
      yield* driver.followup(A)
      yield* driver.whenIdle
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
      expect(yield* userMessages).toEqual([{ ...A, content: [{ type: "text", text: "REWRITTEN" }] }])
      const reqs = yield* requests
      expect(reqs.length).toBe(1)
      expect(reqs[0]!.messages).toEqual([{ ...A, content: [{ type: "text", text: "REWRITTEN" }] }])
      expect(JSON.stringify(reqs[0]!.messages)).not.toContain("original text")
      expect(yield* inbox.idState(A.id)).toEqual(Option.some("entered"))
      yield* idleAndChecked
    }
  )

  agentTest(
    "P13: enter with an extra sourced message",
    scenario([ScriptedModel.text("ok")]),
    function*({ driver, inbox }) {
      const X = plugin("X")
      yield* (yield* PreStep).register((input) => Effect.succeed(PreStepDecision.enter([...input.messages, X])))
      const A = user("A")
      yield* driver.followup(A)
      yield* driver.whenIdle
      expect(yield* shape).toEqual([
        "INS(nt,0,[A])",
        "TS(1)",
        "CLM(nt,0,1)",
        "SS(1,1)",
        "UM(A)",
        "UM(X)",
        "RH(initial)",
        ...TEXT,
        "SE(1,1)",
        "TE(1,completed)"
      ])
      const reqs = yield* requests
      expect(reqs.length).toBe(1)
      expect(reqs[0]!.messages).toEqual([A, X])
      expect(reqs[0]!.messages[1]!.source).toEqual({ kind: "plugin", plugin: "test" })
      expect(yield* inbox.idState(X.id)).toEqual(Option.some("entered"))
      yield* idleAndChecked
    }
  )

  agentTest(
    "P13: adding a message pending in next-turn ends the turn DUPLICATE_MESSAGE with no step",
    scenario([ScriptedModel.text("ok")]),
    function*({ driver, inbox }) {
      const live = yield* driver.subscribe
      const G = yield* Deferred.make<void>()
      const B = user("B")
      const stateSeen: Array<Option.Option<string>> = []
      yield* (yield* PreStep).register((input, next) =>
        input.turn === 1
          ? Effect.gen(function*() {
            yield* Deferred.await(G)
            stateSeen.push(yield* inbox.idState(B.id))
            return PreStepDecision.enter([...input.messages, B])
          })
          : next()
      )
      yield* driver.followup(user("A"))
      yield* driver.followup(B)
      yield* Deferred.succeed(G, undefined)
      yield* driver.whenIdle
      expect(stateSeen).toEqual([Option.some("pending")])
      expect(yield* shape).toEqual([
        "INS(nt,0,[A])",
        "TS(1)",
        "CLM(nt,0,1)",
        "INS(nt,0,[B])",
        "TE(1,error(DUPLICATE_MESSAGE))",
        // B was left pending by the failed proposal, so it runs as its own turn (D3).
        "TS(2)",
        "CLM(nt,0,1)",
        "SS(2,1)",
        "UM(B)",
        "RH(initial)",
        ...TEXT,
        "SE(2,1)",
        "TE(2,completed)"
      ])
      expect(yield* texts).toEqual(["B"])
      yield* idleAndChecked
      expect(yield* liveOf(live)).toEqual([
        "inserted(A)",
        "status(running)",
        "claimed(A,1)",
        "inserted(B)",
        "error(1,1)",
        "claimed(B,2)",
        "status(idle)"
      ])
    }
  )

  agentTest("P14: initial rejection", scenario([]), function*({ driver, inbox, preStep }) {
    const live = yield* driver.subscribe
    yield* preStep.register(() => Effect.succeed(PreStepDecision.reject("nope")))
    const A = user("A")
    yield* driver.followup(A)
    yield* driver.whenIdle
    expect(yield* shape).toEqual(["INS(nt,0,[A])", "TS(1)", "CLM(nt,0,1)", "TE(1,blocked)"])
    expect(yield* turnEnds).toEqual([{ turn: 1, reason: { kind: "blocked", message: "nope" } }])
    expect(yield* requests).toEqual([])
    yield* idleAndChecked
    expect(yield* liveOf(live)).toEqual(["inserted(A)", "status(running)", "claimed(A,1)", "status(idle)"])
    expect(yield* inbox.idState(A.id)).toEqual(Option.some("claimed"))
    const error = yield* Effect.flip(
      preStep.run({ sessionId: SessionId.make("s"), turn: 1, step: 1, boundary: "initial", messages: [A] })
    )
    expect(error._tag).toBe("PreStepRejected")
    expect(error).toMatchObject({ turn: 1, step: 1, reason: "nope" })
  })

  agentTest(
    "P15: a rejection does not stall later follow-ups",
    scenario([ScriptedModel.text("ok")]),
    function*({ driver }) {
      const trace = yield* recordStatus
      const G = yield* Deferred.make<void>()
      yield* (yield* PreStep).register((input, next) =>
        Effect.zipRight(
          Deferred.await(G),
          input.messages.some((m) => JSON.stringify(m.content).includes("secret"))
            ? Effect.succeed(PreStepDecision.reject())
            : next()
        )
      )
      yield* driver.followup(user("X", "secret"))
      yield* driver.followup(user("Y", "safe"))
      yield* Deferred.succeed(G, undefined)
      yield* driver.whenIdle
      expect(yield* shape).toEqual([
        "INS(nt,0,[X])",
        "TS(1)",
        "CLM(nt,0,1)",
        "INS(nt,0,[Y])",
        "TE(1,blocked)",
        "TS(2)",
        "CLM(nt,0,1)",
        "SS(2,1)",
        "UM(Y)",
        "RH(initial)",
        ...TEXT,
        "SE(2,1)",
        "TE(2,completed)"
      ])
      const reqs = yield* requests
      expect(reqs.length).toBe(1)
      expect(JSON.stringify(reqs[0]!.messages)).not.toContain("secret")
      yield* idleAndChecked
      expect(yield* trace).toEqual(["idle", "running", "idle"])
    }
  )

  agentTest(
    "P16: waking input inserted after a rejected claim runs next",
    scenario([ScriptedModel.text("one"), ScriptedModel.text("two")]),
    function*({ driver }) {
      const G = yield* Deferred.make<void>()
      yield* (yield* PreStep).register((input, next) =>
        input.turn === 1 ? Effect.as(Deferred.await(G), PreStepDecision.reject()) : next()
      )
      const C = plugin("C")
      const S = user("S")
      yield* driver.followup(user("P"))
      yield* driver.inject(C)
      yield* driver.steer(S)
      yield* Deferred.succeed(G, undefined)
      yield* driver.whenIdle
      expect(yield* shape).toEqual([
        "INS(nt,0,[P])",
        "TS(1)",
        "CLM(nt,0,1)",
        "INS(ns,0,[C])",
        "INS(ns,1,[S])",
        "TE(1,blocked)",
        "TS(2)",
        "CLM(ns,0,2)",
        "SS(2,1)",
        "UM(C)",
        "UM(S)",
        "RH(initial)",
        ...TEXT,
        "SE(2,1)",
        "TE(2,completed)"
      ])
      const reqs = yield* requests
      expect(reqs.length).toBe(1)
      expect(reqs[0]!.messages).toEqual([C, S])
      yield* idleAndChecked
      const before = (yield* shape).length
      yield* driver.followup(user("W"))
      yield* driver.whenIdle
      expect((yield* shape).slice(before)).toEqual([
        "INS(nt,0,[W])",
        "TS(3)",
        "CLM(nt,0,1)",
        "SS(3,1)",
        "UM(W)",
        ...TEXT,
        "SE(3,1)",
        "TE(3,completed)"
      ])
      yield* idleAndChecked
    }
  )

  agentTest(
    "P16: without the steer, injected context waits for the next wake",
    scenario([ScriptedModel.text("ok")]),
    function*({ driver, inbox }) {
      const G = yield* Deferred.make<void>()
      yield* (yield* PreStep).register((input, next) =>
        input.turn === 1 ? Effect.as(Deferred.await(G), PreStepDecision.reject()) : next()
      )
      const C = plugin("C")
      yield* driver.followup(user("P"))
      yield* driver.inject(C)
      yield* Deferred.succeed(G, undefined)
      yield* driver.whenIdle
      expect(yield* shape).toEqual(["INS(nt,0,[P])", "TS(1)", "CLM(nt,0,1)", "INS(ns,0,[C])", "TE(1,blocked)"])
      expect(yield* driver.status).toBe("idle")
      expect(yield* inbox.nextStep).toEqual([C])
      expect(yield* requests).toEqual([])
      yield* idleAndChecked
      const before = (yield* shape).length
      yield* driver.followup(user("W"))
      yield* driver.whenIdle
      expect((yield* shape).slice(before)).toEqual([
        "INS(nt,0,[W])",
        "TS(2)",
        "CLM(ns,0,1)",
        "CLM(nt,0,1)",
        "SS(2,1)",
        "UM(C)",
        "UM(W)",
        "RH(initial)",
        ...TEXT,
        "SE(2,1)",
        "TE(2,completed)"
      ])
      yield* idleAndChecked
    }
  )

  agentTest(
    "P17: a failing pre-step does not strand the queue",
    scenario([ScriptedModel.text("one"), ScriptedModel.text("two")]),
    function*({ driver }) {
      const live = yield* driver.subscribe
      const trace = yield* recordStatus
      const G = yield* Deferred.make<void>()
      const broke = new Error("prompt hook broke")
      yield* (yield* PreStep).register((input, next) =>
        input.turn === 1 ? Effect.zipRight(Deferred.await(G), Effect.fail(broke)) : next()
      )
      const S2 = user("S2")
      yield* driver.followup(user("F"))
      yield* driver.followup(S2)
      yield* Deferred.succeed(G, undefined)
      yield* driver.whenIdle
      expect(yield* shape).toEqual([
        "INS(nt,0,[F])",
        "TS(1)",
        "CLM(nt,0,1)",
        "INS(nt,0,[S2])",
        "TE(1,error(UNKNOWN))",
        "TS(2)",
        "CLM(nt,0,1)",
        "SS(2,1)",
        "UM(S2)",
        "RH(initial)",
        ...TEXT,
        "SE(2,1)",
        "TE(2,completed)"
      ])
      expect((yield* turnEnds)[0]).toEqual({
        turn: 1,
        reason: { kind: "error", error: { message: "prompt hook broke", code: "UNKNOWN" } }
      })
      const reqs = yield* requests
      expect(reqs.length).toBe(1)
      expect(reqs[0]!.messages).toEqual([S2])
      yield* idleAndChecked
      const events = Chunk.toReadonlyArray(yield* Queue.takeAll(live))
      const errors = events.filter((e) => e.type === "agent/error")
      expect(errors.length).toBe(1)
      expect(errors[0]).toMatchObject({ type: "agent/error", turn: 1, step: 1 })
      expect((errors[0] as { error: unknown }).error).toBe(broke)
      expect(yield* trace).toEqual(["idle", "running", "idle"])
    }
  )

  agentTest(
    "P18: an empty initial entry makes no model call",
    scenario([ScriptedModel.text("ok")]),
    function*({ driver, inbox }) {
      const G = yield* Deferred.make<void>()
      yield* (yield* PreStep).register((input, next) =>
        Effect.zipRight(
          input.turn === 1 ? Deferred.await(G) : Effect.void,
          input.messages.some((m) => m.id === "A") ? Effect.succeed(PreStepDecision.enter([])) : next()
        )
      )
      const A = user("A")
      const B = user("B")
      yield* driver.followup(A)
      yield* driver.followup(B)
      yield* Deferred.succeed(G, undefined)
      yield* driver.whenIdle
      expect(yield* shape).toEqual([
        "INS(nt,0,[A])",
        "TS(1)",
        "CLM(nt,0,1)",
        "INS(nt,0,[B])",
        "TE(1,completed)",
        "TS(2)",
        "CLM(nt,0,1)",
        "SS(2,1)",
        "UM(B)",
        "RH(initial)",
        ...TEXT,
        "SE(2,1)",
        "TE(2,completed)"
      ])
      const reqs = yield* requests
      expect(reqs.length).toBe(1)
      expect(reqs[0]!.messages).toEqual([B])
      expect(yield* inbox.idState(A.id)).toEqual(Option.some("claimed"))
      yield* idleAndChecked
    }
  )

  agentTest(
    "P19a: both listeners call next; additions appear in waterfall return order",
    scenario([ScriptedModel.text("ok")]),
    function*({ driver, preStep }) {
      const order: Array<string> = []
      const X = plugin("X")
      const Y = plugin("Y")
      yield* preStep.register((input, next) =>
        Effect.gen(function*() {
          order.push("L1")
          const d = yield* next()
          return d._tag === "Enter" ? PreStepDecision.enter([...d.messages, Y]) : d
        })
      )
      yield* preStep.register((input, next) =>
        Effect.gen(function*() {
          order.push("L2")
          const d = yield* next()
          // What L2's next() returns is the default's decision: the claimed batch as it is.
          if (d._tag === "Enter" && d.messages.map((m) => m.id).join() === input.messages.map((m) => m.id).join()) {
            order.push("default")
          }
          return d._tag === "Enter" ? PreStepDecision.enter([...d.messages, X]) : d
        })
      )
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect(order).toEqual(["L1", "L2", "default"])
      expect((yield* shape).slice(3, 8)).toEqual(["SS(1,1)", "UM(A)", "UM(X)", "UM(Y)", "RH(initial)"])
      expect((yield* requests)[0]!.messages.map((m) => m.id)).toEqual(["A", "X", "Y"])
      yield* idleAndChecked
    }
  )

  agentTest(
    "P19b: a listener that does not call next vetoes the listeners beneath it",
    scenario([ScriptedModel.text("ok")]),
    function*({ driver, preStep }) {
      const order: Array<string> = []
      const A = user("A")
      yield* preStep.register(() => Effect.sync(() => (order.push("L1"), PreStepDecision.enter([A]))))
      yield* preStep.register((_input, next) => Effect.zipRight(Effect.sync(() => order.push("L2")), next()))
      yield* driver.followup(A)
      yield* driver.whenIdle
      expect(order).toEqual(["L1"])
      expect((yield* shape).slice(3, 5)).toEqual(["SS(1,1)", "UM(A)"])
      yield* idleAndChecked
    }
  )

  agentTest(
    "P19c: calling next twice ends the turn with an error and no step",
    scenario([]),
    function*({ driver, preStep }) {
      const live = yield* driver.subscribe
      yield* preStep.register((_input, next) => next())
      yield* preStep.register((_input, next) => Effect.zipRight(next(), next()))
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      const log = yield* shape
      expect(log.slice(0, 3)).toEqual(["INS(nt,0,[A])", "TS(1)", "CLM(nt,0,1)"])
      expect(log.length).toBe(4)
      expect(log[3]).toMatch(/^TE\(1,error\(/)
      const [end] = yield* turnEnds
      expect(end!.reason.kind).toBe("error")
      expect(JSON.stringify(end!.reason)).toContain("next() called more than once")
      expect(yield* requests).toEqual([])
      yield* idleAndChecked
      expect((yield* liveOf(live)).filter((s) => s.startsWith("error"))).toEqual(["error(1,1)"])
    }
  )

  agentTest(
    "P19d: a prepended listener runs first",
    scenario([ScriptedModel.text("ok")]),
    function*({ driver, preStep }) {
      const order: Array<string> = []
      const track = (name: string) => (_input: PreStepInput, next: () => Effect.Effect<PreStepDecision, unknown>) =>
        Effect.zipRight(Effect.sync(() => order.push(name)), next())
      yield* preStep.register(track("L1"))
      yield* preStep.register(track("L2"))
      yield* preStep.register(track("L3"), { prepend: true })
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect(order).toEqual(["L3", "L1", "L2"])
      yield* idleAndChecked
    }
  )

  agentTest(
    "P19e: listener input is frozen and the default returns a new array",
    scenario([ScriptedModel.text("ok")]),
    function*({ driver, preStep }) {
      const A = user("A")
      const seen: Array<Record<string, boolean>> = []
      yield* preStep.register((input, next) =>
        Effect.gen(function*() {
          const d = yield* next()
          seen.push({
            arrayFrozen: Object.isFrozen(input.messages),
            elementsFrozen: input.messages.every((m) => Object.isFrozen(m) && Object.isFrozen(m.content)),
            notCallers: input.messages.every((m) => m !== A),
            equalToCallers: JSON.stringify(input.messages) === JSON.stringify([A]),
            freshDefault: d._tag === "Enter" && d.messages !== input.messages
          })
          return d
        })
      )
      yield* driver.followup(A)
      yield* driver.whenIdle
      expect(seen).toEqual([{
        arrayFrozen: true,
        elementsFrozen: true,
        notCallers: true,
        equalToCallers: true,
        freshDefault: true
      }])
      yield* idleAndChecked
    }
  )
})
