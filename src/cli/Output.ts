/**
 * Writing to the terminal. Every write is synchronous for files and pipes on Linux, so output that
 * one fiber writes stays in order with output that another fiber writes after it.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"

/**
 * Where output goes instead of the streams while the chat owns the terminal: the terminal's live
 * area is erased before the text and drawn again after it.
 *
 * @since 0.1.0
 * @category models
 */
export interface Sink {
  readonly print: (text: string) => void
}

let sink: Sink | undefined

/**
 * Routes stdout and stderr output through `next` (or back to the streams with `undefined`).
 *
 * @since 0.1.0
 * @category output
 */
export const setSink = (next: Sink | undefined): void => {
  sink = next
}

/**
 * Writes `text` to stdout as is.
 *
 * @since 0.1.0
 * @category output
 */
export const write = (text: string): Effect.Effect<void> =>
  Effect.sync(() => {
    if (sink !== undefined) sink.print(text)
    else process.stdout.write(text)
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
    if (sink !== undefined) sink.print(`${line}\n`)
    else process.stderr.write(`${line}\n`)
  })

/**
 * `word` as one word of a shell command line: as is when it holds only safe characters, else in
 * single quotes (so a printed hint such as `tiller resume ID` can be pasted back as it is).
 *
 * @since 0.1.0
 * @category output
 */
export const shellWord = (word: string): string =>
  /^[A-Za-z0-9._@%+=:,/-]+$/.test(word) ? word : `'${word.replace(/'/g, `'\\''`)}'`
