/**
 * What the global options select: the SQLite file (its directory created on first use), the model
 * and the tools, wired into `Sessions` for the commands.
 *
 * @since 0.1.0
 */
import { FileSystem, Path } from "@effect/platform"
import { Effect, Layer } from "effect"
import type { PersistenceError } from "../domain/Errors.js"
import type { SessionId } from "../domain/Ids.js"
import * as DemoModel from "../layers/DemoModel.js"
import { SqliteSessionStore } from "../layers/SqliteStore.js"
import type { Model } from "../services/Model.js"
import { SessionStore } from "../services/SessionStore.js"
import { Sessions } from "../services/Sessions.js"
import { Tools } from "../services/Tools.js"
import * as BuiltinTools from "./BuiltinTools.js"
import { CliError } from "./CliError.js"

/**
 * The options every command accepts.
 *
 * @since 0.1.0
 * @category models
 */
export interface GlobalOptions {
  /** The SQLite database file. */
  readonly db: string
  /** The model name: only `demo` in this version. */
  readonly model: string
  /** Offer no built-in tools to the model. */
  readonly noTools: boolean
}

/**
 * The default database file, relative to the working directory.
 *
 * @since 0.1.0
 * @category constants
 */
export const DEFAULT_DB = "./.tiller/sessions.db"

/**
 * The models this version knows.
 *
 * @since 0.1.0
 * @category constants
 */
export const MODELS: ReadonlyArray<string> = ["demo"]

/**
 * The model layer and the routing recorded in request headers for a `--model` name.
 *
 * @since 0.1.0
 * @category constructors
 */
export const resolveModel = (
  name: string
): Effect.Effect<{ readonly layer: Layer.Layer<Model>; readonly header: { readonly provider: string; readonly model: string } }, CliError> =>
  name === "demo"
    ? Effect.succeed({ layer: DemoModel.layer, header: { provider: "demo", model: "demo" } })
    : Effect.fail(
      new CliError({
        reason: `unknown model "${name}": this version of tiller has only ${MODELS.map((m) => `"${m}"`).join(", ")} ` +
          `(an offline, deterministic demonstration model); provider models such as openai:MODEL, ` +
          `anthropic:MODEL and openai-compatible:MODEL are not available yet`
      })
    )

/** Creates the directory of the database file (the store creates the file itself). */
const ensureDirectory = (db: string) =>
  Effect.gen(function*() {
    if (db === ":memory:") return
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    const directory = path.dirname(path.resolve(db))
    yield* fs.makeDirectory(directory, { recursive: true }).pipe(
      Effect.mapError((error) => new CliError({ reason: `cannot create the directory ${directory} for --db ${db}: ${error.message}` }))
    )
  })

/**
 * `Sessions` and the `SessionStore` under it, as the global options select them; the built-in
 * tools are confined to the process's working directory.
 *
 * @since 0.1.0
 * @category layers
 */
export const layer = (
  options: GlobalOptions
): Layer.Layer<Sessions | SessionStore, CliError | PersistenceError, FileSystem.FileSystem | Path.Path> =>
  Layer.unwrapEffect(
    Effect.gen(function*() {
      const model = yield* resolveModel(options.model)
      yield* ensureDirectory(options.db)
      const tools = options.noTools
        ? Tools.layer()
        : Tools.layer({ tools: yield* BuiltinTools.make(process.cwd()) })
      return Sessions.layer({ idleTimeToLive: 0, model: model.header }).pipe(
        Layer.provideMerge(Layer.mergeAll(SqliteSessionStore.layer({ filename: options.db }), model.layer, tools))
      )
    })
  )

/**
 * Loads a stored session's header and events without opening it (no lease, no repair, no writes).
 *
 * @since 0.1.0
 * @category constructors
 */
export const loadSession = Effect.fn("cli.loadSession")(function*(id: SessionId) {
  const store = yield* SessionStore
  return yield* store.load(id).pipe(
    Effect.catchTag("SessionNotFound", () => Effect.fail(new CliError({ reason: `no session ${id} in this database` })))
  )
})
