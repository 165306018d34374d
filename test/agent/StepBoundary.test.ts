/**
 * The step boundary committed without an STM transaction: TX-STEP and a continuing step's `step/end`
 * take a direct path when they change only the log and the step number (nothing to claim, no cause,
 * a valid and fresh batch), and the transaction otherwise (closing the turn, claiming steers). Each
 * test drives one situation around that boundary and checks the exact durable sequence, the live
 * notifications and the status a caller sees (SPEC 3.2-3.5, 3.10, 4.1-4.4, 4.8, 4.10, 4.11, 6.3, 7.1-7.3).
 */
import { describe, expect, it } from "@effect/vitest"
import { Context, Deferred, Effect, Exit, Fiber, Layer, Option, Ref, Scope, Stream, TestClock } from "effect"
import {
  AgentBusy,
  CancelCause,
  checkLog,
  deriveMessages,
  Driver,
  Inbox,
  PersistenceError,
  PreStep,
  PreStepDecision,
  ScriptedModel,
  SessionLog,
  SessionStore,
  Tool,
  userMessage
} from "../../src/index.js"
import type { PreStepFailed, PreStepInput, PreStepListener, ScriptEntry, ToolContext } from "../../src/index.js"
import {
  agentOver,
  agentTest,
  events,
  gate,
  idleAndChecked,
  liveNotation,
  notation,
  open,
  pending,
  plugin,
  reasons,
  recordLive,
  recordStatus,
  requests,
  scenario,
  settle,
  shape,
  STEP_A,
  TEXT,
  toolResponse,
  until,
  user
} from "./harness.js"
import { empty } from "./toolFixtures.js"

// ---------------------------------------------------------------------------------------------------
// Helpers

type DriverService = Context.Tag.Service<Driver>
type InboxService = Context.Tag.Service<Inbox>
type PreStepService = Context.Tag.Service<PreStep>
interface Handles {
  readonly driver: DriverService
  readonly inbox: InboxService
}

/** The agent's services for tool bodies, which are built before the agent. */
const makeHandle = Effect.map(Deferred.make<Handles>(), (handle) => ({
  set: Effect.flatMap(Effect.all({ driver: Driver, inbox: Inbox }), (h) => Deferred.succeed(handle, h)),
  use: <A, E>(f: (h: Handles) => Effect.Effect<A, E>) => Effect.flatMap(Deferred.await(handle), f)
}))

const call = (id: string) => ({ id, name: "t", arguments: {} })
const toolStep = (id: string) => ScriptedModel.response({ toolCalls: [call(id)] })

type ToolBody = (h: Handles, ctx: ToolContext) => Effect.Effect<unknown, unknown>

/** A tool `t` whose body runs `body` (with the agent's services) and answers "ok". */
const toolUsing = (handle: Effect.Effect.Success<typeof makeHandle>, body: ToolBody = () => Effect.void) =>
  Tool.make("t", {
    description: "a tool whose body may use the agent",
    parameters: empty,
    execute: (_params, ctx) => Effect.as(handle.use((h) => body(h, ctx)), "ok")
  })

/** `turn.step callId` of every call of the tool `t` of {@link withTool}, in order. */
class ToolSteps extends Context.Tag("test/StepBoundary/ToolSteps")<ToolSteps, Effect.Effect<ReadonlyArray<string>>>() {}

/** A {@link scenario} agent running `script` with a tool `t` whose body runs `body` with the agent's services. */
const withTool = (script: ReadonlyArray<ScriptEntry>, body: ToolBody = () => Effect.void) =>
  Layer.unwrapEffect(Effect.gen(function*() {
    const handle = yield* makeHandle
    const steps = yield* Ref.make<ReadonlyArray<string>>([])
    const t = toolUsing(
      handle,
      (h, ctx) =>
        Effect.zipRight(Ref.update(steps, (a) => [...a, `${ctx.turn}.${ctx.step} ${ctx.callId}`]), body(h, ctx))
    )
    return scenario(script, { tools: [t] }).pipe(
      Layer.tap((ctx) => Effect.provide(handle.set, ctx)),
      Layer.merge(Layer.succeed(ToolSteps, Ref.get(steps)))
    )
  }))

/** {@link withTool} over one call `c1` of `t`, then a text `after`. */
const oneCall = (after = "done", body?: ToolBody) => withTool([toolStep("c1"), ScriptedModel.text(after)], body)

/** One tool round trip of call `id` with body result "ok", in notation. */
const roundTrip = (id: string) => [...toolResponse(1), `TC(${id})`, `TR(${id})`]

/** Step 1 of prompt `A` with its round trip of `c1` and its direct `step/end`, in notation. */
const STEP_1_C1 = [...STEP_A, ...roundTrip("c1"), "SE(1,1)"]

const A = user("A")

/** Prompts `A` and waits until the agent is idle. */
const promptA = (driver: DriverService) => Effect.zipRight(driver.followup(A), driver.whenIdle)

/** Live notifications of a turn of `A` with `middle` between its claim and the final idle status. */
const notesOfA = (
  ...middle: ReadonlyArray<string>
) => ["inserted(A)", "status(running)", "claimed(A,1)", ...middle, "status(idle)"]

/** Starts recording live notifications in notation. */
const live = Effect.map(recordLive, (drain) => Effect.map(drain, (all) => all.map(liveNotation)))

/** Where a pre-step listener was asked: `turn.step boundary [ids]`. */
const preStepNote = (input: PreStepInput) =>
  `${input.turn}.${input.step} ${input.boundary} [${input.messages.map((m) => m.id).join(",")}]`

/**
 * Registers a pre-step listener that notes where it was asked ({@link preStepNote}) and, at step
 * `holdAt` if given, signals `reached` and waits for `release` before going on.
 */
const notePreSteps = (preStep: PreStepService, holdAt?: number) =>
  Effect.gen(function*() {
    const seen = yield* Ref.make<ReadonlyArray<string>>([])
    const reached = yield* Deferred.make<void>()
    const held = gate()
    yield* preStep.register((input, next) =>
      Effect.gen(function*() {
        yield* Ref.update(seen, (a) => [...a, preStepNote(input)])
        if (input.step === holdAt) {
          yield* Deferred.succeed(reached, undefined)
          yield* Deferred.await(held)
        }
        return yield* next()
      })
    )
    return { seen: Ref.get(seen), reached: Deferred.await(reached), release: open(held) }
  })

/** Registers a pre-step listener that runs `atStep` at step `step` of turn 1 and passes on elsewhere. */
const atStep = <E>(
  preStep: PreStepService,
  step: number,
  listener: (next: Parameters<PreStepListener<E>>[1]) => Effect.Effect<PreStepDecision, E>
) =>
  preStep.register<E | PreStepFailed>((
    input,
    next
  ) => (input.turn === 1 && input.step === step ? listener(next) : next()))

/** A scripted text `text` that signals `reached` when the model is asked for it and waits for `release`. */
const heldText = (text: string) => {
  const reached = gate()
  const held = gate()
  return {
    entry: ScriptedModel.text(text, { awaitBefore: Effect.zipRight(open(reached), Deferred.await(held)) }),
    reached: Deferred.await(reached),
    release: open(held)
  }
}

const failureText = (reason: unknown) => JSON.stringify(reason)

// ---------------------------------------------------------------------------------------------------

describe("direct path: a tool step continues with nothing to claim (SPEC 4.2, 4.3, 4.11 C2)", () => {
  agentTest(
    "C2: step/end and step/start without a claim; every step number a caller sees is the step's",
    oneCall(),
    function*({ driver, hooks, preStep }) {
      const toolSteps = yield* ToolSteps
      const pre = yield* notePreSteps(preStep)
      const seenRequest = yield* Ref.make<ReadonlyArray<string>>([])
      yield* hooks.onRequest((input, next) =>
        Effect.zipRight(Ref.update(seenRequest, (a) => [...a, `${input.turn}.${input.step}.${input.attempt}`]), next())
      )
      const notes = yield* live
      const status = yield* recordStatus
      yield* promptA(driver)
      expect(yield* shape).toEqual([...STEP_1_C1, "SS(1,2)", ...TEXT, "SE(1,2)", "TE(1,completed)"])
      expect(yield* pre.seen).toEqual(["1.1 initial [A]", "1.2 later []"])
      expect(yield* Ref.get(seenRequest)).toEqual(["1.1.1", "1.2.1"])
      expect(yield* toolSteps).toEqual(["1.1 c1"])
      expect((yield* requests).map((r) => `${r.turn}.${r.step}.${r.attempt}`)).toEqual(["1.1.1", "1.2.1"])
      expect(yield* notes).toEqual(notesOfA())
      expect(yield* status).toEqual(["idle", "running", "idle"])
      yield* idleAndChecked
    }
  )

  agentTest(
    "a follow-up queued during a tool step is not claimed at later boundaries; the next turn restarts at step 1",
    withTool(
      [toolStep("c1"), toolStep("c2"), ScriptedModel.text("one"), toolStep("c3"), ScriptedModel.text("two")],
      (h, ctx) => (ctx.callId === "c1" ? h.driver.followup(user("F")) : Effect.void)
    ),
    function*({ driver }) {
      const toolSteps = yield* ToolSteps
      const notes = yield* live
      const status = yield* recordStatus
      yield* promptA(driver)
      expect(yield* shape).toEqual([
        ...STEP_A,
        ...toolResponse(1),
        "TC(c1)",
        "INS(nt,0,[F])",
        "TR(c1)",
        "SE(1,1)",
        "SS(1,2)",
        ...roundTrip("c2"),
        "SE(1,2)",
        "SS(1,3)",
        ...TEXT,
        "SE(1,3)",
        "TE(1,completed)",
        "TS(2)",
        "CLM(nt,0,1)",
        "SS(2,1)",
        "UM(F)",
        ...roundTrip("c3"),
        "SE(2,1)",
        "SS(2,2)",
        ...TEXT,
        "SE(2,2)",
        "TE(2,completed)"
      ])
      expect(yield* toolSteps).toEqual(["1.1 c1", "1.2 c2", "2.1 c3"])
      expect((yield* requests).map((r) => `${r.turn}.${r.step}`)).toEqual(["1.1", "1.2", "1.3", "2.1", "2.2"])
      expect(yield* notes).toEqual(notesOfA("inserted(F)", "claimed(F,2)"))
      // Consecutive turns of one activity share one running interval (SPEC 3.5).
      expect(yield* status).toEqual(["idle", "running", "idle"])
      yield* idleAndChecked
    }
  )

  const streamModel = heldText("two")
  agentTest(
    "SessionLog.stream sees the direct step/end while the next pre-step waits, and the direct step/start while the model waits",
    withTool([toolStep("c1"), streamModel.entry]),
    function*({ driver, log, preStep }) {
      const pre = yield* notePreSteps(preStep, 2)
      const streamed = yield* Ref.make<ReadonlyArray<string>>([])
      yield* Effect.forkScoped(Stream.runForEach(log.stream(), (e) => Ref.update(streamed, (a) => [...a, notation(e)])))
      const streamedUpTo = (entry: string) =>
        Effect.zipRight(until(Effect.map(Ref.get(streamed), (a) => a.includes(entry))), Ref.get(streamed))
      yield* driver.followup(A)
      yield* pre.reached
      // Nothing is appended while the listener waits: only the direct append's wake-up delivers SE(1,1).
      expect(yield* streamedUpTo("SE(1,1)")).toEqual(STEP_1_C1)
      yield* pre.release
      yield* streamModel.reached
      expect(yield* streamedUpTo("SS(1,2)")).toEqual([...STEP_1_C1, "SS(1,2)"])
      expect(yield* driver.status).toBe("running")
      yield* streamModel.release
      yield* driver.whenIdle
      expect(yield* streamedUpTo("TE(1,completed)")).toEqual(yield* shape)
      yield* idleAndChecked
    }
  )

  agentTest(
    "a direct step/end is written by the batch window (200 ms from the oldest pending event); direct events take the Clock time at commit",
    oneCall(),
    function*({ driver, log, preStep }) {
      const pre = yield* notePreSteps(preStep, 2)
      yield* driver.followup(A)
      yield* pre.reached
      yield* settle
      const all = yield* events
      const seqOf = (entry: string) => all.findIndex((e) => notation(e) === entry)
      // TC was made durable by the body's checkpoint; TR and SE wait for the window.
      expect(yield* log.durableSeq).toBe(seqOf("TC(c1)"))
      yield* TestClock.adjust("199 millis")
      yield* settle
      expect(yield* log.durableSeq).toBe(seqOf("TC(c1)"))
      yield* TestClock.adjust("1 millis")
      yield* settle
      expect(yield* log.durableSeq).toBe(seqOf("SE(1,1)"))
      yield* pre.release
      yield* driver.whenIdle
      const times = (yield* events).map((e) => `${notation(e)}@${e.time}`)
      expect(times.slice(times.indexOf("SE(1,1)@0"), times.indexOf("SE(1,1)@0") + 2)).toEqual([
        "SE(1,1)@0",
        "SS(1,2)@200"
      ])
      yield* idleAndChecked
    }
  )

  agentTest(
    "G7: a compaction appended by the direct boundary's pre-step is what the directly opened step's request carries",
    oneCall(),
    function*({ driver, log, preStep }) {
      const summary = userMessage({ id: "SUM", text: "summary", source: { kind: "compaction" } })
      yield* atStep(preStep, 2, (next) =>
        Effect.gen(function*() {
          const surface = yield* log.surface
          const start = yield* Effect.orDie(log.append({ type: "compaction/start", data: { turn: 1 } }))
          yield* Effect.orDie(log.append({
            type: "user/message",
            data: summary,
            surfaceOp: { op: "replace", start: surface[0]!, end: surface[surface.length - 1]! },
            sourceEventSeqs: [...surface, start.seq]
          }))
          yield* Effect.orDie(log.append({ type: "compaction/end", data: { turn: 1 } }))
          return yield* next()
        }))
      yield* promptA(driver)
      expect(yield* shape).toEqual([
        ...STEP_1_C1,
        "compaction/start",
        "UM~(SUM)",
        "compaction/end",
        "SS(1,2)",
        ...TEXT,
        "SE(1,2)",
        "TE(1,completed)"
      ])
      const [, second] = yield* requests
      expect(second?.messages).toEqual([summary])
      const all = yield* events
      const upToStep = all.slice(0, all.findIndex((e) => notation(e) === "SS(1,2)") + 1)
      expect(second?.messages).toEqual(deriveMessages(upToStep))
      yield* idleAndChecked
    }
  )
})

describe("transaction path: something to claim at the boundary of a tool step (SPEC 3.8, 4.2, 4.3 step 7)", () => {
  agentTest(
    "a steer from a body is claimed with step/end; the following tool step switches back to the direct path",
    withTool(
      [toolStep("c1"), toolStep("c2"), ScriptedModel.text("done")],
      (h, ctx) => (ctx.callId === "c1" ? h.driver.steer(user("S")) : Effect.void)
    ),
    function*({ driver, preStep }) {
      const pre = yield* notePreSteps(preStep)
      const notes = yield* live
      yield* promptA(driver)
      expect(yield* shape).toEqual([
        ...STEP_A,
        ...toolResponse(1),
        "TC(c1)",
        "INS(ns,0,[S])",
        "TR(c1)",
        "SE(1,1)",
        "CLM(ns,0,1)",
        "SS(1,2)",
        "UM(S)",
        ...roundTrip("c2"),
        "SE(1,2)",
        "SS(1,3)",
        ...TEXT,
        "SE(1,3)",
        "TE(1,completed)"
      ])
      expect(yield* pre.seen).toEqual(["1.1 initial [A]", "1.2 later [S]", "1.3 later []"])
      expect(yield* notes).toEqual(notesOfA("inserted(S)", "claimed(S,1)"))
      yield* idleAndChecked
    }
  )

  agentTest(
    "inbox.clear after a steer and a follow-up: the boundary claims nothing, the turn ends, no second turn",
    withTool([toolStep("c1"), ScriptedModel.text("done"), ScriptedModel.text("never")], (h) =>
      Effect.gen(function*() {
        yield* h.driver.steer(user("S"))
        yield* h.driver.followup(user("F"))
        yield* h.inbox.clear
      })),
    function*({ driver }) {
      const notes = yield* live
      yield* promptA(driver)
      expect(yield* shape).toEqual([
        ...STEP_A,
        ...toolResponse(1),
        "TC(c1)",
        "INS(ns,0,[S])",
        "INS(nt,0,[F])",
        "CAN(ns,0,1)",
        "CAN(nt,0,1)",
        "TR(c1)",
        "SE(1,1)",
        "SS(1,2)",
        ...TEXT,
        "SE(1,2)",
        "TE(1,completed)"
      ])
      expect(yield* notes).toEqual(notesOfA("inserted(S)", "inserted(F)", "discarded(S)", "discarded(F)"))
      yield* idleAndChecked
    }
  )
})

describe("input arriving after the claim, during the later pre-step (SPEC 4.4, 4.9, 7.3)", () => {
  for (const verb of ["steer", "inject"] as const) {
    agentTest(
      `${
        verb === "inject" ? "an" : "a"
      } ${verb} while the direct boundary's pre-step waits misses step 2 and enters step 3`,
      withTool([toolStep("c1"), ScriptedModel.text("two"), ScriptedModel.text("three")]),
      function*({ driver, preStep }) {
        const pre = yield* notePreSteps(preStep, 2)
        // Only the steer variant subscribes: without a subscriber an injection is delivered without a
        // transaction too, so both ways of inserting meet the boundary.
        const notes = verb === "steer" ? yield* live : Effect.succeed<ReadonlyArray<string>>([])
        yield* driver.followup(A)
        yield* pre.reached
        const S = verb === "steer" ? user("S") : plugin("S")
        yield* (verb === "steer" ? driver.steer(S) : driver.inject(S))
        yield* pre.release
        yield* driver.whenIdle
        expect(yield* shape).toEqual([
          ...STEP_1_C1,
          "INS(ns,0,[S])",
          "SS(1,2)",
          ...TEXT,
          "SE(1,2)",
          "CLM(ns,0,1)",
          "SS(1,3)",
          "UM(S)",
          ...TEXT,
          "SE(1,3)",
          "TE(1,completed)"
        ])
        expect(yield* pre.seen).toEqual(["1.1 initial [A]", "1.2 later []", "1.3 later [S]"])
        // Step 2's request has A, the tool call and its result; step 3's adds step 2's answer and S.
        expect((yield* requests).map((r) => r.messages.length)).toEqual([1, 3, 5])
        if (verb === "steer") expect(yield* notes).toEqual(notesOfA("inserted(S)", "claimed(S,1)"))
        yield* idleAndChecked
      }
    )
  }

  for (const verb of ["steer", "inject"] as const) {
    agentTest(
      `a listener that ${verb}s X and enters X at a direct boundary ends the turn error(DUPLICATE_MESSAGE) with no step`,
      oneCall("x"),
      function*({ driver, inbox, preStep }) {
        const X = verb === "steer" ? user("X") : plugin("X")
        yield* atStep(preStep, 2, () =>
          Effect.zipRight(
            Effect.orDie(verb === "steer" ? driver.steer(X) : driver.inject(X)),
            Effect.succeed(PreStepDecision.enter([X]))
          ))
        const notes = yield* live
        yield* promptA(driver)
        const head = [...STEP_1_C1, "INS(ns,0,[X])", "TE(1,error(DUPLICATE_MESSAGE))"]
        const [reason] = yield* reasons
        expect(failureText(reason)).toContain("pending")
        if (verb === "steer") {
          // The steer is waking work still pending after the failure: the chain continues (SPEC 4.7, 4.8).
          expect(yield* shape).toEqual([
            ...head,
            "TS(2)",
            "CLM(ns,0,1)",
            "SS(2,1)",
            "UM(X)",
            ...TEXT,
            "SE(2,1)",
            "TE(2,completed)"
          ])
          expect(yield* notes).toEqual(notesOfA("inserted(X)", "error(1,2)", "claimed(X,2)"))
          expect(yield* inbox.idState(X.id)).toEqual(Option.some("entered"))
        } else {
          // Injected context alone opens no turn.
          expect(yield* shape).toEqual(head)
          expect(yield* notes).toEqual(notesOfA("inserted(X)", "error(1,2)"))
          expect(yield* pending).toEqual({ nt: [], ns: ["X"] })
        }
        yield* idleAndChecked
      }
    )
  }

  agentTest(
    "a steer replaced during a rejecting later pre-step stays a wake: the chain continues into the replacement (SPEC 3.2, 4.8)",
    oneCall("y"),
    function*({ driver, inbox, preStep }) {
      const X = user("X")
      const Y = plugin("Y")
      yield* atStep(preStep, 2, () =>
        Effect.gen(function*() {
          yield* Effect.orDie(driver.steer(X))
          yield* Effect.orDie(inbox.replace(X.id, Y))
          return PreStepDecision.reject("no")
        }))
      const notes = yield* live
      yield* promptA(driver)
      expect((yield* reasons)[0]).toEqual({ kind: "blocked", message: "no" })
      expect(yield* shape).toEqual([
        ...STEP_1_C1,
        "INS(ns,0,[X])",
        "REP(ns,0,[Y])",
        "TE(1,blocked)",
        "TS(2)",
        "CLM(ns,0,1)",
        "SS(2,1)",
        "UM(Y)",
        ...TEXT,
        "SE(2,1)",
        "TE(2,completed)"
      ])
      expect(yield* notes).toEqual(notesOfA("inserted(X)", "discarded(X)", "inserted(Y)", "claimed(Y,2)"))
      yield* idleAndChecked
    }
  )

  agentTest(
    "a steer spliced out for a new message during a rejecting later pre-step: the new message is no wake, the chain ends",
    oneCall("never"),
    function*({ driver, inbox, preStep }) {
      yield* atStep(preStep, 2, () =>
        Effect.gen(function*() {
          yield* Effect.orDie(driver.steer(user("X")))
          yield* Effect.orDie(inbox.splice("next-step", 0, 1, [user("Y")]))
          return PreStepDecision.reject()
        }))
      yield* promptA(driver)
      expect(yield* shape).toEqual([...STEP_1_C1, "INS(ns,0,[X])", "REP(ns,0,[Y])", "TE(1,blocked)"])
      expect(yield* pending).toEqual({ nt: [], ns: ["Y"] })
      expect((yield* requests).length).toBe(1)
      yield* idleAndChecked
    }
  )
})

describe("identity of entered messages at later boundaries (SPEC 3.9, 4.4, 5.2 R9)", () => {
  const S = user("S")
  const N = plugin("N")
  agentTest(
    "a claim dropped for a fresh addition at its own boundary, then entered at the next (direct) boundary, is a duplicate (claimed)",
    withTool(
      [toolStep("c1"), toolStep("c2"), ScriptedModel.text("never")],
      (h, ctx) => (ctx.callId === "c1" ? h.driver.steer(S) : Effect.void)
    ),
    function*({ driver, inbox, preStep }) {
      // Step 2 (claiming S): S dropped, N added; step 3 (nothing claimed): S entered again.
      yield* preStep.register((input, next) =>
        Effect.map(next(), (decision) => {
          if (decision._tag !== "Enter" || input.boundary === "initial") return decision
          return input.step === 2 ? PreStepDecision.enter([N]) : PreStepDecision.enter([S])
        })
      )
      const notes = yield* live
      yield* promptA(driver)
      expect(yield* shape).toEqual([
        ...STEP_A,
        ...toolResponse(1),
        "TC(c1)",
        "INS(ns,0,[S])",
        "TR(c1)",
        "SE(1,1)",
        "CLM(ns,0,1)",
        "SS(1,2)",
        "UM(N)",
        ...roundTrip("c2"),
        "SE(1,2)",
        "TE(1,error(DUPLICATE_MESSAGE))"
      ])
      expect(failureText((yield* reasons)[0])).toContain("claimed")
      expect(yield* inbox.idState(S.id)).toEqual(Option.some("claimed"))
      expect(yield* inbox.idState(N.id)).toEqual(Option.some("entered"))
      expect(yield* notes).toEqual(notesOfA("inserted(S)", "claimed(S,1)", "error(1,3)"))
      yield* idleAndChecked
    }
  )
})

describe("cancel around the boundary (SPEC 3.4, 4.3, 7.2 K8-K10, 7.6)", () => {
  for (const mode of ["broad", "keepInbox"] as const) {
    agentTest(
      `K10: a listener at the direct boundary injects and cancels [${mode}]: no step/start, turn/end aborted`,
      oneCall("never"),
      function*({ driver, preStep }) {
        const I = plugin("I")
        yield* atStep(preStep, 2, (next) =>
          Effect.zipRight(
            Effect.orDie(
              Effect.zipRight(driver.inject(I), driver.cancel(CancelCause.user, { keepInbox: mode === "keepInbox" }))
            ),
            next()
          ))
        const notes = yield* live
        const status = yield* recordStatus
        yield* promptA(driver)
        expect(yield* shape).toEqual([
          ...STEP_1_C1,
          "INS(ns,0,[I])",
          ...(mode === "broad" ? ["CAN(ns,0,1)"] : []),
          "TE(1,aborted(user))"
        ])
        expect(yield* pending).toEqual({ nt: [], ns: mode === "broad" ? [] : ["I"] })
        expect(yield* notes).toEqual(notesOfA("inserted(I)", ...(mode === "broad" ? ["discarded(I)"] : [])))
        expect(yield* status).toEqual(["idle", "running", "idle"])
        expect((yield* requests).length).toBe(1)
        yield* idleAndChecked
      }
    )
  }

  agentTest(
    "K4 / D16: a cancel from step 2's request hook after a direct step/start keeps the entered addition, then SE and TE(aborted)",
    oneCall("never"),
    function*({ driver, hooks, inbox, preStep }) {
      const N = plugin("N")
      yield* preStep.register((input, next) =>
        Effect.map(
          next(),
          (decision) =>
            decision._tag === "Enter" && input.step === 2 ? PreStepDecision.enter([...decision.messages, N]) : decision
        )
      )
      yield* hooks.onRequest((input, next) =>
        input.step === 2
          ? Effect.zipRight(Effect.orDie(driver.cancel(CancelCause.user, { keepInbox: true })), next())
          : next()
      )
      const notes = yield* live
      yield* promptA(driver)
      expect(yield* shape).toEqual([...STEP_1_C1, "SS(1,2)", "UM(N)", "SE(1,2)", "TE(1,aborted(user))"])
      expect(yield* inbox.idState(N.id)).toEqual(Option.some("entered"))
      expect((yield* requests).length).toBe(1)
      expect(yield* notes).toEqual(notesOfA())
      yield* idleAndChecked
    }
  )

  agentTest(
    "K8: a body steers, cancels (keepInbox) and steers again: no claim at step/end; the latched replay claims both",
    oneCall("replay", (h) =>
      Effect.uninterruptible(Effect.gen(function*() {
        yield* h.driver.steer(user("S1"))
        yield* h.driver.cancel(CancelCause.user, { keepInbox: true })
        yield* h.driver.steer(user("S2"))
      }))),
    function*({ driver }) {
      const notes = yield* live
      const status = yield* recordStatus
      yield* promptA(driver)
      expect(yield* shape).toEqual([
        ...STEP_A,
        ...toolResponse(1),
        "TC(c1)",
        "INS(ns,0,[S1])",
        "INS(nt,0,[S2])",
        "TR✗(c1)",
        "SE(1,1)",
        "TE(1,aborted(user))",
        "TS(2)",
        "CLM(ns,0,1)",
        "CLM(nt,0,1)",
        "SS(2,1)",
        "UM(S1)",
        "UM(S2)",
        ...TEXT,
        "SE(2,1)",
        "TE(2,completed)"
      ])
      expect(yield* notes).toEqual(notesOfA("inserted(S1)", "inserted(S2)", "claimed(S1,2)", "claimed(S2,2)"))
      expect(yield* status).toEqual(["idle", "running", "idle"])
      yield* idleAndChecked
    }
  )

  agentTest(
    "K9: a turn-stopping listener injects, then cancels (keepInbox): the boundary claims nothing, the injection stays pending",
    scenario([ScriptedModel.text("one"), ScriptedModel.text("never")]),
    function*({ driver, hooks }) {
      const I = plugin("I")
      yield* hooks.onTurnStopping(() =>
        Effect.orDie(Effect.zipRight(driver.inject(I), driver.cancel(CancelCause.hook("stop"), { keepInbox: true })))
      )
      const notes = yield* live
      yield* promptA(driver)
      expect(yield* shape).toEqual([...STEP_A, ...TEXT, "SE(1,1)", "INS(ns,0,[I])", "TE(1,aborted(hook))"])
      expect(yield* pending).toEqual({ nt: [], ns: ["I"] })
      expect(yield* notes).toEqual(notesOfA("inserted(I)"))
      yield* idleAndChecked
    }
  )
})

describe("turn-stopping input claimed through the transaction, then a direct step/start (SPEC 4.3 steps 6-7, 4.7)", () => {
  for (const verb of ["steer", "followup"] as const) {
    agentTest(
      `a turn-stopping listener's ${verb}: ${
        verb === "steer"
          ? "claimed at the boundary, a second step opens directly"
          : "the turn closes and the chain continues"
      }`,
      scenario([ScriptedModel.text("one"), ScriptedModel.text("two")]),
      function*({ driver, hooks }) {
        const stopping = yield* Ref.make<ReadonlyArray<string>>([])
        const X = user("X")
        yield* hooks.onTurnStopping((input) =>
          Effect.zipRight(
            Ref.update(stopping, (a) => [...a, `${input.turn}.${input.step}`]),
            input.turn === 1 && input.step === 1
              ? Effect.orDie(verb === "steer" ? driver.steer(X) : driver.followup(X))
              : Effect.void
          )
        )
        const notes = yield* live
        const status = yield* recordStatus
        yield* promptA(driver)
        if (verb === "followup") {
          expect(yield* shape).toEqual([
            ...STEP_A,
            ...TEXT,
            "SE(1,1)",
            "INS(nt,0,[X])",
            "TE(1,completed)",
            "TS(2)",
            "CLM(nt,0,1)",
            "SS(2,1)",
            "UM(X)",
            ...TEXT,
            "SE(2,1)",
            "TE(2,completed)"
          ])
          expect(yield* Ref.get(stopping)).toEqual(["1.1", "2.1"])
          expect(yield* notes).toEqual(notesOfA("inserted(X)", "claimed(X,2)"))
        } else {
          expect(yield* shape).toEqual([
            ...STEP_A,
            ...TEXT,
            "SE(1,1)",
            "INS(ns,0,[X])",
            "CLM(ns,0,1)",
            "SS(1,2)",
            "UM(X)",
            ...TEXT,
            "SE(1,2)",
            "TE(1,completed)"
          ])
          expect(yield* Ref.get(stopping)).toEqual(["1.1", "1.2"])
          expect(yield* notes).toEqual(notesOfA("inserted(X)", "claimed(X,1)"))
        }
        expect(yield* status).toEqual(["idle", "running", "idle"])
        yield* idleAndChecked
      }
    )
  }

  agentTest(
    "a turn-stopping listener's inject after a max-tokens step: claimed, a second step opens directly, max-tokens stays sticky",
    scenario([ScriptedModel.response({ text: "cut", finish: "max-tokens" }), ScriptedModel.text("two")]),
    function*({ driver, hooks }) {
      yield* hooks.onTurnStopping((input) => input.step === 1 ? Effect.orDie(driver.inject(plugin("X"))) : Effect.void)
      yield* promptA(driver)
      expect(yield* shape).toEqual([
        ...STEP_A,
        "CH(block-start)",
        "CH(text-delta)",
        "CH(block-end)",
        "CH(finish max-tokens)",
        "AM",
        "SE(1,1)",
        "INS(ns,0,[X])",
        "CLM(ns,0,1)",
        "SS(1,2)",
        "UM(X)",
        ...TEXT,
        "SE(1,2)",
        "TE(1,max-tokens)"
      ])
      yield* idleAndChecked
    }
  )
})

describe("poison and disposal around the boundary (SPEC 3.7, 6.3, 7.2 K14-K15)", () => {
  agentTest(
    "poison at the checkpoint of a directly opened step: agent/error names that step, the activity stops",
    oneCall("never"),
    function*({ control, driver, log, preStep }) {
      yield* atStep(preStep, 2, (next) => Effect.zipRight(control.failAppends(3), next()))
      const notes = yield* live
      yield* promptA(driver)
      expect(yield* driver.status).toBe("idle")
      const head = [...STEP_1_C1, "SS(1,2)"]
      expect(yield* shape).toEqual(head)
      // Storage holds everything up to the tool body's checkpoint (TC), nothing after.
      const all = yield* events
      expect(yield* log.durableSeq).toBe(all.findIndex((e) => e.type === "tool/call"))
      expect(yield* notes).toEqual(notesOfA("error(1,2)"))
      expect(yield* Effect.flip(driver.steer(user("late")))).toBeInstanceOf(PersistenceError)
      expect(yield* Effect.flip(driver.cancel(CancelCause.user))).toBeInstanceOf(PersistenceError)
      expect(yield* shape).toEqual(head)
      expect((yield* requests).length).toBe(1)
      expect(checkLog(yield* events)).toEqual([])
    }
  )

  agentTest(
    "poison while the direct boundary's pre-step waits: no step/start, no turn/end, agent/error names the last step",
    oneCall("never"),
    function*({ control, driver, log, preStep }) {
      const reached = yield* Deferred.make<void>()
      const interrupted = yield* Deferred.make<void>()
      const never = gate()
      yield* atStep(preStep, 2, (next) =>
        Effect.zipRight(
          Deferred.succeed(reached, undefined),
          Effect.zipRight(Deferred.await(never), next()).pipe(
            Effect.onInterrupt(() => Deferred.succeed(interrupted, undefined))
          )
        ))
      const notes = yield* live
      yield* driver.followup(A)
      yield* Deferred.await(reached)
      yield* control.failAppends(3)
      expect(yield* Effect.flip(log.flush)).toBeInstanceOf(PersistenceError)
      yield* driver.whenIdle
      yield* Deferred.await(interrupted)
      yield* settle
      expect(yield* driver.status).toBe("idle")
      expect(yield* shape).toEqual(STEP_1_C1)
      expect(yield* notes).toEqual(notesOfA("error(1,1)"))
      expect((yield* requests).length).toBe(1)
      expect(checkLog(yield* events)).toEqual([])
    }
  )

  it.scoped("disposal while the direct boundary's pre-step waits: turn/end aborted(disposed), a steer made meanwhile stays pending", () =>
    Effect.gen(function*() {
      const handle = yield* makeHandle
      const t = toolUsing(handle)
      const scope = yield* Scope.make()
      const context = yield* Layer.buildWithScope(
        agentOver([toolStep("c1"), ScriptedModel.text("never")], { tools: [t] }),
        scope
      )
      const run = <A, E>(effect: Effect.Effect<A, E, Driver | Inbox | SessionLog | PreStep | ScriptedModel>) =>
        Effect.provide(effect, context)
      yield* run(Effect.gen(function*() {
        yield* handle.set
        const driver = yield* Driver
        const preStep = yield* PreStep
        const reached = yield* Deferred.make<void>()
        const never = gate()
        yield* Effect.provideService(
          preStep.register((input, next) =>
            input.step === 2
              ? Effect.zipRight(Deferred.succeed(reached, undefined), Effect.zipRight(Deferred.await(never), next()))
              : next()
          ),
          Scope.Scope,
          scope
        )
        const whenIdle = yield* Effect.fork(Effect.zipRight(Deferred.await(reached), driver.whenIdle))
        yield* driver.followup(A)
        yield* Deferred.await(reached)
        yield* driver.steer(user("S"))
        expect(Option.isNone(yield* Fiber.poll(whenIdle))).toBe(true)
        yield* Scope.close(scope, Exit.void)
        yield* Fiber.join(whenIdle)
        expect(yield* shape).toEqual([...STEP_1_C1, "INS(ns,0,[S])", "TE(1,aborted(disposed))"])
        expect(yield* pending).toEqual({ nt: [], ns: ["S"] })
        expect((yield* requests).length).toBe(1)
        expect(checkLog(yield* events, { closed: true })).toEqual([])
      }))
    }).pipe(Effect.provide(SessionStore.layerMemory)))
})

describe("observers at the boundary (SPEC 3.5, 3.6, 3.10, D5)", () => {
  const model = heldText("two")
  agentTest(
    "an observer of the direct step/end sees status running, gets AgentBusy(running) from runMaintenance; whenIdle waits for the turn",
    withTool([toolStep("c1"), model.entry]),
    function*({ driver, log }) {
      const seen = yield* Deferred.make<ReadonlyArray<string>>()
      yield* Effect.forkScoped(
        log.stream().pipe(
          Stream.filter((e) => notation(e) === "SE(1,1)"),
          Stream.take(1),
          Stream.runForEach(() =>
            Effect.gen(function*() {
              const status = yield* driver.status
              const busy = yield* Effect.flip(driver.runMaintenance(Effect.succeed("never")))
              const busyNote = busy instanceof AgentBusy
                ? `busy:${busy.operation}:${busy.phase}`
                : `other:${String(busy)}`
              yield* Deferred.succeed(seen, [status, busyNote])
            })
          )
        )
      )
      yield* driver.followup(A)
      const idle = yield* Effect.fork(driver.whenIdle)
      expect(yield* Deferred.await(seen)).toEqual(["running", "busy:runMaintenance:running"])
      yield* model.reached
      yield* settle
      expect(Option.isNone(yield* Fiber.poll(idle))).toBe(true)
      expect(yield* shape).toEqual([...STEP_1_C1, "SS(1,2)"])
      yield* model.release
      yield* Fiber.join(idle)
      expect(yield* shape).toEqual([...STEP_1_C1, "SS(1,2)", ...TEXT, "SE(1,2)", "TE(1,completed)"])
      // Idle again: maintenance is accepted now.
      expect(yield* driver.runMaintenance(Effect.succeed("ran"))).toBe("ran")
      yield* idleAndChecked
    }
  )
})
