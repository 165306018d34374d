/**
 * The SQLite store's lease across processes (SPEC 6.1): a row of the `leases` table names the
 * process (pid and host) that holds a session. Another process holding it (a live pid on this host,
 * or any pid on another host, which cannot be checked) makes the open fail with `AgentBusy`; a lease
 * left by a process that died is taken over. This process's own leases are governed by the
 * in-process lease (`Lease`).
 *
 * @since 0.1.0
 */
import type { Connection } from "@effect/sql/SqlConnection"
import type { SqlError } from "@effect/sql/SqlError"
import { Effect } from "effect"
import * as os from "node:os"
import { AgentBusy } from "../../domain/Errors.js"
import type { SessionId } from "../../domain/Ids.js"
import type { ProcessLease } from "./ProcessLease.js"
import { persistenceError } from "./SqliteDirect.js"

/**
 * The store's connection as the lease uses it.
 *
 * @since 0.1.0
 * @category models
 */
export interface LeaseConnection {
  /** The store's reserved connection, used inside `transaction`'s body. */
  readonly conn: Connection
  /** Runs one statement outside any transaction, waiting for another process's lock. */
  readonly query: (text: string, params: ReadonlyArray<unknown>) => Effect.Effect<ReadonlyArray<unknown>, SqlError>
  /** Runs `body` in one transaction, again after another process's lock is gone. */
  readonly transaction: <A, E>(begin: "BEGIN IMMEDIATE", body: Effect.Effect<A, E>) => Effect.Effect<A, E | SqlError>
}

const SELECT_LEASE = "SELECT pid, host FROM leases WHERE session_id = ?"
const TAKE_LEASE = "INSERT OR REPLACE INTO leases (session_id, pid, host) VALUES (?, ?, ?)"
const DROP_LEASE = "DELETE FROM leases WHERE session_id = ? AND pid = ? AND host = ?"
const SELECT_LENGTH = "SELECT length FROM sessions WHERE id = ?"

/**
 * Whether process `pid` of this host is alive (signal 0 checks without signalling; a process of
 * another user counts as alive).
 *
 * @since 0.1.0
 * @category predicates
 */
export const alive = (pid: number): boolean => {
  try {
    process.kill(pid, 0)
    return true
  } catch (error) {
    return (error as { readonly code?: unknown }).code === "EPERM"
  }
}

/**
 * The lease across processes over the store's connection.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = ({ conn, query, transaction }: LeaseConnection): ProcessLease => {
  const host = os.hostname()
  const heldElsewhere = (id: SessionId, rows: ReadonlyArray<unknown>): AgentBusy | undefined => {
    const holder = rows[0] as { readonly pid: number; readonly host: string } | undefined
    return holder !== undefined && holder.pid !== process.pid && (holder.host !== host || alive(holder.pid))
      ? new AgentBusy({ sessionId: id, operation: "open", phase: "open" })
      : undefined
  }
  return {
    check: (id) =>
      Effect.flatMap(Effect.mapError(query(SELECT_LEASE, [id]), persistenceError(id, "open")), (rows) => {
        const busy = heldElsewhere(id, rows)
        return busy === undefined ? Effect.void : Effect.fail(busy)
      }),
    acquire: (id, length) =>
      transaction(
        "BEGIN IMMEDIATE",
        Effect.gen(function*() {
          const busy = heldElsewhere(id, yield* conn.execute(SELECT_LEASE, [id], undefined))
          if (busy !== undefined) return yield* busy
          yield* conn.execute(TAKE_LEASE, [id, process.pid, host], undefined)
          if (length === undefined) return true
          const [stored] = yield* conn.execute(SELECT_LENGTH, [id], undefined)
          return (stored as { readonly length: number } | undefined)?.length === length
        })
      ).pipe(Effect.catchTag("SqlError", (cause) => Effect.fail(persistenceError(id, "open")(cause)))),
    release: (id) => Effect.ignore(query(DROP_LEASE, [id, process.pid, host]))
  }
}
