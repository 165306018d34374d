/**
 * The `tiller` executable: runs the command line and exits with the command's code (0 on success,
 * 1 on a refusal or an unsuccessful outcome, 130 when interrupted by SIGINT, 143 when terminated by
 * SIGTERM).
 *
 * SIGINT (Ctrl-C) cancels the running turn as the user. SIGTERM closes the open session instead:
 * its disposal ends a running turn `aborted(disposed)` and keeps pending input (SPEC 3.7), the log
 * is flushed and closed, and the process exits 143. If that has not happened within
 * {@link TERMINATION_DEADLINE_MS}, or when a thread-pool request (a file or DNS call) is still
 * pending, which would hold `process.exit` until it returns, the process ends by the signal itself
 * (a shell sees 143 as well); a resume then closes the turn the log left open.
 *
 * @since 0.1.0
 */
import { ValidationError } from "@effect/cli"
import * as NodeContext from "@effect/platform-node/NodeContext"
import * as Runtime from "@effect/platform/Runtime"
import { Cause, Effect, Exit } from "effect"
import { CliError, ExitWith } from "./CliError.js"
import { cli } from "./Commands.js"
import * as Help from "./Help.js"
import * as Output from "./Output.js"
import { currentTerminating } from "./SessionCommand.js"

// Options that take a value. @effect/cli drops a repeated option left without one (`run hi --inject`)
// and would take the next option as the value (`--inject --json`): both are refused here first.
const VALUE_OPTIONS = new Set(["--db", "--model", "--session", "--inject", "--at", "--as", "--server", "--token-file"])

/** The first value option of `args` without a value after it (or with a blank one), said as a usage error. */
const missingValue = (args: ReadonlyArray<string>): string | undefined => {
  for (let i = 0; i < args.length; i++) {
    const arg = args[i]!
    if (arg === "--") return undefined
    if (!VALUE_OPTIONS.has(arg)) continue
    const value = args[i + 1]
    if (value === undefined || (value.startsWith("--") && value.length > 2)) return `option ${arg} needs a value`
    // A session id, like a file or model name or an injected context, is never empty or blank.
    if (value.trim() === "") return `option ${arg} needs a value, not ${value === "" ? "an empty" : "a blank"} one`
    i++
  }
  return undefined
}

type Cli = ReturnType<typeof cli>

/** Whether output to stdout / stderr may be coloured. */
const color = Help.useColor(process.env, process.stdout.isTTY === true)

/** A usage error: said on stderr with where to look, exit code 2. */
const usageError = (line: string, hint = "tiller --help lists the commands and options") =>
  Effect.zipRight(
    Output.errorLine(`tiller: ${line} (${hint})`),
    Effect.fail(new ExitWith({ code: Help.USAGE_EXIT_CODE }))
  )

/** The first argument that is neither an option nor a global option's value: the command typed. */
const typedCommand = (args: ReadonlyArray<string>): string | undefined => {
  for (let i = 0; i < args.length; i++) {
    const arg = args[i]!
    if (arg === "--db" || arg === "--model" || arg === "--context-window") i++
    else if (!arg.startsWith("-")) return arg
  }
  return undefined
}

/** The help asked for, made readable (Help.clean), on stdout. */
const help = Effect.gen(function*() {
  const asked = yield* Help.capture(Effect.ignore(cli(process.argv)))
  const top = yield* Help.capture(Effect.ignore(cli([process.argv[0]!, process.argv[1]!, "--help"])))
  yield* Output.write(Help.clean(asked, top, color))
})

// The command line, refused before parsing when a value option has no value.
const commandLine = (): Effect.Effect<
  void,
  CliError | ExitWith | Effect.Effect.Error<Cli>,
  Effect.Effect.Context<Cli>
> => {
  const args = process.argv.slice(2)
  const end = args.indexOf("--")
  if ((end === -1 ? args : args.slice(0, end)).includes("--wizard")) return usageError("unknown option --wizard")
  if (Help.asksForHelp(args)) return help
  // No command: the help, as a usage error.
  if (args.length === 0) return Effect.zipRight(help, Effect.fail(new ExitWith({ code: Help.USAGE_EXIT_CODE })))
  const missing = missingValue(args)
  if (missing !== undefined) return usageError(missing)
  return Help.plainErrors(cli(process.argv), color, (text) => process.stderr.write(text)).pipe(
    Effect.catchIf(ValidationError.isValidationError, (error) =>
      Effect.gen(function*() {
        // @effect/cli has already said what was wrong; a close command is suggested.
        const typed = typedCommand(args)
        const top = yield* Help.capture(Effect.ignore(cli([process.argv[0]!, process.argv[1]!, "--help"])))
        const commands = Help.commandsOf(top)
        if (typed !== undefined && !commands.includes(typed)) {
          const near = Help.closest(typed, commands)
          return yield* usageError(`unknown command "${typed}"${near === undefined ? "" : `; did you mean "${near}"?`}`)
        }
        return yield* usageError(
          "the command line does not parse",
          typed === undefined
            ? "tiller --help lists the commands and options"
            : `tiller ${typed} --help shows its usage`
        )
      }))
  )
}

const main = Effect.suspend(commandLine).pipe(
  Effect.as(0),
  Effect.catchAll((error) => {
    if (typeof error === "object" && error !== null && "_tag" in error && error._tag === "ExitWith") {
      return Effect.succeed((error as { readonly code: number }).code)
    }
    // @effect/cli has already printed what was wrong with the command line.
    if (ValidationError.isValidationError(error)) return Effect.succeed(Help.USAGE_EXIT_CODE)
    return Effect.as(Output.errorLine(`tiller: ${error instanceof Error ? error.message : String(error)}`), 1)
  }),
  Effect.provide(NodeContext.layer)
)

/** How long a terminated process (SIGTERM) has to close its session before it ends without it. */
const TERMINATION_DEADLINE_MS = 1500

/** The exit code of a process terminated by SIGTERM (128 + 15). */
const TERMINATED = 143

// Set once, by the first SIGTERM; the commands read it through currentTerminating.
let terminating = false

/** Ends the process by SIGTERM's default action: at once, without waiting for the thread pool. */
const endBySignal = (): void => {
  process.removeAllListeners("SIGTERM")
  process.kill(process.pid, "SIGTERM")
}

// Requests running on libuv's thread pool (fs, DNS): process.exit waits for them to return.
const threadPoolBusy = (): boolean => process.getActiveResourcesInfo().some((name) => name.includes("Req"))

const runMain = Runtime.makeRunMain(({ fiber, teardown }) => {
  const keepAlive = setInterval(() => {}, 2 ** 31 - 1)
  let signalled = false
  const onInterrupt = () => {
    signalled = true
    process.removeListener("SIGINT", onInterrupt)
    fiber.unsafeInterruptAsFork(fiber.id())
  }
  // Also during a Ctrl-C's cancel grace: a SIGTERM then still ends the process within the deadline.
  const onTerminate = () => {
    signalled = true
    terminating = true
    process.removeListener("SIGINT", onInterrupt)
    process.removeListener("SIGTERM", onTerminate)
    setTimeout(endBySignal, TERMINATION_DEADLINE_MS)
    fiber.unsafeInterruptAsFork(fiber.id())
  }
  process.on("SIGINT", onInterrupt)
  process.on("SIGTERM", onTerminate)
  fiber.addObserver((exit) => {
    clearInterval(keepAlive)
    process.removeListener("SIGINT", onInterrupt)
    process.removeListener("SIGTERM", onTerminate)
    teardown(exit, (code) => {
      if (terminating && threadPoolBusy()) return endBySignal()
      // A successful run without a signal ends when the event loop drains (stdout written out).
      if (signalled || code !== 0) process.exit(code)
    })
  })
})

runMain(Effect.locally(main, currentTerminating, () => terminating), {
  teardown: (exit, onExit) =>
    onExit(
      terminating
        ? TERMINATED
        : Exit.isSuccess(exit)
        ? (exit.value as number)
        : Cause.isInterruptedOnly(exit.cause)
        ? 130
        : 1
    )
})
