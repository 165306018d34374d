/**
 * Storage benchmarks on the SQLite store, each beside a raw better-sqlite3 baseline that writes or
 * reads identical rows in an identical `events` table (WAL, `synchronous = NORMAL`, as the store):
 * W2 durable ingest of `assistant/chunk` events, W3 acknowledged injects from 100 concurrent
 * callers into 10 sessions, W4 resume of 10^4..10^6-event sessions.
 *
 * @since 0.1.0
 */
import { Clock, Context, Effect, Layer } from "effect"
import type { Scope } from "effect"
import { createRequire } from "node:module"
import * as path from "node:path"
import type { SessionEvent, SessionHeader, UserMessage } from "../src/index.js"
import {
  Agent,
  Driver,
  LOG_FORMAT_VERSION,
  ScriptedModel,
  SessionId,
  SessionLog,
  Sessions,
  SessionStore,
  SqliteSessionStore,
  Tools,
  userMessage
} from "../src/index.js"
import { awaitDurable, SessionState } from "../src/internal/state/SessionState.js"
import * as SqliteStore from "../src/layers/SqliteStore.js"
import { appendChunks, openStep } from "./sessionLog.js"
import { alternating, sessionLayer, timed, withTempDir } from "./util.js"

// The slice of better-sqlite3 12 the baselines use.
interface RawStatement {
  readonly run: (...params: ReadonlyArray<unknown>) => unknown
  readonly get: (...params: ReadonlyArray<unknown>) => unknown
  readonly all: (...params: ReadonlyArray<unknown>) => Array<unknown>
  readonly pluck: (on: boolean) => RawStatement
}

interface RawDatabase {
  readonly prepare: (sql: string) => RawStatement
  readonly exec: (sql: string) => void
  readonly pragma: (sql: string) => unknown
  readonly transaction: <A extends Array<unknown>>(fn: (...args: A) => void) => (...args: A) => void
  readonly close: () => void
}

const BetterSqlite3 = createRequire(import.meta.url)("better-sqlite3") as new(filename: string) => RawDatabase

// The store's own table (its migration "1_sessions_and_events"), so both sides write the same B-tree.
const CREATE_EVENTS = "CREATE TABLE events (session_id TEXT NOT NULL, seq INTEGER NOT NULL, row TEXT NOT NULL, " +
  "PRIMARY KEY (session_id, seq)) STRICT"
const insertRowsSql = (rows: number): string =>
  `INSERT INTO events (session_id, seq, row) VALUES ${"(?, ?, ?), ".repeat(rows - 1)}(?, ?, ?)`

/** `PRAGMA synchronous` of a W3 run, the same on both sides: the store's default, or a commit that syncs the WAL. */
export type Synchronous = "NORMAL" | "FULL"

/** Opens a raw connection in the current scope with the store's pragmas; `fresh` creates the table. */
const rawDatabase = (
  filename: string,
  fresh: boolean,
  synchronous: Synchronous = "NORMAL"
): Effect.Effect<RawDatabase, never, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.sync(() => {
      const db = new BetterSqlite3(filename)
      db.pragma("journal_mode = WAL")
      db.pragma(`synchronous = ${synchronous}`)
      if (fresh) db.exec(CREATE_EVENTS)
      return db
    }),
    (db) => Effect.sync(() => db.close())
  )

/**
 * One stored row, decoded to the event object a raw writer would hold before serialising it.
 *
 * @since 0.1.0
 * @category models
 */
export interface StoredRow {
  readonly sessionId: string
  readonly seq: number
  readonly event: { readonly type: string; readonly data?: unknown }
}

/** Every event row of a store file, in insertion order, filtered by `keep`. */
const readRows = (filename: string, keep: (row: StoredRow) => boolean): Effect.Effect<Array<StoredRow>> =>
  Effect.scoped(
    Effect.map(
      rawDatabase(filename, false),
      (db) =>
        (db.prepare("SELECT session_id, seq, row FROM events ORDER BY rowid").all() as Array<
          { readonly session_id: string; readonly seq: number; readonly row: string }
        >)
          .map((r): StoredRow => ({ sessionId: r.session_id, seq: r.seq, event: JSON.parse(r.row) }))
          .filter(keep)
    )
  )

const nowMillis = Effect.map(Clock.currentTimeNanos, (ns) => Number(ns) / 1e6)

const expectCount = (what: string, found: number, expected: number): Effect.Effect<void> =>
  found === expected ? Effect.void : Effect.dieMessage(`${what}: found ${found} rows, expected ${expected}`)

/** Dies unless a raw baseline's file holds `expected` rows (a run that lost rows would look faster). */
const expectStored = (db: RawDatabase, what: string, expected: number): Effect.Effect<void> =>
  Effect.suspend(() =>
    expectCount(what, (db.prepare("SELECT count(*) AS n FROM events").get() as { readonly n: number }).n, expected)
  )

// -------------------------------------------------------------------------------------------------
// W2: durable ingest
// -------------------------------------------------------------------------------------------------

/**
 * W2 figures: per run, the ms tiller and the raw baseline took for the same rows.
 *
 * @since 0.1.0
 * @category models
 */
export interface IngestFigures {
  readonly events: number
  /** Events per tiller STM transaction (the loop's chunk batching). */
  readonly perTransaction: number
  /** Rows per raw transaction, written by one multi-row INSERT. */
  readonly rawRowsPerTransaction: number
  readonly tillerMillis: ReadonlyArray<number>
  readonly rawMillis: ReadonlyArray<number>
}

const W2_PER_TRANSACTION = 100
const RAW_ROWS_PER_TRANSACTION = 1_000

const isTextDelta = (row: StoredRow): boolean =>
  row.event.type === "assistant/chunk" &&
  (row.event.data as { readonly chunk?: { readonly type?: unknown } }).chunk?.type === "text-delta"

/** One tiller run on a fresh database: the step is opened untimed; the chunks and the wait until the last is durable are timed. */
const ingestTillerRun = (filename: string, events: number): Effect.Effect<number, unknown> =>
  Effect.gen(function*() {
    const state = yield* SessionState
    yield* openStep
    const [, millis] = yield* timed(
      Effect.flatMap(appendChunks(events, W2_PER_TRANSACTION), (last) => awaitDurable(state, last))
    )
    return millis
  }).pipe(Effect.provide(sessionLayer("bench-w2", {}, SqliteSessionStore.layer({ filename }))))

/** One raw run on a fresh database: serialise each event and insert the rows 1,000 per transaction. */
const ingestRawRun = (filename: string, rows: ReadonlyArray<StoredRow>): Effect.Effect<number> =>
  Effect.scoped(Effect.gen(function*() {
    const db = yield* rawDatabase(filename, true)
    const full = db.prepare(insertRowsSql(RAW_ROWS_PER_TRANSACTION))
    const rest = rows.length % RAW_ROWS_PER_TRANSACTION
    const tail = rest === 0 ? full : db.prepare(insertRowsSql(rest))
    const insertBatch = db.transaction((offset: number, size: number) => {
      const params = new Array<unknown>(size * 3)
      for (let i = 0; i < size; i++) {
        const row = rows[offset + i]!
        params[3 * i] = row.sessionId
        params[3 * i + 1] = row.seq
        params[3 * i + 2] = JSON.stringify(row.event)
      }
      ;(size === RAW_ROWS_PER_TRANSACTION ? full : tail).run(...params)
    })
    const [, millis] = yield* timed(Effect.sync(() => {
      for (let offset = 0; offset < rows.length; offset += RAW_ROWS_PER_TRANSACTION) {
        insertBatch(offset, Math.min(RAW_ROWS_PER_TRANSACTION, rows.length - offset))
      }
    }))
    return millis
  }))

/**
 * W2: `events` text-delta chunks through the session log into a fresh SQLite file (100 per STM
 * transaction, durable at the end) against the raw baseline inserting the identical rows (taken
 * from the warm-up run's file). One untimed warm-up of each, then `runs` runs alternating which
 * side goes first.
 *
 * @since 0.1.0
 * @category benchmarks
 */
export const ingest = (events: number, runs: number): Effect.Effect<IngestFigures, unknown> =>
  Effect.gen(function*() {
    const rows = yield* withTempDir((dir) => {
      const filename = path.join(dir, "tiller.db")
      return Effect.zipRight(ingestTillerRun(filename, events), readRows(filename, isTextDelta))
    })
    yield* expectCount("W2 rows", rows.length, events)
    yield* withTempDir((dir) => ingestRawRun(path.join(dir, "raw.db"), rows))
    const [tillerMillis, rawMillis] = yield* alternating(
      runs,
      withTempDir((dir) => ingestTillerRun(path.join(dir, "tiller.db"), events)),
      withTempDir((dir) => ingestRawRun(path.join(dir, "raw.db"), rows))
    )
    return {
      events,
      perTransaction: W2_PER_TRANSACTION,
      rawRowsPerTransaction: RAW_ROWS_PER_TRANSACTION,
      tillerMillis,
      rawMillis
    }
  })

// -------------------------------------------------------------------------------------------------
// W3: acknowledged injects
// -------------------------------------------------------------------------------------------------

/**
 * One run of W3 on one side: its duration and every acknowledgement's latency in ms.
 *
 * @since 0.1.0
 * @category models
 */
export interface InjectRun {
  readonly millis: number
  readonly latencies: ReadonlyArray<number>
}

/**
 * W3 figures: per run, tiller's and the raw baseline's duration and latencies.
 *
 * @since 0.1.0
 * @category models
 */
export interface InjectFigures {
  /** `PRAGMA synchronous` on both sides. */
  readonly synchronous: Synchronous
  readonly callers: number
  readonly sessions: number
  /** Acknowledged injects per run (callers x injects per caller). */
  readonly injects: number
  /** Untimed warm-up runs of each side before the timed ones. */
  readonly warmRuns: number
  /** The first warm-up run of each side: the cold-JIT figure, shown beside the timed runs. */
  readonly coldTiller: InjectRun
  readonly coldRaw: InjectRun
  readonly tiller: ReadonlyArray<InjectRun>
  readonly raw: ReadonlyArray<InjectRun>
  /** The same rows through a plain-JavaScript group commit (no Effect, no validation): the floor of any implementation. */
  readonly floor: ReadonlyArray<InjectRun>
  /** The same callers acknowledged by a writer fiber per session with nothing stored: the floor of an Effect acknowledgement. */
  readonly effectFloor: ReadonlyArray<InjectRun>
}

/** The sessions of a W3 tiller run: created on a fresh database through `Sessions`, nothing to run. */
const injectLayer = (filename: string, synchronous: Synchronous) =>
  Sessions.layer({ idleTimeToLive: "1 minute", model: { provider: "bench", model: "none" } }).pipe(
    Layer.provide(
      Layer.mergeAll(SqliteSessionStore.layer({ filename, synchronous }), ScriptedModel.layer([]), Tools.layer())
    )
  )

const range = (n: number): Array<number> => Array.from({ length: n }, (_, i) => i)

/** One tiller run: the sessions are opened untimed; the callers' `Driver.inject` calls are timed. */
const injectTillerRun = (
  filename: string,
  callers: number,
  sessionCount: number,
  perCaller: number,
  synchronous: Synchronous
): Effect.Effect<InjectRun, unknown> =>
  Effect.scoped(Effect.gen(function*() {
    const sessions = yield* Sessions
    const drivers = yield* Effect.forEach(
      range(sessionCount),
      (i) => Effect.map(sessions.open(SessionId.make(`bench-w3-${i}`)), (context) => Context.get(context, Driver))
    )
    const messages: Array<Array<UserMessage>> = range(callers).map((c) =>
      range(perCaller).map((k) => userMessage({ id: `inject-${c}-${k}`, text: `context ${c}.${k}` }))
    )
    const latencies = new Array<number>(callers * perCaller)
    const [, millis] = yield* timed(Effect.forEach(range(callers), (c) =>
      Effect.gen(function*() {
        const driver = drivers[c % sessionCount]!
        for (let k = 0; k < perCaller; k++) {
          const start = yield* nowMillis
          yield* driver.inject(messages[c]![k]!)
          latencies[c * perCaller + k] = (yield* nowMillis) - start
        }
      }), { concurrency: "unbounded", discard: true }))
    return { millis, latencies }
  })).pipe(Effect.provide(injectLayer(filename, synchronous)))

/**
 * One raw run: the callers share one connection, each inserting its row with a single-row INSERT in
 * autocommit mode, acknowledged once the call returns. better-sqlite3 runs a statement synchronously
 * on the calling thread, so the inserts go in arrival order with no queue between caller and
 * connection.
 */
const injectRawRun = (
  filename: string,
  rows: ReadonlyArray<StoredRow>,
  callers: number,
  synchronous: Synchronous
): Effect.Effect<InjectRun> =>
  Effect.scoped(Effect.gen(function*() {
    const db = yield* rawDatabase(filename, true, synchronous)
    const insert = db.prepare(insertRowsSql(1))
    const perCaller = Math.ceil(rows.length / callers)
    const latencies: Array<number> = []
    const [, millis] = yield* timed(Effect.forEach(range(callers), (c) =>
      Effect.gen(function*() {
        for (let k = 0; k < perCaller; k++) {
          const row = rows[c + k * callers]
          if (row === undefined) return
          const start = yield* nowMillis
          yield* Effect.sync(() => insert.run(row.sessionId, row.seq, JSON.stringify(row.event)))
          latencies.push((yield* nowMillis) - start)
        }
      }), { concurrency: "unbounded", discard: true }))
    yield* expectStored(db, "W3 raw rows", rows.length)
    return { millis, latencies }
  }))

// The floor's batches go in with INSERTs of at most this many rows.
const FLOOR_ROWS_PER_INSERT = 100

/**
 * One floor run: group commit with nothing else. The callers are plain async functions; a call
 * queues its row and waits on a Promise; one flush per macrotask writes every queued row in one
 * transaction (multi-row INSERTs) and resolves their Promises. No Effect, no validation, no log.
 */
const injectFloorRun = (
  filename: string,
  rows: ReadonlyArray<StoredRow>,
  callers: number,
  synchronous: Synchronous
): Effect.Effect<InjectRun> =>
  Effect.scoped(Effect.flatMap(rawDatabase(filename, true, synchronous), (db) =>
    Effect.promise(async () => {
      const statements = new Map<number, RawStatement>()
      const statement = (size: number): RawStatement => {
        let prepared = statements.get(size)
        if (prepared === undefined) {
          prepared = db.prepare(insertRowsSql(size))
          statements.set(size, prepared)
        }
        return prepared
      }
      let queued: Array<{ readonly row: StoredRow; readonly resolve: () => void }> = []
      const flush = () => {
        const batch = queued
        queued = []
        db.exec("BEGIN IMMEDIATE")
        for (let offset = 0; offset < batch.length; offset += FLOOR_ROWS_PER_INSERT) {
          const part = batch.slice(offset, offset + FLOOR_ROWS_PER_INSERT)
          const params: Array<unknown> = []
          for (const { row } of part) params.push(row.sessionId, row.seq, JSON.stringify(row.event))
          statement(part.length).run(...params)
        }
        db.exec("COMMIT")
        for (const { resolve } of batch) resolve()
      }
      const submit = (row: StoredRow) =>
        new Promise<void>((resolve) => {
          if (queued.push({ row, resolve }) === 1) setImmediate(flush)
        })
      const perCaller = Math.ceil(rows.length / callers)
      const latencies: Array<number> = []
      const start = performance.now()
      await Promise.all(
        range(callers).map(async (c) => {
          for (let k = 0; k < perCaller; k++) {
            const row = rows[c + k * callers]
            if (row === undefined) return
            const called = performance.now()
            await submit(row)
            latencies.push(performance.now() - called)
          }
        })
      )
      return { millis: performance.now() - start, latencies }
    }).pipe(Effect.tap(() => expectStored(db, "W3 floor rows", rows.length)))))

/**
 * One Effect floor run: the callers are Effect fibers as on the other sides, and each call suspends
 * its fiber until a writer fiber of its session resumes it, the least an Effect API whose calls
 * return once a shared commit is done can do. The writer sleeps until a call wakes it, yields once
 * (so the session's other callers queue, as a group commit's leader lets them) and resumes every
 * queued call. Nothing is stored, validated or logged.
 */
const injectEffectFloorRun = (callers: number, sessionCount: number, perCaller: number): Effect.Effect<InjectRun> =>
  Effect.scoped(Effect.gen(function*() {
    const sessions = range(sessionCount).map(() => ({
      waiting: [] as Array<(done: Effect.Effect<void>) => void>,
      wake: undefined as (() => void) | undefined
    }))
    for (const session of sessions) {
      const sleep = Effect.async<void>((resume) => {
        if (session.waiting.length > 0) resume(Effect.void)
        else session.wake = () => resume(Effect.void)
      })
      yield* Effect.forkScoped(Effect.forever(Effect.gen(function*() {
        yield* sleep
        yield* Effect.yieldNow()
        const released = session.waiting
        session.waiting = []
        for (const resume of released) resume(Effect.void)
      })))
    }
    const call = (c: number) =>
      Effect.async<void>((resume) => {
        const session = sessions[c % sessionCount]!
        session.waiting.push(resume)
        const wake = session.wake
        session.wake = undefined
        wake?.()
      })
    const latencies = new Array<number>(callers * perCaller)
    const [, millis] = yield* timed(Effect.forEach(range(callers), (c) =>
      Effect.gen(function*() {
        for (let k = 0; k < perCaller; k++) {
          const start = yield* nowMillis
          yield* call(c)
          latencies[c * perCaller + k] = (yield* nowMillis) - start
        }
      }), { concurrency: "unbounded", discard: true }))
    return { millis, latencies }
  }))

const isInboxSplice = (row: StoredRow): boolean => row.event.type === "agent/inbox/spliced"

/**
 * W3: `callers` concurrent callers, each making `perCaller` sequential `Driver.inject` calls into
 * one of `sessions` sessions (caller i into session i mod sessions) on one SQLite file with
 * `PRAGMA synchronous = synchronous` (both sides); each call
 * returns once its `agent/inbox/spliced` event is durable. The raw baseline has the same callers
 * insert the identical rows (from the warm-up run's file) one autocommit INSERT each. `warmRuns`
 * untimed warm-up runs of each side (the first of each kept as the cold figure), then `runs` runs
 * alternating which side goes first; then the floor (a plain-JavaScript group commit of the same
 * rows) and the Effect floor (the callers resumed by a writer fiber, nothing stored), each `warmRuns`
 * untimed and `runs` timed.
 *
 * @since 0.1.0
 * @category benchmarks
 */
export const injects = (
  callers: number,
  sessions: number,
  perCaller: number,
  runs: number,
  warmRuns: number,
  synchronous: Synchronous
): Effect.Effect<InjectFigures, unknown> =>
  Effect.gen(function*() {
    const total = callers * perCaller
    const [coldTiller, rows] = yield* withTempDir((dir) => {
      const filename = path.join(dir, "tiller.db")
      return Effect.zip(
        injectTillerRun(filename, callers, sessions, perCaller, synchronous),
        readRows(filename, isInboxSplice)
      )
    })
    yield* expectCount("W3 rows", rows.length, total)
    const tillerRun = withTempDir((dir) =>
      injectTillerRun(path.join(dir, "tiller.db"), callers, sessions, perCaller, synchronous)
    )
    const rawRun = withTempDir((dir) => injectRawRun(path.join(dir, "raw.db"), rows, callers, synchronous))
    const floorRun = withTempDir((dir) => injectFloorRun(path.join(dir, "floor.db"), rows, callers, synchronous))
    const coldRaw = yield* rawRun
    // The JIT settles over several runs of this much code: the rest of the warm-up alternates too.
    yield* alternating(warmRuns - 1, tillerRun, rawRun)
    const [tiller, raw] = yield* alternating(runs, tillerRun, rawRun)
    // The floor afterwards, with warm-up runs of its own.
    yield* Effect.replicateEffect(floorRun, warmRuns, { discard: true })
    const floor = yield* Effect.replicateEffect(floorRun, runs)
    const effectFloorRun = injectEffectFloorRun(callers, sessions, perCaller)
    yield* Effect.replicateEffect(effectFloorRun, warmRuns, { discard: true })
    const effectFloor = yield* Effect.replicateEffect(effectFloorRun, runs)
    return {
      synchronous,
      callers,
      sessions,
      injects: total,
      warmRuns,
      coldTiller,
      coldRaw,
      tiller,
      raw,
      floor,
      effectFloor
    }
  })

// -------------------------------------------------------------------------------------------------
// W4: resume
// -------------------------------------------------------------------------------------------------

/**
 * W4 figures of one log size: per run, the ms of a tiller resume and of the raw read.
 *
 * @since 0.1.0
 * @category models
 */
export interface ResumeSize {
  readonly events: number
  readonly tillerMillis: ReadonlyArray<number>
  /** The raw read of the row text alone (the baseline of the target). */
  readonly rawMillis: ReadonlyArray<number>
  /** The raw read with a row object per row (`SELECT seq, row`), run right after each raw read. */
  readonly rawObjectMillis: ReadonlyArray<number>
  /** How long writing the file took (untimed setup, for the record). */
  readonly buildMillis: number
}

/**
 * W4 figures: one entry per log size, smallest first.
 *
 * @since 0.1.0
 * @category models
 */
export interface ResumeFigures {
  readonly sizes: ReadonlyArray<ResumeSize>
  /** Events per generated turn. */
  readonly eventsPerTurn: number
  /** Untimed warm-up runs of each side on the smallest size, before its timed runs. */
  readonly warmRuns: number
  /** The first warm-up run of each side on the smallest size: the cold-JIT figure, outside the targets. */
  readonly cold: { readonly events: number; readonly tillerMillis: number; readonly rawMillis: number }
}

const PROVIDER = "bench"
const MODEL = "bench-1"
const TEXT_DELTAS = 80
// Events of one generated turn: 20 around the text deltas (see `turnEvents`).
const EVENTS_PER_TURN = 20 + TEXT_DELTAS
const ECHO_SCHEMA = {
  name: "echo",
  description: "Returns a constant string",
  parameters: {
    type: "object",
    required: ["i"],
    properties: { i: { type: "number" } },
    additionalProperties: false
  }
}

/**
 * The events of turn `turn` as the loop writes them, from seq `firstSeq` on: a prompt delivered
 * and claimed, a step calling `echo` and its result, then a step answering with `deltas` text
 * deltas. The first turn also records the request header. `20 + deltas` events (one more for the
 * first turn).
 */
const turnEvents = (turn: number, firstSeq: number, deltas: number): Array<Record<string, unknown>> => {
  const events: Array<Record<string, unknown>> = []
  const push = (type: string, data: unknown, extra: Record<string, unknown> = {}) => {
    const seq = firstSeq + events.length
    events.push({ type, seq, time: 1_800_000_000_000 + seq, data, ...extra })
    return seq
  }
  const prompt = {
    id: `prompt-${turn}`,
    role: "user",
    content: [{ type: "text", text: `question ${turn}` }],
    source: { kind: "user" }
  }
  const source = { kind: "model", provider: PROVIDER, model: MODEL }
  const chunk = (step: number, chunk: unknown) => push("assistant/chunk", { turn, step, attempt: 1, chunk })
  push("agent/inbox/spliced", { target: "next-turn", start: 0, inserted: [prompt] })
  push("turn/start", { turn })
  push("agent/inbox/spliced", { target: "next-turn", start: 0, inserted: [], removedCount: 1 })
  push("step/start", { turn, step: 1 })
  push("user/message", prompt, { surfaceOp: "append" })
  if (turn === 1) {
    push("request/header", { header: { provider: PROVIDER, model: MODEL, tools: [ECHO_SCHEMA] }, reason: "initial" })
  }
  const callId = `call-${turn}`
  const args = JSON.stringify({ i: turn })
  const toolChunks = [
    chunk(1, { type: "block-start", index: 0, block: "tool-call", id: callId, name: "echo" }),
    chunk(1, { type: "tool-call-delta", index: 0, arguments: args }),
    chunk(1, { type: "block-end", index: 0 }),
    chunk(1, { type: "finish", finish: { kind: "stop" } })
  ]
  push("assistant/message", {
    turn,
    step: 1,
    attempt: 1,
    message: {
      id: `assistant-${turn}-1`,
      role: "assistant",
      content: [{ type: "tool-call", id: callId, name: "echo", arguments: args }],
      source
    }
  }, { surfaceOp: "append", sourceEventSeqs: toolChunks })
  const call = push("tool/call", { turn, step: 1, callId, name: "echo", arguments: args })
  push("tool/result", {
    turn,
    step: 1,
    message: {
      id: `result-${turn}`,
      role: "user",
      content: [{ type: "tool-result", toolCallId: callId, isError: false, content: [{ type: "text", text: "ok" }] }],
      source: { kind: "tool", callId }
    }
  }, { surfaceOp: "append", sourceEventSeqs: [call] })
  push("step/end", { turn, step: 1 })
  push("step/start", { turn, step: 2 })
  const textChunks = [chunk(2, { type: "block-start", index: 0, block: "text" })]
  let text = ""
  for (let k = 0; k < deltas; k++) {
    const delta = ` tok${k}`
    text += delta
    textChunks.push(chunk(2, { type: "text-delta", index: 0, text: delta }))
  }
  textChunks.push(chunk(2, { type: "block-end", index: 0 }), chunk(2, { type: "finish", finish: { kind: "stop" } }))
  push("assistant/message", {
    turn,
    step: 2,
    attempt: 1,
    message: { id: `assistant-${turn}-2`, role: "assistant", content: [{ type: "text", text }], source }
  }, { surfaceOp: "append", sourceEventSeqs: textChunks })
  push("step/end", { turn, step: 2 })
  push("turn/end", { turn, reason: { kind: "completed" } })
  return events
}

/**
 * Writes a session of exactly `events` events (a multiple of 100) into `filename`: the store
 * creates the database and the session; the rows go in through the raw driver, 10,000 per
 * transaction, and the session's length is set to match. The log ends with a completed turn.
 *
 * @since 0.1.0
 * @category setup
 */
export const buildResumeLog = (filename: string, id: SessionId, events: number): Effect.Effect<void, unknown> =>
  Effect.gen(function*() {
    if (events % EVENTS_PER_TURN !== 0) return yield* Effect.dieMessage(`W4 sizes are multiples of ${EVENTS_PER_TURN}`)
    const header: SessionHeader = {
      formatVersion: LOG_FORMAT_VERSION,
      sessionId: id,
      createdAt: 1_800_000_000_000,
      seedLength: 0
    }
    yield* Effect.scoped(Effect.flatMap(SqliteStore.make({ filename }), (store) => store.create(header, [])))
    yield* Effect.scoped(Effect.flatMap(rawDatabase(filename, false), (db) =>
      Effect.sync(() => {
        const insert = db.prepare(insertRowsSql(EVENTS_PER_TURN))
        const turns = db.transaction((first: number, count: number) => {
          for (let turn = first; turn < first + count; turn++) {
            const seq = (turn - 1) * EVENTS_PER_TURN
            // The first turn's request header takes the place of one text delta.
            const rows = turnEvents(turn, seq, turn === 1 ? TEXT_DELTAS - 1 : TEXT_DELTAS)
            const params: Array<unknown> = []
            for (const row of rows) params.push(id, row["seq"], JSON.stringify(row))
            insert.run(...params)
          }
        })
        const total = events / EVENTS_PER_TURN
        const perTransaction = 10_000 / EVENTS_PER_TURN
        for (let first = 1; first <= total; first += perTransaction) {
          turns(first, Math.min(perTransaction, total - first + 1))
        }
        db.prepare("UPDATE sessions SET length = ? WHERE id = ?").run(events, id)
      })))
  })

/** Removes what a resume appended (the `session/end-seed`), so every timed resume does the same work. */
const truncateTo = (filename: string, id: SessionId, events: number): Effect.Effect<void> =>
  Effect.scoped(Effect.flatMap(rawDatabase(filename, false), (db) =>
    Effect.sync(() => {
      db.prepare("DELETE FROM events WHERE session_id = ? AND seq >= ?").run(id, events)
      db.prepare("UPDATE sessions SET length = ? WHERE id = ?").run(events, id)
    })))

/**
 * One tiller resume through `Agent.layer({ resume })` on an open store: load, validation with the
 * append rules and relations, repair check, `session/end-seed` durable, agent idle. Closing the
 * agent is untimed. Fails unless the log it resumed has `events + 1` events.
 */
const resumeTillerRun = (
  store: Context.Context<SessionStore>,
  id: SessionId,
  events: number
): Effect.Effect<number, unknown> =>
  Effect.scoped(Effect.gen(function*() {
    const agent = Agent.layer({ resume: id, model: { provider: PROVIDER, model: MODEL } }).pipe(
      Layer.provide(Layer.mergeAll(Layer.succeedContext(store), ScriptedModel.layer([]), Tools.layer()))
    )
    const [context, millis] = yield* timed(Layer.build(agent))
    const resumed = yield* Context.get(context, SessionLog).events
    if (resumed.length !== events + 1 || resumed[events]?.type !== "session/end-seed") {
      return yield* Effect.dieMessage(`W4 resumed ${resumed.length} events, expected ${events} and the end-seed`)
    }
    return millis
  }))

/**
 * One raw read: the header and every row in seq order, each row parsed. `objects` false reads each
 * row's text alone (better-sqlite3's pluck mode, no row object): the baseline of the target, the
 * least work that reads the log. `objects` true reads a row object per row (`SELECT seq, row`, the
 * driver's default mode).
 */
const resumeRawRun = (db: RawDatabase, id: SessionId, events: number, objects: boolean): Effect.Effect<number> =>
  Effect.gen(function*() {
    const selectSession = db.prepare("SELECT header, length FROM sessions WHERE id = ?")
    const selectRows = objects
      ? db.prepare("SELECT seq, row FROM events WHERE session_id = ? ORDER BY seq")
      : db.prepare("SELECT row FROM events WHERE session_id = ? ORDER BY seq").pluck(true)
    const textOf = objects ? (row: unknown) => (row as { readonly row: string }).row : (row: unknown) => row as string
    const [parsed, millis] = yield* timed(Effect.sync(() => {
      const session = selectSession.get(id) as { readonly header: string; readonly length: number }
      JSON.parse(session.header)
      const rows = selectRows.all(id)
      const result = new Array<SessionEvent>(rows.length)
      for (let i = 0; i < rows.length; i++) result[i] = JSON.parse(textOf(rows[i]))
      return result
    }))
    yield* expectCount(objects ? "W4 raw read with row objects" : "W4 raw read", parsed.length, events)
    return millis
  })

/**
 * W4: for each size, writes one session of that many events once, then per run resumes it with
 * tiller (the end-seed it appends removed untimed afterwards) and reads it raw twice (SELECT +
 * JSON.parse of the row text alone, then with row objects), alternating which side goes first,
 * `runs(events)` times. `warmRuns` untimed warm-up runs of both on the
 * smallest size (the first of each kept as the cold figure), alternating as well.
 *
 * @since 0.1.0
 * @category benchmarks
 */
export const resume = (
  sizes: ReadonlyArray<number>,
  runs: (events: number) => number,
  warmRuns: number,
  onSize: (events: number) => Effect.Effect<void> = () => Effect.void
): Effect.Effect<ResumeFigures, unknown> =>
  withTempDir((dir) =>
    Effect.gen(function*() {
      const results: Array<ResumeSize> = []
      let cold: ResumeFigures["cold"] | undefined
      for (const events of sizes) {
        yield* onSize(events)
        const filename = path.join(dir, `resume-${events}.db`)
        const id = SessionId.make(`bench-w4-${events}`)
        const [, buildMillis] = yield* timed(buildResumeLog(filename, id, events))
        const measured = yield* Effect.scoped(Effect.gen(function*() {
          const store = yield* Layer.build(SqliteSessionStore.layer({ filename }))
          const db = yield* rawDatabase(filename, false)
          const tiller = Effect.zipLeft(resumeTillerRun(store, id, events), truncateTo(filename, id, events))
          // Both raw reads share a slot of the alternation: the text read first, the row-object read after it.
          const raw = Effect.zip(resumeRawRun(db, id, events, false), resumeRawRun(db, id, events, true))
          if (cold === undefined) {
            // The smallest size runs first, on a cold JIT: its warm-up runs alternate too.
            cold = { events, tillerMillis: yield* tiller, rawMillis: (yield* raw)[0] }
            yield* alternating(Math.max(0, warmRuns - 1), tiller, raw)
          }
          const [tillerMillis, rawPairs] = yield* alternating(runs(events), tiller, raw)
          return {
            tillerMillis,
            rawMillis: rawPairs.map(([text]) => text),
            rawObjectMillis: rawPairs.map(([, objects]) => objects)
          }
        }))
        results.push({ events, buildMillis, ...measured })
      }
      if (cold === undefined) return yield* Effect.dieMessage("W4 needs at least one size")
      return { sizes: results, eventsPerTurn: EVENTS_PER_TURN, warmRuns: Math.max(1, warmRuns), cold }
    })
  )
