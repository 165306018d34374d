import { describe, expect, it } from "@effect/vitest"
import { Cause, Chunk, Duration, Effect, Exit, Option, Random } from "effect"
import { SessionId } from "../../src/domain/Ids.js"
import type { LlmFailure } from "../../src/domain/Values.js"
import { HooksRunner } from "../../src/internal/loop/HooksRunner.js"
import { NEXT_CALLED_TWICE } from "../../src/internal/loop/Waterfall.js"
import type { NormalizedToolOutput, RequestConfig, ToolCallInfo, ToolPostInput } from "../../src/services/Hooks.js"
import { Hooks, layerWithRunner, RequestErrorAction, ToolPreDecision } from "../../src/services/Hooks.js"

const sessionId = SessionId.make("s1")
const at = { sessionId, turn: 1, step: 1 }
const seed: RequestConfig = { provider: "p", model: "m", maxTokens: 100 }
const call: ToolCallInfo = { ...at, callId: "c1", name: "echo", arguments: "{\"text\":\"hi\"}", params: { text: "hi" } }
const output: NormalizedToolOutput = {
  content: [{ type: "text", text: "hi" }],
  isError: false,
  additionalContexts: [],
  concludesTurn: false
}
const postInput: ToolPostInput = { ...call, output, aborted: false }
const overloaded: LlmFailure = { message: "busy", code: "OVERLOADED" }

const withHooks = <A, E, R>(body: (hooks: Hooks["Type"], runner: HooksRunner["Type"]) => Effect.Effect<A, E, R>) =>
  Effect.gen(function*() {
    return yield* body(yield* Hooks, yield* HooksRunner)
  }).pipe(Effect.provide(layerWithRunner))

/** The first defect of a failed exit. */
const defectOf = (exit: Exit.Exit<unknown, unknown>) =>
  Exit.isFailure(exit) ? Chunk.toReadonlyArray(Cause.defects(exit.cause))[0] : undefined

describe("Hooks", () => {
  describe("defaults", () => {
    it.effect("onRequest returns the seed, frozen", () =>
      withHooks((_, runner) =>
        Effect.gen(function*() {
          const config = yield* runner.runRequest({ ...at, attempt: 1 }, seed)
          expect(config).toEqual(seed)
          expect(Object.isFrozen(config)).toBe(true)
        })
      ))

    it.effect("onRequestError applies the default retry policy", () =>
      withHooks((_, runner) =>
        Effect.gen(function*() {
          const retry = yield* runner.runRequestError({ ...at, attempt: 1, failure: overloaded })
            .pipe(Effect.withRandom(Random.fixed([0.5])))
          expect(retry._tag).toBe("Retry")
          expect(retry._tag === "Retry" && Duration.toMillis(retry.delay)).toBeCloseTo(1000)
          expect(yield* runner.runRequestError({ ...at, attempt: 3, failure: overloaded })).toEqual({ _tag: "Fail" })
          expect(yield* runner.runRequestError({ ...at, attempt: 1, failure: { message: "bad", code: "BAD_REQUEST" } }))
            .toEqual({ _tag: "Fail" })
        })
      ))

    it.effect("onToolPre allows, onToolPost returns the output unchanged, turn-stopping does nothing", () =>
      withHooks((_, runner) =>
        Effect.gen(function*() {
          expect(yield* runner.runToolPre(call)).toEqual({ _tag: "Allow" })
          expect(yield* runner.runToolPost(postInput)).toBe(output)
          yield* runner.runTurnStopping(at)
        })
      ))
  })

  it("decision constructors", () => {
    expect(RequestErrorAction.retry("2 seconds")).toEqual({ _tag: "Retry", delay: Duration.seconds(2) })
    expect(RequestErrorAction.retry(1500)).toEqual({ _tag: "Retry", delay: Duration.millis(1500) })
    expect(RequestErrorAction.fail).toEqual({ _tag: "Fail" })
    expect(ToolPreDecision.allow).toEqual({ _tag: "Allow" })
    expect(ToolPreDecision.deny("no")).toEqual({ _tag: "Deny", reason: "no" })
  })

  it.scoped("onRequest composes first-registered outermost, prepend outermost of all", () =>
    withHooks((hooks, runner) =>
      Effect.gen(function*() {
        const order: Array<string> = []
        const suffix =
          (name: string) =>
          (input: { readonly config: RequestConfig }, next: () => Effect.Effect<RequestConfig, unknown>) =>
            Effect.gen(function*() {
              order.push(name)
              expect(input.config).toEqual(seed)
              const config = yield* next()
              return { ...config, model: `${config.model}+${name}` }
            })
        yield* hooks.onRequest(suffix("L1"))
        yield* hooks.onRequest(suffix("L2"))
        yield* hooks.onRequest(suffix("L0"), { prepend: true })
        const config = yield* runner.runRequest({ ...at, attempt: 2 }, seed)
        expect(order).toEqual(["L0", "L1", "L2"])
        expect(config).toEqual({ ...seed, model: "m+L2+L1+L0" })
      })
    ))

  it.scoped("onRequestError: a listener can replace the default's action or veto it", () =>
    withHooks((hooks, runner) =>
      Effect.gen(function*() {
        const seen: Array<RequestErrorAction> = []
        yield* hooks.onRequestError((input, next) =>
          Effect.gen(function*() {
            expect(input.failure).toBe(overloaded)
            const downstream = yield* next()
            seen.push(downstream)
            return input.attempt === 1 ? RequestErrorAction.fail : RequestErrorAction.retry("10 millis")
          })
        )
        expect(yield* runner.runRequestError({ ...at, attempt: 1, failure: overloaded })).toEqual({ _tag: "Fail" })
        expect(seen.map((a) => a._tag)).toEqual(["Retry"])
        expect(yield* runner.runRequestError({ ...at, attempt: 3, failure: overloaded }))
          .toEqual({ _tag: "Retry", delay: Duration.millis(10) })
        expect(seen.map((a) => a._tag)).toEqual(["Retry", "Fail"])
      })
    ))

  it.scoped("onToolPre: an outer listener vetoes inner ones; an inner Deny reaches the outer listener", () =>
    withHooks((hooks, runner) =>
      Effect.gen(function*() {
        const order: Array<string> = []
        yield* hooks.onToolPre((info, next) =>
          Effect.gen(function*() {
            order.push("outer")
            if (info.name === "rm") return ToolPreDecision.deny("outer says no")
            return yield* next()
          })
        )
        yield* hooks.onToolPre((info) =>
          Effect.sync(() => {
            order.push("inner")
            return info.callId === "c2" ? ToolPreDecision.deny("inner says no") : ToolPreDecision.allow
          })
        )
        expect(yield* runner.runToolPre({ ...call, name: "rm" })).toEqual({ _tag: "Deny", reason: "outer says no" })
        expect(order).toEqual(["outer"])
        expect(yield* runner.runToolPre({ ...call, callId: "c2" })).toEqual({ _tag: "Deny", reason: "inner says no" })
        expect(yield* runner.runToolPre(call)).toEqual({ _tag: "Allow" })
        expect(order).toEqual(["outer", "outer", "inner", "outer", "inner"])
      })
    ))

  it.scoped("onToolPost: listeners transform the output in waterfall return order", () =>
    withHooks((hooks, runner) =>
      Effect.gen(function*() {
        const tag =
          (label: string) => (input: ToolPostInput, next: () => Effect.Effect<NormalizedToolOutput, unknown>) =>
            Effect.map(next(), (out) => ({
              ...out,
              content: [...out.content, { type: "text" as const, text: `${label}${input.aborted ? "!" : ""}` }]
            }))
        yield* hooks.onToolPost(tag("L1"))
        yield* hooks.onToolPost(tag("L2"))
        const out = yield* runner.runToolPost({ ...postInput, aborted: true })
        expect(out.content.map((b) => b.type === "text" ? b.text : "")).toEqual(["hi", "L2!", "L1!"])
        expect(out.isError).toBe(false)
      })
    ))

  it.scoped("calling next() twice dies with the once-only defect", () =>
    withHooks((hooks, runner) =>
      Effect.gen(function*() {
        let innerRuns = 0
        yield* hooks.onToolPre((_, next) => Effect.zipRight(next(), next()))
        yield* hooks.onToolPre(() => Effect.sync(() => (innerRuns++, ToolPreDecision.allow)))
        const exit = yield* Effect.exit(runner.runToolPre(call))
        const defect = defectOf(exit)
        expect(Cause.isRuntimeException(defect)).toBe(true)
        expect((defect as Error).message).toBe(NEXT_CALLED_TWICE)
        expect(innerRuns).toBe(1)
      })
    ))

  it.scoped("a waterfall listener failure propagates as the listener's own error", () =>
    withHooks((hooks, runner) =>
      Effect.gen(function*() {
        const original = new Error("hook failed")
        yield* hooks.onRequest((_, next) => next())
        yield* hooks.onRequest(() => Effect.fail(original))
        const error = yield* Effect.flip(runner.runRequest({ ...at, attempt: 1 }, seed))
        expect(Cause.originalError(error)).toBe(original)
      })
    ))

  it.scoped("turn-stopping listeners run serially, in registration order", () =>
    withHooks((hooks, runner) =>
      Effect.gen(function*() {
        const log: Array<string> = []
        const listener = (name: string) => (input: { readonly turn: number }) =>
          Effect.gen(function*() {
            log.push(`${name} start ${input.turn}`)
            yield* Effect.yieldNow()
            yield* Effect.yieldNow()
            log.push(`${name} end`)
          })
        yield* hooks.onTurnStopping(listener("T1"))
        yield* hooks.onTurnStopping(listener("T2"))
        yield* hooks.onTurnStopping(listener("T3"))
        yield* runner.runTurnStopping({ ...at, turn: 4 })
        expect(log).toEqual(["T1 start 4", "T1 end", "T2 start 4", "T2 end", "T3 start 4", "T3 end"])
      })
    ))

  it.scoped("a turn-stopping failure fails the run and skips later listeners", () =>
    withHooks((hooks, runner) =>
      Effect.gen(function*() {
        const log: Array<string> = []
        yield* hooks.onTurnStopping(() => Effect.sync(() => log.push("T1")))
        yield* hooks.onTurnStopping(() => Effect.fail("stop failed"))
        yield* hooks.onTurnStopping(() => Effect.sync(() => log.push("T3")))
        const error = yield* Effect.flip(runner.runTurnStopping(at))
        expect(error).toBe("stop failed")
        expect(log).toEqual(["T1"])
      })
    ))

  it.effect("registrations are removed when their scope closes", () =>
    withHooks((hooks, runner) =>
      Effect.gen(function*() {
        const log: Array<string> = []
        yield* Effect.scoped(Effect.gen(function*() {
          yield* hooks.onToolPre(() => Effect.succeed(ToolPreDecision.deny("scoped")))
          yield* hooks.onTurnStopping(() => Effect.sync(() => log.push("stopping")))
          expect(yield* runner.runToolPre(call)).toEqual({ _tag: "Deny", reason: "scoped" })
          yield* runner.runTurnStopping(at)
        }))
        expect(yield* runner.runToolPre(call)).toEqual({ _tag: "Allow" })
        yield* runner.runTurnStopping(at)
        expect(log).toEqual(["stopping"])
      })
    ))

  it.effect("Hooks.layer provides the registration side with its own registries", () =>
    Effect.gen(function*() {
      const hooks = yield* Hooks
      yield* Effect.scoped(hooks.onToolPre((_, next) => next()))
      const runner = yield* Effect.serviceOption(HooksRunner)
      expect(Option.isNone(runner)).toBe(true)
    }).pipe(Effect.provide(Hooks.layer)))
})
