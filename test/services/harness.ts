/**
 * Shared test harness for session services: a session over a memory store, and live notifications.
 */
import { Effect, Layer, Queue, STM, TRef } from "effect"
import type { Scope } from "effect"
import type { DriverEvent } from "../../src/domain/DriverEvent.js"
import { SessionId } from "../../src/domain/Ids.js"
import { userMessage } from "../../src/domain/Message.js"
import type { UserMessage } from "../../src/domain/Values.js"
import type { SessionOptions, SessionTarget } from "../../src/internal/session/SessionOpen.js"
import { claimSTM } from "../../src/internal/state/InboxOps.js"
import * as Outbox from "../../src/internal/state/Outbox.js"
import { appendDrafts, commit, SessionState } from "../../src/internal/state/SessionState.js"
import { layerState } from "../../src/layers/Session.js"
import { Inbox } from "../../src/services/Inbox.js"
import { SessionLog } from "../../src/services/SessionLog.js"
import { MemoryStoreControl, SessionStore } from "../../src/services/SessionStore.js"

/** The session services (log, inbox, internal state) over an already provided store. */
export const sessionOn = (options: SessionOptions & SessionTarget) =>
  Layer.mergeAll(SessionLog.layer, Inbox.layer, Layer.effect(SessionState, SessionState)).pipe(
    Layer.provideMerge(layerState(options))
  )

/** A fresh session "s1" with its own memory store and controls. */
export const freshSession = (options: SessionOptions = {}) =>
  sessionOn({ sessionId: SessionId.make("s1"), ...options }).pipe(Layer.provideMerge(SessionStore.layerMemory))

/** Every type the layers provide, for annotations. */
export type SessionServices = SessionLog | Inbox | SessionState | SessionStore | MemoryStoreControl

/** Subscribes to the live notifications; the queue receives everything committed afterwards. */
export const subscribe: Effect.Effect<Queue.Dequeue<DriverEvent>, never, SessionState | Scope.Scope> = Effect.flatMap(
  SessionState,
  (state) => Effect.map(Outbox.subscribe(state.outbox, STM.void), ([queue]) => queue)
)

/** Drains what a subscription has received so far. */
export const drain = (queue: Queue.Dequeue<DriverEvent>) => Effect.map(Queue.takeAll(queue), (c) => Array.from(c))

/** A user-sourced message. */
export const user = (id: string, text = id): UserMessage => userMessage({ id, text })

/** A plugin-sourced context message. */
export const plugin = (id: string, text = id): UserMessage =>
  userMessage({ id, text, source: { kind: "plugin", plugin: "test" } })

/** Opens a zero-step turn that claims the initial batch and closes it, the way the loop's TX-OPEN would. */
export const claimTurn = Effect.gen(function*() {
  const state = yield* SessionState
  return yield* commit(
    state,
    STM.gen(function*() {
      const { fold } = yield* TRef.get(state.log)
      if (fold.inbox.nextStep.length === 0 && fold.inbox.nextTurn.length === 0) return []
      const turn = fold.lastTurn + 1
      yield* appendDrafts(state, [{ type: "turn/start", data: { turn } }], true)
      const batch = yield* claimSTM(state, turn, true)
      yield* appendDrafts(state, [{ type: "turn/end", data: { turn, reason: { kind: "completed" } } }], true)
      return batch
    })
  )
})

/** The splice data of every `agent/inbox/spliced` event, in order. */
export const splices = Effect.map(
  Effect.flatMap(SessionLog, (log) => log.events),
  (events) => events.filter((e) => e.type === "agent/inbox/spliced").map((e) => e.data)
)
