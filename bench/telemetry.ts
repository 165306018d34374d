/**
 * W1 with telemetry off and on: the same agent loop (ScriptedModel, one `echo` tool call per step),
 * runs alternating between an agent without the Telemetry layer and one with `Telemetry.layer()`
 * following its log (spans to Effect's own tracer, nothing exported), so both see the same machine
 * load. Prints the median step time of each and their ratio.
 *
 * Run: `npx esbuild bench/telemetry.ts --bundle --platform=node --format=esm --packages=external
 * --outfile=node_modules/.cache/tiller-bench/telemetry.mjs && node node_modules/.cache/tiller-bench/telemetry.mjs [STEPS] [RUNS]`
 *
 * @since 0.1.0
 */
import { Effect, Layer } from "effect"
import { SessionId } from "../src/domain/Ids.js"
import { userMessage } from "../src/domain/Message.js"
import { Agent } from "../src/layers/Agent.js"
import { ScriptedModel } from "../src/layers/ScriptedModel.js"
import * as Telemetry from "../src/layers/Telemetry.js"
import { Driver } from "../src/services/Driver.js"
import { SessionLog } from "../src/services/SessionLog.js"
import { SessionStore } from "../src/services/SessionStore.js"
import { Tools } from "../src/services/Tools.js"
import { echoTool, w1Script } from "./loop.js"
import { median, timed } from "./util.js"

const steps = Number(process.argv[2] ?? 2_000)
const runs = Number(process.argv[3] ?? 7)

const run = (telemetry: boolean) =>
  Effect.gen(function*() {
    const agent = Agent.layer({
      sessionId: SessionId.make("bench-telemetry"),
      model: { provider: "bench", model: "scripted" },
      maxSteps: Number.POSITIVE_INFINITY
    }).pipe(
      Layer.provide(
        Layer.mergeAll(
          SessionStore.layerMemory,
          ScriptedModel.layer(w1Script(steps)),
          Tools.layer({ tools: [echoTool()] })
        )
      )
    )
    const layer = telemetry ? Layer.provideMerge(Telemetry.layer(), agent) : agent
    return yield* Effect.scoped(Effect.gen(function*() {
      const context = yield* Layer.build(layer)
      const [, millis] = yield* timed(
        Effect.gen(function*() {
          const d = yield* Driver
          const log = yield* SessionLog
          yield* d.followup(userMessage({ id: "bench-prompt", text: "Call echo until the script ends." }))
          yield* d.whenIdle
          yield* log.flush
        }).pipe(Effect.provide(context))
      )
      return millis
    }))
  })

const program = Effect.gen(function*() {
  yield* run(false)
  yield* run(true)
  const off: Array<number> = []
  const on: Array<number> = []
  for (let i = 0; i < runs; i++) {
    off.push(yield* run(false))
    on.push(yield* run(true))
  }
  const perStep = (ms: number) => (ms * 1000) / steps
  const offStep = perStep(median(off))
  const onStep = perStep(median(on))
  console.log(`W1 ${steps} steps x ${runs} runs (alternating)`)
  console.log(
    `telemetry off: ${offStep.toFixed(2)} µs/step (median; runs ${off.map((m) => m.toFixed(0)).join(", ")} ms)`
  )
  console.log(`telemetry on:  ${onStep.toFixed(2)} µs/step (median; runs ${on.map((m) => m.toFixed(0)).join(", ")} ms)`)
  console.log(`on / off: ${(onStep / offStep).toFixed(3)}`)
})

Effect.runPromise(program).catch((error) => {
  console.error(error)
  process.exit(1)
})
