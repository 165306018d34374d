/**
 * A turn and its pre-step (SPEC 4.3, 4.4, 4.7, 4.8): later boundaries, pre-step entry checks and
 * decisions, waterfall failures, turn-stopping, closing paths, drain policy and late insertions.
 */
import { describe, expect, it } from "@effect/vitest"
import { Context, Data, Deferred, Effect, Exit, Layer, Option, Ref, Scope, TestClock } from "effect"
import {
  CancelCause,
  Driver,
  Hooks,
  PreStep,
  PreStepDecision,
  PreStepFailed,
  PreStepRejected,
  ScriptedModel,
  SessionId,
  SessionStore,
  Tool,
  Tools
} from "../../src/index.js"
import type { Driver as DriverTag, UserMessage } from "../../src/index.js"
import { scenarioSeeingDriver } from "./cancelFixtures.js"
import {
  agentTest,
  asId,
  closeOut,
  dataOfType,
  events,
  gate,
  ids,
  liveNotation,
  open,
  plugin,
  reasons,
  recordLive,
  recordStatus,
  requests,
  scenario,
  shape,
  TEXT,
  texts,
  turnStarts,
  until,
  untilEvent,
  user
} from "./harness.js"
import { buildIn } from "./stores.js"
import { calls, callT, empty, okTool } from "./toolFixtures.js"

const holder: { driver?: Context.Tag.Service<DriverTag> } = {}
const injectDuringStream = (id: string) => Effect.suspend(() => Effect.orDie(holder.driver!.inject(plugin(id))))

type Loose = { readonly [k: string]: any }

const sid = (s: string) => SessionId.make(s)

class Coded extends Data.TaggedError("Coded")<{ readonly message: string; readonly code: string }> {}

describe("4.3 later boundaries", () => {
  agentTest(
    "4.3 step 6: turn-stopping listeners are not run while next-step is non-empty",
    scenario([ScriptedModel.text("a", { during: injectDuringStream("C") }), ScriptedModel.text("c")]),
    function*({ driver, hooks }) {
      holder.driver = driver
      const calls = yield* Ref.make<ReadonlyArray<string>>([])
      yield* hooks.onTurnStopping((input) => Ref.update(calls, (a) => [...a, `${input.turn}.${input.step}`]))
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect(yield* Ref.get(calls)).toEqual(["1.2"])
      expect(yield* texts).toEqual(["A", "C"])
    }
  )

  agentTest(
    "4.3/7.3: a later boundary entering [] after a natural ending closes the turn with that ending (max-tokens sticky)",
    scenario([
      ScriptedModel.response({ text: "trunc", finish: "max-tokens", during: injectDuringStream("C") }),
      ScriptedModel.text("never")
    ]),
    function*({ driver }) {
      holder.driver = driver
      yield* (yield* PreStep).register((input, next) =>
        input.boundary === "later" ? Effect.succeed(PreStepDecision.enter([])) : next()
      )
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      const s = yield* shape
      expect(s.slice(s.indexOf("SE(1,1)"))).toEqual(["SE(1,1)", "CLM(ns,0,1)", "TE(1,max-tokens)"])
      expect(yield* requests).toHaveLength(1)
    }
  )

  agentTest(
    "7.3: a steer inserted during a later pre-step that enters [] continues the chain; the next turn claims it",
    scenario([ScriptedModel.text("a", { during: injectDuringStream("C") }), ScriptedModel.text("s")]),
    function*({ driver }) {
      holder.driver = driver
      yield* (yield* PreStep).register((input, next) =>
        input.boundary === "later" && input.turn === 1
          ? Effect.as(Effect.orDie(driver.steer(user("S"))), PreStepDecision.enter([]))
          : next()
      )
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      const s = yield* shape
      const te = s.indexOf("TE(1,completed)")
      expect(s.slice(te, te + 5)).toEqual(["TE(1,completed)", "TS(2)", "CLM(ns,0,1)", "SS(2,1)", "UM(S)"])
    }
  )
})

describe("4.4 PreStepFailed does not nest", () => {
  agentTest(
    "4.4: a downstream failure propagated by an upstream listener reaches run as the same PreStepFailed",
    scenario([]),
    function*({ preStep }) {
      let seenByUpstream: unknown
      yield* preStep.register((_input, next) => Effect.tapError(next(), (e) => Effect.sync(() => (seenByUpstream = e))))
      yield* preStep.register(() => Effect.fail("inner broke"))
      const error = yield* Effect.flip(
        preStep.run({ sessionId: SessionId.make("s"), turn: 1, step: 1, boundary: "initial", messages: [] })
      )
      expect(error).toBeInstanceOf(PreStepFailed)
      expect(error).toMatchObject({ turn: 1, step: 1, cause: "inner broke" })
      expect(seenByUpstream).toBeInstanceOf(PreStepFailed)
      expect(error).toBe(seenByUpstream)
    }
  )

  agentTest(
    "4.3: the turn/end failure of a nested pre-step failure is the listener's own error",
    scenario([]),
    function*({ driver, preStep }) {
      yield* preStep.register((_input, next) => next())
      yield* preStep.register(() => Effect.fail({ message: "coded", code: "E_CODE" }))
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect((yield* dataOfType("turn/end"))[0]!.reason).toEqual({
        kind: "error",
        error: { message: "coded", code: "E_CODE" }
      })
    }
  )
})

describe("4.4 pre-step entry checks", () => {
  agentTest(
    "4.4: entering the same claimed message twice ends the turn error(DUPLICATE_MESSAGE) with no step",
    scenario([ScriptedModel.text("never")]),
    function*({ driver, preStep: pre }) {
      yield* pre.register((input, next) =>
        Effect.map(next(), (d) => d._tag === "Enter" ? PreStepDecision.enter([...d.messages, ...d.messages]) : d)
      )
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect(yield* shape).toEqual(["INS(nt,0,[A])", "TS(1)", "CLM(nt,0,1)", "TE(1,error(DUPLICATE_MESSAGE))"])
      expect(yield* requests).toEqual([])
      expect(yield* closeOut).toEqual([])
    }
  )

  agentTest(
    "4.4: entering a message inserted into next-step after the claim ends DUPLICATE_MESSAGE; it stays pending and enters later",
    scenario([ScriptedModel.text("ok")]),
    function*({ driver, inbox, preStep: pre }) {
      const C = plugin("C")
      yield* pre.register((input, next) =>
        input.turn === 1
          ? Effect.zipRight(driver.inject(C), Effect.map(next(), () => PreStepDecision.enter([...input.messages, C])))
          : next()
      )
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect((yield* dataOfType("turn/end"))[0]!.reason).toMatchObject({
        kind: "error",
        error: { code: "DUPLICATE_MESSAGE" }
      })
      expect((yield* inbox.nextStep).map((m) => m.id)).toEqual(["C"])
      expect(yield* inbox.idState(asId("C"))).toEqual(Option.some("pending"))
      yield* driver.followup(user("B"))
      yield* driver.whenIdle
      expect(yield* texts).toEqual(["C", "B"])
      expect(yield* closeOut).toEqual([])
    }
  )

  agentTest(
    "4.4: PreStep.run called directly returns the entered messages and reports a rejection as PreStepRejected {turn, step, reason}",
    scenario([]),
    function*({ preStep: pre, log }) {
      const A = user("A")
      const input = { sessionId: log.sessionId, turn: 7, step: 2, boundary: "later" as const, messages: [A] }
      const entered = yield* pre.run(input)
      expect(entered).toEqual([A])
      expect(entered).not.toBe(input.messages)
      yield* pre.register((i, next) =>
        i.messages.length > 1 ? Effect.succeed(PreStepDecision.reject("too many")) : next()
      )
      const rejected = yield* Effect.flip(pre.run({ ...input, messages: [A, user("B")] }))
      expect(rejected).toBeInstanceOf(PreStepRejected)
      expect(rejected).toMatchObject({ turn: 7, step: 2, reason: "too many" })
      expect(yield* events).toEqual([])
    }
  )

  const gLater = gate()
  agentTest(
    "4.3/4.4: a later boundary's pre-step input has boundary later and step k+1; a rejection there ends the turn blocked after its step",
    scenario([ScriptedModel.text("ok", { during: Deferred.await(gLater) })]),
    function*({ driver, preStep: pre }) {
      const seen: Array<unknown> = []
      yield* pre.register((input, next) => {
        seen.push({
          turn: input.turn,
          step: input.step,
          boundary: input.boundary,
          ids: input.messages.map((m) => m.id)
        })
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
    }
  )
})

describe("4.4 waterfall failure and materialisation", () => {
  agentTest(
    "4.4/8.6: an upstream listener that catches the downstream PreStepFailed (cause = original error) and enters opens the step",
    scenario([ScriptedModel.text("ok")]),
    function*({ driver, preStep: pre }) {
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
    }
  )

  agentTest(
    "4.4: a message added by an inner listener does not materialise when an outer listener rejects; its id stays fresh",
    scenario([ScriptedModel.text("ok")]),
    function*({ driver, inbox, preStep: pre }) {
      const X = plugin("X")
      yield* pre.register((input, next) =>
        input.turn === 1 ? Effect.zipRight(next(), Effect.succeed(PreStepDecision.reject())) : next()
      )
      yield* pre.register((input, next) =>
        input.turn === 1 ? Effect.map(next(), () => PreStepDecision.enter([...input.messages, X])) : next()
      )
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect((yield* dataOfType("turn/end")).map((d) => d.reason)).toEqual([{ kind: "blocked" }])
      expect(yield* inbox.idState(asId("X"))).toEqual(Option.none())
      expect(yield* inbox.idState(asId("A"))).toEqual(Option.some("claimed"))
      yield* driver.followup(X)
      yield* driver.whenIdle
      expect(yield* texts).toEqual(["X"])
      expect(yield* closeOut).toEqual([])
    }
  )
})

describe("4.4 pre-step input and decisions", () => {
  agentTest(
    "4.4: input.messages are equal to, never identical to, the caller's objects",
    scenario([ScriptedModel.text("a")]),
    function*({ driver }) {
      const A = user("A")
      let seen: UserMessage | undefined
      yield* (yield* PreStep).register((input, next) =>
        Effect.zipRight(Effect.sync(() => (seen = input.messages[0])), next())
      )
      yield* driver.followup(A)
      yield* driver.whenIdle
      expect(seen).toEqual(A)
      expect(seen).not.toBe(A)
    }
  )

  agentTest(
    "4.4: an invalid entered message ends the turn error(INVALID_MESSAGE) with no step; the dropped batch stays claimed",
    scenario([]),
    function*({ driver, inbox }) {
      yield* (yield* PreStep).register(() =>
        Effect.succeed(
          PreStepDecision.enter([
            { id: "bad", role: "user", content: [{ type: "video" }], source: { kind: "x" } } as unknown as UserMessage
          ])
        )
      )
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect(yield* shape).toEqual(["INS(nt,0,[A])", "TS(1)", "CLM(nt,0,1)", "TE(1,error(INVALID_MESSAGE))"])
      expect(yield* inbox.idState("A" as UserMessage["id"])).toEqual(Option.some("claimed"))
      expect(yield* inbox.idState("bad" as UserMessage["id"])).toEqual(Option.none())
    }
  )

  agentTest(
    "4.3: a later boundary entering [] after tools still runs the step (the model continues after the results)",
    scenario(
      [ScriptedModel.response({ toolCalls: [{ id: "c1", name: "quick", arguments: {} }] }), ScriptedModel.text("done")],
      { tools: [Tool.make("quick", { description: "", parameters: empty, execute: () => Effect.succeed("ok") })] }
    ),
    function*({ driver }) {
      yield* (yield* PreStep).register((input, next) =>
        input.boundary === "later" ? Effect.succeed(PreStepDecision.enter([])) : next()
      )
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect((yield* shape).slice(-4)).toEqual(["CH(finish stop)", "AM", "SE(1,2)", "TE(1,completed)"])
      expect(yield* requests).toHaveLength(2)
    }
  )
})

describe("4.7 turn-stopping", () => {
  agentTest(
    "4.7: listeners run serially in registration order; a failure ends the turn error",
    scenario([ScriptedModel.text("a")]),
    function*({ driver, hooks }) {
      const order: Array<string> = []
      yield* hooks.onTurnStopping((input) => Effect.sync(() => order.push(`L1:${input.turn}.${input.step}`)))
      yield* hooks.onTurnStopping(() => Effect.zipRight(Effect.sync(() => order.push("L2")), Effect.fail("stop broke")))
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect(order).toEqual(["L1:1.1", "L2"])
      expect((yield* shape).slice(-2)).toEqual(["SE(1,1)", "TE(1,error(UNKNOWN))"])
      expect((yield* dataOfType("turn/end"))[0]!.reason.error.message).toBe("stop broke")
    }
  )

  agentTest(
    "4.6: the mode set with Tools.setMode is read when a call starts",
    scenario(
      [
        ScriptedModel.response({
          toolCalls: [{ id: "c1", name: "p", arguments: {} }, { id: "c2", name: "p", arguments: {} }]
        }),
        ScriptedModel.text("done")
      ],
      {
        tools: [Tool.make("p", {
          description: "",
          parameters: empty,
          mode: "parallel",
          execute: () => Effect.succeed("ok")
        })]
      }
    ),
    function*({ driver }) {
      const tools = yield* Tools
      yield* tools.setMode("p", "exclusive")
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect((yield* shape).filter((s) => s.startsWith("TC") || s.startsWith("TR"))).toEqual([
        "TC(c1)",
        "TR(c1)",
        "TC(c2)",
        "TR(c2)"
      ])
    }
  )
})

// ---------------------------------------------------------------------------------------------------
describe("4.3 / 4.4: turn and pre-step", () => {
  agentTest(
    "4.4: added messages become known as `entered`; claimed messages left out stay `claimed`",
    scenario([ScriptedModel.text("ok")]),
    function*({ driver, inbox, preStep: pre }) {
      yield* pre.register((input, next) =>
        input.boundary === "initial" ? Effect.succeed(PreStepDecision.enter([user("X")])) : next()
      )
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect(yield* shape).toEqual([
        "INS(nt,0,[A])",
        "TS(1)",
        "CLM(nt,0,1)",
        "SS(1,1)",
        "UM(X)",
        "RH(initial)",
        "CH(block-start)",
        "CH(text-delta)",
        "CH(block-end)",
        "CH(finish stop)",
        "AM",
        "SE(1,1)",
        "TE(1,completed)"
      ])
      expect(yield* inbox.idState(asId("X"))).toEqual(Option.some("entered"))
      expect(yield* inbox.idState(asId("A"))).toEqual(Option.some("claimed"))
    }
  )

  agentTest(
    "4.4/4.2: Enter naming an id pending in the inbox → error(DUPLICATE_MESSAGE) decided in TX-STEP, no step; the item stays pending",
    scenario([]),
    function*({ driver, inbox, preStep: pre }) {
      yield* pre.register((input, next) =>
        Effect.gen(function*() {
          if (input.turn !== 1) return yield* next()
          yield* driver.inject(user("P"))
          return PreStepDecision.enter([...input.messages, user("P")])
        })
      )
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      const s = yield* shape
      expect(s).not.toContain("SS(1,1)")
      expect(s.at(-1)).toBe("TE(1,error(DUPLICATE_MESSAGE))")
      expect(yield* inbox.idState(asId("P"))).toEqual(Option.some("pending"))
      expect((yield* inbox.nextStep).map((m) => m.id)).toEqual(["P"])
      expect(yield* requests).toHaveLength(0)
    }
  )

  agentTest(
    "4.4: Enter may carry a claimed id with new content (it belongs to the claimed batch)",
    scenario([ScriptedModel.text("ok")]),
    function*({ driver, preStep: pre }) {
      yield* pre.register(() => Effect.succeed(PreStepDecision.enter([user("A", "changed")])))
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect(yield* texts).toEqual(["changed"])
      expect((yield* reasons).map((r) => r.kind)).toEqual(["completed"])
    }
  )

  agentTest(
    "4.4: an invalid element → error(INVALID_MESSAGE) without step/start; a valid addition of that batch stays unknown",
    scenario([]),
    function*({ driver, inbox, preStep: pre }) {
      yield* pre.register((input) =>
        Effect.succeed(
          PreStepDecision.enter([...input.messages, user("X"), { id: "Y", role: "user", content: "nope" } as any])
        )
      )
      const live = yield* recordLive
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect(yield* shape).toEqual(["INS(nt,0,[A])", "TS(1)", "CLM(nt,0,1)", "TE(1,error(INVALID_MESSAGE))"])
      expect(yield* inbox.idState(asId("X"))).toEqual(Option.none())
      expect((yield* live).filter((e) => e.type === "agent/error").map((e: any) => [e.turn, e.step])).toEqual([[1, 1]])
    }
  )

  agentTest(
    "4.3 D15: the initial pre-step entering [] closes completed with zero steps; a pending follow-up continues",
    scenario([ScriptedModel.text("ok")]),
    function*({ driver, preStep: pre }) {
      yield* pre.register((input, next) =>
        input.turn === 1
          ? Effect.as(Effect.orDie(driver.followup(user("B"))), PreStepDecision.enter([]))
          : next()
      )
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
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
        "CH(block-start)",
        "CH(text-delta)",
        "CH(block-end)",
        "CH(finish stop)",
        "AM",
        "SE(2,1)",
        "TE(2,completed)"
      ])
      expect(yield* requests).toHaveLength(1)
    }
  )

  agentTest(
    "4.3 R16: a later boundary entering [] after a max-tokens step closes max-tokens (sticky)",
    scenario([ScriptedModel.response({ text: "cut", finish: "max-tokens" })]),
    function*({ driver, hooks, preStep: pre, inbox }) {
      let steered = false
      yield* hooks.onTurnStopping(() =>
        steered ? Effect.void : Effect.zipRight(Effect.sync(() => (steered = true)), driver.steer(user("S")))
      )
      yield* pre.register((input, next) =>
        input.boundary === "later" ? Effect.succeed(PreStepDecision.enter([])) : next()
      )
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      const s = yield* shape
      expect(s.slice(-4)).toEqual(["SE(1,1)", "INS(ns,0,[S])", "CLM(ns,0,1)", "TE(1,max-tokens)"])
      expect(yield* requests).toHaveLength(1)
      expect(yield* inbox.idState(asId("S"))).toEqual(Option.some("claimed"))
    }
  )

  agentTest(
    "4.3: max-tokens is sticky across a later completed step (R16)",
    scenario([ScriptedModel.response({ text: "cut", finish: "max-tokens" }), ScriptedModel.text("ok")]),
    function*({ driver, hooks }) {
      let steered = false
      yield* hooks.onTurnStopping(() =>
        steered ? Effect.void : Effect.zipRight(Effect.sync(() => (steered = true)), driver.steer(user("S")))
      )
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect((yield* reasons).map((r) => r.kind)).toEqual(["max-tokens"])
      expect(yield* requests).toHaveLength(2)
    }
  )

  agentTest(
    "4.3: after tools the later pre-step sees boundary later with []; entering [] still runs a step without user messages",
    scenario([calls(["c1", "t"]), ScriptedModel.text("done")], { tools: [okTool("t")] }),
    function*({ driver, preStep: pre }) {
      const inputs: Array<Loose> = []
      yield* pre.register((input, next) =>
        Effect.zipRight(Effect.sync(() => inputs.push({ ...input, messages: input.messages.map((m) => m.id) })), next())
      )
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect(inputs.map(({ boundary, messages, step, turn }) => ({ turn, step, boundary, messages }))).toEqual([
        { turn: 1, step: 1, boundary: "initial", messages: ["A"] },
        { turn: 1, step: 2, boundary: "later", messages: [] }
      ])
      const s = yield* shape
      const i = s.indexOf("SS(1,2)")
      expect(i).toBeGreaterThan(0)
      expect(s[i + 1]).not.toMatch(/^UM/)
      expect(s.filter((x) => x.startsWith("UM"))).toEqual(["UM(A)"])
      expect(yield* requests).toHaveLength(2)
      expect((yield* reasons).map((r) => r.kind)).toEqual(["completed"])
    }
  )

  agentTest(
    "4.3: a rejection at a later boundary ends blocked{message}; the claimed steer is dropped (stays claimed)",
    scenario([ScriptedModel.text("ok")]),
    function*({ driver, hooks, preStep: pre, inbox }) {
      let steered = false
      yield* hooks.onTurnStopping(() =>
        steered ? Effect.void : Effect.zipRight(Effect.sync(() => (steered = true)), driver.steer(user("S")))
      )
      yield* pre.register((input, next) =>
        input.boundary === "later" ? Effect.succeed(PreStepDecision.reject("no more")) : next()
      )
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect(yield* reasons).toEqual([{ kind: "blocked", message: "no more" }])
      expect(yield* inbox.idState(asId("S"))).toEqual(Option.some("claimed"))
      expect((yield* shape).slice(-3)).toEqual(["INS(ns,0,[S])", "CLM(ns,0,1)", "TE(1,blocked)"])
    }
  )

  agentTest(
    "4.3/4.7: PreStepFailed ends error with the listener's own error mapped ({message, code}), agent/error carries the original",
    scenario([]),
    function*({ driver, preStep: pre }) {
      const original = { message: "mine", code: "MY_CODE", extra: 1 }
      yield* pre.register(() => Effect.fail(original))
      const live = yield* recordLive
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect(yield* reasons).toEqual([{ kind: "error", error: { message: "mine", code: "MY_CODE" } }])
      const errors = (yield* live).filter((e) => e.type === "agent/error") as Array<Loose>
      expect(errors.map((e) => [e.turn, e.step, e.error])).toEqual([[1, 1, original]])
    }
  )
})

// ---------------------------------------------------------------------------------------------------
describe("4.7: turn-stopping", () => {
  agentTest(
    "4.7: turn-stopping listeners run serially in registration order with {sessionId, turn, step}, not while next-step is non-empty",
    scenario([calls(["c1", "t"]), ScriptedModel.text("done")], { tools: [okTool("t")] }),
    function*({ driver, hooks }) {
      const seen: Array<string> = []
      yield* hooks.onTurnStopping((i) => Effect.sync(() => seen.push(`a:${i.sessionId}:${i.turn}:${i.step}`)))
      yield* hooks.onTurnStopping((i) => Effect.sync(() => seen.push(`b:${i.turn}:${i.step}`)))
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      // step 1 ran tools (no stop): listeners only after step 2.
      expect(seen).toEqual(["a:s:1:2", "b:1:2"])
    }
  )

  agentTest(
    "4.7: a turn-stopping failure ends the turn error with the listener's error mapped; a string failure gives code UNKNOWN",
    scenario([ScriptedModel.text("ok")]),
    function*({ driver, hooks }) {
      yield* hooks.onTurnStopping(() => Effect.fail("stopping broke"))
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect(yield* reasons).toEqual([{ kind: "error", error: { message: "stopping broke", code: "UNKNOWN" } }])
      expect((yield* shape).slice(-2)).toEqual(["SE(1,1)", "TE(1,error(UNKNOWN))"])
    }
  )

  agentTest(
    "4.7: a steer made by a turn-stopping listener is claimed at TX-BOUNDARY and another step runs",
    scenario([ScriptedModel.text("one"), ScriptedModel.text("two")]),
    function*({ driver, hooks }) {
      let n = 0
      yield* hooks.onTurnStopping(() => n++ === 0 ? driver.steer(user("S")) : Effect.void)
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      const s = yield* shape
      expect(s.slice(s.indexOf("SE(1,1)"), s.indexOf("SE(1,1)") + 5)).toEqual([
        "SE(1,1)",
        "INS(ns,0,[S])",
        "CLM(ns,0,1)",
        "SS(1,2)",
        "UM(S)"
      ])
      expect(n).toBe(2)
    }
  )
})

// ---------------------------------------------------------------------------------------------------
describe("4.3 / 7.3: closing paths and the late insertion", () => {
  for (
    const [label, decide] of [
      ["rejected", () => Effect.succeed(PreStepDecision.reject())],
      ["failed", () => Effect.fail({ message: "pre", code: "PRE" })],
      ["empty", () => Effect.succeed(PreStepDecision.enter([]))]
    ] as const
  ) {
    agentTest(
      `4.3/7.3: an initial pre-step that ${label} while a steer arrived late → the chain continues into a turn that claims the steer`,
      scenario([ScriptedModel.text("ok")]),
      function*({ driver, preStep: pre }) {
        yield* pre.register((input, next) =>
          input.turn === 1
            ? Effect.zipRight(Effect.orDie(driver.steer(user("S"))), decide() as Effect.Effect<PreStepDecision, any>)
            : next()
        )
        yield* driver.followup(user("A"))
        expect(yield* closeOut).toEqual([])
        const s = yield* shape
        const t2 = s.indexOf("TS(2)")
        expect(t2).toBeGreaterThan(0)
        expect(s[t2 - 1]).toMatch(/^TE\(1,/)
        expect(s.slice(t2, t2 + 4)).toEqual(["TS(2)", "CLM(ns,0,1)", "SS(2,1)", "UM(S)"])
        expect(yield* requests).toHaveLength(1)
      }
    )
  }

  agentTest(
    "4.3/7.3: an initial pre-step rejecting while only an inject arrived late → idle; the inject stays pending",
    scenario([]),
    function*({ driver, preStep: pre, inbox }) {
      yield* pre.register(() => Effect.zipRight(driver.inject(user("I")), Effect.succeed(PreStepDecision.reject("x"))))
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect((yield* shape).filter((x) => x.startsWith("TS"))).toEqual(["TS(1)"])
      expect((yield* inbox.nextStep).map((m) => m.id)).toEqual(["I"])
      expect(yield* driver.status).toBe("idle")
    }
  )

  agentTest(
    "4.3: a cause recorded by a turn-stopping listener: TX-BOUNDARY claims nothing, TE aborted, next-step items stay pending (keepInbox)",
    scenario([ScriptedModel.text("ok")]),
    function*({ driver, hooks, inbox }) {
      yield* hooks.onTurnStopping(() =>
        Effect.zipRight(driver.steer(user("S")), driver.cancel(CancelCause.user, { keepInbox: true }))
      )
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      const s = yield* shape
      expect(s.slice(-3)).toEqual(["SE(1,1)", "INS(ns,0,[S])", "TE(1,aborted(user))"])
      expect(yield* inbox.idState(asId("S"))).toEqual(Option.some("pending"))
    }
  )

  // Regression test (fixed; the text says what tiller did before): SPEC 4.3 "With a cause recorded: … turn-stopping listeners are not started"; 4.7 "a cancel
  // aborts it"; 7.2 K13 "from any observer, hook or tool body: exactly as the window the driver is in"
  // (K9: no further step; TE(aborted)). tiller starts the second listener after the first recorded the cause.
  agentTest(
    "4.3/4.7 K9/K13: after a turn-stopping listener records a cause, the later listeners are not started",
    scenario([ScriptedModel.text("ok")]),
    function*({ driver, hooks }) {
      let second = 0
      yield* hooks.onTurnStopping(() => driver.cancel(CancelCause.user))
      yield* hooks.onTurnStopping(() => Effect.sync(() => second++))
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect((yield* shape).slice(-2)).toEqual(["SE(1,1)", "TE(1,aborted(user))"])
      expect(second).toBe(0)
    }
  )
})

describe("4.3/4.5: more closing paths", () => {
  agentTest(
    "4.3 K3a/K13: a pre-step listener that records a cause and enters an addition: no step, the addition stays unknown",
    scenario([]),
    function*({ driver, preStep: pre, inbox }) {
      yield* pre.register((input) =>
        Effect.as(Effect.orDie(driver.cancel(CancelCause.user)), PreStepDecision.enter([...input.messages, user("X")]))
      )
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect(yield* shape).toEqual(["INS(nt,0,[A])", "TS(1)", "CLM(nt,0,1)", "TE(1,aborted(user))"])
      expect(yield* inbox.idState(asId("X"))).toEqual(Option.none())
      expect(yield* inbox.idState(asId("A"))).toEqual(Option.some("claimed"))
    }
  )

  agentTest(
    "4.5 Q7: a failed attempt commits no assistant content; the retry's request does not see its partial text",
    scenario([
      ScriptedModel.fail({ message: "x", code: "OVERLOADED" }, { partial: { text: "par" } }),
      ScriptedModel.text("ok")
    ]),
    function*({ driver }) {
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "llm/retry")
      yield* TestClock.adjust("2 seconds")
      expect(yield* closeOut).toEqual([])
      const reqs = yield* requests
      expect(reqs[1]!.messages.map((m) => m.id)).toEqual(["A"])
      expect((yield* shape).filter((x) => x === "AM" || x === "AM!")).toEqual(["AM"])
    }
  )

  agentTest(
    "4.5: an onRequest config that cannot be logged (NaN temperature) → error(INVALID_EVENT), nothing dispatched",
    scenario([ScriptedModel.text("never")]),
    function*({ driver, hooks }) {
      yield* hooks.onRequest((_, next) => Effect.map(next(), (c) => ({ ...c, temperature: Number.NaN })))
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect((yield* reasons).map((r) => r.kind === "error" ? r.error.code : r.kind)).toEqual(["INVALID_EVENT"])
      expect(yield* requests).toHaveLength(0)
      expect((yield* shape).filter((x) => x.startsWith("RH"))).toEqual([])
    }
  )
})

type OwnAgent = Effect.Effect.Success<ReturnType<typeof buildIn>>

/**
 * Sends A to an agent of `script` over its own store, with listeners from `register`: whether it
 * then went idle, and its log. It is disposed in the background (a wedged agent never would be).
 */
const followupUntilIdle = (
  script: Parameters<typeof buildIn>[1],
  register: (ctx: OwnAgent["ctx"]) => Effect.Effect<void, never, Scope.Scope>
) =>
  Effect.gen(function*() {
    const storeCtx = yield* Effect.scoped(Layer.build(SessionStore.layerMemory))
    const { ctx, driver, log, scope } = yield* buildIn(storeCtx, script)
    yield* Effect.provideService(register(ctx), Scope.Scope, scope)
    yield* driver.followup(user("A"))
    const idle = yield* Effect.exit(until(Effect.map(driver.status, (s) => s === "idle")))
    const es = yield* log.events
    yield* Effect.forkDaemon(Scope.close(scope, Exit.void))
    return { es, idle }
  })

describe("4.4 / 4.3: a malformed Enter", () => {
  // Regression test (fixed; the text says what tiller did before): SPEC 4.4 "Enter {messages} is the complete batch … (else the turn ends error(INVALID_MESSAGE)) …
  // validity … decided by the loop inside TX-STEP"; 4.3 a failure inside the turn ends CLOSE(error(…)). A listener
  // returning {_tag:"Enter", messages: null} (a JS caller) wedges the loop: no turn/end, the driver stays
  // `running` and disposal never completes. ([null] correctly ends error(INVALID_MESSAGE).)
  it.effect("4.4/4.3: an Enter whose messages is not an array still ends the turn (error), and the driver goes idle", () =>
    Effect.gen(function*() {
      const { es, idle } = yield* followupUntilIdle(
        [ScriptedModel.text("ok")],
        (ctx) => Context.get(ctx, PreStep).register(() => Effect.succeed({ _tag: "Enter", messages: null } as any))
      )
      expect(idle._tag).toBe("Success")
      expect(es.at(-1)?.type).toBe("turn/end")
      expect((es.at(-1)?.data as Loose | undefined)?.reason?.kind).toBe("error")
    }))
})

describe("4.5 / 4.3: malformed hook results never wedge the loop", () => {
  const cases: ReadonlyArray<
    readonly [
      string,
      (h: Context.Tag.Service<typeof Hooks>) => Effect.Effect<void, never, Scope.Scope>,
      ReadonlyArray<any>
    ]
  > = [
    ["onRequest returns null", (h) => h.onRequest(() => Effect.succeed(null as any)), [ScriptedModel.text("ok")]],
    ["onRequestError returns undefined", (h) => h.onRequestError(() => Effect.succeed(undefined as any)), [
      ScriptedModel.fail({ message: "x", code: "X" }),
      ScriptedModel.text("ok")
    ]]
  ]
  for (const [label, register, script] of cases) {
    // Regression test (fixed; the text says what tiller did before): SPEC 4.5 "Failures of the onRequest waterfall, of the onRequestError waterfall … are turn
    // failures"; 4.3 "Failure inside the turn: close the open step …, then CLOSE(error(failure))". When a (JS)
    // listener returns a non-config / non-action value, tiller writes neither SE nor TE and the driver stays
    // `running` forever (disposal hangs too); ToolPre/ToolPost garbage, by contrast, is handled (D7 / INVALID_TOOL_OUTPUT).
    it.effect(`4.5/4.3: ${label} → the step and the turn still close (error) and the driver goes idle`, () =>
      Effect.gen(function*() {
        const { es, idle } = yield* followupUntilIdle(script, (ctx) => register(Context.get(ctx, Hooks)))
        expect(idle._tag).toBe("Success")
        expect(es.map((e) => e.type).slice(-2)).toEqual(["step/end", "turn/end"])
      }))
  }
})

describe("SPEC 8.6 PreStep", () => {
  agentTest(
    "8.6: prepend makes a listener outermost; a registration ends with its scope",
    scenario([]),
    function*({ preStep: pre }) {
      const order: Array<string> = []
      const tag = (name: string) => (_: unknown, next: () => Effect.Effect<PreStepDecision, PreStepFailed>) =>
        Effect.zipRight(Effect.sync(() => order.push(name)), next())
      yield* pre.register(tag("first"))
      yield* pre.register(tag("second"))
      const inner = yield* Scope.make()
      yield* Scope.extend(pre.register(tag("outer"), { prepend: true }), inner)
      const input = { sessionId: sid("s"), turn: 1, step: 1, boundary: "initial" as const, messages: [user("A")] }
      expect(yield* pre.run(input)).toEqual([user("A")])
      expect(order).toEqual(["outer", "first", "second"])
      yield* Scope.close(inner, Exit.void)
      order.length = 0
      yield* pre.run(input)
      expect(order).toEqual(["first", "second"])
    }
  )

  agentTest(
    "8.6: run does not validate Enter.messages; a downstream failure reaches the upstream listener and run as the same PreStepFailed",
    scenario([]),
    function*({ preStep: pre }) {
      const input = { sessionId: sid("s"), turn: 3, step: 4, boundary: "later" as const, messages: [] }
      const odd = { id: "", role: "user", content: [], source: {} } as unknown as UserMessage
      const scope1 = yield* Scope.make()
      yield* Scope.extend(pre.register(() => Effect.succeed(PreStepDecision.enter([odd]))), scope1)
      expect(yield* pre.run(input)).toEqual([odd])
      yield* Scope.close(scope1, Exit.void)
      let seen: unknown
      yield* pre.register((_, next) => Effect.tapError(next(), (e) => Effect.sync(() => (seen = e))))
      yield* pre.register(() => Effect.fail("boom"))
      const failed = yield* Effect.flip(pre.run(input))
      expect(failed).toBeInstanceOf(PreStepFailed)
      expect(failed).toMatchObject({ _tag: "PreStepFailed", turn: 3, step: 4, cause: "boom" })
      expect(seen).toBe(failed)
    }
  )

  agentTest(
    "8.6: a listener's defect makes run fail PreStepFailed with the defect as cause",
    scenario([]),
    function*({ preStep: pre }) {
      const defect = new Error("kaput")
      yield* pre.register(() => Effect.die(defect))
      const failed = yield* Effect.flip(
        pre.run({ sessionId: sid("s"), turn: 1, step: 1, boundary: "initial", messages: [] })
      )
      expect(failed).toBeInstanceOf(PreStepFailed)
      expect((failed as PreStepFailed).cause).toBe(defect)
    }
  )

  agentTest(
    "8.6/4.4: calling next() twice is a listener failure: run fails PreStepFailed whose cause is the defect \"next() called more than once\"",
    scenario([]),
    function*({ preStep: pre }) {
      yield* pre.register((_, next) => Effect.zipRight(next(), next()))
      const failed = yield* Effect.flip(
        pre.run({ sessionId: sid("s"), turn: 2, step: 1, boundary: "initial", messages: [user("A")] })
      )
      expect(failed).toBeInstanceOf(PreStepFailed)
      expect(failed).toMatchObject({ turn: 2, step: 1 })
      expect(String((failed as PreStepFailed).cause)).toContain("next() called more than once")
    }
  )
})

describe("4.7 failure mapping and 2.6 reasons", () => {
  const failures: ReadonlyArray<unknown> = [
    { foo: 1 },
    "plain string",
    new Coded({ message: "coded failure", code: "E_CODED" })
  ]
  agentTest(
    "4.7: a failure value maps to {message, code}: [object Object] / String(e) / message getter and code",
    scenario([]),
    function*({ driver }) {
      yield* (yield* PreStep).register((input) => Effect.fail(failures[input.turn - 1]))
      for (const id of ["A", "B", "C"]) {
        yield* driver.followup(user(id))
        yield* driver.whenIdle
      }
      expect((yield* dataOfType("turn/end")).map((d) => d.reason.error)).toEqual([
        { message: "[object Object]", code: "UNKNOWN" },
        { message: "plain string", code: "UNKNOWN" },
        { message: "coded failure", code: "E_CODED" }
      ])
    }
  )

  agentTest(
    "2.6: a rejection without a reason ends the turn {kind: blocked} with no message",
    scenario([]),
    function*({ driver }) {
      yield* (yield* PreStep).register(() => Effect.succeed(PreStepDecision.reject()))
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      const reason = (yield* dataOfType("turn/end"))[0]!.reason
      expect(reason).toStrictEqual({ kind: "blocked" })
    }
  )
})

describe("7.3: late insertions racing the initial claim", () => {
  /** A pre-step listener that, in turn 1, runs `deliver` and enters nothing; later it passes on. */
  const emptyFirstEntryAfter = (deliver: Effect.Effect<unknown, unknown>) =>
  (
    input: { readonly turn: number },
    next: () => Effect.Effect<PreStepDecision, PreStepFailed>
  ): Effect.Effect<PreStepDecision, unknown> =>
    input.turn === 1 ? Effect.as(deliver, PreStepDecision.enter([])) : next()

  agentTest(
    "7.3: an empty initial entry with a steer made during its pre-step ends completed; the chain continues and the next turn claims the steer",
    scenario([ScriptedModel.text("x")]),
    function*({ driver, preStep: pre }) {
      yield* pre.register(emptyFirstEntryAfter(driver.steer(user("S"))))
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect(yield* shape).toEqual([
        "INS(nt,0,[A])",
        "TS(1)",
        "CLM(nt,0,1)",
        "INS(ns,0,[S])",
        "TE(1,completed)",
        "TS(2)",
        "CLM(ns,0,1)",
        "SS(2,1)",
        "UM(S)",
        "RH(initial)",
        ...TEXT,
        "SE(2,1)",
        "TE(2,completed)"
      ])
      expect(yield* requests).toHaveLength(1)
    }
  )

  agentTest(
    "7.3: an empty initial entry with only an inject made during its pre-step goes idle; the inject waits for the next wake",
    scenario([ScriptedModel.text("x")]),
    function*({ driver, inbox, preStep: pre }) {
      yield* pre.register(emptyFirstEntryAfter(driver.inject(plugin("I"))))
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect(yield* shape).toEqual(["INS(nt,0,[A])", "TS(1)", "CLM(nt,0,1)", "INS(ns,0,[I])", "TE(1,completed)"])
      expect(ids(yield* inbox.nextStep)).toEqual(["I"])
      expect(yield* driver.status).toBe("idle")
      yield* driver.followup(user("B"))
      expect(yield* closeOut).toEqual([])
      expect((yield* shape).slice(5, 10)).toEqual(["INS(nt,0,[B])", "TS(2)", "CLM(ns,0,1)", "CLM(nt,0,1)", "SS(2,1)"])
      expect(yield* texts).toEqual(["I", "B"])
    }
  )

  agentTest(
    "7.3/3.10: a failing initial pre-step that queued a follow-up ends error with the listener's own error; the chain continues",
    scenario([ScriptedModel.text("x")]),
    function*({ driver, preStep: pre }) {
      const live = yield* recordLive
      yield* pre.register((input, next): Effect.Effect<PreStepDecision, unknown> =>
        input.turn === 1
          ? Effect.zipRight(driver.followup(user("B")), Effect.fail({ message: "nope", code: "LISTENER" }))
          : next()
      )
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect(yield* shape).toEqual([
        "INS(nt,0,[A])",
        "TS(1)",
        "CLM(nt,0,1)",
        "INS(nt,0,[B])",
        "TE(1,error(LISTENER))",
        "TS(2)",
        "CLM(nt,0,1)",
        "SS(2,1)",
        "UM(B)",
        "RH(initial)",
        ...TEXT,
        "SE(2,1)",
        "TE(2,completed)"
      ])
      const all = yield* live
      expect(all.map(liveNotation)).toEqual([
        "inserted(A)",
        "status(running)",
        "claimed(A,1)",
        "inserted(B)",
        "error(1,1)",
        "claimed(B,2)",
        "status(idle)"
      ])
      const error = all.find((e) => e.type === "agent/error")
      expect(error?.type === "agent/error" ? error.error : undefined).toEqual({ message: "nope", code: "LISTENER" })
    }
  )
})

describe("4.8 drain policy and waking work", () => {
  /** An agent whose first request fails (BAD) after `deliver` ran on its driver; the next answers "ok". */
  const failedStepAfter = (deliver: (driver: Context.Tag.Service<typeof Driver>) => Effect.Effect<unknown, unknown>) =>
    scenarioSeeingDriver((agentDriver) =>
      scenario([
        ScriptedModel.fail({ message: "bad", code: "BAD" }, {
          awaitBefore: Effect.suspend(() => deliver(agentDriver()))
        }),
        ScriptedModel.text("ok")
      ])
    )

  // SPEC 4.8: "Waking work pending" means a next-turn item exists, or a steer inserted after the last
  // claim is still pending in next-step (wakingSteers). Injected context alone is not waking work.
  agentTest(
    "4.8/4.2: a turn ending error with a steer inserted during its step continues the chain; the next turn claims it",
    failedStepAfter((driver) => driver.steer(user("S"))),
    function*({ driver }) {
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect(yield* shape).toEqual([
        "INS(nt,0,[A])",
        "TS(1)",
        "CLM(nt,0,1)",
        "SS(1,1)",
        "UM(A)",
        "RH(initial)",
        "INS(ns,0,[S])",
        "CH(finish error)",
        "SE(1,1)",
        "TE(1,error(BAD))",
        "TS(2)",
        "CLM(ns,0,1)",
        "SS(2,1)",
        "UM(S)",
        "CH(block-start)",
        "CH(text-delta)",
        "CH(block-end)",
        "CH(finish stop)",
        "AM",
        "SE(2,1)",
        "TE(2,completed)"
      ])
      expect(yield* closeOut).toEqual([])
    }
  )

  agentTest(
    "4.8: a turn ending error with only an injected context pending goes idle; the context waits for the next wake",
    failedStepAfter((driver) => driver.inject(plugin("I"))),
    function*({ driver, inbox }) {
      const status = yield* recordStatus
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect((yield* shape).slice(-3)).toEqual(["CH(finish error)", "SE(1,1)", "TE(1,error(BAD))"])
      expect((yield* inbox.nextStep).map((m) => m.id)).toEqual(["I"])
      expect(yield* status).toEqual(["idle", "running", "idle"])
      yield* driver.followup(user("B"))
      yield* driver.whenIdle
      const after = yield* shape
      const at = after.indexOf("TS(2)")
      expect(after.slice(at - 1, at + 7)).toEqual([
        "INS(nt,0,[B])",
        "TS(2)",
        "CLM(ns,0,1)",
        "CLM(nt,0,1)",
        "SS(2,1)",
        "UM(I)",
        "UM(B)",
        "CH(block-start)"
      ])
      expect(yield* closeOut).toEqual([])
    }
  )

  // SPEC 3.2: "every claim of next-step (TX-BOUNDARY, TX-OPEN) empties [wakingSteers]".
  agentTest(
    "3.2/4.8: a steer claimed at a boundary is no longer waking work: an inject left after a later failure parks",
    scenarioSeeingDriver((agentDriver) => {
      const t = Tool.make("t", {
        description: "t",
        parameters: empty,
        execute: () => Effect.as(Effect.suspend(() => agentDriver().steer(user("S"))), "ok")
      })
      return scenario([
        callT(),
        ScriptedModel.fail({ message: "bad", code: "BAD" }, {
          awaitBefore: Effect.suspend(() => agentDriver().inject(plugin("I")))
        })
      ], { tools: [t] })
    }),
    function*({ driver, inbox }) {
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      // Step 1 (tool) saw S steered; the boundary claimed it; step 2 failed with I injected.
      expect(yield* reasons).toEqual([{ kind: "error", error: { message: "bad", code: "BAD" } }])
      expect(yield* turnStarts).toEqual([1])
      expect((yield* inbox.nextStep).map((m) => m.id)).toEqual(["I"])
      expect(yield* driver.status).toBe("idle")
    }
  )
})
