/**
 * Compaction property (issue 28): random long sessions with random tool sizes on random windows.
 * After compaction every request the model answers fits the window (a refused one is compacted and
 * retried once), every turn completes, the log checks, and every event compaction shadowed stays
 * readable through `read_history`, whole.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, FastCheck, Layer, Schema, Stream } from "effect"
import { checkLog } from "../../src/domain/Check.js"
import type { EventOf } from "../../src/domain/Event.js"
import { SessionId } from "../../src/domain/Ids.js"
import { messageOf } from "../../src/domain/Surface.js"
import type { Message, StreamChunk } from "../../src/domain/Values.js"
import { tokensOfMessage } from "../../src/internal/compaction/Budget.js"
import { Agent } from "../../src/layers/Agent.js"
import { Driver } from "../../src/services/Driver.js"
import { Model } from "../../src/services/Model.js"
import { ReadHistory } from "../../src/services/ReadHistory.js"
import { SessionLog } from "../../src/services/SessionLog.js"
import { SessionStore } from "../../src/services/SessionStore.js"
import { Tool, Tools } from "../../src/services/Tools.js"
import type { ToolOutput } from "../../src/services/Tools.js"
import { user } from "../agent/harness.js"

interface TurnPlan {
  readonly prompt: number
  /** One tool call per step, with the size of its output in characters; then an answer. */
  readonly tools: ReadonlyArray<number>
}

const turnPlan: FastCheck.Arbitrary<TurnPlan> = FastCheck.record({
  prompt: FastCheck.integer({ min: 1, max: 2_000 }),
  tools: FastCheck.array(FastCheck.integer({ min: 0, max: 100_000 }), { maxLength: 3 })
})

const blob = Tool.make("blob", {
  description: "",
  parameters: Schema.Struct({ size: Schema.Number, tag: Schema.String }),
  mode: "parallel",
  execute: ({ size, tag }) => Effect.succeed(`${tag}:${"b".repeat(size)}`)
})

const finish = (inputTokens: number): ReadonlyArray<StreamChunk> => [
  { type: "usage", usage: { inputTokens, outputTokens: 5 } },
  { type: "finish", finish: { kind: "stop" } }
]

const text = (t: string): ReadonlyArray<StreamChunk> => [
  { type: "block-start", index: 0, block: "text" },
  { type: "text-delta", index: 0, text: t },
  { type: "block-end", index: 0 }
]

interface Seen {
  readonly key: string
  readonly tokens: number
  readonly refused: boolean
}

/**
 * A model following `plan` by the request's turn and step. Its provider counts `density` times the
 * agent's characters / 4 estimate, reports that count, and refuses (context overflow) a request
 * over the window; it records each request.
 */
const plannedModel = (plan: ReadonlyArray<TurnPlan>, window: number, density: number, seen: Array<Seen>) =>
  Model.of({
    stream: (request) =>
      Stream.suspend(() => {
        const tokens = Math.ceil(density * request.messages.reduce((n, m) => n + tokensOfMessage(m), 0))
        const refused = tokens > window
        seen.push({ key: `${request.turn}.${request.step}`, tokens, refused })
        if (refused) {
          const failure = { code: "CONTEXT_OVERFLOW", message: `${tokens} tokens > ${window}` }
          return Stream.make({ type: "finish", finish: { kind: "error", failure } } as StreamChunk)
        }
        const sizes = plan[request.turn - 1]?.tools ?? []
        const size = sizes[request.step - 1]
        if (size === undefined) return Stream.fromIterable([...text(`answer ${request.turn}`), ...finish(tokens)])
        const id = `c${request.turn}-${request.step}`
        return Stream.fromIterable([
          { type: "block-start", index: 0, block: "tool-call", id, name: "blob" },
          { type: "tool-call-delta", index: 0, arguments: JSON.stringify({ size, tag: id }) },
          { type: "block-end", index: 0 },
          ...finish(tokens)
        ] as ReadonlyArray<StreamChunk>)
      })
  })

const summaryModel = Model.of({
  stream: () =>
    Stream.fromIterable([
      ...text("Goal: test.\nDecisions: none.\nState: going on.\nFiles: none.\nOpen questions: none."),
      ...finish(0)
    ])
})

/** The texts a reader must find again: every text block and tool-result text of a message. */
const textsOf = (message: Message): Array<string> =>
  message.content.flatMap((b) =>
    b.type === "text"
      ? [b.text]
      : b.type === "tool-result"
      ? b.content.flatMap((c) => (c.type === "text" ? [c.text] : []))
      : []
  )

describe("compaction property", () => {
  it.effect.prop(
    "random long sessions: answered requests fit the window, turns complete, the log checks, shadowed events read back whole",
    [
      FastCheck.integer({ min: 2_000, max: 16_000 }),
      FastCheck.double({ min: 1, max: 2, noNaN: true }),
      FastCheck.double({ min: 0.7, max: 0.98, noNaN: true }),
      FastCheck.array(turnPlan, { minLength: 5, maxLength: 30 })
    ],
    ([window, density, threshold, plan]) => {
      const seen: Array<Seen> = []
      const layer = Agent.layer({
        sessionId: SessionId.make("p"),
        model: { provider: "p", model: "m" },
        readHistory: true,
        compaction: {
          contextWindow: window,
          threshold,
          summary: { model: { service: summaryModel, provider: "p", model: "s" } }
        }
      }).pipe(
        Layer.provideMerge(
          Layer.mergeAll(
            SessionStore.layerMemory,
            Layer.succeed(Model, plannedModel(plan, window, density, seen)),
            Tools.layer({ tools: [blob] })
          )
        )
      )
      return Effect.gen(function*() {
        const driver = yield* Driver
        const log = yield* SessionLog
        for (let i = 0; i < plan.length; i++) {
          yield* driver.followup(user(`u${i}`, `${i}:${"u".repeat(plan[i]!.prompt)}`))
          yield* driver.whenIdle
        }
        const events = yield* log.events
        expect(checkLog(events, { closed: false })).toEqual([])
        const ends = events.filter((e) => e.type === "turn/end").map((e) => (e as EventOf<"turn/end">).data.reason.kind)
        expect(ends).toEqual(plan.map(() => "completed"))
        // The last attempt of every step fits; a refused attempt is always followed by one that fits.
        const last = new Map<string, Seen>()
        for (const s of seen) last.set(s.key, s)
        for (const s of last.values()) expect(s.tokens).toBeLessThanOrEqual(window)
        // Every message event off the surface reads back whole, by its seq.
        const surface = new Set(yield* log.surface)
        const tool = yield* ReadHistory.tool({ maxChars: 1_000_000 })
        for (const event of events) {
          const message = messageOf(event)
          if (message === undefined || surface.has(event.seq)) continue
          const page = (yield* tool.execute({ from: event.seq, to: event.seq }, {} as never)) as ToolOutput
          const shown = page.content as string
          expect(shown).toContain(`#${event.seq} `)
          expect(shown).toContain("[shadowed]")
          for (const t of textsOf(message)) expect(shown.includes(t)).toBe(true)
        }
        // A capped result's full output reads back through its call id.
        for (const [i, turn] of plan.entries()) {
          for (const [j, size] of turn.tools.entries()) {
            const id = `c${i + 1}-${j + 1}`
            const page = (yield* tool.execute({ toolCallId: id }, {} as never)) as ToolOutput
            expect(page.content as string).toContain(` of ${(id.length + 1 + size).toLocaleString("en-US")}:\n${id}:`)
          }
        }
      }).pipe(Effect.scoped, Effect.provide(layer))
    },
    { fastCheck: { numRuns: Number(process.env.TILLER_PROPERTY_RUNS ?? 25) } }
  )
})
