/**
 * Acceptance audit of SPEC 4.6 details: which outcomes ToolPost sees, meta set by ToolPost, invalid
 * tool output, concluding tools next to context-producing ones, written against the package root only.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Schema } from "effect"
import { Driver, Hooks, ScriptedModel, Tool, ToolPreDecision } from "../../src/index.js"
import { closeOut, dataOfType, plugin, requests, scenario, shape, user } from "./AuditHarness.js"

const empty = Schema.Struct({})
const ok = Tool.make("ok", { description: "", parameters: empty, execute: () => Effect.succeed("ok") })
const typed = Tool.make("typed", { description: "", parameters: Schema.Struct({ n: Schema.Number }), execute: () => Effect.succeed("x") })

describe("4.6 ToolPost", () => {
  it.scoped("4.6: ToolPost runs for body outcomes and DENIED only, sees the normalized output, and may set meta", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const hooks = yield* Hooks
      const seen: Array<string> = []
      yield* hooks.onToolPre((input, next) =>
        input.callId === "d" ? Effect.succeed(ToolPreDecision.deny("no")) : input.callId === "f" ? Effect.die("pre died") : next())
      yield* hooks.onToolPost((input, next) =>
        Effect.map(next(), (output) => {
          seen.push(`${input.callId}:${output.isError}:${JSON.stringify(output.content)}`)
          return { ...output, meta: { post: input.callId } }
        }))
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect(seen).toEqual([
        "a:false:[{\"type\":\"text\",\"text\":\"ok\"}]",
        "d:true:[{\"type\":\"text\",\"text\":\"Error: tool call denied: no\"}]"
      ])
      const results = yield* dataOfType("tool/result")
      expect(results.map((d) => [d.message.content[0].toolCallId, d.error?.code, d.meta])).toEqual([
        ["a", undefined, { post: "a" }],
        ["d", "DENIED", { post: "d" }],
        ["u", "UNKNOWN_TOOL", undefined],
        ["i", "INVALID_ARGUMENTS", undefined],
        ["f", "PRE_HOOK_FAILED", undefined]
      ])
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario(
      [
        ScriptedModel.response({
          toolCalls: [
            { id: "a", name: "ok", arguments: {} },
            { id: "d", name: "ok", arguments: {} },
            { id: "u", name: "nope", arguments: {} },
            { id: "i", name: "typed", arguments: { n: "x" } },
            { id: "f", name: "ok", arguments: {} }
          ]
        }),
        ScriptedModel.text("done")
      ],
      { tools: [ok, typed] }
    ))))

  const badMeta = Tool.make("badmeta", { description: "", parameters: empty, execute: () => Effect.succeed({ content: "x", meta: { when: new Date(0) } as never }) })
  const badContent = Tool.make("badcontent", { description: "", parameters: empty, execute: () => Effect.succeed({ content: [{ type: "image", mediaType: "image/png" }] as never }) })
  it.scoped("4.6: invalid meta or content turns the result into INVALID_TOOL_OUTPUT", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect((yield* dataOfType("tool/result")).map((d) => d.error?.code)).toEqual(["INVALID_TOOL_OUTPUT", "INVALID_TOOL_OUTPUT"])
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario(
      [
        ScriptedModel.response({ toolCalls: [{ id: "m", name: "badmeta", arguments: {} }, { id: "c", name: "badcontent", arguments: {} }] }),
        ScriptedModel.text("done")
      ],
      { tools: [badMeta, badContent] }
    ))))

  const fin = Tool.make("fin", { description: "", parameters: empty, execute: () => Effect.succeed({ content: "ok", concludesTurn: true }) })
  const finError = Tool.make("finerr", { description: "", parameters: empty, execute: () => Effect.succeed({ content: "bad", concludesTurn: true, isError: true }) })
  const ctx = Tool.make("ctx", { description: "", parameters: empty, execute: () => Effect.succeed({ content: "ok", additionalContexts: [plugin("K")] }) })
  it.scoped("4.6: a concluding result still lets the other calls commit, and the turn takes another step when next-step is non-empty", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      const s = yield* shape
      expect(s.filter((x) => x.startsWith("TR") || x.startsWith("SS") || x.startsWith("TE"))).toEqual(["SS(1,1)", "TR(c1)", "TR(c2)", "SS(1,2)", "TE(1,completed)"])
      expect(yield* requests).toHaveLength(2)
    }).pipe(Effect.provide(scenario(
      [ScriptedModel.response({ toolCalls: [{ id: "c1", name: "fin", arguments: {} }, { id: "c2", name: "ctx", arguments: {} }] }), ScriptedModel.text("done")],
      { tools: [fin, ctx] }
    ))))

  it.scoped("4.6: concludesTurn on an error result does not conclude the turn", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect(yield* requests).toHaveLength(2)
      expect((yield* shape).slice(-2)).toEqual(["SE(1,2)", "TE(1,completed)"])
    }).pipe(Effect.provide(scenario(
      [ScriptedModel.response({ toolCalls: [{ id: "c1", name: "finerr", arguments: {} }] }), ScriptedModel.text("done")],
      { tools: [finError] }
    ))))
})
