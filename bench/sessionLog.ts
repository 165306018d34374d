/**
 * SessionLog benchmarks: `assistant/chunk` appends the way the agent loop makes them (trusted drafts
 * committed with `appendDrafts` in STM transactions of 1 or 100 events, durable at the end),
 * public `SessionLog.append` of an ignorable extension event (each acknowledged after durability),
 * and the memory of a session holding a million chunk events.
 *
 * @since 0.1.0
 */
import { Effect, STM } from "effect"
import { Inbox, SessionLog, userMessage } from "../src/index.js"
import { claimSTM } from "../src/internal/state/InboxOps.js"
import type { Draft } from "../src/internal/state/SessionState.js"
import { appendDrafts, awaitDurable, commitLogged, SessionState } from "../src/internal/state/SessionState.js"
import type { MemorySample, Run } from "./util.js"
import { currentRss, memorySample, sessionLayer, timed } from "./util.js"

const TURN = 1
const STEP = 1
const ATTEMPT = 1

// A fresh draft per event, as the loop builds one per received stream chunk.
const textDelta = (i: number): Draft => ({
  type: "assistant/chunk",
  data: { turn: TURN, step: STEP, attempt: ATTEMPT, chunk: { type: "text-delta", index: 0, text: ` tok${i}` } }
})

/**
 * Opens step 1 of turn 1 through the loop's path: a prompt delivered with `Inbox.append`, then one
 * transaction with `turn/start`, the claim, `step/start`, the entered message, `request/header`
 * and a text `block-start` chunk. Returns the seq of the last event.
 *
 * @since 0.1.0
 * @category setup
 */
export const openStep: Effect.Effect<number, unknown, SessionState | Inbox> = Effect.gen(function*() {
  const state = yield* SessionState
  const inbox = yield* Inbox
  const prompt = userMessage({ id: "bench-prompt", text: "Write a long answer." })
  yield* inbox.append("next-turn", prompt)
  const appended = yield* commitLogged(
    state,
    STM.gen(function*() {
      yield* appendDrafts(state, [{ type: "turn/start", data: { turn: TURN } }], true)
      yield* claimSTM(state, TURN, true)
      return yield* appendDrafts(state, [
        { type: "step/start", data: { turn: TURN, step: STEP } },
        { type: "user/message", data: prompt, surfaceOp: "append" },
        {
          type: "request/header",
          data: { header: { provider: "bench", model: "bench-1", tools: [] }, reason: "initial" }
        },
        {
          type: "assistant/chunk",
          data: { turn: TURN, step: STEP, attempt: ATTEMPT, chunk: { type: "block-start", index: 0, block: "text" } }
        }
      ], true)
    })
  )
  return appended[appended.length - 1]!.seq
})

/**
 * Appends `events` text-delta chunks in transactions of `perTransaction` trusted drafts; returns the
 * seq of the last one. `onProgress` is called after each transaction with the events appended.
 *
 * @since 0.1.0
 * @category workloads
 */
export const appendChunks = (
  events: number,
  perTransaction: number,
  onProgress?: (appended: number) => void
): Effect.Effect<number, unknown, SessionState> =>
  Effect.gen(function*() {
    const state = yield* SessionState
    let last = -1
    for (let done = 0; done < events; done += perTransaction) {
      const size = Math.min(perTransaction, events - done)
      const drafts = new Array<Draft>(size)
      for (let j = 0; j < size; j++) drafts[j] = textDelta(done + j)
      const appended = yield* commitLogged(state, appendDrafts(state, drafts, true))
      last = appended[appended.length - 1]!.seq
      onProgress?.(done + size)
    }
    return last
  })

/**
 * One run of the chunk benchmark on a fresh session: setup untimed; the appends and the wait until
 * the last one is durable timed.
 *
 * @since 0.1.0
 * @category benchmarks
 */
export const chunkAppendRun = (events: number, perTransaction: number): Effect.Effect<Run, unknown> =>
  Effect.gen(function*() {
    const state = yield* SessionState
    yield* openStep
    const [, millis] = yield* timed(
      Effect.flatMap(appendChunks(events, perTransaction), (last) => awaitDurable(state, last))
    )
    return { operations: events, millis }
  }).pipe(Effect.provide(sessionLayer(`bench-chunks-${perTransaction}`)))

/**
 * One run of public `SessionLog.append` of ignorable extension events, one at a time, each
 * acknowledged after durability.
 *
 * @since 0.1.0
 * @category benchmarks
 */
export const publicAppendRun = (events: number): Effect.Effect<Run, unknown> =>
  Effect.gen(function*() {
    const log = yield* SessionLog
    const [, millis] = yield* timed(Effect.gen(function*() {
      for (let i = 0; i < events; i++) {
        yield* log.append({ type: "bench/tick", data: { i }, ignorable: true })
      }
    }))
    return { operations: events, millis }
  }).pipe(Effect.provide(sessionLayer("bench-public-append")))

/**
 * Memory of a session holding chunk events.
 *
 * @since 0.1.0
 * @category models
 */
export interface ChunkMemory {
  readonly events: number
  /** Before the session is opened, after GC. */
  readonly baseline: MemorySample
  /** With every event appended and durable, session still open, after GC. */
  readonly holding: MemorySample
  /** The highest RSS sampled while appending (every 10,000 events, no GC). */
  readonly peakRss: number
  /** After the session is closed, after GC. */
  readonly released: MemorySample
  readonly appendMillis: number
}

/**
 * Appends `events` chunks in transactions of 100 and samples memory before, during, holding and
 * after closing the session.
 *
 * @since 0.1.0
 * @category benchmarks
 */
export const chunkMemory = (events: number): Effect.Effect<ChunkMemory, unknown> =>
  Effect.gen(function*() {
    const baseline = yield* memorySample
    let peakRss = currentRss()
    const sampleEvery = 10_000
    const [holding, appendMillis] = yield* Effect.gen(function*() {
      const state = yield* SessionState
      yield* openStep
      const [last, millis] = yield* timed(appendChunks(events, 100, (appended) => {
        if (appended % sampleEvery === 0) peakRss = Math.max(peakRss, currentRss())
      }))
      yield* awaitDurable(state, last)
      peakRss = Math.max(peakRss, currentRss())
      // The session (its log, fold and store) stays open, so reachable, until this effect ends.
      return [yield* memorySample, millis] as const
    }).pipe(Effect.provide(sessionLayer("bench-memory")))
    const released = yield* memorySample
    return { events, baseline, holding, peakRss, released, appendMillis }
  })
