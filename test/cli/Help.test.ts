import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { closest, useColor } from "../../src/cli/Help.js"
import { tempDir, tiller } from "./harness.js"

const TIMEOUT = 120_000

// NO_COLOR empty counts as unset (no-color.org): only the pipe keeps the colour off then.
const piped = { env: { NO_COLOR: "" } }

describe("tiller --help", () => {
  it.scopedLive(
    "is plain text when piped (with and without NO_COLOR): real descriptions, value names, no filler, no --wizard",
    () =>
      Effect.gen(function*() {
        const dir = yield* tempDir
        for (const args of [["--help"], ["chat", "--help"], ["run", "-h"], ["--db", "x.db", "log", "--help"]]) {
          for (const options of [piped, { env: { NO_COLOR: "1" } }]) {
            const help = yield* tiller(dir, args, options)
            expect(help.code, args.join(" ")).toBe(0)
            expect(help.stdout).not.toContain("\u001b")
            expect(help.stdout).not.toContain("A user-defined piece of text.")
            expect(help.stdout).not.toContain("This setting is optional.")
            expect(help.stdout).not.toContain("--wizard")
            expect(help.stdout).not.toContain("--completions")
          }
        }
        const top = yield* tiller(dir, ["--help"], piped)
        expect(top.stdout).toContain("$ tiller [--db FILE] [--model NAME]")
        expect(top.stdout).toContain(
          "[--add-dir DIR]... [--permission-mode MODE] [--allow RULE]... [--dangerously-skip-permissions] [--prices FILE] [--mcp FILE]... COMMAND"
        )
        expect(top.stdout).toMatch(
          /\n--permission-mode MODE\n\n {2}One of the following: default, acceptEdits, plan, bypassPermissions\n\n {2}default: Read, Glob and Grep run/
        )
        expect(top.stdout).toMatch(
          /\n {2}- run \[--inject TEXT\]\.\.\. \[--json\] \[--session ID\] \[--max-steps N\] \[--server URL\] \[--token-file FILE\] <PROMPT> +One headless turn/
        )
        const chat = yield* tiller(dir, ["chat", "--help"], piped)
        expect(chat.stdout).toContain(
          "$ tiller chat [--session ID] [--max-steps N] [--server URL] [--token-file FILE]\n"
        )
        expect(chat.stdout).toMatch(
          /\n--server URL\n\n {2}Talk to a tiller serve server at URL \(http:\/\/HOST:PORT\) instead of opening the session in this process\n/
        )
        // The global options are listed under the subcommand too.
        expect(chat.stdout).toMatch(
          /GLOBAL OPTIONS[^\n]*\n\n--db FILE\n\n {2}The SQLite file, or postgres:\/\/ URL of the PostgreSQL database, that holds the sessions/
        )
        expect(chat.stdout).toContain("--model NAME")
        const run = yield* tiller(dir, ["run", "--help"], piped)
        expect(run.stdout).toContain(
          "$ tiller run [--inject TEXT]... [--json] [--session ID] [--max-steps N] [--server URL] [--token-file FILE] <PROMPT>\n"
        )
        const log = yield* tiller(dir, ["log", "--help"], piped)
        expect(log.stdout).toContain("$ tiller log [--json] [--server URL] [--token-file FILE] <ID>\n")
        // Help writes nothing: no database appears.
        expect(yield* tiller(dir, ["sessions"])).toMatchObject({ stdout: `no sessions in ./.tiller/sessions.db\n` })
      }),
    TIMEOUT
  )

  it.scopedLive(
    "usage errors exit 2 and say where to look; a mistyped command gets a suggestion",
    () =>
      Effect.gen(function*() {
        const dir = yield* tempDir
        const typo = yield* tiller(dir, ["chatt"], piped)
        expect(typo.code).toBe(2)
        expect(typo.stderr).toMatch(/Invalid subcommand/)
        expect(typo.stderr).toContain(
          `tiller: unknown command "chatt"; did you mean "chat"? (tiller --help lists the commands and options)\n`
        )
        const missing = yield* tiller(dir, ["run"], piped)
        expect(missing.code).toBe(2)
        expect(missing.stderr).toMatch(/Missing argument <PROMPT>/)
        expect(missing.stderr).toContain("(tiller run --help shows its usage)")
        expect(missing.stderr).not.toContain("\u001b")
        const option = yield* tiller(dir, ["sessions", "--bogus"], piped)
        expect(option.code).toBe(2)
        expect(option.stderr).toContain("tiller sessions --help")
        expect((yield* tiller(dir, ["run", "hi", "--inject"], piped)).code).toBe(2)
        const wizard = yield* tiller(dir, ["--wizard"], piped)
        expect(wizard).toMatchObject({
          code: 2,
          stderr: "tiller: unknown option --wizard (tiller --help lists the commands and options)\n"
        })
        const none = yield* tiller(dir, [], piped)
        expect(none.code).toBe(2)
        expect(none.stdout).toContain("COMMANDS")
      }),
    TIMEOUT
  )

  it("suggests the closest command only when it is close; colour only on a terminal without NO_COLOR", () => {
    expect(closest("chatt", ["chat", "check", "run"])).toBe("chat")
    expect(closest("sesions", ["sessions", "log"])).toBe("sessions")
    expect(closest("frobnicate", ["chat", "run"])).toBeUndefined()
    expect(useColor({}, true)).toBe(true)
    expect(useColor({ NO_COLOR: "1" }, true)).toBe(false)
    expect(useColor({ NO_COLOR: "" }, true)).toBe(true)
    expect(useColor({}, false)).toBe(false)
  })
})
