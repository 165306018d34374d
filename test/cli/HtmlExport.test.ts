/**
 * `tiller export ID --html FILE`: the page of a scripted session is self-contained (no network
 * address anywhere it could load from), embeds the session's events, and its script folds them into
 * the timeline a reader sees: turns with tokens and duration, sources told apart, tool calls with
 * results, retries, a hook's denial, why each turn ended, the inbox lane and the compaction marker.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { gunzipSync } from "node:zlib"
import { embeddedEvents, renderHtml } from "../../src/cli/HtmlExport.js"
import { PAGE_SCRIPT } from "../../src/cli/HtmlPage.js"
import type { SessionEvent } from "../../src/domain/Event.js"
import { approvalSession } from "../fixtures/approvalSession.js"
import { miniDocument } from "../fixtures/miniDom.js"
import { runSeenSession, seenAgent } from "../fixtures/scriptedSession.js"

const seen = Effect.scoped(
  Effect.flatMap(Layer.build(seenAgent()), (context) => Effect.provide(runSeenSession, context))
)

const embedded = (page: string) => {
  const match = /<script type="application\/json" id="tiller-data">([\s\S]*?)<\/script>/.exec(page)
  return JSON.parse(match![1]!)
}

interface Row {
  readonly kind: string
  readonly label: string
  readonly text?: string
  readonly cls?: string
  readonly lane: string
  readonly stats?: string
  readonly result?: string
  readonly shadowed?: ReadonlyArray<number>
  readonly seqs: ReadonlyArray<number>
}

const pageModel = (
  data: unknown
): { rows: ReadonlyArray<Row>; bySeq: Record<number, number>; sources: ReadonlyArray<string> } =>
  (new Function(`${PAGE_SCRIPT}\nreturn tillerModel`)() as (d: unknown) => any)(data)

describe("the HTML export", () => {
  it.effect("is one self-contained file: inline style and script, nothing loaded from a network address", () =>
    Effect.gen(function*() {
      const { events, header } = yield* seen
      const page = renderHtml(header, events)
      expect(page.startsWith("<!DOCTYPE html>")).toBe(true)
      expect(page).not.toMatch(/(src|href|action)\s*=\s*["']?\s*(https?:)?\/\//i)
      expect(page).not.toMatch(/<link\b|<script[^>]*\bsrc=|@import|url\(/i)
      // Every event but the chunks of completed answers (their assistant/message holds them).
      const kept = embeddedEvents(events)
      expect(embedded(page)).toEqual({ header, events: kept })
      const answers = events.filter((e) => e.type === "assistant/message")
      const cited = new Set(
        answers.flatMap((e) => (e as { sourceEventSeqs?: ReadonlyArray<number> }).sourceEventSeqs ?? [])
      )
      expect(events.filter((e) => !kept.includes(e)).every((e) => e.type === "assistant/chunk" && cited.has(e.seq)))
        .toBe(true)
      // The failed attempt's finish chunk cites no answer and stays.
      expect(kept.filter((e) => e.type === "assistant/chunk").length).toBeGreaterThan(0)
    }))

  it.effect("text that closes a script element stays data", () =>
    Effect.gen(function*() {
      const { events, header } = yield* seen
      const hostile = { ...events[0]!, data: { note: "</script><script>alert(1)</script>\u2028" } } as SessionEvent
      const page = renderHtml(header, [hostile])
      // The cost per turn, the data and the page's script.
      expect(page.match(/<\/script>/g)!.length).toBe(3)
      expect(embedded(page).events[0].data.note).toBe("</script><script>alert(1)</script>\u2028")
    }))

  it("the heading says what the session cost and each turn's cost is embedded for its heading; no price is said", () => {
    const header = { sessionId: "priced", createdAt: 0, seedLength: 0, formatVersion: 1 } as unknown as Parameters<
      typeof renderHtml
    >[0]
    const answer = (seq: number, model: string) =>
      ({
        seq,
        time: 0,
        type: "assistant/message",
        surfaceOp: "append",
        data: {
          turn: 1,
          step: 1,
          attempt: 1,
          message: {
            id: `m${seq}`,
            role: "assistant",
            content: [],
            source: { kind: "model", provider: "anthropic", model }
          },
          usage: { inputTokens: 100, outputTokens: 10, cacheReadTokens: 10_000, cacheWriteTokens: 0 }
        }
      }) as unknown as SessionEvent
    const priced = renderHtml(header, [answer(0, "claude-sonnet-4-5")])
    expect(priced).toContain("10,100 in (10,000 cache read) / 10 out tokens · cost $0.0034</div>")
    expect(priced).toContain("<script type=\"application/json\" id=\"tiller-cost\">{\"1\":\"$0.0034\"}</script>")
    expect(renderHtml(header, [answer(0, "mystery-1")])).toContain("cost no price for model mystery-1</div>")
  })

  it.effect("its script folds the events into the timeline: turns, sources, tools, retries, hooks, reasons, inbox, compaction", () =>
    Effect.gen(function*() {
      const { events, header } = yield* seen
      const { bySeq, rows, sources } = pageModel(embedded(renderHtml(header, events)))
      const turns = rows.filter((r) => r.kind === "turn")
      expect(turns.map((r) => r.label)).toEqual(["Turn 1", "Turn 2"])
      const duration = events.find((e) => e.type === "turn/end")!.time -
        events.find((e) => e.type === "turn/start")!.time
      const shown = duration < 1000 ? `${duration} ms` : `${(duration / 1000).toFixed(1)} s`
      expect(turns[0]!.stats).toBe(`completed · 2 steps · ${shown} · 280 in / 35 out tokens`)
      expect(turns[1]!.stats).toMatch(/^aborted \(user\) · 1 step · /)
      const entered = rows.filter((r) => r.kind === "message").map((r) => [r.label, r.cls, r.text])
      expect(entered).toEqual([
        ["context · plugin:geo", "src-context", "The user is in Paris."],
        ["prompt", "src-prompt", "What time is it?"],
        ["prompt", "src-prompt", "Count to ten."]
      ])
      expect(sources).toEqual(["plugin:geo", "user"])
      expect(rows.filter((r) => r.kind === "retry").map((r) => r.label)).toEqual(["request failed", "retry"])
      expect(rows.find((r) => r.kind === "reasoning")!.text).toBe("the user wants the time")
      const clock = rows.find((r) => r.label === "tool clock")!
      expect([clock.text, clock.result]).toEqual(["{}", "now: 12:00"])
      expect(rows.find((r) => r.kind === "hook")!.text).toMatch(/^tool pre-hook denied shell/)
      expect(rows.filter((r) => r.kind === "turn-end").map((r) => r.text)).toEqual(["completed", "aborted (user)"])
      const inbox = rows.filter((r) => r.lane === "inbox").map((r) => r.label)
      expect(inbox).toEqual([
        "inserted · next-step",
        "inserted · next-turn",
        "claimed · next-step",
        "claimed · next-turn",
        "inserted · next-turn",
        "claimed · next-turn"
      ])
      expect(rows.find((r) => r.kind === "compaction")!.text).toBe(
        "prune · manual · 900 tokens before · 900 tokens after · 0 events shadowed"
      )
      // A deep link to any seq finds its row: a chunk's seq finds the answer it became.
      const chunk = events.find((e) => e.type === "assistant/chunk" && (e.data as { attempt: number }).attempt === 2)!
      expect(rows[bySeq[chunk.seq]!]!.kind).toBe("reasoning")
      for (const e of events) {
        if (e.type === "step/end") continue
        expect(bySeq[e.seq], `seq ${e.seq} ${e.type}`).toBeDefined()
      }
    }))
})

describe("the HTML export of a long session", () => {
  const parted = (page: string) => {
    const first = embedded(page)
    const later = [...page.matchAll(/<script type="application\/gzip\+base64" data-part="(\d+)">([^<]*)<\/script>/g)]
    return {
      first,
      later,
      parts: [first.events, ...later.map((m) => JSON.parse(gunzipSync(Buffer.from(m[2]!, "base64")).toString("utf8")))]
    }
  }

  it.effect("is embedded in parts: the first as JSON before the script, the later ones gzip in base64 after it", () =>
    Effect.gen(function*() {
      const { events, header } = yield* seen
      const page = renderHtml(header, events, { compressAbove: 0, partEvents: 8 })
      const { first, later, parts } = parted(page)
      expect(later.length).toBeGreaterThan(1)
      expect(first.parts).toBe(later.length)
      expect(later.map((m) => Number(m[1]))).toEqual(later.map((_, i) => i + 1))
      expect(page.indexOf(later[0]![0])).toBeGreaterThan(page.indexOf("<script>\n\"use strict\""))
      expect(parts.flat()).toEqual(embeddedEvents(events))
      // Under the threshold the page keeps one JSON element.
      expect(embedded(renderHtml(header, events))).toEqual({ header, events: embeddedEvents(events) })
    }))

  it.effect("folded part by part, its rows are those of the whole; the page says it is reading until the last part", () =>
    Effect.gen(function*() {
      const { events, header } = yield* seen
      // Cut inside turn 1: after the clock's call, before its result, and before the turn's end.
      const kept = embeddedEvents(events)
      const cuts = [kept.findIndex((e) => e.type === "tool/result"), kept.findIndex((e) => e.type === "turn/end")]
      const parts = [kept.slice(0, cuts[0]), kept.slice(cuts[0], cuts[1]), kept.slice(cuts[1])]
      const first = { header, events: parts[0], parts: 2 }
      const whole = pageModel({ header, events: kept })

      const fold = (new Function(`${PAGE_SCRIPT}\nreturn tillerFold`)() as (h: unknown) => any)(header)
      for (const part of parts) fold.feed(part)
      expect(fold.rows).toEqual(whole.rows)
      expect(fold.bySeq).toEqual(whole.bySeq)
      expect(fold.sources).toEqual(whole.sources)

      const doc = miniDocument([
        ["div", "rows"],
        ["span", "count"],
        ["input", "search"],
        ["select", "source"],
        ["span", "kinds"],
        ["button", "collapse"],
        ["button", "expand"]
      ], "")

      const page = (new Function(`${PAGE_SCRIPT}\nreturn tillerStart`)() as (d: unknown, data: unknown) => any)(
        doc,
        first
      )
      page.expect(first.parts)
      expect(doc.getElementById("count")!.textContent).toMatch(
        new RegExp(`^\\d+ of \\d+ rows · reading the session: part 1 of ${first.parts}$`)
      )
      // A deep link to a seq not read yet waits for its part.
      const last = events.filter((e) => e.type === "turn/end").at(-1)!
      expect(page.goTo(last.seq)).toBe(true)
      for (const part of parts.slice(1)) page.feed(part)
      expect(page.loaded()).toBe(true)
      expect(doc.getElementById("count")!.textContent).toBe(`${page.state.visible.length} of ${whole.rows.length} rows`)
      expect(doc.getElementById("rows")!.querySelector(".row.target")!.textContent).toContain("aborted (user)")
      // The turn heading rendered from the first part shows its end, read from a later part.
      const heading = doc.getElementById("rows")!.querySelectorAll("div").find((d) =>
        d.classList.contains("k-turn") && d.textContent.includes("Turn 1")
      )!
      expect(heading.textContent).toContain("completed · 2 steps")
      // So does the tool call rendered before its result came.
      expect(
        doc.getElementById("rows")!.querySelectorAll("div").find((d) =>
          d.classList.contains("k-tool") && d.textContent.includes("tool clock")
        )!.textContent
      )
        .toContain("now: 12:00")
    }))
})

describe("the HTML export's page", () => {
  const start = (data: unknown, hash = "") => {
    const doc = miniDocument([
      ["div", "rows"],
      ["span", "count"],
      ["input", "search"],
      ["select", "source"],
      ["span", "kinds"],
      ["button", "collapse"],
      ["button", "expand"]
    ], hash)

    const page = (new Function(`${PAGE_SCRIPT}\nreturn tillerStart`)() as (d: unknown, data: unknown) => any)(doc, data)
    const rows = () =>
      doc.getElementById("rows")!.querySelectorAll("div").filter((d) => d.getAttribute("data-row") !== null)
    return { doc, page, rows }
  }

  it.effect("renders the turn tree, source labels, tool results, filters, collapsing and deep links", () =>
    Effect.gen(function*() {
      const { events, header } = yield* seen
      const data = embedded(renderHtml(header, events))
      const { doc, page, rows } = start(data)
      const texts = () => rows().map((r) => r.textContent)
      expect(texts().filter((t) => t.includes("Turn "))[0]).toContain("completed · 2 steps")
      const ctx = rows().find((r) =>
        r.classList.contains("k-message") && r.textContent.includes("The user is in Paris.")
      )!
      expect(ctx.classList.contains("src-context")).toBe(true)
      expect(ctx.textContent).toContain("context · plugin:geo")
      expect(
        rows().find((r) => r.classList.contains("k-message") && r.textContent.includes("What time is it?"))!.classList
          .contains("src-prompt")
      ).toBe(true)
      const clock = rows().find((r) => r.textContent.includes("tool clock"))!
      expect(clock.textContent).toContain("now: 12:00")
      expect(rows().filter((r) => r.classList.contains("inbox")).length).toBe(6)
      expect(doc.getElementById("count")!.textContent).toMatch(/^\d+ of \d+ rows$/)
      // Filter by kind: unticking "tool" hides the tool rows.
      const toolBox = doc.getElementById("kinds")!.querySelectorAll("input").find((b) =>
        b.getAttribute("data-kind") === "tool"
      )!
      toolBox.checked = false
      toolBox.dispatch("change")
      expect(texts().some((t) => t.includes("tool clock"))).toBe(false)
      // A source filter keeps only that source's messages.
      const source = doc.getElementById("source")!
      source.value = "plugin:geo"
      source.dispatch("change")
      expect(rows().filter((r) => r.classList.contains("k-message")).map((r) => r.textContent)).toEqual([
        expect.stringContaining("Paris")
      ])
      // Collapsing turn 1 hides its rows but keeps its heading.
      source.value = ""
      source.dispatch("change")
      const before = rows().length
      const toggle = doc.getElementById("rows")!.querySelector("[data-toggle=\"t1\"]")!
      doc.getElementById("rows")!.dispatch("click", toggle)
      expect(rows().length).toBeLessThan(before)
      expect(texts().some((t) => t.includes("Turn 1"))).toBe(true)
      expect(rows().some((r) => r.classList.contains("k-message") && r.textContent.includes("What time is it?"))).toBe(
        false
      )
      // A deep link to the clock's result opens the collapsed turn, the hidden kind, and marks the row.
      const result = events.find((e) => e.type === "tool/result")!
      expect(page.goTo(result.seq)).toBe(true)
      const target = doc.getElementById("rows")!.querySelector(".row.target")!
      expect(target.textContent).toContain("tool clock")
      expect(target.textContent).toContain("now: 12:00")
    }))

  it.effect("a page opened at #seq-N marks that row; a large tool result is collapsed until opened", () =>
    Effect.gen(function*() {
      const { events, header } = yield* seen
      const big = "x".repeat(5_000)
      const grown = events.map((e) =>
        e.type === "tool/result"
          ? {
            ...e,
            data: {
              ...e.data as object,
              message: {
                ...(e.data as any).message,
                content: [{ ...(e.data as any).message.content[0], content: [{ type: "text", text: big }] }]
              }
            }
          }
          : e
      ) as ReadonlyArray<SessionEvent>
      const entered = events.find((e) => e.type === "user/message" && (e.data as { id: string }).id === "q2")!
      const { doc, rows } = start(embedded(renderHtml(header, grown)), `#seq-${entered.seq}`)
      expect(doc.getElementById("rows")!.querySelector(".row.target")!.textContent).toContain("Count to ten.")
      const clock = rows().find((r) => r.textContent.includes("tool clock"))!
      const details = clock.querySelectorAll("details")[0]!
      expect(clock.textContent).not.toContain(big)
      details.open = true
      details.dispatch("toggle")
      expect(clock.textContent).toContain(big)
    }))
})

describe("the HTML export of durable approvals", () => {
  it.live("each request and its answer is a row of its call: what asked, who answered and why", () =>
    Effect.gen(function*() {
      const { events, header } = yield* approvalSession
      const { rows } = pageModel(embedded(renderHtml(header, events)))
      const approvals = rows.filter((r) =>
        r.label === "approval asked" || r.label === "approved" || r.label === "refused"
      )
      expect(approvals.map((r) => [r.label, r.text, r.cls])).toEqual([
        ["approval asked", "Bash {\"command\":\"make\"}: Bash needs approval in default mode (mode)", "k-approval"],
        ["approved", "approved by alice (always: Bash(make))", "k-approval"],
        [
          "approval asked",
          "Bash {\"command\":\"rm -rf build\"}: Bash needs approval in default mode (mode)",
          "k-approval"
        ],
        ["refused", "refused by bob: not today", "err"]
      ])
      const denied = rows.find((r) => r.kind === "tool" && r.result?.includes("refused by bob") === true)
      expect(denied?.result).toBe(
        "Error: tool call denied: permission refused by bob: not today (it asked: Bash needs approval in default mode)"
      )
    }))
})
