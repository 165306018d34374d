/**
 * The in-memory session store and its test controls (SPEC 6.1, 8.10).
 *
 * The layers are `SessionStore.layerMemory` and `SessionStore.layerMemoryFrom`; this module builds
 * the two service values they provide. It imports the service tags as types only, so the service
 * module can reference it without an import cycle.
 *
 * @since 0.1.0
 */
import { seqProblem } from "../internal/Contiguity.js"
import * as GrowOnly from "../internal/GrowOnly.js"
import { Chunk, Deferred, Effect, Exit, HashMap, Option, Ref } from "effect"
import { PersistenceError, SessionExists, SessionNotFound, UnsupportedLogVersion } from "../domain/Errors.js"
import type { SessionEvent, SessionHeader } from "../domain/Event.js"
import { LOG_FORMAT_VERSION } from "../domain/Event.js"
import type { SessionId } from "../domain/Ids.js"
import { freezeCopy } from "../domain/Json.js"
import type { MemoryStoreControl, SessionStore } from "../services/SessionStore.js"

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
): Effect.Effect<{ readonly store: SessionStore["Type"]; readonly control: MemoryStoreControl["Type"] }> =>
  Effect.gen(function*() {
    const state = yield* Ref.make(snapshot[StoreSnapshotTypeId])
    const appendCalls = yield* Ref.make(0)
    const failuresLeft = yield* Ref.make(0)
    const gate = yield* Effect.makeLatch(true)
    // Completes when the previous append call has finished: append calls run one at a time, in
    // call order, so appends queued behind `hold` commit in order after `release`.
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
      const created = yield* Ref.modify(state, (current): [boolean, StoreState] =>
        HashMap.has(current.sessions, sessionId)
          ? [false, current]
          : [true, {
            sessions: HashMap.set(current.sessions, sessionId, stored),
            headers: Chunk.append(current.headers, stored.header)
          }]
      )
      if (!created) return yield* new SessionExists({ sessionId })
    })

    const load = Effect.fn("SessionStore.load")(function*(id: SessionId) {
      const current = yield* Ref.get(state)
      const stored = HashMap.get(current.sessions, id)
      if (Option.isNone(stored)) return yield* new SessionNotFound({ sessionId: id })
      const { events, header } = stored.value
      if (header.formatVersion !== LOG_FORMAT_VERSION) {
        return yield* new UnsupportedLogVersion({
          sessionId: id,
          found: header.formatVersion,
          supported: LOG_FORMAT_VERSION
        })
      }
      return { header, events: GrowOnly.toArray(events) }
    })

    const commitAppend = (id: SessionId, events: ReadonlyArray<SessionEvent>) =>
      Effect.gen(function*() {
        const fail = (cause: unknown) => new PersistenceError({ sessionId: id, operation: "append", cause })
        const injected = yield* Ref.modify(failuresLeft, (n): [boolean, number] => n > 0 ? [true, n - 1] : [false, n])
        if (injected) return yield* fail("injected failure (MemoryStoreControl.failAppends)")
        if (events.length === 0) return yield* fail("an append needs at least one event")
        const copies = events.map(isolate)
        const problem = yield* Ref.modify(state, (current): [unknown, StoreState] => {
          const stored = HashMap.get(current.sessions, id)
          if (Option.isNone(stored)) return [new SessionNotFound({ sessionId: id }), current]
          const seqError = seqProblem(events, stored.value.events.length)
          if (seqError !== undefined) return [seqError, current]
          let log = stored.value.events
          for (const event of copies) log = GrowOnly.push(log, event)
          const next = { ...stored.value, events: log }
          return [undefined, { ...current, sessions: HashMap.set(current.sessions, id, next) }]
        })
        if (problem !== undefined) return yield* fail(problem)
      })

    const append = Effect.fnUntraced(function*(
      id: SessionId,
      events: readonly [SessionEvent, ...Array<SessionEvent>]
    ) {
      // Uninterruptible until `done` is guaranteed to complete, or later calls would wait forever.
      return yield* Effect.uninterruptibleMask((restore) =>
        Effect.gen(function*() {
          yield* Ref.update(appendCalls, (n) => n + 1)
          const done = yield* Deferred.make<void>()
          const previous = yield* Ref.getAndSet(previousAppend, Deferred.await(done))
          return yield* restore(
            previous.pipe(Effect.zipRight(gate.await), Effect.zipRight(commitAppend(id, events)))
          ).pipe(
            Effect.onExit((exit) =>
              // An interrupted call may not have waited for its predecessor: pass that wait on.
              Exit.isInterrupted(exit) ? Deferred.completeWith(done, previous) : Deferred.succeed(done, undefined)
            )
          )
        })
      )
    })

    const exists = Effect.fn("SessionStore.exists")(function*(id: SessionId) {
      const current = yield* Ref.get(state)
      return HashMap.has(current.sessions, id)
    })

    const list = Ref.get(state).pipe(
      Effect.map((current): ReadonlyArray<SessionHeader> => Chunk.toArray(current.headers)),
      Effect.withSpan("SessionStore.list")
    )

    const store: SessionStore["Type"] = { create, load, append, exists, list }

    const control: MemoryStoreControl["Type"] = {
      failAppends: Effect.fn("MemoryStoreControl.failAppends")(function*(n: number) {
        yield* Ref.set(failuresLeft, Math.max(0, Math.trunc(n)))
      }),
      hold: gate.close,
      release: gate.open,
      appendCalls: Ref.get(appendCalls),
      snapshot: Effect.map(Ref.get(state), (current): StoreSnapshot => ({ [StoreSnapshotTypeId]: current }))
    }

    return { store, control }
  })
