/**
 * The reference MCP servers the tests start (devDependencies): `server-everything`,
 * `server-filesystem` and `server-memory` over stdio, `server-everything` over Streamable HTTP.
 */
import { Effect } from "effect"
import type { Scope } from "effect"
import { spawn } from "node:child_process"
import * as fs from "node:fs"
import { createRequire } from "node:module"
import * as net from "node:net"
import * as os from "node:os"
import * as path from "node:path"
import type { McpServerConfig } from "../../../src/internal/mcp/Config.js"

const require = createRequire(import.meta.url)

/** The entry script of a reference server package. */
export const serverScript = (name: "everything" | "filesystem" | "memory"): string =>
  path.join(path.dirname(require.resolve(`@modelcontextprotocol/server-${name}/package.json`)), "dist", "index.js")

const base = { startupTimeoutMs: 20_000, callTimeoutMs: 20_000, denyTools: [] as ReadonlyArray<string> }

/** server-everything over stdio. */
export const everything = (overrides: Partial<McpServerConfig> = {}): McpServerConfig => ({
  name: "everything",
  transport: { _tag: "stdio", command: process.execPath, args: [serverScript("everything"), "stdio"] },
  ...base,
  ...overrides
})

/** server-filesystem over stdio, confined to `root`. */
export const filesystem = (root: string, overrides: Partial<McpServerConfig> = {}): McpServerConfig => ({
  name: "filesystem",
  transport: { _tag: "stdio", command: process.execPath, args: [serverScript("filesystem"), root] },
  ...base,
  ...overrides
})

/** server-memory over stdio, its graph in `file`. */
export const memory = (file: string, overrides: Partial<McpServerConfig> = {}): McpServerConfig => ({
  name: "memory",
  transport: {
    _tag: "stdio",
    command: process.execPath,
    args: [serverScript("memory")],
    env: { MEMORY_FILE_PATH: file }
  },
  ...base,
  ...overrides
})

/** A temporary directory removed with the scope. */
export const tempDir = Effect.acquireRelease(
  Effect.sync(() => fs.mkdtempSync(path.join(os.tmpdir(), "tiller-mcp-"))),
  (dir) => Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true }))
)

const freePort = Effect.async<number>((resume) => {
  const server = net.createServer()
  server.listen(0, "127.0.0.1", () => {
    const port = (server.address() as net.AddressInfo).port
    server.close(() => resume(Effect.succeed(port)))
  })
})

/**
 * server-everything over Streamable HTTP on 127.0.0.1 (a free port), stopped with the scope; the
 * URL of its endpoint.
 */
export const everythingHttp: Effect.Effect<string, never, Scope.Scope> = Effect.gen(function*() {
  const port = yield* freePort
  const child = yield* Effect.acquireRelease(
    Effect.sync(() =>
      spawn(process.execPath, [serverScript("everything"), "streamableHttp"], {
        env: { ...process.env, PORT: String(port) },
        stdio: ["ignore", "pipe", "pipe"]
      })
    ),
    (child) => Effect.sync(() => child.kill("SIGKILL"))
  )
  yield* Effect.async<void>((resume) => {
    const onData = (chunk: unknown) => {
      if (String(chunk).includes("listening")) resume(Effect.void)
    }
    child.stdout.on("data", onData)
    child.stderr.on("data", onData)
  }).pipe(Effect.timeout("20 seconds"), Effect.orDie)
  return `http://127.0.0.1:${port}/mcp`
})
