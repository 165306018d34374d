/**
 * Fresh audit 8: SqliteSessionStore (SPEC 6.1-6.4, 8.10) beyond the existing store tests, and the
 * README's main-job command / CLI error handling.
 */
import { afterAll, describe, expect, it } from "@effect/vitest"
import { Context, Effect, Either, Layer } from "effect"
import { spawn } from "node:child_process"
import * as fs from "node:fs"
import { createRequire } from "node:module"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { AgentBusy, MalformedLog, UnsupportedLogVersion } from "../../src/domain/Errors.js"
import type { SessionEvent } from "../../src/domain/Event.js"
import { SessionId } from "../../src/domain/Ids.js"
import { Agent } from "../../src/layers/Agent.js"
import { ScriptedModel } from "../../src/layers/ScriptedModel.js"
import { SqliteSessionStore } from "../../src/layers/SqliteStore.js"
import { Driver } from "../../src/services/Driver.js"
import { SessionLog } from "../../src/services/SessionLog.js"
import { SessionStore } from "../../src/services/SessionStore.js"
import { Tools } from "../../src/services/Tools.js"
import { user } from "../agent/harness.js"
import { makeHeader, makeUserMessage, turnEvents } from "../contracts/SessionStoreContract.js"
import { tiller } from "../cli/harness.js"

const ROOT = fileURLToPath(new URL("../../", import.meta.url))
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "tiller-audit8-"))
// Child scripts live inside the project, where their imports ("effect", "tsx") resolve.
fs.mkdirSync(path.join(ROOT, "node_modules", ".cache"), { recursive: true })
const scripts = fs.mkdtempSync(path.join(ROOT, "node_modules", ".cache", "tiller-audit8-"))
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

describe("README main job and CLI errors", () => {
  const TIMEOUT = 120_000
  const tempCwd = () => fs.mkdtempSync(path.join(dir, "cwd-"))
  const noStack = (text: string) => expect(text).not.toMatch(/^\s+at .+:\d+:\d+\)?$/m)

  it.live("README Quickstart: `npm start` (tiller chat) with piped input prints a readable transcript, creates ./.tiller/sessions.db (0600) and exits 0", () =>
    Effect.gen(function*() {
      const cwd = tempCwd()
      const out = yield* tiller(cwd, ["chat"], { input: "/inject note\nhello\n/quit\n" })
      expect(out.code).toBe(0)
      noStack(out.stdout + out.stderr)
      expect(out.stdout).toContain("» [cli:inject] note")
      expect(out.stdout).toContain("» [user] hello")
      expect(out.stdout).toContain("── turn 1 completed")
      expect(out.stdout).toMatch(/\[idle · 1 turn · pending: 0 queued, 0 next-step\]/)
      expect(modeOf(path.join(cwd, ".tiller", "sessions.db"))).toBe(0o600)
    }), TIMEOUT)

  for (
    const [name, args, pattern] of [
      ["unknown subcommand", ["bogus"], /Invalid subcommand/],
      ["missing PROMPT", ["run"], /Missing argument <PROMPT>/],
      ["unknown session for log", ["log", "nosuch"], /no session nosuch/],
      ["unknown model", ["--model", "nosuchmodel", "run", "hi"], /unknown model "nosuchmodel"/],
      ["a file that is not a database", ["sessions", "--db", "junk.db"], /not a database/],
      ["an unknown option", ["sessions", "--json"], /unknown argument/]
    ] as const
  ) {
    it.live(`bad input (${name}): a clear one-line error on stderr, non-zero exit, no stack trace`, () =>
      Effect.gen(function*() {
        const cwd = tempCwd()
        fs.writeFileSync(path.join(cwd, "junk.db"), "this is not a database ".repeat(20))
        const out = yield* tiller(cwd, args)
        expect(out.code).not.toBe(0)
        expect(out.stderr).toMatch(pattern)
        noStack(out.stdout + out.stderr)
      }), TIMEOUT)
  }

  // README "tiller run PROMPT [--inject TEXT]...". Regression test: a trailing `--inject` with no TEXT
  // was once silently dropped (the turn ran with the prompt alone and the command exited 0).
  it.live("README run: `tiller run hi --inject` (missing TEXT) is refused with a non-zero exit", () =>
    Effect.gen(function*() {
      const cwd = tempCwd()
      const out = yield* tiller(cwd, ["run", "hi", "--inject"])
      expect(out.code).not.toBe(0)
      noStack(out.stdout + out.stderr)
    }), TIMEOUT)
})
