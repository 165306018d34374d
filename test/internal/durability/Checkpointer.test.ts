import { afterAll, describe, expect, it } from "@effect/vitest"
import { Deferred, Effect } from "effect"
import { build } from "esbuild"
import { spawn } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import * as Checkpointer from "../../../src/internal/durability/Checkpointer.js"

const dir = fs.mkdtempSync(path.join(os.tmpdir(), "tiller-checkpointer-"))
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }))
// No database is opened: the workers under test fail before they would.
const filename = () => path.join(dir, "unused.db")

describe("Checkpointer", () => {
  for (const format of ["esm", "cjs"] as const) {
    it.live(
      `starts its worker from ${format === "esm" ? "an ES module" : "a CommonJS bundle"} and checkpoints`,
      () =>
        Effect.gen(function*() {
          // Under the project, so the bundle's packages resolve from its node_modules.
          const bundle = path.join(
            import.meta.dirname,
            "..",
            "..",
            "node_modules",
            ".cache",
            "tiller-tests",
            `checkpointer.${format === "esm" ? "mjs" : "cjs"}`
          )
          yield* Effect.promise(() =>
            build({
              entryPoints: [path.join(import.meta.dirname, "fixtures", "checkpointerBundle.ts")],
              bundle: true,
              platform: "node",
              format,
              packages: "external",
              outfile: bundle,
              logLevel: "error"
            })
          )
          const result = yield* Effect.async<{ readonly code: number | null; readonly stdout: string }>((resume) => {
            const child = spawn(process.execPath, [bundle, path.join(dir, `bundle-${format}.db`)], {
              stdio: ["ignore", "pipe", "inherit"]
            })
            let stdout = ""
            child.stdout.on("data", (data) => (stdout += String(data)))
            child.on("exit", (code) => resume(Effect.succeed({ code, stdout })))
          })
          expect(result).toEqual({ code: 0, stdout: "checkpointed\n" })
        }),
      60_000
    )
  }

  it.live("asks for nothing below its page estimate: no worker, no fallback", () =>
    Effect.gen(function*() {
      const fellBack = yield* Deferred.make<void>()
      const checkpointer = yield* Checkpointer.make(
        filename(),
        Deferred.succeed(fellBack, undefined),
        1000,
        "throw new Error('started')"
      )
      for (let i = 0; i < 100; i++) checkpointer.wrote(100)
      yield* Effect.sleep("100 millis")
      expect(yield* Deferred.isDone(fellBack)).toBe(false)
      expect(checkpointer.completed()).toBe(0)
    }).pipe(Effect.scoped))

  it.live("a worker that fails runs the fallback once and is never asked again", () =>
    Effect.gen(function*() {
      let fallbacks = 0
      const fellBack = yield* Deferred.make<void>()
      const fallback = Effect.zipRight(Effect.sync(() => void fallbacks++), Deferred.succeed(fellBack, undefined))
      const checkpointer = yield* Checkpointer.make(filename(), fallback, 10, "throw new Error('no database here')")
      checkpointer.wrote(100_000)
      yield* Deferred.await(fellBack)
      checkpointer.wrote(100_000)
      yield* Effect.sleep("100 millis")
      expect(fallbacks).toBe(1)
      expect(checkpointer.completed()).toBe(0)
    }).pipe(Effect.scoped))
})
