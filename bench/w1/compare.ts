/**
 * Workload W1 side by side, like-for-like: tiller (through the smallest public custom `Model` and
 * through its Chat Completions adapter against an in-process HTTP server, each on the memory store
 * and SQLite) against four peer agent loops (the Vercel AI SDK, pi agent core, LangGraph JS, the
 * OpenAI Agents SDK), each driven offline through the smallest model its public API allows; the
 * test doubles measured before (tiller's `ScriptedModel`, pi-ai's faux provider, the AI SDK's
 * `MockLanguageModelV4`) run as extra labelled systems (see `systems.ts`). Every run is a child
 * process of its own (a fair heap and its own peak RSS) that runs one untimed warm-up and one timed
 * W1 run and prints one JSON line; the systems take turns, round-robin, with the starting system
 * rotated every round.
 *
 * The peers live in `bench/package.json` (installed into `bench/node_modules` on first use), so
 * they never enter tiller's dependencies. The report and the chart are `renderW1Compare` and
 * `w1Svg`, re-exported here.
 *
 * @since 0.1.0
 */
import { Either } from "effect"
import { buildSync } from "esbuild"
import { execFile, execFileSync } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { loadAverage, machineLine } from "../util.js"
import type { W1Line } from "./line.js"
import { decodeW1Line } from "./line.js"
import type { W1Compare, W1Outcome } from "./result.js"
import type { W1System } from "./systems.js"
import { TILLER_RUNNER_BUNDLE, w1Systems } from "./systems.js"

export { w1Svg } from "./chart.js"
export { renderW1Compare } from "./report.js"
export type { W1Compare } from "./result.js"

interface Sizes {
  readonly steps: number
  readonly warmSteps: number
  readonly runs: number
  /** Longest a single run's process may take before it counts as failed. */
  readonly timeoutMillis: number
}

const FULL: Sizes = { steps: 1_000, warmSteps: 200, runs: 5, timeoutMillis: 20 * 60_000 }
// Quick is CI's smoke run: every runner once per round, two rounds, so it stays short on a busy machine.
const QUICK: Sizes = { steps: 50, warmSteps: 10, runs: 2, timeoutMillis: 60_000 }

// The repository root: the nearest directory up from the working directory holding this module's
// source (the driver runs bundled elsewhere, so its own URL does not locate the tree).
const repositoryRoot = (): string => {
  let dir = process.cwd()
  while (!fs.existsSync(path.join(dir, "bench", "w1", "compare.ts"))) {
    const parent = path.dirname(dir)
    if (parent === dir) {
      throw new Error(`W1 compare: no bench/w1/compare.ts above ${process.cwd()}; run from the tiller checkout`)
    }
    dir = parent
  }
  return dir
}

// Bench dependencies whose installed version differs from the exact pin (or that are missing).
const stalePeers = (bench: string): ReadonlyArray<string> => {
  const manifest = JSON.parse(fs.readFileSync(path.join(bench, "package.json"), "utf8")) as {
    readonly dependencies?: Record<string, string>
  }
  return Object.entries(manifest.dependencies ?? {}).flatMap(([name, pinned]) => {
    const installed = path.join(bench, "node_modules", ...name.split("/"), "package.json")
    if (!fs.existsSync(installed)) return [`${name} missing`]
    const version = (JSON.parse(fs.readFileSync(installed, "utf8")) as { readonly version?: string }).version
    return version === pinned ? [] : [`${name} ${version ?? "?"} installed, ${pinned} pinned`]
  })
}

/**
 * Installs the peers pinned in `bench/package.json` into `bench/node_modules` (`npm ci --prefix
 * bench`) unless every one is installed at its pinned version; progress goes to stderr. Throws
 * when the install fails.
 *
 * @since 0.1.0
 * @category setup
 */
export const ensurePeers = (): void => {
  const bench = path.join(repositoryRoot(), "bench")
  const stale = stalePeers(bench)
  if (stale.length === 0) return
  process.stderr.write(`W1 peers: ${stale.join("; ")}: running npm ci --prefix bench ...\n`)
  const npm = process.platform === "win32" ? "npm.cmd" : "npm"
  execFileSync(npm, ["ci", "--prefix", bench, "--no-audit", "--no-fund"], { stdio: ["ignore", 2, 2] })
  const still = stalePeers(bench)
  if (still.length > 0) throw new Error(`W1 peers: after npm ci, ${still.join("; ")}`)
  process.stderr.write("W1 peers: installed\n")
}

// Bundles the tiller runner like the main bench (no tsx keepNames overhead), dependencies external.
const buildTillerRunner = (root: string): void => {
  buildSync({
    entryPoints: [path.join(root, "bench", "w1", "tiller.ts")],
    bundle: true,
    platform: "node",
    format: "esm",
    packages: "external",
    target: "node20",
    logLevel: "warning",
    outfile: path.join(root, TILLER_RUNNER_BUNDLE)
  })
}

// Peers must stay offline: no tracing exporters, no telemetry.
const runnerEnv: NodeJS.ProcessEnv = {
  ...process.env,
  LANGCHAIN_TRACING_V2: "false",
  LANGSMITH_TRACING: "false",
  OPENAI_AGENTS_DISABLE_TRACING: "1",
  NODE_OPTIONS: ""
}

const lastLines = (text: string, count: number): string =>
  text.trim().split("\n").slice(-count).join(" | ").slice(0, 600)

// One run of one system in a child process: its result line, or an Error with the runner's output.
const runOnce = (root: string, system: W1System, sizes: Sizes): Promise<W1Line> =>
  new Promise((resolve, reject) => {
    const args = [
      "--expose-gc",
      path.join(root, system.runner),
      ...system.args,
      String(sizes.steps),
      String(sizes.warmSteps)
    ]
    execFile(
      process.execPath,
      args,
      {
        cwd: system.tiller ? root : path.join(root, "bench"),
        env: runnerEnv,
        timeout: sizes.timeoutMillis,
        maxBuffer: 16 * 1024 * 1024
      },
      (error, stdout, stderr) => {
        if (error !== null) {
          const why = error.killed ? `killed after ${sizes.timeoutMillis / 1000} s` : `exit code ${String(error.code)}`
          return reject(new Error(`${why}: ${lastLines(stderr, 4) || lastLines(stdout, 2) || error.message}`))
        }
        const lines = stdout.trim().split("\n")
        const decoded = decodeW1Line(lines[lines.length - 1] ?? "")
        if (Either.isLeft(decoded)) return reject(new Error(`unreadable result line: ${lastLines(stdout, 2)}`))
        const line = decoded.right
        if (line.system !== system.id || line.steps !== sizes.steps) {
          return reject(new Error(`result line is for ${line.system} with ${line.steps} steps`))
        }
        resolve(line)
      }
    )
  })

const messageOf = (error: unknown): string => error instanceof Error ? error.message : String(error)

const rotate = <A>(items: ReadonlyArray<A>, by: number): ReadonlyArray<A> =>
  items.length === 0 ? items : [...items.slice(by % items.length), ...items.slice(0, by % items.length)]

const formatRate = (n: number): string => new Intl.NumberFormat("en-US", { maximumFractionDigits: 0 }).format(n)

/**
 * Runs the comparison: full, N = 1,000 steps (200 warm-up) and 5 timed runs per system; quick,
 * N = 50 (10 warm-up) and 2 runs. Runs go round-robin over the systems, the first system rotating
 * each round. A system whose runner fails (or whose dependencies cannot be installed) is reported
 * as failed with the reason and the others go on. Progress lines go to `log`.
 *
 * @since 0.1.0
 * @category benchmarks
 */
export const runW1Compare = async (options: {
  readonly quick: boolean
  readonly log: (line: string) => void
}): Promise<W1Compare> => {
  const sizes = options.quick ? QUICK : FULL
  const root = repositoryRoot()
  const failures = new Map<string, { readonly reason: string; readonly completedRuns: number }>()
  const fail = (system: W1System, reason: string, completedRuns: number) => {
    failures.set(system.id, { reason, completedRuns })
    options.log(`W1 ${system.label}: could not run: ${reason}`)
  }
  try {
    ensurePeers()
  } catch (error) {
    for (const system of w1Systems) {
      if (!system.tiller) fail(system, `bench dependencies could not be installed: ${messageOf(error)}`, 0)
    }
  }
  try {
    buildTillerRunner(root)
  } catch (error) {
    for (const system of w1Systems) if (system.tiller) fail(system, `runner did not build: ${messageOf(error)}`, 0)
  }
  const startedAt = new Date().toISOString()
  const loadAtStart = loadAverage()
  const runs = new Map<string, Array<W1Line>>(w1Systems.map((s) => [s.id, []]))
  for (let round = 0; round < sizes.runs; round++) {
    for (const system of rotate(w1Systems, round)) {
      if (failures.has(system.id)) continue
      const done = runs.get(system.id)!
      try {
        const line = await runOnce(root, system, sizes)
        done.push(line)
        options.log(
          `W1 ${system.label}: run ${round + 1}/${sizes.runs}, ${sizes.steps} steps in ${line.ms.toFixed(0)} ms ` +
            `(${formatRate(line.stepsPerSec)} steps/s)`
        )
      } catch (error) {
        fail(system, messageOf(error), done.length)
      }
    }
  }
  const outcomes: Array<W1Outcome> = w1Systems.map((system) => {
    const failure = failures.get(system.id)
    return failure === undefined
      ? { status: "ran", system, runs: runs.get(system.id)! }
      : { status: "failed", system, reason: failure.reason, completedRuns: failure.completedRuns }
  })
  return {
    quick: options.quick,
    steps: sizes.steps,
    warmSteps: sizes.warmSteps,
    runs: sizes.runs,
    machine: machineLine(),
    startedAt,
    loadAtStart,
    loadAtEnd: loadAverage(),
    cpus: os.cpus().length,
    outcomes
  }
}
