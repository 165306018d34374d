/**
 * The check every store applies to a stored session header on `load` (SPEC 6.1, 2.9): a newer or
 * older format version is `UnsupportedLogVersion`, checked before the shape (a newer format may
 * differ); any other problem is `MalformedLog`.
 *
 * @since 0.1.0
 */
import { Either } from "effect"
import { MalformedLog, UnsupportedLogVersion } from "../../domain/Errors.js"
import type { SessionHeader } from "../../domain/Event.js"
import { LOG_FORMAT_VERSION, SessionHeader as SessionHeaderSchema } from "../../domain/Event.js"
import type { SessionId } from "../../domain/Ids.js"
import { losslessDecoder } from "../../domain/Json.js"

/**
 * Decodes a header value into a frozen copy; the reason on failure.
 *
 * @since 0.1.0
 * @category validation
 */
export const decodeHeader: (input: unknown) => Either.Either<SessionHeader, string> = losslessDecoder(
  SessionHeaderSchema,
  "header"
)

/**
 * The header stored for session `id`, checked: its version, then its shape, then that it names `id`.
 *
 * @since 0.1.0
 * @category validation
 */
export const checkStoredHeader = (
  id: SessionId,
  value: unknown
): Either.Either<SessionHeader, MalformedLog | UnsupportedLogVersion> => {
  const version = typeof value === "object" && value !== null
    ? (value as { readonly formatVersion?: unknown }).formatVersion
    : undefined
  if (typeof version === "number" && version !== LOG_FORMAT_VERSION) {
    return Either.left(new UnsupportedLogVersion({ sessionId: id, found: version, supported: LOG_FORMAT_VERSION }))
  }
  const header = decodeHeader(value)
  if (Either.isLeft(header)) return Either.left(new MalformedLog({ sessionId: id, reason: header.left }))
  if (header.right.sessionId !== id) {
    return Either.left(
      new MalformedLog({ sessionId: id, reason: `the stored header names session ${header.right.sessionId}` })
    )
  }
  return Either.right(header.right)
}
