/**
 * Forking a stored session at a closed-turn boundary (SPEC 6.6, D11).
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import type { MalformedLog, PersistenceError, SessionNotFound, UnsupportedLogVersion } from "../domain/Errors.js"
import { ForkError } from "../domain/Errors.js"
import type { SessionEvent, SessionHeader } from "../domain/Event.js"
import { LOG_FORMAT_VERSION } from "../domain/Event.js"
import { SessionId } from "../domain/Ids.js"
import { freezeCopy } from "../domain/Json.js"
import type { FoldOptions } from "../domain/LogState.js"
import { validateLoaded } from "../internal/session/SessionOpen.js"
import { SessionStore } from "./SessionStore.js"

/**
 * Options of a fork: the source, an inclusive boundary seq (default: the last event) and the
 * child's id (default: a fresh UUID).
 *
 * @since 0.1.0
 * @category models
 */
export interface ForkOptions {
  readonly source: SessionId
  readonly boundary?: number
  readonly childId?: SessionId
}

/**
 * Creates a child session holding a deep copy of the source's durable prefix up to `boundary`,
 * followed by `session/end-seed`. The child starts with an empty inbox and continues the turn
 * numbering of the prefix. The source is validated as opening it would (`validation`: by default
 * the relational rules on and no declared extension types; `Sessions.fork` passes its own).
 *
 * @since 0.1.0
 * @category constructors
 */
export const forkSession = (
  options: ForkOptions,
  validation: FoldOptions = { relations: true, eventTypes: new Set() }
): Effect.Effect<
  SessionId,
  ForkError | SessionNotFound | MalformedLog | UnsupportedLogVersion | PersistenceError,
  SessionStore
> =>
  Effect.gen(function*() {
    const store = yield* SessionStore
    const childId = options.childId ?? SessionId.make(crypto.randomUUID())
    const fail = (reason: ForkError["reason"]) =>
      new ForkError({
        source: options.source,
        reason,
        ...(options.boundary !== undefined ? { boundary: options.boundary } : {}),
        childId
      })
    if (yield* store.exists(childId)) return yield* fail("child-exists")
    const loaded = yield* store.load(options.source)
    yield* validateLoaded(loaded.header, loaded.events, validation)
    const events = loaded.events
    const last = events.length - 1
    const boundary = options.boundary ?? last
    if (options.boundary !== undefined && (!Number.isInteger(boundary) || boundary < 0 || boundary > last)) {
      return yield* fail("invalid-boundary")
    }
    for (let i = boundary; i >= 0; i--) {
      const type = events[i]!.type
      if (type === "turn/end") break
      if (type === "turn/start") return yield* fail("open-turn")
    }
    const prefix = events.slice(0, boundary + 1).map((event) => freezeCopy(event))
    const time = yield* Effect.clockWith((clock) => clock.currentTimeMillis)
    const header: SessionHeader = {
      formatVersion: LOG_FORMAT_VERSION,
      sessionId: childId,
      createdAt: time,
      parent: { sessionId: options.source, boundary },
      seedLength: boundary + 1
    }
    const endSeed: SessionEvent = { type: "session/end-seed", seq: boundary + 1, time, data: {} }
    yield* store.create(header, [...prefix, endSeed]).pipe(
      Effect.catchTag("SessionExists", () => Effect.fail(fail("child-exists")))
    )
    return childId
  })
