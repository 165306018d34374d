/**
 * Where the chat's input comes from: on a terminal (standard input and output both terminals), the
 * line editor of `Terminal.ts`, which owns the screen while the chat runs (every output goes
 * through it), shows the live progress line and recalls the input history of earlier chats
 * (`InputHistory.ts`); otherwise (a pipe, a file) the lines of standard
 * input as they arrive, and plain output.
 *
 * @since 0.1.0
 */
import type { FileSystem } from "@effect/platform"
import * as NodeStream from "@effect/platform-node/NodeStream"
import type { Scope } from "effect"
import { Clock, Effect, Queue, Schedule, Stream } from "effect"
import { CliError } from "./CliError.js"
import * as InputHistory from "./InputHistory.js"
import * as Output from "./Output.js"
import * as Progress from "./Progress.js"
import type { InputEvent } from "./Terminal.js"
import { Terminal } from "./Terminal.js"

/**
 * The chat's input and, on a terminal, the terminal and the progress fold it shows.
 *
 * @since 0.1.0
 * @category models
 */
export interface ChatInput {
  readonly events: Stream.Stream<InputEvent, CliError>
  readonly terminal: Terminal | undefined
  /** Fed with the session's events; shown only when the progress line is on. */
  readonly progress: Progress.Progress
}

/** The lines of standard input, as they arrive. */
const stdinLines: Stream.Stream<string, CliError> = NodeStream.fromReadable(
  () => process.stdin,
  (cause) => new CliError({ reason: `cannot read standard input: ${String(cause)}` })
).pipe(Stream.decodeText(), Stream.splitLines)

/** How often the progress line is redrawn. */
const TICK = "120 millis"

/**
 * Opens the chat's input for the current scope; on a terminal, with the input history kept in
 * `historyFile` (see `InputHistory.fileOf`).
 *
 * @since 0.1.0
 * @category constructors
 */
export const open = (
  historyFile: string | undefined
): Effect.Effect<ChatInput, never, Scope.Scope | FileSystem.FileSystem> =>
  Effect.gen(function*() {
    const progress = Progress.make()
    if (process.stdin.isTTY !== true || process.stdout.isTTY !== true) {
      return {
        events: Stream.map(stdinLines, (text): InputEvent => ({ _tag: "line", text })),
        terminal: undefined,
        progress
      }
    }
    const history = yield* InputHistory.open(historyFile)
    const queue = yield* Queue.unbounded<InputEvent>()
    const terminal = yield* Effect.acquireRelease(
      Effect.sync(() => {
        const terminal = new Terminal(
          process.stdin,
          process.stdout,
          (event) => Queue.unsafeOffer(queue, event),
          undefined,
          history.entries
        )
        terminal.start()
        Output.setSink(terminal)
        return terminal
      }),
      (terminal) =>
        Effect.sync(() => {
          Output.setSink(undefined)
          terminal.close()
        })
    )
    if (Progress.enabled(process.env, true)) {
      let frame = 0
      yield* Clock.currentTimeMillis.pipe(
        Effect.flatMap((now) => Effect.sync(() => terminal.setStatus(progress.line(now, frame++)))),
        Effect.repeat(Schedule.spaced(TICK)),
        Effect.ensuring(Effect.sync(() => terminal.setStatus(undefined))),
        Effect.forkScoped
      )
    }
    // A sent line is saved as it is taken, so that a chat that ends any way keeps it.
    const events = Stream.tap(Stream.fromQueue(queue), (event) =>
      event._tag === "line" ? history.add(event.text) : Effect.void)
    return { events, terminal, progress }
  })
