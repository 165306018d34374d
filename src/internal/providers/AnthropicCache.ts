/**
 * AnthropicCache: where the Anthropic adapter puts its prompt-cache breakpoints (`cache_control`).
 *
 * The Messages API caches the prefix of a request (tools, then system, then messages) up to each
 * block marked `cache_control`, at most four per request. tiller marks, when caching is on:
 *
 * 1. the last tool definition (the tools alone: they change least),
 * 2. the system prompt (sent as one text block to carry the mark),
 * 3. the newest message (the rolling breakpoint: the next request reads everything up to here), and
 * 4. the message that was newest in the previous step's request (the last message before the newest
 *    assistant message): the provider looks back only about 20 blocks from a breakpoint, so a step
 *    that added more blocks than that still reads the previous request's cache.
 *
 * A mark goes on the last block of a message that may carry one (never on thinking blocks); a
 * message without such a block is not marked. The mark is added as the block's last key, so a
 * request with its message marks removed serialises exactly as it would without caching.
 *
 * @since 0.1.0
 */

/**
 * How long the provider keeps a cached prefix: 5 minutes (the default, no extra cost beyond the
 * write) or 1 hour (a dearer write).
 *
 * @since 0.1.0
 * @category models
 */
export type CacheTtl = "5m" | "1h"

/**
 * The most breakpoints the Messages API accepts in one request.
 *
 * @since 0.1.0
 * @category constants
 */
export const MAX_BREAKPOINTS = 4

/**
 * The `anthropic-beta` flag of the one-hour cache, sent with `ttl: "1h"` (harmless where it is
 * generally available).
 *
 * @since 0.1.0
 * @category constants
 */
export const EXTENDED_TTL_BETA = "extended-cache-ttl-2025-04-11"

/**
 * The `cache_control` value for a TTL: `{type: "ephemeral"}` (five minutes, the API's default) or
 * `{type: "ephemeral", ttl: "1h"}`.
 *
 * @since 0.1.0
 * @category constructors
 */
export const cacheControl = (ttl: CacheTtl): { readonly type: "ephemeral"; readonly ttl?: "1h" } =>
  ttl === "1h" ? { type: "ephemeral", ttl: "1h" } : { type: "ephemeral" }

type Block = { readonly type: string } & { readonly [key: string]: unknown }

interface MessageLike {
  readonly role: "user" | "assistant"
  readonly content: ReadonlyArray<Block>
}

/** Block types the API accepts a `cache_control` on. */
const MARKABLE: ReadonlySet<string> = new Set(["text", "image", "document", "tool_use", "tool_result", "search_result"])

/** The message with its last markable block marked; the message itself when it has none. */
const markLast = <M extends MessageLike>(message: M, control: unknown): M => {
  for (let i = message.content.length - 1; i >= 0; i--) {
    const block = message.content[i]!
    if (MARKABLE.has(block.type)) {
      const content = [...message.content]
      content[i] = { ...block, cache_control: control }
      return { ...message, content }
    }
  }
  return message
}

/**
 * The indexes of the messages that get a breakpoint: the newest message and the last message before
 * the newest assistant message (the previous request's newest), newest first, without repeats.
 *
 * @since 0.1.0
 * @category getters
 */
export const rollingIndexes = (messages: ReadonlyArray<MessageLike>, budget: number): ReadonlyArray<number> => {
  const out: Array<number> = []
  if (messages.length === 0 || budget <= 0) return out
  out.push(messages.length - 1)
  let assistant = -1
  for (let i = messages.length - 1; i >= 0; i--) {
    if (messages[i]!.role === "assistant") {
      assistant = i
      break
    }
  }
  const previous = assistant - 1
  if (previous >= 0 && previous !== messages.length - 1 && out.length < budget) out.push(previous)
  return out
}

/**
 * The messages with the rolling breakpoints marked (at most `budget` of them).
 *
 * @since 0.1.0
 * @category conversions
 */
export const markMessages = <M extends MessageLike>(
  messages: ReadonlyArray<M>,
  control: unknown,
  budget: number
): ReadonlyArray<M> => {
  const indexes = rollingIndexes(messages, budget)
  if (indexes.length === 0) return messages
  const out = [...messages]
  for (const index of indexes) out[index] = markLast(out[index]!, control)
  return out
}

/**
 * The tool definitions with the last one marked.
 *
 * @since 0.1.0
 * @category conversions
 */
export const markTools = <T extends object>(tools: ReadonlyArray<T>, control: unknown): ReadonlyArray<T> =>
  tools.length === 0 ? tools : [...tools.slice(0, -1), { ...tools[tools.length - 1]!, cache_control: control }]
