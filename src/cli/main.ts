/**
 * The `tiller` executable: runs the command line and exits with the command's code (0 on success,
 * 1 on a refusal or an unsuccessful outcome, 130 when interrupted).
 *
 * @since 0.1.0
 */
import { ValidationError } from "@effect/cli"
import * as NodeContext from "@effect/platform-node/NodeContext"
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import { Cause, Effect, Exit } from "effect"
import { CliError } from "./CliError.js"
import { cli } from "./Commands.js"
import * as Output from "./Output.js"

// Options that take a value. @effect/cli drops a repeated option left without one (`run hi --inject`)
// and would take the next option as the value (`--inject --json`): both are refused here first.
const VALUE_OPTIONS = new Set(["--db", "--model", "--session", "--inject", "--at", "--as"])

/** The first value option of `args` that has no value after it, if any. */
const missingValue = (args: ReadonlyArray<string>): string | undefined => {
  for (let i = 0; i < args.length; i++) {
    const arg = args[i]!
    if (arg === "--") return undefined
    if (!VALUE_OPTIONS.has(arg)) continue
    const value = args[i + 1]
    if (value === undefined || (value.startsWith("--") && value.length > 2)) return arg
    i++
  }
  return undefined
}

type Cli = ReturnType<typeof cli>

// The command line, refused before parsing when a value option has no value.
const commandLine = (): Effect.Effect<void, CliError | Effect.Effect.Error<Cli>, Effect.Effect.Context<Cli>> => {
  const missing = missingValue(process.argv.slice(2))
  return missing === undefined ? cli(process.argv) : Effect.fail(new CliError({ reason: `option ${missing} needs a value` }))
}

const main = Effect.suspend(commandLine).pipe(
  Effect.as(0),
  Effect.catchAll((error) => {
    if (typeof error === "object" && error !== null && "_tag" in error && error._tag === "ExitWith") {
      return Effect.succeed((error as { readonly code: number }).code)
    }
    // @effect/cli has already printed what was wrong with the command line.
    if (ValidationError.isValidationError(error)) return Effect.succeed(1)
    return Effect.as(Output.errorLine(`tiller: ${error instanceof Error ? error.message : String(error)}`), 1)
  }),
  Effect.provide(NodeContext.layer)
)

NodeRuntime.runMain(main, {
  teardown: (exit, onExit) =>
    onExit(
      Exit.isSuccess(exit) ? (exit.value as number) : Cause.isInterruptedOnly(exit.cause) ? 130 : 1
    )
})
