/**
 * tiller: an event-sourced agent runtime on Effect.
 *
 * @since 0.1.0
 */
export * from "./domain/index.js"

/**
 * The domain names as one namespace.
 *
 * @since 0.1.0
 */
export * as Domain from "./domain/index.js"

export { Agent } from "./layers/Agent.js"
export type { AgentOpenError, AgentOptions, AgentServices } from "./layers/Agent.js"
export { ScriptedModel } from "./layers/ScriptedModel.js"
/**
 * A `Model` layer for servers speaking the Chat Completions API with streaming (Ollama, vLLM, ...).
 *
 * @since 0.1.0
 */
export * as OpenAiCompatibleModel from "./layers/OpenAiCompatibleModel.js"
/**
 * `Model` layers for hosted providers: OpenAI (Responses API) and Anthropic (Messages API).
 *
 * @since 0.1.0
 */
export * as ProviderModels from "./layers/ProviderModels.js"
export type { ConfigOptions, ProviderOptions } from "./layers/ProviderModels.js"
/**
 * The Anthropic Messages API adapter under `ProviderModels.layerAnthropic` (request conversion, layer).
 *
 * @since 0.1.0
 */
export * as AnthropicModel from "./layers/AnthropicModel.js"
export { CodingTools } from "./layers/CodingTools.js"
export type { CodingToolsOptions } from "./layers/CodingTools.js"
export { HookBridge } from "./layers/HookBridge.js"
export type {
  HookBridgeOptions,
  HookCommand,
  HookEvent,
  HookGroup,
  HookNotice,
  HookQuestion,
  HookSettings
} from "./layers/HookBridge.js"

/**
 * The OpenAI Responses API adapter under `ProviderModels.layerOpenAi` (request conversion, layer).
 *
 * @since 0.1.0
 */
export * as OpenAiModel from "./layers/OpenAiModel.js"

export { McpServers } from "./layers/McpServers.js"
export type { McpServersOptions } from "./layers/McpServers.js"
export {
  Mcp,
  PROMPT_SOURCE_KIND as MCP_PROMPT_SOURCE_KIND,
  RESOURCE_SOURCE_KIND as MCP_RESOURCE_SOURCE_KIND
} from "./services/Mcp.js"
export type {
  McpConfig,
  McpElicitation,
  McpElicitationAnswer,
  McpEvent,
  McpFailure,
  McpOAuthConfig,
  McpPromptInfo,
  McpServerConfig,
  McpServerInfo,
  McpToolInfo,
  McpTransport
} from "./services/Mcp.js"

export { Permissions } from "./layers/Permissions.js"
export type {
  PermissionBehavior,
  PermissionMode,
  PermissionOutcome,
  PermissionQuestion,
  PermissionRequest,
  PermissionRule,
  PermissionsOptions,
  ResolvedPermissions
} from "./layers/Permissions.js"
export { PgSessionStore } from "./layers/PgSessionStore.js"
export type { PgSessionStoreOptions } from "./layers/PgStore.js"
export type { EntryOptions, PartialSpec, ResponseSpec, ScriptEntry } from "./layers/ScriptedModel.js"
export { ReadSessionParameters, SessionReference } from "./layers/SessionReference.js"
export type { SnapshotError, SnapshotOptions } from "./layers/SessionReference.js"
export { Sessions } from "./layers/Sessions.js"
export type { SessionServices, SessionSummary } from "./layers/Sessions.js"
export { SqliteSessionStore } from "./layers/SqliteSessionStore.js"
export type { SqliteSessionStoreOptions } from "./layers/SqliteStore.js"
export {
  Compaction,
  COMPACTION_CONTEXT_SOURCE_KIND,
  isContextOverflow,
  PreCompactDecision
} from "./services/Compaction.js"
export type {
  CompactError,
  CompactionKind,
  CompactionOptions,
  CompactionReport,
  CompactionTrigger,
  CompactOptions,
  ContextUsage,
  PostCompactContext,
  PostCompactInput,
  PreCompactInput,
  SummaryOptions
} from "./services/Compaction.js"
export { Driver } from "./services/Driver.js"
export type { DeliveryError } from "./services/Driver.js"
export type { DriverOptions } from "./services/DriverOptions.js"
export { forkSession } from "./services/Fork.js"
export type { ForkOptions } from "./services/Fork.js"
export { Hooks, RequestErrorAction, ToolPreDecision } from "./services/Hooks.js"
export type { RequestConfig, ToolCallInfo, Waterfall } from "./services/Hooks.js"
export { Inbox } from "./services/Inbox.js"
export type { InboxSnapshot } from "./services/Inbox.js"
export { Model } from "./services/Model.js"
export type { ModelRequest, ModelResponse, ModelShape } from "./services/Model.js"
export { PreStep, PreStepDecision } from "./services/PreStep.js"
export type { PreStepInput, PreStepListener } from "./services/PreStep.js"
export { ReadHistory, ReadHistoryParameters } from "./services/ReadHistory.js"
export type { ReadHistoryOptions } from "./services/ReadHistory.js"
export { SessionLog } from "./services/SessionLog.js"
export type { AppendInput } from "./services/SessionLog.js"
export { MemoryStoreControl, SessionStore } from "./services/SessionStore.js"
export type { StoreSnapshot } from "./services/SessionStore.js"
export { Tool, Tools } from "./services/Tools.js"
export type { NormalizedToolOutput, ToolContext, ToolDefinition, ToolMode, ToolOutput } from "./services/Tools.js"

/**
 * The session preset: a session's log and inbox over a store.
 *
 * @since 0.1.0
 */
export * as Session from "./layers/Session.js"

/**
 * OpenTelemetry spans of a session (GenAI conventions): live layers and the replay of a stored log.
 *
 * @since 0.1.0
 */
export * as Telemetry from "./layers/Telemetry.js"
export type { OtlpOptions, TelemetryOptions } from "./layers/Telemetry.js"

// Types that public signatures name (options, hook inputs, fold results), so applications can write them.
export type { FoldOptions } from "./domain/LogState.js"
export type { UserMessageInput } from "./domain/Message.js"
export type { RequestErrorInput, RequestInput, ToolPostInput, TurnStoppingInput } from "./domain/Seams.js"
export type { InboxLists } from "./domain/Splice.js"
export type { PreStepRegisterOptions } from "./services/PreStep.js"
export type { ToolsOptions } from "./services/Tools.js"
