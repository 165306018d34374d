import { describe, expect, it } from "@effect/vitest"
import { Cause, Deferred, Effect, Exit, Fiber, Option, Scope } from "effect"
import { PreStepFailed, PreStepRejected } from "../../src/domain/Errors.js"
import { SessionId } from "../../src/domain/Ids.js"
import { userMessage } from "../../src/domain/Message.js"
import type { UserMessage } from "../../src/domain/Values.js"
import { NEXT_CALLED_TWICE } from "../../src/internal/loop/Waterfall.js"
import type { PreStepInput } from "../../src/services/PreStep.js"
import { PreStep, PreStepDecision } from "../../src/services/PreStep.js"

const user = (id: string): UserMessage => userMessage({ id, text: id })
const plugin = (id: string): UserMessage => userMessage({ id, text: id, source: { kind: "plugin", plugin: "test" } })
const ids = (messages: ReadonlyArray<UserMessage>) => messages.map((m) => m.id)

const input = (messages: ReadonlyArray<UserMessage>, turn = 1, step = 1): PreStepInput => ({
  sessionId: SessionId.make("s1"),
  turn,
  step,
  boundary: "initial",
  messages
})

const A = user("A")
const B = user("B")
const X = plugin("X")
const Y = plugin("Y")

/** Appends `extra` to the downstream decision's batch. */
const appending =
  (log: Array<string>, name: string, extra: UserMessage) =>
  (_input: PreStepInput, next: () => Effect.Effect<PreStepDecision, PreStepFailed>) =>
    Effect.gen(function*() {
      log.push(name)
      const decision = yield* next()
      if (decision._tag !== "Enter") return decision
      log.push(`${name} got [${ids(decision.messages).join(",")}]`)
      return PreStepDecision.enter([...decision.messages, extra])
    })

const runFailure = (i: PreStepInput) => Effect.flip(Effect.flatMap(PreStep, (p) => p.run(i)))

describe("PreStep", () => {
  it.effect("without listeners enters the claimed batch", () =>
    Effect.gen(function*() {
      const preStep = yield* PreStep
      const entered = yield* preStep.run(input([A, B]))
      expect(entered).toEqual([A, B])
    }).pipe(Effect.provide(PreStep.layer)))

  describe("P19 waterfall composition", () => {
    it.scoped("(a) both call next: invocation order L1, L2, default; entered [A, X, Y]", () =>
      Effect.gen(function*() {
        const preStep = yield* PreStep
        const log: Array<string> = []
        yield* preStep.register(appending(log, "L1", Y))
        yield* preStep.register(appending(log, "L2", X))
        const entered = yield* preStep.run(input([A]))
        // "L2 got [A]" is the default's decision, reached only after L1 and L2 were invoked.
        expect(log).toEqual(["L1", "L2", "L2 got [A]", "L1 got [A,X]"])
        expect(ids(entered)).toEqual(["A", "X", "Y"])
        expect(entered).toEqual([A, X, Y])
      }).pipe(Effect.provide(PreStep.layer)))

    it.scoped("(b) L1 returns enter([A]) without next: L2 never runs", () =>
      Effect.gen(function*() {
        const preStep = yield* PreStep
        const log: Array<string> = []
        yield* preStep.register(() => Effect.sync(() => log.push("L1")).pipe(Effect.as(PreStepDecision.enter([A]))))
        yield* preStep.register(appending(log, "L2", X))
        const entered = yield* preStep.run(input([A, B]))
        expect(log).toEqual(["L1"])
        expect(entered).toEqual([A])
      }).pipe(Effect.provide(PreStep.layer)))

    it.scoped("(c) L2 calls next() twice: the run fails with PreStepFailed carrying the defect", () =>
      Effect.gen(function*() {
        const preStep = yield* PreStep
        let defaultReached = 0
        yield* preStep.register((_, next) => next())
        yield* preStep.register((_, next) =>
          Effect.gen(function*() {
            const first = yield* next()
            if (first._tag === "Enter") defaultReached++
            return yield* next()
          })
        )
        const error = yield* runFailure(input([A], 2, 3))
        expect(error).toBeInstanceOf(PreStepFailed)
        const failed = error as PreStepFailed
        expect([failed.turn, failed.step]).toEqual([2, 3])
        expect(Cause.isRuntimeException(failed.cause)).toBe(true)
        expect((failed.cause as Error).message).toBe(NEXT_CALLED_TWICE)
        expect(NEXT_CALLED_TWICE).toBe("next() called more than once")
        expect(defaultReached).toBe(1)
      }).pipe(Effect.provide(PreStep.layer)))

    it.scoped("(d) L3 registered with prepend runs before L1", () =>
      Effect.gen(function*() {
        const preStep = yield* PreStep
        const log: Array<string> = []
        yield* preStep.register(appending(log, "L1", X))
        yield* preStep.register(appending(log, "L2", Y))
        yield* preStep.register(appending(log, "L3", B), { prepend: true })
        const entered = yield* preStep.run(input([A]))
        expect(log.filter((l) => !l.includes(" "))).toEqual(["L3", "L1", "L2"])
        expect(ids(entered)).toEqual(["A", "Y", "X", "B"])
      }).pipe(Effect.provide(PreStep.layer)))

    it.scoped("(e) input.messages and each element are frozen copies; the default returns another array", () =>
      Effect.gen(function*() {
        const preStep = yield* PreStep
        const callerA = { ...A, content: [{ type: "text" as const, text: "A" }] }
        let seen: ReadonlyArray<UserMessage> = []
        let fromDefault: ReadonlyArray<UserMessage> = []
        yield* preStep.register((i, next) =>
          Effect.gen(function*() {
            seen = i.messages
            const decision = yield* next()
            if (decision._tag === "Enter") fromDefault = decision.messages
            return decision
          })
        )
        const entered = yield* preStep.run(input([callerA, B]))
        expect(Object.isFrozen(seen)).toBe(true)
        for (const m of seen) {
          expect(Object.isFrozen(m)).toBe(true)
          expect(Object.isFrozen(m.content)).toBe(true)
          expect(Object.isFrozen(m.content[0])).toBe(true)
          expect(Object.isFrozen(m.source)).toBe(true)
        }
        expect(seen).toEqual([callerA, B])
        expect(seen[0]).not.toBe(callerA)
        expect(seen[1]).not.toBe(B)
        expect(Object.isFrozen(callerA)).toBe(false)
        expect(fromDefault).not.toBe(seen)
        expect(fromDefault).toEqual(seen)
        expect(entered).toBe(fromDefault)
      }).pipe(Effect.provide(PreStep.layer)))
  })

  it.scoped("a rejection fails with PreStepRejected carrying turn, step and reason", () =>
    Effect.gen(function*() {
      const preStep = yield* PreStep
      const withReason = yield* Effect.scoped(Effect.gen(function*() {
        yield* preStep.register(() => Effect.succeed(PreStepDecision.reject("not now")))
        return yield* Effect.flip(preStep.run(input([A], 4, 2)))
      }))
      expect(withReason).toBeInstanceOf(PreStepRejected)
      expect(withReason).toMatchObject({ _tag: "PreStepRejected", turn: 4, step: 2, reason: "not now" })
      const withoutReason = yield* Effect.scoped(Effect.gen(function*() {
        yield* preStep.register(() => Effect.succeed(PreStepDecision.reject()))
        return yield* Effect.flip(preStep.run(input([A], 5, 1)))
      }))
      expect(withoutReason).toBeInstanceOf(PreStepRejected)
      expect(withoutReason).toMatchObject({ turn: 5, step: 1 })
      expect("reason" in withoutReason).toBe(false)
      expect(PreStepDecision.reject()).toEqual({ _tag: "Reject" })
    }).pipe(Effect.provide(PreStep.layer)))

  it.scoped("an upstream listener receives a downstream rejection from next()", () =>
    Effect.gen(function*() {
      const preStep = yield* PreStep
      const received: Array<PreStepDecision> = []
      yield* preStep.register((_, next) => Effect.tap(next(), (d) => Effect.sync(() => received.push(d))))
      yield* preStep.register(() => Effect.succeed(PreStepDecision.reject("blocked")))
      const error = yield* runFailure(input([A]))
      expect(received).toEqual([{ _tag: "Reject", reason: "blocked" }])
      expect(error).toMatchObject({ _tag: "PreStepRejected", reason: "blocked" })
    }).pipe(Effect.provide(PreStep.layer)))

  it.scoped("a listener failure fails with PreStepFailed whose cause is the original error", () =>
    Effect.gen(function*() {
      const preStep = yield* PreStep
      const original = { reason: "boom" }
      yield* preStep.register(() => Effect.fail(original))
      const error = yield* runFailure(input([A], 3, 7))
      expect(error).toBeInstanceOf(PreStepFailed)
      expect(error).toMatchObject({ turn: 3, step: 7 })
      expect((error as PreStepFailed).cause).toBe(original)
    }).pipe(Effect.provide(PreStep.layer)))

  it.scoped("a listener defect, or a throw, fails with PreStepFailed whose cause is the defect", () =>
    Effect.gen(function*() {
      const preStep = yield* PreStep
      const defect = new Error("died")
      const died = yield* Effect.scoped(Effect.gen(function*() {
        yield* preStep.register(() => Effect.die(defect))
        return yield* Effect.flip(preStep.run(input([A])))
      }))
      expect(died).toBeInstanceOf(PreStepFailed)
      expect((died as PreStepFailed).cause).toBe(defect)
      const thrown = new Error("thrown")
      const threw = yield* Effect.scoped(Effect.gen(function*() {
        yield* preStep.register(() => {
          throw thrown
        })
        return yield* Effect.flip(preStep.run(input([A])))
      }))
      expect((threw as PreStepFailed).cause).toBe(thrown)
    }).pipe(Effect.provide(PreStep.layer)))

  it.scoped("a downstream failure propagated by an upstream listener is not nested", () =>
    Effect.gen(function*() {
      const preStep = yield* PreStep
      const original = new Error("downstream")
      let seenByUpstream: unknown
      yield* preStep.register((_, next) => Effect.tapError(next(), (e) => Effect.sync(() => (seenByUpstream = e))))
      yield* preStep.register((_, next) => next())
      yield* preStep.register(() => Effect.fail(original))
      const error = yield* runFailure(input([A], 1, 2))
      expect(error).toBeInstanceOf(PreStepFailed)
      // The upstream listener saw the very PreStepFailed the run fails with (modulo Effect's span proxies).
      expect(Cause.originalError(seenByUpstream)).toBe(Cause.originalError(error))
      expect((error as PreStepFailed).cause).toBe(original)
      expect(error).toMatchObject({ turn: 1, step: 2 })
    }).pipe(Effect.provide(PreStep.layer)))

  it.scoped("an upstream listener may recover from a downstream failure", () =>
    Effect.gen(function*() {
      const preStep = yield* PreStep
      yield* preStep.register((_, next) => Effect.catchAll(next(), () => Effect.succeed(PreStepDecision.enter([B]))))
      yield* preStep.register(() => Effect.die("broken"))
      expect(yield* preStep.run(input([A]))).toEqual([B])
    }).pipe(Effect.provide(PreStep.layer)))

  it.scoped("an upstream listener that maps a downstream failure fails with its own error", () =>
    Effect.gen(function*() {
      const preStep = yield* PreStep
      yield* preStep.register((_, next) => Effect.mapError(next(), () => "mapped"))
      yield* preStep.register(() => Effect.fail("original"))
      const error = yield* runFailure(input([A]))
      expect((error as PreStepFailed).cause).toBe("mapped")
    }).pipe(Effect.provide(PreStep.layer)))

  it.effect("registration is removed when its scope closes", () =>
    Effect.gen(function*() {
      const preStep = yield* PreStep
      yield* Effect.scoped(Effect.gen(function*() {
        yield* preStep.register(() => Effect.succeed(PreStepDecision.enter([X])))
        expect(yield* preStep.run(input([A]))).toEqual([X])
      }))
      expect(yield* preStep.run(input([A]))).toEqual([A])
    }).pipe(Effect.provide(PreStep.layer)))

  it.scoped("the same function registered twice is two links, each removed by its own scope", () =>
    Effect.gen(function*() {
      const preStep = yield* PreStep
      let calls = 0
      const counting = (_: PreStepInput, next: () => Effect.Effect<PreStepDecision, PreStepFailed>) =>
        Effect.zipRight(Effect.sync(() => calls++), next())
      yield* preStep.register(counting)
      yield* Effect.scoped(preStep.register(counting))
      yield* preStep.run(input([A]))
      expect(calls).toBe(1)
    }).pipe(Effect.provide(PreStep.layer)))

  it.scoped("the listener list is snapshotted when a run starts", () =>
    Effect.gen(function*() {
      const preStep = yield* PreStep
      const scope = yield* Effect.scope
      yield* preStep.register((_, next) =>
        Effect.zipRight(
          Scope.extend(preStep.register(() => Effect.succeed(PreStepDecision.enter([X]))), scope),
          next()
        )
      )
      expect(yield* preStep.run(input([A]))).toEqual([A])
      // The listener added during the first run takes part in the next one.
      expect(yield* preStep.run(input([A]))).toEqual([X])
    }).pipe(Effect.provide(PreStep.layer)))

  it.effect("each layer build has its own listeners", () =>
    Effect.gen(function*() {
      const registered = yield* Effect.scoped(Effect.gen(function*() {
        const preStep = yield* PreStep
        yield* preStep.register(() => Effect.succeed(PreStepDecision.enter([X])))
        return yield* preStep.run(input([A]))
      })).pipe(Effect.provide(PreStep.layer))
      const fresh = yield* Effect.flatMap(PreStep, (p) => p.run(input([A]))).pipe(Effect.provide(PreStep.layer))
      expect([registered, fresh]).toEqual([[X], [A]])
    }))

  it.scoped("a cancelled run interrupts the listener and ends interrupted", () =>
    Effect.gen(function*() {
      const preStep = yield* PreStep
      const started = yield* Deferred.make<void>()
      const interrupted = yield* Deferred.make<void>()
      yield* preStep.register(() =>
        Effect.zipRight(Deferred.succeed(started, undefined), Effect.never).pipe(
          Effect.onInterrupt(() => Deferred.succeed(interrupted, undefined))
        )
      )
      const fiber = yield* Effect.fork(preStep.run(input([A])))
      yield* Deferred.await(started)
      const exit = yield* Fiber.interrupt(fiber)
      expect(Exit.isInterrupted(exit)).toBe(true)
      expect(Exit.isFailure(exit) && Option.isNone(Cause.failureOption(exit.cause))).toBe(true)
      expect(yield* Deferred.isDone(interrupted)).toBe(true)
    }).pipe(Effect.provide(PreStep.layer)))

  it.scoped("an interruption raised inside a listener is not turned into PreStepFailed", () =>
    Effect.gen(function*() {
      const preStep = yield* PreStep
      yield* preStep.register(() => Effect.interrupt)
      const exit = yield* Effect.exit(preStep.run(input([A])))
      expect(Exit.isInterrupted(exit)).toBe(true)
      expect(Exit.isFailure(exit) && Option.isNone(Cause.failureOption(exit.cause))).toBe(true)
    }).pipe(Effect.provide(PreStep.layer)))
})
