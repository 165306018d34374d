/**
 * Stored events decoded once: a store that decodes its rows with the event Schema marks the
 * decoded values, and opening a session validates them without decoding them again (the fold rules
 * still run on every event). Values from anywhere else are decoded as untrusted input.
 *
 * @since 0.1.0
 */
import type { Schema } from "effect"
import { Either } from "effect"
import type { SessionEvent } from "../../domain/Event.js"
import { ExtensionEvent, SessionEvent as SessionEventSchema } from "../../domain/Event.js"
import { acceptsEventJson } from "../../domain/EventDecoder.js"
import { deepFreeze, freezeCopy, jsonProblem, losslessProblem } from "../../domain/Json.js"

// The Schema of each core type, and of every other type (an extension): a value's `type` picks
// the one union member that can accept it, so a refusal names only that member's problem.
const CORE_MEMBERS = SessionEventSchema.members.filter((member) => member !== ExtensionEvent)
const problemOfType = new Map<string, (input: unknown) => string | undefined>(
  CORE_MEMBERS.map((member) => {
    const type = (member.fields.type as { readonly literals: ReadonlyArray<string> }).literals[0]!
    return [type, losslessProblem(member as Schema.Schema<unknown, unknown>, "event")]
  })
)
const extensionProblem = losslessProblem(ExtensionEvent, "event")
const unionProblem = losslessProblem(SessionEventSchema, "event")

// The reason a value is not an event; undefined when it is one. The same verdict as the union's.
const eventProblem = (input: unknown): string | undefined => {
  const type = typeof input === "object" && input !== null ? (input as { readonly type?: unknown }).type : undefined
  if (typeof type !== "string") return unionProblem(input)
  return (problemOfType.get(type) ?? extensionProblem)(input)
}

// Untrusted input: lossless JSON, the fast check or the Schema, then a frozen copy.
const copying = (input: unknown): Either.Either<SessionEvent, string> => {
  const problem = jsonProblem(input, "event") ?? (acceptsEventJson(input) ? undefined : eventProblem(input))
  return problem === undefined ? Either.right(freezeCopy(input as SessionEvent)) : Either.left(problem)
}

// Returns the object it is given, so that the subclass below installs its private field on it.
class Stamped {
  constructor(target: object) {
    return target
  }
}

// Marks decoded events with a private field: invisible to every reflection (keys, JSON, equality),
// impossible to forge from outside this module, and much cheaper than a WeakSet entry per event.
// The mark goes on before the event is frozen (a parsed value is never frozen or marked yet).
class DecodedMark extends Stamped {
  readonly #decoded = true
  static mark(event: object): void {
    new DecodedMark(event)
  }
  static has(value: object): boolean {
    return #decoded in value
  }
}

/**
 * Decodes an untrusted event with the load Schema into a frozen copy; the reason on failure.
 *
 * @since 0.1.0
 * @category validation
 */
export const decodeUntrusted: (input: unknown) => Either.Either<SessionEvent, string> = copying

/**
 * Why stored JSON text is not an event: the text does not parse, or its value is not an event.
 *
 * @since 0.1.0
 * @category models
 */
export type TextProblem =
  | { readonly _tag: "NotJson"; readonly message: string }
  | { readonly _tag: "NotEvent"; readonly reason: string }

/**
 * Parses a stored event's JSON text and decodes the value, freezing it in place, and marks the
 * result as decoded. Values the hand-written check accepts skip the Schema interpreter; everything
 * else, and every failure, goes through the Schema.
 *
 * @since 0.1.0
 * @category validation
 */
export const decodeOwnedJson = (text: string): Either.Either<SessionEvent, TextProblem> => {
  let input: unknown
  try {
    input = JSON.parse(text)
  } catch (cause) {
    return Either.left({ _tag: "NotJson", message: cause instanceof Error ? cause.message : String(cause) })
  }
  // Nobody else holds `input`, and `JSON.parse` built it (so it is JSON): what the fast check relies on.
  const problem = acceptsEventJson(input) ? undefined : eventProblem(input)
  if (problem !== undefined) return Either.left({ _tag: "NotEvent", reason: problem })
  const event = input as SessionEvent
  DecodedMark.mark(event)
  return Either.right(deepFreeze(event))
}

/**
 * Decodes a stored event value as {@link decodeOwnedJson} decodes its JSON text (the same checks,
 * the same reasons, a frozen and marked copy), for a store that keeps values instead of text; an
 * event already decoded is returned as it is.
 *
 * @since 0.1.0
 * @category validation
 */
export const decodeStoredValue = (input: unknown): Either.Either<SessionEvent, TextProblem> => {
  if (isDecoded(input)) return Either.right(input)
  const notJson = jsonProblem(input, "event")
  if (notJson !== undefined) return Either.left({ _tag: "NotEvent", reason: notJson })
  // A lossless JSON value: its text parses back to an equal value that nobody else holds.
  return decodeOwnedJson(JSON.stringify(input))
}

/**
 * Whether {@link decodeOwnedJson} produced `input` (then it is a frozen, valid event).
 *
 * @since 0.1.0
 * @category validation
 */
export const isDecoded = (input: unknown): input is SessionEvent =>
  typeof input === "object" && input !== null && DecodedMark.has(input)

/**
 * The event itself when {@link decodeOwnedJson} produced it, else its decode as untrusted input.
 *
 * @since 0.1.0
 * @category validation
 */
export const decodeStored = (input: unknown): Either.Either<SessionEvent, string> =>
  isDecoded(input) ? Either.right(input) : copying(input)
