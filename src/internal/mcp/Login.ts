/**
 * The interactive OAuth authorization of one HTTP MCP server (`tiller mcp login SERVER`): listens
 * on a loopback redirect URI (`http://127.0.0.1:<port>/callback`), has the client library discover
 * the authorization server, register tiller when it must, and build the authorization URL (PKCE),
 * hands that URL to the caller, waits for the code within a timeout, then has the library exchange
 * it for tokens, which land in the server's auth-store file. The tokens themselves are never
 * returned, printed or logged.
 *
 * @since 0.1.0
 */
import { auth } from "@modelcontextprotocol/client"
import { Deferred, Duration, Effect, Exit } from "effect"
import type { Scope } from "effect"
import { randomBytes } from "node:crypto"
import * as http from "node:http"
import type * as net from "node:net"
import { McpError } from "../../domain/Errors.js"
import { authFile, defaultAuthDir, readAuth, updateAuth } from "./AuthStore.js"
import type { McpServerConfig } from "./Config.js"
import { CALLBACK_PATH, makeProvider, registeredPort } from "./OAuth.js"

/**
 * Options of {@link login}.
 *
 * @since 0.1.0
 * @category models
 */
export interface LoginOptions {
  /** The directory of the auth store (default `~/.tiller/mcp-auth`). */
  readonly authDir?: string
  /** The longest wait for the authorization code, in milliseconds. */
  readonly timeoutMs: number
  /** Shows the URL the user opens to authorize tiller. */
  readonly onAuthorizationUrl: (url: string) => Effect.Effect<void>
}

/** What the authorization server sent to the redirect URI. */
type Callback = { readonly code: string; readonly state: string | null; readonly iss: string | null }

const PAGE = (text: string) => `<!doctype html><meta charset="utf-8"><title>tiller</title><p>${text}</p>`

/** A loopback listener on `port` (0: a free one) for the redirect; closed with the scope. */
const listen = (port: number, server: string) =>
  Effect.gen(function*() {
    const received = yield* Deferred.make<Callback, McpError>()
    const listener = http.createServer((req, res) => {
      const url = new URL(req.url ?? "/", "http://127.0.0.1")
      if (url.pathname !== CALLBACK_PATH) {
        res.writeHead(404).end()
        return
      }
      const error = url.searchParams.get("error")
      const code = url.searchParams.get("code")
      if (error !== null || code === null) {
        const description = url.searchParams.get("error_description")
        res.writeHead(400, { "content-type": "text/html" }).end(PAGE("The authorization failed; see tiller's output."))
        Deferred.unsafeDone(
          received,
          Exit.fail(
            new McpError({
              server,
              reason: `the authorization server answered ${error ?? "without a code"}${
                description === null ? "" : `: ${description}`
              }`
            })
          )
        )
        return
      }
      res.writeHead(200, { "content-type": "text/html" }).end(
        PAGE("tiller is authorized. You can close this window.")
      )
      Deferred.unsafeDone(
        received,
        Exit.succeed({ code, state: url.searchParams.get("state"), iss: url.searchParams.get("iss") })
      )
    })
    const bound = yield* Effect.acquireRelease(
      Effect.async<number, NodeJS.ErrnoException>((resume) => {
        listener.once("error", (error) => resume(Effect.fail(error)))
        listener.listen(port, "127.0.0.1", () => resume(Effect.succeed((listener.address() as net.AddressInfo).port)))
      }),
      () =>
        Effect.async<void>((resume) => {
          listener.closeAllConnections()
          listener.close(() => resume(Effect.void))
        })
    )
    return { port: bound, received }
  })

/**
 * Authorizes tiller with `config`'s server (an HTTP server with `oauth`) and stores its tokens;
 * fails with the reason when the server is not one, the user does not finish in time, or the
 * authorization server refuses.
 *
 * @since 0.1.0
 * @category commands
 */
export const login = (config: McpServerConfig, options: LoginOptions): Effect.Effect<void, McpError, Scope.Scope> =>
  Effect.gen(function*() {
    const server = config.name
    const failure = (reason: string) => new McpError({ server, reason })
    const transport = config.transport
    if (transport._tag !== "http" || transport.oauth === undefined) {
      return yield* failure(`not an http server with "oauth" in its configuration: there is nothing to log in to`)
    }
    const oauth = transport.oauth
    const file = authFile(options.authDir ?? defaultAuthDir(), server, transport.url)
    const stored = yield* Effect.sync(() => readAuth(file))
    const wanted = oauth.callbackPort ?? registeredPort(stored) ?? 0
    // The port of an earlier registration may be taken now: then a free one (and a new registration).
    const { port, received } = yield* listen(wanted, server).pipe(
      Effect.catchAll((error) =>
        oauth.callbackPort === undefined && wanted !== 0
          ? listen(0, server)
          : Effect.fail(error)
      ),
      Effect.mapError((error) => failure(`cannot listen on 127.0.0.1:${wanted} for the redirect: ${error.message}`))
    )
    const state = randomBytes(16).toString("base64url")
    let authorizationUrl: URL | undefined
    const provider = makeProvider(file, transport.url, oauth, {
      redirectUrl: `http://127.0.0.1:${port}${CALLBACK_PATH}`,
      state,
      onAuthorizationUrl: (url) => {
        authorizationUrl = url
      }
    })
    const scope = oauth.scopes?.join(" ")
    const run = (what: string, authorizationCode?: string, iss?: string) =>
      Effect.tryPromise({
        try: () =>
          auth(provider, {
            serverUrl: transport.url,
            ...(scope === undefined ? {} : { scope }),
            ...(authorizationCode === undefined ? {} : { authorizationCode }),
            ...(iss === undefined ? {} : { iss })
          }),
        catch: (error) => failure(`${what} failed: ${error instanceof Error ? error.message : String(error)}`)
      })
    // A login starts afresh: tokens that may still work are replaced by the new ones.
    yield* Effect.sync(() => updateAuth(file, ({ codeVerifier: _, tokens: __, ...rest }) => rest))
    const started = yield* run("starting the authorization")
    if (started === "AUTHORIZED") return
    if (authorizationUrl === undefined) return yield* failure("the client library gave no authorization URL")
    yield* options.onAuthorizationUrl(authorizationUrl.href)
    const callback = yield* Deferred.await(received).pipe(
      Effect.timeoutFail({
        duration: Duration.millis(options.timeoutMs),
        onTimeout: () => failure(`no authorization arrived within ${Math.round(options.timeoutMs / 1000)} s`)
      })
    )
    if (callback.state !== state) return yield* failure("the redirect carried another state: the login was not ours")
    yield* run("exchanging the authorization code", callback.code, callback.iss ?? undefined)
    yield* Effect.sync(() => updateAuth(file, ({ codeVerifier: _, ...rest }) => rest))
  })
