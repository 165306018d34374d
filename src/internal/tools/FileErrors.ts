/**
 * File system failures as the CLI prints them: the kind of failure in words, not the driver's
 * message with the syscall and the absolute path. Both @effect/platform's `SystemError` and a
 * Node.js error with an errno `code` (from `node:fs` directly) are understood.
 *
 * @since 0.1.0
 */
import * as PlatformError from "@effect/platform/Error"

const SYSTEM_REASONS: Partial<Record<PlatformError.SystemErrorReason, string>> = {
  NotFound: "no such file or directory",
  PermissionDenied: "permission denied",
  AlreadyExists: "a file of that name already exists",
  BadResource: "a part of the path is not a directory, or it loops",
  Busy: "the file is busy"
}

const ERRNO_REASONS: Readonly<Record<string, string>> = {
  ENOENT: "no such file or directory",
  EACCES: "permission denied",
  EPERM: "permission denied",
  EEXIST: "a file of that name already exists",
  ENOTDIR: "a part of the path is not a directory, or it loops",
  ELOOP: "a part of the path is not a directory, or it loops",
  EISDIR: "it is a directory",
  EBUSY: "the file is busy",
  ENXIO: "no device or reader behind it (a socket, or a device that is not there)",
  ENAMETOOLONG: "the path is too long",
  EMFILE: "too many open files",
  ENFILE: "too many open files",
  EIO: "an input/output error"
}

/** The errno code (`ENOENT`, ...) of a Node.js error, or of the error it wraps. */
const errnoCode = (error: unknown): string | undefined => {
  for (let value = error, depth = 0; typeof value === "object" && value !== null && depth < 2; depth++) {
    const code = (value as { readonly code?: unknown }).code
    if (typeof code === "string" && code.startsWith("E")) return code
    value = (value as { readonly cause?: unknown }).cause
  }
  return undefined
}

/**
 * A file system failure in a few words; any other error's message.
 *
 * @since 0.1.0
 * @category formatting
 */
export const describeFileError = (error: unknown): string => {
  const code = errnoCode(error)
  const byCode = code === undefined ? undefined : ERRNO_REASONS[code]
  if (PlatformError.isPlatformError(error) && error._tag === "SystemError") {
    return SYSTEM_REASONS[error.reason] ?? byCode ?? error.description ?? error.reason
  }
  if (byCode !== undefined) return byCode
  return typeof error === "object" && error !== null && "message" in error && typeof error.message === "string"
    ? error.message
    : String(error)
}
