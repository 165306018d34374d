/**
 * Runs the `tiller` executable (bin/tiller.mjs) as a child process in a working directory: to
 * completion with a fixed input, or as a conversation whose next line is written only once the
 * output shows what the line must follow.
 */
import { expect } from "@effect/vitest"
import type { Scope } from "effect"
import { Data, Deferred, Effect } from "effect"
import type { ChildProcessWithoutNullStreams } from "node:child_process"
import { execFileSync, spawn } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"

const BIN = fileURLToPath(new URL("../../bin/tiller.mjs", import.meta.url))

/** How long a conversation waits for an expected output before it fails with the output so far. */
const WAIT_FOR_OUTPUT = "60 seconds"

/** A conversation did not show the output it waited for; `message` holds the output so far. */
export class OutputNotSeen extends Data.TaggedError("OutputNotSeen")<{ readonly message: string }> {}

export interface Outcome {
  readonly code: number | null
  readonly stdout: string
  readonly stderr: string
}

/** Starts `tiller ...args` in `cwd`; TILLER_* come only from `env`; colours are off. */
const start = (
  cwd: string,
  args: ReadonlyArray<string>,
  env: Record<string, string> | undefined
): ChildProcessWithoutNullStreams => {
  const inherited: Record<string, string | undefined> = { ...process.env, NO_COLOR: "1" }
  delete inherited.TILLER_DB
  delete inherited.TILLER_MODEL
  return spawn(process.execPath, [BIN, ...args], {
    cwd,
    env: { ...inherited, ...env },
    stdio: ["pipe", "pipe", "pipe"]
  })
}

/** Runs `tiller ...args` in `cwd` with `input` on stdin (then end of input); TILLER_* come only from `env`. */
export const tiller = (
  cwd: string,
  args: ReadonlyArray<string>,
  options?: { readonly input?: string; readonly env?: Record<string, string> }
): Effect.Effect<Outcome> =>
  Effect.async<Outcome>((resume) => {
    const child = start(cwd, args, options?.env)
    let stdout = ""
    let stderr = ""
    child.stdout.setEncoding("utf8").on("data", (text: string) => (stdout += text))
    child.stderr.setEncoding("utf8").on("data", (text: string) => (stderr += text))
    child.on("close", (code) => resume(Effect.succeed({ code, stdout, stderr })))
    child.stdin.end(options?.input ?? "")
    return Effect.sync(() => {
      child.kill()
    })
  })

/** A running `tiller` whose stdin stays open until `end`. */
export interface Conversation {
  /** Writes `line` and a newline to stdin. */
  readonly send: (line: string) => Effect.Effect<void>
  /**
   * Waits until stdout shows `text` after the point the previous wait matched; fails with the
   * output so far when it does not come.
   */
  readonly waitFor: (text: string) => Effect.Effect<void, OutputNotSeen>
  /** Sends `signal` to the process. */
  readonly signal: (signal: NodeJS.Signals) => Effect.Effect<void>
  /** Waits for the process to exit, stdin left open (the command must end by itself). */
  readonly exit: Effect.Effect<Outcome>
  /** Ends stdin, then waits for the process to exit. */
  readonly end: Effect.Effect<Outcome>
}

/**
 * Starts `tiller ...args` in `cwd` for a conversation; the process is killed when the scope closes.
 * `view` rewrites the output before it is matched and returned (the whole output so far, each time).
 */
export const converse = (
  cwd: string,
  args: ReadonlyArray<string>,
  options?: { readonly env?: Record<string, string>; readonly view?: (stdout: string) => string }
): Effect.Effect<Conversation, never, Scope.Scope> =>
  Effect.gen(function*() {
    const exited = yield* Deferred.make<Outcome>()
    const child = yield* Effect.acquireRelease(
      Effect.sync(() => start(cwd, args, options?.env)),
      (child) => Effect.sync(() => child.exitCode === null && child.signalCode === null && child.kill("SIGKILL"))
    )
    let raw = ""
    let stdout = ""
    let stderr = ""
    let matchedUpTo = 0
    const listeners = new Set<() => void>()
    const changed = () => {
      for (const listener of listeners) listener()
    }
    child.stdout.setEncoding("utf8").on("data", (text: string) => {
      raw += text
      stdout = options?.view === undefined ? raw : options.view(raw)
      changed()
    })
    child.stderr.setEncoding("utf8").on("data", (text: string) => (stderr += text))
    // A line sent after the process exited is lost, as on a terminal; the test sees the exit.
    child.stdin.on("error", () => {})
    let closed = false
    child.on("close", (code) => {
      closed = true
      Deferred.unsafeDone(exited, Effect.succeed({ code, stdout, stderr }))
      changed()
    })

    const waitFor = (text: string): Effect.Effect<void, OutputNotSeen> =>
      Effect.async<void, OutputNotSeen>((resume) => {
        const check = () => {
          const at = stdout.indexOf(text, matchedUpTo)
          if (at >= 0) {
            matchedUpTo = at + text.length
            listeners.delete(check)
            resume(Effect.void)
          } else if (closed) {
            listeners.delete(check)
            resume(Effect.fail(
              new OutputNotSeen({
                message: `tiller exited before printing ${JSON.stringify(text)}:\n${stdout}\nstderr:\n${stderr}`
              })
            ))
          }
        }
        listeners.add(check)
        check()
        return Effect.sync(() => listeners.delete(check))
      }).pipe(
        Effect.timeoutFail({
          duration: WAIT_FOR_OUTPUT,
          onTimeout: () =>
            new OutputNotSeen({
              message: `no ${JSON.stringify(text)} after offset ${matchedUpTo} in:\n${stdout}\nstderr:\n${stderr}`
            })
        })
      )

    return {
      send: (line) => Effect.sync(() => child.stdin.write(`${line}\n`)),
      waitFor,
      signal: (signal) => Effect.sync(() => child.kill(signal)),
      exit: Deferred.await(exited),
      end: Effect.zipRight(Effect.sync(() => child.stdin.end()), Deferred.await(exited))
    }
  })

/** A fresh temporary working directory, removed when the scope closes. */
export const tempDir = Effect.acquireRelease(
  Effect.sync(() => fs.mkdtempSync(path.join(os.tmpdir(), "tiller-cli-"))),
  (dir) => Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true }))
)

/**
 * A FIFO (named pipe) `name` in `dir`. When the scope closes, a writer is opened once and closed, so
 * that a reader stuck opening it (a process that would otherwise never end) gets end of file.
 */
export const fifo = (dir: string, name: string) =>
  Effect.acquireRelease(
    Effect.sync(() => {
      const file = path.join(dir, name)
      execFileSync("mkfifo", [file])
      return file
    }),
    (file) =>
      Effect.sync(() => {
        try {
          fs.closeSync(fs.openSync(file, fs.constants.O_WRONLY | fs.constants.O_NONBLOCK))
        } catch {
          // no reader was waiting
        }
      })
  )

/** Parses JSON lines; throws (failing the test) on a line that is not JSON. */
export const jsonLines = (text: string): Array<any> =>
  text.split("\n").filter((line) => line !== "").map((line) => JSON.parse(line))

/** Expects `text` to contain each of `parts`, in this order. */
export const expectInOrder = (text: string, parts: ReadonlyArray<string>) => {
  let from = 0
  for (const part of parts) {
    const at = text.indexOf(part, from)
    expect(at, `${JSON.stringify(part)} after offset ${from} in:\n${text}`).toBeGreaterThanOrEqual(0)
    from = at + part.length
  }
}
