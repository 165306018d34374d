/**
 * The tiller runner of the W1 comparison, one process per run: `node tiller.mjs <store> <steps>
 * <warmSteps>` with `<store>` `memory` or `sqlite`. It runs W1 once untimed with `warmSteps`, then
 * once timed with `steps`, each on a fresh agent (`Agent.layer`, `ScriptedModel` with the W1
 * script, one exclusive `echo` tool) over a fresh store - the memory store, or a SQLite file in a
 * temporary directory removed afterwards - and prints one JSON line
 * `{system, steps, ms, cpuMs, stepsPerSec, peakRssBytes}`. The timed part is one `followup`, `whenIdle`
 * and `SessionLog.flush`: every event of the full log is durable in the store when the clock stops.
 *
 * @since 0.1.0
 */
import { Effect, Layer } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import {
  Agent,
  Driver,
  Model,
  ScriptedModel,
  SessionId,
  SessionLog,
  SessionStore,
  SqliteSessionStore,
  Tools,
  userMessage
} from "../../src/index.js"
import { echoTool, w1Script } from "../loop.js"
import { timed } from "../util.js"
import type { W1Line } from "./line.js"
import { W1_PROMPT } from "./line.js"

/**
 * The stores tiller runs W1 on.
 *
 * @since 0.1.0
 * @category models
 */
export type TillerStore = "memory" | "sqlite"

const storeLayer = (store: TillerStore, directory: string, run: number): Layer.Layer<SessionStore, unknown> =>
  store === "memory"
    ? SessionStore.layerMemory
    : SqliteSessionStore.layer({ filename: path.join(directory, `w1-${run}.db`) })

// The W1 script's model, counting the requests it answers.
const countedModel = (steps: number, onRequest: () => void): Layer.Layer<Model> =>
  Layer.effect(
    Model,
    Effect.map(Model, (scripted) =>
      Model.of({
        stream: (request) => {
          onRequest()
          return scripted.stream(request)
        }
      }))
  ).pipe(Layer.provide(ScriptedModel.layer(w1Script(steps))))

/**
 * The figures of one timed run: wall-clock and CPU milliseconds.
 *
 * @since 0.1.0
 * @category models
 */
export interface TillerTiming {
  readonly ms: number
  readonly cpuMs: number
}

/**
 * One W1 run on a fresh agent over a fresh store: the timed wall-clock and CPU milliseconds. Fails
 * unless the model answered `steps + 1` requests, the tool ran `steps` times and the log ends with
 * `turn/end`.
 *
 * @since 0.1.0
 * @category benchmarks
 */
export const tillerW1Run = (
  store: TillerStore,
  directory: string,
  run: number,
  steps: number
): Effect.Effect<TillerTiming, unknown> =>
  Effect.gen(function*() {
    let calls = 0
    let requests = 0
    const echo = echoTool(() => calls++)
    const agent = Agent.layer({ sessionId: SessionId.make("bench-w1"), model: { provider: "bench", model: "scripted" } }).pipe(
      Layer.provide(
        Layer.mergeAll(
          storeLayer(store, directory, run),
          countedModel(steps, () => requests++),
          Tools.layer({ tools: [echo] })
        )
      )
    )
    const prompt = userMessage({ id: "bench-prompt", text: W1_PROMPT })
    return yield* Effect.gen(function*() {
      const driver = yield* Driver
      const log = yield* SessionLog
      const cpu = process.cpuUsage()
      const [, ms] = yield* timed(Effect.gen(function*() {
        yield* driver.followup(prompt)
        yield* driver.whenIdle
        yield* log.flush
      }))
      const used = process.cpuUsage(cpu)
      const events = yield* log.events
      if (calls !== steps) return yield* Effect.dieMessage(`tiller ran ${calls} tool calls, expected ${steps}`)
      if (requests !== steps + 1) return yield* Effect.dieMessage(`tiller sent ${requests} requests, expected ${steps + 1}`)
      const last = events[events.length - 1]
      if (last?.type !== "turn/end") return yield* Effect.dieMessage(`tiller log ends with ${last?.type}, expected turn/end`)
      return { ms, cpuMs: (used.user + used.system) / 1000 }
    }).pipe(Effect.provide(agent))
  })

const positiveInt = (text: string | undefined, name: string): number => {
  const n = Number(text)
  if (!Number.isInteger(n) || n < 1) throw new Error(`${name} must be a positive integer, got ${JSON.stringify(text)}`)
  return n
}

const parseStore = (text: string | undefined): TillerStore => {
  if (text === "memory" || text === "sqlite") return text
  throw new Error(`store must be memory or sqlite, got ${JSON.stringify(text)}`)
}

const main = Effect.gen(function*() {
  const store = parseStore(process.argv[2])
  const steps = positiveInt(process.argv[3], "steps")
  const warmSteps = positiveInt(process.argv[4] ?? process.argv[3], "warm-up steps")
  const directory = yield* Effect.acquireRelease(
    Effect.sync(() => fs.mkdtempSync(path.join(os.tmpdir(), "tiller-w1-"))),
    (dir) => Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true }))
  )
  yield* tillerW1Run(store, directory, 0, warmSteps)
  const { cpuMs, ms } = yield* tillerW1Run(store, directory, 1, steps)
  const line: W1Line = {
    system: `tiller-${store}`,
    steps,
    ms,
    cpuMs,
    stepsPerSec: steps / (ms / 1000),
    // maxRSS is in kilobytes: the process's peak over its whole life, warm-up included.
    peakRssBytes: process.resourceUsage().maxRSS * 1024
  }
  yield* Effect.sync(() => process.stdout.write(`${JSON.stringify(line)}\n`))
})

Effect.runPromise(Effect.scoped(main)).catch((error: unknown) => {
  process.stderr.write(`${error instanceof Error ? error.stack ?? error.message : String(error)}\n`)
  process.exitCode = 1
})
