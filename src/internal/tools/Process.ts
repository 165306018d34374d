/**
 * A child process for a tool: started in a process group of its own (detached), killed as a whole
 * group on cancel, on timeout or when its reader has seen enough, and read with bounded memory: its
 * output (stdout and stderr as they arrive) is kept up to a cap, its head and its tail, with a note
 * of how much was cut between them; or its stdout is handed line by line to a reader.
 *
 * @since 0.1.0
 */
import { Deferred, Duration, Effect } from "effect"
import type { ChildProcess } from "node:child_process"
import { spawn } from "node:child_process"

/**
 * How one process is run.
 *
 * @since 0.1.0
 * @category models
 */
export interface ProcessOptions {
  readonly file: string
  readonly args: ReadonlyArray<string>
  readonly cwd: string
  readonly env: NodeJS.ProcessEnv
  /** Killed (the whole group) after this long. */
  readonly timeout: Duration.DurationInput
  /** The most characters of output kept: about two thirds from the start, the rest from the end. */
  readonly maxChars: number
  /** Reads stdout line by line instead of keeping it; returning `false` stops (and kills) the process. */
  readonly onLine?: (line: string) => boolean
}

/**
 * The longest stdout line handed to `onLine`; a longer one is dropped (and counted), so that a
 * line without end cannot fill the memory.
 *
 * @since 0.1.0
 * @category constants
 */
export const MAX_LINE_CHARS = 1024 * 1024

/**
 * How a process ended and what it wrote.
 *
 * @since 0.1.0
 * @category models
 */
export interface ProcessResult {
  /** The exit code, `null` when a signal ended it (or it never started). */
  readonly code: number | null
  readonly signal: string | null
  /** The kept output, with a note where characters were cut. */
  readonly output: string
  /** Characters of output that were not kept. */
  readonly cutChars: number
  readonly timedOut: boolean
  /** The reader asked to stop before the process ended. */
  readonly stopped: boolean
  /** Lines longer than {@link MAX_LINE_CHARS} that were not handed to `onLine`. */
  readonly droppedLines: number
  /** Why the process could not start, if it could not. */
  readonly spawnError?: string
}

/**
 * Output kept within `max` characters: the head, the newest tail, and the count between them.
 *
 * @since 0.1.0
 * @category constructors
 */
export const makeOutputCap = (max: number) => {
  const headMax = Math.ceil((max * 2) / 3)
  const tailMax = max - headMax
  let head = ""
  const tail: Array<string> = []
  let tailLength = 0
  let total = 0
  return {
    push: (chunk: string): void => {
      total += chunk.length
      let rest = chunk
      if (head.length < headMax) {
        const take = headMax - head.length
        head += rest.slice(0, take)
        rest = rest.slice(take)
      }
      if (rest === "") return
      tail.push(rest)
      tailLength += rest.length
      while (tail.length > 1 && tailLength - tail[0]!.length >= tailMax) tailLength -= tail.shift()!.length
    },
    /** The kept text and the number of characters cut from its middle. */
    result: (): { readonly text: string; readonly cut: number } => {
      const joined = tail.join("")
      if (total <= max) return { text: head + joined, cut: 0 }
      const kept = joined.slice(Math.max(0, joined.length - tailMax))
      const cut = total - head.length - kept.length
      return { text: `${head}\n[... ${cut} characters of output cut here ...]\n${kept}`, cut }
    }
  }
}

/** Kills the process group of `child` (it leads it: it was started detached). */
const killGroup = (child: ChildProcess): void => {
  if (child.pid === undefined) return
  try {
    process.kill(-child.pid, "SIGKILL")
  } catch {
    // The group is already gone.
  }
}

// After the leader exits, its output pipes close when every process holding them has ended; a
// command that left a background process running is not waited for longer than this.
const CLOSE_GRACE = Duration.millis(100)

/**
 * Runs one process to its end (or its timeout, or a cancel), with bounded memory.
 *
 * @since 0.1.0
 * @category constructors
 */
export const runProcess = (options: ProcessOptions): Effect.Effect<ProcessResult> =>
  Effect.gen(function*() {
    const cap = makeOutputCap(options.maxChars)
    const ended = yield* Deferred.make<
      { readonly code: number | null; readonly signal: string | null; readonly error?: string }
    >()
    const closed = yield* Deferred.make<void>()
    let stopped = false
    let pending = ""
    // While a line longer than the limit goes on, its characters are skipped up to its end.
    let dropping = false
    let droppedLines = 0
    const child = yield* Effect.sync(() => {
      const started = spawn(options.file, [...options.args], {
        cwd: options.cwd,
        env: options.env,
        detached: true,
        stdio: ["ignore", "pipe", "pipe"]
      })
      started.on("error", (error) => {
        Deferred.unsafeDone(ended, Effect.succeed({ code: null, signal: null, error: error.message }))
        Deferred.unsafeDone(closed, Effect.void)
      })
      started.on("exit", (code, signal) => Deferred.unsafeDone(ended, Effect.succeed({ code, signal })))
      started.on("close", () => Deferred.unsafeDone(closed, Effect.void))
      started.stdout.setEncoding("utf8")
      started.stderr.setEncoding("utf8")
      const onLine = options.onLine
      if (onLine === undefined) {
        started.stdout.on("data", cap.push)
      } else {
        started.stdout.on("data", (chunk: string) => {
          if (stopped) return
          const lines = (pending + chunk).split("\n")
          pending = lines.pop()!
          for (const line of lines) {
            if (dropping) {
              dropping = false
              continue
            }
            if (line.length > MAX_LINE_CHARS) {
              droppedLines++
              continue
            }
            if (!onLine(line)) {
              stopped = true
              killGroup(started)
              return
            }
          }
          if (pending.length > MAX_LINE_CHARS) {
            if (!dropping) droppedLines++
            dropping = true
            pending = ""
          }
        })
      }
      started.stderr.on("data", cap.push)
      return started
    })
    const waited = yield* Deferred.await(ended).pipe(
      Effect.zipLeft(Effect.race(Deferred.await(closed), Effect.sleep(CLOSE_GRACE))),
      Effect.timeoutTo({ duration: options.timeout, onTimeout: () => undefined, onSuccess: (exit) => exit }),
      Effect.onInterrupt(() => Effect.sync(() => killGroup(child)))
    )
    if (waited === undefined) killGroup(child)
    child.stdout?.destroy()
    child.stderr?.destroy()
    if (options.onLine !== undefined && !stopped && !dropping && pending !== "") options.onLine(pending)
    const { cut, text } = cap.result()
    return {
      code: waited?.code ?? null,
      signal: waited?.signal ?? (waited === undefined ? "SIGKILL" : null),
      output: text,
      cutChars: cut,
      timedOut: waited === undefined,
      stopped,
      droppedLines,
      ...(waited?.error === undefined ? {} : { spawnError: waited.error })
    }
  })
