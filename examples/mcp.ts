/**
 * An agent using an MCP server: the reference server `server-everything` over stdio, its tools
 * offered to the model as `mcp__everything__<tool>`, one of its resources entered as context and
 * one of its prompts sent as the next prompt. The model is scripted here. Run it with
 * `npx tsx examples/mcp.ts`; `test/examples.test.ts` runs it in CI.
 */
import { Effect, Layer } from "effect"
import { createRequire } from "node:module"
import * as path from "node:path"
import {
  Agent,
  Driver,
  Mcp,
  McpServers,
  ScriptedModel,
  SessionId,
  SessionLog,
  SessionStore,
  Tools,
  userMessage
} from "../src/index.js"

// The server's script, from node_modules (it is a devDependency of tiller).
const everythingScript = path.join(
  path.dirname(createRequire(import.meta.url).resolve("@modelcontextprotocol/server-everything/package.json")),
  "dist",
  "index.js"
)

// The configuration users write in .mcp.json, as tiller reads it: one stdio server.
const servers = McpServers.layer({
  servers: [{
    name: "everything",
    transport: { _tag: "stdio", command: process.execPath, args: [everythingScript, "stdio"] },
    startupTimeoutMs: 30_000,
    callTimeoutMs: 30_000,
    denyTools: ["get-env"]
  }],
  toolSearchShare: 0.5
})

// The model calls one of the server's tools, then answers; then it answers the prompt.
const model = ScriptedModel.layer([
  ScriptedModel.response({
    text: "Adding.",
    toolCalls: [{ id: "call-1", name: "mcp__everything__get-sum", arguments: { a: 19, b: 23 } }]
  }),
  ScriptedModel.text("19 + 23 = 42."),
  ScriptedModel.text("Sunny, probably.")
])

/** One turn with an MCP tool and a resource as context, then a prompt of the server. */
export const program = Effect.gen(function*() {
  const mcp = yield* Mcp
  const driver = yield* Driver
  // A resource enters as context: one user message whose source names the server and the URI.
  yield* driver.inject(yield* mcp.resource("everything", "demo://resource/dynamic/text/1"))
  yield* driver.followup(userMessage({ id: "prompt", text: "What is 19 + 23?" }))
  yield* driver.whenIdle
  // A server prompt (in the chat: /mcp__everything__args-prompt Paris) is the next prompt.
  yield* driver.followup(yield* mcp.prompt("mcp__everything__args-prompt", "Paris"))
  yield* driver.whenIdle
  const events = yield* (yield* SessionLog).events
  const history = yield* (yield* SessionLog).messages
  return { servers: yield* mcp.servers, events, history }
})

/** The layers of the example: an agent over a memory store, the scripted model, the MCP server's tools. */
export const McpLive = Agent.layer({
  open: SessionId.make("mcp-example"),
  model: { provider: "demo", model: "scripted" }
})
  .pipe(
    Layer.provideMerge(servers),
    Layer.provideMerge(Layer.mergeAll(Tools.layer(), SessionStore.layerMemory, model))
  )

if (import.meta.url === `file://${process.argv[1]}`) {
  Effect.runPromise(Effect.scoped(Effect.provide(program, McpLive))).then(({ history, servers }) => {
    for (const s of servers) {
      console.log(`server ${s.name}: ${s.state}, ${s.tools} tools, protocol ${s.protocolVersion}`)
    }
    for (const m of history) {
      const text = m.content.map((b) =>
        "text" in b
          ? b.text
          : b.type === "tool-call"
          ? `[call ${b.name}]`
          : b.type === "tool-result"
          ? `[result ${JSON.stringify(b.content)}]`
          : `[${b.type}]`
      ).join(" ")
      console.log(`${m.role.padEnd(9)} ${m.source.kind.padEnd(12)} ${text.slice(0, 120)}`)
    }
  })
}
