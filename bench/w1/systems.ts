/**
 * The systems of the W1 comparison: tiller on its two stores and the four peer agent loops, each
 * with the runner that drives it in its own process and a sentence on how it is driven.
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
  readonly runner: string
  readonly args: ReadonlyArray<string>
  /** The package and version measured. */
  readonly pkg: string
  /** How the system is driven: its loop entry point and its model. */
  readonly how: string
}

/**
 * Where the tiller runner (`bench/w1/tiller.ts`) is bundled, relative to the repository root.
 *
 * @since 0.1.0
 * @category paths
 */
export const TILLER_RUNNER_BUNDLE = "node_modules/.cache/tiller-bench/w1-tiller.mjs"

const peer = (id: string, label: string, pkg: string, how: string): W1System => ({
  id,
  label,
  tiller: false,
  runner: `bench/w1/peers/${id}.mjs`,
  args: [],
  pkg,
  how
})

/**
 * Every system, tiller first; the peers' versions are the ones pinned in `bench/package.json`.
 *
 * @since 0.1.0
 * @category systems
 */
export const w1Systems: ReadonlyArray<W1System> = [
  {
    id: "tiller-memory",
    label: "tiller, memory store",
    tiller: true,
    runner: TILLER_RUNNER_BUNDLE,
    args: ["memory"],
    pkg: "this checkout",
    how: "`Agent.layer` over `SessionStore.layerMemory`, `ScriptedModel` with the W1 script, one exclusive " +
      "`echo` tool; timed from `followup` to `whenIdle` and `SessionLog.flush` (the full event log durable in the store). " +
      "The loop reads each scripted response as one batch, without running Effect's Stream machinery (a `Model` " +
      "returning an ordinary Stream cost about 1 ms more per step in the W1 table above)."
  },
  {
    id: "tiller-sqlite",
    label: "tiller, SQLite store",
    tiller: true,
    runner: TILLER_RUNNER_BUNDLE,
    args: ["sqlite"],
    pkg: "this checkout",
    how: "The same agent over `SqliteSessionStore.layer` on a fresh file in a temporary directory (WAL, " +
      "`synchronous=NORMAL`); timed the same way, so every event is committed to the file."
  },
  peer(
    "ai-sdk",
    "Vercel AI SDK",
    "ai 7.0.173",
    "One multi-step `generateText` with `stopWhen: stepCountIs(N + 1)`; the model is `MockLanguageModelV4` from " +
      "`ai/test` whose `doGenerate` returns the scripted results (its recorded-calls array is emptied on each call, " +
      "as a real provider keeps no copy of every prompt); the tool is `tool()` with a zod schema. Every `ai` 7.x " +
      "release declares `engines.node >= 22`: npm installs it on Node 20 with an EBADENGINE warning, and it runs."
  ),
  peer(
    "pi-agent",
    "pi agent core",
    "@mariozechner/pi-agent-core 0.73.1",
    "One `Agent.prompt`; the model is pi-ai's faux provider (`registerFauxProvider`) with the scripted " +
      "`fauxAssistantMessage`s queued. The faux provider streams each response in token-sized chunks, one microtask " +
      "each, and estimates usage by serializing the whole context on every call; both are part of the figure."
  ),
  peer(
    "langgraph",
    "LangGraph JS",
    "@langchain/langgraph 1.7.3, @langchain/core 1.4.0",
    "The prebuilt `createReactAgent` invoked once with `recursionLimit` 2N + 10, no checkpointer. `@langchain/core`'s " +
      "fake chat models cannot script a sequence of tool calls (`FakeListChatModel` answers text only, " +
      "`FakeStreamingChatModel` repeats one set of tool calls), so the model is a ten-line `BaseChatModel` subclass " +
      "whose `_generate` returns the scripted `AIMessage`s and whose `bindTools` returns itself."
  ),
  peer(
    "openai-agents",
    "OpenAI Agents SDK",
    "@openai/agents 0.20.0",
    "One `run(agent, prompt, { maxTurns: N + 10 })` with `setTracingDisabled(true)`; the model is a custom " +
      "implementation of the SDK's `Model` interface whose `getResponse` returns the scripted outputs, built with " +
      "the SDK's `functionCall`/`assistantMessage` helpers from `@openai/agents/testing`."
  )
]
