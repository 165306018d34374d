/**
 * The SQLite store's rows: events encoded to the JSON text stored per row, and stored header and
 * row texts decoded back, each failure a `MalformedLog` naming the seq (SPEC 6.1, 6.4).
 *
 * @since 0.1.0
 */
import { Either } from "effect"
import { MalformedLog } from "../../domain/Errors.js"
import type { UnsupportedLogVersion } from "../../domain/Errors.js"
import type { SessionEvent, SessionHeader } from "../../domain/Event.js"
import type { SessionId } from "../../domain/Ids.js"
import { decodeOwnedJson } from "./DecodedEvents.js"
import { checkStoredHeader } from "./StoredHeader.js"

/** Parses a stored JSON text, or says why it is not one. */
export const parseJson = (text: unknown): Either.Either<unknown, string> => {
  if (typeof text !== "string") return Either.left(`expected JSON text, found ${typeof text}`)
  try {
    return Either.right(JSON.parse(text))
  } catch (cause) {
    return Either.left(`not JSON: ${cause instanceof Error ? cause.message : String(cause)}`)
  }
}

/** Each event's row JSON, encoded before any transaction starts. */
export const encodeRows = (events: ReadonlyArray<SessionEvent>): Either.Either<Array<string>, string> => {
  try {
    return Either.right(events.map((event) => JSON.stringify(event)))
  } catch (cause) {
    return Either.left(`an event is not JSON: ${cause instanceof Error ? cause.message : String(cause)}`)
  }
}

/** The size of encoded rows (UTF-16 code units; close enough to the bytes SQLite writes). */
export const rowBytes = (rows: ReadonlyArray<string>): number => {
  let bytes = 0
  for (const row of rows) bytes += row.length
  return bytes
}

/** Decodes the stored header text; its version is checked before its shape (a newer format may differ). */
export const headerOf = (
  id: SessionId,
  text: unknown
): Either.Either<SessionHeader, MalformedLog | UnsupportedLogVersion> => {
  const parsed = parseJson(text)
  if (Either.isLeft(parsed)) return Either.left(new MalformedLog({ sessionId: id, reason: `header is ${parsed.left}` }))
  return checkStoredHeader(id, parsed.right)
}

/** Decodes the row stored for seq `seq`. */
export const eventOf = (id: SessionId, seq: number, text: unknown): Either.Either<SessionEvent, MalformedLog> => {
  if (typeof text !== "string") {
    return Either.left(
      new MalformedLog({ sessionId: id, seq, reason: `row is expected JSON text, found ${typeof text}` })
    )
  }
  const event = decodeOwnedJson(text)
  if (Either.isLeft(event)) {
    const problem = event.left
    const reason = problem._tag === "NotJson" ? `row is not JSON: ${problem.message}` : problem.reason
    return Either.left(new MalformedLog({ sessionId: id, seq, reason }))
  }
  if (event.right.seq !== seq) {
    return Either.left(
      new MalformedLog({ sessionId: id, seq, reason: `the row stored at seq ${seq} has seq ${event.right.seq}` })
    )
  }
  return Either.right(event.right)
}

/**
 * Decodes a session's rows in seq order (a plain loop: one effect step per row would cost more than
 * decoding it); the first gap or undecodable row is the failure.
 */
export const eventsOf = (
  id: SessionId,
  rows: ReadonlyArray<{ readonly seq: number; readonly row: unknown }>
): Either.Either<Array<SessionEvent>, MalformedLog> => {
  const events = new Array<SessionEvent>(rows.length)
  for (let seq = 0; seq < rows.length; seq++) {
    const row = rows[seq]!
    if (row.seq !== seq) {
      return Either.left(
        new MalformedLog({ sessionId: id, seq, reason: `no row is stored for seq ${seq} (next: ${row.seq})` })
      )
    }
    const event = eventOf(id, seq, row.row)
    if (Either.isLeft(event)) return Either.left(event.left)
    events[seq] = event.right
  }
  return Either.right(events)
}

/** Decodes a session's row texts (in seq order); undefined at the first row that is not the event of its seq. */
export const eventsOfText = (id: SessionId, rows: ReadonlyArray<unknown>): Array<SessionEvent> | undefined => {
  const events = new Array<SessionEvent>(rows.length)
  for (let seq = 0; seq < rows.length; seq++) {
    const event = eventOf(id, seq, rows[seq])
    if (Either.isLeft(event)) return undefined
    events[seq] = event.right
  }
  return events
}
