/**
 * Cost: what a session's model requests cost, as a pure fold over the usage its log records
 * (`assistant/message` events). Nothing of it is stored: the log's usage is the truth, the prices
 * are a table (`Prices`) given at reading time.
 *
 * Providers count input differently: Anthropic's `inputTokens` leaves out the tokens read from and
 * written to the cache, OpenAI and Chat Completions hosts count them in. The fold bills each step's
 * uncached input at the input price, cache reads and writes at their prices, output at the output
 * price. A step whose model has no price adds its tokens but no cost, and the model is named in
 * `unpriced`: such a total is a lower bound, and says so.
 *
 * @since 0.1.0
 */
import type { SessionEvent } from "./Event.js"
import type { Price, PriceTable } from "./Prices.js"
import { priceOf } from "./Prices.js"
import type { Usage } from "./Values.js"

/**
 * Tokens and cost of some steps: all input (cached included), the part read from the cache, the
 * part written to it, output, the cost in US dollars of the priced steps, the models without a price.
 *
 * @since 0.1.0
 * @category models
 */
export interface Tally {
  readonly inputTokens: number
  readonly cacheReadTokens: number
  readonly cacheWriteTokens: number
  readonly outputTokens: number
  readonly usd: number
  readonly unpriced: ReadonlyArray<string>
}

/**
 * A tally of nothing.
 *
 * @since 0.1.0
 * @category constants
 */
export const empty: Tally = {
  inputTokens: 0,
  cacheReadTokens: 0,
  cacheWriteTokens: 0,
  outputTokens: 0,
  usd: 0,
  unpriced: []
}

/**
 * Whether a provider counts cached input apart from `inputTokens` (Anthropic).
 *
 * @since 0.1.0
 * @category predicates
 */
export const countsCacheApart = (provider: string): boolean => /anthropic|claude/i.test(provider)

/**
 * A usage split into uncached input, cache reads, cache writes and output, whatever the provider's
 * way of counting.
 *
 * @since 0.1.0
 * @category getters
 */
export const split = (usage: Usage, provider: string) => {
  const read = usage.cacheReadTokens ?? 0
  const write = usage.cacheWriteTokens ?? 0
  const uncached = countsCacheApart(provider) ? usage.inputTokens : Math.max(0, usage.inputTokens - read - write)
  return { uncached, read, write, output: usage.outputTokens }
}

/**
 * What one usage costs at a price, in US dollars.
 *
 * @since 0.1.0
 * @category getters
 */
export const usdOf = (usage: Usage, provider: string, price: Price): number => {
  const { output, read, uncached, write } = split(usage, provider)
  return (uncached * price.input + read * (price.cacheRead ?? price.input) + write * (price.cacheWrite ?? price.input) +
    output * price.output) / 1_000_000
}

/**
 * What one usage costs without any caching: all its input at the input price.
 *
 * @since 0.1.0
 * @category getters
 */
export const uncachedUsdOf = (usage: Usage, provider: string, price: Price): number => {
  const { output, read, uncached, write } = split(usage, provider)
  return ((uncached + read + write) * price.input + output * price.output) / 1_000_000
}

/**
 * The tally of one step's usage by `provider`'s `model`.
 *
 * @since 0.1.0
 * @category constructors
 */
export const tallyOf = (usage: Usage, provider: string, model: string, prices: PriceTable): Tally => {
  const { output, read, uncached, write } = split(usage, provider)
  const price = priceOf(prices, model)
  return {
    inputTokens: uncached + read + write,
    cacheReadTokens: read,
    cacheWriteTokens: write,
    outputTokens: output,
    usd: price === undefined ? 0 : usdOf(usage, provider, price),
    unpriced: price === undefined ? [model] : []
  }
}

/**
 * Two tallies added up.
 *
 * @since 0.1.0
 * @category combinators
 */
export const add = (a: Tally, b: Tally): Tally => ({
  inputTokens: a.inputTokens + b.inputTokens,
  cacheReadTokens: a.cacheReadTokens + b.cacheReadTokens,
  cacheWriteTokens: a.cacheWriteTokens + b.cacheWriteTokens,
  outputTokens: a.outputTokens + b.outputTokens,
  usd: a.usd + b.usd,
  unpriced: b.unpriced.length === 0 ? a.unpriced : [...new Set([...a.unpriced, ...b.unpriced])]
})

/**
 * The cost of a session: per step (key `turn.step`), per turn and in all, folded over its events.
 *
 * @since 0.1.0
 * @category models
 */
export interface SessionCost {
  readonly steps: ReadonlyMap<string, Tally>
  readonly turns: ReadonlyMap<number, Tally>
  readonly total: Tally
}

/**
 * Folds a log's `assistant/message` usage into per-step, per-turn and session tallies. Events with
 * a seq below `from` are left out (a fork's copied history, billed to the session it came from).
 *
 * @since 0.1.0
 * @category constructors
 */
export const sessionCost = (
  events: ReadonlyArray<SessionEvent>,
  prices: PriceTable,
  options: { readonly from?: number } = {}
): SessionCost => {
  const steps = new Map<string, Tally>()
  const turns = new Map<number, Tally>()
  let total = empty
  for (const event of events) {
    if (event.type !== "assistant/message" || event.seq < (options.from ?? 0)) continue
    const data = (event as Extract<SessionEvent, { readonly type: "assistant/message" }>).data
    if (data.usage === undefined) continue
    const tally = tallyOf(data.usage, data.message.source.provider, data.message.source.model, prices)
    const key = `${data.turn}.${data.step}`
    steps.set(key, add(steps.get(key) ?? empty, tally))
    turns.set(data.turn, add(turns.get(data.turn) ?? empty, tally))
    total = add(total, tally)
  }
  return { steps, turns, total }
}

/**
 * A cost in words: `$0.0123`, with `(no price for model X)` after it when some step had no price,
 * or only `no price for model X` when none had one.
 *
 * @since 0.1.0
 * @category formatting
 */
export const describeCost = (tally: Tally): string => {
  const usd = `$${tally.usd < 1 ? tally.usd.toFixed(4) : tally.usd.toFixed(2)}`
  if (tally.unpriced.length === 0) return usd
  const missing = `no price for model ${tally.unpriced.join(", ")}`
  const pricedAny = tally.usd > 0
  return pricedAny ? `${usd} (${missing})` : missing
}

/**
 * A tally as JSON for machine readers: the token counts, `usd` (null when no step had a price) and
 * the models without a price.
 *
 * @since 0.1.0
 * @category formatting
 */
export const tallyJson = (tally: Tally) => ({
  inputTokens: tally.inputTokens,
  cacheReadTokens: tally.cacheReadTokens,
  cacheWriteTokens: tally.cacheWriteTokens,
  outputTokens: tally.outputTokens,
  usd: tally.unpriced.length > 0 && tally.usd === 0 ? null : Number(tally.usd.toFixed(9)),
  unpriced: tally.unpriced
})
