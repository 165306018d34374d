import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer, Schema } from "effect"
import { SessionId } from "../../src/domain/Ids.js"
import { userMessage } from "../../src/domain/Message.js"
import type { AssistantMessage } from "../../src/domain/Values.js"
import { Agent } from "../../src/layers/Agent.js"
import { CodingTools } from "../../src/layers/CodingTools.js"
import * as DemoModel from "../../src/layers/DemoModel.js"
import { Driver } from "../../src/services/Driver.js"
import { SessionLog } from "../../src/services/SessionLog.js"
import { SessionStore } from "../../src/services/SessionStore.js"
import { Tool, Tools } from "../../src/services/Tools.js"

const shout = Tool.make("shout", {
  description: "upper-cases its text",
  parameters: Schema.Struct({ text: Schema.String }),
  execute: ({ text }) => Effect.succeed(text.toUpperCase())
})

const layer = Agent.layer({ sessionId: SessionId.make("demo"), model: { provider: "demo", model: "demo" } }).pipe(
  Layer.provide(Layer.mergeAll(SessionStore.layerMemory, DemoModel.layer, Tools.layer({ tools: [shout] })))
)

const assistantTexts = Effect.map(
  Effect.flatMap(SessionLog, (log) => log.messages),
  (messages) =>
    messages.filter((m): m is AssistantMessage => m.role === "assistant").map((m) =>
      m.content.map((b) => (b.type === "text" ? b.text : b.type === "tool-call" ? `[${b.name} ${b.arguments}]` : ""))
        .join("")
    )
)

describe("DemoModel", () => {
  it.scoped("describes what entered the step, with sources, in order", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.inject(
        userMessage({ id: "c", text: "repo uses pnpm", source: { kind: "plugin", plugin: "facts" } })
      )
      yield* driver.followup(userMessage({ id: "q", text: "how do I install?" }))
      yield* driver.whenIdle
      expect(yield* assistantTexts).toEqual([
        "Step 1 of turn 1 brought 2 messages:\n1. [plugin:facts] repo uses pnpm\n2. [user] how do I install?"
      ])
    }).pipe(Effect.provide(layer)))

  it.scoped("calls a tool when asked in a recognisable form, then describes the result", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(userMessage({ id: "q", text: "call shout hello" }))
      yield* driver.whenIdle
      expect(yield* assistantTexts).toEqual([
        "Calling shout.[shout {\"text\":\"hello\"}]",
        "Step 2 of turn 1 brought 1 message:\n1. [tool] HELLO"
      ])
    }).pipe(Effect.provide(layer)))
})

describe("DemoModel with the coding tools", () => {
  it.scoped("calls each of them: /TOOL ARG fills the first parameter, call TOOL {JSON} gives all", () =>
    Effect.gen(function*() {
      const tools = yield* Effect.flatMap(Tools, (t) => t.list)
      const callOf = (text: string) => {
        const chunks = DemoModel.respond(
          {
            sessionId: SessionId.make("d"),
            turn: 1,
            step: 1,
            messages: [userMessage({ id: "q", text })],
            tools
          } as unknown as Parameters<typeof DemoModel.respond>[0]
        )
        const start = chunks.find((c) => c.type === "block-start" && c.block === "tool-call") as {
          readonly name: string
        } | undefined
        const delta = chunks.find((c) => c.type === "tool-call-delta") as { readonly arguments: string } | undefined
        return start === undefined ? undefined : `${start.name} ${delta?.arguments}`
      }
      expect(callOf("/Read notes.txt")).toBe("Read {\"file_path\":\"notes.txt\"}")
      expect(callOf("/Glob **/*.ts")).toBe("Glob {\"pattern\":\"**/*.ts\"}")
      expect(callOf("/Grep TODO")).toBe("Grep {\"pattern\":\"TODO\"}")
      expect(callOf("/Bash ls -la")).toBe("Bash {\"command\":\"ls -la\"}")
      expect(callOf("call Write {\"file_path\": \"a.txt\", \"content\": \"hi\"}")).toBe(
        "Write {\"file_path\": \"a.txt\", \"content\": \"hi\"}"
      )
      expect(callOf("call Edit {\"file_path\": \"a.txt\", \"old_string\": \"hi\", \"new_string\": \"ho\"}")).toBe(
        "Edit {\"file_path\": \"a.txt\", \"old_string\": \"hi\", \"new_string\": \"ho\"}"
      )
    }).pipe(Effect.provide(CodingTools.layer({ cwd: process.cwd() }))))
})
