/**
 * tiller: an event-sourced agent runtime on Effect.
 *
 * @since 0.1.0
 */
export * from "./domain/index.js"

/**
 * The domain names as one namespace.
 *
 * @since 0.1.0
 */
export * as Domain from "./domain/index.js"

export { Inbox } from "./services/Inbox.js"
export type { DeliveryError, InboxSnapshot } from "./services/Inbox.js"
export { SessionLog } from "./services/SessionLog.js"
export type { AppendInput } from "./services/SessionLog.js"
export { MemoryStoreControl, SessionStore } from "./services/SessionStore.js"
export type { StoreSnapshot } from "./services/SessionStore.js"

/**
 * The session preset: a session's log and inbox over a store.
 *
 * @since 0.1.0
 */
export * as Session from "./layers/Session.js"
