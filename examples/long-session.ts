/**
 * A long session on a small context window: a scripted model reads file after file, so the
 * session crosses its 4,000-token window several times and keeps going. Every compaction trigger
 * fires: `threshold` (use passes 80% before a step), `overflow` (the provider refuses a request;
 * the agent compacts and retries once) and `manual` (a compaction between turns, with a focus);
 * both kinds run: `prune` (old tool results become placeholders) and `summary` (a range becomes
 * one summary, written by a separate instant model). At the end the model searches its compacted
 * past with `read_history`, and every event compaction took out of its context is still readable.
 * Run it with `npx tsx examples/long-session.ts`; `test/examples.test.ts` runs it in CI.
 */
import { Effect, Layer, Schema, Stream } from "effect"
import type { Message, ModelRequest, StreamChunk } from "../src/index.js"
import {
  Agent,
  checkLog,
  Compaction,
  Driver,
  Model,
  ReadHistory,
  SessionId,
  SessionLog,
  SessionStore,
  Tool,
  Tools,
  userMessage
} from "../src/index.js"

/** The agent's context window, in tokens. */
export const WINDOW = 4_000

// A tool that reads a "file": `size` characters that start with the file's name.
const read = Tool.make("read", {
  description: "Reads a file",
  parameters: Schema.Struct({ name: Schema.String, size: Schema.Number }),
  mode: "parallel",
  execute: ({ name, size }) =>
    Effect.succeed(
      `${name}: ${(name.startsWith("blob") ? "Zm9vYmFy+/" : "lorem ipsum ").repeat(Math.ceil(size / 10))}`.slice(
        0,
        size
      )
    )
})

const textOf = (message: Message): string =>
  message.content.map((b) =>
    b.type === "text" ? b.text : b.type === "tool-call" ? b.arguments : b.type === "tool-result"
      ? b.content.map((c) => (c.type === "text" ? c.text : "")).join("")
      : ""
  ).join("")

const answer = (text: string, inputTokens: number): ReadonlyArray<StreamChunk> => [
  { type: "block-start", index: 0, block: "text" },
  { type: "text-delta", index: 0, text },
  { type: "block-end", index: 0 },
  { type: "usage", usage: { inputTokens, outputTokens: Math.ceil(text.length / 4) } },
  { type: "finish", finish: { kind: "stop" } }
]

const callTool = (id: string, name: string, args: unknown, inputTokens: number): ReadonlyArray<StreamChunk> => [
  { type: "block-start", index: 0, block: "tool-call", id, name },
  { type: "tool-call-delta", index: 0, arguments: JSON.stringify(args) },
  { type: "block-end", index: 0 },
  { type: "usage", usage: { inputTokens, outputTokens: 20 } },
  { type: "finish", finish: { kind: "stop" } }
]

/** Tokens as the provider counts them: prose at 3 characters a token, base64 (a blob) at 1.5. */
const providerTokens = (text: string): number => Math.ceil(text.length / (text.includes("Zm9vYmFy") ? 1.5 : 3))

/**
 * The session's model, scripted by what it is asked. Its provider counts tokens more densely than
 * the agent's characters / 4 estimate, and refuses a request over the window with a
 * context-overflow error, as a real provider does. `read NAME SIZE` calls the read tool; `recall
 * TEXT` calls read_history; anything else gets a short answer.
 */
const sessionModel = Model.of({
  stream: (request: ModelRequest) =>
    Stream.suspend(() => {
      const tokens = request.messages.reduce((n, m) => n + providerTokens(textOf(m)), 0)
      if (tokens > WINDOW) {
        const failure = {
          code: "CONTEXT_OVERFLOW",
          message: `prompt is too long: ${tokens} tokens > ${WINDOW} maximum`,
          status: 400
        }
        return Stream.make({ type: "finish", finish: { kind: "error", failure } } as StreamChunk)
      }
      const last = request.messages[request.messages.length - 1]!
      const id = `call-${request.turn}-${request.step}`
      const ask = last.role === "user" && last.source.kind !== "tool" ? textOf(last) : ""
      const readMatch = /^read (\S+) (\d+)$/.exec(ask)
      if (readMatch !== null) {
        return Stream.fromIterable(callTool(id, "read", { name: readMatch[1], size: Number(readMatch[2]) }, tokens))
      }
      const recallMatch = /^recall (.+)$/.exec(ask)
      if (recallMatch !== null) {
        return Stream.fromIterable(callTool(id, ReadHistory.name, { query: recallMatch[1] }, tokens))
      }
      const found = last.content[0]?.type === "tool-result" ? textOf(last).split("\n").length - 1 : 0
      return Stream.fromIterable(answer(found > 0 ? `Done (${found} lines back).` : "Done.", tokens))
    })
})

/** A cheaper model for summaries: it answers at once with a structured summary. */
const summaryModel = Model.of({
  stream: () =>
    Stream.fromIterable(answer(
      "Goal: read the project files.\nDecisions: none.\nState of the work: files read in order.\n" +
        "Files and tools touched: read.\nOpen questions: none.",
      0
    ))
})

/** The layers: an agent with compaction and read_history over a memory store. */
export const LongSessionLive = Agent.layer({
  sessionId: SessionId.make("long"),
  model: { provider: "scripted", model: "reader" },
  readHistory: true,
  compaction: {
    contextWindow: WINDOW,
    // Close to the window: the provider counts more than the estimate, so some requests overflow.
    threshold: 0.95,
    protectRecentTokens: 800,
    minimumPruneTokens: 200,
    summary: { model: { service: summaryModel, provider: "scripted", model: "summariser" }, keepRecentTokens: 600 }
  }
}).pipe(
  Layer.provide(
    Layer.mergeAll(SessionStore.layerMemory, Layer.succeed(Model, sessionModel), Tools.layer({ tools: [read] }))
  )
)

/** The files the session reads, with their sizes in characters: about 9 windows of tool output in all. */
export const FILES: ReadonlyArray<readonly [string, number]> = Array.from({ length: 60 }, (_, i) =>
  // One is a base64 blob: it counts two and a half times what the estimate says.
  [i === 20 ? `blob-${i}` : `file-${i}`, 1_000 + ((i * 733) % 2_800)] as const)

/** Runs the session and returns what a reader checks: the brackets, the turns, the log. */
export const program = Effect.gen(function*() {
  const driver = yield* Driver
  const log = yield* SessionLog
  const compaction = yield* Compaction
  const fractions: Array<number> = []
  const ask = (text: string) =>
    Effect.gen(function*() {
      yield* driver.followup(userMessage({ id: `m${fractions.length}`, text }))
      yield* driver.whenIdle
      fractions.push((yield* compaction.contextUsage).fraction)
    })
  for (let i = 0; i < FILES.length; i++) {
    yield* ask(`read ${FILES[i]![0]} ${FILES[i]![1]}`)
    // Late in the session, a manual compaction between turns, steering the summary.
    if (i === 45) yield* compaction.compactWith({ focus: "which files were read" })
  }
  yield* ask("recall file-0")
  const events = yield* log.events
  const brackets = events.flatMap((e) =>
    e.type === "compaction/end"
      ? [
        e.data as {
          readonly kind: string
          readonly trigger: string
          readonly tokensBefore?: number
          readonly tokensAfter?: number
        }
      ]
      : []
  )
  // Every event compaction shadowed is still readable: read_history shows it by its seq.
  const readHistory = yield* ReadHistory.tool()
  const surface = new Set(yield* log.surface)
  const shadowed = events.filter((e) =>
    (e.type === "tool/result" || e.type === "user/message" || e.type === "assistant/message") && !surface.has(e.seq)
  )
  let unreadable = 0
  for (const event of shadowed) {
    const page = yield* readHistory.execute({ from: event.seq, to: event.seq }, {} as never)
    const text = typeof page === "string" ? page : page.content as string
    if (!text.includes(`#${event.seq} `) || !text.includes("[shadowed]")) unreadable += 1
  }
  // What the model's last search (`recall file-0`) found.
  const recalled = events.flatMap((e) => {
    const message = e.type === "tool/result" ? (e.data as { readonly message: Message }).message : undefined
    return message !== undefined && textOf(message).startsWith("read_history:") ? [textOf(message)] : []
  }).at(-1) ?? ""
  const turnEnds = events.flatMap((e) =>
    e.type === "turn/end" ? [(e.data as { readonly reason: { readonly kind: string } }).reason.kind] : []
  )
  return {
    events,
    brackets,
    fractions,
    turnEnds,
    recalled,
    shadowed: shadowed.length,
    unreadable,
    problems: checkLog(events, { closed: false })
  }
})

if (import.meta.url === `file://${process.argv[1]}`) {
  Effect.runPromise(Effect.scoped(Effect.provide(program, LongSessionLive))).then((r) => {
    console.log(
      `${r.turnEnds.length} turns (${
        r.turnEnds.filter((k) => k === "completed").length
      } completed), ${r.events.length} events`
    )
    for (const b of r.brackets) {
      console.log(`compaction ${b.kind} (${b.trigger}): ${b.tokensBefore} → ${b.tokensAfter} tokens`)
    }
    console.log(`highest use after a turn: ${Math.round(Math.max(...r.fractions) * 100)}% of ${WINDOW} tokens`)
    console.log(`recall file-0: ${r.recalled.split("\n").slice(0, 3).join(" | ")}`)
    console.log(`${r.shadowed} events out of context, ${r.unreadable} unreadable; log problems: ${r.problems.length}`)
  })
}
