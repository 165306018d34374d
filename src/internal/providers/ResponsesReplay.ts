/**
 * ResponsesReplay: what a streamed OpenAI Responses API response leaves for the next request in a
 * message's `source.replayState` (`{ openai: { items } }`): its reasoning items with their encrypted
 * content, and placeholders for the text and tool-call blocks between them, in output order.
 * `ResponsesEvents` writes it, the OpenAI adapter reads it back with `replayItems`.
 *
 * @since 0.1.0
 */
import { Predicate } from "effect"
import type { Json } from "../../domain/Json.js"

/**
 * The key of this adapter's entry in `source.replayState`.
 *
 * @since 0.1.0
 * @category constants
 */
export const REPLAY_KEY = "openai"

/**
 * One entry of the replay state, in output order: a reasoning item as the provider sent it (without
 * its `id`), or a placeholder for tiller's own text block (`message`) or tool call (`function_call`).
 *
 * @since 0.1.0
 * @category models
 */
export type ReplayItem =
  | { readonly type: "reasoning"; readonly encrypted_content: string; readonly [key: string]: Json }
  | { readonly type: "message" }
  | { readonly type: "function_call"; readonly call_id: string }

/**
 * The replay state of one response: `{ openai: { items } }`.
 *
 * @since 0.1.0
 * @category models
 */
export interface ReplayState {
  readonly [REPLAY_KEY]: { readonly items: ReadonlyArray<ReplayItem> }
}

/**
 * The reasoning item as it is sent back: everything but its `id` (the API requires a `summary`, an
 * empty one when the item had none); none without encrypted content.
 *
 * @since 0.1.0
 * @category conversions
 */
export const replayOf = (raw: unknown): ReplayItem | undefined => {
  if (typeof raw !== "object" || raw === null) return undefined
  const { id: _id, ...rest } = raw as Record<string, Json>
  const encrypted = rest.encrypted_content
  if (typeof encrypted !== "string" || encrypted === "") return undefined
  return {
    ...rest,
    type: "reasoning",
    summary: Array.isArray(rest.summary) ? rest.summary : [],
    encrypted_content: encrypted
  }
}

/**
 * The entries of this adapter's replay state in a message's `source.replayState`, in order;
 * `undefined` when the state is absent or another adapter's. Entries of an unknown shape are
 * skipped, and a reasoning entry never keeps an `id` (requests are sent with `store: false`).
 *
 * @since 0.1.0
 * @category conversions
 */
export const replayItems = (state: unknown): ReadonlyArray<ReplayItem> | undefined => {
  if (!Predicate.hasProperty(state, REPLAY_KEY)) return undefined
  const own = state[REPLAY_KEY]
  if (!Predicate.hasProperty(own, "items") || !Array.isArray(own.items)) return undefined
  const items: Array<ReplayItem> = []
  for (const entry of own.items as ReadonlyArray<unknown>) {
    if (!Predicate.hasProperty(entry, "type")) continue
    if (entry.type === "reasoning") {
      const item = replayOf(entry)
      if (item !== undefined) items.push(item)
    } else if (entry.type === "message") {
      items.push({ type: "message" })
    } else if (
      entry.type === "function_call" && Predicate.hasProperty(entry, "call_id") && Predicate.isString(entry.call_id)
    ) {
      items.push({ type: "function_call", call_id: entry.call_id })
    }
  }
  return items
}
