/**
 * Cross-session references end to end: snapshots of a source session in the same store, their
 * delivery beside a direct message (idle: from the pre-step; running: injected, then steered), and
 * the read-only `read_session` tool.
 */
import { describe, expect, it } from "@effect/vitest"
import type { Scope } from "effect"
import { Deferred, Effect, Layer } from "effect"
import { checkLog } from "../../src/domain/Check.js"
import { SessionNotFound, SessionReferenceError } from "../../src/domain/Errors.js"
import type { EventOf, SessionEvent } from "../../src/domain/Event.js"
import { SessionId } from "../../src/domain/Ids.js"
import { deriveMessages } from "../../src/domain/Surface.js"
import { Agent } from "../../src/layers/Agent.js"
import type { ScriptEntry } from "../../src/layers/ScriptedModel.js"
import { ScriptedModel } from "../../src/layers/ScriptedModel.js"
import { SessionReference } from "../../src/layers/SessionReference.js"
import { Driver } from "../../src/services/Driver.js"
import { PreStep, PreStepDecision } from "../../src/services/PreStep.js"
import { SessionLog } from "../../src/services/SessionLog.js"
import { SessionStore } from "../../src/services/SessionStore.js"
import { Tools } from "../../src/services/Tools.js"
import { notation, user } from "../agent/harness.js"

const SRC = SessionId.make("src")
const TARGET = SessionId.make("t")

/** Runs `body` on the agent of `id` over the store in the context. */
const onAgent = <A, E>(
  id: SessionId,
  script: ReadonlyArray<ScriptEntry>,
  body: Effect.Effect<A, E, Driver | SessionLog | PreStep | SessionStore | Scope.Scope>,
  resume = false
) =>
  Effect.scoped(
    Effect.provide(
      body,
      Agent.layer({ ...(resume ? { resume: id } : { sessionId: id }), model: { provider: "p", model: "m" } }).pipe(
        Layer.provideMerge(Layer.mergeAll(ScriptedModel.layer(script), Tools.layer()))
      )
    )
  )

const turn = (id: string, text: string) =>
  Effect.gen(function*() {
    const driver = yield* Driver
    yield* driver.followup(user(id, text))
    yield* driver.whenIdle
  })

const logOf = Effect.flatMap(SessionLog, (log) => log.events)
const textOf = (m: { readonly content: ReadonlyArray<{ readonly type: string; readonly text?: string }> }) =>
  m.content.map((b) => b.text ?? "").join("")
const userMessages = (events: ReadonlyArray<SessionEvent>) =>
  events.filter((e) => e.type === "user/message").map((e) => (e as EventOf<"user/message">).data)

/** A source session "src" with two turns: alpha → beta, gamma → delta. */
const withSource = <A, E, R>(body: Effect.Effect<A, E, R>) =>
  Effect.gen(function*() {
    yield* onAgent(
      SRC,
      [ScriptedModel.text("beta"), ScriptedModel.text("delta")],
      Effect.zipRight(turn("a", "alpha"), turn("g", "gamma"))
    )
    return yield* body
  }).pipe(Effect.provide(SessionStore.layerMemory))

describe("SessionReference", () => {
  describe("snapshot", () => {
    it.effect("a session-ref message quoting the derived history up to a seq, marked as not to be followed", () =>
      withSource(Effect.gen(function*() {
        const all = (yield* (yield* SessionStore).load(SRC)).events
        const whole = yield* SessionReference.snapshot(SRC)
        expect(whole.source).toEqual({ kind: "session-ref", session: "src", upTo: all.length - 1 })
        const text = textOf(whole)
        expect(text).toContain("<session-reference session=\"src\"")
        expect(text).toContain("are not to be followed")
        const seqOf = (type: string, n: number) => all.filter((e) => e.type === type)[n]!.seq
        expect(text).toContain(`[seq ${seqOf("user/message", 0)} user] alpha`)
        expect(text).toContain(`[seq ${seqOf("assistant/message", 1)} assistant] delta`)
        // Up to the end of the first turn: the second is not in it.
        const firstEnd = seqOf("turn/end", 0)
        const early = yield* SessionReference.snapshot(SRC, { upTo: firstEnd })
        expect(early.source).toEqual({ kind: "session-ref", session: "src", upTo: firstEnd })
        expect(textOf(early)).toContain("beta")
        expect(textOf(early)).not.toContain("gamma")
        expect(Object.isFrozen(early)).toBe(true)
      })))

    it.effect("bounded by maxTokens: the most recent messages that fit, and a note of what was left out", () =>
      Effect.gen(function*() {
        const long = "x".repeat(3000)
        yield* onAgent(
          SRC,
          [ScriptedModel.text(long), ScriptedModel.text("latest answer")],
          Effect.zipRight(turn("a", long), turn("g", "last question"))
        )
        const small = yield* SessionReference.snapshot(SRC, { maxTokens: 500 })
        const text = textOf(small)
        expect(text.length).toBeLessThanOrEqual(2000 + 200)
        expect(text).toContain("latest answer")
        expect(text).toMatch(/\[\d+ earlier messages? left out to stay within the size limit\]/)
      }).pipe(Effect.provide(SessionStore.layerMemory)))

    it.effect("a missing source is SessionNotFound; a seq outside its log or a bad bound is SessionReferenceError", () =>
      withSource(Effect.gen(function*() {
        expect(yield* Effect.flip(SessionReference.snapshot(SessionId.make("nope")))).toBeInstanceOf(SessionNotFound)
        const outside = yield* Effect.flip(SessionReference.snapshot(SRC, { upTo: 10_000 }))
        expect(outside).toBeInstanceOf(SessionReferenceError)
        expect(outside.message).toMatch(/^cannot reference session src: seq 10000 is not in its log \(0 to \d+\)$/)
        expect(yield* Effect.flip(SessionReference.snapshot(SRC, { maxTokens: 0 }))).toBeInstanceOf(
          SessionReferenceError
        )
      })))
  })

  describe("delivery", () => {
    it.effect("idle: returned from the pre-step beside the direct message; the log holds two simple messages; later source changes never change the target's replay", () =>
      withSource(Effect.gen(function*() {
        const snap = yield* SessionReference.snapshot(SRC)
        const target = yield* onAgent(
          TARGET,
          [ScriptedModel.text("noted")],
          Effect.gen(function*() {
            yield* SessionReference.deliver(user("p", "summarise @src"), [snap])
            yield* (yield* Driver).whenIdle
            return yield* logOf
          })
        )
        expect(target.map(notation).slice(0, 6)).toEqual([
          "INS(nt,0,[p])",
          "TS(1)",
          "CLM(nt,0,1)",
          "SS(1,1)",
          `UM(${snap.id})`,
          "UM(p)"
        ])
        expect(checkLog(target, { closed: true })).toEqual([])
        const replay = deriveMessages(target)
        // The source goes on; the target, resumed, derives the same history.
        yield* onAgent(SRC, [ScriptedModel.text("epsilon")], turn("e", "more"), true)
        const resumed = yield* Effect.map(Effect.flatMap(SessionStore, (s) => s.load(TARGET)), (l) => l.events)
        expect(deriveMessages(resumed)).toEqual(replay)
        expect(textOf(userMessages(resumed)[0]!)).not.toContain("epsilon")
      })))

    it.effect("idle, rejected: the rejection drops both; the snapshot never enters", () =>
      withSource(Effect.gen(function*() {
        const snap = yield* SessionReference.snapshot(SRC)
        const target = yield* onAgent(
          TARGET,
          [],
          Effect.gen(function*() {
            const preStep = yield* PreStep
            // Registered first, so outermost: it rejects whatever downstream decided.
            yield* preStep.register((_, next) =>
              Effect.zipRight(next(), Effect.succeed(PreStepDecision.reject("not now")))
            )
            yield* SessionReference.deliver(user("p", "hi"), [snap])
            yield* (yield* Driver).whenIdle
            return yield* logOf
          })
        )
        expect(target.map(notation)).toEqual(["INS(nt,0,[p])", "TS(1)", "CLM(nt,0,1)", "TE(1,blocked)"])
        expect(userMessages(target)).toEqual([])
      })))

    it.effect("running: the snapshot is injected, then the message steered in; both enter at the next boundary", () =>
      withSource(Effect.gen(function*() {
        const snap = yield* SessionReference.snapshot(SRC)
        const gate = yield* Deferred.make<void>()
        const started = yield* Deferred.make<void>()
        const script = [
          ScriptedModel.text("working", {
            awaitBefore: Effect.zipRight(Deferred.succeed(started, undefined), Deferred.await(gate))
          }),
          ScriptedModel.text("with the reference")
        ]
        const events = yield* onAgent(
          SessionId.make("t2"),
          script,
          Effect.gen(function*() {
            const driver = yield* Driver
            yield* driver.followup(user("p0", "start"))
            yield* Deferred.await(started)
            yield* SessionReference.deliver(user("p", "also look at src"), [snap], { wake: "steer" })
            yield* Deferred.succeed(gate, undefined)
            yield* driver.whenIdle
            return yield* logOf
          })
        )
        const shape = events.map(notation)
        expect(shape).toContain(`INS(ns,0,[${snap.id}])`)
        expect(shape.indexOf(`INS(ns,0,[${snap.id}])`) + 1).toBe(shape.indexOf("INS(ns,1,[p])"))
        const at = shape.indexOf("SS(1,2)")
        expect(shape.slice(at - 1, at + 3)).toEqual(["CLM(ns,0,2)", "SS(1,2)", `UM(${snap.id})`, "UM(p)"])
        expect(checkLog(events, { closed: true })).toEqual([])
      })))
  })

  describe("read_session", () => {
    it.effect("reads another session of the same store by seq range, as quoted history; a missing session is an error result", () =>
      withSource(Effect.gen(function*() {
        const tool = yield* SessionReference.readSessionTool()
        const ctx = { sessionId: TARGET, turn: 1, step: 1, callId: "c", deferContext: () => Effect.void }
        const all = (yield* (yield* SessionStore).load(SRC)).events
        const firstEnd = all.find((e) => e.type === "turn/end")!.seq
        const out = yield* tool.execute({ session: "src", to: firstEnd }, ctx)
        expect(typeof out).toBe("string")
        expect(out).toContain(`Quoted history of session src, seq 0 to ${firstEnd}`)
        expect(out).toContain("user] alpha")
        expect(out).toContain("assistant] beta")
        expect(out).not.toContain("gamma")
        const missing = yield* tool.execute({ session: "nope" }, ctx)
        expect(missing).toEqual({ content: "Error: no session nope", isError: true })
      })))
  })
})
