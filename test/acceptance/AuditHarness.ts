/**
 * Acceptance harness: the scenario setup of SPEC 9 built from the package root only, with the
 * sequence notation of SPEC 4.1 for logs and live notifications.
 */
import { Chunk, Deferred, Effect, FiberId, Layer, Queue, Ref, Stream } from "effect"
import type { Scope } from "effect"
import type { AgentOptions, AgentStatus, DriverEvent, Message, ScriptEntry, SessionEvent, ToolDefinition, UserMessage } from "../../src/index.js"
import { Agent, checkLog, Driver, ScriptedModel, SessionId, SessionLog, SessionStore, Tools, userMessage } from "../../src/index.js"

/** A user-sourced message. */
export const user = (id: string, text = id): UserMessage => userMessage({ id, text })

/** A plugin-sourced message. */
export const plugin = (id: string, text = id): UserMessage =>
  userMessage({ id, text, source: { kind: "plugin", plugin: "test" } })

/** The agent layer of the SPEC 9 harness, without its store. */
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

/** The SPEC 9 harness: memory store, scripted model, tools, agent "s" on provider p / model m. */
export const scenario = (
  script: ReadonlyArray<ScriptEntry>,
  options: Parameters<typeof agentOver>[1] = {}
) => agentOver(script, options).pipe(Layer.provideMerge(SessionStore.layerMemory))

// Event data is read loosely: the notation needs only a few fields of each core type.
type Loose = { readonly [k: string]: any }
const dataOf = (event: SessionEvent): Loose => event.data as Loose

const target = (t: string) => (t === "next-turn" ? "nt" : "ns")

/** One event in the notation of SPEC 4.1. */
export const notation = (event: SessionEvent): string => {
  const d = dataOf(event)
  switch (event.type) {
    case "agent/inbox/spliced": {
      const ids = (d.inserted as ReadonlyArray<UserMessage>).map((m) => m.id).join(",")
      if (d.removedCount === undefined) return `INS(${target(d.target)},${d.start},[${ids}])`
      if (d.inserted.length > 0) return `REP(${target(d.target)},${d.start},[${ids}])`
      return `${d.outcome === "canceled" ? "CAN" : "CLM"}(${target(d.target)},${d.start},${d.removedCount})`
    }
    case "turn/start":
      return `TS(${d.turn})`
    case "turn/end": {
      const r = d.reason
      const reason = r.kind === "aborted" ? `aborted(${r.reason.kind})` : r.kind === "error" ? `error(${r.error.code})` : r.kind
      return `TE(${d.turn},${reason})`
    }
    case "step/start":
      return `SS(${d.turn},${d.step})`
    case "step/end":
      return `SE(${d.turn},${d.step})`
    case "user/message":
      return `${(event as { readonly surfaceOp?: unknown }).surfaceOp === "append" ? "UM" : "UM~"}(${d.id})`
    case "request/header":
      return `RH(${d.reason})`
    case "assistant/chunk": {
      const c = d.chunk
      return c.type === "finish" ? `CH(finish ${c.finish.kind})` : `CH(${c.type})`
    }
    case "assistant/message":
      return d.interrupted === true ? "AM!" : "AM"
    case "tool/call":
      return `TC(${d.callId})`
    case "tool/result": {
      const code = d.error?.code
      const mark = code === "ABORTED_BEFORE_DISPATCH" ? "⊘" : code === "ABORTED" ? "✗" : code !== undefined ? "?" : ""
      return `TR${mark}(${d.message.content[0].toolCallId})`
    }
    case "llm/retry":
      return `RT(${d.attempt})`
    case "session/end-seed":
      return "ES"
    default:
      return event.type
  }
}

/** The in-memory log. */
export const events = Effect.flatMap(SessionLog, (log) => log.events)

/** The in-memory log in notation. */
export const shape = Effect.map(events, (es) => es.map(notation))

/** Data of every event of one type, in log order. */
export const dataOfType = (type: string) =>
  Effect.map(events, (es) => es.filter((e) => e.type === type).map(dataOf))

/** The first text of every `user/message`, in log order. */
export const texts = Effect.map(dataOfType("user/message"), (ds) => ds.map((d) => d.content[0]?.text as string))

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

/** A live notification in the notation of SPEC 4.1. */
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

/** Lets every ready fiber run (notification delivery, observers). */
export const settle = Effect.repeatN(Effect.yieldNow(), 100)

/** Subscribes to live notifications; the returned effect drains what arrived so far. */
export const recordLive: Effect.Effect<Effect.Effect<ReadonlyArray<DriverEvent>>, never, Driver | Scope.Scope> = Effect.map(
  Effect.flatMap(Driver, (driver) => driver.subscribe),
  (queue) => Effect.map(Effect.zipRight(settle, Queue.takeAll(queue)), Chunk.toReadonlyArray)
)

/** Starts collecting `statusChanges`; the returned effect reads the trace so far. */
export const recordStatus: Effect.Effect<Effect.Effect<ReadonlyArray<AgentStatus>>, never, Driver | Scope.Scope> = Effect.gen(
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
export const untilEvent = (predicate: (e: SessionEvent) => boolean) => until(Effect.map(events, (es) => es.some(predicate)))

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
