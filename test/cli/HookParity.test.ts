/**
 * Claude Code hook behaviour through the executable: `CLAUDE_ENV_FILE` variables reach later `Bash`
 * calls, `run` shows a hook's `systemMessage` and a Stop hook's stop reason, hooks see the real
 * permission mode and the model, a malformed settings file is skipped with a warning, and `tiller
 * compact` runs the compaction's hooks. The hook scripts are written as published ones are: bash
 * reading the event's JSON on stdin.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import { jsonLines, tempDir, tiller } from "./harness.js"

/** Writes `files` under `dir` (scripts executable). */
const write = (dir: string, files: Readonly<Record<string, string>>) => {
  for (const [name, text] of Object.entries(files)) {
    fs.mkdirSync(path.dirname(path.join(dir, name)), { recursive: true })
    fs.writeFileSync(path.join(dir, name), text, { mode: name.endsWith(".sh") ? 0o755 : 0o644 })
  }
}

const hooks = (events: Record<string, ReadonlyArray<{ readonly matcher?: string; readonly command: string }>>) =>
  JSON.stringify({
    hooks: Object.fromEntries(
      Object.entries(events).map(([event, entries]) => [
        event,
        entries.map((e) => ({
          ...(e.matcher === undefined ? {} : { matcher: e.matcher }),
          hooks: [{ type: "command", command: e.command }]
        }))
      ])
    )
  })

describe("Claude Code hook parity through the CLI", () => {
  it.scopedLive(
    "variables a SessionStart hook writes to CLAUDE_ENV_FILE apply to later Bash calls; CLAUDE_PROJECT_DIR names the project",
    () =>
      Effect.gen(function*() {
        const dir = yield* tempDir
        write(dir, {
          ".claude/settings.json": hooks({
            SessionStart: [{ command: "\"$CLAUDE_PROJECT_DIR\"/.claude/hooks/env.sh" }]
          }),
          // As published: fails (exit 1) when CLAUDE_ENV_FILE is not set.
          ".claude/hooks/env.sh":
            "#!/bin/bash\nset -e\nINPUT=$(cat)\nif [ -z \"$CLAUDE_ENV_FILE\" ]; then echo 'CLAUDE_ENV_FILE is not set' >&2; exit 1; fi\necho \"export GREETING=hello-from-hook\" >> \"$CLAUDE_ENV_FILE\"\necho \"export PROJECT_SEEN=$CLAUDE_PROJECT_DIR\" >> \"$CLAUDE_ENV_FILE\"\n"
        })
        const run = yield* tiller(dir, [
          "--claude-hooks",
          "--permission-mode",
          "bypassPermissions",
          "run",
          "--session",
          "e",
          "/Bash echo \"$GREETING in $PROJECT_SEEN\""
        ])
        expect(run.code).toBe(0)
        const events = jsonLines((yield* tiller(dir, ["log", "e", "--json"])).stdout)
        expect(events.filter((e) => e.type === "hook/run").map((e) => [e.data.event, e.data.exitCode])).toEqual([
          ["SessionStart", 0]
        ])
        const result = events.find((e) => e.type === "tool/result")
        expect(result.data.message.content[0].content[0].text).toBe(`hello-from-hook in ${fs.realpathSync(dir)}`)
      }),
    { timeout: 60_000 }
  )

  it.scopedLive(
    "run prints systemMessage and a Stop hook's stop reason; continue false beside a block stops the turn; hooks see the permission mode and the model",
    () =>
      Effect.gen(function*() {
        const dir = yield* tempDir
        write(dir, {
          ".tiller/settings.json": hooks({
            SessionStart: [{ command: "./start.sh" }],
            UserPromptSubmit: [{ command: "./prompt.sh" }],
            Stop: [{ command: "./stop.sh" }]
          }),
          "start.sh": "#!/bin/bash\njq -c '{source, model, permission_mode}' >> inputs.jsonl\n",
          "prompt.sh":
            "#!/bin/bash\njq -c '{hook_event_name, permission_mode}' >> inputs.jsonl\necho '{\"systemMessage\": \"remember the style guide\"}'\n",
          "stop.sh":
            "#!/bin/bash\njq -c '{hook_event_name, last_assistant_message: (.last_assistant_message | length > 0)}' >> inputs.jsonl\necho '{\"decision\": \"block\", \"reason\": \"keep going\", \"continue\": false, \"stopReason\": \"the budget is spent\"}'\n"
        })
        const run = yield* tiller(dir, ["--permission-mode", "acceptEdits", "run", "--session", "m", "hello"])
        expect(run.code).toBe(0)
        expect(run.stderr).toContain("(UserPromptSubmit hook: remember the style guide)")
        expect(run.stderr).toContain("(Stop hook stopped the turn: the budget is spent)")
        const inputs = fs.readFileSync(path.join(dir, "inputs.jsonl"), "utf8").trim().split("\n").map((l) =>
          JSON.parse(l)
        )
        expect(inputs).toEqual([
          { source: "startup", model: "demo", permission_mode: "acceptEdits" },
          { hook_event_name: "UserPromptSubmit", permission_mode: "acceptEdits" },
          { hook_event_name: "Stop", last_assistant_message: true }
        ])
        const events = jsonLines((yield* tiller(dir, ["log", "m", "--json"])).stdout)
        // The block did not continue the turn: one step, no steer from the Stop hook.
        expect(events.filter((e) => e.type === "step/start")).toHaveLength(1)
        expect(events.filter((e) => e.type === "user/message" && e.data.source.event === "Stop")).toEqual([])
        expect(events.find((e) => e.type === "turn/end").data.reason).toEqual({ kind: "completed" })
      }),
    { timeout: 60_000 }
  )

  it.scopedLive(
    "a malformed settings file is skipped with a warning: the session runs with the other files' hooks",
    () =>
      Effect.gen(function*() {
        const dir = yield* tempDir
        write(dir, {
          ".claude/settings.json": "{ \"hooks\": ",
          ".tiller/settings.json": hooks({ UserPromptSubmit: [{ command: "echo from-tiller-settings" }] })
        })
        const run = yield* tiller(dir, ["--claude-hooks", "run", "--session", "w", "hi"])
        expect(run.code).toBe(0)
        expect(run.stderr).toContain(
          `warning: ${path.join(dir, ".claude", "settings.json")} is not valid JSON`
        )
        expect(run.stderr).toContain("its hooks are skipped")
        const events = jsonLines((yield* tiller(dir, ["log", "w", "--json"])).stdout)
        expect(events.filter((e) => e.type === "user/message").map((e) => e.data.source.kind)).toEqual(["user", "hook"])
      }),
    { timeout: 60_000 }
  )

  it.scopedLive(
    "tiller compact runs PreCompact (a block vetoes) and SessionStart with source compact, not startup or resume",
    () =>
      Effect.gen(function*() {
        const dir = yield* tempDir
        for (let i = 1; i <= 4; i++) fs.writeFileSync(path.join(dir, `f${i}.txt`), "0123456789".repeat(200))
        const window = ["--context-window", "8000"]
        for (let i = 1; i <= 4; i++) {
          expect((yield* tiller(dir, [...window, "run", `/Read f${i}.txt`, "--session", "c"])).code).toBe(0)
        }
        write(dir, {
          ".tiller/settings.json": hooks({
            PreCompact: [{ matcher: "manual", command: "./pre.sh" }],
            SessionStart: [{ command: "./start.sh" }]
          }),
          "pre.sh":
            "#!/bin/bash\nI=$(cat)\necho \"$I\" | jq -c '{hook_event_name, trigger, custom_instructions}' >> compact.jsonl\nif [ \"$(echo \"$I\" | jq -r .custom_instructions)\" = keep ]; then echo 'not now: a review is open' >&2; exit 2; fi\n",
          "start.sh":
            "#!/bin/bash\njq -c '{hook_event_name, source}' >> compact.jsonl\necho '{\"systemMessage\": \"context was compacted\"}'\n"
        })
        const vetoed = yield* tiller(dir, [...window, "compact", "c", "--focus", "keep"])
        expect(vetoed.stdout).toBe("session c: compaction vetoed by a hook: not now: a review is open\n")
        const done = yield* tiller(dir, [...window, "compact", "c", "--focus", "the files"])
        expect(done.code).toBe(0)
        expect(done.stdout).toMatch(/^session c: compacted: /)
        expect(done.stderr).toContain("(SessionStart hook: context was compacted)")
        const lines = fs.readFileSync(path.join(dir, "compact.jsonl"), "utf8").trim().split("\n").map((l) =>
          JSON.parse(l)
        )
        expect(lines).toEqual([
          { hook_event_name: "PreCompact", trigger: "manual", custom_instructions: "keep" },
          { hook_event_name: "PreCompact", trigger: "manual", custom_instructions: "the files" },
          { hook_event_name: "SessionStart", source: "compact" }
        ])
      }),
    { timeout: 120_000 }
  )
})
