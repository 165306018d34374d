/**
 * Compaction (issue 28): the context budget, the tool-result cap, pruning without a model call and
 * its triggers, over an agent with a scripted model.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer, Schema } from "effect"
import { checkLog } from "../../src/domain/Check.js"
import type { EventOf, SessionEvent } from "../../src/domain/Event.js"
import type { Usage } from "../../src/domain/Values.js"
import type { ScriptEntry } from "../../src/layers/ScriptedModel.js"
import { ScriptedModel } from "../../src/layers/ScriptedModel.js"
import type { CompactionOptions } from "../../src/services/Compaction.js"
import { Compaction } from "../../src/services/Compaction.js"
import { Driver } from "../../src/services/Driver.js"
import { Hooks } from "../../src/services/Hooks.js"
import { SessionLog } from "../../src/services/SessionLog.js"
import type { ToolDefinition } from "../../src/services/Tools.js"
import { Tool } from "../../src/services/Tools.js"
import { scenario, user } from "../agent/harness.js"

/** An agent with compaction composed over it (the public layer, over the agent's public services). */
const withCompaction = (
  script: ReadonlyArray<ScriptEntry>,
  options: { readonly tools?: ReadonlyArray<ToolDefinition<any>>; readonly compaction?: CompactionOptions } = {}
) =>
  Compaction.layer(options.compaction).pipe(
    Layer.provideMerge(scenario(script, options.tools === undefined ? {} : { tools: options.tools }))
  )

const usage = (inputTokens: number, outputTokens: number): Usage => ({ inputTokens, outputTokens })

/** A tool named `name` answering `size` characters of `x`. */
const sized = (name: string, size: number) =>
  Tool.make(name, { description: "", parameters: Schema.Struct({}), execute: () => Effect.succeed("x".repeat(size)) })

const toolCall = (id: string, name: string, u?: Usage) =>
  ScriptedModel.response({ toolCalls: [{ id, name, arguments: {} }], ...(u === undefined ? {} : { usage: u }) })

const logEvents = Effect.flatMap(SessionLog, (log) => log.events)

const clean = Effect.map(logEvents, (events) => checkLog(events, { closed: true }))

describe("Compaction: the context budget", () => {
  it.scoped("before any usage is reported, use is the estimate (characters / 4) of the surface", () =>
    Effect.gen(function*() {
      const compaction = yield* Compaction
      expect(yield* compaction.contextUsage).toEqual({ used: 0, window: 10_000, fraction: 0 })
      yield* (yield* Driver).followup(user("A", "x".repeat(400)))
      yield* (yield* Driver).whenIdle
      // UM(A): 100 + 4; AM "hi": 1 + 4.
      expect(yield* compaction.contextUsage).toEqual({ used: 109, window: 10_000, fraction: 0.0109 })
    }).pipe(Effect.provide(withCompaction([ScriptedModel.text("hi")], { compaction: { contextWindow: 10_000 } }))))

  it.scoped("use is the last reported prompt and answer plus an estimate of what was appended since", () =>
    Effect.gen(function*() {
      const compaction = yield* Compaction
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect(yield* compaction.contextUsage).toEqual({ used: 1_050, window: 10_000, fraction: 0.105 })
      yield* driver.followup(user("B"))
      yield* driver.whenIdle
      // Reported 2,000 + 10 with the tool call; then the result (4,000 / 4 + 4) and "done" (1 + 4).
      expect((yield* compaction.contextUsage).used).toBe(2_010 + 1_004 + 5)
    }).pipe(Effect.provide(withCompaction([
      ScriptedModel.text("a", { usage: usage(1_000, 50) }),
      toolCall("c1", "read", usage(2_000, 10)),
      ScriptedModel.text("done")
    ], { tools: [sized("read", 4_000)], compaction: { contextWindow: 10_000 } }))))

  it.scoped("the window comes from the table for the model in use when no contextWindow is given", () =>
    Effect.gen(function*() {
      const compaction = yield* Compaction
      const driver = yield* Driver
      // Before any request: the configured model's window.
      expect((yield* compaction.contextUsage).window).toBe(128_000)
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      // The request header names the scenario's model "m": not in the table, the default.
      expect((yield* compaction.contextUsage).window).toBe(32_768)
    }).pipe(Effect.provide(withCompaction([ScriptedModel.text("a")], { compaction: { model: "gpt-4o" } }))))
})

const resultOf = (events: ReadonlyArray<SessionEvent>, callId: string) =>
  events.find((e): e is EventOf<"tool/result"> =>
    e.type === "tool/result" && (e as EventOf<"tool/result">).data.message.content[0].toolCallId === callId)!

const textOfResult = (event: EventOf<"tool/result">) => {
  const block = event.data.message.content[0].content[0]
  return block?.type === "text" ? block.text : ""
}

describe("Compaction: the tool-result cap", () => {
  const full = "HEAD" + "x".repeat(10_000_000 - 8) + "TAIL"
  const dump = Tool.make("dump", {
    description: "",
    parameters: Schema.Struct({}),
    execute: () => Effect.succeed({ content: full, meta: { lines: 1 } })
  })

  it.scoped("a 10 MB result: the log keeps it whole (in meta), the next request carries head + tail and a note", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      const tr = resultOf(yield* logEvents, "c1")
      const shown = textOfResult(tr)
      expect(shown.startsWith("HEAD")).toBe(true)
      expect(shown.endsWith("TAIL")).toBe(true)
      expect(shown).toContain("9,950,000 of 10,000,000 characters cut from the middle of this tool result")
      expect(shown).toContain("tool result of call c1")
      expect(shown.length).toBeLessThan(50_000 + 400)
      const meta = tr.data.meta as { readonly lines: number; readonly "tiller/cut": { readonly text: string; readonly characters: number } }
      expect(meta.lines).toBe(1)
      expect(meta["tiller/cut"].characters).toBe(10_000_000)
      expect(meta["tiller/cut"].text === full).toBe(true)
      const requests = yield* (yield* ScriptedModel).requests
      const last = requests[1]!.messages.at(-1)!
      expect(last.content[0]!.type === "tool-result" && last.content[0].content[0]).toEqual({ type: "text", text: shown })
      expect(yield* clean).toEqual([])
    }).pipe(Effect.provide(withCompaction([toolCall("c1", "dump"), ScriptedModel.text("done")], {
      tools: [dump],
      compaction: { contextWindow: 200_000 }
    }))))

  it.scoped("per-tool limits override the default; a ToolPost listener's own output is capped too", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      // A listener registered after compaction (an MCP bridge, say) makes "other"'s output 200,000 characters.
      yield* (yield* Hooks).onToolPost((input, next) =>
        Effect.map(next(), (output) => input.name === "other" ? { ...output, content: [{ type: "text" as const, text: "y".repeat(200_000) }] } : output))
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      const events = yield* logEvents
      expect(textOfResult(resultOf(events, "c1")).length).toBeLessThan(100 + 400)
      expect(textOfResult(resultOf(events, "c2"))).toBe("x".repeat(60_000))
      const other = textOfResult(resultOf(events, "c3"))
      expect(other.startsWith("y".repeat(30_000)) && other.length < 50_000 + 400).toBe(true)
      expect(yield* clean).toEqual([])
    }).pipe(Effect.provide(withCompaction([
      ScriptedModel.response({
        toolCalls: [
          { id: "c1", name: "small", arguments: {} },
          { id: "c2", name: "free", arguments: {} },
          { id: "c3", name: "other", arguments: {} }
        ]
      }),
      ScriptedModel.text("done")
    ], {
      tools: [sized("small", 1_000), sized("free", 60_000), sized("other", 60_000)],
      compaction: { contextWindow: 200_000, toolResultLimits: { small: 100, free: Infinity } }
    }))))
})
