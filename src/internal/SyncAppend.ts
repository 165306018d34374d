/**
 * Stores that can also append synchronously (the memory store). A session that needs durability
 * while no append is in flight writes its pending events through it at once (see
 * `Writer.writeNow`), without waking its writer fiber and waiting for it.
 *
 * @since 0.1.0
 */
import type { SessionEvent } from "../domain/Event.js"
import type { SessionId } from "../domain/Ids.js"

/**
 * Appends `events` to session `id` at once, as one atomic store append, and returns `true`; or
 * changes nothing and returns `false` when it cannot now (the store's own `append` will then say
 * why, or wait for what holds it).
 *
 * @since 0.1.0
 * @category models
 */
export type AppendNow = (id: SessionId, events: ReadonlyArray<SessionEvent>) => boolean

const registry = new WeakMap<object, AppendNow>()

/**
 * Registers the synchronous append of `store`.
 *
 * @since 0.1.0
 * @category registration
 */
export const register = (store: object, appendNow: AppendNow): void => {
  registry.set(store, appendNow)
}

/**
 * The synchronous append registered for `store`, if any.
 *
 * @since 0.1.0
 * @category getters
 */
export const of = (store: object): AppendNow | undefined => registry.get(store)
