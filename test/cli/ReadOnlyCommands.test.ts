import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as crypto from "node:crypto"
import * as fs from "node:fs"
import { createRequire } from "node:module"
import * as path from "node:path"
import { converse, jsonLines, tempDir, tiller } from "./harness.js"

const TIMEOUT = 180_000

interface Database {
  readonly prepare: (sql: string) => {
    readonly run: (...params: ReadonlyArray<unknown>) => { readonly changes: number }
    readonly all: (...params: ReadonlyArray<unknown>) => Array<any>
  }
  readonly exec: (sql: string) => void
  readonly close: () => void
}
const openDatabase = createRequire(import.meta.url)("better-sqlite3") as new(filename: string) => Database

const withDatabase = <A>(file: string, use: (db: Database) => A) =>
  Effect.sync(() => {
    const db = new openDatabase(file)
    try {
      return use(db)
    } finally {
      db.close()
    }
  })

/**
 * The hash of every database file of `dir`, to see that nothing was written. A reader of a WAL
 * database keeps SQLite's shared-memory index (-shm) and may leave an empty -wal file: those are
 * the reader's bookkeeping, not writes, and are left out.
 */
const snapshot = (dir: string) =>
  Object.fromEntries(
    fs.readdirSync(dir).filter((name) =>
      !name.endsWith("-shm") && (!name.endsWith("-wal") || fs.statSync(path.join(dir, name)).size > 0)
    ).sort()
      .map((name) => [name, crypto.createHash("sha256").update(fs.readFileSync(path.join(dir, name))).digest("hex")])
  )

describe("read-only commands", () => {
  it.scopedLive("sessions, log and check never create the database or its directory", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const db = path.join("new", "dir", "s.db")
      expect(yield* tiller(dir, ["--db", db, "sessions"])).toEqual({
        code: 0,
        stdout: `no sessions in ${db}\n`,
        stderr: ""
      })
      const log = yield* tiller(dir, ["--db", db, "log", "x"])
      expect(log.code).toBe(1)
      expect(log.stderr).toContain("no session x")
      expect((yield* tiller(dir, ["--db", db, "check", "x"])).code).toBe(1)
      expect(fs.existsSync(path.join(dir, "new"))).toBe(false)
    }), TIMEOUT)

  it.scopedLive("another application's SQLite file is refused and left as it was", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const file = path.join(dir, "other.db")
      yield* withDatabase(file, (db) =>
        db.exec("CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT); INSERT INTO notes (text) VALUES ('hi')"))
      const before = snapshot(dir)
      const listed = yield* tiller(dir, ["--db", "other.db", "sessions"])
      expect(listed.code).toBe(1)
      expect(listed.stderr).toBe("tiller: other.db is not a tiller database (it has no sessions and events tables)\n")
      expect((yield* tiller(dir, ["--db", "other.db", "log", "x"])).code).toBe(1)
      expect(snapshot(dir)).toEqual(before)
      const tables = yield* withDatabase(file, (db) =>
        db.prepare("SELECT name FROM sqlite_master WHERE type = 'table'").all())
      expect(tables.map((t) =>
        t.name
      )).toEqual(["notes"])
    }), TIMEOUT)

  it.scopedLive(
    "a corrupted row: sessions lists every session, log prints the events before it, nothing is written",
    () =>
      Effect.gen(function*() {
        const dir = yield* tempDir
        const db = path.join(dir, "t.db")
        expect((yield* tiller(dir, ["--db", "t.db", "run", "first", "--session", "a"])).code).toBe(0)
        expect((yield* tiller(dir, ["--db", "t.db", "run", "second", "--session", "b"])).code).toBe(0)
        const events = jsonLines((yield* tiller(dir, ["--db", "t.db", "log", "a", "--json"])).stdout)
        expect(events.length).toBeGreaterThan(5)
        expect(
          yield* withDatabase(
            db,
            (d) =>
              d.prepare("UPDATE events SET row = ? WHERE session_id = ? AND seq = ?").run("{not json", "a", 4).changes
          )
        )
          .toBe(1)
        const before = snapshot(dir)

        const listed = yield* tiller(dir, ["--db", "t.db", "sessions"])
        expect(listed.code).toBe(0)
        expect(listed.stdout).toMatch(/\na +\d+ +4 .*\(unreadable from seq 4: see tiller check\)\n/)
        expect(listed.stdout).toMatch(/\nb +1 +\d+ .*second\n/)

        const log = yield* tiller(dir, ["--db", "t.db", "log", "a", "--json"])
        expect(log.code).toBe(1)
        expect(jsonLines(log.stdout)).toEqual(events.slice(0, 4))
        expect(log.stderr).toMatch(/^tiller: malformed log of session a at seq 4: row is not JSON: .+\n$/)
        const timeline = yield* tiller(dir, ["--db", "t.db", "log", "a"])
        expect(timeline.stdout.split("\n").filter((line) => /^ +\d+ /.test(line)).length).toBe(4)
        expect(timeline.stderr).toBe(log.stderr)
        expect((yield* tiller(dir, ["--db", "t.db", "check", "a"])).code).toBe(1)
        expect(yield* tiller(dir, ["--db", "t.db", "check", "b"])).toMatchObject({ code: 0 })
        expect(snapshot(dir)).toEqual(before)
      }),
    TIMEOUT
  )

  it.scopedLive(
    "check and fork of a session another process has open name that process instead of a false violation",
    () =>
      Effect.gen(function*() {
        const dir = yield* tempDir
        const chat = yield* converse(dir, ["--db", "t.db", "chat", "--session", "busy"])
        // Three waits in a row keep a turn running for half a minute, however slow the machine is.
        yield* chat.send("/wait 10000")
        yield* chat.waitFor(`  → wait {"ms":"10000"}\n`)
        yield* chat.send("/queue /wait 10000")
        yield* chat.send("/queue /wait 10000")
        yield* chat.waitFor("(queued for a later turn)")
        yield* chat.waitFor("(queued for a later turn)")
        const check = yield* tiller(dir, ["--db", "t.db", "check", "busy"])
        expect(check.stdout).toMatch(/^session busy is open in pid \d+: its running turn is not judged \(R19\)/)
        expect(check.stdout).not.toMatch(/R19 {2}the log ends inside open turn/)
        expect(check.code).toBe(0)
        const fork = yield* tiller(dir, ["--db", "t.db", "fork", "busy"])
        expect(fork.code).toBe(1)
        expect(fork.stderr).toMatch(
          /^tiller: cannot fork busy: its log ends inside a turn \(session busy is open in pid \d+, which may be running a turn\); --at N names an ended turn, --at-seq SEQ a turn\/end/
        )
        expect(fork.stderr).not.toContain("undefined")
        yield* chat.send("/quit")
        expect((yield* chat.exit).code).toBe(0)
        expect(yield* tiller(dir, ["--db", "t.db", "check", "busy"])).toMatchObject({
          code: 0,
          stdout: expect.stringMatching(/^session busy: \d+ events, no violations\n$/)
        })
      }),
    TIMEOUT
  )

  it.scopedLive(
    "sessions: most recently used first, with a status; empty sessions only with --all; resume --last; quoted hints",
    () =>
      Effect.gen(function*() {
        const dir = yield* tempDir
        expect((yield* tiller(dir, ["--db", "t.db", "run", "older", "--session", "old"])).code).toBe(0)
        // A chat that got no input leaves an empty session behind.
        expect((yield* tiller(dir, ["--db", "t.db", "chat", "--session", "empty"])).code).toBe(0)
        const kept = yield* tiller(dir, ["--db", "t.db", "chat", "--session", "it's"], {
          input: "/queue later\n/cancel --keep\n/quit\n"
        })
        expect(kept.stdout).toContain("continue it with: tiller resume 'it'\\''s'\n")
        expect((yield* tiller(dir, ["--db", "t.db", "run", "newer", "--session", "new"])).code).toBe(0)

        const listed = yield* tiller(dir, ["--db", "t.db", "sessions"])
        expect(listed.code).toBe(0)
        const rows = listed.stdout.trimEnd().split("\n")
        expect(rows[0]).toMatch(/^ID +TURNS +EVENTS +STATUS +UPDATED +TITLE$/)
        expect(rows.slice(1, -1).map((row) => row.split(/ +/).slice(0, 1)[0])).toEqual(["new", "it's", "old"])
        expect(rows[1]).toMatch(/^new +1 +\d+ +idle +/)
        expect(listed.stdout).toMatch(/\nit's +\d+ +\d+ +(pending input|interrupted) +/)
        expect(rows[rows.length - 1]).toBe("1 empty session left out; --all lists them")
        expect((yield* tiller(dir, ["--db", "t.db", "sessions", "--all"])).stdout).toMatch(/\nempty +0 +\d+ +idle +/)

        // The same list as JSON: one array, most recently used first, the empty session only with --all.
        const asJson = yield* tiller(dir, ["--db", "t.db", "sessions", "--json"])
        expect(asJson).toMatchObject({ code: 0, stderr: "" })
        const sessions = JSON.parse(asJson.stdout)
        expect(sessions.map((s: any) => s.id)).toEqual(["new", "it's", "old"])
        expect(sessions[0]).toMatchObject({ status: "idle", turns: 1, title: "newer", forkOf: null, damage: null })
        expect(sessions[1].status).toMatch(/^(pending input|interrupted)$/)
        expect(sessions[2]).toMatchObject({ status: "idle", turns: 1, title: "older" })
        for (const s of sessions) {
          expect(Object.keys(s)).toEqual([
            "id",
            "status",
            "lastUsed",
            "turns",
            "events",
            "title",
            "forkOf",
            "damage",
            "approvals",
            "usage",
            "cost"
          ])
          expect(s.events).toBeGreaterThan(0)
          expect(rows.find((row) => row.startsWith(`${s.id} `))).toMatch(
            new RegExp(` ${s.events} +${s.status} +${s.lastUsed.replace(/\./g, "\\.")} `)
          )
        }
        const lastUsed = sessions.map((s: any) => Date.parse(s.lastUsed))
        expect([...lastUsed].sort((a, b) => b - a)).toEqual(lastUsed)
        const everything = JSON.parse((yield* tiller(dir, ["--db", "t.db", "sessions", "--json", "--all"])).stdout)
        expect(everything.map((s: any) => s.id)).toEqual(["new", "it's", "empty", "old"])
        expect(everything[2]).toMatchObject({
          id: "empty",
          status: "idle",
          turns: 0,
          title: null,
          forkOf: null,
          damage: null
        })

        const last = yield* tiller(dir, ["--db", "t.db", "resume", "--last"], { input: "/quit\n" })
        expect(last.code).toBe(0)
        expect(last.stdout).toContain("tiller chat · session new (resumed: 1 turn,")
        expect((yield* tiller(dir, ["--db", "t.db", "resume"])).code).toBe(1)
        const blank = yield* tiller(dir, ["--db", "t.db", "chat", "--session", ""])
        expect(blank).toMatchObject({ code: 2, stdout: "" })
        expect(blank.stderr).toContain("option --session needs a value")
      }),
    TIMEOUT
  )
})
