/**
 * Benchmark helpers: wall-clock timing through `Clock`, median of repeated runs, memory samples
 * after a forced GC, and plain-text tables that read the same in a terminal and in Markdown.
 *
 * @since 0.1.0
 */
import { Clock, Effect, Layer } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import type { PersistenceError } from "../src/index.js"
import { Inbox, Session, SessionId, SessionLog, SessionStore } from "../src/index.js"
import type { OpenError, SessionOptions } from "../src/internal/session/SessionOpen.js"
import { SessionState } from "../src/internal/state/SessionState.js"

/**
 * One timed run: how many operations it performed and how long they took.
 *
 * @since 0.1.0
 * @category models
 */
export interface Run {
  readonly operations: number
  readonly millis: number
}

/**
 * The result of a throughput benchmark: every run's duration and the figure compared with a target.
 *
 * @since 0.1.0
 * @category models
 */
export interface Throughput {
  readonly name: string
  /** What one operation is: "events", "cycles". */
  readonly unit: string
  readonly operations: number
  readonly runs: ReadonlyArray<number>
  readonly medianMillis: number
  readonly perSecond: number
  readonly target?: number
  readonly note?: string
}

/**
 * Heap and RSS figures in bytes.
 *
 * @since 0.1.0
 * @category models
 */
export interface MemorySample {
  readonly rss: number
  readonly heapUsed: number
  readonly heapTotal: number
  readonly external: number
}

/**
 * Whether node runs with `--expose-gc`, so memory samples are taken after a full collection.
 *
 * @since 0.1.0
 * @category memory
 */
export const gcAvailable = (): boolean => typeof globalThis.gc === "function"

/**
 * Forces full collections when `--expose-gc` is on (twice: the first may only schedule finalizers).
 * Only for memory samples, never before a timed run: a forced collection also drops the hidden
 * classes that optimized code was specialised on (V8 deoptimizes that code, reason "weak objects"),
 * so the run after it re-warms, which no ordinary program does.
 *
 * @since 0.1.0
 * @category memory
 */
export const collectGarbage: Effect.Effect<void> = Effect.sync(() => {
  const gc = globalThis.gc
  if (gc === undefined) return
  gc()
  gc()
})

/**
 * Runs `a` and `b` `runs` times each, alternating which goes first (`a` on even runs): the results
 * of `a` and of `b`, in run order. No collection is forced between runs (see {@link collectGarbage}).
 *
 * @since 0.1.0
 * @category benchmarks
 */
export const alternating = <A, B, E, R>(
  runs: number,
  a: Effect.Effect<A, E, R>,
  b: Effect.Effect<B, E, R>
): Effect.Effect<readonly [Array<A>, Array<B>], E, R> =>
  Effect.gen(function*() {
    const as: Array<A> = []
    const bs: Array<B> = []
    for (let i = 0; i < runs; i++) {
      if (i % 2 === 0) {
        as.push(yield* a)
        bs.push(yield* b)
      } else {
        bs.push(yield* b)
        as.push(yield* a)
      }
    }
    return [as, bs] as const
  })

/**
 * The process's memory right now, after a forced collection when available.
 *
 * @since 0.1.0
 * @category memory
 */
export const memorySample: Effect.Effect<MemorySample> = Effect.zipRight(
  collectGarbage,
  Effect.sync(() => {
    const { external, heapTotal, heapUsed, rss } = process.memoryUsage()
    return { rss, heapUsed, heapTotal, external }
  })
)

/**
 * The current resident set size without a collection (cheap enough to call inside a loop).
 *
 * @since 0.1.0
 * @category memory
 */
export const currentRss = (): number => process.memoryUsage.rss()

/**
 * Runs `self` and measures its wall-clock duration with the Clock's high-resolution time.
 *
 * @since 0.1.0
 * @category timing
 */
export const timed = <A, E, R>(self: Effect.Effect<A, E, R>): Effect.Effect<readonly [A, number], E, R> =>
  Effect.gen(function*() {
    const start = yield* Clock.currentTimeNanos
    const value = yield* self
    const end = yield* Clock.currentTimeNanos
    return [value, Number(end - start) / 1e6] as const
  })

/**
 * The median of a non-empty list (the mean of the middle two for an even count).
 *
 * @since 0.1.0
 * @category statistics
 */
export const median = (values: ReadonlyArray<number>): number => {
  const sorted = [...values].sort((a, b) => a - b)
  const mid = sorted.length >> 1
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2
}

/**
 * Options of a repeated throughput measurement.
 *
 * @since 0.1.0
 * @category models
 */
export interface RepeatOptions {
  readonly name: string
  readonly unit: string
  readonly runs: number
  readonly target?: number
  readonly note?: string
}

/**
 * Runs `warmup` untimed (JIT warm-up), then `run` `runs` times, and reports the median rate.
 *
 * @since 0.1.0
 * @category timing
 */
export const repeat = <E, R>(
  options: RepeatOptions,
  run: Effect.Effect<Run, E, R>,
  warmup: Effect.Effect<unknown, E, R> = Effect.void
): Effect.Effect<Throughput, E, R> =>
  Effect.gen(function*() {
    yield* warmup
    const durations: Array<number> = []
    let operations = 0
    for (let i = 0; i < options.runs; i++) {
      const result = yield* run
      operations = result.operations
      durations.push(result.millis)
    }
    const medianMillis = median(durations)
    return {
      name: options.name,
      unit: options.unit,
      operations,
      runs: durations,
      medianMillis,
      perSecond: operations / (medianMillis / 1000),
      ...(options.target === undefined ? {} : { target: options.target }),
      ...(options.note === undefined ? {} : { note: options.note })
    }
  })

/**
 * One line describing the machine: OS, CPUs, memory and the node version.
 *
 * @since 0.1.0
 * @category reporting
 */
export const machineLine = (): string => {
  const cpus = os.cpus()
  const model = cpus[0]?.model.trim().replace(/\s+/g, " ") ?? "unknown CPU"
  return `${os.type()} ${os.release()} ${os.arch()}, ${cpus.length} x ${model}, ` +
    `${formatBytes(os.totalmem())} RAM, node ${process.version}` +
    (gcAvailable() ? ", --expose-gc" : ", no --expose-gc (memory figures include garbage)")
}

/**
 * The 1-minute load average: other processes competing for the CPUs slow every figure down, so a
 * report states it.
 *
 * @since 0.1.0
 * @category reporting
 */
export const loadAverage = (): number => os.loadavg()[0] ?? 0

const integer = new Intl.NumberFormat("en-US", { maximumFractionDigits: 0 })
const oneDecimal = new Intl.NumberFormat("en-US", { minimumFractionDigits: 1, maximumFractionDigits: 1 })

/**
 * A count with thousands separators.
 *
 * @since 0.1.0
 * @category reporting
 */
export const formatCount = (n: number): string => integer.format(n)

/**
 * A duration in ms (or s past ten seconds).
 *
 * @since 0.1.0
 * @category reporting
 */
export const formatMillis = (ms: number): string =>
  ms >= 10_000 ? `${oneDecimal.format(ms / 1000)} s` : `${oneDecimal.format(ms)} ms`

/**
 * A byte count in MiB (or KiB below one MiB).
 *
 * @since 0.1.0
 * @category reporting
 */
export const formatBytes = (bytes: number): string =>
  Math.abs(bytes) >= 1024 * 1024
    ? `${oneDecimal.format(bytes / (1024 * 1024))} MiB`
    : `${oneDecimal.format(bytes / 1024)} KiB`

/**
 * Microseconds per operation at a rate.
 *
 * @since 0.1.0
 * @category reporting
 */
export const formatMicros = (perSecond: number): string => {
  const micros = 1e6 / perSecond
  return `${micros >= 100 ? integer.format(micros) : micros.toFixed(2)} µs`
}

/**
 * A table with a header row, padded columns and Markdown pipes; `right` aligns numeric columns.
 *
 * @since 0.1.0
 * @category reporting
 */
export const table = (
  header: ReadonlyArray<string>,
  rows: ReadonlyArray<ReadonlyArray<string>>,
  right: ReadonlyArray<boolean> = []
): string => {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? "").length)))
  const cell = (text: string, i: number) => right[i] === true ? text.padStart(widths[i]!) : text.padEnd(widths[i]!)
  const line = (cells: ReadonlyArray<string>) => `| ${cells.map((c, i) => cell(c, i)).join(" | ")} |`
  const rule = `|${widths.map((w, i) => right[i] === true ? `${"-".repeat(w + 1)}:` : "-".repeat(w + 2)).join("|")}|`
  return [line(header), rule, ...rows.map(line)].join("\n")
}

/**
 * The services a benchmark drives: one fresh session on a fresh store (memory unless `store` is
 * given), with its internal state (the loop's view) and its public log and inbox.
 *
 * @since 0.1.0
 * @category sessions
 */
export const sessionLayer = (
  name: string,
  options: SessionOptions = {},
  store: Layer.Layer<SessionStore, PersistenceError> = SessionStore.layerMemory
): Layer.Layer<SessionState | SessionLog | Inbox, OpenError> =>
  Layer.mergeAll(SessionLog.layer, Inbox.layer).pipe(
    Layer.provideMerge(Session.layerState({ ...options, sessionId: SessionId.make(name) })),
    Layer.provide(store)
  )

/**
 * Runs `use` with a fresh temporary directory, removed afterwards whatever the outcome.
 *
 * @since 0.1.0
 * @category files
 */
export const withTempDir = <A, E, R>(use: (dir: string) => Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Effect.acquireUseRelease(
    Effect.sync(() => fs.mkdtempSync(path.join(os.tmpdir(), "tiller-bench-"))),
    use,
    (dir) => Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true }))
  )

/**
 * The smallest, median and largest of a non-empty list.
 *
 * @since 0.1.0
 * @category statistics
 */
export interface Spread {
  readonly min: number
  readonly median: number
  readonly max: number
}

/**
 * The spread of a non-empty list of figures.
 *
 * @since 0.1.0
 * @category statistics
 */
export const spreadOf = (values: ReadonlyArray<number>): Spread => ({
  min: Math.min(...values),
  median: median(values),
  max: Math.max(...values)
})

/**
 * A spread as "median (min-max)" with each figure formatted by `format`.
 *
 * @since 0.1.0
 * @category reporting
 */
export const formatSpread = (spread: Spread, format: (n: number) => string): string =>
  `${format(spread.median)} (${format(spread.min)}-${format(spread.max)})`

/**
 * A ratio such as `0.42x` (two significant decimals below 10, none above).
 *
 * @since 0.1.0
 * @category reporting
 */
export const formatRatio = (ratio: number): string => ratio >= 10 ? `${integer.format(ratio)}x` : `${ratio.toFixed(2)}x`

/**
 * One line of a chart: a name, a colour and its points.
 *
 * @since 0.1.0
 * @category reporting
 */
export interface ChartSeries {
  readonly name: string
  readonly color: string
  /** Drawn dashed, without markers (a target or reference line). */
  readonly dashed?: boolean
  readonly points: ReadonlyArray<readonly [x: number, y: number]>
}

const escapeXml = (text: string): string => text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;")

// Powers of ten covering [low, high], for the ticks of a log axis.
const decades = (low: number, high: number): Array<number> => {
  const ticks: Array<number> = []
  for (let e = Math.floor(Math.log10(low)); e <= Math.ceil(Math.log10(high)); e++) ticks.push(10 ** e)
  return ticks
}

const tickLabel = (n: number): string => n >= 1 ? integer.format(n) : String(n)

/**
 * A standalone SVG line chart with logarithmic axes (both axes span whole decades), one polyline
 * and marker per series, and a legend.
 *
 * @since 0.1.0
 * @category reporting
 */
export const logLogChartSvg = (options: {
  readonly title: string
  readonly xLabel: string
  readonly yLabel: string
  readonly series: ReadonlyArray<ChartSeries>
}): string => {
  const width = 640
  const height = 400
  const left = 80
  const right = 20
  const top = 40
  const bottom = 60
  const xs = options.series.flatMap((s) => s.points.map(([x]) => x))
  const ys = options.series.flatMap((s) => s.points.map(([, y]) => y)).filter((y) => y > 0)
  const xTicks = decades(Math.min(...xs), Math.max(...xs))
  const yTicks = decades(Math.min(...ys), Math.max(...ys))
  const [x0, x1] = [Math.log10(xTicks[0]!), Math.log10(xTicks[xTicks.length - 1]!)]
  const [y0, y1] = [Math.log10(yTicks[0]!), Math.log10(yTicks[yTicks.length - 1]!)]
  const px = (x: number) => left + ((Math.log10(x) - x0) / Math.max(x1 - x0, 1e-9)) * (width - left - right)
  const py = (y: number) => height - bottom - ((Math.log10(y) - y0) / Math.max(y1 - y0, 1e-9)) * (height - top - bottom)
  const round = (n: number) => n.toFixed(1)
  const lines: Array<string> = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="sans-serif" font-size="12">`,
    `<rect width="${width}" height="${height}" fill="white"/>`,
    `<text x="${width / 2}" y="20" text-anchor="middle" font-size="14">${escapeXml(options.title)}</text>`
  ]
  for (const t of xTicks) {
    lines.push(
      `<line x1="${round(px(t))}" y1="${top}" x2="${round(px(t))}" y2="${height - bottom}" stroke="#ddd"/>`,
      `<text x="${round(px(t))}" y="${height - bottom + 16}" text-anchor="middle">${tickLabel(t)}</text>`
    )
  }
  for (const t of yTicks) {
    lines.push(
      `<line x1="${left}" y1="${round(py(t))}" x2="${width - right}" y2="${round(py(t))}" stroke="#ddd"/>`,
      `<text x="${left - 6}" y="${round(py(t) + 4)}" text-anchor="end">${tickLabel(t)}</text>`
    )
  }
  lines.push(
    `<text x="${(left + width - right) / 2}" y="${height - 20}" text-anchor="middle">${
      escapeXml(options.xLabel)
    }</text>`,
    `<text x="20" y="${(top + height - bottom) / 2}" text-anchor="middle" transform="rotate(-90 20 ${
      (top + height - bottom) / 2
    })">${escapeXml(options.yLabel)}</text>`
  )
  options.series.forEach((s, i) => {
    const points = s.points.filter(([, y]) => y > 0)
    lines.push(
      `<polyline fill="none" stroke="${s.color}" stroke-width="2"${
        s.dashed === true ? ` stroke-dasharray="6 4"` : ""
      } points="${points.map(([x, y]) => `${round(px(x))},${round(py(y))}`).join(" ")}"/>`,
      ...(s.dashed === true
        ? []
        : points.map(([x, y]) => `<circle cx="${round(px(x))}" cy="${round(py(y))}" r="3" fill="${s.color}"/>`)),
      `<rect x="${left + 10}" y="${top + 8 + i * 18}" width="12" height="3" fill="${s.color}"/>`,
      `<text x="${left + 28}" y="${top + 14 + i * 18}">${escapeXml(s.name)}</text>`
    )
  })
  lines.push("</svg>")
  return lines.join("\n") + "\n"
}
