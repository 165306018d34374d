/**
 * Footprint benchmarks (W5) on the SQLite store, through `Sessions`: the memory an idle open
 * session holds, measured over many sessions, and many sessions running scripted turns at once
 * (throughput and RSS).
 *
 * @since 0.1.0
 */
import { Context, Effect, Layer, Stream } from "effect"
import * as path from "node:path"
import { Driver, Model, SessionId, SessionLog, Sessions, SqliteSessionStore, Tools, userMessage } from "../src/index.js"
import { answerChunks, echoCallChunks, echoTool } from "./loop.js"
import type { MemorySample } from "./util.js"
import { collectGarbage, currentRss, memorySample, timed, withTempDir } from "./util.js"

// Tool calls between RSS samples while turns run (a sample costs a few µs).
const RSS_SAMPLE_EVERY = 64

const range = (n: number): Array<number> => Array.from({ length: n }, (_, i) => i)

/**
 * A stateless model shared by every session: step 1 of a turn calls `echo`, step 2 answers text.
 * The chunks are built once.
 */
const turnModel: Layer.Layer<Model> = Layer.sync(Model, () => {
  const callStep = echoCallChunks(1)
  return Model.of({ stream: (request) => Stream.fromIterable(request.step === 1 ? callStep : answerChunks) })
})

const sessionsLayer = (filename: string, onCall: () => void) => {
  const echo = echoTool(onCall)
  return Sessions.layer({ idleTimeToLive: "10 minutes", model: { provider: "bench", model: "scripted" } }).pipe(
    Layer.provide(Layer.mergeAll(SqliteSessionStore.layer({ filename }), turnModel, Tools.layer({ tools: [echo] })))
  )
}

/**
 * One idle-sessions run: memory before and after opening the sessions, and how long opening took.
 *
 * @since 0.1.0
 * @category models
 */
export interface IdleRun {
  readonly before: MemorySample
  readonly holding: MemorySample
  readonly openMillis: number
}

/**
 * W5 idle figures: `sessions` sessions created and held open, per run.
 *
 * @since 0.1.0
 * @category models
 */
export interface IdleFigures {
  readonly sessions: number
  readonly runs: ReadonlyArray<IdleRun>
}

/** Opens `count` fresh sessions through `Sessions` on a fresh file and samples memory while all are open. */
const idleRun = (count: number): Effect.Effect<IdleRun, unknown> =>
  withTempDir((dir) =>
    Effect.scoped(Effect.gen(function*() {
      const sessions = yield* Sessions
      const before = yield* memorySample
      const [drivers, openMillis] = yield* timed(Effect.forEach(
        range(count),
        (i) =>
          Effect.map(sessions.open(SessionId.make(`bench-w5-idle-${i}`)), (context) => Context.get(context, Driver))
      ))
      const holding = yield* memorySample
      // The drivers stay reachable until the sample is taken.
      if (drivers.length !== count) return yield* Effect.dieMessage(`W5 opened ${drivers.length} sessions`)
      return { before, holding, openMillis }
    })).pipe(Effect.provide(sessionsLayer(path.join(dir, "idle.db"), () => {})))
  )

/**
 * W5 idle: `runs` runs (after an untimed warm-up run of a tenth of the sessions), each opening
 * `sessions` new sessions on a fresh database and holding them open while memory is sampled.
 *
 * @since 0.1.0
 * @category benchmarks
 */
export const idle = (sessions: number, runs: number): Effect.Effect<IdleFigures, unknown> =>
  Effect.gen(function*() {
    yield* idleRun(Math.max(1, Math.floor(sessions / 10)))
    const results: Array<IdleRun> = []
    for (let i = 0; i < runs; i++) results.push(yield* idleRun(sessions))
    return { sessions, runs: results }
  })

/**
 * One running-sessions run.
 *
 * @since 0.1.0
 * @category models
 */
export interface RunningRun {
  readonly millis: number
  /** Events in all logs after the run. */
  readonly events: number
  /** RSS after GC with the sessions open, before the turns. */
  readonly baselineRss: number
  /** The highest RSS sampled while the turns ran (every 64 tool calls, no GC). */
  readonly peakRss: number
  /** RSS after GC with the sessions still open, after the turns. */
  readonly afterRss: number
}

/**
 * W5 running figures: `sessions` sessions each running `turns` turns of 2 steps, per run.
 *
 * @since 0.1.0
 * @category models
 */
export interface RunningFigures {
  readonly sessions: number
  readonly turns: number
  readonly stepsPerTurn: number
  readonly runs: ReadonlyArray<RunningRun>
}

/** Opens `count` sessions untimed, then times every session running `turns` turns concurrently, all durable. */
const runningRun = (count: number, turns: number): Effect.Effect<RunningRun, unknown> => {
  let peakRss = 0
  let calls = 0
  const onCall = () => {
    if (++calls % RSS_SAMPLE_EVERY === 0) peakRss = Math.max(peakRss, currentRss())
  }
  return withTempDir((dir) =>
    Effect.scoped(Effect.gen(function*() {
      const sessions = yield* Sessions
      const opened = yield* Effect.forEach(range(count), (i) =>
        Effect.map(sessions.open(SessionId.make(`bench-w5-running-${i}`)), (context) => ({
          driver: Context.get(context, Driver),
          log: Context.get(context, SessionLog)
        })))
      const prompts = range(count).map((i) =>
        range(turns).map((t) =>
          userMessage({ id: `prompt-${i}-${t}`, text: `question ${t}` })
        )
      )
      const baselineRss = (yield* memorySample).rss
      peakRss = currentRss()
      const [, millis] = yield* timed(Effect.forEach(range(count), (i) =>
        Effect.gen(function*() {
          const { driver, log } = opened[i]!
          for (let t = 0; t < turns; t++) {
            yield* driver.followup(prompts[i]![t]!)
            yield* driver.whenIdle
          }
          yield* log.flush
        }), { concurrency: "unbounded", discard: true }))
      peakRss = Math.max(peakRss, currentRss())
      if (calls !== count * turns) {
        return yield* Effect.dieMessage(`W5 ran ${calls} tool calls, expected ${count * turns}`)
      }
      let events = 0
      for (const { log } of opened) events += (yield* log.events).length
      const afterRss = (yield* memorySample).rss
      return { millis, events, baselineRss, peakRss, afterRss }
    })).pipe(Effect.provide(sessionsLayer(path.join(dir, "running.db"), onCall)))
  )
}

/**
 * W5 running: `runs` runs (after an untimed warm-up run of a tenth of the sessions), each opening
 * `sessions` sessions on a fresh database and running `turns` turns in every one at once (one
 * tool-call step and one answer step per turn), every event durable at the end.
 *
 * @since 0.1.0
 * @category benchmarks
 */
export const running = (sessions: number, turns: number, runs: number): Effect.Effect<RunningFigures, unknown> =>
  Effect.gen(function*() {
    yield* runningRun(Math.max(1, Math.floor(sessions / 10)), turns)
    const results: Array<RunningRun> = []
    for (let i = 0; i < runs; i++) {
      yield* collectGarbage
      results.push(yield* runningRun(sessions, turns))
    }
    return { sessions, turns, stepsPerTurn: 2, runs: results }
  })
