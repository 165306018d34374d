/**
 * The chat's input history across runs: what was sent from the line editor, kept in a file beside
 * the database (`<db>.history`, mode 0600), so that ↑ recalls lines typed in an earlier chat. One
 * JSON string per line (an input may hold newlines); appended as lines are sent, and cut back to the
 * newest {@link LineEditor.HISTORY_LIMIT} entries when it has grown to twice that. A history that
 * cannot be read or written costs only the recall: the chat says so once and goes on.
 *
 * @since 0.1.0
 */
import { FileSystem } from "@effect/platform"
import { Effect, Ref } from "effect"
import * as Database from "./Database.js"
import { describeFileError } from "./FileErrors.js"
import * as LineEditor from "./LineEditor.js"
import * as Output from "./Output.js"

/**
 * The history file of database `db`; none for an in-memory database or a PostgreSQL server.
 *
 * @since 0.1.0
 * @category constructors
 */
export const fileOf = (db: string): string | undefined =>
  db === ":memory:" || Database.isPostgres(db) ? undefined : `${db}.history`

/**
 * The entries of a history file's text, oldest first: lines that are not a JSON string are skipped;
 * the newest {@link LineEditor.HISTORY_LIMIT} are kept.
 *
 * @since 0.1.0
 * @category parsing
 */
export const parse = (text: string): ReadonlyArray<string> => {
  const entries: Array<string> = []
  for (const line of text.split("\n")) {
    if (line === "") continue
    try {
      const entry: unknown = JSON.parse(line)
      if (typeof entry === "string") entries.push(entry)
    } catch {
      // a line cut short by a crash, or not ours
    }
  }
  return entries.slice(-LineEditor.HISTORY_LIMIT)
}

/** The file's text for `entries`. */
const format = (entries: ReadonlyArray<string>) => entries.map((entry) => `${JSON.stringify(entry)}\n`).join("")

/**
 * A chat's input history: the entries loaded when the chat started, and `add`, which records a sent
 * input as the editor's history does (not a blank one, not the last one again).
 *
 * @since 0.1.0
 * @category models
 */
export interface InputHistory {
  readonly entries: ReadonlyArray<string>
  readonly add: (text: string) => Effect.Effect<void>
}

/**
 * Opens the history kept in `file` (none: a history of this run only).
 *
 * @since 0.1.0
 * @category constructors
 */
export const open = (file: string | undefined): Effect.Effect<InputHistory, never, FileSystem.FileSystem> =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    let warned = false
    const warn = (doing: string) => (error: unknown) =>
      warned || file === undefined ? Effect.void : Effect.zipRight(
        Effect.sync(() => (warned = true)),
        Output.errorLine(
          `tiller: cannot ${doing} the input history ${file} (${
            describeFileError(error)
          }); ↑ recalls only this chat's lines`
        )
      )
    const text = file === undefined
      ? ""
      : yield* fs.readFileString(file).pipe(
        Effect.catchAll((error) =>
          error._tag === "SystemError" && error.reason === "NotFound"
            ? Effect.succeed("")
            : Effect.as(warn("read")(error), "")
        )
      )
    const entries = parse(text)
    // The file's lines (valid or not), so that it is cut back once it has grown to twice the limit.
    const lines = yield* Ref.make(text.split("\n").filter((line) => line !== "").length)
    const current = yield* Ref.make(entries)
    const add = (input: string): Effect.Effect<void> =>
      Effect.gen(function*() {
        const before = yield* Ref.get(current)
        const after = LineEditor.remember(before, input)
        if (after === before) return
        yield* Ref.set(current, after)
        if (file === undefined) return
        const count = (yield* Ref.get(lines)) + 1
        if (count <= 2 * LineEditor.HISTORY_LIMIT) {
          yield* Ref.set(lines, count)
          return yield* fs.writeFileString(file, format([input]), { flag: "a", mode: 0o600 })
        }
        // Cut back: the newest entries written to a new file that then takes the old one's place.
        yield* Ref.set(lines, after.length)
        const next = `${file}.${process.pid}.tmp`
        yield* fs.writeFileString(next, format(after), { mode: 0o600 })
        yield* fs.rename(next, file)
      }).pipe(Effect.catchAll(warn("save")))
    return { entries, add }
  })
