/**
 * Live notifications of a session (SPEC 3.10).
 *
 * @since 0.1.0
 */
import type { AgentStatus, UserMessage } from "./Values.js"

/**
 * A live notification, delivered to observers after the transaction that caused it commits.
 *
 * @since 0.1.0
 * @category models
 */
export type DriverEvent =
  | { readonly type: "agent/inbox/inserted"; readonly message: UserMessage }
  | { readonly type: "agent/inbox/claimed"; readonly message: UserMessage; readonly turn: number }
  | { readonly type: "agent/inbox/discarded"; readonly message: UserMessage }
  | { readonly type: "agent/status"; readonly status: AgentStatus }
  | { readonly type: "agent/error"; readonly turn: number; readonly step: number; readonly error: unknown }
