// An MCP server (on the official SDK, over stdio) whose tool list changes: calling `add_tool`
// registers `late_tool`, and the SDK sends notifications/tools/list_changed.
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js"
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js"

const server = new McpServer({ name: "changing", version: "1.0.0" }, { capabilities: { tools: { listChanged: true } } })
server.registerTool("add_tool", { description: "Adds the tool late_tool" }, async () => {
  server.registerTool("late_tool", { description: "A tool that exists only after add_tool" }, async () => ({
    content: [{ type: "text", text: "late tool ran" }]
  }))
  return { content: [{ type: "text", text: "added late_tool" }] }
})
await server.connect(new StdioServerTransport())
