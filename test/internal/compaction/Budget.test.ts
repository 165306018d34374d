/**
 * The context budget's pure parts (issue 28 item 1): the window table and the token figures.
 */
import { describe, expect, it } from "@effect/vitest"
import { userMessage } from "../../../src/domain/Message.js"
import {
  contextWindowOf,
  DEFAULT_CONTEXT_WINDOW,
  promptTokensOf,
  tokensOfMessage
} from "../../../src/internal/compaction/Budget.js"

describe("contextWindowOf", () => {
  it("knows the providers' model families, after any vendor prefix, and falls back to a conservative default", () => {
    const cases: ReadonlyArray<readonly [string | undefined, number]> = [
      ["claude-sonnet-4-5", 200_000],
      ["anthropic/claude-3-5-haiku", 200_000],
      ["gpt-4.1-mini", 1_047_576],
      ["gpt-4o-2024-08-06", 128_000],
      ["gpt-5-codex", 272_000],
      ["o3", 200_000],
      ["o4-mini", 200_000],
      ["deepseek-chat", 128_000],
      ["meta-llama/Llama-3.3-70B-Instruct", 128_000],
      ["qwen2.5-coder:7b", 32_768],
      ["some-local-model", DEFAULT_CONTEXT_WINDOW],
      [undefined, DEFAULT_CONTEXT_WINDOW]
    ]
    expect(cases.map(([model]) => contextWindowOf(model))).toEqual(cases.map(([, window]) => window))
    expect(DEFAULT_CONTEXT_WINDOW).toBe(32_768)
  })
})

describe("token figures", () => {
  it("a message is characters / 4 (rounded up) plus 4 of framing; an image a fixed 1,200", () => {
    expect(tokensOfMessage(userMessage({ id: "a", text: "x".repeat(401) }))).toBe(101 + 4)
    expect(tokensOfMessage(userMessage({
      id: "b",
      content: [{ type: "text", text: "abcd" }, { type: "image", mediaType: "image/png", data: "AAAA" }]
    }))).toBe(1 + 1_200 + 4)
  })

  it("Anthropic's prompt counts its cached input too; OpenAI's input already does", () => {
    const usage = { inputTokens: 100, outputTokens: 5, cacheReadTokens: 1_000, cacheWriteTokens: 10 }
    expect(promptTokensOf(usage, "anthropic claude-sonnet-4-5")).toBe(1_110)
    expect(promptTokensOf(usage, "openai gpt-5")).toBe(100)
  })
})
