import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { AgentLive, program } from "../examples/agent.js"

describe("examples/agent.ts", () => {
  it.scoped("one tool, an injected context and a steer", () =>
    Effect.gen(function*() {
      const { batches, history, types } = yield* program
      // Step 1 enters the context before the prompt; step 2 (after the tool result) enters the steer.
      expect(batches).toEqual([["ctx", "prompt"], ["steer"]])
      expect(history.map((m) => m.id).slice(0, 2)).toEqual(["ctx", "prompt"])
      expect(history.map((m) => m.role)).toEqual(["user", "user", "assistant", "user", "user", "assistant"])
      expect(history[4]!.id).toBe("steer")
      expect(types.filter((t) => t === "turn/start").length).toBe(1)
      expect(types.at(-1)).toBe("turn/end")
    }).pipe(Effect.provide(AgentLive)))
})
