import { expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { describePostgres, testPostgres } from "../fixtures/postgres.js"
import { jsonLines, tempDir, tiller } from "./harness.js"

const TIMEOUT = 180_000

const server = await testPostgres()

describePostgres(server, "tiller --db postgres://", (server) => {
  /** A fresh database's URL with a password in it (the test server trusts every connection). */
  const freshUrl = Effect.map(Effect.promise(() => server.freshUrl()), (url) => {
    const parsed = new URL(url)
    parsed.password = "hunter2-secret"
    return parsed.toString()
  })

  /** What the database holds, to see that a command wrote nothing. */
  const contents = (url: string) =>
    Effect.promise(async () => {
      const tables = await server.admin<{ readonly name: string }>(
        "SELECT datname AS name FROM pg_database WHERE datname = $1",
        [new URL(url).pathname.slice(1)]
      )
      expect(tables).toHaveLength(1)
      const pg = (await import("pg")).default
      const client = new pg.Client({ connectionString: url })
      await client.connect()
      try {
        const names =
          (await client.query("SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1")).rows
        if (names.length === 0) return { tables: [] }
        const sessions = (await client.query("SELECT id, header, length FROM tiller_sessions ORDER BY position")).rows
        const events = (await client.query("SELECT session_id, seq, row FROM tiller_events ORDER BY 1, 2")).rows
        return { tables: names, sessions, events }
      } finally {
        await client.end()
      }
    })

  it.scopedLive(
    "sessions, log and check read a database without creating or migrating anything",
    () =>
      Effect.gen(function*() {
        const dir = yield* tempDir
        const url = yield* freshUrl
        const shown = url.replace("hunter2-secret", "***")
        const sessions = yield* tiller(dir, ["--db", url, "sessions"])
        expect(sessions).toEqual({ code: 0, stdout: `no sessions in ${shown}\n`, stderr: "" })
        const log = yield* tiller(dir, ["log", "x"], { env: { TILLER_DB: url } })
        expect(log.code).toBe(1)
        expect(log.stderr).toContain("no session x")
        expect(log.stderr).not.toContain("hunter2")
        expect((yield* tiller(dir, ["--db", url, "check", "x"])).code).toBe(1)
        expect(yield* contents(url)).toEqual({ tables: [] })
      }),
    TIMEOUT
  )

  it.scopedLive(
    "run, sessions, log, check, fork and resume on PostgreSQL; the password is never printed",
    () =>
      Effect.gen(function*() {
        const dir = yield* tempDir
        const url = yield* freshUrl
        const env = { TILLER_DB: url }
        const outputs: Array<string> = []
        const run = yield* tiller(dir, ["run", "hello", "--inject", "ctx", "--session", "r1"], { env })
        outputs.push(run.stdout, run.stderr)
        expect(run).toEqual({
          code: 0,
          stdout: "Step 1 of turn 1 brought 2 messages:\n1. [cli] ctx\n2. [user] hello\n",
          stderr: "session r1\n"
        })
        const before = yield* contents(url)
        const sessions = yield* tiller(dir, ["--db", url, "sessions"])
        outputs.push(sessions.stdout, sessions.stderr)
        expect(sessions.code).toBe(0)
        expect(sessions.stdout.split("\n")[1]).toMatch(/^r1\s+1\s+\d+\s+idle\s+\S+Z\s+ctx$/)
        const log = yield* tiller(dir, ["log", "r1", "--json"], { env })
        outputs.push(log.stdout, log.stderr)
        const events = jsonLines(log.stdout)
        expect(events.map((event) => event.seq)).toEqual(events.map((_, i) => i))
        expect(events.some((event) => event.type === "turn/end")).toBe(true)
        const check = yield* tiller(dir, ["check", "r1"], { env })
        outputs.push(check.stdout, check.stderr)
        expect(check.code).toBe(0)
        // The read-only commands wrote nothing.
        expect(yield* contents(url)).toEqual(before)

        const fork = yield* tiller(dir, ["fork", "r1", "--as", "child"], { env })
        outputs.push(fork.stdout, fork.stderr)
        expect(fork.code).toBe(0)
        const resume = yield* tiller(dir, ["resume", "child"], { env, input: "again\n" })
        outputs.push(resume.stdout, resume.stderr)
        expect(resume.code).toBe(0)
        expect((yield* tiller(dir, ["check", "child"], { env })).code).toBe(0)
        const child = jsonLines((yield* tiller(dir, ["log", "child", "--json"], { env })).stdout)
        expect(child.filter((event) => event.type === "turn/start")).toHaveLength(2)
        for (const text of outputs) expect(text).not.toContain("hunter2")
      }),
    TIMEOUT
  )

  it.scopedLive("a server that cannot be reached is a clear error without the password", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const url = "postgres://tiller:hunter2-secret@127.0.0.1:1/nowhere"
      for (const args of [["sessions"], ["run", "hi", "--session", "s"]]) {
        const out = yield* tiller(dir, ["--db", url, ...args])
        expect(out.code).toBe(1)
        expect(out.stderr).toContain("postgres://tiller:***@127.0.0.1:1/nowhere")
        expect(out.stdout + out.stderr).not.toContain("hunter2")
      }
    }), TIMEOUT)
})
