/**
 * Mcp: the Model Context Protocol servers an agent uses. Their tools are tiller tools named
 * `mcp__<server>__<tool>`; their resources enter a session as context (one `UserMessage` whose
 * source is `{kind: "mcp-resource", server, uri}`), their prompts as messages
 * (`{kind: "mcp-prompt", server, prompt}`). `McpServers.layer` provides it.
 *
 * @since 0.1.0
 */
import { Context } from "effect"
import type { Effect, Scope, Stream } from "effect"
import type { McpAuthorizationRequired, McpError } from "../domain/Errors.js"
import type { Json } from "../domain/Json.js"
import type { ToolOutput } from "../domain/Tool.js"
import type { UserMessage } from "../domain/Values.js"

export type { McpConfig, McpOAuthConfig, McpServerConfig, McpTransport } from "../internal/mcp/Config.js"

/**
 * Why a server could not do what was asked: its failure, or a missing authorization (an HTTP
 * server with `oauth` and no usable tokens; `tiller mcp login SERVER` gets them).
 *
 * @since 0.1.0
 * @category errors
 */
export type McpFailure = McpError | McpAuthorizationRequired

/**
 * A server as `tiller mcp list` shows it.
 *
 * @since 0.1.0
 * @category models
 */
export interface McpServerInfo {
  readonly name: string
  readonly transport: "stdio" | "http"
  /** `connected`; `failed`: it did not start or its connection ended (it is started again on next use). */
  readonly state: "connected" | "failed"
  /** The tools it offers (after the allow and deny lists). */
  readonly tools: number
  readonly prompts: number
  readonly protocolVersion?: string
  /** The process id of a running stdio server. */
  readonly pid?: number
  /** Why it failed or ended, with the last lines of its stderr. */
  readonly error?: string
}

/**
 * A server's tool.
 *
 * @since 0.1.0
 * @category models
 */
export interface McpToolInfo {
  readonly server: string
  /** The name the server gives it. */
  readonly tool: string
  /** The tiller tool name, `mcp__<server>__<tool>` sanitised and unique. */
  readonly name: string
  readonly description: string
  readonly inputSchema: Json
  /** Whether the model is offered its definition now (false until the tool search loads it). */
  readonly offered: boolean
}

/**
 * A server's prompt, run in the chat as the command `/mcp__<server>__<prompt> ARGS`.
 *
 * @since 0.1.0
 * @category models
 */
export interface McpPromptInfo {
  readonly server: string
  readonly prompt: string
  /** The command name without its slash. */
  readonly command: string
  readonly description: string
  readonly arguments: ReadonlyArray<
    { readonly name: string; readonly description?: string; readonly required: boolean }
  >
}

/**
 * Something a server did outside a caller's request: progress of a running tool call, a tools list
 * change, the end of its connection.
 *
 * @since 0.1.0
 * @category models
 */
export type McpEvent =
  | {
    readonly _tag: "Progress"
    readonly server: string
    readonly tool: string
    readonly callId: string | undefined
    readonly progress: number
    readonly total?: number
    readonly message?: string
  }
  | { readonly _tag: "ToolsChanged"; readonly server: string; readonly tools: number }
  | { readonly _tag: "Closed"; readonly server: string; readonly reason: string }

/**
 * A server's elicitation: it asks the user for the fields of `requestedSchema`.
 *
 * @since 0.1.0
 * @category models
 */
export interface McpElicitation {
  readonly server: string
  readonly message: string
  readonly requestedSchema: Json
}

/**
 * The user's answer to an elicitation.
 *
 * @since 0.1.0
 * @category models
 */
export type McpElicitationAnswer =
  | { readonly action: "accept"; readonly content: { readonly [key: string]: string | number | boolean } }
  | { readonly action: "decline" }
  | { readonly action: "cancel" }

/**
 * The message source of a resource entered as context.
 *
 * @since 0.1.0
 * @category constants
 */
export const RESOURCE_SOURCE_KIND = "mcp-resource"

/**
 * The message source of a prompt's message.
 *
 * @since 0.1.0
 * @category constants
 */
export const PROMPT_SOURCE_KIND = "mcp-prompt"

/**
 * The MCP servers of an agent.
 *
 * @since 0.1.0
 * @category tags
 */
export class Mcp extends Context.Tag("tiller/Mcp")<Mcp, {
  /** Every configured server with its state. */
  readonly servers: Effect.Effect<ReadonlyArray<McpServerInfo>>
  /** The tools of `server` (after its allow and deny lists), starting it if it is not running. */
  readonly tools: (server: string) => Effect.Effect<ReadonlyArray<McpToolInfo>, McpFailure>
  /** Calls `tool` (the server's name for it) on `server`, as the agent would; a failure of the tool is an error output. */
  readonly call: (
    server: string,
    tool: string,
    args: { readonly [key: string]: unknown },
    callId?: string
  ) => Effect.Effect<ToolOutput, McpFailure>
  /** Reads `uri` from `server` as one context message with source `{kind: "mcp-resource", server, uri}`. */
  readonly resource: (server: string, uri: string) => Effect.Effect<UserMessage, McpFailure>
  /** The prompts of every connected server. */
  readonly prompts: Effect.Effect<ReadonlyArray<McpPromptInfo>>
  /** The message of prompt `command` (`mcp__<server>__<prompt>`) with `args` (`name=value` or positional words). */
  readonly prompt: (command: string, args: string) => Effect.Effect<UserMessage, McpFailure>
  /** What the servers report outside requests, from subscription on (interrupt the stream to stop). */
  readonly events: Stream.Stream<McpEvent>
  /**
   * Answers the servers' elicitations with `handler` while the scope is open (the latest handler
   * answers); with none, every elicitation is declined. Each one is recorded in the `meta` of the
   * result of the tool call it happened in (`mcp.elicitations`: its message, the action, and for
   * an accepted one the answer's `content`).
   */
  readonly handleElicitations: (
    handler: (elicitation: McpElicitation) => Effect.Effect<McpElicitationAnswer>
  ) => Effect.Effect<void, never, Scope.Scope>
}>() {}
