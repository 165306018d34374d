/**
 * SPEC 9 scenarios P1-P19 over both stores: deliveries, pre-step listeners, waking work at a later
 * boundary.
 */
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Exit, Fiber, Option, Ref, Stream, TestClock } from "effect"
import {
  CancelCause,
  Driver,
  Hooks,
  Inbox,
  PreStep,
  PreStepDecision,
  PreStepRejected,
  ScriptedModel,
  SessionId,
  SessionLog,
  Tool
} from "../../../src/index.js"
import type { PreStepInput, ScriptEntry, UserMessage } from "../../../src/index.js"
import {
  agentTest,
  asId,
  closeOut,
  dataOfType,
  gate,
  liveNotation,
  open,
  plugin,
  recordLive,
  requests,
  scenario,
  settle,
  shape,
  TEXT,
  texts,
  token,
  until,
  user
} from "../harness.js"
import { calls, captured, empty, from, onBoth } from "./bothStores.js"
import type { Case, Services } from "./bothStores.js"

/**
 * A case whose pre-step listener waits for a gate the body opens once `deliver` has returned, then
 * answers with `decide`; `after` runs once the gate is open and gives the case's result.
 */
const heldPreStep = <D, X = void>(
  script: ReadonlyArray<ScriptEntry>,
  decide: (
    input: PreStepInput,
    next: () => Effect.Effect<PreStepDecision, unknown>
  ) => Effect.Effect<PreStepDecision, unknown>,
  deliver: (d: Driver["Type"]) => Effect.Effect<D, unknown, Services>,
  after: (d: Driver["Type"], delivered: D) => Effect.Effect<X, unknown, Services> = () =>
    Effect.void as Effect.Effect<any>
) =>
() => {
  const G = gate()
  return {
    script,
    body: Effect.gen(function*() {
      yield* (yield* PreStep).register((input, next) => Effect.zipRight(Deferred.await(G), decide(input, next)))
      const d = yield* Driver
      const delivered = yield* deliver(d)
      yield* open(G)
      return yield* after(d, delivered)
    })
  }
}

/** A case that registers `listener` (given the agent's driver) as a pre-step listener, then follows up A. */
const withListener = (
  script: ReadonlyArray<ScriptEntry>,
  listener: (
    d: Driver["Type"]
  ) => (
    input: PreStepInput,
    next: () => Effect.Effect<PreStepDecision, unknown>
  ) => Effect.Effect<PreStepDecision, unknown>,
  options: Case<void>["options"] = {}
) =>
(): Case<void> => ({
  script,
  options,
  body: Effect.gen(function*() {
    const d = yield* Driver
    yield* (yield* PreStep).register(listener(d))
    yield* d.followup(user("A"))
  })
})

// ---------------------------------------------------------------------------------------------------
describe("§9 P1-P19 on both stores: deliveries and pre-step", () => {
  it.scoped("P1/C1: simple turn — exact log, live notifications, usage and citations", () =>
    Effect.gen(function*() {
      const run = yield* onBoth(() => ({
        script: [ScriptedModel.text("hello there", { usage: { inputTokens: 3, outputTokens: 2 } })],
        body: Effect.gen(function*() {
          const d = yield* Driver
          yield* d.followup(user("A"))
          yield* d.whenIdle
          expect((yield* (yield* SessionLog).messages).map(token)).toEqual(["A", "hello there"])
          expect((yield* requests)[0]!.messages).toEqual([user("A")])
        })
      }))
      expect(run.shape).toEqual([
        "INS(nt,0,[A])",
        "TS(1)",
        "CLM(nt,0,1)",
        "SS(1,1)",
        "UM(A)",
        "RH(initial)",
        "CH(block-start)",
        "CH(text-delta)",
        "CH(block-end)",
        "CH(usage)",
        "CH(finish stop)",
        "AM",
        "SE(1,1)",
        "TE(1,completed)"
      ])
      expect(run.live).toEqual(["inserted(A)", "status(running)", "claimed(A,1)", "status(idle)"])
      expect(run.trace).toEqual(["idle", "running", "idle"])
      const am = run.events.find((e) => e.type === "assistant/message")!
      expect((am.data as any).usage).toEqual({ inputTokens: 3, outputTokens: 2 })
      expect((am as any).sourceEventSeqs).toEqual([6, 7, 8, 9, 10])
      expect(run.requests).toEqual([{ turn: 1, step: 1, attempt: 1, messages: ["A"] }])
      expect(run.events.map((e) => e.seq)).toEqual(run.events.map((_, i) => i))
    }))

  it.scoped("P3: two follow-ups are two turns; one RH(initial); trace idle, running, idle", () =>
    Effect.gen(function*() {
      const run = yield* onBoth(() => {
        const G = gate()
        return {
          script: [ScriptedModel.text("first", { awaitBefore: Deferred.await(G) }), ScriptedModel.text("second")],
          racing: ["INS(nt,0,[B])"],
          body: Effect.gen(function*() {
            const d = yield* Driver
            yield* d.followup(user("A"))
            yield* d.followup(user("B"))
            yield* open(G)
          })
        }
      })
      const at = run.shape.indexOf("INS(nt,0,[B])")
      expect(at).toBeGreaterThan(2)
      expect(at).toBeLessThan(run.shape.indexOf("CH(block-start)"))
      expect(run.shape.filter((_, i) => i !== at)).toEqual([
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
      expect(run.requests.map((r) => r.messages)).toEqual([["A"], ["A", "first", "B"]])
      expect(run.trace).toEqual(["idle", "running", "idle"])
      expect(run.live).toEqual([
        "inserted(A)",
        "status(running)",
        "claimed(A,1)",
        "inserted(B)",
        "claimed(B,2)",
        "status(idle)"
      ])
    }))

  it.scoped("P6/C3: idle inject, then follow-up — next-step items claimed first, same transaction as TS", () =>
    Effect.gen(function*() {
      const run = yield* onBoth(() => ({
        script: [ScriptedModel.text("ok")],
        body: Effect.gen(function*() {
          const d = yield* Driver
          yield* d.inject(plugin("C", "context text"))
          expect(yield* d.status).toBe("idle")
          yield* d.followup(user("A"))
          yield* d.whenIdle
          const rs = yield* requests
          expect(rs[0]!.messages).toEqual([plugin("C", "context text"), user("A")])
          expect(rs[0]!.messages[0]!.source).toEqual({ kind: "plugin", plugin: "test" })
        })
      }))
      expect(run.shape).toEqual([
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
      expect(run.live).toEqual([
        "inserted(C)",
        "inserted(A)",
        "status(running)",
        "claimed(C,1)",
        "claimed(A,1)",
        "status(idle)"
      ])
      const um = run.events.filter((e) => e.type === "user/message")
      expect((um[0]!.data as any).source).toEqual({ kind: "plugin", plugin: "test" })
    }))

  it.scoped("P7: injection from a tool body waits for the next step", () =>
    Effect.gen(function*() {
      const run = yield* onBoth(() => {
        const driver = captured()
        const noticer = Tool.make("noticer", {
          description: "injects",
          parameters: empty,
          execute: () =>
            Effect.gen(function*() {
              yield* driver.get.inject(plugin("C1"))
              yield* driver.get.inject(plugin("C2"))
              return "ok"
            })
        })
        return {
          script: [calls("noticer", ["c1"]), ScriptedModel.text("done")],
          options: { tools: [noticer] },
          body: Effect.flatMap(driver.capture, (d) => d.followup(user("A")))
        }
      })
      expect(from(run.shape, "AM")).toEqual([
        "AM",
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
      expect(run.requests[1]!.messages).toEqual(["A", "tool-call c1", "tool-result c1", "C1", "C2"])
    }))

  it.scoped("P8: injection from turn-stopping keeps the turn alive; pre-step sees (1,1,initial,[A]) then (1,2,later,[C])", () =>
    Effect.gen(function*() {
      const run = yield* onBoth(() => ({
        script: [ScriptedModel.text("a"), ScriptedModel.text("b")],
        body: Effect.gen(function*() {
          const d = yield* Driver
          const hooks = yield* Hooks
          const pre = yield* PreStep
          const seen: Array<string> = []
          let first = true
          yield* hooks.onTurnStopping(() => (first ? ((first = false), d.inject(plugin("C"))) : Effect.void))
          yield* pre.register((input: PreStepInput, next) =>
            Effect.suspend(() => {
              seen.push(
                `(${input.turn},${input.step},${input.boundary},[${input.messages.map((m) => m.id).join(",")}])`
              )
              return next()
            })
          )
          yield* d.followup(user("A"))
          yield* d.whenIdle
          return seen
        })
      }))
      expect(run.shape).toEqual([
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
      expect(run.extra).toEqual(["(1,1,initial,[A])", "(1,2,later,[C])"])
      expect(run.requests).toHaveLength(2)
    }))

  it.scoped("P9: idle steer starts a turn", () =>
    Effect.gen(function*() {
      const run = yield* onBoth(() => ({
        script: [ScriptedModel.text("ok")],
        body: Effect.flatMap(Driver, (d) => d.steer(user("S")))
      }))
      expect(run.shape).toEqual([
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
      expect(run.live).toEqual(["inserted(S)", "status(running)", "claimed(S,1)", "status(idle)"])
    }))

  it.scoped("P10/4.9: input inserted during a pending pre-step enters the following step", () =>
    Effect.gen(function*() {
      const run = yield* onBoth(() => {
        const G = gate()
        return {
          script: [ScriptedModel.text("a"), ScriptedModel.text("b")],
          body: Effect.gen(function*() {
            const d = yield* Driver
            const pre = yield* PreStep
            yield* pre.register((
              input,
              next
            ) => (input.step === 1 ? Effect.zipRight(Deferred.await(G), next()) : next()))
            yield* d.followup(user("P"))
            yield* d.inject(plugin("C"))
            yield* d.steer(user("S"))
            expect((yield* (yield* Inbox).nextStep).map((m) => m.id)).toEqual(["C", "S"])
            yield* open(G)
          })
        }
      })
      expect(run.shape).toEqual([
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
      expect(run.requests.map((r) => r.messages)).toEqual([["P"], ["P", "a", "C", "S"]])
      expect(run.inbox).toEqual({ nextTurn: [], nextStep: [] })
    }))

  it.scoped("P14: initial rejection — no step, blocked{message}, the claim stays claimed", () =>
    Effect.gen(function*() {
      const run = yield* onBoth(() => ({
        script: [],
        body: Effect.gen(function*() {
          const pre = yield* PreStep
          yield* pre.register(() => Effect.succeed(PreStepDecision.reject("nope")))
          yield* (yield* Driver).followup(user("A"))
          yield* (yield* Driver).whenIdle
          const rejected = yield* Effect.flip(
            pre.run({ sessionId: SessionId.make("s"), turn: 1, step: 1, boundary: "initial", messages: [user("A")] })
          )
          expect(rejected).toBeInstanceOf(PreStepRejected)
          expect(rejected).toMatchObject({ _tag: "PreStepRejected", turn: 1, step: 1, reason: "nope" })
          return yield* (yield* Inbox).idState(user("A").id)
        })
      }))
      expect(run.shape).toEqual(["INS(nt,0,[A])", "TS(1)", "CLM(nt,0,1)", "TE(1,blocked)"])
      expect((run.events[3]!.data as any).reason).toEqual({ kind: "blocked", message: "nope" })
      expect(run.live).toEqual(["inserted(A)", "status(running)", "claimed(A,1)", "status(idle)"])
      expect(run.extra._tag === "Some" && run.extra.value).toBe("claimed")
      expect(run.requests).toEqual([])
    }))

  it.scoped("P15/C4: a rejection does not stall later follow-ups — TE(blocked) TS(2) CLM in one chain", () =>
    Effect.gen(function*() {
      const run = yield* onBoth(heldPreStep(
        [ScriptedModel.text("ok")],
        (input, next) =>
          input.messages.some((m) => m.content.some((b) => b.type === "text" && b.text.includes("secret")))
            ? Effect.succeed(PreStepDecision.reject())
            : next(),
        (d) => Effect.zipRight(d.followup(user("X", "secret")), d.followup(user("Y", "safe")))
      ))
      expect(run.shape).toEqual([
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
      expect((run.events[4]!.data as any).reason).toEqual({ kind: "blocked" })
      expect(run.requests.map((r) => r.messages)).toEqual([["safe"]])
      expect(run.trace).toEqual(["idle", "running", "idle"])
    }))

  it.scoped("P16: a steer after a rejected claim runs next with the injected context; P's turn is blocked; a later follow-up is turn 3", () =>
    Effect.gen(function*() {
      const run = yield* onBoth(heldPreStep(
        [ScriptedModel.text("a"), ScriptedModel.text("b")],
        (input, next) => input.turn === 1 ? Effect.succeed(PreStepDecision.reject()) : next(),
        (d) => Effect.all([d.followup(user("P")), d.inject(plugin("C")), d.steer(user("S"))]),
        (d) =>
          Effect.gen(function*() {
            yield* d.whenIdle
            yield* d.followup(user("W"))
            yield* d.whenIdle
            return { turns: (yield* dataOfType("turn/start")).map((x) => x.turn), texts: yield* texts }
          })
      ))
      expect(run.shape.slice(0, 19)).toEqual([
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
      expect(run.requests.map((r) => r.messages)).toEqual([["C", "S"], ["C", "S", "a", "W"]])
      expect(run.extra).toEqual({ turns: [1, 2, 3], texts: ["C", "S", "W"] })
    }))

  it.scoped("P17: a failing pre-step does not strand the queue; one agent/error for turn 1", () =>
    Effect.gen(function*() {
      const failure = new Error("prompt hook broke")
      const run = yield* onBoth(heldPreStep(
        [ScriptedModel.text("a")],
        (input, next) => input.turn === 1 ? Effect.fail(failure) : next(),
        (d) => Effect.zipLeft(recordLive, Effect.zipRight(d.followup(user("F")), d.followup(user("S2")))),
        (d, live) =>
          Effect.gen(function*() {
            yield* d.whenIdle
            const errors = (yield* live).filter((e) => e.type === "agent/error")
            expect(errors).toHaveLength(1)
            expect(errors[0]).toMatchObject({ turn: 1, step: 1 })
            expect((errors[0] as any).error).toBe(failure)
          })
      ))
      expect(run.shape).toEqual([
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
      expect((run.events[4]!.data as any).reason).toEqual({
        kind: "error",
        error: { message: "prompt hook broke", code: "UNKNOWN" }
      })
      expect(run.live).toEqual([
        "inserted(F)",
        "status(running)",
        "claimed(F,1)",
        "inserted(S2)",
        "error(1,1)",
        "claimed(S2,2)",
        "status(idle)"
      ])
      expect(run.requests).toHaveLength(1)
      expect(run.trace).toEqual(["idle", "running", "idle"])
    }))

  it.scoped("P18/D15: an empty initial entry makes no model call; the chain continues", () =>
    Effect.gen(function*() {
      const run = yield* onBoth(heldPreStep(
        [ScriptedModel.text("b")],
        (input, next) => input.messages.some((m) => m.id === "A") ? Effect.succeed(PreStepDecision.enter([])) : next(),
        (d) => Effect.zipRight(d.followup(user("A")), d.followup(user("B"))),
        (d) =>
          Effect.gen(function*() {
            yield* d.whenIdle
            expect(yield* (yield* Inbox).idState(asId("A"))).toEqual(Option.some("claimed"))
          })
      ))
      expect(run.shape).toEqual([
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
      expect(run.requests.map((r) => r.messages)).toEqual([["B"]])
    }))
})

// ---------------------------------------------------------------------------------------------------
describe("§4.3 / §4.4 / §4.9 on both stores: pre-step listeners (enter, reject, steer)", () => {
  it.scoped("4.9: a steer made by the step-1 listener misses step 1 and enters step 2 of the same turn", () =>
    Effect.gen(function*() {
      const run = yield* onBoth(withListener(
        [ScriptedModel.text("a"), ScriptedModel.text("b")],
        (d) => (input, next) => input.step === 1 ? Effect.zipRight(Effect.orDie(d.steer(user("S"))), next()) : next()
      ))
      expect(run.shape).toEqual([
        "INS(nt,0,[A])",
        "TS(1)",
        "CLM(nt,0,1)",
        "INS(ns,0,[S])",
        "SS(1,1)",
        "UM(A)",
        "RH(initial)",
        ...TEXT,
        "SE(1,1)",
        "CLM(ns,0,1)",
        "SS(1,2)",
        "UM(S)",
        ...TEXT,
        "SE(1,2)",
        "TE(1,completed)"
      ])
      expect(run.requests.map((r) => r.messages)).toEqual([["A"], ["A", "a", "S"]])
      expect(run.live).toEqual([
        "inserted(A)",
        "status(running)",
        "claimed(A,1)",
        "inserted(S)",
        "claimed(S,1)",
        "status(idle)"
      ])
    }))

  it.scoped("4.9/7.3: a steer made by a rejecting initial listener runs in the next turn (TE blocked, TS(2), CLM(ns) in one chain)", () =>
    Effect.gen(function*() {
      const run = yield* onBoth(withListener(
        [ScriptedModel.text("s")],
        (d) => (input, next) =>
          input.turn === 1 ? Effect.as(Effect.orDie(d.steer(user("S"))), PreStepDecision.reject("later")) : next()
      ))
      expect(run.shape).toEqual([
        "INS(nt,0,[A])",
        "TS(1)",
        "CLM(nt,0,1)",
        "INS(ns,0,[S])",
        "TE(1,blocked)",
        "TS(2)",
        "CLM(ns,0,1)",
        "SS(2,1)",
        "UM(S)",
        "RH(initial)",
        ...TEXT,
        "SE(2,1)",
        "TE(2,completed)"
      ])
      expect(run.trace).toEqual(["idle", "running", "idle"])
      expect(run.live).toEqual([
        "inserted(A)",
        "status(running)",
        "claimed(A,1)",
        "inserted(S)",
        "claimed(S,2)",
        "status(idle)"
      ])
    }))

  it.scoped("4.8/7.3: an inject made by a rejecting initial listener is not waking work — idle, the context stays pending", () =>
    Effect.gen(function*() {
      const run = yield* onBoth(
        withListener([], (d) => () => Effect.as(Effect.orDie(d.inject(plugin("C"))), PreStepDecision.reject()))
      )
      expect(run.shape).toEqual(["INS(nt,0,[A])", "TS(1)", "CLM(nt,0,1)", "INS(ns,0,[C])", "TE(1,blocked)"])
      expect(run.inbox).toEqual({ nextTurn: [], nextStep: ["C"] })
      expect(run.trace).toEqual(["idle", "running", "idle"])
    }))

  it.scoped("4.4/P19: waterfall additions appear in return order [A, X, Y]; a prepended listener runs first; additions become entered", () =>
    Effect.gen(function*() {
      const run = yield* onBoth(() => ({
        script: [ScriptedModel.text("ok")],
        body: Effect.gen(function*() {
          const pre = yield* PreStep
          const calls: Array<string> = []
          const add =
            (name: string, m: ReturnType<typeof plugin>) =>
            (_: PreStepInput, next: () => Effect.Effect<PreStepDecision, any>) =>
              Effect.suspend(() => {
                calls.push(name)
                return Effect.map(next(), (d) => d._tag === "Enter" ? PreStepDecision.enter([...d.messages, m]) : d)
              })
          yield* pre.register(add("L1", plugin("Y")))
          yield* pre.register(add("L2", plugin("X")))
          yield* pre.register(add("L3", plugin("Z")), { prepend: true })
          yield* (yield* Driver).followup(user("A"))
          yield* (yield* Driver).whenIdle
          const inbox = yield* Inbox
          const states = [] as Array<string>
          for (const id of ["A", "X", "Y", "Z"]) {
            const o = yield* inbox.idState(user(id).id)
            states.push(o._tag === "Some" ? o.value : "none")
          }
          return { calls, states }
        })
      }))
      expect(run.extra).toEqual({ calls: ["L3", "L1", "L2"], states: ["entered", "entered", "entered", "entered"] })
      expect(run.shape.slice(3, 8)).toEqual(["SS(1,1)", "UM(A)", "UM(X)", "UM(Y)", "UM(Z)"])
      expect(run.requests.map((r) => r.messages)).toEqual([["A", "X", "Y", "Z"]])
    }))

  it.scoped("4.3: a rejection at the later boundary after tools ends blocked{message} after the results, no further step", () =>
    Effect.gen(function*() {
      const run = yield* onBoth(() => ({
        script: [calls("t", ["c1"])],
        options: {
          tools: [Tool.make("t", { description: "t", parameters: empty, execute: () => Effect.succeed("ok") })]
        },
        body: Effect.gen(function*() {
          const seen: Array<string> = []
          yield* (yield* PreStep).register((input, next) =>
            Effect.suspend(() => {
              seen.push(`${input.step}:${input.boundary}:${input.messages.length}`)
              return input.boundary === "later" ? Effect.succeed(PreStepDecision.reject("enough")) : next()
            })
          )
          yield* (yield* Driver).followup(user("A"))
          yield* (yield* Driver).whenIdle
          return seen
        })
      }))
      expect(run.extra).toEqual(["1:initial:1", "2:later:0"])
      expect(run.shape.slice(-4)).toEqual(["TC(c1)", "TR(c1)", "SE(1,1)", "TE(1,blocked)"])
      expect((run.events[run.events.length - 1]!.data as any).reason).toEqual({ kind: "blocked", message: "enough" })
      expect(run.requests).toHaveLength(1)
    }))

  it.scoped("4.3: entering [] at a later boundary after a natural stop closes completed; the claimed steer stays claimed", () =>
    Effect.gen(function*() {
      const run = yield* onBoth(() => {
        const driver = captured()
        let first = true
        return {
          script: [ScriptedModel.text("a")],
          body: Effect.gen(function*() {
            const d = yield* driver.capture
            yield* (yield* Hooks).onTurnStopping(
              () => (first ? ((first = false), driver.get.steer(user("S"))) : Effect.void)
            )
            yield* (yield* PreStep).register((input, next) =>
              input.boundary === "later" ? Effect.succeed(PreStepDecision.enter([])) : next()
            )
            yield* d.followup(user("A"))
            yield* d.whenIdle
            const o = yield* (yield* Inbox).idState(user("S").id)
            return o._tag === "Some" ? o.value : "none"
          })
        }
      })
      expect(run.shape.slice(-4)).toEqual(["SE(1,1)", "INS(ns,0,[S])", "CLM(ns,0,1)", "TE(1,completed)"])
      expect(run.extra).toBe("claimed")
      expect(run.requests).toHaveLength(1)
    }))

  it.scoped("4.3: a later-boundary listener failure ends error with live agent/error for step k+1", () =>
    Effect.gen(function*() {
      const run = yield* onBoth(withListener(
        [calls("t", ["c1"])],
        () => (input, next) =>
          input.boundary === "later" ? Effect.fail({ code: "HOOK", message: "later broke" }) : next(),
        { tools: [Tool.make("t", { description: "t", parameters: empty, execute: () => Effect.succeed("ok") })] }
      ))
      expect(run.shape.slice(-3)).toEqual(["TR(c1)", "SE(1,1)", "TE(1,error(HOOK))"])
      expect((run.events[run.events.length - 1]!.data as any).reason).toEqual({
        kind: "error",
        error: { message: "later broke", code: "HOOK" }
      })
      expect(run.live).toEqual(["inserted(A)", "status(running)", "claimed(A,1)", "error(1,2)", "status(idle)"])
    }))

  it.scoped("4.2/4.4: an invalid Enter element ends error(INVALID_MESSAGE) without step/start; a duplicate of a pending id ends DUPLICATE_MESSAGE", () =>
    Effect.gen(function*() {
      const run = yield* onBoth(() => ({
        script: [],
        body: Effect.gen(function*() {
          const d = yield* Driver
          yield* d.inject(plugin("P"))
          yield* (yield* PreStep).register((input, next) =>
            input.turn === 1
              ? Effect.succeed(
                PreStepDecision.enter([
                  ...input.messages,
                  { id: "", role: "user", content: [], source: { kind: "x" } } as any
                ])
              )
              : input.turn === 2
              ? Effect.succeed(PreStepDecision.enter([...input.messages, plugin("Q")]))
              : next()
          )
          yield* d.followup(user("A"))
          yield* d.whenIdle
          yield* (yield* Inbox).append("next-step", plugin("Q"))
          yield* d.followup(user("B"))
        })
      }))
      expect(run.shape).toEqual([
        "INS(ns,0,[P])",
        "INS(nt,0,[A])",
        "TS(1)",
        "CLM(ns,0,1)",
        "CLM(nt,0,1)",
        "TE(1,error(INVALID_MESSAGE))",
        "INS(ns,0,[Q])",
        "INS(nt,0,[B])",
        "TS(2)",
        "CLM(ns,0,1)",
        "CLM(nt,0,1)",
        "TE(2,error(DUPLICATE_MESSAGE))"
      ])
      expect(run.live.filter((x) => x.startsWith("error"))).toEqual(["error(1,1)", "error(2,1)"])
    }))

  it.scoped("4.4/K3: a pending listener is interrupted by a cancel — TE(aborted), no step, no agent/error", () =>
    Effect.gen(function*() {
      const run = yield* onBoth(() => {
        const interrupted = { value: false }
        return {
          script: [],
          body: Effect.gen(function*() {
            const entered = gate()
            yield* (yield* PreStep).register(() =>
              Effect.zipRight(open(entered), Effect.never).pipe(
                Effect.onInterrupt(() => Effect.sync(() => (interrupted.value = true)))
              )
            )
            const d = yield* Driver
            yield* d.followup(user("A"))
            yield* Deferred.await(entered)
            yield* d.cancel(CancelCause.hook("stop"))
            yield* d.whenIdle
            return interrupted.value
          })
        }
      })
      expect(run.extra).toBe(true)
      expect(run.shape).toEqual(["INS(nt,0,[A])", "TS(1)", "CLM(nt,0,1)", "TE(1,aborted(hook))"])
      expect((run.events[3]!.data as any).reason).toEqual({ kind: "aborted", reason: { kind: "hook", reason: "stop" } })
      expect(run.live).toEqual(["inserted(A)", "status(running)", "claimed(A,1)", "status(idle)"])
    }))
})

// ---------------------------------------------------------------------------------------------------
describe("§4.8 / §7.3 on both stores: waking work at a later boundary", () => {
  const lateBoundary = (how: "steer" | "inject") => () => {
    const driver = captured()
    let first = true
    return {
      script: [ScriptedModel.text("a"), ScriptedModel.text("b")],
      body: Effect.gen(function*() {
        const d = yield* driver.capture
        yield* (yield* Hooks).onTurnStopping(
          () => (first ? ((first = false), driver.get.steer(user("S1"))) : Effect.void)
        )
        yield* (yield* PreStep).register((input, next) =>
          input.turn === 1 && input.boundary === "later"
            ? Effect.as(
              Effect.orDie(how === "steer" ? driver.get.steer(user("S2")) : driver.get.inject(plugin("C2"))),
              PreStepDecision.enter([])
            )
            : next()
        )
        yield* d.followup(user("A"))
      })
    }
  }

  it.scoped("7.3/4.8: a steer made during a later pre-step that enters [] is waking work — the chain continues into turn 2", () =>
    Effect.gen(function*() {
      const run = yield* onBoth(lateBoundary("steer"))
      expect(from(run.shape, "SE(1,1)")).toEqual([
        "SE(1,1)",
        "INS(ns,0,[S1])",
        "CLM(ns,0,1)",
        "INS(ns,0,[S2])",
        "TE(1,completed)",
        "TS(2)",
        "CLM(ns,0,1)",
        "SS(2,1)",
        "UM(S2)",
        ...TEXT,
        "SE(2,1)",
        "TE(2,completed)"
      ])
      expect(run.trace).toEqual(["idle", "running", "idle"])
      expect(run.live).toEqual([
        "inserted(A)",
        "status(running)",
        "claimed(A,1)",
        "inserted(S1)",
        "claimed(S1,1)",
        "inserted(S2)",
        "claimed(S2,2)",
        "status(idle)"
      ])
    }))

  it.scoped("7.3/4.8: an inject made during a later pre-step that enters [] waits — the turn ends completed and the driver idles", () =>
    Effect.gen(function*() {
      const run = yield* onBoth(lateBoundary("inject"))
      expect(from(run.shape, "SE(1,1)")).toEqual([
        "SE(1,1)",
        "INS(ns,0,[S1])",
        "CLM(ns,0,1)",
        "INS(ns,0,[C2])",
        "TE(1,completed)"
      ])
      expect(run.inbox).toEqual({ nextTurn: [], nextStep: ["C2"] })
      expect(run.requests).toHaveLength(1)
    }))
})

// ---------------------------------------------------------------------------------------------------
describe("P2-P19 on the memory store: held acknowledgements, observers, idle injects, pre-step decisions", () => {
  const CALL = ["CH(block-start)", "CH(tool-call-delta)", "CH(block-end)", "CH(finish stop)", "AM"]

  agentTest(
    "P2: a wake is committed before followup completes; a held store delays the acknowledgement",
    scenario([ScriptedModel.text("a"), ScriptedModel.text("b")]),
    function*({ driver, log, control }) {
      const live = yield* recordLive
      const G = gate()
      yield* (yield* PreStep).register((_input, next) => Effect.zipRight(Deferred.await(G), next()))
      yield* driver.followup(user("A"))
      expect(yield* driver.status).toBe("running")
      expect(yield* shape).toEqual(["INS(nt,0,[A])", "TS(1)", "CLM(nt,0,1)"])
      expect(yield* log.durableSeq).toBe(2)
      expect((yield* live).map(liveNotation)).toEqual(["inserted(A)", "status(running)", "claimed(A,1)"])
      yield* control.hold
      const fiber = yield* Effect.fork(driver.followup(user("B")))
      yield* settle
      expect(Option.isNone(yield* Fiber.poll(fiber))).toBe(true)
      yield* control.release
      yield* Fiber.join(fiber)
      expect(yield* log.durableSeq).toBe(3)
      yield* open(G)
      expect(yield* closeOut).toEqual([])
    }
  )

  agentTest(
    "P4: a follow-up issued from a log observer is not lost",
    scenario([ScriptedModel.text("one"), ScriptedModel.text("two")]),
    function*({ driver, log, inbox }) {
      const live = yield* recordLive
      const A = user("A")
      const B = user("B")
      yield* Effect.forkScoped(
        Stream.runForEach(
          log.stream(0),
          (e) =>
            e.type === "agent/inbox/spliced" && (e.data as any).inserted.some((m: UserMessage) => m.id === "A")
              ? Effect.ignore(driver.followup(B))
              : Effect.void
        )
      )
      yield* driver.followup(A)
      yield* until(Effect.map(inbox.idState(B.id), Option.isSome))
      yield* driver.whenIdle
      expect(yield* texts).toEqual(["A", "B"])
      const ums = yield* dataOfType("step/start")
      expect(ums.map((d) => d.turn)).toEqual([1, 2])
      expect((yield* live).filter((e) => e.type === "agent/error")).toEqual([])
      expect(yield* closeOut).toEqual([])
    }
  )

  agentTest(
    "P5: idle inject stages durably without a turn",
    scenario([ScriptedModel.text("x")]),
    function*({ driver, log, inbox }) {
      const live = yield* recordLive
      const C = plugin("C")
      yield* driver.inject(C)
      expect(yield* shape).toEqual(["INS(ns,0,[C])"])
      expect(yield* log.durableSeq).toBe(0)
      expect(yield* driver.status).toBe("idle")
      yield* driver.whenIdle
      expect((yield* live).map(liveNotation)).toEqual(["inserted(C)"])
      expect(yield* requests).toEqual([])
      expect(yield* inbox.nextStep).toEqual([C])
    }
  )

  const holderP7: {
    driver?: Driver["Type"]
    passed?: { id: string; role: "user"; content: Array<{ type: "text"; text: string }>; source: { kind: string } }
  } = {}
  const noticer = Tool.make("noticer", {
    description: "injects two contexts",
    parameters: empty,
    execute: () =>
      Effect.gen(function*() {
        const driver = holderP7.driver!
        const c1 = {
          id: "C1",
          role: "user" as const,
          content: [{ type: "text" as const, text: "C1" }],
          source: { kind: "plugin" }
        }
        holderP7.passed = c1
        yield* Effect.orDie(driver.inject(c1 as unknown as UserMessage))
        yield* Effect.orDie(driver.inject(plugin("C2")))
        return "ok"
      })
  })
  agentTest(
    "P7: injection from a tool body waits for the next step",
    scenario(
      [
        ScriptedModel.response({ toolCalls: [{ id: "c1", name: "noticer", arguments: {} }] }),
        ScriptedModel.text("done")
      ],
      { tools: [noticer] }
    ),
    function*({ driver }) {
      holderP7.driver = driver
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect(yield* shape).toEqual([
        "INS(nt,0,[A])",
        "TS(1)",
        "CLM(nt,0,1)",
        "SS(1,1)",
        "UM(A)",
        "RH(initial)",
        ...CALL,
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
      const rs = yield* requests
      expect(rs[1]!.messages.slice(-4).map(token)).toEqual(["tool-call c1", "tool-result c1", "C1", "C2"])
      // Mutating the object passed to inject changes nothing in the log.
      holderP7.passed!.content[0]!.text = "MUTATED"
      expect(yield* texts).toEqual(["A", "C1", "C2"])
      expect(yield* closeOut).toEqual([])
    }
  )

  const holderP11: { driver?: Driver["Type"] } = {}
  const finalize = Tool.make("finalize", {
    description: "steers and concludes",
    parameters: empty,
    execute: () => Effect.as(Effect.orDie(holderP11.driver!.steer(user("S"))), { content: "done", concludesTurn: true })
  })
  agentTest(
    "P11: steering while a concluding tool runs is not lost",
    scenario(
      [
        ScriptedModel.response({ toolCalls: [{ id: "c1", name: "finalize", arguments: {} }] }),
        ScriptedModel.text("after")
      ],
      { tools: [finalize] }
    ),
    function*({ driver }) {
      holderP11.driver = driver
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      const rs = yield* requests
      expect(rs).toHaveLength(2)
      expect((yield* shape).filter((s) => s.startsWith("TE"))).toEqual(["TE(1,completed)"])
      const second = rs[1]!.messages.map(token)
      expect(second.indexOf("S")).toBeGreaterThan(second.indexOf("tool-result c1"))
      expect(yield* closeOut).toEqual([])
    }
  )

  agentTest(
    "P12: a pre-step rewrite keeps identity",
    scenario([ScriptedModel.text("ok")]),
    function*({ driver, inbox }) {
      yield* (yield* PreStep).register((input) =>
        Effect.succeed(
          PreStepDecision.enter([{ ...input.messages[0]!, content: [{ type: "text", text: "REWRITTEN" }] }])
        )
      )
      yield* driver.followup(user("A", "original"))
      yield* driver.whenIdle
      const ums = yield* dataOfType("user/message")
      expect(ums.map((d) => [d.id, d.content[0].text])).toEqual([["A", "REWRITTEN"]])
      const rs = yield* requests
      expect(rs[0]!.messages.map(token)).toEqual(["REWRITTEN"])
      expect(yield* inbox.idState(asId("A"))).toEqual(Option.some("entered"))
      expect(yield* closeOut).toEqual([])
    }
  )

  agentTest(
    "P13: enter with an extra sourced message",
    scenario([ScriptedModel.text("ok")]),
    function*({ driver, inbox }) {
      const X = plugin("X")
      yield* (yield* PreStep).register((input) => Effect.succeed(PreStepDecision.enter([...input.messages, X])))
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect((yield* shape).slice(3, 6)).toEqual(["SS(1,1)", "UM(A)", "UM(X)"])
      const rs = yield* requests
      expect(rs[0]!.messages).toEqual([user("A"), X])
      expect(yield* inbox.idState(asId("X"))).toEqual(Option.some("entered"))
      expect(yield* closeOut).toEqual([])
    }
  )

  agentTest(
    "P13: adding a message pending in next-turn ends the turn DUPLICATE_MESSAGE with no step; it stays pending",
    scenario([ScriptedModel.text("ok")]),
    function*({ driver, inbox }) {
      const G = gate()
      const B = user("B")
      yield* (yield* PreStep).register((input, next) =>
        input.turn === 1
          ? Effect.zipRight(Deferred.await(G), Effect.succeed(PreStepDecision.enter([...input.messages, B])))
          : next()
      )
      yield* driver.followup(user("A"))
      yield* driver.followup(B)
      yield* open(G)
      yield* driver.whenIdle
      expect(yield* shape).toEqual([
        "INS(nt,0,[A])",
        "TS(1)",
        "CLM(nt,0,1)",
        "INS(nt,0,[B])",
        "TE(1,error(DUPLICATE_MESSAGE))",
        "TS(2)",
        "CLM(nt,0,1)",
        "SS(2,1)",
        "UM(B)",
        "RH(initial)",
        ...TEXT,
        "SE(2,1)",
        "TE(2,completed)"
      ])
      expect(yield* inbox.idState(B.id)).toEqual(Option.some("entered"))
      expect(yield* closeOut).toEqual([])
    }
  )

  agentTest(
    "P16 variant: an inject alone after a rejected claim waits for the next wake",
    scenario([ScriptedModel.text("one")]),
    function*({ driver, inbox }) {
      const G = gate()
      yield* (yield* PreStep).register((input, next) =>
        input.turn === 1 ? Effect.zipRight(Deferred.await(G), Effect.succeed(PreStepDecision.reject())) : next()
      )
      yield* driver.followup(user("P"))
      yield* driver.inject(plugin("C"))
      yield* open(G)
      yield* driver.whenIdle
      expect(yield* shape).toEqual(["INS(nt,0,[P])", "TS(1)", "CLM(nt,0,1)", "INS(ns,0,[C])", "TE(1,blocked)"])
      expect(yield* driver.status).toBe("idle")
      expect((yield* inbox.nextStep).map((m) => m.id)).toEqual(["C"])
      expect(yield* requests).toEqual([])
      yield* driver.followup(user("W"))
      yield* driver.whenIdle
      expect((yield* shape).slice(5, 12)).toEqual([
        "INS(nt,0,[W])",
        "TS(2)",
        "CLM(ns,0,1)",
        "CLM(nt,0,1)",
        "SS(2,1)",
        "UM(C)",
        "UM(W)"
      ])
      expect(yield* closeOut).toEqual([])
    }
  )

  agentTest("P19 (a, b, d, e): waterfall composition", scenario([]), function*({ preStep }) {
    const order = yield* Ref.make<ReadonlyArray<string>>([])
    const note = (s: string) => Ref.update(order, (a) => [...a, s])
    const X = plugin("X")
    const Y = plugin("Y")
    const A = user("A")
    const mode = yield* Ref.make<"a" | "b">("a")
    let defaultArray: ReadonlyArray<UserMessage> | undefined
    let frozen: boolean | undefined
    yield* preStep.register((input, next) =>
      Effect.gen(function*() {
        yield* note("L1")
        if ((yield* Ref.get(mode)) === "b") return PreStepDecision.enter([A])
        const d = yield* next()
        return d._tag === "Enter" ? PreStepDecision.enter([...d.messages, Y]) : d
      })
    )
    yield* preStep.register((input, next) =>
      Effect.gen(function*() {
        yield* note("L2")
        frozen = Object.isFrozen(input.messages) && input.messages.every((m) => Object.isFrozen(m))
        const d = yield* next()
        if (d._tag === "Enter") defaultArray = d.messages
        return d._tag === "Enter" ? PreStepDecision.enter([...d.messages, X]) : d
      })
    )
    yield* preStep.register((_input, next) => Effect.zipRight(note("L3"), next()), { prepend: true })
    const input: PreStepInput = {
      sessionId: SessionId.make("s"),
      turn: 1,
      step: 1,
      boundary: "initial",
      messages: Object.freeze([A])
    }
    const entered = yield* preStep.run(input)
    expect(entered.map((m) => m.id)).toEqual(["A", "X", "Y"])
    expect(yield* Ref.get(order)).toEqual(["L3", "L1", "L2"])
    expect(frozen).toBe(true)
    expect(defaultArray).not.toBe(input.messages)
    yield* Ref.set(order, [])
    yield* Ref.set(mode, "b")
    expect((yield* preStep.run(input)).map((m) => m.id)).toEqual(["A"])
    expect(yield* Ref.get(order)).toEqual(["L3", "L1"])
  })

  agentTest(
    "P19 (c): a listener calling next() twice ends the turn error with no step",
    scenario([]),
    function*({ driver }) {
      yield* (yield* PreStep).register((_input, next) => Effect.zipRight(next(), next()))
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      const s = yield* shape
      expect(s.filter((x) => x.startsWith("SS"))).toEqual([])
      expect(s[s.length - 1]).toMatch(/^TE\(1,error\(/)
      expect(yield* closeOut).toEqual([])
    }
  )

  it.effect("P2/3.1: the acknowledgement of a delivery waits for durability under TestClock (no Clock wait)", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const log = yield* SessionLog
      yield* driver.inject(plugin("C"))
      expect(yield* log.durableSeq).toBe(0)
      yield* TestClock.adjust("0 millis")
      expect(Exit.isSuccess(yield* Effect.exit(log.flush))).toBe(true)
    }).pipe(Effect.provide(scenario([])), Effect.scoped))
})
