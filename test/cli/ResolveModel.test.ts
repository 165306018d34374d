import { describe, expect, it } from "@effect/vitest"
import { ConfigProvider, Effect, Exit, Stream } from "effect"
import { CliError } from "../../src/cli/CliError.js"
import { resolveModel } from "../../src/cli/Environment.js"
import { SessionId } from "../../src/domain/Ids.js"
import { Model } from "../../src/services/Model.js"
import * as ResponsesServer from "../layers/fake/ResponsesServer.js"
import { jsonLines, tempDir, tiller } from "./harness.js"

const KEY = "sk-resolve-0123456789-secret"

/** Resolves `name` with exactly the given environment. */
const resolve = (name: string, env: Record<string, string> = {}) =>
  resolveModel(name).pipe(Effect.withConfigProvider(ConfigProvider.fromMap(new Map(Object.entries(env)))))

/** The refusal's sentence, failing the test if `name` resolves. */
const refusal = (name: string, env: Record<string, string> = {}) =>
  Effect.map(Effect.flip(resolve(name, env)), (error) => {
    expect(error).toBeInstanceOf(CliError)
    expect(error.message).not.toContain(KEY)
    return error.message
  })

describe("resolveModel", () => {
  it.effect("demo needs no configuration", () =>
    Effect.gen(function*() {
      expect((yield* resolve("demo")).header).toEqual({ provider: "demo", model: "demo" })
    }))

  it.effect("PROVIDER:MODEL records the provider and the model name in the request header", () =>
    Effect.gen(function*() {
      expect((yield* resolve("openai:gpt-4.1-mini", { OPENAI_API_KEY: KEY })).header)
        .toEqual({ provider: "openai", model: "gpt-4.1-mini" })
      expect((yield* resolve("anthropic:claude-sonnet-4-5", { ANTHROPIC_API_KEY: KEY })).header)
        .toEqual({ provider: "anthropic", model: "claude-sonnet-4-5" })
      expect((yield* resolve("openai-compatible:llama3.1:8b", { TILLER_BASE_URL: "http://127.0.0.1:11434/v1" })).header)
        .toEqual({ provider: "openai-compatible", model: "llama3.1:8b" })
    }))

  it.effect("a missing or empty API key is refused, naming the variable", () =>
    Effect.gen(function*() {
      expect(yield* refusal("openai:gpt-4.1")).toBe("model \"openai:gpt-4.1\" needs an API key: set OPENAI_API_KEY")
      expect(yield* refusal("openai:gpt-4.1", { OPENAI_API_KEY: "" })).toBe(
        "model \"openai:gpt-4.1\" needs an API key: set OPENAI_API_KEY"
      )
      expect(yield* refusal("anthropic:claude", { OPENAI_API_KEY: KEY })).toBe(
        "model \"anthropic:claude\" needs an API key: set ANTHROPIC_API_KEY"
      )
    }))

  it.effect("openai-compatible needs TILLER_BASE_URL; its key is optional", () =>
    Effect.gen(function*() {
      expect(yield* refusal("openai-compatible:llama", { TILLER_API_KEY: KEY })).toBe(
        "model \"openai-compatible:llama\" needs the server's base URL: set TILLER_BASE_URL (for example http://127.0.0.1:8080/v1)"
      )
      const exit = yield* Effect.exit(
        resolve("openai-compatible:llama", { TILLER_BASE_URL: "http://127.0.0.1:8080/v1" })
      )
      expect(Exit.isSuccess(exit)).toBe(true)
    }))

  it.effect("a base URL that is not http(s) is refused, naming the variable; the key is never shown", () =>
    Effect.gen(function*() {
      expect(yield* refusal("openai:gpt-4.1", { OPENAI_API_KEY: KEY, OPENAI_BASE_URL: "localhost:8080" })).toBe(
        "OPENAI_BASE_URL is not an http(s) URL: \"localhost:8080\""
      )
      expect(yield* refusal("anthropic:claude", { ANTHROPIC_API_KEY: KEY, ANTHROPIC_BASE_URL: "ftp://proxy" })).toBe(
        "ANTHROPIC_BASE_URL is not an http(s) URL: \"ftp://proxy\""
      )
      expect(yield* refusal("openai-compatible:llama", { TILLER_API_KEY: KEY, TILLER_BASE_URL: "not a url" })).toBe(
        "TILLER_BASE_URL is not an http(s) URL: \"not a url\""
      )
    }))

  it.effect("an unknown name or prefix, or a prefix without a model, is refused with what is accepted", () =>
    Effect.gen(function*() {
      const accepted = "\"demo\", \"openai:MODEL\", \"anthropic:MODEL\", \"openai-compatible:MODEL\""
      expect(yield* refusal("gpt-4.1")).toBe(`unknown model "gpt-4.1": use one of ${accepted}`)
      expect(yield* refusal("gemini:pro", { OPENAI_API_KEY: KEY })).toBe(
        `unknown model "gemini:pro": use one of ${accepted}`
      )
      expect(yield* refusal("constructor:x")).toBe(`unknown model "constructor:x": use one of ${accepted}`)
      expect(yield* refusal("openai:", { OPENAI_API_KEY: KEY })).toBe(
        "model \"openai:\" names no model: write openai:MODEL, for example openai:gpt-4.1-mini"
      )
    }))
})

/** Streams one request through the resolved model against a fake server; returns what it received. */
const roundTrip = (name: string, env: (url: string) => Record<string, string>, reply: ResponsesServer.Reply) =>
  Effect.gen(function*() {
    const server = yield* ResponsesServer.listen([reply])
    const resolved = yield* resolve(name, env(server.url))
    const request = {
      sessionId: SessionId.make("s"),
      turn: 1,
      step: 1,
      attempt: 1,
      provider: resolved.header.provider,
      model: resolved.header.model,
      tools: [],
      messages: []
    }
    yield* Effect.flatMap(Model, (model) => Stream.runDrain(Stream.either(model.stream(request)))).pipe(
      Effect.provide(resolved.layer)
    )
    return yield* server.requests
  })

describe("resolveModel wiring", () => {
  it.scopedLive("openai: key from OPENAI_API_KEY, URL from OPENAI_BASE_URL", () =>
    Effect.gen(function*() {
      const [request] = yield* roundTrip(
        "openai:gpt-test",
        (url) => ({ OPENAI_API_KEY: KEY, OPENAI_BASE_URL: `${url}/v1/` }),
        ResponsesServer.streamed({ text: ["hi"], usage: { input: 1, output: 1 } })
      )
      expect(request!.path).toBe("/v1/responses")
      expect(request!.headers.authorization).toBe(`Bearer ${KEY}`)
      expect(request!.body.model).toBe("gpt-test")
    }))

  it.scopedLive("anthropic: key from ANTHROPIC_API_KEY, URL from ANTHROPIC_BASE_URL", () =>
    Effect.gen(function*() {
      const [request] = yield* roundTrip(
        "anthropic:claude-test",
        (url) => ({ ANTHROPIC_API_KEY: KEY, ANTHROPIC_BASE_URL: url }),
        ResponsesServer.status(400, { type: "error", error: { type: "invalid_request_error", message: "no" } })
      )
      expect(request!.path).toBe("/v1/messages")
      expect(request!.headers["x-api-key"]).toBe(KEY)
      expect(request!.body.model).toBe("claude-test")
    }))

  it.scopedLive("openai-compatible: URL from TILLER_BASE_URL, key from TILLER_API_KEY", () =>
    Effect.gen(function*() {
      const [request] = yield* roundTrip(
        "openai-compatible:llama3.1",
        (url) => ({ TILLER_API_KEY: KEY, TILLER_BASE_URL: `${url}/v1` }),
        ResponsesServer.status(400, { error: { message: "no" } })
      )
      expect(request!.path).toBe("/v1/chat/completions")
      expect(request!.headers.authorization).toBe(`Bearer ${KEY}`)
      expect(request!.body.model).toBe("llama3.1")
    }))
})

describe("tiller run with a provider model", () => {
  const TIMEOUT = 120_000

  it.scopedLive(
    "answers through the provider; neither the output nor the logged events contain the key",
    () =>
      Effect.gen(function*() {
        const dir = yield* tempDir
        const server = yield* ResponsesServer.listen([
          ResponsesServer.streamed({ text: ["Hello from ", "the server."], usage: { input: 3, output: 4 } }),
          ResponsesServer.status(401, { error: { message: `Incorrect API key provided: ${KEY}` } })
        ])
        const env = { OPENAI_API_KEY: KEY, OPENAI_BASE_URL: `${server.url}/v1` }
        const answered = yield* tiller(dir, ["--model", "openai:gpt-test", "run", "hi", "--json", "--session", "s"], {
          env
        })
        expect(answered.code).toBe(0)
        const lines = jsonLines(answered.stdout)
        expect(lines.filter((line) => line.type === "request/header").map((line) => line.data.header))
          .toMatchObject([{ provider: "openai", model: "gpt-test" }])
        expect(lines.filter((line) => line.type === "assistant/message").map((line) => line.data.message.content))
          .toEqual([[{ type: "text", text: "Hello from the server." }]])

        const refused = yield* tiller(dir, ["--model", "openai:gpt-test", "run", "again", "--session", "s"], { env })
        expect(refused.code).toBe(1)
        expect(refused.stdout + refused.stderr).toContain("[redacted]")

        const log = yield* tiller(dir, ["log", "s", "--json"])
        expect(log.code).toBe(0)
        for (const output of [answered, refused, log]) expect(output.stdout + output.stderr).not.toContain(KEY)
        expect((yield* server.requests).map((r) => r.headers.authorization)).toEqual([`Bearer ${KEY}`, `Bearer ${KEY}`])
      }),
    TIMEOUT
  )
})
