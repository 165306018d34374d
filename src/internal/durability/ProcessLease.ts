/**
 * The lease across processes a store may offer (`StoreShape.processLease`): for a database that
 * several processes may open, at most one of them serves a session at a time (SPEC 6.1).
 *
 * @since 0.1.0
 */
import type { Effect } from "effect"
import type { AgentBusy, PersistenceError } from "../../domain/Errors.js"
import type { SessionId } from "../../domain/Ids.js"

/**
 * A store's lease across processes (a database file shared by several processes): `check` (which
 * only reads) and `acquire` fail with `AgentBusy` while another live process holds the session;
 * `acquire` given the session's loaded `length` answers whether the stored log still has that many
 * events; `release` gives the lease up.
 *
 * @since 0.1.0
 * @category models
 */
export interface ProcessLease {
  readonly check: (sessionId: SessionId) => Effect.Effect<void, AgentBusy | PersistenceError>
  readonly acquire: (sessionId: SessionId, length?: number) => Effect.Effect<boolean, AgentBusy | PersistenceError>
  readonly release: (sessionId: SessionId) => Effect.Effect<void>
}
