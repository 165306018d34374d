/**
 * One model request: what the loop hands the `Model` seam for each attempt (SPEC 8.8).
 *
 * @since 0.1.0
 */
import type { SessionId } from "./Ids.js"
import type { Message, ToolSchema } from "./Values.js"

/**
 * One model request: its position in the session, the logged header and the derived messages.
 *
 * @since 0.1.0
 * @category models
 */
export interface ModelRequest {
  readonly sessionId: SessionId
  readonly turn: number
  readonly step: number
  readonly attempt: number
  readonly provider: string
  readonly model: string
  readonly system?: string
  readonly maxTokens?: number
  readonly temperature?: number
  readonly tools: ReadonlyArray<ToolSchema>
  readonly messages: ReadonlyArray<Message>
}
