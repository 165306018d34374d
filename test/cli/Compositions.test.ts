/**
 * The CLI's compositions, through the executable: hooks from `.tiller/settings.json` (and with
 * `--claude-hooks` from `.claude/settings.json`), `@ID` references in a prompt or a chat line,
 * `/ref`, `tiller handoff` and `--read-session`.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { mentionsIn } from "../../src/cli/Compositions.js"
import { converse, tiller } from "./harness.js"

/** A temporary working directory holding `files`. */
const project = (files: Readonly<Record<string, string>>): string => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "tiller-cli-compositions-"))
  for (const [name, text] of Object.entries(files)) {
    fs.mkdirSync(path.dirname(path.join(dir, name)), { recursive: true })
    fs.writeFileSync(path.join(dir, name), text)
  }
  return dir
}

const promptHooks = (command: string) =>
  JSON.stringify({ hooks: { UserPromptSubmit: [{ hooks: [{ type: "command", command }] }] } })

/** The JSON events of a session, from `tiller log --json`. */
const eventsOf = (dir: string, id: string) =>
  Effect.map(tiller(dir, ["log", id, "--json"]), (out) => out.stdout.trim().split("\n").map((line) => JSON.parse(line)))

const sourcesOf = (events: ReadonlyArray<any>) =>
  events.filter((e) => e.type === "user/message").map((e) => e.data.source)

describe("CLI compositions", () => {
  it("mentionsIn: @ID and @ID@SEQ, each once, not inside words or e-mail addresses", () => {
    expect(mentionsIn("see @s-1 and @s-2@14, again @s-1; mail a@b.c")).toEqual([{ id: "s-1" }, { id: "s-2", upTo: 14 }])
  })

  it.live("hooks of .tiller/settings.json run in `run`: a block ends the turn blocked (exit 1); context enters beside the prompt", () =>
    Effect.gen(function*() {
      const dir = project({
        ".tiller/settings.json": promptHooks(
          "P=$(jq -r .prompt); case \"$P\" in *forbidden*) echo 'that topic is refused' >&2; exit 2;; *) echo \"note for: $P\";; esac"
        )
      })
      const blocked = yield* tiller(dir, ["run", "--session", "a", "a forbidden thing"])
      expect(blocked.code).toBe(1)
      expect(blocked.stderr).toContain("that topic is refused")
      const ok = yield* tiller(dir, ["run", "--session", "a", "fine"])
      expect(ok.code).toBe(0)
      const events = yield* eventsOf(dir, "a")
      expect(sourcesOf(events)).toEqual([
        { kind: "user" },
        { kind: "hook", hook: expect.stringContaining("jq -r .prompt"), event: "UserPromptSubmit" }
      ])
      expect(events.filter((e) => e.type === "hook/run").map((e) => e.data.block ?? e.data.additionalContext)).toEqual([
        "that topic is refused",
        "note for: fine"
      ])
      expect(fs.existsSync(path.join(dir, ".tiller", "transcripts", "a.jsonl"))).toBe(true)
      expect((yield* tiller(dir, ["check", "a"])).stdout).toContain("no violations")
    }))

  it.scopedLive("a PreToolUse ask is a question in the chat: y runs the call; at the end of input it is a no", () =>
    Effect.gen(function*() {
      const dir = project({
        ".tiller/settings.json": JSON.stringify({
          hooks: {
            PreToolUse: [{
              matcher: "wait",
              hooks: [{
                type: "command",
                command:
                  `echo '{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"ask","permissionDecisionReason":"waiting needs a human"}}'`
              }]
            }]
          }
        })
      })
      const chat = yield* converse(dir, ["chat", "--session", "q"])
      yield* chat.send("/wait 10")
      yield* chat.waitFor("? approve wait {\"ms\":\"10\"}? the hook")
      yield* chat.waitFor("asks: waiting needs a human. Answer y, n [REASON] or always")
      yield* chat.send("y")
      yield* chat.waitFor("── turn 1 completed")
      expect((yield* chat.end).code).toBe(0)
      const piped = yield* tiller(dir, ["chat", "--session", "r"], { input: "/wait 10\n" })
      expect(piped.code).toBe(0)
      const results = (id: string) =>
        Effect.map(
          eventsOf(dir, id),
          (events) => events.filter((e) => e.type === "tool/result").map((e) => e.data.error?.code ?? "ok")
        )
      expect(yield* results("q")).toEqual(["ok"])
      expect(yield* results("r")).toEqual(["DENIED"])
    }))

  it.scopedLive("a permission ask is a question in the chat: y runs the command, n refuses it", () =>
    Effect.gen(function*() {
      const dir = project({})
      const chat = yield* converse(dir, ["chat", "--session", "p"])
      yield* chat.send("/Bash echo approved > approved.txt")
      yield* chat.waitFor(
        "? approve Bash {\"command\":\"echo approved > approved.txt\"}? Bash needs approval in default mode."
      )
      yield* chat.send("y")
      yield* chat.waitFor("── turn 1 completed")
      yield* chat.send("/Bash echo refused > refused.txt")
      yield* chat.waitFor("? approve Bash {\"command\":\"echo refused > refused.txt\"}?")
      yield* chat.send("n")
      yield* chat.waitFor("── turn 2 completed")
      expect((yield* chat.end).code).toBe(0)
      expect(fs.readFileSync(path.join(dir, "approved.txt"), "utf8")).toBe("approved\n")
      expect(fs.existsSync(path.join(dir, "refused.txt"))).toBe(false)
      const results = yield* Effect.map(
        eventsOf(dir, "p"),
        (events) => events.filter((e) => e.type === "tool/result").map((e) => e.data.error?.code ?? "ok")
      )
      expect(results).toEqual(["ok", "DENIED"])
    }))

  it.live("--claude-hooks also reads .claude/settings.json; without it those hooks do not run; a malformed one is skipped", () =>
    Effect.gen(function*() {
      const dir = project({ ".claude/settings.json": promptHooks("echo from-claude-settings") })
      yield* tiller(dir, ["run", "--session", "plain", "hi"])
      expect(sourcesOf(yield* eventsOf(dir, "plain")).map((s) => s.kind)).toEqual(["user"])
      yield* tiller(dir, ["run", "--claude-hooks", "--session", "claude", "hi"])
      expect(sourcesOf(yield* eventsOf(dir, "claude")).map((s) => s.kind)).toEqual(["user", "hook"])
      // A malformed file is skipped with a warning, as Claude Code skips it.
      const broken = project({ ".claude/settings.json": "{" })
      const skipped = yield* tiller(broken, ["--claude-hooks", "run", "hi"])
      expect(skipped.code).toBe(0)
      expect(skipped.stderr).toContain("is not valid JSON")
    }))

  it.live("@ID in a run prompt and /ref in the chat attach quoted snapshots of a stored session", () =>
    Effect.gen(function*() {
      const dir = project({})
      yield* tiller(dir, ["run", "--session", "src", "the launch code is orange"])
      const referenced = yield* tiller(dir, ["run", "--session", "t1", "what did @src say? and @nobody"])
      expect(referenced.code).toBe(0)
      expect(referenced.stderr).toMatch(/\(reference: session src up to seq \d+, quoted for the model\)/)
      const t1 = yield* eventsOf(dir, "t1")
      const messages = t1.filter((e) => e.type === "user/message").map((e) => e.data)
      expect(messages.map((m) => m.source.kind)).toEqual(["session-ref", "user"])
      expect(messages[0].content[0].text).toContain("the launch code is orange")
      expect(messages[1].content[0].text).toBe("what did @src say? and @nobody")

      const chat = yield* tiller(dir, ["chat", "--session", "t2"], { input: "/ref src --upto 3\nhello\n" })
      expect(chat.code).toBe(0)
      const t2 = yield* eventsOf(dir, "t2")
      expect(t2.filter((e) => e.type === "user/message").map((e) => [e.data.source.kind, e.data.source.upTo ?? null]))
        .toEqual([
          ["session-ref", 3],
          ["user", null]
        ])

      for (const id of ["t1", "t2"]) expect((yield* tiller(dir, ["check", id])).stdout).toContain("no violations")
    }))

  it.live("handoff starts a session whose first prompt carries a snapshot of the source; read_session is offered with --read-session", () =>
    Effect.gen(function*() {
      const dir = project({})
      yield* tiller(dir, ["run", "--session", "src", "the launch code is orange"])
      const handoff = yield* tiller(dir, ["handoff", "src", "continue the work", "--as", "h1"])
      expect(handoff.code).toBe(0)
      expect(handoff.stderr).toMatch(/session h1 \(handoff from src up to seq \d+\)/)
      const h1 = yield* eventsOf(dir, "h1")
      expect(h1.filter((e) => e.type === "user/message").map((e) => e.data.source.kind)).toEqual([
        "session-ref",
        "user"
      ])
      expect((yield* tiller(dir, ["check", "h1"])).stdout).toContain("no violations")
      expect((yield* tiller(dir, ["handoff", "nope", "x"])).stderr).toContain("no session nope")

      yield* tiller(dir, ["--read-session", "run", "--session", "t3", "hi"])
      const header = (yield* eventsOf(dir, "t3")).find((e) => e.type === "request/header")
      expect(header.data.header.tools.map((t: { name: string }) => t.name)).toContain("read_session")
    }))
})
