/**
 * Stored events decoded once: a store that decodes its rows with the event Schema marks the
 * decoded values, and opening a session validates them without decoding them again (the fold rules
 * still run on every event). Values from anywhere else are decoded as untrusted input.
 *
 * @since 0.1.0
 */
import { Either } from "effect"
import type { SessionEvent } from "../domain/Event.js"
import { SessionEvent as SessionEventSchema } from "../domain/Event.js"
import { losslessDecoder } from "../domain/Json.js"

const copying = losslessDecoder(SessionEventSchema, "event")
const inPlace = losslessDecoder(SessionEventSchema, "event", { owned: true })
const decoded = new WeakSet<object>()

/**
 * Decodes an untrusted event with the load Schema into a frozen copy; the reason on failure.
 *
 * @since 0.1.0
 * @category validation
 */
export const decodeUntrusted: (input: unknown) => Either.Either<SessionEvent, string> = copying

/**
 * Decodes a value the caller owns (freshly parsed JSON), freezing it in place, and marks the
 * result as decoded.
 *
 * @since 0.1.0
 * @category validation
 */
export const decodeOwned = (input: unknown): Either.Either<SessionEvent, string> => {
  const result = inPlace(input)
  if (Either.isRight(result)) decoded.add(result.right)
  return result
}

/**
 * The event itself when {@link decodeOwned} produced it, else its decode as untrusted input.
 *
 * @since 0.1.0
 * @category validation
 */
export const decodeStored = (input: unknown): Either.Either<SessionEvent, string> =>
  typeof input === "object" && input !== null && decoded.has(input) ? Either.right(input as SessionEvent) : copying(input)
