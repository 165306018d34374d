/**
 * The lease within the process a store offers (`StoreShape.localLease`): at most one live agent
 * per session id per store instance (SPEC 6.1).
 *
 * @since 0.1.0
 */
import type { Scope } from "effect"
import { Effect } from "effect"
import { AgentBusy } from "../../domain/Errors.js"
import type { SessionId } from "../../domain/Ids.js"

/**
 * A store's lease within the process (`StoreShape.localLease`): held for the current scope;
 * `AgentBusy {operation: "open"}` while another agent of the same store holds it. Writes nothing.
 *
 * @since 0.1.0
 * @category models
 */
export type LocalLease = (sessionId: SessionId) => Effect.Effect<void, AgentBusy, Scope.Scope>

/**
 * A fresh lease within the process, over a set of the session ids held, for one store instance.
 *
 * @since 0.1.0
 * @category constructors
 */
export const makeLocalLease = (): LocalLease => {
  const leases = new Set<string>()
  return (sessionId) =>
    Effect.acquireRelease(
      Effect.suspend(() => {
        if (leases.has(sessionId)) return Effect.fail(new AgentBusy({ sessionId, operation: "open", phase: "open" }))
        leases.add(sessionId)
        return Effect.void
      }),
      () => Effect.sync(() => void leases.delete(sessionId))
    )
}
