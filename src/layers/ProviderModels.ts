/**
 * ProviderModels: `Model` layers for hosted providers, built from `@effect/ai-openai` (the Responses
 * API) and `@effect/ai-anthropic` (the Messages API) through `Model.layerLanguageModel`.
 *
 * The provider clients send each request once: neither client nor the HTTP client under it retries,
 * so every failure reaches tiller's request-error policy, which logs `llm/retry` for each retry.
 * The API key travels in a `Redacted` value; a failure message that quotes it (a server echoing
 * the key back) has it replaced by `[redacted]` before it leaves the model.
 *
 * The provider packages load when a provider layer is built, not when tiller is imported: together
 * they take over a second and about 100 MB to load (generated API schemas, a tokenizer), which an
 * agent on the demo model, a scripted model or an OpenAI-compatible server never needs.
 *
 * @since 0.1.0
 */
import type * as OpenAiClient from "@effect/ai-openai/OpenAiClient"
import type { HttpClient } from "@effect/platform"
import type { ConfigError } from "effect"
import { Config, Effect, Layer, Option, Redacted, Stream } from "effect"
import { ModelError } from "../domain/Errors.js"
import { Model } from "../services/Model.js"
import * as LanguageModelAdapter from "./LanguageModelAdapter.js"

/**
 * How to reach one provider model: its name, the API key, an optional base URL (for a proxy or a
 * local test server) and the output-token limit sent with every request.
 *
 * @since 0.1.0
 * @category models
 */
export interface ProviderOptions {
  readonly model: string
  readonly apiKey?: Redacted.Redacted<string> | undefined
  readonly baseUrl?: string | undefined
  readonly maxTokens?: number | undefined
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

/** `Model.layerLanguageModel`, with the key scrubbed from failure messages. */
const adapted = (secret: Redacted.Redacted<string> | undefined) =>
  Layer.effect(
    Model,
    Effect.map(LanguageModelAdapter.make, (model) => {
      const redact = redactError(secret)
      return { stream: (request) => Stream.mapError(model.stream(request), redact) }
    })
  )

/** The OpenAI packages, loaded on first use. */
const loadOpenAi = Effect.promise(() =>
  Promise.all([import("@effect/ai-openai/OpenAiClient"), import("@effect/ai-openai/OpenAiLanguageModel")])
)

/** The Anthropic packages, loaded on first use. */
const loadAnthropic = Effect.promise(() =>
  Promise.all([import("@effect/ai-anthropic/AnthropicClient"), import("@effect/ai-anthropic/AnthropicLanguageModel")])
)

type OpenAiClientModule = typeof OpenAiClient

/**
 * A `response.failed` event as the `error` event it stands for: @effect/ai-openai 0.41 turns it into
 * an ordinary finish, which would end a failed response as if it had stopped normally.
 */
const failedAsError = (client: OpenAiClientModule) =>
(event: OpenAiClient.ResponseStreamEvent): OpenAiClient.ResponseStreamEvent =>
  event.type === "response.failed"
    ? new client.ResponseErrorEvent({
      type: "error",
      sequence_number: event.sequence_number,
      code: event.response.error?.code ?? null,
      message: event.response.error?.message ?? "the response failed",
      param: null
    }, { disableValidation: true })
    : event

/** The OpenAI client, with failed responses reported as errors. */
const openAiClient = (client: OpenAiClientModule, options: ProviderOptions) =>
  Layer.scoped(
    client.OpenAiClient,
    Effect.map(client.make({ apiKey: options.apiKey, apiUrl: options.baseUrl }), (made) => ({
      ...made,
      createResponseStream: (request: Parameters<typeof made.createResponseStream>[0]) =>
        Stream.map(made.createResponseStream(request), failedAsError(client))
    }))
  )

/**
 * `openai:MODEL`: the OpenAI Responses API (`POST {baseUrl}/responses`, default base URL
 * `https://api.openai.com/v1`). Tool schemas are sent without `strict` mode, so tools with optional
 * parameters are accepted; a `response.failed` event fails the request with its error code.
 *
 * @since 0.1.0
 * @category layers
 */
export const layerOpenAi = (options: ProviderOptions): Layer.Layer<Model, never, HttpClient.HttpClient> =>
  Layer.unwrapEffect(Effect.map(loadOpenAi, ([client, languageModel]) =>
    adapted(options.apiKey).pipe(
      Layer.provide(languageModel.layer({
        model: options.model,
        config: {
          strict: false,
          ...(options.maxTokens === undefined ? {} : { max_output_tokens: options.maxTokens })
        }
      })),
      Layer.provide(openAiClient(client, options))
    )))

/**
 * `anthropic:MODEL`: the Anthropic Messages API (`POST {baseUrl}/v1/messages`, default base URL
 * `https://api.anthropic.com`); `maxTokens` defaults to the client's 4096.
 *
 * @since 0.1.0
 * @category layers
 */
export const layerAnthropic = (options: ProviderOptions): Layer.Layer<Model, never, HttpClient.HttpClient> =>
  Layer.unwrapEffect(Effect.map(loadAnthropic, ([client, languageModel]) =>
    adapted(options.apiKey).pipe(
      Layer.provide(languageModel.layer({
        model: options.model,
        ...(options.maxTokens === undefined ? {} : { config: { max_tokens: options.maxTokens } })
      })),
      Layer.provide(client.layer({ apiKey: options.apiKey, apiUrl: options.baseUrl }))
    )))

const optionalString = (name: string) => Config.map(Config.option(Config.nonEmptyString(name)), Option.getOrUndefined)

/** Reads a provider's key (required) and base URL (optional) from the given variables. */
const providerConfig = (env: { readonly apiKey: string; readonly baseUrl: string }) =>
  Config.all({ apiKey: Config.redacted(Config.nonEmptyString(env.apiKey)), baseUrl: optionalString(env.baseUrl) })

/**
 * `layerOpenAi` with the key from `OPENAI_API_KEY` and the base URL from `OPENAI_BASE_URL` (optional).
 *
 * @since 0.1.0
 * @category layers
 */
export const layerOpenAiConfig = (
  model: string,
  options: { readonly maxTokens?: number | undefined } = {}
): Layer.Layer<Model, ConfigError.ConfigError, HttpClient.HttpClient> =>
  Layer.unwrapEffect(
    Effect.map(providerConfig(ENV.openai), (config) => layerOpenAi({ model, ...config, maxTokens: options.maxTokens }))
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
  options: { readonly maxTokens?: number | undefined } = {}
): Layer.Layer<Model, ConfigError.ConfigError, HttpClient.HttpClient> =>
  Layer.unwrapEffect(
    Effect.map(
      providerConfig(ENV.anthropic),
      (config) => layerAnthropic({ model, ...config, maxTokens: options.maxTokens })
    )
  )
