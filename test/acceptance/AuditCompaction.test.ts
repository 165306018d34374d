/**
 * Acceptance audit of SPEC 6.7 (automatic compaction in a pre-step listener, overflow recovery in
 * a request-error listener, tool-result pruning) and G7, written against the package root only.
 */
import { describe, expect, it } from "@effect/vitest"
import { Duration, Effect, Schema } from "effect"
import { checkLog, Driver, Hooks, InvalidEvent, PreStep, RequestErrorAction, ScriptedModel, SessionLog, Tool, userMessage } from "../../src/index.js"
import { closeOut, events, requests, scenario, shape, token, user } from "./AuditHarness.js"

const empty = Schema.Struct({})
const summary = (id: string) => userMessage({ id, text: "summary", source: { kind: "compaction", by: "test" } })

describe("6.7 compaction seams", () => {
  it.scoped("6.7: automatic compaction in a pre-step listener with a numeric bracket; the step's request sees the summary", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const log = yield* SessionLog
      yield* (yield* PreStep).register((input, next) =>
        input.turn === 2
          ? Effect.gen(function*() {
            const surface = yield* log.surface
            const start = yield* log.append({ type: "compaction/start", data: { turn: 2 } })
            yield* log.append({
              type: "user/message",
              data: summary("S"),
              surfaceOp: { op: "replace", start: surface[0]!, end: surface[1]! },
              sourceEventSeqs: [surface[0]!, surface[1]!, start.seq]
            })
            yield* log.append({ type: "compaction/end", data: { turn: 2 } })
            return yield* next()
          })
          : next())
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      yield* driver.followup(user("B"))
      yield* driver.whenIdle
      const s = yield* shape
      expect(s.slice(s.indexOf("TS(2)"), s.indexOf("TS(2)") + 7)).toEqual([
        "TS(2)", "CLM(nt,0,1)", "compaction/start", "UM~(S)", "compaction/end", "SS(2,1)", "UM(B)"
      ])
      expect((yield* requests)[1]!.messages.map(token)).toEqual(["summary", "B"])
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario([ScriptedModel.text("a"), ScriptedModel.text("b")]))))

  it.scoped("6.7 / 4.5 G7: overflow recovery replaces history in a request-error listener; the retried attempt sees it", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const log = yield* SessionLog
      const hooks = yield* Hooks
      yield* hooks.onRequestError((input, next) =>
        input.turn === 2 && input.failure.code === "CONTEXT_OVERFLOW"
          ? Effect.gen(function*() {
            const surface = yield* log.surface
            yield* log.append({
              type: "user/message",
              data: summary("S"),
              surfaceOp: { op: "replace", start: surface[0]!, end: surface[1]! },
              sourceEventSeqs: [surface[0]!, surface[1]!]
            })
            return RequestErrorAction.retry(Duration.zero)
          })
          : next())
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      yield* driver.followup(user("B"))
      yield* driver.whenIdle
      const rs = yield* requests
      expect(rs.map((r) => r.messages.map(token))).toEqual([["A"], ["A", "a", "B"], ["summary", "B"]])
      expect(rs.map((r) => [r.turn, r.attempt])).toEqual([[1, 1], [2, 1], [2, 2]])
      expect((yield* shape).filter((x) => x.startsWith("RT"))).toEqual(["RT(1)"])
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario([
      ScriptedModel.text("a"),
      ScriptedModel.fail({ message: "too long", code: "CONTEXT_OVERFLOW", status: 400 }),
      ScriptedModel.text("b")
    ]))))

  const big = Tool.make("big", { description: "", parameters: empty, execute: () => Effect.succeed("a very long output") })
  // 2.8: a tool/result replacement equals the shadowed message (id included) except for the result block's content.
  it.scoped("6.7: a pruner rewrites one tool/result's content (TR~); a change beyond content is rejected", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const log = yield* SessionLog
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      const tr = (yield* events).find((e) => e.type === "tool/result")!
      const data = tr.data as any
      const pruned = {
        ...data,
        message: { ...data.message, content: [{ ...data.message.content[0], content: [{ type: "text", text: "[pruned]" }] }] }
      }
      const flipped = { ...pruned, message: { ...pruned.message, content: [{ ...pruned.message.content[0], isError: true }] } }
      expect(yield* Effect.flip(log.append({ type: "tool/result", data: flipped, surfaceOp: { op: "replace", start: tr.seq, end: tr.seq }, sourceEventSeqs: [tr.seq] })))
        .toBeInstanceOf(InvalidEvent)
      yield* log.append({ type: "tool/result", data: pruned, surfaceOp: { op: "replace", start: tr.seq, end: tr.seq }, sourceEventSeqs: [tr.seq] })
      const tokens = (yield* log.messages).map((m) => m.content[0]?.type === "tool-result" ? (m.content[0].content[0] as any).text : token(m))
      expect(tokens).toEqual(["A", "tool-call c1", "[pruned]", "done"])
      expect(checkLog(yield* log.events, { closed: true })).toEqual([])
    }).pipe(Effect.provide(scenario(
      [ScriptedModel.response({ toolCalls: [{ id: "c1", name: "big", arguments: {} }] }), ScriptedModel.text("done")],
      { tools: [big] }
    ))))
})
