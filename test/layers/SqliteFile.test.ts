/**
 * The SQLite store's file (SPEC 2.9, 5.1, 6.1, 6.8, 8.10): options, one row per logical event, two
 * stores on one file, format version, a flaw in a row; and the memory store's version check.
 */
import { afterAll, describe, expect, it } from "@effect/vitest"
import { Cause, Context, Duration, Effect, Either, Exit, Layer, Option, Schema, Scope } from "effect"
import { spawn } from "node:child_process"
import * as fs from "node:fs"
import { createRequire } from "node:module"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { AgentBusy, MalformedLog, UnsupportedLogVersion } from "../../src/domain/Errors.js"
import { SessionId } from "../../src/domain/Ids.js"
import { Agent } from "../../src/layers/Agent.js"
import { ScriptedModel } from "../../src/layers/ScriptedModel.js"
import { SqliteSessionStore } from "../../src/layers/SqliteStore.js"
import { Driver } from "../../src/services/Driver.js"
import { SessionLog } from "../../src/services/SessionLog.js"
import { SessionStore } from "../../src/services/SessionStore.js"
import { Tools } from "../../src/services/Tools.js"
import { agentOver, user } from "../agent/harness.js"
import { makeHeader, makeUserMessage, turnEvents } from "../contracts/SessionStoreContract.js"
import { isDeepStrictEqual } from "node:util"
import { Hooks, LOG_FORMAT_VERSION, RequestErrorAction, Sessions, Tool, userMessage } from "../../src/index.js"
import type { SessionEvent } from "../../src/domain/Event.js"
import type { SessionHeader } from "../../src/index.js"

const ROOT = fileURLToPath(new URL("../../", import.meta.url))
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "tiller-sqlite-file-"))
// Child scripts live inside the project, where their imports ("effect", "tsx") resolve.
fs.mkdirSync(path.join(ROOT, "node_modules", ".cache"), { recursive: true })
const scripts = fs.mkdtempSync(path.join(ROOT, "node_modules", ".cache", "tiller-sqlite-file-"))
afterAll(() => {
  fs.rmSync(dir, { recursive: true, force: true })
  fs.rmSync(scripts, { recursive: true, force: true })
})
let files = 0
const freshFile = () => path.join(dir, `store-${++files}.db`)
const modeOf = (file: string) => fs.statSync(file).mode & 0o777

interface Stmt {
  readonly all: (...p: ReadonlyArray<unknown>) => Array<any>
  readonly run: (...p: ReadonlyArray<unknown>) => { readonly changes: number }
  readonly get: (...p: ReadonlyArray<unknown>) => any
}
interface Db {
  readonly prepare: (sql: string) => Stmt
  readonly pragma: (sql: string, options?: { readonly simple?: boolean }) => unknown
  readonly exec: (sql: string) => void
  readonly close: () => void
  readonly name: string
  readonly open: boolean
}
type DbCtor = (new(filename: string) => Db) & { readonly prototype: Db }
const Database = createRequire(import.meta.url)("better-sqlite3") as DbCtor
const raw = <A>(file: string, body: (db: Db) => A): A => {
  const db = new Database(file)
  try {
    return body(db)
  } finally {
    db.close()
  }
}

const failureOf = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.flatMap(Effect.either(effect), Either.match({
    onLeft: Effect.succeed,
    onRight: () => Effect.dieMessage("expected a failure, but the effect succeeded")
  }))

const nonEmpty = (events: ReadonlyArray<SessionEvent>) => events as readonly [SessionEvent, ...Array<SessionEvent>]
const S = SessionId.make("s8")

const dirFormat = fs.mkdtempSync(path.join(os.tmpdir(), "tiller-sqlite-format-"))
afterAll(() => fs.rmSync(dirFormat, { recursive: true, force: true }))

const sid = (s: string) => SessionId.make(s)
const header = (id: string, seedLength = 0) => ({ formatVersion: 1, sessionId: sid(id), createdAt: 0, seedLength })

/** A memory store built once in the test scope, and a runner of agents over it. */
const withStore = Effect.map(Layer.build(SessionStore.layerMemory), (storeCtx) => {
  const store = Context.get(storeCtx, SessionStore)
  const run = <A, E, R>(
    script: Parameters<typeof agentOver>[0],
    program: Effect.Effect<A, E, R>,
    options: Parameters<typeof agentOver>[1] = {}
  ) =>
    Effect.scoped(
      Effect.provide(
        program as Effect.Effect<A, E, Exclude<R, Scope.Scope> | Scope.Scope>,
        agentOver(script, options).pipe(Layer.provide(Layer.succeedContext(storeCtx)))
      )
    ) as Effect.Effect<A, E | Layer.Layer.Error<ReturnType<typeof agentOver>>, never>
  return { store, run }
})

const outcome = (exit: Exit.Exit<unknown, unknown>): string => {
  if (Exit.isSuccess(exit)) return "ok"
  const failure = Cause.failureOption(exit.cause)
  if (Option.isNone(failure)) return `defect: ${Cause.pretty(exit.cause)}`
  const f = failure.value as { readonly _tag?: string; readonly seq?: number }
  return `${f._tag}@${f.seq}`
}

const echo = Tool.make("echo", {
  description: "echoes",
  parameters: Schema.Struct({ x: Schema.Number }),
  execute: (p) => Effect.succeed(`got ${p.x}`)
})

const richScript = () => [
  ScriptedModel.response({
    reasoning: "think",
    text: "calling",
    toolCalls: [{ id: "c1", name: "echo", arguments: { x: 1 } }],
    usage: { inputTokens: 3, outputTokens: 4 }
  }),
  ScriptedModel.text("done"),
  ScriptedModel.fail({ message: "busy", code: "RATE_LIMIT", status: 429 }),
  ScriptedModel.text("second", { usage: { inputTokens: 1, outputTokens: 1, totalTokens: 2 } })
]

/**
 * A rich valid session: two turns (reasoning, text and a tool call with its result, usage, a
 * retried attempt), an ignorable extension event, a pruned tool result (TR~), and a maintenance
 * compaction whose summary replaces the first turn's history (UM~). Returns the in-memory log.
 *
 * seqs: 0 INS, 1 TS, 2 CLM, 3 SS, 4 UM(A), 5 RH, 6-16 chunks, 17 AM, 18 TC, 19 TR, 20 SE, 21 SS,
 * 22-25 chunks, 26 AM, 27 SE, 28 TE, 29 x/note, 30 TR~, 31 INS, 32 TS, 33 CLM, 34 SS, 35 UM(B),
 * 36 chunk (finish error), 37 RT, 38-42 chunks, 43 AM, 44 SE, 45 TE, 46-47 compaction, 48 UM~(S),
 * 49 compaction/end.
 */
const richProgram = Effect.gen(function*() {
  const driver = yield* Driver
  const log = yield* SessionLog
  const hooks = yield* Hooks
  yield* hooks.onRequestError(() => Effect.succeed(RequestErrorAction.retry(Duration.zero)))
  yield* driver.followup(user("A"))
  yield* driver.whenIdle
  yield* log.append({ type: "x/note", data: { k: [1, "two", null, true] }, ignorable: true })
  const tr = (yield* log.events).find((e) => e.type === "tool/result")!
  const d = tr.data as any
  yield* log.append({
    type: "tool/result",
    data: { ...d, message: { ...d.message, content: [{ ...d.message.content[0], content: [{ type: "text", text: "pruned" }] }] } },
    surfaceOp: { op: "replace", start: tr.seq, end: tr.seq },
    sourceEventSeqs: [tr.seq]
  })
  yield* driver.followup(user("B"))
  yield* driver.whenIdle
  yield* driver.runMaintenance(Effect.gen(function*() {
    const surface = yield* log.surface
    const start = yield* log.append({ type: "compaction/start", data: { turn: null, by: "audit" } })
    yield* log.append({ type: "compaction/summary", data: { turn: null, text: "sum" } })
    yield* log.append({
      type: "user/message",
      data: userMessage({ id: "S", text: "summary", source: { kind: "compaction", upTo: surface[3]! } }),
      surfaceOp: { op: "replace", start: surface[0]!, end: surface[3]! },
      sourceEventSeqs: [...surface.slice(0, 4), start.seq]
    })
    yield* log.append({ type: "compaction/end", data: { turn: null } })
  }))
  yield* log.flush
  return yield* log.events
})

const richLog = Effect.gen(function*() {
  const { run } = yield* withStore
  return yield* run(richScript(), richProgram, { tools: [echo] })
})

type Mut = (e: any) => void
/** A JSON copy of the log with `f` applied to the copy of event `seq` (each event frozen at its top, so the memory store keeps it verbatim). */
const mutate = (es: ReadonlyArray<SessionEvent>, seq: number, f: Mut): ReadonlyArray<SessionEvent> =>
  es.map((e) => {
    const copy = JSON.parse(JSON.stringify(e))
    if (e.seq === seq) f(copy)
    return Object.freeze(copy)
  })

const cases: ReadonlyArray<readonly [string, number, Mut]> = [
  // A1 envelope
  ["A1 extra envelope key", 1, (e) => { e.extra = 1 }],
  ["A1 data missing", 28, (e) => { delete e.data }],
  ["A1 time missing", 28, (e) => { delete e.time }],
  ["A1 time unsafe integer", 28, (e) => { e.time = 2 ** 53 }],
  ["A1 time -0", 28, (e) => { e.time = -0 }],
  ["A1 type not a string", 29, (e) => { e.type = 5 }],
  // A3 lossless JSON
  ["A3 NaN in extension data", 29, (e) => { e.data = { k: Number.NaN } }],
  ["A3 -0 in extension data", 29, (e) => { e.data = { k: -0 } }],
  ["A3 undefined in extension data", 29, (e) => { e.data = { k: undefined } }],
  ["A3 sparse array in extension data", 29, (e) => { e.data = { k: [1, , 3] } }],
  ["A3 Date in extension data", 29, (e) => { e.data = { k: new Date(0) } }],
  ["A3 Infinity in core data", 37, (e) => { e.data.failure.retryAfterMs = Infinity }],
  // A4 turn/start, turn/end, step/*
  ["A4 turn/start turn 0", 1, (e) => { e.data.turn = 0 }],
  ["A4 turn/start turn string", 1, (e) => { e.data.turn = "1" }],
  ["A4 turn/start extra data key", 1, (e) => { e.data.note = "x" }],
  ["A4 turn/end unknown reason", 28, (e) => { e.data.reason = { kind: "finished" } }],
  ["A4 turn/end blocked message not a string", 28, (e) => { e.data.reason = { kind: "blocked", message: 5 } }],
  ["A4 turn/end aborted hook without reason", 28, (e) => { e.data.reason = { kind: "aborted", reason: { kind: "hook" } } }],
  ["A4 turn/end aborted unknown cause", 28, (e) => { e.data.reason = { kind: "aborted", reason: { kind: "timeout" } } }],
  ["A4 turn/end error without code", 28, (e) => { e.data.reason = { kind: "error", error: { message: "m" } } }],
  ["A4 turn/end completed with extra key", 28, (e) => { e.data.reason = { kind: "completed", why: "x" } }],
  ["A4 step/start without step", 3, (e) => { delete e.data.step }],
  ["A4 step/end fractional step", 20, (e) => { e.data.step = 1.5 }],
  // A4/A8 user/message
  ["A8 user/message role assistant", 4, (e) => { e.data.role = "assistant" }],
  ["A8 user/message empty id", 4, (e) => { e.data.id = "" }],
  ["A8 user/message empty source kind", 4, (e) => { e.data.source = { kind: "" } }],
  ["A8 user/message source without kind", 4, (e) => { e.data.source = { plugin: "x" } }],
  ["A8 user/message text block without text", 4, (e) => { e.data.content = [{ type: "text" }] }],
  ["A8 user/message image without mediaType", 4, (e) => { e.data.content = [{ type: "image", data: "AA==" }] }],
  ["A8 user/message reasoning block", 4, (e) => { e.data.content = [{ type: "reasoning", text: "x" }] }],
  ["A8 user/message extra message key", 4, (e) => { e.data.name = "x" }],
  // assistant/chunk
  ["A4 chunk unknown type", 7, (e) => { e.data.chunk = { type: "delta", index: 0, text: "x" } }],
  ["A4 chunk block-start image", 6, (e) => { e.data.chunk.block = "image" }],
  ["A4 chunk tool-call block-start without name", 12, (e) => { delete e.data.chunk.name }],
  ["A4 chunk negative index", 7, (e) => { e.data.chunk.index = -1 }],
  ["A4 chunk usage negative tokens", 15, (e) => { e.data.chunk.usage.inputTokens = -1 }],
  ["A4 chunk usage without outputTokens", 15, (e) => { delete e.data.chunk.usage.outputTokens }],
  ["A4 chunk finish unknown kind", 16, (e) => { e.data.chunk.finish = { kind: "done" } }],
  ["A4 chunk finish error without failure", 36, (e) => { delete e.data.chunk.finish.failure }],
  ["A4 chunk attempt 0", 7, (e) => { e.data.attempt = 0 }],
  ["A4 chunk extra data key", 7, (e) => { e.data.extra = true }],
  // assistant/message
  ["A8 assistant/message role user", 17, (e) => { e.data.message.role = "user" }],
  ["A8 assistant/message source kind user", 17, (e) => { e.data.message.source = { kind: "user" } }],
  ["A8 assistant/message source without model", 17, (e) => { delete e.data.message.source.model }],
  ["A8 assistant/message image block", 17, (e) => { e.data.message.content.push({ type: "image", mediaType: "image/png", data: "AA==" }) }],
  ["A8 assistant/message empty id", 17, (e) => { e.data.message.id = "" }],
  ["A4 assistant/message interrupted false", 17, (e) => { e.data.interrupted = false }],
  ["A4 assistant/message usage not a Usage", 17, (e) => { e.data.usage = { inputTokens: "3", outputTokens: 4 } }],
  ["A5 assistant/message replace op", 17, (e) => { e.surfaceOp = { op: "replace", start: 4, end: 4 } }],
  // tool/call
  ["A4 tool/call arguments object", 18, (e) => { e.data.arguments = { x: 1 } }],
  ["A4 tool/call without callId", 18, (e) => { delete e.data.callId }],
  // tool/result
  ["A8 tool/result two blocks", 19, (e) => { e.data.message.content.push(e.data.message.content[0]) }],
  ["A8 tool/result source callId differs", 19, (e) => { e.data.message.source.callId = "c2" }],
  ["A8 tool/result block toolCallId differs", 19, (e) => { e.data.message.content[0].toolCallId = "c2" }],
  ["A8 tool/result source kind user", 19, (e) => { e.data.message.source = { kind: "user", callId: "c1" } }],
  ["A8 tool/result without isError", 19, (e) => { delete e.data.message.content[0].isError }],
  ["A8 tool/result text block in message", 19, (e) => { e.data.message.content = [{ type: "text", text: "x" }] }],
  ["A4 tool/result error without code", 19, (e) => { e.data.error = { name: "E" } }],
  // request/header
  ["A4 request/header unknown reason", 5, (e) => { e.data.reason = "again" }],
  ["A4 request/header without tools", 5, (e) => { delete e.data.header.tools }],
  ["A4 request/header tool without description", 5, (e) => { delete e.data.header.tools[0].description }],
  ["A4 request/header system not a string", 5, (e) => { e.data.header.system = 1 }],
  // llm/retry
  ["A4 llm/retry negative delayMs", 37, (e) => { e.data.delayMs = -1 }],
  ["A4 llm/retry failure without message", 37, (e) => { delete e.data.failure.message }],
  // agent/inbox/spliced
  ["A4 splice unknown target", 0, (e) => { e.data.target = "later" }],
  ["A4 splice negative start", 0, (e) => { e.data.start = -1 }],
  ["A4 splice removedCount 0", 2, (e) => { e.data.removedCount = 0 }],
  ["A4 splice unknown outcome", 2, (e) => { e.data.outcome = "dropped" }],
  ["A4 splice invalid inserted message", 0, (e) => { e.data.inserted[0].role = "assistant" }],
  ["A9 splice INS with outcome", 0, (e) => { e.data.outcome = "canceled" }],
  ["A9 splice nothing removed or inserted", 31, (e) => { e.data.inserted = [] }],
  ["A9 splice REP without outcome", 2, (e) => { e.data.inserted = [user("Z")] }],
  ["A9 splice start beyond the list", 31, (e) => { e.data.start = 1 }],
  ["A9 splice removing more than the list holds", 33, (e) => { e.data.removedCount = 2 }],
  ["A9 splice inserting one id twice", 31, (e) => { e.data.inserted = [user("B"), user("B")] }],
  // compaction/*
  ["A4 compaction/start turn 0", 46, (e) => { e.data.turn = 0 }],
  ["A4 compaction/start turn string", 46, (e) => { e.data.turn = "1" }],
  ["A4 compaction/start without turn", 46, (e) => { delete e.data.turn }],
  ["A4 compaction/end error message not a string", 49, (e) => { e.data.error = { message: 5 } }],
  ["A4 compaction/end error extra key", 49, (e) => { e.data.error = { message: "m", code: "X" } }],
  // A5 surface metadata
  ["A5 user/message without surfaceOp", 4, (e) => { delete e.surfaceOp }],
  ["A5 tool/result without surfaceOp", 19, (e) => { delete e.surfaceOp }],
  ["A5 surfaceOp on turn/start", 1, (e) => { e.surfaceOp = "append" }],
  ["A5 sourceEventSeqs on tool/call", 18, (e) => { e.sourceEventSeqs = [17] }],
  ["A5 sourceEventSeqs on compaction/start", 46, (e) => { e.sourceEventSeqs = [45] }],
  ["A5 unknown surfaceOp", 4, (e) => { e.surfaceOp = "prepend" }],
  ["A5 replace op with negative start", 48, (e) => { e.surfaceOp = { op: "replace", start: -1, end: 26 } }],
  ["A5 replace op with extra key", 48, (e) => { e.surfaceOp = { op: "replace", start: 4, end: 26, keep: true } }],
  // A6 citations
  ["A6 duplicate cited seq", 48, (e) => { e.sourceEventSeqs = [4, 4, 17, 30, 26, 46] }],
  ["A6 citing its own seq", 48, (e) => { e.sourceEventSeqs = [4, 17, 30, 26, 46, 48] }],
  ["A6 citing a negative seq", 48, (e) => { e.sourceEventSeqs = [-1, 4, 17, 30, 26, 46] }],
  ["A6 citing a fractional seq", 48, (e) => { e.sourceEventSeqs = [4, 17, 30, 26, 46, 1.5] }],
  ["A6 empty citations on a replacement", 30, (e) => { e.sourceEventSeqs = [] }],
  ["A6 citations on an appended user/message", 4, (e) => { e.sourceEventSeqs = [3] }],
  // A7 replacement
  ["A7 start not on the surface", 48, (e) => { e.surfaceOp = { op: "replace", start: 5, end: 26 } }],
  ["A7 end not on the surface", 48, (e) => { e.surfaceOp = { op: "replace", start: 4, end: 19 } }],
  ["A7 start after end", 48, (e) => { e.surfaceOp = { op: "replace", start: 26, end: 4 } }],
  ["A7 a shadowed seq not cited", 48, (e) => { e.sourceEventSeqs = [4, 17, 26, 46] }],
  ["A7 range separating a call from its result", 48, (e) => { e.surfaceOp = { op: "replace", start: 4, end: 17 }; e.sourceEventSeqs = [4, 17] }],
  ["A7 tool/result replacing an assistant/message", 30, (e) => { e.surfaceOp = { op: "replace", start: 17, end: 17 }; e.sourceEventSeqs = [17] }],
  ["A7 tool/result replacing two nodes", 30, (e) => { e.surfaceOp = { op: "replace", start: 19, end: 26 }; e.sourceEventSeqs = [19, 26] }],
  ["A7 tool/result replacement changing isError", 30, (e) => { e.data.message.content[0].isError = true }],
  ["A7 tool/result replacement changing the message id", 30, (e) => { e.data.message.id = "other" }]
]

interface StmtFormat {
  readonly run: (...p: ReadonlyArray<unknown>) => { readonly changes: number }
  readonly get: (...p: ReadonlyArray<unknown>) => any
}
interface DbFormat {
  readonly prepare: (sql: string) => StmtFormat
  readonly close: () => void
}
const DatabaseFormat = createRequire(import.meta.url)("better-sqlite3") as new(filename: string) => DbFormat
const rawFormat = <A>(file: string, body: (db: DbFormat) => A): A => {
  const db = new DatabaseFormat(file)
  try {
    return body(db)
  } finally {
    db.close()
  }
}
const freshFileFormat = () => path.join(dirFormat, `store-${++files}.db`)

/** Runs `program` against an agent over the SQLite store in `filename`. */
const sqliteRun = <A, E, R>(
  filename: string,
  script: Parameters<typeof agentOver>[0],
  program: Effect.Effect<A, E, R>,
  options: Parameters<typeof agentOver>[1] = {}
) =>
  Effect.scoped(
    Effect.provide(
      program as Effect.Effect<A, E, Exclude<R, Scope.Scope> | Scope.Scope>,
      agentOver(script, options).pipe(Layer.provide(SqliteSessionStore.layer({ filename })))
    )
  )

/** Whether the mutated event survives a JSON round trip unchanged (so a SQLite row can hold it). */
const jsonable = (e: unknown) => isDeepStrictEqual(JSON.parse(JSON.stringify(e)), e)

/** Flaws a JSON row cannot hold (non-finite numbers, -0, undefined, holes, class instances). */
const memoryOnly = (name: string) => name.startsWith("A3 ") || name === "A1 time -0"

/** The `_tag` of an exit's typed failure; "ok" for a success, "defect" for a defect or interruption. */
const failureTag = (exit: Exit.Exit<unknown, unknown>): string => {
  if (Exit.isSuccess(exit)) return "ok"
  const failure = Cause.failureOption(exit.cause)
  return Option.isSome(failure) ? String((failure.value as { readonly _tag?: unknown })._tag) : "defect"
}

describe("§8.10 SqliteSessionStore options and file", () => {
  // Records the better-sqlite3 connections opened while `body` runs, so the store's own connection
  // (a per-connection pragma) can be inspected.
  const capturing = <A, E>(body: Effect.Effect<A, E>, seen: Array<Db>) =>
    Effect.acquireUseRelease(
      Effect.sync(() => {
        const proto = Database.prototype as unknown as { prepare: (this: Db, sql: string) => Stmt }
        const original = proto.prepare
        proto.prepare = function(this: Db, sql: string) {
          if (!seen.includes(this)) seen.push(this)
          return original.call(this, sql)
        }
        return original
      }),
      () => body,
      (original) =>
        Effect.sync(() => {
          ;(Database.prototype as unknown as { prepare: unknown }).prepare = original
        })
    )

  for (
    const [option, expected] of [[undefined, 1], ["OFF", 0], ["NORMAL", 1], ["FULL", 2]] as const
  ) {
    it.effect(`synchronous ${option ?? "(default NORMAL)"} is set on the store's connection (PRAGMA synchronous = ${expected})`, () =>
      Effect.gen(function*() {
        const filename = freshFile()
        const seen: Array<Db> = []
        const value = yield* capturing(
          Effect.scoped(Effect.gen(function*() {
            const store = Context.get(
              yield* Layer.build(SqliteSessionStore.layer(option === undefined ? { filename } : { filename, synchronous: option })),
              SessionStore
            )
            yield* store.create(makeHeader(S), [])
            const mine = seen.filter((db) => db.name === filename && db.open)
            expect(mine.length).toBeGreaterThan(0)
            return mine.map((db) => db.pragma("synchronous", { simple: true }))
          })),
          seen
        )
        expect(new Set(value)).toEqual(new Set([expected]))
      }))
  }

  it.effect("6.1/8.10: the file is 0600 even under umask 000; the -wal and -shm files too; WAL on the file", () =>
    Effect.gen(function*() {
      const filename = freshFile()
      const previous = process.umask(0)
      try {
        yield* Effect.scoped(Effect.gen(function*() {
          const store = Context.get(yield* Layer.build(SqliteSessionStore.layer({ filename })), SessionStore)
          yield* store.create(makeHeader(S), turnEvents(0, 1, 1000, makeUserMessage("m", "x"), "y"))
          expect(modeOf(filename)).toBe(0o600)
          expect(modeOf(`${filename}-wal`)).toBe(0o600)
          expect(modeOf(`${filename}-shm`)).toBe(0o600)
        }))
      } finally {
        process.umask(previous)
      }
      expect(raw(filename, (db) => db.pragma("journal_mode", { simple: true }))).toBe("wal")
    }))

  it.effect("8.10 own migrations: a file migrated by an older tiller (no leases table) is upgraded on open and works", () =>
    Effect.gen(function*() {
      const filename = freshFile()
      const events = turnEvents(0, 1, 1000, makeUserMessage("m", "x"), "y")
      yield* Effect.scoped(Effect.gen(function*() {
        const store = Context.get(yield* Layer.build(SqliteSessionStore.layer({ filename })), SessionStore)
        yield* store.create(makeHeader(S), events)
      }))
      raw(filename, (db) => {
        db.exec("DROP TABLE leases")
        db.prepare("DELETE FROM tiller_migrations WHERE migration_id = 2").run()
      })
      yield* Effect.scoped(Effect.gen(function*() {
        yield* Layer.build(
          Agent.layer({ resume: S, model: { provider: "p", model: "m" } }).pipe(
            Layer.provideMerge(Layer.mergeAll(SqliteSessionStore.layer({ filename }), ScriptedModel.layer([]), Tools.layer()))
          )
        )
      }))
      const tables = raw(filename, (db) => db.prepare("SELECT name FROM sqlite_master WHERE type = 'table'").all().map((r) => r.name))
      expect(tables).toContain("leases")
      const loaded = yield* Effect.flatMap(SessionStore, (s) => s.load(S)).pipe(
        Effect.provide(SqliteSessionStore.layer({ filename }))
      )
      expect(loaded.events.slice(0, events.length)).toStrictEqual(events)
      expect(loaded.events.at(-1)?.type).toBe("session/end-seed")
    }))
})

describe("§6.1 one row per logical event; load decodes every row", () => {
  it.effect("6.1: an agent turn with streamed chunks stores exactly one row per event, seq = row key; length agrees", () =>
    Effect.gen(function*() {
      const filename = freshFile()
      const events = yield* Effect.scoped(Effect.gen(function*() {
        const ctx = yield* Layer.build(
          Agent.layer({ sessionId: S, model: { provider: "p", model: "m" } }).pipe(
            Layer.provideMerge(Layer.mergeAll(
              SqliteSessionStore.layer({ filename }),
              ScriptedModel.layer([ScriptedModel.text("one two three four five")]),
              Tools.layer()
            ))
          )
        )
        const driver = Context.get(ctx, Driver)
        const log = Context.get(ctx, SessionLog)
        yield* driver.followup(user("hi"))
        yield* driver.whenIdle
        yield* log.flush
        return yield* log.events
      }))
      expect(events.some((e) => e.type.includes("chunk"))).toBe(true)
      const rows = raw(filename, (db) => db.prepare("SELECT seq, row FROM events WHERE session_id = ? ORDER BY seq").all(S))
      const length = raw(filename, (db) => db.prepare("SELECT length FROM sessions WHERE id = ?").get(S).length)
      expect(rows.length).toBe(events.length)
      expect(length).toBe(events.length)
      rows.forEach((r, i) => {
        expect(r.seq).toBe(i)
        expect(JSON.parse(r.row)).toStrictEqual(JSON.parse(JSON.stringify(events[i])))
      })
    }))

  it.effect("6.1/6.4: a row with a negative time loads as MalformedLog with its seq", () =>
    Effect.gen(function*() {
      const filename = freshFile()
      const events = turnEvents(0, 1, 1000, makeUserMessage("m", "x"), "y")
      yield* Effect.flatMap(SessionStore, (s) => s.create(makeHeader(S), events)).pipe(
        Effect.provide(SqliteSessionStore.layer({ filename }))
      )
      const load = Effect.flatMap(SessionStore, (s) => s.load(S)).pipe(Effect.provide(SqliteSessionStore.layer({ filename })))
      const original = raw(filename, (db) => db.prepare("SELECT row FROM events WHERE session_id = ? AND seq = 3").get(S).row)
      const bad = { ...JSON.parse(original), time: -5 }
      raw(filename, (db) => db.prepare("UPDATE events SET row = ? WHERE session_id = ? AND seq = 3").run(JSON.stringify(bad), S))
      const error = yield* failureOf(load)
      expect(error).toBeInstanceOf(MalformedLog)
      expect(error).toMatchObject({ sessionId: S, seq: 3 })
    }))

  it.effect("6.8/2.9: a header with formatVersion 2 and a row shape this version does not know is UnsupportedLogVersion, not MalformedLog", () =>
    Effect.gen(function*() {
      const filename = freshFile()
      yield* Effect.flatMap(SessionStore, (s) => s.create(makeHeader(S), turnEvents(0, 1, 1000, makeUserMessage("m", "x"), "y"))).pipe(
        Effect.provide(SqliteSessionStore.layer({ filename }))
      )
      raw(filename, (db) => {
        const header = JSON.parse(db.prepare("SELECT header FROM sessions WHERE id = ?").get(S).header)
        db.prepare("UPDATE sessions SET header = ? WHERE id = ?").run(JSON.stringify({ ...header, formatVersion: 2, extra: 1 }), S)
        db.prepare("UPDATE events SET row = ? WHERE session_id = ? AND seq = 0").run("{\"v2\":true}", S)
      })
      const error = yield* failureOf(
        Effect.flatMap(SessionStore, (s) => s.load(S)).pipe(Effect.provide(SqliteSessionStore.layer({ filename })))
      )
      expect(error).toBeInstanceOf(UnsupportedLogVersion)
      expect(error).toMatchObject({ sessionId: S, found: 2, supported: 1 })
    }))
})

describe("§6.1 two stores / processes on one file", () => {
  it.effect("6.1: two store layers on one file: each sees the other's committed sessions; a stale append fails PersistenceError and writes nothing", () =>
    Effect.gen(function*() {
      const filename = freshFile()
      yield* Effect.scoped(Effect.gen(function*() {
        const one = Context.get(yield* Layer.build(SqliteSessionStore.layer({ filename })), SessionStore)
        const two = Context.get(yield* Layer.build(SqliteSessionStore.layer({ filename })), SessionStore)
        const A = SessionId.make("a")
        const B = SessionId.make("b")
        yield* one.create(makeHeader(A), [])
        yield* two.create(makeHeader(B), [])
        expect(yield* one.exists(B)).toBe(true)
        expect((yield* two.list).map((h) => h.sessionId)).toEqual(["a", "b"])
        const ev = turnEvents(0, 1, 1000, makeUserMessage("m", "x"), "y")
        yield* one.append(A, nonEmpty(ev))
        const stale = yield* failureOf(two.append(A, nonEmpty(ev)))
        expect(stale._tag).toBe("PersistenceError")
        expect((yield* two.load(A)).events).toStrictEqual(ev)
      }))
    }))

  it.live("6.1/8.10: two processes opening a fresh file at the same moment both migrate and write (no migration race)", () =>
    Effect.gen(function*() {
      const filename = freshFile()
      const script = path.join(scripts, `child-${files}.ts`)
      fs.writeFileSync(
        script,
        `import { Effect } from "effect"
import { SqliteSessionStore, SessionStore, SessionId } from ${JSON.stringify(path.join(ROOT, "src/index.ts"))}
const id = SessionId.make(process.argv[2])
const program = Effect.flatMap(SessionStore, (s) => s.create({ formatVersion: 1, sessionId: id, createdAt: 1, seedLength: 0 }, []))
Effect.runPromise(program.pipe(Effect.provide(SqliteSessionStore.layer({ filename: ${JSON.stringify(filename)} }))))
  .then(() => process.exit(0), (e) => { console.error(String(e)); process.exit(3) })
`
      )
      const run = (name: string) =>
        Effect.async<{ code: number | null; stderr: string }>((resume) => {
          const child = spawn(process.execPath, ["--import", "tsx", script, name], { cwd: ROOT, stdio: ["ignore", "ignore", "pipe"] })
          let stderr = ""
          child.stderr.setEncoding("utf8").on("data", (t: string) => (stderr += t))
          child.on("close", (code) => resume(Effect.succeed({ code, stderr })))
        })
      const results = yield* Effect.all([run("p1"), run("p2"), run("p3")], { concurrency: "unbounded" })
      for (const r of results) expect(r, r.stderr).toMatchObject({ code: 0 })
      const ids = raw(filename, (db) => db.prepare("SELECT id FROM sessions ORDER BY id").all().map((r) => r.id))
      expect(ids).toEqual(["p1", "p2", "p3"])
      expect(modeOf(filename)).toBe(0o600)
    }), 60_000)

  it.live("6.1: an agent held by a process keeps a lease row; a second store layer in another process is refused AgentBusy", () =>
    Effect.gen(function*() {
      const filename = freshFile()
      const script = path.join(scripts, `child-busy-${files}.ts`)
      fs.writeFileSync(
        script,
        `import { Effect, Layer, Either } from "effect"
import { Agent, ScriptedModel, SqliteSessionStore, Tools, SessionId } from ${JSON.stringify(path.join(ROOT, "src/index.ts"))}
const layer = Agent.layer({ resume: SessionId.make("s8"), model: { provider: "p", model: "m" } }).pipe(
  Layer.provideMerge(Layer.mergeAll(SqliteSessionStore.layer({ filename: ${JSON.stringify(filename)} }), ScriptedModel.layer([]), Tools.layer())))
Effect.runPromise(Effect.either(Effect.scoped(Layer.build(layer)))).then((r) => {
  console.log(Either.isLeft(r) ? r.left._tag + ":" + (r.left as any).operation : "opened")
  process.exit(0)
})
`
      )
      yield* Effect.scoped(Effect.gen(function*() {
        yield* Layer.build(
          Agent.layer({ sessionId: S, model: { provider: "p", model: "m" } }).pipe(
            Layer.provideMerge(Layer.mergeAll(SqliteSessionStore.layer({ filename }), ScriptedModel.layer([]), Tools.layer()))
          )
        )
        const out = yield* Effect.async<string>((resume) => {
          const child = spawn(process.execPath, ["--import", "tsx", script], { cwd: ROOT, stdio: ["ignore", "pipe", "pipe"] })
          let stdout = ""
          child.stdout.setEncoding("utf8").on("data", (t: string) => (stdout += t))
          child.on("close", () => resume(Effect.succeed(stdout.trim())))
        })
        expect(out).toBe(`${new AgentBusy({ sessionId: S, operation: "open", phase: "open" })._tag}:open`)
      }))
    }), 60_000)
})

describe("§5.1 the same flaw in a SQLite row is MalformedLog {seq} on resume", () => {
  it.effect("A3: a row whose text is not JSON (a NaN literal) → MalformedLog at seq 29 (SQLite row)", () =>
    Effect.gen(function*() {
      const es = yield* Effect.scoped(richLog)
      const filename = freshFileFormat()
      yield* Effect.scoped(Effect.gen(function*() {
        const store = Context.get(yield* Layer.build(SqliteSessionStore.layer({ filename })), SessionStore)
        yield* store.create(header("bad"), es)
      }))
      rawFormat(filename, (db) =>
        db.prepare("UPDATE events SET row = ? WHERE session_id = ? AND seq = 29").run(
          "{\"type\":\"x/note\",\"seq\":29,\"time\":0,\"data\":{\"k\":NaN},\"ignorable\":true}",
          "bad"
        ))
      const exit = yield* Effect.exit(sqliteRun(filename, [], Effect.void, { sessionId: "bad", resume: true }))
      expect(outcome(exit)).toBe("MalformedLog@29")
    }))

  for (const [name, seq, f] of cases.filter(([name]) => !memoryOnly(name))) {
    it.effect(`${name} → MalformedLog at seq ${seq} (SQLite row)`, () =>
      Effect.gen(function*() {
        const es = yield* Effect.scoped(richLog)
        const bad = mutate(es, seq, f)[seq]!
        expect(jsonable(bad)).toBe(true)
        const filename = freshFileFormat()
        yield* Effect.scoped(Effect.gen(function*() {
          const store = Context.get(yield* Layer.build(SqliteSessionStore.layer({ filename })), SessionStore)
          yield* store.create(header("bad"), es)
        }))
        const changed = rawFormat(filename, (db) =>
          db.prepare("UPDATE events SET row = ? WHERE session_id = ? AND seq = ?").run(JSON.stringify(bad), "bad", seq).changes)
        expect(changed).toBe(1)
        const exit = yield* Effect.exit(sqliteRun(filename, [], Effect.void, { sessionId: "bad", resume: true }))
        expect(outcome(exit)).toBe(`MalformedLog@${seq}`)
        expect(rawFormat(filename, (db) => db.prepare("SELECT count(*) AS n FROM events WHERE session_id = ?").get("bad").n)).toBe(es.length)
      }))
  }
})

describe("§2.9/§6.8 format version", () => {
  const versioned = (filename: string, version: unknown) =>
    Effect.gen(function*() {
      const live = yield* sqliteRun(filename, [ScriptedModel.text("a")], Effect.gen(function*() {
        const driver = yield* Driver
        yield* driver.followup(user("A"))
        yield* driver.whenIdle
        yield* (yield* SessionLog).flush
        return yield* (yield* SessionLog).events
      }))
      rawFormat(filename, (db) => {
        const h = JSON.parse(db.prepare("SELECT header FROM sessions WHERE id = ?").get("s").header)
        db.prepare("UPDATE sessions SET header = ? WHERE id = ?").run(JSON.stringify({ ...h, formatVersion: version }), "s")
      })
      return live.length
    })
  const rowCount = (filename: string) => rawFormat(filename, (db) => db.prepare("SELECT count(*) AS n FROM events WHERE session_id = ?").get("s").n)

  for (const version of [2, 0]) {
    it.effect(`2.9/6.8: formatVersion ${version}: resume, Sessions.open and Sessions.fork fail UnsupportedLogVersion {found: ${version}, supported: 1}; nothing is written`, () =>
      Effect.gen(function*() {
        const filename = freshFileFormat()
        const length = yield* versioned(filename, version)
        const expected = { _tag: "UnsupportedLogVersion", sessionId: "s", found: version, supported: LOG_FORMAT_VERSION }
        expect(yield* Effect.flip(sqliteRun(filename, [], Effect.void, { resume: true }))).toMatchObject(expected)
        const sessions = Sessions.layer({ model: { provider: "p", model: "m" }, idleTimeToLive: Duration.zero }).pipe(
          Layer.provide(Layer.mergeAll(SqliteSessionStore.layer({ filename }), ScriptedModel.layer([]), Tools.layer()))
        )
        const [opened, forked] = yield* Effect.scoped(Effect.gen(function*() {
          const s = yield* Sessions
          return [
            yield* Effect.flip(Effect.scoped(s.open(sid("s")))),
            yield* Effect.flip(s.fork({ source: sid("s"), childId: sid("kid") }))
          ] as const
        })).pipe(Effect.provide(sessions))
        expect(opened).toMatchObject(expected)
        expect(forked).toMatchObject(expected)
        expect(rowCount(filename)).toBe(length)
        expect(rawFormat(filename, (db) => db.prepare("SELECT count(*) AS n FROM sessions WHERE id = ?").get("kid").n)).toBe(0)
      }))
  }

  it.effect("2.9: a version-1 header with the same rows opens (the version check is the only difference)", () =>
    Effect.gen(function*() {
      const filename = freshFileFormat()
      const length = yield* versioned(filename, 1)
      const after = yield* sqliteRun(filename, [], Effect.flatMap(SessionLog, (log) => Effect.map(log.events, (es) => es.length)), { resume: true })
      expect(after).toBe(length + 1)
      expect(rowCount(filename)).toBe(length + 1)
    }))
})

describe("§2.9/§6.1 version check of the memory store", () => {
  it.scoped("2.9/6.1: a stored header whose formatVersion is not the number 1 fails load and resume with a typed error, not a defect", () =>
    Effect.gen(function*() {
      const ctx = yield* Layer.build(SessionStore.layerMemory)
      const store = Context.get(ctx, SessionStore)
      const id = SessionId.make("v")
      yield* store.create({ formatVersion: "2", sessionId: id, createdAt: 0, seedLength: 0 } as unknown as SessionHeader, [])
      const loaded = yield* Effect.exit(store.load(id))
      const resumed = yield* Effect.exit(
        Effect.scoped(Layer.build(agentOver([], { sessionId: "v", resume: true }).pipe(Layer.provide(Layer.succeedContext(ctx)))))
      )
      // UnsupportedLogVersion (the version differs) or MalformedLog (the header is not a header) are both typed.
      const typed = (tag: string) => (tag === "UnsupportedLogVersion" || tag === "MalformedLog" ? "typed" : tag)
      expect([typed(failureTag(loaded)), typed(failureTag(resumed))]).toEqual(["typed", "typed"])
    }))
})