/**
 * What the global options select: the SQLite file (its directory created on first use), the model
 * and the tools, wired into `Sessions` for the commands.
 *
 * @since 0.1.0
 */
import { FileSystem, Path } from "@effect/platform"
import * as NodeHttpClient from "@effect/platform-node/NodeHttpClient"
import { Config, ConfigError, Effect, Either, Layer, Option, Redacted } from "effect"
import type { PersistenceError } from "../domain/Errors.js"
import type { SessionId } from "../domain/Ids.js"
import { parseDuration, resolveTimeouts } from "../internal/providers/ProviderTimeouts.js"
import * as DemoModel from "../layers/DemoModel.js"
import { McpServers } from "../layers/McpServers.js"
import * as OpenAiCompatibleModel from "../layers/OpenAiCompatibleModel.js"
import type { PermissionMode } from "../layers/Permissions.js"
import { PgSessionStore } from "../layers/PgSessionStore.js"
import * as ProviderModels from "../layers/ProviderModels.js"
import { SessionReference } from "../layers/SessionReference.js"
import { Sessions } from "../layers/Sessions.js"
import { SqliteSessionStore } from "../layers/SqliteStore.js"
import type { Mcp } from "../services/Mcp.js"
import type { Model } from "../services/Model.js"
import { SessionStore } from "../services/SessionStore.js"
import { Tools } from "../services/Tools.js"
import * as BuiltinTools from "./BuiltinTools.js"
import { CliError } from "./CliError.js"
import * as Database from "./Database.js"
import { describeFileError } from "./FileErrors.js"
import * as McpSettings from "./McpSettings.js"

/**
 * The options every command accepts.
 *
 * @since 0.1.0
 * @category models
 */
export interface GlobalOptions {
  /** The SQLite database file. */
  readonly db: string
  /** The model name: `demo` or `PROVIDER:MODEL` (see `MODELS`). */
  readonly model: string
  /** Offer no built-in tools to the model. */
  readonly noTools: boolean
  /** The model's context window in tokens (`--context-window`; default: the table's figure for the model). */
  readonly contextWindow?: Option.Option<number>
  /** `--claude-hooks`: also run the hooks of the Claude Code settings files. */
  readonly claudeHooks?: boolean
  /** `--read-session`: offer the model the read-only `read_session` tool over this database. */
  readonly readSession?: boolean
  /** `--add-dir`: further directories the file tools may use. */
  readonly addDir?: ReadonlyArray<string>
  /** `--permission-mode`. */
  readonly permissionMode?: Option.Option<PermissionMode>
  /** `--allow`: rules that allow tool calls without asking. */
  readonly allow?: ReadonlyArray<string>
  /** `--dangerously-skip-permissions`: `--permission-mode bypassPermissions`. */
  readonly skipPermissions?: boolean
  /** `--max-steps` of the commands that run turns: the most steps one turn runs (default: the agent's). */
  readonly maxSteps?: Option.Option<number>
  /** `--prices FILE`: model prices over tiller's table and the settings' (see `PriceSettings`). */
  readonly prices?: Option.Option<string>
  /** `--mcp FILE`: MCP configuration files read after the project's (see `McpSettings`). */
  readonly mcp?: ReadonlyArray<string>
}

/**
 * The permission mode the global options give, if they give one (`--dangerously-skip-permissions`
 * is `bypassPermissions`).
 *
 * @since 0.1.0
 * @category constructors
 */
export const permissionModeOf = (options: GlobalOptions): PermissionMode | undefined =>
  options.skipPermissions === true
    ? "bypassPermissions"
    : Option.getOrUndefined(options.permissionMode ?? Option.none())

/**
 * The default database file, relative to the working directory.
 *
 * @since 0.1.0
 * @category constants
 */
export const DEFAULT_DB = "./.tiller/sessions.db"

/**
 * The model names this version accepts (`MODEL` stands for the provider's model name).
 *
 * @since 0.1.0
 * @category constants
 */
export const MODELS: ReadonlyArray<string> = ["demo", "openai:MODEL", "anthropic:MODEL", "openai-compatible:MODEL"]

/**
 * The environment variables the provider models read.
 *
 * @since 0.1.0
 * @category constants
 */
export const MODEL_ENV = {
  openai: ProviderModels.ENV.openai,
  anthropic: ProviderModels.ENV.anthropic,
  "openai-compatible": { apiKey: "TILLER_API_KEY", baseUrl: "TILLER_BASE_URL" }
} as const

/**
 * A resolved `--model`: the model layer and the routing recorded in request headers.
 *
 * @since 0.1.0
 * @category models
 */
export interface ResolvedModel {
  readonly layer: Layer.Layer<Model>
  readonly header: { readonly provider: string; readonly model: string }
}

type Provider = keyof typeof MODEL_ENV

const isProvider = (prefix: string): prefix is Provider => Object.hasOwn(MODEL_ENV, prefix)

/** A model name for each provider, for the hint of an empty `PROVIDER:`. */
const EXAMPLE: Record<Provider, string> = {
  openai: "gpt-4.1-mini",
  anthropic: "claude-sonnet-4-5",
  "openai-compatible": "llama3.1"
}

const known = () => MODELS.map((m) => `"${m}"`).join(", ")

/** A variable that must be set to a non-empty value; its value stays redacted. */
const requiredKey = (model: string, variable: string) =>
  Effect.mapError(
    Config.redacted(Config.nonEmptyString(variable)),
    () => new CliError({ reason: `model "${model}" needs an API key: set ${variable}` })
  )

/** An optional key: absent when the variable is unset or empty. */
const optionalKey = (variable: string) =>
  Effect.orElseSucceed(
    Effect.map(Config.option(Config.redacted(Config.nonEmptyString(variable))), Option.getOrUndefined),
    () => undefined
  )

/** The base URL in the variable (http or https, trailing slashes dropped); absent when unset or empty. */
const optionalBaseUrl = (variable: string) =>
  Effect.gen(function*() {
    const value = yield* Effect.orElseSucceed(
      Effect.map(Config.option(Config.nonEmptyString(variable)), Option.getOrUndefined),
      () => undefined
    )
    if (value === undefined) return undefined
    const url = URL.canParse(value) ? new URL(value) : undefined
    if (url === undefined || (url.protocol !== "http:" && url.protocol !== "https:")) {
      return yield* new CliError({ reason: `${variable} is not an http(s) URL: ${JSON.stringify(value)}` })
    }
    return value.replace(/\/+$/, "")
  })

/** The request timeouts from the environment; a value that is not a duration is refused up front. */
const timeoutOptions = Effect.map(
  Effect.mapError(
    resolveTimeouts(),
    (error) => new CliError({ reason: `invalid request timeout: ${configErrorText(error)}` })
  ),
  (timeouts) => ({ connectTimeout: timeouts.connect, firstByteTimeout: timeouts.firstByte, idleTimeout: timeouts.idle })
)

/** A `ConfigError` as one line: `VARIABLE: what is wrong`. */
const configErrorText = (error: ConfigError.ConfigError): string =>
  ConfigError.reduceWithContext(error, undefined, {
    andCase: (_, left, right) => [left, right].join("; "),
    orCase: (_, left, right) => [left, right].join("; "),
    invalidDataCase: (_, path, message) => `${path.join(".")}: ${message}`,
    missingDataCase: (_, path, message) => `${path.join(".")}: ${message}`,
    sourceUnavailableCase: (_, path, message) => `${path.join(".")}: ${message}`,
    unsupportedCase: (_, path, message) => `${path.join(".")}: ${message}`
  })

const providerLayer = Effect.fnUntraced(function*(provider: Provider, model: string, name: string) {
  const env = MODEL_ENV[provider]
  const timeouts = yield* timeoutOptions
  switch (provider) {
    case "openai":
    case "anthropic": {
      const apiKey = yield* requiredKey(name, env.apiKey)
      const options = { model, apiKey, baseUrl: yield* optionalBaseUrl(env.baseUrl), ...timeouts }
      return provider === "openai" ? ProviderModels.layerOpenAi(options) : ProviderModels.layerAnthropic(options)
    }
    case "openai-compatible": {
      const baseUrl = yield* optionalBaseUrl(env.baseUrl)
      if (baseUrl === undefined) {
        return yield* new CliError({
          reason:
            `model "${name}" needs the server's base URL: set ${env.baseUrl} (for example http://127.0.0.1:8080/v1)`
        })
      }
      return OpenAiCompatibleModel.layer({ baseUrl, model, apiKey: yield* optionalKey(env.apiKey), ...timeouts })
    }
  }
})

/**
 * The model layer and the routing recorded in request headers for a `--model` name: `demo`, or
 * `openai:MODEL`, `anthropic:MODEL`, `openai-compatible:MODEL` configured from the environment
 * (see `MODEL_ENV`). A missing key or base URL, or an unknown name, is a `CliError` naming what to
 * set; no key value ever appears in it.
 *
 * @since 0.1.0
 * @category constructors
 */
export const resolveModel = (name: string): Effect.Effect<ResolvedModel, CliError> =>
  Effect.gen(function*() {
    if (name === "demo") return { layer: DemoModel.layer, header: { provider: "demo", model: "demo" } }
    const colon = name.indexOf(":")
    const prefix = colon < 0 ? name : name.slice(0, colon)
    if (colon < 0 || !isProvider(prefix)) {
      return yield* new CliError({ reason: `unknown model "${name}": use one of ${known()}` })
    }
    const model = name.slice(colon + 1).trim()
    if (model === "") {
      return yield* new CliError({
        reason: `model "${name}" names no model: write ${prefix}:MODEL, for example ${prefix}:${EXAMPLE[prefix]}`
      })
    }
    // The timeouts were resolved above, so the layer cannot fail on its configuration any more.
    const layer = Layer.orDie(yield* providerLayer(prefix, model, name))
    return { layer: Layer.provide(layer, NodeHttpClient.layerUndici), header: { provider: prefix, model } }
  })

/**
 * The variable that sets the longest sleep before retrying a failed model request (a duration such
 * as `5 minutes`, or milliseconds; default 60 s): a longer retry delay ends the turn instead.
 *
 * @since 0.1.0
 * @category constants
 */
export const MAX_RETRY_DELAY_ENV = "TILLER_MAX_RETRY_DELAY"

/** The retry delay cap from the environment, absent when unset or empty; anything else is refused up front. */
const maxRetryDelay = Effect.gen(function*() {
  const value = yield* Effect.orElseSucceed(
    Effect.map(Config.option(Config.string(MAX_RETRY_DELAY_ENV)), Option.getOrUndefined),
    () => undefined
  )
  if (value === undefined || value.trim() === "") return {}
  const parsed = parseDuration(value)
  if (Either.isLeft(parsed)) return yield* new CliError({ reason: `invalid ${MAX_RETRY_DELAY_ENV}: ${parsed.left}` })
  return { maxRetryDelay: parsed.right }
})

/** Creates the directory of the database file (the store creates the file itself). */
const ensureDirectory = (db: string) =>
  Effect.gen(function*() {
    if (db === ":memory:" || Database.isPostgres(db)) return
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    const directory = path.dirname(path.resolve(db))
    yield* fs.makeDirectory(directory, { recursive: true }).pipe(
      Effect.mapError((error) =>
        new CliError({ reason: `cannot create the directory ${directory} for --db ${db}: ${describeFileError(error)}` })
      )
    )
  })

/**
 * `Sessions` and the `SessionStore` under it, as the global options select them; the built-in
 * tools are confined to the process's working directory. With `mcp` (the default) the configured
 * MCP servers start with the layer and their tools join the built-in ones; without, `Mcp` has no
 * servers.
 *
 * @since 0.1.0
 * @category layers
 */
export const layer = (
  options: GlobalOptions,
  extra: { readonly mcp?: boolean } = {}
): Layer.Layer<Sessions | SessionStore | Mcp, CliError | PersistenceError, FileSystem.FileSystem | Path.Path> =>
  Layer.unwrapEffect(
    Effect.gen(function*() {
      const model = yield* resolveModel(options.model)
      const retry = yield* maxRetryDelay
      yield* ensureDirectory(options.db)
      const mode = permissionModeOf(options)
      if (
        options.skipPermissions === true && Option.isSome(options.permissionMode ?? Option.none()) &&
        Option.getOrUndefined(options.permissionMode!) !== mode
      ) {
        return yield* new CliError({
          reason: "--dangerously-skip-permissions and --permission-mode disagree: give one of them"
        })
      }
      const fs = yield* FileSystem.FileSystem
      for (const dir of options.addDir ?? []) {
        const info = yield* fs.stat(dir).pipe(
          Effect.mapError((error) => new CliError({ reason: `--add-dir ${dir}: ${describeFileError(error)}` }))
        )
        if (info.type !== "Directory") return yield* new CliError({ reason: `--add-dir ${dir}: not a directory` })
      }
      // The coding tools find what a reopened session read in its stored log; read_session reads
      // the same store the sessions live in.
      const tools = Layer.unwrapEffect(Effect.gen(function*() {
        const store = yield* SessionStore
        const builtin = options.noTools ? [] : yield* BuiltinTools.make(
          process.cwd(),
          options.addDir ?? [],
          (id) => Effect.map(store.load(id as SessionId), (loaded) => loaded.events)
        )
        const readSession = options.readSession === true ? [yield* SessionReference.readSessionTool()] : []
        return Tools.layer({ tools: [...builtin, ...readSession] })
      }))
      // Context management is always on: the window from --context-window, else the table's.
      const contextWindow = Option.getOrUndefined(options.contextWindow ?? Option.none())
      const mcpConfig = extra.mcp === false ? McpSettings.EMPTY : yield* McpSettings.load(options.mcp ?? [])
      const toolsAndMcp = McpServers.layer(mcpConfig, {
        model: model.header.model,
        ...(contextWindow === undefined ? {} : { contextWindow })
      }).pipe(Layer.provideMerge(tools))
      const compaction = contextWindow === undefined ? {} : { contextWindow }
      // The model may read back what compaction took out of its context (read_history).
      const maxSteps = Option.getOrUndefined(options.maxSteps ?? Option.none())
      return Sessions.layer({
        idleTimeToLive: 0,
        model: model.header,
        ...retry,
        compaction,
        readHistory: true,
        ...(maxSteps === undefined ? {} : { maxSteps })
      }).pipe(
        Layer.provideMerge(Layer.merge(model.layer, toolsAndMcp)),
        Layer.provideMerge(
          Database.isPostgres(options.db)
            ? PgSessionStore.layer({ url: Redacted.make(options.db) })
            : SqliteSessionStore.layer({ filename: options.db })
        )
      )
    })
  )

/**
 * The model's own name in a `--model` value (`anthropic:claude-sonnet-4-5` names
 * `claude-sonnet-4-5`; `demo` names itself), as hooks are told it.
 *
 * @since 0.1.0
 * @category parsing
 */
export const modelNameOf = (name: string): string => {
  const colon = name.indexOf(":")
  return colon < 0 ? name : name.slice(colon + 1).trim()
}

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
