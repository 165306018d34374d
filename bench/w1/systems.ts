/**
 * The systems of the W1 comparison: tiller through the smallest public custom `Model` and through
 * its Chat Completions adapter (each on its two stores), the four peer agent loops each through the
 * smallest model its public API allows (the like-for-like rows), and the test doubles measured
 * before (tiller's `ScriptedModel`, pi-ai's faux provider, the AI SDK's `MockLanguageModelV4`) as
 * extra labelled rows, each with the runner that drives it in its own process and a sentence on
 * how it is driven.
 *
 * @since 0.1.0
 */

/**
 * One system of the comparison. `runner` is a path relative to the repository root: the tiller
 * runner's bundle for tiller, a plain ESM file under `bench/w1/peers/` for a peer; `args` come
 * before the step counts.
 *
 * @since 0.1.0
 * @category models
 */
export interface W1System {
  readonly id: string
  readonly label: string
  readonly tiller: boolean
  /**
   * Driven through a framework's own test double rather than the smallest model its public API
   * allows: reported beside the others, but no ratio is taken against it or judged on it.
   */
  readonly testDouble: boolean
  readonly runner: string
  readonly args: ReadonlyArray<string>
  /** The package and version measured. */
  readonly pkg: string
  /** How the system is driven: its loop entry point and its model. */
  readonly how: string
}

/**
 * The models the tiller runner drives W1 through.
 *
 * @since 0.1.0
 * @category models
 */
export type TillerModel = "custom" | "scripted" | "chat"

/**
 * The stores tiller runs W1 on.
 *
 * @since 0.1.0
 * @category models
 */
export type TillerStore = "memory" | "sqlite"

/**
 * The id of a tiller system; `ScriptedModel`'s keep the ids they had when they were the only
 * tiller rows (`tiller-memory`, `tiller-sqlite`), so stored figures stay comparable.
 *
 * @since 0.1.0
 * @category systems
 */
export const tillerSystemId = (model: TillerModel, store: TillerStore): string =>
  model === "scripted" ? `tiller-${store}` : `tiller-${model}-${store}`

/**
 * Where the tiller runner (`bench/w1/tiller.ts`) is bundled, relative to the repository root.
 *
 * @since 0.1.0
 * @category paths
 */
export const TILLER_RUNNER_BUNDLE = "node_modules/.cache/tiller-bench/w1-tiller.mjs"

const STORE_LABEL: Record<TillerStore, string> = { memory: "memory store", sqlite: "SQLite store" }

const TIMED = "timed from `followup` to `whenIdle` and `SessionLog.flush` (the full event log durable in the store)"

const STORE_HOW: Record<TillerStore, string> = {
  memory: "over `SessionStore.layerMemory`",
  sqlite: "over `SqliteSessionStore.layer` on a fresh file in a temporary directory (WAL, `synchronous=NORMAL`), " +
    "so every event is committed to the file"
}

const MODEL_HOW: Record<TillerModel, string> = {
  custom: "the smallest public custom `Model`: `Model.make(respond)` answering with the step's four prebuilt chunks " +
    "as one array, which the loop reads without a Stream run (`customModel` in `bench/w1/tiller.ts`)",
  chat: "`OpenAiCompatibleModel.layer` (the Chat Completions adapter) over `NodeHttpClient.layerUndici`, as the CLI " +
    "builds it, against a `node:http` server on 127.0.0.1 in the runner's process that answers each " +
    "`POST /v1/chat/completions` at once with the step's prebuilt SSE body (`bench/w1/chatServer.ts`); the request " +
    "carries the whole history, so its size grows with the step, as against a real host",
  scripted: "`ScriptedModel` with the W1 script, tiller's test double, read the way every model is read " +
    "(`Model.responseOf`: a plain entry's chunks as one array)"
}

const MODEL_LABEL: Record<TillerModel, string> = {
  custom: "custom Model",
  chat: "Chat Completions adapter",
  scripted: "ScriptedModel (its test double)"
}

const tillerSystem = (model: TillerModel, store: TillerStore): W1System => ({
  id: tillerSystemId(model, store),
  label: `tiller, ${MODEL_LABEL[model]}, ${STORE_LABEL[store]}`,
  tiller: true,
  testDouble: model === "scripted",
  runner: TILLER_RUNNER_BUNDLE,
  args: [model, store],
  pkg: "this checkout",
  how: `\`Agent.layer\` ${STORE_HOW[store]}, one exclusive \`echo\` tool, and ${MODEL_HOW[model]}; ${TIMED}.`
})

const peer = (
  runner: string,
  id: string,
  label: string,
  testDouble: boolean,
  pkg: string,
  how: string
): W1System => ({
  id,
  label,
  tiller: false,
  testDouble,
  runner: `bench/w1/peers/${runner}.mjs`,
  args: [id],
  pkg,
  how
})

const AI_SDK = "ai 7.0.173"
const AI_SDK_HOW =
  "One multi-step `generateText` with `stopWhen: stepCountIs(N + 1)`; the tool is `tool()` with a zod " +
  "schema; `doGenerate` returns the scripted results. Every `ai` 7.x release declares `engines.node >= 22`: npm " +
  "installs it on Node 20 with an EBADENGINE warning, and it runs. "
const PI = "@mariozechner/pi-agent-core 0.73.1"
const PI_HOW = "One `Agent.prompt` with one sequential `echo` tool. "

/**
 * Every system: tiller's like-for-like rows first, then its test double, then the peers; the
 * peers' versions are the ones pinned in `bench/package.json`.
 *
 * @since 0.1.0
 * @category systems
 */
export const w1Systems: ReadonlyArray<W1System> = [
  tillerSystem("custom", "memory"),
  tillerSystem("custom", "sqlite"),
  tillerSystem("chat", "memory"),
  tillerSystem("chat", "sqlite"),
  tillerSystem("scripted", "memory"),
  tillerSystem("scripted", "sqlite"),
  peer(
    "pi-agent",
    "pi-agent-streamfn",
    "pi agent core, custom streamFn",
    false,
    PI,
    PI_HOW + "The model is the Agent's `streamFn` option: it returns an `AssistantMessageEventStream` " +
      "(`createAssistantMessageEventStream` from pi-ai) holding the single `done` event of the step's prebuilt " +
      "assistant message; no provider, no deltas, no usage estimate."
  ),
  peer(
    "pi-agent",
    "pi-agent",
    "pi agent core, faux provider (its test double)",
    true,
    PI,
    PI_HOW + "The model is pi-ai's faux provider (`registerFauxProvider`) with the scripted `fauxAssistantMessage`s " +
      "queued. It streams each response in token-sized chunks, one microtask each, and estimates usage by " +
      "serializing the whole context on every call; both are part of the figure."
  ),
  peer(
    "ai-sdk",
    "ai-sdk-model",
    "Vercel AI SDK, plain LanguageModelV4",
    false,
    AI_SDK,
    AI_SDK_HOW + "The model is a plain object implementing `LanguageModelV4` (`specificationVersion`, `provider`, " +
      "`modelId`, `supportedUrls`, `doGenerate`, `doStream`)."
  ),
  peer(
    "ai-sdk",
    "ai-sdk",
    "Vercel AI SDK, MockLanguageModelV4 (its test double)",
    true,
    AI_SDK,
    AI_SDK_HOW + "The model is `MockLanguageModelV4` from `ai/test` (its recorded-calls array emptied on each call, " +
      "as a real provider keeps no copy of every prompt)."
  ),
  peer(
    "langgraph",
    "langgraph",
    "LangGraph JS, BaseChatModel subclass",
    false,
    "@langchain/langgraph 1.7.3, @langchain/core 1.4.0",
    "The prebuilt `createReactAgent` invoked once with `recursionLimit` 2N + 10, no checkpointer. The model is the " +
      "smallest `BaseChatModel` subclass (`_llmType`, `_generate` returning the scripted `AIMessage`s, `bindTools` " +
      "returning itself); `@langchain/core`'s fake chat models cannot script a sequence of tool calls and " +
      "`SimpleChatModel` answers text only."
  ),
  peer(
    "openai-agents",
    "openai-agents",
    "OpenAI Agents SDK, custom Model",
    false,
    "@openai/agents 0.20.0",
    "One `run(agent, prompt, { maxTurns: N + 10 })` with `setTracingDisabled(true)`; the model is the smallest " +
      "implementation of the SDK's `Model` interface, whose `getResponse` returns the scripted output items " +
      "(plain `function_call` and `message` items)."
  )
]
