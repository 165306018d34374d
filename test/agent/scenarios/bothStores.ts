/**
 * The SPEC 9 scenarios over both stores: runs one scenario over memory and over a fresh SQLite file
 * and checks that both agree; a table of both stores for scenarios whose agents outlive each other
 * (disposal, resume, fork); and helpers to open, close and read a session's file directly.
 */
import { afterAll, expect, it } from "@effect/vitest"
import Database from "better-sqlite3"
import { Context, Effect, Layer, Random, Schema } from "effect"
import type { Scope } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import {
  checkLog,
  Driver,
  Inbox,
  MemoryStoreControl,
  ScriptedModel,
  SessionId,
  SessionLog,
  SessionStore,
  SqliteSessionStore
} from "../../../src/index.js"
import type { ScriptEntry, SessionEvent, StoreSnapshot, UserMessage } from "../../../src/index.js"
import {
  agentOver,
  events,
  liveNotation,
  recordLive,
  recordStatus,
  requests,
  settle,
  shape,
  token
} from "../harness.js"

const dir = fs.mkdtempSync(path.join(os.tmpdir(), "tiller-scenario-"))
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }))
let files = 0

/** A path for a new SQLite file in this test file's temporary directory. */
export const freshFile = (): string => path.join(dir, `scenario-${++files}.db`)

/** The id of a session. */
export const sid = (s: string) => SessionId.make(s)

/** The header of a fresh session `id` with no seed, created at time 0. */
export const header = (id: string) => ({ formatVersion: 1 as const, sessionId: sid(id), createdAt: 0, seedLength: 0 })

/** The ids of some messages, in order. */
export const ids = (ms: ReadonlyArray<UserMessage>) => ms.map((m) => m.id)

/** The SQLite store over `file`. */
export const sqlite = (file: string) => SqliteSessionStore.layer({ filename: file })

/** A value as it reads back from JSON. */
export const json = (x: unknown) => JSON.parse(JSON.stringify(x))

/** Tool parameters with no fields. */
export const empty = Schema.Struct({})

/** A scripted response that calls tool `name` once per id. */
export const calls = (name: string, ids: ReadonlyArray<string>) =>
  ScriptedModel.response({ toolCalls: ids.map((id) => ({ id, name, arguments: {} })) })

/** The Driver of the current run, for tool bodies defined before the agent exists. */
export const captured = () => {
  let current: Driver["Type"] | undefined
  return {
    get get(): Driver["Type"] {
      return current!
    },
    capture: Effect.map(Driver, (d) => (current = d))
  }
}

/** The part of a list of notations from the first `first` on. */
export const from = (s: ReadonlyArray<string>, first: string) => s.slice(s.indexOf(first))

/** The committed events of a session, read from the file on a connection of its own. */
export const fileRows = (file: string, session = "s"): Array<SessionEvent> => {
  const db = new Database(file, { readonly: true })
  try {
    const rows = db.prepare("SELECT seq, row FROM events WHERE session_id = ? ORDER BY seq").all(session) as Array<
      { readonly seq: number; readonly row: string }
    >
    return rows.map((r) => JSON.parse(r.row))
  } finally {
    db.close()
  }
}

/** The agent of the SPEC 9 harness over a SQLite file (the store is closed with the layer). */
const onFile = (file: string, script: Parameters<typeof agentOver>[0], options: Parameters<typeof agentOver>[1] = {}) =>
  agentOver(script, options).pipe(Layer.provideMerge(sqlite(file)))

/** Runs `program` against a SQLite store alone, opened on `file` and closed afterwards. */
const withStore = <A, E>(file: string, program: (store: SessionStore["Type"]) => Effect.Effect<A, E>) =>
  Effect.scoped(Effect.flatMap(Effect.map(Layer.build(sqlite(file)), (ctx) => Context.get(ctx, SessionStore)), program))

/** What a scenario body may use: the agent's services and a scope. */
export type Services = Layer.Layer.Success<ReturnType<typeof agentOver>> | Scope.Scope

/** One scenario: built afresh for each store so gates and counters are its own. */
export interface Case<X> {
  readonly script: ReadonlyArray<ScriptEntry>
  readonly options?: Parameters<typeof agentOver>[1]
  readonly body: Effect.Effect<X, unknown, Services>
  /** Events whose position races with the loop (concurrent callers): left out of the store comparison. */
  readonly racing?: ReadonlyArray<string>
}

/** What one run of a scenario left: its log, notifications, requests and what the body returned. */
export interface Run<X> {
  readonly shape: ReadonlyArray<string>
  readonly events: ReadonlyArray<SessionEvent>
  readonly live: ReadonlyArray<string>
  readonly trace: ReadonlyArray<string>
  readonly requests: ReadonlyArray<
    { readonly turn: number; readonly step: number; readonly attempt: number; readonly messages: ReadonlyArray<string> }
  >
  readonly violations: ReadonlyArray<unknown>
  readonly inbox: { readonly nextTurn: ReadonlyArray<string>; readonly nextStep: ReadonlyArray<string> }
  readonly file?: ReadonlyArray<unknown>
  readonly extra: X
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/

/** The log as JSON with minted UUIDs numbered in order of appearance and times made relative to event 0. */
const normalise = (es: ReadonlyArray<SessionEvent>) => {
  const ids = new Map<string, string>()
  const t0 = es[0]?.time ?? 0
  const walk = (v: unknown): unknown => {
    if (typeof v === "string" && UUID.test(v)) {
      if (!ids.has(v)) ids.set(v, `uuid-${ids.size}`)
      return ids.get(v)
    }
    if (Array.isArray(v)) return v.map(walk)
    if (v !== null && typeof v === "object") return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, walk(x)]))
    return v
  }
  return es.map((e) => walk({ ...JSON.parse(JSON.stringify(e)), time: e.time - t0 }))
}

/** Runs a case over one store (a SQLite file, or memory when `file` is undefined) and gathers its outcome. */
export const runOn = <X>(c: Case<X>, file: string | undefined): Effect.Effect<Run<X>, unknown> => {
  const store = file === undefined ? SessionStore.layerMemory : sqlite(file)
  const layer = agentOver(c.script, c.options ?? {}).pipe(Layer.provideMerge(store))
  return Effect.gen(function*() {
    const driver = yield* Driver
    const log = yield* SessionLog
    const inbox = yield* Inbox
    const live = yield* recordLive
    const trace = yield* recordStatus
    const extra = yield* c.body
    yield* driver.whenIdle
    yield* settle
    yield* log.flush
    const es = yield* events
    const snapshot = yield* inbox.snapshot
    return {
      shape: yield* shape,
      events: es,
      live: (yield* live).map(liveNotation),
      trace: yield* trace,
      requests: (yield* requests).map((r) => ({
        turn: r.turn,
        step: r.step,
        attempt: r.attempt,
        messages: r.messages.map(token)
      })),
      violations: checkLog(es, { closed: true }),
      inbox: { nextTurn: snapshot.nextTurn.map((m) => m.id), nextStep: snapshot.nextStep.map((m) => m.id) },
      ...(file === undefined ? {} : { file: fileRows(file) }),
      extra
    }
  }).pipe(Effect.provide(layer), Effect.scoped, Effect.withRandom(Random.make("tiller-loop")))
}

/**
 * Runs `make()` over memory and over a fresh SQLite file. Checks on SQLite: checkLog clean, the
 * file equals the live log; and that both runs agree on everything observable. Returns the SQLite run.
 */
export const onBoth = <X>(make: (file: string | undefined) => Case<X>) =>
  Effect.gen(function*() {
    const first = make(undefined)
    const mem = yield* runOn(first, undefined)
    const file = freshFile()
    const sql = yield* runOn(make(file), file)
    // after disposal, a fresh store on the same file loads exactly the live log
    const loaded = yield* Effect.provide(
      Effect.flatMap(SessionStore, (store) => store.load(SessionId.make("s"))),
      sqlite(file)
    )
    expect(loaded.events).toEqual(sql.events)
    expect(loaded.header).toMatchObject({ formatVersion: 1, sessionId: "s", seedLength: 0 })
    const racing = first.racing ?? []
    const steady = (s: ReadonlyArray<string>) => s.filter((x) => !racing.includes(x))
    expect(sql.violations).toEqual([])
    expect(mem.violations).toEqual([])
    expect(sql.file).toEqual(JSON.parse(JSON.stringify(sql.events)))
    expect(steady(sql.shape)).toEqual(steady(mem.shape))
    expect(sql.live).toEqual(mem.live)
    expect(sql.trace).toEqual(mem.trace)
    expect(sql.requests).toEqual(mem.requests)
    expect(sql.inbox).toEqual(mem.inbox)
    if (racing.length === 0) expect(normalise(sql.events)).toEqual(normalise(mem.events))
    return sql
  })

/**
 * A store the agents of one test run over, opened in the test's scope: every agent of the test sees
 * what the earlier ones committed (memory: one store shared by all; SQLite: a new store on one file).
 */
export interface StoreUnderTest {
  /** An agent over this store, with the store in its context. */
  readonly agent: (
    script: ReadonlyArray<ScriptEntry>,
    options?: Parameters<typeof agentOver>[1]
  ) => Layer.Layer<Layer.Layer.Success<ReturnType<typeof agentOver>> | SessionStore, unknown>
  /** Runs `program` against the store alone. */
  readonly use: <A, E>(program: (store: SessionStore["Type"]) => Effect.Effect<A, E>) => Effect.Effect<A, unknown>
  /** The committed events of a session as they read back from JSON, read outside any agent. */
  readonly rows: (session?: string) => Effect.Effect<Array<SessionEvent>>
  /** The ids of the stored sessions, in order (SQLite: read from the file on a connection of its own). */
  readonly sessions: Effect.Effect<ReadonlyArray<string>>
  /** `whenIdle`, flush, then the closing conditions: `checkLog` clean and the committed rows equal to the live log. */
  readonly close: (session?: string) => Effect.Effect<ReadonlyArray<SessionEvent>, unknown, Driver | SessionLog>
  /** Runs `body` against an agent over this store (session "s" unless `options` say otherwise), then `close`. */
  readonly run: <A>(
    script: ReadonlyArray<ScriptEntry>,
    body: Effect.Effect<A, unknown, Services>,
    options?: Parameters<typeof agentOver>[1]
  ) => Effect.Effect<A, unknown>
  /** What is committed right now, as another store (a crash image: a memory snapshot, a copy of the file). */
  readonly image: Effect.Effect<StoreUnderTest, never, Scope.Scope>
}

const closeOn = (rows: (session: string) => Effect.Effect<Array<SessionEvent>>) => (session = "s") =>
  Effect.gen(function*() {
    const driver = yield* Driver
    const log = yield* SessionLog
    yield* driver.whenIdle
    yield* settle
    yield* log.flush
    const es = yield* log.events
    expect(checkLog(es, { closed: true })).toEqual([])
    expect(yield* rows(session)).toEqual(json(es))
    return es
  })

/** The parts of a store under test that follow from its agents and its rows. */
const storeOver = (
  agent: StoreUnderTest["agent"],
  rows: (session: string) => Effect.Effect<Array<SessionEvent>>
): Pick<StoreUnderTest, "agent" | "rows" | "close" | "run"> => {
  const close = closeOn(rows)
  return {
    agent,
    rows: (session = "s") => rows(session),
    close,
    run: (script, body, options = {}) =>
      body.pipe(Effect.zipLeft(close(options.sessionId)), Effect.provide(agent(script, options)), Effect.scoped)
  }
}

const memoryStore = (snapshot?: StoreSnapshot): Effect.Effect<StoreUnderTest, never, Scope.Scope> =>
  Effect.map(
    Layer.build(snapshot === undefined ? SessionStore.layerMemory : SessionStore.layerMemoryFrom(snapshot)),
    (ctx) => {
      const store = Context.get(ctx, SessionStore)
      return {
        ...storeOver(
          (script, options = {}) => agentOver(script, options).pipe(Layer.provideMerge(Layer.succeedContext(ctx))),
          (session) =>
            Effect.map(Effect.orDie(store.load(sid(session))), (loaded) => json(loaded.events) as Array<SessionEvent>)
        ),
        use: (program) => program(store),
        sessions: Effect.map(Effect.orDie(store.list), (headers) => headers.map((h) => h.sessionId as string).sort()),
        image: Effect.flatMap(Context.get(ctx, MemoryStoreControl).snapshot, memoryStore)
      }
    }
  )

const sqliteStore = (file: string): StoreUnderTest => {
  return {
    ...storeOver(
      (script, options = {}) => onFile(file, script, options),
      (session) => Effect.sync(() => fileRows(file, session))
    ),
    use: (program) => withStore(file, program),
    sessions: Effect.sync(() => {
      const db = new Database(file, { readonly: true })
      try {
        return (db.prepare("SELECT id FROM sessions ORDER BY id").all() as Array<{ readonly id: string }>).map((r) =>
          r.id
        )
      } finally {
        db.close()
      }
    }),
    image: Effect.promise(async () => {
      const copy = freshFile()
      const db = new Database(file, { readonly: true })
      try {
        await db.backup(copy)
      } finally {
        db.close()
      }
      return sqliteStore(copy)
    })
  }
}

/** Both stores, by name: each opens a fresh store for one test. */
export const stores: ReadonlyArray<
  { readonly name: string; readonly open: Effect.Effect<StoreUnderTest, never, Scope.Scope> }
> = [
  { name: "memory", open: memoryStore() },
  { name: "SQLite", open: Effect.sync(() => sqliteStore(freshFile())) }
]

/** A test over a fresh store from `open`: `body`, given the store, runs against one agent over it, then `close`. */
export const storeTest = (
  open: Effect.Effect<StoreUnderTest, never, Scope.Scope>,
  name: string,
  script: ReadonlyArray<ScriptEntry>,
  body: (store: StoreUnderTest) => Effect.Effect<unknown, unknown, Services>,
  options: Parameters<typeof agentOver>[1] = {}
) => it.scoped(name, () => Effect.flatMap(open, (store) => store.run(script, body(store), options)))
