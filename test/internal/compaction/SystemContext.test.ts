/**
 * An overflow's post-compaction context in the system prompt of the requests from its retry on: a
 * request listener registered only until the request it changes, the context replaced or taken out
 * by the next compaction.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import type { RequestConfig, RequestInput } from "../../../src/domain/Seams.js"
import * as SystemContext from "../../../src/internal/compaction/SystemContext.js"
import * as Waterfall from "../../../src/internal/loop/Waterfall.js"

const input = (config: RequestConfig): RequestInput => ({
  sessionId: "s" as never,
  turn: 1,
  step: 1,
  attempt: 1,
  config
})

describe("SystemContext", () => {
  it.scoped("adds the context to the next request only, replaces it at the next change, and takes it out when set to none", () =>
    Effect.gen(function*() {
      const requests = yield* Waterfall.make<RequestInput, RequestConfig, unknown>()
      const context = yield* SystemContext.make((listener) => requests.register(listener))
      // The loop's default: the last request's configuration (here, what the previous run returned).
      let config: RequestConfig = { provider: "p", model: "m", system: "base" }
      const request = Effect.tap(
        requests.run(input(config), (i) => Effect.succeed(i.config)),
        (c) => Effect.sync(() => (config = c))
      )
      expect(requests.isEmpty()).toBe(true)
      yield* context.set(["CONTEXT"])
      expect(requests.isEmpty()).toBe(false)
      expect((yield* request).system).toBe("base\n\nCONTEXT")
      // Its request changed, the listener is gone: the loop's quiet path carries the configuration on.
      expect(requests.isEmpty()).toBe(true)
      yield* context.set(["ONE", "TWO"])
      expect((yield* request).system).toBe("base\n\nONE\n\nTWO")
      yield* context.set([])
      expect(yield* request).toEqual({ provider: "p", model: "m", system: "base" })
      expect(requests.isEmpty()).toBe(true)
      // None held: setting none registers nothing.
      yield* context.set([])
      expect(requests.isEmpty()).toBe(true)
    }))

  it("puts the context after a blank line, alone when there is no system prompt, and takes only its own text out", () => {
    expect(SystemContext.withContext({}, undefined, "C")).toEqual({ system: "C" })
    expect(SystemContext.withContext({ system: "C" }, "C", undefined)).toEqual({})
    expect(SystemContext.withContext({ system: "s\n\nC" }, "C", "D")).toEqual({ system: "s\n\nD" })
    expect(SystemContext.withContext({ system: "changed by a hook" }, "C", undefined)).toEqual({
      system: "changed by a hook"
    })
  })
})
