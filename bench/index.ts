/**
 * Runs every benchmark and prints the figures: `npm run bench` (full sizes) or
 * `npm run bench -- --quick` (a CI smoke run): the session log and inbox primitives, then the agent
 * loop (workload W1 beside a plain-JS floor, and the latency from `followup` to `step/start`).
 * `--only=log`, `--only=loop` or `--only=w1` runs one group (`w1`: the floor and W1 alone, for a
 * `node --cpu-prof` run of the bundle). `--write` also writes the report to
 * `bench/RESULTS.md`; nothing else in the tree is written.
 *
 * `npm run bench` bundles this file with esbuild into `node_modules/.cache/tiller-bench/` and runs
 * it with `node --expose-gc`. It does not run under tsx: tsx compiles with esbuild's `keepNames`,
 * which wraps every closure the hot path creates in an `Object.defineProperty` call (about a
 * fifth of the chunk-append time in a profile), a cost compiled tiller does not have.
 * `node --expose-gc --import tsx bench/index.ts` still works, with that overhead.
 *
 * @since 0.1.0
 */
import { execFileSync } from "node:child_process"
import { writeFileSync } from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { DateTime, Effect } from "effect"
import { injectClaimRun } from "./inbox.js"
import type { LoopThroughput, TurnLatency } from "./loop.js"
import { floor, percentile, turnLatency, w1 } from "./loop.js"
import type { ChunkMemory } from "./sessionLog.js"
import { chunkAppendRun, chunkMemory, publicAppendRun } from "./sessionLog.js"
import type { Throughput } from "./util.js"
import {
  formatBytes,
  formatCount,
  formatMicros,
  formatMillis,
  loadAverage,
  machineLine,
  repeat,
  table
} from "./util.js"

interface Sizes {
  readonly label: string
  readonly chunks: number
  readonly publicAppends: number
  readonly cycles: number
  readonly memoryChunks: number
  readonly runs: number
  /** Untimed warm-up sizes: enough operations for the JIT to settle. */
  readonly warmChunks: number
  readonly warmDurable: number
  /** W1: steps per run, timed runs, warm-up steps. */
  readonly loopSteps: number
  readonly loopRuns: number
  readonly warmLoopSteps: number
  /** Sequential single-step turns of the latency benchmark, and its warm-up turns. */
  readonly turns: number
  readonly warmTurns: number
}

const full: Sizes = {
  label: "full",
  chunks: 1_000_000,
  publicAppends: 20_000,
  cycles: 20_000,
  memoryChunks: 1_000_000,
  runs: 3,
  warmChunks: 100_000,
  warmDurable: 5_000,
  loopSteps: 1_000,
  loopRuns: 7,
  warmLoopSteps: 1_000,
  turns: 500,
  warmTurns: 100
}

const quick: Sizes = {
  label: "quick",
  chunks: 50_000,
  publicAppends: 1_000,
  cycles: 2_000,
  memoryChunks: 50_000,
  runs: 3,
  warmChunks: 50_000,
  warmDurable: 500,
  loopSteps: 200,
  loopRuns: 5,
  warmLoopSteps: 100,
  turns: 100,
  warmTurns: 50
}

const CHUNK_TARGET = 250_000
const CYCLE_TARGET = 50_000
const STEP_TARGET = 5_000

const args = new Set(process.argv.slice(2))
const sizes = args.has("--quick") ? quick : full
const writeResults = args.has("--write")

type Group = "log" | "loop" | "w1"
const groups: ReadonlyArray<Group> = ["log", "loop", "w1"]
const onlyArg = process.argv.slice(2).find((a) => a.startsWith("--only="))?.slice("--only=".length)
const only = groups.find((g) => g === onlyArg)
if (onlyArg !== undefined && only === undefined) {
  throw new Error(`--only=${onlyArg}: expected one of ${groups.join(", ")}`)
}
if (only !== undefined && writeResults) throw new Error("--write records a complete run; it cannot be combined with --only")
const runsLog = only === undefined || only === "log"
const runsW1 = only === undefined || only === "loop" || only === "w1"
const runsLatency = only === undefined || only === "loop"

const log = (line: string) => Effect.sync(() => console.error(line))

const primitives = (s: Sizes) =>
  Effect.gen(function*() {
    // Memory first, while the process holds nothing else.
    yield* log(`memory: ${formatCount(s.memoryChunks)} chunk events ...`)
    const memory = yield* chunkMemory(s.memoryChunks)

    const results: Array<Throughput> = []
    yield* log(`SessionLog chunks, 100 per transaction: ${formatCount(s.chunks)} events x ${s.runs} ...`)
    results.push(
      yield* repeat(
        {
          name: "assistant/chunk, 100 per transaction (appendDrafts, trusted) + durable",
          unit: "events",
          runs: s.runs,
          target: CHUNK_TARGET
        },
        chunkAppendRun(s.chunks, 100),
        chunkAppendRun(s.warmChunks, 100)
      )
    )
    yield* log(`SessionLog chunks, 1 per transaction: ${formatCount(s.chunks)} events x ${s.runs} ...`)
    results.push(
      yield* repeat(
        {
          name: "assistant/chunk, 1 per transaction (appendDrafts, trusted) + durable",
          unit: "events",
          runs: s.runs
        },
        chunkAppendRun(s.chunks, 1),
        chunkAppendRun(s.warmChunks, 1)
      )
    )
    yield* log(`SessionLog.append: ${formatCount(s.publicAppends)} events x ${s.runs} ...`)
    results.push(
      yield* repeat(
        {
          name: "SessionLog.append bench/tick (ignorable), 1 at a time, each durable",
          unit: "events",
          runs: s.runs,
          note: "N is smaller than for the chunk rows because every public append waits for its own durable write"
        },
        publicAppendRun(s.publicAppends),
        publicAppendRun(s.warmDurable)
      )
    )
    yield* log(`Inbox inject-then-claim: ${formatCount(s.cycles)} cycles x ${s.runs} ...`)
    results.push(
      yield* repeat(
        {
          name: "Inbox.append next-step + turn/start, claim, turn/end (1 STM tx)",
          unit: "cycles",
          runs: s.runs,
          target: CYCLE_TARGET
        },
        injectClaimRun(s.cycles),
        injectClaimRun(s.warmDurable)
      )
    )
    return { memory, results }
  })

const agentLoop = (s: Sizes) =>
  Effect.gen(function*() {
    yield* log(`W1 plain-JS floor: ${formatCount(s.loopSteps)} steps x ${s.loopRuns} ...`)
    const floorRun = yield* floor("plain JS loop over the scripted responses (floor)", s.loopSteps, s.loopRuns)
    yield* log(`W1 agent loop, ScriptedModel: ${formatCount(s.loopSteps)} steps x ${s.loopRuns} ...`)
    const scripted = yield* w1(
      "tiller Agent.layer, ScriptedModel (the W1 figure)",
      "scripted",
      s.loopSteps,
      s.loopRuns,
      s.warmLoopSteps
    )
    yield* log(`W1 agent loop, minimal Model: ${formatCount(s.loopSteps)} steps x ${s.loopRuns} ...`)
    const direct = yield* w1(
      "tiller Agent.layer, minimal Model (Stream.fromIterable)",
      "direct",
      s.loopSteps,
      s.loopRuns,
      s.warmLoopSteps
    )
    return { floor: floorRun, agents: [scripted, direct] }
  })

const latencyOf = (s: Sizes) =>
  Effect.zipRight(
    log(`followup -> step/start latency: ${formatCount(s.turns)} turns ...`),
    turnLatency(s.turns, s.warmTurns)
  )

const benchmarks = (s: Sizes): Effect.Effect<Figures, unknown> =>
  Effect.gen(function*() {
    const log = runsLog ? yield* primitives(s) : undefined
    const loop = runsW1 ? yield* agentLoop(s) : undefined
    const latency = runsLatency ? yield* latencyOf(s) : undefined
    return { primitives: log, loop, latency }
  })

const throughputTable = (results: ReadonlyArray<Throughput>): string =>
  table(
    ["benchmark", "N", "median time", "rate (median)", "per op", "best run", "runs (ms)", "target", "result"],
    results.map((r) => [
      r.name,
      `${formatCount(r.operations)} ${r.unit}`,
      formatMillis(r.medianMillis),
      `${formatCount(r.perSecond)} ${r.unit}/s`,
      formatMicros(r.perSecond),
      `${formatCount(r.operations / (Math.min(...r.runs) / 1000))}/s`,
      r.runs.map((ms) => formatCount(ms)).join(", "),
      r.target === undefined ? "-" : `>= ${formatCount(r.target)}/s`,
      r.target === undefined ? "-" : r.perSecond >= r.target ? "met" : "MISSED"
    ]),
    [false, true, true, true, true, true, true, true, false]
  )

const memoryTable = (m: ChunkMemory): string => {
  const perEvent = (bytes: number) => `${formatCount(bytes / m.events)} B/event`
  return table(
    ["session state", "RSS", "heap used"],
    [
      ["before opening (after GC)", formatBytes(m.baseline.rss), formatBytes(m.baseline.heapUsed)],
      [
        `holding ${formatCount(m.events)} chunk events, durable (after GC)`,
        formatBytes(m.holding.rss),
        formatBytes(m.holding.heapUsed)
      ],
      ["peak while appending (sampled every 10,000 events, no GC)", formatBytes(m.peakRss), "-"],
      [
        "held by the session (holding - before)",
        `${formatBytes(m.holding.rss - m.baseline.rss)} (${perEvent(m.holding.rss - m.baseline.rss)})`,
        `${formatBytes(m.holding.heapUsed - m.baseline.heapUsed)} (${
          perEvent(m.holding.heapUsed - m.baseline.heapUsed)
        })`
      ],
      ["after closing the session (after GC)", formatBytes(m.released.rss), formatBytes(m.released.heapUsed)]
    ],
    [false, true, true]
  )
}

// The commit measured, so figures from different checkouts can be told apart.
const sourceLine = (): string => {
  try {
    const git = (...args: Array<string>) => execFileSync("git", args, { encoding: "utf8", stdio: "pipe" }).trim()
    const dirty = git("status", "--porcelain", "--", "src").length > 0
    return `source: ${git("rev-parse", "--short", "HEAD")}${dirty ? " with uncommitted changes in src/" : ""}`
  } catch {
    return "source: unknown (not a git checkout)"
  }
}

const loopTable = (floorRun: LoopThroughput, agents: ReadonlyArray<LoopThroughput>): string => {
  const row = (r: LoopThroughput, withLog: boolean) => [
    r.name,
    `${formatCount(r.steps)} steps`,
    formatMillis(r.medianMillis),
    `${formatCount(r.stepsPerSecond)}/s`,
    formatMicros(r.stepsPerSecond),
    withLog ? oneDecimal(r.events / r.steps) : "-",
    withLog ? formatMicros(r.events / (r.medianMillis / 1000)) : "-",
    `${timesFloor(floorRun.stepsPerSecond / r.stepsPerSecond)}x`,
    `${formatCount(r.steps / (Math.min(...r.runs) / 1000))}/s`,
    r.runs.map((ms) => ms >= 10 ? formatCount(ms) : ms.toFixed(2)).join(", "),
    withLog ? `${formatBytes(r.peakRss)} (+${formatBytes(r.medianGrowth)})` : "-",
    withLog ? `>= ${formatCount(STEP_TARGET)}/s` : "-",
    withLog ? (r.stepsPerSecond >= STEP_TARGET ? "met" : "MISSED") : "-"
  ]
  return table(
    [
      "W1",
      "N",
      "median time",
      "steps/s (median)",
      "per step",
      "events/step",
      "per event",
      "x floor time",
      "best run",
      "runs (ms)",
      "peak RSS (+ growth)",
      "target",
      "result"
    ],
    [row(floorRun, false), ...agents.map((r) => row(r, true))],
    [false, true, true, true, true, true, true, true, true, true, true, true, false]
  )
}

const latencyTable = (latency: TurnLatency): string => {
  const micros = (ms: number) => `${formatCount(ms * 1000)} µs`
  const row = (name: string, values: ReadonlyArray<number>) => [
    name,
    micros(percentile(values, 0.5)),
    micros(percentile(values, 0.99)),
    micros(Math.max(...values))
  ]
  return table(
    ["interval, per turn", "p50", "p99", "max"],
    [
      row("followup returned -> step/start observed", latency.afterReturn),
      row("followup called -> step/start observed", latency.afterCall),
      row("followup called -> returned (commit + durable ack)", latency.followup),
      row("followup called -> whenIdle returned (whole turn)", latency.turn)
    ],
    [false, true, true, true]
  )
}

const oneDecimal = (n: number): string => n.toFixed(1)

const timesFloor = (ratio: number): string => ratio >= 100 ? formatCount(ratio) : oneDecimal(ratio)

interface Figures {
  readonly primitives: { readonly memory: ChunkMemory; readonly results: ReadonlyArray<Throughput> } | undefined
  readonly loop: { readonly floor: LoopThroughput; readonly agents: ReadonlyArray<LoopThroughput> } | undefined
  readonly latency: TurnLatency | undefined
}

const primitivesReport = (s: Sizes, memory: ChunkMemory, results: ReadonlyArray<Throughput>): ReadonlyArray<string> => [
  "## Throughput",
  "",
  `Memory store. Each run opens a fresh session; its time includes waiting until the last event is`,
  `durable. Median of ${s.runs} runs after an untimed warm-up run; "per op" is the median time / N;`,
  `the result compares the median rate with the target.`,
  "",
  throughputTable(results),
  ...results.flatMap((r) => r.note === undefined ? [] : ["", `- ${r.name}: ${r.note}.`]),
  "",
  "## Memory",
  "",
  `One session holding ${formatCount(memory.events)} \`assistant/chunk\` text-delta events, appended 100 per transaction`,
  `(in ${formatMillis(memory.appendMillis)}) and durable in the memory store, which shares the frozen events with the log.`,
  "",
  memoryTable(memory),
  ""
]

const loopReport = (floorRun: LoopThroughput, agents: ReadonlyArray<LoopThroughput>): ReadonlyArray<string> => [
  "## Agent loop: workload W1",
  "",
  `One session on a fresh memory store per run, ${formatCount(floorRun.steps)} steps: each an instant scripted model response`,
  "calling one trivial `echo` tool (exclusive, returns a constant string), then a final text answer. Opening",
  "the agent is untimed; one `followup`, `whenIdle` and `SessionLog.flush` (every event durable) are timed.",
  `Median of ${floorRun.runs.length} runs after an untimed warm-up run. The model is \`ScriptedModel\`, or the smallest`,
  "adapter the `Model` API allows (`Stream.fromIterable` of the same chunks, prebuilt). The floor runs the same",
  "steps as a bare loop over an array of responses calling the tool function directly and pushing to a",
  "history array (each floor run repeats it for 20 ms). Peak RSS is sampled every 64 tool calls and at the",
  "end (no GC); the growth is the median of each run's peak over its baseline (after GC, before opening).",
  "",
  loopTable(floorRun, agents),
  ""
]

const latencyReport = (latency: TurnLatency): ReadonlyArray<string> => [
  "## Latency from followup to step/start",
  "",
  `${formatCount(latency.turns)} sequential single-step turns (a \`followup\`, then \`whenIdle\`; the model answers text at once)`,
  "on a fresh agent after a warm-up agent. A fiber reading `SessionLog.stream(0)` records when each turn's",
  "`step/start` arrives; `followup` returns only once its delivery is durable, so the turn can start first",
  "(a negative interval).",
  "",
  latencyTable(latency),
  ""
]

const report = (s: Sizes, when: string, figures: Figures): string =>
  [
    `# tiller benchmarks (${s.label}), ${when}`,
    "",
    `machine: ${machineLine()}`,
    `${sourceLine()}; run ${
      import.meta.url.endsWith(".ts") ? "from TypeScript under tsx (keepNames overhead included)" : "as an esbuild bundle"
    }`,
    loadReport(),
    "",
    ...(figures.primitives === undefined
      ? []
      : primitivesReport(s, figures.primitives.memory, figures.primitives.results)),
    ...(figures.loop === undefined ? [] : loopReport(figures.loop.floor, figures.loop.agents)),
    ...(figures.latency === undefined ? [] : latencyReport(figures.latency))
  ].join("\n")

const loadAtStart = loadAverage()

const loadReport = (): string => {
  const cpus = os.cpus().length
  const atEnd = loadAverage()
  const busy = Math.max(loadAtStart, atEnd) > cpus / 2
  return `load average (1 min) on ${cpus} CPUs: ${loadAtStart.toFixed(2)} at start, ${atEnd.toFixed(2)} at end` +
    (busy ? " - other processes competed for the CPUs, so the figures are pessimistic" : "")
}

const main = Effect.gen(function*() {
  const figures = yield* benchmarks(sizes)
  const when = DateTime.formatIso(yield* DateTime.now)
  const text = report(sizes, when, figures)
  yield* Effect.sync(() => {
    console.log(text)
    // Relative to the package root (npm runs scripts there); the bundle lives elsewhere.
    if (writeResults) writeFileSync(path.join(process.cwd(), "bench", "RESULTS.md"), text)
  })
  const primitivesMet = (figures.primitives?.results ?? []).every((r) => r.target === undefined || r.perSecond >= r.target)
  return primitivesMet && (figures.loop === undefined || figures.loop.agents.every((r) => r.stepsPerSecond >= STEP_TARGET))
})

Effect.runPromise(main).then(
  (allMet) => {
    if (!allMet) console.error("some targets were missed (see the result column)")
  },
  (error: unknown) => {
    console.error(error)
    process.exitCode = 1
  }
)
