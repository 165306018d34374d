/**
 * `tiller/cluster`: sessions as `@effect/cluster` entities, their client and the HTTP front door.
 * A separate entry point, so that `tiller` itself never loads the optional peers `@effect/cluster`
 * and `@effect/rpc`.
 *
 * @since 0.1.0
 */
export { client, ClusterSessions, followLog, retryDelivery } from "./layers/ClusterSessions.js"
export type { ClusterDeliveryError, ClusterError, OwnerError, SessionClient } from "./layers/ClusterSessions.js"
export * as ClusterTimings from "./layers/ClusterTimings.js"
export * as SessionEntity from "./layers/SessionEntity.js"
export type { SessionEntityOptions } from "./layers/SessionEntityHandlers.js"
export * as SessionHttp from "./layers/SessionHttp.js"
