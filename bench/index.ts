/**
 * Runs every benchmark and prints the figures: `npm run bench` (full sizes) or
 * `npm run bench -- --quick` (a CI smoke run): the session log and inbox primitives, the agent
 * loop (workload W1 beside a plain-JS floor, and the latency from `followup` to `step/start`),
 * storage on SQLite beside raw better-sqlite3 (W2 ingest, W3 acknowledged injects, W4 resume) and
 * the footprint of many sessions (W5), then W1 side by side with peer agent loops, like-for-like
 * (`bench/w1/`, one child process per run; the peers install into `bench/node_modules` on first use).
 * `--only=log`, `--only=loop`, `--only=w1`, `--only=storage`, `--only=postgres` (W2, W3 and W4 on
 * PostgreSQL beside raw `pg`, `bench/postgres.ts`), `--only=footprint`, `--only=compaction`,
 * `--only=cluster` (sessions on a cluster: failover, throughput, RPC/HTTP overhead, `bench/cluster.ts`; run only on request),
 * `--only=caching` (prompt caching through each adapter, `bench/caching.ts`) or `--only=peers` runs one group; `--only=w1` (the floor and W1), `--only=w2`, `--only=w3` and `--only=w4` run one
 * workload alone, for a `node --cpu-prof` run of the bundle (`node bench/cpuprofile.mjs` summarises
 * the profile). `--write` also writes the report to
 * `bench/RESULTS.md` and the charts to `bench/w4.svg` and `bench/w1.svg`; nothing else in the
 * tree is written (temporary databases go to the OS temp directory and are removed).
 *
 * `npm run bench` bundles this file with esbuild into `node_modules/.cache/tiller-bench/` and runs
 * it with `node --expose-gc`. It does not run under tsx: tsx compiles with esbuild's `keepNames`,
 * which wraps every closure the hot path creates in an `Object.defineProperty` call (about a
 * fifth of the chunk-append time in a profile), a cost compiled tiller does not have.
 * `node --expose-gc --import tsx bench/index.ts` still works, with that overhead.
 *
 * @since 0.1.0
 */
import { DateTime, Effect } from "effect"
import { execFileSync } from "node:child_process"
import { writeFileSync } from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import type { CachingFigures } from "./caching.js"
import { caching, cachingReport } from "./caching.js"
import type { CompactionRun, StepCost } from "./compaction.js"
import { compactionRun, stepCost, stepRatio } from "./compaction.js"
import type { IdleFigures, RunningFigures } from "./footprint.js"
import { idle, running } from "./footprint.js"
import { injectClaimRun } from "./inbox.js"
import type { LoopThroughput, TurnLatency } from "./loop.js"
import { floor, percentile, turnLatency, w1 } from "./loop.js"
import type { PgFigures } from "./postgres.js"
import { postgres } from "./postgres.js"
import type { ChunkMemory } from "./sessionLog.js"
import { chunkAppendRun, chunkMemory, publicAppendRun } from "./sessionLog.js"
import type { IngestFigures, InjectFigures, InjectRun, ResumeFigures } from "./storage.js"
import { ingest, injects, resume } from "./storage.js"
import type { Synchronous } from "./storage.js"
import type { Spread, Throughput } from "./util.js"
import {
  formatBytes,
  formatCount,
  formatMicros,
  formatMillis,
  formatRatio,
  formatSpread,
  loadAverage,
  logLogChartSvg,
  machineLine,
  median,
  repeat,
  spreadOf,
  table
} from "./util.js"
import type { W1Compare } from "./w1/compare.js"
import { renderW1Compare, runW1Compare, w1Svg } from "./w1/compare.js"

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
  /** W1: steps per run, timed runs, warm-up steps and untimed warm-up runs of that many steps. */
  readonly loopSteps: number
  readonly loopRuns: number
  readonly warmLoopSteps: number
  readonly warmLoopRuns: number
  /** Sequential single-step turns of the latency benchmark, and its warm-up turns. */
  readonly turns: number
  readonly warmTurns: number
  /** Runs of each storage and footprint benchmark (after its untimed warm-up). */
  readonly storageRuns: number
  /** W2: chunk events per run. */
  readonly ingestEvents: number
  /** W3: concurrent callers, sessions they share, injects per caller. */
  readonly injectCallers: number
  readonly injectSessions: number
  readonly injectsPerCaller: number
  /** W3: untimed warm-up runs of each side (W3 runs are short: one leaves the JIT far from settled). */
  readonly injectWarmRuns: number
  /** W3: timed runs of each side (each well under a second; its figures swing run to run). */
  readonly injectRuns: number
  /** W4: session sizes in events (multiples of 100), smallest first. */
  readonly resumeSizes: ReadonlyArray<number>
  /** W4: timed runs of each side per size, in the order of `resumeSizes` (the largest size's runs take seconds). */
  readonly resumeRuns: ReadonlyArray<number>
  /** W4: untimed warm-up runs of each side on the smallest size (the first size runs on a cold JIT). */
  readonly resumeWarmRuns: number
  /** W5: idle sessions held open; sessions running turns at once, and turns each. */
  readonly idleSessions: number
  readonly runningSessions: number
  readonly runningTurns: number
  /** Compaction: events of the session compacted once (prune, then summary). */
  readonly compactionEvents: number
  /** Compaction: events of the compacted long session, timed turns of `compactedSteps` steps on it and on a fresh one. */
  readonly compactedEvents: number
  readonly compactedSteps: number
  readonly compactedRuns: number
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
  warmLoopRuns: 3,
  turns: 500,
  warmTurns: 100,
  storageRuns: 3,
  ingestEvents: 200_000,
  injectCallers: 100,
  injectSessions: 10,
  injectsPerCaller: 50,
  injectWarmRuns: 4,
  injectRuns: 7,
  resumeSizes: [10_000, 100_000, 1_000_000],
  resumeRuns: [21, 9, 5],
  resumeWarmRuns: 4,
  idleSessions: 10_000,
  runningSessions: 1_000,
  runningTurns: 3,
  compactionEvents: 100_000,
  compactedEvents: 1_000_000,
  compactedSteps: 1_000,
  compactedRuns: 3
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
  warmLoopRuns: 1,
  turns: 100,
  warmTurns: 50,
  storageRuns: 3,
  ingestEvents: 20_000,
  injectCallers: 100,
  injectSessions: 10,
  injectsPerCaller: 3,
  injectWarmRuns: 1,
  injectRuns: 3,
  resumeSizes: [1_000, 10_000],
  resumeRuns: [3, 3],
  resumeWarmRuns: 1,
  idleSessions: 200,
  runningSessions: 50,
  runningTurns: 2,
  compactionEvents: 10_000,
  compactedEvents: 100_000,
  compactedSteps: 200,
  compactedRuns: 2
}

const CHUNK_TARGET = 250_000
const CYCLE_TARGET = 50_000
const STEP_TARGET = 5_000
/** W2: tiller's ingest rate over the raw rate. */
const INGEST_RATIO_TARGET = 0.3
/** W3: tiller's acks/s over the raw acks/s, and tiller's p99 acknowledgement latency. */
const INJECT_RATIO_TARGET = 5
const INJECT_P99_TARGET_MS = 10
/** W4: tiller's resume time over the raw read time, at every size. */
const RESUME_RATIO_TARGET = 2
/** W4 linearity: the largest size's time per 10^4 events within this factor of the smallest size's. */
const RESUME_LINEARITY_TARGET = 1.5
/** Compaction: a step on a compacted long session within this factor of a step on a fresh one. */
const COMPACTED_STEP_RATIO_TARGET = 2

const args = new Set(process.argv.slice(2))
const sizes = args.has("--quick") ? quick : full

/** W4: the timed runs of a size (`resumeRuns`, in the order of `resumeSizes`; the storage runs otherwise). */
const resumeRunsOf = (s: Sizes) => (events: number): number =>
  s.resumeRuns[s.resumeSizes.indexOf(events)] ?? s.storageRuns
const writeResults = args.has("--write")

type Group =
  | "log"
  | "loop"
  | "w1"
  | "storage"
  | "w2"
  | "w3"
  | "w4"
  | "postgres"
  | "footprint"
  | "compaction"
  | "caching"
  | "peers"
  | "cluster"
const groups: ReadonlyArray<Group> = [
  "log",
  "loop",
  "w1",
  "storage",
  "w2",
  "w3",
  "w4",
  "postgres",
  "footprint",
  "compaction",
  "caching",
  "peers",
  "cluster"
]
const onlyArg = process.argv.slice(2).find((a) => a.startsWith("--only="))?.slice("--only=".length)
const only = groups.find((g) => g === onlyArg)
if (onlyArg !== undefined && only === undefined) {
  throw new Error(`--only=${onlyArg}: expected one of ${groups.join(", ")}`)
}
// The cluster benchmarks (`bench/cluster.ts`) start PostgreSQL and runner processes: run alone.
if (only === "cluster") {
  await (await import("./cluster.js")).main()
  process.exit(0)
}
if (only !== undefined && writeResults) {
  throw new Error("--write records a complete run; it cannot be combined with --only")
}
const runsLog = only === undefined || only === "log"
const runsW1 = only === undefined || only === "loop" || only === "w1"
const runsLatency = only === undefined || only === "loop"
const runsIngest = only === undefined || only === "storage" || only === "w2"
const runsInjects = only === undefined || only === "storage" || only === "w3"
const runsResume = only === undefined || only === "storage" || only === "w4"
const runsPostgres = only === undefined || only === "postgres"
const runsFootprint = only === undefined || only === "footprint"
const runsCompaction = only === undefined || only === "compaction"
const runsCaching = only === undefined || only === "caching"
const runsPeers = only === undefined || only === "peers"

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
      s.warmLoopSteps,
      s.warmLoopRuns
    )
    yield* log(`W1 agent loop, minimal Model: ${formatCount(s.loopSteps)} steps x ${s.loopRuns} ...`)
    const direct = yield* w1(
      "tiller Agent.layer, minimal Model (Stream.fromIterable)",
      "direct",
      s.loopSteps,
      s.loopRuns,
      s.warmLoopSteps,
      s.warmLoopRuns
    )
    return { floor: floorRun, agents: [scripted, direct] }
  })

const latencyOf = (s: Sizes) =>
  Effect.zipRight(
    log(`followup -> step/start latency: ${formatCount(s.turns)} turns ...`),
    turnLatency(s.turns, s.warmTurns)
  )

const storage = (s: Sizes) =>
  Effect.gen(function*() {
    const ingestFigures = runsIngest
      ? yield* Effect.zipRight(
        log(`W2 ingest on SQLite: ${formatCount(s.ingestEvents)} events x ${s.storageRuns} (tiller and raw) ...`),
        ingest(s.ingestEvents, s.storageRuns)
      )
      : undefined
    const total = s.injectCallers * s.injectsPerCaller
    const w3 = (synchronous: Synchronous) =>
      Effect.zipRight(
        log(
          `W3 injects on SQLite (synchronous = ${synchronous}): ${s.injectCallers} callers, ${s.injectSessions} sessions, ${
            formatCount(total)
          } acks x ${s.injectRuns} ...`
        ),
        injects(s.injectCallers, s.injectSessions, s.injectsPerCaller, s.injectRuns, s.injectWarmRuns, synchronous)
      )
    const injectFigures = runsInjects ? yield* w3("NORMAL") : undefined
    const injectFullFigures = runsInjects ? yield* w3("FULL") : undefined
    const resumeFigures = runsResume
      ? yield* resume(
        s.resumeSizes,
        resumeRunsOf(s),
        s.resumeWarmRuns,
        (events) => log(`W4 resume on SQLite: ${formatCount(events)} events x ${resumeRunsOf(s)(events)} ...`)
      )
      : undefined
    return { ingest: ingestFigures, injects: injectFigures, injectsFull: injectFullFigures, resume: resumeFigures }
  })

const footprint = (s: Sizes) =>
  Effect.gen(function*() {
    yield* log(`W5 idle sessions on SQLite: ${formatCount(s.idleSessions)} x ${s.storageRuns} ...`)
    const idleFigures = yield* idle(s.idleSessions, s.storageRuns)
    yield* log(
      `W5 running sessions on SQLite: ${
        formatCount(s.runningSessions)
      } x ${s.runningTurns} turns x ${s.storageRuns} ...`
    )
    const runningFigures = yield* running(s.runningSessions, s.runningTurns, s.storageRuns)
    return { idle: idleFigures, running: runningFigures }
  })

const benchmarks = (s: Sizes): Effect.Effect<Figures, unknown> =>
  Effect.gen(function*() {
    const log = runsLog ? yield* primitives(s) : undefined
    const loop = runsW1 ? yield* agentLoop(s) : undefined
    const latency = runsLatency ? yield* latencyOf(s) : undefined
    const storageFigures = runsIngest || runsInjects || runsResume ? yield* storage(s) : undefined
    const postgresFigures = runsPostgres
      ? yield* postgres({
        ingestEvents: s.label === "quick" ? 10_000 : 100_000,
        callers: s.injectCallers,
        sessions: s.injectSessions,
        perCaller: s.injectsPerCaller,
        runs: s.label === "quick" ? 1 : 3,
        resumeSizes: s.label === "quick" ? [1_000, 10_000] : [10_000, 100_000, 1_000_000],
        resumeRuns: s.label === "quick" ? [1, 1] : [7, 5, 3]
      }, (line) => Effect.sync(() => console.error(line)))
      : undefined
    const footprintFigures = runsFootprint ? yield* footprint(s) : undefined
    const compactionFigures = runsCompaction ? yield* compaction(s) : undefined
    if (runsCaching) {
      yield* Effect.sync(() => console.error("prompt caching: a 20-step tool session through each adapter ..."))
    }
    const cachingFigures = runsCaching ? yield* caching() : undefined
    // W1 side by side with the peers: one child process per run, after tiller's own groups.
    const peers = runsPeers
      ? yield* Effect.promise(() => runW1Compare({ quick: s.label === "quick", log: (line) => console.error(line) }))
      : undefined
    return {
      primitives: log,
      loop,
      latency,
      storage: storageFigures,
      postgres: postgresFigures,
      footprint: footprintFigures,
      compaction: compactionFigures,
      caching: cachingFigures,
      peers
    }
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

interface StorageFigures {
  readonly ingest: IngestFigures | undefined
  /** W3 at the store's default, `synchronous = NORMAL`: the figure the targets are read from. */
  readonly injects: InjectFigures | undefined
  /** W3 again with `synchronous = FULL` on both sides (every commit syncs the WAL to disk). */
  readonly injectsFull: InjectFigures | undefined
  readonly resume: ResumeFigures | undefined
}

interface FootprintFigures {
  readonly idle: IdleFigures
  readonly running: RunningFigures
}

interface Figures {
  readonly primitives: { readonly memory: ChunkMemory; readonly results: ReadonlyArray<Throughput> } | undefined
  readonly loop: { readonly floor: LoopThroughput; readonly agents: ReadonlyArray<LoopThroughput> } | undefined
  readonly latency: TurnLatency | undefined
  readonly storage: StorageFigures | undefined
  readonly postgres: PgFigures | undefined
  readonly footprint: FootprintFigures | undefined
  readonly compaction: CompactionFigures | undefined
  readonly caching: ReadonlyArray<CachingFigures> | undefined
  readonly peers: W1Compare | undefined
}

interface CompactionFigures {
  readonly prune: CompactionRun
  readonly summary: CompactionRun
  readonly steps: StepCost
}

const compaction = (s: Sizes): Effect.Effect<CompactionFigures, unknown> =>
  Effect.gen(function*() {
    yield* log(`compaction: prune a session of ${formatCount(s.compactionEvents)} events ...`)
    const prune = yield* compactionRun(s.compactionEvents, "prune")
    yield* log(`compaction: summarise a session of ${formatCount(s.compactionEvents)} events ...`)
    const summary = yield* compactionRun(s.compactionEvents, "summary")
    yield* log(
      `compaction: steps on a compacted session of ${formatCount(s.compactedEvents)} events and on fresh ones ...`
    )
    const steps = yield* stepCost(s.compactedEvents, {
      window: 50_000,
      steps: s.compactedSteps,
      runs: s.compactedRuns,
      deltas: 50
    })
    return { prune, summary, steps }
  })

const compactionReport = (f: CompactionFigures): ReadonlyArray<string> => {
  const size = (h: CompactionRun["before"]) =>
    `${formatCount(h.messages)} messages, ${formatCount(h.characters)} chars, ${formatCount(h.tokens)} tokens`
  const ratio = stepRatio(f.steps)
  const perStep = (runs: ReadonlyArray<number>) => `${formatCount((median(runs) * 1000) / f.steps.steps)} µs`
  return [
    "## Compaction",
    "",
    "Memory store. One manual compaction (`Compaction.compact`, then `SessionLog.flush`) of a session built by one",
    "turn of read steps (each an instant model response calling a `read` tool that returns 400 characters), far",
    "from its window so nothing was compacted before. Prune: summaries off, old tool results become placeholders.",
    "Summary: the range before the recent tail becomes one summary, written by a model that answers at once (the",
    "time is tiller's: choosing the range, writing the transcript, the bracket). One run each (building the",
    "session is the cost; it is untimed). History: the derived history (`SessionLog.messages`) and the budget.",
    "",
    table(
      ["compaction", "session", "time", "events appended", "history before", "history after"],
      [f.prune, f.summary].map((r, i) => [
        i === 0 ? "prune" : "summary (instant model)",
        `${formatCount(r.events)} events`,
        formatMillis(r.millis),
        formatCount(r.appended),
        size(r.before),
        size(r.after)
      ]),
      [false, true, true, true, false, false]
    ),
    "",
    `Time per step of the loop on a long compacted session beside a fresh one: a session of ${
      formatCount(f.steps.bigEvents)
    } events`,
    `(built in ${
      formatMillis(f.steps.buildMillis)
    } by read steps that also stream 50 text deltas each, on a 50,000-token window,`,
    `compacting as it went: ${formatCount(f.steps.compactions)} compactions, ${
      formatCount(f.steps.surface)
    } nodes on its surface), then`,
    `${f.steps.fresh.length} timed turns of ${
      formatCount(f.steps.steps)
    } steps on it, each beside the same turn on a fresh session with the same`,
    "options (both compact as their windows fill). The time covers the whole loop: building each request, the model's",
    "stream, the tool, compaction and durability.",
    "",
    table(
      ["session", "median per step", "runs (ms)", "x fresh", "target", "result"],
      [
        ["fresh", perStep(f.steps.fresh), f.steps.fresh.map((ms) => formatCount(ms)).join(", "), "1.0x", "-", "-"],
        [
          `compacted, ${formatCount(f.steps.bigEvents)} events`,
          perStep(f.steps.compacted),
          f.steps.compacted.map((ms) => formatCount(ms)).join(", "),
          `${ratio.toFixed(2)}x`,
          `<= ${COMPACTED_STEP_RATIO_TARGET}x`,
          ratio <= COMPACTED_STEP_RATIO_TARGET ? "met" : "MISSED"
        ]
      ],
      [false, true, true, true, true, false]
    ),
    ""
  ]
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
  `One session holding ${
    formatCount(memory.events)
  } \`assistant/chunk\` text-delta events, appended 100 per transaction`,
  `(in ${
    formatMillis(memory.appendMillis)
  }) and durable in the memory store, which shares the frozen events with the log.`,
  "",
  memoryTable(memory),
  ""
]

const loopReport = (floorRun: LoopThroughput, agents: ReadonlyArray<LoopThroughput>): ReadonlyArray<string> => [
  "## Agent loop: workload W1",
  "",
  `One session on a fresh memory store per run, ${
    formatCount(floorRun.steps)
  } steps: each an instant scripted model response`,
  "calling one trivial `echo` tool (exclusive, returns a constant string), then a final text answer. Opening",
  "the agent is untimed; one `followup`, `whenIdle` and `SessionLog.flush` (every event durable) are timed.",
  `Median of ${floorRun.runs.length} runs after ${
    agents[0]?.cold !== undefined
      ? `${agents[0].cold.warmRuns} untimed warm-up run(s) of ${
        formatCount(agents[0].cold.steps)
      } steps (the first, cold, below the table)`
      : "an untimed warm-up run"
  }. The model is \`ScriptedModel\`, or the smallest`,
  "adapter the `Model` API allows (`Stream.fromIterable` of the same chunks, prebuilt). The loop reads a",
  "`ScriptedModel` response as one batch without running it as a Stream; the second row pays for Effect's",
  "Stream machinery on every response, as any other `Model` does. The floor runs the same",
  "steps as a bare loop over an array of responses calling the tool function directly and pushing to a",
  "history array (each floor run repeats it for 20 ms). Peak RSS is sampled every 64 tool calls and at the",
  "end (no GC); the growth is the median of each run's peak over its RSS before opening (no forced GC).",
  "",
  loopTable(floorRun, agents),
  "",
  ...agents.flatMap((r) =>
    r.cold === undefined
      ? []
      : [
        `- ${r.name}: first warm-up run (cold JIT, untimed) ${formatCount(r.cold.steps)} steps in ${
          formatCount(r.cold.millis)
        } ms, ${formatCount(r.cold.steps / (r.cold.millis / 1000))} steps/s.`
      ]
  ),
  ""
]

const latencyReport = (latency: TurnLatency): ReadonlyArray<string> => [
  "## Latency from followup to step/start",
  "",
  `${
    formatCount(latency.turns)
  } sequential single-step turns (a \`followup\`, then \`whenIdle\`; the model answers text at once)`,
  "on a fresh agent after a warm-up agent. A fiber reading `SessionLog.stream(0)` records when each turn's",
  "`step/start` arrives; `followup` returns only once its delivery is durable, so the turn can start first",
  "(a negative interval).",
  "",
  latencyTable(latency),
  ""
]

const verdict = (met: boolean): string => met ? "MET" : "MISSED"

const rateOf = (operations: number, millis: number): number => operations / (millis / 1000)

const msSpread = (spread: Spread): string => formatSpread(spread, (ms) => formatCount(ms))

const rateSpread = (spread: Spread, unit: string): string => `${formatSpread(spread, formatCount)} ${unit}/s`

const latencySpread = (spread: Spread): string =>
  formatSpread(spread, (ms) => ms >= 10 ? `${formatCount(ms)} ms` : `${ms.toFixed(2)} ms`)

const ratioSpread = (spread: Spread): string => formatSpread(spread, formatRatio)

// Per run (runs are paired by index): tiller's rate over the raw rate, i.e. raw time / tiller time.
const pairedRatios = (tiller: ReadonlyArray<number>, raw: ReadonlyArray<number>): Array<number> =>
  tiller.map((ms, i) => raw[i]! / ms)

const ingestRatio = (f: IngestFigures): Spread => spreadOf(pairedRatios(f.tillerMillis, f.rawMillis))

const ingestMet = (f: IngestFigures): boolean => ingestRatio(f).median >= INGEST_RATIO_TARGET

const ingestTable = (f: IngestFigures): string => {
  const ratio = ingestRatio(f)
  const row = (name: string, runs: ReadonlyArray<number>) => {
    const rates = spreadOf(runs.map((ms) => rateOf(f.events, ms)))
    return [
      name,
      `${formatCount(f.events)} events`,
      runs.map((ms) => formatCount(ms)).join(", "),
      rateSpread(rates, "events"),
      formatMicros(rates.median),
      "-",
      "-"
    ]
  }
  return table(
    ["W2 durable ingest", "N", "runs (ms)", "rate: median (min-max)", "per event", "target", "result"],
    [
      row(`tiller: assistant/chunk, ${f.perTransaction} per STM transaction, until durable`, f.tillerMillis),
      row(
        `raw better-sqlite3: JSON.stringify + ${formatCount(f.rawRowsPerTransaction)}-row INSERT per transaction`,
        f.rawMillis
      ),
      [
        "tiller rate / raw rate (per run)",
        "",
        "",
        ratioSpread(ratio),
        "",
        `>= ${formatRatio(INGEST_RATIO_TARGET)}`,
        verdict(ingestMet(f))
      ]
    ],
    [false, true, true, true, true, true, false]
  )
}

interface InjectStats {
  readonly rate: Spread
  readonly p50: Spread
  readonly p99: Spread
}

const injectStats = (f: InjectFigures, runs: ReadonlyArray<InjectRun>): InjectStats => ({
  rate: spreadOf(runs.map((r) => rateOf(f.injects, r.millis))),
  p50: spreadOf(runs.map((r) => percentile(r.latencies, 0.5))),
  p99: spreadOf(runs.map((r) => percentile(r.latencies, 0.99)))
})

const injectRatio = (f: InjectFigures): Spread =>
  spreadOf(pairedRatios(f.tiller.map((r) => r.millis), f.raw.map((r) => r.millis)))

// What the fastest possible group commit of the same rows gains over raw autocommit in this run.
const floorRatio = (f: InjectFigures): number =>
  spreadOf(f.raw.map((r) => r.millis)).median / spreadOf(f.floor.map((r) => r.millis)).median

// What acknowledging the same callers through Effect fibers, with nothing stored, gains over raw autocommit in this run.
const effectFloorRatio = (f: InjectFigures): number =>
  spreadOf(f.raw.map((r) => r.millis)).median / spreadOf(f.effectFloor.map((r) => r.millis)).median

const injectRatioMet = (f: InjectFigures): boolean => injectRatio(f).median >= INJECT_RATIO_TARGET

const injectLatencyMet = (f: InjectFigures): boolean => injectStats(f, f.tiller).p99.median <= INJECT_P99_TARGET_MS

const injectTable = (f: InjectFigures): string => {
  const row = (name: string, runs: ReadonlyArray<InjectRun>) => {
    const stats = injectStats(f, runs)
    return [
      name,
      runs.map((r) => formatCount(r.millis)).join(", "),
      rateSpread(stats.rate, "acks"),
      latencySpread(stats.p50),
      latencySpread(stats.p99),
      "-",
      "-"
    ]
  }
  const tiller = injectStats(f, f.tiller)
  return table(
    [
      `W3 acknowledged injects, synchronous = ${f.synchronous}`,
      "runs (ms)",
      "acks/s: median (min-max)",
      "p50 latency",
      "p99 latency",
      "target",
      "result"
    ],
    [
      row("tiller: Driver.inject, returns once durable", f.tiller),
      row("raw better-sqlite3: one single-row autocommit INSERT per ack", f.raw),
      row("tiller, first warm-up run (cold JIT, untimed)", [f.coldTiller]),
      row("raw, first warm-up run (cold JIT, untimed)", [f.coldRaw]),
      row("floor: group commit in plain JavaScript (Promise callers, no Effect, no log)", f.floor),
      ["floor acks/s / raw acks/s (medians)", "", formatRatio(floorRatio(f)), "", "", "-", "-"],
      row("Effect floor: a writer fiber per session resumes the callers' fibers (nothing stored)", f.effectFloor),
      ["Effect floor acks/s / raw acks/s (medians)", "", formatRatio(effectFloorRatio(f)), "", "", "-", "-"],
      [
        "tiller acks/s / raw acks/s (per run)",
        "",
        ratioSpread(injectRatio(f)),
        "",
        "",
        `>= ${formatRatio(INJECT_RATIO_TARGET)}`,
        verdict(injectRatioMet(f))
      ],
      [
        "tiller p99 latency",
        "",
        "",
        "",
        latencySpread(tiller.p99),
        `<= ${INJECT_P99_TARGET_MS} ms`,
        verdict(injectLatencyMet(f))
      ]
    ],
    [false, true, true, true, true, true, false]
  )
}

const per10k = (events: number, ms: number): number => ms / (events / 10_000)

const resumeRatio = (size: ResumeFigures["sizes"][number]): Spread =>
  spreadOf(size.tillerMillis.map((ms, i) => ms / size.rawMillis[i]!))

// The largest size's median time per 10^4 events over the smallest size's: tiller's, or the raw read's.
const resumeGrowth = (f: ResumeFigures, side: "tillerMillis" | "rawMillis" = "tillerMillis"): number => {
  const first = f.sizes[0]!
  const last = f.sizes[f.sizes.length - 1]!
  return per10k(last.events, spreadOf(last[side]).median) / per10k(first.events, spreadOf(first[side]).median)
}

const resumeRatioMet = (f: ResumeFigures): boolean =>
  f.sizes.every((size) => resumeRatio(size).median <= RESUME_RATIO_TARGET)

const resumeLinearMet = (f: ResumeFigures): boolean => resumeGrowth(f) <= RESUME_LINEARITY_TARGET

const resumeTable = (f: ResumeFigures): string =>
  table(
    [
      "W4 resume: events",
      "tiller ms: median (min-max)",
      "tiller per 10^4 events",
      "raw ms: median (min-max)",
      "raw per 10^4 events",
      "raw with row objects ms",
      "tiller time / raw with row objects",
      "tiller time / raw time",
      "target",
      "result"
    ],
    [
      ...f.sizes.map((size) => {
        const tiller = spreadOf(size.tillerMillis)
        const raw = spreadOf(size.rawMillis)
        const ratio = resumeRatio(size)
        return [
          formatCount(size.events),
          msSpread(tiller),
          formatMillis(per10k(size.events, tiller.median)),
          msSpread(raw),
          formatMillis(per10k(size.events, raw.median)),
          msSpread(spreadOf(size.rawObjectMillis)),
          ratioSpread(spreadOf(size.tillerMillis.map((ms, i) => ms / size.rawObjectMillis[i]!))),
          ratioSpread(ratio),
          `<= ${formatRatio(RESUME_RATIO_TARGET)}`,
          verdict(ratio.median <= RESUME_RATIO_TARGET)
        ]
      }),
      [
        `linearity: per 10^4 events, ${formatCount(f.sizes[f.sizes.length - 1]!.events)} / ${
          formatCount(f.sizes[0]!.events)
        }`,
        "",
        formatRatio(resumeGrowth(f)),
        "",
        `${formatRatio(resumeGrowth(f, "rawMillis"))} (no target)`,
        "",
        "",
        "",
        `<= ${formatRatio(RESUME_LINEARITY_TARGET)}`,
        verdict(resumeLinearMet(f))
      ]
    ],
    [false, true, true, true, true, true, true, true, true, false]
  )

// The W4 chart: median resume time of tiller and of the raw read against the session size.
const resumeChart = (f: ResumeFigures): string =>
  logLogChartSvg({
    title: "W4: resume time vs session size (SQLite, median of runs)",
    xLabel: "events in the session",
    yLabel: "ms",
    series: [
      {
        name: "tiller: Agent.layer({ resume })",
        color: "#c0392b",
        points: f.sizes.map((size) => [size.events, spreadOf(size.tillerMillis).median] as const)
      },
      {
        name: "raw better-sqlite3: SELECT row text + JSON.parse",
        color: "#2471a3",
        points: f.sizes.map((size) => [size.events, spreadOf(size.rawMillis).median] as const)
      },
      {
        name: `target: ${formatRatio(RESUME_RATIO_TARGET)} raw`,
        color: "#7f8c8d",
        dashed: true,
        points: f.sizes.map((size) => [size.events, RESUME_RATIO_TARGET * spreadOf(size.rawMillis).median] as const)
      }
    ]
  })

const storageMet = (f: StorageFigures): boolean =>
  (f.ingest === undefined || ingestMet(f.ingest)) &&
  (f.injects === undefined || (injectRatioMet(f.injects) && injectLatencyMet(f.injects))) &&
  (f.resume === undefined || (resumeRatioMet(f.resume) && resumeLinearMet(f.resume)))

const ingestReport = (f: IngestFigures): ReadonlyArray<string> => [
  `W2: ${formatCount(f.events)} \`assistant/chunk\` text deltas appended the way the loop appends them`,
  `(trusted drafts, ${f.perTransaction} per STM transaction) to one session and timed until the last is durable;`,
  "the raw side serialises the same event objects and inserts them.",
  "",
  ingestTable(f),
  ""
]

const injectReport = (f: InjectFigures): ReadonlyArray<string> =>
  f.synchronous === "NORMAL" ? injectNormalReport(f) : injectFullReport(f)

const injectFullReport = (f: InjectFigures): ReadonlyArray<string> => [
  `W3 again with \`synchronous = ${f.synchronous}\` on both sides (tiller's store and the raw connection): every commit`,
  "also syncs the WAL to disk, so a committed inject survives a power loss, not only a crash of the process.",
  "The workload, the warm-up and the run counts are the same; the store's default (above) stays the figure",
  "the targets are read from.",
  "",
  injectTable(f),
  ""
]

const injectNormalReport = (f: InjectFigures): ReadonlyArray<string> => [
  `W3: ${f.callers} concurrent callers, each making sequential \`Driver.inject\` calls into one of ${f.sessions} sessions`,
  `(caller i into session i mod ${f.sessions}) of one store, ${
    formatCount(f.injects)
  } acknowledged injects per run; a call`,
  "returns once its `agent/inbox/spliced` event is durable. The raw side has the same callers (Effect fibers)",
  "insert the identical rows through one shared connection, each a single-row autocommit INSERT run",
  "synchronously by better-sqlite3 (so in arrival order, with no queue between caller and connection) and",
  "acknowledged when it returns. Latency is from the call to its acknowledgement. A run is short",
  `(well under a second), so each side first makes ${f.warmRuns} untimed warm-up runs (alternating) for the JIT to settle;`,
  `the first of them is shown as the cold figure, outside the targets. Timed runs: ${f.tiller.length} of each side.`,
  "The floor writes the same rows with nothing but group commit: plain async callers queue a row and",
  "await a Promise, one flush per macrotask commits every queued row in one transaction (INSERTs of up",
  `to 100 rows); it runs after the pairs (${f.warmRuns} untimed, ${f.floor.length} timed). Its ratio over raw bounds what`,
  "any store could show on this machine with this workload. The Effect floor stores nothing: each call suspends its",
  "fiber (the callers are Effect fibers, as on both sides above) until a writer fiber of its session, woken by the",
  "first call and yielding once to let the others queue, resumes every queued call. Its ratio over raw bounds what",
  "an Effect API whose calls return after a shared commit could show here even if storing cost nothing.",
  "",
  injectTable(f),
  ""
]

const resumeReport = (f: ResumeFigures): ReadonlyArray<string> => [
  `W4: one session per size, written once (generated turns of ${f.eventsPerTurn} events: a prompt delivered and claimed, a step`,
  "calling a tool and its result, a step streaming 80 text deltas, the turn closed). tiller resumes it",
  "through `Agent.layer({ resume })` on an open store (load, validation with the append rules and relations,",
  "repair check, `session/end-seed` durable; the end-seed is removed again untimed after each run); raw reads",
  "the header and every row's text in seq order (better-sqlite3's pluck mode: no row object, as tiller's load",
  "reads) and parses each: the baseline of the target. Right after it, the same read with a row object per",
  "row (`SELECT seq, row`, the driver's default mode) is shown for reference. Linearity compares the time per 10^4 events of",
  "the largest size with the smallest's (fixed costs make the smallest size's figure the larger); the target is on",
  "tiller's, and the raw read's is shown beside it: holding a million parsed events slows any reader (collections).",
  `The smallest size runs first, on a cold JIT: ${f.warmRuns} untimed warm-up run(s) of each side precede its timed`,
  `runs, alternating; the first of them, cold, is shown below the table, outside the targets. Timed runs per size: ${
    f.sizes.map((size) => `${formatCount(size.events)}: ${size.tillerMillis.length}`).join(", ")
  } (a run of the largest size takes seconds).`,
  `File build times (untimed): ${
    f.sizes.map((size) => `${formatCount(size.events)}: ${formatMillis(size.buildMillis)}`).join(", ")
  }. Chart: \`bench/w4.svg\`.`,
  "",
  resumeTable(f),
  "",
  `First warm-up run (cold JIT, untimed), ${formatCount(f.cold.events)} events: tiller ${
    formatMillis(f.cold.tillerMillis)
  }, raw ${formatMillis(f.cold.rawMillis)} (${formatRatio(f.cold.tillerMillis / f.cold.rawMillis)}).`,
  ""
]

const storageReport = (s: Sizes, f: StorageFigures): ReadonlyArray<string> => [
  "## Storage on SQLite: W2-W4",
  "",
  "tiller's `SqliteSessionStore` (WAL, `synchronous = NORMAL`) beside raw better-sqlite3 on the same kind of",
  "file: the store's own `events` table (`session_id, seq, row`, STRICT, primary key `(session_id, seq)`) and",
  "the rows tiller stored, taken from the warm-up run's file. Every run uses a fresh file in the OS temp",
  "directory; tiller and raw alternate within each run (which goes first alternates too) after an untimed",
  `warm-up of each (W3: ${s.injectWarmRuns}). Figures are median (min-max) over ${s.storageRuns} runs (W3: ${s.injectRuns}, W4: per size);`,
  "ratios are taken per run.",
  "",
  ...(f.ingest === undefined ? [] : ingestReport(f.ingest)),
  ...(f.injects === undefined ? [] : injectReport(f.injects)),
  ...(f.injectsFull === undefined ? [] : injectReport(f.injectsFull)),
  ...(f.resume === undefined ? [] : resumeReport(f.resume))
]

const footprintReport = (f: FootprintFigures): ReadonlyArray<string> => {
  const idleRows = (() => {
    const runs = f.idle.runs
    const rss = spreadOf(runs.map((r) => r.holding.rss - r.before.rss))
    const heap = spreadOf(runs.map((r) => r.holding.heapUsed - r.before.heapUsed))
    const open = spreadOf(runs.map((r) => r.openMillis))
    const perSession = (bytes: number) => formatBytes(bytes / f.idle.sessions)
    return table(
      [
        "W5 idle sessions",
        "open time: median (min-max)",
        "per open",
        "RSS held",
        "RSS per session",
        "heap held",
        "heap per session"
      ],
      [[
        `${formatCount(f.idle.sessions)} sessions, open`,
        formatSpread(open, formatMillis),
        `${(open.median / f.idle.sessions).toFixed(2)} ms`,
        formatSpread(rss, formatBytes),
        formatSpread(rss, perSession),
        formatSpread(heap, formatBytes),
        formatSpread(heap, perSession)
      ]],
      [false, true, true, true, true, true, true]
    )
  })()
  const runningRows = (() => {
    const r = f.running
    const turns = r.sessions * r.turns
    const time = spreadOf(r.runs.map((run) => run.millis))
    return table(
      [
        "W5 running sessions",
        "runs (ms)",
        "turns/s: median (min-max)",
        "steps/s",
        "events/s",
        "RSS before",
        "peak RSS",
        "RSS after (GC)"
      ],
      [[
        `${formatCount(r.sessions)} sessions x ${r.turns} turns of ${r.stepsPerTurn} steps`,
        r.runs.map((run) => formatCount(run.millis)).join(", "),
        rateSpread(spreadOf(r.runs.map((run) => rateOf(turns, run.millis))), "turns"),
        `${formatCount(rateOf(turns * r.stepsPerTurn, time.median))}/s`,
        `${formatCount(rateOf(r.runs[0]!.events, time.median))}/s`,
        formatSpread(spreadOf(r.runs.map((run) => run.baselineRss)), formatBytes),
        formatSpread(spreadOf(r.runs.map((run) => run.peakRss)), formatBytes),
        formatSpread(spreadOf(r.runs.map((run) => run.afterRss)), formatBytes)
      ]],
      [false, true, true, true, true, true, true, true]
    )
  })()
  return [
    "## Footprint on SQLite: W5",
    "",
    `Sessions opened through \`Sessions.open\` (each created on one fresh SQLite file) and held open. Idle: the`,
    "memory held is the difference between samples after GC before opening and with every session open;",
    `${f.idle.runs.length} runs after a warm-up run of a tenth of the sessions. Running: every session runs its turns at`,
    "once (a stateless model shared by all: step 1 calls the `echo` tool, step 2 answers text); timed from the",
    "first `followup` until every session's last turn is idle and its log flushed; peak RSS is sampled every",
    `64 tool calls (no GC). ${f.running.runs.length} runs after a warm-up run of a tenth of the sessions. No targets.`,
    "",
    idleRows,
    "",
    runningRows,
    ""
  ]
}

const report = (s: Sizes, when: string, figures: Figures): string =>
  [
    `# tiller benchmarks (${s.label}), ${when}`,
    "",
    `machine: ${machineLine()}`,
    `${sourceLine()}; run ${
      import.meta.url.endsWith(".ts")
        ? "from TypeScript under tsx (keepNames overhead included)"
        : "as an esbuild bundle"
    }`,
    loadReport(),
    "",
    "No collection is forced before a timed run (only memory samples force one): node's `gc()` also drops the",
    "hidden classes that optimized code was specialised on, so V8 deoptimizes that code and the next run",
    "re-warms, which no ordinary program does. W5 (a memory benchmark) still collects before each run.",
    "",
    ...(figures.primitives === undefined
      ? []
      : primitivesReport(s, figures.primitives.memory, figures.primitives.results)),
    ...(figures.loop === undefined ? [] : loopReport(figures.loop.floor, figures.loop.agents)),
    ...(figures.latency === undefined ? [] : latencyReport(figures.latency)),
    ...(figures.storage === undefined ? [] : storageReport(s, figures.storage)),
    ...(runsPostgres ? postgresReport(figures.postgres) : []),
    ...(figures.footprint === undefined ? [] : footprintReport(figures.footprint)),
    ...(figures.compaction === undefined ? [] : compactionReport(figures.compaction)),
    ...(figures.caching === undefined ? [] : cachingReport(figures.caching)),
    ...(figures.peers === undefined ? [] : [renderW1Compare(figures.peers)])
  ].join("\n")

/** W2 on PostgreSQL: tiller's ingest rate over raw multi-row inserts'. */
const PG_INGEST_RATIO_TARGET = 0.5
/** W3 on PostgreSQL: tiller's acks/s over raw autocommit inserts', and tiller's p99 latency. */
const PG_INJECT_RATIO_TARGET = 5
const PG_INJECT_P99_TARGET_MS = 20

const pgRatios = (figures: PgFigures) => {
  const ingest = median(figures.ingest.raw) / median(figures.ingest.tiller)
  const inject = median(figures.injects.raw.map((r) => r.millis)) / median(figures.injects.tiller.map((r) => r.millis))
  const p99 = median(figures.injects.tiller.map((r) => percentile(r.latencies, 0.99)))
  const resume = figures.resume.map((r) => ({
    events: r.events,
    tiller: median(r.tiller),
    raw: median(r.raw),
    ratio: median(r.tiller) / median(r.raw)
  }))
  const perUnit = resume.map((r) => r.tiller / r.events)
  const linearity = perUnit.length > 1 ? perUnit[perUnit.length - 1]! / perUnit[0]! : 1
  return { ingest, inject, p99, resume, linearity }
}

const postgresMet = (figures: PgFigures): boolean => {
  const r = pgRatios(figures)
  return r.ingest >= PG_INGEST_RATIO_TARGET && r.inject >= PG_INJECT_RATIO_TARGET &&
    r.p99 <= PG_INJECT_P99_TARGET_MS && r.resume.every((x) => x.ratio <= RESUME_RATIO_TARGET) &&
    r.linearity <= RESUME_LINEARITY_TARGET
}

const postgresReport = (figures: PgFigures | undefined): ReadonlyArray<string> => {
  if (figures === undefined) {
    return [
      "## Storage on PostgreSQL",
      "",
      "skipped: no PostgreSQL server (install postgresql or set TILLER_TEST_PG_URL)",
      ""
    ]
  }
  const r = pgRatios(figures)
  const met = (ok: boolean) => (ok ? "met" : "MISSED")
  const ms = (x: number) => `${x.toFixed(1)} ms`
  return [
    "## Storage on PostgreSQL (`--only=postgres`)",
    "",
    `On ${figures.server}; each run on a fresh database; medians of the runs; raw = the \`pg\` driver on the same server.`,
    "",
    `- W2 ingest, ${figures.ingest.events} chunk events: tiller ${ms(median(figures.ingest.tiller))}, raw multi-row ` +
    `(1,000 rows per transaction) ${ms(median(figures.ingest.raw))}: ratio ${r.ingest.toFixed(2)}x ` +
    `(target >= ${PG_INGEST_RATIO_TARGET}x, ${met(r.ingest >= PG_INGEST_RATIO_TARGET)})`,
    `- W3 acknowledged injects, ${figures.injects.callers} callers into ${figures.injects.sessions} sessions, ` +
    `${figures.injects.injects} injects: tiller ${ms(median(figures.injects.tiller.map((x) => x.millis)))}, raw ` +
    `single-row autocommit ${ms(median(figures.injects.raw.map((x) => x.millis)))}: ratio ${r.inject.toFixed(2)}x ` +
    `(target >= ${PG_INJECT_RATIO_TARGET}x, ${met(r.inject >= PG_INJECT_RATIO_TARGET)}); tiller p99 ${ms(r.p99)} ` +
    `(target <= ${PG_INJECT_P99_TARGET_MS} ms, ${met(r.p99 <= PG_INJECT_P99_TARGET_MS)})`,
    ...r.resume.map((x) =>
      `- W4 resume of ${x.events} events: tiller ${ms(x.tiller)}, raw SELECT + JSON.parse ${ms(x.raw)}: ` +
      `ratio ${x.ratio.toFixed(2)}x (target <= ${RESUME_RATIO_TARGET}x, ${met(x.ratio <= RESUME_RATIO_TARGET)})`
    ),
    `- W4 linearity: time per event at the largest size over the smallest ${r.linearity.toFixed(2)} ` +
    `(target <= ${RESUME_LINEARITY_TARGET}, ${met(r.linearity <= RESUME_LINEARITY_TARGET)})`,
    ""
  ]
}

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
    if (writeResults) {
      writeFileSync(path.join(process.cwd(), "bench", "RESULTS.md"), text)
      if (figures.peers !== undefined) writeFileSync(path.join(process.cwd(), "bench", "w1.svg"), w1Svg(figures.peers))
      if (figures.storage?.resume !== undefined) {
        writeFileSync(path.join(process.cwd(), "bench", "w4.svg"), resumeChart(figures.storage.resume))
      }
    }
  })
  const primitivesMet = (figures.primitives?.results ?? []).every((r) =>
    r.target === undefined || r.perSecond >= r.target
  )
  const allMet = primitivesMet &&
    (figures.loop === undefined || figures.loop.agents.every((r) => r.stepsPerSecond >= STEP_TARGET)) &&
    (figures.storage === undefined || storageMet(figures.storage)) &&
    (figures.postgres === undefined || postgresMet(figures.postgres)) &&
    (figures.compaction === undefined || stepRatio(figures.compaction.steps) <= COMPACTED_STEP_RATIO_TARGET)
  // A peer that cannot run is reported in the table; tiller failing to run W1 is a defect.
  const tillerFailures = (figures.peers?.outcomes ?? []).flatMap((o) =>
    o.status === "failed" && o.system.tiller ? [`${o.system.label}: ${o.reason}`] : []
  )
  return { allMet, tillerFailures }
})

Effect.runPromise(main).then(
  ({ allMet, tillerFailures }) => {
    if (!allMet) console.error("some targets were missed (see the result column)")
    if (tillerFailures.length > 0) {
      console.error(`tiller's W1 runner failed: ${tillerFailures.join("; ")}`)
      process.exitCode = 1
    }
  },
  (error: unknown) => {
    console.error(error)
    process.exitCode = 1
  }
)
