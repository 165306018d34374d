import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import type { EventOf } from "../../../src/domain/Event.js"
import { SessionId } from "../../../src/domain/Ids.js"
import { userMessage } from "../../../src/domain/Message.js"
import { authFile } from "../../../src/internal/mcp/AuthStore.js"
import type { McpServerConfig } from "../../../src/internal/mcp/Config.js"
import { login } from "../../../src/internal/mcp/Login.js"
import { Agent } from "../../../src/layers/Agent.js"
import { McpServers } from "../../../src/layers/McpServers.js"
import { ScriptedModel } from "../../../src/layers/ScriptedModel.js"
import type { ScriptEntry } from "../../../src/layers/ScriptedModel.js"
import { Driver } from "../../../src/services/Driver.js"
import { Mcp } from "../../../src/services/Mcp.js"
import { SessionLog } from "../../../src/services/SessionLog.js"
import { SessionStore } from "../../../src/services/SessionStore.js"
import { Tools } from "../../../src/services/Tools.js"
import { oauthServer } from "../../layers/mcp/oauthServer.js"
import { everything, tempDir } from "../../layers/mcp/servers.js"

const guarded = (url: string): McpServerConfig => ({
  name: "guarded",
  transport: { _tag: "http", url, headers: {}, oauth: {} },
  startupTimeoutMs: 20_000,
  callTimeoutMs: 20_000,
  denyTools: []
})

/** The user: opens the authorization URL, and the authorization server redirects to tiller's listener. */
const approve = (url: string) =>
  Effect.promise(() => fetch(url, { redirect: "follow" }).then((response) => response.text())).pipe(Effect.asVoid)

const withServers = (servers: ReadonlyArray<McpServerConfig>, authDir: string) =>
  McpServers.layer({ servers, toolSearchShare: 1, authDir }).pipe(Layer.provide(Tools.layer()))

const agentWith = (servers: ReadonlyArray<McpServerConfig>, authDir: string, script: ReadonlyArray<ScriptEntry>) =>
  Agent.layer({ open: SessionId.make("oauth"), model: { provider: "test", model: "scripted" } }).pipe(
    Layer.provideMerge(McpServers.layer({ servers, toolSearchShare: 1, authDir })),
    Layer.provideMerge(Layer.mergeAll(Tools.layer(), SessionStore.layerMemory, ScriptedModel.layer(script)))
  )

const textOf = (content: unknown) => JSON.stringify(content)

describe("MCP OAuth: login and connections", () => {
  it.scopedLive(
    "login stores the tokens in a 0600 file; connections use them and refresh an expired one",
    () =>
      Effect.gen(function*() {
        const server = yield* oauthServer
        const authDir = path.join(yield* tempDir, "auth")
        const config = guarded(server.url)
        const shown: Array<string> = []
        yield* Effect.scoped(login(config, {
          authDir,
          timeoutMs: 10_000,
          onAuthorizationUrl: (url) => Effect.zipRight(Effect.sync(() => shown.push(url)), approve(url))
        }))
        expect(shown).toHaveLength(1)
        expect(new URL(shown[0]!).searchParams.get("code_challenge_method")).toBe("S256")
        expect(server.registrations()).toBe(1)
        expect(server.grants).toEqual(["authorization_code"])
        const file = authFile(authDir, "guarded", server.url)
        expect(fs.statSync(file).mode & 0o777).toBe(0o600)
        expect(fs.statSync(authDir).mode & 0o777).toBe(0o700)
        const stored = JSON.parse(fs.readFileSync(file, "utf8"))
        expect(stored.tokens.access_token).toBe(server.accessTokens[0])
        expect(stored.codeVerifier).toBeUndefined()

        // A later connection uses the stored token, without a login.
        const first = yield* Effect.flatMap(Mcp, (mcp) => mcp.call("guarded", "whoami", {})).pipe(
          Effect.provide(withServers([config], authDir))
        )
        expect(first.content).toEqual([{ type: "text", text: "authorized caller" }])
        expect(server.grants).toEqual(["authorization_code"])

        // The access token expires: the server refuses it, the library refreshes it, the call goes on.
        server.expireAccessTokens()
        const second = yield* Effect.flatMap(Mcp, (mcp) => mcp.call("guarded", "whoami", {})).pipe(
          Effect.provide(withServers([config], authDir))
        )
        expect(second.content).toEqual([{ type: "text", text: "authorized caller" }])
        expect(server.grants).toEqual(["authorization_code", "refresh_token"])
        const refreshed = JSON.parse(fs.readFileSync(file, "utf8"))
        expect(refreshed.tokens.access_token).toBe(server.accessTokens[1])
        expect(fs.statSync(file).mode & 0o777).toBe(0o600)
      }),
    60_000
  )

  it.scopedLive(
    "without stored tokens the server fails with McpAuthorizationRequired; the other servers' tools work, no token is logged",
    () =>
      Effect.gen(function*() {
        const server = yield* oauthServer
        const authDir = path.join(yield* tempDir, "auth")
        const script = [
          ScriptedModel.response({
            toolCalls: [
              { id: "sum", name: "mcp__everything__get-sum", arguments: { a: 1, b: 2 } },
              { id: "who", name: "mcp__guarded__whoami", arguments: {} }
            ]
          }),
          ScriptedModel.text("done")
        ]
        const { error, events, servers } = yield* Effect.gen(function*() {
          const mcp = yield* Mcp
          const error = yield* Effect.flip(mcp.call("guarded", "whoami", {}))
          const driver = yield* Driver
          yield* driver.followup(userMessage({ id: "go", text: "go" }))
          yield* driver.whenIdle
          return { error, events: yield* (yield* SessionLog).events, servers: yield* mcp.servers }
        }).pipe(Effect.provide(agentWith([everything(), guarded(server.url)], authDir, script)))
        expect(error._tag).toBe("McpAuthorizationRequired")
        expect(error.message).toBe("MCP server guarded needs authorization: run `tiller mcp login guarded`")
        expect(servers.map((s) => [s.name, s.state])).toEqual([["everything", "connected"], ["guarded", "failed"]])
        expect(servers[1]!.error).toContain("tiller mcp login guarded")
        const results = events.filter((e): e is EventOf<"tool/result"> => e.type === "tool/result")
        expect(textOf(results[0]!.data.message.content)).toContain("The sum of 1 and 2 is 3.")
        // The guarded server listed no tools: its tool is unknown to the model's tools.
        expect(textOf(results[1]!.data.message.content)).toContain("mcp__guarded__whoami")
        expect(server.accessTokens).toEqual([])
        expect(fs.existsSync(authFile(authDir, "guarded", server.url))).toBe(false)
      }),
    60_000
  )

  it.scopedLive(
    "tokens the server no longer accepts and cannot refresh ask for a login again",
    () =>
      Effect.gen(function*() {
        const server = yield* oauthServer
        const authDir = path.join(yield* tempDir, "auth")
        const config = guarded(server.url)
        yield* Effect.scoped(login(config, { authDir, timeoutMs: 10_000, onAuthorizationUrl: approve }))
        const file = authFile(authDir, "guarded", server.url)
        const stored = JSON.parse(fs.readFileSync(file, "utf8"))
        fs.writeFileSync(file, JSON.stringify({ ...stored, tokens: { ...stored.tokens, refresh_token: "revoked" } }))
        server.expireAccessTokens()
        const error = yield* Effect.flatMap(Mcp, (mcp) => Effect.flip(mcp.call("guarded", "whoami", {}))).pipe(
          Effect.provide(withServers([config], authDir))
        )
        expect(error._tag).toBe("McpAuthorizationRequired")
      }),
    60_000
  )
})
