/**
 * `PgSessionStore` as the package root exports it (SPEC 8.10): the PostgreSQL store
 * (`layers/PgStore.ts`) loaded when its layer is built. The store needs the optional peer dependency
 * `@effect/sql-pg` (with `pg`), so importing tiller never loads it; building this layer without it
 * fails with a `PersistenceError` whose message says what to install.
 *
 * @since 0.1.0
 */
import type { Config, ConfigError } from "effect"
import { Effect, Layer } from "effect"
import { PersistenceError } from "../domain/Errors.js"
import * as OptionalPeer from "../internal/peers/OptionalPeer.js"
import { SessionStore } from "../services/SessionStore.js"
import type { PgSessionStoreOptions } from "./PgStore.js"

// The store's module, loaded with its driver; a `PersistenceError` (session "*", operation open)
// naming the packages to install when they are missing.
const loadStore = OptionalPeer.load(
  OptionalPeer.POSTGRES,
  () => import("./PgStore.js"),
  (cause) => new PersistenceError({ sessionId: "*", operation: "open", cause })
)

/**
 * The PostgreSQL session store: durable sessions on a database server shared by processes and hosts
 * (SPEC 6.1, 8.10); needs the optional peer `@effect/sql-pg`.
 *
 * @since 0.1.0
 * @category layers
 */
export const PgSessionStore: {
  /** A store on the server `options` names (a `url`, or host, port, database, ...), open for the layer's lifetime. */
  readonly layer: (options: PgSessionStoreOptions) => Layer.Layer<SessionStore, PersistenceError>
  /** `layer` with its options read from `Config` (each field may be a `Config`, e.g. `Config.redacted("DATABASE_URL")`). */
  readonly layerConfig: (
    config: Config.Config.Wrap<PgSessionStoreOptions>
  ) => Layer.Layer<SessionStore, PersistenceError | ConfigError.ConfigError>
} = {
  layer: (options) => Layer.scoped(SessionStore, Effect.flatMap(loadStore, (store) => store.make(options))),
  layerConfig: (config) =>
    Layer.unwrapScoped(Effect.map(loadStore, (store) => store.PgSessionStore.layerConfig(config)))
}
