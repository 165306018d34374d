/**
 * Writing to the terminal. Every write is synchronous for files and pipes on Linux, so output that
 * one fiber writes stays in order with output that another fiber writes after it.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"

/**
 * Writes `text` to stdout as is.
 *
 * @since 0.1.0
 * @category output
 */
export const write = (text: string): Effect.Effect<void> =>
  Effect.sync(() => {
    process.stdout.write(text)
  })

/**
 * Writes each line to stdout, each followed by a newline.
 *
 * @since 0.1.0
 * @category output
 */
export const lines = (output: ReadonlyArray<string>): Effect.Effect<void> =>
  output.length === 0 ? Effect.void : write(output.map((line) => `${line}\n`).join(""))

/**
 * Writes one line to stderr.
 *
 * @since 0.1.0
 * @category output
 */
export const errorLine = (line: string): Effect.Effect<void> =>
  Effect.sync(() => {
    process.stderr.write(`${line}\n`)
  })
