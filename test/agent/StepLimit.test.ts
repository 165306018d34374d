/**
 * The step limit of a turn (`maxSteps`): a model that answers every request with a tool call ends
 * its turn with `error(MAX_STEPS)` naming the limit, instead of running for as long as anyone waits;
 * the log stays one the fold and the checker read.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer, Schema } from "effect"
import { checkLog } from "../../src/domain/Check.js"
import type { EventOf } from "../../src/domain/Event.js"
import { SessionId } from "../../src/domain/Ids.js"
import { DEFAULT_MAX_STEPS } from "../../src/internal/loop/StepLimit.js"
import { ScriptedModel } from "../../src/layers/ScriptedModel.js"
import { Driver } from "../../src/services/Driver.js"
import { SessionLog } from "../../src/services/SessionLog.js"
import { SessionStore } from "../../src/services/SessionStore.js"
import { Tool } from "../../src/services/Tools.js"
import { agentOver, agentTest, scenario, user } from "./harness.js"

const ping = Tool.make("ping", {
  description: "",
  parameters: Schema.Struct({}),
  execute: () => Effect.succeed("pong")
})
const calls = (n: number, from = 1) =>
  Array.from(
    { length: n },
    (_, i) => ScriptedModel.response({ toolCalls: [{ id: `c${from + i}`, name: "ping", arguments: {} }] })
  )

const prompt = (id: string) =>
  Effect.flatMap(Driver, (driver) => Effect.zipRight(driver.followup(user(id)), driver.whenIdle))
const events = Effect.flatMap(SessionLog, (log) => log.events)
const turnEnds = Effect.map(
  events,
  (es) => es.filter((e): e is EventOf<"turn/end"> => e.type === "turn/end").map((e) => e.data)
)
const stepsOf = (turn: number) =>
  Effect.map(
    events,
    (es) => es.filter((e) => e.type === "step/start" && (e as EventOf<"step/start">).data.turn === turn).length
  )

describe("the step limit of a turn", () => {
  agentTest(
    "maxSteps 3 and a model that calls a tool on every request: the turn ends error(MAX_STEPS) after step 3, naming the limit",
    scenario([...calls(5), ScriptedModel.text("done")], { tools: [ping], agent: { maxSteps: 3 } }),
    function*() {
      yield* prompt("A")
      expect(yield* stepsOf(1)).toBe(3)
      expect(yield* turnEnds).toEqual([{
        turn: 1,
        reason: {
          kind: "error",
          error: {
            code: "MAX_STEPS",
            message:
              "the turn reached its step limit of 3 steps (maxSteps, --max-steps) with the model still calling tools; a new prompt continues from the tool results",
            retryable: false
          }
        }
      }])
      // Step 3's call ran and its result is logged; no step 4 was opened, no fourth request made.
      const all = yield* events
      const results = all.filter((e): e is EventOf<"tool/result"> => e.type === "tool/result").map((e) =>
        e.data.message.content[0].toolCallId
      )
      expect(results).toEqual(["c1", "c2", "c3"])
      expect((yield* (yield* ScriptedModel).requests).length).toBe(3)
      expect(checkLog(all, { closed: true })).toEqual([])
      // The next prompt is a turn of its own, with its own limit.
      yield* prompt("B")
      expect(yield* stepsOf(2)).toBe(3)
      expect((yield* turnEnds).map((e) => e.reason.kind === "error" ? e.reason.error.code : e.reason.kind)).toEqual([
        "MAX_STEPS",
        "completed"
      ])
    }
  )

  agentTest(
    `by default a turn runs at most ${DEFAULT_MAX_STEPS} steps`,
    scenario([...calls(DEFAULT_MAX_STEPS + 5)], { tools: [ping] }),
    function*() {
      yield* prompt("A")
      expect(yield* stepsOf(1)).toBe(DEFAULT_MAX_STEPS)
      const [end] = yield* turnEnds
      expect(end!.reason).toMatchObject({ kind: "error", error: { code: "MAX_STEPS" } })
      expect(end!.reason.kind === "error" ? end!.reason.error.message : "").toContain(
        `step limit of ${DEFAULT_MAX_STEPS} steps`
      )
    }
  )

  agentTest(
    "the limit counts steps: a turn that stops at exactly maxSteps completes, one that would run a step more does not",
    scenario([...calls(2), ScriptedModel.text("done"), ...calls(4, 3)], { tools: [ping], agent: { maxSteps: 3 } }),
    function*() {
      yield* prompt("A")
      yield* prompt("B")
      expect([yield* stepsOf(1), yield* stepsOf(2)]).toEqual([3, 3])
      expect((yield* turnEnds).map((e) => e.reason.kind === "error" ? e.reason.error.code : e.reason.kind)).toEqual([
        "completed",
        "MAX_STEPS"
      ])
    }
  )

  it.scoped("a log whose turn ended MAX_STEPS resumes: the fold and the checker read it", () =>
    Effect.gen(function*() {
      const store = yield* SessionStore
      yield* Effect.scoped(Effect.provide(prompt("A"), agentOver(calls(3), { tools: [ping], agent: { maxSteps: 2 } })))
      yield* Effect.scoped(
        Effect.gen(function*() {
          const all = yield* events
          const reasons = all.filter((e): e is EventOf<"turn/end"> => e.type === "turn/end").map((e) => e.data.reason)
          expect(reasons.map((r) => r.kind === "error" ? r.error.code : r.kind)).toEqual(["MAX_STEPS"])
          expect(checkLog(all, { closed: true })).toEqual([])
        }).pipe(Effect.provide(agentOver([], { resume: true })))
      )
      expect((yield* store.load(SessionId.make("s"))).events.at(-1)?.type).toBe("session/end-seed")
    }).pipe(Effect.provide(Layer.fresh(SessionStore.layerMemory))))
})
