/**
 * ProviderTimeouts: how long a model request may wait on the network before it fails with the
 * retryable `TIMEOUT` code: for the response headers (connect), for the first byte of the body
 * (first byte, counted from the request's start) and between two chunks of the body (idle).
 *
 * Each is set by a provider layer's options, else read through `Config` from
 * `TILLER_CONNECT_TIMEOUT`, `TILLER_FIRST_BYTE_TIMEOUT` and `TILLER_IDLE_TIMEOUT` (a duration such as
 * `3 seconds` or `500 millis`, or a number of milliseconds), else 30 s / 120 s / 120 s.
 *
 * @since 0.1.0
 */
import { Config, ConfigError, Duration, Effect, Either, Option } from "effect"

/**
 * The three resolved timeouts of a provider layer.
 *
 * @since 0.1.0
 * @category models
 */
export interface Timeouts {
  readonly connect: Duration.Duration
  readonly firstByte: Duration.Duration
  readonly idle: Duration.Duration
}

/**
 * The timeouts a provider layer's options may set; what is not set comes from the environment or
 * the defaults.
 *
 * @since 0.1.0
 * @category models
 */
export interface TimeoutOptions {
  readonly connectTimeout?: Duration.DurationInput | undefined
  readonly firstByteTimeout?: Duration.DurationInput | undefined
  readonly idleTimeout?: Duration.DurationInput | undefined
}

/**
 * 30 seconds for the headers, 120 seconds for the first byte, 120 seconds between chunks.
 *
 * @since 0.1.0
 * @category constants
 */
export const DEFAULT_TIMEOUTS: Timeouts = {
  connect: Duration.seconds(30),
  firstByte: Duration.seconds(120),
  idle: Duration.seconds(120)
}

/**
 * The environment variables read when an option is not given.
 *
 * @since 0.1.0
 * @category constants
 */
export const TIMEOUT_ENV = {
  connect: "TILLER_CONNECT_TIMEOUT",
  firstByte: "TILLER_FIRST_BYTE_TIMEOUT",
  idle: "TILLER_IDLE_TIMEOUT"
} as const

/**
 * Reads a text as a positive duration: a number is milliseconds, anything else is parsed as
 * Effect's duration text (`3 seconds`, `1500 millis`, `2 minutes`).
 *
 * @since 0.1.0
 * @category conversions
 */
export const parseDuration = (text: string): Either.Either<Duration.Duration, string> => {
  const trimmed = text.trim()
  const duration = /^\d+(\.\d+)?$/.test(trimmed)
    ? Option.some(Duration.millis(Number(trimmed)))
    : Duration.decodeUnknown(trimmed)
  if (Option.isNone(duration)) {
    return Either.left(`not a duration: ${JSON.stringify(text)} (write milliseconds or, e.g., "30 seconds")`)
  }
  if (!Duration.isFinite(duration.value) || Duration.toMillis(duration.value) <= 0) {
    return Either.left(`not a positive, finite duration: ${JSON.stringify(text)}`)
  }
  return Either.right(duration.value)
}

/** One timeout from its variable, absent when unset or empty. */
const fromEnv = (name: string): Config.Config<Option.Option<Duration.Duration>> =>
  Config.option(Config.string(name)).pipe(
    Config.mapOrFail((value) => {
      if (Option.isNone(value) || value.value.trim() === "") return Either.right(Option.none())
      return Either.match(parseDuration(value.value), {
        onLeft: (reason) => Either.left(ConfigError.InvalidData([name], reason)),
        onRight: (duration) => Either.right(Option.some(duration))
      })
    })
  )

const fromOption = (name: string, input: Duration.DurationInput | undefined): Effect.Effect<
  Option.Option<Duration.Duration>,
  ConfigError.ConfigError
> => {
  if (input === undefined) return Effect.succeed(Option.none())
  const duration = Duration.decodeUnknown(input)
  if (Option.isNone(duration) || !Duration.isFinite(duration.value) || Duration.toMillis(duration.value) <= 0) {
    return Effect.fail(ConfigError.InvalidData([name], `not a positive, finite duration: ${String(input)}`))
  }
  return Effect.succeed(duration)
}

const resolveOne = (
  option: string,
  input: Duration.DurationInput | undefined,
  variable: string,
  fallback: Duration.Duration
) =>
  Effect.flatMap(fromOption(option, input), (given) =>
    Option.isSome(given)
      ? Effect.succeed(given.value)
      : Effect.map(fromEnv(variable), Option.getOrElse(() => fallback)))

/**
 * The timeouts of a provider layer: each option when given, else its environment variable, else
 * the default. A value that is not a positive duration fails with `ConfigError`.
 *
 * @since 0.1.0
 * @category constructors
 */
export const resolveTimeouts = (options: TimeoutOptions = {}): Effect.Effect<Timeouts, ConfigError.ConfigError> =>
  Effect.all({
    connect: resolveOne("connectTimeout", options.connectTimeout, TIMEOUT_ENV.connect, DEFAULT_TIMEOUTS.connect),
    firstByte: resolveOne(
      "firstByteTimeout",
      options.firstByteTimeout,
      TIMEOUT_ENV.firstByte,
      DEFAULT_TIMEOUTS.firstByte
    ),
    idle: resolveOne("idleTimeout", options.idleTimeout, TIMEOUT_ENV.idle, DEFAULT_TIMEOUTS.idle)
  })
