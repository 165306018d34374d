/**
 * Prompt caching figures (`npm run bench -- --only=caching`): a recorded-style 20-step tool session
 * (a coding agent reading files: a 2 KB system prompt, three tools, 19 steps that each read a file
 * of 1.5-4.5 KB, then an answer) replayed through each adapter and the real agent loop against a
 * local server that bills every request as its provider would from the request's bytes:
 *
 * - Anthropic: a prefix is cached only up to a `cache_control` breakpoint (marks left out of the
 *   comparison) and only from 1,024 tokens; a request reads the longest prefix an earlier request
 *   wrote at one of its breakpoints, writes up to its last breakpoint, and pays input for the rest.
 * - OpenAI Responses and a Chat Completions host (DeepSeek-style): the longest prefix shared with an
 *   earlier request, from 1,024 tokens, in steps of 128 tokens, is read from the cache; no writes.
 *
 * Tokens are estimated as characters / 4. The cost is the fold of `domain/Cost` over the session's
 * log, at tiller's prices for claude-sonnet-4-5, gpt-4.1 and deepseek-chat, beside the same usage
 * billed without any caching; Anthropic also runs with `promptCaching: false`.
 *
 * @since 0.1.0
 */
import * as FetchHttpClient from "@effect/platform/FetchHttpClient"
import type * as HttpClient from "@effect/platform/HttpClient"
import { Effect, Layer, Schema } from "effect"
import type { Model as ModelTag } from "../src/index.js"
import {
  Agent,
  AnthropicModel,
  Cost,
  Driver,
  OpenAiCompatibleModel,
  OpenAiModel,
  Prices,
  SessionId,
  SessionLog,
  SessionStore,
  Tool,
  Tools,
  userMessage
} from "../src/index.js"
import { DEFAULT_TIMEOUTS } from "../src/internal/providers/ProviderTimeouts.js"
import * as AnthropicServer from "../test/layers/fake/AnthropicServer.js"
import * as Chat from "../test/layers/fake/ChatCompletionsServer.js"
import type { ReceivedRequest } from "../test/layers/fake/HttpServer.js"
import { serve } from "../test/layers/fake/HttpServer.js"
import { frame, responseEvents } from "../test/layers/fake/ResponsesServer.js"
import { table } from "./util.js"

const STEPS = 20
const MIN_CACHED = 1024
const tokensOf = (chars: number) => Math.ceil(chars / 4)

const SYSTEM = [
  "You are a coding agent working in a TypeScript repository. Read before you change anything; keep",
  "changes small; explain what you found. "
].join(" ").repeat(14)

/** A deterministic file of 1.5-4.5 KB, as a read_file result looks. */
const fileText = (i: number) =>
  Array.from(
    { length: 40 + ((i * 37) % 80) },
    (_, line) => `// src/module${i}.ts:${line + 1}  export const value${line} = compute(${i}, ${line})`
  )
    .join("\n")

const readFile = Tool.make("read_file", {
  description: "Reads a text file of the repository and returns its content with line numbers.",
  parameters: Schema.Struct({ path: Schema.String }),
  mode: "parallel",
  execute: ({ path }) => Effect.succeed(fileText(Number(path.replace(/\D/g, "")) || 0))
})
const listDir = Tool.make("list_dir", {
  description: "Lists the entries of a directory of the repository.",
  parameters: Schema.Struct({ path: Schema.String }),
  mode: "parallel",
  execute: () => Effect.succeed("src/\ntest/\npackage.json")
})
const clock = Tool.make("clock", {
  description: "Tells the current time.",
  parameters: Schema.Struct({}),
  mode: "parallel",
  execute: () => Effect.succeed("12:00")
})

/** What the billing server says about one request: uncached input, read, written (tokens). */
interface Billed {
  readonly input: number
  readonly read: number
  readonly write: number
}

const MARK = /,"cache_control":\{"type":"ephemeral"(?:,"ttl":"1h")?\}/g

/** Anthropic's cache: prefixes written at breakpoints, by their text without marks. */
const anthropicBilling = () => {
  const written = new Set<string>()
  return (text: string): Billed => {
    const points: Array<number> = []
    let stripped = ""
    let last = 0
    for (const match of text.matchAll(MARK)) {
      stripped += text.slice(last, match.index)
      points.push(stripped.length)
      last = match.index + match[0].length
    }
    stripped += text.slice(last)
    const total = tokensOf(stripped.length)
    const eligible = points.filter((p) => tokensOf(p) >= MIN_CACHED)
    let read = 0
    for (const p of eligible) if (written.has(stripped.slice(0, p))) read = Math.max(read, p)
    const lastPoint = eligible.length === 0 ? 0 : Math.max(...eligible)
    for (const p of eligible) written.add(stripped.slice(0, p))
    const readTokens = tokensOf(read)
    const writeTokens = lastPoint > read ? tokensOf(lastPoint) - readTokens : 0
    return { input: total - readTokens - writeTokens, read: readTokens, write: writeTokens }
  }
}

/** Automatic prefix caching (OpenAI, DeepSeek): the longest prefix shared with an earlier request. */
const automaticBilling = () => {
  const seen: Array<string> = []
  return (text: string): Billed => {
    let common = 0
    for (const earlier of seen) {
      let i = 0
      const n = Math.min(earlier.length, text.length)
      while (i < n && earlier.charCodeAt(i) === text.charCodeAt(i)) i++
      common = Math.max(common, i)
    }
    seen.push(text)
    const shared = tokensOf(common)
    const read = shared < MIN_CACHED ? 0 : Math.floor(shared / 128) * 128
    return { input: tokensOf(text.length) - read, read, write: 0 }
  }
}

/** The model's move at step `n` (from 0): read a file, now and then list a directory, answer last. */
const move = (n: number) =>
  n === STEPS - 1
    ? { text: "The value is computed in module 7; the rest only re-export it." }
    : n % 6 === 3
    ? { call: { id: `call_${n}`, name: "list_dir", args: `{"path":"src/dir${n}"}` } }
    : { call: { id: `call_${n}`, name: "read_file", args: `{"path":"src/module${n}.ts"}` } }

interface Wire {
  readonly label: string
  readonly provider: string
  readonly model: string
  readonly billing: () => (text: string) => Billed
  readonly reply: (n: number, billed: Billed) => string
  readonly layer: (url: string) => Layer.Layer<ModelTag, unknown, HttpClient.HttpClient>
}

const OUTPUT = 60

const WIRES: ReadonlyArray<Wire> = [
  {
    label: "Anthropic Messages (claude-sonnet-4-5), breakpoints",
    provider: "anthropic",
    model: "claude-sonnet-4-5",
    billing: anthropicBilling,
    reply: (n, b) => anthropicReply(n, b),
    layer: (url) => AnthropicModel.layer({ model: "claude-sonnet-4-5", baseUrl: url, timeouts: DEFAULT_TIMEOUTS })
  },
  {
    label: "Anthropic Messages (claude-sonnet-4-5), promptCaching: false",
    provider: "anthropic",
    model: "claude-sonnet-4-5",
    billing: anthropicBilling,
    reply: (n, b) => anthropicReply(n, b),
    layer: (url) =>
      AnthropicModel.layer({
        model: "claude-sonnet-4-5",
        baseUrl: url,
        timeouts: DEFAULT_TIMEOUTS,
        promptCaching: false
      })
  },
  {
    label: "OpenAI Responses (gpt-4.1), prompt_cache_key",
    provider: "openai",
    model: "gpt-4.1",
    billing: automaticBilling,
    reply: (n, b) => {
      const m = move(n)
      return responseEvents({
        ...(m.text === undefined ? {} : { text: [m.text] }),
        ...(m.call === undefined
          ? {}
          : { toolCalls: [{ callId: m.call.id, name: m.call.name, arguments: [m.call.args] }] }),
        usage: { input: b.input + b.read, output: OUTPUT, cached: b.read }
      }, { id: `resp_${n}` }).map((event) => frame(event.type as string, event)).join("")
    },
    layer: (url) => OpenAiModel.layer({ model: "gpt-4.1", baseUrl: `${url}/v1`, timeouts: DEFAULT_TIMEOUTS })
  },
  {
    label: "Chat Completions host (deepseek-chat)",
    provider: "openai-compatible",
    model: "deepseek-chat",
    billing: automaticBilling,
    reply: (n, b) => {
      const m = move(n)
      return [
        Chat.event(Chat.chunk({ role: "assistant", content: m.text ?? "" })),
        ...(m.call === undefined
          ? []
          : [
            Chat.event(
              Chat.chunk({
                tool_calls: [Chat.toolCall(0, { id: m.call.id, name: m.call.name, arguments: m.call.args })]
              })
            )
          ]),
        Chat.event(Chat.chunk({}, m.call === undefined ? "stop" : "tool_calls")),
        Chat.event(Chat.usageChunk({
          prompt_tokens: b.input + b.read,
          completion_tokens: OUTPUT,
          total_tokens: b.input + b.read + OUTPUT,
          prompt_tokens_details: { cached_tokens: b.read }
        })),
        Chat.DONE
      ].join("")
    },
    layer: (url) => OpenAiCompatibleModel.layer({ model: "deepseek-chat", baseUrl: `${url}/v1` })
  }
]

const anthropicReply = (n: number, b: Billed): string => {
  const m = move(n)
  return AnthropicServer.messageEvents({
    ...(m.text === undefined ? {} : { text: [m.text] }),
    ...(m.call === undefined ? {} : { toolUses: [{ id: m.call.id, name: m.call.name, partialJson: [m.call.args] }] }),
    usage: { input: b.input, output: OUTPUT, cached: b.read, cacheWrite: b.write }
  }, { id: `msg_${n}` }).map(([event, data]) => frame(event, data)).join("")
}

/**
 * One adapter's figures: requests, input tokens, the share billed at the cache-read rate, tokens
 * written to the cache, and the cost with and without caching (US dollars).
 *
 * @since 0.1.0
 * @category models
 */
export interface CachingFigures {
  readonly label: string
  readonly requests: number
  readonly inputTokens: number
  readonly cacheReadTokens: number
  readonly cacheWriteTokens: number
  readonly usd: number
  readonly uncachedUsd: number
}

const runWire = (wire: Wire) =>
  Effect.scoped(Effect.gen(function*() {
    const bill = wire.billing()
    const server = yield* serve((n: number, received: ReceivedRequest, _request, response) => {
      response.writeHead(200, { "content-type": "text/event-stream" }).end(wire.reply(n, bill(received.text)))
    })
    const agent = Agent.layer({
      sessionId: SessionId.make("bench-caching"),
      model: { provider: wire.provider, model: wire.model },
      system: SYSTEM
    }).pipe(
      Layer.provideMerge(Layer.mergeAll(
        SessionStore.layerMemory,
        wire.layer(server.url).pipe(Layer.provide(FetchHttpClient.layer)),
        Tools.layer({ tools: [readFile, listDir, clock] })
      ))
    )
    const events = yield* Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(userMessage({ id: "task", text: "Find where the value is computed and explain it." }))
      yield* driver.whenIdle
      return yield* Effect.flatMap(SessionLog, (log) => log.events)
    }).pipe(Effect.provide(agent))
    const prices = Prices.PRICES
    const total = Cost.sessionCost(events, prices).total
    const price = Prices.priceOf(prices, wire.model)!
    let uncachedUsd = 0
    for (const e of events) {
      if (e.type !== "assistant/message") continue
      const data = e.data as { readonly usage?: Parameters<typeof Cost.uncachedUsdOf>[0] }
      if (data.usage !== undefined) uncachedUsd += Cost.uncachedUsdOf(data.usage, wire.provider, price)
    }
    return {
      label: wire.label,
      requests: (yield* server.requests).length,
      inputTokens: total.inputTokens,
      cacheReadTokens: total.cacheReadTokens,
      cacheWriteTokens: total.cacheWriteTokens,
      usd: total.usd,
      uncachedUsd
    } satisfies CachingFigures
  }))

/**
 * Runs the 20-step session through every adapter.
 *
 * @since 0.1.0
 * @category benchmarks
 */
export const caching = (): Effect.Effect<ReadonlyArray<CachingFigures>, unknown> => Effect.forEach(WIRES, runWire)

const pct = (part: number, whole: number) => whole === 0 ? "-" : `${(100 * part / whole).toFixed(1)}%`
const usd = (value: number) => `$${value.toFixed(4)}`

/**
 * The caching section of the report.
 *
 * @since 0.1.0
 * @category formatting
 */
export const cachingReport = (figures: ReadonlyArray<CachingFigures>): ReadonlyArray<string> => [
  "## Prompt caching: a 20-step tool session through each adapter",
  "",
  `Each adapter runs the same session through the agent loop against a local server that bills every request as its`,
  `provider would from the request's bytes (tokens = characters / 4; cache from ${MIN_CACHED} tokens). Prices: tiller's table`,
  `(as of ${Prices.PRICES_AS_OF}). "Billed at cache rate" is the share of all input tokens read from the cache.`,
  "",
  table(
    [
      "adapter",
      "requests",
      "input tokens",
      "billed at cache rate",
      "cache writes",
      "cost",
      "cost without caching",
      "saving"
    ],
    figures.map((f) => [
      f.label,
      String(f.requests),
      f.inputTokens.toLocaleString("en-US"),
      pct(f.cacheReadTokens, f.inputTokens),
      f.cacheWriteTokens.toLocaleString("en-US"),
      usd(f.usd),
      usd(f.uncachedUsd),
      pct(f.uncachedUsd - f.usd, f.uncachedUsd)
    ]),
    [false, true, true, true, true, true, true, true]
  ),
  ""
]
