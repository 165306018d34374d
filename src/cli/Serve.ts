/**
 * `tiller serve`: a runner of the session cluster that also serves sessions over HTTP/JSON. The
 * cluster's messages, runners and shard locks live in PostgreSQL (`@effect/cluster`'s SQL storage);
 * the sessions live in the store `--db` names; runners talk to each other over TCP.
 *
 * @since 0.1.0
 */
import * as RunnerAddress from "@effect/cluster/RunnerAddress"
import * as ShardingConfig from "@effect/cluster/ShardingConfig"
import * as SqlMessageStorage from "@effect/cluster/SqlMessageStorage"
import * as SqlRunnerStorage from "@effect/cluster/SqlRunnerStorage"
import * as NodeClusterSocket from "@effect/platform-node/NodeClusterSocket"
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import * as HttpServer from "@effect/platform/HttpServer"
import * as PgClient from "@effect/sql-pg/PgClient"
import * as SqlClient from "@effect/sql/SqlClient"
import type { SqlError } from "@effect/sql/SqlError"
import type { Duration } from "effect"
import { Config, Effect, Layer, Option, Redacted } from "effect"
import * as fs from "node:fs"
import { createServer } from "node:http"
import { ClusterSessions } from "../layers/ClusterSessions.js"
import * as ClusterTimings from "../layers/ClusterTimings.js"
import { PgSessionStore } from "../layers/PgSessionStore.js"
import * as SessionHttp from "../layers/SessionHttp.js"
import { SqliteSessionStore } from "../layers/SqliteStore.js"
import type { SessionStore } from "../services/SessionStore.js"
import { Tools } from "../services/Tools.js"
import { CliError } from "./CliError.js"
import { resolveModel } from "./Environment.js"

/**
 * The variable holding the server's bearer token (one token, or several separated by commas).
 *
 * @since 0.1.0
 * @category constants
 */
export const TOKEN_ENV = "TILLER_SERVER_TOKEN"

/**
 * Options of one runner.
 *
 * @since 0.1.0
 * @category models
 */
export interface ServeOptions {
  /** The session store: a SQLite file, or a `postgres://` URL. */
  readonly db: string
  /** The PostgreSQL database of the cluster's storage (default: `db` when it is a `postgres://` URL). */
  readonly clusterDb?: string | undefined
  readonly model: string
  readonly host: string
  readonly port: number
  readonly runnerHost: string
  readonly runnerPort: number
  readonly tokenFile?: string | undefined
  readonly maxBodyBytes?: number | undefined
  readonly maxIdleTime?: Duration.DurationInput | undefined
  readonly maxSteps?: number | undefined
}

/**
 * Whether `db` names a PostgreSQL database.
 *
 * @since 0.1.0
 * @category predicates
 */
export const isPostgresUrl = (db: string): boolean => /^postgres(ql)?:\/\//.test(db)

/**
 * The bearer tokens: `--token-file` (one per line) or `TILLER_SERVER_TOKEN` (comma-separated).
 *
 * @since 0.1.0
 * @category constructors
 */
export const readTokens = (tokenFile: string | undefined): Effect.Effect<ReadonlyArray<string>, CliError> =>
  Effect.gen(function*() {
    const raw = tokenFile !== undefined
      ? yield* Effect.try({
        try: () => fs.readFileSync(tokenFile, "utf8").split(/\r?\n/),
        catch: () => new CliError({ reason: `cannot read the token file ${tokenFile}` })
      })
      : (yield* Config.string(TOKEN_ENV).pipe(Config.withDefault(""))).split(",")
    const tokens = raw.map((token) => token.trim()).filter((token) => token !== "")
    if (tokens.length === 0) {
      return yield* new CliError({ reason: `tiller serve needs a token: set ${TOKEN_ENV} or give --token-file FILE` })
    }
    return tokens
  }).pipe(Effect.catchTag("ConfigError", () => Effect.fail(new CliError({ reason: `invalid ${TOKEN_ENV}` }))))

/**
 * The session store of `db`.
 *
 * @since 0.1.0
 * @category layers
 */
export const storeLayer = (db: string): Layer.Layer<SessionStore, CliError> =>
  isPostgresUrl(db)
    ? Layer.mapError(
      PgSessionStore.layer({ url: Redacted.make(db), applicationName: "tiller-serve", maxConnections: 20 }),
      (error) => new CliError({ reason: error.message })
    )
    : Layer.mapError(SqliteSessionStore.layer({ filename: db }), (error) => new CliError({ reason: error.message }))

// One advisory lock key for the cluster's table setup ("tiller serve migrations").
const MIGRATION_LOCK = 7_331_000_001

/**
 * The cluster's tables, created once however many runners start together on a new database:
 * `@effect/sql`'s migrator creates its own table outside any lock, so runners that migrate at the
 * same moment fail. The first runner to take a session advisory lock builds the cluster's message
 * and runner storage (which migrate) and releases both; the others wait for the lock and find the
 * migrations done.
 *
 * @since 0.1.0
 * @category layers
 */
export const clusterTablesReady = (
  shardingConfig: Partial<ShardingConfig.ShardingConfig["Type"]>
): Layer.Layer<never, SqlError, SqlClient.SqlClient> =>
  Layer.effectDiscard(Effect.scoped(Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const conn = yield* sql.reserve
    yield* Effect.acquireRelease(
      conn.executeRaw("SELECT pg_advisory_lock($1)", [MIGRATION_LOCK]),
      () => Effect.ignore(conn.executeRaw("SELECT pg_advisory_unlock($1)", [MIGRATION_LOCK]))
    )
    yield* Effect.scoped(Layer.build(
      Layer.merge(SqlMessageStorage.layer, SqlRunnerStorage.layer).pipe(
        Layer.provide(ShardingConfig.layer(shardingConfig))
      )
    ))
  })))

/**
 * The runner: sharding over PostgreSQL, the session entity, the HTTP server. Building it starts
 * serving; closing its scope leaves the cluster (its sessions move to the other runners).
 *
 * @since 0.1.0
 * @category layers
 */
export const layer = (options: ServeOptions): Layer.Layer<never, CliError> =>
  Layer.unwrapEffect(Effect.gen(function*() {
    const clusterDb = options.clusterDb ?? (isPostgresUrl(options.db) ? options.db : undefined)
    if (clusterDb === undefined || !isPostgresUrl(clusterDb)) {
      return yield* new CliError({
        reason: "tiller serve needs PostgreSQL for the cluster: --db postgres://… or --cluster-db postgres://…"
      })
    }
    const tokens = yield* readTokens(options.tokenFile)
    const model = yield* resolveModel(options.model)
    const sql = PgClient.layer({ url: Redacted.make(clusterDb), applicationName: "tiller-serve" })
    const shardingConfig = ClusterTimings.make({
      runnerAddress: Option.some(RunnerAddress.make(options.runnerHost, options.runnerPort)),
      ...(options.maxIdleTime === undefined ? {} : { entityMaxIdleTime: options.maxIdleTime })
    })
    const sharding = NodeClusterSocket.layer({ storage: "sql", shardingConfig }).pipe(
      Layer.provide(Layer.provideMerge(clusterTablesReady(shardingConfig), sql))
    )
    const entity = ClusterSessions.layer({
      model: model.header,
      ...(options.maxSteps === undefined ? {} : { maxSteps: options.maxSteps })
    }).pipe(Layer.provide(Layer.merge(model.layer, Tools.layer({ tools: [] }))))
    const http = Layer.unwrapEffect(
      Effect.map(
        SessionHttp.make({
          tokens,
          ...(options.maxBodyBytes === undefined ? {} : { maxBodyBytes: options.maxBodyBytes })
        }),
        (app) => HttpServer.serve(app)
      )
    ).pipe(Layer.provide(NodeHttpServer.layer(createServer, { port: options.port, host: options.host })))
    return Layer.mergeAll(entity, http).pipe(
      Layer.provide(sharding),
      Layer.provide(storeLayer(options.db)),
      Layer.mapError((error) =>
        error instanceof CliError
          ? error
          : new CliError({ reason: `tiller serve could not start: ${describe(error)}` })
      )
    )
  }))

// A start failure without the database URL (a password in it is never printed).
const describe = (error: unknown): string => {
  const tag = (error as { readonly _tag?: unknown })?._tag
  const message = error instanceof Error ? error.message : String(error)
  return `${typeof tag === "string" ? `${tag}: ` : ""}${message.replace(/postgres(ql)?:\/\/\S+/g, "postgres://…")}`
}
