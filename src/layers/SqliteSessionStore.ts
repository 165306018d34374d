/**
 * `SqliteSessionStore` as the package root exports it (SPEC 8.10): the SQLite store
 * (`layers/SqliteStore.ts`) loaded when its layer is built. The store needs the optional peer
 * dependencies `@effect/sql-sqlite-node` and `better-sqlite3` (a native module), so importing
 * tiller never loads them: an application on the memory store neither installs nor compiles them,
 * and one that builds this layer without them gets a `PersistenceError` whose message says what to
 * install.
 *
 * @since 0.1.0
 */
import { Effect, Layer } from "effect"
import { PersistenceError } from "../domain/Errors.js"
import * as OptionalPeer from "../internal/peers/OptionalPeer.js"
import { SessionStore } from "../services/SessionStore.js"
import type { SqliteSessionStoreOptions } from "./SqliteStore.js"

// The store's module, loaded with its driver; a `PersistenceError` (session "*", operation open)
// naming the packages to install when they are missing.
const loadStore = OptionalPeer.load(
  OptionalPeer.SQLITE,
  () => import("./SqliteStore.js"),
  (cause) => new PersistenceError({ sessionId: "*", operation: "open", cause })
)

/**
 * The SQLite session store: durable sessions in one database file (SPEC 6.1, 8.10); needs the
 * optional peers `@effect/sql-sqlite-node` and `better-sqlite3`.
 *
 * @since 0.1.0
 * @category layers
 */
export const SqliteSessionStore: {
  /** A store over `options.filename`, open for the layer's lifetime. */
  readonly layer: (options: SqliteSessionStoreOptions) => Layer.Layer<SessionStore, PersistenceError>
} = {
  layer: (options) => Layer.scoped(SessionStore, Effect.flatMap(loadStore, (store) => store.make(options)))
}
