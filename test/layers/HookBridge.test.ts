/**
 * The hook bridge with real subprocess hooks: scripts written by each test into a temporary project
 * directory, and a fixture of hook scripts written the way published Claude Code examples are.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Either, Layer, Schema } from "effect"
import { Duration } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { checkLog } from "../../src/domain/Check.js"
import { HookCommandError } from "../../src/domain/Errors.js"
import type { EventOf, SessionEvent } from "../../src/domain/Event.js"
import { SessionId } from "../../src/domain/Ids.js"
import { userMessage } from "../../src/domain/Message.js"
import { runCommand, scrubbedEnvironment } from "../../src/internal/hooks/Command.js"
import { defaultEnvDir, sessionEnvFile } from "../../src/internal/hooks/EnvFile.js"
import { readAnswer } from "../../src/internal/hooks/Protocol.js"
import { commandsFor, parseSettings } from "../../src/internal/hooks/Settings.js"
import { Agent } from "../../src/layers/Agent.js"
import * as CodingTools from "../../src/layers/CodingTools.js"
import type { HookBridgeOptions } from "../../src/layers/HookBridge.js"
import { HookBridge } from "../../src/layers/HookBridge.js"
import type { ScriptEntry } from "../../src/layers/ScriptedModel.js"
import { ScriptedModel } from "../../src/layers/ScriptedModel.js"
import { Compaction } from "../../src/services/Compaction.js"
import { Driver } from "../../src/services/Driver.js"
import { SessionLog } from "../../src/services/SessionLog.js"
import { SessionStore } from "../../src/services/SessionStore.js"
import { Tools } from "../../src/services/Tools.js"
import type { ToolDefinition } from "../../src/services/Tools.js"
import { Tool } from "../../src/services/Tools.js"
import { notation, scenario, user } from "../agent/harness.js"

/** A temporary project directory holding `files` (scripts are made executable). */
const project = (files: Readonly<Record<string, string>>): string => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "tiller-hooks-"))
  for (const [name, text] of Object.entries(files)) {
    const file = path.join(dir, name)
    fs.mkdirSync(path.dirname(file), { recursive: true })
    fs.writeFileSync(file, text, { mode: name.endsWith(".sh") || name.endsWith(".py") ? 0o755 : 0o644 })
  }
  return dir
}

/** `.tiller/settings.json` with one matcher group per entry. */
const settings = (
  hooks: Record<
    string,
    ReadonlyArray<{ readonly matcher?: string; readonly command: string; readonly timeout?: number }>
  >
) =>
  JSON.stringify({
    hooks: Object.fromEntries(
      Object.entries(hooks).map(([event, entries]) => [
        event,
        entries.map((e) => ({
          ...(e.matcher === undefined ? {} : { matcher: e.matcher }),
          hooks: [{ type: "command", command: e.command, ...(e.timeout === undefined ? {} : { timeout: e.timeout }) }]
        }))
      ])
    )
  })

const calls: Array<{ readonly tool: string; readonly params: unknown }> = []

const bash = Tool.make("Bash", {
  description: "Runs a command (a test double: it only records the call)",
  parameters: Schema.Struct({ command: Schema.String, description: Schema.optional(Schema.String) }),
  execute: (params) =>
    Effect.sync(() => {
      calls.push({ tool: "Bash", params })
      return `ran: ${params.command}`
    })
})
const read = Tool.make("Read", {
  description: "Reads a file (a test double)",
  parameters: Schema.Struct({ file_path: Schema.String }),
  execute: (params) =>
    Effect.sync(() => {
      calls.push({ tool: "Read", params })
      return `contents of ${params.file_path}`
    })
})
const tools: ReadonlyArray<ToolDefinition<any>> = [bash, read]

/** Runs `body` on agent "s" with the bridge over `dir`. */
const withBridge = <A, E>(
  dir: string,
  script: ReadonlyArray<ScriptEntry>,
  body: Effect.Effect<A, E, Driver | SessionLog | ScriptedModel>,
  bridge: HookBridgeOptions = {}
) =>
  Effect.scoped(
    Effect.provide(
      body,
      HookBridge.layer({ cwd: dir, ...bridge }).pipe(Layer.provideMerge(scenario(script, { tools })))
    )
  )

/** Delivers a prompt as a follow-up and waits until the agent is idle; returns the log. */
const prompt = (id: string, text: string) =>
  Effect.gen(function*() {
    const driver = yield* Driver
    yield* driver.followup(user(id, text))
    yield* driver.whenIdle
    return yield* Effect.flatMap(SessionLog, (log) => log.events)
  })

const shapeOf = (events: ReadonlyArray<SessionEvent>) => events.map(notation)
const hookRuns = (events: ReadonlyArray<SessionEvent>) =>
  events.filter((e) => e.type === "hook/run").map((e) => e.data as Record<string, any>)
const userMessages = (events: ReadonlyArray<SessionEvent>) =>
  events.filter((e) => e.type === "user/message").map((e) => (e as EventOf<"user/message">).data)
const results = (events: ReadonlyArray<SessionEvent>) =>
  events.filter((e) => e.type === "tool/result").map((e) => (e as EventOf<"tool/result">).data)
const textOf = (content: ReadonlyArray<{ readonly type: string; readonly text?: string }>) =>
  content.map((b) => b.text ?? "").join("\n")
const clean = (events: ReadonlyArray<SessionEvent>) => expect(checkLog(events, { closed: true })).toEqual([])

describe("HookBridge", () => {
  describe("UserPromptSubmit (the pre-step of a boundary that claimed a prompt)", () => {
    it.live("additionalContext enters as a hook message right after the prompt, in the same step", () => {
      const dir = project({
        ".tiller/settings.json": settings({ UserPromptSubmit: [{ command: "./ctx.sh" }] }),
        "ctx.sh":
          `#!/bin/sh\nP=$(jq -r .prompt)\njq -n --arg c "the prompt was: $P" '{hookSpecificOutput: {hookEventName: "UserPromptSubmit", additionalContext: $c}}'\n`
      })
      return withBridge(
        dir,
        [ScriptedModel.text("ok")],
        Effect.gen(function*() {
          const events = yield* prompt("p1", "hello")
          const messages = userMessages(events)
          expect(messages.map((m) => m.id)[0]).toBe("p1")
          expect(messages[1]!.source).toEqual({ kind: "hook", hook: "./ctx.sh", event: "UserPromptSubmit" })
          expect(textOf(messages[1]!.content)).toBe("the prompt was: hello")
          const shape = shapeOf(events).filter((s) => s !== "hook/run")
          expect(shape.slice(0, 6)).toEqual([
            "INS(nt,0,[p1])",
            "TS(1)",
            "CLM(nt,0,1)",
            "SS(1,1)",
            "UM(p1)",
            `UM(${messages[1]!.id})`
          ])
          const requests = yield* Effect.flatMap(ScriptedModel, (s) => s.requests)
          expect(requests[0]!.messages.map((m) => textOf(m.content as any))).toEqual(["hello", "the prompt was: hello"])
          expect(hookRuns(events)).toEqual([
            expect.objectContaining({
              event: "UserPromptSubmit",
              hook: "./ctx.sh",
              exitCode: 0,
              messageId: "p1",
              additionalContext: "the prompt was: hello"
            })
          ])
          clean(events)
        })
      )
    })

    it.live("exit code 2 rejects the step: the turn ends blocked with stderr as the reason, and no model call", () => {
      const dir = project({
        ".tiller/settings.json": settings({ UserPromptSubmit: [{ command: "./deny.sh" }] }),
        "deny.sh": "#!/bin/sh\ncat > /dev/null\necho 'prompts about rm -rf are refused' >&2\nexit 2\n"
      })
      return withBridge(
        dir,
        [],
        Effect.gen(function*() {
          const events = yield* prompt("p1", "rm -rf /")
          expect(shapeOf(events)).toEqual(["INS(nt,0,[p1])", "TS(1)", "CLM(nt,0,1)", "hook/run", "TE(1,blocked)"])
          const end = events.find((e) => e.type === "turn/end") as EventOf<"turn/end">
          expect(end.data.reason).toEqual({ kind: "blocked", message: "prompts about rm -rf are refused" })
          expect(yield* Effect.flatMap(ScriptedModel, (s) => s.requests)).toEqual([])
          clean(events)
        })
      )
    })

    it.live("decision block (JSON) rejects with its reason; continue false rejects with stopReason", () => {
      const dir = project({
        ".tiller/settings.json": settings({ UserPromptSubmit: [{ command: "./policy.sh" }] }),
        "policy.sh":
          `#!/bin/sh\nP=$(jq -r .prompt)\ncase "$P" in\n  *secret*) echo '{"decision":"block","reason":"no secrets"}' ;;\n  *stop*) echo '{"continue":false,"stopReason":"stopped here"}' ;;\nesac\n`
      })
      return withBridge(
        dir,
        [ScriptedModel.text("ok")],
        Effect.gen(function*() {
          yield* prompt("p1", "a secret")
          yield* prompt("p2", "please stop")
          const events = yield* prompt("p3", "fine")
          const reasons = events.filter((e) => e.type === "turn/end").map((e) => (e as EventOf<"turn/end">).data.reason)
          expect(reasons).toEqual([
            { kind: "blocked", message: "no secrets" },
            { kind: "blocked", message: "stopped here" },
            { kind: "completed" }
          ])
          clean(events)
        })
      )
    })

    it.live("a message that is not a user prompt (injected context) runs no UserPromptSubmit hook", () => {
      const dir = project({
        ".tiller/settings.json": settings({ UserPromptSubmit: [{ command: "./count.sh" }] }),
        "count.sh": "#!/bin/sh\njq -r .prompt >> prompts.txt\n"
      })
      return withBridge(
        dir,
        [ScriptedModel.text("ok")],
        Effect.gen(function*() {
          const driver = yield* Driver
          yield* driver.inject(userMessage({ id: "c1", text: "context", source: { kind: "plugin", plugin: "test" } }))
          const events = yield* prompt("p1", "hello")
          expect(fs.readFileSync(path.join(dir, "prompts.txt"), "utf8")).toBe("hello\n")
          expect(userMessages(events).map((m) => m.id)).toEqual(["c1", "p1"])
        })
      )
    })
  })

  describe("PreToolUse (tool pre-execute)", () => {
    const callBash = (command: string, id = "c1") =>
      ScriptedModel.response({ toolCalls: [{ id, name: "Bash", arguments: { command } }] })

    it.live("permissionDecision deny makes the result DENIED with the reason; the body never runs", () => {
      calls.length = 0
      const dir = project({
        ".tiller/settings.json": settings({ PreToolUse: [{ matcher: "Bash", command: "./guard.sh" }] }),
        "guard.sh":
          `#!/bin/sh\nC=$(jq -r .tool_input.command)\ncase "$C" in\n  rm*) echo '{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny","permissionDecisionReason":"rm is not allowed"}}' ;;\nesac\n`
      })
      return withBridge(
        dir,
        [callBash("rm -rf x"), ScriptedModel.text("done")],
        Effect.gen(function*() {
          const events = yield* prompt("p1", "clean up")
          const [result] = results(events)
          expect(result!.error).toEqual({ name: "ToolDeniedError", code: "DENIED" })
          expect(textOf(result!.message.content[0].content)).toBe("Error: tool call denied: rm is not allowed")
          expect(calls).toEqual([])
          expect(hookRuns(events)).toEqual([
            expect.objectContaining({
              event: "PreToolUse",
              callId: "c1",
              tool: "Bash",
              permissionDecision: "deny",
              permissionDecisionReason: "rm is not allowed"
            })
          ])
          clean(events)
        })
      )
    })

    it.live("exit code 2 denies with stderr; a matcher that does not match runs nothing", () => {
      calls.length = 0
      const dir = project({
        ".tiller/settings.json": settings({
          PreToolUse: [{ matcher: "Bash", command: "./block.sh" }, { matcher: "Write|Edit", command: "./never.sh" }]
        }),
        "block.sh": "#!/bin/sh\necho 'use rg instead of grep' >&2\nexit 2\n",
        "never.sh": "#!/bin/sh\ntouch ran-never\n"
      })
      return withBridge(
        dir,
        [callBash("grep x"), ScriptedModel.text("done")],
        Effect.gen(function*() {
          const events = yield* prompt("p1", "search")
          expect(textOf(results(events)[0]!.message.content[0].content)).toBe(
            "Error: tool call denied: use rg instead of grep"
          )
          expect(fs.existsSync(path.join(dir, "ran-never"))).toBe(false)
          expect(calls).toEqual([])
          clean(events)
        })
      )
    })

    it.live("updatedInput replaces the arguments (hooks run in parallel: each sees the model's); an invalid one is INVALID_ARGUMENTS", () => {
      calls.length = 0
      const dir = project({
        ".tiller/settings.json": settings({
          PreToolUse: [{ matcher: "Bash", command: "./rewrite.sh" }, { matcher: "Bash", command: "./see.sh" }]
        }),
        "rewrite.sh":
          `#!/bin/sh\nC=$(jq -r .tool_input.command)\ncase "$C" in\n  bad*) echo '{"hookSpecificOutput":{"hookEventName":"PreToolUse","updatedInput":{"command":42}}}' ;;\n  *) jq -n --arg c "$C --dry-run" '{hookSpecificOutput:{hookEventName:"PreToolUse",permissionDecision:"allow",updatedInput:{command:$c}}}' ;;\nesac\n`,
        "see.sh": "#!/bin/sh\njq -r .tool_input.command >> seen.txt\n"
      })
      return withBridge(
        dir,
        [callBash("make", "c1"), callBash("bad", "c2"), ScriptedModel.text("done")],
        Effect.gen(function*() {
          const events = yield* prompt("p1", "build")
          expect(calls).toEqual([{ tool: "Bash", params: { command: "make --dry-run" } }])
          const [first, second] = results(events)
          expect(textOf(first!.message.content[0].content)).toBe("ran: make --dry-run")
          expect(second!.error).toEqual({ name: "ToolArgumentsError", code: "INVALID_ARGUMENTS" })
          expect(textOf(second!.message.content[0].content)).toContain("arguments replaced by a ToolPre listener")
          expect(fs.readFileSync(path.join(dir, "seen.txt"), "utf8")).toBe("make\nbad\n")
          expect(hookRuns(events).filter((r) => r.hook === "./rewrite.sh").map((r) => r.updatedInput)).toEqual([
            { command: "make --dry-run" },
            { command: 42 }
          ])
          clean(events)
        })
      )
    })

    it.live("ask is a deny in a headless run, and the answer of `ask` when one is given", () => {
      calls.length = 0
      const dir = project({
        ".tiller/settings.json": settings({ PreToolUse: [{ matcher: "Bash", command: "./ask.sh" }] }),
        "ask.sh":
          `#!/bin/sh\necho '{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"ask","permissionDecisionReason":"deploys need a human"}}'\n`
      })
      const script = [callBash("deploy"), ScriptedModel.text("done")]
      return Effect.gen(function*() {
        const headless = yield* withBridge(dir, script, prompt("p1", "ship"))
        expect(textOf(results(headless)[0]!.message.content[0].content)).toBe(
          "Error: tool call denied: deploys need a human (needs confirmation; denied in a headless run)"
        )
        expect(calls).toEqual([])
        const questions: Array<unknown> = []
        const asked = yield* withBridge(dir, script, prompt("p1", "ship"), {
          ask: (q) => Effect.sync(() => (questions.push(q), true))
        })
        expect(questions).toEqual([{
          hook: "./ask.sh",
          callId: "c1",
          turn: 1,
          step: 1,
          tool: "Bash",
          input: { command: "deploy" },
          reason: "deploys need a human"
        }])
        expect(textOf(results(asked)[0]!.message.content[0].content)).toBe("ran: deploy")
        expect(hookRuns(asked).map((r) => r.ask).filter(Boolean)).toEqual(["allowed"])
        clean(asked)
      })
    })
  })

  describe("PostToolUse (tool post-execute)", () => {
    it.live("additionalContext enters after all results of the batch; a block's reason reaches the model with the result", () => {
      const dir = project({
        ".tiller/settings.json": settings({ PostToolUse: [{ matcher: "Bash", command: "./post.sh" }] }),
        "post.sh":
          `#!/bin/sh\nI=$(cat)\nC=$(echo "$I" | jq -r .tool_input.command)\nR=$(echo "$I" | jq -r .tool_response.content)\ncase "$C" in\n  lint) echo '{"decision":"block","reason":"lint found 3 problems"}' ;;\n  *) jq -n --arg c "after $C: $R" '{hookSpecificOutput:{hookEventName:"PostToolUse",additionalContext:$c}}' ;;\nesac\n`
      })
      const script = [
        ScriptedModel.response({
          toolCalls: [{ id: "c1", name: "Bash", arguments: { command: "build" } }, {
            id: "c2",
            name: "Bash",
            arguments: { command: "lint" }
          }]
        }),
        ScriptedModel.text("done")
      ]
      return withBridge(
        dir,
        script,
        Effect.gen(function*() {
          const events = yield* prompt("p1", "check")
          const shape = shapeOf(events).filter((s) => s !== "hook/run")
          const context = userMessages(events)[1]!
          expect(context.source).toEqual({ kind: "hook", hook: "./post.sh", event: "PostToolUse" })
          expect(textOf(context.content)).toBe("after build: ran: build")
          const at = shape.indexOf("TR(c2)")
          expect(shape.slice(at, at + 5)).toEqual(["TR(c2)", "SE(1,1)", "CLM(ns,0,1)", "SS(1,2)", `UM(${context.id})`])
          expect(textOf(results(events)[1]!.message.content[0].content)).toBe(
            "ran: lint\nPostToolUse hook feedback: lint found 3 problems"
          )
          clean(events)
        })
      )
    })
  })

  describe("Stop (turn-stopping)", () => {
    it.live("a block continues the turn with the reason as a steer; stop_hook_active lets the next stop through", () => {
      const dir = project({
        ".tiller/settings.json": settings({ Stop: [{ command: "./stop.sh" }] }),
        "stop.sh":
          `#!/bin/sh\nI=$(cat)\necho "$I" | jq -c '{stop_hook_active}' >> stops.txt\nif [ "$(echo "$I" | jq -r .stop_hook_active)" = "true" ]; then exit 0; fi\necho '{"decision":"block","reason":"run the tests first"}'\n`
      })
      return withBridge(
        dir,
        [ScriptedModel.text("first"), ScriptedModel.text("tests pass")],
        Effect.gen(function*() {
          const events = yield* prompt("p1", "fix it")
          const shape = shapeOf(events).filter((s) => s !== "hook/run")
          const steer = userMessages(events)[1]!
          expect(steer.source).toEqual({ kind: "hook", hook: "./stop.sh", event: "Stop" })
          expect(textOf(steer.content)).toBe("run the tests first")
          const at = shape.indexOf(`UM(${steer.id})`)
          expect(shape.slice(at - 4, at + 1)).toEqual([
            "SE(1,1)",
            `INS(ns,0,[${steer.id}])`,
            "CLM(ns,0,1)",
            "SS(1,2)",
            `UM(${steer.id})`
          ])
          expect(shape[shape.length - 1]).toBe("TE(1,completed)")
          expect(fs.readFileSync(path.join(dir, "stops.txt"), "utf8")).toBe(
            "{\"stop_hook_active\":false}\n{\"stop_hook_active\":true}\n"
          )
          clean(events)
        })
      )
    })
  })

  describe("SessionStart", () => {
    it.live("startup context is injected and waits for the next waking input; a resume runs with source resume", () => {
      const dir = project({
        ".tiller/settings.json": settings({ SessionStart: [{ command: "./start.sh" }] }),
        "start.sh": "#!/bin/sh\njq -r '\"source: \" + .source'\n"
      })
      return withBridge(
        dir,
        [ScriptedModel.text("ok")],
        Effect.gen(function*() {
          const log = yield* SessionLog
          const before = yield* log.events
          expect(shapeOf(before).slice(-1)[0]).toMatch(/^INS\(ns,0,\[/)
          expect(before.some((e) => e.type === "turn/start")).toBe(false)
          const events = yield* prompt("p1", "hi")
          const messages = userMessages(events)
          expect(messages.map((m) => textOf(m.content))).toEqual(["source: startup", "hi"])
          expect(messages[0]!.source).toEqual({ kind: "hook", hook: "./start.sh", event: "SessionStart" })
          clean(events)
        })
      )
    })
  })

  describe("continue: false and SessionEnd", () => {
    it.live("continue false from PreToolUse denies the call and stops the turn: aborted with the hook cause; SessionEnd runs when the bridge closes", () => {
      calls.length = 0
      const dir = project({
        ".tiller/settings.json": settings({
          PreToolUse: [{ command: "./halt.sh" }],
          SessionEnd: [{ command: "./end.sh" }]
        }),
        "halt.sh": `#!/bin/sh\necho '{"continue":false,"stopReason":"budget exhausted"}'\n`,
        "end.sh": "#!/bin/sh\njq -r .reason > ended.txt\n"
      })
      return Effect.gen(function*() {
        const events = yield* withBridge(dir, [
          ScriptedModel.response({ toolCalls: [{ id: "c1", name: "Bash", arguments: { command: "ls" } }] })
        ], prompt("p1", "go"))
        expect(calls).toEqual([])
        expect(textOf(results(events)[0]!.message.content[0].content)).toBe("Error: tool call denied: budget exhausted")
        const end = events.filter((e) => e.type === "turn/end").map((e) => (e as EventOf<"turn/end">).data.reason)
        expect(end).toEqual([{ kind: "aborted", reason: { kind: "hook", reason: "budget exhausted" } }])
        expect(fs.readFileSync(path.join(dir, "ended.txt"), "utf8")).toBe("other\n")
        clean(events)
      })
    })
  })

  describe("errors are reported and never block", () => {
    it.live("exit code 1, malformed JSON and a timeout are recorded as HookCommandError; the action goes on; the timed-out process is killed", () => {
      calls.length = 0
      const dir = project({
        ".tiller/settings.json": settings({
          PreToolUse: [
            { matcher: "Bash", command: "./fail.sh" },
            { matcher: "Bash", command: "./garbled.sh" },
            { matcher: "Bash", command: "./slow.sh", timeout: 0.5 }
          ]
        }),
        "fail.sh": "#!/bin/sh\necho 'something broke' >&2\nexit 1\n",
        "garbled.sh": "#!/bin/sh\necho '{\"decision\": '\n",
        "slow.sh": "#!/bin/sh\nsleep 30 &\necho $! > child.pid\nwait\n"
      })
      return withBridge(
        dir,
        [
          ScriptedModel.response({ toolCalls: [{ id: "c1", name: "Bash", arguments: { command: "ls" } }] }),
          ScriptedModel.text("ok")
        ],
        Effect.gen(function*() {
          const events = yield* prompt("p1", "list")
          expect(calls).toEqual([{ tool: "Bash", params: { command: "ls" } }])
          const errors = hookRuns(events).map((r) => r.error)
          expect(errors.map((e) => e.code)).toEqual(["EXIT_CODE", "MALFORMED_OUTPUT", "TIMEOUT"])
          expect(errors[0].message).toBe("PreToolUse hook \"./fail.sh\": exited with code 1: something broke")
          const pid = Number(fs.readFileSync(path.join(dir, "child.pid"), "utf8"))
          // Gone, or a zombie left for init to reap: either way no longer running.
          const state = () => {
            try {
              return fs.readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]![0]
            } catch {
              return "gone"
            }
          }
          yield* Effect.sleep("100 millis")
          expect(["gone", "Z"]).toContain(state())
          clean(events)
        })
      )
    })

    it.live("output beyond the limit fails the run (OUTPUT_TOO_LARGE), the process killed", () =>
      Effect.gen(function*() {
        const result = yield* Effect.either(runCommand({
          command: "yes hello",
          cwd: os.tmpdir(),
          env: scrubbedEnvironment(process.env, {}),
          stdin: "{}",
          timeout: Duration.seconds(10),
          maxOutputBytes: 64 * 1024
        }))
        expect(Either.isLeft(result) && result.left.code).toBe("OUTPUT_TOO_LARGE")
      }))

    it("the environment of a hook has no provider keys or credentials, and names the project", () => {
      const env = scrubbedEnvironment(
        {
          PATH: "/bin",
          ANTHROPIC_API_KEY: "k",
          OPENAI_API_KEY: "k",
          TILLER_API_KEY: "k",
          GITHUB_TOKEN: "t",
          DB_PASSWORD: "p",
          HOME: "/h"
        },
        { CLAUDE_PROJECT_DIR: "/p" }
      )
      expect(env).toEqual({ PATH: "/bin", HOME: "/h", CLAUDE_PROJECT_DIR: "/p" })
    })

    it("protocol: exit 0 JSON fields, exit 2, other codes, plain stdout as context only where Claude Code reads it", () => {
      const result = (exitCode: number, stdout: string, stderr = "") => ({ exitCode, stdout, stderr, durationMs: 1 })
      expect(readAnswer("PreToolUse", result(0, `{"decision":"approve","reason":"docs"}`))).toEqual(
        Either.right({ permission: "allow", permissionReason: "docs" })
      )
      expect(readAnswer("Stop", result(2, "", "not yet\n"))).toEqual(Either.right({ block: "not yet" }))
      expect(readAnswer("Stop", result(3, "", "oops"))).toEqual(
        Either.left({ code: "EXIT_CODE", detail: "exited with code 3: oops" })
      )
      expect(readAnswer("UserPromptSubmit", result(0, "plain text\n"))).toEqual(
        Either.right({ additionalContext: "plain text" })
      )
      expect(readAnswer("PostToolUse", result(0, "plain text\n"))).toEqual(Either.right({}))
      expect(readAnswer("PostToolUse", result(0, `{"continue":false,"stopReason":"halt","systemMessage":"hi"}`)))
        .toEqual(
          Either.right({ stop: "halt", systemMessage: "hi" })
        )
      expect(
        Either.isLeft(readAnswer("PreToolUse", result(0, `{"hookSpecificOutput":{"permissionDecision":"maybe"}}`)))
      ).toBe(true)
    })
  })

  describe("settings", () => {
    it("the Claude Code shape: matchers as anchored expressions, * and empty match all, other hook types skipped", () => {
      const parsed = parseSettings({
        hooks: {
          PreToolUse: [
            {
              matcher: "Edit|Write",
              hooks: [{ type: "command", command: "a", timeout: 5 }, { type: "prompt", prompt: "x" }]
            },
            { matcher: "*", hooks: [{ type: "command", command: "b" }] },
            { hooks: [{ type: "command", command: "a" }] }
          ],
          Notification: [{ hooks: [{ type: "command", command: "n" }] }]
        }
      }, "s.json")
      expect(commandsFor(parsed, "PreToolUse", "Write").map((h) => h.command)).toEqual(["a", "b"])
      expect(commandsFor(parsed, "PreToolUse", "MultiEdit").map((h) => h.command)).toEqual(["b", "a"])
      expect(commandsFor(parsed, "PreToolUse", "Write")[0]!.timeout).toBe(5)
    })

    it.effect("with claudeSettings: ~/.claude/settings.json, .claude/settings.json, .claude/settings.local.json, then .tiller/settings.json", () =>
      Effect.gen(function*() {
        const one = (command: string) => settings({ Stop: [{ command }] })
        const home = project({ ".claude/settings.json": one("home") })
        const dir = project({
          ".claude/settings.json": one("project"),
          ".claude/settings.local.json": one("local"),
          ".tiller/settings.json": one("tiller")
        })
        const all = yield* HookBridge.load({ cwd: dir, claudeSettings: true, home })
        expect(
          commandsFor(all, "Stop").map((
            h
          ) => [h.command, path.relative(os.tmpdir(), h.origin).split(path.sep).slice(1).join("/")])
        ).toEqual([
          ["home", ".claude/settings.json"],
          ["project", ".claude/settings.json"],
          ["local", ".claude/settings.local.json"],
          ["tiller", ".tiller/settings.json"]
        ])
        const own = yield* HookBridge.load({ cwd: dir, home })
        expect(commandsFor(own, "Stop").map((h) => h.command)).toEqual(["tiller"])
      }))

    it.effect("a malformed settings file is skipped with a warning naming it (the others still load); a missing one has no hooks", () =>
      Effect.gen(function*() {
        const dir = project({
          ".claude/settings.json": "{ hooks: ",
          ".claude/settings.local.json": JSON.stringify({ hooks: { Stop: [{ hooks: "not an array" }] } }),
          ".tiller/settings.json": settings({ Stop: [{ command: "./ok.sh" }] })
        })
        const warnings: Array<string> = []
        const loaded = yield* HookBridge.load({
          cwd: dir,
          claudeSettings: true,
          home: project({}),
          warn: (w) => Effect.sync(() => warnings.push(w))
        })
        expect(commandsFor(loaded, "Stop").map((h) => h.command)).toEqual(["./ok.sh"])
        expect(warnings).toEqual([
          expect.stringMatching(/settings\.json is not valid JSON \(.*\); its hooks are skipped$/),
          `${
            path.join(dir, ".claude", "settings.local.json")
          } is malformed (hooks.Stop[0].hooks must be an array); its hooks are skipped`
        ])
        expect(warnings[0]).toContain(path.join(dir, ".claude", "settings.json"))
        const none = yield* HookBridge.load({ cwd: project({}) })
        expect(none.PreToolUse).toEqual([])
        const badMatcher = yield* Effect.flip(
          HookBridge.load({ noFiles: true, settings: [{ hooks: { PreToolUse: [{ matcher: "(", hooks: [] }] } }] })
        )
        expect(badMatcher.reason).toContain("is not a regular expression")
        expect(new HookCommandError({ event: "Stop", command: "x", code: "TIMEOUT", detail: "d" }).message).toBe(
          "Stop hook \"x\": d"
        )
      }))
  })

  describe("PreCompact / PostCompact (the compaction hooks)", () => {
    it.live("a PreCompact block vetoes a manual compaction with its reason; otherwise PostCompact's context enters the next step", () => {
      const dir = project({
        ".tiller/settings.json": settings({
          PreCompact: [{ matcher: "manual", command: "./pre.sh" }],
          PostCompact: [{ command: "./post.sh" }]
        }),
        "pre.sh":
          "#!/bin/sh\nI=$(cat)\necho \"$I\" | jq -c '{trigger, custom_instructions}' >> pre.jsonl\nif [ \"$(echo \"$I\" | jq -r .custom_instructions)\" = veto ]; then echo 'keep everything for now' >&2; exit 2; fi\n",
        "post.sh": "#!/bin/sh\njq -r '\"Compacted (\" + .trigger + \"): re-read AGENTS.md\"'\n"
      })
      const script = [
        ScriptedModel.response({
          toolCalls: [{ id: "c1", name: "Bash", arguments: { command: `cat ${"x".repeat(4000)}` } }]
        }),
        ScriptedModel.text("ok"),
        ScriptedModel.text("after")
      ]
      const layer = HookBridge.layer({ cwd: dir }).pipe(
        Layer.provideMerge(
          Agent.layer({
            sessionId: SessionId.make("s"),
            model: { provider: "p", model: "m" },
            compaction: { contextWindow: 100_000, summary: false, protectRecentTokens: 0, minimumPruneTokens: 1 }
          }).pipe(
            Layer.provideMerge(
              Layer.mergeAll(SessionStore.layerMemory, ScriptedModel.layer(script), Tools.layer({ tools }))
            )
          )
        )
      )
      return Effect.scoped(Effect.provide(
        Effect.gen(function*() {
          yield* prompt("p1", "read the log")
          const compaction = yield* Compaction
          const vetoed = yield* compaction.compactWith({ focus: "veto" })
          expect(vetoed.vetoed).toBe("keep everything for now")
          const done = yield* compaction.compactWith({ focus: "go" })
          expect(done.pruned).toBe(1)
          expect(fs.readFileSync(path.join(dir, "pre.jsonl"), "utf8").trim().split("\n").map((l) => JSON.parse(l)))
            .toEqual([
              { trigger: "manual", custom_instructions: "veto" },
              { trigger: "manual", custom_instructions: "go" }
            ])
          const events = yield* prompt("p2", "next")
          const context = userMessages(events).find((m) => m.source.kind === "compaction-context")!
          expect(textOf(context.content)).toBe("Compacted (manual): re-read AGENTS.md")
          expect(hookRuns(events).map((r) => [r.event, r.block ?? r.additionalContext ?? ""])).toEqual([
            ["PreCompact", "keep everything for now"],
            ["PreCompact", ""],
            ["PostCompact", "Compacted (manual): re-read AGENTS.md"]
          ])
          clean(events)
        }),
        layer
      ))
    })
  })

  describe("the transcript", () => {
    it.live("transcript_path names a Claude-Code-shaped JSONL transcript of the session, current when the hook runs", () => {
      const dir = project({
        ".tiller/settings.json": settings({ Stop: [{ command: "./read.sh" }] }),
        "read.sh": "#!/bin/sh\nT=$(jq -r .transcript_path)\ncp \"$T\" transcript-copy.jsonl\n"
      })
      return withBridge(
        dir,
        [
          ScriptedModel.response({ toolCalls: [{ id: "c1", name: "Bash", arguments: { command: "ls" } }] }),
          ScriptedModel.text("all done")
        ],
        Effect.gen(function*() {
          yield* prompt("p1", "list files")
          const lines = fs.readFileSync(path.join(dir, "transcript-copy.jsonl"), "utf8").trim().split("\n").map((l) =>
            JSON.parse(l)
          )
          expect(lines.map((l) => [l.type, l.message.role])).toEqual([["user", "user"], ["assistant", "assistant"], [
            "user",
            "user"
          ], ["assistant", "assistant"]])
          expect(lines[0].message.content).toBe("list files")
          expect(lines[0].sessionId).toBe("s")
          expect(lines[1].message.content).toEqual([{
            type: "tool_use",
            id: "c1",
            name: "Bash",
            input: { command: "ls" }
          }])
          expect(lines[2].message.content).toEqual([{
            type: "tool_result",
            tool_use_id: "c1",
            is_error: false,
            content: "ran: ls"
          }])
          expect(lines[3].message.content).toEqual([{ type: "text", text: "all done" }])
          expect(lines[1].parentUuid).toBe(lines[0].uuid)
          expect(fs.existsSync(path.join(dir, ".tiller", "transcripts", "s.jsonl"))).toBe(true)
        })
      )
    })
  })

  describe("Claude Code parity", () => {
    it.live("hooks of one event run in parallel and merge: deny beats ask beats allow; every context enters", () => {
      calls.length = 0
      // Each script waits until the other has started: run one after the other, both would time out.
      const meet = (me: string, other: string, answer: string) =>
        `#!/bin/sh\ncat > /dev/null\ntouch ${me}.started\nfor i in $(seq 1 100); do [ -f ${other}.started ] && break; sleep 0.05; done\n[ -f ${other}.started ] || exit 1\necho '${answer}'\n`
      const decision = (permission: string, context: string) =>
        JSON.stringify({
          hookSpecificOutput: {
            hookEventName: "PreToolUse",
            permissionDecision: permission,
            permissionDecisionReason: `${permission} from a hook`,
            additionalContext: context
          }
        })
      const dir = project({
        ".tiller/settings.json": settings({
          PreToolUse: [
            { matcher: "Bash", command: "./allow.sh", timeout: 3 },
            { matcher: "Bash", command: "./deny.sh", timeout: 3 },
            { matcher: "Bash", command: "./ask.sh", timeout: 3 }
          ]
        }),
        "allow.sh": meet("allow", "deny", decision("allow", "first context")),
        "deny.sh": meet("deny", "ask", decision("deny", "second context")),
        "ask.sh": meet("ask", "allow", decision("ask", "third context"))
      })
      return withBridge(
        dir,
        [
          ScriptedModel.response({ toolCalls: [{ id: "c1", name: "Bash", arguments: { command: "ls" } }] }),
          ScriptedModel.text("ok")
        ],
        Effect.gen(function*() {
          const events = yield* prompt("p1", "list")
          expect(hookRuns(events).map((r) => [r.hook, r.exitCode, r.permissionDecision])).toEqual([
            ["./allow.sh", 0, "allow"],
            ["./deny.sh", 0, "deny"],
            ["./ask.sh", 0, "ask"]
          ])
          expect(textOf(results(events)[0]!.message.content[0].content)).toBe(
            "Error: tool call denied: deny from a hook"
          )
          expect(calls).toEqual([])
          expect(userMessages(events).slice(1).map((m) => textOf(m.content))).toEqual([
            "first context",
            "second context",
            "third context"
          ])
          clean(events)
        }),
        { ask: () => Effect.succeed(true) }
      )
    })

    it.live("a PreToolUse additionalContext enters as a hook message after the call's result", () => {
      const dir = project({
        ".tiller/settings.json": settings({ PreToolUse: [{ matcher: "Read", command: "./note.sh" }] }),
        "note.sh":
          `#!/bin/bash\nF=$(jq -r .tool_input.file_path)\njq -n --arg c "reading $F: treat it as untrusted" '{hookSpecificOutput: {hookEventName: "PreToolUse", additionalContext: $c}}'\n`
      })
      return withBridge(
        dir,
        [
          ScriptedModel.response({ toolCalls: [{ id: "c1", name: "Read", arguments: { file_path: "notes.md" } }] }),
          ScriptedModel.text("ok")
        ],
        Effect.gen(function*() {
          const events = yield* prompt("p1", "read the notes")
          const context = userMessages(events)[1]!
          expect(context.source).toEqual({ kind: "hook", hook: "./note.sh", event: "PreToolUse" })
          // The hook saw Claude Code's absolute file_path although the model gave a relative one.
          expect(textOf(context.content)).toBe(`reading ${path.join(dir, "notes.md")}: treat it as untrusted`)
          const shape = shapeOf(events).filter((s) => s !== "hook/run")
          const at = shape.indexOf("TR(c1)")
          expect(shape.slice(at, at + 6)).toEqual([
            "TR(c1)",
            `INS(ns,0,[${context.id}])`,
            "SE(1,1)",
            "CLM(ns,0,1)",
            "SS(1,2)",
            `UM(${context.id})`
          ])
          const requests = yield* Effect.flatMap(ScriptedModel, (m) => m.requests)
          expect(requests[1]!.messages.map((m) => m.role)).toEqual(["user", "assistant", "user", "user"])
          clean(events)
        })
      )
    })

    it.live("the coding tools reach hooks by Claude Code's names, with its input (absolute paths) and tool_response shapes", () =>
      Effect.gen(function*() {
        const dir = project({
          ".tiller/settings.json": settings({ PostToolUse: [{ command: "./post.sh" }] }),
          "post.sh": "#!/bin/bash\njq -c '{tool_name, tool_input, tool_response}' >> post.jsonl\n",
          "src/a.ts": "export const a = 1\nexport const b = 2\n"
        })
        const real = fs.realpathSync(dir)
        const tools = yield* CodingTools.make({ cwd: dir })
        const call = (id: string, name: string, args: Record<string, unknown>) =>
          ScriptedModel.response({ toolCalls: [{ id, name, arguments: args }] })
        const script = [
          call("c1", "Read", { file_path: "src/a.ts" }),
          call("c2", "Edit", { file_path: "src/a.ts", old_string: "a = 1", new_string: "a = 10" }),
          call("c3", "Write", { file_path: "src/new.ts", content: "x\n" }),
          call("c4", "Write", { file_path: "src/new.ts", content: "y\n" }),
          call("c5", "Bash", { command: "echo out; echo err >&2" }),
          call("c6", "Glob", { pattern: "src/*.ts" }),
          call("c7", "Grep", { pattern: "export", path: "src", output_mode: "content" }),
          call("c8", "Grep", { pattern: "export", path: "src" }),
          ScriptedModel.text("done")
        ]
        const events = yield* Effect.scoped(Effect.provide(
          prompt("p1", "work"),
          HookBridge.layer({ cwd: dir }).pipe(Layer.provideMerge(scenario(script, { tools })))
        ))
        clean(events)
        const seen = fs.readFileSync(path.join(dir, "post.jsonl"), "utf8").trim().split("\n").map((l) => JSON.parse(l))
        expect(seen.map((s) => s.tool_name)).toEqual(["Read", "Edit", "Write", "Write", "Bash", "Glob", "Grep", "Grep"])
        const file = path.join(dir, "src", "a.ts")
        expect(seen[0]).toEqual({
          tool_name: "Read",
          tool_input: { file_path: file },
          tool_response: {
            type: "text",
            file: {
              filePath: file,
              content: "export const a = 1\nexport const b = 2",
              numLines: 2,
              startLine: 1,
              totalLines: 2
            }
          }
        })
        expect(seen[1].tool_response).toEqual({
          filePath: file,
          oldString: "a = 1",
          newString: "a = 10",
          replaceAll: false,
          userModified: false
        })
        expect(seen[2].tool_response).toEqual({
          type: "create",
          filePath: path.join(dir, "src", "new.ts"),
          content: "x\n"
        })
        expect(seen[3].tool_response.type).toBe("update")
        expect(seen[4]).toEqual({
          tool_name: "Bash",
          tool_input: { command: "echo out; echo err >&2" },
          tool_response: { stdout: "out\nerr", stderr: "", interrupted: false, isImage: false }
        })
        expect(seen[5].tool_response).toMatchObject({ numFiles: 2, truncated: false })
        expect([...seen[5].tool_response.filenames].sort()).toEqual([
          path.join(real, "src", "a.ts"),
          path.join(real, "src", "new.ts")
        ])
        expect(typeof seen[5].tool_response.durationMs).toBe("number")
        expect(seen[6].tool_input).toEqual({ pattern: "export", path: path.join(dir, "src"), output_mode: "content" })
        expect(seen[6].tool_response).toMatchObject({ mode: "content", numFiles: 1, numLines: 2 })
        expect(seen[6].tool_response.content).toBe(
          `${path.join(real, "src", "a.ts")}:1:export const a = 10\n${
            path.join(real, "src", "a.ts")
          }:2:export const b = 2`
        )
        expect(seen[7].tool_response).toEqual({
          mode: "files_with_matches",
          filenames: [path.join(real, "src", "a.ts")],
          numFiles: 1
        })
      }))

    it.live("`if` runs a command only for calls its permission rule matches; `once` runs it once per session; other fields are reported once", () => {
      const dir = project({
        ".tiller/settings.json": JSON.stringify({
          hooks: {
            PreToolUse: [{
              matcher: "Bash",
              hooks: [
                { type: "command", command: "jq -r .tool_input.command >> git.txt", if: "Bash(git *)" },
                { type: "command", command: "jq -r .tool_input.command >> first.txt", once: true },
                { type: "command", command: "true", async: true, shell: "zsh" }
              ]
            }],
            Stop: [{ hooks: [{ type: "command", command: "touch stop-ran", if: "Bash(git *)" }], extra: 1 }]
          }
        })
      })
      const warnings: Array<string> = []
      const bashCall = (id: string, command: string) =>
        ScriptedModel.response({ toolCalls: [{ id, name: "Bash", arguments: { command } }] })
      return withBridge(
        dir,
        [bashCall("c1", "ls"), bashCall("c2", "git status"), bashCall("c3", "git log"), ScriptedModel.text("done")],
        Effect.gen(function*() {
          const events = yield* prompt("p1", "go")
          expect(fs.readFileSync(path.join(dir, "git.txt"), "utf8")).toBe("git status\ngit log\n")
          expect(fs.readFileSync(path.join(dir, "first.txt"), "utf8")).toBe("ls\n")
          // An `if` on an event that is not a tool event never runs.
          expect(fs.existsSync(path.join(dir, "stop-ran"))).toBe(false)
          const file = path.join(dir, ".tiller", "settings.json")
          expect(warnings).toEqual([
            `${file}: hooks.PreToolUse[0].hooks[2].async is not a field tiller reads; it is ignored`,
            `${file}: hooks.PreToolUse[0].hooks[2].shell is not a field tiller reads; it is ignored`,
            `${file}: hooks.Stop[0].extra is not a field tiller reads; it is ignored`
          ])
          clean(events)
        }),
        { warn: (w) => Effect.sync(() => warnings.push(w)) }
      )
    })
  })

  describe("published-style Claude Code hook scripts, run unchanged from .claude/settings.json", () => {
    const fixtures = path.join(__dirname, "fixtures", "claude-hooks")
    const claudeProject = () => {
      const files: Record<string, string> = {
        ".claude/settings.json": fs.readFileSync(path.join(fixtures, "settings.json"), "utf8")
      }
      for (const name of fs.readdirSync(fixtures)) {
        if (name !== "settings.json") {
          files[`.claude/hooks/${name}`] = fs.readFileSync(path.join(fixtures, name), "utf8")
        }
      }
      return project(files)
    }

    it.live("each decision of the fixture's scripts is found in the log", () => {
      calls.length = 0
      const dir = claudeProject()
      const script = [
        ScriptedModel.response({
          toolCalls: [
            { id: "c1", name: "Bash", arguments: { command: "grep -r TODO src" } },
            { id: "c2", name: "Read", arguments: { file_path: ".env" } },
            { id: "c3", name: "Read", arguments: { file_path: "README.md" } },
            { id: "c4", name: "Bash", arguments: { command: "rg TODO src", description: "search" } }
          ]
        }),
        ScriptedModel.text("first answer"),
        ScriptedModel.text("tests ran")
      ]
      return Effect.zipLeft(
        withBridge(
          dir,
          script,
          Effect.gen(function*() {
            // The SessionStart script wrote its variables to CLAUDE_ENV_FILE, where Bash finds them.
            expect(fs.readFileSync(sessionEnvFile(defaultEnvDir(dir), "s"), "utf8")).toBe(
              `export PROJECT_MODE=development\nexport PROJECT_ROOT="${dir}"\n`
            )
            yield* prompt("p1", "find the TODOs")
            const events = yield* prompt("p2", "my password: hunter2")
            const ends = events.filter((e) => e.type === "turn/end").map((e) => (e as EventOf<"turn/end">).data.reason)
            expect(ends[0]).toEqual({ kind: "completed" })
            expect(ends[1]).toEqual({
              kind: "blocked",
              message:
                "Security policy violation: Prompt contains potential secrets. Please rephrase your request without sensitive information."
            })
            const messages = userMessages(events)
            // SessionStart context (pending since startup), the prompt, UserPromptSubmit's plain stdout.
            expect(messages.slice(0, 3).map((m) => [m.source.kind, (m.source as any).event ?? ""])).toEqual([
              ["hook", "SessionStart"],
              ["user", ""],
              ["hook", "UserPromptSubmit"]
            ])
            expect(textOf(messages[0]!.content)).toBe(
              "Project notes: the main branch is protected; open a pull request."
            )
            expect(textOf(messages[2]!.content)).toMatch(/^Current time: \d{4}-/)
            const texts = results(events).map((r) => textOf(r.message.content[0].content))
            expect(texts).toEqual([
              "Error: tool call denied: • Use 'rg' (ripgrep) instead of 'grep' for better performance and features",
              `Error: tool call denied: Access to ${path.join(dir, ".env")} is not allowed: it may hold secrets`,
              "contents of README.md",
              "ran: rg TODO src"
            ])
            expect(calls.map((c) => c.params)).toEqual([{ file_path: "README.md" }, {
              command: "rg TODO src",
              description: "search"
            }])
            expect(hookRuns(events).filter((r) => r.permissionDecision === "allow")).toEqual([
              expect.objectContaining({ callId: "c3", permissionDecisionReason: "Documentation file auto-approved" })
            ])
            expect(fs.readFileSync(path.join(dir, ".claude", "bash-command-log.txt"), "utf8")).toBe(
              "rg TODO src - search\n"
            )
            // PostToolUse context after the batch, then the Stop hook's steer continues the turn once.
            const later = messages.slice(3)
            expect(later.map((m) => [(m.source as any).event, textOf(m.content)])).toEqual([
              ["PostToolUse", "Check the command output for errors before going on."],
              ["Stop", "Run the tests before you stop."]
            ])
            clean(events)
          }),
          { claudeSettings: true, home: dir }
        ), // The Node SessionEnd script ran when the bridge closed.
        Effect.sync(() =>
          expect(fs.readFileSync(path.join(dir, ".claude", "sessions.log"), "utf8")).toBe(
            "{\"session\":\"s\",\"reason\":\"other\",\"event\":\"SessionEnd\"}\n"
          )
        )
      )
    })

    it.live("the PreCompact backup script copies the transcript before a compaction and says so", () => {
      const dir = claudeProject()
      const notices: Array<unknown> = []
      const script = [
        ScriptedModel.response({
          toolCalls: [{ id: "c1", name: "Bash", arguments: { command: `cat ${"x".repeat(4000)}` } }]
        }),
        ScriptedModel.text("ok")
      ]
      const layer = HookBridge.layer({
        cwd: dir,
        claudeSettings: true,
        home: dir,
        notify: (n) => Effect.sync(() => notices.push(n))
      }).pipe(
        Layer.provideMerge(
          Agent.layer({
            sessionId: SessionId.make("s"),
            model: { provider: "p", model: "m" },
            compaction: { contextWindow: 100_000, summary: false, protectRecentTokens: 0, minimumPruneTokens: 1 }
          }).pipe(
            Layer.provideMerge(
              Layer.mergeAll(SessionStore.layerMemory, ScriptedModel.layer(script), Tools.layer({ tools }))
            )
          )
        )
      )
      return Effect.scoped(Effect.provide(
        Effect.gen(function*() {
          yield* prompt("p1", "list")
          const done = yield* (yield* Compaction).compactWith({})
          expect(done.pruned).toBe(1)
          const backup = fs.readFileSync(path.join(dir, ".claude", "backups", "before-manual-compact.jsonl"), "utf8")
          const lines = backup.trim().split("\n").map((l) => JSON.parse(l))
          expect(lines.filter((l) => l.message.content === "list")).toHaveLength(1)
          expect(lines.flatMap((l) => l.type === "assistant" ? l.message.content.map((b: any) => b.type) : []))
            .toContain(
              "tool_use"
            )
          expect(notices).toContainEqual({
            event: "PreCompact",
            hook: "\"$CLAUDE_PROJECT_DIR\"/.claude/hooks/pre_compact_backup.sh",
            kind: "systemMessage",
            text: "Transcript backed up before the manual compaction"
          })
        }),
        layer
      ))
    })
  })
})
