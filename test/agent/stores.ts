/**
 * Agents over a store the test holds itself: built in scopes the test closes, so one store outlives
 * several agents (disposal, resume, fork), and the typed outcome of what they return.
 */
import { Cause, Context, Effect, Exit, Layer, Option, Scope } from "effect"
import type { SessionEvent } from "../../src/domain/Event.js"
import { SessionId } from "../../src/domain/Ids.js"
import { Driver } from "../../src/services/Driver.js"
import { Inbox } from "../../src/services/Inbox.js"
import { SessionLog } from "../../src/services/SessionLog.js"
import { SessionStore } from "../../src/services/SessionStore.js"
import type { MemoryStoreControl } from "../../src/services/SessionStore.js"
import { agentOver } from "./harness.js"

type Script = Parameters<typeof agentOver>[0]
type Options = Parameters<typeof agentOver>[1]

/** Builds an agent over the given store context in a scope the test closes itself. */
export const buildIn = (
  storeCtx: Context.Context<SessionStore | MemoryStoreControl>,
  script: Script,
  options: Options = {}
) =>
  Effect.gen(function*() {
    const scope = yield* Scope.make()
    const ctx = yield* Layer.buildWithScope(
      agentOver(script, options).pipe(Layer.provide(Layer.succeedContext(storeCtx))),
      scope
    )
    return {
      scope,
      ctx,
      driver: Context.get(ctx, Driver),
      inbox: Context.get(ctx, Inbox),
      log: Context.get(ctx, SessionLog)
    }
  })

/** Builds an agent over a fresh memory store in a scope the test closes itself. */
export const buildOwn = (script: Script, options: Options = {}) =>
  Effect.gen(function*() {
    const storeCtx = yield* Layer.build(SessionStore.layerMemory)
    return { storeCtx, ...(yield* buildIn(storeCtx, script, options)) }
  })

/** A memory store built once in the test scope, and a runner of agents over it. */
export const withStore = Effect.map(Layer.build(SessionStore.layerMemory), (storeCtx) => {
  const store = Context.get(storeCtx, SessionStore)
  const run = <A, E, R>(script: Script, program: Effect.Effect<A, E, R>, options: Options = {}) =>
    Effect.scoped(
      Effect.provide(
        program as Effect.Effect<A, E, Exclude<R, Scope.Scope> | Scope.Scope>,
        agentOver(script, options).pipe(Layer.provide(Layer.succeedContext(storeCtx)))
      )
    ) as Effect.Effect<A, E | Layer.Layer.Error<ReturnType<typeof agentOver>>, never>
  return { store, storeCtx, run }
})

/** The header of a stored session `id` with an empty seed. */
export const header = (id: string) => ({ formatVersion: 1, sessionId: SessionId.make(id), createdAt: 0, seedLength: 0 })

/** A stored event at `seq` (time 0) for seeding a store by hand. */
export const ev = (seq: number, type: string, data: unknown, extra: Record<string, unknown> = {}) =>
  ({ type, seq, time: 0, data, ...extra }) as SessionEvent

/** The typed failure of an exit, or undefined. */
export const failureOf = <E>(exit: Exit.Exit<unknown, E>) =>
  Exit.isFailure(exit) ? Option.getOrUndefined(Cause.failureOption(exit.cause)) : undefined

/** The typed failure of an exit as `"<_tag>: <reason>"`, or "ok". */
export const outcome = (exit: Exit.Exit<unknown, unknown>): string => {
  if (Exit.isSuccess(exit)) return "ok"
  const failure = Cause.failureOption(exit.cause)
  if (Option.isNone(failure)) return `defect: ${Cause.pretty(exit.cause)}`
  const f = failure.value as { readonly _tag?: string; readonly reason?: string }
  return `${f._tag}: ${f.reason ?? ""}`
}
