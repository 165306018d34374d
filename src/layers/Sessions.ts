/**
 * Sessions: many agents per process, each opened on demand (created or resumed), shared by
 * concurrent users and released after an idle time-to-live (SPEC 8.10).
 *
 * @since 0.1.0
 */
import type { Duration } from "effect"
import { Context, Deferred, Effect, ExecutionStrategy, Exit, Layer, RcMap, Scope } from "effect"
import type {
  AgentBusy,
  ForkError,
  MalformedLog,
  PersistenceError,
  SessionExists,
  SessionNotFound,
  UnsupportedLogVersion
} from "../domain/Errors.js"
import type { EventOf } from "../domain/Event.js"
import { SessionId } from "../domain/Ids.js"
import { foldOptionsOf } from "../internal/session/SessionOpen.js"
import type { SessionStateShape } from "../internal/state/SessionState.js"
import { SessionState } from "../internal/state/SessionState.js"
import type { Driver } from "../services/Driver.js"
import type { ForkOptions } from "../services/Fork.js"
import { forkSession } from "../services/Fork.js"
import type { Hooks } from "../services/Hooks.js"
import type { Inbox } from "../services/Inbox.js"
import { Model } from "../services/Model.js"
import type { PreStep } from "../services/PreStep.js"
import { SessionLog } from "../services/SessionLog.js"
import { SessionStore } from "../services/SessionStore.js"
import { Tools } from "../services/Tools.js"
import type { AgentOptions } from "./Agent.js"
import { acquireAgent } from "./Agent.js"

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
  /**
   * The live services of a session, created when not stored and resumed otherwise; shared. A
   * poisoned agent (SPEC 6.3) is closed as soon as its last user releases it, so the next `open`
   * resumes the session afresh; while other users still hold it, `open` shares it.
   */
  readonly open: (id: SessionId) => Effect.Effect<
    Context.Context<SessionServices>,
    SessionNotFound | MalformedLog | UnsupportedLogVersion | PersistenceError | AgentBusy,
    Scope.Scope
  >
  /**
   * Closes the session's current agent in this process (disposal, SPEC 3.7), even while users hold
   * it, then opens it afresh as `open` does. The old agent's users see a disposed agent: its
   * operations fail with `AgentDisposed` and its streams end.
   */
  readonly reopen: (id: SessionId) => Effect.Effect<
    Context.Context<SessionServices>,
    SessionNotFound | MalformedLog | UnsupportedLogVersion | PersistenceError | AgentBusy,
    Scope.Scope
  >
  /** Forks a stored session; a source open in this process is flushed first. */
  readonly fork: (
    options: ForkOptions
  ) => Effect.Effect<SessionId, ForkError | SessionNotFound | MalformedLog | UnsupportedLogVersion | PersistenceError>
  /** Every stored session with its title, times and turn count. */
  readonly list: Effect.Effect<
    ReadonlyArray<SessionSummary>,
    PersistenceError | SessionNotFound | MalformedLog | UnsupportedLogVersion
  >
}>() {
  /**
   * Sessions over the provided store, model and tools; each session's agent is disposed after
   * `idleTimeToLive` without users (at once when it is poisoned).
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
        // Each agent of a session is a generation: the map's key is `generation:id`, and retiring an
        // agent (poisoned, or `reopen`) moves the session to the next key. An agent that users still
        // hold after it was retired therefore never shares a key with its successor, whose entry its
        // late release could otherwise expire.
        const generations = new Map<SessionId, number>()
        const keyOf = (id: SessionId) => `${generations.get(id) ?? 0}:${id}`
        const idOf = (key: string) => SessionId.make(key.slice(key.indexOf(":") + 1))
        // Retirements in progress: an open waits for the old agent's disposal (its lease) to finish.
        const closing = new Map<SessionId, Deferred.Deferred<void>>()
        const awaitClosing = (id: SessionId) =>
          Effect.suspend(() => {
            const pending = closing.get(id)
            return pending === undefined ? Effect.void : Deferred.await(pending)
          })
        // The latest failed open of each key. A failure is not kept: the next `open` tries again
        // (the agent holding it may be gone, the storage healed), so a failure leaves the map,
        // unless a newer attempt already replaced it.
        const latest = new Map<string, Exit.Exit<unknown, unknown>>()
        const map = yield* RcMap.make({
          lookup: (key: string) =>
            Effect.gen(function*() {
              const id = idOf(key)
              // The agent lives in a scope of its own, so `reopen` can close it while users hold it.
              const agentScope = yield* Scope.fork(yield* Effect.scope, ExecutionStrategy.sequential)
              const exists = yield* store.exists(id)
              const context = yield* Scope.extend(
                build(id, exists).pipe(
                  // Created by someone else between the check and the create: resume it instead.
                  Effect.catchTag("SessionExists", () => build(id, true))
                ),
                agentScope
              )
              const agent: LiveAgent = {
                key,
                id,
                context,
                state: Context.get(context, SessionState),
                agentScope,
                users: 0,
                retired: false
              }
              return agent
            }).pipe(
              Effect.exit,
              Effect.tap((exit) => Effect.sync(() => Exit.isFailure(exit) ? latest.set(key, exit) : latest.delete(key)))
            ),
          idleTimeToLive
        })

        // Takes the agent out of the map and disposes of it now (its users see a disposed agent).
        // The session's next open builds a new agent under the next key.
        const retire = (agent: LiveAgent): Effect.Effect<void> =>
          Effect.uninterruptible(Effect.flatMap(Deferred.make<void>(), (done) =>
            Effect.suspend(() => {
              if (agent.retired) return awaitClosing(agent.id)
              agent.retired = true
              if (keyOf(agent.id) === agent.key) generations.set(agent.id, (generations.get(agent.id) ?? 0) + 1)
              closing.set(agent.id, done)
              return RcMap.invalidate(map, agent.key).pipe(
                Effect.zipRight(Scope.close(agent.agentScope, Exit.void)),
                Effect.ensuring(Effect.suspend(() => {
                  if (closing.get(agent.id) === done) closing.delete(agent.id)
                  return Deferred.succeed(done, undefined)
                }))
              )
            })))

        // The durability record of the session's writer, which poisons it (SPEC 6.3).
        const isPoisoned = (agent: LiveAgent) => agent.state.waiters.failure !== undefined

        // One reference to the agent under `key` in a scope of its own (a child of the caller's). A
        // failed open releases its reference at once and then leaves the map, so nothing of it stays
        // behind to expire later, even under a long-lived caller scope. `use` counts the reference
        // as a user: a poisoned agent is retired when its last user releases it.
        const acquire = (key: string) =>
          Effect.flatMap(Scope.Scope, (scope) =>
            Effect.flatMap(Scope.fork(scope, ExecutionStrategy.sequential), (own) =>
              Effect.uninterruptibleMask((restore) =>
                Effect.flatMap(restore(Scope.extend(RcMap.get(map, key), own)), (exit) => {
                  if (Exit.isSuccess(exit)) {
                    const agent = exit.value
                    let user = false
                    // Runs before the map's own release (finalizers run in reverse order): a
                    // retired key makes that release close the agent instead of idling it.
                    return Effect.as(
                      Scope.addFinalizer(
                        own,
                        Effect.suspend(() => {
                          if (!user) {
                            return Effect.void
                          }
                          agent.users -= 1
                          return agent.users === 0 && isPoisoned(agent) ? retire(agent) : Effect.void
                        })
                      ),
                      {
                        agent,
                        own,
                        use: () => {
                          user = true
                          agent.users += 1
                        }
                      }
                    )
                  }
                  return Scope.close(own, Exit.void).pipe(
                    Effect.zipRight(Effect.suspend(() => {
                      if (latest.get(key) !== exit) {
                        return Effect.void
                      }
                      latest.delete(key)
                      return RcMap.invalidate(map, key)
                    })),
                    Effect.zipRight(Effect.failCause(exit.cause))
                  )
                })
              )))

        // A poisoned agent without users is retired and the session opened afresh (so concurrent
        // opens of it agree on one retirement); one that users hold is shared until the last of
        // them releases it. An agent retired meanwhile is let go and the next one opened.
        const open = (id: SessionId): Effect.Effect<LiveAgent, OpenError, Scope.Scope> =>
          Effect.gen(function*() {
            yield* awaitClosing(id)
            const { agent, own, use } = yield* acquire(keyOf(id))
            // Decided and counted in one synchronous step.
            const kept = yield* Effect.sync(() => {
              if (agent.retired || (isPoisoned(agent) && agent.users === 0)) {
                return false
              }
              use()
              return true
            })
            if (kept) {
              return agent
            }
            yield* retire(agent)
            yield* Scope.close(own, Exit.void)
            return yield* open(id)
          })

        const reopen = (id: SessionId) =>
          Effect.gen(function*() {
            yield* awaitClosing(id)
            const key = keyOf(id)
            if (yield* RcMap.has(map, key)) {
              // An open in progress settles first; a failed one has left the map already.
              yield* Effect.scoped(Effect.flatMap(acquire(key), ({ agent }) =>
                retire(agent))).pipe(
                  Effect.catchAll(() =>
                    Effect.void
                  )
                )
            }
            return yield* open(id)
          })

        const fork = (forkOptions: ForkOptions) =>
          Effect.gen(function*() {
            if (yield* RcMap.has(map, keyOf(forkOptions.source))) {
              yield* Effect.scoped(
                Effect.flatMap(open(forkOptions.source), (agent) => Context.get(agent.context, SessionLog).flush)
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
        const servicesOf = (agent: Effect.Effect<LiveAgent, OpenError, Scope.Scope>) =>
          agent.pipe(
            Effect.map((live): Context.Context<SessionServices> => live.context),
            Effect.catchTag("SessionExists", (e) => Effect.die(e))
          )
        return {
          open: (id) => servicesOf(open(id)),
          reopen: (id) => servicesOf(reopen(id)),
          fork,
          list
        }
      })
    )
}

// One agent of the map: its services, its session state and its scope, with its users counted.
interface LiveAgent {
  readonly key: string
  readonly id: SessionId
  readonly context: Context.Context<SessionServices>
  readonly state: SessionStateShape
  readonly agentScope: Scope.CloseableScope
  users: number
  retired: boolean
}

type OpenError = SessionExists | SessionNotFound | MalformedLog | UnsupportedLogVersion | PersistenceError | AgentBusy
