/**
 * What a recorded response must become in tiller, derived from the recording's own payloads by each
 * API family's dialect (Anthropic.ts, Responses.ts, Chat.ts), and the shared pieces: the expected
 * failure of a provider error payload, the history item forms requests are compared in.
 */
import type { HttpClient } from "@effect/platform"
import type { Layer } from "effect"
import type { Model } from "../../../src/services/Model.js"
import type { Family, RecordedResponse } from "./Recordings.js"

/** A tool call as tiller logs it: `arguments` is the raw JSON text, `{}` when the model sent none. */
export interface ExpectedCall {
  readonly id: string
  readonly name: string
  readonly arguments: string
}

/** The usage a response reported (the last values win); optional counts only when reported. */
export interface ExpectedUsage {
  readonly inputTokens: number
  readonly outputTokens: number
  readonly reasoningTokens?: number
  readonly cacheReadTokens?: number
}

/** How the attempt ends. An error's `message` is a part the failure message must contain. */
export type ExpectedFinish =
  | { readonly kind: "stop" }
  | { readonly kind: "max-tokens" }
  | { readonly kind: "error"; readonly code: string; readonly retryable: boolean; readonly message: string }

/** One recorded response as tiller must see it. */
export interface ExpectedResponse {
  /** Every text delta of the response, concatenated (a refusal streams none: its words are in the REFUSAL failure). */
  readonly text: string
  /** Every reasoning delta, concatenated. */
  readonly reasoning: string
  /** Calls tiller runs (provider-executed tools excluded), in model order. */
  readonly calls: ReadonlyArray<ExpectedCall>
  readonly usage: ExpectedUsage | undefined
  readonly finish: ExpectedFinish
  /** The history items this response becomes in later requests, in the dialect's normalized form. */
  readonly replay: ReadonlyArray<unknown>
}

/** One API family: its model layer, how its responses and requests read. */
export interface Dialect {
  readonly family: Family
  /** The provider recorded in request headers. */
  readonly provider: string
  /** The request path the adapter must post to. */
  readonly path: string
  readonly layer: (url: string) => Layer.Layer<Model, unknown, HttpClient.HttpClient>
  readonly expect: (response: RecordedResponse) => ExpectedResponse
  /** A short text response ("Done.") in this family's framing, for requests past the recording. */
  readonly closing: string
  /** A request's conversation in normalized form. */
  readonly history: (body: any) => ReadonlyArray<unknown>
  readonly user: (text: string) => unknown
  readonly toolResult: (id: string, text: string) => unknown
  /** The tools a request declares: each name and its parameters' JSON Schema. */
  readonly declared: (body: any) => ReadonlyArray<{ readonly name: string; readonly parameters: any }>
  /** Checks every request must pass whatever its position (headers and fields the adapter always sends). */
  readonly everyRequest: (request: { readonly headers: Readonly<Record<string, unknown>>; readonly body: any }) => void
}

/** The API key the tests configure; it must never appear in the log. */
export const KEY = "sk-replay-0123456789-never-logged"

/** The failure an error payload of a recording must become, by its provider type or code. */
const ERRORS: Readonly<Record<string, { readonly code: string; readonly retryable: boolean }>> = {
  overloaded_error: { code: "OVERLOADED", retryable: true },
  insufficient_quota: { code: "QUOTA", retryable: false },
  server_error: { code: "SERVICE_UNAVAILABLE", retryable: true },
  rate_limit_error: { code: "RATE_LIMIT", retryable: true },
  rate_limit_exceeded: { code: "RATE_LIMIT", retryable: true },
  api_error: { code: "SERVICE_UNAVAILABLE", retryable: true },
  context_length_exceeded: { code: "CONTEXT_OVERFLOW", retryable: false },
  invalid_request_error: { code: "INVALID_REQUEST", retryable: false }
}

/**
 * The expected failure of an error payload (`{type, code, message}` or a numeric HTTP-like `code`);
 * throws when this suite has no expectation for it, so a new kind of error recording is noticed.
 */
export const errorFinish = (error: any): ExpectedFinish => {
  const message = typeof error?.message === "string" ? error.message : ""
  for (const key of [error?.code, error?.type]) {
    if (typeof key === "string" && ERRORS[key] !== undefined) {
      return { kind: "error", ...ERRORS[key], message: message.slice(0, 100) }
    }
  }
  const status = typeof error?.code === "number"
    ? error.code
    : typeof error?.status === "number"
    ? error.status
    : undefined
  if (status !== undefined && status >= 500 && status <= 599) {
    return { kind: "error", code: "SERVICE_UNAVAILABLE", retryable: true, message: message.slice(0, 100) }
  }
  throw new Error(`no expected failure for the error payload ${JSON.stringify(error)}`)
}

/** A refusal: the text the model streamed is kept in the failure message. */
export const refusalFinish = (text: string): ExpectedFinish => ({
  kind: "error",
  code: "REFUSAL",
  retryable: false,
  message: text === "" ? "the model refused" : `the model refused: ${text.slice(0, 100)}`
})

/** The JSON value of a tool call's arguments text (`{}` for none); the text itself when it is not JSON. */
export const argumentsValue = (text: string): unknown => {
  if (text === "") return {}
  try {
    return JSON.parse(text)
  } catch {
    return text
  }
}

/** The text of a tool result or message content: a string, or its text parts joined by `\n`. */
export const textOf = (content: unknown): string | unknown =>
  typeof content === "string"
    ? content
    : Array.isArray(content) && content.every((part) => typeof part?.text === "string")
    ? content.map((part) => part.text).join("\n")
    : content

/** Every string anywhere in a JSON value. */
export const strings = (value: unknown): Array<string> =>
  typeof value === "string"
    ? [value]
    : Array.isArray(value)
    ? value.flatMap(strings)
    : typeof value === "object" && value !== null
    ? Object.values(value).flatMap(strings)
    : []
