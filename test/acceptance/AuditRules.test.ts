/**
 * Acceptance audit of individual SPEC rules (2.1 envelope, 2.9 vocabulary, 3.4 cancel, 3.8 inbox
 * identity moves, 3.10 notification order, 4.4 pre-step input, 4.5 assembler, 4.7 turn-stopping,
 * 6.7 compaction), written against the package root only.
 */
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Fiber, Option, Ref, Schema, Stream } from "effect"
import type { UserMessage } from "../../src/index.js"
import {
  CancelCause,
  checkLog,
  Driver,
  Hooks,
  Inbox,
  InvalidEvent,
  PreStep,
  PreStepDecision,
  ScriptedModel,
  SessionLog,
  Tool,
  Tools
} from "../../src/index.js"
import {
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
  token,
  untilEvent,
  user
} from "./AuditHarness.js"
import { gate, open } from "./AuditHarness.js"

const empty = Schema.Struct({})

const ENVELOPE = new Set(["type", "seq", "time", "data", "surfaceOp", "sourceEventSeqs", "ignorable"])
const MESSAGE_TYPES = new Set(["user/message", "assistant/message", "tool/result"])

describe("2.1 / 2.8 envelope and surface metadata of loop events", () => {
  const quick = Tool.make("quick", { description: "", parameters: empty, execute: () => Effect.succeed("ok") })
  it.scoped("2.1: loop events carry only envelope keys; surfaceOp only on message events; no ignorable; loop UMs cite nothing", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.inject(plugin("C"))
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      const es = yield* events
      for (const e of es) {
        for (const key of Object.keys(e)) expect(ENVELOPE.has(key), `${e.type}.${key}`).toBe(true)
        expect("ignorable" in e, e.type).toBe(false)
        expect("surfaceOp" in e, e.type).toBe(MESSAGE_TYPES.has(e.type))
        if (e.type === "user/message") expect("sourceEventSeqs" in e).toBe(false)
        expect(Object.isFrozen(e) && Object.isFrozen(e.data)).toBe(true)
      }
      const am = es.find((e) => e.type === "assistant/message")!
      const finish = es.find((e) => e.type === "assistant/chunk" && (e.data as any).chunk.type === "finish")!
      expect((am as any).sourceEventSeqs).toContain(finish.seq)
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario(
      [ScriptedModel.response({ toolCalls: [{ id: "c1", name: "quick", arguments: {} }] }), ScriptedModel.text("done")],
      { tools: [quick] }
    ))))

  it.scoped("4.5: the assembler drops empty text blocks, keeps reasoning, and puts replayState in the source; requests are frozen and omit absent limits", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const log = yield* SessionLog
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      const am = (yield* dataOfType("assistant/message"))[0]!
      // Only empty text is dropped on success (a whitespace block stays; 7.4's non-whitespace rule is for prefixes).
      expect(am.message.content).toEqual([{ type: "reasoning", text: "hmm" }, { type: "text", text: "   " }, { type: "text", text: "answer" }])
      expect(am.message.source).toEqual({ kind: "model", provider: "p", model: "m", replayState: { token: 7 } })
      expect(am.message.id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/)
      const req = (yield* requests)[0]!
      expect(Object.isFrozen(req)).toBe(true)
      expect("system" in req).toBe(false)
      expect("maxTokens" in req).toBe(false)
      expect(req.messages).toEqual(deriveUpTo(yield* log.events))
    }).pipe(Effect.provide(scenario([
      ScriptedModel.chunks([
        { type: "block-start", index: 0, block: "reasoning" },
        { type: "reasoning-delta", index: 0, text: "hmm" },
        { type: "block-end", index: 0 },
        { type: "block-start", index: 1, block: "text" },
        { type: "text-delta", index: 1, text: "   " },
        { type: "block-end", index: 1 },
        { type: "block-start", index: 2, block: "text" },
        { type: "text-delta", index: 2, text: "" },
        { type: "block-end", index: 2 },
        { type: "block-start", index: 3, block: "text" },
        { type: "text-delta", index: 3, text: "answer" },
        { type: "block-end", index: 3 },
        { type: "replay-state", state: { token: 7 } },
        { type: "finish", finish: { kind: "stop" } }
      ])
    ]))))
})

// The history before the first assistant message: what the first request saw.
const deriveUpTo = (es: ReadonlyArray<import("../../src/index.js").SessionEvent>) =>
  es.filter((e) => e.type === "user/message").slice(0, 1).map((e) => e.data)

describe("2.9 vocabulary and 6.7 compaction through SessionLog.append", () => {
  it.scoped("2.9: an undeclared extension type needs ignorable; a declared one does not", () =>
    Effect.gen(function*() {
      const log = yield* SessionLog
      expect(yield* Effect.flip(log.append({ type: "x/undeclared", data: { a: 1 } }))).toBeInstanceOf(InvalidEvent)
      const a = yield* log.append({ type: "x/undeclared", data: { a: 1 }, ignorable: true })
      expect(a).toEqual({ type: "x/undeclared", seq: 0, time: 0, data: { a: 1 }, ignorable: true })
      const b = yield* log.append({ type: "x/declared", data: [1] })
      expect(b.seq).toBe(1)
      expect(yield* Effect.flip(log.append({ type: "x/declared", data: { bad: undefined } }))).toBeInstanceOf(InvalidEvent)
      expect(yield* Effect.flip(log.append({ type: "x/declared", data: NaN }))).toBeInstanceOf(InvalidEvent)
      expect(yield* log.durableSeq).toBe(1)
    }).pipe(Effect.provide(scenario([], { agent: { eventTypes: ["x/declared"] } }))))

  it.scoped("6.7: compaction/start {turn: null} is accepted only during maintenance; a bracketed replacement compacts history", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const log = yield* SessionLog
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      yield* driver.followup(user("B"))
      yield* driver.whenIdle
      expect(yield* Effect.flip(log.append({ type: "compaction/start", data: { turn: null } }))).toBeInstanceOf(InvalidEvent)
      const before = yield* log.surface
      const result = yield* driver.runMaintenance(Effect.gen(function*() {
        const start = yield* log.append({ type: "compaction/start", data: { turn: null, strategy: "test" } })
        const summary = yield* log.append({ type: "compaction/summary", data: { turn: null, text: "sum" } })
        const replaced = yield* log.append({
          type: "user/message",
          data: { id: "S", role: "user", content: [{ type: "text", text: "summary" }], source: { kind: "compaction", by: "test" } },
          surfaceOp: { op: "replace", start: before[0]!, end: before[1]! },
          sourceEventSeqs: [before[0]!, before[1]!, start.seq, summary.seq]
        })
        yield* log.append({ type: "compaction/end", data: { turn: null } })
        return replaced.seq
      }))
      expect((yield* log.messages).map(token)).toEqual(["summary", "B", "b"])
      expect((yield* log.surface)[0]).toBe(result)
      expect(checkLog(yield* log.events, { closed: true })).toEqual([])
      yield* driver.followup(user("C"))
      yield* driver.whenIdle
      expect((yield* requests)[2]!.messages.map(token)).toEqual(["summary", "B", "b", "C"])
    }).pipe(Effect.provide(scenario([ScriptedModel.text("a"), ScriptedModel.text("b"), ScriptedModel.text("c")]))))
})

describe("3.4 cancel on an idle agent", () => {
  it.scoped("3.4: broad cancel on idle discards next-step then next-turn; keepInbox and an empty idle cancel change nothing", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
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
    }).pipe(Effect.provide(scenario([ScriptedModel.text("a")]))))

  it.scoped("3.3: send(m, next-turn, false) on idle parks; a later wake runs it first", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.send(user("Q"), "next-turn", false)
      expect(yield* driver.status).toBe("idle")
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect(yield* texts).toEqual(["Q", "A"])
      expect((yield* dataOfType("step/start")).map((d) => d.turn)).toEqual([1, 2])
    }).pipe(Effect.provide(scenario([ScriptedModel.text("q"), ScriptedModel.text("a")]))))
})

describe("3.8 identity moves of latched and waking items", () => {
  it.scoped("3.2/3.8: replacing a latched wake keeps it a wake", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const inbox = yield* Inbox
      const G = gate()
      const task = yield* Effect.fork(driver.runMaintenance(Deferred.await(G)))
      yield* settle
      yield* driver.followup(user("W"))
      expect(yield* inbox.replace("W" as UserMessage["id"], user("W2"))).toBe(true)
      yield* open(G)
      yield* Fiber.join(task)
      yield* driver.whenIdle
      expect(yield* texts).toEqual(["W2"])
    }).pipe(Effect.provide(scenario([ScriptedModel.text("w")]))))

  it.scoped("3.2/3.8: replacing a steer inserted after the claim keeps it waking work: the chain continues after a rejection", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const inbox = yield* Inbox
      const G = gate()
      yield* (yield* PreStep).register((input, next) =>
        input.turn === 1 ? Effect.zipRight(Deferred.await(G), Effect.succeed(PreStepDecision.reject())) : next())
      yield* driver.followup(user("P"))
      yield* driver.steer(user("S"))
      expect(yield* inbox.replace("S" as UserMessage["id"], user("S2"))).toBe(true)
      yield* open(G)
      yield* driver.whenIdle
      const s = yield* shape
      expect(s.slice(s.indexOf("TE(1,blocked)"), s.indexOf("TE(1,blocked)") + 5)).toEqual(["TE(1,blocked)", "TS(2)", "CLM(ns,0,1)", "SS(2,1)", "UM(S2)"])
    }).pipe(Effect.provide(scenario([ScriptedModel.text("s")]))))

  it.scoped("3.2/3.8: a steer removed and re-appended through the inbox is no longer waking work", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const inbox = yield* Inbox
      const G = gate()
      yield* (yield* PreStep).register((input, next) =>
        input.turn === 1 ? Effect.zipRight(Deferred.await(G), Effect.succeed(PreStepDecision.reject())) : next())
      yield* driver.followup(user("P"))
      const S = user("S")
      yield* driver.steer(S)
      expect(yield* inbox.remove(S.id)).toBe(true)
      yield* inbox.append("next-step", user("S2"))
      yield* open(G)
      yield* driver.whenIdle
      expect((yield* shape).filter((s) => s.startsWith("TS"))).toEqual(["TS(1)"])
      expect((yield* inbox.nextStep).map((m) => m.id)).toEqual(["S2"])
    }).pipe(Effect.provide(scenario([ScriptedModel.text("s")]))))
})

describe("7.6 the latch", () => {
  const G1 = gate()
  it.scoped("7.6: a replay's initial claim takes the oldest next-turn item (parked pre-abort work); the chain continues with the latched wake", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "assistant/chunk")
      yield* driver.followup(user("P"))
      yield* driver.cancel(CancelCause.user, { keepInbox: true })
      yield* driver.followup(user("B"))
      yield* open(G1)
      yield* driver.whenIdle
      expect((yield* events).filter((e) => e.type === "user/message").map((e) => [(e.data as any).id])).toEqual([["A"], ["P"], ["B"]])
      expect((yield* dataOfType("turn/end")).map((d) => d.reason.kind)).toEqual(["aborted", "completed", "completed"])
    }).pipe(Effect.provide(scenario([ScriptedModel.hang({ text: "a" }, { onInterrupt: Deferred.await(G1) }), ScriptedModel.text("p"), ScriptedModel.text("b")]))))

  const G2 = gate()
  it.scoped("7.6: a latched wake removed before convergence produces no turn", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const inbox = yield* Inbox
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "assistant/chunk")
      yield* driver.cancel(CancelCause.user, { keepInbox: true })
      yield* driver.followup(user("B"))
      expect(yield* inbox.remove("B" as UserMessage["id"])).toBe(true)
      yield* open(G2)
      yield* driver.whenIdle
      expect((yield* dataOfType("turn/start")).map((d) => d.turn)).toEqual([1])
    }).pipe(Effect.provide(scenario([ScriptedModel.hang({ text: "a" }, { onInterrupt: Deferred.await(G2) }), ScriptedModel.text("b")]))))
})

describe("3.10 notification order", () => {
  it.scoped("3.10: a failure's agent/error precedes the claimed and status events of the continuing TX-CLOSE", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const live = yield* recordLive
      const G = gate()
      const broke = new Error("broke")
      yield* (yield* PreStep).register((input, next) =>
        input.turn === 1 ? Effect.zipRight(Deferred.await(G), Effect.fail(broke)) : next())
      yield* driver.followup(user("F"))
      yield* driver.followup(user("S"))
      yield* open(G)
      yield* driver.whenIdle
      expect((yield* live).map(liveNotation)).toEqual([
        "inserted(F)", "status(running)", "claimed(F,1)", "inserted(S)", "error(1,1)", "claimed(S,2)", "status(idle)"
      ])
    }).pipe(Effect.provide(scenario([ScriptedModel.text("s")]))))

  it.scoped("3.10: Driver.events is hot: it delivers only notifications committed after subscription", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.inject(plugin("C"))
      const seen = yield* Ref.make<ReadonlyArray<string>>([])
      yield* Effect.forkScoped(Stream.runForEach(driver.events, (e) => Ref.update(seen, (a) => [...a, liveNotation(e)])))
      yield* settle
      yield* driver.inject(plugin("D"))
      yield* settle
      expect(yield* Ref.get(seen)).toEqual(["inserted(D)"])
    }).pipe(Effect.provide(scenario([]))))
})

describe("4.4 pre-step input and decisions", () => {
  it.scoped("4.4: input.messages are equal to, never identical to, the caller's objects", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const A = user("A")
      let seen: UserMessage | undefined
      yield* (yield* PreStep).register((input, next) => Effect.zipRight(Effect.sync(() => (seen = input.messages[0])), next()))
      yield* driver.followup(A)
      yield* driver.whenIdle
      expect(seen).toEqual(A)
      expect(seen).not.toBe(A)
    }).pipe(Effect.provide(scenario([ScriptedModel.text("a")]))))

  it.scoped("4.4: an invalid entered message ends the turn error(INVALID_MESSAGE) with no step; the dropped batch stays claimed", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const inbox = yield* Inbox
      yield* (yield* PreStep).register(() =>
        Effect.succeed(PreStepDecision.enter([{ id: "bad", role: "user", content: [{ type: "video" }], source: { kind: "x" } } as unknown as UserMessage])))
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect(yield* shape).toEqual(["INS(nt,0,[A])", "TS(1)", "CLM(nt,0,1)", "TE(1,error(INVALID_MESSAGE))"])
      expect(yield* inbox.idState("A" as UserMessage["id"])).toEqual(Option.some("claimed"))
      expect(yield* inbox.idState("bad" as UserMessage["id"])).toEqual(Option.none())
    }).pipe(Effect.provide(scenario([]))))

  it.scoped("4.3: a later boundary entering [] after tools still runs the step (the model continues after the results)", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* (yield* PreStep).register((input, next) => input.boundary === "later" ? Effect.succeed(PreStepDecision.enter([])) : next())
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect((yield* shape).slice(-4)).toEqual(["CH(finish stop)", "AM", "SE(1,2)", "TE(1,completed)"])
      expect(yield* requests).toHaveLength(2)
    }).pipe(Effect.provide(scenario(
      [ScriptedModel.response({ toolCalls: [{ id: "c1", name: "quick", arguments: {} }] }), ScriptedModel.text("done")],
      { tools: [Tool.make("quick", { description: "", parameters: empty, execute: () => Effect.succeed("ok") })] }
    ))))
})

describe("4.7 turn-stopping", () => {
  it.scoped("4.7: listeners run serially in registration order; a failure ends the turn error", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const hooks = yield* Hooks
      const order: Array<string> = []
      yield* hooks.onTurnStopping((input) => Effect.sync(() => order.push(`L1:${input.turn}.${input.step}`)))
      yield* hooks.onTurnStopping(() => Effect.zipRight(Effect.sync(() => order.push("L2")), Effect.fail("stop broke")))
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect(order).toEqual(["L1:1.1", "L2"])
      expect((yield* shape).slice(-2)).toEqual(["SE(1,1)", "TE(1,error(UNKNOWN))"])
      expect((yield* dataOfType("turn/end"))[0]!.reason.error.message).toBe("stop broke")
    }).pipe(Effect.provide(scenario([ScriptedModel.text("a")]))))

  it.scoped("4.6: the mode set with Tools.setMode is read when a call starts", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const tools = yield* Tools
      yield* tools.setMode("p", "exclusive")
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect((yield* shape).filter((s) => s.startsWith("TC") || s.startsWith("TR"))).toEqual(["TC(c1)", "TR(c1)", "TC(c2)", "TR(c2)"])
    }).pipe(Effect.provide(scenario(
      [ScriptedModel.response({ toolCalls: [{ id: "c1", name: "p", arguments: {} }, { id: "c2", name: "p", arguments: {} }] }), ScriptedModel.text("done")],
      { tools: [Tool.make("p", { description: "", parameters: empty, mode: "parallel", execute: () => Effect.succeed("ok") })] }
    ))))
})
