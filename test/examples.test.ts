import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { AgentLive, program } from "../examples/agent.js"
import { FILES, LongSessionLive, program as longSession, WINDOW } from "../examples/long-session.js"
import { McpLive, program as mcpProgram } from "../examples/mcp.js"

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

describe("examples/long-session.ts", () => {
  it.scoped(
    "a session crossing its window many times keeps going; every trigger and kind compacts; nothing is lost to read_history",
    () =>
      Effect.gen(function*() {
        const r = yield* longSession
        // The tool output alone is many windows (characters / 4 tokens).
        expect(FILES.reduce((n, [, size]) => n + size, 0) / 4).toBeGreaterThan(8 * WINDOW)
        expect(r.turnEnds).toEqual(Array.from({ length: FILES.length + 1 }, () => "completed"))
        const kinds = new Set(r.brackets.map((b) => `${b.kind}/${b.trigger}`))
        expect(kinds).toEqual(new Set(["prune/threshold", "summary/threshold", "prune/overflow", "summary/manual"]))
        for (const b of r.brackets) expect(b.tokensAfter!).toBeLessThan(b.tokensBefore!)
        // After every turn the session is back within its window.
        expect(Math.max(...r.fractions)).toBeLessThanOrEqual(1)
        expect(r.shadowed).toBeGreaterThan(100)
        expect(r.unreadable).toBe(0)
        expect(r.recalled).toContain("tool result of read (call call-1-1) [shadowed]:")
        expect(r.recalled).toContain("file-0: lorem ipsum")
        expect(r.problems).toEqual([])
      }).pipe(Effect.provide(LongSessionLive)),
    { timeout: 30_000 }
  )
})

describe("examples/mcp.ts", () => {
  it.scopedLive(
    "an MCP server's tool in a turn, its resource as context, its prompt as the next prompt",
    () =>
      Effect.gen(function*() {
        const { events, history, servers } = yield* mcpProgram
        // get-env is denied by the configuration.
        expect(servers).toMatchObject([{ name: "everything", state: "connected", tools: 13 }])
        expect(history.map((m) => m.source.kind)).toEqual([
          "mcp-resource",
          "user",
          "model",
          "tool",
          "model",
          "mcp-prompt",
          "model"
        ])
        expect(JSON.stringify(history[3]!.content)).toContain("The sum of 19 and 23 is 42.")
        expect(history[5]!.content).toEqual([{ type: "text", text: "What's weather in Paris?" }])
        expect(events.filter((e) => e.type === "turn/end").length).toBe(2)
      }).pipe(Effect.provide(McpLive)),
    60_000
  )
})
