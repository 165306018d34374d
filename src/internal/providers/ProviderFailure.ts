/**
 * ProviderFailure: one table that classifies every provider failure for the retry policy, shared by
 * all model adapters (Anthropic, OpenAI Responses, Chat Completions).
 *
 * A failure is classified by the provider's own error type or code first (`overloaded_error`,
 * `insufficient_quota`, `context_length_exceeded`, ...), then by the HTTP status, then by a few
 * message patterns; the provider's own message is kept, shortened to one line.
 *
 * @since 0.1.0
 */
import { Predicate } from "effect"
import type { LlmFailure } from "../../domain/Values.js"

/**
 * The kinds of provider failure tiller tells apart.
 *
 * @since 0.1.0
 * @category models
 */
export type FailureKind =
  | "auth"
  | "rate-limit"
  | "quota"
  | "overloaded"
  | "server"
  | "network"
  | "timeout"
  | "context-overflow"
  | "content-filter"
  | "refusal"
  | "malformed-output"
  | "invalid-request"
  | "not-found"
  | "provider"

/**
 * Each kind's `code` and whether the default retry policy retries it.
 *
 * @since 0.1.0
 * @category constants
 */
export const FAILURE_TABLE: Readonly<Record<FailureKind, { readonly code: string; readonly retryable: boolean }>> = {
  "auth": { code: "AUTH", retryable: false },
  "rate-limit": { code: "RATE_LIMIT", retryable: true },
  "quota": { code: "QUOTA", retryable: false },
  "overloaded": { code: "OVERLOADED", retryable: true },
  "server": { code: "SERVICE_UNAVAILABLE", retryable: true },
  "network": { code: "NETWORK", retryable: true },
  "timeout": { code: "TIMEOUT", retryable: true },
  "context-overflow": { code: "CONTEXT_OVERFLOW", retryable: false },
  "content-filter": { code: "CONTENT_FILTER", retryable: false },
  "refusal": { code: "REFUSAL", retryable: false },
  "malformed-output": { code: "MALFORMED_STREAM", retryable: false },
  "invalid-request": { code: "INVALID_REQUEST", retryable: false },
  "not-found": { code: "NOT_FOUND", retryable: false },
  "provider": { code: "PROVIDER_ERROR", retryable: false }
}

/**
 * What a provider said about a failure: the HTTP status, its error type and code, its message.
 *
 * @since 0.1.0
 * @category models
 */
export interface ProviderErrorInfo {
  readonly status?: number | undefined
  readonly type?: string | undefined
  readonly code?: string | undefined
  readonly message?: string | undefined
}

/**
 * Extra fields of a failure: the status, the delay the provider asked for and its request id.
 *
 * @since 0.1.0
 * @category models
 */
export interface FailureExtra {
  readonly status?: number | undefined
  readonly retryAfterMs?: number | undefined
  readonly requestId?: string | undefined
}

/** Provider error types and codes (Anthropic `error.type`, OpenAI `error.code` / `error.type`, hosts'). */
const KIND_OF_TYPE: Readonly<Record<string, FailureKind>> = {
  authentication_error: "auth",
  permission_error: "auth",
  invalid_api_key: "auth",
  unauthorized: "auth",
  rate_limit_error: "rate-limit",
  rate_limit_exceeded: "rate-limit",
  tokens: "rate-limit",
  requests: "rate-limit",
  insufficient_quota: "quota",
  billing_error: "quota",
  billing_hard_limit_reached: "quota",
  overloaded_error: "overloaded",
  overloaded: "overloaded",
  api_error: "server",
  server_error: "server",
  internal_server_error: "server",
  internal_error: "server",
  service_unavailable: "server",
  timeout_error: "timeout",
  context_length_exceeded: "context-overflow",
  request_too_large: "context-overflow",
  string_above_max_length: "context-overflow",
  content_filter: "content-filter",
  content_policy_violation: "content-filter",
  invalid_prompt: "content-filter",
  not_found_error: "not-found",
  model_not_found: "not-found",
  invalid_request_error: "invalid-request",
  invalid_request: "invalid-request",
  bad_request: "invalid-request"
}

const CONTEXT_OVERFLOW_MESSAGE =
  /prompt is too long|context[_ ]length|context window|maximum context|too many tokens|input is too long|reduce the length/i

const kindOfStatus = (status: number): FailureKind | undefined => {
  if (status === 401 || status === 403) return "auth"
  if (status === 402) return "quota"
  if (status === 404) return "not-found"
  if (status === 408) return "timeout"
  if (status === 413) return "context-overflow"
  if (status === 429) return "rate-limit"
  if (status === 529) return "overloaded"
  if (status >= 500 && status <= 599) return "server"
  if (status >= 400 && status <= 499) return "invalid-request"
  return undefined
}

/**
 * The kind of a failure: a known provider error type or code first, then a context-overflow
 * message, then the HTTP status; `provider` when nothing is known.
 *
 * @since 0.1.0
 * @category conversions
 */
export const kindOf = (info: ProviderErrorInfo): FailureKind => {
  for (const key of [info.code, info.type]) {
    if (key === undefined) continue
    const kind = KIND_OF_TYPE[key.toLowerCase()]
    // A 400 `invalid_request_error` says little: its message may say the context overflowed.
    if (kind !== undefined && kind !== "invalid-request") return kind
  }
  if (info.message !== undefined && CONTEXT_OVERFLOW_MESSAGE.test(info.message)) return "context-overflow"
  const byStatus = info.status === undefined ? undefined : kindOfStatus(info.status)
  if (byStatus !== undefined) return byStatus
  for (const key of [info.code, info.type]) {
    if (key !== undefined && KIND_OF_TYPE[key.toLowerCase()] !== undefined) return KIND_OF_TYPE[key.toLowerCase()]!
  }
  return "provider"
}

const MAX_MESSAGE = 300

/**
 * A message on one line, at most 300 characters.
 *
 * @since 0.1.0
 * @category conversions
 */
export const shorten = (message: string): string => {
  const line = message.replace(/\s+/g, " ").trim()
  return line.length > MAX_MESSAGE ? `${line.slice(0, MAX_MESSAGE - 1)}…` : line
}

/**
 * A failure of the given kind: its code and `retryable` from the table, the message shortened.
 *
 * @since 0.1.0
 * @category constructors
 */
export const failureOf = (kind: FailureKind, message: string, extra: FailureExtra = {}): LlmFailure => {
  const entry = FAILURE_TABLE[kind]
  return {
    message: shorten(message),
    code: entry.code,
    retryable: entry.retryable,
    ...(extra.status === undefined ? {} : { status: extra.status }),
    ...(extra.retryAfterMs === undefined ? {} : { retryAfterMs: extra.retryAfterMs }),
    ...(extra.requestId === undefined ? {} : { requestId: extra.requestId })
  }
}

const stringField = (value: unknown, key: string): string | undefined =>
  Predicate.hasProperty(value, key) && Predicate.isString(value[key]) && value[key] !== "" ? value[key] : undefined

const numberField = (value: unknown, key: string): number | undefined =>
  Predicate.hasProperty(value, key) && Predicate.isNumber(value[key]) ? value[key] : undefined

/**
 * Reads what a provider's error payload says: `{error: {type, code, message}}` (OpenAI, most
 * hosts), `{type: "error", error: {type, message}}` (Anthropic), `{type, code, message}` (an
 * OpenAI `error` stream event), `{error: "text"}` or a plain string. A numeric `code` or `status`
 * between 400 and 599 counts as the status.
 *
 * @since 0.1.0
 * @category conversions
 */
export const infoOfPayload = (payload: unknown): ProviderErrorInfo => {
  if (Predicate.isString(payload)) return { message: payload }
  const inner = Predicate.hasProperty(payload, "error") ? payload.error : undefined
  if (Predicate.isString(inner)) return { message: inner, ...topLevel(payload) }
  const source = Predicate.isRecord(inner) ? inner : payload
  const numericCode = numberField(source, "code") ?? numberField(source, "status") ?? numberField(payload, "status")
  const type = stringField(source, "type")
  return {
    type: type === "error" ? undefined : type,
    code: stringField(source, "code"),
    message: stringField(source, "message") ?? stringField(payload, "message"),
    ...(numericCode !== undefined && numericCode >= 400 && numericCode <= 599 ? { status: numericCode } : {})
  }
}

const topLevel = (payload: unknown): ProviderErrorInfo => {
  const code = stringField(payload, "code")
  return code === undefined ? {} : { code }
}

/**
 * Classifies an error payload (see `infoOfPayload`) as `"<provider>: <its message>"`; the status of
 * `extra` wins over one found in the payload.
 *
 * @since 0.1.0
 * @category constructors
 */
export const fromPayload = (provider: string, payload: unknown, extra: FailureExtra = {}): LlmFailure => {
  const info = infoOfPayload(payload)
  const status = extra.status ?? info.status
  const kind = kindOf({ ...info, status })
  const detail = info.message ?? info.code ?? info.type ??
    (status === undefined ? "unknown error" : `HTTP ${status}`)
  const prefix = status === undefined ? provider : `${provider} (HTTP ${status})`
  return failureOf(kind, `${prefix}: ${detail}`, { ...extra, status })
}
