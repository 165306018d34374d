/**
 * The session preset: opens (creates, resumes, or either) one session on the provided store and serves
 * its log and inbox. Closing the layer's scope flushes and detaches the session.
 *
 * @since 0.1.0
 */
import type { Context } from "effect"
import { Effect, ExecutionStrategy, Exit, Layer, Scope, STM, TRef } from "effect"
import type { SessionId } from "../domain/Ids.js"
import type { OpenError, SessionOptions, SessionTarget } from "../internal/session/SessionOpen.js"
import { openSessionState } from "../internal/session/SessionOpen.js"
import * as Outbox from "../internal/state/Outbox.js"
import type { SessionStateShape } from "../internal/state/SessionState.js"
import { awaitDurable, lastSeq, SessionState } from "../internal/state/SessionState.js"
import { Inbox } from "../services/Inbox.js"
import { SessionLog } from "../services/SessionLog.js"
import { SessionStore } from "../services/SessionStore.js"

/**
 * Which session an agent opens: `sessionId` creates it (`SessionExists` when it is stored),
 * `resume` continues a stored one (`SessionNotFound` otherwise), `open` does either: it resumes
 * the session when it is stored and creates it when it is not.
 *
 * @since 0.1.0
 * @category models
 */
export type OpenTarget = SessionTarget | { readonly open: SessionId }

// `open`: resume when stored, else create; created by someone else meanwhile: resume it after all.
// The create runs in a scope of its own, closed when it fails, so its lease does not outlive it.
const openOrCreate = (
  store: Context.Tag.Service<SessionStore>,
  id: SessionId,
  options: SessionOptions
): Effect.Effect<SessionStateShape, OpenError, Scope.Scope> =>
  Effect.flatMap(store.exists(id), (stored) =>
    stored
      ? openSessionState(store, { resume: id }, options)
      : Effect.flatMap(
        Effect.flatMap(Effect.scope, (outer) => Scope.fork(outer, ExecutionStrategy.sequential)),
        (attempt) =>
          openSessionState(store, { sessionId: id }, options).pipe(
            Scope.extend(attempt),
            Effect.catchTag(
              "SessionExists",
              () => Effect.zipRight(Scope.close(attempt, Exit.void), openSessionState(store, { resume: id }, options))
            )
          )
      ))

/**
 * Opens the session state in the current scope, with a finalizer that seals it: later writes fail
 * with `AgentDisposed`, pending events are flushed (a failure is logged), then streams end.
 *
 * @since 0.1.0
 * @category constructors
 */
export const acquireState = (
  options: SessionOptions & OpenTarget
): Effect.Effect<SessionStateShape, OpenError, SessionStore | Scope.Scope> =>
  Effect.gen(function*() {
    const store = yield* SessionStore
    const state = "open" in options
      ? yield* openOrCreate(store, options.open, options)
      : yield* openSessionState(store, options, options)
    yield* Effect.addFinalizer(() =>
      Effect.gen(function*() {
        const seq = yield* STM.commit(STM.zipLeft(lastSeq(state), TRef.set(state.disposed, true)))
        yield* awaitDurable(state, seq).pipe(
          Effect.catchAll((error) => Effect.logWarning("tiller: final flush failed", error))
        )
        yield* STM.commit(TRef.set(state.closed, true))
        yield* Outbox.close(state.outbox)
      })
    )
    return state
  })

/**
 * The open session state ({@link acquireState} as a layer).
 *
 * @since 0.1.0
 * @category layers
 */
export const layerState = (
  options: SessionOptions & OpenTarget
): Layer.Layer<SessionState, OpenError, SessionStore> => Layer.scoped(SessionState, acquireState(options))

/**
 * `SessionLog` and `Inbox` of one session opened on the provided store.
 *
 * @since 0.1.0
 * @category layers
 */
export const layer = (
  options: SessionOptions & OpenTarget
): Layer.Layer<SessionLog | Inbox, OpenError, SessionStore> =>
  Layer.mergeAll(SessionLog.layer, Inbox.layer).pipe(Layer.provide(layerState(options)))
