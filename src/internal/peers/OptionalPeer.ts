/**
 * Optional peer dependencies: packages tiller's package declares as optional peers because only one
 * feature needs them (the SQLite store needs `@effect/sql-sqlite-node` and its native driver
 * `better-sqlite3`; OTLP export needs `@effect/opentelemetry`). The modules that use them are loaded
 * with a dynamic `import()` when the feature is built, so an application that never builds it
 * neither installs nor compiles them, and the package root stays importable without them. A module
 * that cannot load because one of them is missing is reported with the install line that fixes it.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"

/**
 * A feature's optional peers: the packages and the versions to install, as the package's
 * `peerDependencies` state them.
 *
 * @since 0.1.0
 * @category models
 */
export interface OptionalPeers {
  /** What needs them, as a reader says it (`"the SQLite store"`). */
  readonly feature: string
  /** Each package and its version range, in the order the install line names them. */
  readonly packages: ReadonlyArray<readonly [name: string, range: string]>
}

/**
 * The SQLite store's optional peers (`@effect/sql` comes with `@effect/sql-sqlite-node`, whose peer it is).
 *
 * @since 0.1.0
 * @category constants
 */
export const SQLITE: OptionalPeers = {
  feature: "the SQLite store",
  packages: [["@effect/sql-sqlite-node", "^0.53.0"], ["@effect/sql", "^0.52.1"], ["better-sqlite3", "^12.11.1"]]
}

/**
 * The PostgreSQL store's optional peers (`pg` comes with `@effect/sql-pg`).
 *
 * @since 0.1.0
 * @category constants
 */
export const POSTGRES: OptionalPeers = {
  feature: "the PostgreSQL store",
  packages: [["@effect/sql-pg", "^0.53.0"], ["@effect/sql", "^0.52.1"]]
}

/**
 * OTLP export's optional peer.
 *
 * @since 0.1.0
 * @category constants
 */
export const OPENTELEMETRY: OptionalPeers = {
  feature: "OTLP export (Telemetry.layerOtlp, Telemetry.makeOtlpTracer)",
  packages: [["@effect/opentelemetry", "^0.64.1"]]
}

/**
 * The command that installs `peers`.
 *
 * @since 0.1.0
 * @category utils
 */
export const installLine = (peers: OptionalPeers): string =>
  `npm install ${peers.packages.map(([name, range]) => `${name}@${range}`).join(" ")}`

// Node says `Cannot find package 'better-sqlite3' imported from …` (ERR_MODULE_NOT_FOUND); a
// CommonJS require says `Cannot find module 'better-sqlite3'` (MODULE_NOT_FOUND).
const MISSING = /Cannot find (?:package|module) '([^']+)'/

/**
 * The package among `peers` whose absence `cause` (a failed import) reports, or undefined when it
 * failed for another reason (a missing file of tiller's own, an error while evaluating a module).
 *
 * @since 0.1.0
 * @category utils
 */
export const missingPeer = (peers: OptionalPeers, cause: unknown): string | undefined => {
  const message = typeof cause === "object" && cause !== null && "message" in cause
    ? String(cause.message)
    : String(cause)
  const named = MISSING.exec(message)?.[1]
  if (named === undefined) return undefined
  return peers.packages.find(([name]) => named === name || named.startsWith(`${name}/`))?.[0]
}

/**
 * What to tell the user when `cause` is the absence of one of `peers`; undefined otherwise.
 *
 * @since 0.1.0
 * @category utils
 */
export const missingMessage = (peers: OptionalPeers, cause: unknown): string | undefined => {
  const missing = missingPeer(peers, cause)
  return missing === undefined
    ? undefined
    : `${peers.feature} needs the optional peer dependencies of tiller ${
      peers.packages.map(([name]) => name).join(", ")
    }, and ${missing} is not installed: ${installLine(peers)}`
}

/**
 * Loads a module of tiller that imports `peers` (`load` is a dynamic `import()`); a failure is
 * `onFailure` of the message naming the package to install when one is missing, else of the import's
 * own error.
 *
 * @since 0.1.0
 * @category constructors
 */
export const load = <A, E>(
  peers: OptionalPeers,
  load: () => Promise<A>,
  onFailure: (cause: unknown) => E
): Effect.Effect<A, E> =>
  Effect.tryPromise({
    try: load,
    catch: (cause) => {
      const message = missingMessage(peers, cause)
      return onFailure(message === undefined ? cause : new Error(message, { cause }))
    }
  })
