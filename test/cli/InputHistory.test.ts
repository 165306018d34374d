import * as NodeFileSystem from "@effect/platform-node/NodeFileSystem"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import * as InputHistory from "../../src/cli/InputHistory.js"
import { HISTORY_LIMIT } from "../../src/cli/LineEditor.js"
import { tempDir } from "./harness.js"

const linesOf = (file: string) => fs.readFileSync(file, "utf8").split("\n").filter((line) => line !== "")

describe("InputHistory", () => {
  it("is kept beside the database, none for an in-memory one", () => {
    expect(InputHistory.fileOf(".tiller/sessions.db")).toBe(".tiller/sessions.db.history")
    expect(InputHistory.fileOf(":memory:")).toBeUndefined()
  })

  it.scopedLive("a new chat's history holds what earlier chats sent (multi-line inputs whole; blank lines and repeats not), in a 0600 file", () =>
    Effect.gen(function*() {
      const file = path.join(yield* tempDir, "chat.db.history")
      const first = yield* InputHistory.open(file)
      expect(first.entries).toEqual([])
      for (const text of ["one", "two\nlines", "  ", "two\nlines", "three"]) yield* first.add(text)
      expect(fs.statSync(file).mode & 0o777).toBe(0o600)
      expect((yield* InputHistory.open(file)).entries).toEqual(["one", "two\nlines", "three"])
    }).pipe(Effect.provide(NodeFileSystem.layer)))

  it.scopedLive(`the file stays bounded: cut back to the newest ${HISTORY_LIMIT} entries once it holds twice as many lines`, () =>
    Effect.gen(function*() {
      const file = path.join(yield* tempDir, "chat.db.history")
      const history = yield* InputHistory.open(file)
      for (let i = 1; i <= 2 * HISTORY_LIMIT; i++) yield* history.add(`line ${i}`)
      expect(linesOf(file)).toHaveLength(2 * HISTORY_LIMIT)
      yield* history.add("one more")
      expect(linesOf(file)).toHaveLength(HISTORY_LIMIT)
      const reopened = yield* InputHistory.open(file)
      expect(reopened.entries).toHaveLength(HISTORY_LIMIT)
      expect(reopened.entries[reopened.entries.length - 1]).toBe("one more")
      expect(reopened.entries[0]).toBe(`line ${HISTORY_LIMIT + 2}`)
    }).pipe(Effect.provide(NodeFileSystem.layer)))

  it("a damaged line (cut short, not a string) is skipped, the rest kept", () => {
    expect(InputHistory.parse("\"a\"\n{\"x\":1}\n\"b\n\"c\"\n")).toEqual(["a", "c"])
  })
})
