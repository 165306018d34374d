/**
 * Driver: the live owner of a session — deliveries, cancellation, idleness, maintenance, live
 * notifications — and the long-lived fiber that runs its turns (SPEC 3, 4).
 *
 * @since 0.1.0
 */
import type { Queue, Scope } from "effect"
import { Duration, FiberSet, Layer } from "effect"
import { Cause, Context, Effect, Either, Exit, Fiber, FiberRef, Option, STM, Stream, TRef } from "effect"
import type { ApprovalQuestion, ApproveOptions, PendingApproval } from "../domain/Approvals.js"
import type { DriverEvent } from "../domain/DriverEvent.js"
import type { ApprovalNotPending, DuplicateMessage, InvalidEvent } from "../domain/Errors.js"
import { AgentBusy, AgentDisposed, MaintenanceAborted, PersistenceError } from "../domain/Errors.js"
import type { ApprovalAnswerData, EventOf, SessionEvent } from "../domain/Event.js"
import * as GrowOnly from "../domain/GrowOnly.js"
import type { SessionId } from "../domain/Ids.js"
import { acceptCallerMessage } from "../domain/Message.js"
import type { AgentStatus, CancelCause, InboxTarget, UserMessage } from "../domain/Values.js"
import { copyCancelCause, describeCause } from "../domain/Values.js"
import type { RequestHeader } from "../domain/Values.js"
import * as ApprovalGate from "../internal/approvals/ApprovalGate.js"
import { currentActivity, watchStops } from "../internal/loop/Activity.js"
import { HooksRunner } from "../internal/loop/HooksRunner.js"
import type { LoopContext } from "../internal/loop/LoopContext.js"
import type { DriverState, Phase } from "../internal/loop/Phase.js"
import { causeOf, getPhase, lastTurnOf, latchedPending, openTurn, setPhase } from "../internal/loop/Phase.js"
import { makeStopWatch } from "../internal/loop/StopWatch.js"
import { ToolRegistry } from "../internal/loop/ToolRegistry.js"
import type { ToolRegistryShape } from "../internal/loop/ToolRegistry.js"
import { runTurnClosing } from "../internal/loop/Turn.js"
import { acceptAt, clearSTM, deliverSTM, insertAcknowledged } from "../internal/state/InboxOps.js"
import * as Outbox from "../internal/state/Outbox.js"
import { SessionState } from "../internal/state/SessionState.js"
import { awaitDurable, commit, commitAcknowledged, guardWritable, publish } from "../internal/state/SessionState.js"
import * as WakeMarks from "../internal/state/WakeMarks.js"
import type { DriverOptions } from "./DriverOptions.js"
import { withReadHistory } from "./DriverOptions.js"
import { Model } from "./Model.js"
import { PreStep } from "./PreStep.js"
import { Tools } from "./Tools.js"

/**
 * Failures of a delivery.
 *
 * @since 0.1.0
 * @category models
 */
export type DeliveryError = InvalidEvent | DuplicateMessage | PersistenceError | AgentDisposed

/**
 * The live owner of one session.
 *
 * @since 0.1.0
 * @category tags
 */
export class Driver extends Context.Tag("tiller/Driver")<Driver, {
  readonly sessionId: SessionId
  /** Inserts `m` into `target` (at its end, or with `at: "start"` at its front); `wakeup` asks for model execution. */
  readonly send: (
    m: UserMessage,
    target: InboxTarget,
    wakeup: boolean,
    options?: { readonly at?: "start" | "end" }
  ) => Effect.Effect<void, DeliveryError>
  /** A prompt for its own turn: `send(m, "next-turn", true)`. */
  readonly followup: (m: UserMessage) => Effect.Effect<void, DeliveryError>
  /** Steering for the nearest step boundary: `send(m, "next-step", true)`. */
  readonly steer: (m: UserMessage) => Effect.Effect<void, DeliveryError>
  /** Context for the nearest step boundary, without waking: `send(m, "next-step", false)`. */
  readonly inject: (m: UserMessage) => Effect.Effect<void, DeliveryError>
  /** Records a cancel cause for the current activity; a broad cancel also discards pending input. */
  readonly cancel: (
    cause: CancelCause,
    options?: { readonly keepInbox?: boolean }
  ) => Effect.Effect<void, PersistenceError | AgentDisposed>
  /** Opens a turn for the pending inbox when idle: a chain whose previous owner stopped mid-way goes on; `false` when nothing was opened. */
  readonly continuePending: Effect.Effect<boolean, PersistenceError | AgentDisposed>
  /** Resolves when the agent is idle (or disposed or poisoned). */
  readonly whenIdle: Effect.Effect<void>
  /** The public status. */
  readonly status: Effect.Effect<AgentStatus>
  /** The current status, then every change; ends after the last one when the agent is disposed. */
  readonly statusChanges: Stream.Stream<AgentStatus>
  /** Runs a non-turn task from the idle phase; wakes meanwhile are latched. */
  readonly runMaintenance: <A, E, R>(
    task: Effect.Effect<A, E, R>
  ) => Effect.Effect<A, E | AgentBusy | MaintenanceAborted | PersistenceError | AgentDisposed, R>
  /** Live notifications committed after subscription; ends after the last one when the agent is disposed. */
  readonly events: Stream.Stream<DriverEvent>
  /** A queue fed with every notification committed after this returns (it keeps them past disposal). */
  readonly subscribe: Effect.Effect<Queue.Dequeue<DriverEvent>, never, Scope.Scope>
  /**
   * Asks for a yes or no on a tool call of the open step: records `approval/request` (durable),
   * then waits for its answer while the turn stays running (SPEC 4.12); interrupted by a cancel.
   */
  readonly requestApproval: (
    question: ApprovalQuestion
  ) => Effect.Effect<ApprovalAnswerData, PersistenceError | AgentDisposed>
  /** Approves a pending call, durably; `always` records an allow rule for the session. */
  readonly approve: (
    callId: string,
    options?: ApproveOptions
  ) => Effect.Effect<void, ApprovalNotPending | PersistenceError | AgentDisposed>
  /** Refuses a pending call, durably: its result is an error saying who refused it and why. */
  readonly deny: (
    callId: string,
    reason?: string,
    options?: { readonly by?: string }
  ) => Effect.Effect<void, ApprovalNotPending | PersistenceError | AgentDisposed>
  /** The approval requests that wait for an answer, oldest first. */
  readonly pendingApprovals: Effect.Effect<ReadonlyArray<PendingApproval>>
  /** The allow rules that "always" answers recorded for the session. */
  readonly approvalRules: Effect.Effect<ReadonlyArray<string>>
}>() {
  /**
   * The driver of the session in the context ({@link make}).
   *
   * @since 0.1.0
   * @category constructors
   */
  static readonly make = (options: DriverOptions = {}) => make(options)

  /**
   * The driver as a layer over the session state, the pre-step, the hooks runner, a model and tools;
   * closing the layer's scope is disposal (SPEC 3.7 steps 1-2).
   *
   * @since 0.1.0
   * @category layers
   */
  static readonly layer = (
    options: DriverOptions = {}
  ): Layer.Layer<Driver, never, SessionState | PreStep | HooksRunner | Model | Tools> =>
    Layer.scoped(Driver, make(options))
}

// `STM.orDie` in fewer interpreter steps: a failure here is a defect of tiller's own drafts.
const orDie = <A, E>(self: STM.STM<A, E>): STM.STM<A> => STM.catchAll(self, (error) => STM.die(error))

const statusOf = (ds: DriverState) =>
  STM.map(getPhase(ds), (phase): AgentStatus => phase._tag === "Running" ? "running" : "idle")

/**
 * Builds the driver's operations over its state; the driver fiber and disposal are started by the
 * agent layer.
 *
 * @since 0.1.0
 * @category constructors
 */
export const makeDriver = (
  ds: DriverState,
  identity: object,
  scope: Scope.Scope,
  registry?: ToolRegistryShape
): Context.Tag.Service<Driver> => {
  const session = ds.session
  const sessionId = session.sessionId

  const send = (
    m: UserMessage,
    target: InboxTarget,
    wakeup: boolean,
    options?: { readonly at?: "start" | "end" }
  ): Effect.Effect<void, DeliveryError> => {
    const at = options?.at === "start" ? "start" : "end"
    const accepted = acceptAt(target, acceptCallerMessage(m))
    // A delivery that wakes nothing changes only the log (the phase is not read).
    if (!wakeup || Either.isLeft(accepted)) return insertAcknowledged(session, target, accepted, at)
    return commitAcknowledged(
      session,
      STM.flatMap(
        STM.zip(getPhase(ds), TRef.get(ds.disposing)),
        ([phase, disposing]) => wake(accepted.right, target, phase, disposing, at)
      )
    )
  }

  // A waking delivery's transaction, once the phase is read: the insertion, then the wake itself.
  const wake = (
    message: UserMessage,
    target: InboxTarget,
    phase: Phase,
    disposing: boolean,
    at: "start" | "end" = "end"
  ): STM.STM<Either.Either<void, DuplicateMessage>, AgentDisposed | PersistenceError> => {
    const aborted = Option.isSome(causeOf(phase))
    const resolved: InboxTarget = aborted && !disposing ? "next-turn" : target
    return STM.flatMap(deliverSTM(session, resolved, message, at), ([inserted]) => {
      if (Either.isLeft(inserted) || disposing) return STM.succeed(inserted)
      if (phase._tag === "Idle") return STM.as(orDie(openTurn(ds, phase.lastTurn + 1, true)), inserted)
      if (phase._tag === "Running" && !aborted) {
        if (resolved !== "next-step") return STM.succeed(inserted)
        return STM.as(WakeMarks.markSteer(session.marks, message.id), inserted)
      }
      return STM.as(WakeMarks.latch(session.marks, message.id), inserted)
    })
  }

  const cancel = (given: CancelCause, options?: { readonly keepInbox?: boolean }) => {
    // Recorded on turn/end, so it must be a CancelCause (callers outside TypeScript can pass
    // anything): a copy, or a defect that changes nothing.
    const cause = copyCancelCause(given)
    if (cause === undefined) {
      return Effect.die(new Cause.IllegalArgumentException(`Driver.cancel: not a CancelCause: ${describeCause(given)}`))
    }
    return commitAcknowledged(
      session,
      STM.gen(function*() {
        yield* guardWritable(session)
        const phase = yield* getPhase(ds)
        if (options?.keepInbox !== true) {
          yield* clearSTM(session).pipe(STM.orDie)
          if (phase._tag !== "Idle") {
            yield* WakeMarks.clearLatched(session.marks)
          }
        }
        const current = yield* getPhase(ds)
        if (current._tag === "Running") {
          yield* setPhase(ds, {
            ...current,
            cause: Option.isSome(current.cause) ? current.cause : Option.some(cause),
            dropContexts: current.dropContexts || options?.keepInbox !== true
          })
        } else if (current._tag === "Maintenance" && Option.isNone(current.cause)) {
          yield* setPhase(ds, { ...current, cause: Option.some(cause) })
        }
        return Either.void
      })
    ).pipe(Effect.withSpan("Driver.cancel"))
  }

  const continuePending = commitAcknowledged(
    session,
    STM.gen(function*() {
      yield* guardWritable(session)
      const phase = yield* getPhase(ds)
      if (phase._tag !== "Idle" || (yield* TRef.get(ds.disposing))) return Either.right(false)
      const { inbox } = (yield* TRef.get(session.log)).fold
      if (inbox.nextTurn.length === 0 && inbox.nextStep.length === 0) return Either.right(false)
      yield* orDie(openTurn(ds, phase.lastTurn + 1, true))
      return Either.right(true)
    })
  ).pipe(Effect.withSpan("Driver.continuePending"))

  const whenIdle: Effect.Effect<void> = Effect.flatMap(
    FiberRef.get(currentActivity),
    (activity) =>
      activity === identity
        ? Effect.dieMessage(
          "whenIdle was awaited from the activity it waits for (a hook, tool body or maintenance task)"
        )
        : STM.commit(
          STM.gen(function*() {
            const phase = yield* TRef.get(ds.phase)
            if (phase._tag === "Idle") return
            if (yield* TRef.get(session.disposed)) return
            if (Option.isSome(yield* TRef.get(session.poisoned))) return
            return yield* STM.retry
          })
        )
  )

  const events = Outbox.stream(session.outbox, STM.succeed([]), Option.some)

  const statusChanges = Outbox.stream(
    session.outbox,
    STM.map(statusOf(ds), (s) => [s]),
    (event) => event.type === "agent/status" ? Option.some(event.status) : Option.none()
  ).pipe(Stream.changes)

  const subscribe: Effect.Effect<Queue.Dequeue<DriverEvent>, never, Scope.Scope> = Effect.map(
    Outbox.subscribe(session.outbox, STM.void),
    ([queue]) => queue
  )

  const runMaintenance = <A, E, R>(
    task: Effect.Effect<A, E, R>
  ): Effect.Effect<A, E | AgentBusy | MaintenanceAborted | PersistenceError | AgentDisposed, R> =>
    Effect.gen(function*() {
      // The last seq when the phase switched: acknowledged (durable) before the result (SPEC 3.1).
      const switchedAt = yield* STM.commit(
        STM.gen(function*() {
          yield* guardWritable(session)
          const phase = yield* getPhase(ds)
          const disposing = yield* TRef.get(ds.disposing)
          if (disposing || phase._tag !== "Idle") {
            return yield* STM.fail(
              new AgentBusy({
                sessionId,
                operation: "runMaintenance",
                phase: disposing ? "disposing" : phase._tag === "Running" ? "running" : "maintenance"
              })
            )
          }
          yield* setPhase(ds, { _tag: "Maintenance", lastTurn: phase.lastTurn, cause: Option.none() })
          return (yield* TRef.get(session.log)).events.length - 1
        })
      )
      const exit = yield* runTask(task)
      const cause = yield* commit(
        session,
        STM.gen(function*() {
          const phase = yield* getPhase(ds)
          const recorded = causeOf(phase)
          const disposing = yield* TRef.get(ds.disposing)
          if (!disposing && (yield* latchedPending(session))) {
            yield* openTurn(ds, lastTurnOf(phase) + 1, true).pipe(STM.orDie)
          } else {
            yield* setPhase(ds, { _tag: "Idle", lastTurn: lastTurnOf(phase) })
          }
          return recorded
        })
      )
      yield* awaitDurable(session, switchedAt)
      if (Exit.isSuccess(exit)) return exit.value
      const defects = Array.from(Cause.defects(exit.cause))
      if (defects.length > 0) {
        const turn = yield* STM.commit(STM.map(getPhase(ds), lastTurnOf))
        yield* commit(
          session,
          publish(session, defects.map((error): DriverEvent => ({ type: "agent/error", turn, step: 0, error })))
        )
        return yield* Effect.die(defects[0])
      }
      if (Option.isSome(cause)) return yield* new MaintenanceAborted({ cause: cause.value })
      // Stopped by the session's poison (SPEC 6.3): the storage failure is the answer.
      const poisoned = yield* STM.commit(TRef.get(session.poisoned))
      if (Option.isSome(poisoned)) return yield* poisoned.value
      return yield* Effect.failCause(exit.cause)
    })

  // The task runs in a child fiber owned by the driver's scope, interrupted when a cause is recorded.
  // If the caller stops waiting, the task is interrupted and awaited so the phase is restored.
  const runTask = <A, E, R>(task: Effect.Effect<A, E, R>) =>
    Effect.uninterruptibleMask((restore) =>
      Effect.gen(function*() {
        // Forks inherit the mask: both fibers are made interruptible explicitly (a cause interrupts
        // the task; the watcher is interrupted once the task is over).
        const fiber = yield* Effect.forkIn(Effect.interruptible(Effect.locally(task, currentActivity, identity)), scope)
        // A recorded cause or a poisoned session (fail-stop, SPEC 6.3) interrupts the task.
        const watcher = yield* Effect.forkIn(
          Effect.interruptible(Effect.zipRight(
            STM.commit(STM.flatMap(TRef.get(ds.phase), (p) =>
              Option.isSome(causeOf(p))
                ? STM.void
                : STM.flatMap(
                  TRef.get(session.poisoned),
                  (poisoned) => Option.isSome(poisoned) ? STM.void : STM.retry
                ))),
            Fiber.interrupt(fiber)
          )),
          scope
        )
        const awaited = yield* Effect.exit(restore(Fiber.await(fiber)))
        const exit = Exit.isSuccess(awaited) ? awaited.value : yield* Fiber.interrupt(fiber)
        yield* Fiber.interrupt(watcher)
        return exit
      })
    )

  const followup = (m: UserMessage) => send(m, "next-turn", true)
  const { watchOpenRequests: _, ...approvals } = ApprovalGate.operations(session, registry, followup)
  return {
    sessionId,
    send,
    followup,
    steer: (m) => send(m, "next-step", true),
    inject: (m) => send(m, "next-step", false),
    cancel,
    continuePending,
    whenIdle,
    status: STM.commit(statusOf(ds)),
    statusChanges,
    runMaintenance,
    events,
    subscribe,
    ...approvals
  }
}

const lastHeaderOf = (events: GrowOnly.GrowOnly<SessionEvent>): RequestHeader | undefined => {
  for (let i = events.length - 1; i >= 0; i--) {
    const event = events.buffer[i]!
    if (event.type === "request/header") return (event as EventOf<"request/header">).data.header
  }
  return undefined
}

/**
 * The driver of the session in the context: its operations, the driver fiber that runs each opened
 * turn (tool bodies in its `FiberSet`), the stop watcher and the disposal finalizer (SPEC 3.7 steps
 * 1-2), all in the current scope.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (
  options: DriverOptions
): Effect.Effect<
  Context.Tag.Service<Driver>,
  never,
  SessionState | PreStep | HooksRunner | Model | Tools | Scope.Scope
> =>
  Effect.gen(function*() {
    const session = yield* SessionState
    const preStep = yield* PreStep
    const hooks = yield* HooksRunner
    const model = yield* Model
    const tools = yield* Tools
    const registry = withReadHistory(yield* ToolRegistry.fromToolsOrDie(tools), session, options)
    const { events, fold } = yield* STM.commit(TRef.get(session.log))
    const stopWatch = makeStopWatch()
    const { maxRetryDelay, ...requestDefaults } = options
    const ds: DriverState = {
      session,
      phase: yield* TRef.make<Phase>({ _tag: "Idle", lastTurn: fold.lastTurn }),
      disposing: yield* TRef.make(false),
      stopWatch
    }
    // Started before the disposal finalizer is added, so it still runs while disposal cancels.
    yield* Effect.forkScoped(watchStops(ds, stopWatch))
    const identity = {}
    const scope = yield* Effect.scope
    const preStepQuiet = preStep.isQuiet ?? (() => false)
    // The loop's context, once the driver fiber runs: tool bodies start in its FiberSet, with the
    // driver fiber's context and fiber refs (its activity identity included).
    const loopContext = (runBody: LoopContext["runBody"]): LoopContext => ({
      ds,
      sessionId: session.sessionId,
      preStep: { run: preStep.run, isQuiet: preStepQuiet },
      hooks: {
        request: (input, seed) =>
          hooks.runRequest(
            { sessionId: input.sessionId, turn: input.turn, step: input.step, attempt: input.attempt },
            seed
          ),
        requestError: hooks.runRequestError,
        turnStopping: hooks.runTurnStopping,
        toolPre: hooks.runToolPre,
        toolPost: hooks.runToolPost,
        isQuiet: hooks.isQuiet
      },
      model,
      tools: {
        list: registry.list,
        lookup: registry.lookup,
        modeOf: registry.modeOf,
        maxParallelToolCalls: tools.maxParallelToolCalls
      },
      defaults: maxRetryDelay === undefined
        ? requestDefaults
        : { ...requestDefaults, maxRetryDelay: Duration.decode(maxRetryDelay) },
      requests: { first: true, lastHeader: lastHeaderOf(events) },
      runBody
    })
    // The driver fiber: picks up each opened turn and runs it; chained turns follow without idling.
    const nextTurn = STM.commit(
      STM.gen(function*() {
        const phase = yield* getPhase(ds)
        if (phase._tag !== "Running" || phase.pending === undefined) return yield* STM.retry
        yield* setPhase(ds, { ...phase, pending: undefined })
        return { turn: phase.turn, batch: phase.pending }
      })
    )
    yield* Effect.forkScoped(
      // Tool bodies still running go with the loop: the FiberSet's scope ends with the driver fiber.
      Effect.scoped(Effect.gen(function*() {
        const runBody = yield* FiberSet.runtime(yield* FiberSet.make<unknown, unknown>())<never>()
        const ctx = loopContext(runBody)
        return yield* Effect.forever(Effect.flatMap(nextTurn, ({ batch, turn }) => runTurnClosing(ctx, turn, batch)))
      })).pipe(Effect.locally(currentActivity, identity))
    )
    const driver = makeDriver(ds, identity, scope, registry)
    // Requests still pending from before this process opened the session: answers left by another
    // process are taken while they wait (SPEC 4.12).
    yield* Effect.forkScoped(ApprovalGate.operations(session, registry, driver.followup).watchOpenRequests)
    // The session's owner from now on: its part of the poison transaction stops the activity (phase
    // Idle and one live error, SPEC 6.3), and its phase is what `SessionLog.append` consults (SPEC 6.7).
    yield* STM.commit(TRef.set(session.owner, {
      onPoison: (error) =>
        STM.gen(function*() {
          const phase = yield* getPhase(ds)
          const turn = phase._tag === "Running" ? phase.turn : phase.lastTurn
          const step = phase._tag === "Running" ? phase.step : 0
          yield* setPhase(ds, { _tag: "Idle", lastTurn: turn })
          const events: Array<DriverEvent> = [{ type: "agent/error", turn, step, error }]
          if (phase._tag === "Running") events.push({ type: "agent/status", status: "idle" })
          yield* publish(session, events)
        }),
      phase: STM.map(getPhase(ds), (phase) =>
        phase._tag === "Idle" ? "idle" : phase._tag === "Running" ? "running" : "maintenance")
    }))
    // Disposal (SPEC 3.7) steps 1-2; the session layer then seals, flushes and ends the streams.
    yield* Effect.addFinalizer(() =>
      Effect.gen(function*() {
        yield* STM.commit(
          STM.gen(function*() {
            yield* TRef.set(ds.disposing, true)
            yield* WakeMarks.clearLatched(session.marks)
            const phase = yield* getPhase(ds)
            if (phase._tag !== "Idle" && Option.isNone(causeOf(phase))) {
              yield* setPhase(ds, { ...phase, cause: Option.some({ kind: "disposed" as const }) })
            }
          })
        )
        yield* STM.commit(
          STM.gen(function*() {
            const phase = yield* TRef.get(ds.phase)
            if (phase._tag !== "Idle" && Option.isNone(yield* TRef.get(session.poisoned))) {
              return yield* STM.retry
            }
          })
        )
      })
    )
    return driver
  })
