/**
 * Whether a session an agent left behind can be resumed: an agent over a fresh memory store runs
 * prompt `A` to idle and is disposed; then an agent resuming that session is built over the store.
 */
import { Context, Effect, Exit, Layer, Scope } from "effect"
import { Driver } from "../../src/services/Driver.js"
import { SessionStore } from "../../src/services/SessionStore.js"
import { agentOver, user } from "./harness.js"

type Script = Parameters<typeof agentOver>[0]
type Options = Parameters<typeof agentOver>[1]

/**
 * Runs prompt `A` to idle on an agent over a fresh memory store (after `prepare` with the agent's
 * context, in the agent's scope), disposes it, and returns "Right" when an agent resuming the session
 * is built, or the `_tag` of the failure that stopped it.
 */
export const resumeAfterRun = (
  script: Script,
  options: Options = {},
  prepare: (ctx: Context.Context<any>) => Effect.Effect<void, never, Scope.Scope> = () => Effect.void
) =>
  Effect.gen(function*() {
    const storeCtx = yield* Layer.build(SessionStore.layerMemory)
    const scope = yield* Scope.make()
    const ctx = yield* Layer.buildWithScope(
      agentOver(script, options).pipe(Layer.provide(Layer.succeedContext(storeCtx))),
      scope
    )
    yield* Effect.provideService(prepare(ctx), Scope.Scope, scope)
    const driver = Context.get(ctx, Driver)
    yield* driver.followup(user("A"))
    yield* driver.whenIdle
    yield* Scope.close(scope, Exit.void)
    const scope2 = yield* Scope.make()
    const reopened = yield* Effect.either(
      Layer.buildWithScope(agentOver([], { resume: true }).pipe(Layer.provide(Layer.succeedContext(storeCtx))), scope2)
    )
    yield* Scope.close(scope2, Exit.void)
    return reopened._tag === "Left" ? (reopened.left as { readonly _tag?: string })._tag : "Right"
  })
