import { describe, expect, it } from "@effect/vitest"
import { Duration, Effect, Fiber } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import { MAX_OUTPUT_CHARS, scrubEnvironment } from "../../../src/internal/tools/BashTool.js"
import { makeOutputCap } from "../../../src/internal/tools/Process.js"
import { tempDir } from "../../cli/harness.js"
import { codingTools, text } from "./toolHarness.js"

/** Whether a process with this pid is alive (a zombie waiting to be reaped is not). */
const alive = (pid: number): boolean => {
  try {
    return !/^\d+ \(.*\) Z/.test(fs.readFileSync(`/proc/${pid}/stat`, "utf8"))
  } catch {
    return false
  }
}

describe("Bash", () => {
  it("the output cap keeps the head and the newest tail and counts the cut", () => {
    const cap = makeOutputCap(9)
    for (const chunk of ["abcd", "efgh", "ijkl", "mnop"]) cap.push(chunk)
    expect(cap.result()).toEqual({ text: "abcdef\n[... 7 characters of output cut here ...]\nnop", cut: 7 })
    const small = makeOutputCap(9)
    small.push("abc")
    expect(small.result()).toEqual({ text: "abc", cut: 0 })
  })

  it("provider keys and tiller's settings are removed from the environment", () => {
    expect(scrubEnvironment({
      PATH: "/bin",
      HOME: "/root",
      OPENAI_API_KEY: "sk",
      ANTHROPIC_API_KEY: "sk",
      ANTHROPIC_BASE_URL: "u",
      TILLER_API_KEY: "k",
      TILLER_MODEL: "m",
      GEMINI_API_KEY: "g",
      SOME_SERVICE_API_KEY: "x",
      GITHUB_TOKEN: "t",
      LANG: "C"
    })).toEqual({ PATH: "/bin", HOME: "/root", LANG: "C" })
  })

  it.scopedLive("runs in the working directory; reports the exit code; keys are absent from its environment", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const { call } = yield* codingTools(dir, {
        env: { ...process.env, OPENAI_API_KEY: "sk-secret", TILLER_API_KEY: "t-secret" }
      })
      expect(yield* call("Bash", { command: "pwd; echo err >&2" })).toEqual({
        content: `${fs.realpathSync(dir)}\nerr`,
        isError: false
      })
      expect(yield* call("Bash", { command: "echo partial; exit 3" })).toEqual({
        content: "partial\n[exit code 3]",
        isError: true
      })
      const env = text(yield* call("Bash", { command: "env" }))
      expect(env).toContain("PATH=")
      expect(env).not.toContain("sk-secret")
      expect(env).not.toContain("t-secret")
    }))

  it.live("a command that hangs is killed, with its children, at its timeout", () =>
    Effect.scoped(Effect.gen(function*() {
      const dir = yield* tempDir
      const { call } = yield* codingTools(dir)
      const started = Date.now()
      const output = yield* call("Bash", {
        command: "sleep 30 & echo $! > child.pid; echo started; sleep 30",
        timeout: 500
      })
      expect(Date.now() - started).toBeLessThan(5000)
      expect(output).toEqual({
        content: "started\n[killed after the timeout of 500 ms, with every process it started]",
        isError: true
      })
      const child = Number(fs.readFileSync(path.join(dir, "child.pid"), "utf8"))
      yield* Effect.sleep(Duration.millis(100))
      expect(alive(child)).toBe(false)
    })))

  it.live("a cancel kills the whole process group", () =>
    Effect.scoped(Effect.gen(function*() {
      const dir = yield* tempDir
      const { call } = yield* codingTools(dir)
      const fiber = yield* Effect.fork(
        call("Bash", { command: "sleep 30 & echo $! > child.pid; echo $$ > shell.pid; wait" })
      )
      while (
        !fs.existsSync(path.join(dir, "shell.pid")) || fs.readFileSync(path.join(dir, "shell.pid"), "utf8") === ""
      ) {
        yield* Effect.sleep(Duration.millis(20))
      }
      const shell = Number(fs.readFileSync(path.join(dir, "shell.pid"), "utf8"))
      const child = Number(fs.readFileSync(path.join(dir, "child.pid"), "utf8"))
      expect(alive(shell) && alive(child)).toBe(true)
      yield* Fiber.interrupt(fiber)
      yield* Effect.sleep(Duration.millis(100))
      expect(alive(shell)).toBe(false)
      expect(alive(child)).toBe(false)
    })))

  it.live(
    "a command printing 100 MB is kept within the cap, without holding it in memory",
    () =>
      Effect.scoped(Effect.gen(function*() {
        const dir = yield* tempDir
        const { call } = yield* codingTools(dir)
        const before = process.memoryUsage().rss
        const output = yield* call("Bash", {
          command: "head -c 100000000 /dev/zero | tr '\\0' 'x'; echo; echo the end",
          timeout: 60_000
        })
        const grown = process.memoryUsage().rss - before
        const shown = text(output)
        expect(shown.length).toBeLessThan(MAX_OUTPUT_CHARS + 200)
        expect(shown).toMatch(/^x{20000}\n\[\.\.\. \d+ characters of output cut here \.\.\.\]\nx+\nthe end$/)
        expect(Number(/\[\.\.\. (\d+) characters/.exec(shown)![1]) + MAX_OUTPUT_CHARS).toBe(
          100_000_000 + "\nthe end\n".length
        )
        expect(grown).toBeLessThan(60 * 1024 * 1024)
      })),
    60_000
  )
})
