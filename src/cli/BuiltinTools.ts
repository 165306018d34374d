/**
 * The chat's built-in tools: `read_file` and `list_dir`, confined to one root directory (the
 * working directory), `clock`, and `wait`, which keeps a turn running for a while (so steering a
 * running turn can be tried out). A path that leaves the root, directly or through a symbolic
 * link, is refused with an error result that says so; nothing outside the root is read.
 *
 * `read_file` reads only regular files: a FIFO, a device, a socket or a directory is refused
 * without being read (the file is opened non-blocking and checked again on the open descriptor, so
 * a FIFO swapped in meanwhile cannot hang the call). A file with more than one hard link is refused:
 * its other links may lie outside the root, and a link cannot be traced back to its other names.
 * At most {@link MAX_FILE_BYTES} bytes (and one more, to know that there are more) are read, however
 * large the file; a cut falls before a UTF-8 character it would split. A cancel interrupts the read.
 *
 * @since 0.1.0
 */
import { FileSystem, Path } from "@effect/platform"
import { DateTime, Duration, Effect, Exit, Schema } from "effect"
import type { Stats } from "node:fs"
import { constants as FsConstants } from "node:fs"
import type { FileHandle } from "node:fs/promises"
import * as NodeFs from "node:fs/promises"
import type { ToolDefinition, ToolOutput } from "../services/Tools.js"
import { Tool } from "../services/Tools.js"
import { describeFileError } from "./FileErrors.js"

/**
 * The names of the built-in tools.
 *
 * @since 0.1.0
 * @category constants
 */
export const NAMES: ReadonlyArray<string> = ["clock", "list_dir", "read_file", "wait"]

/**
 * The longest wait the `wait` tool performs, in milliseconds; a longer request is cut to it.
 *
 * @since 0.1.0
 * @category constants
 */
export const MAX_WAIT_MS = 10_000

/**
 * The most bytes `read_file` shows of a file; a longer file is cut, with a note saying so.
 *
 * @since 0.1.0
 * @category constants
 */
export const MAX_FILE_BYTES = 64 * 1024

const refuse = (content: string): ToolOutput => ({ content, isError: true })

// O_NONBLOCK: opening a FIFO returns at once instead of waiting for a writer (a blocked open holds a
// libuv thread that even process.exit waits for). O_NOFOLLOW: the last component cannot be a
// symbolic link swapped in after the real path was checked.
const OPEN_FLAGS = FsConstants.O_RDONLY | FsConstants.O_NONBLOCK | FsConstants.O_NOFOLLOW

/** What a file that is not a regular file is, in words; `undefined` for a regular file. */
const specialKind = (stats: Stats): string | undefined =>
  stats.isFile()
    ? undefined
    : stats.isDirectory()
    ? "a directory"
    : stats.isFIFO()
    ? "a FIFO (named pipe)"
    : stats.isSocket()
    ? "a socket"
    : stats.isCharacterDevice()
    ? "a character device"
    : stats.isBlockDevice()
    ? "a block device"
    : "not a regular file"

/**
 * The length of the longest prefix of `bytes[0, end)` that does not end inside a UTF-8 character:
 * `end`, or less when the last character's lead byte announces more bytes than are there.
 */
const utf8Boundary = (bytes: Uint8Array, end: number): number => {
  let lead = end
  while (lead > 0 && end - lead < 3 && (bytes[lead - 1]! & 0xc0) === 0x80) lead--
  if (lead === 0) return end
  const first = bytes[lead - 1]!
  const length = first >= 0xf0 ? 4 : first >= 0xe0 ? 3 : first >= 0xc0 ? 2 : 1
  return end - lead + 1 < length ? lead - 1 : end
}

/** The first `limit + 1` bytes of an open regular file (fewer when it is shorter). */
const readPrefix = (handle: FileHandle, limit: number, fail: (error: unknown) => ToolOutput) =>
  Effect.gen(function*() {
    const buffer = new Uint8Array(limit + 1)
    let filled = 0
    while (filled < buffer.length) {
      // Interruptible: a cancel returns at once; the handle is closed when the read comes back.
      const { bytesRead } = yield* Effect.tryPromise({
        try: () => handle.read(buffer, filled, buffer.length - filled, filled),
        catch: fail
      })
      if (bytesRead === 0) break
      filled += bytesRead
    }
    return buffer.subarray(0, filled)
  })

/**
 * Opens `file` (a real path) non-blocking, checks on the open descriptor that it is a regular file
 * with one link, and returns the text of its first `limit` bytes (with a note when there are more),
 * or the refusal.
 */
const readRegularFile = (file: string, shown: string, limit: number): Effect.Effect<string, ToolOutput> =>
  Effect.acquireUseRelease(
    Effect.tryPromise({
      try: () => NodeFs.open(file, OPEN_FLAGS),
      catch: (error) => refuse(`cannot open ${shown}: ${describeFileError(error)}`)
    }),
    (handle) =>
      Effect.gen(function*() {
        const failed = (what: string) => (error: unknown) => refuse(`cannot ${what} ${shown}: ${describeFileError(error)}`)
        const stats = yield* Effect.tryPromise({ try: () => handle.stat(), catch: failed("stat") })
        const kind = specialKind(stats)
        if (kind !== undefined) return yield* Effect.fail(refuseSpecial(shown, kind))
        if (stats.nlink > 1) return yield* Effect.fail(refuseLinked(shown, stats.nlink))
        const bytes = yield* readPrefix(handle, limit, failed("read"))
        const decoder = new TextDecoder("utf-8")
        if (bytes.length <= limit) return decoder.decode(bytes)
        const cut = utf8Boundary(bytes, limit)
        const size = Math.max(stats.size, bytes.length)
        return `${decoder.decode(bytes.subarray(0, cut))}\n[cut: ${shown} has ${size} bytes; the first ${cut} are shown]`
      }),
    (handle, exit) =>
      // FileHandle.close waits for a read still running; after a cancel nobody waits for it.
      Exit.isInterrupted(exit)
        ? Effect.sync(() => void handle.close().catch(() => undefined))
        : Effect.ignore(Effect.tryPromise(() => handle.close()))
  )

const refuseSpecial = (shown: string, kind: string): ToolOutput =>
  refuse(
    kind === "a directory"
      ? `${shown} is a directory; use list_dir`
      : `refused: ${shown} is ${kind}, not a regular file; read_file reads only regular files`
  )

const refuseLinked = (shown: string, links: number): ToolOutput =>
  refuse(
    `refused: ${shown} has ${links} hard links; read_file reads only files with one link, ` +
      "since another link may be outside the working directory"
  )

/**
 * The `wait` tool: sleeps `ms` milliseconds (a number or a numeric string, at most
 * {@link MAX_WAIT_MS}) on the clock, so a cancel interrupts it.
 *
 * @since 0.1.0
 * @category constructors
 */
export const wait = Tool.make("wait", {
  description: `Waits the given number of milliseconds (at most ${MAX_WAIT_MS}), then returns. ` +
    "Use it only when asked to wait; it does nothing else.",
  parameters: Schema.Struct({ ms: Schema.Union(Schema.Number, Schema.NumberFromString) }),
  mode: "parallel",
  execute: ({ ms }) => {
    if (!Number.isFinite(ms) || ms < 0) {
      return Effect.succeed(refuse(`cannot wait ${ms} ms: ms must be a number from 0 to ${MAX_WAIT_MS}`))
    }
    const waited = Math.min(Math.round(ms), MAX_WAIT_MS)
    return Effect.as(
      Effect.sleep(Duration.millis(waited)),
      waited < ms ? `waited ${waited} ms (the longest wait; ${ms} ms were asked for)` : `waited ${waited} ms`
    )
  }
})

/**
 * The built-in tools over `root`.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (
  root: string
): Effect.Effect<ReadonlyArray<ToolDefinition<any>>, never, FileSystem.FileSystem | Path.Path> =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    const realRoot = yield* fs.realPath(root).pipe(Effect.orElseSucceed(() => path.resolve(root)))

    const inside = (candidate: string): boolean => {
      const relative = path.relative(realRoot, candidate)
      return relative === "" || (!path.isAbsolute(relative) && relative !== ".." && !relative.startsWith(`..${path.sep}`))
    }

    /** The real path of `requested` (relative to the root), or the refusal to return instead. */
    const confine = (requested: string): Effect.Effect<string, ToolOutput> =>
      Effect.gen(function*() {
        const resolved = path.resolve(realRoot, requested)
        const outside = refuse(`refused: ${requested} is outside the working directory (${realRoot}); only paths inside it can be read`)
        if (!inside(resolved)) return yield* Effect.fail(outside)
        const real = yield* fs.realPath(resolved).pipe(
          Effect.mapError((error) => refuse(`cannot open ${requested}: ${describeFileError(error)}`))
        )
        // A symbolic link inside the root may point outside it.
        if (!inside(real)) return yield* Effect.fail(outside)
        return real
      })

    const readFile = Tool.make("read_file", {
      description: `Reads a UTF-8 text file inside the working directory (at most the first ${MAX_FILE_BYTES} bytes). ` +
        "Only regular files with a single hard link are read.",
      parameters: Schema.Struct({ path: Schema.String }),
      mode: "parallel",
      execute: ({ path: requested }) =>
        Effect.gen(function*() {
          const real = yield* confine(requested)
          // A FIFO, device or socket is refused before it is opened; the open descriptor is checked again.
          const stats = yield* Effect.tryPromise({
            try: () => NodeFs.stat(real),
            catch: (error) => refuse(`cannot stat ${requested}: ${describeFileError(error)}`)
          })
          const kind = specialKind(stats)
          if (kind !== undefined) return yield* Effect.fail(refuseSpecial(requested, kind))
          return yield* readRegularFile(real, requested, MAX_FILE_BYTES)
        }).pipe(Effect.merge)
    })

    const listDir = Tool.make("list_dir", {
      description: "Lists a directory inside the working directory (default: the working directory itself).",
      parameters: Schema.Struct({ path: Schema.optional(Schema.String) }),
      mode: "parallel",
      execute: ({ path: requested }) =>
        Effect.gen(function*() {
          const shown = requested ?? "."
          const real = yield* confine(shown)
          const names = yield* fs.readDirectory(real).pipe(
            Effect.mapError((error) => refuse(`cannot list ${shown}: ${describeFileError(error)}`))
          )
          const entries = yield* Effect.forEach([...names].sort(), (name) =>
            fs.stat(path.join(real, name)).pipe(
              Effect.map((info) => (info.type === "Directory" ? `${name}/` : name)),
              Effect.orElseSucceed(() => name)
            ))
          return entries.length === 0 ? `${shown} is empty` : entries.join("\n")
        }).pipe(Effect.merge)
    })

    const clock = Tool.make("clock", {
      description: "The current date and time (UTC, ISO 8601).",
      parameters: Schema.Struct({}),
      mode: "parallel",
      execute: () => Effect.map(DateTime.now, DateTime.formatIso)
    })

    return [clock, listDir, readFile, wait]
  })
