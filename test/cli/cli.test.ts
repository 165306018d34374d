import { describe, expect, it } from "@effect/vitest"
import type { Scope } from "effect"
import { Deferred, Effect, Fiber, Schema, TestClock } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import { MAX_WAIT_MS, wait } from "../../src/cli/BuiltinTools.js"
import { hoistGlobalOptions } from "../../src/cli/Commands.js"
import { SessionId } from "../../src/domain/Ids.js"
import { SqliteSessionStore } from "../../src/layers/SqliteStore.js"
import { SessionStore } from "../../src/services/SessionStore.js"
import { serve } from "../layers/fake/HttpServer.js"
import type { Conversation } from "./harness.js"
import { converse, expectInOrder, fifo, jsonLines, tempDir, tiller } from "./harness.js"
import * as ProviderServer from "./ProviderServer.js"

const TIMEOUT = 180_000

/** Chat output without the status line's context share (` · ctx 12%`), which ContextWindow.test.ts checks. */
const withoutShare = (stdout: string) => stdout.replace(/ · ctx \d+%/g, "")

describe("hoistGlobalOptions", () => {
  const argv = (...args: ReadonlyArray<string>) => ["node", "tiller", ...args]

  it("moves the global options that follow the subcommand in front of it", () => {
    expect(hoistGlobalOptions(argv("chat", "--db", "x.db", "--session", "s", "--no-tools", "--model=demo"))).toEqual(
      argv("--db", "x.db", "--no-tools", "--model=demo", "chat", "--session", "s")
    )
    expect(hoistGlobalOptions(argv("--db", "log", "log", "s", "--model", "demo"))).toEqual(
      argv("--db", "log", "--model", "demo", "log", "s")
    )
  })

  it("leaves arguments after -- and command lines without a subcommand as they are", () => {
    expect(hoistGlobalOptions(argv("run", "--", "--db", "x"))).toEqual(argv("run", "--", "--db", "x"))
    expect(hoistGlobalOptions(argv("--db", "x.db", "--help"))).toEqual(argv("--db", "x.db", "--help"))
  })
})

describe("the wait tool", () => {
  const context = {
    sessionId: SessionId.make("w"),
    turn: 1,
    step: 1,
    callId: "c",
    deferContext: () => Effect.void
  }
  const decode = Schema.decodeUnknown(wait.parameters)

  it.effect("waits the asked milliseconds on the clock; a numeric string is accepted", () =>
    Effect.gen(function*() {
      const fiber = yield* Effect.fork(
        Effect.flatMap(decode({ ms: "2000" }), (params) => wait.execute(params, context))
      )
      yield* TestClock.adjust(1999)
      expect(fiber.unsafePoll()).toBeNull()
      yield* TestClock.adjust(1)
      expect(yield* Fiber.join(fiber)).toBe("waited 2000 ms")
    }))

  it.effect("cuts a longer wait to the longest one and says so; refuses a negative one", () =>
    Effect.gen(function*() {
      const fiber = yield* Effect.fork(
        Effect.flatMap(decode({ ms: 60_000 }), (params) => wait.execute(params, context))
      )
      yield* TestClock.adjust(MAX_WAIT_MS - 1)
      expect(fiber.unsafePoll()).toBeNull()
      yield* TestClock.adjust(1)
      expect(yield* Fiber.join(fiber)).toBe(`waited ${MAX_WAIT_MS} ms (the longest wait; 60000 ms were asked for)`)
      expect(yield* Effect.flatMap(decode({ ms: -5 }), (params) => wait.execute(params, context))).toEqual({
        content: `cannot wait -5 ms: ms must be a number from 0 to ${MAX_WAIT_MS}`,
        isError: true
      })
      expect((yield* Effect.flip(decode({ ms: "soon" })))._tag).toBe("ParseError")
    }))
})

describe("tiller CLI", () => {
  it.scopedLive(
    "run: injected context enters before the prompt; the default db is created; sessions lists it",
    () =>
      Effect.gen(function*() {
        const dir = yield* tempDir
        const run = yield* tiller(dir, ["run", "hello", "--inject", "ctx", "--session", "r1"])
        expect(run).toEqual({
          code: 0,
          stdout: "Step 1 of turn 1 brought 2 messages:\n1. [cli] ctx\n2. [user] hello\n",
          stderr: "session r1\n"
        })
        expect(fs.existsSync(path.join(dir, ".tiller", "sessions.db"))).toBe(true)

        const sessions = yield* tiller(dir, ["sessions"])
        expect(sessions.code).toBe(0)
        expect(sessions.stdout.split("\n")[0]).toMatch(/^ID\s+TURNS\s+EVENTS\s+STATUS\s+UPDATED\s+TITLE$/)
        expect(sessions.stdout.split("\n")[1]).toMatch(/^r1\s+1\s+\d+\s+idle\s+\S+Z\s+ctx$/)

        // --db and TILLER_DB select another file (sessions only reads: a missing one is not created).
        const other = yield* tiller(dir, ["sessions"], { env: { TILLER_DB: "other/x.db" } })
        expect(other).toMatchObject({ code: 0, stdout: "no sessions in other/x.db\n" })
        expect(fs.existsSync(path.join(dir, "other", "x.db"))).toBe(false)
        const flag = yield* tiller(dir, ["--db", "other/x.db", "sessions"])
        expect(flag.stdout).toBe("no sessions in other/x.db\n")
      }),
    TIMEOUT
  )

  it.scopedLive(
    "chat: a piped conversation with /inject, a prompt, /queue and /quit; log, check",
    () =>
      Effect.gen(function*() {
        const dir = yield* tempDir
        const chat = yield* tiller(dir, ["chat", "--session", "c1"], {
          input: "/inject note\nhello\n/queue second\n/quit\n"
        })
        expect(chat.code).toBe(0)
        expect(chat.stderr).toBe("")
        expectInOrder(withoutShare(chat.stdout), [
          "tiller chat · session c1 (new)",
          "[idle · 0 turns · pending: 0 queued, 0 next-step]",
          // /inject does not wake the idle agent; it says where the context waits.
          "(context for the next step) [idle · 0 turns · pending: 0 queued, 1 next-step]",
          "[running · turn 1",
          // The injected context enters the step before the prompt.
          "» [cli:inject] note\n",
          "» [user] hello\n",
          "assistant: ",
          "Step 1 of turn 1 brought 2 messages:\n1. [cli] note\n2. [user] hello\n",
          "── turn 1 completed",
          "[running · turn 2",
          "» [user] second\n",
          "assistant: ",
          "Step 1 of turn 2 brought 1 message:\n1. [user] second\n",
          "── turn 2 completed",
          "[idle · 2 turns · pending: 0 queued, 0 next-step]",
          "session c1 is saved; continue it with: tiller resume c1\n"
        ])

        const log = yield* tiller(dir, ["log", "c1", "--json"])
        expect(log.code).toBe(0)
        const events = jsonLines(log.stdout)
        expect(events.map((e) => e.seq)).toEqual(events.map((_, i) => i))
        const entered = events.filter((e) => e.type === "user/message").map((
          e
        ) => [e.data.content[0].text, e.data.source])
        expect(entered).toEqual([
          ["note", { kind: "cli", command: "inject" }],
          ["hello", { kind: "user" }],
          ["second", { kind: "user" }]
        ])
        expect(events.filter((e) => e.type === "turn/end").map((e) => [e.data.turn, e.data.reason.kind])).toEqual([
          [1, "completed"],
          [2, "completed"]
        ])

        const timeline = yield* tiller(dir, ["log", "c1"])
        expect(timeline.code).toBe(0)
        expectInOrder(timeline.stdout, [
          "session c1 · created",
          "inbox      + next-step: [cli:inject] note",
          "inbox      + next-step: [user] hello",
          "turn 1     start",
          "inbox      claimed from next-step: [cli:inject] note, [user] hello",
          "step 1.1   start",
          "entered    [cli:inject] note",
          "entered    [user] hello",
          "model      demo:demo (initial) · tools: Bash, Edit, Glob, Grep, Read, Write, clock, read_history, wait",
          "assistant  Step 1 of turn 1 brought 2 messages:",
          "turn 1     end: completed",
          "turn 2     start",
          "inbox      claimed from next-turn: [user] second",
          "turn 2     end: completed"
        ])

        const check = yield* tiller(dir, ["check", "c1"])
        expect(check).toEqual({ code: 0, stdout: `session c1: ${events.length} events, no violations\n`, stderr: "" })
      }),
    TIMEOUT
  )

  it.scopedLive(
    "chat: end of input without /quit waits for the turn, then exits 0; commands are reported",
    () =>
      Effect.gen(function*() {
        const dir = yield* tempDir
        const chat = yield* tiller(dir, ["chat", "--session", "e1"], { input: "/bogus\n/queue\n/help\nhi" })
        expect(chat.code).toBe(0)
        expect(chat.stderr).toBe("unknown command /bogus; /help lists the commands\nusage: /queue TEXT\n")
        expectInOrder(withoutShare(chat.stdout), [
          "/queue TEXT     queue TEXT as the prompt of a later turn",
          "» [user] hi\n",
          "assistant: Step 1 of turn 1 brought 1 message:\n1. [user] hi\n",
          "── turn 1 completed",
          "[idle · 1 turn · pending: 0 queued, 0 next-step]"
        ])
      }),
    TIMEOUT
  )

  it.scopedLive(
    "fork --as child, then log, resume and check the child; a boundary inside a turn is refused",
    () =>
      Effect.gen(function*() {
        const dir = yield* tempDir
        expect((yield* tiller(dir, ["run", "first", "--session", "p"])).code).toBe(0)
        const parent = jsonLines((yield* tiller(dir, ["log", "p", "--json"])).stdout)

        const fork = yield* tiller(dir, ["fork", "p", "--as", "child"])
        expect(fork).toEqual({ code: 0, stdout: `forked p at seq ${parent.length - 1} as child\n`, stderr: "" })

        const log = yield* tiller(dir, ["log", "child"])
        expect(log.code).toBe(0)
        expectInOrder(log.stdout, [
          "session child · created",
          `forked from p at seq ${parent.length - 1}; seqs 0-${parent.length - 1} are its copied seed`,
          "entered    [user] first",
          "turn 1     end: completed",
          "fork       end of the copied seed"
        ])

        const resume = yield* tiller(dir, ["resume", "child"], { input: "again\n" })
        expect(resume.code).toBe(0)
        expectInOrder(resume.stdout, [
          "tiller chat · session child (resumed: 1 turn,",
          "» [user] again\n",
          "assistant: Step 1 of turn 2 brought 1 message:\n1. [user] again\n"
        ])
        expect(yield* tiller(dir, ["check", "child"])).toMatchObject({ code: 0 })
        // The parent is unchanged by the child's turn.
        expect(jsonLines((yield* tiller(dir, ["log", "p", "--json"])).stdout)).toEqual(parent)

        const inside = parent.findIndex((e) => e.type === "step/start")
        const refused = yield* tiller(dir, ["fork", "p", "--at-seq", String(inside), "--as", "c2"])
        expect(refused.code).toBe(1)
        expect(refused.stderr).toContain(`tiller: cannot fork p: seq ${inside} is inside a turn`)
        expect((yield* tiller(dir, ["fork", "p", "--as", "child"])).stderr).toBe(
          "tiller: cannot fork p: a session child already exists\n"
        )
        expect(yield* tiller(dir, ["resume", "nope"])).toMatchObject({
          code: 1,
          stderr: "tiller: no session nope in ./.tiller/sessions.db\n"
        })
      }),
    TIMEOUT
  )

  it.scopedLive(
    "--max-steps N: run, chat, resume and handoff end a turn that would run more steps with MAX_STEPS; log shows why",
    () =>
      Effect.gen(function*() {
        const dir = yield* tempDir
        const reason =
          "error: the turn reached its step limit of 1 step (maxSteps, --max-steps) with the model still calling tools; " +
          "a new prompt continues from the tool results (MAX_STEPS)"
        // The demo model calls the clock in step 1 and would answer in step 2.
        const run = yield* tiller(dir, ["run", "/clock now", "--max-steps", "1", "--session", "m"])
        expect(run.code).toBe(1)
        expect(run.stderr).toContain(`turn 1 of session m ended: ${reason}`)
        const log = yield* tiller(dir, ["log", "m"])
        expect(log.stdout).toContain(`turn 1     end: ${reason}`)
        // Without the option the same prompt completes in two steps.
        expect((yield* tiller(dir, ["run", "/clock now", "--session", "n"])).code).toBe(0)
        const chat = yield* tiller(dir, ["chat", "--session", "c", "--max-steps", "1"], {
          input: "/clock now\n/quit\n"
        })
        expect(chat.code).toBe(0)
        expect(chat.stdout).toContain("MAX_STEPS")
        const resume = yield* tiller(dir, ["resume", "c", "--max-steps", "1"], { input: "/clock again\n/quit\n" })
        expect(resume.stdout).toContain("MAX_STEPS")
        const handoff = yield* tiller(dir, ["handoff", "n", "/clock now", "--as", "h", "--max-steps", "1"])
        expect(handoff.code).toBe(1)
        expect((yield* tiller(dir, ["log", "h"])).stdout).toContain(`turn 1     end: ${reason}`)
        for (const command of ["run", "chat", "resume", "handoff"]) {
          expect((yield* tiller(dir, [command, "--help"])).stdout, command).toContain("--max-steps N")
        }
        expect((yield* tiller(dir, ["run", "x", "--max-steps", "0"])).code).toBe(2)
      }),
    TIMEOUT
  )

  it.scopedLive(
    "Read and Glob stay inside the working directory and the --add-dir directories",
    () =>
      Effect.gen(function*() {
        const dir = yield* tempDir
        const extra = yield* tempDir
        fs.writeFileSync(path.join(dir, "notes.txt"), "inside the box\n")
        fs.writeFileSync(path.join(extra, "shared.txt"), "shared\n")
        fs.symlinkSync("/etc", path.join(dir, "etc-link"))
        const real = fs.realpathSync(dir)

        const escape = yield* tiller(dir, ["run", "/Read ../etc/passwd"])
        expect(escape.code).toBe(0)
        expect(escape.stdout).toBe(
          `Step 2 of turn 1 brought 1 message:\n1. [tool] refused: ../etc/passwd is outside the working directory (${real}); only paths inside it can be used\n`
        )
        const absolute = yield* tiller(dir, ["run", "call Read {\"file_path\": \"/etc/passwd\"}"])
        expect(absolute.stdout).toContain("refused: /etc/passwd is outside the working directory")
        const link = yield* tiller(dir, ["run", "/Read etc-link/passwd"])
        expect(link.stdout).toContain("refused: etc-link/passwd is outside the working directory")
        expect(link.stdout).not.toContain("root:")

        const inside = yield* tiller(dir, ["run", "/Read notes.txt"])
        expect(inside.stdout).toBe("Step 2 of turn 1 brought 1 message:\n1. [tool]      1\tinside the box\n")
        // A file system failure reads as its kind, without the absolute path or the syscall.
        const missing = yield* tiller(dir, ["run", "/Read missing.txt"])
        expect(missing.stdout).toBe(
          "Step 2 of turn 1 brought 1 message:\n1. [tool] cannot open missing.txt: no such file or directory\n"
        )
        const listing = yield* tiller(dir, ["run", "/Glob *.txt"])
        expect(listing.stdout).toBe(`Step 2 of turn 1 brought 1 message:\n1. [tool] ${real}/notes.txt\n`)

        const shared = path.join(extra, "shared.txt")
        expect((yield* tiller(dir, ["run", `/Read ${shared}`])).stdout).toContain("is outside the working directory")
        expect((yield* tiller(dir, ["--add-dir", extra, "run", `/Read ${shared}`])).stdout).toContain("     1\tshared")
        expect(yield* tiller(dir, ["--add-dir", "no-such-dir", "run", "hi"])).toMatchObject({
          code: 1,
          stderr: "tiller: --add-dir no-such-dir: no such file or directory\n"
        })

        // With --no-tools the demo model sees no tool and only describes the message.
        const noTools = yield* tiller(dir, ["--no-tools", "run", "/Read notes.txt"])
        expect(noTools.stdout).toBe("Step 1 of turn 1 brought 1 message:\n1. [user] /Read notes.txt\n")
      }),
    TIMEOUT
  )

  it.scopedLive(
    "run refuses what needs approval unless --permission-mode or --allow says otherwise",
    () =>
      Effect.gen(function*() {
        const dir = yield* tempDir
        const write = "call Write {\"file_path\": \"out.txt\", \"content\": \"written\\n\"}"
        const refused = yield* tiller(dir, ["run", write])
        expect(refused.stdout).toBe(
          "Step 2 of turn 1 brought 1 message:\n1. [tool] Error: tool call denied: permission needed: Write needs approval in default mode " +
            "(edits run without asking in acceptEdits mode), and nobody can approve it in a headless run; " +
            "run with --permission-mode acceptEdits, or --allow \"Write(PATH)\"\n"
        )
        expect(fs.existsSync(path.join(dir, "out.txt"))).toBe(false)
        const plan = yield* tiller(dir, ["--permission-mode", "plan", "run", write])
        expect(plan.stdout).toContain("permission denied: Write is not allowed in plan mode")
        expect(fs.existsSync(path.join(dir, "out.txt"))).toBe(false)
        expect((yield* tiller(dir, ["--permission-mode", "acceptEdits", "run", write])).stdout).toContain(
          "File created successfully at: out.txt"
        )
        expect(fs.readFileSync(path.join(dir, "out.txt"), "utf8")).toBe("written\n")

        expect((yield* tiller(dir, ["run", "/Bash echo from bash"])).stdout).toContain(
          "permission needed: Bash needs approval"
        )
        expect((yield* tiller(dir, ["--allow", "Bash(echo:*)", "run", "/Bash echo from bash"])).stdout).toBe(
          "Step 2 of turn 1 brought 1 message:\n1. [tool] from bash\n"
        )
        expect((yield* tiller(dir, ["--allow", "Bash(echo:*)", "run", "/Bash echo a && touch b"])).stdout).toContain(
          "permission needed"
        )
        expect((yield* tiller(dir, ["--dangerously-skip-permissions", "run", "/Bash echo a && touch b"])).stdout)
          .toContain("[tool] a\n")
        expect(fs.existsSync(path.join(dir, "b"))).toBe(true)

        // Rules of the settings file: deny first, whatever the mode.
        fs.mkdirSync(path.join(dir, ".tiller"), { recursive: true })
        fs.writeFileSync(path.join(dir, ".env"), "KEY=secret\n")
        fs.writeFileSync(
          path.join(dir, ".tiller", "settings.json"),
          JSON.stringify({ permissions: { deny: ["Read(./.env)"], allow: ["Bash(touch:*)"] } })
        )
        const secret = yield* tiller(dir, ["--permission-mode", "bypassPermissions", "run", "/Read .env"])
        expect(secret.stdout).toContain(
          `permission denied: Read is denied by the deny rule "Read(./.env)" (${
            path.join(dir, ".tiller", "settings.json")
          })`
        )
        expect(secret.stdout).not.toContain("secret")
        expect((yield* tiller(dir, ["run", "/Bash touch c"])).stdout).toContain("(no output)")
        expect(yield* tiller(dir, ["--allow", "Bash(", "run", "hi"])).toMatchObject({ code: 1 })
      }),
    TIMEOUT
  )

  it.scopedLive("Read on a FIFO answers at once with a refusal and the turn completes", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      yield* fifo(dir, "pipe")
      // Before, the open waited for a writer without bound (and the process could not exit).
      const run = yield* Effect.timeoutFail(tiller(dir, ["run", "/Read pipe", "--session", "f"]), {
        duration: "60 seconds",
        onTimeout: () => "Read on a FIFO did not answer"
      })
      expect(run).toEqual({
        code: 0,
        stdout:
          "Step 2 of turn 1 brought 1 message:\n1. [tool] refused: pipe is a FIFO (named pipe), not a regular file; " +
          "Read reads only regular files\n",
        stderr: "session f\n"
      })
    }), TIMEOUT)

  it.scopedLive(
    "refusals: an unknown model, a missing session, a log that violates the rules",
    () =>
      Effect.gen(function*() {
        const dir = yield* tempDir
        const model = yield* tiller(dir, ["--model", "acme:gpt-4o", "run", "hi"])
        expect(model.code).toBe(1)
        expect(model.stderr).toBe(
          `tiller: unknown model "acme:gpt-4o": use one of "demo", "openai:MODEL", "anthropic:MODEL", "openai-compatible:MODEL"\n`
        )
        expect(model.stdout).toBe("")
        expect(fs.existsSync(path.join(dir, ".tiller"))).toBe(false)
        const envModel = yield* tiller(dir, ["chat"], { env: { TILLER_MODEL: "nope" }, input: "hi\n" })
        expect(envModel.code).toBe(1)
        expect(envModel.stderr).toContain(`unknown model "nope"`)

        // --db under a regular file: the directory cannot exist; the failure is named in words. (A
        // command that writes: the read-only ones never create anything.)
        fs.writeFileSync(path.join(dir, "plain"), "")
        expect(yield* tiller(dir, ["run", "hi", "--db", "plain/x.db"])).toMatchObject({
          code: 1,
          stderr: `tiller: cannot create the directory ${
            path.join(fs.realpathSync(dir), "plain")
          } for --db plain/x.db: a file of that name already exists\n`
        })

        expect(yield* tiller(dir, ["log", "missing"])).toMatchObject({
          code: 1,
          stderr: "tiller: no session missing in this database\n"
        })
        expect(yield* tiller(dir, ["check", "missing"])).toMatchObject({ code: 1 })

        // A session whose log stops inside a turn: check reports R19 and exits 1.
        expect((yield* tiller(dir, ["run", "hello", "--session", "whole"])).code).toBe(0)
        yield* Effect.gen(function*() {
          const store = yield* SessionStore
          const { events, header } = yield* store.load(SessionId.make("whole"))
          const end = events.findIndex((e) => e.type === "turn/end")
          yield* store.create({ ...header, sessionId: SessionId.make("broken") }, events.slice(0, end))
        }).pipe(Effect.provide(SqliteSessionStore.layer({ filename: path.join(dir, ".tiller", "sessions.db") })))
        const check = yield* tiller(dir, ["check", "broken"])
        expect(check.code).toBe(1)
        expect(check.stdout).toMatch(
          /^seq \d+ {2}R19 {2}the log ends inside open turn 1\nsession broken: 1 violation in \d+ events\n$/
        )
      }),
    TIMEOUT
  )

  it.scopedLive(
    "a provider's retry-after over the cap ends the turn at once; TILLER_MAX_RETRY_DELAY sets the cap",
    () =>
      Effect.gen(function*() {
        const dir = yield* tempDir
        const limited = { ...ProviderServer.json(429, { error: { message: "slow down" } }) }
        const server = yield* ProviderServer.listen([
          { ...limited, headers: { ...limited.headers, "retry-after": "3600" } },
          { ...limited, headers: { ...limited.headers, "retry-after": "2" } }
        ])
        const env = { TILLER_BASE_URL: server.url }
        const args = ["--model", "openai-compatible:m", "run", "hi"]
        const hour = yield* tiller(dir, args, { env })
        expect(hour.code).toBe(1)
        expect(hour.stdout + hour.stderr).toContain(
          "the provider asked to wait 3600 s before retrying; the cap is 60 s"
        )
        const lowered = yield* tiller(dir, args, { env: { ...env, TILLER_MAX_RETRY_DELAY: "1500" } })
        expect(lowered.code).toBe(1)
        expect(lowered.stdout + lowered.stderr).toContain(
          "the provider asked to wait 2 s before retrying; the cap is 1.5 s"
        )
        // One request each: neither was retried.
        expect((yield* server.requests).length).toBe(2)
        expect(yield* tiller(dir, args, { env: { ...env, TILLER_MAX_RETRY_DELAY: "soon" } })).toEqual({
          code: 1,
          stdout: "",
          stderr:
            `tiller: invalid TILLER_MAX_RETRY_DELAY: not a duration: "soon" (write milliseconds or, e.g., "30 seconds")\n`
        })
      }),
    TIMEOUT
  )

  it.scopedLive(
    "check judges a log as resume does: an unknown event type without ignorable fails both, with ignorable passes both",
    () =>
      Effect.gen(function*() {
        const dir = yield* tempDir
        expect((yield* tiller(dir, ["run", "hello", "--session", "whole"])).code).toBe(0)
        // Two copies of the session with an extension event after the turn: one unmarked, one ignorable.
        const seq = yield* Effect.gen(function*() {
          const store = yield* SessionStore
          const { events, header } = yield* store.load(SessionId.make("whole"))
          const extra = {
            seq: events.length,
            time: events[events.length - 1]!.time,
            type: "acme/note",
            data: { note: 1 }
          }
          yield* store.create({ ...header, sessionId: SessionId.make("unknown") }, [...events, extra])
          yield* store.create({ ...header, sessionId: SessionId.make("marked") }, [...events, {
            ...extra,
            ignorable: true as const
          }])
          return extra.seq
        }).pipe(Effect.provide(SqliteSessionStore.layer({ filename: path.join(dir, ".tiller", "sessions.db") })))

        const refused = yield* tiller(dir, ["run", "again", "--session", "unknown"])
        expect(refused.code).toBe(1)
        expect(refused.stderr).toContain(
          `malformed log of session unknown at seq ${seq}: event type acme/note is neither core nor declared and is not marked ignorable`
        )
        const check = yield* tiller(dir, ["check", "unknown"])
        expect(check).toEqual({
          code: 1,
          stdout:
            `seq ${seq}  malformed  event type acme/note is neither core nor declared and is not marked ignorable\n` +
            `session unknown: 1 violation in ${seq + 1} events\n`,
          stderr: ""
        })

        expect(yield* tiller(dir, ["check", "marked"])).toEqual({
          code: 0,
          stdout: `session marked: ${seq + 1} events, no violations\n`,
          stderr: ""
        })
        expect((yield* tiller(dir, ["run", "again", "--session", "marked"])).code).toBe(0)
      }),
    TIMEOUT
  )
})

/** A provider server that takes requests and never answers them; `arrived` waits for the first. */
const silentServer: Effect.Effect<{ readonly url: string; readonly arrived: Effect.Effect<void> }, never, Scope.Scope> =
  Effect.gen(
    function*() {
      const arrived = yield* Deferred.make<void>()
      const server = yield* serve(() => Deferred.unsafeDone(arrived, Effect.void))
      return { url: `${server.url}/v1`, arrived: Deferred.await(arrived) }
    }
  )

/** Sends SIGTERM; the outcome and how many milliseconds the process took to exit. */
const terminate = (conversation: Conversation) =>
  Effect.gen(function*() {
    const sent = Date.now()
    yield* conversation.signal("SIGTERM")
    const outcome = yield* conversation.exit
    return { ...outcome, ms: Date.now() - sent }
  })

/** The types of a log's events, with a turn end's reason. */
const typesOf = (events: ReadonlyArray<any>): Array<string> =>
  events.map((e) => (e.type === "turn/end" ? `turn/end ${JSON.stringify(e.data.reason)}` : e.type))

const DISPOSED = `turn/end ${JSON.stringify({ kind: "aborted", reason: { kind: "disposed" } })}`

// SIGTERM ends the process within this in every state (exit code 143).
const PROMPT_EXIT_MS = 2000

describe("tiller CLI under SIGTERM", () => {
  it.scopedLive(
    "run waiting on a model that never answers: exit 143 at once, the turn ends aborted (disposed)",
    () =>
      Effect.gen(function*() {
        const dir = yield* tempDir
        const server = yield* silentServer
        const run = yield* converse(dir, ["--model", "openai-compatible:m", "run", "hello", "--session", "t"], {
          env: { TILLER_BASE_URL: server.url }
        })
        yield* Effect.timeout(server.arrived, "60 seconds")
        const outcome = yield* terminate(run)
        expect(outcome.code).toBe(143)
        expect(outcome.ms).toBeLessThan(PROMPT_EXIT_MS)
        expect(outcome.stderr).toBe("session t\n")

        const events = jsonLines((yield* tiller(dir, ["log", "t", "--json"])).stdout)
        expect(typesOf(events).slice(-3)).toEqual(["request/header", "step/end", DISPOSED])
        expect(yield* tiller(dir, ["check", "t"])).toMatchObject({ code: 0, stderr: "" })
      }),
    TIMEOUT
  )

  it.scopedLive(
    "chat with a tool running: exit 143 at once, the turn ends aborted (disposed), the queued prompt is kept",
    () =>
      Effect.gen(function*() {
        const dir = yield* tempDir
        const chat = yield* converse(dir, ["chat", "--session", "w"])
        yield* chat.send("/wait 10000")
        yield* chat.waitFor(`  → wait {"ms":"10000"}\n`)
        yield* chat.send("/queue later")
        yield* chat.waitFor("(queued for a later turn)")
        const outcome = yield* terminate(chat)
        expect(outcome.code).toBe(143)
        expect(outcome.ms).toBeLessThan(PROMPT_EXIT_MS)

        const events = jsonLines((yield* tiller(dir, ["log", "w", "--json"])).stdout)
        expect(typesOf(events).slice(-5)).toEqual([
          "tool/call",
          "agent/inbox/spliced",
          "tool/result",
          "step/end",
          DISPOSED
        ])
        expect(events[events.length - 3].data.message.content[0].content[0].text).toBe("Error: tool call aborted")
        // Disposal does not touch the inbox (SPEC 3.7): the queued prompt is still pending.
        const splice = events[events.length - 4]
        expect(splice.data.target).toBe("next-turn")
        expect(splice.data.inserted[0].content[0].text).toBe("later")
        expect(yield* tiller(dir, ["check", "w"])).toMatchObject({ code: 0, stderr: "" })
        const resumed = yield* tiller(dir, ["resume", "w"], { input: "/status\n" })
        expect(resumed.code).toBe(0)
        expect(resumed.stdout).toContain("pending: 1 queued")
      }),
    TIMEOUT
  )

  it.scopedLive(
    "idle chat: exit 143 at once; the log ends with the completed turn and the session opens again",
    () =>
      Effect.gen(function*() {
        const dir = yield* tempDir
        const chat = yield* converse(dir, ["chat", "--session", "i"], { view: withoutShare })
        yield* chat.send("hi")
        yield* chat.waitFor("── turn 1 completed")
        yield* chat.waitFor("[idle · 1 turn · pending: 0 queued, 0 next-step]\n")
        const outcome = yield* terminate(chat)
        expect(outcome.code).toBe(143)
        expect(outcome.ms).toBeLessThan(PROMPT_EXIT_MS)

        const events = jsonLines((yield* tiller(dir, ["log", "i", "--json"])).stdout)
        expect(typesOf(events).slice(-1)).toEqual([`turn/end ${JSON.stringify({ kind: "completed" })}`])
        expect(yield* tiller(dir, ["check", "i"])).toMatchObject({ code: 0, stderr: "" })
        // The open lease was released: the session resumes at once.
        const resumed = yield* tiller(dir, ["resume", "i"], { input: "again\n" })
        expect(resumed.code).toBe(0)
        expect(resumed.stdout).toContain("» [user] again\n")
      }),
    TIMEOUT
  )
})
