/**
 * Prices: what a model's tokens cost, in US dollars per million tokens: uncached input, output,
 * input read from the prompt cache and input written to it (Anthropic's five-minute write; a
 * one-hour write costs twice the input price and is not told apart in the log).
 *
 * `PRICES` is tiller's table, the providers' published list prices as of `PRICES_AS_OF`. Prices
 * change: a table given in the options (`Telemetry.layer({ prices })`, the CLI's `--prices FILE`,
 * or `prices` in `.tiller/settings.json`) overrides it model by model (`withOverrides`).
 *
 * @since 0.1.0
 */
import { Schema } from "effect"

/**
 * The price of one model, US dollars per million tokens. Without `cacheRead` or `cacheWrite`, those
 * tokens cost the input price.
 *
 * @since 0.1.0
 * @category schemas
 */
export const Price = Schema.Struct({
  input: Schema.NonNegative,
  output: Schema.NonNegative,
  cacheRead: Schema.optional(Schema.NonNegative),
  cacheWrite: Schema.optional(Schema.NonNegative)
})
/** The price of one model. @since 0.1.0 @category models */
export type Price = typeof Price.Type

/**
 * A price table: model name to price.
 *
 * @since 0.1.0
 * @category schemas
 */
export const PriceTable = Schema.Record({ key: Schema.String, value: Price })
/** A price table: model name to price. @since 0.1.0 @category models */
export type PriceTable = typeof PriceTable.Type

/**
 * The date the prices of `PRICES` were taken from the providers' price pages.
 *
 * @since 0.1.0
 * @category constants
 */
export const PRICES_AS_OF = "2025-11-01"

/**
 * tiller's price table (list prices as of `PRICES_AS_OF`; override with `withOverrides`). A model
 * name matches its own entry, else the longest entry it starts with followed by `-` (so
 * `claude-sonnet-4-5-20250929` is priced as `claude-sonnet-4-5`).
 *
 * @since 0.1.0
 * @category constants
 */
export const PRICES: PriceTable = {
  // tiller's offline demo model costs nothing.
  "demo": { input: 0, output: 0 },
  // Anthropic: cache reads at 0.1x input, five-minute cache writes at 1.25x input.
  "claude-opus-4-5": { input: 5, output: 25, cacheRead: 0.5, cacheWrite: 6.25 },
  "claude-opus-4-1": { input: 15, output: 75, cacheRead: 1.5, cacheWrite: 18.75 },
  "claude-opus-4": { input: 15, output: 75, cacheRead: 1.5, cacheWrite: 18.75 },
  "claude-sonnet-4-5": { input: 3, output: 15, cacheRead: 0.3, cacheWrite: 3.75 },
  "claude-sonnet-4": { input: 3, output: 15, cacheRead: 0.3, cacheWrite: 3.75 },
  "claude-3-7-sonnet": { input: 3, output: 15, cacheRead: 0.3, cacheWrite: 3.75 },
  "claude-haiku-4-5": { input: 1, output: 5, cacheRead: 0.1, cacheWrite: 1.25 },
  "claude-3-5-haiku": { input: 0.8, output: 4, cacheRead: 0.08, cacheWrite: 1 },
  // OpenAI: cached input as listed; no charge for writing the cache.
  "gpt-5": { input: 1.25, output: 10, cacheRead: 0.125, cacheWrite: 1.25 },
  "gpt-5.1": { input: 1.25, output: 10, cacheRead: 0.125, cacheWrite: 1.25 },
  "gpt-5-mini": { input: 0.25, output: 2, cacheRead: 0.025, cacheWrite: 0.25 },
  "gpt-5-nano": { input: 0.05, output: 0.4, cacheRead: 0.005, cacheWrite: 0.05 },
  "gpt-4.1": { input: 2, output: 8, cacheRead: 0.5, cacheWrite: 2 },
  "gpt-4.1-mini": { input: 0.4, output: 1.6, cacheRead: 0.1, cacheWrite: 0.4 },
  "gpt-4.1-nano": { input: 0.1, output: 0.4, cacheRead: 0.025, cacheWrite: 0.1 },
  "gpt-4o": { input: 2.5, output: 10, cacheRead: 1.25, cacheWrite: 2.5 },
  "gpt-4o-mini": { input: 0.15, output: 0.6, cacheRead: 0.075, cacheWrite: 0.15 },
  "o3": { input: 2, output: 8, cacheRead: 0.5, cacheWrite: 2 },
  "o4-mini": { input: 1.1, output: 4.4, cacheRead: 0.275, cacheWrite: 1.1 },
  // DeepSeek (Chat Completions): cache hits at a tenth of a miss.
  "deepseek-chat": { input: 0.28, output: 0.42, cacheRead: 0.028, cacheWrite: 0.28 },
  "deepseek-reasoner": { input: 0.28, output: 0.42, cacheRead: 0.028, cacheWrite: 0.28 }
}

/**
 * The table with `overrides` replacing or adding entries, model by model.
 *
 * @since 0.1.0
 * @category combinators
 */
export const withOverrides = (table: PriceTable, ...overrides: ReadonlyArray<PriceTable | undefined>): PriceTable =>
  Object.assign({}, table, ...overrides.filter((o) => o !== undefined))

/**
 * The price of a model in a table: its own entry, else the longest entry its name starts with
 * followed by `-`; `undefined` when there is none.
 *
 * @since 0.1.0
 * @category getters
 */
export const priceOf = (table: PriceTable, model: string): Price | undefined => {
  if (Object.hasOwn(table, model)) return table[model]
  let best: string | undefined
  for (const name of Object.keys(table)) {
    if (model.startsWith(`${name}-`) && (best === undefined || name.length > best.length)) best = name
  }
  return best === undefined ? undefined : table[best]
}
