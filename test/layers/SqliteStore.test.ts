import * as SqliteClient from "@effect/sql-sqlite-node/SqliteClient"
import * as SqlClient from "@effect/sql/SqlClient"
import { afterAll, describe, expect, it } from "@effect/vitest"
import Database from "better-sqlite3"
import { Context, Effect, Either, Exit, Fiber, Layer, Option, Scope, TestClock } from "effect"
import { build } from "esbuild"
import { spawn } from "node:child_process"
import * as fs from "node:fs"
import { createRequire } from "node:module"
import * as os from "node:os"
import * as path from "node:path"
import {
  AgentBusy,
  MalformedLog,
  PersistenceError,
  SessionExists,
  SessionNotFound,
  UnsupportedLogVersion
} from "../../src/domain/Errors.js"
import type { EventOf, SessionEvent } from "../../src/domain/Event.js"
import { LOG_FORMAT_VERSION } from "../../src/domain/Event.js"
import { SessionId } from "../../src/domain/Ids.js"
import { MAX_JSON_DEPTH } from "../../src/domain/Json.js"
import { Agent } from "../../src/layers/Agent.js"
import { ScriptedModel } from "../../src/layers/ScriptedModel.js"
import { SqliteSessionStore } from "../../src/layers/SqliteStore.js"
import { Driver } from "../../src/services/Driver.js"
import { Inbox } from "../../src/services/Inbox.js"
import { SessionLog } from "../../src/services/SessionLog.js"
import { SessionStore } from "../../src/services/SessionStore.js"
import { Tools } from "../../src/services/Tools.js"
import { user } from "../agent/harness.js"
import { makeHeader, makeUserMessage, sessionStoreContract, turnEvents } from "../contracts/SessionStoreContract.js"

const dir = fs.mkdtempSync(path.join(os.tmpdir(), "tiller-sqlite-"))
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }))

let files = 0
const freshFile = () => path.join(dir, `store-${++files}.db`)

// Every contract test gets a database file of its own.
sessionStoreContract(
  "sqlite",
  Layer.unwrapEffect(Effect.sync(() => SqliteSessionStore.layer({ filename: freshFile() })))
)
// ":memory:" is a private database per layer build (no file, no WAL).
sessionStoreContract("sqlite :memory:", SqliteSessionStore.layer({ filename: ":memory:" }))

const id = SessionId.make("session")
const A = makeUserMessage("a", "hello")
const nonEmpty = (events: ReadonlyArray<SessionEvent>) => events as readonly [SessionEvent, ...Array<SessionEvent>]

/** `turns` complete turns, 14 events each, numbered from turn 1. */
const turns = (first: number, count: number): Array<SessionEvent> =>
  Array.from(
    { length: count },
    (_, k) =>
      turnEvents(14 * (first + k), first + k + 1, 1000 * (first + k + 1), makeUserMessage(`m${first + k}`, "x"), "y")
  )
    .flat()

/** Runs `body` with a store over `filename`; the database closes afterwards. */
const withStore = <A, E>(filename: string, body: (store: SessionStore["Type"]) => Effect.Effect<A, E>) =>
  Effect.flatMap(SessionStore, body).pipe(Effect.provide(SqliteSessionStore.layer({ filename })))

/** Runs raw SQL on `filename` through a separate client (to inspect or corrupt what the store wrote). */
const withRawSql = <A, E>(filename: string, body: (sql: SqlClient.SqlClient) => Effect.Effect<A, E>) =>
  Effect.flatMap(SqlClient.SqlClient, body).pipe(Effect.provide(SqliteClient.layer({ filename })))

const modeOf = (file: string) => fs.statSync(file).mode & 0o777

/**
 * The failure of `effect`. Unlike `Effect.flip`, an unexpected success fails the test with a short
 * message: vitest hangs while formatting a failure whose message is a large value's JSON.
 */
const failureOf = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.flatMap(
    Effect.either(effect),
    Either.match({
      onLeft: Effect.succeed,
      onRight: () => Effect.dieMessage("expected a failure, but the effect succeeded")
    })
  )

describe("SqliteSessionStore", () => {
  it.effect("creates the database file (and its WAL) with mode 0600", () =>
    Effect.gen(function*() {
      const filename = freshFile()
      yield* withStore(filename, (store) =>
        Effect.gen(function*() {
          yield* store.create(makeHeader(id), turnEvents(0, 1, 1000, A, "hi"))
          expect(modeOf(filename)).toBe(0o600)
          expect(modeOf(`${filename}-wal`)).toBe(0o600)
        }))
      expect(modeOf(filename)).toBe(0o600)
    }))

  it.effect("runs in WAL journal mode", () =>
    Effect.gen(function*() {
      const filename = freshFile()
      yield* withStore(filename, (store) => store.create(makeHeader(id), []))
      const [mode] = yield* withRawSql(filename, (sql) => sql<{ journal_mode: string }>`PRAGMA journal_mode`)
      expect(mode).toEqual({ journal_mode: "wal" })
    }))

  it.effect("a reopened file holds every committed session, and stays writable", () =>
    Effect.gen(function*() {
      const filename = freshFile()
      const other = SessionId.make("other")
      const first = turns(0, 1)
      const second = turns(1, 1)
      yield* withStore(filename, (store) =>
        Effect.gen(function*() {
          yield* store.create(makeHeader(id, { metadata: { title: "t" } }), [])
          yield* store.append(id, nonEmpty(first))
          yield* store.create(makeHeader(other), second.map((event, seq) => ({ ...event, seq })))
        }))
      yield* withStore(filename, (store) =>
        Effect.gen(function*() {
          expect(yield* store.list).toStrictEqual([makeHeader(id, { metadata: { title: "t" } }), makeHeader(other)])
          expect(yield* store.load(id)).toStrictEqual({
            header: makeHeader(id, { metadata: { title: "t" } }),
            events: first
          })
          expect(yield* store.exists(other)).toBe(true)
          const exists = yield* failureOf(store.create(makeHeader(id), []))
          expect(exists).toBeInstanceOf(SessionExists)
          yield* store.append(id, nonEmpty(second))
        }))
      const reloaded = yield* withStore(filename, (store) => store.load(id))
      expect(reloaded.events).toStrictEqual([...first, ...second])
    }))

  it.effect("load reads through a connection of its own: it sees what another store committed, and the connection closes with the store", () =>
    Effect.gen(function*() {
      const filename = freshFile()
      const opened: Array<Database.Database> = []
      const original = Database.prototype.prepare
      Database.prototype.prepare = function(this: Database.Database, sql: string) {
        if (!opened.includes(this)) opened.push(this)
        return original.call(this, sql)
      } as typeof original
      const loaded = yield* Effect.ensuring(
        Effect.scoped(Effect.gen(function*() {
          const store = Context.get(yield* Layer.build(SqliteSessionStore.layer({ filename })), SessionStore)
          yield* store.create(makeHeader(id), [])
          // A second store on the file appends after the first one opened its direct connection.
          yield* withStore(filename, (other) => other.append(id, nonEmpty(turns(0, 2))))
          const mine = opened.filter((db) => db.name === filename && db.open)
          expect(mine.length).toBeGreaterThanOrEqual(2)
          return { events: (yield* store.load(id)).events, mine }
        })),
        Effect.sync(() => {
          Database.prototype.prepare = original
        })
      )
      expect(loaded.events).toStrictEqual(turns(0, 2))
      expect(loaded.mine.map((db) => db.open)).toStrictEqual(loaded.mine.map(() => false))
    }))

  it.effect("large batches (chunked inserts) round-trip exactly", () =>
    Effect.gen(function*() {
      const filename = freshFile()
      const all = turns(0, 72) // 1008 events
      yield* withStore(filename, (store) =>
        Effect.gen(function*() {
          yield* store.create(makeHeader(id), all.slice(0, 299)) // 256 + 32 + 8 + 2 + 1
          yield* store.append(id, nonEmpty(all.slice(299, 300)))
          yield* store.append(id, nonEmpty(all.slice(300))) // 708 = 2 * 256 + 128 + 64 + 4
          expect((yield* store.load(id)).events).toStrictEqual(all)
          const stale = yield* failureOf(store.append(id, nonEmpty(all.slice(1000))))
          expect(stale).toBeInstanceOf(PersistenceError)
        }))
      const counted = yield* withRawSql(filename, (sql) =>
        sql<{ n: number; first: number; last: number }>`
          SELECT count(*) AS n, min(seq) AS first, max(seq) AS last FROM events WHERE session_id = ${id}`)
      expect(counted).toEqual([{ n: 1008, first: 0, last: 1007 }])
    }))

  it.effect("appends at once on its own connection: batches round-trip exactly; a stale or gapped append writes nothing", () =>
    Effect.gen(function*() {
      const filename = freshFile()
      const all = turns(0, 72) // 1008 events
      yield* withStore(filename, (store) =>
        Effect.gen(function*() {
          const now = store.appendNow
          expect(now?.acknowledgements).toBe(false)
          yield* store.create(makeHeader(id), all.slice(0, 299))
          expect(now!.append(id, all.slice(299, 300))).toBe(true)
          expect(now!.append(id, all.slice(300, 1000))).toBe(true) // 700 = 2 * 256 + 128 + 32 + 16 + 8 + 4
          expect(now!.append(id, all.slice(999))).toBe(false) // stale
          expect(now!.append(id, all.slice(1001))).toBe(false) // a gap
          expect(now!.append(SessionId.make("missing"), all.slice(0, 1))).toBe(false)
          expect((yield* store.load(id)).events).toStrictEqual(all.slice(0, 1000))
          yield* store.append(id, nonEmpty(all.slice(1000)))
        }))
      const reloaded = yield* withStore(filename, (store) => store.load(id))
      expect(reloaded.events).toStrictEqual(all)
      const memory = yield* withStore(":memory:", (store) => Effect.succeed(store.appendNow))
      expect(memory).toBeUndefined()
    }))

  it.effect("a second store on the same file is refused a stale append and changes nothing", () =>
    Effect.gen(function*() {
      const filename = freshFile()
      const first = turns(0, 1)
      const second = turns(1, 1)
      yield* Effect.scoped(Effect.gen(function*() {
        const writer = Context.get(yield* Layer.build(SqliteSessionStore.layer({ filename })), SessionStore)
        const rival = Context.get(yield* Layer.build(SqliteSessionStore.layer({ filename })), SessionStore)
        yield* writer.create(makeHeader(id), first)
        expect((yield* rival.load(id)).events).toStrictEqual(first)
        yield* writer.append(id, nonEmpty(second))
        const error = yield* failureOf(rival.append(id, nonEmpty(second)))
        expect(error).toBeInstanceOf(PersistenceError)
        expect(error).toMatchObject({ sessionId: id, operation: "append" })
        expect(String((error as PersistenceError).cause)).toContain("stored log has 28 events")
        expect((yield* rival.load(id)).events).toStrictEqual([...first, ...second])
      }))
    }))

  describe("group commit across sessions", () => {
    const sessions = (n: number) => Array.from({ length: n }, (_, i) => SessionId.make(`group-${i}`))
    const walBytes = (filename: string) => fs.statSync(`${filename}-wal`).size
    /** A store on a fresh file holding `n` sessions of one turn each. */
    const withSessions = <A, E>(
      n: number,
      body: (store: SessionStore["Type"], ids: ReadonlyArray<SessionId>, filename: string) => Effect.Effect<A, E>
    ) => {
      const filename = freshFile()
      const ids = sessions(n)
      return withStore(
        filename,
        (store) =>
          Effect.zipRight(
            Effect.forEach(ids, (s) => store.create(makeHeader(s), turns(0, 1)), { discard: true }),
            body(store, ids, filename)
          )
      )
    }

    it.effect("appends of several sessions arriving together share one transaction", () =>
      Effect.gen(function*() {
        yield* withSessions(6, (store, ids, filename) =>
          Effect.gen(function*() {
            // Three appends one after the other: three transactions.
            const before = walBytes(filename)
            for (const s of ids.slice(0, 3)) yield* store.append(s, nonEmpty(turns(1, 1)))
            const sequential = walBytes(filename) - before
            // Three appends at once: the first waits a moment for the others and writes them all.
            const middle = walBytes(filename)
            yield* Effect.all(ids.slice(3).map((s) => store.append(s, nonEmpty(turns(1, 1)))), {
              concurrency: "unbounded"
            })
            const grouped = walBytes(filename) - middle
            expect(grouped).toBeGreaterThan(0)
            expect(grouped).toBeLessThan(sequential)
            for (const s of ids) expect((yield* store.load(s)).events).toStrictEqual(turns(0, 2))
          }))
      }))

    // The transactions committed to the WAL so far: frames whose header records a database size
    // (bytes 4-7) end a transaction. Valid while nothing has checkpointed the WAL.
    const walCommits = (filename: string): number => {
      const wal = fs.readFileSync(`${filename}-wal`)
      if (wal.length < 32) return 0
      const frame = 24 + wal.readUInt32BE(8)
      let commits = 0
      for (let at = 32; at + frame <= wal.length; at += frame) if (wal.readUInt32BE(at + 4) !== 0) commits++
      return commits
    }

    it.effect("sessions that appended together before share one transaction even when their appends arrive over several turns of the scheduler", () =>
      Effect.gen(function*() {
        yield* withSessions(6, (store, ids, filename) =>
          Effect.gen(function*() {
            const appendAll = (round: number, lateBy: (i: number) => number) =>
              Effect.all(
                ids.map((s, i) =>
                  Effect.zipRight(
                    Effect.forEach(Array.from({ length: lateBy(i) }, () => 0), () => Effect.yieldNow(), {
                      discard: true
                    }),
                    store.append(s, nonEmpty(turns(round, 1)))
                  )
                ),
                { concurrency: "unbounded", discard: true }
              )
            // A first round together: the store learns that six sessions write at once.
            yield* appendAll(1, () => 0)
            const before = walCommits(filename)
            // The second round's appends arrive up to three scheduler turns apart.
            yield* appendAll(2, (i) => i % 4)
            expect(walCommits(filename) - before).toBe(1)
            for (const s of ids) expect((yield* store.load(s)).events).toStrictEqual(turns(0, 3))
          }))
      }))

    it.effect("a rejected append in a group fails alone; the others' rows are stored", () =>
      Effect.gen(function*() {
        const filename = freshFile()
        const [warm, a, b, c] = sessions(4) as [SessionId, SessionId, SessionId, SessionId]
        yield* withStore(filename, (store) =>
          Effect.gen(function*() {
            for (const s of [warm, a, b, c]) yield* store.create(makeHeader(s), turns(0, 1))
            yield* store.append(warm, nonEmpty(turns(1, 1)))
            const [ok1, stale, ok2] = yield* Effect.all([
              Effect.exit(store.append(a, nonEmpty(turns(1, 1)))),
              Effect.exit(store.append(b, nonEmpty(turns(0, 1)))),
              Effect.exit(store.append(c, nonEmpty(turns(1, 1))))
            ], { concurrency: "unbounded" })
            expect(Exit.isSuccess(ok1)).toBe(true)
            expect(Exit.isSuccess(ok2)).toBe(true)
            const error = yield* failureOf(stale)
            expect(error).toBeInstanceOf(PersistenceError)
            expect(error).toMatchObject({ sessionId: b, operation: "append" })
            expect(String((error as PersistenceError).cause)).toContain("stored log has 14 events")
            expect((yield* store.load(a)).events).toStrictEqual(turns(0, 2))
            expect((yield* store.load(b)).events).toStrictEqual(turns(0, 1))
            expect((yield* store.load(c)).events).toStrictEqual(turns(0, 2))
            // The store goes on accepting appends for every session, the rejected one included.
            yield* store.append(b, nonEmpty(turns(1, 1)))
            expect((yield* store.load(b)).events).toStrictEqual(turns(0, 2))
          }))
      }))

    it.effect("a group's length checks refuse an append that leaves a gap (its rows would not collide); the others are stored", () =>
      withSessions(4, (store, ids) =>
        Effect.gen(function*() {
          const [warm, a, b, c] = ids as [SessionId, SessionId, SessionId, SessionId]
          yield* store.append(warm, nonEmpty(turns(1, 1)))
          const [ok1, gap, ok2] = yield* Effect.all([
            Effect.exit(store.append(a, nonEmpty(turns(1, 1)))),
            Effect.exit(store.append(b, nonEmpty(turns(2, 1)))),
            Effect.exit(store.append(c, nonEmpty(turns(1, 1))))
          ], { concurrency: "unbounded" })
          expect([Exit.isSuccess(ok1), Exit.isSuccess(ok2)]).toEqual([true, true])
          const error = yield* failureOf(gap)
          expect(error).toMatchObject({ _tag: "PersistenceError", sessionId: b, operation: "append" })
          expect((yield* store.load(a)).events).toStrictEqual(turns(0, 2))
          expect((yield* store.load(b)).events).toStrictEqual(turns(0, 1))
          expect((yield* store.load(c)).events).toStrictEqual(turns(0, 2))
        })))

    it.effect("sessions whose ids hold a lone surrogate append together and reload intact", () =>
      Effect.gen(function*() {
        const filename = freshFile()
        // SQLite keeps a lone surrogate's bytes but reads them back as U+FFFD.
        const [lone, other] = [SessionId.make("group-\ud800"), SessionId.make("group-plain")]
        yield* withStore(filename, (store) =>
          Effect.gen(function*() {
            for (const s of [lone, other]) yield* store.create(makeHeader(s), turns(0, 1))
            for (let round = 1; round <= 3; round++) {
              yield* Effect.all([
                store.append(lone, nonEmpty(turns(round, 1))),
                store.append(other, nonEmpty(turns(round, 1)))
              ], {
                concurrency: "unbounded"
              })
            }
          }))
        const loaded = yield* withStore(filename, (store) => Effect.all([store.load(lone), store.load(other)]))
        expect(loaded.map((session) => session.events)).toStrictEqual([turns(0, 4), turns(0, 4)])
      }))

    it.effect("an append of a group that fails after writing is rolled back to its savepoint alone", () =>
      Effect.gen(function*() {
        const filename = freshFile()
        const [warm, a, b, c] = sessions(4) as [SessionId, SessionId, SessionId, SessionId]
        const lengthOf = (s: SessionId) =>
          withRawSql(filename, (sql) => sql<{ readonly length: number }>`SELECT length FROM sessions WHERE id = ${s}`)
        yield* withStore(filename, (store) =>
          Effect.gen(function*() {
            for (const s of [warm, a, b, c]) yield* store.create(makeHeader(s), turns(0, 1))
            yield* store.append(b, nonEmpty(turns(1, 1)))
            // b's recorded length says 14 while rows 14-27 exist: its next append passes the length
            // check, advances the length, then fails on the first duplicate row.
            yield* withRawSql(filename, (sql) => sql`UPDATE sessions SET length = 14 WHERE id = ${b}`)
            yield* store.append(warm, nonEmpty(turns(1, 1)))
            const [ok1, conflicting, ok2] = yield* Effect.all([
              Effect.exit(store.append(a, nonEmpty(turns(1, 1)))),
              Effect.exit(store.append(b, nonEmpty(turns(1, 1)))),
              Effect.exit(store.append(c, nonEmpty(turns(1, 1))))
            ], { concurrency: "unbounded" })
            expect(Exit.isSuccess(ok1)).toBe(true)
            expect(Exit.isSuccess(ok2)).toBe(true)
            const conflict = yield* failureOf(conflicting)
            expect(conflict).toMatchObject({ _tag: "PersistenceError", sessionId: b, operation: "append" })
            // The message says what SQLite said, with its code (not the client's "Failed to execute statement").
            expect(conflict.message).toContain("SQLITE_CONSTRAINT_PRIMARYKEY: UNIQUE constraint failed")
            expect((yield* store.load(a)).events).toStrictEqual(turns(0, 2))
            expect((yield* store.load(c)).events).toStrictEqual(turns(0, 2))
          }))
        // b's length advance was undone with its rows; the others' lengths committed.
        expect(yield* lengthOf(b)).toEqual([{ length: 14 }])
        expect(yield* lengthOf(a)).toEqual([{ length: 28 }])
      }))
  })

  describe("corrupted rows load as MalformedLog with their seq", () => {
    const corrupted = (corrupt: (sql: SqlClient.SqlClient) => Effect.Effect<unknown, unknown>) =>
      Effect.gen(function*() {
        const filename = freshFile()
        yield* withStore(filename, (store) => store.create(makeHeader(id), turnEvents(0, 1, 1000, A, "hi")))
        yield* withRawSql(filename, corrupt)
        const error = yield* withStore(filename, (store) => failureOf(store.load(id)))
        expect(error).toBeInstanceOf(MalformedLog)
        return error as MalformedLog
      })

    it.effect("a row that is not JSON", () =>
      Effect.gen(function*() {
        const error = yield* corrupted((sql) => sql`UPDATE events SET row = '{"type": "step/start",' WHERE seq = 5`)
        expect(error).toMatchObject({ _tag: "MalformedLog", sessionId: id, seq: 5 })
        expect(error.reason).toContain("not JSON")
      }))

    it.effect("a row of the wrong shape", () =>
      Effect.gen(function*() {
        const wrong = JSON.stringify({ type: "turn/start", seq: 1, time: 1000, data: { turn: "one" } })
        const error = yield* corrupted((sql) => sql`UPDATE events SET row = ${wrong} WHERE seq = 1`)
        expect(error).toMatchObject({ _tag: "MalformedLog", sessionId: id, seq: 1 })
        expect(error.reason).toContain("turn")
      }))

    it.effect("a row with an excess property", () =>
      Effect.gen(function*() {
        const extra = JSON.stringify({ type: "turn/start", seq: 1, time: 1000, data: { turn: 1 }, extra: true })
        const error = yield* corrupted((sql) => sql`UPDATE events SET row = ${extra} WHERE seq = 1`)
        expect(error).toMatchObject({ _tag: "MalformedLog", sessionId: id, seq: 1 })
      }))

    it.effect("a row that carries another seq", () =>
      Effect.gen(function*() {
        const moved = JSON.stringify({ type: "turn/start", seq: 2, time: 1000, data: { turn: 1 } })
        const error = yield* corrupted((sql) => sql`UPDATE events SET row = ${moved} WHERE seq = 1`)
        expect(error).toMatchObject({ _tag: "MalformedLog", sessionId: id, seq: 1 })
      }))

    it.effect("a missing row in the middle and at the end", () =>
      Effect.gen(function*() {
        const gap = yield* corrupted((sql) => sql`DELETE FROM events WHERE seq = 3`)
        expect(gap).toMatchObject({ _tag: "MalformedLog", sessionId: id, seq: 3 })
        const tail = yield* corrupted((sql) => sql`DELETE FROM events WHERE seq = 13`)
        expect(tail).toMatchObject({ _tag: "MalformedLog", sessionId: id, seq: 13 })
      }))

    it.effect("a header that does not decode (no seq); a newer version is UnsupportedLogVersion", () =>
      Effect.gen(function*() {
        const header = yield* corrupted((sql) => sql`UPDATE sessions SET header = '{"formatVersion": 1}'`)
        expect(header).toMatchObject({ _tag: "MalformedLog", sessionId: id })
        expect(header.seq).toBeUndefined()
        const filename = freshFile()
        yield* withStore(filename, (store) => store.create(makeHeader(id), []))
        yield* withRawSql(filename, (sql) => sql`UPDATE sessions SET header = '{"formatVersion": 7, "shape": "new"}'`)
        const version = yield* withStore(filename, (store) => failureOf(store.load(id)))
        expect(version).toBeInstanceOf(UnsupportedLogVersion)
        expect(version).toMatchObject({ sessionId: id, found: 7, supported: LOG_FORMAT_VERSION })
      }))
  })

  it.live("a store opened while another process is migrating the fresh file waits for that migration, then opens", () =>
    Effect.gen(function*() {
      const filename = freshFile()
      // Another process in the middle of migrating: the migrations are recorded, the tables not yet
      // created, the transaction open for a while.
      const script = `
        const Database = require(${JSON.stringify(createRequire(import.meta.url).resolve("better-sqlite3"))})
        const db = new Database(${JSON.stringify(filename)})
        db.pragma("journal_mode = WAL")
        db.exec('CREATE TABLE tiller_migrations (migration_id integer PRIMARY KEY NOT NULL, created_at datetime NOT NULL DEFAULT current_timestamp, name VARCHAR(255) NOT NULL)')
        db.exec("BEGIN IMMEDIATE")
        db.exec("INSERT INTO tiller_migrations (migration_id, name) VALUES (1, 'sessions_and_events'), (2, 'leases')")
        console.log("migrating")
        setTimeout(() => {
          db.exec("CREATE TABLE sessions (id TEXT PRIMARY KEY NOT NULL, header TEXT NOT NULL, created_at INTEGER NOT NULL, length INTEGER NOT NULL) STRICT")
          db.exec("CREATE TABLE events (session_id TEXT NOT NULL, seq INTEGER NOT NULL, row TEXT NOT NULL, PRIMARY KEY (session_id, seq)) STRICT")
          db.exec("CREATE TABLE leases (session_id TEXT PRIMARY KEY NOT NULL, pid INTEGER NOT NULL, host TEXT NOT NULL) STRICT")
          db.exec("COMMIT")
          db.close()
        }, 500)`
      const child = spawn(process.execPath, ["-e", script], { stdio: ["ignore", "pipe", "inherit"] })
      yield* Effect.async<void>((resume) => {
        child.stdout!.setEncoding("utf8").once("data", () => resume(Effect.void))
      })
      yield* withStore(filename, (store) => store.create(makeHeader(id), turns(0, 1)))
      const loaded = yield* withStore(filename, (store) => store.load(id))
      expect(loaded.events).toStrictEqual(turns(0, 1))
      yield* Effect.async<void>((resume) => {
        if (child.exitCode !== null) resume(Effect.void)
        else child.once("exit", () => resume(Effect.void))
      })
    }))

  it.effect("a file that cannot be opened fails the layer with PersistenceError", () =>
    Effect.gen(function*() {
      const missingDir = yield* failureOf(
        Layer.build(SqliteSessionStore.layer({ filename: path.join(dir, "no", "such.db") })).pipe(Effect.scoped)
      )
      expect(missingDir).toBeInstanceOf(PersistenceError)
      expect(missingDir).toMatchObject({ operation: "open" })
      const garbage = freshFile()
      fs.writeFileSync(
        garbage,
        "this is not a database, it is just text that is long enough to have a header".repeat(20)
      )
      const notDatabase = yield* failureOf(
        Layer.build(SqliteSessionStore.layer({ filename: garbage })).pipe(Effect.scoped)
      )
      expect(notDatabase).toBeInstanceOf(PersistenceError)
      expect(notDatabase).toMatchObject({ operation: "open" })
      expect(notDatabase.message).toContain("SQLITE_NOTADB: file is not a database")
    }))

  it.effect("a full database fails an append with PersistenceError naming SQLITE_FULL, and the store goes on once there is room", () =>
    Effect.gen(function*() {
      const filename = freshFile()
      // The store's own connections, seen as they prepare statements.
      const opened = new Set<Database.Database>()
      const original = Database.prototype.prepare
      Database.prototype.prepare = function(this: Database.Database, sql: string) {
        opened.add(this)
        return original.call(this, sql)
      } as typeof original
      yield* Effect.ensuring(
        withStore(filename, (store) =>
          Effect.gen(function*() {
            yield* store.create(makeHeader(id), turns(0, 1))
            Database.prototype.prepare = original
            const mine = [...opened].filter((db) => db.name === filename && db.open)
            // No page may be added: the disk is full as far as SQLite can tell.
            for (const db of mine) db.pragma("max_page_count = 1")
            const full = yield* failureOf(store.append(id, nonEmpty(turns(1, 40))))
            expect(full).toBeInstanceOf(PersistenceError)
            expect(full).toMatchObject({ sessionId: id, operation: "append" })
            expect(full.message).toContain("SQLITE_FULL: database or disk is full")
            expect(full.message).not.toContain("Failed to execute statement")
            expect((yield* store.load(id)).events).toStrictEqual(turns(0, 1))
            for (const db of mine) db.pragma("max_page_count = 1073741823")
            yield* store.append(id, nonEmpty(turns(1, 40)))
            expect((yield* store.load(id)).events).toStrictEqual(turns(0, 41))
          })),
        Effect.sync(() => {
          Database.prototype.prepare = original
        })
      )
    }))

  describe("another connection's write lock", () => {
    /** Holds `filename`'s write lock on a connection of its own (it never waits on the event loop) until `release`. */
    const holdLock = (filename: string) => {
      const db = new Database(filename)
      db.exec("BEGIN IMMEDIATE")
      return {
        release: () => {
          db.exec("ROLLBACK")
          db.close()
        }
      }
    }

    it.effect("an append waits for it without blocking (Clock sleeps) and is written once it is released", () =>
      Effect.gen(function*() {
        const filename = freshFile()
        yield* withStore(filename, (store) =>
          Effect.gen(function*() {
            yield* store.create(makeHeader(id), turns(0, 1))
            const lock = holdLock(filename)
            const append = yield* Effect.fork(store.append(id, nonEmpty(turns(1, 1))))
            yield* TestClock.adjust("5 seconds")
            // Still waiting, and the fiber runtime was free meanwhile (this fiber ran).
            expect(Option.isNone(yield* Fiber.poll(append))).toBe(true)
            lock.release()
            yield* TestClock.adjust("200 millis")
            yield* Fiber.join(append)
            expect((yield* store.load(id)).events).toStrictEqual(turns(0, 2))
          }))
      }))

    it.effect("held past busyTimeout (default 10 s), the append fails: 'database is locked by another process' with the file's name, nothing written", () =>
      Effect.gen(function*() {
        const filename = freshFile()
        yield* withStore(filename, (store) =>
          Effect.gen(function*() {
            yield* store.create(makeHeader(id), turns(0, 1))
            const lock = holdLock(filename)
            const append = yield* Effect.fork(Effect.flip(store.append(id, nonEmpty(turns(1, 1)))))
            yield* TestClock.adjust("9800 millis")
            expect(Option.isNone(yield* Fiber.poll(append))).toBe(true)
            yield* TestClock.adjust("500 millis")
            const error = yield* Fiber.join(append)
            lock.release()
            expect(error).toBeInstanceOf(PersistenceError)
            expect(error).toMatchObject({ sessionId: id, operation: "append" })
            expect(error.message).toContain(`database is locked by another process (SQLITE_BUSY): ${filename}`)
            expect((yield* store.load(id)).events).toStrictEqual(turns(0, 1))
            // The lock gone, the store writes again.
            yield* store.append(id, nonEmpty(turns(1, 1)))
            expect((yield* store.load(id)).events).toStrictEqual(turns(0, 2))
          }))
      }))

    it.effect("busyTimeout sets the bound: a create and a store opened on a fresh file give up after it", () =>
      Effect.gen(function*() {
        const filename = freshFile()
        yield* withStore(filename, () => Effect.void)
        const lock = holdLock(filename)
        const create = yield* Effect.fork(Effect.flip(
          Effect.flatMap(SessionStore, (store) => store.create(makeHeader(id), [])).pipe(
            Effect.provide(SqliteSessionStore.layer({ filename, busyTimeout: "2 seconds" }))
          )
        ))
        yield* TestClock.adjust("1800 millis")
        expect(Option.isNone(yield* Fiber.poll(create))).toBe(true)
        yield* TestClock.adjust("500 millis")
        const error = yield* Fiber.join(create)
        expect(error).toMatchObject({ _tag: "PersistenceError", sessionId: id, operation: "create" })
        expect(error.message).toContain(`database is locked by another process (SQLITE_BUSY): ${filename}`)
        lock.release()

        // A fresh file another connection locked before it was turned to WAL: opening waits too.
        const fresh = freshFile()
        const early = holdLock(fresh)
        const open = yield* Effect.fork(
          Effect.flip(Layer.build(SqliteSessionStore.layer({ filename: fresh, busyTimeout: 0 })).pipe(Effect.scoped))
        )
        yield* TestClock.adjust("1 millis")
        const refused = yield* Fiber.join(open)
        early.release()
        expect(refused).toMatchObject({ _tag: "PersistenceError", operation: "open" })
        expect(refused.message).toContain(`database is locked by another process (SQLITE_BUSY): ${fresh}`)
        yield* withStore(fresh, (store) => store.create(makeHeader(id), []))
      }))
  })
})

/** Appends turns `from` .. `to - 1`, one transaction each. */
const appendTurnByTurn = (store: SessionStore["Type"], from: number, to: number) =>
  Effect.gen(function*() {
    for (let k = from; k < to; k++) yield* store.append(id, nonEmpty(turns(k, 1)))
  })

describe("WAL checkpoints off the event loop", () => {
  it.live("a worker copies the WAL into the database file while the store is open, once enough was written", () =>
    Effect.gen(function*() {
      const filename = freshFile()
      yield* withStore(filename, (store) =>
        Effect.gen(function*() {
          yield* store.create(makeHeader(id), [])
          const before = fs.statSync(filename).size
          // 20 transactions: below the store's estimate of 1,000 WAL pages, so no checkpoint yet
          // (and the store turned SQLite's automatic checkpoint off).
          yield* appendTurnByTurn(store, 0, 20)
          yield* Effect.sleep("200 millis")
          expect(fs.statSync(filename).size).toBe(before)
          // 380 more: about 1,600 pages in all. The worker's checkpoint grows the database file.
          yield* appendTurnByTurn(store, 20, 400)
          let size = fs.statSync(filename).size
          for (let tries = 0; tries < 500 && size <= before; tries++) {
            yield* Effect.sleep("20 millis")
            size = fs.statSync(filename).size
          }
          expect(size).toBeGreaterThan(before)
          expect(yield* store.load(id)).toMatchObject({ events: { length: 400 * 14 } })
        }))
      // Everything is there after the store closed.
      expect(yield* withStore(filename, (store) => Effect.map(store.load(id), ({ events }) => events.length))).toBe(
        400 * 14
      )
    }))

  it.live(
    "a process with nothing else to do stays alive until the store closed its checkpoint worker",
    () =>
      Effect.gen(function*() {
        // Under the project, so the bundle's packages resolve from its node_modules.
        const bundle = path.join(
          import.meta.dirname,
          "..",
          "..",
          "node_modules",
          ".cache",
          "tiller-tests",
          "checkpoint-close.mjs"
        )
        yield* Effect.promise(() =>
          build({
            entryPoints: [path.join(import.meta.dirname, "fixtures", "checkpointClose.ts")],
            bundle: true,
            platform: "node",
            format: "esm",
            packages: "external",
            outfile: bundle,
            logLevel: "error"
          })
        )
        const result = yield* Effect.async<{ readonly code: number | null; readonly stdout: string }>((resume) => {
          const child = spawn(process.execPath, [bundle, freshFile()], { stdio: ["ignore", "pipe", "inherit"] })
          let stdout = ""
          child.stdout.on("data", (data) => (stdout += String(data)))
          child.on("exit", (code) => resume(Effect.succeed({ code, stdout })))
        })
        expect(result).toEqual({ code: 0, stdout: "closed\n" })
      }),
    60_000
  )
})

describe("an agent on SQLite", () => {
  const S = SessionId.make("s")
  const agentOn = (
    filename: string,
    target: { readonly sessionId: SessionId } | { readonly resume: SessionId },
    reply: string
  ) =>
    Agent.layer({ ...target, model: { provider: "p", model: "m" } }).pipe(
      Layer.provideMerge(
        Layer.mergeAll(
          SqliteSessionStore.layer({ filename }),
          ScriptedModel.layer([ScriptedModel.text(reply)]),
          Tools.layer()
        )
      )
    )
  const turnStarts = (events: ReadonlyArray<SessionEvent>) =>
    events.filter((e) => e.type === "turn/start").map((e) => (e as EventOf<"turn/start">).data.turn)

  it.live("a session another live process holds is refused with AgentBusy; a dead holder's lease is taken over", () =>
    Effect.gen(function*() {
      const filename = freshFile()
      // The session exists, and nobody holds it once its agent is disposed.
      yield* Effect.scoped(Layer.build(agentOn(filename, { sessionId: S }, "hi")))
      const before = (yield* withStore(filename, (store) => store.load(S))).events
      const leases = () =>
        withRawSql(
          filename,
          (sql) => sql<{ readonly pid: number; readonly host: string }>`SELECT pid, host FROM leases`
        )
      expect(yield* leases()).toEqual([])

      // A live process of this host holds it (its pid written as another tiller process would).
      const holder = spawn(process.execPath, ["-e", "setTimeout(() => {}, 60000)"], { stdio: "ignore" })
      const pid = holder.pid!
      yield* Effect.addFinalizer(() => Effect.sync(() => holder.kill("SIGKILL")))
      yield* withRawSql(
        filename,
        (sql) => sql`INSERT INTO leases (session_id, pid, host) VALUES (${S}, ${pid}, ${os.hostname()})`
      )
      const busy = yield* failureOf(Effect.scoped(Layer.build(agentOn(filename, { resume: S }, "x"))))
      expect(busy).toBeInstanceOf(AgentBusy)
      expect(busy).toMatchObject({ sessionId: S, operation: "open" })
      // Refused before anything was written: no end-seed, no repair.
      const untouched = yield* withStore(filename, (store) => store.load(S))
      expect(untouched.events).toStrictEqual(before)

      // The holder dies without releasing: the next open takes the lease over, holds it while open
      // and gives it up when disposed.
      yield* Effect.async<void>((resume) => {
        holder.once("exit", () => resume(Effect.void))
        holder.kill("SIGKILL")
      })
      yield* Effect.scoped(Effect.gen(function*() {
        yield* Layer.build(agentOn(filename, { resume: S }, "again"))
        expect(yield* leases()).toEqual([{ pid: process.pid, host: os.hostname() }])
      }))
      expect(yield* leases()).toEqual([])
    }).pipe(Effect.scoped))

  it.effect("a refused open leaves the file's bytes as they were: resume of a malformed or missing session, create of a stored one", () =>
    Effect.gen(function*() {
      const filename = freshFile()
      yield* Effect.scoped(Effect.gen(function*() {
        const driver = Context.get(yield* Layer.build(agentOn(filename, { sessionId: S }, "hi")), Driver)
        yield* driver.followup(user("A"))
        yield* driver.whenIdle
      }))
      yield* withRawSql(filename, (sql) => sql`UPDATE events SET row = 'not json' WHERE session_id = ${S} AND seq = 3`)
      // Every connection closed: SQLite folded the WAL into the file and removed it.
      const bytes = () => {
        expect(fs.existsSync(`${filename}-wal`)).toBe(false)
        return fs.readFileSync(filename)
      }
      const before = bytes()

      const malformed = yield* failureOf(Effect.scoped(Layer.build(agentOn(filename, { resume: S }, "x"))))
      expect(malformed).toBeInstanceOf(MalformedLog)
      expect(malformed).toMatchObject({ sessionId: S, seq: 3 })
      expect(bytes()).toEqual(before)

      const missing = yield* failureOf(
        Effect.scoped(Layer.build(agentOn(filename, { resume: SessionId.make("missing") }, "x")))
      )
      expect(missing).toBeInstanceOf(SessionNotFound)
      expect(bytes()).toEqual(before)

      const exists = yield* failureOf(Effect.scoped(Layer.build(agentOn(filename, { sessionId: S }, "x"))))
      expect(exists).toBeInstanceOf(SessionExists)
      expect(bytes()).toEqual(before)
    }))

  it.effect("runs a turn, is disposed, resumes from the file on a fresh layer and runs turn 2", () =>
    Effect.gen(function*() {
      const filename = freshFile()

      const scope = yield* Scope.make()
      const first = yield* Layer.buildWithScope(agentOn(filename, { sessionId: S }, "hi"), scope)
      yield* Context.get(first, Driver).followup(user("A"))
      yield* Context.get(first, Driver).whenIdle
      yield* Scope.close(scope, Exit.void)
      const before = yield* Context.get(first, SessionLog).events
      expect(turnStarts(before)).toEqual([1])
      expect(before.at(-1)?.type).toBe("turn/end")

      // Disposal flushed everything: a fresh store reads exactly the live log.
      const stored = yield* withStore(filename, (store) => store.load(S))
      expect(stored.events).toStrictEqual(before)

      yield* Effect.gen(function*() {
        const driver = yield* Driver
        const log = yield* SessionLog
        const resumed = yield* log.events
        expect(resumed.slice(0, -1)).toStrictEqual(before)
        expect(resumed.at(-1)).toMatchObject({ type: "session/end-seed", seq: before.length })
        yield* driver.followup(user("B"))
        yield* driver.whenIdle
        const after = yield* log.events
        expect(turnStarts(after)).toEqual([1, 2])
        expect(after.slice(0, resumed.length)).toStrictEqual(resumed)
      }).pipe(Effect.provide(agentOn(filename, { resume: S }, "again")))

      const final = yield* withStore(filename, (store) => store.load(S))
      expect(turnStarts(final.events)).toEqual([1, 2])
      expect(final.events.at(-1)?.type).toBe("turn/end")
    }))
})

describe("SqliteSessionStore: JSON past the depth limit", () => {
  const S = SessionId.make("deep")
  const agentOn = (filename: string, target: { readonly sessionId: SessionId } | { readonly resume: SessionId }) =>
    Agent.layer({ ...target, model: { provider: "p", model: "m" } }).pipe(
      Layer.provideMerge(
        Layer.mergeAll(
          SqliteSessionStore.layer({ filename }),
          ScriptedModel.layer([ScriptedModel.text("one"), ScriptedModel.text("two")]),
          Tools.layer()
        )
      )
    )
  /** An object nested `levels` deep (the outermost object is level 1). */
  const nestedValue = (levels: number): unknown => {
    let value: unknown = 1
    for (let i = 0; i < levels; i++) value = { a: value }
    return value
  }
  const deepMessage = (name: string, levels: number) =>
    ({
      id: name,
      role: "user",
      content: [{ type: "text", text: name }],
      source: { kind: "user", a: nestedValue(levels) }
    }) as never

  it.effect("followup, steer, inject, append and splice of values nested 10,000 and 100,000 levels are InvalidEvent; the session is not poisoned", () =>
    Effect.gen(function*() {
      const filename = freshFile()
      const live = yield* Effect.scoped(
        Effect.gen(function*() {
          const driver = yield* Driver
          const log = yield* SessionLog
          const inbox = yield* Inbox
          for (const levels of [10_000, 100_000]) {
            const m = deepMessage(`m${levels}`, levels)
            const failures = [
              yield* failureOf(driver.followup(m)),
              yield* failureOf(driver.steer(m)),
              yield* failureOf(driver.inject(m)),
              yield* failureOf(inbox.splice("next-turn", 0, 0, [m])),
              yield* failureOf(log.append({ type: "ext/deep", data: nestedValue(levels), ignorable: true }))
            ]
            for (const failure of failures) {
              expect(failure).toMatchObject({ _tag: "InvalidEvent" })
              expect((failure as { readonly reason: string }).reason).toMatch(/nested deeper than 256 levels$/)
            }
          }
          // A throwing getter, a hostile Proxy and a cycle: typed refusals too.
          const trap = () => {
            throw new Error("trap")
          }
          const proxy = new Proxy({}, { get: trap, ownKeys: trap, getPrototypeOf: trap, has: trap })
          const getter = {
            id: "g",
            role: "user",
            content: [{ type: "text", text: "g" }],
            get source(): unknown {
              throw new Error("boom")
            }
          }
          const cyclic: Record<string, unknown> = { kind: "user" }
          cyclic.self = cyclic
          const withCycle = { id: "c", role: "user", content: [{ type: "text", text: "c" }], source: cyclic }
          for (
            const [m, reason] of [
              [proxy, "message: cannot be read (trap)"],
              [getter, "message.source: cannot be read (boom)"],
              [withCycle, "message.source.self: cyclic value"]
            ] as const
          ) {
            for (const send of [driver.followup, driver.steer, driver.inject]) {
              expect(yield* failureOf(send(m as never))).toMatchObject({ _tag: "InvalidEvent", reason })
            }
          }
          expect(yield* log.events).toEqual([])
          // The session goes on: a valid followup runs its turn and is durable.
          yield* driver.followup(user("A"))
          yield* driver.whenIdle
          yield* log.flush
          const events = yield* log.events
          expect(events.at(-1)?.type).toBe("turn/end")
          return events
        }).pipe(Effect.provide(agentOn(filename, { sessionId: S })))
      )
      const stored = yield* withStore(filename, (store) => store.load(S))
      expect(stored.events).toStrictEqual(live)
    }))

  it.effect("a message nested exactly MAX_JSON_DEPTH levels is stored and resumes from the file (D6)", () =>
    Effect.gen(function*() {
      const filename = freshFile()
      // The message is level 1, its source level 2: the source's field holds the other 254 levels.
      const m = deepMessage("edge", MAX_JSON_DEPTH - 2)
      const live = yield* Effect.scoped(
        Effect.gen(function*() {
          const driver = yield* Driver
          yield* driver.followup(m)
          yield* driver.whenIdle
          return yield* Effect.flatMap(SessionLog, (log) => log.events)
        }).pipe(Effect.provide(agentOn(filename, { sessionId: S })))
      )
      const resumed = yield* Effect.scoped(
        Effect.flatMap(SessionLog, (log) => log.events).pipe(Effect.provide(agentOn(filename, { resume: S })))
      )
      expect(resumed.slice(0, live.length)).toStrictEqual(live)
      expect(
        yield* failureOf(Effect.scoped(
          Effect.flatMap(Driver, (driver) => driver.followup(deepMessage("past", MAX_JSON_DEPTH - 1))).pipe(
            Effect.provide(agentOn(filename, { resume: S }))
          )
        ))
      ).toMatchObject({ _tag: "InvalidEvent" })
    }))

  it.effect("a stored row nested past the limit loads as MalformedLog with its seq, never a defect", () =>
    Effect.gen(function*() {
      const A = makeUserMessage("a", "hello")
      for (const levels of [MAX_JSON_DEPTH + 1, 10_000, 100_000]) {
        const filename = freshFile()
        yield* withStore(filename, (store) => store.create(makeHeader(id), turnEvents(0, 1, 1000, A, "hi")))
        const deep = JSON.stringify({ type: "ext/deep", seq: 3, time: 1000, data: 0, ignorable: true })
          .replace("\"data\":0", `"data":${"[".repeat(levels)}${"]".repeat(levels)}`)
        yield* withRawSql(filename, (sql) => sql`UPDATE events SET row = ${deep} WHERE seq = 3`)
        const error = yield* withStore(filename, (store) => failureOf(store.load(id)))
        expect(error).toBeInstanceOf(MalformedLog)
        expect(error).toMatchObject({ _tag: "MalformedLog", sessionId: id, seq: 3 })
        expect((error as MalformedLog).reason).toContain("nested deeper than 256 levels")
      }
    }))
})

describe("SqliteSessionStore: JSON past the size limit", () => {
  const S = SessionId.make("large")

  it.effect("a message whose row would pass what SQLite and the engine can hold is InvalidEvent; the session is not poisoned", () =>
    Effect.gen(function*() {
      const filename = freshFile()
      const layer = Agent.layer({ sessionId: S, model: { provider: "p", model: "m" } }).pipe(
        Layer.provideMerge(
          Layer.mergeAll(
            SqliteSessionStore.layer({ filename }),
            ScriptedModel.layer([ScriptedModel.text("one")]),
            Tools.layer()
          )
        )
      )
      // 100 million control characters: 600 million characters of JSON, past the engine's longest string.
      const text = "\u0001".repeat(100_000_000)
      const large = { id: "large", role: "user", content: [{ type: "text", text }], source: { kind: "user" } } as never
      const live = yield* Effect.scoped(
        Effect.gen(function*() {
          const driver = yield* Driver
          const log = yield* SessionLog
          const refused = yield* failureOf(driver.inject(large))
          expect(refused).toMatchObject({ _tag: "InvalidEvent", reason: "message: larger than 64 MiB of JSON text" })
          const appended = yield* failureOf(log.append({ type: "ext/large", data: { text }, ignorable: true }))
          expect(appended).toMatchObject({
            _tag: "InvalidEvent",
            reason: "event.data: larger than 64 MiB of JSON text"
          })
          yield* driver.followup(user("A"))
          yield* driver.whenIdle
          yield* log.flush
          return yield* log.events
        }).pipe(Effect.provide(layer))
      )
      expect(live.at(-1)?.type).toBe("turn/end")
      const stored = yield* withStore(filename, (store) => store.load(S))
      expect(stored.events).toStrictEqual(live)
    }))
})
