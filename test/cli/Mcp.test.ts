import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import { oauthServer } from "../layers/mcp/oauthServer.js"
import { everythingHttp, serverScript } from "../layers/mcp/servers.js"
import { converse, tempDir, tiller } from "./harness.js"

const TIMEOUT = 120_000

/** A project whose .mcp.json holds server-everything and server-memory over stdio (variables expanded). */
const project = Effect.gen(function*() {
  const dir = yield* tempDir
  fs.writeFileSync(
    path.join(dir, ".mcp.json"),
    JSON.stringify({
      mcpServers: {
        everything: { command: "${NODE}", args: [serverScript("everything"), "stdio"] },
        memory: {
          command: "${NODE}",
          args: [serverScript("memory")],
          env: { MEMORY_FILE_PATH: "${MEMORY_DIR}/memory.jsonl" }
        }
      }
    })
  )
  return dir
})

const env = (dir: string) => ({ NODE: process.execPath, MEMORY_DIR: dir })

const logOf = (dir: string, session: string) =>
  Effect.map(
    tiller(dir, ["log", session, "--json"]),
    (out) => out.stdout.trim().split("\n").map((line) => JSON.parse(line) as { type: string; data: any })
  )

describe("tiller mcp", () => {
  it.scopedLive("list, tools and call over the project's .mcp.json", () =>
    Effect.gen(function*() {
      const dir = yield* project
      const list = yield* tiller(dir, ["mcp", "list"], { env: env(dir) })
      expect(list.code).toBe(0)
      expect(list.stdout).toMatch(/everything\s+stdio\s+connected\s+14\s+4/)
      expect(list.stdout).toMatch(/memory\s+stdio\s+connected\s+9\s+0/)
      const tools = yield* tiller(dir, ["mcp", "tools", "memory"], { env: env(dir) })
      expect(tools.stdout).toContain("mcp__memory__read_graph  (read_graph)")
      const call = yield* tiller(dir, ["mcp", "call", "everything", "get-sum", `{"a":40,"b":2}`], { env: env(dir) })
      expect(call).toMatchObject({ code: 0, stdout: "The sum of 40 and 2 is 42.\n" })
      const failed = yield* tiller(dir, ["mcp", "call", "everything", "get-sum", `{"a":"x"}`], { env: env(dir) })
      expect(failed.code).toBe(1)
      // A variable that is not set is named.
      const unset = yield* tiller(dir, ["mcp", "list"], { env: { NODE: process.execPath } })
      expect(unset.code).not.toBe(0)
      expect(unset.stderr).toContain("${MEMORY_DIR} is not set")
    }), TIMEOUT)

  it.scopedLive(
    "run: a resource mention enters as context, the model's tool calls and results are in the log (stdio and HTTP)",
    () =>
      Effect.gen(function*() {
        const dir = yield* project
        const url = yield* everythingHttp
        const extra = path.join(dir, "http.json")
        fs.writeFileSync(extra, JSON.stringify({ mcpServers: { web: { type: "http", url } } }))
        const mention = yield* tiller(dir, [
          "run",
          "--session",
          "s1",
          "Read @everything:demo://resource/static/document/features.md."
        ], { env: env(dir) })
        expect(mention.code, mention.stderr).toBe(0)
        expect(mention.stderr).toContain("entered as context")
        const run = yield* tiller(dir, ["run", "--mcp", extra, "--session", "s1", `/mcp__web__get-sum {"a":2,"b":3}`], {
          env: env(dir)
        })
        expect(run.code, run.stderr).toBe(0)
        const events = yield* logOf(dir, "s1")
        const entered = events.filter((e) => e.type === "user/message").map((e) => e.data.source)
        expect(entered[0]).toEqual({
          kind: "mcp-resource",
          server: "everything",
          uri: "demo://resource/static/document/features.md"
        })
        // Three servers' definitions exceed 10% of the demo model's window: the model loads the tool
        // through the tool search, then calls it.
        const calls = events.filter((e) => e.type === "tool/call")
        expect(calls.map((e) => e.data.name)).toEqual(["mcp__search_tools", "mcp__web__get-sum"])
        const headers = events.filter((e) => e.type === "request/header").map((e) =>
          e.data.header.tools.map((t: any) => t.name)
        )
        expect(headers.at(-2)).not.toContain("mcp__web__get-sum")
        expect(headers.at(-1)).toContain("mcp__web__get-sum")
        const result = events.filter((e) => e.type === "tool/result").at(-1)!
        expect(JSON.stringify(result.data.message.content)).toContain("The sum of 2 and 3 is 5.")
        expect(result.data.meta.mcp).toEqual({ server: "web", tool: "get-sum" })
        // A prompt command: the server's prompt is the turn's prompt.
        const prompt = yield* tiller(dir, ["run", "--session", "s2", "/mcp__everything__args-prompt city=Paris"], {
          env: env(dir)
        })
        expect(prompt.code, prompt.stderr).toBe(0)
        const second = yield* logOf(dir, "s2")
        const message = second.find((e) => e.type === "user/message")!
        expect(message.data.source).toEqual({
          kind: "mcp-prompt",
          server: "everything",
          prompt: "args-prompt",
          arguments: { city: "Paris" }
        })
      }),
    TIMEOUT
  )

  it.scopedLive(
    "login: the URL is printed, the tokens stored 0600 outside the session database; later commands use and refresh them",
    () =>
      Effect.gen(function*() {
        const dir = yield* tempDir
        const server = yield* oauthServer
        const authDir = path.join(dir, "auth")
        fs.writeFileSync(
          path.join(dir, ".mcp.json"),
          JSON.stringify({ mcpServers: { guarded: { type: "http", url: server.url, oauth: true } } })
        )
        const env = { TILLER_MCP_AUTH_DIR: authDir }
        // Without a login: the typed error names the command that gets the tokens.
        const before = yield* tiller(dir, ["mcp", "call", "guarded", "whoami"], { env })
        expect(before.code).not.toBe(0)
        expect(before.stderr).toContain("MCP server guarded needs authorization: run `tiller mcp login guarded`")

        let shown = ""
        const login = yield* converse(dir, ["mcp", "login", "guarded", "--timeout", "30"], {
          env,
          view: (stdout) => (shown = stdout)
        })
        yield* login.waitFor("Waiting up to 30 s")
        const url = /^\s+(http\S+)$/m.exec(shown)![1]!
        yield* Effect.promise(() => fetch(url).then((response) => response.text()))
        const done = yield* login.exit
        expect(done.code, done.stderr).toBe(0)
        expect(done.stdout).toContain("MCP server guarded: authorized")
        const [file] = fs.readdirSync(authDir)
        expect(fs.statSync(path.join(authDir, file!)).mode & 0o777).toBe(0o600)

        const call = yield* tiller(dir, ["mcp", "call", "guarded", "whoami"], { env })
        expect(call).toMatchObject({ code: 0, stdout: "authorized caller\n" })
        server.expireAccessTokens()
        const run = yield* tiller(dir, ["run", "--session", "s1", "/mcp__guarded__whoami {}"], { env })
        expect(run.code, run.stderr).toBe(0)
        expect(server.grants).toEqual(["authorization_code", "refresh_token"])
        const log = yield* tiller(dir, ["log", "s1", "--json"])
        expect(log.stdout).toContain("authorized caller")

        // No token is in any output, the session log or the files of the session database.
        const database = fs.readdirSync(path.join(dir, ".tiller")).map((f) =>
          fs.readFileSync(path.join(dir, ".tiller", f)).toString("latin1")
        ).join("\n")
        const seen = [before, done, call, run, log].map((o) => o.stdout + o.stderr).join("\n") + database
        for (const token of [...server.accessTokens, ...server.refreshTokens]) expect(seen).not.toContain(token)
        expect(server.accessTokens).toHaveLength(2)
      }),
    TIMEOUT
  )
})
