import { describe, expect, it } from "@effect/vitest"
import { Duration, Effect, Fiber } from "effect"
import * as fs from "node:fs"
import * as net from "node:net"
import * as path from "node:path"
import type { SessionEvent } from "../../../src/domain/Event.js"
import { DEFAULT_LINES, MAX_LINE_CHARS, numberLines } from "../../../src/internal/tools/ReadTool.js"
import { fifo, tempDir } from "../../cli/harness.js"
import { codingTools, text } from "./toolHarness.js"

const AT_ONCE = Duration.seconds(2)
const atOnce = <A, E>(effect: Effect.Effect<A, E>) =>
  Effect.timeoutFail(effect, { duration: AT_ONCE, onTimeout: () => "did not answer at once" as const })

const openDescriptors = () => fs.readdirSync("/proc/self/fd").length

describe("Read", () => {
  it("numbers lines like cat -n, from offset for limit lines, cutting long lines", () => {
    expect(numberLines("a\nb\nc\n", 1, DEFAULT_LINES)).toBe("     1\ta\n     2\tb\n     3\tc")
    expect(numberLines("a\nb\nc\n", 2, 1)).toBe(
      "     2\tb\n[lines 2-2 of 3 shown: Read again with offset 3 to see more]"
    )
    expect(numberLines("a\n", 5, 10)).toBe("[the file has 1 line; offset 5 is past its end]")
    const long = "x".repeat(MAX_LINE_CHARS + 5)
    expect(numberLines(long, 1, 10)).toBe(
      `     1\t${"x".repeat(MAX_LINE_CHARS)} [line cut: ${MAX_LINE_CHARS + 5} characters]`
    )
  })

  it.scopedLive("reads an absolute or relative path inside the root; refuses outside paths and symlink escapes", () =>
    Effect.gen(function*() {
      const outside = yield* tempDir
      const dir = yield* tempDir
      fs.writeFileSync(path.join(dir, "notes.txt"), "one\ntwo\n")
      fs.writeFileSync(path.join(outside, "secret.txt"), "secret\n")
      fs.symlinkSync(outside, path.join(dir, "escape"))
      const { call } = yield* codingTools(dir)
      expect(yield* call("Read", { file_path: path.join(dir, "notes.txt") })).toEqual({
        content: "     1\tone\n     2\ttwo"
      })
      expect(yield* call("Read", { file_path: "notes.txt" })).toEqual({ content: "     1\tone\n     2\ttwo" })
      const refusals = [
        yield* call("Read", { file_path: path.join(outside, "secret.txt") }),
        yield* call("Read", { file_path: "../" + path.basename(outside) + "/secret.txt" }),
        yield* call("Read", { file_path: "escape/secret.txt" })
      ]
      for (const refused of refusals) {
        expect(refused.isError).toBe(true)
        expect(text(refused)).toMatch(/^refused: .* is outside the working directory/)
        expect(text(refused)).not.toContain("secret\n")
      }
    }))

  it.scopedLive("an added directory is inside; everything else stays outside", () =>
    Effect.gen(function*() {
      const extra = yield* tempDir
      const dir = yield* tempDir
      fs.writeFileSync(path.join(extra, "shared.txt"), "shared\n")
      const { call } = yield* codingTools(dir, { addDirs: [extra] })
      expect(yield* call("Read", { file_path: path.join(extra, "shared.txt") })).toEqual({ content: "     1\tshared" })
      const refused = yield* call("Read", { file_path: "/etc/hostname" })
      expect(text(refused)).toContain(`and the added directories (${fs.realpathSync(extra)})`)
    }))

  it.scopedLive("binary files, FIFOs, sockets, devices, directories and hard-linked files are refused at once", () =>
    Effect.gen(function*() {
      const outside = yield* tempDir
      const dir = yield* tempDir
      fs.writeFileSync(
        path.join(dir, "image.png"),
        Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 13])
      )
      fs.writeFileSync(path.join(outside, "secret.txt"), "outside the box\n")
      fs.linkSync(path.join(outside, "secret.txt"), path.join(dir, "link.txt"))
      yield* fifo(dir, "pipe")
      const server = net.createServer()
      yield* Effect.acquireRelease(
        Effect.async<void>((resume) => void server.listen(path.join(dir, "sock"), () => resume(Effect.void))),
        () => Effect.sync(() => server.close())
      )
      const { call } = yield* codingTools(dir)
      expect(yield* call("Read", { file_path: "image.png" })).toEqual({
        content: "refused: image.png is a binary file (12 bytes); Read shows only text files",
        isError: true
      })
      expect(yield* atOnce(call("Read", { file_path: "pipe" }))).toEqual({
        content: "refused: pipe is a FIFO (named pipe), not a regular file; Read reads only regular files",
        isError: true
      })
      expect(yield* atOnce(call("Read", { file_path: "sock" }))).toEqual({
        content: "refused: sock is a socket, not a regular file; Read reads only regular files",
        isError: true
      })
      expect(yield* call("Read", { file_path: "." })).toEqual({
        content: ". is a directory; use Glob or Bash ls",
        isError: true
      })
      expect(yield* call("Read", { file_path: "link.txt" })).toEqual({
        content:
          "refused: link.txt has 2 hard links; Read uses only files with one link, since another link may be outside the working directory",
        isError: true
      })
      const { call: devCall } = yield* codingTools("/dev")
      expect(yield* atOnce(devCall("Read", { file_path: "zero" }))).toEqual({
        content: "refused: zero is a character device, not a regular file; Read reads only regular files",
        isError: true
      })
    }))

  it.scopedLive("a 1.5 GB sparse file answers at once (refused as binary); an interrupted read leaves no descriptor open", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const file = path.join(dir, "big.bin")
      fs.writeFileSync(file, "head\n")
      fs.truncateSync(file, 1536 * 1024 * 1024)
      const { call } = yield* codingTools(dir)
      expect(text(yield* atOnce(call("Read", { file_path: "big.bin" })))).toContain("is a binary file")
      const before = openDescriptors()
      for (let i = 0; i < 10; i++) {
        const fiber = yield* Effect.fork(call("Read", { file_path: "big.bin" }))
        yield* Effect.sleep(Duration.millis(i % 5))
        yield* atOnce(Fiber.interrupt(fiber))
      }
      yield* Effect.sleep(Duration.millis(200))
      expect(openDescriptors()).toBe(before)
    }))
})

describe("Write", () => {
  it.scopedLive("creates a file and its parent directories; an existing file needs a Read first", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const { call } = yield* codingTools(dir)
      const created = yield* call("Write", { file_path: path.join(dir, "a", "b", "new.txt"), content: "hello\n" })
      expect(created.isError).toBeUndefined()
      expect(fs.readFileSync(path.join(dir, "a", "b", "new.txt"), "utf8")).toBe("hello\n")
      fs.writeFileSync(path.join(dir, "old.txt"), "old\n")
      const refused = yield* call("Write", { file_path: "old.txt", content: "new\n" })
      expect(refused).toEqual({
        content: "refused: old.txt has not been read in this session; Read it first, then change it",
        isError: true
      })
      expect(fs.readFileSync(path.join(dir, "old.txt"), "utf8")).toBe("old\n")
      yield* call("Read", { file_path: "old.txt" })
      expect((yield* call("Write", { file_path: "old.txt", content: "new\n" })).isError).toBeUndefined()
      expect(fs.readFileSync(path.join(dir, "old.txt"), "utf8")).toBe("new\n")
    }))

  it.scopedLive("refuses paths outside, through a symbolic link, and hard-linked files; writes nothing there", () =>
    Effect.gen(function*() {
      const outside = yield* tempDir
      const dir = yield* tempDir
      fs.symlinkSync(outside, path.join(dir, "escape"))
      fs.writeFileSync(path.join(outside, "target.txt"), "keep\n")
      fs.symlinkSync(path.join(outside, "target.txt"), path.join(dir, "file-link.txt"))
      fs.linkSync(path.join(outside, "target.txt"), path.join(dir, "hard.txt"))
      const { call } = yield* codingTools(dir)
      for (const file_path of [path.join(outside, "x.txt"), "escape/x.txt", "escape/deep/x.txt", "file-link.txt"]) {
        const refused = yield* call("Write", { file_path, content: "pwned" })
        expect(text(refused)).toMatch(/^refused: .* is outside the working directory/)
      }
      // Read refuses the hard link, so the session never knows it and Write refuses it as unread.
      expect(text(yield* call("Read", { file_path: "hard.txt" }))).toContain("has 2 hard links")
      expect(text(yield* call("Write", { file_path: "hard.txt", content: "pwned" }))).toContain("has not been read")
      expect(fs.readdirSync(outside).sort()).toEqual(["target.txt"])
      expect(fs.readFileSync(path.join(outside, "target.txt"), "utf8")).toBe("keep\n")
    }))
})

describe("Edit", () => {
  it.scopedLive("the read record survives a restart: a reopened session's tools find its Read in the log", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const file = path.join(dir, "code.ts")
      fs.writeFileSync(file, "const a = 1\n")
      const before = yield* codingTools(dir)
      const read = yield* before.run("Read", { file_path: file })
      // The log of session s as the loop writes it: the Read's result with its meta.
      const log = [{
        seq: 7,
        time: 0,
        type: "tool/result",
        data: { turn: 1, step: 1, message: {}, meta: read.meta }
      }] as unknown as ReadonlyArray<SessionEvent>
      // A new process: an empty memory. Without the log, the edit is refused; with it, it runs.
      const forgetful = yield* codingTools(dir)
      expect(text(yield* forgetful.call("Edit", { file_path: file, old_string: "1", new_string: "2" })))
        .toContain("has not been read in this session")
      const asked: Array<string> = []
      const restarted = yield* codingTools(dir, {
        history: (session) => Effect.sync(() => (asked.push(session), session === "s" ? log : []))
      })
      expect(text(yield* restarted.call("Edit", { file_path: file, old_string: "1", new_string: "2" }, "other")))
        .toContain("has not been read in this session")
      expect(yield* restarted.call("Edit", { file_path: file, old_string: "1", new_string: "2" })).toEqual({
        content: `The file ${file} has been updated.`
      })
      expect(fs.readFileSync(file, "utf8")).toBe("const a = 2\n")
      // The log is read once per session; a file changed since the logged read is refused.
      yield* restarted.call("Edit", { file_path: file, old_string: "2", new_string: "3" })
      expect(asked).toEqual(["other", "s"])
      fs.writeFileSync(file, "changed elsewhere\n")
      const third = yield* codingTools(dir, { history: () => Effect.succeed(log) })
      expect(text(yield* third.call("Edit", { file_path: file, old_string: "changed", new_string: "x" })))
        .toContain("changed since it was last read")
    }))

  it.scopedLive("replaces a unique string in a file read in this session", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const file = path.join(dir, "code.ts")
      fs.writeFileSync(file, "const a = 1\nconst b = 1\n")
      const { call } = yield* codingTools(dir)
      expect(yield* call("Edit", { file_path: file, old_string: "a = 1", new_string: "a = 2" })).toEqual({
        content: `refused: ${file} has not been read in this session; Read it first, then change it`,
        isError: true
      })
      yield* call("Read", { file_path: file })
      // Another session's read does not count.
      expect(text(yield* call("Edit", { file_path: file, old_string: "a = 1", new_string: "a = 2" }, "other")))
        .toContain("has not been read")
      expect(yield* call("Edit", { file_path: file, old_string: "= 1", new_string: "= 2" })).toEqual({
        content:
          `old_string occurs 2 times in ${file}; give more context to make it unique, or set replace_all to replace every occurrence`,
        isError: true
      })
      expect(yield* call("Edit", { file_path: file, old_string: "c = 1", new_string: "c = 2" })).toEqual({
        content: `old_string was not found in ${file}; it must match the file's text exactly`,
        isError: true
      })
      expect(yield* call("Edit", { file_path: file, old_string: "a = 1", new_string: "a = $&2" })).toEqual({
        content: `The file ${file} has been updated.`
      })
      expect(fs.readFileSync(file, "utf8")).toBe("const a = $&2\nconst b = 1\n")
      // Its own edit keeps the file known: a second edit needs no new Read.
      expect(yield* call("Edit", { file_path: file, old_string: "1", new_string: "3", replace_all: true })).toEqual({
        content: `The file ${file} has been updated.`
      })
      expect(fs.readFileSync(file, "utf8")).toBe("const a = $&2\nconst b = 3\n")
      // A change made by someone else since is refused.
      fs.writeFileSync(file, "changed elsewhere, longer\n")
      expect(text(yield* call("Edit", { file_path: file, old_string: "changed", new_string: "x" }))).toContain(
        "changed since it was last read"
      )
    }))
})

describe("Glob and Grep", () => {
  it.scopedLive("Glob lists matching files newest first; Grep finds content in its output modes", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      fs.mkdirSync(path.join(dir, "src", "deep"), { recursive: true })
      fs.writeFileSync(path.join(dir, "src", "old.ts"), "export const Alpha = 1\n")
      fs.writeFileSync(path.join(dir, "src", "deep", "new.ts"), "before\nconst alpha = 2\nafter\n")
      fs.writeFileSync(path.join(dir, "readme.md"), "alpha\n")
      fs.utimesSync(path.join(dir, "src", "old.ts"), 1000, 1000)
      const real = fs.realpathSync(dir)
      const { call } = yield* codingTools(dir)
      expect(text(yield* call("Glob", { pattern: "**/*.ts" }))).toBe(`${real}/src/deep/new.ts\n${real}/src/old.ts`)
      expect(text(yield* call("Glob", { pattern: "*.md" }))).toBe(`${real}/readme.md`)
      expect(text(yield* call("Glob", { pattern: "*.py" }))).toBe("No files found")
      expect(text(yield* call("Glob", { pattern: "*", path: "/etc" }))).toMatch(/^refused: \/etc is outside/)

      expect(text(yield* call("Grep", { pattern: "alpha", glob: "*.ts" }))).toBe(
        `Found 1 file\n${real}/src/deep/new.ts`
      )
      expect(text(yield* call("Grep", { pattern: "alpha", "-i": true, glob: "*.ts" }))).toBe(
        `Found 2 files\n${real}/src/deep/new.ts\n${real}/src/old.ts`
      )
      expect(text(yield* call("Grep", { pattern: "alpha", output_mode: "content", path: "src", "-C": 1 }))).toBe(
        [
          `${real}/src/deep/new.ts-1-before`,
          `${real}/src/deep/new.ts:2:const alpha = 2`,
          `${real}/src/deep/new.ts-3-after`
        ].join("\n")
      )
      expect(text(yield* call("Grep", { pattern: "alpha", output_mode: "count", "-i": true, path: "src/old.ts" })))
        .toBe(`${real}/src/old.ts:1`)
      expect(text(yield* call("Grep", { pattern: "nothing-here" }))).toBe("No matches found")
      const bad = yield* call("Grep", { pattern: "(" })
      expect(bad.isError).toBe(true)
      expect(text(bad)).toContain("regex parse error")
      expect(text(yield* call("Grep", { pattern: "root", path: "/etc" }))).toMatch(/^refused: \/etc is outside/)
    }))

  it.scopedLive("Grep cuts long matching lines and leaves out lines too long to hold", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      fs.writeFileSync(path.join(dir, "long.txt"), `${"a".repeat(5000)}needle\n`)
      fs.writeFileSync(path.join(dir, "huge.txt"), `${"b".repeat(3 * 1024 * 1024)}needle`)
      const { call } = yield* codingTools(dir)
      const found = text(yield* call("Grep", { pattern: "needle", output_mode: "content", glob: "long.txt" }))
      expect(found).toBe(`${fs.realpathSync(dir)}/long.txt:1:${"a".repeat(2000)} [line cut: 5006 characters]`)
      const huge = text(yield* call("Grep", { pattern: "needle", output_mode: "content", glob: "huge.txt" }))
      expect(huge).toBe("No matches found\n[1 result line too long to show left out]")
    }))

  it.scopedLive("Grep leaves out hard-linked files and does not follow symbolic links out of the root", () =>
    Effect.gen(function*() {
      const outside = yield* tempDir
      const dir = yield* tempDir
      fs.writeFileSync(path.join(outside, "secret.txt"), "TOKEN=abc\n")
      fs.linkSync(path.join(outside, "secret.txt"), path.join(dir, "hard.txt"))
      fs.symlinkSync(outside, path.join(dir, "escape"))
      fs.writeFileSync(path.join(dir, "mine.txt"), "TOKEN=mine\n")
      const { call } = yield* codingTools(dir)
      const found = text(yield* call("Grep", { pattern: "TOKEN", output_mode: "content" }))
      expect(found).toBe(`${fs.realpathSync(dir)}/mine.txt:1:TOKEN=mine\n[1 file with several hard links left out]`)
      expect(text(yield* call("Grep", { pattern: "TOKEN", path: "escape" }))).toMatch(/^refused: escape is outside/)
    }))
})
