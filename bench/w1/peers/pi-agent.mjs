/**
 * W1 on pi agent core (`@mariozechner/pi-agent-core` 0.73): one `Agent.prompt` that runs until the
 * model stops calling tools, the model pi-ai's faux provider (`registerFauxProvider`) with the
 * scripted assistant messages queued (`fauxToolCall` of `echo` per step, then `fauxText`).
 */
import { Agent } from "@mariozechner/pi-agent-core"
import { fauxAssistantMessage, fauxText, fauxToolCall, registerFauxProvider } from "@mariozechner/pi-ai"
import { Type } from "typebox"
import { ECHO_RESULT, FINAL_TEXT, PROMPT, assertW1, counters, main, runPeer, timed } from "./harness.mjs"

const script = (steps) => {
  const messages = []
  for (let i = 1; i <= steps; i++) {
    messages.push(fauxAssistantMessage(fauxToolCall("echo", { i }, { id: `call-${i}` }), { stopReason: "toolUse" }))
  }
  messages.push(fauxAssistantMessage(fauxText(FINAL_TEXT)))
  return messages
}

const once = async (steps) => {
  const faux = registerFauxProvider()
  faux.setResponses(script(steps))
  const count = counters()
  const echo = {
    name: "echo",
    label: "Echo",
    description: "Returns a constant string",
    parameters: Type.Object({ i: Type.Number() }),
    executionMode: "sequential",
    execute: async () => {
      count.tool()
      return { content: [{ type: "text", text: ECHO_RESULT }], details: {} }
    }
  }
  const agent = new Agent({ initialState: { systemPrompt: "", model: faux.getModel(), tools: [echo] } })
  const [, ms] = await timed(() => agent.prompt(PROMPT))
  count.counts.model = faux.state.callCount
  faux.unregister()
  const last = agent.state.messages[agent.state.messages.length - 1]
  const finalText = last?.role === "assistant" ? last.content.find((block) => block.type === "text")?.text : undefined
  if (agent.state.errorMessage !== undefined) throw new Error(`pi-agent run failed: ${agent.state.errorMessage}`)
  assertW1("pi-agent", steps, count.counts, finalText)
  return ms
}

main(runPeer("pi-agent", once))
