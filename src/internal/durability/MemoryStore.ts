/**
 * The in-memory session store and its test controls (SPEC 6.1, 8.10).
 *
 * The layers are `SessionStore.layerMemory` and `SessionStore.layerMemoryFrom`; this module builds
 * the two service values they provide. It knows the services only by their shapes (the service
 * module checks them when it builds the layers), so the service module can import it.
 *
 * @since 0.1.0
 */
import { Chunk, Deferred, Effect, Either, Exit, HashMap, Option, Ref } from "effect"
import { MalformedLog, PersistenceError, SessionExists, SessionNotFound } from "../../domain/Errors.js"
import type { ApprovalAnswerData, SessionEvent, SessionHeader } from "../../domain/Event.js"
import * as GrowOnly from "../../domain/GrowOnly.js"
import type { SessionId } from "../../domain/Ids.js"
import { freezeCopy } from "../../domain/Json.js"
import { seqProblem } from "./Contiguity.js"
import { decodeStoredValue } from "./DecodedEvents.js"
import { makeLocalLease } from "./LocalLease.js"
import type { ApprovalMailbox, StoreShape } from "./Store.js"
import { checkStoredHeader } from "./StoredHeader.js"
import type { SyncAppend } from "./SyncAppend.js"

/** One stored session: its header and committed events, all deep-frozen. */
interface StoredSession {
  readonly header: SessionHeader
  readonly events: GrowOnly.GrowOnly<SessionEvent>
}

/** The committed contents of a memory store; immutable, so a reference is a consistent image. */
interface StoreState {
  readonly sessions: HashMap.HashMap<string, StoredSession>
  /** Headers in creation order, for a deterministic `list`. */
  readonly headers: Chunk.Chunk<SessionHeader>
}

const StoreSnapshotTypeId: unique symbol = Symbol.for("tiller/StoreSnapshot")

/**
 * The committed contents of a memory store at one instant: a crash image (opaque).
 *
 * @since 0.1.0
 * @category models
 */
export interface StoreSnapshot {
  readonly [StoreSnapshotTypeId]: StoreState
}

const emptyState: StoreState = { sessions: HashMap.empty(), headers: Chunk.empty() }

/**
 * The snapshot of a store that holds nothing.
 *
 * @since 0.1.0
 * @category constructors
 */
export const emptySnapshot: StoreSnapshot = { [StoreSnapshotTypeId]: emptyState }

// Values handed in or out are deep-frozen: frozen values are (by the log's convention) frozen at
// every level and are shared; anything else is copied.
const isolate = <A>(value: A): A => (Object.isFrozen(value) ? value : freezeCopy(value))

/**
 * Builds a memory store over fresh state seeded from `snapshot`, with its controls.
 *
 * @since 0.1.0
 * @category constructors
 */
export const makeMemoryStore = (
  snapshot: StoreSnapshot
) =>
  Effect.gen(function*() {
    // Plain variables: every access below is one synchronous step, so none can interleave.
    let state: StoreState = snapshot[StoreSnapshotTypeId]
    let appendCalls = 0
    let failuresLeft = 0
    let held = false
    // Append calls waiting behind `hold` (or behind one that waited): later calls queue behind them.
    let queued = 0
    const gate = yield* Effect.makeLatch(true)
    // Completes when the previous queued append call has finished: append calls run one at a time,
    // in call order, so appends queued behind `hold` commit in order after `release`.
    const previousAppend = yield* Ref.make<Effect.Effect<void>>(Effect.void)

    const create = Effect.fn("SessionStore.create")(function*(
      header: SessionHeader,
      events: ReadonlyArray<SessionEvent>
    ) {
      const sessionId = header.sessionId
      const problem = seqProblem(events, 0)
      if (problem !== undefined) {
        return yield* new PersistenceError({ sessionId, operation: "create", cause: problem })
      }
      const stored: StoredSession = {
        header: isolate(header),
        events: GrowOnly.fromArray(events.map(isolate))
      }
      const created = yield* Effect.sync(() => {
        if (HashMap.has(state.sessions, sessionId)) return false
        state = {
          sessions: HashMap.set(state.sessions, sessionId, stored),
          headers: Chunk.append(state.headers, stored.header)
        }
        return true
      })
      if (!created) return yield* new SessionExists({ sessionId })
    })

    const load = Effect.fn("SessionStore.load")(function*(id: SessionId) {
      const stored = HashMap.get(yield* Effect.sync(() => state.sessions), id)
      if (Option.isNone(stored)) return yield* new SessionNotFound({ sessionId: id })
      // The checks the SQLite store applies to what it reads (SPEC 6.1): the header, then every event.
      const header = checkStoredHeader(id, stored.value.header)
      if (Either.isLeft(header)) return yield* header.left
      const events = yield* Effect.sync(() => decodedEvents(id, stored.value))
      if (events instanceof MalformedLog) return yield* events
      return { header: header.right, events }
    })

    // The session's events decoded as the SQLite store decodes its rows (SPEC 6.1: a malformed
    // event is `MalformedLog` with its seq), in one synchronous step. The decoded copies replace the
    // stored events while nothing was appended since, so each event is decoded once.
    const decodedEvents = (id: SessionId, stored: StoredSession): Array<SessionEvent> | MalformedLog => {
      const events = GrowOnly.toArray(stored.events)
      let changed = false
      for (let seq = 0; seq < events.length; seq++) {
        const decoded = decodeStoredValue(events[seq])
        if (Either.isLeft(decoded)) {
          const reason = decoded.left._tag === "NotEvent" ? decoded.left.reason : decoded.left.message
          return new MalformedLog({ sessionId: id, seq, reason })
        }
        if (decoded.right !== events[seq]) {
          events[seq] = decoded.right
          changed = true
        }
      }
      if (changed && Option.getOrUndefined(HashMap.get(state.sessions, id)) === stored) {
        const session: StoredSession = { header: stored.header, events: GrowOnly.fromArray(events) }
        state = { sessions: HashMap.set(state.sessions, id, session), headers: state.headers }
      }
      return events
    }

    // One append, all in one synchronous step; the failure, if any.
    const commitNow = (id: SessionId, events: ReadonlyArray<SessionEvent>): PersistenceError | undefined => {
      const fail = (cause: unknown) => new PersistenceError({ sessionId: id, operation: "append", cause })
      if (failuresLeft > 0) {
        failuresLeft -= 1
        return fail("injected failure (MemoryStoreControl.failAppends)")
      }
      if (events.length === 0) return fail("an append needs at least one event")
      const stored = HashMap.get(state.sessions, id)
      if (Option.isNone(stored)) return fail(new SessionNotFound({ sessionId: id }))
      const seqError = seqProblem(events, stored.value.events.length)
      if (seqError !== undefined) return fail(seqError)
      let log = stored.value.events
      for (const event of events) log = GrowOnly.push(log, isolate(event))
      // Built field by field, not spread: V8 spreads objects that came from spreads on a slow path.
      const session: StoredSession = { header: stored.value.header, events: log }
      state = { sessions: HashMap.set(state.sessions, id, session), headers: state.headers }
      return undefined
    }

    const commitAppend = (id: SessionId, events: ReadonlyArray<SessionEvent>) =>
      Effect.suspend(() => {
        const error = commitNow(id, events)
        return error === undefined ? Effect.void : Effect.fail(error)
      })

    // Behind `hold` or an earlier queued call: wait for the previous call, then for the gate.
    const appendQueued = (id: SessionId, events: ReadonlyArray<SessionEvent>) =>
      // Uninterruptible until `done` is guaranteed to complete, or later calls would wait forever.
      Effect.uninterruptibleMask((restore) =>
        Effect.gen(function*() {
          queued += 1
          const done = yield* Deferred.make<void>()
          const previous = yield* Ref.getAndSet(previousAppend, Deferred.await(done))
          return yield* restore(
            previous.pipe(Effect.zipRight(gate.await), Effect.zipRight(commitAppend(id, events)))
          ).pipe(
            Effect.onExit((exit) => {
              queued -= 1
              // An interrupted call may not have waited for its predecessor: pass that wait on.
              return Exit.isInterrupted(exit)
                ? Deferred.completeWith(done, previous)
                : Deferred.succeed(done, undefined)
            })
          )
        })
      )

    const append = (
      id: SessionId,
      events: readonly [SessionEvent, ...Array<SessionEvent>]
    ): Effect.Effect<void, PersistenceError> =>
      Effect.suspend(() => {
        appendCalls += 1
        if (held || queued > 0) return appendQueued(id, events)
        // Nothing held or queued: commit at once (one synchronous step keeps the call order).
        const error = commitNow(id, events)
        return error === undefined ? Effect.void : Effect.fail(error)
      })

    const exists = Effect.fn("SessionStore.exists")(function*(id: SessionId) {
      return HashMap.has(yield* Effect.sync(() => state.sessions), id)
    })

    const list = Effect.sync((): ReadonlyArray<SessionHeader> => Chunk.toArray(state.headers)).pipe(
      Effect.withSpan("SessionStore.list")
    )

    // The same commit, synchronously, when nothing holds or precedes it and no failure is injected;
    // anything else is left to `append`, which waits for what holds it or reports the failure.
    const appendNow: SyncAppend = {
      append: (id, events) => {
        if (held || queued > 0 || failuresLeft > 0) return false
        if (commitNow(id, events) !== undefined) return false
        appendCalls += 1
        return true
      },
      acknowledgements: true
    }
    // Approval answers left by another "process" (a second agent or a test over the same store).
    const answers = new Map<string, Map<string, ApprovalAnswerData>>()
    const approvalMailbox: ApprovalMailbox = {
      post: (id, answer) =>
        Effect.sync(() => {
          const forSession = answers.get(id) ?? new Map<string, ApprovalAnswerData>()
          forSession.delete(answer.callId)
          forSession.set(answer.callId, answer)
          answers.set(id, forSession)
        }),
      take: (id) =>
        Effect.sync(() => {
          const forSession = answers.get(id)
          answers.delete(id)
          return forSession === undefined ? [] : Array.from(forSession.values())
        })
    }
    const store: StoreShape = {
      create,
      load,
      append,
      exists,
      list,
      appendNow,
      approvalMailbox,
      localLease: makeLocalLease()
    }

    const control = {
      failAppends: Effect.fn("MemoryStoreControl.failAppends")(function*(n: number) {
        yield* Effect.sync(() => {
          failuresLeft = Math.max(0, Math.trunc(n))
        })
      }),
      hold: Effect.zipRight(
        Effect.sync(() => {
          held = true
        }),
        gate.close
      ),
      release: Effect.zipRight(
        Effect.sync(() => {
          held = false
        }),
        gate.open
      ),
      appendCalls: Effect.sync(() => appendCalls),
      snapshot: Effect.sync((): StoreSnapshot => ({ [StoreSnapshotTypeId]: state }))
    }

    return { store, control }
  })
