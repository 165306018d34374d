import { describe, expect, it } from "@effect/vitest"
import { Either } from "effect"
import { DEFAULT_CALL_TIMEOUT_MS, expand, parseFile, resolve } from "../../../src/internal/mcp/Config.js"

const parsed = (value: unknown) => Either.getOrThrow(parseFile(JSON.stringify(value)))

describe("MCP configuration", () => {
  it("expands ${VAR} and ${VAR:-default}, and names an unset variable", () => {
    expect(expand("${A}/x ${B:-b}", { A: "a" })).toEqual(Either.right("a/x b"))
    expect(expand("${MISSING}", {})).toEqual(Either.left("${MISSING} is not set"))
  })

  it("reads stdio and HTTP servers in the shape of .mcp.json, expanding command, args, env and headers", () => {
    const config = resolve([
      parsed({
        mcpServers: {
          local: { command: "${BIN}/server", args: ["--root", "${ROOT}"], env: { TOKEN: "${TOKEN}" } },
          remote: { type: "http", url: "https://example.com/mcp", headers: { Authorization: "Bearer ${TOKEN}" } }
        }
      })
    ], { BIN: "/usr/bin", ROOT: "/work", TOKEN: "t0k" })
    expect(config).toEqual(Either.right({
      servers: [
        {
          name: "local",
          transport: { _tag: "stdio", command: "/usr/bin/server", args: ["--root", "/work"], env: { TOKEN: "t0k" } },
          startupTimeoutMs: 30_000,
          callTimeoutMs: DEFAULT_CALL_TIMEOUT_MS,
          denyTools: []
        },
        {
          name: "remote",
          transport: { _tag: "http", url: "https://example.com/mcp", headers: { Authorization: "Bearer t0k" } },
          startupTimeoutMs: 30_000,
          callTimeoutMs: DEFAULT_CALL_TIMEOUT_MS,
          denyTools: []
        }
      ],
      toolSearchShare: 0.1
    }))
  })

  it("a later file replaces a server; disabled and denied servers are left out; bad entries are refused", () => {
    const config = Either.getOrThrow(resolve([
      parsed({ mcpServers: { a: { command: "one" }, b: { command: "b" }, c: { command: "c", disabled: true } } }),
      parsed({ mcpServers: { a: { command: "two", timeoutMs: 5 } }, denyServers: ["b"], toolSearchShare: 0.3 })
    ], {}))
    expect(
      config.servers.map((s) => [s.name, s.transport._tag === "stdio" ? s.transport.command : "", s.callTimeoutMs])
    )
      .toEqual([["a", "two", 5]])
    expect(config.toolSearchShare).toBe(0.3)
    expect(resolve([parsed({ mcpServers: { x: {} } })], {})).toEqual(
      Either.left("server x: a stdio server needs a command")
    )
    expect(resolve([parsed({ mcpServers: { x: { url: "ftp://h" } } })], {})).toEqual(
      Either.left(`server x: url is not an http(s) URL: "ftp://h"`)
    )
    expect(Either.isLeft(parseFile("{"))).toBe(true)
    expect(Either.isLeft(parseFile(JSON.stringify({ mcpServers: { x: { args: "no" } } })))).toBe(true)
  })

  it("reads oauth of an HTTP server (true, or its client id, scopes and callback port); refuses it on stdio", () => {
    const config = Either.getOrThrow(resolve([
      parsed({
        mcpServers: {
          plain: { url: "https://a.example/mcp", oauth: true },
          tuned: {
            url: "https://b.example/mcp",
            oauth: { clientId: "tiller-cli", scopes: ["read", "write"], callbackPort: 8765 }
          },
          off: { url: "https://c.example/mcp", oauth: false }
        }
      })
    ], {}))
    expect(config.servers.map((s) => s.transport)).toEqual([
      { _tag: "http", url: "https://a.example/mcp", headers: {}, oauth: {} },
      {
        _tag: "http",
        url: "https://b.example/mcp",
        headers: {},
        oauth: { clientId: "tiller-cli", scopes: ["read", "write"], callbackPort: 8765 }
      },
      { _tag: "http", url: "https://c.example/mcp", headers: {} }
    ])
    expect(resolve([parsed({ mcpServers: { x: { command: "x", oauth: true } } })], {})).toEqual(
      Either.left("server x: oauth is for http servers only")
    )
    expect(
      Either.isLeft(parseFile(JSON.stringify({ mcpServers: { x: { url: "https://h", oauth: { callbackPort: 0 } } } })))
    )
      .toBe(true)
  })
})
