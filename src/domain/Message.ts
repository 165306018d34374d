/**
 * Constructors and validation of identified, immutable messages.
 *
 * @since 0.1.0
 */
import { Effect, Either } from "effect"
import { InvalidEvent } from "./Errors.js"
import { acceptsUserMessageJson } from "./EventDecoder.js"
import { REPAIR_ID_PREFIX, RESERVED_ID_REASON } from "./Ids.js"
import { jsonProblem, losslessDecoder } from "./Json.js"
import type { ImageBlock, MessageSource, TextBlock } from "./Values.js"
import { UserMessage } from "./Values.js"

const decodeUserMessage = losslessDecoder(UserMessage, "message", { accepts: acceptsUserMessageJson })

// The copies this module returned: deep-frozen, so still valid; one passed in again is returned as it is.
const validated = new WeakSet<object>()

/**
 * Validates an unknown value as a `UserMessage` with the load Schema (D6) and returns a deep-frozen
 * copy, or the reason it is invalid. A message this function returned is returned again as it is.
 *
 * @since 0.1.0
 * @category validation
 */
export const validateUserMessage = (input: unknown): Either.Either<UserMessage, string> => {
  if (typeof input === "object" && input !== null && validated.has(input)) return Either.right(input as UserMessage)
  const result = decodeUserMessage(input)
  if (Either.isRight(result)) validated.add(result.right)
  return result
}

/**
 * Validates a caller's message for an inbox operation: the load Schema plus the reserved-id rule.
 *
 * @since 0.1.0
 * @category validation
 */
export const acceptCallerMessage = (input: unknown): Either.Either<UserMessage, InvalidEvent> => {
  const validated = validateUserMessage(input)
  if (Either.isLeft(validated)) return Either.left(new InvalidEvent({ type: "user/message", reason: validated.left }))
  const message = validated.right
  return message.id.startsWith(REPAIR_ID_PREFIX)
    ? Either.left(new InvalidEvent({ type: "user/message", reason: RESERVED_ID_REASON }))
    : Either.right(message)
}

/**
 * Input of {@link userMessage}.
 *
 * @since 0.1.0
 * @category models
 */
export interface UserMessageInput {
  readonly id: string
  readonly text?: string
  readonly content?: ReadonlyArray<TextBlock | ImageBlock>
  readonly source?: MessageSource
}

/**
 * Creates an identified, deep-frozen user message; throws `InvalidEvent` on invalid input.
 *
 * @since 0.1.0
 * @category constructors
 */
export const userMessage = (input: UserMessageInput): UserMessage => {
  const fields = readInput(input)
  if (Either.isLeft(fields)) throw new InvalidEvent({ type: "user/message", reason: fields.left })
  const { content, id, source, text } = fields.right
  const hasText = text !== undefined
  const hasContent = content !== undefined
  if (hasText === hasContent) {
    throw new InvalidEvent({ type: "user/message", reason: "exactly one of text and content must be given" })
  }
  const candidate = {
    id,
    role: "user",
    content: hasText ? [{ type: "text", text }] : content,
    source: source ?? { kind: "user" }
  }
  return Either.getOrThrowWith(
    validateUserMessage(candidate),
    (reason) => new InvalidEvent({ type: "user/message", reason })
  )
}

// The input's fields, each read once (a getter or `Proxy` trap may throw: that is invalid input).
const readInput = (input: UserMessageInput): Either.Either<Record<keyof UserMessageInput, unknown>, string> => {
  if (typeof input !== "object" || input === null) {
    return Either.left(
      `input: expected an object with id and text or content, found ${input === null ? "null" : typeof input}`
    )
  }
  try {
    return Either.right({ id: input.id, text: input.text, content: input.content, source: input.source })
  } catch {
    const problem = jsonProblem(input, "input")
    return Either.left(problem ?? "input: cannot be read")
  }
}

/**
 * Creates a user message with a fresh UUID v4 id.
 *
 * @since 0.1.0
 * @category constructors
 */
export const newUserMessage = (input: Omit<UserMessageInput, "id">): Effect.Effect<UserMessage> =>
  Effect.sync(() => userMessage({ ...input, id: crypto.randomUUID() }))
