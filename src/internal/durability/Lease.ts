/**
 * The open lease: at most one live agent per session id per store layer instance (SPEC 6.1). Each
 * store instance offers its own lease within the process (`StoreShape.localLease`, built by
 * `makeLocalLease` in `LocalLease.ts`), so two store layers never share leases and nothing lives at module level. A store whose file other processes may open (SQLite) offers a
 * lease across processes (`StoreShape.processLease`), taken after the in-process one. The lease across processes is a row the
 * store writes: a resume checks it (reading only) and takes it once the log was loaded and
 * validated, so a refused resume leaves the file as it was.
 *
 * @since 0.1.0
 */
import type { Scope } from "effect"
import { Effect } from "effect"
import type { PersistenceError } from "../../domain/Errors.js"
import { AgentBusy } from "../../domain/Errors.js"
import type { SessionId } from "../../domain/Ids.js"
import type { ProcessLease } from "./ProcessLease.js"
import type { StoreShape } from "./Store.js"

const processLeaseOf = (store: StoreShape): ProcessLease | undefined => store.processLease

/**
 * Holds the store's in-process lease on `sessionId` for the current scope (for a store that offers
 * one: the memory and SQLite stores do); `AgentBusy {operation: "open"}` if another agent of this
 * store holds it. Writes nothing.
 *
 * @since 0.1.0
 * @category leases
 */
export const acquireLocalLease = (
  store: StoreShape,
  sessionId: SessionId
): Effect.Effect<void, AgentBusy, Scope.Scope> => store.localLease?.(sessionId) ?? Effect.void

/**
 * Fails with `AgentBusy` while another live process holds `sessionId` (for a store with a lease
 * across processes); reads only.
 *
 * @since 0.1.0
 * @category leases
 */
export const checkProcessLease = (
  store: StoreShape,
  sessionId: SessionId
): Effect.Effect<void, AgentBusy | PersistenceError> =>
  Effect.suspend(() => processLeaseOf(store)?.check(sessionId) ?? Effect.void)

/**
 * Holds the lease across processes on `sessionId` for the current scope (for a store that has one);
 * `AgentBusy` while another live process holds it. Given the `length` of the log loaded before,
 * it answers whether the stored log still has that many events (always `true` without a lease
 * across processes: the in-process lease already excludes every other writer).
 *
 * @since 0.1.0
 * @category leases
 */
export const acquireProcessLease = (
  store: StoreShape,
  sessionId: SessionId,
  length?: number
): Effect.Effect<boolean, AgentBusy | PersistenceError, Scope.Scope> =>
  Effect.suspend(() => {
    const lease = processLeaseOf(store)
    return lease === undefined
      ? Effect.succeed(true)
      : Effect.acquireRelease(lease.acquire(sessionId, length), () => lease.release(sessionId))
  })
