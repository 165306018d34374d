/**
 * SPEC 9 scenarios P1-P19: deliveries and the pre-step.
 */
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Exit, Fiber, Option, Ref, Schema, Stream, TestClock } from "effect"
import { Driver, Hooks, Inbox, MemoryStoreControl, PreStep, PreStepDecision, PreStepRejected, ScriptedModel, SessionId, SessionLog, Tool } from "../../../src/index.js"
import { asId, closeOut, dataOfType, events, gate, liveNotation, open, plugin, recordLive, recordStatus, requests, scenario, settle, shape, texts, token, until, user } from "../harness.js"
import type { PreStepInput, UserMessage } from "../../../src/index.js"

const TEXT = ["CH(block-start)", "CH(text-delta)", "CH(block-end)", "CH(finish stop)", "AM"]
const CALL = ["CH(block-start)", "CH(tool-call-delta)", "CH(block-end)", "CH(finish stop)", "AM"]

const emptyParams = () => Schema.Struct({})

const inputOf = (input: PreStepInput) =>
  `(${input.turn},${input.step},${input.boundary},[${input.messages.map((m) => m.id).join(",")}])`

describe("P1-P19 deliveries and pre-step", () => {
  it.scoped("P1: simple turn", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const log = yield* SessionLog
      const live = yield* recordLive
      const A = user("A")
      yield* driver.followup(A)
      yield* driver.whenIdle
      expect(yield* shape).toEqual([
        "INS(nt,0,[A])", "TS(1)", "CLM(nt,0,1)", "SS(1,1)", "UM(A)", "RH(initial)",
        "CH(block-start)", "CH(text-delta)", "CH(block-end)", "CH(usage)", "CH(finish stop)", "AM",
        "SE(1,1)", "TE(1,completed)"
      ])
      const es = yield* events
      const am = es.find((e) => e.type === "assistant/message")!
      expect((am.data as any).usage).toEqual({ inputTokens: 3, outputTokens: 2 })
      const chunkSeqs = es.filter((e) => e.type === "assistant/chunk").map((e) => e.seq)
      expect(chunkSeqs).toHaveLength(5)
      expect((am as any).sourceEventSeqs).toEqual(chunkSeqs)
      expect((yield* log.messages).map(token)).toEqual(["A", "hello there"])
      const rs = yield* requests
      expect(rs).toHaveLength(1)
      expect(rs[0]!.messages).toEqual([A])
      expect((yield* live).map(liveNotation)).toEqual(["inserted(A)", "status(running)", "claimed(A,1)", "status(idle)"])
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario([ScriptedModel.text("hello there", { usage: { inputTokens: 3, outputTokens: 2 } })]))))

  it.scoped("P2: a wake is committed before followup completes; a held store delays the acknowledgement", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const log = yield* SessionLog
      const control = yield* MemoryStoreControl
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
    }).pipe(Effect.provide(scenario([ScriptedModel.text("a"), ScriptedModel.text("b")]))))

  const G3 = gate()
  it.scoped("P3: two follow-ups are two turns", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const trace = yield* recordStatus
      const A = user("A")
      const B = user("B")
      yield* driver.followup(A)
      yield* driver.followup(B)
      yield* open(G3)
      yield* driver.whenIdle
      const log = yield* shape
      const at = log.indexOf("INS(nt,0,[B])")
      expect(at).toBeGreaterThan(2)
      expect(log.filter((_, i) => i !== at)).toEqual([
        "INS(nt,0,[A])", "TS(1)", "CLM(nt,0,1)", "SS(1,1)", "UM(A)", "RH(initial)", ...TEXT, "SE(1,1)",
        "TE(1,completed)", "TS(2)", "CLM(nt,0,1)", "SS(2,1)", "UM(B)", ...TEXT, "SE(2,1)", "TE(2,completed)"
      ])
      const rs = yield* requests
      expect(rs[1]!.messages.map(token)).toEqual(["A", "first", "B"])
      expect(yield* trace).toEqual(["idle", "running", "idle"])
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario([ScriptedModel.text("first", { awaitBefore: Deferred.await(G3) }), ScriptedModel.text("second")]))))

  it.scoped("P4: a follow-up issued from a log observer is not lost", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const log = yield* SessionLog
      const inbox = yield* Inbox
      const live = yield* recordLive
      const A = user("A")
      const B = user("B")
      yield* Effect.forkScoped(
        Stream.runForEach(log.stream(0), (e) =>
          e.type === "agent/inbox/spliced" && (e.data as any).inserted.some((m: UserMessage) => m.id === "A")
            ? Effect.ignore(driver.followup(B))
            : Effect.void)
      )
      yield* driver.followup(A)
      yield* until(Effect.map(inbox.idState(B.id), Option.isSome))
      yield* driver.whenIdle
      expect(yield* texts).toEqual(["A", "B"])
      const ums = yield* dataOfType("step/start")
      expect(ums.map((d) => d.turn)).toEqual([1, 2])
      expect((yield* live).filter((e) => e.type === "agent/error")).toEqual([])
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario([ScriptedModel.text("one"), ScriptedModel.text("two")]))))

  it.scoped("P5: idle inject stages durably without a turn", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const log = yield* SessionLog
      const inbox = yield* Inbox
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
    }).pipe(Effect.provide(scenario([ScriptedModel.text("x")]))))

  it.scoped("P6: idle inject, then follow-up", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const live = yield* recordLive
      const C = plugin("C", "context text")
      const A = user("A")
      yield* driver.inject(C)
      yield* driver.followup(A)
      yield* driver.whenIdle
      expect(yield* shape).toEqual([
        "INS(ns,0,[C])", "INS(nt,0,[A])", "TS(1)", "CLM(ns,0,1)", "CLM(nt,0,1)", "SS(1,1)", "UM(C)", "UM(A)",
        "RH(initial)", ...TEXT, "SE(1,1)", "TE(1,completed)"
      ])
      expect((yield* live).map(liveNotation).filter((s) => s.startsWith("claimed"))).toEqual(["claimed(C,1)", "claimed(A,1)"])
      const rs = yield* requests
      expect(rs[0]!.messages).toEqual([C, A])
      expect(rs[0]!.messages[0]!.source).toEqual({ kind: "plugin", plugin: "test" })
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario([ScriptedModel.text("ok")]))))

  const holderP7: { driver?: Driver["Type"]; passed?: { id: string; role: "user"; content: Array<{ type: "text"; text: string }>; source: { kind: string } } } = {}
  const noticer = Tool.make("noticer", {
    description: "injects two contexts",
    parameters: emptyParams(),
    execute: () =>
      Effect.gen(function*() {
        const driver = holderP7.driver!
        const c1 = { id: "C1", role: "user" as const, content: [{ type: "text" as const, text: "C1" }], source: { kind: "plugin" } }
        holderP7.passed = c1
        yield* Effect.orDie(driver.inject(c1 as unknown as UserMessage))
        yield* Effect.orDie(driver.inject(plugin("C2")))
        return "ok"
      })
  })
  it.scoped("P7: injection from a tool body waits for the next step", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      holderP7.driver = driver
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect(yield* shape).toEqual([
        "INS(nt,0,[A])", "TS(1)", "CLM(nt,0,1)", "SS(1,1)", "UM(A)", "RH(initial)", ...CALL,
        "TC(c1)", "INS(ns,0,[C1])", "INS(ns,1,[C2])", "TR(c1)", "SE(1,1)",
        "CLM(ns,0,2)", "SS(1,2)", "UM(C1)", "UM(C2)", ...TEXT, "SE(1,2)", "TE(1,completed)"
      ])
      const rs = yield* requests
      expect(rs[1]!.messages.slice(-4).map(token)).toEqual(["tool-call c1", "tool-result c1", "C1", "C2"])
      // Mutating the object passed to inject changes nothing in the log.
      holderP7.passed!.content[0]!.text = "MUTATED"
      expect(yield* texts).toEqual(["A", "C1", "C2"])
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario(
      [ScriptedModel.response({ toolCalls: [{ id: "c1", name: "noticer", arguments: {} }] }), ScriptedModel.text("done")],
      { tools: [noticer] }
    ))))

  it.scoped("P8: injection from turn-stopping keeps the turn alive", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const hooks = yield* Hooks
      const seen = yield* Ref.make<ReadonlyArray<string>>([])
      yield* (yield* PreStep).register((input, next) => Effect.zipRight(Ref.update(seen, (a) => [...a, inputOf(input)]), next()))
      const calls = yield* Ref.make(0)
      yield* hooks.onTurnStopping(() =>
        Effect.gen(function*() {
          const n = yield* Ref.getAndUpdate(calls, (x) => x + 1)
          if (n === 0) yield* Effect.orDie(driver.inject(plugin("C")))
        })
      )
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect(yield* shape).toEqual([
        "INS(nt,0,[A])", "TS(1)", "CLM(nt,0,1)", "SS(1,1)", "UM(A)", "RH(initial)", ...TEXT, "SE(1,1)",
        "INS(ns,0,[C])", "CLM(ns,0,1)", "SS(1,2)", "UM(C)", ...TEXT, "SE(1,2)", "TE(1,completed)"
      ])
      expect(yield* Ref.get(seen)).toEqual(["(1,1,initial,[A])", "(1,2,later,[C])"])
      expect(yield* requests).toHaveLength(2)
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario([ScriptedModel.text("one"), ScriptedModel.text("two")]))))

  it.scoped("P9: idle steer starts a turn", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.steer(user("S"))
      yield* driver.whenIdle
      expect(yield* shape).toEqual([
        "INS(ns,0,[S])", "TS(1)", "CLM(ns,0,1)", "SS(1,1)", "UM(S)", "RH(initial)", ...TEXT, "SE(1,1)", "TE(1,completed)"
      ])
      expect(yield* requests).toHaveLength(1)
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario([ScriptedModel.text("ok")]))))

  it.scoped("P10: input inserted during a pending pre-step enters the following step", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const inbox = yield* Inbox
      const G = gate()
      yield* (yield* PreStep).register((input, next) => input.step === 1 ? Effect.zipRight(Deferred.await(G), next()) : next())
      yield* driver.followup(user("P"))
      yield* driver.inject(plugin("C"))
      yield* driver.steer(user("S"))
      expect((yield* inbox.nextStep).map((m) => m.id)).toEqual(["C", "S"])
      yield* open(G)
      yield* driver.whenIdle
      expect(yield* shape).toEqual([
        "INS(nt,0,[P])", "TS(1)", "CLM(nt,0,1)", "INS(ns,0,[C])", "INS(ns,1,[S])", "SS(1,1)", "UM(P)", "RH(initial)",
        ...TEXT, "SE(1,1)", "CLM(ns,0,2)", "SS(1,2)", "UM(C)", "UM(S)", ...TEXT, "SE(1,2)", "TE(1,completed)"
      ])
      const rs = yield* requests
      expect(rs[0]!.messages.map(token)).toEqual(["P"])
      expect(rs[1]!.messages.slice(-2).map(token)).toEqual(["C", "S"])
      expect(yield* inbox.hasPending).toBe(false)
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario([ScriptedModel.text("one"), ScriptedModel.text("two")]))))

  const holderP11: { driver?: Driver["Type"] } = {}
  const finalize = Tool.make("finalize", {
    description: "steers and concludes",
    parameters: emptyParams(),
    execute: () =>
      Effect.as(Effect.orDie(holderP11.driver!.steer(user("S"))), { content: "done", concludesTurn: true })
  })
  it.scoped("P11: steering while a concluding tool runs is not lost", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      holderP11.driver = driver
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      const rs = yield* requests
      expect(rs).toHaveLength(2)
      expect((yield* shape).filter((s) => s.startsWith("TE"))).toEqual(["TE(1,completed)"])
      const second = rs[1]!.messages.map(token)
      expect(second.indexOf("S")).toBeGreaterThan(second.indexOf("tool-result c1"))
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario(
      [ScriptedModel.response({ toolCalls: [{ id: "c1", name: "finalize", arguments: {} }] }), ScriptedModel.text("after")],
      { tools: [finalize] }
    ))))

  it.scoped("P12: a pre-step rewrite keeps identity", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const inbox = yield* Inbox
      yield* (yield* PreStep).register((input) =>
        Effect.succeed(PreStepDecision.enter([{ ...input.messages[0]!, content: [{ type: "text", text: "REWRITTEN" }] }]))
      )
      yield* driver.followup(user("A", "original"))
      yield* driver.whenIdle
      const ums = yield* dataOfType("user/message")
      expect(ums.map((d) => [d.id, d.content[0].text])).toEqual([["A", "REWRITTEN"]])
      const rs = yield* requests
      expect(rs[0]!.messages.map(token)).toEqual(["REWRITTEN"])
      expect(yield* inbox.idState(asId("A"))).toEqual(Option.some("entered"))
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario([ScriptedModel.text("ok")]))))

  it.scoped("P13: enter with an extra sourced message", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const inbox = yield* Inbox
      const X = plugin("X")
      yield* (yield* PreStep).register((input) => Effect.succeed(PreStepDecision.enter([...input.messages, X])))
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect((yield* shape).slice(3, 6)).toEqual(["SS(1,1)", "UM(A)", "UM(X)"])
      const rs = yield* requests
      expect(rs[0]!.messages).toEqual([user("A"), X])
      expect(yield* inbox.idState(asId("X"))).toEqual(Option.some("entered"))
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario([ScriptedModel.text("ok")]))))

  it.scoped("P13: adding a message pending in next-turn ends the turn DUPLICATE_MESSAGE with no step; it stays pending", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const inbox = yield* Inbox
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
        "INS(nt,0,[A])", "TS(1)", "CLM(nt,0,1)", "INS(nt,0,[B])", "TE(1,error(DUPLICATE_MESSAGE))",
        "TS(2)", "CLM(nt,0,1)", "SS(2,1)", "UM(B)", "RH(initial)", ...TEXT, "SE(2,1)", "TE(2,completed)"
      ])
      expect(yield* inbox.idState(B.id)).toEqual(Option.some("entered"))
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario([ScriptedModel.text("ok")]))))

  it.scoped("P14: initial rejection", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const inbox = yield* Inbox
      const preStep = yield* PreStep
      const live = yield* recordLive
      yield* preStep.register(() => Effect.succeed(PreStepDecision.reject("nope")))
      const A = user("A")
      yield* driver.followup(A)
      yield* driver.whenIdle
      expect(yield* shape).toEqual(["INS(nt,0,[A])", "TS(1)", "CLM(nt,0,1)", "TE(1,blocked)"])
      expect((yield* dataOfType("turn/end"))[0]!.reason).toEqual({ kind: "blocked", message: "nope" })
      expect(yield* requests).toEqual([])
      const ls = (yield* live).map(liveNotation)
      expect(ls).toContain("claimed(A,1)")
      expect(ls.filter((s) => s.startsWith("discarded"))).toEqual([])
      expect(yield* inbox.idState(A.id)).toEqual(Option.some("claimed"))
      const run = yield* Effect.flip(
        preStep.run({ sessionId: SessionId.make("s"), turn: 1, step: 1, boundary: "initial", messages: [A] })
      )
      expect(run).toBeInstanceOf(PreStepRejected)
      expect(run).toMatchObject({ _tag: "PreStepRejected", turn: 1, step: 1, reason: "nope" })
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario([]))))

  it.scoped("P15: a rejection does not stall later follow-ups", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const trace = yield* recordStatus
      const G = gate()
      yield* (yield* PreStep).register((input, next) =>
        Effect.zipRight(
          Deferred.await(G),
          input.messages.some((m) => token(m).includes("secret")) ? Effect.succeed(PreStepDecision.reject()) : next()
        )
      )
      yield* driver.followup(user("X", "secret"))
      yield* driver.followup(user("Y", "safe"))
      yield* open(G)
      yield* driver.whenIdle
      expect(yield* shape).toEqual([
        "INS(nt,0,[X])", "TS(1)", "CLM(nt,0,1)", "INS(nt,0,[Y])", "TE(1,blocked)", "TS(2)", "CLM(nt,0,1)",
        "SS(2,1)", "UM(Y)", "RH(initial)", ...TEXT, "SE(2,1)", "TE(2,completed)"
      ])
      const rs = yield* requests
      expect(rs).toHaveLength(1)
      expect(JSON.stringify(rs[0]!.messages)).not.toContain("secret")
      expect(yield* trace).toEqual(["idle", "running", "idle"])
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario([ScriptedModel.text("ok")]))))

  it.scoped("P16: waking input inserted after a rejected claim runs next; a later follow-up is turn 3", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const G = gate()
      yield* (yield* PreStep).register((input, next) =>
        input.turn === 1 ? Effect.zipRight(Deferred.await(G), Effect.succeed(PreStepDecision.reject())) : next()
      )
      yield* driver.followup(user("P"))
      yield* driver.inject(plugin("C"))
      yield* driver.steer(user("S"))
      yield* open(G)
      yield* driver.whenIdle
      expect(yield* shape).toEqual([
        "INS(nt,0,[P])", "TS(1)", "CLM(nt,0,1)", "INS(ns,0,[C])", "INS(ns,1,[S])", "TE(1,blocked)", "TS(2)",
        "CLM(ns,0,2)", "SS(2,1)", "UM(C)", "UM(S)", "RH(initial)", ...TEXT, "SE(2,1)", "TE(2,completed)"
      ])
      expect((yield* requests)[0]!.messages.map(token)).toEqual(["C", "S"])
      yield* driver.followup(user("W"))
      yield* driver.whenIdle
      expect((yield* dataOfType("turn/start")).map((d) => d.turn)).toEqual([1, 2, 3])
      expect(yield* texts).toEqual(["C", "S", "W"])
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario([ScriptedModel.text("one"), ScriptedModel.text("two")]))))

  it.scoped("P16 variant: an inject alone after a rejected claim waits for the next wake", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const inbox = yield* Inbox
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
      expect((yield* shape).slice(5, 12)).toEqual(["INS(nt,0,[W])", "TS(2)", "CLM(ns,0,1)", "CLM(nt,0,1)", "SS(2,1)", "UM(C)", "UM(W)"])
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario([ScriptedModel.text("one")]))))

  it.scoped("P17: a failing pre-step does not strand the queue", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const live = yield* recordLive
      const trace = yield* recordStatus
      const G = gate()
      const failure = new Error("prompt hook broke")
      yield* (yield* PreStep).register((input, next) =>
        input.turn === 1 ? Effect.zipRight(Deferred.await(G), Effect.fail(failure)) : next()
      )
      yield* driver.followup(user("F"))
      yield* driver.followup(user("S2"))
      yield* open(G)
      yield* driver.whenIdle
      expect(yield* shape).toEqual([
        "INS(nt,0,[F])", "TS(1)", "CLM(nt,0,1)", "INS(nt,0,[S2])", "TE(1,error(UNKNOWN))", "TS(2)", "CLM(nt,0,1)",
        "SS(2,1)", "UM(S2)", "RH(initial)", ...TEXT, "SE(2,1)", "TE(2,completed)"
      ])
      expect((yield* dataOfType("turn/end"))[0]!.reason).toEqual({
        kind: "error",
        error: { message: "prompt hook broke", code: "UNKNOWN" }
      })
      const errors = (yield* live).filter((e) => e.type === "agent/error")
      expect(errors).toHaveLength(1)
      expect(errors[0]).toMatchObject({ turn: 1, step: 1 })
      expect((errors[0] as any).error).toBe(failure)
      expect(yield* requests).toHaveLength(1)
      expect(yield* trace).toEqual(["idle", "running", "idle"])
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario([ScriptedModel.text("one")]))))

  it.scoped("P18: an empty initial entry makes no model call", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const inbox = yield* Inbox
      const G = gate()
      yield* (yield* PreStep).register((input, next) =>
        Effect.zipRight(
          input.turn === 1 ? Deferred.await(G) : Effect.void,
          input.messages.some((m) => m.id === "A") ? Effect.succeed(PreStepDecision.enter([])) : next()
        )
      )
      yield* driver.followup(user("A"))
      yield* driver.followup(user("B"))
      yield* open(G)
      yield* driver.whenIdle
      expect((yield* shape).slice(0, 9)).toEqual([
        "INS(nt,0,[A])", "TS(1)", "CLM(nt,0,1)", "INS(nt,0,[B])", "TE(1,completed)", "TS(2)", "CLM(nt,0,1)", "SS(2,1)", "UM(B)"
      ])
      expect(yield* requests).toHaveLength(1)
      expect(yield* inbox.idState(asId("A"))).toEqual(Option.some("claimed"))
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario([ScriptedModel.text("one")]))))

  it.scoped("P19 (a, b, d, e): waterfall composition", () =>
    Effect.gen(function*() {
      const preStep = yield* PreStep
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
      const input: PreStepInput = { sessionId: SessionId.make("s"), turn: 1, step: 1, boundary: "initial", messages: Object.freeze([A]) }
      const entered = yield* preStep.run(input)
      expect(entered.map((m) => m.id)).toEqual(["A", "X", "Y"])
      expect(yield* Ref.get(order)).toEqual(["L3", "L1", "L2"])
      expect(frozen).toBe(true)
      expect(defaultArray).not.toBe(input.messages)
      yield* Ref.set(order, [])
      yield* Ref.set(mode, "b")
      expect((yield* preStep.run(input)).map((m) => m.id)).toEqual(["A"])
      expect(yield* Ref.get(order)).toEqual(["L3", "L1"])
    }).pipe(Effect.provide(scenario([]))))

  it.scoped("P19 (c): a listener calling next() twice ends the turn error with no step", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* (yield* PreStep).register((_input, next) => Effect.zipRight(next(), next()))
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      const s = yield* shape
      expect(s.filter((x) => x.startsWith("SS"))).toEqual([])
      expect(s[s.length - 1]).toMatch(/^TE\(1,error\(/)
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario([]))))

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