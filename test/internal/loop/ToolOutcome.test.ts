import { describe, expect, it } from "@effect/vitest"
import { Effect, Either, Schema } from "effect"
import { MessageId } from "../../../src/domain/Ids.js"
import { userMessage } from "../../../src/domain/Message.js"
import { ToolResultMessage } from "../../../src/domain/Values.js"
import type { ToolOutcome as Outcome } from "../../../src/internal/loop/ToolOutcome.js"
import {
  decodeArguments,
  failureMessage,
  mapOutcome,
  normalizeToolOutput,
  outcomeError,
  outcomeOutput,
  runsToolPost,
  TOOL_FAILURE_JSON_CHARS,
  ToolOutcome,
  toolOutputProblem,
  toolResultMessage
} from "../../../src/internal/loop/ToolOutcome.js"
import { Tool } from "../../../src/services/Tools.js"

class QuotaExceeded
  extends Schema.TaggedError<QuotaExceeded>()("QuotaExceeded", { code: Schema.String, limit: Schema.Number })
{
  override get message(): string {
    return `quota of ${this.limit} exceeded`
  }
}

const call = { callId: "c1", name: "echo" }

const row = (outcome: Outcome) => {
  const mapped = mapOutcome(call, outcome)
  return {
    text: mapped.block.content.map((b) => (b.type === "text" ? b.text : `<${b.type}>`)).join(""),
    isError: mapped.block.isError,
    error: mapped.error
  }
}

describe("result mapping (SPEC 4.6)", () => {
  it("body succeeded: the returned content, isError as returned, no error, meta kept", () => {
    const output = normalizeToolOutput({
      content: [{ type: "text", text: "a" }, { type: "image", mediaType: "image/png", data: "AA==" }],
      meta: { n: 1 }
    })
    const mapped = mapOutcome(call, ToolOutcome.Succeeded({ output }))
    expect(mapped).toEqual({
      block: { type: "tool-result", toolCallId: "c1", isError: false, content: output.content },
      meta: { n: 1 }
    })
    expect("error" in mapped).toBe(false)
    const flagged = mapOutcome(
      call,
      ToolOutcome.Succeeded({ output: normalizeToolOutput({ content: "bad", isError: true }) })
    )
    expect(flagged.block.isError).toBe(true)
    expect(flagged.error).toBeUndefined()
    expect("meta" in flagged).toBe(false)
  })

  it("body failed with a typed error: its message, _tag and code", () => {
    expect(row(ToolOutcome.Failed({ error: new QuotaExceeded({ code: "QUOTA", limit: 3 }) }))).toEqual({
      text: "Error: quota of 3 exceeded",
      isError: true,
      error: { name: "QuotaExceeded", code: "QUOTA" }
    })
  })

  it("body failed with an untagged value: name Error, code TOOL_ERROR, its string message or String(e)", () => {
    expect(row(ToolOutcome.Failed({ error: new TypeError("bad input") }))).toEqual({
      text: "Error: bad input",
      isError: true,
      error: { name: "Error", code: "TOOL_ERROR" }
    })
    expect(row(ToolOutcome.Failed({ error: "nope" }))).toEqual({
      text: "Error: nope",
      isError: true,
      error: { name: "Error", code: "TOOL_ERROR" }
    })
    expect(row(ToolOutcome.Failed({ error: { _tag: "Custom", code: "C1", message: "custom" } })).error).toEqual({
      name: "Custom",
      code: "C1"
    })
  })

  it("a plain object without a string message reads as its JSON, never [object Object]", () => {
    expect(row(ToolOutcome.Failed({ error: { code: 42, reason: "x" } }))).toEqual({
      text: `Error: {"code":42,"reason":"x"}`,
      isError: true,
      error: { name: "Error", code: "TOOL_ERROR" }
    })
    expect(row(ToolOutcome.Died({ defect: { message: 3 } })).text).toBe(`Error: {"message":3}`)
    expect(row(ToolOutcome.PreHookFailed({ error: Object.create(null) })).text).toBe("Error: {}")
    // A long value is cut; one JSON cannot encode (a cycle, a throwing getter) falls back to String(e).
    const long = row(ToolOutcome.Failed({ error: { text: "x".repeat(2000) } })).text
    expect(long).toBe(`Error: {"text":"${"x".repeat(TOOL_FAILURE_JSON_CHARS - 9)}…`)
    const cyclic: Record<string, unknown> = { a: 1 }
    cyclic.self = cyclic
    expect(row(ToolOutcome.Failed({ error: cyclic })).text).toBe("Error: [object Object]")
    const hostile = {
      get reason(): string {
        throw new Error("getter")
      }
    }
    expect(row(ToolOutcome.Failed({ error: hostile })).text).toBe("Error: [object Object]")
    // A value with its own toString, and an array, read as String(e) does.
    expect(row(ToolOutcome.Failed({ error: { toString: () => "custom text" } })).text).toBe("Error: custom text")
    expect(row(ToolOutcome.Failed({ error: 7 })).text).toBe("Error: 7")
  })

  it("body died", () => {
    expect(row(ToolOutcome.Died({ defect: new Error("kaboom") }))).toEqual({
      text: "Error: kaboom",
      isError: true,
      error: { name: "ToolDefect", code: "TOOL_DEFECT" }
    })
  })

  it("unknown tool", () => {
    expect(row(ToolOutcome.UnknownTool())).toEqual({
      text: "Error: unknown tool echo",
      isError: true,
      error: { name: "UnknownToolError", code: "UNKNOWN_TOOL" }
    })
  })

  it("arguments invalid", () => {
    expect(row(ToolOutcome.InvalidArguments({ detail: "text is missing" }))).toEqual({
      text: "Error: invalid arguments for echo: text is missing",
      isError: true,
      error: { name: "ToolArgumentsError", code: "INVALID_ARGUMENTS" }
    })
  })

  it("denied", () => {
    expect(row(ToolOutcome.Denied({ reason: "blocked by policy" }))).toEqual({
      text: "Error: tool call denied: blocked by policy",
      isError: true,
      error: { name: "ToolDeniedError", code: "DENIED" }
    })
  })

  it("pre hook failed", () => {
    expect(row(ToolOutcome.PreHookFailed({ error: new Error("pre exploded") }))).toEqual({
      text: "Error: pre exploded",
      isError: true,
      error: { name: "ToolPreHookError", code: "PRE_HOOK_FAILED" }
    })
  })

  it("invalid output", () => {
    expect(row(ToolOutcome.InvalidOutput({ detail: "meta: undefined is not JSON" }))).toEqual({
      text: "Error: tool produced invalid output: meta: undefined is not JSON",
      isError: true,
      error: { name: "ToolOutputError", code: "INVALID_TOOL_OUTPUT" }
    })
  })

  it("aborted while the body ran, and before it ran", () => {
    expect(row(ToolOutcome.Aborted())).toEqual({
      text: "Error: tool call aborted",
      isError: true,
      error: { name: "AbortError", code: "ABORTED" }
    })
    expect(row(ToolOutcome.AbortedBeforeDispatch())).toEqual({
      text: "Error: tool call aborted before dispatch",
      isError: true,
      error: { name: "AbortError", code: "ABORTED_BEFORE_DISPATCH" }
    })
  })

  it("internal failure", () => {
    expect(row(ToolOutcome.InternalFailure())).toEqual({
      text: "Error: tool call failed internally",
      isError: true,
      error: { name: "ToolSchedulerError", code: "TOOL_INTERNAL_ERROR" }
    })
  })

  it("error outputs carry no contexts and never conclude; ToolPost runs only for body outcomes and denials", () => {
    const output = outcomeOutput(call, ToolOutcome.Denied({ reason: "r" }))
    expect(output).toEqual({
      content: [{ type: "text", text: "Error: tool call denied: r" }],
      isError: true,
      additionalContexts: [],
      concludesTurn: false
    })
    const outcomes: ReadonlyArray<Outcome> = [
      ToolOutcome.Succeeded({ output }),
      ToolOutcome.Failed({ error: "e" }),
      ToolOutcome.Died({ defect: "d" }),
      ToolOutcome.UnknownTool(),
      ToolOutcome.InvalidArguments({ detail: "" }),
      ToolOutcome.Denied({ reason: "" }),
      ToolOutcome.PreHookFailed({ error: "p" }),
      ToolOutcome.InvalidOutput({ detail: "" }),
      ToolOutcome.Aborted(),
      ToolOutcome.AbortedBeforeDispatch(),
      ToolOutcome.InternalFailure()
    ]
    expect(outcomes.filter(runsToolPost).map((o) => o._tag)).toEqual([
      "Succeeded",
      "Failed",
      "Died",
      "Denied",
      "Aborted"
    ])
    expect(outcomes.map((o) => outcomeError(o)?.code ?? "-")).toEqual([
      "-",
      "TOOL_ERROR",
      "TOOL_DEFECT",
      "UNKNOWN_TOOL",
      "INVALID_ARGUMENTS",
      "DENIED",
      "PRE_HOOK_FAILED",
      "INVALID_TOOL_OUTPUT",
      "ABORTED",
      "ABORTED_BEFORE_DISPATCH",
      "TOOL_INTERNAL_ERROR"
    ])
  })

  it("toolResultMessage builds a valid ToolResultMessage for the call", () => {
    const message = toolResultMessage(MessageId.make("r1"), "c1", normalizeToolOutput("echo: ping"))
    expect(message).toEqual({
      id: "r1",
      role: "user",
      content: [{
        type: "tool-result",
        toolCallId: "c1",
        isError: false,
        content: [{ type: "text", text: "echo: ping" }]
      }],
      source: { kind: "tool", callId: "c1" }
    })
    expect(Either.isRight(Schema.decodeUnknownEither(ToolResultMessage)(message))).toBe(true)
  })
})

describe("failureMessage", () => {
  it("uses a string message, otherwise String(e), and never throws", () => {
    expect(failureMessage(new Error("m"))).toBe("m")
    expect(failureMessage({ message: 3 })).toBe("[object Object]")
    expect(failureMessage(42)).toBe("42")
    expect(failureMessage(undefined)).toBe("undefined")
    expect(failureMessage(Object.create(null))).toBe("[object Object]")
    const hostile = {
      get message(): string {
        throw new Error("getter")
      }
    }
    expect(failureMessage(hostile)).toBe("[object Object]")
  })
})

describe("normalizeToolOutput", () => {
  it("a string becomes one text block with every default", () => {
    expect(normalizeToolOutput("hello")).toEqual({
      content: [{ type: "text", text: "hello" }],
      isError: false,
      additionalContexts: [],
      concludesTurn: false
    })
    expect("meta" in normalizeToolOutput("hello")).toBe(false)
  })

  it("string content becomes one text block; given fields are kept", () => {
    const context = userMessage({ id: "ctx-1", text: "note", source: { kind: "tool-context" } })
    expect(
      normalizeToolOutput({
        content: "ok",
        isError: true,
        concludesTurn: true,
        additionalContexts: [context],
        meta: { k: [1] }
      })
    ).toEqual({
      content: [{ type: "text", text: "ok" }],
      isError: true,
      additionalContexts: [context],
      concludesTurn: true,
      meta: { k: [1] }
    })
  })

  it("block content is kept as given", () => {
    const content = [{ type: "image" as const, mediaType: "image/png", data: "AA==" }]
    expect(normalizeToolOutput({ content }).content).toEqual(content)
  })
})

describe("toolOutputProblem", () => {
  it("accepts strings and well-formed outputs", () => {
    expect(toolOutputProblem("s")).toBeUndefined()
    expect(toolOutputProblem({ content: "s" })).toBeUndefined()
    expect(toolOutputProblem(normalizeToolOutput({ content: [{ type: "text", text: "t" }], meta: null })))
      .toBeUndefined()
  })

  it("names what is wrong", () => {
    expect(toolOutputProblem(42)).toMatch(/string or an object/)
    expect(toolOutputProblem({ content: [{ type: "video", url: "x" }] })).toMatch(/^content:/)
    expect(toolOutputProblem({ content: [{ type: "text", text: "t", extra: 1 }] })).toMatch(/^content:/)
    expect(toolOutputProblem({ content: "s", isError: "yes" })).toBe("isError must be a boolean")
    expect(toolOutputProblem({ content: "s", concludesTurn: 1 })).toBe("concludesTurn must be a boolean")
    expect(toolOutputProblem({ content: "s", additionalContexts: "ctx" })).toMatch(/additionalContexts/)
    expect(toolOutputProblem({ content: "s", meta: { n: Number.NaN } })).toBe("meta.n: NaN is not a finite number")
  })

  it("a content block whose type is an object with its own toString key is refused, not thrown on", () => {
    expect(toolOutputProblem({ content: [{ type: { toString: null }, text: "t" }] })).toMatch(
      /^content: .*not decodable/
    )
  })
})

describe("decodeArguments", () => {
  const echo = Tool.make("echo", {
    description: "echo",
    parameters: Schema.Struct({ text: Schema.String, times: Schema.optional(Schema.Number) }),
    execute: ({ text }) => Effect.succeed(text)
  })
  const noArgs = Tool.make("now", {
    description: "now",
    parameters: Schema.Struct({}),
    execute: () => Effect.succeed("")
  })

  it("decodes JSON text with the parameter Schema", () => {
    expect(decodeArguments(echo, `{"text":"ping"}`)).toEqual(Either.right({ text: "ping" }))
    expect(decodeArguments(echo, `{"text":"ping","times":2}`)).toEqual(Either.right({ text: "ping", times: 2 }))
  })

  it("the empty string means {}", () => {
    expect(decodeArguments(noArgs, "")).toEqual(Either.right({}))
    const missing = decodeArguments(echo, "")
    expect(Either.isLeft(missing) && missing.left).toMatch(/text/)
  })

  it("invalid JSON gives a readable detail", () => {
    const result = decodeArguments(echo, `{"text":`)
    expect(Either.isLeft(result) && result.left).toMatch(/^not valid JSON \(.+\)$/)
    expect(Either.isLeft(decodeArguments(noArgs, " "))).toBe(true)
  })

  it("a Schema mismatch names the offending fields", () => {
    const result = decodeArguments(echo, `{"text":1,"times":"x"}`)
    expect(Either.isLeft(result)).toBe(true)
    const detail = Either.isLeft(result) ? result.left : ""
    expect(detail).toMatch(/\["text"\]/)
    expect(detail).toMatch(/\["times"\]/)
    expect(Either.isLeft(decodeArguments(echo, "[]"))).toBe(true)
  })

  it("a tag holding an object with its own toString key is refused, not thrown on", () => {
    const shape = Tool.make("shape", {
      description: "shape",
      parameters: Schema.Union(
        Schema.Struct({ kind: Schema.Literal("circle"), r: Schema.Number }),
        Schema.Struct({ kind: Schema.Literal("square"), side: Schema.Number })
      ),
      execute: () => Effect.succeed("")
    })
    expect(decodeArguments(shape, `{"kind":"circle","r":1}`)).toEqual(Either.right({ kind: "circle", r: 1 }))
    for (const raw of [`{"kind":{"toString":null},"r":1}`, `{"kind":[{"toString":1}]}`]) {
      const result = decodeArguments(shape, raw)
      expect(Either.isLeft(result) && result.left).toMatch(/not decodable/)
    }
  })
})
