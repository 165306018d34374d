/**
 * The tiller runner of the W1 comparison, one process per run: `node tiller.mjs <model> <store>
 * <steps> <warmSteps>`, with `<model>` `custom` (the smallest public custom `Model`), `scripted`
 * (`ScriptedModel`, tiller's test double) or `chat` (the OpenAI-compatible Chat Completions adapter
 * over `NodeHttpClient.layerUndici`, as the CLI builds it, against an in-process server, see
 * `chatServer.ts`) and `<store>` `memory` or `sqlite`. It runs W1 once untimed with `warmSteps`,
 * then once timed with `steps`, each on a fresh agent (`Agent.layer`, the model, one exclusive
 * `echo` tool) over a fresh store - the memory store, or a SQLite file in a temporary directory
 * removed afterwards - and prints one JSON line `{system, steps, ms, cpuMs, stepsPerSec,
 * peakRssBytes}`. The timed part is one `followup`, `whenIdle` and `SessionLog.flush`: every event
 * of the full log is durable in the store when the clock stops.
 *
 * @since 0.1.0
 */
import * as NodeHttpClient from "@effect/platform-node/NodeHttpClient"
import { Effect, Layer } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import type { ModelRequest } from "../../src/index.js"
import {
  Agent,
  Driver,
  Model,
  OpenAiCompatibleModel,
  ScriptedModel,
  SessionId,
  SessionLog,
  SessionStore,
  SqliteSessionStore,
  Tools,
  userMessage
} from "../../src/index.js"
import { answerChunks, echoCallChunks, echoTool, w1Script } from "../loop.js"
import { timed } from "../util.js"
import type { ChatServer } from "./chatServer.js"
import { startChatServer } from "./chatServer.js"
import type { W1Line } from "./line.js"
import { W1_ECHO_RESULT, W1_PROMPT } from "./line.js"
import type { TillerModel, TillerStore } from "./systems.js"
import { tillerSystemId } from "./systems.js"

const storeLayer = (store: TillerStore, directory: string, run: number): Layer.Layer<SessionStore, unknown> =>
  store === "memory"
    ? SessionStore.layerMemory
    : SqliteSessionStore.layer({ filename: path.join(directory, `w1-${run}.db`) })

// The W1 script as a custom `Model`: each request answered with the next response's chunks (built
// here, before the timed run), calling `onRequest` first.
const customModel = (steps: number, onRequest: (request: ModelRequest) => void): Layer.Layer<Model> => {
  const responses = Array.from({ length: steps }, (_, k) => echoCallChunks(k + 1))
  let answered = 0
  // the smallest public custom Model: every chunk of a response at once (see README, "Writing your own Model")
  return Layer.succeed(
    Model,
    Model.make((request) => {
      onRequest(request)
      return responses[answered++] ?? answerChunks
    })
  )
}

// `ScriptedModel` with the W1 script, calling `onRequest` before each request.
const scriptedModel = (steps: number, onRequest: (request: ModelRequest) => void): Layer.Layer<Model> =>
  Layer.effect(
    Model,
    Effect.map(Model, (scripted) =>
      Model.make((request) => {
        onRequest(request)
        return Model.responseOf(scripted, request)
      }))
  ).pipe(Layer.provide(ScriptedModel.layer(w1Script(steps))))

// The Chat Completions adapter against the in-process server, over the HTTP client the CLI uses.
const chatModel = (server: ChatServer): Layer.Layer<Model, unknown> =>
  OpenAiCompatibleModel.layer({ baseUrl: server.baseUrl, model: "w1" }).pipe(Layer.provide(NodeHttpClient.layerUndici))

// Whether the request's last message is the tool result answering call `id`.
const endsWithResult = (request: ModelRequest, id: string): boolean => {
  const last = request.messages[request.messages.length - 1]
  const block = last?.role === "user" ? last.content[0] : undefined
  if (block?.type !== "tool-result" || block.toolCallId !== id) return false
  const text = block.content[0]
  return text?.type === "text" && text.text === W1_ECHO_RESULT
}

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
 * unless the model answered `steps + 1` requests, each after the first with the previous step's
 * tool result as its last message, the tool ran `steps` times and the log ends with `turn/end`.
 * For `chat`, the server counts the requests and reads their messages.
 *
 * @since 0.1.0
 * @category benchmarks
 */
export const tillerW1Run = (
  model: TillerModel,
  store: TillerStore,
  directory: string,
  run: number,
  steps: number,
  server: ChatServer | undefined
): Effect.Effect<TillerTiming, unknown> =>
  Effect.gen(function*() {
    let calls = 0
    let requests = 0
    let sawResult = 0
    const onRequest = (request: ModelRequest) => {
      const n = ++requests
      if (n > 1 && endsWithResult(request, `call-${n - 1}`)) sawResult++
    }
    const echo = echoTool(() => calls++)
    server?.script(steps)
    const modelLayer = model === "custom"
      ? customModel(steps, onRequest)
      : model === "scripted"
      ? scriptedModel(steps, onRequest)
      : chatModel(server!)
    const agent = Agent.layer({
      sessionId: SessionId.make("bench-w1"),
      model: { provider: "bench", model },
      // W1 is one turn of N steps: no step limit, as in every peer's run.
      maxSteps: Number.POSITIVE_INFINITY
    }).pipe(
      Layer.provide(Layer.mergeAll(storeLayer(store, directory, run), modelLayer, Tools.layer({ tools: [echo] })))
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
      if (server !== undefined) ({ requests, sawResult } = server.counts())
      const problems: Array<string> = []
      if (calls !== steps) problems.push(`ran ${calls} tool calls, expected ${steps}`)
      if (requests !== steps + 1) problems.push(`sent ${requests} model requests, expected ${steps + 1}`)
      if (sawResult !== steps) {
        problems.push(`${sawResult} model requests ended with the previous tool result, expected ${steps}`)
      }
      const last = events[events.length - 1]
      if (last?.type !== "turn/end") problems.push(`log ends with ${last?.type}, expected turn/end`)
      if (problems.length > 0) {
        return yield* Effect.dieMessage(`tiller ${model} ${store} W1 run incomplete: ${problems.join("; ")}`)
      }
      return { ms, cpuMs: (used.user + used.system) / 1000 }
    }).pipe(Effect.provide(agent))
  })

const positiveInt = (text: string | undefined, name: string): number => {
  const n = Number(text)
  if (!Number.isInteger(n) || n < 1) throw new Error(`${name} must be a positive integer, got ${JSON.stringify(text)}`)
  return n
}

const parseModel = (text: string | undefined): TillerModel => {
  if (text === "custom" || text === "scripted" || text === "chat") return text
  throw new Error(`model must be custom, scripted or chat, got ${JSON.stringify(text)}`)
}

const parseStore = (text: string | undefined): TillerStore => {
  if (text === "memory" || text === "sqlite") return text
  throw new Error(`store must be memory or sqlite, got ${JSON.stringify(text)}`)
}

const main = Effect.gen(function*() {
  const model = parseModel(process.argv[2])
  const store = parseStore(process.argv[3])
  const steps = positiveInt(process.argv[4], "steps")
  const warmSteps = positiveInt(process.argv[5] ?? process.argv[4], "warm-up steps")
  const directory = yield* Effect.acquireRelease(
    Effect.sync(() => fs.mkdtempSync(path.join(os.tmpdir(), "tiller-w1-"))),
    (dir) => Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true }))
  )
  const server = model === "chat" ? yield* startChatServer : undefined
  yield* tillerW1Run(model, store, directory, 0, warmSteps, server)
  const { cpuMs, ms } = yield* tillerW1Run(model, store, directory, 1, steps, server)
  const line: W1Line = {
    system: tillerSystemId(model, store),
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
