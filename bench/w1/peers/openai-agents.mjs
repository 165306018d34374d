/**
 * W1 on the OpenAI Agents SDK (`@openai/agents` 0.20): one `run` of an `Agent` with `maxTurns`
 * above N + 1 and tracing disabled, the model the smallest custom implementation of the SDK's
 * `Model` interface (`getResponse` and `getStreamedResponse`); `getResponse` returns the scripted
 * output items in order (plain `function_call` and `message` items, built before the timed run).
 */
import { Agent, run, setTracingDisabled, tool, Usage } from "@openai/agents"
import { z } from "zod"
import { assertW1, callId, counters, ECHO_RESULT, FINAL_TEXT, main, PROMPT, runPeer, timed } from "./harness.mjs"

setTracingDisabled(true)

/** A `Model` answering each request with the next scripted output; streaming is not used by `run`. */
class ScriptedResponsesModel {
  constructor(outputs, onCall) {
    this.outputs = outputs
    this.onCall = onCall
  }

  async getResponse(request) {
    const n = this.onCall(endsWithResult(request))
    return { usage: new Usage({ requests: 1 }), output: this.outputs[n - 1], responseId: `response-${n}` }
  }

  async *getStreamedResponse() {
    throw new Error("W1 does not stream")
  }
}

// Whether the request's input ends with the result of call `id`.
const endsWithResult = (request) => (id) => {
  const last = Array.isArray(request.input) ? request.input[request.input.length - 1] : undefined
  return last?.type === "function_call_result" && last.callId === id && last.output?.text === ECHO_RESULT
}

const script = (steps) => {
  const outputs = []
  for (let i = 1; i <= steps; i++) {
    outputs.push([{
      type: "function_call",
      id: callId(i),
      callId: callId(i),
      name: "echo",
      arguments: JSON.stringify({ i }),
      status: "completed"
    }])
  }
  outputs.push([{
    type: "message",
    role: "assistant",
    status: "completed",
    content: [{ type: "output_text", text: FINAL_TEXT }]
  }])
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
  const agent = new Agent({
    name: "w1",
    instructions: "",
    model: new ScriptedResponsesModel(script(steps), count.model),
    tools: [echo]
  })
  const [result, ms] = await timed(() => run(agent, PROMPT, { maxTurns: steps + 10 }))
  assertW1("openai-agents", steps, count.counts, result.finalOutput)
  return ms
}

main(runPeer({ "openai-agents": once }))
