import { describe, expect } from "@effect/vitest"
import { Queue } from "effect"
import { checkLog } from "../../src/domain/Check.js"
import { ScriptedModel } from "../../src/layers/ScriptedModel.js"
import { agentTest, scenario, shape, user } from "./harness.js"

describe("loop", () => {
  agentTest(
    "P1: a simple turn",
    scenario([ScriptedModel.text("hello there", { usage: { inputTokens: 3, outputTokens: 2 } })]),
    function*({ driver, log }) {
      const live = yield* driver.subscribe
      const A = user("A")
      yield* driver.followup(A)
      yield* driver.whenIdle
      expect(yield* shape).toEqual([
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
      const events = yield* log.events
      const am = events.find((e) => e.type === "assistant/message")!
      expect((am.data as { usage: unknown }).usage).toEqual({ inputTokens: 3, outputTokens: 2 })
      expect((am as { sourceEventSeqs?: ReadonlyArray<number> }).sourceEventSeqs).toEqual([6, 7, 8, 9, 10])
      const messages = yield* log.messages
      expect(messages.length).toBe(2)
      expect(messages[0]).toEqual(A)
      const requests = yield* (yield* ScriptedModel).requests
      expect(requests.length).toBe(1)
      expect(requests[0]!.messages).toEqual([A])
      expect(checkLog(events, { closed: true })).toEqual([])
      const seen = []
      while (true) {
        const e = yield* Queue.poll(live)
        if (e._tag === "None") break
        seen.push(
          e.value.type === "agent/status"
            ? `status(${e.value.status})`
            : `${e.value.type.slice(12)}(${"message" in e.value ? e.value.message.id : ""})`
        )
      }
      expect(seen).toEqual(["inserted(A)", "status(running)", "claimed(A)", "status(idle)"])
    }
  )
})
