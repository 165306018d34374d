/**
 * `--context-window N` (issue 28): a demo session past its window prunes old tool results visibly
 * and continues; the log stays valid.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import { jsonLines, tempDir, tiller } from "./harness.js"

// A small window: the coding tools' schemas take about 1,700 tokens of it, four 2,000-character
// reads fill the rest.
const WINDOW = "3700"

describe("tiller --context-window", () => {
  it.scopedLive(
    "a demo session past a small window prunes old tool results with threshold brackets and keeps going",
    () =>
      Effect.gen(function*() {
        const dir = yield* tempDir
        for (let i = 1; i <= 4; i++) fs.writeFileSync(path.join(dir, `f${i}.txt`), "0123456789".repeat(200))
        for (let i = 1; i <= 4; i++) {
          const run = yield* tiller(dir, ["--context-window", WINDOW, "run", `/Read f${i}.txt`, "--session", "d"])
          expect(run.code).toBe(0)
        }
        const events = jsonLines((yield* tiller(dir, ["log", "d", "--json"])).stdout)
        const starts = events.filter((e) => e.type === "compaction/start")
        expect(starts.length).toBeGreaterThan(0)
        expect(starts[0].data).toMatchObject({ kind: "prune", trigger: "threshold" })
        const pruned = events.filter((e) => e.type === "tool/result" && e.surfaceOp !== "append")
        expect(pruned[0].data.message.content[0].content[0].text).toContain(
          "[tool result pruned to save context: 2,007 characters of Read output"
        )
        expect(events.filter((e) => e.type === "turn/end").map((e) => e.data.reason.kind)).toEqual([
          "completed",
          "completed",
          "completed",
          "completed"
        ])
        expect((yield* tiller(dir, ["check", "d"])).code).toBe(0)
        // Without the flag the demo model's window (the 32,768 default) is far away: nothing is pruned.
        for (let i = 1; i <= 2; i++) yield* tiller(dir, ["run", `/Read f${i}.txt`, "--session", "e"])
        expect(
          jsonLines((yield* tiller(dir, ["log", "e", "--json"])).stdout).some((e) => e.type === "compaction/start")
        ).toBe(false)
      }),
    { timeout: 120_000 }
  )

  it.scopedLive(
    "tiller log shows each compaction bracket with its trigger, what it replaced and the tokens before and after; the placeholder quotes read_history",
    () =>
      Effect.gen(function*() {
        const dir = yield* tempDir
        for (let i = 1; i <= 4; i++) fs.writeFileSync(path.join(dir, `f${i}.txt`), "0123456789".repeat(200))
        for (let i = 1; i <= 4; i++) {
          expect((yield* tiller(dir, ["--context-window", WINDOW, "run", `/Read f${i}.txt`, "--session", "d"])).code)
            .toBe(0)
        }
        const events = jsonLines((yield* tiller(dir, ["log", "d", "--json"])).stdout)
        const end = events.find((e) => e.type === "compaction/end")
        const seqs: ReadonlyArray<number> = end.data.pruned
        const text = (yield* tiller(dir, ["log", "d"])).stdout
        const start = events.find((e) => e.type === "compaction/start")
        expect(text).toContain(
          `compact    prune (threshold) start · ${start.data.tokensBefore.toLocaleString("en-US")} tokens in use`
        )
        expect(text).toContain(
          `compact    prune (threshold) end · replaced ${seqs.length} tool result${
            seqs.length === 1 ? "" : "s"
          } (seqs ${seqs.join(", ")}) · ` +
            `tokens ${end.data.tokensBefore.toLocaleString("en-US")} → ${end.data.tokensAfter.toLocaleString("en-US")}`
        )
        expect(end.data.tokensAfter).toBeLessThan(end.data.tokensBefore)
        // Each placeholder is shown as what it replaced, and tells the model how to read the result back.
        expect(text).toContain(`pruned     Read result at seq ${seqs[0]} → [tool result pruned to save context`)
        const placeholder = events.find((e) => e.type === "tool/result" && e.surfaceOp !== "append")
        expect(placeholder.data.message.content[0].content[0].text).toContain(
          `Read it back with read_history {"from":${seqs[0]},"to":${seqs[0]}}.]`
        )
        // The CLI's agents offer read_history to the model.
        const header = events.filter((e) => e.type === "request/header").at(-1)
        expect(header.data.header.tools.map((t: { name: string }) => t.name)).toContain("read_history")
      }),
    { timeout: 120_000 }
  )

  it.scopedLive("the chat's status line shows the share of the window in use", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      fs.writeFileSync(path.join(dir, "f1.txt"), "0123456789".repeat(200))
      const chat = yield* tiller(dir, ["--context-window", "2000", "chat", "--session", "c"], {
        input: "/status\n/Read f1.txt\n/status\n/quit\n"
      })
      expect(chat.code).toBe(0)
      const shares = [...chat.stdout.matchAll(/ctx (\d+)%\]/g)].map((m) => Number(m[1]))
      // A new session starts empty; reading 2,000 characters (500 tokens) of a 2,000-token window fills a quarter and more.
      expect(shares[0]).toBe(0)
      expect(Math.max(...shares)).toBeGreaterThanOrEqual(25)
    }), { timeout: 120_000 })

  it.scopedLive("a window that is not a positive integer is refused", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const run = yield* tiller(dir, ["--context-window", "0", "run", "hi"])
      expect(run.code).not.toBe(0)
    }), { timeout: 60_000 })
})
