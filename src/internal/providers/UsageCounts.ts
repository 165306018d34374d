/**
 * Token usage from a provider's counts: each count kept only when it is a non-negative safe
 * integer; no usage at all when neither input nor output tokens are known.
 *
 * @since 0.1.0
 */
import type { Usage } from "../../domain/Values.js"

/**
 * A provider's token counts, as reported (absent, null or any number).
 *
 * @since 0.1.0
 * @category models
 */
export interface RawCounts {
  readonly inputTokens?: number | null | undefined
  readonly outputTokens?: number | null | undefined
  readonly totalTokens?: number | null | undefined
  readonly reasoningTokens?: number | null | undefined
  readonly cacheReadTokens?: number | null | undefined
  readonly cacheWriteTokens?: number | null | undefined
}

const count = (value: number | null | undefined): number | undefined =>
  value !== undefined && value !== null && Number.isSafeInteger(value) && value >= 0 ? value : undefined

/**
 * tiller's usage for a provider's counts.
 *
 * @since 0.1.0
 * @category conversions
 */
export const usageOf = (raw: RawCounts): Usage | undefined => {
  const inputTokens = count(raw.inputTokens)
  const outputTokens = count(raw.outputTokens)
  if (inputTokens === undefined && outputTokens === undefined) return undefined
  const totalTokens = count(raw.totalTokens)
  const reasoningTokens = count(raw.reasoningTokens)
  const cacheReadTokens = count(raw.cacheReadTokens)
  const cacheWriteTokens = count(raw.cacheWriteTokens)
  return {
    inputTokens: inputTokens ?? 0,
    outputTokens: outputTokens ?? 0,
    ...(totalTokens === undefined ? {} : { totalTokens }),
    ...(reasoningTokens === undefined ? {} : { reasoningTokens }),
    ...(cacheReadTokens === undefined ? {} : { cacheReadTokens }),
    ...(cacheWriteTokens === undefined ? {} : { cacheWriteTokens })
  }
}
