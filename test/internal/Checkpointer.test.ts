import { afterAll, describe, expect, it } from "@effect/vitest"
import { Deferred, Effect } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import * as Checkpointer from "../../src/internal/Checkpointer.js"

const dir = fs.mkdtempSync(path.join(os.tmpdir(), "tiller-checkpointer-"))
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }))
// No database is opened: the workers under test fail before they would.
const filename = () => path.join(dir, "unused.db")

describe("Checkpointer", () => {
  it.live("asks for nothing below its page estimate: no worker, no fallback", () =>
    Effect.gen(function*() {
      const fellBack = yield* Deferred.make<void>()
      const checkpointer = yield* Checkpointer.make(filename(), Deferred.succeed(fellBack, undefined), 1000, "throw new Error('started')")
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
