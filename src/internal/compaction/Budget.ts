/**
 * The context budget: how large a model's window is, and how much of it the session's derived
 * history uses now (issue 28 item 1).
 *
 * Use is anchored on what the provider reported: the last `assistant/message` carrying `usage`
 * gives the prompt's tokens plus the answer's. Everything that changes the surface after it is
 * estimated (characters / 4): an appended node adds its estimate, a replacement adds its own and
 * takes away the estimates of the nodes it shadows. Before any usage is reported, the whole surface
 * and the last request header (system prompt and tool schemas) are estimated.
 *
 * The `compaction/` room: what keeps a long session inside its model's window. The budget (this
 * module) measures use; pruning (`Prune`) and summaries (`Summary`) shrink the derived history; the
 * tool-result cap (`ToolResultCap`) bounds one result; `Recall` and `RecallCall` bring pruned
 * content back on request.
 *
 * @since 0.1.0
 */
import type { SessionEvent, SurfaceOp } from "../../domain/Event.js"
import { messageOf } from "../../domain/Surface.js"
import type { Message, RequestHeader, Usage } from "../../domain/Values.js"

/**
 * How much of a model's context window the session uses.
 *
 * @since 0.1.0
 * @category models
 */
export interface ContextUsage {
  /** Tokens in use: the last reported prompt and answer plus an estimate of what came after. */
  readonly used: number
  /** The model's context window in tokens. */
  readonly window: number
  /** `used / window` (may exceed 1). */
  readonly fraction: number
}

/**
 * The window assumed for a model that the table does not know.
 *
 * @since 0.1.0
 * @category constants
 */
export const DEFAULT_CONTEXT_WINDOW = 32_768

// Ordered: the first pattern that matches the model's own name (after any `vendor/` prefix) wins.
// Conservative figures: where a family has members with smaller windows, the smaller one.
const WINDOWS: ReadonlyArray<readonly [RegExp, number]> = [
  [/claude/, 200_000],
  [/^gpt-4\.1/, 1_047_576],
  [/^gpt-4o/, 128_000],
  [/^gpt-5/, 272_000],
  [/^o[134](-|$)/, 200_000],
  [/deepseek/, 128_000],
  [/llama/, 128_000],
  [/qwen/, 32_768],
  [/gemini/, 1_000_000]
]

/**
 * The context window of a model from the built-in table (Anthropic `claude-*`, OpenAI `gpt-4.1*`,
 * `gpt-4o*`, `gpt-5*`, `o1`/`o3`/`o4*`, `deepseek*`, `llama*`, `qwen*`, `gemini*`), else
 * {@link DEFAULT_CONTEXT_WINDOW}.
 *
 * @since 0.1.0
 * @category getters
 */
export const contextWindowOf = (model: string | undefined): number => {
  if (model === undefined) return DEFAULT_CONTEXT_WINDOW
  const lower = model.toLowerCase()
  const name = lower.slice(lower.lastIndexOf("/") + 1)
  for (const [pattern, window] of WINDOWS) if (pattern.test(name)) return window
  return DEFAULT_CONTEXT_WINDOW
}

/** What an image is counted as, in tokens (providers charge roughly 1,000-1,600 for a typical one). */
const IMAGE_TOKENS = 1_200

/**
 * Tokens of a text by the characters / 4 estimate.
 *
 * @since 0.1.0
 * @category getters
 */
export const tokensOfText = (characters: number): number => Math.ceil(characters / 4)

/**
 * The estimated tokens of one message: its texts, tool calls and results by characters / 4, and a
 * fixed amount per image.
 *
 * @since 0.1.0
 * @category getters
 */
export const tokensOfMessage = (message: Message): number => {
  let characters = 0
  let images = 0
  for (const block of message.content) {
    switch (block.type) {
      case "text":
      case "reasoning":
        characters += block.text.length
        break
      case "image":
        images += 1
        break
      case "tool-call":
        characters += block.name.length + block.arguments.length
        break
      case "tool-result":
        for (const inner of block.content) {
          if (inner.type === "text") characters += inner.text.length
          else images += 1
        }
        break
    }
  }
  // A few tokens of framing per message.
  return tokensOfText(characters) + images * IMAGE_TOKENS + 4
}

/**
 * The estimated tokens of a request header: its system prompt and tool schemas.
 *
 * @since 0.1.0
 * @category getters
 */
export const tokensOfHeader = (header: RequestHeader): number =>
  tokensOfText((header.system?.length ?? 0) + (header.tools.length === 0 ? 0 : JSON.stringify(header.tools).length))

/**
 * The prompt size a usage reports. Anthropic counts cached input apart from `inputTokens`; OpenAI
 * and compatible hosts include it.
 *
 * @since 0.1.0
 * @category getters
 */
export const promptTokensOf = (usage: Usage, provider: string): number =>
  /anthropic|claude/i.test(provider)
    ? usage.inputTokens + (usage.cacheReadTokens ?? 0) + (usage.cacheWriteTokens ?? 0)
    : usage.inputTokens

/**
 * The running budget of one log: a mirror of its surface with each node's estimate, the figure in
 * use, and the next seq to read. Mutable; owned by one `Budget` reader.
 *
 * @since 0.1.0
 * @category models
 */
export interface BudgetState {
  next: number
  used: number
  reported: boolean
  headerTokens: number
  model: string | undefined
  header: RequestHeader | undefined
  readonly surface: Array<number>
  /** The positions of `surface`'s seqs, built when a replacement first needs them, dropped after a range. */
  positions: Map<number, number> | undefined
  readonly estimates: Map<number, number>
}

/**
 * An empty budget, before the log's first event.
 *
 * @since 0.1.0
 * @category constructors
 */
export const emptyBudget = (): BudgetState => ({
  next: 0,
  used: 0,
  reported: false,
  headerTokens: 0,
  model: undefined,
  header: undefined,
  surface: [],
  positions: undefined,
  estimates: new Map()
})

/**
 * Reads one event into the budget (events must come in seq order, each once).
 *
 * @since 0.1.0
 * @category combinators
 */
export const advance = (state: BudgetState, event: SessionEvent): void => {
  state.next = event.seq + 1
  if (event.type === "request/header") {
    const header = (event.data as { readonly header: RequestHeader }).header
    state.model = header.model
    state.header = header
    const tokens = tokensOfHeader(header)
    if (!state.reported) state.used += tokens - state.headerTokens
    state.headerTokens = tokens
    return
  }
  const op = (event as { readonly surfaceOp?: SurfaceOp }).surfaceOp
  if (op === undefined) return
  const message = messageOf(event)
  const estimate = message === undefined ? 0 : tokensOfMessage(message)
  if (op === "append") {
    state.surface.push(event.seq)
    state.positions?.set(event.seq, state.surface.length - 1)
    state.estimates.set(event.seq, estimate)
    const data = event.data as {
      readonly usage?: Usage
      readonly message?: { readonly source?: { readonly provider?: unknown } }
    }
    if (event.type === "assistant/message" && data.usage !== undefined) {
      const provider = typeof data.message?.source?.provider === "string" ? data.message.source.provider : ""
      state.used = promptTokensOf(data.usage, `${provider} ${state.model ?? ""}`) + data.usage.outputTokens
      state.reported = true
    } else {
      state.used += estimate
    }
    return
  }
  // Positions found in O(1): a prune's run of single-node replacements is linear, not O(k·n).
  const positions = state.positions ??= new Map(state.surface.map((seq, i) => [seq, i]))
  const from = positions.get(op.start) ?? -1
  const to = positions.get(op.end) ?? -1
  // The log accepted the event, so the range is valid; a mirror out of step changes nothing.
  if (from < 0 || to < from) return
  const shadowed = state.surface.splice(from, to - from + 1, event.seq)
  if (from === to) {
    positions.delete(op.start)
    positions.set(event.seq, from)
  } else {
    state.positions = undefined
  }
  let removed = 0
  for (const seq of shadowed) {
    removed += state.estimates.get(seq) ?? 0
    state.estimates.delete(seq)
  }
  state.estimates.set(event.seq, estimate)
  state.used = Math.max(0, state.used + estimate - removed)
}

/**
 * The usage figures of a budget for a window.
 *
 * @since 0.1.0
 * @category getters
 */
export const usageOf = (state: BudgetState, window: number): ContextUsage => ({
  used: state.used,
  window,
  fraction: window > 0 ? state.used / window : 1
})
