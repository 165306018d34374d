/**
 * Reading and writing one file safely for the tools. Only regular files are read: a FIFO, a device,
 * a socket or a directory is refused without being read (the file is opened non-blocking and checked
 * again on the open descriptor, so a FIFO swapped in meanwhile cannot hang the call). A file with
 * more than one hard link is refused: its other links may lie outside the roots, and a link cannot
 * be traced back to its other names. At most a given number of bytes (and one more, to know that
 * there are more) are read, however large the file. A cancel interrupts the read.
 *
 * @since 0.1.0
 */
import { Effect, Exit } from "effect"
import type { Stats } from "node:fs"
import { constants as FsConstants } from "node:fs"
import type { FileHandle } from "node:fs/promises"
import * as NodeFs from "node:fs/promises"
import type { ToolOutput } from "../../domain/Tool.js"
import { refuse } from "./Confine.js"
import { describeFileError } from "./FileErrors.js"

// O_NONBLOCK: opening a FIFO returns at once instead of waiting for a writer (a blocked open holds a
// libuv thread that even process.exit waits for). O_NOFOLLOW: the last component cannot be a
// symbolic link swapped in after the real path was checked.
const READ_FLAGS = FsConstants.O_RDONLY | FsConstants.O_NONBLOCK | FsConstants.O_NOFOLLOW
// Writing opens without O_TRUNC: the descriptor is checked before anything changes.
const WRITE_FLAGS = FsConstants.O_WRONLY | FsConstants.O_CREAT | FsConstants.O_NOFOLLOW | FsConstants.O_NONBLOCK

/**
 * What a file that is not a regular file is, in words; `undefined` for a regular file.
 *
 * @since 0.1.0
 * @category formatting
 */
export const specialKind = (stats: Stats): string | undefined =>
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
 *
 * @since 0.1.0
 * @category utils
 */
export const utf8Boundary = (bytes: Uint8Array, end: number): number => {
  let lead = end
  while (lead > 0 && end - lead < 3 && (bytes[lead - 1]! & 0xc0) === 0x80) lead--
  if (lead === 0) return end
  const first = bytes[lead - 1]!
  const length = first >= 0xf0 ? 4 : first >= 0xe0 ? 3 : first >= 0xc0 ? 2 : 1
  return end - lead + 1 < length ? lead - 1 : end
}

/**
 * Whether `bytes` look like a binary file: a NUL byte among the first 8 KiB, or text that is not
 * valid UTF-8 there.
 *
 * @since 0.1.0
 * @category predicates
 */
export const looksBinary = (bytes: Uint8Array): boolean => {
  const head = bytes.subarray(0, Math.min(bytes.length, 8192))
  if (head.includes(0)) return true
  try {
    new TextDecoder("utf-8", { fatal: true }).decode(head.subarray(0, utf8Boundary(head, head.length)))
    return false
  } catch {
    return true
  }
}

/**
 * The refusal of a file that is not regular, worded for `tool`.
 *
 * @since 0.1.0
 * @category constructors
 */
export const refuseSpecial = (shown: string, kind: string, tool: string, listTool: string): ToolOutput =>
  refuse(
    kind === "a directory"
      ? `${shown} is a directory; use ${listTool}`
      : `refused: ${shown} is ${kind}, not a regular file; ${tool} reads only regular files`
  )

/**
 * The refusal of a file with several hard links, worded for `tool`.
 *
 * @since 0.1.0
 * @category constructors
 */
export const refuseLinked = (shown: string, links: number, tool: string): ToolOutput =>
  refuse(
    `refused: ${shown} has ${links} hard links; ${tool} uses only files with one link, ` +
      "since another link may be outside the working directory"
  )

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
 * What was read of a file: its first bytes (at most `limit + 1`) and its stats.
 *
 * @since 0.1.0
 * @category models
 */
export interface FilePrefix {
  readonly bytes: Uint8Array
  readonly stats: Stats
}

/** Closes a handle; after a cancel nobody waits for a read still running. */
const close = (handle: FileHandle, exit: Exit.Exit<unknown, unknown>) =>
  Exit.isInterrupted(exit)
    ? Effect.sync(() => void handle.close().catch(() => undefined))
    : Effect.ignore(Effect.tryPromise(() => handle.close()))

/**
 * Opens `file` (a real path) non-blocking, checks on the open descriptor that it is a regular file
 * with one link, and returns its first `limit + 1` bytes with its stats, or the refusal.
 *
 * @since 0.1.0
 * @category constructors
 */
export const readRegularFile = (
  file: string,
  shown: string,
  limit: number,
  tool: { readonly name: string; readonly list: string }
): Effect.Effect<FilePrefix, ToolOutput> =>
  Effect.gen(function*() {
    // A FIFO, device or socket is refused before it is opened; the open descriptor is checked again.
    const before = yield* Effect.tryPromise({
      try: () => NodeFs.stat(file),
      catch: (error) => refuse(`cannot stat ${shown}: ${describeFileError(error)}`)
    })
    const kindBefore = specialKind(before)
    if (kindBefore !== undefined) return yield* Effect.fail(refuseSpecial(shown, kindBefore, tool.name, tool.list))
    return yield* Effect.acquireUseRelease(
      Effect.tryPromise({
        try: () => NodeFs.open(file, READ_FLAGS),
        catch: (error) => refuse(`cannot open ${shown}: ${describeFileError(error)}`)
      }),
      (handle) =>
        Effect.gen(function*() {
          const failed = (what: string) => (error: unknown) =>
            refuse(`cannot ${what} ${shown}: ${describeFileError(error)}`)
          const stats = yield* Effect.tryPromise({ try: () => handle.stat(), catch: failed("stat") })
          const kind = specialKind(stats)
          if (kind !== undefined) return yield* Effect.fail(refuseSpecial(shown, kind, tool.name, tool.list))
          if (stats.nlink > 1) return yield* Effect.fail(refuseLinked(shown, stats.nlink, tool.name))
          const bytes = yield* readPrefix(handle, limit, failed("read"))
          return { bytes, stats }
        }),
      close
    )
  })

/**
 * Replaces (or creates) the regular file `file` with `content`, without following a symbolic link
 * in its last component and refusing a file with several hard links or one that is not regular;
 * returns the file's stats after the write.
 *
 * @since 0.1.0
 * @category constructors
 */
export const writeRegularFile = (
  file: string,
  shown: string,
  content: string,
  tool: string
): Effect.Effect<Stats, ToolOutput> =>
  Effect.acquireUseRelease(
    Effect.tryPromise({
      try: () => NodeFs.open(file, WRITE_FLAGS, 0o666),
      catch: (error) => refuse(`cannot write ${shown}: ${describeFileError(error)}`)
    }),
    (handle) =>
      Effect.gen(function*() {
        const failed = (error: unknown) => refuse(`cannot write ${shown}: ${describeFileError(error)}`)
        const stats = yield* Effect.tryPromise({ try: () => handle.stat(), catch: failed })
        const kind = specialKind(stats)
        if (kind !== undefined) {
          return yield* Effect.fail(
            refuse(`refused: ${shown} is ${kind}, not a regular file; ${tool} writes only regular files`)
          )
        }
        if (stats.nlink > 1) return yield* Effect.fail(refuseLinked(shown, stats.nlink, tool))
        yield* Effect.tryPromise({ try: () => handle.truncate(0), catch: failed })
        yield* Effect.tryPromise({ try: () => handle.writeFile(content, "utf8"), catch: failed })
        return yield* Effect.tryPromise({ try: () => handle.stat(), catch: failed })
      }).pipe(Effect.uninterruptible),
    close
  )
