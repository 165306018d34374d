/**
 * Pieces of the cancel and disposal tests: a listener that signals once it runs and then hangs, a
 * tool that finishes (and defers a context) only when a gate opens, disposal while a gate holds the
 * draining step, and an agent whose script entries and tools reach its own driver.
 */
import { Context, Deferred, Effect, Exit, Fiber, Layer, Scope } from "effect"
import { CancelCause } from "../../src/domain/Values.js"
import { ScriptedModel } from "../../src/layers/ScriptedModel.js"
import { Driver } from "../../src/services/Driver.js"
import { SessionLog } from "../../src/services/SessionLog.js"
import { Tool } from "../../src/services/Tools.js"
import { gate, open, plugin, settle, untilEvent, user } from "./harness.js"
import { buildOwn } from "./stores.js"
import { empty } from "./toolFixtures.js"

/** Signals `entered`, then never finishes (until interrupted). */
export const enterAndHang = (entered: Deferred.Deferred<void>) =>
  Effect.zipRight(Deferred.succeed(entered, undefined), Effect.never)

/** A tool `t` whose body waits, uninterruptibly, for `g`, then defers the context `plugin(id)` and answers "done". */
export const gatedContextTool = (g: Deferred.Deferred<void>, id = "X") =>
  Tool.make("t", {
    description: "t",
    parameters: empty,
    execute: (_, ctx) =>
      Effect.as(Effect.uninterruptible(Effect.zipRight(Deferred.await(g), ctx.deferContext(plugin(id)))), "done")
  })

/**
 * Closes `scope` while `g` holds the draining step: the close is forked, `during` runs (by default
 * the runtime settles), then `g` opens and the close is awaited.
 */
export const disposeWhileHeld = <E = never, R = never>(
  scope: Scope.CloseableScope,
  g: Deferred.Deferred<void>,
  during?: Effect.Effect<void, E, R>
) =>
  Effect.gen(function*() {
    const closing = yield* Effect.fork(Scope.close(scope, Exit.void))
    yield* (during ?? settle)
    yield* open(g)
    yield* Fiber.join(closing)
  })

/**
 * Installs a listener through `install` (handed an effect that signals and hangs), sends the
 * follow-up A, cancels with `cause` once the listener hangs, and waits until the agent is idle.
 */
export const cancelOnceEntered = (
  driver: Context.Tag.Service<Driver>,
  install: (hang: Effect.Effect<never>) => Effect.Effect<void, never, Scope.Scope>,
  options: { readonly keepInbox?: boolean } = {},
  cause: CancelCause = CancelCause.user
) =>
  Effect.gen(function*() {
    const entered = yield* Deferred.make<void>()
    yield* install(enterAndHang(entered))
    yield* driver.followup(user("A"))
    yield* Deferred.await(entered)
    yield* driver.cancel(cause, options)
    yield* driver.whenIdle
  })

/**
 * The agent `make` builds, where `agentDriver()` (read only once the agent runs) is that agent's own
 * driver: for script entries and tool bodies, made before the agent, that deliver or cancel.
 */
export const scenarioSeeingDriver = <A, E>(
  make: (agentDriver: () => Context.Tag.Service<Driver>) => Layer.Layer<A, E, never>
) =>
  Layer.unwrapEffect(Effect.sync(() => {
    let driverRef: Context.Tag.Service<Driver> | undefined
    return Layer.scopedContext(Effect.map(Layer.build(make(() => driverRef!)), (ctx) => {
      driverRef = Context.get(ctx as unknown as Context.Context<Driver>, Driver)
      return ctx
    }))
  }))

/** A tool `t` whose body opens `started`, then masks interruption until `release` opens, answering "late". */
export const maskedUntilReleased = () => {
  const started = gate()
  const release = gate()
  const tool = Tool.make("t", {
    description: "t",
    parameters: empty,
    execute: () => Effect.uninterruptible(Effect.zipRight(open(started), Effect.as(Deferred.await(release), "late")))
  })
  return { started, release, tool }
}

/**
 * An agent over its own memory store (see `buildOwn`) that has taken the follow-up A and is
 * streaming an answer that never ends; interrupting that answer waits for `g`.
 */
export const streamingAgentHeldByGate = (g: Deferred.Deferred<void>) =>
  Effect.gen(function*() {
    const built = yield* buildOwn([ScriptedModel.hang({ text: "x" }, { onInterrupt: Deferred.await(g) })])
    yield* built.driver.followup(user("A"))
    yield* Effect.provideService(untilEvent((e) => e.type === "assistant/chunk"), SessionLog, built.log)
    return built
  })

/**
 * A parallel tool `name` whose body adds its call id to `started`, then waits until `release` opens
 * (masking interruption if `masked`) and answers `answer`.
 */
export const startedUntilReleased = (name: string, answer = "ok", masked = false) => {
  const started: Array<string> = []
  const release = gate()
  const wait = Effect.as(Deferred.await(release), answer)
  const tool = Tool.make(name, {
    description: name,
    parameters: empty,
    mode: "parallel",
    execute: (_p, ctx) =>
      Effect.zipRight(Effect.sync(() => started.push(ctx.callId)), masked ? Effect.uninterruptible(wait) : wait)
  })
  return { started, release, tool }
}

/**
 * Fills `handle` (see `makeHandle`) with the agent's driver, then runs `body` with that driver; the
 * body may use any service of the agent it runs in.
 */
export const drivenThrough = (
  handle: { readonly set: Effect.Effect<void, never, Driver> },
  body: (driver: Context.Tag.Service<Driver>) => Generator<any, void, any>
): Effect.Effect<void, unknown, Driver | Scope.Scope> =>
  Effect.gen(function*() {
    yield* handle.set
    const driver = yield* Driver
    yield* Effect.gen(() => body(driver))
  }) as Effect.Effect<void, unknown, Driver | Scope.Scope>
