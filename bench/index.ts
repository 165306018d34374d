/**
 * Runs every benchmark and prints the figures: `npm run bench` (full sizes) or
 * `npm run bench -- --quick` (a CI smoke run). `--write` also writes the report to
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
}

const full: Sizes = {
  label: "full",
  chunks: 1_000_000,
  publicAppends: 20_000,
  cycles: 20_000,
  memoryChunks: 1_000_000,
  runs: 3,
  warmChunks: 100_000,
  warmDurable: 5_000
}

const quick: Sizes = {
  label: "quick",
  chunks: 50_000,
  publicAppends: 1_000,
  cycles: 2_000,
  memoryChunks: 50_000,
  runs: 3,
  warmChunks: 50_000,
  warmDurable: 500
}

const CHUNK_TARGET = 250_000
const CYCLE_TARGET = 50_000

const args = new Set(process.argv.slice(2))
const sizes = args.has("--quick") ? quick : full
const writeResults = args.has("--write")

const benchmarks = (s: Sizes) =>
  Effect.gen(function*() {
    const log = (line: string) => Effect.sync(() => console.error(line))
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

const report = (s: Sizes, when: string, memory: ChunkMemory, results: ReadonlyArray<Throughput>): string =>
  [
    `# tiller benchmarks (${s.label}), ${when}`,
    "",
    `machine: ${machineLine()}`,
    `${sourceLine()}; run ${
      import.meta.url.endsWith(".ts") ? "from TypeScript under tsx (keepNames overhead included)" : "as an esbuild bundle"
    }`,
    loadReport(),
    "",
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
  const { memory, results } = yield* benchmarks(sizes)
  const when = DateTime.formatIso(yield* DateTime.now)
  const text = report(sizes, when, memory, results)
  yield* Effect.sync(() => {
    console.log(text)
    // Relative to the package root (npm runs scripts there); the bundle lives elsewhere.
    if (writeResults) writeFileSync(path.join(process.cwd(), "bench", "RESULTS.md"), text)
  })
  return results.every((r) => r.target === undefined || r.perSecond >= r.target)
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
