/**
 * The PostgreSQL store's lease across processes (SPEC 6.1): a session-level advisory lock per
 * session, held on one connection the store reserves for its leases (taken at the first lease, kept
 * for the store's lifetime). The database itself releases the locks of a holder that dies, on this
 * host or any other: the process exits or is killed, its host goes away, or the connection drops.
 * Another holder makes an open fail with `AgentBusy`.
 *
 * The lock key is the 64-bit `hashtextextended` of the session id. Should the lease connection fail,
 * it is given up (the server has released its locks) and the next lease reserves a new one; a
 * session whose lease went that way may then be opened elsewhere, and its next append meets the
 * store's optimistic length check instead (the log stays whole; the stale session is poisoned).
 *
 * @since 0.1.0
 */
import type * as SqlClient from "@effect/sql/SqlClient"
import type { Connection } from "@effect/sql/SqlConnection"
import type { SqlError } from "@effect/sql/SqlError"
import { Effect, ExecutionStrategy, Exit, Scope } from "effect"
import { AgentBusy } from "../../domain/Errors.js"
import type { SessionId } from "../../domain/Ids.js"
import type { ProcessLease } from "./ProcessLease.js"
import { PG_TABLES } from "./SqlSchema.js"
import { persistenceError } from "./SqlStore.js"

// The seed of the key hash, so that tiller's keys differ from another application's on the same database.
const KEY = "hashtextextended($1, 7411)"
// A transaction-level lock outside a transaction block lasts for the statement: taken and released at once.
const CHECK = `SELECT pg_try_advisory_xact_lock(${KEY}) AS free`
const LOCK = `SELECT pg_try_advisory_lock(${KEY}) AS locked`
const UNLOCK = `SELECT pg_advisory_unlock(${KEY}) AS unlocked`
const SELECT_LENGTH = `SELECT length FROM ${PG_TABLES.sessions} WHERE id = $1`

/**
 * The lease across processes over `sql`, its connection reserved in (a child of) `scope`.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (sql: SqlClient.SqlClient, scope: Scope.Scope): Effect.Effect<ProcessLease> =>
  Effect.gen(function*() {
    const lock = yield* Effect.makeSemaphore(1)
    const held = new Set<string>()
    let current: { readonly connection: Connection; readonly scope: Scope.CloseableScope } | undefined

    const connection = Effect.suspend(() => {
      if (current !== undefined) return Effect.succeed(current.connection)
      return Effect.flatMap(Scope.fork(scope, ExecutionStrategy.sequential), (child) =>
        sql.reserve.pipe(
          Scope.extend(child),
          Effect.tap((connection) => Effect.sync(() => void (current = { connection, scope: child }))),
          Effect.onError((cause) => Scope.close(child, Exit.failCause(cause)))
        ))
    })

    // One statement on the lease connection; a failure gives the connection (and every lock on it) up.
    const run = (text: string, id: string): Effect.Effect<ReadonlyArray<Record<string, unknown>>, SqlError> =>
      lock.withPermits(1)(Effect.flatMap(connection, (conn) =>
        Effect.tapError(
          conn.execute(text, [id], undefined) as Effect.Effect<ReadonlyArray<Record<string, unknown>>, SqlError>,
          () =>
            Effect.suspend(() => {
              const lost = current
              current = undefined
              held.clear()
              return lost === undefined ? Effect.void : Scope.close(lost.scope, Exit.void)
            })
        )))

    const busy = (id: SessionId) => new AgentBusy({ sessionId: id, operation: "open", phase: "open" })

    const lease: ProcessLease = {
      check: (id) =>
        run(CHECK, id).pipe(
          Effect.mapError(persistenceError(id, "open")),
          Effect.flatMap((rows) => rows[0]?.free === true ? Effect.void : Effect.fail(busy(id)))
        ),
      acquire: (id, length) =>
        Effect.gen(function*() {
          if (!held.has(id)) {
            const [row] = yield* run(LOCK, id)
            if (row?.locked !== true) return yield* busy(id)
            held.add(id)
          }
          if (length === undefined) return true
          const [stored] = yield* sql.unsafe<{ readonly length: number }>(SELECT_LENGTH, [id])
          return stored !== undefined && Number(stored.length) === length
        }).pipe(Effect.catchTag("SqlError", (cause) => Effect.fail(persistenceError(id, "open")(cause)))),
      release: (id) =>
        Effect.suspend(() => {
          if (!held.delete(id)) return Effect.void
          return Effect.ignore(run(UNLOCK, id))
        })
    }
    return lease
  })
