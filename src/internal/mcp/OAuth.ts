/**
 * tiller's OAuth client for HTTP MCP servers: the client library's `OAuthClientProvider` over the
 * server's file in the auth store (`AuthStore.ts`). The library does the protocol (discovery,
 * dynamic client registration, PKCE, the code exchange, refreshing an access token the server
 * rejects); this provider keeps what it hands over. A connection's provider never starts an
 * interactive authorization: when one would be needed it only notes that a login is (the
 * connection reports it); a login's provider passes the authorization URL on and waits for the
 * code on its loopback redirect URI.
 *
 * @since 0.1.0
 */
import type {
  OAuthClientInformationMixed,
  OAuthClientMetadata,
  OAuthClientProvider,
  OAuthDiscoveryState,
  StoredOAuthClientInformation,
  StoredOAuthTokens
} from "@modelcontextprotocol/client"
import type { StoredAuth } from "./AuthStore.js"
import { readAuth, updateAuth } from "./AuthStore.js"
import type { McpOAuthConfig } from "./Config.js"

/**
 * The redirect path of the loopback listener.
 *
 * @since 0.1.0
 * @category constants
 */
export const CALLBACK_PATH = "/callback"

/**
 * What a login's provider does differently from a connection's.
 *
 * @since 0.1.0
 * @category models
 */
export interface LoginMode {
  /** The loopback URI the authorization server sends the code to. */
  readonly redirectUrl: string
  /** The `state` the callback must carry back. */
  readonly state: string
  /** Receives the URL the user opens to authorize tiller. */
  readonly onAuthorizationUrl: (url: URL) => void
}

/**
 * The provider, and whether a connection found that a login is needed.
 *
 * @since 0.1.0
 * @category models
 */
export interface TillerOAuthProvider extends OAuthClientProvider {
  /** Whether the library asked for an interactive authorization that a connection cannot do. */
  readonly needsLogin: () => boolean
}

const redirectUrisOf = (information: unknown): ReadonlyArray<string> => {
  const uris = (information as { readonly redirect_uris?: unknown } | undefined)?.redirect_uris
  return Array.isArray(uris) ? uris.filter((u): u is string => typeof u === "string") : []
}

/**
 * The loopback port of a stored client registration's redirect URI, if it has one.
 *
 * @since 0.1.0
 * @category getters
 */
export const registeredPort = (stored: StoredAuth): number | undefined => {
  for (const uri of redirectUrisOf(stored.clientInformation)) {
    if (!URL.canParse(uri)) continue
    const url = new URL(uri)
    if (url.hostname === "127.0.0.1" && url.port !== "") return Number(url.port)
  }
  return undefined
}

/**
 * The provider of server `url`'s state in `file`; with `login`, the one that runs an interactive
 * authorization.
 *
 * @since 0.1.0
 * @category constructors
 */
export const makeProvider = (
  file: string,
  url: string,
  oauth: McpOAuthConfig,
  login?: LoginMode
): TillerOAuthProvider => {
  let needsLogin = false
  const update = (change: (stored: StoredAuth) => StoredAuth) =>
    updateAuth(file, (stored) => ({ ...change(stored), serverUrl: url }))
  const redirectUrl = login?.redirectUrl ?? redirectUrisOf(readAuth(file).clientInformation)[0] ??
    `http://127.0.0.1:${oauth.callbackPort ?? 0}${CALLBACK_PATH}`
  const clientMetadata: OAuthClientMetadata = {
    client_name: "tiller",
    redirect_uris: [redirectUrl],
    grant_types: ["authorization_code", "refresh_token"],
    response_types: ["code"],
    token_endpoint_auth_method: "none",
    ...(oauth.scopes === undefined ? {} : { scope: oauth.scopes.join(" ") })
  }
  return {
    needsLogin: () => needsLogin,
    get redirectUrl() {
      return redirectUrl
    },
    get clientMetadata() {
      return clientMetadata
    },
    ...(login === undefined ? {} : { state: () => login.state }),
    clientInformation: () => {
      if (oauth.clientId !== undefined) return { client_id: oauth.clientId }
      const stored = readAuth(file).clientInformation as StoredOAuthClientInformation | undefined
      // A login listens on its own port: a registration for another redirect URI is registered anew.
      if (stored === undefined || (login !== undefined && !redirectUrisOf(stored).includes(redirectUrl))) {
        return undefined
      }
      return stored
    },
    saveClientInformation: (information: OAuthClientInformationMixed) =>
      update((stored) => ({ ...stored, clientInformation: information })),
    tokens: () => readAuth(file).tokens as StoredOAuthTokens | undefined,
    saveTokens: (tokens: StoredOAuthTokens) => update((stored) => ({ ...stored, tokens })),
    redirectToAuthorization: (authorizationUrl: URL) => {
      if (login === undefined) needsLogin = true
      else login.onAuthorizationUrl(authorizationUrl)
    },
    saveCodeVerifier: (codeVerifier: string) => {
      // A connection's verifier would serve no callback: it must not replace a login's.
      if (login !== undefined) update((stored) => ({ ...stored, codeVerifier }))
    },
    codeVerifier: () => {
      const verifier = readAuth(file).codeVerifier
      if (verifier === undefined) throw new Error("no PKCE code verifier is stored: start the login again")
      return verifier
    },
    saveDiscoveryState: (discoveryState: OAuthDiscoveryState) => update((stored) => ({ ...stored, discoveryState })),
    discoveryState: () => readAuth(file).discoveryState as OAuthDiscoveryState | undefined,
    invalidateCredentials: (scope) =>
      update((stored) => {
        if (scope === "all") return {}
        const { clientInformation, codeVerifier, discoveryState, tokens, ...rest } = stored
        return {
          ...rest,
          ...(scope === "client" || clientInformation === undefined ? {} : { clientInformation }),
          ...(scope === "verifier" || codeVerifier === undefined ? {} : { codeVerifier }),
          ...(scope === "discovery" || discoveryState === undefined ? {} : { discoveryState }),
          ...(scope === "tokens" || tokens === undefined ? {} : { tokens })
        }
      })
  }
}
