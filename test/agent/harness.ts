/**
 * Scenario harness (SPEC 9): an agent over a memory store, a scripted model and tools, with
 * helpers to describe the durable log in the notation of SPEC 4.1.
 */
import { Chunk, Effect, Layer, Stream } from "effect"
import type { DriverEvent } from "../../src/domain/DriverEvent.js"
import type { EventOf, SessionEvent } from "../../src/domain/Event.js"
import { SessionId } from "../../src/domain/Ids.js"
import { userMessage } from "../../src/domain/Message.js"
import type { UserMessage } from "../../src/domain/Values.js"
import type { AgentOptions } from "../../src/layers/Agent.js"
import { Agent } from "../../src/layers/Agent.js"
import type { ScriptEntry } from "../../src/layers/ScriptedModel.js"
import { ScriptedModel } from "../../src/layers/ScriptedModel.js"
import { SessionLog } from "../../src/services/SessionLog.js"
import { SessionStore } from "../../src/services/SessionStore.js"
import type { ToolDefinition } from "../../src/services/Tools.js"
import { Tools } from "../../src/services/Tools.js"

/** A user-sourced message. */
export const user = (id: string, text = id): UserMessage => userMessage({ id, text })

/** A plugin-sourced context message. */
export const plugin = (id: string, text = id): UserMessage =>
  userMessage({ id, text, source: { kind: "plugin", plugin: "test" } })

/** The scenario harness layers: memory store, scripted model, tools, agent "s" with model p/m. */
export const scenario = (
  script: ReadonlyArray<ScriptEntry>,
  options: {
    readonly tools?: ReadonlyArray<ToolDefinition<any>>
    readonly maxParallelToolCalls?: number
    readonly agent?: AgentOptions
  } = {}
) =>
  Agent.layer({ sessionId: SessionId.make("s"), model: { provider: "p", model: "m" }, ...options.agent }).pipe(
    Layer.provideMerge(
      Layer.mergeAll(
        SessionStore.layerMemory,
        ScriptedModel.layer(script),
        Tools.layer({
          ...(options.tools !== undefined ? { tools: options.tools } : {}),
          ...(options.maxParallelToolCalls !== undefined ? { maxParallelToolCalls: options.maxParallelToolCalls } : {})
        })
      )
    )
  )

const target = (t: string) => (t === "next-turn" ? "nt" : "ns")

/** One event in the sequence notation of SPEC 4.1 (ids of messages shown, chunks by type). */
export const notation = (event: SessionEvent): string => {
  switch (event.type) {
    case "agent/inbox/spliced": {
      const d = (event as EventOf<"agent/inbox/spliced">).data
      const ids = d.inserted.map((m) => m.id).join(",")
      if (d.removedCount === undefined) return `INS(${target(d.target)},${d.start},[${ids}])`
      if (d.inserted.length > 0) return `REP(${target(d.target)},${d.start},[${ids}])`
      return `${d.outcome === "canceled" ? "CAN" : "CLM"}(${target(d.target)},${d.start},${d.removedCount})`
    }
    case "turn/start":
      return `TS(${(event as EventOf<"turn/start">).data.turn})`
    case "turn/end": {
      const d = (event as EventOf<"turn/end">).data
      const r = d.reason
      const reason = r.kind === "aborted" ? `aborted(${r.reason.kind})` : r.kind === "error" ? `error(${r.error.code})` : r.kind
      return `TE(${d.turn},${reason})`
    }
    case "step/start": {
      const d = (event as EventOf<"step/start">).data
      return `SS(${d.turn},${d.step})`
    }
    case "step/end": {
      const d = (event as EventOf<"step/end">).data
      return `SE(${d.turn},${d.step})`
    }
    case "user/message": {
      const e = event as EventOf<"user/message">
      return `${e.surfaceOp === "append" ? "UM" : "UM~"}(${e.data.id})`
    }
    case "request/header":
      return `RH(${(event as EventOf<"request/header">).data.reason})`
    case "assistant/chunk": {
      const c = (event as EventOf<"assistant/chunk">).data.chunk
      return c.type === "finish" ? `CH(finish ${c.finish.kind})` : `CH(${c.type})`
    }
    case "assistant/message":
      return (event as EventOf<"assistant/message">).data.interrupted === true ? "AM!" : "AM"
    case "tool/call":
      return `TC(${(event as EventOf<"tool/call">).data.callId})`
    case "tool/result": {
      const d = (event as EventOf<"tool/result">).data
      const code = d.error?.code
      const mark = code === "ABORTED_BEFORE_DISPATCH" ? "⊘" : code === "ABORTED" ? "✗" : code !== undefined ? "?" : ""
      return `TR${mark}(${d.message.content[0].toolCallId})`
    }
    case "llm/retry":
      return `RT(${(event as EventOf<"llm/retry">).data.attempt})`
    case "session/end-seed":
      return "ES"
    default:
      return event.type
  }
}

/** The whole log in notation. */
export const shape = Effect.map(Effect.flatMap(SessionLog, (log) => log.events), (events) => events.map(notation))

/** The texts of the log's user messages, in order. */
export const texts = Effect.map(Effect.flatMap(SessionLog, (log) => log.events), (events) =>
  events.filter((e) => e.type === "user/message").map((e) => {
    const block = (e as EventOf<"user/message">).data.content[0]
    return block?.type === "text" ? block.text : ""
  }))

/** Collects a stream's elements into an array (for finite streams). */
export const collect = <A>(stream: Stream.Stream<A>) => Effect.map(Stream.runCollect(stream), Chunk.toArray)

/** A live notification in the notation of SPEC 4.1 (`error(turn,step)` for errors). */
export const liveNotation = (e: DriverEvent): string => {
  switch (e.type) {
    case "agent/inbox/inserted":
      return `inserted(${e.message.id})`
    case "agent/inbox/claimed":
      return `claimed(${e.message.id},${e.turn})`
    case "agent/inbox/discarded":
      return `discarded(${e.message.id})`
    case "agent/status":
      return `status(${e.status})`
    case "agent/error":
      return `error(${e.turn},${e.step})`
  }
}

/** Lets every other ready fiber run for a while. */
export const settle = Effect.forEach(Array.from({ length: 200 }, (_, i) => i), () => Effect.yieldNow(), { discard: true })

/** Yields until `check` holds (every fiber involved runs without sleeping); dies if it never does. */
export const waitUntil = <R>(check: Effect.Effect<boolean, never, R>, what = "condition"): Effect.Effect<void, never, R> =>
  Effect.gen(function*() {
    for (let i = 0; i < 20_000; i++) {
      if (yield* check) return
      yield* Effect.yieldNow()
    }
    return yield* Effect.dieMessage(`waited in vain for ${what}`)
  })

/** The chunks and message of a completed `ScriptedModel.text` entry, in `notation`. */
export const TEXT = ["CH(block-start)", "CH(text-delta)", "CH(block-end)", "CH(finish stop)", "AM"]
/** Prompt `A` delivered to an idle agent: its insertion, `turn/start` and claim, in `notation`. */
export const OPEN_A = ["INS(nt,0,[A])", "TS(1)", "CLM(nt,0,1)"]
/** {@link OPEN_A}, then step 1 entering `A` and the initial request header. */
export const STEP_A = [...OPEN_A, "SS(1,1)", "UM(A)", "RH(initial)"]
/** The chunks of a response with `n` complete tool calls, its finish and its message, in `notation`. */
export const toolResponse = (n: number): Array<string> => [
  ...Array.from({ length: n }, () => ["CH(block-start)", "CH(tool-call-delta)", "CH(block-end)"]).flat(),
  "CH(finish stop)",
  "AM"
]
