/**
 * Compaction benchmarks (issue 28): one manual compaction of a long session (prune, and summarise
 * with an instant model), its time and the derived history before and after; and the time per step
 * of the agent loop on a compacted session of about a million events beside a fresh session's.
 *
 * @since 0.1.0
 */
import type { Context } from "effect"
import { Effect, Layer, Schema, Stream } from "effect"
import type { Message, StreamChunk } from "../src/index.js"
import {
  Agent,
  Compaction,
  Driver,
  Model,
  SessionId,
  SessionLog,
  SessionStore,
  Tool,
  Tools,
  userMessage
} from "../src/index.js"
import { median, timed } from "./util.js"

// A read result of 400 characters: about 100 tokens by the characters / 4 estimate.
const RESULT = "r".repeat(400)

const read = Tool.make("read", {
  description: "reads",
  parameters: Schema.Struct({ i: Schema.Number }),
  execute: () => Effect.succeed(RESULT)
})

const textChunks = (text: string, deltas: number): Array<StreamChunk> => {
  const out: Array<StreamChunk> = [{ type: "block-start", index: 0, block: "text" }]
  const piece = Math.ceil(text.length / deltas)
  for (let i = 0; i < deltas; i++) {
    out.push({ type: "text-delta", index: 0, text: text.slice(i * piece, (i + 1) * piece) })
  }
  out.push({ type: "block-end", index: 0 })
  return out
}

/**
 * A model calling `read` at every step of a turn of `plan.steps` steps, then answering; each
 * response streams `deltas` text deltas first (how a long session's log grows: mostly chunks). It
 * reports no usage, so the budget estimates the whole surface (characters / 4).
 */
const readingModel = (plan: { steps: number }, deltas: number) => {
  const preface = deltas === 0 ? [] : textChunks("Reading the next part of the file now. ".repeat(4), deltas)
  const answer = [...textChunks("done", 1), { type: "finish", finish: { kind: "stop" } } as StreamChunk]
  return Model.of({
    stream: (request) =>
      Stream.fromIterable(
        request.step > plan.steps ? answer : [
          ...preface,
          {
            type: "block-start",
            index: deltas === 0 ? 0 : 1,
            block: "tool-call",
            id: `c${request.turn}-${request.step}`,
            name: "read"
          },
          { type: "tool-call-delta", index: deltas === 0 ? 0 : 1, arguments: `{"i":${request.step}}` },
          { type: "block-end", index: deltas === 0 ? 0 : 1 },
          { type: "finish", finish: { kind: "stop" } }
        ] as ReadonlyArray<StreamChunk>
      )
  })
}

const summaryChunks: ReadonlyArray<StreamChunk> = [
  ...textChunks(
    "Goal: read the file.\nDecisions: none.\nState of the work: reading.\nFiles and tools touched: read.\nOpen questions: none.",
    1
  ),
  { type: "finish", finish: { kind: "stop" } }
]

/** A summary model that answers at once, whatever it is asked. */
const instantSummaryModel = Model.of({ stream: () => Stream.fromIterable(summaryChunks) })

/** What compaction acts on: prune old tool results, or summarise. */
export type CompactionKind = "prune" | "summary"

const agentLayer = (
  name: string,
  model: Context.Tag.Service<Model>,
  compaction: { readonly window: number; readonly kind: CompactionKind | "both" }
) =>
  Agent.layer({
    sessionId: SessionId.make(name),
    model: { provider: "bench", model: "reader" },
    // One turn of many read steps builds the session: no step limit.
    maxSteps: Number.POSITIVE_INFINITY,
    compaction: {
      contextWindow: compaction.window,
      summary: compaction.kind === "prune"
        ? false
        : { model: { service: instantSummaryModel, provider: "bench", model: "summary" } }
    }
  }).pipe(
    Layer.provide(Layer.mergeAll(SessionStore.layerMemory, Layer.succeed(Model, model), Tools.layer({ tools: [read] })))
  )

/** The derived history's size: messages, characters of text, and the budget's tokens. */
export interface HistorySize {
  readonly messages: number
  readonly characters: number
  readonly tokens: number
}

const charactersOf = (messages: ReadonlyArray<Message>): number => {
  let n = 0
  for (const m of messages) {
    for (const b of m.content) {
      if (b.type === "text" || b.type === "reasoning") n += b.text.length
      else if (b.type === "tool-call") n += b.arguments.length
      else if (b.type === "tool-result") { for (const c of b.content) if (c.type === "text") n += c.text.length }
    }
  }
  return n
}

const historySize = Effect.gen(function*() {
  const messages = yield* (yield* SessionLog).messages
  const usage = yield* (yield* Compaction).contextUsage
  return { messages: messages.length, characters: charactersOf(messages), tokens: usage.used }
})

/** One compaction of a session of about `events` events: its time, and the history before and after. */
export interface CompactionRun {
  readonly events: number
  readonly buildMillis: number
  readonly millis: number
  readonly appended: number
  readonly before: HistorySize
  readonly after: HistorySize
}

/**
 * Builds a session of about `events` events (one turn of read steps, nothing compacted: the
 * window is far away), then times one manual compaction of `kind`.
 *
 * @since 0.1.0
 * @category benchmarks
 */
export const compactionRun = (events: number, kind: CompactionKind): Effect.Effect<CompactionRun, unknown> =>
  Effect.scoped(Effect.gen(function*() {
    // About 9 events a step (W1's figure), and 2 + steps * 9 + the answer's.
    const steps = Math.round(events / 9)
    const context = yield* Layer.build(
      agentLayer(`compact-${kind}`, readingModel({ steps }, 0), { window: 1_000_000_000, kind })
    )
    return yield* Effect.gen(function*() {
      const driver = yield* Driver
      const log = yield* SessionLog
      const [, buildMillis] = yield* timed(
        Effect.zipRight(driver.followup(userMessage({ id: "go", text: "read it all" })), driver.whenIdle)
      )
      const length = (yield* log.events).length
      const before = yield* historySize
      const [, millis] = yield* timed(Effect.zipRight((yield* Compaction).compact, log.flush))
      const after = yield* historySize
      return { events: length, buildMillis, millis, appended: (yield* log.events).length - length, before, after }
    }).pipe(Effect.provide(context))
  }))

/** The loop's time per step on a fresh session and on a compacted long one. */
export interface StepCost {
  readonly bigEvents: number
  readonly buildMillis: number
  readonly compactions: number
  readonly surface: number
  readonly steps: number
  /** Per-run milliseconds of `steps` steps, alternating fresh and compacted. */
  readonly fresh: ReadonlyArray<number>
  readonly compacted: ReadonlyArray<number>
}

/**
 * Builds a session of about `events` events on a `window`-token window (compacting as it goes:
 * prunes and instant summaries), then times `runs` turns of `steps` read steps on it, each beside
 * the same turn on a fresh session with the same options.
 *
 * @since 0.1.0
 * @category benchmarks
 */
export const stepCost = (
  events: number,
  options: { readonly window: number; readonly steps: number; readonly runs: number; readonly deltas: number }
): Effect.Effect<StepCost, unknown> =>
  Effect.scoped(Effect.gen(function*() {
    // A step streams `deltas` chunks plus about 12 other events.
    const buildSteps = Math.round(events / (options.deltas + 12))
    // The steps of the next turn: the models read it when a request comes.
    const plan = { steps: buildSteps }
    const big = yield* Layer.build(
      agentLayer("big", readingModel(plan, options.deltas), { window: options.window, kind: "both" })
    )
    const turnOn = (context: Context.Context<Driver | SessionLog>, id: string) =>
      Effect.gen(function*() {
        const driver = yield* Driver
        yield* driver.followup(userMessage({ id, text: "read on" }))
        yield* driver.whenIdle
        yield* (yield* SessionLog).flush
      }).pipe(Effect.provide(context))
    const [, buildMillis] = yield* timed(turnOn(big, "build"))
    plan.steps = options.steps
    const fresh: Array<number> = []
    const compacted: Array<number> = []
    for (let run = 0; run < options.runs; run++) {
      const freshAgent = yield* Layer.build(
        agentLayer(`fresh-${run}`, readingModel(plan, options.deltas), { window: options.window, kind: "both" })
      )
      fresh.push((yield* timed(turnOn(freshAgent, `f${run}`)))[1])
      compacted.push((yield* timed(turnOn(big, `c${run}`)))[1])
    }
    const log = yield* SessionLog.pipe(Effect.provide(big))
    const all = yield* log.events
    return {
      bigEvents: all.length,
      buildMillis,
      compactions: all.filter((e) => e.type === "compaction/end").length,
      surface: (yield* log.surface).length,
      steps: options.steps,
      fresh,
      compacted
    }
  }))

/** The ratio of the compacted session's median step time to the fresh session's. */
export const stepRatio = (cost: StepCost): number => median(cost.compacted) / median(cost.fresh)
