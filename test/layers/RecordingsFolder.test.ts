/**
 * `npm run test:recordings` without the provider recordings (a fresh clone): one line naming the
 * folder it looked in and the variable to set, exit 1, no test run.
 */
import { describe, expect, it } from "@effect/vitest"
import { spawnSync } from "node:child_process"
import * as path from "node:path"
import { fileURLToPath } from "node:url"

const ROOT = fileURLToPath(new URL("../../", import.meta.url))
const VITEST = path.join(ROOT, "node_modules", "vitest", "vitest.mjs")

describe("test:recordings without the recordings folder", () => {
  it("says in one line which folder is missing and which variable names it, and exits 1", () => {
    const missing = path.join(ROOT, "scratch", "no-such-recordings")
    const run = spawnSync(process.execPath, [VITEST, "run", "--config", "vitest.recordings.config.ts"], {
      cwd: ROOT,
      encoding: "utf8",
      env: { ...process.env, TILLER_PROVIDER_RECORDINGS: missing, NO_COLOR: "1" },
      timeout: 120_000
    })
    expect(run.status).toBe(1)
    const lines = run.stderr.trim().split("\n")
    expect(lines).toEqual([
      `test:recordings: no provider recordings at ${missing}; set TILLER_PROVIDER_RECORDINGS to the recordings ` +
      "folder (or place it at ../shared/provider-recordings)"
    ])
    // Nothing was collected or run.
    expect(run.stdout).not.toContain("Test Files")
  }, 120_000)
})
