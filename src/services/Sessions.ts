/**
 * Sessions: many agents per process, each opened on demand (created or resumed), shared by
 * concurrent users and released after an idle time-to-live (SPEC 8.10).
 *
 * @since 0.1.0
 */
import type { Duration } from "effect"
import { Context, Effect, ExecutionStrategy, Exit, Layer, RcMap, Scope } from "effect"
import type {
  AgentBusy,
  ForkError,
  MalformedLog,
  PersistenceError,
  SessionNotFound,
  UnsupportedLogVersion
} from "../domain/Errors.js"
import type { EventOf } from "../domain/Event.js"
import { SessionId } from "../domain/Ids.js"
import type { AgentOptions } from "../layers/Agent.js"
import { acquireAgent } from "../layers/Agent.js"
import { foldOptionsOf } from "../internal/SessionOpen.js"
import type { Driver } from "./Driver.js"
import type { ForkOptions } from "./Fork.js"
import { forkSession } from "./Fork.js"
import type { Hooks } from "./Hooks.js"
import type { Inbox } from "./Inbox.js"
import { Model } from "./Model.js"
import type { PreStep } from "./PreStep.js"
import { SessionLog } from "./SessionLog.js"
import { SessionStore } from "./SessionStore.js"
import { Tools } from "./Tools.js"

/**
 * The services of one open session.
 *
 * @since 0.1.0
 * @category models
 */
export type SessionServices = Driver | Inbox | SessionLog | PreStep | Hooks

/**
 * A stored session at a glance.
 *
 * @since 0.1.0
 * @category models
 */
export interface SessionSummary {
  readonly sessionId: SessionId
  /** The text of the first user message, if any. */
  readonly title: string | undefined
  readonly createdAt: number
  /** The time of the last event (the creation time for an empty log). */
  readonly updatedAt: number
  readonly turns: number
  readonly events: number
  readonly parent?: { readonly sessionId: SessionId; readonly boundary: number }
}

/**
 * Many sessions per process.
 *
 * @since 0.1.0
 * @category tags
 */
export class Sessions extends Context.Tag("tiller/Sessions")<Sessions, {
  /** The live services of a session, created when not stored and resumed otherwise; shared. */
  readonly open: (id: SessionId) => Effect.Effect<
    Context.Context<SessionServices>,
    SessionNotFound | MalformedLog | UnsupportedLogVersion | PersistenceError | AgentBusy,
    Scope.Scope
  >
  /** Forks a stored session; a source open in this process is flushed first. */
  readonly fork: (
    options: ForkOptions
  ) => Effect.Effect<SessionId, ForkError | SessionNotFound | MalformedLog | UnsupportedLogVersion | PersistenceError>
  /** Every stored session with its title, times and turn count. */
  readonly list: Effect.Effect<ReadonlyArray<SessionSummary>, PersistenceError | SessionNotFound | MalformedLog | UnsupportedLogVersion>
}>() {
  /**
   * Sessions over the provided store, model and tools; each session's agent is disposed after
   * `idleTimeToLive` without users.
   *
   * @since 0.1.0
   */
  static readonly layer = (
    options: AgentOptions & { readonly idleTimeToLive: Duration.DurationInput }
  ): Layer.Layer<Sessions, never, SessionStore | Model | Tools> =>
    Layer.scoped(
      Sessions,
      Effect.gen(function*() {
        const store = yield* SessionStore
        const dependencies = Context.make(SessionStore, store).pipe(
          Context.add(Model, yield* Model),
          Context.add(Tools, yield* Tools)
        )
        const { idleTimeToLive, ...agentOptions } = options
        // A fork validates its source as this layer opens sessions (SPEC 6.6 step 2).
        const validation = foldOptionsOf(agentOptions)
        const build = (id: SessionId, resume: boolean) =>
          acquireAgent({ ...agentOptions, ...(resume ? { resume: id } : { sessionId: id }) }).pipe(
            Effect.provide(dependencies)
          )
        // The latest failed open of each session. A failure is not kept: the next `open` tries again
        // (the agent holding it may be gone, the storage healed), so a failure leaves the map,
        // unless a newer attempt already replaced it.
        const latest = new Map<SessionId, Exit.Exit<unknown, unknown>>()
        const map = yield* RcMap.make({
          lookup: (id: SessionId) =>
            Effect.flatMap(store.exists(id), (exists) =>
              build(id, exists).pipe(
                // Created by someone else between the check and the create: resume it instead.
                Effect.catchTag("SessionExists", () => build(id, true))
              )).pipe(
                Effect.exit,
                Effect.tap((exit) =>
                  Effect.sync(() => Exit.isFailure(exit) ? latest.set(id, exit) : latest.delete(id))
                )
              ),
          idleTimeToLive
        })
        // A failed open releases its reference at once (in a scope of its own) and then leaves the
        // map, so nothing of it stays behind to expire later, even under a long-lived caller scope.
        const get = (id: SessionId) =>
          Effect.flatMap(Scope.Scope, (scope) =>
            Effect.flatMap(Scope.fork(scope, ExecutionStrategy.sequential), (own) =>
              Effect.flatMap(Scope.extend(RcMap.get(map, id), own), (exit) =>
                Exit.isSuccess(exit)
                  ? Effect.succeed(exit.value)
                  : Scope.close(own, Exit.void).pipe(
                    Effect.zipRight(Effect.suspend(() => {
                      if (latest.get(id) !== exit) return Effect.void
                      latest.delete(id)
                      return RcMap.invalidate(map, id)
                    })),
                    Effect.zipRight(Effect.failCause(exit.cause))
                  ))))
        const fork = (forkOptions: ForkOptions) =>
          Effect.gen(function*() {
            const open = yield* RcMap.keys(map)
            if (open.includes(forkOptions.source)) {
              yield* Effect.scoped(
                Effect.flatMap(get(forkOptions.source), (context) => Context.get(context, SessionLog).flush)
              ).pipe(Effect.catchAll((e) => e._tag === "PersistenceError" ? Effect.fail(e) : Effect.void))
            }
            return yield* forkSession(forkOptions, validation).pipe(Effect.provideService(SessionStore, store))
          })
        const list = Effect.gen(function*() {
          const headers = yield* store.list
          return yield* Effect.forEach(headers, (header) => {
            const sessionId = SessionId.make(header.sessionId)
            return Effect.map(store.load(sessionId), ({ events }): SessionSummary => {
              let turns = 0
              let title: string | undefined
              for (const event of events) {
                if (event.type === "turn/start") turns = (event as EventOf<"turn/start">).data.turn
                if (title === undefined && event.type === "user/message") {
                  const block = (event as EventOf<"user/message">).data.content[0]
                  if (block?.type === "text") title = block.text
                }
              }
              return {
                sessionId,
                title,
                createdAt: header.createdAt,
                updatedAt: events.length > 0 ? events[events.length - 1]!.time : header.createdAt,
                turns,
                events: events.length,
                ...(header.parent !== undefined
                  ? { parent: { sessionId: SessionId.make(header.parent.sessionId), boundary: header.parent.boundary } }
                  : {})
              }
            })
          })
        })
        return {
          open: (id) => get(id).pipe(Effect.catchTag("SessionExists", (e) => Effect.die(e))),
          fork,
          list
        }
      })
    )
}
