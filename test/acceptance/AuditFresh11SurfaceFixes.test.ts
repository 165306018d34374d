/**
 * SPEC 5.2 R6 on live appends: a bracket opened with `turn: null` inside a turn is refused with the
 * rule the checker reports for it.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { checkLog, Driver, PreStep, ScriptedModel, SessionLog } from "../../src/index.js"
import { events, scenario, user } from "./AuditHarness.js"

describe("SPEC 5.2 R6 on live appends", () => {
  it.scoped("5.2 R6: compaction/start {turn: null} appended inside an open turn fails InvalidEvent {rule: \"R6\"}", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const log = yield* SessionLog
      const seen: Array<unknown> = []
      yield* (yield* PreStep).register((_input, next) =>
        Effect.gen(function*() {
          seen.push(yield* Effect.flip(log.append({ type: "compaction/start", data: { turn: null } })))
          return yield* next()
        }))
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      // the same event in a hand-built log is an R6 violation at its seq
      const all = yield* events
      const probe = [...all.slice(0, 3), { type: "compaction/start", seq: 3, time: 0, data: { turn: null } }] as typeof all
      expect(checkLog(probe).map((v) => v.rule)).toStrictEqual(["R6"])
      expect(seen[0]).toMatchObject({ _tag: "InvalidEvent", type: "compaction/start", rule: "R6" })
    }).pipe(Effect.provide(scenario([ScriptedModel.text("a")]))))
})
