/**
 * Runs the `tiller` executable (bin/tiller.mjs) on a real pseudo-terminal: a tmux window of 160x50
 * on a private tmux server (its own socket, no configuration file), typed into with `send-keys`,
 * pasted into with bracketed paste, and read back with `capture-pane`. The server is killed when
 * the scope closes. Also reads what a session stored, straight from its SQLite file.
 */
import type { Scope } from "effect"
import { Data, Effect } from "effect"
import { execFileSync } from "node:child_process"
import * as fs from "node:fs"
import { createRequire } from "node:module"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"

const BIN = fileURLToPath(new URL("../../bin/tiller.mjs", import.meta.url))

/** The window's width, as a new user's terminal. */
export const COLUMNS = 160
/** The window's height. */
export const ROWS = 50

/** How long a wait for the screen (or the database) lasts before it fails with what it saw. */
const WAIT = "30 seconds"
/** How often the screen is read while waiting. */
const POLL = "100 millis"

/** The screen did not show what a test waited for; `message` holds what it showed. */
export class ScreenNotSeen extends Data.TaggedError("ScreenNotSeen")<{ readonly message: string }> {}

/** A program running in a tmux window. */
export interface Pane {
  /** Types `text` literally, as keys. */
  readonly type: (text: string) => Effect.Effect<void>
  /** Presses keys by their tmux names (`Enter`, `Left`, `C-l`, `Escape`, `M-Enter`). */
  readonly keys: (...names: ReadonlyArray<string>) => Effect.Effect<void>
  /** Pastes `text` as a terminal does: bracketed (the program asked for it), newlines as carriage returns. */
  readonly paste: (text: string) => Effect.Effect<void>
  /** The visible screen, one string per row, trailing blanks cut. */
  readonly screen: Effect.Effect<ReadonlyArray<string>>
  /** Everything shown so far (scrollback and screen), wrapped rows joined into their lines. */
  readonly transcript: Effect.Effect<string>
  /**
   * Waits until `check` holds for the transcript, polling; answers the transcript that passed.
   * `what` names the wait in the failure, which shows the transcript last read.
   */
  readonly waitFor: (what: string, check: (transcript: string) => boolean) => Effect.Effect<string, ScreenNotSeen>
  /** Waits until the transcript contains `text` at least `times` times (default once). */
  readonly waitForText: (text: string, times?: number) => Effect.Effect<string, ScreenNotSeen>
  /** The program's exit code once it has exited, else undefined. */
  readonly exitCode: Effect.Effect<number | undefined>
  /** Waits until the program exits; answers its exit code. */
  readonly waitForExit: Effect.Effect<number, ScreenNotSeen>
}

/**
 * Reads `read` every {@link POLL} until `check` holds for what it read, and answers that; fails
 * after {@link WAIT} with `describe` of the last reading.
 */
export const poll = <A>(
  read: Effect.Effect<A>,
  check: (value: A) => boolean,
  describe: (last: A | undefined) => string
): Effect.Effect<A, ScreenNotSeen> => {
  let last: A | undefined
  return Effect.gen(function*() {
    while (true) {
      last = yield* read
      if (check(last)) return last
      yield* Effect.sleep(POLL)
    }
  }).pipe(Effect.timeoutFail({ duration: WAIT, onTimeout: () => new ScreenNotSeen({ message: describe(last) }) }))
}

const occurrences = (text: string, part: string) => text.split(part).length - 1

/**
 * Starts `tiller ...args` in `cwd` in a fresh tmux window; TILLER_*, CI and NO_COLOR are left out of
 * its environment (a terminal user's chat: progress line on, the demo model).
 */
export const openPane = (cwd: string, args: ReadonlyArray<string>): Effect.Effect<Pane, never, Scope.Scope> =>
  Effect.gen(function*() {
    const socket = `tiller-test-${process.pid}-${crypto.randomUUID().slice(0, 8)}`
    const tmux = (tmuxArgs: ReadonlyArray<string>, input?: string): string =>
      execFileSync("tmux", ["-L", socket, "-f", "/dev/null", ...tmuxArgs], {
        encoding: "utf8",
        ...(input === undefined ? {} : { input })
      })
    // A shell runs the program and writes its exit status to a file: tmux may show the pane dead
    // without ever reporting the status.
    const exitFile = path.join(os.tmpdir(), `${socket}.exit`)
    const unset = ["TILLER_DB", "TILLER_MODEL", "CI", "NO_COLOR", "FORCE_COLOR"].map((name) => `-u ${name}`).join(" ")
    const program = ["sh", "-c", `env ${unset} "$@"; echo "$?" > "$0"`, exitFile, process.execPath, BIN, ...args]
    yield* Effect.acquireRelease(
      // remain-on-exit keeps the window after the program exits, so its last screen can be read.
      Effect.sync(() =>
        tmux([
          "start-server",
          ";",
          "set-option",
          "-g",
          "remain-on-exit",
          "on",
          ";",
          "new-session",
          "-d",
          "-s",
          "chat",
          "-x",
          String(COLUMNS),
          "-y",
          String(ROWS),
          "-c",
          cwd,
          ...program
        ])
      ),
      () =>
        Effect.sync(() => {
          try {
            tmux(["kill-server"])
          } catch {
            // already gone
          }
          fs.rmSync(exitFile, { force: true })
        })
    )
    const target = ["-t", "chat"]
    const transcript = Effect.sync(() =>
      tmux(["capture-pane", "-p", "-J", "-S", "-", "-E", "-", ...target]).replace(/\s+$/, "")
    )
    const screen = Effect.sync(() =>
      tmux(["capture-pane", "-p", ...target]).split("\n").map((row) => row.replace(/\s+$/, ""))
    )
    const exitCode = Effect.sync(() => {
      const status = fs.existsSync(exitFile) ? fs.readFileSync(exitFile, "utf8").trim() : ""
      return status === "" ? undefined : Number(status)
    })
    const waitFor = (what: string, check: (transcript: string) => boolean) =>
      poll(transcript, check, (last) => `the screen never showed ${what}; it showed:\n${last ?? ""}`)
    const pane: Pane = {
      type: (text) => Effect.sync(() => void tmux(["send-keys", ...target, "-l", text])),
      keys: (...names) => Effect.sync(() => void tmux(["send-keys", ...target, ...names])),
      paste: (text) =>
        Effect.sync(() => {
          tmux(["load-buffer", "-b", "pasted", "-"], text)
          tmux(["paste-buffer", "-p", "-d", "-b", "pasted", ...target])
        }),
      screen,
      transcript,
      waitFor,
      waitForText: (text, times = 1) =>
        waitFor(JSON.stringify(text) + (times === 1 ? "" : ` ${times} times`), (t) => occurrences(t, text) >= times),
      exitCode,
      waitForExit: Effect.map(
        poll(exitCode, (code) => code !== undefined, () => "the program did not exit"),
        (code) => code!
      )
    }
    return pane
  })

/** A tiny view of better-sqlite3: enough to read a session's stored events. */
interface Database {
  readonly prepare: (sql: string) => { readonly all: (...params: ReadonlyArray<unknown>) => ReadonlyArray<any> }
  readonly close: () => void
}
const openDatabase = createRequire(import.meta.url)("better-sqlite3") as new(
  filename: string,
  options: { readonly readonly: boolean; readonly fileMustExist: boolean }
) => Database

/** The stored events of `sessionId` in the SQLite file `file`, in seq order (none when nothing is stored yet). */
export const storedEvents = (file: string, sessionId: string): Effect.Effect<ReadonlyArray<any>> =>
  Effect.sync(() => {
    let db: Database
    try {
      db = new openDatabase(file, { readonly: true, fileMustExist: true })
    } catch {
      return []
    }
    try {
      return db.prepare("SELECT row FROM events WHERE session_id = ? ORDER BY seq").all(sessionId).map((r) =>
        JSON.parse(r.row)
      )
    } catch {
      return []
    } finally {
      db.close()
    }
  })

/**
 * Waits until the stored events of `sessionId` satisfy `check`; answers them. The failure shows what
 * was stored and what `pane`'s screen showed.
 */
export const waitForStored = (
  file: string,
  sessionId: string,
  what: string,
  check: (events: ReadonlyArray<any>) => boolean,
  pane: Pane
): Effect.Effect<ReadonlyArray<any>, ScreenNotSeen> =>
  poll(
    storedEvents(file, sessionId),
    check,
    (last) =>
      `session ${sessionId} never stored ${what}; it stored:\n${(last ?? []).map((e) => JSON.stringify(e)).join("\n")}`
  ).pipe(
    Effect.catchTag("ScreenNotSeen", (error) =>
      Effect.flatMap(pane.transcript, (shown) =>
        Effect.fail(new ScreenNotSeen({ message: `${error.message}\nthe screen showed:\n${shown}` }))))
  )

/** The text of a stored message's content. */
export const textOf = (content: ReadonlyArray<any>): string =>
  content.map((block) => block.text ?? textOf(block.content ?? [])).join("")

/** The texts of the `user/message` events of `events`, in order. */
export const enteredTexts = (events: ReadonlyArray<any>): ReadonlyArray<string> =>
  events.filter((e) => e.type === "user/message").map((e) => textOf(e.data.content))
