/**
 * Cost and Prices: a step's cost under each provider's way of counting cached input, the fold per
 * step, turn and session (a property: the session is the sum of its turns, whatever the steps),
 * the lookup of a dated model name, overrides, and a model without a price.
 */
import { describe, expect, it } from "@effect/vitest"
import { FastCheck } from "effect"
import * as Cost from "../../src/domain/Cost.js"
import type { SessionEvent } from "../../src/domain/Event.js"
import { MessageId } from "../../src/domain/Ids.js"
import * as Prices from "../../src/domain/Prices.js"
import type { Usage } from "../../src/domain/Values.js"

const message = (
  seq: number,
  turn: number,
  step: number,
  usage: Usage | undefined,
  provider = "anthropic",
  model = "claude-sonnet-4-5"
) =>
  ({
    seq,
    time: 0,
    type: "assistant/message",
    surfaceOp: "append",
    data: {
      turn,
      step,
      attempt: 1,
      message: {
        id: MessageId.make(`m${seq}`),
        role: "assistant",
        content: [],
        source: { kind: "model", provider, model }
      },
      ...(usage === undefined ? {} : { usage })
    }
  }) as unknown as SessionEvent

describe("Prices", () => {
  it("a dated model name is priced as the longest entry it starts with; overrides replace and add entries", () => {
    expect(Prices.priceOf(Prices.PRICES, "claude-sonnet-4-5-20250929")).toStrictEqual(
      Prices.PRICES["claude-sonnet-4-5"]
    )
    expect(Prices.priceOf(Prices.PRICES, "gpt-4.1-mini-2025-04-14")).toStrictEqual(Prices.PRICES["gpt-4.1-mini"])
    expect(Prices.priceOf(Prices.PRICES, "llama3.1")).toBeUndefined()
    const table = Prices.withOverrides(Prices.PRICES, { "llama3.1": { input: 0, output: 0 } }, {
      "gpt-4.1": { input: 1, output: 2 }
    })
    expect(Prices.priceOf(table, "llama3.1")).toStrictEqual({ input: 0, output: 0 })
    expect(Prices.priceOf(table, "gpt-4.1")).toStrictEqual({ input: 1, output: 2 })
    expect(Prices.PRICES["gpt-4.1"]).toStrictEqual({ input: 2, output: 8, cacheRead: 0.5, cacheWrite: 2 })
  })
})

describe("Cost", () => {
  it("Anthropic counts cached input apart, OpenAI within: each part at its price", () => {
    const prices = { m: { input: 3, output: 15, cacheRead: 0.3, cacheWrite: 3.75 } }
    // Anthropic: 100 uncached + 10,000 read + 1,000 written, 50 out.
    const a = Cost.tallyOf(
      { inputTokens: 100, outputTokens: 50, cacheReadTokens: 10_000, cacheWriteTokens: 1_000 },
      "anthropic",
      "m",
      prices
    )
    expect(a).toStrictEqual({
      inputTokens: 11_100,
      cacheReadTokens: 10_000,
      cacheWriteTokens: 1_000,
      outputTokens: 50,
      usd: (300 + 3000 + 3750 + 750) / 1e6,
      unpriced: []
    })
    // OpenAI: 11,100 input of which 10,000 cached.
    const o = Cost.tallyOf({ inputTokens: 11_100, outputTokens: 50, cacheReadTokens: 10_000 }, "openai", "m", prices)
    expect(o.inputTokens).toBe(11_100)
    expect(o.usd).toBeCloseTo((1_100 * 3 + 10_000 * 0.3 + 50 * 15) / 1e6, 12)
    expect(Cost.uncachedUsdOf({ inputTokens: 11_100, outputTokens: 50, cacheReadTokens: 10_000 }, "openai", prices.m))
      .toBeCloseTo(
        (11_100 * 3 + 50 * 15) / 1e6,
        12
      )
  })

  it("per step, turn and session; a retried step adds up; a model without a price shows tokens and says so", () => {
    const events = [
      message(1, 1, 1, { inputTokens: 1000, outputTokens: 10 }),
      message(2, 1, 1, { inputTokens: 1000, outputTokens: 10 }, "anthropic", "claude-sonnet-4-5"),
      message(3, 1, 2, undefined),
      message(4, 2, 1, { inputTokens: 500, outputTokens: 5 }, "openai-compatible", "llama3.1")
    ]
    const cost = Cost.sessionCost(events, Prices.PRICES)
    expect(cost.steps.get("1.1")!.usd).toBeCloseTo(2 * (1000 * 3 + 10 * 15) / 1e6, 12)
    expect(cost.steps.has("1.2")).toBe(false)
    expect(cost.turns.get(2)).toStrictEqual({
      ...Cost.empty,
      inputTokens: 500,
      outputTokens: 5,
      unpriced: ["llama3.1"]
    })
    expect(cost.total.unpriced).toStrictEqual(["llama3.1"])
    expect(Cost.describeCost(cost.total)).toBe("$0.0063 (no price for model llama3.1)")
    expect(Cost.describeCost(cost.turns.get(2)!)).toBe("no price for model llama3.1")
    expect(Cost.tallyJson(cost.turns.get(2)!).usd).toBeNull()
    // A fork's copied history is billed to its source.
    expect(Cost.sessionCost(events, Prices.PRICES, { from: 4 }).total.inputTokens).toBe(500)
  })

  it.prop("the session's tally is the sum of its turns' and of its steps'", [
    FastCheck.array(
      FastCheck.record({
        turn: FastCheck.integer({ min: 1, max: 4 }),
        step: FastCheck.integer({ min: 1, max: 4 }),
        input: FastCheck.integer({ min: 0, max: 100_000 }),
        read: FastCheck.integer({ min: 0, max: 100_000 }),
        output: FastCheck.integer({ min: 0, max: 10_000 }),
        anthropic: FastCheck.boolean()
      }),
      { maxLength: 30 }
    )
  ], ([steps]) => {
    const events = steps.map((s, i) =>
      message(
        i + 1,
        s.turn,
        s.step,
        { inputTokens: s.input + (s.anthropic ? 0 : s.read), outputTokens: s.output, cacheReadTokens: s.read },
        s.anthropic ? "anthropic" : "openai",
        s.anthropic ? "claude-haiku-4-5" : "gpt-5"
      )
    )
    const cost = Cost.sessionCost(events, Prices.PRICES)
    const sum = (tallies: Iterable<Cost.Tally>) => [...tallies].reduce(Cost.add, Cost.empty)
    for (const part of [sum(cost.turns.values()), sum(cost.steps.values())]) {
      expect(part.inputTokens).toBe(cost.total.inputTokens)
      expect(part.cacheReadTokens).toBe(cost.total.cacheReadTokens)
      expect(part.usd).toBeCloseTo(cost.total.usd, 9)
    }
    expect(cost.total.inputTokens).toBe(steps.reduce((n, s) => n + s.input + s.read, 0))
    // Caching never costs more than no caching here (reads are cheaper than input).
    expect(cost.total.usd).toBeLessThanOrEqual(
      events.reduce((n, e) => {
        const d = (e as Extract<SessionEvent, { type: "assistant/message" }>).data
        return n +
          Cost.uncachedUsdOf(
            d.usage!,
            d.message.source.provider,
            Prices.priceOf(Prices.PRICES, d.message.source.model)!
          )
      }, 0) + 1e-12
    )
  })
})
