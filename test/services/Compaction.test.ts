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
