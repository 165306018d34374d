import { describe, expect, it } from "@effect/vitest"
import * as Progress from "../../src/cli/Progress.js"

const event = (seq: number, time: number, type: string, data: unknown): any => ({ seq, time, type, data })

describe("Progress", () => {
  it("names what the turn is doing and for how long, with the turn's tokens; nothing while idle", () => {
    const progress = Progress.make()
    expect(progress.line(0, 0)).toBeUndefined()
    progress.observe(event(0, 1000, "turn/start", { turn: 2 }))
    progress.observe(event(1, 1000, "step/start", { turn: 2, step: 1 }))
    expect(progress.line(4500, 0)).toBe("⠋ waiting for the model 3 s · turn 2 step 1 · Esc interrupts")
    progress.observe(event(2, 5000, "assistant/chunk", { chunk: { type: "text-delta", index: 0, text: "hi" } }))
    expect(progress.line(7000, 1)).toBe("⠙ streaming 2 s · turn 2 step 1 · Esc interrupts")
    progress.observe(event(3, 8000, "assistant/message", { usage: { inputTokens: 1200, outputTokens: 34 } }))
    progress.observe(event(4, 8000, "tool/call", { callId: "c1", name: "wait", arguments: "{}" }))
    expect(progress.line(20_000, 2)).toBe(
      "⠹ running wait 12 s · turn 2 step 1 · 1.2k in / 34 out tokens · Esc interrupts"
    )
    progress.observe(event(5, 21_000, "tool/result", { message: { content: [{ toolCallId: "c1" }] } }))
    progress.observe(event(6, 21_000, "llm/retry", { attempt: 2, delayMs: 4000 }))
    expect(progress.line(21_000, 3)).toContain("retrying (attempt 2) in 4 s")
    progress.contextShare(0.634)
    expect(progress.line(21_000, 3)).toBe(
      "⠸ retrying (attempt 2) in 4 s · turn 2 step 1 · 1.2k in / 34 out tokens · ctx 63% · Esc interrupts"
    )
    progress.observe(event(7, 30_000, "turn/end", { turn: 2, reason: { kind: "completed" } }))
    expect(progress.line(30_000, 4)).toBeUndefined()
  })

  it("shows a running call's own progress (an MCP server's notification) beside its name until its result", () => {
    const progress = Progress.make()
    progress.observe(event(0, 0, "turn/start", { turn: 1 }))
    progress.observe(event(1, 0, "step/start", { turn: 1, step: 1 }))
    progress.toolProgress("c1", "1/5")
    progress.observe(event(2, 0, "tool/call", { callId: "c1", name: "mcp__everything__slow", arguments: "{}" }))
    expect(progress.line(1000, 0)).toContain("running mcp__everything__slow 1 s")
    progress.toolProgress("c1", "2/5 halfway")
    expect(progress.line(1000, 0)).toContain("running mcp__everything__slow (2/5 halfway) 1 s")
    progress.observe(event(3, 2000, "tool/result", { message: { content: [{ toolCallId: "c1" }] } }))
    progress.observe(event(4, 2000, "tool/call", { callId: "c2", name: "clock", arguments: "{}" }))
    expect(progress.line(2000, 0)).toContain("running clock 0 s")
  })

  it("is off when stdout is not a terminal, under CI or NO_COLOR, and on a dumb terminal", () => {
    expect(Progress.enabled({}, true)).toBe(true)
    expect(Progress.enabled({}, false)).toBe(false)
    expect(Progress.enabled({ CI: "true" }, true)).toBe(false)
    expect(Progress.enabled({ NO_COLOR: "1" }, true)).toBe(false)
    expect(Progress.enabled({ TERM: "dumb" }, true)).toBe(false)
  })
})
