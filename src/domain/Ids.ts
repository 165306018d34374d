/**
 * Branded identifiers of sessions and messages.
 *
 * @since 0.1.0
 */
import { Schema } from "effect"

/**
 * Identifies a message; fixed when the message value is created.
 *
 * @since 0.1.0
 * @category schemas
 */
export const MessageId = Schema.NonEmptyString.pipe(Schema.brand("MessageId"))

/**
 * A message identifier.
 *
 * @since 0.1.0
 * @category models
 */
export type MessageId = typeof MessageId.Type

/**
 * Identifies a session and the driver that owns it.
 *
 * @since 0.1.0
 * @category schemas
 */
export const SessionId = Schema.NonEmptyString.pipe(Schema.brand("SessionId"))

/**
 * A session identifier.
 *
 * @since 0.1.0
 * @category models
 */
export type SessionId = typeof SessionId.Type

/**
 * Prefix of the ids that open-turn repair gives its synthetic tool results; reserved.
 *
 * @since 0.1.0
 * @category constants
 */
export const REPAIR_ID_PREFIX = "interrupted-tool-result-"

/**
 * Why a caller's message with an id starting with {@link REPAIR_ID_PREFIX} is refused.
 *
 * @since 0.1.0
 * @category constants
 */
export const RESERVED_ID_REASON = `message ids starting with ${REPAIR_ID_PREFIX} are reserved`
