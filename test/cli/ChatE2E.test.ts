import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { createRequire } from "node:module"
import * as path from "node:path"
import { converse, expectInOrder, jsonLines, tempDir, tiller } from "./harness.js"

// Every test spawns the built CLI several times; the first run may also bundle it.
const TIMEOUT = 240_000
// The demo model calls the wait tool for "/wait MS"; the turn stays in that tool this long, which
// is ample time for the next lines of a conversation to arrive while it runs.
const WAIT_MS = 4000

const DB = path.join("data", "tiller.db")

/** The output without the status line's context share (` · ctx 12%`), which ContextWindow.test.ts checks. */
const withoutShare = (stdout: string) => stdout.replace(/ · ctx \d+%/g, "")
const view = { view: withoutShare }
/** `tiller ...args` with the output {@link withoutShare}. */
const chatRun = (dir: string, args: ReadonlyArray<string>, options: { readonly input: string }) =>
  Effect.map(tiller(dir, args, options), (outcome) => ({ ...outcome, stdout: withoutShare(outcome.stdout) }))

/** A tiny view of better-sqlite3, enough to corrupt a stored row the way a faulty writer would. */
interface Database {
  readonly prepare: (
    sql: string
  ) => { readonly run: (...params: ReadonlyArray<unknown>) => { readonly changes: number } }
  readonly close: () => void
}
const openDatabase = createRequire(import.meta.url)("better-sqlite3") as new(filename: string) => Database

/** Replaces the stored row of `seq` in `sessionId`'s log. */
const overwriteRow = (file: string, sessionId: string, seq: number, row: string) =>
  Effect.sync(() => {
    const db = new openDatabase(file)
    try {
      return db.prepare("UPDATE events SET row = ? WHERE session_id = ? AND seq = ?").run(row, sessionId, seq).changes
    } finally {
      db.close()
    }
  })

/**
 * The log as a readable list: inbox insertions and claims, turns, steps, the messages entering
 * steps with their sources, tool calls and results. Streamed chunks, model requests, assistant
 * messages and step ends are left out.
 */
const outline = (events: ReadonlyArray<any>): Array<string> =>
  events.flatMap((e): Array<string> => {
    const text = (content: ReadonlyArray<any>): string =>
      content.map((block) => block.text ?? text(block.content ?? [])).join(" ")
    const source = (s: any) => Object.values(s).join(":")
    switch (e.type) {
      case "agent/inbox/spliced":
        return e.data.inserted.length > 0
          ? [
            `+ ${e.data.target} ${
              e.data.inserted.map((m: any) => `[${source(m.source)}] ${text(m.content)}`).join(", ")
            }`
          ]
          : [`${e.data.outcome === "canceled" ? "discard" : "claim"} ${e.data.target} ${e.data.removedCount}`]
      case "turn/start":
        return [`turn ${e.data.turn}`]
      case "turn/end":
        return [
          `end ${e.data.turn} ${e.data.reason.kind}${e.data.reason.reason ? ` ${e.data.reason.reason.kind}` : ""}`
        ]
      case "step/start":
        return [`step ${e.data.turn}.${e.data.step}`]
      case "user/message":
        return [`entered [${source(e.data.source)}] ${text(e.data.content)}`]
      case "tool/call":
        return [`call ${e.data.name} ${e.data.arguments}`]
      case "tool/result":
        return [`result ${text(e.data.message.content)}`]
      case "session/end-seed":
        return ["end of seed"]
      default:
        return []
    }
  })

describe("tiller chat end to end", () => {
  it.scopedLive(
    "steering while a tool runs, /inject and /queue: the chat, log --json and check agree",
    () =>
      Effect.gen(function*() {
        const dir = yield* tempDir
        // The global --db after the subcommand, before one of its own options.
        const chat = yield* converse(dir, ["chat", "--db", DB, "--session", "talk"], view)
        yield* chat.waitFor(
          "Type a message, or /help for the commands.\n[idle · 0 turns · pending: 0 queued, 0 next-step]\n"
        )

        // Context waits in next-step without starting a turn.
        yield* chat.send("/inject some context")
        yield* chat.waitFor("(context for the next step) [idle · 0 turns · pending: 0 queued, 1 next-step]\n")

        // A prompt that keeps the turn in the wait tool; once the call is shown, the tool is running.
        yield* chat.send(`/wait ${WAIT_MS}`)
        yield* chat.waitFor(`  → wait {"ms":"${WAIT_MS}"}\n`)

        // A plain line while the turn runs steers it; /queue keeps a prompt for a turn of its own.
        yield* chat.send("change of plan")
        yield* chat.waitFor(
          "(steering: enters the next step) [running · turn 1 step 1 · pending: 0 queued, 1 next-step]\n"
        )
        yield* chat.send("/queue a follow-up")
        yield* chat.waitFor("(queued for a later turn) [running · turn 1 step 1 · pending: 1 queued, 1 next-step]\n")
        yield* chat.send("/status")
        yield* chat.waitFor("[running · turn 1 step 1 · pending: 1 queued, 1 next-step]\n")

        // /quit waits for both turns, then exits without the end of input.
        yield* chat.send("/quit")
        const outcome = yield* chat.exit
        expect(outcome.code).toBe(0)
        expect(outcome.stderr).toBe("")
        expectInOrder(outcome.stdout, [
          "tiller chat · session talk (new)\n",
          `db ${DB} · model demo · tools: Bash, Edit, Glob, Grep, Read, Write, clock, wait\n`,
          "[running · turn 1 · pending: 0 queued, 2 next-step]\n",
          "» [cli:inject] some context\n",
          `» [user] /wait ${WAIT_MS}\n`,
          `  ← wait: waited ${WAIT_MS} ms\n`,
          "  · turn 1 step 2\n",
          "» [user] change of plan\n",
          `assistant: Step 2 of turn 1 brought 2 messages:\n1. [tool] waited ${WAIT_MS} ms\n2. [user] change of plan\n`,
          "── turn 1 completed\n",
          "[running · turn 2 · pending: 1 queued, 0 next-step]\n",
          "» [user] a follow-up\n",
          "assistant: Step 1 of turn 2 brought 1 message:\n1. [user] a follow-up\n",
          "── turn 2 completed\n",
          "[idle · 2 turns · pending: 0 queued, 0 next-step]\n",
          "session talk is saved; continue it with: tiller resume talk\n"
        ])

        const log = yield* tiller(dir, ["log", "talk", "--json", "--db", DB])
        expect(log.code).toBe(0)
        const events = jsonLines(log.stdout)
        expect(events.map((e) => e.seq)).toEqual(events.map((_, i) => i))
        expect(outline(events)).toEqual([
          "+ next-step [cli:inject] some context",
          `+ next-step [user] /wait ${WAIT_MS}`,
          "turn 1",
          "claim next-step 2",
          "step 1.1",
          // The injected context enters the first step, before the prompt.
          "entered [cli:inject] some context",
          `entered [user] /wait ${WAIT_MS}`,
          `call wait {"ms":"${WAIT_MS}"}`,
          // Both lines arrive while the tool runs.
          "+ next-step [user] change of plan",
          "+ next-turn [user] a follow-up",
          `result waited ${WAIT_MS} ms`,
          "claim next-step 1",
          // The steer enters the next step of the same turn, after the tool result.
          "step 1.2",
          "entered [user] change of plan",
          "end 1 completed",
          // The queued prompt is a turn of its own.
          "turn 2",
          "claim next-turn 1",
          "step 2.1",
          "entered [user] a follow-up",
          "end 2 completed"
        ])
        const injected = events.find((e) => e.type === "user/message")
        expect(injected.data.source).toEqual({ kind: "cli", command: "inject" })

        const timeline = yield* tiller(dir, ["--db", DB, "log", "talk"])
        expect(timeline.code).toBe(0)
        expectInOrder(timeline.stdout, [
          "session talk · created",
          "inbox      + next-step: [cli:inject] some context",
          "turn 1     start",
          "step 1.1   start",
          "entered    [cli:inject] some context",
          `entered    [user] /wait ${WAIT_MS}`,
          `tool call  wait {"ms":"${WAIT_MS}"} (demo-1-1)`,
          "inbox      + next-step: [user] change of plan",
          "inbox      + next-turn: [user] a follow-up",
          `tool done  wait ok: waited ${WAIT_MS} ms`,
          "inbox      claimed from next-step: [user] change of plan",
          "step 1.2   start",
          "entered    [user] change of plan",
          "turn 1     end: completed",
          "turn 2     start",
          "inbox      claimed from next-turn: [user] a follow-up",
          "entered    [user] a follow-up",
          "turn 2     end: completed"
        ])

        expect(yield* tiller(dir, ["--db", DB, "check", "talk"])).toEqual({
          code: 0,
          stdout: `session talk: ${events.length} events, no violations\n`,
          stderr: ""
        })
      }),
    TIMEOUT
  )

  it.scopedLive(
    "run: exit code 0 when the turn completes; Ctrl-C cancels the running turn and exits non-zero",
    () =>
      Effect.gen(function*() {
        const dir = yield* tempDir
        const done = yield* tiller(dir, ["--db", DB, "run", "hello", "--session", "r", "--json"])
        expect(done.code).toBe(0)
        expect(done.stderr).toBe("session r\n")
        expect(outline(jsonLines(done.stdout)).slice(-2)).toEqual(["entered [user] hello", "end 1 completed"])

        // The second turn of the session waits in its tool until the process is interrupted.
        const run = yield* converse(dir, ["--db", DB, "run", `/wait ${WAIT_MS * 2}`, "--session", "r", "--json"])
        yield* run.waitFor(`"type":"tool/call"`)
        yield* run.signal("SIGINT")
        const interrupted = yield* run.end
        expect(interrupted.code).toBe(130)
        expect(interrupted.stderr).toBe("session r\nturn 2 of session r ended: aborted (user)\n")
        // The events printed are those this process appended, up to the cancelled turn's end.
        const printed = jsonLines(interrupted.stdout)
        expect(outline(printed)).toEqual([
          // Reopening a stored session marks where this run's events start.
          "end of seed",
          `+ next-turn [user] /wait ${WAIT_MS * 2}`,
          "turn 2",
          "claim next-turn 1",
          "step 2.1",
          `entered [user] /wait ${WAIT_MS * 2}`,
          `call wait {"ms":"${WAIT_MS * 2}"}`,
          "result Error: tool call aborted",
          "end 2 aborted user"
        ])
        expect(printed[printed.length - 1].data.reason).toEqual({ kind: "aborted", reason: { kind: "user" } })

        const log = jsonLines((yield* tiller(dir, ["--db", DB, "log", "r", "--json"])).stdout)
        expect(log.slice(-printed.length)).toEqual(printed)
        expect(yield* tiller(dir, ["--db", DB, "check", "r"])).toMatchObject({ code: 0, stderr: "" })
        expectInOrder((yield* tiller(dir, ["--db", DB, "log", "r"])).stdout, [
          "turn 1     end: completed",
          "resumed    the session was opened again; the events of that run start here",
          "turn 2     start",
          "tool done  wait error: Error: tool call aborted",
          "turn 2     end: aborted (user)"
        ])
      }),
    TIMEOUT
  )

  it.scopedLive(
    "chat: /cancel --keep ends the running turn and keeps the queue; Ctrl-C cancels the running turn and exits",
    () =>
      Effect.gen(function*() {
        const dir = yield* tempDir
        const chat = yield* converse(dir, ["--db", DB, "chat", "--session", "k"], view)
        yield* chat.send(`/wait ${WAIT_MS * 2}`)
        yield* chat.waitFor(`  → wait {"ms":"${WAIT_MS * 2}"}\n`)
        yield* chat.send("/queue later")
        yield* chat.waitFor("(queued for a later turn) [running · turn 1 step 1 · pending: 1 queued, 0 next-step]\n")
        yield* chat.send("/cancel --keep")
        yield* chat.waitFor("(cancel requested; pending input kept)")
        // The kept prompt waits for the next waking delivery.
        yield* chat.waitFor("── turn 1 aborted (user)\n[idle · 1 turn · pending: 1 queued, 0 next-step]\n")

        // Each queued prompt gets its own turn: "later", then the one that waits again.
        yield* chat.send(`/queue /wait ${WAIT_MS * 2}`)
        yield* chat.waitFor("» [user] later\n")
        yield* chat.waitFor("── turn 2 completed\n")
        yield* chat.waitFor(`  → wait {"ms":"${WAIT_MS * 2}"}\n`)
        yield* chat.signal("SIGINT")
        const outcome = yield* chat.exit
        expect(outcome.code).toBe(130)
        expect(outcome.stderr).toBe("")
        expectInOrder(outcome.stdout, [
          "── turn 3 aborted (user)\n",
          "[idle · 3 turns · pending: 0 queued, 0 next-step]\n",
          "session k is saved; continue it with: tiller resume k\n"
        ])

        const events = jsonLines((yield* tiller(dir, ["--db", DB, "log", "k", "--json"])).stdout)
        expect(outline(events).filter((line) => !line.startsWith("step") && !line.startsWith("call"))).toEqual([
          `+ next-step [user] /wait ${WAIT_MS * 2}`,
          "turn 1",
          "claim next-step 1",
          `entered [user] /wait ${WAIT_MS * 2}`,
          "+ next-turn [user] later",
          "result Error: tool call aborted",
          "end 1 aborted user",
          `+ next-turn [user] /wait ${WAIT_MS * 2}`,
          "turn 2",
          "claim next-turn 1",
          "entered [user] later",
          "end 2 completed",
          "turn 3",
          "claim next-turn 1",
          `entered [user] /wait ${WAIT_MS * 2}`,
          "result Error: tool call aborted",
          "end 3 aborted user"
        ])
        expect(yield* tiller(dir, ["--db", DB, "check", "k"])).toMatchObject({ code: 0, stderr: "" })
      }),
    TIMEOUT
  )

  it.scopedLive(
    "fork --at a turn --as a new id; chat on the fork continues its turn numbering",
    () =>
      Effect.gen(function*() {
        const dir = yield* tempDir
        expect((yield* tiller(dir, ["--db", DB, "run", "first", "--session", "p"])).code).toBe(0)
        expect((yield* tiller(dir, ["--db", DB, "run", "second", "--session", "p"])).code).toBe(0)
        const parent = jsonLines((yield* tiller(dir, ["--db", DB, "log", "p", "--json"])).stdout)
        const firstEnd = parent.find((e) => e.type === "turn/end").seq

        const fork = yield* tiller(dir, ["--db", DB, "fork", "p", "--at", "1", "--as", "branch"])
        expect(fork).toEqual({ code: 0, stdout: `forked p at seq ${firstEnd} as branch\n`, stderr: "" })
        const sessions = yield* tiller(dir, ["--db", DB, "sessions"])
        expect(sessions.stdout).toMatch(
          new RegExp(`\\nbranch +1 +${firstEnd + 2} .*\\(fork of p at seq ${firstEnd}\\)\\n`)
        )

        // The fork has turn 1 only; its next turn is turn 2, not the parent's turn 3.
        const resume = yield* chatRun(dir, ["--db", DB, "resume", "branch"], { input: "again\n/quit\n" })
        expect(resume.code).toBe(0)
        expectInOrder(resume.stdout, [
          "tiller chat · session branch (resumed: 1 turn,",
          "[idle · 1 turn · pending: 0 queued, 0 next-step]\n",
          "[running · turn 2",
          "» [user] again\n",
          "assistant: Step 1 of turn 2 brought 1 message:\n1. [user] again\n",
          "── turn 2 completed\n",
          "[idle · 2 turns · pending: 0 queued, 0 next-step]\n"
        ])

        const child = jsonLines((yield* tiller(dir, ["--db", DB, "log", "branch", "--json"])).stdout)
        expect(child.slice(0, firstEnd + 1)).toEqual(parent.slice(0, firstEnd + 1))
        expect(outline(child.slice(firstEnd + 1))).toEqual([
          "end of seed",
          "+ next-step [user] again",
          "turn 2",
          "claim next-step 1",
          "step 2.1",
          "entered [user] again",
          "end 2 completed"
        ])
        expect(yield* tiller(dir, ["--db", DB, "check", "branch"])).toMatchObject({ code: 0, stderr: "" })
        // The parent is unchanged.
        expect(jsonLines((yield* tiller(dir, ["--db", DB, "log", "p", "--json"])).stdout)).toEqual(parent)
      }),
    TIMEOUT
  )

  it.scopedLive(
    "a prompt kept by /cancel --keep is a later turn of its own; a fork child's inbox starts empty",
    () =>
      Effect.gen(function*() {
        const dir = yield* tempDir
        const chat = yield* converse(dir, ["--db", DB, "chat", "--session", "src"], view)
        yield* chat.send(`/wait ${WAIT_MS * 2}`)
        yield* chat.waitFor(`  → wait {"ms":"${WAIT_MS * 2}"}\n`)
        yield* chat.send("steer")
        yield* chat.waitFor("(steering: enters the next step)")
        yield* chat.send("/inject ctx")
        yield* chat.waitFor("(context for the next step)")
        yield* chat.send("/queue queued")
        yield* chat.waitFor("(queued for a later turn)")
        yield* chat.send("/cancel --keep")
        yield* chat.waitFor("── turn 1 aborted (user)\n[idle · 1 turn · pending: 1 queued, 2 next-step]\n")
        yield* chat.send("/quit")
        expect((yield* chat.exit).code).toBe(0)
        const source = jsonLines((yield* tiller(dir, ["--db", DB, "log", "src", "--json"])).stdout)
        const end = source.find((e) => e.type === "turn/end").seq

        // The fork at the turn's end: nothing the source left pending is the child's (SPEC D11).
        expect((yield* tiller(dir, ["--db", DB, "fork", "src", "--at-seq", String(end), "--as", "child"])).code).toBe(0)
        const onChild = yield* chatRun(dir, ["--db", DB, "chat", "--session", "child"], {
          input: "/status\n/queue new\n/quit\n"
        })
        expect(onChild.code).toBe(0)
        expectInOrder(onChild.stdout, [
          "Type a message, or /help for the commands.\n[idle · 1 turn · pending: 0 queued, 0 next-step]\n",
          "[idle · 1 turn · pending: 0 queued, 0 next-step]\n",
          "» [user] new\n",
          "── turn 2 completed\n[idle · 2 turns · pending: 0 queued, 0 next-step]\n"
        ])
        expect((yield* tiller(dir, ["--db", DB, "log", "child"])).stdout).toContain(
          "claimed from next-turn: [user] new\n"
        )

        // On the source, a plain line takes the kept next-step input into its turn; the kept queued
        // prompt runs after it, as a turn of its own.
        const resumed = yield* chatRun(dir, ["--db", DB, "resume", "src"], { input: "go on\n/quit\n" })
        expect(resumed.code).toBe(0)
        const events = jsonLines((yield* tiller(dir, ["--db", DB, "log", "src", "--json"])).stdout)
        expect(outline(events.slice(source.length)).filter((line) => !line.startsWith("step"))).toEqual([
          "end of seed",
          "+ next-turn [user] go on",
          "turn 2",
          "claim next-step 2",
          "claim next-turn 1",
          "entered [user] steer",
          "entered [cli:inject] ctx",
          "entered [user] go on",
          "end 2 completed",
          "turn 3",
          "claim next-turn 1",
          "entered [user] queued",
          "end 3 completed"
        ])
        expect(yield* tiller(dir, ["--db", DB, "check", "src"])).toMatchObject({ code: 0, stderr: "" })
      }),
    TIMEOUT
  )

  it.scopedLive(
    "/pending lists the inbox, /drop and /edit change one item each; an interrupt (SIGINT) keeps pending input",
    () =>
      Effect.gen(function*() {
        const dir = yield* tempDir
        const chat = yield* converse(dir, ["--db", DB, "chat", "--session", "i"], view)
        yield* chat.send(`/wait ${WAIT_MS * 2}`)
        yield* chat.waitFor(`  → wait {"ms":"${WAIT_MS * 2}"}\n`)
        yield* chat.send("steer")
        yield* chat.send("/inject ctx")
        yield* chat.send("/queue first")
        yield* chat.send("/queue second")
        yield* chat.waitFor("pending: 2 queued, 2 next-step]\n")
        yield* chat.send("/pending")
        yield* chat.waitFor([
          "pending input (next-step enters the next step; queued prompts run as turns of their own, in order):",
          "   1. next-step [user] steer",
          "   2. next-step [cli:inject] ctx",
          "   3. queued    [user] first",
          "   4. queued    [user] second",
          ""
        ].join("\n"))
        yield* chat.send("/drop 2")
        yield* chat.waitFor(
          "(dropped next-step item 2: ctx) [running · turn 1 step 1 · pending: 2 queued, 1 next-step]\n"
        )
        yield* chat.send("/edit 3 second, edited")
        yield* chat.waitFor(
          "(edited queued item 3: second, edited) [running · turn 1 step 1 · pending: 2 queued, 1 next-step]\n"
        )
        yield* chat.send("/drop 9")
        yield* chat.send("/status")
        yield* chat.waitFor("[running · turn 1 step 1 · pending: 2 queued, 1 next-step]\n")
        // Ctrl-C from outside (SIGINT): the turn ends cancelled; the pending input is kept, not discarded.
        yield* chat.signal("SIGINT")
        const outcome = yield* chat.exit
        expect(outcome.code).toBe(130)
        expect(outcome.stderr).toBe("no pending item 9 (3 pending; /pending lists them)\n")
        expectInOrder(outcome.stdout, [
          "── turn 1 aborted (user)\n",
          "pending input kept: 2 queued, 1 next-step (it runs with the next turn)\n",
          "session i is saved; continue it with: tiller resume i\n"
        ])
        const events = jsonLines((yield* tiller(dir, ["--db", DB, "log", "i", "--json"])).stdout)
        expect(outline(events).filter((line) => line.startsWith("discard"))).toEqual(["discard next-step 1"])
        const resumed = yield* chatRun(dir, ["--db", DB, "resume", "i"], { input: "/pending\n/quit\n" })
        expectInOrder(resumed.stdout, [
          "[idle · 1 turn · pending: 2 queued, 1 next-step]\n",
          "   1. next-step [user] steer\n",
          "   2. queued    [user] first\n",
          "   3. queued    [user] second, edited\n"
        ])
      }),
    TIMEOUT
  )

  it.scopedLive(
    "/fork in the chat copies the session up to an ended turn into a new session",
    () =>
      Effect.gen(function*() {
        const dir = yield* tempDir
        expect((yield* tiller(dir, ["--db", DB, "run", "first", "--session", "f"])).code).toBe(0)
        expect((yield* tiller(dir, ["--db", DB, "run", "second", "--session", "f"])).code).toBe(0)
        const source = jsonLines((yield* tiller(dir, ["--db", DB, "log", "f", "--json"])).stdout)
        const ends = source.filter((e) => e.type === "turn/end").map((e) => e.seq)
        const chat = yield* chatRun(dir, ["--db", DB, "chat", "--session", "f"], {
          input: "/fork --at 1 --as side\n/fork --at 9\n/fork --as tip\n/quit\n"
        })
        expect(chat.code).toBe(0)
        expect(chat.stdout).toContain(
          `(forked at the end of turn 1, seq ${ends[0]}, as side; continue it with: tiller resume side)\n`
        )
        expect(chat.stdout).toContain(
          `(forked at the end of turn 2, seq ${ends[1]}, as tip; continue it with: tiller resume tip)\n`
        )
        expect(chat.stderr).toBe("turn 9 has not ended (or does not exist)\n")
        const side = jsonLines((yield* tiller(dir, ["--db", DB, "log", "side", "--json"])).stdout)
        expect(side.slice(0, ends[0] + 1)).toEqual(source.slice(0, ends[0] + 1))
        expect(yield* tiller(dir, ["--db", DB, "check", "side"])).toMatchObject({ code: 0 })
      }),
    TIMEOUT
  )

  it.scopedLive(
    "--at is a turn number in tiller fork and in /fork alike, --at-seq a seq; forks are named s-... as chats are",
    () =>
      Effect.gen(function*() {
        const dir = yield* tempDir
        expect((yield* tiller(dir, ["--db", DB, "run", "first", "--session", "f"])).code).toBe(0)
        expect((yield* tiller(dir, ["--db", DB, "run", "second", "--session", "f"])).code).toBe(0)
        const source = jsonLines((yield* tiller(dir, ["--db", DB, "log", "f", "--json"])).stdout)
        const ends = source.filter((e) => e.type === "turn/end").map((e) => e.seq)
        // The same turn, from the command line and from the chat.
        const cli = yield* tiller(dir, ["--db", DB, "fork", "f", "--at", "1"])
        expect(cli.code).toBe(0)
        expect(cli.stdout).toMatch(new RegExp(`^forked f at seq ${ends[0]} as s-[0-9a-f]{12}\\n$`))
        expect((yield* tiller(dir, ["--db", DB, "fork", "f", "--at-turn", "1", "--as", "t1"])).stdout).toBe(
          `forked f at seq ${ends[0]} as t1\n`
        )
        expect((yield* tiller(dir, ["--db", DB, "fork", "f", "--at-seq", String(ends[0]), "--as", "s1"])).stdout).toBe(
          `forked f at seq ${ends[0]} as s1\n`
        )
        expect(yield* tiller(dir, ["--db", DB, "fork", "f", "--at", "9"])).toMatchObject({
          code: 1,
          stderr: "tiller: cannot fork f: turn 9 has not ended (or does not exist) (see tiller log f)\n"
        })
        expect((yield* tiller(dir, ["--db", DB, "fork", "f", "--at", "1", "--at-seq", "3"])).stderr).toContain(
          "not both"
        )
        const chat = yield* chatRun(dir, ["--db", DB, "chat", "--session", "f"], {
          input: `/fork --at 1\n/fork --at-seq ${ends[0]} --as c1\n/quit\n`
        })
        expect(chat.code).toBe(0)
        expect(chat.stdout).toMatch(
          new RegExp(
            `\\(forked at the end of turn 1, seq ${
              ends[0]
            }, as s-[0-9a-f]{12}; continue it with: tiller resume s-[0-9a-f]{12}\\)\\n`
          )
        )
        expect(chat.stdout).toContain(
          `(forked at the end of turn 1, seq ${ends[0]}, as c1; continue it with: tiller resume c1)\n`
        )
        const help = yield* tiller(dir, ["fork", "--help"])
        expect(help.stdout).toContain("(--at, --at-turn N)")
        expect(help.stdout).toContain("--at-seq SEQ")
        expect(help.stdout).toContain("a turn number as the chat's /fork --at N")
      }),
    TIMEOUT
  )

  it.scopedLive(
    "check on a corrupted database: a rule violation and an unreadable row exit 1 with readable messages",
    () =>
      Effect.gen(function*() {
        const dir = yield* tempDir
        const file = path.join(dir, DB)
        const chat = yield* tiller(dir, ["--db", DB, "chat", "--session", "c"], { input: "one\n/queue two\n/quit\n" })
        expect(chat.code).toBe(0)
        const events = jsonLines((yield* tiller(dir, ["--db", DB, "log", "c", "--json"])).stdout)
        expect(yield* tiller(dir, ["--db", DB, "check", "c"])).toMatchObject({ code: 0 })

        // The second turn's start renumbered: the turn no longer follows turn 1.
        const second = events.filter((e) => e.type === "turn/start")[1]
        expect(second.data).toEqual({ turn: 2 })
        expect(yield* overwriteRow(file, "c", second.seq, JSON.stringify({ ...second, data: { turn: 5 } }))).toBe(1)
        const violated = yield* tiller(dir, ["--db", DB, "check", "c"])
        expect(violated.code).toBe(1)
        expect(violated.stderr).toBe("")
        const lines = violated.stdout.trimEnd().split("\n")
        expect(lines[0]).toBe(`seq ${second.seq}  R1  turn/start 5 after turn 1`)
        expect(lines[lines.length - 1]).toMatch(new RegExp(`^session c: \\d+ violations in ${events.length} events$`))

        // A row that is not JSON: the log cannot be read, and check says where.
        expect(yield* overwriteRow(file, "c", 3, "{not json")).toBe(1)
        const unreadable = yield* tiller(dir, ["--db", DB, "check", "c"])
        expect(unreadable.code).toBe(1)
        expect(unreadable.stdout).toBe("")
        expect(unreadable.stderr).toMatch(/^tiller: malformed log of session c at seq 3: row is not JSON: .+\n$/)
        expect((yield* tiller(dir, ["--db", DB, "log", "c"])).stderr).toBe(unreadable.stderr)
      }),
    TIMEOUT
  )
})
