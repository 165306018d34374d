import { describe, expect, it } from "@effect/vitest"
import { Either } from "effect"
import { MAX_TOOL_NAME, toolName, uniqueToolNames } from "../../../src/internal/mcp/Names.js"
import { permitted } from "../../../src/internal/mcp/Patterns.js"
import { parsePromptArguments } from "../../../src/internal/mcp/PromptArguments.js"
import { search } from "../../../src/internal/mcp/ToolSearch.js"

describe("MCP tool names", () => {
  it("are mcp__<server>__<tool>, sanitised for the providers", () => {
    expect(toolName("everything", "get-sum")).toBe("mcp__everything__get-sum")
    expect(toolName("my.server", "read file/now")).toBe("mcp__my_server__read_file_now")
  })

  it("are cut to 64 characters with a hash of the original names, and collisions are made unique", () => {
    const long = toolName("a-server-with-a-rather-long-name", "a_tool_whose_name_goes_on_and_on_and_on")
    const other = toolName("a-server-with-a-rather-long-name", "a_tool_whose_name_goes_on_and_on_and_off")
    expect(long.length).toBe(MAX_TOOL_NAME)
    expect(other.length).toBe(MAX_TOOL_NAME)
    expect(long).not.toBe(other)
    expect(uniqueToolNames([{ server: "s", tool: "a.b" }, { server: "s", tool: "a_b" }, { server: "s", tool: "a/b" }]))
      .toEqual(["mcp__s__a_b", "mcp__s__a_b_2", "mcp__s__a_b_3"])
    const crowded = uniqueToolNames([{ server: "x".repeat(40), tool: "y".repeat(40) }], new Set([long]))
    expect(crowded[0]!.length).toBeLessThanOrEqual(MAX_TOOL_NAME)
  })
})

describe("allow and deny lists", () => {
  it("deny wins; an allow list admits only what it names; * is a wildcard", () => {
    expect(permitted("get-env", { deny: ["get-*"] })).toBe(false)
    expect(permitted("echo", { allow: ["echo", "get-*"], deny: ["get-env"] })).toBe(true)
    expect(permitted("get-env", { allow: ["get-*"], deny: ["get-env"] })).toBe(false)
    expect(permitted("toggle", { allow: ["echo"] })).toBe(false)
    expect(permitted("a.b", { allow: ["a.b"] })).toBe(true)
    expect(permitted("axb", { allow: ["a.b"] })).toBe(false)
  })
})

describe("prompt arguments", () => {
  const declared = [{ name: "city", required: true }, { name: "state", required: false }]
  it("name=value, words in order (the last taking the rest), quotes", () => {
    expect(parsePromptArguments("Paris", declared)).toEqual(Either.right({ city: "Paris" }))
    expect(parsePromptArguments("state=TX Austin", declared)).toEqual(Either.right({ state: "TX", city: "Austin" }))
    expect(parsePromptArguments(`"New York" New York State`, declared)).toEqual(
      Either.right({ city: "New York", state: "New York State" })
    )
    expect(parsePromptArguments("", declared)).toEqual(Either.left("missing argument city"))
    expect(parsePromptArguments("extra", [])).toEqual(Either.left("unexpected words: extra"))
  })
})

describe("tool search", () => {
  const tools = [
    { name: "mcp__everything__get-sum", description: "Returns the sum of two numbers" },
    { name: "mcp__everything__echo", description: "Echoes back the input" },
    { name: "mcp__memory__read_graph", description: "Read the entire knowledge graph" }
  ]
  it("scores words in names above descriptions; select: names tools exactly", () => {
    expect(search(tools, "sum of numbers").map((t) => t.name)).toEqual(["mcp__everything__get-sum"])
    expect(search(tools, "graph").map((t) => t.name)).toEqual(["mcp__memory__read_graph"])
    expect(search(tools, "select:mcp__everything__echo").map((t) => t.name)).toEqual(["mcp__everything__echo"])
    expect(search(tools, "nothing like it")).toEqual([])
  })
})
