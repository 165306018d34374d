/**
 * The Markdown section of a W1 comparison: a table of every system's steps/s (min, median, max),
 * peak RSS and ratio to the fastest peer, the verdict on the goal, how each peer was driven and
 * which systems could not run and why.
 *
 * @since 0.1.0
 */
import { formatBytes, formatCount, formatMillis, table } from "../util.js"
import type { W1Compare, W1Outcome, W1Ran } from "./result.js"
import {
  fastestPeer,
  medianPeakRss,
  medianStepsPerCpuSec,
  medianStepsPerSec,
  ratioToFastestPeer,
  W1_RATIO_GOAL
} from "./result.js"

const ratioText = (ratio: number | undefined): string => ratio === undefined ? "-" : `${ratio.toFixed(2)}x`

const row = (result: W1Compare, outcome: W1Outcome): ReadonlyArray<string> => {
  const name = outcome.system.tiller ? `**${outcome.system.label}**` : outcome.system.label
  if (outcome.status === "failed") return [name, outcome.system.pkg, "-", "-", "-", "-", "-", "-", "-", "-", "could not run"]
  const rates = outcome.runs.map((r) => r.stepsPerSec)
  const ratio = ratioToFastestPeer(result, outcome)
  const verdict = !outcome.system.tiller || ratio === undefined
    ? "-"
    : ratio >= W1_RATIO_GOAL
    ? "met"
    : "MISSED"
  return [
    name,
    outcome.system.pkg,
    `${formatCount(Math.min(...rates))}/s`,
    `${formatCount(medianStepsPerSec(outcome))}/s`,
    `${formatCount(Math.max(...rates))}/s`,
    formatMillis(result.steps / medianStepsPerSec(outcome) * 1000),
    formatBytes(medianPeakRss(outcome)),
    ratioText(ratio),
    `${formatCount(medianStepsPerCpuSec(outcome))}/s`,
    ratioText(ratioToFastestPeer(result, outcome, medianStepsPerCpuSec)),
    verdict
  ]
}

// tiller first (memory, then SQLite), then the peers from fastest to slowest, failures last.
const ordered = (result: W1Compare): ReadonlyArray<W1Outcome> => {
  const rank = (o: W1Outcome) => o.status === "failed" ? -1 : medianStepsPerSec(o)
  const tiller = result.outcomes.filter((o) => o.system.tiller)
  const peers = result.outcomes.filter((o) => !o.system.tiller).sort((a, b) => rank(b) - rank(a))
  return [...tiller, ...peers]
}

const verdictLines = (result: W1Compare): ReadonlyArray<string> => {
  const fastest = fastestPeer(result)
  if (fastest === undefined) return ["No peer ran, so there is no ratio to report."]
  const tillers = result.outcomes.filter((o): o is W1Ran => o.system.tiller && o.status === "ran")
  return tillers.map((t) => {
    const ratio = ratioToFastestPeer(result, t)!
    return `- ${t.system.label}: ${formatCount(medianStepsPerSec(t))} steps/s, ${ratio.toFixed(2)}x the fastest peer ` +
      `(${fastest.system.label}, ${formatCount(medianStepsPerSec(fastest))} steps/s): goal >= ${W1_RATIO_GOAL}x ` +
      `${ratio >= W1_RATIO_GOAL ? "met" : "MISSED"}.`
  })
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
    `## Agent loop W1 beside peer agent loops${result.quick ? " (quick)" : ""}`,
    "",
    `One session, N = ${formatCount(result.steps)} steps: each step the model (scripted, instant) calls one trivial`,
    "`echo` tool (returns a constant string), then the model answers text: N + 1 model calls and N tool",
    "executions, counted and checked in every run. Each run is a process of its own: an untimed warm-up of",
    `${formatCount(result.warmSteps)} steps, then one timed run of N steps; ${result.runs} timed runs per system, the systems`,
    "taking turns round-robin (the first rotating each round). Setup (building the agent and the script) is",
    "untimed. Peak RSS is the process's maximum resident set (`process.resourceUsage().maxRSS`, warm-up",
    "included), the median over its runs. The ratio is the system's median steps/s over the fastest peer's;",
    `the goal is tiller >= ${W1_RATIO_GOAL}x while it writes its full event log. Every peer keeps its history`,
    "in memory only and persists nothing. Steps per CPU-second divide N by the CPU time (user + system) the",
    "process spent in the timed run: on a busy machine it moves less than the wall-clock rate, but it leaves",
    "out time spent waiting (tiller's SQLite writes run on the same thread, so they are counted).",
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
        "median time",
        "peak RSS",
        "x fastest peer",
        "steps per CPU-s",
        "x fastest (CPU)",
        "goal"
      ],
      ordered(result).map((o) => row(result, o)),
      [false, false, true, true, true, true, true, true, true, true, false]
    ),
    "",
    ...verdictLines(result),
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
