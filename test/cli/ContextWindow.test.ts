/**
 * `--context-window N` (issue 28): a demo session past its window prunes old tool results visibly
 * and continues; the log stays valid.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import { jsonLines, tempDir, tiller } from "./harness.js"

describe("tiller --context-window", () => {
  it.scopedLive("a demo session past a 2000-token window prunes old tool results with threshold brackets and keeps going", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      for (let i = 1; i <= 4; i++) fs.writeFileSync(path.join(dir, `f${i}.txt`), "0123456789".repeat(200))
      for (let i = 1; i <= 4; i++) {
        const run = yield* tiller(dir, ["--context-window", "2000", "run", `/read_file f${i}.txt`, "--session", "d"])
        expect(run.code).toBe(0)
      }
      const events = jsonLines((yield* tiller(dir, ["log", "d", "--json"])).stdout)
      const starts = events.filter((e) => e.type === "compaction/start")
      expect(starts.length).toBeGreaterThan(0)
      expect(starts[0].data).toMatchObject({ kind: "prune", trigger: "threshold" })
      const pruned = events.filter((e) => e.type === "tool/result" && e.surfaceOp !== "append")
      expect(pruned[0].data.message.content[0].content[0].text).toContain("[tool result pruned to save context: 2,000 characters of read_file output")
      expect(events.filter((e) => e.type === "turn/end").map((e) => e.data.reason.kind)).toEqual(["completed", "completed", "completed", "completed"])
      expect((yield* tiller(dir, ["check", "d"])).code).toBe(0)
      // Without the flag the demo model's window (the 32,768 default) is far away: nothing is pruned.
      for (let i = 1; i <= 2; i++) yield* tiller(dir, ["run", `/read_file f${i}.txt`, "--session", "e"])
      expect(jsonLines((yield* tiller(dir, ["log", "e", "--json"])).stdout).some((e) => e.type === "compaction/start")).toBe(false)
    }), { timeout: 120_000 })

  it.scopedLive("a window that is not a positive integer is refused", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const run = yield* tiller(dir, ["--context-window", "0", "run", "hi"])
      expect(run.code).not.toBe(0)
    }), { timeout: 60_000 })
})
