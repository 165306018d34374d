/**
 * ClusterTimings: the cluster timings tiller ships. `@effect/cluster`'s own defaults move the
 * sessions of a dead runner after about 35 s (its shard locks expire after 35 s and runners are
 * checked once a minute); tiller's move them within a few seconds, at the price of a heartbeat and
 * an assignment refresh per runner every second or less.
 *
 * @since 0.1.0
 */
import type { ShardingConfig } from "@effect/cluster/ShardingConfig"
import { Duration } from "effect"

/**
 * The timings (a partial `ShardingConfig`) every tiller runner uses unless told otherwise.
 *
 * @since 0.1.0
 * @category constants
 */
export const defaults: Partial<ShardingConfig["Type"]> = {
  // A runner that stops refreshing is out of the cluster after this time (its heartbeat expires).
  // A dead runner's peers ping it every second and drop it within a few seconds, but the pings run
  // on one runner (a cluster singleton): when that runner is the one that died, this expiry is
  // what moves its sessions.
  shardLockExpiration: Duration.seconds(6),
  // Lock refreshes time out after min(refresh, expiration / 3), and a runner whose refresh times out
  // drops every shard it holds (its sessions close and reopen elsewhere): 2 s, the most a 6 s expiry
  // allows (1.5 s timed out on 2 loaded cores far more often).
  shardLockRefreshInterval: Duration.seconds(2),
  // A runner that dies is found by its peers' pings (refused at once) before its heartbeat expires.
  // Fewer shards than the 300 of `@effect/cluster`: fewer lock rows refreshed each time.
  shardsPerGroup: 64,
  // How often a runner reads the runner list and takes or releases shards.
  refreshAssignmentsInterval: Duration.millis(250),
  // How often a runner asks its peers whether they are alive (a dead one refuses at once).
  runnerHealthCheckInterval: Duration.seconds(1),
  // Persisted messages not yet processed are read this often (and at once when a shard is taken).
  entityMessagePollInterval: Duration.millis(500),
  entityReplyPollInterval: Duration.millis(50),
  sendRetryInterval: Duration.millis(50),
  entityMaxIdleTime: Duration.minutes(1),
  entityTerminationTimeout: Duration.seconds(5)
}

/**
 * `defaults` with `overrides` on top.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (overrides: Partial<ShardingConfig["Type"]> = {}): Partial<ShardingConfig["Type"]> => ({
  ...defaults,
  ...overrides
})
