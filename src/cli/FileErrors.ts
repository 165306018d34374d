/**
 * File system failures as the CLI prints them: the kind of failure in words, not the driver's
 * message with the syscall and the absolute path.
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

/**
 * A file system failure in a few words; any other error's message.
 *
 * @since 0.1.0
 * @category formatting
 */
export const describeFileError = (error: unknown): string => {
  if (PlatformError.isPlatformError(error) && error._tag === "SystemError") {
    return SYSTEM_REASONS[error.reason] ?? error.description ?? error.reason
  }
  return typeof error === "object" && error !== null && "message" in error && typeof error.message === "string"
    ? error.message
    : String(error)
}
