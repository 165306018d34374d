import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import * as path from "node:path"
import * as fs from "node:fs"
import type { EventOf, SessionEvent } from "../../src/domain/Event.js"
import { SessionId } from "../../src/domain/Ids.js"
import { userMessage } from "../../src/domain/Message.js"
import type { McpServerConfig } from "../../src/internal/mcp/Config.js"
import { Agent } from "../../src/layers/Agent.js"
import { McpServers } from "../../src/layers/McpServers.js"
import { ScriptedModel } from "../../src/layers/ScriptedModel.js"
import type { ScriptEntry } from "../../src/layers/ScriptedModel.js"
import { Driver } from "../../src/services/Driver.js"
import { Mcp } from "../../src/services/Mcp.js"
import { SessionLog } from "../../src/services/SessionLog.js"
import { SessionStore } from "../../src/services/SessionStore.js"
import { Tools } from "../../src/services/Tools.js"
import { everything, everythingHttp, filesystem, memory, tempDir } from "./mcp/servers.js"

/** An agent over a memory store, the scripted model and the MCP servers' tools. */
const agentWith = (
  servers: ReadonlyArray<McpServerConfig>,
  script: ReadonlyArray<ScriptEntry>,
  options: { readonly toolSearchShare?: number; readonly contextWindow?: number } = {}
) =>
  Agent.layer({ open: SessionId.make("mcp"), model: { provider: "test", model: "scripted" } }).pipe(
    Layer.provideMerge(
      McpServers.layer(
        { servers, toolSearchShare: options.toolSearchShare ?? 1 },
        options.contextWindow === undefined ? {} : { contextWindow: options.contextWindow }
      )
    ),
    Layer.provideMerge(Layer.mergeAll(Tools.layer(), SessionStore.layerMemory, ScriptedModel.layer(script)))
  )

const call = (id: string, name: string, args: unknown) => ({ id, name, arguments: args })

/** The tool results of a log, by call id: their text and meta. */
const results = (events: ReadonlyArray<SessionEvent>) =>
  new Map(
    events.filter((e): e is EventOf<"tool/result"> => e.type === "tool/result").map((e) => {
      const block = e.data.message.content[0]!
      const content = block.type === "tool-result" ? block.content : []
      return [block.type === "tool-result" ? block.toolCallId : "", {
        text: content.map((b) => (b.type === "text" ? b.text : `[${b.type}]`)).join("\n"),
        types: content.map((b) => b.type),
        isError: block.type === "tool-result" && block.isError === true,
        meta: e.data.meta
      }]
    })
  )

const runTurn = (text: string) =>
  Effect.gen(function*() {
    const driver = yield* Driver
    yield* driver.followup(userMessage({ id: text, text }))
    yield* driver.whenIdle
    return yield* (yield* SessionLog).events
  })

describe("McpServers over the reference servers (stdio)", () => {
  it.scopedLive("a scripted model calls tools of server-everything, -filesystem and -memory in real turns", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      fs.writeFileSync(path.join(dir, "notes.txt"), "alpha beta gamma\n")
      const script = [
        ScriptedModel.response({
          toolCalls: [
            call("sum", "mcp__everything__get-sum", { a: 2, b: 3 }),
            call("image", "mcp__everything__get-tiny-image", {}),
            call("weather", "mcp__everything__get-structured-content", { location: "New York" }),
            call("read", "mcp__filesystem__read_text_file", { path: path.join(dir, "notes.txt") }),
            call("remember", "mcp__memory__create_entities", {
              entities: [{ name: "tiller", entityType: "project", observations: ["runs agents"] }]
            })
          ]
        }),
        ScriptedModel.response({ toolCalls: [call("graph", "mcp__memory__read_graph", {})] }),
        ScriptedModel.text("done")
      ]
      const events = yield* runTurn("go").pipe(
        Effect.provide(agentWith([everything(), filesystem(dir), memory(path.join(dir, "memory.jsonl"))], script))
      )
      const byCall = results(events)
      expect(byCall.get("sum")!.text).toBe("The sum of 2 and 3 is 5.")
      expect(byCall.get("image")!.types).toContain("image")
      const weather = byCall.get("weather")!
      expect((weather.meta as any).mcp.structuredContent).toHaveProperty("temperature")
      expect((weather.meta as any).mcp).toMatchObject({ server: "everything", tool: "get-structured-content" })
      expect(byCall.get("read")!.text).toBe("alpha beta gamma\n")
      expect(byCall.get("graph")!.text).toContain("runs agents")
      expect([...byCall.values()].every((r) => !r.isError)).toBe(true)
      // The first request offered every server's tools, their JSON Schemas passed through.
      const header = events.find((e): e is EventOf<"request/header"> => e.type === "request/header")!
      const sum = header.data.header.tools.find((t) => t.name === "mcp__everything__get-sum")!
      expect(sum.parameters).toMatchObject({ type: "object", required: ["a", "b"] })
      expect(header.data.header.tools.some((t) => t.name === "mcp__filesystem__read_text_file")).toBe(true)
      expect(header.data.header.tools.some((t) => t.name === "mcp__memory__read_graph")).toBe(true)
    }), 60_000)
})

describe("McpServers over Streamable HTTP", () => {
  it.scopedLive("server-everything on 127.0.0.1: tools listed and called in a turn", () =>
    Effect.gen(function*() {
      const url = yield* everythingHttp
      const server: McpServerConfig = {
        name: "web",
        transport: { _tag: "http", url, headers: { "X-Tiller-Test": "1" } },
        startupTimeoutMs: 20_000,
        callTimeoutMs: 20_000,
        denyTools: []
      }
      const script = [
        ScriptedModel.response({ toolCalls: [call("echo", "mcp__web__echo", { message: "over http" })] }),
        ScriptedModel.text("done")
      ]
      const layer = agentWith([server], script)
      const { events, servers } = yield* Effect.gen(function*() {
        const events = yield* runTurn("go")
        const servers = yield* (yield* Mcp).servers
        return { events, servers }
      }).pipe(Effect.provide(layer))
      expect(results(events).get("echo")!.text).toBe("Echo: over http")
      expect(servers).toMatchObject([{ name: "web", transport: "http", state: "connected" }])
    }), 60_000)
})
