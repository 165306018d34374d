import { describe, expect, it } from "@effect/vitest"
import { toolOutput } from "../../../src/internal/mcp/Content.js"

describe("MCP tool results as tool outputs", () => {
  const extra = { server: "s", tool: "t" }
  it("text and images as blocks, other content described, isError as an error output", () => {
    expect(toolOutput({
      content: [
        { type: "text", text: "hi" },
        { type: "image", data: "AAAA", mimeType: "image/png" },
        { type: "resource_link", uri: "demo://x", name: "x" },
        { type: "resource", resource: { uri: "demo://y", text: "inline" } }
      ],
      isError: true
    }, extra)).toEqual({
      content: [
        { type: "text", text: "hi" },
        { type: "image", mediaType: "image/png", data: "AAAA" },
        { type: "text", text: "[resource link: x demo://x]" },
        { type: "text", text: "[resource demo://y]" },
        { type: "text", text: "inline" }
      ],
      isError: true,
      meta: { mcp: { server: "s", tool: "t" } }
    })
  })

  it("structuredContent kept in meta, rendered as text unless the text already says it", () => {
    const structured = { temperature: 21, sky: "clear" }
    const rendered = toolOutput({ content: [], structuredContent: structured }, extra)
    expect(rendered.meta).toEqual({ mcp: { server: "s", tool: "t", structuredContent: structured } })
    expect(rendered.content).toEqual([{
      type: "text",
      text: `structured content: ${JSON.stringify(structured, null, 2)}`
    }])
    const said = toolOutput(
      { content: [{ type: "text", text: "21 degrees, clear" }], structuredContent: structured },
      extra
    )
    expect(said.content).toEqual([{ type: "text", text: "21 degrees, clear" }])
  })
})
