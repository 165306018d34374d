/**
 * Opening a session: create a fresh one, or resume a stored one (load, validate with the append
 * rules, repair an open final turn, mark the end of the seed), then start its writer fiber.
 *
 * The `session/` room: an open session's state joined to its store. Opening and resuming (this
 * module) and the group-commit writer fiber that stores what the state committed (`Writer`). It is
 * the one room that uses both `state/` (the STM state) and `durability/` (stores, the writer's
 * signal, waiters, leases), which never import each other's way back.
 *
 * @since 0.1.0
 */
import type { Scope } from "effect"
import { Effect, Either, Option, TRef } from "effect"
import {
  type AgentBusy,
  MalformedLog,
  PersistenceError,
  SessionExists,
  type SessionNotFound,
  UnsupportedLogVersion
} from "../../domain/Errors.js"
import type { SessionEvent, SessionHeader } from "../../domain/Event.js"
import { LOG_FORMAT_VERSION } from "../../domain/Event.js"
import * as GrowOnly from "../../domain/GrowOnly.js"
import { SessionId } from "../../domain/Ids.js"
import type { FoldOptions, LogState } from "../../domain/LogState.js"
import { advance, initialLogState } from "../../domain/LogState.js"
import { repairClosers } from "../../domain/Repair.js"
import { decodeStored, isDecoded } from "../durability/DecodedEvents.js"
import * as DurableWaiters from "../durability/DurableWaiters.js"
import { acquireLocalLease, acquireProcessLease, checkProcessLease } from "../durability/Lease.js"
import type { StoreShape } from "../durability/Store.js"
import { makeSignal, stopWritingNow } from "../durability/WriterSignal.js"
import * as Outbox from "../state/Outbox.js"
import type { Draft, LogSnapshot, SessionStateShape } from "../state/SessionState.js"
import { appendDrafts, awaitDurable, commitLogged, noOwner } from "../state/SessionState.js"
import * as WakeMarks from "../state/WakeMarks.js"
import type { DurabilityOptions } from "./Writer.js"
import { runWriter } from "./Writer.js"

/**
 * Options for opening a session.
 *
 * @since 0.1.0
 * @category models
 */
export interface SessionOptions {
  readonly invariants?: "check" | "off"
  readonly eventTypes?: ReadonlyArray<string>
  readonly durability?: DurabilityOptions
}

/**
 * Which session to open: a new id to create, or a stored id to resume.
 *
 * @since 0.1.0
 * @category models
 */
export type SessionTarget = { readonly sessionId: SessionId } | { readonly resume: SessionId }

/**
 * Failures of opening a session.
 *
 * @since 0.1.0
 * @category models
 */
export type OpenError =
  | SessionExists
  | SessionNotFound
  | MalformedLog
  | UnsupportedLogVersion
  | PersistenceError
  | AgentBusy

/**
 * The validation a session's options ask for: the relational rules unless `invariants: "off"`, and
 * the declared extension event types.
 *
 * @since 0.1.0
 * @category constructors
 */
export const foldOptionsOf = (options: Pick<SessionOptions, "invariants" | "eventTypes">): FoldOptions => ({
  relations: options.invariants !== "off",
  eventTypes: new Set(options.eventTypes ?? [])
})

/**
 * Validates a loaded log with the same Schemas and rules as live appends (D6) and returns its fold.
 *
 * @since 0.1.0
 * @category validation
 */
export const validateLoaded = (
  header: SessionHeader,
  stored: ReadonlyArray<SessionEvent>,
  options: FoldOptions
): Either.Either<LogSnapshot, MalformedLog | UnsupportedLogVersion> => {
  if (header.formatVersion !== LOG_FORMAT_VERSION) {
    const found: unknown = header.formatVersion
    // A store of another implementation may hand over a header it did not decode.
    return Either.left(
      typeof found === "number"
        ? new UnsupportedLogVersion({ sessionId: header.sessionId, found, supported: LOG_FORMAT_VERSION })
        : new MalformedLog({
          sessionId: header.sessionId,
          reason: `header formatVersion is ${JSON.stringify(found) ?? typeof found}`
        })
    )
  }
  const buffer: Array<SessionEvent> = []
  let fold: LogState = initialLogState(header.seedLength)
  const eventAt = (seq: number) => buffer[seq]
  for (let i = 0; i < stored.length; i++) {
    const input: unknown = stored[i]
    let event: SessionEvent
    if (isDecoded(input)) {
      event = input
    } else {
      const decoded = decodeStored(input)
      if (Either.isLeft(decoded)) {
        return Either.left(new MalformedLog({ sessionId: header.sessionId, seq: i, reason: decoded.left }))
      }
      event = decoded.right
    }
    const next = advance(fold, event, eventAt, options)
    const first = next.violations[0]
    if (first !== undefined) {
      const reason = first.rule === "R18"
        ? `invalid persisted inbox splice at seq ${i}: ${first.message}`
        : first.rule === undefined
        ? first.message
        : `${first.rule}: ${first.message}`
      return Either.left(new MalformedLog({ sessionId: header.sessionId, seq: i, reason }))
    }
    fold = next.state
    buffer.push(event)
  }
  return Either.right({ events: { buffer, length: buffer.length }, fold })
}

/**
 * Opens a session and starts its writer in the current scope. Resume commits the repair closers
 * and `session/end-seed` durably before returning. Everything that may refuse an open only reads
 * the store (the lease across processes is checked, the log loaded and validated, a created id
 * looked up) before anything is written: a refused open leaves the store as it was.
 *
 * @since 0.1.0
 * @category constructors
 */
export const openSessionState = (
  store: StoreShape,
  target: SessionTarget,
  options: SessionOptions = {}
): Effect.Effect<SessionStateShape, OpenError, Scope.Scope> =>
  Effect.gen(function*() {
    yield* acquireLocalLease(store, "resume" in target ? target.resume : target.sessionId)
    const clock = yield* Effect.clock
    const foldOptions = foldOptionsOf(options)
    let header: SessionHeader
    let snapshot: LogSnapshot
    if ("resume" in target) {
      yield* checkProcessLease(store, target.resume)
      let loaded = yield* store.load(target.resume)
      snapshot = yield* validateLoaded(loaded.header, loaded.events, foldOptions)
      if (!(yield* acquireProcessLease(store, target.resume, loaded.events.length))) {
        // Another process appended between the load and the lease (and has let the session go
        // since): read the log again, now that no other process can write it.
        loaded = yield* store.load(target.resume)
        snapshot = yield* validateLoaded(loaded.header, loaded.events, foldOptions)
      }
      header = loaded.header
    } else {
      if (yield* store.exists(target.sessionId)) return yield* new SessionExists({ sessionId: target.sessionId })
      yield* acquireProcessLease(store, target.sessionId)
      header = {
        formatVersion: LOG_FORMAT_VERSION,
        sessionId: target.sessionId,
        createdAt: yield* clock.currentTimeMillis,
        seedLength: 0
      }
      yield* store.create(header, [])
      snapshot = { events: GrowOnly.empty(), fold: initialLogState(0) }
    }
    const state: SessionStateShape = {
      sessionId: SessionId.make(header.sessionId),
      header,
      firstLiveSeq: snapshot.events.length,
      options: foldOptions,
      store,
      clock,
      log: yield* TRef.make(snapshot),
      marks: yield* TRef.make(WakeMarks.empty()),
      poisoned: yield* TRef.make(Option.none<PersistenceError>()),
      disposed: yield* TRef.make(false),
      closed: yield* TRef.make(false),
      outbox: yield* Outbox.make,
      waiters: DurableWaiters.make(snapshot.events.length - 1),
      writer: makeSignal(snapshot.events, options.durability?.batchSize),
      owner: yield* TRef.make(noOwner)
    }
    yield* Effect.addFinalizer(() => Effect.sync(() => stopWritingNow(state.writer)))
    yield* Effect.forkScoped(runWriter(state, options.durability))
    if ("resume" in target) yield* sealResumed(state)
    return state
  })

// Repair an open final turn and mark the end of the seed; both durable before anything else.
const sealResumed = (state: SessionStateShape): Effect.Effect<void, PersistenceError> =>
  Effect.gen(function*() {
    const { events } = yield* TRef.get(state.log)
    const stored = GrowOnly.toArray(events)
    const closers = repairClosers(stored)
    const last = closers.length > 0 ? closers[closers.length - 1] : stored[stored.length - 1]
    const drafts: Array<Draft> = closers.map(({ seq: _seq, ...draft }) => draft)
    if (last?.type !== "session/end-seed") drafts.push({ type: "session/end-seed", data: {} })
    if (drafts.length === 0) return
    const appended = yield* commitLogged(state, appendDrafts(state, drafts, true)).pipe(
      Effect.mapError((cause) => new PersistenceError({ sessionId: state.sessionId, operation: "resume", cause }))
    )
    yield* awaitDurable(state, appended[appended.length - 1]!.seq)
  })
