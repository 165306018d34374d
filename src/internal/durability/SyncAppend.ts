/**
 * The synchronous append a store may offer (`StoreShape.appendNow`; the memory store, the SQLite
 * store on a file). A session that needs durability while no append is in flight writes its pending events through it
 * at once (see `WriterSignal.writeNow`), without waking its writer fiber and waiting for it. A store
 * whose every append costs a transaction writes at once only for the loop's own waits (checkpoints,
 * opening, flush), never for an operation's acknowledgement: concurrent callers share the writer's
 * group commit instead of each paying for a transaction.
 *
 * @since 0.1.0
 */
import type { SessionEvent } from "../../domain/Event.js"
import type { SessionId } from "../../domain/Ids.js"

/**
 * Appends `events` to session `id` at once, as one atomic store append, and returns `true`; or
 * changes nothing and returns `false` when it cannot now (the store's own `append` will then say
 * why, or wait for what holds it).
 *
 * @since 0.1.0
 * @category models
 */
export type AppendNow = (id: SessionId, events: ReadonlyArray<SessionEvent>) => boolean

/**
 * A store's synchronous append (`StoreShape.appendNow`) and whether acknowledgements may use it.
 *
 * @since 0.1.0
 * @category models
 */
export interface SyncAppend {
  readonly append: AppendNow
  /** Whether an operation's acknowledgement writes at once (`false`: it waits for group commit). */
  readonly acknowledgements: boolean
}
