/**
 * The README's main job through the CLI, and its errors.
 */
import { afterAll, describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { tiller } from "./harness.js"

const ROOT = fileURLToPath(new URL("../../", import.meta.url))
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "tiller-readme-"))
// Child scripts live inside the project, where their imports ("effect", "tsx") resolve.
fs.mkdirSync(path.join(ROOT, "node_modules", ".cache"), { recursive: true })
const scripts = fs.mkdtempSync(path.join(ROOT, "node_modules", ".cache", "tiller-readme-"))
afterAll(() => {
  fs.rmSync(dir, { recursive: true, force: true })
  fs.rmSync(scripts, { recursive: true, force: true })
})
const modeOf = (file: string) => fs.statSync(file).mode & 0o777

describe("README main job and CLI errors", () => {
  const TIMEOUT = 120_000
  const tempCwd = () => fs.mkdtempSync(path.join(dir, "cwd-"))
  const noStack = (text: string) => expect(text).not.toMatch(/^\s+at .+:\d+:\d+\)?$/m)

  it.live(
    "README Quickstart: `npm start` (tiller chat) with piped input prints a readable transcript, creates ./.tiller/sessions.db (0600) and exits 0",
    () =>
      Effect.gen(function*() {
        const cwd = tempCwd()
        const out = yield* tiller(cwd, ["chat"], { input: "/inject note\nhello\n/quit\n" })
        expect(out.code).toBe(0)
        noStack(out.stdout + out.stderr)
        expect(out.stdout).toContain("» [cli:inject] note")
        expect(out.stdout).toContain("» [user] hello")
        expect(out.stdout).toContain("── turn 1 completed")
        expect(out.stdout).toMatch(/\[idle · 1 turn · pending: 0 queued, 0 next-step( · ctx \d+%)?\]/)
        expect(modeOf(path.join(cwd, ".tiller", "sessions.db"))).toBe(0o600)
      }),
    TIMEOUT
  )

  for (
    const [name, args, pattern] of [
      ["unknown subcommand", ["bogus"], /Invalid subcommand/],
      ["missing PROMPT", ["run"], /Missing argument <PROMPT>/],
      ["unknown session for log", ["log", "nosuch"], /no session nosuch/],
      ["unknown model", ["--model", "nosuchmodel", "run", "hi"], /unknown model "nosuchmodel"/],
      ["a file that is not a database", ["sessions", "--db", "junk.db"], /not a database/],
      ["an unknown option", ["sessions", "--yaml"], /unknown argument/]
    ] as const
  ) {
    it.live(
      `bad input (${name}): a clear one-line error on stderr, non-zero exit, no stack trace`,
      () =>
        Effect.gen(function*() {
          const cwd = tempCwd()
          fs.writeFileSync(path.join(cwd, "junk.db"), "this is not a database ".repeat(20))
          const out = yield* tiller(cwd, args)
          expect(out.code).not.toBe(0)
          expect(out.stderr).toMatch(pattern)
          noStack(out.stdout + out.stderr)
        }),
      TIMEOUT
    )
  }

  it.live("README sessions --json: a JSON array, empty for a database without sessions", () =>
    Effect.gen(function*() {
      const out = yield* tiller(tempCwd(), ["sessions", "--json"])
      expect(out).toEqual({ code: 0, stdout: "[]\n", stderr: "" })
    }), TIMEOUT)

  // README "tiller run PROMPT [--inject TEXT]...". Regression test: a trailing `--inject` with no TEXT
  // was once silently dropped (the turn ran with the prompt alone and the command exited 0).
  it.live(
    "README run: `tiller run hi --inject` (missing TEXT) is refused with a non-zero exit",
    () =>
      Effect.gen(function*() {
        const cwd = tempCwd()
        const out = yield* tiller(cwd, ["run", "hi", "--inject"])
        expect(out.code).not.toBe(0)
        noStack(out.stdout + out.stderr)
      }),
    TIMEOUT
  )

  it.live(
    "README run: an empty or blank --inject TEXT is a usage error (exit 2, one line saying so); nothing is written",
    () =>
      Effect.gen(function*() {
        const cwd = tempCwd()
        for (const [text, said] of [["", "an empty"], ["  ", "a blank"]] as const) {
          const out = yield* tiller(cwd, ["run", "hi", "--inject", text])
          expect(out).toEqual({
            code: 2,
            stdout: "",
            stderr:
              `tiller: option --inject needs a value, not ${said} one (tiller --help lists the commands and options)\n`
          })
        }
        expect(fs.readdirSync(cwd)).toEqual([])
      }),
    TIMEOUT
  )
})
