/**
 * Agent loop benchmarks (the driver): workload W1 of the performance bar - one session, N steps,
 * each an instant scripted model response calling one trivial tool, then a final text answer -
 * beside a plain-JS floor running the same steps; and the latency from `followup` returning to the
 * `step/start` of the turn it opened.
 *
 * @since 0.1.0
 */
import { Clock, Deferred, Effect, Fiber, Layer, Schema, Stream } from "effect"
import type { ScriptEntry, SessionEvent, StreamChunk } from "../src/index.js"
import {
  Agent,
  Driver,
  Model,
  ScriptedModel,
  SessionId,
  SessionLog,
  SessionStore,
  Tool,
  Tools,
  userMessage
} from "../src/index.js"
import type { Run } from "./util.js"
import { currentRss, median, timed } from "./util.js"
import { W1_ECHO_RESULT } from "./w1/line.js"

// Steps per RSS sample inside the tool body: a sample costs a few µs, so it is taken rarely.
const RSS_SAMPLE_EVERY = 64

/**
 * The W1 script: `steps` responses, each calling `echo` once with a fresh call id, then a text answer.
 *
 * @since 0.1.0
 * @category workloads
 */
export const w1Script = (steps: number): ReadonlyArray<ScriptEntry> => {
  const script: Array<ScriptEntry> = []
  for (let i = 1; i <= steps; i++) {
    script.push(ScriptedModel.response({ toolCalls: [{ id: `call-${i}`, name: "echo", arguments: { i } }] }))
  }
  script.push(ScriptedModel.text("done"))
  return script
}

/**
 * The model of a W1 run: the `ScriptedModel` script, or the smallest adapter the public `Model`
 * API allows (a `Stream.fromIterable` of prebuilt chunks chosen by the request's step).
 *
 * @since 0.1.0
 * @category models
 */
export type ModelKind = "scripted" | "direct"

/**
 * The chunks of a response calling `echo` with `{ i }` (call id `call-i`), as ScriptedModel emits them.
 *
 * @since 0.1.0
 * @category fixtures
 */
export const echoCallChunks = (i: number): ReadonlyArray<StreamChunk> => [
  { type: "block-start", index: 0, block: "tool-call", id: `call-${i}`, name: "echo" },
  { type: "tool-call-delta", index: 0, arguments: JSON.stringify({ i }) },
  { type: "block-end", index: 0 },
  { type: "finish", finish: { kind: "stop" } }
]

/**
 * The chunks of the final text answer "done".
 *
 * @since 0.1.0
 * @category fixtures
 */
export const answerChunks: ReadonlyArray<StreamChunk> = [
  { type: "block-start", index: 0, block: "text" },
  { type: "text-delta", index: 0, text: "done" },
  { type: "block-end", index: 0 },
  { type: "finish", finish: { kind: "stop" } }
]

// The chunks ScriptedModel emits for the same responses, built once.
const directModel = (steps: number): Layer.Layer<Model> => {
  const toolChunks = Array.from({ length: steps }, (_, k) => echoCallChunks(k + 1))
  return Layer.succeed(
    Model,
    Model.of({ stream: (request) => Stream.fromIterable(toolChunks[request.step - 1] ?? answerChunks) })
  )
}

/**
 * The benchmarks' trivial tool: `echo`, exclusive, returns the constant `"ok"`; calls `onCall` first.
 *
 * @since 0.1.0
 * @category fixtures
 */
export const echoTool = (onCall: () => void = () => {}) =>
  Tool.make("echo", {
    description: "Returns a constant string",
    parameters: Schema.Struct({ i: Schema.Number }),
    mode: "exclusive",
    execute: () =>
      Effect.sync(() => {
        onCall()
        return W1_ECHO_RESULT
      })
  })

// The agent of one run: a fresh memory store, the model and the `echo` tool, which samples RSS.
const agentLayer = (
  name: string,
  model: Layer.Layer<Model>,
  onCall: () => void = () => {}
) => {
  const echo = echoTool(onCall)
  return Agent.layer({
    sessionId: SessionId.make(name),
    model: { provider: "bench", model: "scripted" },
    // W1 is one turn of many steps: no step limit, as in every peer's run.
    maxSteps: Number.POSITIVE_INFINITY
  }).pipe(
    Layer.provide(Layer.mergeAll(SessionStore.layerMemory, model, Tools.layer({ tools: [echo] })))
  )
}

/**
 * One W1 run's figures: the timed run plus the events it wrote and the RSS it reached.
 *
 * @since 0.1.0
 * @category models
 */
export interface LoopRun extends Run {
  readonly events: number
  /** RSS before the session opened (no forced collection). */
  readonly baselineRss: number
  /** The highest RSS sampled during the run (every 64 tool calls and at the end, no GC). */
  readonly peakRss: number
}

/**
 * One W1 run on a fresh agent: opening the session is untimed; one `followup`, `whenIdle` and
 * `SessionLog.flush` (every event durable) are timed. Fails unless every step ran.
 *
 * @since 0.1.0
 * @category benchmarks
 */
export const w1Run = (steps: number, kind: ModelKind = "scripted"): Effect.Effect<LoopRun, unknown> =>
  Effect.gen(function*() {
    const model = kind === "scripted" ? ScriptedModel.layer(w1Script(steps)) : directModel(steps)
    const prompt = userMessage({ id: "bench-prompt", text: "Call echo until the script ends." })
    // No forced collection before a timed run (see `collectGarbage`): the baseline includes garbage.
    const baselineRss = currentRss()
    let peakRss = currentRss()
    let calls = 0
    const onCall = () => {
      if (++calls % RSS_SAMPLE_EVERY === 0) peakRss = Math.max(peakRss, currentRss())
    }
    return yield* Effect.gen(function*() {
      const driver = yield* Driver
      const log = yield* SessionLog
      const [, millis] = yield* timed(Effect.gen(function*() {
        yield* driver.followup(prompt)
        yield* driver.whenIdle
        yield* log.flush
      }))
      peakRss = Math.max(peakRss, currentRss())
      const events = yield* log.events
      if (calls !== steps) return yield* Effect.dieMessage(`W1 ran ${calls} tool calls, expected ${steps}`)
      const last = events[events.length - 1]
      if (last?.type !== "turn/end") {
        return yield* Effect.dieMessage(`W1 log ends with ${last?.type}, expected turn/end`)
      }
      return { operations: steps, millis, events: events.length, baselineRss, peakRss }
    }).pipe(Effect.provide(agentLayer("bench-w1", model, onCall)))
  })

/**
 * W1 over repeated runs: the median time and the events and memory of the runs.
 *
 * @since 0.1.0
 * @category models
 */
export interface LoopThroughput {
  readonly name: string
  readonly steps: number
  readonly runs: ReadonlyArray<number>
  readonly medianMillis: number
  readonly stepsPerSecond: number
  /** Events in the log after a run (the same every run). */
  readonly events: number
  /** The highest RSS any timed run reached. */
  readonly peakRss: number
  /** The median of each run's peak over its own baseline. */
  readonly medianGrowth: number
  /** The first untimed warm-up run (cold JIT), when there was one. */
  readonly cold?: { readonly steps: number; readonly millis: number; readonly warmRuns: number }
}

/**
 * Runs W1 `runs` times after `warmRuns` untimed warm-up runs of `warmSteps` steps (the first is
 * kept as the cold figure); each run opens a fresh agent.
 *
 * @since 0.1.0
 * @category benchmarks
 */
export const w1 = (
  name: string,
  kind: ModelKind,
  steps: number,
  runs: number,
  warmSteps: number,
  warmRuns: number
): Effect.Effect<LoopThroughput, unknown> =>
  Effect.gen(function*() {
    const cold = yield* w1Run(warmSteps, kind)
    for (let i = 1; i < warmRuns; i++) yield* w1Run(warmSteps, kind)
    const results: Array<LoopRun> = []
    for (let i = 0; i < runs; i++) results.push(yield* w1Run(steps, kind))
    const medianMillis = median(results.map((r) => r.millis))
    return {
      name,
      steps,
      runs: results.map((r) => r.millis),
      medianMillis,
      stepsPerSecond: steps / (medianMillis / 1000),
      events: results[0]!.events,
      peakRss: Math.max(...results.map((r) => r.peakRss)),
      medianGrowth: median(results.map((r) => r.peakRss - r.baselineRss)),
      cold: { steps: warmSteps, millis: cold.millis, warmRuns }
    }
  })

// The floor: the same responses as plain objects, the tool a plain function, history a plain array.
interface FloorCall {
  readonly id: string
  readonly name: string
  readonly arguments: string
}

interface FloorResponse {
  readonly text?: string
  readonly toolCalls: ReadonlyArray<FloorCall>
}

type FloorMessage =
  | { readonly role: "user"; readonly text: string }
  | { readonly role: "assistant"; readonly response: FloorResponse }
  | { readonly role: "tool"; readonly callId: string; readonly content: string }

const floorResponses = (steps: number): ReadonlyArray<FloorResponse> => {
  const responses: Array<FloorResponse> = []
  for (let i = 1; i <= steps; i++) {
    responses.push({ toolCalls: [{ id: `call-${i}`, name: "echo", arguments: JSON.stringify({ i }) }] })
  }
  responses.push({ text: "done", toolCalls: [] })
  return responses
}

const floorTools: Record<string, (args: unknown) => string> = { echo: () => W1_ECHO_RESULT }

// The loop an agent library runs with no framework: ask the "model", run its calls, append to history.
const floorLoop = (responses: ReadonlyArray<FloorResponse>): ReadonlyArray<FloorMessage> => {
  const history: Array<FloorMessage> = [{ role: "user", text: "Call echo until the script ends." }]
  let next = 0
  while (true) {
    const response = responses[next++]!
    history.push({ role: "assistant", response })
    if (response.toolCalls.length === 0) return history
    for (const call of response.toolCalls) {
      const tool = floorTools[call.name]!
      history.push({ role: "tool", callId: call.id, content: tool(JSON.parse(call.arguments)) })
    }
  }
}

/**
 * The floor over repeated runs: responses built untimed, the loop timed; median µs per step.
 * Each run repeats the loop until 20 ms have passed so the clock's resolution does not matter.
 *
 * @since 0.1.0
 * @category benchmarks
 */
export const floor = (name: string, steps: number, runs: number): Effect.Effect<LoopThroughput> =>
  Effect.gen(function*() {
    const responses = floorResponses(steps)
    const once = Effect.sync(() => {
      const history = floorLoop(responses)
      if (history.length !== 2 * steps + 2) throw new Error(`floor history has ${history.length} messages`)
    })
    const perRun = (minimumMillis: number) =>
      Effect.gen(function*() {
        let loops = 0
        const [, millis] = yield* timed(Effect.gen(function*() {
          const start = yield* Clock.currentTimeNanos
          do {
            yield* once
            loops++
          } while (Number((yield* Clock.currentTimeNanos) - start) / 1e6 < minimumMillis)
        }))
        return millis / loops
      })
    yield* perRun(100)
    const durations: Array<number> = []
    for (let i = 0; i < runs; i++) durations.push(yield* perRun(20))
    const medianMillis = median(durations)
    return {
      name,
      steps,
      runs: durations,
      medianMillis,
      stepsPerSecond: steps / (medianMillis / 1000),
      events: 0,
      peakRss: currentRss(),
      medianGrowth: 0
    }
  })

/**
 * Latency percentiles of the sequential-turns benchmark, in ms.
 *
 * @since 0.1.0
 * @category models
 */
export interface TurnLatency {
  readonly turns: number
  /** From `followup` returning to the observer receiving that turn's `step/start`. */
  readonly afterReturn: ReadonlyArray<number>
  /** From calling `followup` to the observer receiving that turn's `step/start`. */
  readonly afterCall: ReadonlyArray<number>
  /** How long `followup` took to return (its transaction and the durable acknowledgement). */
  readonly followup: ReadonlyArray<number>
  /** Whole turns: `followup` called to `whenIdle` returning. */
  readonly turn: ReadonlyArray<number>
}

/**
 * `turns` sequential single-step turns on a fresh agent (each a `followup`, then `whenIdle`),
 * observed by a fiber reading `SessionLog.stream` that records when each `step/start` arrives.
 * Run `warmTurns` first on another agent.
 *
 * @since 0.1.0
 * @category benchmarks
 */
export const turnLatency = (turns: number, warmTurns: number): Effect.Effect<TurnLatency, unknown> =>
  Effect.flatMap(latencyRun(warmTurns), () => latencyRun(turns))

const nowMillis = Effect.map(Clock.currentTimeNanos, (ns) => Number(ns) / 1e6)

const latencyRun = (turns: number): Effect.Effect<TurnLatency, unknown> =>
  Effect.gen(function*() {
    const script: Array<ScriptEntry> = []
    for (let i = 1; i <= turns; i++) script.push(ScriptedModel.text(`answer ${i}`))
    const prompts = Array.from({ length: turns }, (_, i) =>
      userMessage({ id: `prompt-${i + 1}`, text: `question ${i + 1}` }))
    return yield* Effect.gen(function*() {
      const driver = yield* Driver
      const log = yield* SessionLog
      // stepStartAt[turn] = when the observer received the step/start of that turn.
      const stepStartAt = new Array<number>(turns + 1).fill(Number.NaN)
      const allSeen = yield* Deferred.make<void>()
      let seen = 0
      const observer = yield* log.stream(0).pipe(
        Stream.runForEach((event: SessionEvent) => {
          if (event.type !== "step/start") {
            return Effect.void
          }
          return Effect.flatMap(nowMillis, (now) => {
            stepStartAt[(event.data as { readonly turn: number }).turn] = now
            return ++seen === turns ? Deferred.succeed(allSeen, undefined) : Effect.void
          })
        }),
        Effect.fork
      )
      const called = new Array<number>(turns + 1)
      const returned = new Array<number>(turns + 1)
      const idle = new Array<number>(turns + 1)
      for (let turn = 1; turn <= turns; turn++) {
        called[turn] = yield* nowMillis
        yield* driver.followup(prompts[turn - 1]!)
        returned[turn] = yield* nowMillis
        yield* driver.whenIdle
        idle[turn] = yield* nowMillis
      }
      yield* Deferred.await(allSeen)
      yield* Fiber.interrupt(observer)
      const afterReturn: Array<number> = []
      const afterCall: Array<number> = []
      const followup: Array<number> = []
      const turn: Array<number> = []
      for (let t = 1; t <= turns; t++) {
        afterReturn.push(stepStartAt[t]! - returned[t]!)
        afterCall.push(stepStartAt[t]! - called[t]!)
        followup.push(returned[t]! - called[t]!)
        turn.push(idle[t]! - called[t]!)
      }
      return { turns, afterReturn, afterCall, followup, turn }
    }).pipe(Effect.provide(agentLayer("bench-latency", ScriptedModel.layer(script))))
  })

/**
 * The value at quantile `q` (0..1) of a non-empty list, nearest-rank.
 *
 * @since 0.1.0
 * @category statistics
 */
export const percentile = (values: ReadonlyArray<number>, q: number): number => {
  const sorted = [...values].sort((a, b) => a - b)
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))
  return sorted[rank]!
}
