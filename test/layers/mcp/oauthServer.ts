/**
 * An OAuth-protected MCP server for the tests, on node:http at 127.0.0.1 (a free port): the
 * protected-resource and authorization-server metadata, dynamic client registration, an
 * authorization endpoint that approves at once (redirecting to the client's loopback redirect URI),
 * a token endpoint (authorization code with PKCE S256, refresh token), and the MCP endpoint `/mcp`
 * (an `McpServer` of the official 1.x SDK, stateless) behind bearer tokens: one tool, `whoami`.
 */
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js"
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js"
import { Effect } from "effect"
import type { Scope } from "effect"
import { createHash, randomBytes } from "node:crypto"
import * as http from "node:http"
import type * as net from "node:net"

/** What the test reads and changes on the server. */
export interface OAuthServer {
  /** The MCP endpoint. */
  readonly url: string
  /** Every access token issued, in order. */
  readonly accessTokens: ReadonlyArray<string>
  /** Every refresh token issued, in order. */
  readonly refreshTokens: ReadonlyArray<string>
  /** The grants the token endpoint served, in order (`authorization_code`, `refresh_token`). */
  readonly grants: ReadonlyArray<string>
  /** How many clients registered. */
  readonly registrations: () => number
  /** Every access token issued so far stops being accepted (as when it expires). */
  readonly expireAccessTokens: () => void
}

const token = () => randomBytes(18).toString("base64url")

const readBody = (req: http.IncomingMessage) =>
  new Promise<string>((resolve) => {
    let body = ""
    req.setEncoding("utf8").on("data", (chunk: string) => (body += chunk)).on("end", () => resolve(body))
  })

const json = (res: http.ServerResponse, status: number, value: unknown) => {
  res.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify(value))
}

/** Starts the server, stopped with the scope. */
export const oauthServer: Effect.Effect<OAuthServer, never, Scope.Scope> = Effect.gen(function*() {
  const clients = new Map<string, { readonly redirectUris: ReadonlyArray<string> }>()
  const codes = new Map<
    string,
    { readonly clientId: string; readonly challenge: string; readonly redirectUri: string }
  >()
  const accessTokens: Array<string> = []
  const refreshTokens: Array<string> = []
  const grants: Array<string> = []
  const valid = new Set<string>()
  const refreshable = new Set<string>()
  let base = ""

  const issue = (res: http.ServerResponse) => {
    const access = token()
    const refresh = token()
    accessTokens.push(access)
    refreshTokens.push(refresh)
    valid.add(access)
    refreshable.add(refresh)
    json(res, 200, { access_token: access, token_type: "Bearer", expires_in: 3600, refresh_token: refresh })
  }

  const handle = async (req: http.IncomingMessage, res: http.ServerResponse) => {
    const url = new URL(req.url ?? "/", base)
    if (url.pathname.startsWith("/.well-known/oauth-protected-resource")) {
      return json(res, 200, { resource: `${base}/mcp`, authorization_servers: [base] })
    }
    if (url.pathname === "/.well-known/oauth-authorization-server") {
      return json(res, 200, {
        issuer: base,
        authorization_endpoint: `${base}/authorize`,
        token_endpoint: `${base}/token`,
        registration_endpoint: `${base}/register`,
        response_types_supported: ["code"],
        grant_types_supported: ["authorization_code", "refresh_token"],
        code_challenge_methods_supported: ["S256"],
        token_endpoint_auth_methods_supported: ["none"]
      })
    }
    if (url.pathname === "/register" && req.method === "POST") {
      const metadata = JSON.parse(await readBody(req)) as { readonly redirect_uris: ReadonlyArray<string> }
      const clientId = `client-${clients.size + 1}`
      clients.set(clientId, { redirectUris: metadata.redirect_uris })
      return json(res, 201, { ...metadata, client_id: clientId, token_endpoint_auth_method: "none" })
    }
    if (url.pathname === "/authorize") {
      const q = url.searchParams
      const client = clients.get(q.get("client_id") ?? "")
      const redirectUri = q.get("redirect_uri") ?? ""
      if (client === undefined || !client.redirectUris.includes(redirectUri) || q.get("code_challenge") === null) {
        return json(res, 400, { error: "invalid_request" })
      }
      const code = token()
      codes.set(code, { clientId: q.get("client_id")!, challenge: q.get("code_challenge")!, redirectUri })
      const target = new URL(redirectUri)
      target.searchParams.set("code", code)
      if (q.get("state") !== null) target.searchParams.set("state", q.get("state")!)
      res.writeHead(302, { location: target.href }).end()
      return
    }
    if (url.pathname === "/token" && req.method === "POST") {
      const form = new URLSearchParams(await readBody(req))
      const grant = form.get("grant_type") ?? ""
      grants.push(grant)
      if (grant === "authorization_code") {
        const code = codes.get(form.get("code") ?? "")
        codes.delete(form.get("code") ?? "")
        const verifier = form.get("code_verifier") ?? ""
        if (
          code === undefined || code.clientId !== form.get("client_id") ||
          code.redirectUri !== form.get("redirect_uri") ||
          createHash("sha256").update(verifier).digest("base64url") !== code.challenge
        ) return json(res, 400, { error: "invalid_grant" })
        return issue(res)
      }
      if (grant === "refresh_token") {
        const refresh = form.get("refresh_token") ?? ""
        if (!refreshable.delete(refresh)) return json(res, 400, { error: "invalid_grant" })
        return issue(res)
      }
      return json(res, 400, { error: "unsupported_grant_type" })
    }
    if (url.pathname === "/mcp") {
      const bearer = /^Bearer (.+)$/.exec(req.headers.authorization ?? "")?.[1]
      if (bearer === undefined || !valid.has(bearer)) {
        res.writeHead(401, {
          "www-authenticate": `Bearer resource_metadata="${base}/.well-known/oauth-protected-resource/mcp"`,
          "content-type": "application/json"
        }).end(JSON.stringify({ error: "invalid_token" }))
        return
      }
      const server = new McpServer({ name: "guarded", version: "1.0.0" })
      server.registerTool("whoami", { description: "Says the caller is authorized" }, async () => ({
        content: [{ type: "text", text: "authorized caller" }]
      }))
      const transport = new StreamableHTTPServerTransport({})
      res.on("close", () => {
        void transport.close()
        void server.close()
      })
      await server.connect(transport)
      const body = req.method === "POST" ? JSON.parse(await readBody(req)) as unknown : undefined
      return transport.handleRequest(req, res, body)
    }
    json(res, 404, { error: "not_found" })
  }

  const server = http.createServer((req, res) => {
    handle(req, res).catch((error: unknown) => {
      if (!res.headersSent) json(res, 500, { error: String(error) })
    })
  })
  yield* Effect.acquireRelease(
    Effect.async<void>((resume) => {
      server.listen(0, "127.0.0.1", () => resume(Effect.void))
    }),
    () =>
      Effect.async<void>((resume) => {
        server.closeAllConnections()
        server.close(() => resume(Effect.void))
      })
  )
  base = `http://127.0.0.1:${(server.address() as net.AddressInfo).port}`
  return {
    url: `${base}/mcp`,
    accessTokens,
    refreshTokens,
    grants,
    registrations: () => clients.size,
    expireAccessTokens: () => valid.clear()
  }
})
