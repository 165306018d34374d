import * as NodeContext from "@effect/platform-node/NodeContext"
import { describe, expect, it } from "@effect/vitest"
import { Duration, Effect, Fiber } from "effect"
import * as fs from "node:fs"
import * as net from "node:net"
import * as path from "node:path"
import { make, MAX_FILE_BYTES } from "../../src/cli/BuiltinTools.js"
import { SessionId } from "../../src/domain/Ids.js"
import type { ToolOutput } from "../../src/services/Tools.js"
import { fifo, tempDir } from "./harness.js"

const context = {
  sessionId: SessionId.make("b"),
  turn: 1,
  step: 1,
  callId: "c",
  deferContext: () => Effect.void
}

/** Runs the `read_file` tool of the built-in tools over `root` on `file`. */
const readFile = (root: string, file: string): Effect.Effect<ToolOutput | string, unknown> =>
  make(root).pipe(
    Effect.flatMap((tools) => tools.find((tool) => tool.name === "read_file")!.execute({ path: file }, context)),
    Effect.provide(NodeContext.layer)
  )

/** The number of file descriptors this process has open. */
const openDescriptors = () => fs.readdirSync("/proc/self/fd").length

// Each case must answer well within this, however the file is made: the old reader hung on a FIFO
// without bound and took seconds over a large sparse file.
const AT_ONCE = Duration.seconds(2)
const atOnce = <A, E>(effect: Effect.Effect<A, E>) =>
  Effect.timeoutFail(effect, { duration: AT_ONCE, onTimeout: () => "did not answer at once" as const })

describe("read_file", () => {
  it.scopedLive("a FIFO is refused at once, without waiting for a writer", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      yield* fifo(dir, "pipe")
      expect(yield* atOnce(readFile(dir, "pipe"))).toEqual({
        content: "refused: pipe is a FIFO (named pipe), not a regular file; read_file reads only regular files",
        isError: true
      })
    }))

  it.scopedLive("a socket and a character device are refused; nothing is read from them", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const server = net.createServer()
      yield* Effect.acquireRelease(
        Effect.async<void>((resume) => void server.listen(path.join(dir, "sock"), () => resume(Effect.void))),
        () => Effect.sync(() => server.close())
      )
      expect(yield* atOnce(readFile(dir, "sock"))).toEqual({
        content: "refused: sock is a socket, not a regular file; read_file reads only regular files",
        isError: true
      })
      // /dev/zero inside its own root: an endless device, refused before a byte is read.
      expect(yield* atOnce(readFile("/dev", "zero"))).toEqual({
        content: "refused: zero is a character device, not a regular file; read_file reads only regular files",
        isError: true
      })
      expect(yield* readFile(dir, ".")).toEqual({ content: ". is a directory; use list_dir", isError: true })
    }))

  it.scopedLive("a file with a second hard link is refused, whether the other link is inside or outside", () =>
    Effect.gen(function*() {
      const outside = yield* tempDir
      const dir = yield* tempDir
      fs.writeFileSync(path.join(outside, "secret.txt"), "outside the box\n")
      fs.linkSync(path.join(outside, "secret.txt"), path.join(dir, "link.txt"))
      const refused = yield* readFile(dir, "link.txt")
      expect(refused).toEqual({
        content: "refused: link.txt has 2 hard links; read_file reads only files with one link, " +
          "since another link may be outside the working directory",
        isError: true
      })
      // Once the outside name is gone, the file has one link and reads as usual.
      fs.unlinkSync(path.join(outside, "secret.txt"))
      expect(yield* readFile(dir, "link.txt")).toBe("outside the box\n")
    }))

  it.scopedLive("a 1.5 GB sparse file answers at once with its first bytes and a note", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const file = path.join(dir, "big.bin")
      fs.writeFileSync(file, "head\n")
      fs.truncateSync(file, 1536 * 1024 * 1024)
      const started = Date.now()
      const text = yield* atOnce(readFile(dir, "big.bin"))
      expect(Date.now() - started).toBeLessThan(1000)
      expect(text).toBe(
        `head\n${"\0".repeat(MAX_FILE_BYTES - 5)}\n[cut: big.bin has ${1536 * 1024 * 1024} bytes; the first ${MAX_FILE_BYTES} are shown]`
      )
    }))

  it.scopedLive("a cut never splits a UTF-8 character; a file of exactly the limit is whole", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      // "€" is 3 bytes; the limit falls after its first byte, then after its second.
      for (const before of [MAX_FILE_BYTES - 1, MAX_FILE_BYTES - 2]) {
        fs.writeFileSync(path.join(dir, "euro.txt"), `${"a".repeat(before)}€ and more`)
        expect(yield* readFile(dir, "euro.txt")).toBe(
          `${"a".repeat(before)}\n[cut: euro.txt has ${before + 3 + 9} bytes; the first ${before} are shown]`
        )
      }
      // A 4-byte character that ends exactly at the limit is kept.
      fs.writeFileSync(path.join(dir, "emoji.txt"), `${"a".repeat(MAX_FILE_BYTES - 4)}😀z`)
      expect(yield* readFile(dir, "emoji.txt")).toBe(
        `${"a".repeat(MAX_FILE_BYTES - 4)}😀\n[cut: emoji.txt has ${MAX_FILE_BYTES + 1} bytes; the first ${MAX_FILE_BYTES} are shown]`
      )
      fs.writeFileSync(path.join(dir, "exact.txt"), "é".repeat(MAX_FILE_BYTES / 2))
      expect(yield* readFile(dir, "exact.txt")).toBe("é".repeat(MAX_FILE_BYTES / 2))
    }))

  it.scopedLive("an interrupted read returns at once and leaves no descriptor open (the handle closes when its read comes back)", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const file = path.join(dir, "big.bin")
      fs.writeFileSync(file, "")
      fs.truncateSync(file, 1024 * 1024 * 1024)
      const before = openDescriptors()
      for (let i = 0; i < 20; i++) {
        const fiber = yield* Effect.fork(readFile(dir, "big.bin"))
        yield* Effect.sleep(Duration.millis(i % 5))
        yield* atOnce(Fiber.interrupt(fiber))
      }
      // A handle whose read was still running is closed when the read comes back.
      yield* Effect.sleep(Duration.millis(200))
      expect(openDescriptors()).toBe(before)
    }))
})
