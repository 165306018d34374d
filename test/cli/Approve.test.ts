/**
 * Durable approvals through the command line (SPEC 4.12): a chat killed with SIGKILL while a call
 * waits keeps the question (`sessions` says so, `resume` shows it, and `y` then runs the call); a
 * second process answers with `tiller approve` while the chat waits; answers that are not pending
 * are refused and change nothing.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import { converse, tempDir, tiller } from "./harness.js"

const TIMEOUT = 120_000

describe("tiller approve and durable approvals in the chat", () => {
  it.scoped(
    "a chat killed with SIGKILL while a call waits: sessions says so, resume shows it pending, y then runs the call",
    () =>
      Effect.gen(function*() {
        const dir = yield* tempDir
        const chat = yield* converse(dir, ["--db", "t.db", "chat", "--session", "s"])
        yield* chat.waitFor("Type a message")
        yield* chat.send("/Bash touch marker")
        yield* chat.waitFor("? approve Bash {\"command\":\"touch marker\"}?")
        yield* chat.signal("SIGKILL")
        const killed = yield* chat.exit
        expect(killed.code).toBe(null)
        expect(fs.existsSync(path.join(dir, "marker"))).toBe(false)

        const [listed] = JSON.parse((yield* tiller(dir, ["--db", "t.db", "sessions", "--json"])).stdout)
        expect(listed).toMatchObject({
          id: "s",
          status: "awaiting approval",
          approvals: [{ callId: "demo-1-1", tool: "Bash", input: { command: "touch marker" } }]
        })

        const resumed = yield* converse(dir, ["--db", "t.db", "resume", "s"])
        yield* resumed.waitFor("? approve Bash {\"command\":\"touch marker\"}? Bash needs approval in default mode")
        yield* resumed.waitFor("tiller approve s demo-1-1 --allow|--deny")
        yield* resumed.send("y")
        yield* resumed.waitFor("demo-1-1 approved by the user in the chat")
        yield* resumed.waitFor("has run now")
        yield* resumed.waitFor("completed")
        const done = yield* resumed.end
        expect(done.code).toBe(0)
        expect(fs.existsSync(path.join(dir, "marker"))).toBe(true)

        const log = (yield* tiller(dir, ["--db", "t.db", "log", "s"])).stdout
        expect(log).toMatch(/approval +asked for Bash \{"command":"touch marker"\} \(demo-1-1\)/)
        expect(log).toMatch(/approval +demo-1-1 approved by the user in the chat/)
        expect(log).toContain("turn 1     end: interrupted")
        expect((yield* tiller(dir, ["--db", "t.db", "check", "s"])).stdout).toContain("no violations")
        const after = JSON.parse((yield* tiller(dir, ["--db", "t.db", "sessions", "--json"])).stdout)[0]
        expect(after).toMatchObject({ status: "idle", approvals: [] })
      }),
    TIMEOUT
  )

  it.scoped(
    "a second process answers with tiller approve while the chat waits; --deny refuses with its reason",
    () =>
      Effect.gen(function*() {
        const dir = yield* tempDir
        const chat = yield* converse(dir, ["--db", "t.db", "chat", "--session", "s"])
        yield* chat.waitFor("Type a message")
        yield* chat.send("/Bash touch first")
        yield* chat.waitFor("? approve Bash {\"command\":\"touch first\"}?")
        const allowed = yield* tiller(dir, ["--db", "t.db", "approve", "s", "--allow"])
        expect(allowed.code).toBe(0)
        expect(allowed.stdout).toMatch(
          /^Bash call demo-1-1 of session s approved by tiller approve: recorded by pid \d+/
        )
        yield* chat.waitFor("demo-1-1 approved by tiller approve")
        yield* chat.waitFor("completed")
        expect(fs.existsSync(path.join(dir, "first"))).toBe(true)

        yield* chat.send("/Bash touch second")
        yield* chat.waitFor("? approve Bash {\"command\":\"touch second\"}?")
        const denied = yield* tiller(dir, [
          "--db",
          "t.db",
          "approve",
          "s",
          "demo-2-1",
          "--deny",
          "--reason",
          "not now"
        ])
        expect(denied.code).toBe(0)
        yield* chat.waitFor("demo-2-1 refused by tiller approve: not now")
        yield* chat.waitFor("tool call denied: permission refused by tiller approve: not now")
        yield* chat.waitFor("completed")
        expect(fs.existsSync(path.join(dir, "second"))).toBe(false)

        // Answers to a call that is not pending are refused; nothing is written.
        const before = (yield* tiller(dir, ["--db", "t.db", "log", "s", "--json"])).stdout
        const again = yield* tiller(dir, ["--db", "t.db", "approve", "s", "demo-1-1", "--allow"])
        expect(again.code).toBe(1)
        expect(again.stderr).toContain("session s has no pending approval for demo-1-1")
        const neither = yield* tiller(dir, ["--db", "t.db", "approve", "s"])
        expect(neither.code).toBe(1)
        expect(neither.stderr).toContain("exactly one of --allow and --deny")
        expect((yield* tiller(dir, ["--db", "t.db", "log", "s", "--json"])).stdout).toBe(before)
        expect((yield* chat.end).code).toBe(0)
      }),
    TIMEOUT
  )

  it.scoped(
    "tiller approve --deny while no process holds the session: the next resume records it and tells the model",
    () =>
      Effect.gen(function*() {
        const dir = yield* tempDir
        const chat = yield* converse(dir, ["--db", "t.db", "chat", "--session", "s"])
        yield* chat.waitFor("Type a message")
        yield* chat.send("/Bash touch marker")
        yield* chat.waitFor("? approve Bash {\"command\":\"touch marker\"}?")
        yield* chat.signal("SIGKILL")
        yield* chat.exit
        const left = yield* tiller(dir, ["--db", "t.db", "approve", "s", "--deny", "--reason", "wrong folder"])
        expect(left.code).toBe(0)
        expect(left.stdout).toContain(
          "refused by tiller approve: wrong folder: left in the store; the session is not open"
        )
        const resumed = yield* tiller(dir, ["--db", "t.db", "resume", "s"], { input: "" })
        expect(resumed.code).toBe(0)
        expect(resumed.stdout).toContain("demo-1-1 refused by tiller approve: wrong folder")
        expect(resumed.stdout).toContain("was refused by tiller approve: wrong folder. It did not run.")
        expect(fs.existsSync(path.join(dir, "marker"))).toBe(false)
        const [listed] = JSON.parse((yield* tiller(dir, ["--db", "t.db", "sessions", "--json"])).stdout)
        expect(listed).toMatchObject({ status: "idle", approvals: [] })
      }),
    TIMEOUT
  )
})
