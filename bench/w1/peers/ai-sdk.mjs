/**
 * W1 on the Vercel AI SDK (`ai` 7): one multi-step `generateText` call with `stopWhen:
 * stepCountIs(steps + 1)`, the model a `MockLanguageModelV4` from `ai/test` whose `doGenerate`
 * returns the scripted results in order (one `echo` tool call per step, then the text answer).
 */
import { generateText, stepCountIs, tool } from "ai"
import { MockLanguageModelV4 } from "ai/test"
import { z } from "zod"
import { ECHO_RESULT, FINAL_TEXT, PROMPT, assertW1, counters, main, runPeer, timed } from "./harness.mjs"

const usage = {
  inputTokens: { total: 1, noCache: 1, cacheRead: undefined, cacheWrite: undefined },
  outputTokens: { total: 1, text: 1, reasoning: undefined }
}

const script = (steps) => {
  const results = []
  for (let i = 1; i <= steps; i++) {
    results.push({
      content: [{ type: "tool-call", toolCallId: `call-${i}`, toolName: "echo", input: JSON.stringify({ i }) }],
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

const once = async (steps) => {
  const results = script(steps)
  const count = counters()
  const model = new MockLanguageModelV4({
    doGenerate: async () => {
      // The mock records every call's options (the whole prompt); a real provider keeps none.
      model.doGenerateCalls.length = 0
      return results[count.model() - 1]
    }
  })
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
  assertW1("ai-sdk", steps, count.counts, result.text)
  if (result.steps.length !== steps + 1) throw new Error(`ai-sdk ran ${result.steps.length} steps, expected ${steps + 1}`)
  return ms
}

main(runPeer("ai-sdk", once))
