/**
 * The pruning plan (issue 28 item 3): protection of recent results by tokens and of protected
 * tools, already pruned results, and the minimum worth pruning.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Schema } from "effect"
import type { EventOf, SessionEvent } from "../../../src/domain/Event.js"
import { surfaceOf } from "../../../src/domain/Surface.js"
import type { PruneRules } from "../../../src/internal/compaction/Prune.js"
import { placeholderOf, planPrune, PRUNED_PREFIX } from "../../../src/internal/compaction/Prune.js"
import { ScriptedModel } from "../../../src/layers/ScriptedModel.js"
import { Driver } from "../../../src/services/Driver.js"
import { SessionLog } from "../../../src/services/SessionLog.js"
import { Tool } from "../../../src/services/Tools.js"
import { scenario, user } from "../../agent/harness.js"

const sized = (name: string, size: number) =>
  Tool.make(name, { description: "", parameters: Schema.Struct({}), execute: () => Effect.succeed("x".repeat(size)) })

const call = (id: string, name: string) => ScriptedModel.response({ toolCalls: [{ id, name, arguments: {} }] })

// Four results of 4,000 characters (1,004 tokens each), oldest first: r1 (read), r2 (keep), r3, r4 (read).
const session = Effect.gen(function*() {
  const driver = yield* Driver
  yield* driver.followup(user("A"))
  yield* driver.whenIdle
  return yield* (yield* SessionLog).events
}).pipe(Effect.provide(scenario(
  [call("r1", "read"), call("r2", "keep"), call("r3", "read"), call("r4", "read"), ScriptedModel.text("done")],
  { tools: [sized("read", 4_000), sized("keep", 4_000)] }
)))

const view = (events: ReadonlyArray<SessionEvent>) => ({
  surface: surfaceOf(events),
  eventAt: (seq: number) => events[seq]
})
const rules = (overrides: Partial<PruneRules> = {}): PruneRules => ({
  protectRecentTokens: 1_500,
  minimumTokens: 1,
  protectedTools: new Set(["keep"]),
  ...overrides
})
const callIds = (plan: ReturnType<typeof planPrune>) => plan.results.map((r) => r.data.message.content[0].toolCallId)

describe("planPrune", () => {
  it.scoped("the newest results up to protectRecentTokens and protected tools' results are kept; older ones pruned", () =>
    Effect.gen(function*() {
      const events = yield* session
      // r4 (1,004) and r3 (2,008 ≥ 1,500) are recent; r2 is a protected tool; r1 is pruned.
      const plan = planPrune(view(events), rules())
      expect(callIds(plan)).toEqual(["r1"])
      const seq = plan.results[0]!.seq
      const original = (events[seq] as EventOf<"tool/result">).data
      expect(plan.results[0]!.data.message).toEqual({
        ...original.message,
        content: [{
          ...original.message.content[0],
          content: [{ type: "text", text: placeholderOf("read", 4_000, seq) }]
        }]
      })
      expect(plan.freedTokens).toBe(plan.results[0]!.tokens)
      expect(plan.freedTokens).toBeGreaterThan(900)
      // Without protection everything but the protected tool goes, oldest first.
      expect(callIds(planPrune(view(events), rules({ protectRecentTokens: 0 })))).toEqual(["r1", "r3", "r4"])
      expect(callIds(planPrune(view(events), rules({ protectRecentTokens: 0, protectedTools: new Set() })))).toEqual([
        "r1",
        "r2",
        "r3",
        "r4"
      ])
    }))

  it.scoped("nothing is planned unless it frees at least minimumTokens", () =>
    Effect.gen(function*() {
      const events = yield* session
      expect(planPrune(view(events), rules({ minimumTokens: 2_000 }))).toEqual({ results: [], freedTokens: 0 })
      expect(callIds(planPrune(view(events), rules({ minimumTokens: 900 })))).toEqual(["r1"])
    }))

  it.scoped("a result already pruned is neither pruned again nor counted as recent", () =>
    Effect.gen(function*() {
      const events = yield* session
      const r4 = events.filter((e) => e.type === "tool/result").at(-1)! as EventOf<"tool/result">
      const pruned = {
        ...r4,
        seq: events.length,
        surfaceOp: { op: "replace" as const, start: r4.seq, end: r4.seq },
        sourceEventSeqs: [r4.seq],
        data: {
          ...r4.data,
          message: {
            ...r4.data.message,
            content: [{
              ...r4.data.message.content[0],
              content: [{ type: "text" as const, text: `${PRUNED_PREFIX}]` }]
            }]
          }
        }
      } as SessionEvent
      // With 1,000 recent tokens protected: r4 alone is recent, so r3 and r1 go; once r4 is pruned it
      // no longer counts (nor is pruned again), r3 becomes the recent one and only r1 goes.
      expect(callIds(planPrune(view(events), rules({ protectRecentTokens: 1_000 })))).toEqual(["r1", "r3"])
      expect(callIds(planPrune(view([...events, pruned]), rules({ protectRecentTokens: 1_000 })))).toEqual(["r1"])
    }))
})
