/**
 * What a tool is: its definition, the context its body sees and the output it returns (SPEC 4.6,
 * 8.9). The `Tools` service registers these; the loop runs them.
 *
 * @since 0.1.0
 */
import type { Effect, Schema } from "effect"
import type { SessionId } from "./Ids.js"
import type { Json } from "./Json.js"
import type { ImageBlock, TextBlock, UserMessage } from "./Values.js"

/**
 * What a tool body returns; a plain string `s` means `{content: s}`.
 *
 * @since 0.1.0
 * @category models
 */
export interface ToolOutput {
  readonly content: string | ReadonlyArray<TextBlock | ImageBlock>
  readonly isError?: boolean
  readonly additionalContexts?: ReadonlyArray<UserMessage>
  readonly concludesTurn?: boolean
  readonly meta?: Json
}

/**
 * A tool output with every default filled in, as `ToolPost` listeners see and return it.
 *
 * @since 0.1.0
 * @category models
 */
export interface NormalizedToolOutput {
  readonly content: ReadonlyArray<TextBlock | ImageBlock>
  readonly isError: boolean
  readonly additionalContexts: ReadonlyArray<UserMessage>
  readonly concludesTurn: boolean
  readonly meta?: Json
}

/**
 * What a tool body knows about its call; `deferContext` queues a context message for `next-step`.
 *
 * @since 0.1.0
 * @category models
 */
export interface ToolContext {
  readonly sessionId: SessionId
  readonly turn: number
  readonly step: number
  readonly callId: string
  /** Queues a context message that enters `next-step` after this call's result. */
  readonly deferContext: (m: UserMessage) => Effect.Effect<void>
}

/**
 * How a call is scheduled: `parallel` calls share a pool, an `exclusive` call runs alone.
 *
 * @since 0.1.0
 * @category models
 */
export type ToolMode = "parallel" | "exclusive"

/**
 * A tool: its name, description, parameter Schema, mode and body.
 *
 * @since 0.1.0
 * @category models
 */
export interface ToolDefinition<P extends Schema.Schema.AnyNoContext> {
  readonly name: string
  readonly description: string
  readonly parameters: P
  readonly mode: ToolMode
  /**
   * The parameters' JSON Schema as offered to the model, when the tool brings its own (an MCP
   * server's tool does): it is passed through instead of the one derived from `parameters`, which
   * then only decodes the arguments.
   */
  readonly jsonSchema?: Json
  /** The body: decoded parameters in, the result's content (or a plain string) out. */
  readonly execute: (params: Schema.Schema.Type<P>, ctx: ToolContext) => Effect.Effect<ToolOutput | string, unknown>
}
