/**
 * W1 on pi agent core (`@mariozechner/pi-agent-core` 0.73): one `Agent.prompt` that runs until the
 * model stops calling tools. Two models:
 * - `pi-agent-streamfn` (like-for-like): the Agent's `streamFn` option, the smallest model its
 *   public API allows. It returns pi-ai's `AssistantMessageEventStream` holding the one `done` event
 *   of the scripted assistant message (an `echo` tool call per step, then the text), built before
 *   the timed run; no provider, no deltas, no usage estimate.
 * - `pi-agent` (pi-ai's test double, the row measured before): the faux provider
 *   (`registerFauxProvider`) with the scripted `fauxAssistantMessage`s queued; it streams each
 *   response in token-sized chunks and estimates usage from the serialized context.
 */
import { Agent } from "@mariozechner/pi-agent-core"
import {
  createAssistantMessageEventStream,
  fauxAssistantMessage,
  fauxText,
  fauxToolCall,
  registerFauxProvider
} from "@mariozechner/pi-ai"
import { Type } from "typebox"
import { assertW1, callId, counters, ECHO_RESULT, FINAL_TEXT, main, PROMPT, runPeer, timed } from "./harness.mjs"

// Whether pi's context ends with the tool result of call `id`.
const endsWithResult = (context) => (id) => {
  const last = context.messages[context.messages.length - 1]
  return last?.role === "toolResult" && last.toolCallId === id && last.content[0]?.text === ECHO_RESULT
}

const echoTool = (count) => ({
  name: "echo",
  label: "Echo",
  description: "Returns a constant string",
  parameters: Type.Object({ i: Type.Number() }),
  executionMode: "sequential",
  execute: async () => {
    count.tool()
    return { content: [{ type: "text", text: ECHO_RESULT }], details: {} }
  }
})

// Runs one prompt on `agent` (timed) and checks the whole workload ran.
const promptAndCheck = async (system, steps, agent, count) => {
  const [, ms] = await timed(() => agent.prompt(PROMPT))
  const last = agent.state.messages[agent.state.messages.length - 1]
  const finalText = last?.role === "assistant" ? last.content.find((block) => block.type === "text")?.text : undefined
  if (agent.state.errorMessage !== undefined) throw new Error(`${system} run failed: ${agent.state.errorMessage}`)
  assertW1(system, steps, count.counts, finalText)
  return ms
}

// ---------------------------------------------------------------------------------------------------
// A custom streamFn

const W1_MODEL = {
  id: "w1",
  name: "w1",
  api: "w1",
  provider: "w1",
  baseUrl: "",
  reasoning: false,
  input: ["text"],
  cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0 },
  contextWindow: 1_000_000,
  maxTokens: 1_000
}

const usage = {
  input: 1,
  output: 1,
  cacheRead: 0,
  cacheWrite: 0,
  totalTokens: 2,
  cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, total: 0 }
}

const assistant = (content, stopReason) => ({
  role: "assistant",
  content,
  api: W1_MODEL.api,
  provider: W1_MODEL.provider,
  model: W1_MODEL.id,
  usage,
  stopReason,
  timestamp: 0
})

const messages = (steps) => {
  const out = []
  for (let i = 1; i <= steps; i++) {
    out.push(assistant([{ type: "toolCall", id: callId(i), name: "echo", arguments: { i } }], "toolUse"))
  }
  out.push(assistant([{ type: "text", text: FINAL_TEXT }], "stop"))
  return out
}

const onceStreamFn = async (steps) => {
  const script = messages(steps)
  const count = counters()
  const streamFn = (_model, context) => {
    const message = script[count.model(endsWithResult(context)) - 1]
    const stream = createAssistantMessageEventStream()
    stream.push({ type: "done", reason: message.stopReason, message })
    return stream
  }
  const agent = new Agent({ initialState: { systemPrompt: "", model: W1_MODEL, tools: [echoTool(count)] }, streamFn })
  return promptAndCheck("pi-agent-streamfn", steps, agent, count)
}

// ---------------------------------------------------------------------------------------------------
// pi-ai's faux provider

const fauxScript = (steps, onCall) => {
  const responses = []
  for (let i = 1; i <= steps; i++) {
    const message = fauxAssistantMessage(fauxToolCall("echo", { i }, { id: callId(i) }), { stopReason: "toolUse" })
    responses.push((context) => (onCall(context), message))
  }
  const answer = fauxAssistantMessage(fauxText(FINAL_TEXT))
  responses.push((context) => (onCall(context), answer))
  return responses
}

const onceFaux = async (steps) => {
  const count = counters()
  const faux = registerFauxProvider()
  faux.setResponses(fauxScript(steps, (context) => count.model(endsWithResult(context))))
  const agent = new Agent({ initialState: { systemPrompt: "", model: faux.getModel(), tools: [echoTool(count)] } })
  try {
    const ms = await promptAndCheck("pi-agent", steps, agent, count)
    if (faux.state.callCount !== steps + 1) {
      throw new Error(`pi-agent: faux provider called ${faux.state.callCount} times`)
    }
    return ms
  } finally {
    faux.unregister()
  }
}

main(runPeer({ "pi-agent-streamfn": onceStreamFn, "pi-agent": onceFaux }))
