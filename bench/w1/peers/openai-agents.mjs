/**
 * W1 on the OpenAI Agents SDK (`@openai/agents` 0.20): one `run` of an `Agent` with `maxTurns`
 * above N + 1 and tracing disabled, the model a custom implementation of the SDK's `Model`
 * interface whose `getResponse` returns the scripted outputs in order (built with the SDK's
 * `functionCall` / `assistantMessage` helpers from `@openai/agents/testing`).
 */
import { Agent, Usage, run, setTracingDisabled, tool } from "@openai/agents"
import { assistantMessage, functionCall } from "@openai/agents/testing"
import { z } from "zod"
import { ECHO_RESULT, FINAL_TEXT, PROMPT, assertW1, counters, main, runPeer, timed } from "./harness.mjs"

setTracingDisabled(true)

/** A `Model` answering each request with the next scripted output; streaming is not used by `run`. */
class ScriptedResponsesModel {
  constructor(outputs, onCall) {
    this.outputs = outputs
    this.onCall = onCall
  }

  async getResponse() {
    const n = this.onCall()
    return { usage: new Usage({ requests: 1 }), output: this.outputs[n - 1], responseId: `response-${n}` }
  }

  // eslint-disable-next-line require-yield
  async *getStreamedResponse() {
    throw new Error("W1 does not stream")
  }
}

const script = (steps) => {
  const outputs = []
  for (let i = 1; i <= steps; i++) outputs.push([functionCall("echo", { i }, { callId: `call-${i}` })])
  outputs.push([assistantMessage(FINAL_TEXT)])
  return outputs
}

const once = async (steps) => {
  const count = counters()
  const echo = tool({
    name: "echo",
    description: "Returns a constant string",
    parameters: z.object({ i: z.number() }),
    execute: async () => {
      count.tool()
      return ECHO_RESULT
    }
  })
  const agent = new Agent({ name: "w1", instructions: "", model: new ScriptedResponsesModel(script(steps), count.model), tools: [echo] })
  const [result, ms] = await timed(() => run(agent, PROMPT, { maxTurns: steps + 10 }))
  assertW1("openai-agents", steps, count.counts, result.finalOutput)
  return ms
}

main(runPeer("openai-agents", once))
