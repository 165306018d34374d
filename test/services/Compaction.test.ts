/**
 * Compaction (issue 28): the context budget, the tool-result cap, pruning without a model call and
 * its triggers, over an agent with a scripted model.
 */
import { describe, expect, it } from "@effect/vitest"
import type { Context } from "effect"
import { Deferred, Effect, Fiber, FiberId, Layer, Schema, Stream, TestClock } from "effect"
import { checkLog } from "../../src/domain/Check.js"
import type { EventOf, SessionEvent } from "../../src/domain/Event.js"
import { SessionId } from "../../src/domain/Ids.js"
import { userMessage } from "../../src/domain/Message.js"
import type { Message, StreamChunk, Usage, UserMessage } from "../../src/domain/Values.js"
import { CancelCause } from "../../src/domain/Values.js"
import { Agent } from "../../src/layers/Agent.js"
import type { ScriptEntry } from "../../src/layers/ScriptedModel.js"
import { ScriptedModel } from "../../src/layers/ScriptedModel.js"
import type { CompactionOptions, PostCompactInput, PreCompactInput } from "../../src/services/Compaction.js"
import { Compaction, PreCompactDecision } from "../../src/services/Compaction.js"
import { Driver } from "../../src/services/Driver.js"
import { forkSession } from "../../src/services/Fork.js"
import { Hooks } from "../../src/services/Hooks.js"
import type { Model, ModelRequest } from "../../src/services/Model.js"
import { ReadHistory } from "../../src/services/ReadHistory.js"
import { SessionLog } from "../../src/services/SessionLog.js"
import { SessionStore } from "../../src/services/SessionStore.js"
import type { ToolDefinition, ToolOutput } from "../../src/services/Tools.js"
import { Tool, Tools } from "../../src/services/Tools.js"
import { agentTest, notation, scenario, TEXT, user } from "../agent/harness.js"

/** An agent with compaction composed over it (the public layer, over the agent's public services). */
const withCompaction = (
  script: ReadonlyArray<ScriptEntry>,
  options: { readonly tools?: ReadonlyArray<ToolDefinition<any>>; readonly compaction?: CompactionOptions } = {}
) =>
  Compaction.layer(options.compaction).pipe(
    Layer.provideMerge(scenario(script, options.tools === undefined ? {} : { tools: options.tools }))
  )

const usage = (inputTokens: number, outputTokens: number): Usage => ({ inputTokens, outputTokens })

/** A tool named `name` answering `size` characters of `x`. */
const sized = (name: string, size: number) =>
  Tool.make(name, { description: "", parameters: Schema.Struct({}), execute: () => Effect.succeed("x".repeat(size)) })

const toolCall = (id: string, name: string, u?: Usage) =>
  ScriptedModel.response({ toolCalls: [{ id, name, arguments: {} }], ...(u === undefined ? {} : { usage: u }) })

const logEvents = Effect.flatMap(SessionLog, (log) => log.events)

/** Prompts each message in turn, waiting for its turn to end. */
const prompt = (...messages: ReadonlyArray<UserMessage>) =>
  Effect.flatMap(
    Driver,
    (driver) => Effect.forEach(messages, (m) => Effect.zipRight(driver.followup(m), driver.whenIdle), { discard: true })
  )

const clean = Effect.map(logEvents, (events) => checkLog(events, { closed: true }))

describe("Compaction: the context budget", () => {
  it.scoped("before any usage is reported, use is the estimate (characters / 4) of the surface", () =>
    Effect.gen(function*() {
      const compaction = yield* Compaction
      expect(yield* compaction.contextUsage).toEqual({ used: 0, window: 10_000, fraction: 0 })
      yield* (yield* Driver).followup(user("A", "x".repeat(400)))
      yield* (yield* Driver).whenIdle
      // UM(A): 100 + 4; AM "hi": 1 + 4.
      expect(yield* compaction.contextUsage).toEqual({ used: 109, window: 10_000, fraction: 0.0109 })
    }).pipe(Effect.provide(withCompaction([ScriptedModel.text("hi")], { compaction: { contextWindow: 10_000 } }))))

  it.scoped("use is the last reported prompt and answer plus an estimate of what was appended since", () =>
    Effect.gen(function*() {
      const compaction = yield* Compaction
      yield* prompt(user("A"))
      expect(yield* compaction.contextUsage).toEqual({ used: 1_050, window: 10_000, fraction: 0.105 })
      yield* prompt(user("B"))
      // Reported 2,000 + 10 with the tool call; then the result (4,000 / 4 + 4) and "done" (1 + 4).
      expect((yield* compaction.contextUsage).used).toBe(2_010 + 1_004 + 5)
    }).pipe(Effect.provide(withCompaction([
      ScriptedModel.text("a", { usage: usage(1_000, 50) }),
      toolCall("c1", "read", usage(2_000, 10)),
      ScriptedModel.text("done")
    ], { tools: [sized("read", 4_000)], compaction: { contextWindow: 10_000 } }))))

  it.scoped("the window comes from the table for the model in use when no contextWindow is given", () =>
    Effect.gen(function*() {
      const compaction = yield* Compaction
      // Before any request: the configured model's window.
      expect((yield* compaction.contextUsage).window).toBe(128_000)
      yield* prompt(user("A"))
      // The request header names the scenario's model "m": not in the table, the default.
      expect((yield* compaction.contextUsage).window).toBe(32_768)
    }).pipe(Effect.provide(withCompaction([ScriptedModel.text("a")], { compaction: { model: "gpt-4o" } }))))
})

const resultOf = (events: ReadonlyArray<SessionEvent>, callId: string) =>
  events.find((e): e is EventOf<"tool/result"> =>
    e.type === "tool/result" && (e as EventOf<"tool/result">).data.message.content[0].toolCallId === callId
  )!

const textOfResult = (event: EventOf<"tool/result">) => {
  const block = event.data.message.content[0].content[0]
  return block?.type === "text" ? block.text : ""
}

describe("Compaction: the tool-result cap", () => {
  const full = "HEAD" + "x".repeat(10_000_000 - 8) + "TAIL"
  const dump = Tool.make("dump", {
    description: "",
    parameters: Schema.Struct({}),
    execute: () => Effect.succeed({ content: full, meta: { lines: 1 } })
  })

  agentTest(
    "a 10 MB result: the log keeps it whole (in meta), the next request carries head + tail and a note",
    withCompaction([toolCall("c1", "dump"), ScriptedModel.text("done")], {
      tools: [dump],
      compaction: { contextWindow: 200_000 }
    }),
    function*({ driver }) {
      yield* prompt(user("A"))
      const tr = resultOf(yield* logEvents, "c1")
      const shown = textOfResult(tr)
      expect(shown.startsWith("HEAD")).toBe(true)
      expect(shown.endsWith("TAIL")).toBe(true)
      expect(shown).toContain("9,950,000 of 10,000,000 characters cut from the middle of this tool result")
      expect(shown).toContain("tool result of call c1")
      expect(shown.length).toBeLessThan(50_000 + 400)
      const meta = tr.data.meta as {
        readonly lines: number
        readonly "tiller/cut": { readonly text: string; readonly characters: number }
      }
      expect(meta.lines).toBe(1)
      expect(meta["tiller/cut"].characters).toBe(10_000_000)
      expect(meta["tiller/cut"].text === full).toBe(true)
      const requests = yield* (yield* ScriptedModel).requests
      const last = requests[1]!.messages.at(-1)!
      expect(last.content[0]!.type === "tool-result" && last.content[0].content[0]).toEqual({
        type: "text",
        text: shown
      })
      expect(yield* clean).toEqual([])
    }
  )

  agentTest(
    "per-tool limits override the default; a ToolPost listener's own output is capped too",
    withCompaction([
      ScriptedModel.response({
        toolCalls: [
          { id: "c1", name: "small", arguments: {} },
          { id: "c2", name: "free", arguments: {} },
          { id: "c3", name: "other", arguments: {} }
        ]
      }),
      ScriptedModel.text("done")
    ], {
      tools: [sized("small", 1_000), sized("free", 60_000), sized("other", 60_000)],
      compaction: { contextWindow: 200_000, toolResultLimits: { small: 100, free: Infinity } }
    }),
    function*({ driver }) {
      // A listener registered after compaction (an MCP bridge, say) makes "other"'s output 200,000 characters.
      yield* (yield* Hooks).onToolPost((input, next) =>
        Effect.map(next(), (output) =>
          input.name === "other"
            ? { ...output, content: [{ type: "text" as const, text: "y".repeat(200_000) }] }
            : output)
      )
      yield* prompt(user("A"))
      const events = yield* logEvents
      expect(textOfResult(resultOf(events, "c1")).length).toBeLessThan(100 + 400)
      expect(textOfResult(resultOf(events, "c2"))).toBe("x".repeat(60_000))
      const other = textOfResult(resultOf(events, "c3"))
      expect(other.startsWith("y".repeat(30_000)) && other.length < 50_000 + 400).toBe(true)
      expect(yield* clean).toEqual([])
    }
  )
})

const S = SessionId.make("s")

/** An agent with compaction over the store of the environment (for lifecycles that outlive one agent). */
const agentOn = (
  target: { readonly sessionId: SessionId } | { readonly resume: SessionId },
  script: ReadonlyArray<ScriptEntry>,
  compaction: CompactionOptions,
  tools: ReadonlyArray<ToolDefinition<any>> = []
) =>
  Compaction.layer(compaction).pipe(
    Layer.provideMerge(Agent.layer({ ...target, model: { provider: "p", model: "m" } })),
    Layer.provideMerge(Layer.mergeAll(ScriptedModel.layer(script), Tools.layer({ tools })))
  )

// Four results of 4,000 characters (1,004 tokens each), oldest first: r1 (read), r2 (keep), r3, r4 (read).
const fourResults = [
  toolCall("r1", "read"),
  toolCall("r2", "keep"),
  toolCall("r3", "read"),
  toolCall("r4", "read"),
  ScriptedModel.text("done")
]
const readAndKeep = [sized("read", 4_000), sized("keep", 4_000)]
const pruneOptions: CompactionOptions = { contextWindow: 100_000, protectRecentTokens: 1_500, protectedTools: ["keep"] }

const resultTexts = (messages: ReadonlyArray<Message>) =>
  messages.flatMap((m) => {
    const block = m.content[0]
    if (block?.type !== "tool-result") return []
    const inner = block.content[0]
    return [`${block.toolCallId}:${inner?.type === "text" ? inner.text.slice(0, 19) : ""}`]
  })

describe("Compaction: pruning", () => {
  it.scoped("manual: a turn:null prune bracket around TR~ of the old results; the next request sees placeholders; resume keeps them", () =>
    Effect.gen(function*() {
      const before = yield* Effect.scoped(
        Effect.gen(function*() {
          const log = yield* SessionLog
          const compaction = yield* Compaction
          yield* prompt(user("A"))
          const used = (yield* compaction.contextUsage).used
          const length = (yield* log.events).length
          const report = yield* compaction.compact
          const events = yield* log.events
          const r1 = resultOf(events, "r1")
          const added = events.slice(length)
          expect(added.map((e) => [e.type, (e as { readonly surfaceOp?: unknown }).surfaceOp ?? null])).toEqual([
            ["compaction/start", null],
            ["tool/result", { op: "replace", start: r1.seq, end: r1.seq }],
            ["compaction/end", null]
          ])
          expect(added[0]!.data).toEqual({ turn: null, kind: "prune", trigger: "manual", tokensBefore: used })
          expect((added[1] as { readonly sourceEventSeqs?: unknown }).sourceEventSeqs).toEqual([r1.seq, added[0]!.seq])
          const after = (yield* compaction.contextUsage).used
          expect(added[2]!.data).toEqual({
            turn: null,
            kind: "prune",
            trigger: "manual",
            pruned: [r1.seq],
            tokensBefore: used,
            tokensAfter: after
          })
          expect(report).toEqual({ trigger: "manual", pruned: 1, tokensBefore: used, tokensAfter: after })
          expect(used - after).toBeGreaterThan(900)
          // The shadowed result stays in the log, whole.
          expect(textOfResult(r1)).toBe("x".repeat(4_000))
          yield* prompt(user("B"))
          const requests = yield* (yield* ScriptedModel).requests
          expect(resultTexts(requests.at(-1)!.messages)).toEqual([
            "r1:[tool result pruned",
            "r2:xxxxxxxxxxxxxxxxxxx",
            "r3:xxxxxxxxxxxxxxxxxxx",
            "r4:xxxxxxxxxxxxxxxxxxx"
          ])
          expect(yield* clean).toEqual([])
          return { messages: yield* log.messages, used: (yield* compaction.contextUsage).used }
        }).pipe(
          Effect.provide(
            agentOn({ sessionId: S }, [...fourResults, ScriptedModel.text("b")], pruneOptions, readAndKeep)
          )
        )
      )
      // Resume: the same derived history and use; opening compacts nothing (the log ends with the end-seed).
      yield* Effect.scoped(
        Effect.gen(function*() {
          const log = yield* SessionLog
          const events = yield* log.events
          expect(events.at(-1)!.type).toBe("session/end-seed")
          expect(events.filter((e) => e.type === "compaction/start").length).toBe(1)
          expect(yield* log.messages).toEqual(before.messages)
          expect((yield* (yield* Compaction).contextUsage).used).toBe(before.used)
          expect(checkLog(events, { closed: true })).toEqual([])
        }).pipe(Effect.provide(agentOn({ resume: S }, [], { ...pruneOptions, threshold: 0.0001 }, readAndKeep)))
      )
    }).pipe(Effect.provide(SessionStore.layerMemory)))

  agentTest(
    "manual with nothing worth pruning writes nothing",
    withCompaction([ScriptedModel.text("a")], { compaction: pruneOptions }),
    function*({ driver }) {
      yield* prompt(user("A"))
      const length = (yield* logEvents).length
      expect((yield* (yield* Compaction).compact).pruned).toBe(0)
      expect((yield* logEvents).length).toBe(length)
    }
  )
})

const overflowFailure = {
  message: "prompt is too long: 210000 tokens > 200000 maximum",
  code: "CONTEXT_OVERFLOW",
  status: 400
}

const turnEnds = Effect.map(
  logEvents,
  (events) => events.filter((e): e is EventOf<"turn/end"> => e.type === "turn/end").map((e) => e.data.reason)
)

/** The log from the first event of `type` on, in the notation of SPEC 4.1 (`TR~` for a replacement). */
const tailFrom = (type: string) =>
  Effect.map(logEvents, (events) => {
    const shown = events.map((e) =>
      e.type === "tool/result" && (e as EventOf<"tool/result">).surfaceOp !== "append"
        ? `TR~(${(e as EventOf<"tool/result">).data.message.content[0].toolCallId})`
        : notation(e)
    )
    return shown.slice(shown.indexOf(type))
  })

const requestResults = Effect.map(
  Effect.flatMap(ScriptedModel, (m) => m.requests),
  (requests) => resultTexts(requests.at(-1)!.messages)
)
const P = "[tool result pruned"
const X = "xxxxxxxxxxxxxxxxxxx"

describe("Compaction: triggers", () => {
  agentTest(
    "threshold: a pre-step prunes when use passes 0.8 of the window, with a numeric bracket before the step opens",
    withCompaction(
      [
        toolCall("r1", "read"),
        toolCall("r2", "read"),
        toolCall("r3", "read"),
        toolCall("r4", "read"),
        ScriptedModel.text("done")
      ],
      {
        tools: [sized("read", 4_000)],
        compaction: {
          contextWindow: 4_000,
          protectRecentTokens: 1_500,
          minimumPruneTokens: 500,
          maxToolResultChars: 100_000
        }
      }
    ),
    function*({ driver }) {
      yield* prompt(user("A"))
      // About 4,050 tokens after r4 (≥ 3,200): r4 and r3 are recent, r2 and r1 are pruned.
      expect(yield* tailFrom("compaction/start")).toEqual([
        "compaction/start",
        "TR~(r1)",
        "TR~(r2)",
        "compaction/end",
        "SS(1,5)",
        ...TEXT,
        "SE(1,5)",
        "TE(1,completed)"
      ])
      const start = (yield* logEvents).find((e) => e.type === "compaction/start")!
      expect(start.data).toMatchObject({ turn: 1, kind: "prune", trigger: "threshold" })
      expect(yield* requestResults).toEqual([`r1:${P}`, `r2:${P}`, `r3:${X}`, `r4:${X}`])
      expect((yield* (yield* Compaction).contextUsage).fraction).toBeLessThan(0.8)
      expect(yield* clean).toEqual([])
    }
  )

  agentTest(
    "below the threshold nothing is pruned",
    withCompaction(
      [
        toolCall("r1", "read"),
        toolCall("r2", "read"),
        toolCall("r3", "read"),
        toolCall("r4", "read"),
        ScriptedModel.text("done")
      ],
      {
        tools: [sized("read", 4_000)],
        compaction: { contextWindow: 6_000, protectRecentTokens: 1_500, minimumPruneTokens: 500 }
      }
    ),
    function*({ driver }) {
      yield* prompt(user("A"))
      expect((yield* logEvents).some((e) => e.type.startsWith("compaction/"))).toBe(false)
    }
  )

  const overflowOptions: CompactionOptions = { contextWindow: 100_000, protectRecentTokens: 1_500, threshold: 0.99 }

  agentTest(
    "overflow: the request-error listener prunes, then the step retries once and succeeds",
    withCompaction(
      [...fourResults.slice(0, 4), ScriptedModel.fail(overflowFailure), ScriptedModel.text("done")],
      { tools: [sized("read", 4_000), sized("keep", 4_000)], compaction: overflowOptions }
    ),
    function*({ driver }) {
      yield* prompt(user("A"))
      // Overflow keeps only a quarter of the recent protection (375 tokens): r4.
      expect(yield* tailFrom("compaction/start")).toEqual([
        "compaction/start",
        "TR~(r1)",
        "TR~(r2)",
        "TR~(r3)",
        "compaction/end",
        "RT(1)",
        ...TEXT,
        "SE(1,5)",
        "TE(1,completed)"
      ])
      const start = (yield* logEvents).find((e) => e.type === "compaction/start")!
      expect(start.data).toMatchObject({ turn: 1, kind: "prune", trigger: "overflow" })
      expect(yield* requestResults).toEqual([`r1:${P}`, `r2:${P}`, `r3:${P}`, `r4:${X}`])
      expect(yield* clean).toEqual([])
    }
  )

  agentTest(
    "overflow: an HTTP 413 is an overflow too",
    withCompaction(
      [
        ...fourResults.slice(0, 4),
        ScriptedModel.fail({ message: "Request Entity Too Large", code: "INVALID_REQUEST", status: 413 }),
        ScriptedModel.text("done")
      ],
      { tools: [sized("read", 4_000), sized("keep", 4_000)], compaction: overflowOptions }
    ),
    function*({ driver }) {
      yield* prompt(user("A"))
      expect(yield* turnEnds).toEqual([{ kind: "completed" }])
      expect((yield* logEvents).find((e) => e.type === "compaction/start")!.data).toMatchObject({ trigger: "overflow" })
    }
  )

  agentTest(
    "overflow: a second overflow in the step is a typed failure that ends the turn error(CONTEXT_OVERFLOW) saying what to do",
    withCompaction(
      [
        ...fourResults.slice(0, 4),
        ScriptedModel.fail(overflowFailure),
        ScriptedModel.fail(overflowFailure),
        ScriptedModel.text("never")
      ],
      { tools: [sized("read", 4_000), sized("keep", 4_000)], compaction: overflowOptions }
    ),
    function*({ driver }) {
      yield* prompt(user("A"))
      expect(yield* tailFrom("compaction/start")).toEqual([
        "compaction/start",
        "TR~(r1)",
        "TR~(r2)",
        "TR~(r3)",
        "compaction/end",
        "RT(1)",
        "CH(finish error)",
        "SE(1,5)",
        "TE(1,error(CONTEXT_OVERFLOW))"
      ])
      const [reason] = yield* turnEnds
      const error = (reason as { readonly error: { readonly message: string; readonly code: string } }).error
      expect(error.code).toBe("CONTEXT_OVERFLOW")
      expect(error.message).toContain("the request overflowed again after compacting the conversation")
      expect(error.message).toContain("Start a new session or fork this one at an earlier point")
      expect(error.message).toContain("prompt is too long")
      expect(yield* (yield* ScriptedModel).remaining).toBe(1)
      expect(yield* clean).toEqual([])
    }
  )

  agentTest(
    "overflow: the circuit breaker stops compaction after failures until a manual compaction closes it",
    withCompaction(
      [
        ScriptedModel.fail(overflowFailure),
        ...fourResults.slice(0, 4),
        ScriptedModel.fail(overflowFailure),
        ScriptedModel.fail(overflowFailure),
        ScriptedModel.text("c")
      ],
      {
        tools: [sized("read", 4_000), sized("keep", 4_000)],
        compaction: { ...overflowOptions, maxConsecutiveFailures: 1 }
      }
    ),
    function*({ driver }) {
      const compaction = yield* Compaction
      // Turn 1: nothing to prune (a failure: the breaker opens at 1).
      yield* prompt(user("A"))
      // Turn 2: results to prune, but the breaker is open: no compaction, the turn fails at once.
      yield* prompt(user("B"))
      const reasons = (yield* turnEnds).map((r) =>
        (r as { readonly error: { readonly message: string } }).error.message
      )
      expect(reasons[0]).toContain("there is nothing left to compact")
      expect(reasons[1]).toContain("automatic compaction stopped after repeated failures")
      expect((yield* logEvents).some((e) => e.type.startsWith("compaction/"))).toBe(false)
      // A manual compaction closes it: turn 3's overflow is recovered.
      expect((yield* compaction.compact).pruned).toBe(2)
      yield* prompt(user("C"))
      expect((yield* turnEnds).at(-1)).toEqual({ kind: "completed" })
      const triggers = (yield* logEvents).filter((e) => e.type === "compaction/start").map((e) =>
        (e.data as { readonly trigger: string }).trigger
      )
      expect(triggers).toEqual(["manual", "overflow"])
      expect(yield* clean).toEqual([])
    }
  )
})

describe("Compaction: the circuit breaker", () => {
  agentTest(
    "a threshold prune that freed tokens but left use above the threshold is no failure: the first overflow still compacts and the retry succeeds",
    withCompaction(
      [
        toolCall("r1", "read"),
        toolCall("r2", "read"),
        toolCall("r3", "read"),
        toolCall("r4", "read", usage(6_000, 10)),
        ScriptedModel.fail(overflowFailure),
        ScriptedModel.text("done")
      ],
      {
        tools: [sized("read", 4_000)],
        compaction: { contextWindow: 4_000, protectRecentTokens: 1_500, summary: false, maxConsecutiveFailures: 1 }
      }
    ),
    function*({ driver }) {
      yield* prompt(user("A"))
      // r4's response reports 6,010 tokens: the threshold prune frees r1 and r2 and use stays above 3,200.
      const starts = (yield* logEvents).filter((e): e is EventOf<"compaction/start"> => e.type === "compaction/start")
      expect(starts.map((e) => e.data)).toMatchObject([
        { trigger: "threshold", kind: "prune" },
        { trigger: "overflow", kind: "prune" }
      ])
      const thresholdEnd = (yield* logEvents).find((e) => e.type === "compaction/end")!.data as {
        readonly tokensAfter: number
      }
      expect(thresholdEnd.tokensAfter).toBeGreaterThan(3_200)
      expect(yield* turnEnds).toEqual([{ kind: "completed" }])
      expect(yield* requestResults).toEqual([`r1:${P}`, `r2:${P}`, `r3:${P}`, `r4:${X}`])
      expect(yield* clean).toEqual([])
    }
  )
})

const big = (id: string) => user(id, `${id} ${"x".repeat(2_000)}`)
const textOfMessage = (message: Message) => message.content.map((b) => (b.type === "text" ? b.text : "")).join("")
const sourceOf = (message: Message) => message.source as { readonly kind: string } & Record<string, unknown>
/** The log from the first event of `type` on, in notation, a replacement user/message as `UM~`. */
const shapeFrom = (type: string) =>
  Effect.map(tailFrom(type), (shown) => shown.map((s) => (s.startsWith("UM~(") ? "UM~" : s)))
const requests = Effect.flatMap(ScriptedModel, (m) => m.requests)

// Turns 1-3 (A and B of 504 tokens each, then C); turn 3 reports 3,310 tokens of a 4,000 window, so
// turn 4's pre-step passes the threshold with nothing to prune: it summarises A, a, B, b and keeps C, c.
const summaryScript = [
  ScriptedModel.text("a"),
  ScriptedModel.text("b"),
  ScriptedModel.text("c", { usage: usage(3_300, 10) }),
  ScriptedModel.text("SUMMARY-1"),
  ScriptedModel.text("d")
]
const summaryOptions: CompactionOptions = { contextWindow: 4_000, summary: { keepRecentTokens: 10 } }
const fourTurns = prompt(big("A"), big("B"), user("C"), user("D"))

const cheapRequests: Array<ModelRequest> = []
const cheap: Context.Tag.Service<Model> = {
  stream: (request) =>
    Stream.suspend(() => {
      cheapRequests.push(request)
      return Stream.fromIterable<StreamChunk>([{ type: "text-delta", index: 0, text: "CHEAP" }, {
        type: "finish",
        finish: { kind: "stop" }
      }])
    })
}

describe("Compaction: summaries", () => {
  it.scoped("threshold with nothing to prune: a summary bracket before the step; the summary replaces the old range, the tail stays", () =>
    Effect.gen(function*() {
      yield* fourTurns
      const events = yield* logEvents
      expect(yield* shapeFrom("compaction/start")).toEqual([
        "compaction/start",
        "compaction/summary",
        "UM~",
        "compaction/end",
        "SS(4,1)",
        "UM(D)",
        ...TEXT,
        "SE(4,1)",
        "TE(4,completed)"
      ])
      const seqOf = (id: string) => events.find((e) => e.type === "user/message" && (e.data as Message).id === id)!.seq
      const ams = events.filter((e) => e.type === "assistant/message").map((e) => e.seq)
      const [start, written, replacement, end] = events.slice(events.findIndex((e) => e.type === "compaction/start"))
      const range = { start: seqOf("A"), end: ams[1]!, nodes: 4 }
      expect(start!.data).toMatchObject({ turn: 4, kind: "summary", trigger: "threshold", range })
      expect(written!.data).toMatchObject({
        turn: 4,
        kind: "summary",
        trigger: "threshold",
        model: "m",
        characters: 9,
        updates: null
      })
      expect((replacement as EventOf<"user/message">).surfaceOp).toEqual({
        op: "replace",
        start: range.start,
        end: range.end
      })
      expect((replacement as EventOf<"user/message">).sourceEventSeqs).toEqual([
        seqOf("A"),
        ams[0],
        seqOf("B"),
        ams[1],
        start!.seq,
        written!.seq
      ])
      expect(end!.data).toMatchObject({ turn: 4, kind: "summary", trigger: "threshold", replaced: range })
      // The summary request: the structured prompt over a transcript of A, a, B, b (not the tail).
      const all = yield* requests
      const ask = all[3]!
      expect(ask.system).toContain("Goal; Decisions; State of the work; Files and tools touched; Open questions")
      expect(ask.tools).toEqual([])
      expect(ask.messages.length).toBe(1)
      expect(sourceOf(ask.messages[0]!).kind).toBe("compaction-request")
      const asked = textOfMessage(ask.messages[0]!)
      expect(asked).toContain("<conversation>\n[user] A xxx")
      expect(asked).toContain("\n[assistant] a\n[user] B xxx")
      expect(asked).toContain("[assistant] b\n</conversation>")
      expect(asked).toContain("Summarise the conversation above.")
      expect(asked).toContain(
        "Use the sections Goal, Decisions, State of the work, Files and tools touched, Open questions."
      )
      expect(asked).not.toContain("[user] C")
      // The step's request: [S, C, c, D], as the derived history says.
      const messages = all[4]!.messages
      expect(messages.map((m) => `${m.role}:${textOfMessage(m).slice(0, 9)}`).slice(1)).toEqual([
        "user:C",
        "assistant:c",
        "user:D"
      ])
      expect(sourceOf(messages[0]!)).toEqual({
        kind: "compaction",
        trigger: "threshold",
        start: range.start,
        end: range.end
      })
      expect(textOfMessage(messages[0]!)).toBe(
        `[Summary of the earlier conversation: log seqs ${range.start}–${range.end} are compacted into it; the originals stay in the session log]\n\nSUMMARY-1`
      )
      expect((yield* (yield* SessionLog).messages).slice(0, 4)).toEqual(messages)
      expect((yield* (yield* Compaction).contextUsage).fraction).toBeLessThan(0.8)
      expect(yield* clean).toEqual([])
    }).pipe(Effect.provide(withCompaction(summaryScript, { compaction: summaryOptions }))))

  it.scoped("a later compaction updates the previous summary (manual, with a focus): one summary, never a summary of a summary", () =>
    Effect.gen(function*() {
      yield* fourTurns
      const compaction = yield* Compaction
      const log = yield* SessionLog
      const first = (yield* log.messages)[0]!
      const firstSeq = (yield* logEvents).find((e) =>
        e.type === "user/message" && (e.data as Message).id === first.id
      )!.seq
      const length = (yield* logEvents).length
      const report = yield* compaction.compactWith({ focus: "  the D work " })
      const added = (yield* logEvents).slice(length)
      expect(added.map(notation).map((s) => (s.startsWith("UM~(") ? "UM~" : s))).toEqual([
        "compaction/start",
        "compaction/summary",
        "UM~",
        "compaction/end"
      ])
      const cSeq = (yield* logEvents).filter((e) => e.type === "assistant/message")[2]!.seq
      const aSeq = (yield* logEvents).find((e) => e.type === "user/message" && (e.data as Message).id === "A")!.seq
      // The range covers the originals, low to high: the previous summary counts by what it replaced.
      expect(added[0]!.data).toMatchObject({
        turn: null,
        kind: "summary",
        trigger: "manual",
        focus: "the D work",
        range: { start: aSeq, end: cSeq, nodes: 3 }
      })
      expect(added[1]!.data).toMatchObject({ updates: firstSeq })
      expect(report).toMatchObject({ trigger: "manual", pruned: 0, summarised: { start: aSeq, end: cSeq, nodes: 3 } })
      // The replace op still names the range's surface endpoints in surface order.
      expect((added[2] as EventOf<"user/message">).surfaceOp).toEqual({ op: "replace", start: firstSeq, end: cSeq })
      const asked = textOfMessage((yield* requests).at(-1)!.messages[0]!)
      expect(
        asked.startsWith(
          "<previous-summary>\nSUMMARY-1\n</previous-summary>\n\n<conversation>\n[user] C\n[assistant] c\n</conversation>"
        )
      ).toBe(true)
      expect(asked).toContain("Update the previous summary above")
      expect(asked).toContain("Focus on: the D work")
      expect(asked).not.toContain("(compaction)")
      const messages = yield* log.messages
      expect(messages.map((m) => sourceOf(m).kind)).toEqual(["compaction", "user", "model"])
      expect(textOfMessage(messages[0]!).endsWith("\n\nSUMMARY-2")).toBe(true)
      expect(messages[0]!.id).not.toBe(first.id)
      expect(yield* clean).toEqual([])
    }).pipe(
      Effect.provide(
        withCompaction([...summaryScript, ScriptedModel.text("SUMMARY-2")], { compaction: summaryOptions })
      )
    ))

  it.scoped("an automatic summary then a manual one: every range is low to high and the suggested read_history call works", () =>
    Effect.gen(function*() {
      yield* fourTurns
      yield* (yield* Compaction).compact
      const events = yield* logEvents
      const starts = events.filter((e) => e.type === "compaction/start").map((e) =>
        (e.data as { readonly range: { readonly start: number; readonly end: number } }).range
      )
      expect(starts.length).toBe(2)
      for (const range of starts) expect(range.start).toBeLessThanOrEqual(range.end)
      const summaries = events.filter((e) =>
        e.type === "user/message" && sourceOf(e.data as Message).kind === "compaction"
      )
      const aSeq = events.find((e) => e.type === "user/message" && (e.data as Message).id === "A")!.seq
      const read = yield* ReadHistory.tool()
      for (const summary of summaries) {
        const text = textOfMessage(summary.data as Message)
        const match = /read them back with read_history (\{[^}]*\})/.exec(text)
        expect(match).not.toBeNull()
        const args = JSON.parse(match![1]!) as { readonly from: number; readonly to: number }
        expect(args.from).toBeLessThanOrEqual(args.to)
        expect(args.from).toBe(aSeq)
        const page = (yield* read.execute(args as never, {} as never)) as ToolOutput
        expect(page.isError).toBe(false)
        expect(JSON.stringify(page.content)).toContain("A xxx")
      }
      expect(yield* clean).toEqual([])
    }).pipe(
      Effect.provide(
        withCompaction([...summaryScript, ScriptedModel.text("SUMMARY-2")], {
          compaction: { ...summaryOptions, readHistory: true }
        })
      )
    ))

  it.scoped("a configured summary model writes the summary instead of the session's, under its own names", () =>
    Effect.gen(function*() {
      yield* fourTurns
      const written = (yield* logEvents).find((e) => e.type === "compaction/summary")!
      expect(written.data).toMatchObject({ provider: "cheap", model: "small", characters: 5 })
      expect(cheapRequests.map((r) => [r.provider, r.model, r.system === undefined ? "" : r.system.slice(0, 26)]))
        .toEqual([
          ["cheap", "small", "You write the working memo"]
        ])
      const messages = yield* (yield* SessionLog).messages
      expect(textOfMessage(messages[0]!).endsWith("\n\nCHEAP")).toBe(true)
      // The session's model answered the four turns only.
      expect((yield* requests).length).toBe(4)
      expect(yield* clean).toEqual([])
    }).pipe(Effect.provide(withCompaction(
      [
        ScriptedModel.text("a"),
        ScriptedModel.text("b"),
        ScriptedModel.text("c", { usage: usage(3_300, 10) }),
        ScriptedModel.text("d")
      ],
      {
        compaction: {
          ...summaryOptions,
          summary: { keepRecentTokens: 10, model: { service: cheap, provider: "cheap", model: "small" } }
        }
      }
    ))))

  agentTest(
    "pinned instructions are never replaced, and the range never separates a tool call from its result",
    withCompaction(
      [
        ScriptedModel.text("ok"),
        toolCall("r1", "read"),
        toolCall("r2", "read"),
        ScriptedModel.text("done"),
        ScriptedModel.text("SUMMARY")
      ],
      { tools: [sized("read", 4_000)], compaction: { contextWindow: 100_000, summary: { keepRecentTokens: 1_005 } } }
    ),
    function*({ driver, log }) {
      const rules = userMessage({ id: "I", text: "RULES", source: { kind: "instructions" } })
      yield* prompt(rules)
      yield* prompt(user("A"))
      const before = yield* log.messages
      const report = yield* (yield* Compaction).compact
      const events = yield* logEvents
      const replacement = events.find((e): e is EventOf<"user/message"> =>
        e.type === "user/message" && (e as { readonly surfaceOp?: unknown }).surfaceOp !== "append"
      )!
      // The tail reaches 1,005 tokens at r2's result: the cut goes back to r2's call; I stays before the range.
      const ok = events.find((e) => e.type === "assistant/message")!
      expect(replacement.surfaceOp).toEqual({ op: "replace", start: ok.seq, end: resultOf(events, "r1").seq })
      expect(report.summarised).toEqual({ start: ok.seq, end: resultOf(events, "r1").seq, nodes: 4 })
      const after = yield* log.messages
      expect(after[0]).toEqual(rules)
      expect(sourceOf(after[1]!).kind).toBe("compaction")
      expect(after.slice(2)).toEqual(before.slice(5))
      expect(after[2]!.content.some((b) => b.type === "tool-call" && b.id === "r2")).toBe(true)
      expect(after[3]!.content[0]).toMatchObject({ type: "tool-result", toolCallId: "r2" })
      const asked = textOfMessage((yield* requests).at(-1)!.messages[0]!)
      expect(asked).toContain("[calls read (r1) with {}]\n[result of r1] xxx")
      expect(asked).not.toContain("RULES")
      expect(yield* clean).toEqual([])
    }
  )

  agentTest(
    "overflow with nothing to prune: a summary (the open step's message stays), then the retry succeeds",
    withCompaction(
      [
        ScriptedModel.text("a"),
        ScriptedModel.text("b"),
        ScriptedModel.fail(overflowFailure),
        ScriptedModel.text("SUMMARY"),
        ScriptedModel.text("c")
      ],
      { compaction: { contextWindow: 100_000, threshold: 0.99, summary: { keepRecentTokens: 10 } } }
    ),
    function*({ driver }) {
      yield* prompt(big("A"), big("B"), user("C"))
      expect(yield* shapeFrom("compaction/start")).toEqual([
        "compaction/start",
        "compaction/summary",
        "UM~",
        "compaction/end",
        "RT(1)",
        ...TEXT,
        "SE(3,1)",
        "TE(3,completed)"
      ])
      const start = (yield* logEvents).find((e) => e.type === "compaction/start")!
      // An overflow keeps a quarter of the tail (2 of 10 tokens): A, a, B and b are summarised.
      expect(start.data).toMatchObject({ turn: 3, kind: "summary", trigger: "overflow", range: { nodes: 4 } })
      const retried = (yield* requests).at(-1)!.messages
      expect(retried.map((m) => sourceOf(m).kind === "compaction" ? "S" : textOfMessage(m).slice(0, 1))).toEqual([
        "S",
        "C"
      ])
      expect(yield* clean).toEqual([])
    }
  )

  agentTest(
    "overflow whose summary request fails: the bracket closes with an error and the turn ends error(CONTEXT_OVERFLOW) saying so",
    withCompaction(
      [
        ScriptedModel.text("a"),
        ScriptedModel.text("b"),
        ScriptedModel.fail(overflowFailure),
        ScriptedModel.fail({ message: "overloaded", code: "OVERLOADED" })
      ],
      { compaction: { contextWindow: 100_000, threshold: 0.99, summary: { keepRecentTokens: 10 } } }
    ),
    function*({ driver }) {
      yield* prompt(big("A"), big("B"), user("C"))
      expect(yield* shapeFrom("compaction/start")).toEqual([
        "compaction/start",
        "compaction/end",
        "SE(3,1)",
        "TE(3,error(CONTEXT_OVERFLOW))"
      ])
      const last = (yield* turnEnds).at(-1) as { readonly error: { readonly message: string } }
      expect(last.error.message).toContain("there was nothing to prune and the summary request failed")
      expect(yield* clean).toEqual([])
    }
  )

  agentTest(
    "summaries off: pruning only; an overflow with nothing to prune is nothing-to-compact",
    withCompaction(
      [ScriptedModel.text("a"), ScriptedModel.fail(overflowFailure)],
      { compaction: { contextWindow: 100_000, threshold: 0.99, summary: false } }
    ),
    function*({ driver }) {
      yield* prompt(big("A"), big("B"))
      expect((yield* logEvents).some((e) => e.type.startsWith("compaction/"))).toBe(false)
      const [, reason] = yield* turnEnds
      expect((reason as { readonly error: { readonly message: string } }).error.message).toContain(
        "there is nothing left to compact"
      )
    }
  )
})

const asking = Deferred.unsafeMake<void>(FiberId.none)

describe("Compaction: failures and cancellation", () => {
  agentTest(
    "a summary request that fails, or outlasts its timeout, is a ModelError: the bracket closes with an error and nothing is replaced",
    withCompaction(
      [
        ScriptedModel.text("a"),
        ScriptedModel.text("b"),
        ScriptedModel.text("c"),
        ScriptedModel.fail({ message: "overloaded", code: "OVERLOADED" }),
        ScriptedModel.hang()
      ],
      { compaction: { contextWindow: 100_000, summary: { keepRecentTokens: 10, timeout: "1 minute" } } }
    ),
    function*({ driver, log }) {
      yield* prompt(big("A"), big("B"), user("C"))
      const messages = yield* log.messages
      const compaction = yield* Compaction
      const failed = yield* Effect.flip(compaction.compact)
      expect(failed._tag).toBe("ModelError")
      expect((failed as { readonly failure: { readonly code: string } }).failure.code).toBe("OVERLOADED")
      const hanging = yield* Effect.fork(compaction.compactWith({ focus: "x" }))
      yield* TestClock.adjust("1 minute")
      const timedOut = yield* Effect.flip(Fiber.join(hanging))
      expect((timedOut as { readonly failure: { readonly code: string; readonly message: string } }).failure).toEqual({
        code: "TIMEOUT",
        message: "the summary request took longer than 1m"
      })
      const brackets = (yield* logEvents).filter((e) => e.type.startsWith("compaction/"))
      expect(brackets.map((e) => [e.type, (e.data as { readonly error?: unknown }).error ?? null])).toEqual([
        ["compaction/start", null],
        ["compaction/end", { message: "compaction did not complete" }],
        ["compaction/start", null],
        ["compaction/end", { message: "compaction did not complete" }]
      ])
      expect(yield* log.messages).toEqual(messages)
      // The agent goes on.
      expect(yield* driver.status).toBe("idle")
      expect(yield* clean).toEqual([])
    }
  )

  agentTest(
    "a cancel during a threshold summary closes its bracket with an error; the turn ends aborted and nothing is replaced",
    withCompaction(
      [
        ...summaryScript.slice(0, 3),
        ScriptedModel.hang(undefined, { awaitBefore: Deferred.succeed(asking, undefined) })
      ],
      { compaction: summaryOptions }
    ),
    function*({ driver, log }) {
      yield* prompt(big("A"), big("B"), user("C"))
      const messages = yield* log.messages
      yield* driver.followup(user("D"))
      yield* Deferred.await(asking)
      yield* driver.cancel(CancelCause.user)
      yield* driver.whenIdle
      expect(yield* shapeFrom("compaction/start")).toEqual([
        "compaction/start",
        "compaction/end",
        "TE(4,aborted(user))"
      ])
      expect((yield* logEvents).find((e) => e.type === "compaction/end")!.data).toMatchObject({
        turn: 4,
        error: { message: "compaction did not complete" }
      })
      expect(yield* log.messages).toEqual(messages)
      expect(yield* clean).toEqual([])
    }
  )

  agentTest(
    "never during a turn: a manual compaction while a tool call is open is AgentBusy and writes nothing",
    withCompaction([toolCall("c1", "block"), ScriptedModel.text("done")], {
      tools: [Tool.make("block", {
        description: "",
        parameters: Schema.Struct({}),
        execute: () => Effect.as(Effect.sleep("1 second"), "done")
      })],
      compaction: { contextWindow: 100_000 }
    }),
    function*({ driver }) {
      const started = yield* Deferred.make<void>()
      yield* (yield* Hooks).onToolPre((_, next) => Effect.zipRight(Deferred.succeed(started, undefined), next()))
      yield* driver.followup(user("A"))
      yield* Deferred.await(started)
      const busy = yield* Effect.flip((yield* Compaction).compactWith({ focus: "x" }))
      expect(busy).toMatchObject({ _tag: "AgentBusy", operation: "runMaintenance", phase: "running" })
      yield* TestClock.adjust("1 second")
      yield* driver.whenIdle
      expect((yield* logEvents).some((e) => e.type.startsWith("compaction/"))).toBe(false)
      expect(yield* clean).toEqual([])
    }
  )
})

describe("Compaction: hooks", () => {
  it.scoped("manual: a pre-compaction veto writes nothing; instructions reach the summary request; post-compaction context enters the next step", () =>
    Effect.gen(function*() {
      yield* fourTurns
      const compaction = yield* Compaction
      const pre: Array<PreCompactInput> = []
      const post: Array<PostCompactInput> = []
      yield* compaction.onPreCompact((input, next) =>
        Effect.gen(function*() {
          pre.push(input)
          if (pre.length === 1) return PreCompactDecision.veto("not now")
          const decision = yield* next()
          return decision._tag === "Proceed"
            ? PreCompactDecision.proceed([...decision.instructions, "Keep the test names."])
            : decision
        })
      )
      yield* compaction.onPostCompact((input, next) =>
        Effect.map(next(), (context) => {
          post.push(input)
          return [...context, "Re-read AGENTS.md"]
        })
      )
      const length = (yield* logEvents).length
      const vetoed = yield* compaction.compactWith({ focus: "f" })
      expect(vetoed).toEqual({
        trigger: "manual",
        pruned: 0,
        tokensBefore: vetoed.tokensBefore,
        tokensAfter: vetoed.tokensBefore,
        vetoed: "not now"
      })
      expect((yield* logEvents).length).toBe(length)
      expect(yield* (yield* ScriptedModel).remaining).toBe(2)
      expect(pre[0]).toMatchObject({ turn: null, trigger: "manual", focus: "f", usage: { window: 4_000 } })
      const report = yield* compaction.compactWith({ focus: "f" })
      expect(report.summarised?.nodes).toBe(3)
      expect(textOfMessage((yield* requests).at(-1)!.messages[0]!)).toContain("Focus on: f\nKeep the test names.")
      expect(post).toEqual([{ sessionId: post[0]!.sessionId, turn: null, trigger: "manual", report }])
      // The context is injected: it enters turn 5's first step, before the follow-up.
      yield* prompt(user("E"))
      const entered = (yield* requests).at(-1)!.messages.slice(-2)
      expect(entered.map(sourceOf)).toEqual([{ kind: "compaction-context", trigger: "manual" }, { kind: "user" }])
      expect(textOfMessage(entered[0]!)).toBe("Re-read AGENTS.md")
      expect(yield* clean).toEqual([])
    }).pipe(
      Effect.provide(
        withCompaction([...summaryScript, ScriptedModel.text("SUMMARY-2"), ScriptedModel.text("e")], {
          compaction: summaryOptions
        })
      )
    ))

  it.scoped("threshold: the post-compaction context enters the step being proposed", () =>
    Effect.gen(function*() {
      const compaction = yield* Compaction
      const pre: Array<PreCompactInput> = []
      yield* compaction.onPreCompact((input, next) => Effect.zipRight(Effect.sync(() => pre.push(input)), next()))
      yield* compaction.onPostCompact(() => Effect.succeed(["CONTEXT"]))
      yield* fourTurns
      expect(pre.map((p) => [p.turn, p.trigger, p.focus])).toEqual([[4, "threshold", undefined]])
      const shown = yield* shapeFrom("compaction/start")
      expect(shown.slice(0, 6)).toEqual([
        "compaction/start",
        "compaction/summary",
        "UM~",
        "compaction/end",
        "SS(4,1)",
        "UM(D)"
      ])
      expect(shown[6]!.startsWith("UM(")).toBe(true)
      const entered = (yield* requests).at(-1)!.messages.slice(-2)
      expect(entered.map((m) => [sourceOf(m).kind, textOfMessage(m)])).toEqual([["user", "D"], [
        "compaction-context",
        "CONTEXT"
      ]])
      expect(yield* clean).toEqual([])
    }).pipe(Effect.provide(withCompaction(summaryScript, { compaction: summaryOptions }))))

  it.scoped("overflow: the post-compaction context is in the retried request (its system prompt, logged by its header) and the later ones, with no step of its own", () =>
    Effect.gen(function*() {
      const compaction = yield* Compaction
      const post: Array<PostCompactInput> = []
      yield* compaction.onPostCompact((input) => Effect.sync(() => post.push(input)).pipe(Effect.as(["CONTEXT"])))
      yield* prompt(user("A"))
      expect(post.map((p) => [p.turn, p.trigger])).toEqual([[1, "overflow"]])
      const turn1 = yield* requests
      // The failed attempt and its retry (step 5, attempts 1 and 2) end the turn: no step for the context.
      expect(turn1.map((r) => [r.step, r.attempt])).toEqual([[1, 1], [2, 1], [3, 1], [4, 1], [5, 1], [5, 2]])
      const [failedAttempt, retried] = turn1.slice(-2)
      expect(failedAttempt!.system ?? "").not.toContain("CONTEXT")
      expect(retried!.system).toMatch(/(^|\n\n)CONTEXT$/)
      const headers = (yield* logEvents).filter((e): e is EventOf<"request/header"> => e.type === "request/header")
      expect(headers.at(-1)!.data).toMatchObject({ reason: "change", header: { system: retried!.system } })
      // The next turn's request still holds it, under the same logged header; no message carries it.
      yield* prompt(user("E"))
      const next = (yield* requests).at(-1)!
      expect(next.system).toBe(retried!.system)
      expect(next.messages.at(-1)).toMatchObject({ source: { kind: "user" } })
      expect((yield* requests).flatMap((r) => r.messages).some((m) => sourceOf(m).kind === "compaction-context")).toBe(
        false
      )
      expect((yield* logEvents).filter((e) => e.type === "request/header")).toHaveLength(headers.length)
      expect(yield* turnEnds).toEqual([{ kind: "completed" }, { kind: "completed" }])
      expect(yield* clean).toEqual([])
    }).pipe(Effect.provide(withCompaction(
      [
        ...fourResults.slice(0, 4),
        ScriptedModel.fail(overflowFailure),
        ScriptedModel.text("done"),
        ScriptedModel.text("e")
      ],
      {
        tools: [sized("read", 4_000), sized("keep", 4_000)],
        compaction: { contextWindow: 100_000, protectRecentTokens: 1_500, threshold: 0.99 }
      }
    ))))

  it.scoped("threshold and overflow: a veto compacts nothing; the overflow then ends the turn error(CONTEXT_OVERFLOW) naming the veto", () =>
    Effect.gen(function*() {
      yield* (yield* Compaction).onPreCompact(() => Effect.succeed(PreCompactDecision.veto("keep everything")))
      yield* fourTurns
      expect((yield* logEvents).some((e) => e.type.startsWith("compaction/"))).toBe(false)
      const reasons = yield* turnEnds
      expect(reasons.slice(0, 4).map((r) => r.kind)).toEqual(["completed", "completed", "completed", "completed"])
      yield* (yield* Driver).followup(user("E"))
      yield* (yield* Driver).whenIdle
      const last = (yield* turnEnds).at(-1) as { readonly error: { readonly message: string; readonly code: string } }
      expect(last.error.code).toBe("CONTEXT_OVERFLOW")
      expect(last.error.message).toContain("a pre-compaction hook vetoed compaction (keep everything)")
      expect(yield* clean).toEqual([])
    }).pipe(Effect.provide(withCompaction(
      [
        ScriptedModel.text("a"),
        ScriptedModel.text("b"),
        ScriptedModel.text("c", { usage: usage(3_300, 10) }),
        ScriptedModel.text("d"),
        ScriptedModel.fail(overflowFailure)
      ],
      { compaction: summaryOptions }
    ))))
})

const F = SessionId.make("f")

describe("Compaction: summaries in the session's lifecycle", () => {
  it.scoped("fork at a boundary before a compaction restores full detail; resume derives the same history and compacts nothing at open", () =>
    Effect.gen(function*() {
      const { after, boundary, full } = yield* Effect.scoped(
        Effect.gen(function*() {
          const log = yield* SessionLog
          yield* prompt(big("A"), big("B"), user("C"))
          const full = yield* log.messages
          const boundary = (yield* log.events).length - 1
          yield* prompt(user("D"))
          expect((yield* log.events).filter((e) => e.type === "compaction/start").length).toBe(1)
          expect(yield* clean).toEqual([])
          return { after: yield* log.messages, boundary, full }
        }).pipe(Effect.provide(agentOn({ sessionId: F }, summaryScript, summaryOptions)))
      )
      expect(after.length).toBe(full.length - 4 + 1 + 2)
      // The fork at turn 3's end: every original message, in full.
      const child = yield* forkSession({ source: F, boundary, childId: SessionId.make("f-child") })
      yield* Effect.scoped(
        Effect.gen(function*() {
          const log = yield* SessionLog
          expect(yield* log.messages).toEqual(full)
          expect((yield* log.events).some((e) => e.type.startsWith("compaction/"))).toBe(false)
          expect(checkLog(yield* log.events, { closed: true, seedLength: log.header.seedLength })).toEqual([])
        }).pipe(Effect.provide(agentOn({ resume: child }, [], summaryOptions)))
      )
      // Resume: the same derived history; opening compacts nothing, although use is past the threshold.
      yield* Effect.scoped(
        Effect.gen(function*() {
          const log = yield* SessionLog
          const events = yield* log.events
          expect(events.at(-1)!.type).toBe("session/end-seed")
          expect(events.filter((e) => e.type === "compaction/start").length).toBe(1)
          expect(yield* log.messages).toEqual(after)
          expect(checkLog(events, { closed: true })).toEqual([])
        }).pipe(Effect.provide(agentOn({ resume: F }, [], { ...summaryOptions, threshold: 0.0001 })))
      )
    }).pipe(Effect.provide(SessionStore.layerMemory)))
})
