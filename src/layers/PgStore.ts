/**
 * The PostgreSQL session store (SPEC 6.1, 8.10) over `@effect/sql-pg`: the SQL session store
 * (internal/durability/SqlStore) with PostgreSQL's statements (internal/durability/SqlDialect), its
 * own migrations (internal/durability/SqlSchema) and a lease across processes and hosts held as
 * advisory locks (internal/durability/PgLease).
 *
 * Events are stored as JSON text, exactly as written. Every statement is parameterised. The
 * password of a connection URL is never printed: errors name the server with the URL's password
 * replaced by `***` (see `redactUrl`).
 *
 * @since 0.1.0
 */
import * as PgClient from "@effect/sql-pg/PgClient"
import * as SqlClient from "@effect/sql/SqlClient"
import type { Scope } from "effect"
import type { ConfigError } from "effect"
import { Config, Context, Duration, Effect, Layer, Redacted } from "effect"
import { PersistenceError } from "../domain/Errors.js"
import * as PgLease from "../internal/durability/PgLease.js"
import * as SqlDialect from "../internal/durability/SqlDialect.js"
import { migratePg } from "../internal/durability/SqlSchema.js"
import * as SqlStore from "../internal/durability/SqlStore.js"
import { SessionStore } from "../services/SessionStore.js"

/**
 * Options of `PgSessionStore.layer`: a connection URL (`postgres://user:password@host:port/db`), or
 * its parts; the URL's parts are overridden by the ones given beside it.
 *
 * @since 0.1.0
 * @category models
 */
export interface PgSessionStoreOptions {
  /** `postgres://user:password@host:port/database?sslmode=...`; keep it `Redacted` where it is logged. */
  readonly url?: string | Redacted.Redacted<string> | undefined
  readonly host?: string | undefined
  readonly port?: number | undefined
  readonly database?: string | undefined
  readonly username?: string | undefined
  readonly password?: string | Redacted.Redacted<string> | undefined
  /** TLS to the server (`true`, or node's TLS options). */
  readonly ssl?: boolean | undefined
  /** The size of the connection pool; default 10 (one more is reserved for leases once a session is opened). */
  readonly maxConnections?: number | undefined
  /** How long connecting may take; default 5 seconds. */
  readonly connectTimeout?: Duration.DurationInput | undefined
  /** `application_name` the server shows for the store's connections; default `"tiller"`. */
  readonly applicationName?: string | undefined
}

const redacted = (value: string | Redacted.Redacted<string> | undefined): Redacted.Redacted<string> | undefined =>
  value === undefined ? undefined : Redacted.isRedacted(value) ? value : Redacted.make(value)

/**
 * A connection URL with its password replaced by `***` (unparseable text is not shown at all).
 *
 * @since 0.1.0
 * @category utils
 */
export const redactUrl = (url: string): string => {
  try {
    const parsed = new URL(url)
    if (parsed.password !== "") parsed.password = "***"
    for (const key of [...parsed.searchParams.keys()]) {
      if (key.toLowerCase() === "password") parsed.searchParams.set(key, "***")
    }
    return parsed.toString()
  } catch {
    return "<a connection URL that does not parse>"
  }
}

/** The server as errors name it: the redacted URL, or host, port and database. */
const serverOf = (options: PgSessionStoreOptions): string => {
  const url = redacted(options.url)
  if (url !== undefined) return redactUrl(Redacted.value(url))
  return `${options.host ?? "localhost"}:${options.port ?? 5432}/${options.database ?? ""}`
}

/**
 * The store over an already migrated-or-not `SqlClient` of PostgreSQL, in the current scope.
 *
 * @since 0.1.0
 * @category constructors
 */
export const makeWithClient = (
  sql: SqlClient.SqlClient
): Effect.Effect<SessionStore["Type"], PersistenceError, Scope.Scope> =>
  Effect.gen(function*() {
    yield* migratePg(sql).pipe(Effect.mapError(SqlStore.persistenceError(SqlStore.ALL_SESSIONS, "open")))
    const processLease = yield* PgLease.make(sql, yield* Effect.scope)
    return SqlStore.make(sql, SqlDialect.pg, { processLease })
  })

/**
 * Builds the PostgreSQL store in the current scope (its connection pool closes with the scope).
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (
  options: PgSessionStoreOptions
): Effect.Effect<SessionStore["Type"], PersistenceError, Scope.Scope> =>
  Effect.gen(function*() {
    const client = yield* Layer.build(PgClient.layer({
      url: redacted(options.url),
      host: options.host,
      port: options.port,
      database: options.database,
      username: options.username,
      password: redacted(options.password),
      ssl: options.ssl,
      maxConnections: options.maxConnections,
      connectTimeout: options.connectTimeout ?? Duration.seconds(5),
      applicationName: options.applicationName ?? "tiller"
    }))
    return yield* makeWithClient(Context.get(client, SqlClient.SqlClient))
  }).pipe(
    Effect.catchAllDefect(Effect.fail),
    Effect.mapError((error) => {
      if (error instanceof PersistenceError) return error
      const { cause } = SqlStore.persistenceError(SqlStore.ALL_SESSIONS, "open")(error)
      return new PersistenceError({
        sessionId: SqlStore.ALL_SESSIONS,
        operation: "open",
        cause: `${String(cause)} (server ${serverOf(options)})`
      })
    })
  )

/**
 * The PostgreSQL session store: durable sessions on a database server (SPEC 6.1, 8.10).
 *
 * @since 0.1.0
 * @category layers
 */
export const PgSessionStore: {
  /** A store on the server `options` names, open for the layer's lifetime. */
  readonly layer: (options: PgSessionStoreOptions) => Layer.Layer<SessionStore, PersistenceError>
  /** `layer` with options read from `Config` (each field may be a `Config`). */
  readonly layerConfig: (
    config: Config.Config.Wrap<PgSessionStoreOptions>
  ) => Layer.Layer<SessionStore, PersistenceError | ConfigError.ConfigError>
} = {
  layer: (options) => Layer.scoped(SessionStore, make(options)),
  layerConfig: (config) => Layer.scoped(SessionStore, Effect.flatMap(Config.unwrap(config), make))
}
