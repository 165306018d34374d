/**
 * The crash-test child: opens one SQLite session (creating or resuming it), runs a scripted model
 * whose responses and tool bodies take a little real time, and lets concurrent callers deliver,
 * remove and cancel until the parent kills the process. Each operation is reported on stdout as one
 * JSON line only after its Effect has completed (SPEC D13: its events are then in storage).
 *
 * Usage: `child <database file> <session id> <create|resume> <seed> <id prefix>`.
 */
import { Effect, Layer, Ref, Schema } from "effect"
import type { ScriptEntry, ToolDefinition } from "../../src/index.js"
import {
  Agent,
  Driver,
  Inbox,
  MessageId,
  PgSessionStore,
  ScriptedModel,
  SessionId,
  SqliteSessionStore,
  Tool,
  Tools,
  userMessage
} from "../../src/index.js"
import type { Ack } from "./protocol.js"
import { mulberry32 } from "./protocol.js"

/** Sleeps `ms` wall-clock milliseconds (the child runs on the real clock). */
const pause = (ms: number) => Effect.sleep(`${ms} millis`)

/** A tool whose body sleeps, so kills land while bodies run. */
export const napTool: ToolDefinition<any> = Tool.make("nap", {
  description: "sleeps a few milliseconds",
  parameters: Schema.Struct({ ms: Schema.Number }),
  mode: "parallel",
  execute: ({ ms }) => Effect.as(pause(ms), `slept ${ms} ms`)
})

/** A long script mixing tool calls, reasoning and streamed text, each response taking a few ms. */
const script = (random: () => number): ReadonlyArray<ScriptEntry> =>
  Array.from({ length: 400 }, (_, i): ScriptEntry => {
    const ms = () => 1 + Math.floor(random() * 4)
    switch (i % 4) {
      case 0:
        return ScriptedModel.response({
          toolCalls: [{ id: `call-${i}`, name: "nap", arguments: { ms: ms() } }],
          awaitBefore: pause(ms())
        })
      case 1:
        return ScriptedModel.response({
          reasoning: ["thinking ", "about ", `${i}`],
          text: ["partial ", "answer ", `${i}`],
          awaitBefore: pause(ms()),
          during: pause(ms())
        })
      case 2:
        return ScriptedModel.response({
          text: "two naps",
          toolCalls: [
            { id: `call-${i}-a`, name: "nap", arguments: { ms: ms() } },
            { id: `call-${i}-b`, name: "nap", arguments: { ms: ms() } }
          ],
          during: pause(ms())
        })
      default:
        return ScriptedModel.text(`answer ${i}`, {
          deltas: ["ans", "wer ", `${i}`],
          awaitBefore: pause(ms()),
          during: pause(ms())
        })
    }
  })

/** Writes one protocol line; stdout on a pipe is written synchronously on Linux, so it is out before the next step. */
const report = (line: Ack | { readonly ready: true }) =>
  Effect.sync(() => {
    process.stdout.write(`${JSON.stringify(line)}\n`)
  })

/** One caller: picks an operation, runs it, reports it once it completed, waits a little, repeats. */
const caller = (name: string, prefix: string, random: () => number, acked: Ref.Ref<ReadonlyArray<string>>) =>
  Effect.gen(function*() {
    const driver = yield* Driver
    const inbox = yield* Inbox
    let n = 0
    while (true) {
      const pick = random()
      const id = `${prefix}-${name}-${n++}`
      if (pick < 0.3) {
        yield* driver.followup(userMessage({ id, text: `followup ${id}` }))
        yield* report({ op: "followup", id })
      } else if (pick < 0.55) {
        yield* driver.steer(userMessage({ id, text: `steer ${id}` }))
        yield* report({ op: "steer", id })
      } else if (pick < 0.8) {
        yield* driver.inject(userMessage({ id, text: `inject ${id}`, source: { kind: "plugin", plugin: "crash" } }))
        yield* report({ op: "inject", id })
      } else if (pick < 0.92) {
        const known = yield* Ref.get(acked)
        const target = known[Math.floor(random() * known.length)]
        if (target !== undefined) {
          const removed = yield* inbox.remove(MessageId.make(target))
          yield* report({ op: "remove", id: target, removed })
        }
      } else {
        const keepInbox = random() < 0.5
        yield* driver.cancel({ kind: "user" }, { keepInbox })
        yield* report({ op: "cancel", keepInbox })
      }
      if (pick < 0.8) yield* Ref.update(acked, (ids) => [...ids, id])
      yield* pause(Math.floor(random() * 6))
    }
  })

const main = Effect.gen(function*() {
  const [filename, session, mode, seedText, prefix] = process.argv.slice(2)
  if (
    filename === undefined || session === undefined || (mode !== "create" && mode !== "resume") || prefix === undefined
  ) {
    return yield* Effect.dieMessage(
      "usage: child <database file or postgres:// URL> <session id> <create|resume> <seed> <id prefix>"
    )
  }
  const random = mulberry32(Number(seedText))
  const sessionId = SessionId.make(session)
  const agent = Agent.layer({
    ...(mode === "create" ? { sessionId } : { resume: sessionId }),
    model: { provider: "scripted", model: "crash" }
  }).pipe(
    Layer.provide(Layer.mergeAll(
      filename.startsWith("postgres://")
        ? PgSessionStore.layer({ url: filename })
        : SqliteSessionStore.layer({ filename }),
      ScriptedModel.layer(script(random)),
      Tools.layer({ tools: [napTool] })
    ))
  )
  yield* Effect.gen(function*() {
    yield* report({ ready: true })
    const acked = yield* Ref.make<ReadonlyArray<string>>([])
    yield* Effect.all(
      ["a", "b", "c"].map((name) => caller(name, prefix, mulberry32(Math.floor(random() * 2 ** 32)), acked)),
      { concurrency: "unbounded", discard: true }
    )
  }).pipe(Effect.provide(agent))
})

Effect.runPromise(main).then(
  () => process.exit(0),
  (error) => {
    process.stderr.write(`crash child failed: ${String(error)}\n`)
    process.exit(2)
  }
)
