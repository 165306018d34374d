import { describe, expect, it } from "@effect/vitest"
import Database from "better-sqlite3"
import { Effect } from "effect"
import * as path from "node:path"
import { tempDir, tiller } from "./harness.js"

const TIMEOUT = 180_000

/** Rewrites the last event of session `id` as an ignorable extension event whose data nests `levels` deep. */
const nestLastEvent = (file: string, id: string, levels: number): number => {
  const db = new Database(file)
  try {
    const last = db.prepare("SELECT seq, row FROM events WHERE session_id = ? ORDER BY seq DESC LIMIT 1").get(id) as {
      readonly seq: number
      readonly row: string
    }
    const { seq, time } = JSON.parse(last.row) as { readonly seq: number; readonly time: number }
    const row = `{"type":"ext/deep","seq":${seq},"time":${time},"data":${"[".repeat(levels)}${
      "]".repeat(levels)
    },"ignorable":true}`
    db.prepare("UPDATE events SET row = ? WHERE session_id = ? AND seq = ?").run(row, id, seq)
    return seq
  } finally {
    db.close()
  }
}

describe("tiller check: JSON past the depth limit", () => {
  it.scopedLive(
    "a row nested 100,000 levels is reported with its seq and the limit, exit 1, no stack trace; resume refuses it alike",
    () =>
      Effect.gen(function*() {
        const dir = yield* tempDir
        expect((yield* tiller(dir, ["run", "hello", "--session", "deep"])).code).toBe(0)
        const seq = nestLastEvent(path.join(dir, ".tiller", "sessions.db"), "deep", 100_000)
        const check = yield* tiller(dir, ["check", "deep"])
        expect(check.code).toBe(1)
        const checked = check.stdout + check.stderr
        expect(checked).toContain(`seq ${seq}`)
        expect(checked).toContain("nested deeper than 256 levels")
        expect(checked).not.toMatch(/RangeError|Maximum call stack|\n\s+at /)
        expect(checked.trim().split("\n").length).toBeLessThanOrEqual(2)
        const resume = yield* tiller(dir, ["run", "again", "--session", "deep"])
        expect(resume.code).toBe(1)
        const resumed = resume.stdout + resume.stderr
        expect(resumed).toContain(`seq ${seq}`)
        expect(resumed).toContain("nested deeper than 256 levels")
        expect(resumed).not.toMatch(/RangeError|Maximum call stack|\n\s+at /)
      }),
    TIMEOUT
  )
})
