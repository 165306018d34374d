/**
 * The figures of a W1 comparison: every system's timed runs or why it could not run, and the
 * ratios derived from them: a system's median steps/s over the fastest like-for-like peer's, and
 * the targets judged on them (tiller's custom `Model` against that peer; the Chat Completions
 * adapter's time per step against the custom `Model`'s).
 *
 * @since 0.1.0
 */
import { median } from "../util.js"
import type { W1Line } from "./line.js"
import type { TillerStore, W1System } from "./systems.js"
import { tillerSystemId } from "./systems.js"

/**
 * A system that ran: its timed runs in the order they ran.
 *
 * @since 0.1.0
 * @category models
 */
export interface W1Ran {
  readonly status: "ran"
  readonly system: W1System
  readonly runs: ReadonlyArray<W1Line>
}

/**
 * A system that could not run, with the reason (its runner's error, or the install's).
 *
 * @since 0.1.0
 * @category models
 */
export interface W1Failed {
  readonly status: "failed"
  readonly system: W1System
  readonly reason: string
  /** Runs that completed before the failure; they are not reported. */
  readonly completedRuns: number
}

/**
 * One system's outcome.
 *
 * @since 0.1.0
 * @category models
 */
export type W1Outcome = W1Ran | W1Failed

/**
 * A whole comparison: the sizes it ran with, the machine and its load, and every system's outcome.
 *
 * @since 0.1.0
 * @category models
 */
export interface W1Compare {
  readonly quick: boolean
  readonly steps: number
  readonly warmSteps: number
  readonly runs: number
  readonly machine: string
  readonly startedAt: string
  readonly loadAtStart: number
  readonly loadAtEnd: number
  readonly cpus: number
  readonly outcomes: ReadonlyArray<W1Outcome>
}

/**
 * The target: tiller's custom `Model` row at least this many times the fastest like-for-like
 * peer's median steps/s, while it writes its full durable event log.
 *
 * @since 0.1.0
 * @category goals
 */
export const W1_RATIO_TARGET = 1.0

/**
 * The stretch target of the same ratio.
 *
 * @since 0.1.0
 * @category goals
 */
export const W1_RATIO_STRETCH = 1.5

/**
 * The target for the Chat Completions adapter: its time per step at most this many times the
 * custom `Model`'s on the same store.
 *
 * @since 0.1.0
 * @category goals
 */
export const W1_ADAPTER_RATIO_TARGET = 2.0

/**
 * A ran system's median steps/s over its runs.
 *
 * @since 0.1.0
 * @category statistics
 */
export const medianStepsPerSec = (ran: W1Ran): number => median(ran.runs.map((r) => r.stepsPerSec))

/**
 * A ran system's median steps per CPU-second (steps over the CPU time of the timed run): less
 * sensitive than the wall-clock rate to other processes competing for the CPUs.
 *
 * @since 0.1.0
 * @category statistics
 */
export const medianStepsPerCpuSec = (ran: W1Ran): number => median(ran.runs.map((r) => r.steps / (r.cpuMs / 1000)))

/**
 * A ran system's median peak RSS over its runs (each run's peak is its own process's).
 *
 * @since 0.1.0
 * @category statistics
 */
export const medianPeakRss = (ran: W1Ran): number => median(ran.runs.map((r) => r.peakRssBytes))

/**
 * The systems that ran.
 *
 * @since 0.1.0
 * @category statistics
 */
export const ranOutcomes = (result: W1Compare): ReadonlyArray<W1Ran> =>
  result.outcomes.filter((o): o is W1Ran => o.status === "ran")

/**
 * Whether a system is driven through the smallest model its public API allows (not a test double).
 * Figures stored before the field existed count as like-for-like.
 *
 * @since 0.1.0
 * @category statistics
 */
export const isLikeForLike = (system: W1System): boolean => system.testDouble !== true

/**
 * The like-for-like peer with the highest median of `rate` (wall-clock steps/s by default), if any
 * ran; peers driven through their own test doubles are left out.
 *
 * @since 0.1.0
 * @category statistics
 */
export const fastestPeer = (
  result: W1Compare,
  rate: (ran: W1Ran) => number = medianStepsPerSec
): W1Ran | undefined => {
  let best: W1Ran | undefined
  for (const ran of ranOutcomes(result)) {
    if (ran.system.tiller || !isLikeForLike(ran.system)) continue
    if (best === undefined || rate(ran) > rate(best)) best = ran
  }
  return best
}

/**
 * A ran system's median `rate` over the fastest like-for-like peer's (undefined when none ran);
 * the rate is wall-clock steps/s by default, the ratio the target is judged on.
 *
 * @since 0.1.0
 * @category statistics
 */
export const ratioToFastestPeer = (
  result: W1Compare,
  ran: W1Ran,
  rate: (ran: W1Ran) => number = medianStepsPerSec
): number | undefined => {
  const fastest = fastestPeer(result, rate)
  return fastest === undefined ? undefined : rate(ran) / rate(fastest)
}

/**
 * The tiller system that ran with `id`, if it did.
 *
 * @since 0.1.0
 * @category statistics
 */
export const ranSystem = (result: W1Compare, id: string): W1Ran | undefined =>
  ranOutcomes(result).find((o) => o.system.id === id)

/**
 * On one store, the Chat Completions adapter's median time per step over the custom `Model`'s
 * (undefined unless both ran): the ratio the adapter target is judged on.
 *
 * @since 0.1.0
 * @category statistics
 */
export const adapterRatio = (result: W1Compare, store: TillerStore): number | undefined => {
  const custom = ranSystem(result, tillerSystemId("custom", store))
  const chat = ranSystem(result, tillerSystemId("chat", store))
  return custom === undefined || chat === undefined ? undefined : medianStepsPerSec(custom) / medianStepsPerSec(chat)
}
