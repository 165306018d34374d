/**
 * W1 on LangGraph JS (`@langchain/langgraph` 1.7): the prebuilt ReAct agent (`createReactAgent`)
 * invoked once with a recursion limit above the 2 graph steps per W1 step. None of
 * `@langchain/core`'s fake chat models can script a sequence of tool calls (`FakeListChatModel`
 * answers text only, `FakeStreamingChatModel` repeats one set of tool calls on every call), so the
 * model is the smallest `BaseChatModel` subclass (`_llmType`, `_generate`, and `bindTools`, which
 * the ReAct agent calls) returning the scripted `AIMessage`s in order; it is also the smallest model
 * the public API allows (`SimpleChatModel` answers text only).
 */
import { BaseChatModel } from "@langchain/core/language_models/chat_models"
import { AIMessage } from "@langchain/core/messages"
import { tool } from "@langchain/core/tools"
import { createReactAgent } from "@langchain/langgraph/prebuilt"
import { z } from "zod"
import { assertW1, callId, counters, ECHO_RESULT, FINAL_TEXT, main, PROMPT, runPeer, timed } from "./harness.mjs"

// Whether the messages end with the `ToolMessage` answering call `id`.
const endsWithResult = (messages) => (id) => {
  const last = messages[messages.length - 1]
  return last?._getType() === "tool" && last.tool_call_id === id && last.content === ECHO_RESULT
}

/** A chat model answering each call with the next scripted message; tools bind to itself. */
class ScriptedToolCallingChatModel extends BaseChatModel {
  constructor(messages, onCall) {
    super({})
    this.messages = messages
    this.onCall = onCall
  }

  _llmType() {
    return "scripted-tool-calling"
  }

  bindTools() {
    return this
  }

  async _generate(messages) {
    const message = this.messages[this.onCall(endsWithResult(messages)) - 1]
    return { generations: [{ message, text: typeof message.content === "string" ? message.content : "" }] }
  }
}

const script = (steps) => {
  const messages = []
  for (let i = 1; i <= steps; i++) {
    messages.push(
      new AIMessage({ content: "", tool_calls: [{ id: callId(i), name: "echo", args: { i }, type: "tool_call" }] })
    )
  }
  messages.push(new AIMessage(FINAL_TEXT))
  return messages
}

const once = async (steps) => {
  const count = counters()
  const llm = new ScriptedToolCallingChatModel(script(steps), count.model)
  const echo = tool(
    async () => {
      count.tool()
      return ECHO_RESULT
    },
    { name: "echo", description: "Returns a constant string", schema: z.object({ i: z.number() }) }
  )
  const agent = createReactAgent({ llm, tools: [echo] })
  const [state, ms] = await timed(() =>
    agent.invoke({ messages: [{ role: "user", content: PROMPT }] }, { recursionLimit: 2 * steps + 10 })
  )
  const last = state.messages[state.messages.length - 1]
  assertW1("langgraph", steps, count.counts, last?.content)
  return ms
}

main(runPeer({ langgraph: once }))
