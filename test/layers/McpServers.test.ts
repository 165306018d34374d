import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer, Stream } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import type { EventOf, SessionEvent } from "../../src/domain/Event.js"
import { SessionId } from "../../src/domain/Ids.js"
import { userMessage } from "../../src/domain/Message.js"
import { CancelCause } from "../../src/domain/Values.js"
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

const changing: McpServerConfig = {
  name: "changing",
  transport: {
    _tag: "stdio",
    command: process.execPath,
    args: [fileURLToPath(new URL("./mcp/changingServer.mjs", import.meta.url))]
  },
  startupTimeoutMs: 20_000,
  callTimeoutMs: 20_000,
  denyTools: []
}

/** Runs `effect` when the first progress notification of a call arrives. */
const onFirstProgress = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.gen(function*() {
    const mcp = yield* Mcp
    yield* mcp.events.pipe(
      Stream.filter((e) => e._tag === "Progress"),
      Stream.take(1),
      Stream.runDrain,
      Effect.zipRight(effect),
      Effect.forkScoped
    )
    // The subscription is in place before the turn starts.
    yield* Effect.yieldNow()
  })

const headers = (events: ReadonlyArray<SessionEvent>) =>
  events.filter((e): e is EventOf<"request/header"> => e.type === "request/header").map((e) => ({
    reason: e.data.reason,
    tools: e.data.header.tools.map((t) => t.name)
  }))

/** An agent over a memory store, the scripted model and the MCP servers' tools. */
const agentWith = (
  servers: ReadonlyArray<McpServerConfig>,
  script: ReadonlyArray<ScriptEntry>,
  options: {
    readonly toolSearchShare?: number
    readonly contextWindow?: number
    readonly maxToolResultChars?: number
  } = {}
) =>
  Agent.layer({
    open: SessionId.make("mcp"),
    model: { provider: "test", model: "scripted" },
    ...(options.maxToolResultChars === undefined
      ? {}
      : { compaction: { maxToolResultChars: options.maxToolResultChars, contextWindow: 1_000_000 } })
  }).pipe(
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
  it.scopedLive(
    "a scripted model calls tools of server-everything, -filesystem and -memory in real turns",
    () =>
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
      }),
    60_000
  )
})

describe("McpServers: failures, cancellation, limits", () => {
  it.scopedLive(
    "a server killed mid-call: the call ends as an error result, the server is reported and restarted on next use",
    () =>
      Effect.gen(function*() {
        const script = [
          ScriptedModel.response({
            toolCalls: [call("slow", "mcp__everything__trigger-long-running-operation", { duration: 20, steps: 20 })]
          }),
          ScriptedModel.response({ toolCalls: [call("sum", "mcp__everything__get-sum", { a: 1, b: 1 })] }),
          ScriptedModel.text("done")
        ]
        const { events, killed, after } = yield* Effect.gen(function*() {
          const mcp = yield* Mcp
          const [before] = yield* mcp.servers
          yield* onFirstProgress(Effect.sync(() => process.kill(before!.pid!, "SIGKILL")))
          const started = Date.now()
          const events = yield* runTurn("go")
          expect(Date.now() - started).toBeLessThan(15_000)
          const [after] = yield* mcp.servers
          return { events, killed: before!.pid, after: after! }
        }).pipe(Effect.provide(agentWith([everything()], script)))
        const byCall = results(events)
        expect(byCall.get("slow")!.isError).toBe(true)
        expect(byCall.get("slow")!.text).toContain("closed the connection")
        // The next call started the server again.
        expect(byCall.get("sum")!.text).toBe("The sum of 1 and 1 is 2.")
        expect(after.state).toBe("connected")
        expect(after.pid).not.toBe(killed)
      }),
    60_000
  )

  it.scopedLive(
    "cancelling the turn cancels the running call; the server goes on serving",
    () =>
      Effect.gen(function*() {
        const script = [
          ScriptedModel.response({
            toolCalls: [call("slow", "mcp__everything__trigger-long-running-operation", { duration: 20, steps: 20 })]
          }),
          ScriptedModel.text("after the cancel")
        ]
        const { ended, sum, elapsed } = yield* Effect.gen(function*() {
          const driver = yield* Driver
          yield* onFirstProgress(driver.cancel(CancelCause.user))
          const started = Date.now()
          const events = yield* runTurn("go")
          const elapsed = Date.now() - started
          const ended = events.filter((e): e is EventOf<"turn/end"> => e.type === "turn/end").at(-1)!
          const sum = yield* (yield* Mcp).call("everything", "get-sum", { a: 4, b: 5 })
          return { ended, sum, elapsed }
        }).pipe(Effect.provide(agentWith([everything()], script)))
        expect(ended.data.reason.kind).toBe("aborted")
        expect(elapsed).toBeLessThan(15_000)
        expect(sum.content).toEqual([{ type: "text", text: "The sum of 4 and 5 is 9." }])
      }),
    60_000
  )

  it.scopedLive("a slow call past the server's timeout ends as an error result", () =>
    Effect.gen(function*() {
      const script = [
        ScriptedModel.response({
          toolCalls: [call("slow", "mcp__everything__trigger-long-running-operation", { duration: 5, steps: 5 })]
        }),
        ScriptedModel.text("done")
      ]
      const events = yield* runTurn("go").pipe(Effect.provide(agentWith([everything({ callTimeoutMs: 500 })], script)))
      const slow = results(events).get("slow")!
      expect(slow.isError).toBe(true)
      expect(slow.text).toContain("timed out after 500 ms")
    }), 60_000)

  it.scopedLive("a large result goes through the tool-result cap", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const big = path.join(dir, "big.txt")
      fs.writeFileSync(big, "0123456789".repeat(5_000))
      const script = [
        ScriptedModel.response({ toolCalls: [call("big", "mcp__filesystem__read_text_file", { path: big })] }),
        ScriptedModel.text("done")
      ]
      const events = yield* runTurn("go").pipe(
        Effect.provide(agentWith([filesystem(dir)], script, { maxToolResultChars: 2_000 }))
      )
      const result = results(events).get("big")!
      expect(result.text.length).toBeLessThan(3_000)
      expect((result.meta as any)["tiller/cut"].characters).toBe(50_000)
      expect((result.meta as any).mcp).toMatchObject({ server: "filesystem", tool: "read_text_file" })
    }), 60_000)

  it.scopedLive(
    "a tool-list change: the next request offers the new tool and its header records it",
    () =>
      Effect.gen(function*() {
        const script = [
          ScriptedModel.response({ toolCalls: [call("add", "mcp__changing__add_tool", {})] }),
          ScriptedModel.response({ toolCalls: [call("late", "mcp__changing__late_tool", {})] }),
          ScriptedModel.text("done")
        ]
        const events = yield* runTurn("go").pipe(Effect.provide(agentWith([changing], script)))
        expect(headers(events)).toEqual([
          { reason: "initial", tools: ["mcp__changing__add_tool"] },
          { reason: "change", tools: ["mcp__changing__add_tool", "mcp__changing__late_tool"] }
        ])
        expect(results(events).get("late")!.text).toBe("late tool ran")
      }),
    60_000
  )

  it.scopedLive(
    "an elicitation in a headless run is declined and recorded in the result's meta",
    () =>
      Effect.gen(function*() {
        const script = [
          ScriptedModel.response({ toolCalls: [call("ask", "mcp__everything__trigger-elicitation-request", {})] }),
          ScriptedModel.text("done")
        ]
        const events = yield* runTurn("go").pipe(Effect.provide(agentWith([everything()], script)))
        const ask = results(events).get("ask")!
        expect(ask.text).toContain("declined")
        const [declined] = (ask.meta as any).mcp.elicitations
        expect(declined).toEqual({
          message: expect.any(String),
          action: "decline",
          note: "declined: no one to ask (headless)"
        })
      }),
    60_000
  )

  it.scopedLive(
    "an accepted elicitation's answers are recorded with it in the result's meta",
    () =>
      Effect.gen(function*() {
        const script = [
          ScriptedModel.response({ toolCalls: [call("ask", "mcp__everything__trigger-elicitation-request", {})] }),
          ScriptedModel.text("done")
        ]
        const asked: Array<string> = []
        const events = yield* Effect.gen(function*() {
          const mcp = yield* Mcp
          yield* mcp.handleElicitations((elicitation) =>
            Effect.sync(() => {
              asked.push(elicitation.server)
              return { action: "accept", content: { name: "Ada Lovelace", integer: 36 } } as const
            })
          )
          return yield* runTurn("go")
        }).pipe(Effect.provide(agentWith([everything()], script)))
        expect(asked).toEqual(["everything"])
        const ask = results(events).get("ask")!
        expect(ask.text).toContain("Ada Lovelace")
        expect((ask.meta as any).mcp.elicitations).toEqual([
          { message: expect.any(String), action: "accept", content: { name: "Ada Lovelace", integer: 36 } }
        ])
      }),
    60_000
  )
})

describe("McpServers: context and prompts", () => {
  it.scopedLive(
    "a resource enters through inject() as one user message with an mcp-resource source; a prompt becomes a message",
    () =>
      Effect.gen(function*() {
        const script = [ScriptedModel.text("noted"), ScriptedModel.text("answered")]
        const { history, prompt } = yield* Effect.gen(function*() {
          const mcp = yield* Mcp
          const driver = yield* Driver
          const resource = yield* mcp.resource("everything", "demo://resource/static/document/features.md")
          yield* driver.inject(resource)
          yield* runTurn("what does it say?")
          const prompt = yield* mcp.prompt("mcp__everything__args-prompt", "Paris")
          yield* driver.followup(prompt)
          yield* driver.whenIdle
          return { history: yield* (yield* SessionLog).messages, prompt }
        }).pipe(Effect.provide(agentWith([everything()], script)))
        const context = history[0]!
        expect(context.role).toBe("user")
        expect(context.source).toEqual({
          kind: "mcp-resource",
          server: "everything",
          uri: "demo://resource/static/document/features.md"
        })
        expect(JSON.stringify(context.content)).toContain("Everything Server - Features")
        expect(history[1]!.id).toBe("what does it say?")
        expect(prompt.source).toEqual({
          kind: "mcp-prompt",
          server: "everything",
          prompt: "args-prompt",
          arguments: { city: "Paris" }
        })
        expect(prompt.content).toEqual([{ type: "text", text: "What's weather in Paris?" }])
        expect(history.map((m) => m.id)).toContain(prompt.id)
      }),
    60_000
  )
})

describe("McpServers: tool search", () => {
  it.scopedLive(
    "definitions over the window's share are offered through the search tool, which loads them on demand",
    () =>
      Effect.gen(function*() {
        const script = [
          ScriptedModel.response({ toolCalls: [call("find", "mcp__search_tools", { query: "sum of two numbers" })] }),
          ScriptedModel.response({ toolCalls: [call("sum", "mcp__everything__get-sum", { a: 20, b: 22 })] }),
          ScriptedModel.text("done")
        ]
        const events = yield* runTurn("go").pipe(
          Effect.provide(agentWith([everything()], script, { toolSearchShare: 0.1, contextWindow: 8_000 }))
        )
        const offered = headers(events)
        expect(offered[0]).toEqual({ reason: "initial", tools: ["mcp__search_tools"] })
        expect(offered[1]!.reason).toBe("change")
        expect(offered[1]!.tools).toContain("mcp__everything__get-sum")
        expect(results(events).get("find")!.text).toContain("mcp__everything__get-sum")
        expect(results(events).get("sum")!.text).toBe("The sum of 20 and 22 is 42.")
      }),
    60_000
  )
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
