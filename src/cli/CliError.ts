/**
 * The CLI's own failures: a readable refusal, and an exit code for a command that already printed
 * its outcome.
 *
 * @since 0.1.0
 */
import { Schema } from "effect"

/**
 * A refusal the CLI explains in one sentence (an unknown model, a missing session, a bad path).
 *
 * @since 0.1.0
 * @category errors
 */
export class CliError extends Schema.TaggedError<CliError>("tiller/CliError")("CliError", {
  reason: Schema.String
}) {
  override get message(): string {
    return this.reason
  }
}

/**
 * The command printed its outcome (a non-completed turn, log violations) and exits with `code`.
 *
 * @since 0.1.0
 * @category errors
 */
export class ExitWith extends Schema.TaggedError<ExitWith>("tiller/ExitWith")("ExitWith", {
  code: Schema.Int
}) {
  override get message(): string {
    return `exit code ${this.code}`
  }
}
