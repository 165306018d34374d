/**
 * The Markdown section of a W1 comparison: a table of every system's steps/s (min, median, max),
 * time per step, peak RSS and ratio to the fastest like-for-like peer (the test-double rows
 * after the like-for-like ones), the targets as ratios with met or MISSED, how each system was
 * driven and which systems could not run and why.
 *
 * @since 0.1.0
 */
import { formatBytes, formatCount, formatMicros, formatRatio, table } from "../util.js"
import type { W1Compare, W1Outcome } from "./result.js"
import {
  adapterRatio,
  fastestPeer,
  isLikeForLike,
  medianPeakRss,
  medianStepsPerCpuSec,
  medianStepsPerSec,
  ranSystem,
  ratioToFastestPeer,
  W1_ADAPTER_RATIO_TARGET,
  W1_RATIO_STRETCH,
  W1_RATIO_TARGET
} from "./result.js"
import type { TillerStore } from "./systems.js"
import { tillerSystemId } from "./systems.js"

const ratioText = (ratio: number | undefined): string => ratio === undefined ? "-" : formatRatio(ratio)

const row = (result: W1Compare, outcome: W1Outcome): ReadonlyArray<string> => {
  const name = outcome.system.tiller ? `**${outcome.system.label}**` : outcome.system.label
  if (outcome.status === "failed") return [name, outcome.system.pkg, "-", "-", "-", "-", "-", "-", "-", "could not run"]
  const rates = outcome.runs.map((r) => r.stepsPerSec)
  return [
    name,
    outcome.system.pkg,
    `${formatCount(Math.min(...rates))}/s`,
    `${formatCount(medianStepsPerSec(outcome))}/s`,
    `${formatCount(Math.max(...rates))}/s`,
    formatMicros(medianStepsPerSec(outcome)),
    formatBytes(medianPeakRss(outcome)),
    ratioText(ratioToFastestPeer(result, outcome)),
    `${formatCount(medianStepsPerCpuSec(outcome))}/s`,
    ratioText(ratioToFastestPeer(result, outcome, medianStepsPerCpuSec))
  ]
}

// Like-for-like rows first (tiller in its listed order, then the peers fastest first), then the
// test-double rows in the same order; failures last.
const ordered = (result: W1Compare): ReadonlyArray<W1Outcome> => {
  const rank = (o: W1Outcome) => o.status === "failed" ? -1 : medianStepsPerSec(o)
  const group = (likeForLike: boolean) => {
    const outcomes = result.outcomes.filter((o) => o.status === "ran" && isLikeForLike(o.system) === likeForLike)
    const tiller = outcomes.filter((o) => o.system.tiller)
    const peers = outcomes.filter((o) => !o.system.tiller).sort((a, b) => rank(b) - rank(a))
    return [...tiller, ...peers]
  }
  return [...group(true), ...group(false), ...result.outcomes.filter((o) => o.status === "failed")]
}

const verdict = (met: boolean): string => met ? "met" : "MISSED"

const STORES: ReadonlyArray<TillerStore> = ["memory", "sqlite"]

const STORE_NAME: Record<TillerStore, string> = { memory: "memory store", sqlite: "SQLite store" }

/**
 * The targets as rows `[ratio, value, target, result]`: tiller's custom `Model` over the fastest
 * like-for-like peer, and the Chat Completions adapter's time per step over the custom `Model`'s,
 * on each store where both sides ran.
 *
 * @since 0.1.0
 * @category reporting
 */
export const targetRows = (result: W1Compare): ReadonlyArray<ReadonlyArray<string>> => {
  const fastest = fastestPeer(result)
  const rows: Array<ReadonlyArray<string>> = []
  for (const store of STORES) {
    const custom = ranSystem(result, tillerSystemId("custom", store))
    if (custom === undefined || fastest === undefined) continue
    const ratio = ratioToFastestPeer(result, custom)!
    rows.push([
      `W1 tiller custom Model (${STORE_NAME[store]}) / fastest like-for-like peer (${fastest.system.label}), steps/s`,
      formatRatio(ratio),
      `>= ${formatRatio(W1_RATIO_TARGET)} (stretch ${formatRatio(W1_RATIO_STRETCH)})`,
      `${verdict(ratio >= W1_RATIO_TARGET)} (stretch ${verdict(ratio >= W1_RATIO_STRETCH)})`
    ])
  }
  for (const store of STORES) {
    const ratio = adapterRatio(result, store)
    if (ratio === undefined) continue
    rows.push([
      `Chat Completions adapter / custom Model (${STORE_NAME[store]}), time per step`,
      formatRatio(ratio),
      `<= ${formatRatio(W1_ADAPTER_RATIO_TARGET)}`,
      verdict(ratio <= W1_ADAPTER_RATIO_TARGET)
    ])
  }
  return rows
}

const targetsSection = (result: W1Compare): ReadonlyArray<string> => {
  const rows = targetRows(result)
  if (rows.length === 0) {
    return ["No target could be judged: tiller's custom `Model` or every like-for-like peer failed to run."]
  }
  return [
    "Targets, as ratios of medians in this run:",
    "",
    table(["ratio", "value", "target", "result"], rows, [false, true, false, false])
  ]
}

/**
 * The Markdown section reporting a W1 comparison.
 *
 * @since 0.1.0
 * @category reporting
 */
export const renderW1Compare = (result: W1Compare): string => {
  const failed = result.outcomes.filter((o) => o.status === "failed")
  const busy = Math.max(result.loadAtStart, result.loadAtEnd) > result.cpus / 2
  return [
    `## Agent loop W1 beside peer agent loops, like-for-like${result.quick ? " (quick)" : ""}`,
    "",
    `One session, N = ${formatCount(result.steps)} steps: each step the model (scripted, instant) calls one trivial`,
    "`echo` tool (returns a constant string), then the model answers text: N + 1 model calls and N tool",
    "executions. Every run checks both counts, the final text, and that each model call after the first saw",
    "the previous step's tool result as the last message of its request. Each system is driven through the",
    "smallest model its public API allows (the like-for-like rows; tiller also through its Chat Completions",
    "adapter against an in-process HTTP server); the test doubles measured before (tiller's `ScriptedModel`,",
    "pi-ai's faux provider, the AI SDK's `MockLanguageModelV4`) follow as labelled rows, compared with but",
    "never compared against. Each run is a process of its own: an untimed warm-up of",
    `${
      formatCount(result.warmSteps)
    } steps, then one timed run of N steps; ${result.runs} timed runs per system, the systems`,
    "taking turns round-robin (the first rotating each round). Setup (building the agent and the script) is",
    "untimed. Peak RSS is the process's maximum resident set (`process.resourceUsage().maxRSS`, warm-up",
    "included), the median over its runs. The ratio is the system's median steps/s over the fastest",
    "like-for-like peer's. tiller writes its full event log to the store within the timed run; every peer",
    "keeps its history in memory only and persists nothing. Steps per CPU-second divide N by the CPU time",
    "(user + system) the process spent in the timed run: on a busy machine it moves less than the wall-clock",
    "rate, but it leaves out time spent waiting (tiller's SQLite writes and the Chat Completions row's",
    "in-process server run on the same thread, so they are counted).",
    "",
    `machine: ${result.machine}; started ${result.startedAt}`,
    `load average (1 min) on ${result.cpus} CPUs: ${result.loadAtStart.toFixed(2)} at start, ${
      result.loadAtEnd.toFixed(2)
    } at end${busy ? " - other processes competed for the CPUs; compare the ratios, not the absolute rates" : ""}`,
    "",
    table(
      [
        "system",
        "package",
        "min",
        "steps/s (median)",
        "max",
        "µs per step",
        "peak RSS",
        "x fastest like-for-like peer",
        "steps per CPU-s",
        "x fastest (CPU)"
      ],
      ordered(result).map((o) => row(result, o)),
      [false, false, true, true, true, true, true, true, true, true]
    ),
    "",
    ...targetsSection(result),
    "",
    "How each system is driven:",
    "",
    ...result.outcomes.map((o) => `- ${o.system.label} (${o.system.pkg}): ${o.system.how}`),
    "",
    ...(failed.length === 0
      ? ["Every system ran."]
      : [
        "Could not run:",
        "",
        ...failed.map((o) =>
          `- ${o.system.label}: ${o.reason}${
            o.completedRuns > 0 ? ` (after ${o.completedRuns} completed run(s), not reported)` : ""
          }`
        )
      ]),
    ""
  ].join("\n")
}
