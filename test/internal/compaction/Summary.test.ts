/**
 * The summary plan (issue 28 item 4): the range a summary replaces (a recent tail kept by tokens,
 * a tool call never separated from its result, pinned instructions and the open step never inside),
 * the previous summary it updates, the request's transcript and instruction, and the answer.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Stream } from "effect"
import type { SessionEvent } from "../../../src/domain/Event.js"
import type { StreamChunk } from "../../../src/domain/Values.js"
import type { LogView } from "../../../src/internal/compaction/Prune.js"
import { placeholderOf } from "../../../src/internal/compaction/Prune.js"
import type { SummaryRules } from "../../../src/internal/compaction/Summary.js"
import {
  collectSummary,
  openStepStartOf,
  planSummary,
  summaryInstruction,
  summaryText,
  transcriptOf
} from "../../../src/internal/compaction/Summary.js"

type Node =
  | { readonly u: string; readonly kind?: string }
  | { readonly a: string; readonly calls?: ReadonlyArray<string> }
  | { readonly r: string; readonly text: string }
  | { readonly step: true }

/** A log of the given nodes at seqs 0, 1, …; every message node is on the surface. */
const logOf = (nodes: ReadonlyArray<Node>): Array<SessionEvent> =>
  nodes.map((node, seq): SessionEvent => {
    if ("step" in node) return { type: "step/start", seq, time: 0, data: { turn: 1, step: 1 } } as SessionEvent
    if ("u" in node) {
      const data = {
        id: `u${seq}`,
        role: "user",
        content: [{ type: "text", text: node.u }],
        source: { kind: node.kind ?? "user" }
      }
      return { type: "user/message", seq, time: 0, data, surfaceOp: "append" } as SessionEvent
    }
    if ("a" in node) {
      const content = [
        ...(node.a === "" ? [] : [{ type: "text", text: node.a }]),
        ...(node.calls ?? []).map((id) => ({ type: "tool-call", id, name: "read", arguments: "{}" }))
      ]
      const message = {
        id: `a${seq}`,
        role: "assistant",
        content,
        source: { kind: "model", provider: "p", model: "m" }
      }
      return {
        type: "assistant/message",
        seq,
        time: 0,
        data: { turn: 1, step: 1, attempt: 1, message },
        surfaceOp: "append"
      } as SessionEvent
    }
    const message = {
      id: `t${seq}`,
      role: "user",
      content: [{
        type: "tool-result",
        toolCallId: node.r,
        isError: false,
        content: [{ type: "text", text: node.text }]
      }],
      source: { kind: "tool", callId: node.r }
    }
    return {
      type: "tool/result",
      seq,
      time: 0,
      data: { turn: 1, step: 1, message },
      surfaceOp: "append"
    } as SessionEvent
  })

const viewOf = (events: ReadonlyArray<SessionEvent>, surface?: ReadonlyArray<number>): LogView => {
  const seqs = surface ??
    events.filter((e) => (e as { readonly surfaceOp?: unknown }).surfaceOp !== undefined).map((e) => e.seq)
  return { surface: { length: seqs.length, buffer: seqs }, eventAt: (seq) => events[seq] }
}

const rules = (keepRecentTokens: number, overrides: Partial<SummaryRules> = {}): SummaryRules => ({
  keepRecentTokens,
  pinnedSources: new Set(["system", "instructions"]),
  openStepStart: -1,
  ...overrides
})

const x = (n: number) => "x".repeat(n)

describe("planSummary", () => {
  it("keeps a recent tail by tokens and replaces what comes before it", () => {
    // U 400 characters: 104 tokens; A "a": 5 tokens.
    const view = viewOf(logOf([{ u: x(400) }, { a: "a" }, { u: x(400) }, { a: "b" }, { u: x(400) }, { a: "c" }]))
    // The tail: c (5) + U (104) = 109 < 110, so b joins it: the range is seqs 0–2.
    expect(planSummary(view, rules(110))).toMatchObject({ start: 0, end: 2, seqs: [0, 1, 2], tokens: 104 + 5 + 104 })
    // A tail of 100 tokens is reached at the fifth node: the range is seqs 0–3.
    expect(planSummary(view, rules(100))).toMatchObject({ start: 0, end: 3, seqs: [0, 1, 2, 3] })
  })

  it("never separates a tool call from its result: the cut moves back to the assistant message", () => {
    const view = viewOf(logOf([
      { u: "go" },
      { a: "", calls: ["c1"] },
      { r: "c1", text: x(4_000) },
      { a: "", calls: ["c2"] },
      { r: "c2", text: x(4_000) },
      { a: "done" }
    ]))
    // The tail reaches 1,000 tokens at c2's result; the cut goes back to c2's call (seq 3).
    const range = planSummary(view, rules(1_000))!
    expect(range.seqs).toEqual([0, 1, 2])
    // Several results after one message: the cut never lands between them.
    const two = viewOf(logOf([
      { u: "start" },
      { a: "ok" },
      { u: "go" },
      { a: "", calls: ["c1", "c2"] },
      { r: "c1", text: x(4_000) },
      { r: "c2", text: x(40) },
      { u: "next" },
      { a: "done" }
    ]))
    expect(planSummary(two, rules(10))!.seqs).toEqual([0, 1, 2, 3, 4, 5])
    // The tail reaches 20 tokens at c2's result: the cut goes back past both results to their call.
    expect(planSummary(two, rules(20))!.seqs).toEqual([0, 1, 2])
  })

  it("when the cut moved back would leave fewer than two nodes, it moves past the results instead: a large result at the tail's edge is summarised", () => {
    const view = viewOf(logOf([
      { u: "go" },
      { a: "", calls: ["c1"] },
      { r: "c1", text: x(4_000) },
      { a: "ok" },
      { u: "next" },
      { a: "done" }
    ]))
    // The tail reaches 100 tokens at c1's result; back to its call would leave only "go", so the
    // range ends after the result.
    expect(planSummary(view, rules(100))!.seqs).toEqual([0, 1, 2])
    // A step at the tail's edge no larger than the tail is kept whole: nothing to do.
    expect(planSummary(view, rules(1_100))).toBeUndefined()
  })

  it("never replaces a pinned instruction: the range starts after the last one before the cut", () => {
    const first = viewOf(logOf([{ u: "rules", kind: "instructions" }, { u: "A" }, { a: "a" }, { u: "B" }, { a: "b" }]))
    expect(planSummary(first, rules(5))!.seqs).toEqual([1, 2, 3])
    const middle = viewOf(
      logOf([{ u: "A" }, { a: "a" }, { u: "sys", kind: "system" }, { u: "B" }, { a: "b" }, { u: "C" }, { a: "c" }])
    )
    expect(planSummary(middle, rules(5))!.seqs).toEqual([3, 4, 5])
    // Another pinned kind is honoured when configured.
    expect(planSummary(first, rules(5, { pinnedSources: new Set(["user"]) }))).toBeUndefined()
  })

  it("never includes a node of the open step", () => {
    const events = logOf([{ u: "A" }, { a: "a" }, { u: "B" }, { a: "b" }, { step: true }, { u: "C" }])
    expect(openStepStartOf(events.length, (seq) => events[seq])).toBe(4)
    const range = planSummary(viewOf(events), rules(0, { openStepStart: 4 }))!
    expect(range.seqs).toEqual([0, 1, 2, 3])
    expect(planSummary(viewOf(events), rules(0))!.seqs).toEqual([0, 1, 2, 3, 5])
  })

  it("has nothing to do with fewer than two nodes before the tail", () => {
    expect(planSummary(viewOf(logOf([{ u: "A" }, { a: "a" }])), rules(5))).toBeUndefined()
    expect(planSummary(viewOf(logOf([])), rules(0))).toBeUndefined()
  })

  it("finds the previous summary in the range: its text without the heading", () => {
    const previous = summaryText({ start: 0, end: 9 }, "OLD SUMMARY")
    const view = viewOf(logOf([{ u: previous, kind: "compaction" }, { u: "B" }, { a: "b" }, { u: "C" }, { a: "c" }]))
    const range = planSummary(view, rules(5))!
    expect(range.previous).toEqual({ seq: 0, text: "OLD SUMMARY" })
    const transcript = transcriptOf(view, range, 10_000)
    expect(transcript).toBe(
      "<previous-summary>\nOLD SUMMARY\n</previous-summary>\n\n<conversation>\n[user] B\n[assistant] b\n[user] C\n</conversation>"
    )
  })
})

describe("transcriptOf", () => {
  it("shows calls and results (a long one shortened), a pruned result from its original, and drops the oldest entries past the budget", () => {
    const events = logOf([
      { u: "go" },
      { a: "reading", calls: ["c1"] },
      { r: "c1", text: "HEAD" + x(10_000) + "TAIL" },
      { a: "done" }
    ])
    // c1's result is pruned: its replacement (seq 4) cites the original first.
    const pruned = {
      ...events[2]!,
      seq: 4,
      data: {
        ...(events[2]!.data as object),
        message: {
          ...(events[2]!.data as { readonly message: object }).message,
          content: [{
            type: "tool-result",
            toolCallId: "c1",
            isError: false,
            content: [{ type: "text", text: placeholderOf("read", 10_008, 2) }]
          }]
        }
      },
      surfaceOp: { op: "replace", start: 2, end: 2 },
      sourceEventSeqs: [2, 3]
    } as SessionEvent
    const all = [...events, pruned]
    const view = viewOf(all, [0, 1, 4, 3])
    const range = { start: 0, end: 3, seqs: [0, 1, 4, 3], tokens: 0, previous: undefined }
    const transcript = transcriptOf(view, range, 100_000)
    expect(transcript).toContain("[user] go\n[assistant] reading\n[calls read (c1) with {}]\n[result of c1] HEAD")
    expect(transcript).toContain("[…8,008 characters…]")
    expect(transcript).toContain("TAIL\n[assistant] done\n</conversation>")
    expect(transcript).not.toContain("tool result pruned")
    const short = transcriptOf(view, range, 100)
    expect(short).toBe(
      "<conversation>\n[… 3 earlier messages omitted here; they stay in the session log]\n[assistant] done\n</conversation>"
    )
  })
})

describe("the summary request and answer", () => {
  it("asks for the structured sections; updates a previous summary; carries the focus and hook instructions", () => {
    expect(summaryInstruction(false, undefined)).toBe(
      "Summarise the conversation above.\n" +
        "Use the sections Goal, Decisions, State of the work, Files and tools touched, Open questions. Answer with the summary only; call no tool."
    )
    const update = summaryInstruction(true, "  the parser  ", ["Keep the test names.", " "])
    expect(update.startsWith("Update the previous summary above")).toBe(true)
    expect(update).toContain("Do not summarise the summary.")
    expect(update.endsWith("Focus on: the parser\nKeep the test names.")).toBe(true)
  })

  const stream = (chunks: ReadonlyArray<StreamChunk>) => Stream.fromIterable(chunks)

  it.effect("the answer is the streamed text; a failed finish or an empty answer is a ModelError", () =>
    Effect.gen(function*() {
      expect(
        yield* collectSummary(stream([
          { type: "block-start", index: 0, block: "reasoning" },
          { type: "reasoning-delta", index: 0, text: "hmm" },
          { type: "block-start", index: 1, block: "text" },
          { type: "text-delta", index: 1, text: "Goal: " },
          { type: "text-delta", index: 1, text: "x" },
          { type: "finish", finish: { kind: "max-tokens" } }
        ]))
      ).toBe("Goal: x")
      const failure = { message: "overloaded", code: "OVERLOADED" }
      const failed = yield* Effect.flip(
        collectSummary(stream([{ type: "finish", finish: { kind: "error", failure } }]))
      )
      expect(failed.failure).toEqual(failure)
      const empty = yield* Effect.flip(
        collectSummary(
          stream([{ type: "text-delta", index: 0, text: " " }, { type: "finish", finish: { kind: "stop" } }])
        )
      )
      expect(empty.failure.code).toBe("EMPTY_SUMMARY")
    }))
})
