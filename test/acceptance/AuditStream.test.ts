/**
 * Acceptance audit of SPEC 4.5 (stream failures), 7.4 (interrupted prefix), 5.1/5.2 (acceptance on
 * append, `invariants: "off"`), 8.8 (ScriptedModel effects), written against the package root only.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Ref } from "effect"
import type { SessionEvent } from "../../src/index.js"
import { CancelCause, checkLog, Driver, Inbox, InvalidEvent, ScriptedModel, SessionLog } from "../../src/index.js"
import { dataOfType, events, recordLive, requests, scenario, shape, untilEvent, user } from "./AuditHarness.js"

// `during` runs inside the model stream; it reads the number of chunks logged so far through a
// reference filled by the test before the request.
const seenAtDuring = Ref.unsafeMake(-1)
const logRef = Ref.unsafeMake<Effect.Effect<ReadonlyArray<SessionEvent>> | undefined>(undefined)
const SessionLogLater = {
  get: Effect.flatMap(Ref.get(logRef), (read) =>
    read === undefined
      ? Effect.succeed(-2)
      : Effect.map(read, (es) => es.filter((e) => e.type === "assistant/chunk").length))
}

const gateBroke = new Error("gate broke")
const installLogReader = Effect.flatMap(SessionLog, (log) => Ref.set(logRef, log.events))

describe("4.5 stream failures", () => {
  it.scoped("8.8/4.5: a failing awaitBefore fails the stream, normalised to an UNKNOWN error finish", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect((yield* shape).slice(-3)).toEqual(["CH(finish error)", "SE(1,1)", "TE(1,error(UNKNOWN))"])
      expect((yield* dataOfType("turn/end"))[0]!.reason.error).toEqual({ message: "gate broke", code: "UNKNOWN" })
    }).pipe(Effect.provide(scenario([ScriptedModel.text("x", { awaitBefore: Effect.fail(gateBroke) })]))))

  it.scoped("8.8/4.5: ScriptedModel.die ends the turn error with the ModelError's failure", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect((yield* dataOfType("turn/end"))[0]!.reason).toEqual({ kind: "error", error: { message: "model died", code: "UNKNOWN" } })
      const finish = (yield* dataOfType("assistant/chunk")).at(-1)!
      expect(finish.chunk).toEqual({ type: "finish", finish: { kind: "error", failure: { message: "model died", code: "UNKNOWN" } } })
    }).pipe(Effect.provide(scenario([ScriptedModel.die("model died")]))))

  it.scoped("4.5: a chunk that is not a valid StreamChunk is a turn failure INVALID_EVENT, not offered to retry", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      const s = yield* shape
      expect(s[s.length - 1]).toBe("TE(1,error(INVALID_EVENT))")
      expect(s.filter((x) => x.startsWith("RT"))).toEqual([])
      expect(checkLog(yield* events, { closed: true })).toEqual([])
    }).pipe(Effect.provide(scenario([
      ScriptedModel.chunks([{ type: "usage", usage: { inputTokens: Number.NaN, outputTokens: 1 } }, { type: "finish", finish: { kind: "stop" } }])
    ]))))

  it.scoped("4.5 Q5: chunks after the finish chunk are not logged; a failing afterFinish is ignored", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect((yield* shape).slice(-5)).toEqual(["CH(block-end)", "CH(finish stop)", "AM", "SE(1,1)", "TE(1,completed)"])
    }).pipe(Effect.provide(scenario([
      ScriptedModel.chunks([
        { type: "block-start", index: 0, block: "text" },
        { type: "text-delta", index: 0, text: "x" },
        { type: "block-end", index: 0 },
        { type: "finish", finish: { kind: "stop" } },
        { type: "block-start", index: 1, block: "text" }
      ], { afterFinish: Effect.fail("late") })
    ]))))

  it.scoped("8.8: during runs after the first chunk has been logged", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* installLogReader
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect(yield* Ref.get(seenAtDuring)).toBe(1)
    }).pipe(Effect.provide(scenario([
      ScriptedModel.text("x", {
        during: Effect.flatMap(SessionLogLater.get, (count) => Ref.set(seenAtDuring, count))
      })
    ]))))
})

describe("7.4 interrupted prefix", () => {
  it.scoped("7.4: a prefix of whitespace text writes no AM!; only SE and TE follow", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "assistant/chunk" && (e.data as any).chunk.type === "text-delta")
      yield* driver.cancel(CancelCause.user)
      yield* driver.whenIdle
      expect((yield* shape).slice(-4)).toEqual(["CH(block-start)", "CH(text-delta)", "SE(1,1)", "TE(1,aborted(user))"])
    }).pipe(Effect.provide(scenario([ScriptedModel.hang({ text: "  \n " })]))))

  it.scoped("7.4: tool-call blocks are dropped from the prefix; reasoning is kept; usage is carried", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "assistant/chunk" && (e.data as any).chunk.type === "usage")
      yield* driver.cancel(CancelCause.user)
      yield* driver.whenIdle
      const am = (yield* dataOfType("assistant/message"))[0]!
      expect(am.interrupted).toBe(true)
      expect(am.message.content).toEqual([{ type: "reasoning", text: "think" }])
      expect(am.usage).toEqual({ inputTokens: 4, outputTokens: 2 })
      expect(checkLog(yield* events, { closed: true })).toEqual([])
    }).pipe(Effect.provide(scenario([
      ScriptedModel.hang({ reasoning: "think", toolCall: { id: "c1", name: "t", arguments: "{\"a\"" }, usage: { inputTokens: 4, outputTokens: 2 } })
    ]))))
})

describe("5.1 acceptance on append", () => {
  it.scoped("5.1 A5: surface metadata on an extension event is rejected with no change", () =>
    Effect.gen(function*() {
      const log = yield* SessionLog
      expect(yield* Effect.flip(log.append({ type: "x/e", data: {}, ignorable: true, sourceEventSeqs: [] }))).toBeInstanceOf(InvalidEvent)
      expect(yield* Effect.flip(log.append({ type: "x/e", data: {}, ignorable: true, surfaceOp: "append" }))).toBeInstanceOf(InvalidEvent)
      expect(yield* events).toEqual([])
    }).pipe(Effect.provide(scenario([]))))

  it.scoped("5.2: with invariants off the relational rules are not applied on append (a compaction/start {turn: 1} while idle is accepted)", () =>
    Effect.gen(function*() {
      const log = yield* SessionLog
      const e = yield* log.append({ type: "compaction/start", data: { turn: 1 } })
      expect(e.seq).toBe(0)
      expect(yield* Effect.flip(log.append({ type: "x/undeclared", data: {} }))).toBeInstanceOf(InvalidEvent)
    }).pipe(Effect.provide(scenario([], { agent: { invariants: "off" } }))))

  it.scoped("3.8: prepend inserts at the front; snapshot reads both lists", () =>
    Effect.gen(function*() {
      const inbox = yield* Inbox
      const live = yield* recordLive
      yield* inbox.append("next-turn", user("A"))
      yield* inbox.prepend("next-turn", user("B"))
      yield* inbox.prepend("next-step", user("C"))
      expect(yield* shape).toEqual(["INS(nt,0,[A])", "INS(nt,0,[B])", "INS(ns,0,[C])"])
      const snap = yield* inbox.snapshot
      expect([snap.nextTurn.map((m) => m.id), snap.nextStep.map((m) => m.id)]).toEqual([["B", "A"], ["C"]])
      expect(Object.isFrozen(snap.nextTurn)).toBe(true)
      expect(yield* inbox.hasPending).toBe(true)
      expect((yield* live).length).toBe(3)
      expect(yield* requests).toEqual([])
    }).pipe(Effect.provide(scenario([]))))
})

