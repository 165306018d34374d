import { describe, expect, it } from "@effect/vitest"
import {
  FAILURE_TABLE,
  failureOf,
  fromPayload,
  kindOf,
  shorten
} from "../../../src/internal/providers/ProviderFailure.js"

describe("ProviderFailure", () => {
  it("classifies by the provider's error type or code before the status", () => {
    // OpenAI answers an exhausted quota with 429 and code insufficient_quota: not worth a retry.
    expect(kindOf({ status: 429, code: "insufficient_quota", type: "insufficient_quota" })).toBe("quota")
    expect(kindOf({ status: 429, type: "rate_limit_error" })).toBe("rate-limit")
    expect(kindOf({ type: "overloaded_error" })).toBe("overloaded")
    expect(kindOf({ status: 400, type: "invalid_request_error", code: "context_length_exceeded" })).toBe(
      "context-overflow"
    )
    expect(kindOf({ status: 401, type: "invalid_request_error", code: "invalid_api_key" })).toBe("auth")
    expect(kindOf({ type: "authentication_error" })).toBe("auth")
  })

  it("reads a context overflow from a 400's message", () => {
    expect(
      kindOf({
        status: 400,
        type: "invalid_request_error",
        message: "prompt is too long: 210000 tokens > 200000 maximum"
      })
    )
      .toBe("context-overflow")
    expect(kindOf({ status: 400, type: "invalid_request_error", message: "max_tokens: must be positive" })).toBe(
      "invalid-request"
    )
  })

  it("classifies by status when the provider says nothing more", () => {
    expect([401, 403, 402, 404, 408, 413, 429, 500, 503, 529, 422, 302].map((status) => kindOf({ status }))).toEqual([
      "auth",
      "auth",
      "quota",
      "not-found",
      "timeout",
      "context-overflow",
      "rate-limit",
      "server",
      "server",
      "overloaded",
      "invalid-request",
      "provider"
    ])
    expect(kindOf({})).toBe("provider")
  })

  it("gives every kind a code and whether the default policy retries it", () => {
    const retryable = Object.entries(FAILURE_TABLE).filter(([, entry]) => entry.retryable).map(([kind]) => kind)
    expect(retryable.sort()).toEqual(["network", "overloaded", "rate-limit", "server", "timeout"])
    expect(failureOf("timeout", "slow", { status: 408, retryAfterMs: 5, requestId: "r" })).toEqual({
      message: "slow",
      code: "TIMEOUT",
      retryable: true,
      status: 408,
      retryAfterMs: 5,
      requestId: "r"
    })
  })

  it("keeps the provider's own message from each payload shape, on one short line", () => {
    const anthropic = { type: "error", error: { type: "overloaded_error", message: "Overloaded" } }
    expect(fromPayload("Anthropic", anthropic)).toEqual({
      message: "Anthropic: Overloaded",
      code: "OVERLOADED",
      retryable: true
    })
    const openAiEvent = {
      type: "error",
      sequence_number: 2,
      error: {
        type: "insufficient_quota",
        code: "insufficient_quota",
        message: "You exceeded your current quota.",
        param: null
      }
    }
    expect(fromPayload("OpenAI", openAiEvent)).toEqual({
      message: "OpenAI: You exceeded your current quota.",
      code: "QUOTA",
      retryable: false
    })
    expect(fromPayload("OpenAI", { type: "error", code: "server_error", message: "boom" }).code).toBe(
      "SERVICE_UNAVAILABLE"
    )
    expect(fromPayload("vLLM", { error: { message: "bad", type: "BadRequestError", param: null, code: 400 } })).toEqual(
      {
        message: "vLLM (HTTP 400): bad",
        code: "INVALID_REQUEST",
        retryable: false,
        status: 400
      }
    )
    expect(fromPayload("host", { error: "plain text" }, { status: 503 })).toEqual({
      message: "host (HTTP 503): plain text",
      code: "SERVICE_UNAVAILABLE",
      retryable: true,
      status: 503
    })
    expect(fromPayload("host", undefined, { status: 401 }).message).toBe("host (HTTP 401): HTTP 401")
    expect(shorten(`a\n  b ${"x".repeat(400)}`)).toHaveLength(300)
    expect(shorten("a\n  b")).toBe("a b")
  })
})
