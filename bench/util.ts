/**
 * Benchmark helpers: wall-clock timing through `Clock`, median of repeated runs, memory samples
 * after a forced GC, and plain-text tables that read the same in a terminal and in Markdown.
 *
 * @since 0.1.0
 */
import * as os from "node:os"
import { Clock, Effect, Layer } from "effect"
import { Inbox, Session, SessionId, SessionLog, SessionStore } from "../src/index.js"
import type { OpenError, SessionOptions } from "../src/internal/SessionOpen.js"
import { SessionState } from "../src/internal/SessionState.js"

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
 * Runs `warmup` untimed (JIT warm-up), then `run` `runs` times with a collection before each, and
 * reports the median rate.
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
      yield* collectGarbage
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
 * The services a benchmark drives: one fresh session on a fresh memory store, with its internal
 * state (the loop's view) and its public log and inbox.
 *
 * @since 0.1.0
 * @category sessions
 */
export const sessionLayer = (
  name: string,
  options: SessionOptions = {}
): Layer.Layer<SessionState | SessionLog | Inbox, OpenError> =>
  Layer.mergeAll(SessionLog.layer, Inbox.layer).pipe(
    Layer.provideMerge(Session.layerState({ ...options, sessionId: SessionId.make(name) })),
    Layer.provide(SessionStore.layerMemory)
  )
