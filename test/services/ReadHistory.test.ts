/**
 * Recall (issue 28 item 6): the `read_history` tool reads back shadowed events by seq range, by
 * search text and by tool call, in bounded pages, with clear refusals; pruned placeholders and cut
 * notes quote the call that reads them back.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer, Schema } from "effect"
import { checkLog } from "../../src/domain/Check.js"
import type { EventOf, SessionEvent } from "../../src/domain/Event.js"
import { SessionId } from "../../src/domain/Ids.js"
import { Agent } from "../../src/layers/Agent.js"
import { ScriptedModel } from "../../src/layers/ScriptedModel.js"
import { Driver } from "../../src/services/Driver.js"
import type { ReadHistoryOptions } from "../../src/services/ReadHistory.js"
import { ReadHistory } from "../../src/services/ReadHistory.js"
import { SessionLog } from "../../src/services/SessionLog.js"
import { SessionStore } from "../../src/services/SessionStore.js"
import { Tool, Tools } from "../../src/services/Tools.js"
import type { ToolOutput } from "../../src/services/Tools.js"
import { scenario, user } from "../agent/harness.js"

/** A tool named `page` answering `text(n)`. */
const pageTool = (text: (n: number) => string) =>
  Tool.make("page", {
    description: "",
    parameters: Schema.Struct({ n: Schema.Number }),
    execute: ({ n }) => Effect.succeed(text(n))
  })

/** A tool answering `needle-N` followed by `size` characters of `x`. */
const page = (size: number) => pageTool((n) => `needle-${n} ` + "x".repeat(size))

const call = (id: string, name: string, args: Record<string, unknown>) =>
  ScriptedModel.response({ toolCalls: [{ id, name, arguments: args }] })

const logEvents = Effect.flatMap(SessionLog, (log) => log.events)

const resultOf = (events: ReadonlyArray<SessionEvent>, callId: string) =>
  events.find((e): e is EventOf<"tool/result"> =>
    e.type === "tool/result" && (e as EventOf<"tool/result">).surfaceOp === "append" &&
    (e as EventOf<"tool/result">).data.message.content[0].toolCallId === callId
  )!

const textOf = (event: EventOf<"tool/result">) => {
  const block = event.data.message.content[0].content[0]
  return block?.type === "text" ? block.text : ""
}

/** Runs `read_history` with `params` over the session log in context, as the model would. */
const readHistory = (params: Record<string, unknown>, options?: ReadHistoryOptions) =>
  Effect.gen(function*() {
    const tool = yield* ReadHistory.tool(options)
    const output = (yield* tool.execute(params as never, {} as never)) as ToolOutput
    return { text: output.content as string, isError: output.isError === true }
  })

/** Prompts "A", waits for the turn to end and returns the log. */
const promptA = Effect.gen(function*() {
  const driver = yield* Driver
  yield* driver.followup(user("A"))
  yield* driver.whenIdle
  return yield* logEvents
})

/** A test over one agent `layer`: `body` reads the log that `prompts` returns. */
const overAgent = <E, R>(
  name: string,
  layer: Layer.Layer<any, any, never>,
  prompts: Effect.Effect<ReadonlyArray<SessionEvent>, any, any>,
  body: (events: ReadonlyArray<SessionEvent>) => Effect.Effect<void, E, R>
) =>
  it.scoped(
    name,
    () => Effect.flatMap(prompts, body).pipe(Effect.provide(layer)) as Effect.Effect<void, unknown, never>
  )

/** A test over one agent `layer`: `body` reads the log after the turn of prompt "A". */
const afterPromptA = <E, R>(
  name: string,
  layer: Layer.Layer<any, any, never>,
  body: (events: ReadonlyArray<SessionEvent>) => Effect.Effect<void, E, R>
) => overAgent(name, layer, promptA, body)

describe("read_history: the agent's option", () => {
  afterPromptA(
    "offered in every request; a pruned placeholder quotes the call that reads the result back, and that call does",
    scenario([
      call("c1", "page", { n: 1 }),
      call("c2", "page", { n: 2 }),
      call("c3", "page", { n: 3 }),
      call("c4", "page", { n: 4 }),
      call("h1", "read_history", { query: "NEEDLE-1" }),
      ScriptedModel.text("done")
    ], {
      tools: [page(8_000)],
      agent: {
        readHistory: { maxChars: 20_000 },
        compaction: { contextWindow: 10_000, protectRecentTokens: 2_500, minimumPruneTokens: 100 }
      }
    }),
    (events) =>
      Effect.gen(function*() {
        const requests = yield* (yield* ScriptedModel).requests
        expect(requests.every((r) => r.tools.some((t) => t.name === "read_history"))).toBe(true)
        // The shared registry is untouched: the tool is the agent's own.
        expect((yield* (yield* Tools).list).map((t) => t.name)).toEqual(["page"])
        // Threshold pruned the oldest results before step 5; c1's placeholder names its seq.
        const r1 = resultOf(events, "c1")
        const pruned = events.find((e): e is EventOf<"tool/result"> => {
          const op = (e as EventOf<"tool/result">).surfaceOp
          return e.type === "tool/result" && typeof op === "object" && op.start === r1.seq
        })!
        expect(textOf(pruned)).toContain(`Read it back with read_history {"from":${r1.seq},"to":${r1.seq}}.]`)
        // The model's search (step 5) found the shadowed result.
        const found = textOf(resultOf(events, "h1"))
        expect(found).toContain(`#${r1.seq} tool result of page (call c1) [shadowed]:`)
        expect(found).toContain("needle-1 xxx")
        expect(found).not.toContain("needle-4")
        // The quoted call reads the whole original text.
        const back = yield* readHistory({ from: r1.seq, to: r1.seq })
        expect(back.isError).toBe(false)
        expect(back.text).toContain(`needle-1 ${"x".repeat(8_000)}`)
        expect(checkLog(events, { closed: true })).toEqual([])
      })
  )

  afterPromptA(
    "a capped result's note quotes the call for the missing part; its pages stay under the cap and read on",
    scenario([
      call("c1", "page", { n: 1 }),
      call("h1", "read_history", { toolCallId: "c1", offset: 600 }),
      call("h2", "read_history", { toolCallId: "c1", offset: 4_800 }),
      ScriptedModel.text("done")
    ], {
      tools: [pageTool(() => "needle-1 " + "x".repeat(900) + "MIDDLE" + "y".repeat(4_095))],
      agent: { readHistory: true, compaction: { contextWindow: 100_000, maxToolResultChars: 1_000 } }
    }),
    (events) =>
      Effect.sync(() => {
        const shown = textOf(resultOf(events, "c1"))
        expect(shown).toContain(`To see the missing part, read it with read_history {"toolCallId":"c1","offset":600}.]`)
        expect(shown).not.toContain("MIDDLE")
        const first = resultOf(events, "h1")
        expect(first.data.meta).toBeUndefined()
        expect(textOf(first).length).toBeLessThanOrEqual(1_000)
        expect(textOf(first)).toContain("full output of call c1 (page, seq")
        expect(textOf(first)).toContain("characters 600-1,300 of 5,010")
        expect(textOf(first)).toContain("MIDDLE")
        expect(textOf(first)).toContain(`[page full; read on with read_history {"toolCallId":"c1","offset":1300}]`)
        const last = textOf(resultOf(events, "h2"))
        expect(last).toContain("characters 4,800-5,010 of 5,010")
        expect(last).not.toContain("read on")
        expect(checkLog(events, { closed: true })).toEqual([])
      })
  )

  afterPromptA(
    "without the option: no read_history in requests, and placeholders and notes advise calling the tool again",
    scenario([
      call("c1", "page", { n: 1 }),
      call("h1", "read_history", { from: 0 }),
      ScriptedModel.text("done")
    ], { tools: [page(5_000)], agent: { compaction: { contextWindow: 100_000, maxToolResultChars: 1_000 } } }),
    (events) =>
      Effect.gen(function*() {
        const requests = yield* (yield* ScriptedModel).requests
        expect(requests.some((r) => r.tools.some((t) => t.name === "read_history"))).toBe(false)
        expect(textOf(resultOf(events, "c1"))).toContain("call the tool again with a narrower request")
        expect(textOf(resultOf(events, "c1"))).not.toContain("read_history")
        // The model calling it anyway gets the loop's unknown-tool error.
        expect(resultOf(events, "h1").data.message.content[0].isError).toBe(true)
      })
  )

  it.scoped("agents sharing one Tools layer each read their own log", () =>
    Effect.gen(function*() {
      const shared = yield* Layer.build(Layer.mergeAll(SessionStore.layerMemory, Tools.layer({ tools: [page(100)] })))
      const agent = (name: string) =>
        Layer.build(
          Agent.layer({ sessionId: SessionId.make(name), model: { provider: "p", model: "m" }, readHistory: true })
            .pipe(
              Layer.provide(
                ScriptedModel.layer([call("h", "read_history", { query: "secret" }), ScriptedModel.text("done")])
              )
            )
        ).pipe(Effect.provide(shared))
      const a = yield* agent("a")
      const b = yield* agent("b")
      const ask = (text: string) =>
        Effect.gen(function*() {
          const driver = yield* Driver
          yield* driver.followup(user("q", text))
          yield* driver.whenIdle
          return textOf(resultOf(yield* logEvents, "h"))
        })
      const inA = yield* ask("the secret of a").pipe(Effect.provide(a))
      const inB = yield* ask("the secret of b").pipe(Effect.provide(b))
      expect(inA).toContain("the secret of a")
      expect(inA).not.toContain("the secret of b")
      expect(inB).toContain("the secret of b")
      expect(inB).not.toContain("the secret of a")
    }))

  afterPromptA(
    "a bad request through the loop is an error result and the turn goes on",
    scenario([call("h1", "read_history", {}), ScriptedModel.text("done")], { agent: { readHistory: true } }),
    (events) =>
      Effect.sync(() => {
        const result = resultOf(events, "h1")
        expect(result.data.message.content[0].isError).toBe(true)
        expect(textOf(result)).toContain("give a seq range")
        const end = events.at(-1) as EventOf<"turn/end">
        expect(end.data.reason.kind).toBe("completed")
      })
  )
})

describe("read_history: ranges, searches, pages and refusals", () => {
  // A session of 6 turns, each a user message, a tool call and its result, and an answer.
  const session = scenario(
    Array.from({ length: 6 }, (_, i) => [call(`c${i}`, "page", { n: i }), ScriptedModel.text(`answer ${i}`)]).flat(),
    { tools: [page(700)] }
  )
  const run = Effect.gen(function*() {
    const driver = yield* Driver
    for (let i = 0; i < 6; i++) {
      yield* driver.followup(user(`q${i}`, `question ${i}`))
      yield* driver.whenIdle
    }
    return yield* logEvents
  })
  const overSession = <E, R>(name: string, body: (events: ReadonlyArray<SessionEvent>) => Effect.Effect<void, E, R>) =>
    overAgent(name, session, run, body)
  const messageSeqs = (events: ReadonlyArray<SessionEvent>) =>
    events.filter((e) => e.type === "user/message" || e.type === "tool/result" || e.type === "assistant/message").map((
      e
    ) => e.seq)

  overSession(
    "a range in pages: following each page's call shows every message once, in order, each whole",
    (events) =>
      Effect.gen(function*() {
        const seen: Array<number> = []
        let next: Record<string, unknown> | undefined = { from: 0 }
        let pages = 0
        let body = ""
        while (next !== undefined) {
          const page = yield* readHistory(next, { maxChars: 1_000 })
          expect(page.isError).toBe(false)
          expect(page.text.length).toBeLessThanOrEqual(1_000)
          pages += 1
          for (const match of page.text.matchAll(/^#(\d+) /gm)) seen.push(Number(match[1]))
          body += page.text
          const more = /read on with read_history (\{.*\})\]$/.exec(page.text)
          next = more === null ? undefined : JSON.parse(more[1]!)
        }
        expect(pages).toBeGreaterThan(3)
        // An entry split over pages is listed on each of them.
        expect([...new Set(seen)]).toEqual(messageSeqs(events))
        for (let i = 0; i < 6; i++) expect(body).toContain(`needle-${i} `)
      })
  )

  overSession(
    "a search lists matching messages with snippets, skips its own calls and results, and pages by seq",
    (events) =>
      Effect.gen(function*() {
        const all = yield* readHistory({ query: "Needle-" })
        const listed = [...all.text.matchAll(/^#(\d+) /gm)].map((m) => Number(m[1]))
        expect(listed).toEqual(["c0", "c1", "c2", "c3", "c4", "c5"].map((id) => resultOf(events, id).seq))
        expect(all.text).toContain("…")
        const narrow = yield* readHistory({ query: "needle-", from: listed[2]!, to: listed[3]! })
        expect([...narrow.text.matchAll(/^#(\d+) /gm)].map((m) => Number(m[1]))).toEqual([listed[2], listed[3]])
        const paged = yield* readHistory({ query: "needle-", maxChars: 600 })
        expect(paged.text).toContain(`more matches with read_history {"query":"needle-","from":`)
        expect(yield* readHistory({ query: "no such text" })).toEqual({
          text: `read_history: matches of "no such text" in seqs 0-${events.length - 1}\nno matches`,
          isError: false
        })
      })
  )

  overSession("bad requests are refused with what to do, and change nothing", (events) =>
    Effect.gen(function*() {
      const last = events.length - 1
      const refused = (params: Record<string, unknown>) =>
        Effect.map(readHistory(params), (r) => (r.isError ? r.text : `accepted: ${r.text}`))
      expect(yield* refused({})).toContain(`read_history: give a seq range (read_history {"from":10,"to":20})`)
      expect(yield* refused({ from: 5, to: 2 })).toBe("read_history: to 2 is before from 5; give from ≤ to")
      expect(yield* refused({ from: last + 1 })).toBe(
        `read_history: from ${last + 1} is past the end of the log (its seqs are 0-${last})`
      )
      expect(yield* refused({ from: -1 })).toBe("read_history: from and to must be non-negative integers (seqs)")
      expect(yield* refused({ query: "  " })).toBe("read_history: query is empty; give the text to search for")
      expect(yield* refused({ query: "q".repeat(201) })).toContain("query is longer than 200 characters")
      expect(yield* refused({ toolCallId: "nope" })).toBe(`read_history: no tool result of call "nope" in this session`)
      expect(yield* refused({ toolCallId: "c0", offset: 10_000 })).toBe(
        "read_history: offset 10000 is past the end of the output of call c0 (709 characters)"
      )
      const c0 = resultOf(events, "c0").seq
      expect(yield* refused({ from: c0, to: c0, offset: 709 })).toBe(
        `read_history: offset 709 is past the end of seq ${c0}'s text (709 characters)`
      )
      expect((yield* logEvents).length).toBe(events.length)
    }))
})
