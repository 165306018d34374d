/**
 * The open lease: at most one live agent per session id per store layer instance (SPEC 6.1). The
 * lease set travels with the store service object itself, so two store layers never share leases
 * and nothing lives at module level. A store whose file other processes may open (SQLite) offers a
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

const leaseKey: unique symbol = Symbol("tiller/internal/Lease")

const processLeaseOf = (store: StoreShape): ProcessLease | undefined => store.processLease

const leasesOf = (store: StoreShape): Set<string> => {
  const holder = store as { [leaseKey]?: Set<string> }
  let leases = holder[leaseKey]
  if (leases === undefined) {
    leases = new Set()
    Object.defineProperty(holder, leaseKey, { value: leases, enumerable: false })
  }
  return leases
}

/**
 * Holds this store layer's in-process lease on `sessionId` for the current scope; `AgentBusy
 * {operation: "open"}` if another agent of this store layer holds it. Writes nothing.
 *
 * @since 0.1.0
 * @category leases
 */
export const acquireLocalLease = (
  store: StoreShape,
  sessionId: SessionId
): Effect.Effect<void, AgentBusy, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.suspend(() => {
      const leases = leasesOf(store)
      if (leases.has(sessionId)) return Effect.fail(new AgentBusy({ sessionId, operation: "open", phase: "open" }))
      leases.add(sessionId)
      return Effect.void
    }),
    () => Effect.sync(() => void leasesOf(store).delete(sessionId))
  )

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
