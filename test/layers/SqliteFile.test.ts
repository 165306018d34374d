/**
 * The SQLite store's file (SPEC 2.9, 5.1, 6.1, 6.8, 8.10): options, one row per logical event, two
 * stores on one file, format version, a flaw in a row; and the memory store's version check.
 */
import { afterAll, describe, expect, it } from "@effect/vitest"
import { Cause, Context, Duration, Effect, Either, Exit, Layer, Option } from "effect"
import { spawn } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { isDeepStrictEqual } from "node:util"
import { AgentBusy, MalformedLog, UnsupportedLogVersion } from "../../src/domain/Errors.js"
import type { SessionEvent } from "../../src/domain/Event.js"
import { SessionId } from "../../src/domain/Ids.js"
import { LOG_FORMAT_VERSION, Sessions } from "../../src/index.js"
import type { SessionHeader } from "../../src/index.js"
import { Agent } from "../../src/layers/Agent.js"
import { ScriptedModel } from "../../src/layers/ScriptedModel.js"
import { SqliteSessionStore } from "../../src/layers/SqliteStore.js"
import { Driver } from "../../src/services/Driver.js"
import { SessionLog } from "../../src/services/SessionLog.js"
import { SessionStore } from "../../src/services/SessionStore.js"
import { Tools } from "../../src/services/Tools.js"
import { agentOver, user } from "../agent/harness.js"
import { makeHeader, makeUserMessage, turnEvents } from "../contracts/SessionStoreContract.js"
import { header, malformedCases, mutate, outcome, richLog, sid } from "../fixtures/richLog.js"
import { Database, raw, sqliteRun } from "../fixtures/sqliteFile.js"
import type { Db, Stmt } from "../fixtures/sqliteFile.js"

const ROOT = fileURLToPath(new URL("../../", import.meta.url))
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "tiller-sqlite-file-"))
// Child scripts live inside the project, where their imports ("effect", "tsx") resolve. Under
// node_modules no package.json says "type": "module", so they are .mts files: ES modules like the
// sources they import (a CommonJS script would load the sources through require, and the modules
// the SQLite store loads by import() a second time).
fs.mkdirSync(path.join(ROOT, "node_modules", ".cache"), { recursive: true })
const scripts = fs.mkdtempSync(path.join(ROOT, "node_modules", ".cache", "tiller-sqlite-file-"))
afterAll(() => {
  fs.rmSync(dir, { recursive: true, force: true })
  fs.rmSync(scripts, { recursive: true, force: true })
})
let files = 0
const freshFile = () => path.join(dir, `store-${++files}.db`)
const modeOf = (file: string) => fs.statSync(file).mode & 0o777

const failureOf = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.flatMap(
    Effect.either(effect),
    Either.match({
      onLeft: Effect.succeed,
      onRight: () => Effect.dieMessage("expected a failure, but the effect succeeded")
    })
  )

const nonEmpty = (events: ReadonlyArray<SessionEvent>) => events as readonly [SessionEvent, ...Array<SessionEvent>]
const S = SessionId.make("s8")

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
              yield* Layer.build(
                SqliteSessionStore.layer(option === undefined ? { filename } : { filename, synchronous: option })
              ),
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
        db.exec("DROP TABLE approval_answers")
        db.prepare("DELETE FROM tiller_migrations WHERE migration_id >= 2").run()
      })
      yield* Effect.scoped(Effect.gen(function*() {
        yield* Layer.build(
          Agent.layer({ resume: S, model: { provider: "p", model: "m" } }).pipe(
            Layer.provideMerge(
              Layer.mergeAll(SqliteSessionStore.layer({ filename }), ScriptedModel.layer([]), Tools.layer())
            )
          )
        )
      }))
      const tables = raw(
        filename,
        (db) => db.prepare("SELECT name FROM sqlite_master WHERE type = 'table'").all().map((r) => r.name)
      )
      expect(tables).toContain("leases")
      expect(tables).toContain("approval_answers")
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
      const rows = raw(
        filename,
        (db) => db.prepare("SELECT seq, row FROM events WHERE session_id = ? ORDER BY seq").all(S)
      )
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
      const load = Effect.flatMap(SessionStore, (s) => s.load(S)).pipe(
        Effect.provide(SqliteSessionStore.layer({ filename }))
      )
      const original = raw(filename, (db) =>
        db.prepare("SELECT row FROM events WHERE session_id = ? AND seq = 3").get(S).row)
      const bad = { ...JSON.parse(original), time: -5 }
      raw(filename, (db) =>
        db.prepare("UPDATE events SET row = ? WHERE session_id = ? AND seq = 3").run(JSON.stringify(bad), S))
      const error = yield* failureOf(load)
      expect(error).toBeInstanceOf(MalformedLog)
      expect(error).toMatchObject({ sessionId: S, seq: 3 })
    }))

  it.effect("6.8/2.9: a header with formatVersion 2 and a row shape this version does not know is UnsupportedLogVersion, not MalformedLog", () =>
    Effect.gen(function*() {
      const filename = freshFile()
      yield* Effect.flatMap(
        SessionStore,
        (s) => s.create(makeHeader(S), turnEvents(0, 1, 1000, makeUserMessage("m", "x"), "y"))
      ).pipe(
        Effect.provide(SqliteSessionStore.layer({ filename }))
      )
      raw(filename, (db) => {
        const header = JSON.parse(db.prepare("SELECT header FROM sessions WHERE id = ?").get(S).header)
        db.prepare("UPDATE sessions SET header = ? WHERE id = ?").run(
          JSON.stringify({ ...header, formatVersion: 2, extra: 1 }),
          S
        )
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

  it.live(
    "6.1/8.10: processes opening a fresh file at the same moment all migrate and write (no migration race; a connection left busy by the race is replaced), three times over",
    () =>
      Effect.gen(function*() {
        const filename = freshFile()
        const script = path.join(scripts, `child-${files}.mts`)
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
            const child = spawn(process.execPath, ["--import", "tsx", script, name], {
              cwd: ROOT,
              stdio: ["ignore", "ignore", "pipe"]
            })
            let stderr = ""
            child.stderr.setEncoding("utf8").on("data", (t: string) => (stderr += t))
            child.on("close", (code) => resume(Effect.succeed({ code, stderr })))
          })
        const results = yield* Effect.all([run("p1"), run("p2"), run("p3"), run("p4")], { concurrency: "unbounded" })
        for (const r of results) expect(r, r.stderr).toMatchObject({ code: 0 })
        const ids = raw(filename, (db) => db.prepare("SELECT id FROM sessions ORDER BY id").all().map((r) => r.id))
        expect(ids).toEqual(["p1", "p2", "p3", "p4"])
        expect(modeOf(filename)).toBe(0o600)
      }).pipe(Effect.repeatN(2)),
    120_000
  )

  it.live(
    "6.1: an agent held by a process keeps a lease row; a second store layer in another process is refused AgentBusy",
    () =>
      Effect.gen(function*() {
        const filename = freshFile()
        const script = path.join(scripts, `child-busy-${files}.mts`)
        fs.writeFileSync(
          script,
          `import { Effect, Layer, Either } from "effect"
import { Agent, ScriptedModel, SqliteSessionStore, Tools, SessionId } from ${
            JSON.stringify(path.join(ROOT, "src/index.ts"))
          }
const layer = Agent.layer({ resume: SessionId.make("s8"), model: { provider: "p", model: "m" } }).pipe(
  Layer.provideMerge(Layer.mergeAll(SqliteSessionStore.layer({ filename: ${
            JSON.stringify(filename)
          } }), ScriptedModel.layer([]), Tools.layer())))
Effect.runPromise(Effect.either(Effect.scoped(Layer.build(layer)))).then((r) => {
  console.log(Either.isLeft(r) ? r.left._tag + ":" + (r.left as any).operation : "opened")
  process.exit(0)
})
`
        )
        yield* Effect.scoped(Effect.gen(function*() {
          yield* Layer.build(
            Agent.layer({ sessionId: S, model: { provider: "p", model: "m" } }).pipe(
              Layer.provideMerge(
                Layer.mergeAll(SqliteSessionStore.layer({ filename }), ScriptedModel.layer([]), Tools.layer())
              )
            )
          )
          const out = yield* Effect.async<string>((resume) => {
            const child = spawn(process.execPath, ["--import", "tsx", script], {
              cwd: ROOT,
              stdio: ["ignore", "pipe", "pipe"]
            })
            let stdout = ""
            child.stdout.setEncoding("utf8").on("data", (t: string) => (stdout += t))
            child.on("close", () => resume(Effect.succeed(stdout.trim())))
          })
          expect(out).toBe(`${new AgentBusy({ sessionId: S, operation: "open", phase: "open" })._tag}:open`)
        }))
      }),
    60_000
  )
})

describe("§5.1 the same flaw in a SQLite row is MalformedLog {seq} on resume", () => {
  it.effect("A3: a row whose text is not JSON (a NaN literal) → MalformedLog at seq 29 (SQLite row)", () =>
    Effect.gen(function*() {
      const es = yield* Effect.scoped(richLog)
      const filename = freshFile()
      yield* Effect.scoped(Effect.gen(function*() {
        const store = Context.get(yield* Layer.build(SqliteSessionStore.layer({ filename })), SessionStore)
        yield* store.create(header("bad"), es)
      }))
      raw(filename, (db) =>
        db.prepare("UPDATE events SET row = ? WHERE session_id = ? AND seq = 29").run(
          "{\"type\":\"x/note\",\"seq\":29,\"time\":0,\"data\":{\"k\":NaN},\"ignorable\":true}",
          "bad"
        ))
      const exit = yield* Effect.exit(sqliteRun(filename, [], Effect.void, { sessionId: "bad", resume: true }))
      expect(outcome(exit)).toBe("MalformedLog@29")
    }))

  for (const [name, seq, f] of malformedCases.filter(([name]) => !memoryOnly(name))) {
    it.effect(`${name} → MalformedLog at seq ${seq} (SQLite row)`, () =>
      Effect.gen(function*() {
        const es = yield* Effect.scoped(richLog)
        const bad = mutate(es, seq, f)[seq]!
        expect(jsonable(bad)).toBe(true)
        const filename = freshFile()
        yield* Effect.scoped(Effect.gen(function*() {
          const store = Context.get(yield* Layer.build(SqliteSessionStore.layer({ filename })), SessionStore)
          yield* store.create(header("bad"), es)
        }))
        const changed = raw(filename, (db) =>
          db.prepare("UPDATE events SET row = ? WHERE session_id = ? AND seq = ?").run(JSON.stringify(bad), "bad", seq)
            .changes)
        expect(changed).toBe(1)
        const exit = yield* Effect.exit(sqliteRun(filename, [], Effect.void, { sessionId: "bad", resume: true }))
        expect(outcome(exit)).toBe(`MalformedLog@${seq}`)
        expect(raw(filename, (db) =>
          db.prepare("SELECT count(*) AS n FROM events WHERE session_id = ?").get("bad").n)).toBe(es.length)
      }))
  }
})

describe("§2.9/§6.8 format version", () => {
  const versioned = (filename: string, version: unknown) =>
    Effect.gen(function*() {
      const live = yield* sqliteRun(
        filename,
        [ScriptedModel.text("a")],
        Effect.gen(function*() {
          const driver = yield* Driver
          yield* driver.followup(user("A"))
          yield* driver.whenIdle
          yield* (yield* SessionLog).flush
          return yield* (yield* SessionLog).events
        })
      )
      raw(filename, (db) => {
        const h = JSON.parse(db.prepare("SELECT header FROM sessions WHERE id = ?").get("s").header)
        db.prepare("UPDATE sessions SET header = ? WHERE id = ?").run(
          JSON.stringify({ ...h, formatVersion: version }),
          "s"
        )
      })
      return live.length
    })
  const rowCount = (filename: string) =>
    raw(filename, (db) => db.prepare("SELECT count(*) AS n FROM events WHERE session_id = ?").get("s").n)

  for (const version of [2, 0]) {
    it.effect(`2.9/6.8: formatVersion ${version}: resume, Sessions.open and Sessions.fork fail UnsupportedLogVersion {found: ${version}, supported: 1}; nothing is written`, () =>
      Effect.gen(function*() {
        const filename = freshFile()
        const length = yield* versioned(filename, version)
        const expected = {
          _tag: "UnsupportedLogVersion",
          sessionId: "s",
          found: version,
          supported: LOG_FORMAT_VERSION
        }
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
        expect(raw(filename, (db) => db.prepare("SELECT count(*) AS n FROM sessions WHERE id = ?").get("kid").n)).toBe(
          0
        )
      }))
  }

  it.effect("2.9: a version-1 header with the same rows opens (the version check is the only difference)", () =>
    Effect.gen(function*() {
      const filename = freshFile()
      const length = yield* versioned(filename, 1)
      const after = yield* sqliteRun(
        filename,
        [],
        Effect.flatMap(SessionLog, (log) => Effect.map(log.events, (es) => es.length)),
        { resume: true }
      )
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
      yield* store.create(
        { formatVersion: "2", sessionId: id, createdAt: 0, seedLength: 0 } as unknown as SessionHeader,
        []
      )
      const loaded = yield* Effect.exit(store.load(id))
      const resumed = yield* Effect.exit(
        Effect.scoped(
          Layer.build(agentOver([], { sessionId: "v", resume: true }).pipe(Layer.provide(Layer.succeedContext(ctx))))
        )
      )
      // UnsupportedLogVersion (the version differs) or MalformedLog (the header is not a header) are both typed.
      const typed = (tag: string) => (tag === "UnsupportedLogVersion" || tag === "MalformedLog" ? "typed" : tag)
      expect([typed(failureTag(loaded)), typed(failureTag(resumed))]).toEqual(["typed", "typed"])
    }))
})
