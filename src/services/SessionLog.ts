/**
 * SessionLog: the durable, append-only event log of one session and everything derived from it.
 *
 * @since 0.1.0
 */
import { Chunk, Context, Effect, Either, Layer, Option, STM, Stream, TRef } from "effect"
import type { AgentDisposed, PersistenceError } from "../domain/Errors.js"
import { DuplicateMessage, InvalidEvent } from "../domain/Errors.js"
import type { SessionEvent, SessionHeader, SurfaceOp } from "../domain/Event.js"
import * as GrowOnly from "../domain/GrowOnly.js"
import type { SessionId } from "../domain/Ids.js"
import { REPAIR_ID_PREFIX, RESERVED_ID_REASON } from "../domain/Ids.js"
import { jsonProblem, snapshotJson } from "../domain/Json.js"
import { stateOf } from "../domain/KnownIds.js"
import type { Message } from "../domain/Values.js"
import type { Draft } from "../internal/state/SessionState.js"
import {
  appendDrafts,
  appendPure,
  awaitDurable,
  commitAcknowledged,
  guardWritable,
  SessionState
} from "../internal/state/SessionState.js"

/**
 * Input of `SessionLog.append`: an extension event or a surface replacement.
 *
 * @since 0.1.0
 * @category models
 */
export interface AppendInput {
  readonly type: string
  readonly data: unknown
  readonly surfaceOp?: SurfaceOp
  readonly sourceEventSeqs?: ReadonlyArray<number>
  readonly ignorable?: true
}

/**
 * The event log of one session: snapshot, stream, derived history, durability and extension appends.
 *
 * @since 0.1.0
 * @category tags
 */
export class SessionLog extends Context.Tag("tiller/SessionLog")<SessionLog, {
  readonly sessionId: SessionId
  readonly header: SessionHeader
  /** The stored length when the session was opened. */
  readonly firstLiveSeq: number
  /** An in-memory snapshot of every event. */
  readonly events: Effect.Effect<ReadonlyArray<SessionEvent>>
  /** Events with `seq >= fromSeq`, then every later append, in order; ends on dispose or poison. */
  readonly stream: (fromSeq?: number) => Stream.Stream<SessionEvent>
  /** The derived model history (SPEC 2.8). */
  readonly messages: Effect.Effect<ReadonlyArray<Message>>
  /** The seqs of the message events on the surface. */
  readonly surface: Effect.Effect<ReadonlyArray<number>>
  /** The highest durably committed seq (−1 when none). */
  readonly durableSeq: Effect.Effect<number>
  /** Waits until every event appended before the call is durable. */
  readonly flush: Effect.Effect<void, PersistenceError>
  /** Appends an extension event or a surface replacement; acknowledged after durability. */
  readonly append: (
    input: AppendInput
  ) => Effect.Effect<SessionEvent, InvalidEvent | DuplicateMessage | PersistenceError | AgentDisposed>
}>() {
  /**
   * The log service over the open session state.
   *
   * @since 0.1.0
   */
  static readonly layer: Layer.Layer<SessionLog, never, SessionState> = Layer.effect(
    SessionLog,
    Effect.map(SessionState, (state) => makeSessionLog(state))
  )
}

// SPEC 8.5: the reason is exactly "reserved" (the core type is written by the loop only).
const RESERVED = "reserved"

// The draft of an input: its type, data and the optional fields it sets, nothing else, each read
// once into a frozen copy (SPEC 2.1: a snapshot). An input that cannot be read (a throwing getter or
// `Proxy` trap), or whose values are not lossless JSON within MAX_JSON_DEPTH, is refused here,
// before anything is written; the event's own checks run on the copy.
const draftOf = (input: AppendInput): Either.Either<Draft, InvalidEvent> => {
  if (typeof input !== "object" || input === null) {
    const found = input === null ? "null" : typeof input
    return Either.left(
      new InvalidEvent({ type: `(${found})`, reason: `input: expected an object with type and data, found ${found}` })
    )
  }
  let fields: readonly [unknown, unknown, unknown, unknown, unknown]
  try {
    fields = [input.type, input.data, input.surfaceOp, input.sourceEventSeqs, input.ignorable]
  } catch {
    return Either.left(
      new InvalidEvent({ type: "(unreadable)", reason: jsonProblem(input, "input") ?? "input: cannot be read" })
    )
  }
  const [type, data, surfaceOp, sourceEventSeqs, ignorable] = fields
  if (typeof type !== "string") {
    const found = type === null ? "null" : typeof type
    return Either.left(new InvalidEvent({ type: `(${found})`, reason: `type must be a string, found ${found}` }))
  }
  // SPEC 8.5: a core type is refused as "reserved" whatever else the input holds.
  if (!isAcceptedType(type, surfaceOp)) return Either.left(new InvalidEvent({ type, reason: RESERVED }))
  const draft: { -readonly [K in keyof Draft]: Draft[K] } = { type, data: undefined }
  const copied = snapshotJson(data, "event.data")
  if (Either.isLeft(copied)) return Either.left(new InvalidEvent({ type, reason: copied.left }))
  draft.data = copied.right
  const optional = [["surfaceOp", surfaceOp], ["sourceEventSeqs", sourceEventSeqs], ["ignorable", ignorable]] as const
  for (const [key, value] of optional) {
    if (value === undefined) continue
    const field = snapshotJson<never>(value, `event.${key}`)
    if (Either.isLeft(field)) return Either.left(new InvalidEvent({ type, reason: field.left }))
    draft[key] = field.right
  }
  return Either.right(draft)
}

const isAcceptedType = (type: string, surfaceOp: unknown): boolean => {
  switch (type) {
    case "compaction/start":
    case "compaction/summary":
    case "compaction/end":
      return true
    case "user/message":
    case "tool/result":
      return typeof surfaceOp === "object" && surfaceOp !== null
    case "turn/start":
    case "turn/end":
    case "step/start":
    case "step/end":
    case "assistant/chunk":
    case "assistant/message":
    case "tool/call":
    case "request/header":
    case "llm/retry":
    case "agent/inbox/spliced":
    case "session/end-seed":
    case "approval/request":
    case "approval/answer":
      return false
    default:
      return true
  }
}

/**
 * The service over an open session's state (what its layer provides).
 *
 * @since 0.1.0
 * @category constructors
 */
export const makeSessionLog = (state: Context.Tag.Service<SessionState>): Context.Tag.Service<SessionLog> => {
  const readLog = TRef.get(state.log)

  const stream = (fromSeq = 0): Stream.Stream<SessionEvent> =>
    Stream.unfoldChunkEffect(Math.max(0, fromSeq), (cursor) =>
      STM.commit(
        STM.gen(function*() {
          const { events } = yield* readLog
          if (events.length > cursor) {
            return Option.some([Chunk.unsafeFromArray(GrowOnly.toArray(events, cursor)), events.length] as const)
          }
          const ended = (yield* TRef.get(state.closed)) || Option.isSome(yield* TRef.get(state.poisoned))
          return ended ? Option.none() : yield* STM.retry
        })
      ))

  const append = Effect.fnUntraced(function*(input: AppendInput) {
    // Only the input's own fields: seq and time are the log's (SPEC 2.1), whatever else it carries.
    const read = draftOf(input)
    if (Either.isLeft(read)) {
      yield* STM.commit(guardWritable(state))
      return yield* read.left
    }
    const draft = read.right
    const transaction = STM.gen(function*() {
      yield* guardWritable(state)
      if (draft.type === "user/message") {
        const id = (draft.data as { readonly id?: unknown } | null)?.id
        const snapshot = yield* readLog
        // A replacement's id is a caller's id too (SPEC 3.9): the repair prefix is reserved (2.3).
        if (typeof id === "string" && id.startsWith(REPAIR_ID_PREFIX)) {
          return yield* STM.fail(new InvalidEvent({ type: draft.type, reason: RESERVED_ID_REASON }))
        }
        if (typeof id === "string") {
          const known = stateOf(snapshot.fold.known, id)
          if (known !== undefined) {
            // Validity before identity (SPEC 3.1): an event that is invalid for another reason than
            // its known id (R9) fails with that InvalidEvent. Tried on the snapshot, nothing written.
            const tried = appendPure(state, snapshot, [draft], false)
            if (tried instanceof InvalidEvent && tried.rule !== "R9") return yield* STM.fail(tried)
            return Either.left(new DuplicateMessage({ id: id as never, state: known }))
          }
        }
      }
      if (draft.type === "compaction/start" && (draft.data as { readonly turn?: unknown } | null)?.turn === null) {
        // The log's own rules first (inside a turn such a bracket is R6), tried on the snapshot.
        const tried = appendPure(state, yield* readLog, [draft], false)
        if (tried instanceof InvalidEvent) return yield* STM.fail(tried)
        if ((yield* (yield* TRef.get(state.owner)).phase) !== "maintenance") {
          return yield* STM.fail(
            new InvalidEvent({
              type: draft.type,
              reason: "a compaction bracket between turns needs the maintenance phase"
            })
          )
        }
      }
      const [event] = yield* appendDrafts(state, [draft], false)
      return Either.right(event!)
    })
    return yield* commitAcknowledged(state, transaction)
  })

  return {
    sessionId: state.sessionId,
    header: state.header,
    firstLiveSeq: state.firstLiveSeq,
    events: STM.commit(STM.map(readLog, ({ events }) => Object.freeze(GrowOnly.toArray(events)))),
    stream,
    messages: STM.commit(
      STM.map(readLog, ({ fold }) => Object.freeze(GrowOnly.toArray(fold.messages)))
    ),
    surface: STM.commit(STM.map(readLog, ({ fold }) => Object.freeze(GrowOnly.toArray(fold.surface)))),
    durableSeq: Effect.sync(() => state.waiters.durable),
    flush: Effect.flatMap(
      STM.commit(
        STM.gen(function*() {
          const poisoned = yield* TRef.get(state.poisoned)
          if (Option.isSome(poisoned)) return yield* STM.fail(poisoned.value)
          const { events } = yield* readLog
          return events.length - 1
        })
      ),
      (seq) => awaitDurable(state, seq)
    ).pipe(Effect.withSpan("SessionLog.flush")),
    append
  }
}
