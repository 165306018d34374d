/**
 * ProviderModels: `Model` layers for hosted providers: OpenAI (the Responses API, `OpenAiModel`)
 * and Anthropic (the Messages API, `AnthropicModel`), both streamed over the provided `HttpClient`.
 *
 * Each request is sent once: no client retries, so every failure reaches tiller's request-error
 * policy, which logs `llm/retry` for each retry. Failures are classified by one table for every
 * adapter (`AUTH`, `RATE_LIMIT`, `QUOTA`, `OVERLOADED`, `SERVICE_UNAVAILABLE`, `NETWORK`, `TIMEOUT`,
 * `CONTEXT_OVERFLOW`, `CONTENT_FILTER`, `REFUSAL`, `MALFORMED_STREAM`, ...) with the provider's own
 * message, shortened. Requests time out: no response headers within the connect timeout, no body
 * within the first-byte timeout, or no chunk within the idle timeout fails the attempt with the
 * retryable `TIMEOUT` (options, else `TILLER_CONNECT_TIMEOUT`, `TILLER_FIRST_BYTE_TIMEOUT`,
 * `TILLER_IDLE_TIMEOUT`, else 30 s / 120 s / 120 s). The API key travels in a `Redacted` value and
 * is replaced by `[redacted]` in every failure message.
 *
 * @since 0.1.0
 */
import type { HttpClient } from "@effect/platform"
import type { Duration } from "effect"
import { Config, ConfigError, Effect, Layer, Option, Redacted, Stream } from "effect"
import { ModelError } from "../domain/Errors.js"
import { resolveTimeouts } from "../internal/providers/ProviderTimeouts.js"
import { Model } from "../services/Model.js"
import * as AnthropicModel from "./AnthropicModel.js"
import * as OpenAiModel from "./OpenAiModel.js"

/**
 * The resolved request timeouts of a provider adapter (connect, first byte, idle), as
 * `AnthropicModel.layer` and `OpenAiModel.layer` take them.
 *
 * @since 0.1.0
 * @category models
 */
export type { Timeouts } from "../internal/providers/ProviderTimeouts.js"

/**
 * How to reach one provider model: its name, the API key, an optional base URL (for a proxy or a
 * local test server), the output-token limit sent with every request, the request timeouts (each a
 * duration such as `"30 seconds"` or a number of milliseconds) and prompt caching: `promptCaching`
 * (default on) and, for Anthropic, `cacheTtl` ("5m" or "1h"); for OpenAI, `promptCacheKey` (default:
 * the session id).
 *
 * @since 0.1.0
 * @category models
 */
export interface ProviderOptions {
  readonly model: string
  readonly apiKey?: Redacted.Redacted<string> | undefined
  readonly baseUrl?: string | undefined
  readonly maxTokens?: number | undefined
  readonly connectTimeout?: Duration.DurationInput | undefined
  readonly firstByteTimeout?: Duration.DurationInput | undefined
  readonly idleTimeout?: Duration.DurationInput | undefined
  /** Ask the provider to cache the request prefix (default `true`). */
  readonly promptCaching?: boolean | undefined
  /** Anthropic: how long a cached prefix lives, "5m" (default) or "1h". */
  readonly cacheTtl?: "5m" | "1h" | undefined
  /** OpenAI: the `prompt_cache_key` sent instead of the session id. */
  readonly promptCacheKey?: string | undefined
}

/**
 * The environment variables each provider reads in the `*Config` layers.
 *
 * @since 0.1.0
 * @category constants
 */
export const ENV = {
  openai: { apiKey: "OPENAI_API_KEY", baseUrl: "OPENAI_BASE_URL" },
  anthropic: { apiKey: "ANTHROPIC_API_KEY", baseUrl: "ANTHROPIC_BASE_URL" }
} as const

const REDACTED = "[redacted]"

/**
 * Replaces every occurrence of the secret in a failure's message (keys shorter than 4 characters
 * are too common as substrings to scrub meaningfully and are left to the `Redacted` wrapper).
 *
 * @since 0.1.0
 * @category conversions
 */
export const redactError = (secret: Redacted.Redacted<string> | undefined) => (error: ModelError): ModelError => {
  if (secret === undefined) return error
  const value = Redacted.value(secret)
  if (value.length < 4 || !error.failure.message.includes(value)) return error
  return new ModelError({ failure: { ...error.failure, message: error.failure.message.replaceAll(value, REDACTED) } })
}

/** A model service with the key scrubbed from every failure, whatever produced it. */
const scrubbed = (secret: Redacted.Redacted<string> | undefined) => (model: Model["Type"]): Model["Type"] => {
  const redact = redactError(secret)
  return Model.make((request) => Stream.mapError(Model.toStream(Model.responseOf(model, request)), redact))
}

/**
 * `openai:MODEL`: the OpenAI Responses API (`POST {baseUrl}/responses`, default base URL
 * `https://api.openai.com/v1`), streamed, with `store: false` and the reasoning items' encrypted
 * content requested and sent back on the next request. A timeout option or variable that is not a
 * positive duration fails the layer with `ConfigError`.
 *
 * @since 0.1.0
 * @category layers
 */
export const layerOpenAi = (
  options: ProviderOptions
): Layer.Layer<Model, ConfigError.ConfigError, HttpClient.HttpClient> =>
  Layer.effect(
    Model,
    Effect.gen(function*() {
      const timeouts = yield* resolveTimeouts(options)
      const model = yield* OpenAiModel.make({
        model: options.model,
        apiKey: options.apiKey,
        baseUrl: options.baseUrl,
        maxTokens: options.maxTokens,
        timeouts,
        promptCaching: options.promptCaching,
        promptCacheKey: options.promptCacheKey
      })
      return scrubbed(options.apiKey)(model)
    })
  )

/**
 * `anthropic:MODEL`: the Anthropic Messages API (`POST {baseUrl}/v1/messages`, default base URL
 * `https://api.anthropic.com`), streamed; `maxTokens` defaults to 4096. Signed thinking blocks are
 * kept with the assistant message and sent back in order. Prompt-cache breakpoints are placed
 * unless `promptCaching: false` (TTL `cacheTtl`). A timeout option or variable that is not
 * a positive duration fails the layer with `ConfigError`.
 *
 * @since 0.1.0
 * @category layers
 */
export const layerAnthropic = (
  options: ProviderOptions
): Layer.Layer<Model, ConfigError.ConfigError, HttpClient.HttpClient> =>
  Layer.effect(
    Model,
    Effect.gen(function*() {
      const timeouts = yield* resolveTimeouts(options)
      const model = yield* AnthropicModel.make({
        model: options.model,
        apiKey: options.apiKey,
        baseUrl: options.baseUrl,
        maxTokens: options.maxTokens,
        timeouts,
        promptCaching: options.promptCaching,
        cacheTtl: options.cacheTtl
      })
      return scrubbed(options.apiKey)(model)
    })
  )

const optionalString = (name: string) => Config.map(Config.option(Config.nonEmptyString(name)), Option.getOrUndefined)

/** Reads a provider's key (required) and base URL (optional) from the given variables. */
const providerConfig = (env: { readonly apiKey: string; readonly baseUrl: string }) =>
  Config.all({ apiKey: Config.redacted(Config.nonEmptyString(env.apiKey)), baseUrl: optionalString(env.baseUrl) })

/**
 * The options of a `*Config` layer: everything but the key and the base URL, which come from the
 * environment.
 *
 * @since 0.1.0
 * @category models
 */
export type ConfigOptions = Omit<ProviderOptions, "model" | "apiKey" | "baseUrl">

/**
 * `layerOpenAi` with the key from `OPENAI_API_KEY` and the base URL from `OPENAI_BASE_URL` (optional).
 *
 * @since 0.1.0
 * @category layers
 */
export const layerOpenAiConfig = (
  model: string,
  options: ConfigOptions = {}
): Layer.Layer<Model, ConfigError.ConfigError, HttpClient.HttpClient> =>
  Layer.unwrapEffect(
    Effect.map(providerConfig(ENV.openai), (config) => layerOpenAi({ ...options, model, ...config }))
  )

/**
 * `layerAnthropic` with the key from `ANTHROPIC_API_KEY` and the base URL from `ANTHROPIC_BASE_URL`
 * (optional).
 *
 * @since 0.1.0
 * @category layers
 */
export const layerAnthropicConfig = (
  model: string,
  options: ConfigOptions = {}
): Layer.Layer<Model, ConfigError.ConfigError, HttpClient.HttpClient> =>
  Layer.unwrapEffect(
    Effect.map(providerConfig(ENV.anthropic), (config) => layerAnthropic({ ...options, model, ...config }))
  )
