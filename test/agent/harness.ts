/**
 * Scenario harness (SPEC 9): an agent over a memory store, a scripted model and tools, with
 * helpers to describe the durable log and the live notifications in the notation of SPEC 4.1, and
 * to wait for and record what an agent does.
 */
import { expect, it } from "@effect/vitest"
import { Chunk, Context, Deferred, Effect, FiberId, Layer, Queue, Ref, Stream } from "effect"
import type { Scope } from "effect"
import { checkLog } from "../../src/domain/Check.js"
import type { DriverEvent } from "../../src/domain/DriverEvent.js"
import type { EventOf, SessionEvent } from "../../src/domain/Event.js"
import { SessionId } from "../../src/domain/Ids.js"
import { userMessage } from "../../src/domain/Message.js"
import type { AgentStatus, Message, UserMessage } from "../../src/domain/Values.js"
import type { AgentOptions } from "../../src/layers/Agent.js"
import { Agent } from "../../src/layers/Agent.js"
import type { ScriptEntry } from "../../src/layers/ScriptedModel.js"
import { ScriptedModel } from "../../src/layers/ScriptedModel.js"
import { Driver } from "../../src/services/Driver.js"
import { Hooks } from "../../src/services/Hooks.js"
import { Inbox } from "../../src/services/Inbox.js"
import { PreStep } from "../../src/services/PreStep.js"
import { SessionLog } from "../../src/services/SessionLog.js"
import { MemoryStoreControl, SessionStore } from "../../src/services/SessionStore.js"
import type { ToolDefinition } from "../../src/services/Tools.js"
import { Tools } from "../../src/services/Tools.js"

/** A user-sourced message. */
export const user = (id: string, text = id): UserMessage => userMessage({ id, text })

/** A plugin-sourced context message. */
export const plugin = (id: string, text = id): UserMessage =>
  userMessage({ id, text, source: { kind: "plugin", plugin: "test" } })

/** The agent layer of the scenario harness, without its store: scripted model, tools, agent "s" (or `sessionId`, or resuming it) with model p/m. */
export const agentOver = (
  script: ReadonlyArray<ScriptEntry>,
  options: {
    readonly tools?: ReadonlyArray<ToolDefinition<any>>
    readonly maxParallelToolCalls?: number
    readonly agent?: AgentOptions
    readonly sessionId?: string
    readonly resume?: boolean
  } = {}
) => {
  const id = SessionId.make(options.sessionId ?? "s")
  const agent = Agent.layer({
    model: { provider: "p", model: "m" },
    invariants: "check",
    ...options.agent,
    ...(options.resume === true ? { resume: id } : { sessionId: id })
  })
  return agent.pipe(
    Layer.provideMerge(
      Layer.merge(
        ScriptedModel.layer(script),
        Tools.layer({
          ...(options.tools !== undefined ? { tools: options.tools } : {}),
          ...(options.maxParallelToolCalls !== undefined ? { maxParallelToolCalls: options.maxParallelToolCalls } : {})
        })
      )
    )
  )
}

/** The scenario harness layers (SPEC 9): {@link agentOver} over a memory store. */
export const scenario = (
  script: ReadonlyArray<ScriptEntry>,
  options: Parameters<typeof agentOver>[1] = {}
) => agentOver(script, options).pipe(Layer.provideMerge(SessionStore.layerMemory))

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
      const reason = r.kind === "aborted"
        ? `aborted(${r.reason.kind})`
        : r.kind === "error"
        ? `error(${r.error.code})`
        : r.kind
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

/** The in-memory log. */
export const events = Effect.flatMap(SessionLog, (log) => log.events)

/** The whole log in notation. */
export const shape = Effect.map(events, (es) => es.map(notation))

// Event data is read loosely where a test needs only a few fields of an event type.
const dataOf = (event: SessionEvent): { readonly [k: string]: any } => event.data as { readonly [k: string]: any }

/** Data of every event of one type, in log order. */
export const dataOfType = (type: string) => Effect.map(events, (es) => es.filter((e) => e.type === type).map(dataOf))

/** The `turn/end` reasons, in order. */
export const reasons = Effect.map(dataOfType("turn/end"), (ds) => ds.map((d) => d.reason))

/** Requests received by the scripted model. */
export const requests = Effect.flatMap(ScriptedModel, (s) => s.requests)

/** A message reduced to a readable token: text, `tool-call id`, `tool-result id`. */
export const token = (m: Message): string => {
  const block = m.content[0]
  if (block === undefined) return "(empty)"
  if (block.type === "text") return block.text
  if (block.type === "tool-result") return `tool-result ${block.toolCallId}`
  if (block.type === "tool-call") return `tool-call ${block.id}`
  return block.type
}

/** The texts of the log's user messages, in order. */
export const texts = Effect.map(events, (es) =>
  es.filter((e) => e.type === "user/message").map((e) => {
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
export const settle = Effect.forEach(Array.from({ length: 200 }, (_, i) => i), () => Effect.yieldNow(), {
  discard: true
})

/** Subscribes to live notifications; the returned effect drains what arrived so far. */
export const recordLive: Effect.Effect<Effect.Effect<ReadonlyArray<DriverEvent>>, never, Driver | Scope.Scope> = Effect
  .map(
    Effect.flatMap(Driver, (driver) => driver.subscribe),
    (queue) => Effect.map(Effect.zipRight(settle, Queue.takeAll(queue)), Chunk.toReadonlyArray)
  )

/** Starts collecting `statusChanges`; the returned effect reads the trace so far. */
export const recordStatus: Effect.Effect<Effect.Effect<ReadonlyArray<AgentStatus>>, never, Driver | Scope.Scope> =
  Effect.gen(
    function*() {
      const driver = yield* Driver
      const ref = yield* Ref.make<ReadonlyArray<AgentStatus>>([])
      yield* Effect.forkScoped(Stream.runForEach(driver.statusChanges, (s) => Ref.update(ref, (a) => [...a, s])))
      while ((yield* Ref.get(ref)).length === 0) yield* Effect.yieldNow()
      return ref
    }
  ).pipe(Effect.map((ref) => Effect.zipRight(settle, Ref.get(ref))))

/** Polls until `condition` holds (yielding between polls; no clock involved). */
export const until = <E, R>(condition: Effect.Effect<boolean, E, R>): Effect.Effect<void, E, R> =>
  Effect.gen(function*() {
    for (let i = 0; i < 10_000; i++) {
      if (yield* condition) return
      yield* Effect.yieldNow()
    }
    return yield* Effect.dieMessage("condition never held")
  })

/** Waits until the log holds an event matching `predicate`. */
export const untilEvent = (predicate: (e: SessionEvent) => boolean) =>
  until(Effect.map(events, (es) => es.some(predicate)))

/** `whenIdle`, then the closing check of every SPEC 9 scenario: `checkLog(events, {closed: true})` is `[]`. */
export const closeOut = Effect.gen(function*() {
  const driver = yield* Driver
  yield* driver.whenIdle
  yield* settle
  return checkLog(yield* events, { closed: true })
})

/** A gate a test opens itself (a `Deferred` outside any fiber). */
export const gate = () => Deferred.unsafeMake<void>(FiberId.none)

/** Opens a gate. */
export const open = (g: Deferred.Deferred<void>) => Deferred.succeed(g, undefined)

/** A string as a message id (test fixtures name their ids). */
export const asId = (s: string): UserMessage["id"] => s as UserMessage["id"]

/** Yields until `check` holds (every fiber involved runs without sleeping); dies if it never does. */
export const waitUntil = <R>(
  check: Effect.Effect<boolean, never, R>,
  what = "condition"
): Effect.Effect<void, never, R> =>
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

// ---------------------------------------------------------------------------------------------
// Readers of the log, the inbox and live notifications shared by the agent tests

/** The `turn/end` reasons among `es`, in order. */
export const turnEndsOf = (es: ReadonlyArray<SessionEvent>) =>
  es.filter((e) => e.type === "turn/end").map((e) => (e as EventOf<"turn/end">).data.reason)

/** The turn numbers of the log's `turn/start` events, in order. */
export const turnStarts = Effect.map(
  events,
  (es) => es.filter((e) => e.type === "turn/start").map((e) => (e as EventOf<"turn/start">).data.turn)
)

/** Whether the log holds an `assistant/chunk` of chunk type `type`. */
export const hasChunk = (type: string) =>
  Effect.map(
    events,
    (es) => es.some((e) => e.type === "assistant/chunk" && (e as EventOf<"assistant/chunk">).data.chunk.type === type)
  )

/** Whether the log in notation holds `entry`. */
export const shapeHas = (entry: string) => Effect.map(shape, (s) => s.includes(entry))

/** The tool calls and results of the log in notation, in order. */
export const toolShape = Effect.map(shape, (s) => s.filter((e) => e.startsWith("TC(") || e.startsWith("TR")))

/** {@link toolShape} as one line. */
export const toolLine = Effect.map(toolShape, (s) => s.join(" "))

/** The log in notation from the first `marker` on, without chunks, messages and request headers, as one line. */
export const from = (marker: string) =>
  Effect.map(
    shape,
    (s) => s.slice(s.indexOf(marker)).filter((x) => !x.startsWith("CH") && x !== "AM" && !x.startsWith("RH")).join(" ")
  )

/** The ids of `ms`, in order. */
export const ids = (ms: ReadonlyArray<{ readonly id: string }>) => ms.map((m) => m.id)

/** The pending ids of both inbox lists. */
export const pending = Effect.flatMap(
  Inbox,
  (inbox) => Effect.map(inbox.snapshot, (s) => ({ nt: ids(s.nextTurn), ns: ids(s.nextStep) }))
)

/** A recorder's notifications in {@link liveNotation}. */
export const liveNotations = (read: Effect.Effect<ReadonlyArray<DriverEvent>>) =>
  Effect.map(read, (es) => es.map(liveNotation))

/** A live notification in {@link liveNotation}, with every `agent/error` as just `error`. */
export const liveOf = (event: DriverEvent): string => event.type === "agent/error" ? "error" : liveNotation(event)

/** Records every live notification of `driver` from a forked fiber (survives disposal): all in {@link liveOf}, the discards, the errors. */
export const recordLiveOf = (driver: Context.Tag.Service<Driver>) =>
  Effect.gen(function*() {
    const queue = yield* driver.subscribe
    const seen = yield* Ref.make<ReadonlyArray<DriverEvent>>([])
    yield* Effect.forkScoped(
      Effect.forever(Effect.flatMap(Queue.take(queue), (e) => Ref.update(seen, (all) => [...all, e])))
    )
    return {
      all: Effect.map(Ref.get(seen), (all) => all.map(liveOf)),
      discarded: Effect.map(Ref.get(seen), (all) => all.map(liveOf).filter((s) => s.startsWith("discarded"))),
      errors: Effect.map(
        Ref.get(seen),
        (all) => all.filter((e): e is Extract<DriverEvent, { type: "agent/error" }> => e.type === "agent/error")
      )
    }
  })

/** whenIdle resolves, the status is idle and the closed log satisfies every rule of checkLog. */
export const idleAndChecked = Effect.gen(function*() {
  const driver = yield* Driver
  yield* driver.whenIdle
  yield* settle
  expect(yield* driver.status).toBe("idle")
  expect(checkLog(yield* events, { closed: true })).toEqual([])
})

/** The two modes of a cancel: broad, or keeping the inbox. */
export type Mode = "broad" | "keepInbox"
/** Both cancel modes. */
export const modes: ReadonlyArray<Mode> = ["broad", "keepInbox"]
/** The cancel options of `mode`. */
export const opts = (mode: Mode) => ({ keepInbox: mode === "keepInbox" })
/** Whether `mode` is broad. */
export const broad = (mode: Mode) => mode === "broad"
/** `entries` only in broad mode. */
export const ifBroad = (mode: Mode, ...entries: ReadonlyArray<string>) => (broad(mode) ? entries : [])

/** The services of an agent a test body reads; each is taken from the agent's context when the body names it. */
export interface AgentServices {
  readonly driver: Context.Tag.Service<Driver>
  readonly inbox: Context.Tag.Service<Inbox>
  readonly hooks: Context.Tag.Service<Hooks>
  readonly preStep: Context.Tag.Service<PreStep>
  readonly log: Context.Tag.Service<SessionLog>
  readonly control: Context.Tag.Service<MemoryStoreControl>
  readonly model: Context.Tag.Service<ScriptedModel>
}

const servicesOf = (ctx: Context.Context<never>): AgentServices => {
  const get = <I, S>(tag: Context.Tag<I, S>) => Context.get(ctx as unknown as Context.Context<I>, tag)
  return {
    get driver() {
      return get(Driver)
    },
    get inbox() {
      return get(Inbox)
    },
    get hooks() {
      return get(Hooks)
    },
    get preStep() {
      return get(PreStep)
    },
    get log() {
      return get(SessionLog)
    },
    get control() {
      return get(MemoryStoreControl)
    },
    get model() {
      return get(ScriptedModel)
    }
  }
}

/**
 * A scoped test of one agent: `body` runs as an `Effect.gen` body over the agent `layer` (usually a
 * {@link scenario}), given the agent's services.
 */
export const agentTest = (
  name: string,
  layer: Layer.Layer<any, any, never>,
  body: (services: AgentServices) => Generator<any, void, any>
) =>
  it.scoped(name, () =>
    Effect.provide(
      Effect.gen(function*() {
        const ctx = yield* Effect.context<never>()
        yield* Effect.gen(() => body(servicesOf(ctx)))
      }),
      layer
    ))
