/**
 * What a session costs, read from the bundled CLI: a two-step tool turn on `anthropic:` against a
 * local server that reports cache reads and writes; `sessions --json` and `tiller log` bill it with
 * tiller's table, `--prices FILE` and `.tiller/settings.json` override it, a model without a price
 * shows its tokens and says so. The first request carries the prompt-cache breakpoints.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import * as AnthropicServer from "../layers/fake/AnthropicServer.js"
import { frame } from "../layers/fake/ResponsesServer.js"
import { tempDir, tiller } from "./harness.js"
import * as ProviderServer from "./ProviderServer.js"

const TIMEOUT = 180_000
const KEY = "sk-cli-cost-0123456789"

const sse = (turn: AnthropicServer.Turn) =>
  ProviderServer.sse(AnthropicServer.messageEvents(turn).map(([event, data]) => frame(event, data)).join(""))

/** Step 1 writes 1,500 tokens to the cache; step 2 reads them back and writes 50 more. */
const REPLIES = [
  sse({
    toolUses: [{ id: "toolu_1", name: "clock", partialJson: ["{}"] }],
    usage: { input: 20, output: 12, cacheWrite: 1500 }
  }),
  sse({ text: ["It is noon."], usage: { input: 30, output: 8, cached: 1500, cacheWrite: 50 } })
]

/** claude-sonnet-4-5: input 3, output 15, cache read 0.3, cache write 3.75 USD per million tokens. */
const EXPECTED_USD = (20 * 3 + 1500 * 3.75 + 12 * 15 + 30 * 3 + 1500 * 0.3 + 50 * 3.75 + 8 * 15) / 1e6

const runSession = (dir: string, model: string, provider: "anthropic" | "openai-compatible", url: string) =>
  tiller(dir, [
    "--db",
    path.join(dir, "t.db"),
    "--model",
    `${provider}:${model}`,
    "run",
    "What time is it?",
    "--session",
    "s"
  ], {
    env: provider === "anthropic"
      ? { CI: "true", ANTHROPIC_API_KEY: KEY, ANTHROPIC_BASE_URL: url }
      : { CI: "true", TILLER_API_KEY: KEY, TILLER_BASE_URL: `${url}/v1` }
  })

const sessionsJson = (dir: string, extra: ReadonlyArray<string> = []) =>
  Effect.map(
    tiller(dir, ["--db", path.join(dir, "t.db"), ...extra, "sessions", "--json"]),
    (out) => JSON.parse(out.stdout)[0]
  )

describe("cost in the CLI", () => {
  it.scopedLive(
    "anthropic: sessions --json and tiller log bill cache reads and writes at their prices; --prices and settings override",
    () =>
      Effect.gen(function*() {
        const dir = yield* tempDir
        const server = yield* ProviderServer.listen(REPLIES)
        const ran = yield* runSession(dir, "claude-sonnet-4-5-20250929", "anthropic", server.url)
        expect(ran.code).toBe(0)
        expect(ran.stdout).toContain("It is noon.")
        const received = yield* server.requests
        expect(received).toHaveLength(2)
        expect(received[0]!.text).toContain("\"cache_control\":{\"type\":\"ephemeral\"}")

        const session = yield* sessionsJson(dir)
        expect(session.usage).toStrictEqual({
          inputTokens: 20 + 1500 + 30 + 1500 + 50,
          cacheReadTokens: 1500,
          cacheWriteTokens: 1550,
          outputTokens: 20
        })
        expect(session.cost.usd).toBeCloseTo(EXPECTED_USD, 9)
        expect(session.cost.unpriced).toStrictEqual([])

        const log = (yield* tiller(dir, ["--db", path.join(dir, "t.db"), "log", "s"])).stdout
        expect(log).toContain("1,520 in (1,500 cache write) / 12 out tokens, $0.0059")
        expect(log).toMatch(
          /turn 1 +end: completed · 3,100 in \(1,500 cache read, 1,550 cache write\) \/ 20 out tokens · \$0\.0067\n/
        )
        expect(log).toContain(
          `total: 2 model responses · 3,100 in (1,500 cache read, 1,550 cache write) / 20 out tokens · $${
            EXPECTED_USD.toFixed(4)
          }`
        )

        // A prices file overrides the table; settings do too, the file winning over them.
        fs.writeFileSync(
          path.join(dir, "prices.json"),
          JSON.stringify({ "claude-sonnet-4-5": { input: 1, output: 1 } })
        )
        expect((yield* sessionsJson(dir, ["--prices", path.join(dir, "prices.json")])).cost.usd).toBeCloseTo(
          (3100 + 20) / 1e6,
          9
        )
        fs.mkdirSync(path.join(dir, ".tiller"), { recursive: true })
        fs.writeFileSync(
          path.join(dir, ".tiller", "settings.json"),
          JSON.stringify({ prices: { "claude-sonnet-4-5-20250929": { input: 2, output: 2 } } })
        )
        expect((yield* sessionsJson(dir)).cost.usd).toBeCloseTo((3100 + 20) * 2 / 1e6, 9)
        expect((yield* sessionsJson(dir, ["--prices", path.join(dir, "prices.json")])).cost.usd).toBeCloseTo(
          (3100 + 20) * 2 / 1e6,
          9
        )
        fs.writeFileSync(path.join(dir, "bad.json"), JSON.stringify({ "claude-sonnet-4-5": { input: "cheap" } }))
        const bad = yield* tiller(dir, [
          "--db",
          path.join(dir, "t.db"),
          "--prices",
          path.join(dir, "bad.json"),
          "sessions",
          "--json"
        ])
        expect(bad.code).toBe(1)
        expect(bad.stderr).toContain("invalid prices in")
      }),
    TIMEOUT
  )

  it.scopedLive("a model without a price: tokens only, and it says so", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const chat = (body: Record<string, unknown>) => `data: ${JSON.stringify(body)}\n\n`
      const server = yield* ProviderServer.listen([
        ProviderServer.sse(
          chat({
            id: "c",
            object: "chat.completion.chunk",
            created: 1,
            model: "m",
            choices: [{ index: 0, delta: { role: "assistant", content: "Hi." }, finish_reason: "stop" }]
          }) +
            chat({
              id: "c",
              object: "chat.completion.chunk",
              created: 1,
              model: "m",
              choices: [],
              usage: {
                prompt_tokens: 40,
                completion_tokens: 3,
                total_tokens: 43,
                prompt_tokens_details: { cached_tokens: 32 }
              }
            }) +
            "data: [DONE]\n\n"
        )
      ])
      expect((yield* runSession(dir, "llama-local", "openai-compatible", server.url)).code).toBe(0)
      const session = yield* sessionsJson(dir)
      expect(session.usage).toStrictEqual({
        inputTokens: 40,
        cacheReadTokens: 32,
        cacheWriteTokens: 0,
        outputTokens: 3
      })
      expect(session.cost).toStrictEqual({
        usd: null,
        unpriced: ["llama-local"],
        text: "no price for model llama-local"
      })
      const log = (yield* tiller(dir, ["--db", path.join(dir, "t.db"), "log", "s"])).stdout
      expect(log).toContain(
        "total: 1 model response · 40 in (32 cache read) / 3 out tokens · no price for model llama-local"
      )
    }), TIMEOUT)
})
