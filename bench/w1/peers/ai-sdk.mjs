/**
 * W1 on the Vercel AI SDK (`ai` 7): one multi-step `generateText` call with `stopWhen:
 * stepCountIs(steps + 1)` (one `echo` tool call per step, then the text answer). Two models:
 * - `ai-sdk-model` (like-for-like): a plain object implementing the provider specification's
 *   `LanguageModelV4` (`specificationVersion`, `provider`, `modelId`, `supportedUrls`, `doGenerate`,
 *   `doStream`), the smallest model its public API allows; `doGenerate` returns the scripted
 *   results, built before the timed run.
 * - `ai-sdk` (the SDK's test double, the row measured before): `MockLanguageModelV4` from `ai/test`
 *   with the same `doGenerate` (its recorded-calls array emptied on each call, as a real provider
 *   keeps no copy of every prompt).
 */
import { generateText, stepCountIs, tool } from "ai"
import { MockLanguageModelV4 } from "ai/test"
import { z } from "zod"
import { assertW1, callId, counters, ECHO_RESULT, FINAL_TEXT, main, PROMPT, runPeer, timed } from "./harness.mjs"

const usage = {
  inputTokens: { total: 1, noCache: 1, cacheRead: undefined, cacheWrite: undefined },
  outputTokens: { total: 1, text: 1, reasoning: undefined }
}

const script = (steps) => {
  const results = []
  for (let i = 1; i <= steps; i++) {
    results.push({
      content: [{ type: "tool-call", toolCallId: callId(i), toolName: "echo", input: JSON.stringify({ i }) }],
      finishReason: { unified: "tool-calls", raw: undefined },
      usage,
      warnings: []
    })
  }
  results.push({
    content: [{ type: "text", text: FINAL_TEXT }],
    finishReason: { unified: "stop", raw: undefined },
    usage,
    warnings: []
  })
  return results
}

// Whether the call's prompt ends with the tool result of call `id`.
const endsWithResult = (options) => (id) => {
  const last = options.prompt[options.prompt.length - 1]
  const part = last?.role === "tool" ? last.content[last.content.length - 1] : undefined
  return part?.type === "tool-result" && part.toolCallId === id && part.output?.value === ECHO_RESULT
}

// The model's `doGenerate`: the next scripted result for each call.
const scriptedGenerate = (steps, count) => {
  const results = script(steps)
  return async (options) => results[count.model(endsWithResult(options)) - 1]
}

/** The smallest `LanguageModelV4`: a plain object; `generateText` only calls `doGenerate`. */
const plainModel = (steps, count) => ({
  specificationVersion: "v4",
  provider: "w1",
  modelId: "w1",
  supportedUrls: {},
  doGenerate: scriptedGenerate(steps, count),
  doStream: async () => {
    throw new Error("W1 does not stream")
  }
})

const mockModel = (steps, count) => {
  const generate = scriptedGenerate(steps, count)
  const model = new MockLanguageModelV4({
    doGenerate: (options) => {
      // The mock records every call's options (the whole prompt); a real provider keeps none.
      model.doGenerateCalls.length = 0
      return generate(options)
    }
  })
  return model
}

const onceWith = (system, makeModel) => async (steps) => {
  const count = counters()
  const model = makeModel(steps, count)
  const echo = tool({
    description: "Returns a constant string",
    inputSchema: z.object({ i: z.number() }),
    execute: async () => {
      count.tool()
      return ECHO_RESULT
    }
  })
  const [result, ms] = await timed(() =>
    generateText({ model, tools: { echo }, stopWhen: stepCountIs(steps + 1), prompt: PROMPT })
  )
  assertW1(system, steps, count.counts, result.text)
  if (result.steps.length !== steps + 1) {
    throw new Error(`${system} ran ${result.steps.length} steps, expected ${steps + 1}`)
  }
  return ms
}

main(runPeer({ "ai-sdk-model": onceWith("ai-sdk-model", plainModel), "ai-sdk": onceWith("ai-sdk", mockModel) }))
