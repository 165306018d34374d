/**
 * The process-local open lease: at most one live agent per session id per store layer instance
 * (SPEC 6.1). The lease set travels with the store service object itself, so two store layers
 * never share leases and nothing lives at module level.
 *
 * @since 0.1.0
 */
import type { Context, Scope } from "effect"
import { Effect } from "effect"
import { AgentBusy } from "../domain/Errors.js"
import type { SessionId } from "../domain/Ids.js"
import type { SessionStore } from "../services/SessionStore.js"

const leaseKey: unique symbol = Symbol("tiller/internal/Lease")

const leasesOf = (store: Context.Tag.Service<SessionStore>): Set<string> => {
  const holder = store as { [leaseKey]?: Set<string> }
  let leases = holder[leaseKey]
  if (leases === undefined) {
    leases = new Set()
    Object.defineProperty(holder, leaseKey, { value: leases, enumerable: false })
  }
  return leases
}

/**
 * Holds the lease on `sessionId` for the current scope; `AgentBusy {operation: "open"}` if another
 * agent of this store layer holds it.
 *
 * @since 0.1.0
 * @category leases
 */
export const acquireLease = (
  store: Context.Tag.Service<SessionStore>,
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
