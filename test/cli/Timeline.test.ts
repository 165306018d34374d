/**
 * The timeline's words for compaction (issue 28 item 8): each bracket event with its kind and
 * trigger, what it replaced and the tokens before and after; and the chat's status line share.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { chatView, describeCompaction, spentNote, statusLine, timeline } from "../../src/cli/Timeline.js"
import * as Cost from "../../src/domain/Cost.js"
import type { SessionEvent } from "../../src/domain/Event.js"
import * as Prices from "../../src/domain/Prices.js"
import { emptyInbox } from "../../src/domain/Splice.js"
import { approvalSession } from "../fixtures/approvalSession.js"

const event = (type: string, data: unknown): SessionEvent =>
  ({ type, data, seq: 1, time: 0 }) as unknown as SessionEvent

describe("Timeline: compaction brackets", () => {
  it("a summary bracket: the range it replaces, the focus, who wrote it, the tokens before and after", () => {
    const bracket = { turn: null, kind: "summary", trigger: "manual" }
    expect(describeCompaction(event("compaction/start", {
      ...bracket,
      tokensBefore: 12_345,
      range: { start: 4, end: 90, nodes: 31 },
      focus: "the failing test"
    }))).toBe(
      "summary (manual) start · replacing history 4-90 (31 nodes) · 12,345 tokens in use · focus: the failing test"
    )
    expect(
      describeCompaction(
        event("compaction/summary", {
          ...bracket,
          provider: "anthropic",
          model: "claude-haiku",
          characters: 2_100,
          updates: 40
        })
      )
    )
      .toBe(
        "summary (manual) summary written by anthropic:claude-haiku (2,100 characters), updating the summary at seq 40"
      )
    expect(describeCompaction(event("compaction/end", {
      ...bracket,
      replaced: { start: 4, end: 90, nodes: 31 },
      tokensBefore: 12_345,
      tokensAfter: 2_001
    }))).toBe("summary (manual) end · replaced history 4-90 (31 nodes) · tokens 12,345 → 2,001")
  })

  it("a prune bracket lists the results it replaced (shortened past six)", () => {
    const end = (pruned: ReadonlyArray<number>) =>
      describeCompaction(
        event("compaction/end", {
          turn: 3,
          kind: "prune",
          trigger: "overflow",
          pruned,
          tokensBefore: 900,
          tokensAfter: 300
        })
      )
    expect(end([5])).toBe("prune (overflow) end · replaced 1 tool result (seqs 5) · tokens 900 → 300")
    expect(end([5, 9, 12, 20, 31, 40, 51, 66])).toBe(
      "prune (overflow) end · replaced 8 tool results (seqs 5, 9, 12, … (4 more), 66) · tokens 900 → 300"
    )
  })

  it("a failed bracket says so; a bracket of another producer shows what it has", () => {
    expect(
      describeCompaction(
        event("compaction/end", {
          turn: 2,
          kind: "summary",
          trigger: "threshold",
          error: { message: "model timed out" }
        })
      )
    )
      .toBe("summary (threshold) end: failed (model timed out)")
    expect(describeCompaction(event("compaction/start", { turn: 2 }))).toBe("compaction start")
  })

  it("the status line ends with the share of the window in use", () => {
    const position = { turn: 3, step: 0, inTurn: false, pending: emptyInbox }
    expect(statusLine("idle", position, { fraction: 0.634 })).toBe(
      "[idle · 3 turns · pending: 0 queued, 0 next-step · ctx 63%]"
    )
    expect(statusLine("idle", position)).toBe("[idle · 3 turns · pending: 0 queued, 0 next-step]")
  })

  it("the status line says what the session has spent, or that its model has no price; a free session says nothing", () => {
    const position = { turn: 3, step: 0, inTurn: false, pending: emptyInbox }
    const usage = { inputTokens: 200, outputTokens: 50, cacheReadTokens: 10_000, cacheWriteTokens: 0 }
    const priced = spentNote(Cost.tallyOf(usage, "anthropic", "claude-haiku-4-5", Prices.PRICES))
    expect(statusLine("idle", position, { fraction: 0.1 }, priced)).toBe(
      "[idle · 3 turns · pending: 0 queued, 0 next-step · ctx 10% · $0.0014 · 10,200 in (10,000 cache read) / 50 out tokens]"
    )
    // OpenAI-style usage counts the cached input within inputTokens.
    expect(spentNote(Cost.tallyOf({ ...usage, inputTokens: 10_200 }, "openai-compatible", "llama3.1", Prices.PRICES)))
      .toBe(
        "no price for model llama3.1 · 10,200 in (10,000 cache read) / 50 out tokens"
      )
    expect(spentNote(Cost.tallyOf(usage, "demo", "demo", Prices.PRICES))).toBeUndefined()
  })
})

describe("Timeline: hooks in the chat", () => {
  it("a hook's systemMessage and the stop reason of its continue false are shown as they come", () => {
    const view = chatView()
    expect(view.render(event("hook/run", { event: "PostToolUse", hook: "./lint.sh", systemMessage: "lint is clean" })))
      .toBe("  (PostToolUse hook: lint is clean)\n")
    expect(view.render(event("hook/run", { event: "Stop", hook: "./stop.sh", stop: "the budget is spent" }))).toBe(
      "  (Stop hook stopped the turn: the budget is spent)\n"
    )
    expect(view.render(event("hook/run", { event: "Stop", hook: "./stop.sh", exitCode: 0 }))).toBe("")
  })
})

describe("Timeline: durable approvals", () => {
  it.live("tiller log shows each request and its answer; the chat view asks and says who answered", () =>
    Effect.gen(function*() {
      const { events, header } = yield* approvalSession
      const log = timeline(header)
      const lines = events.flatMap((e) => log.render(e))
      const approvals = lines.filter((l) => /^ *\d+ {2}\S+ {2}approval /.test(l)).map((l) =>
        l.replace(/^.*? approval +/, "")
      )
      expect(approvals).toEqual([
        "asked for Bash {\"command\":\"make\"} (c1): Bash needs approval in default mode",
        "c1 approved by alice (always: Bash(make))",
        "asked for Bash {\"command\":\"rm -rf build\"} (c2): Bash needs approval in default mode",
        "c2 refused by bob: not today"
      ])
      const view = chatView()
      const shown = events.map((e) => view.render(e)).join("")
      expect(shown).toContain(
        "  ? approve Bash {\"command\":\"rm -rf build\"}? Bash needs approval in default mode. Answer y, n [REASON] or always"
      )
      expect(shown).toContain("  · c2 refused by bob: not today\n")
      expect(shown).toContain("tool call denied: permission refused by bob: not today")
      expect(
        statusLine("running", { turn: 1, step: 1, pending: emptyInbox, inTurn: true } as never, undefined, undefined, [
          { callId: "c2" }
        ])
      ).toBe("[running · turn 1 step 1 · awaiting approval: c2 · pending: 0 queued, 0 next-step]")
    }))
})
