/**
 * Storage benchmarks on the PostgreSQL store, each beside raw `pg` doing the same on an identical
 * `tiller_events` table of the same server: W2 durable ingest of `assistant/chunk` events (against
 * one multi-row INSERT of 1,000 rows per transaction), W3 acknowledged injects from 100 concurrent
 * callers into 10 sessions (against single-row autocommit INSERTs over a pool of 10 connections),
 * W4 resume of 10^4..10^6-event sessions (against `SELECT` + `JSON.parse`). The server is the one
 * `TILLER_TEST_PG_URL` names, else a throwaway cluster with fsync on (durable commits), each run
 * on a fresh database.
 *
 * @since 0.1.0
 */
import { Context, Effect, Layer } from "effect"
import pg from "pg"
import type { SessionHeader, UserMessage } from "../src/index.js"
import {
  Agent,
  Driver,
  LOG_FORMAT_VERSION,
  PgSessionStore,
  ScriptedModel,
  SessionId,
  SessionLog,
  Sessions,
  SessionStore,
  Tools,
  userMessage
} from "../src/index.js"
import { awaitDurable, SessionState } from "../src/internal/state/SessionState.js"
import type { TestPostgres } from "../test/fixtures/postgresServer.js"
import { testPostgres } from "../test/fixtures/postgresServer.js"
import { appendChunks, openStep } from "./sessionLog.js"
import { alternating, sessionLayer, timed } from "./util.js"

/** PostgreSQL figures: W2, W3 and W4 runs of both sides. */
export interface PgFigures {
  readonly server: string
  readonly ingest: { readonly events: number; readonly tiller: Array<number>; readonly raw: Array<number> }
  readonly injects: {
    readonly callers: number
    readonly sessions: number
    readonly injects: number
    readonly tiller: Array<{ readonly millis: number; readonly latencies: ReadonlyArray<number> }>
    readonly raw: Array<{ readonly millis: number; readonly latencies: ReadonlyArray<number> }>
  }
  readonly resume: ReadonlyArray<
    { readonly events: number; readonly tiller: Array<number>; readonly raw: Array<number> }
  >
}

const withClient = <A>(url: string, use: (client: pg.Client) => Promise<A>): Effect.Effect<A> =>
  Effect.promise(async () => {
    const client = new pg.Client({ connectionString: url })
    await client.connect()
    try {
      return await use(client)
    } finally {
      await client.end()
    }
  })

const CREATE_EVENTS = "CREATE TABLE tiller_events (session_id text NOT NULL, seq integer NOT NULL, " +
  "row text NOT NULL, PRIMARY KEY (session_id, seq))"

interface Row {
  readonly session_id: string
  readonly seq: number
  readonly row: string
}

const readRows = (url: string, type: string): Effect.Effect<Array<Row>> =>
  withClient(
    url,
    async (client) =>
      (await client.query<Row>("SELECT session_id, seq, row FROM tiller_events ORDER BY session_id, seq")).rows
        .filter((row) => (JSON.parse(row.row) as { readonly type: string }).type === type)
  )

/** A fresh database with only the events table (the raw side). */
const rawDatabase = (server: TestPostgres) =>
  Effect.flatMap(
    Effect.promise(() => server.freshUrl()),
    (url) => Effect.as(withClient(url, (client) => client.query(CREATE_EVENTS)), url)
  )

const multiRowInsert = (rows: number) =>
  `INSERT INTO tiller_events (session_id, seq, row) VALUES ${
    Array.from({ length: rows }, (_, i) => `($${3 * i + 1}, $${3 * i + 2}, $${3 * i + 3})`).join(", ")
  }`

// W2 ------------------------------------------------------------------------------------------

const W2_PER_TRANSACTION = 100
const RAW_ROWS_PER_TRANSACTION = 1_000

const ingestTiller = (url: string, events: number) =>
  Effect.gen(function*() {
    const state = yield* SessionState
    yield* openStep
    const [, millis] = yield* timed(
      Effect.flatMap(appendChunks(events, W2_PER_TRANSACTION), (last) => awaitDurable(state, last))
    )
    return millis
  }).pipe(Effect.provide(sessionLayer("bench-w2", {}, PgSessionStore.layer({ url }))))

const ingestRaw = (url: string, rows: ReadonlyArray<Row>) =>
  withClient(url, async (client) => {
    const start = performance.now()
    for (let offset = 0; offset < rows.length; offset += RAW_ROWS_PER_TRANSACTION) {
      const batch = rows.slice(offset, offset + RAW_ROWS_PER_TRANSACTION)
      const params: Array<unknown> = []
      for (const row of batch) params.push(row.session_id, row.seq, JSON.stringify(JSON.parse(row.row)))
      await client.query("BEGIN")
      await client.query(multiRowInsert(batch.length), params)
      await client.query("COMMIT")
    }
    return performance.now() - start
  })

// W3 ------------------------------------------------------------------------------------------

const range = (n: number): Array<number> => Array.from({ length: n }, (_, i) => i)

const injectTiller = (url: string, callers: number, sessionCount: number, perCaller: number) =>
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
          const start = performance.now()
          yield* driver.inject(messages[c]![k]!)
          latencies[c * perCaller + k] = performance.now() - start
        }
      }), { concurrency: "unbounded", discard: true }))
    return { millis, latencies }
  })).pipe(
    Effect.provide(
      Sessions.layer({ idleTimeToLive: "1 minute", model: { provider: "bench", model: "none" } }).pipe(
        Layer.provide(Layer.mergeAll(PgSessionStore.layer({ url }), ScriptedModel.layer([]), Tools.layer()))
      )
    )
  )

const injectRaw = (url: string, rows: ReadonlyArray<Row>, callers: number) =>
  Effect.promise(async () => {
    const pool = new pg.Pool({ connectionString: url, max: 10 })
    try {
      const perCaller = Math.ceil(rows.length / callers)
      const latencies: Array<number> = []
      const start = performance.now()
      await Promise.all(
        range(callers).map(async (c) => {
          for (let k = 0; k < perCaller; k++) {
            const row = rows[c + k * callers]
            if (row === undefined) return
            const began = performance.now()
            await pool.query("INSERT INTO tiller_events (session_id, seq, row) VALUES ($1, $2, $3)", [
              row.session_id,
              row.seq,
              JSON.stringify(JSON.parse(row.row))
            ])
            latencies.push(performance.now() - began)
          }
        })
      )
      return { millis: performance.now() - start, latencies }
    } finally {
      await pool.end()
    }
  })

// W4 ------------------------------------------------------------------------------------------

const PROVIDER = "bench"
const MODEL = "bench-1"
const EVENTS_PER_TURN = 100

/** Turn `turn` from seq `first`: a prompt, a step of 94 text deltas, its message and the closers (100 events). */
const turnRows = (turn: number, first: number): Array<Record<string, unknown>> => {
  const events: Array<Record<string, unknown>> = []
  const push = (type: string, data: unknown, extra: Record<string, unknown> = {}) => {
    const seq = first + events.length
    events.push({ type, seq, time: 1_800_000_000_000 + seq, data, ...extra })
    return seq
  }
  const prompt = {
    id: `prompt-${turn}`,
    role: "user",
    content: [{ type: "text", text: `question ${turn}` }],
    source: { kind: "user" }
  }
  push("agent/inbox/spliced", { target: "next-turn", start: 0, inserted: [prompt] })
  push("turn/start", { turn })
  push("agent/inbox/spliced", { target: "next-turn", start: 0, inserted: [], removedCount: 1 })
  push("step/start", { turn, step: 1 })
  push("user/message", prompt, { surfaceOp: "append" })
  if (turn === 1) {
    push("request/header", { header: { provider: PROVIDER, model: MODEL, tools: [] }, reason: "initial" })
  }
  const chunks = [
    push("assistant/chunk", { turn, step: 1, attempt: 1, chunk: { type: "block-start", index: 0, block: "text" } })
  ]
  const deltas = EVENTS_PER_TURN - 11 - (turn === 1 ? 1 : 0)
  let text = ""
  for (let k = 0; k < deltas; k++) {
    text += ` tok${k}`
    chunks.push(
      push("assistant/chunk", { turn, step: 1, attempt: 1, chunk: { type: "text-delta", index: 0, text: ` tok${k}` } })
    )
  }
  chunks.push(push("assistant/chunk", { turn, step: 1, attempt: 1, chunk: { type: "block-end", index: 0 } }))
  chunks.push(
    push("assistant/chunk", { turn, step: 1, attempt: 1, chunk: { type: "finish", finish: { kind: "stop" } } })
  )
  push("assistant/message", {
    turn,
    step: 1,
    attempt: 1,
    message: {
      id: `assistant-${turn}`,
      role: "assistant",
      content: [{ type: "text", text }],
      source: { kind: "model", provider: PROVIDER, model: MODEL }
    }
  }, { surfaceOp: "append", sourceEventSeqs: chunks })
  push("step/end", { turn, step: 1 })
  push("turn/end", { turn, reason: { kind: "completed" } })
  return events
}

/** A session of `events` events (a multiple of 100) on `url`: created by the store, rows inserted raw. */
const buildLog = (url: string, id: SessionId, events: number) =>
  Effect.gen(function*() {
    const header: SessionHeader = {
      formatVersion: LOG_FORMAT_VERSION,
      sessionId: id,
      createdAt: 1_800_000_000_000,
      seedLength: 0
    }
    yield* Effect.scoped(
      Effect.flatMap(Layer.build(PgSessionStore.layer({ url })), (ctx) =>
        Context.get(ctx, SessionStore).create(header, []))
    )
    yield* withClient(url, async (client) => {
      const turns = events / EVENTS_PER_TURN
      for (let first = 1; first <= turns; first += 100) {
        const ids: Array<string> = []
        const seqs: Array<number> = []
        const rows: Array<string> = []
        for (let turn = first; turn < Math.min(first + 100, turns + 1); turn++) {
          for (const row of turnRows(turn, (turn - 1) * EVENTS_PER_TURN)) {
            ids.push(id)
            seqs.push(row["seq"] as number)
            rows.push(JSON.stringify(row))
          }
        }
        await client.query(
          "INSERT INTO tiller_events (session_id, seq, row) SELECT * FROM unnest($1::text[], $2::int4[], $3::text[])",
          [ids, seqs, rows]
        )
      }
      await client.query("UPDATE tiller_sessions SET length = $1 WHERE id = $2", [events, id])
      await client.query("VACUUM ANALYZE tiller_events")
    })
  })

const resumeTiller = (store: Context.Context<SessionStore>, url: string, id: SessionId, events: number) =>
  Effect.gen(function*() {
    const millis = yield* Effect.scoped(Effect.gen(function*() {
      const agent = Agent.layer({ resume: id, model: { provider: PROVIDER, model: MODEL } }).pipe(
        Layer.provide(Layer.mergeAll(Layer.succeedContext(store), ScriptedModel.layer([]), Tools.layer()))
      )
      const [context, millis] = yield* timed(Layer.build(agent))
      const resumed = yield* Context.get(context, SessionLog).events
      if (resumed.length !== events + 1) return yield* Effect.dieMessage(`W4 resumed ${resumed.length} events`)
      return millis
    }))
    // Every timed resume does the same work: the end-seed it appended goes.
    yield* withClient(url, async (client) => {
      await client.query("DELETE FROM tiller_events WHERE session_id = $1 AND seq >= $2", [id, events])
      await client.query("UPDATE tiller_sessions SET length = $1 WHERE id = $2", [events, id])
    })
    return millis
  })

const resumeRaw = (client: pg.Client, id: SessionId, events: number) =>
  Effect.promise(async () => {
    const start = performance.now()
    const session = await client.query<{ header: string }>("SELECT header, length FROM tiller_sessions WHERE id = $1", [
      id
    ])
    JSON.parse(session.rows[0]!.header)
    const rows = await client.query<{ row: string }>(
      "SELECT row FROM tiller_events WHERE session_id = $1 ORDER BY seq",
      [id]
    )
    const parsed = new Array<unknown>(rows.rows.length)
    for (let i = 0; i < rows.rows.length; i++) parsed[i] = JSON.parse(rows.rows[i]!.row)
    if (parsed.length !== events) throw new Error(`W4 raw read ${parsed.length} rows`)
    return performance.now() - start
  })

// ---------------------------------------------------------------------------------------------

/** Sizes of the PostgreSQL benchmarks. */
export interface PgSizes {
  readonly ingestEvents: number
  readonly callers: number
  readonly sessions: number
  readonly perCaller: number
  readonly runs: number
  readonly resumeSizes: ReadonlyArray<number>
  readonly resumeRuns: ReadonlyArray<number>
}

/**
 * W2, W3 and W4 on PostgreSQL; undefined (after a line saying why) when no server can be had.
 *
 * @since 0.1.0
 * @category benchmarks
 */
export const postgres = (sizes: PgSizes, log: (line: string) => Effect.Effect<void>) =>
  Effect.gen(function*() {
    const server = yield* Effect.promise(() => testPostgres({ durable: true }))
    if (server === undefined) return undefined
    const fresh = Effect.promise(() => server.freshUrl())

    yield* log(`postgres W2: ${sizes.ingestEvents} chunk events ...`)
    const w2Url = yield* fresh
    yield* ingestTiller(w2Url, sizes.ingestEvents)
    const w2Rows = yield* readRows(w2Url, "assistant/chunk")
    yield* Effect.flatMap(rawDatabase(server), (url) => ingestRaw(url, w2Rows))
    const [ingestTillerMs, ingestRawMs] = yield* alternating(
      sizes.runs,
      Effect.flatMap(fresh, (url) => ingestTiller(url, sizes.ingestEvents)),
      Effect.flatMap(rawDatabase(server), (url) => ingestRaw(url, w2Rows))
    )

    yield* log(`postgres W3: ${sizes.callers} callers x ${sizes.perCaller} injects into ${sizes.sessions} sessions ...`)
    const w3Url = yield* fresh
    yield* injectTiller(w3Url, sizes.callers, sizes.sessions, sizes.perCaller)
    const w3Rows = yield* readRows(w3Url, "agent/inbox/spliced")
    yield* Effect.flatMap(rawDatabase(server), (url) => injectRaw(url, w3Rows, sizes.callers))
    const [injectTillerRuns, injectRawRuns] = yield* alternating(
      sizes.runs,
      Effect.flatMap(fresh, (url) => injectTiller(url, sizes.callers, sizes.sessions, sizes.perCaller)),
      Effect.flatMap(rawDatabase(server), (url) => injectRaw(url, w3Rows, sizes.callers))
    )

    const resume: Array<PgFigures["resume"][number]> = []
    for (let i = 0; i < sizes.resumeSizes.length; i++) {
      const events = sizes.resumeSizes[i]!
      yield* log(`postgres W4: resume of ${events} events ...`)
      const url = yield* fresh
      const id = SessionId.make(`bench-w4-${events}`)
      yield* buildLog(url, id, events)
      const figures = yield* Effect.scoped(Effect.gen(function*() {
        const store = yield* Layer.build(PgSessionStore.layer({ url }))
        const client = new pg.Client({ connectionString: url })
        yield* Effect.acquireRelease(Effect.promise(() => client.connect()), () => Effect.promise(() => client.end()))
        const tiller = resumeTiller(store, url, id, events)
        const raw = resumeRaw(client, id, events)
        if (i === 0) yield* alternating(2, tiller, raw)
        return yield* alternating(sizes.resumeRuns[i] ?? 3, tiller, raw)
      }))
      resume.push({ events, tiller: figures[0], raw: figures[1] })
    }
    const figures: PgFigures = {
      server: server.origin === "throwaway" ? "a throwaway PostgreSQL cluster (fsync on)" : "TILLER_TEST_PG_URL",
      ingest: { events: sizes.ingestEvents, tiller: ingestTillerMs, raw: ingestRawMs },
      injects: {
        callers: sizes.callers,
        sessions: sizes.sessions,
        injects: sizes.callers * sizes.perCaller,
        tiller: injectTillerRuns,
        raw: injectRawRuns
      },
      resume
    }
    return figures
  })
