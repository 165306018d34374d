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
import { cli } from "./Commands.js"
import * as Output from "./Output.js"

const main = Effect.suspend(() => cli(process.argv)).pipe(
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
