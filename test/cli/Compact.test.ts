/**
 * `tiller compact ID [--focus TEXT]` and the chat's `/compact [FOCUS]` (issue 28 item 5): a manual
 * compaction of a stored demo session summarises its older history between turns, the focus
 * steering the summary; a later one updates the first summary; the log stays valid and the session
 * goes on.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import { jsonLines, tempDir, tiller } from "./harness.js"

describe("tiller compact and /compact", () => {
  it.scopedLive(
    "summarises a stored session's older history with the focus; a second compaction updates the summary",
    () =>
      Effect.gen(function*() {
        const dir = yield* tempDir
        for (let i = 1; i <= 4; i++) fs.writeFileSync(path.join(dir, `f${i}.txt`), "0123456789".repeat(200))
        const window = ["--context-window", "8000"]
        for (let i = 1; i <= 4; i++) {
          expect((yield* tiller(dir, [...window, "run", `/Read f${i}.txt`, "--session", "d"])).code).toBe(0)
        }
        const first = yield* tiller(dir, [...window, "compact", "d", "--focus", "the four files"])
        expect(first.code).toBe(0)
        expect(first.stdout).toMatch(
          /^session d: compacted: summarised seqs \d+–\d+ \(\d+ messages\) into one summary; context [\d,]+ → [\d,]+ of 8,000 tokens\n$/
        )
        const events = jsonLines((yield* tiller(dir, ["log", "d", "--json"])).stdout)
        const start = events.find((e) => e.type === "compaction/start")
        expect(start.data).toMatchObject({ turn: null, kind: "summary", trigger: "manual", focus: "the four files" })
        const summary = events.find((e) => e.type === "user/message" && e.surfaceOp !== "append")
        expect(summary.data.source).toMatchObject({ kind: "compaction", trigger: "manual" })
        expect(summary.data.content[0].text).toContain("Goal: /Read f1.txt")
        expect(summary.data.content[0].text).toContain("Files and tools touched: Read")
        expect(summary.data.content[0].text).toContain("(focus: the four files)")
        // Nothing before the kept tail but the summary: nothing to do.
        expect((yield* tiller(dir, [...window, "compact", "d"])).stdout).toMatch(
          /^session d: nothing to compact \(context [\d,]+ of 8,000 tokens\)\n$/
        )
        // After another turn, the second compaction (/compact in the chat, between turns) updates the first summary.
        expect((yield* tiller(dir, [...window, "run", "/Read f1.txt", "--session", "d"])).code).toBe(0)
        const chat = yield* tiller(dir, [...window, "chat", "--session", "d"], { input: "/compact what is left\n" })
        expect(chat.code).toBe(0)
        expect(chat.stdout).toMatch(
          /\ncompacted: summarised seqs \d+–\d+ \(\d+ messages\) into one summary; context [\d,]+ → [\d,]+ of 8,000 tokens\n/
        )
        const again = jsonLines((yield* tiller(dir, ["log", "d", "--json"])).stdout)
        const written = again.filter((e) => e.type === "compaction/summary")
        expect(written.map((e) => e.data.updates)).toEqual([null, summary.seq])
        const updated = again.filter((e) =>
          e.type === "user/message" && e.surfaceOp !== "append"
        ).at(-1).data.content[0].text
        expect(updated).toContain("previous summary updated")
        expect(updated).toContain("(focus: what is left)")
        // The session goes on and checks clean.
        expect((yield* tiller(dir, [...window, "run", "hello", "--session", "d"])).code).toBe(0)
        expect((yield* tiller(dir, ["check", "d"])).code).toBe(0)
      }),
    { timeout: 120_000 }
  )

  it.scopedLive("a session that does not exist is refused and nothing is created", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const run = yield* tiller(dir, ["compact", "nosuch"])
      expect(run.code).toBe(1)
      expect(run.stderr).toContain("no session nosuch")
      expect((yield* tiller(dir, ["sessions"])).stdout).toContain("no sessions")
    }), { timeout: 60_000 })
})
