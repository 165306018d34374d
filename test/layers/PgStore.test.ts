import { expect, it } from "@effect/vitest"
import { Cause, Config, ConfigProvider, Context, Effect, Either, Exit, Layer, Option, Scope } from "effect"
import pg from "pg"
import { checkLog } from "../../src/domain/Check.js"
import { AgentBusy, MalformedLog, PersistenceError } from "../../src/domain/Errors.js"
import type { SessionEvent } from "../../src/domain/Event.js"
import { SessionId } from "../../src/domain/Ids.js"
import { PgSessionStore } from "../../src/layers/PgSessionStore.js"
import { redactUrl } from "../../src/layers/PgStore.js"
import { ScriptedModel } from "../../src/layers/ScriptedModel.js"
import { Driver } from "../../src/services/Driver.js"
import { SessionLog } from "../../src/services/SessionLog.js"
import { SessionStore } from "../../src/services/SessionStore.js"
import { agentOver, notation, user } from "../agent/harness.js"
import { makeHeader, makeUserMessage, sessionStoreContract, turnEvents } from "../contracts/SessionStoreContract.js"
import { describePostgres, testPostgres } from "../fixtures/postgres.js"

const server = await testPostgres()

const nonEmpty = (events: ReadonlyArray<SessionEvent>) => events as readonly [SessionEvent, ...Array<SessionEvent>]
const A = makeUserMessage("a", "hello")
const S = SessionId.make("s")

const failureOf = (exit: Exit.Exit<unknown, unknown>) =>
  Exit.isFailure(exit) ? Option.getOrUndefined(Cause.failureOption(exit.cause)) : undefined

describePostgres(server, "PgSessionStore", (server) => {
  const freshUrl = Effect.promise(() => server.freshUrl())

  // Every contract test gets a database of its own.
  sessionStoreContract("postgres", Layer.unwrapEffect(Effect.map(freshUrl, (url) => PgSessionStore.layer({ url }))))

  /** A store on `url` built in the current scope; `name` is its connections' application_name. */
  const storeOn = (url: string, name = "tiller") =>
    Effect.map(
      Layer.build(PgSessionStore.layer({ url, applicationName: name })),
      (ctx) => Context.get(ctx, SessionStore)
    )

  /** An agent on session "s" (created, or resumed) over `store`, in a scope of its own. */
  const agentIn = (store: SessionStore["Type"], resume: boolean, script = [ScriptedModel.text("ok")]) =>
    Effect.gen(function*() {
      const scope = yield* Scope.make()
      const exit = yield* Effect.exit(
        Layer.buildWithScope(
          agentOver(script, { resume }).pipe(Layer.provide(Layer.succeed(SessionStore, store))),
          scope
        )
      )
      if (Exit.isFailure(exit)) yield* Scope.close(scope, Exit.void)
      return { scope, exit }
    })

  /** Runs one statement on `url` with a client of its own. */
  const raw = (url: string, text: string, params: ReadonlyArray<unknown> = []) =>
    Effect.promise(async () => {
      const client = new pg.Client({ connectionString: url })
      await client.connect()
      try {
        return (await client.query(text, params as Array<unknown>)).rows as Array<Record<string, unknown>>
      } finally {
        await client.end()
      }
    })

  it.live("two stores on one database: each sees the other's sessions; a stale append fails and writes nothing", () =>
    Effect.scoped(Effect.gen(function*() {
      const url = yield* freshUrl
      const one = yield* storeOn(url)
      const two = yield* storeOn(url)
      yield* one.create(makeHeader(S), [])
      expect(yield* two.exists(S)).toBe(true)
      const events = turnEvents(0, 1, 1000, A, "hi")
      yield* one.append(S, nonEmpty(events))
      const stale = yield* Effect.flip(two.append(S, nonEmpty(events)))
      expect(stale).toBeInstanceOf(PersistenceError)
      expect((yield* two.load(S)).events).toStrictEqual(events)
    })))

  it.live("concurrent appends at the same seq from two stores: the database lets exactly one in", () =>
    Effect.scoped(Effect.gen(function*() {
      const url = yield* freshUrl
      const stores = [yield* storeOn(url), yield* storeOn(url), yield* storeOn(url)]
      yield* stores[0]!.create(makeHeader(S), [])
      for (let round = 0; round < 5; round++) {
        const events = turnEvents(14 * round, round + 1, 1000 * round, A, "hi")
        const results = yield* Effect.all(stores.map((store) => Effect.either(store.append(S, nonEmpty(events)))), {
          concurrency: "unbounded"
        })
        expect(results.filter(Either.isRight)).toHaveLength(1)
        for (const failed of results.filter(Either.isLeft)) expect(failed.left).toBeInstanceOf(PersistenceError)
      }
      const loaded = yield* stores[1]!.load(S)
      expect(loaded.events.map((event) => event.seq)).toStrictEqual(Array.from({ length: 70 }, (_, i) => i))
    })))

  it.live("a row that does not decode loads as MalformedLog with its seq", () =>
    Effect.scoped(Effect.gen(function*() {
      const url = yield* freshUrl
      const store = yield* storeOn(url)
      yield* store.create(makeHeader(S), turnEvents(0, 1, 1000, A, "hi"))
      yield* raw(url, "UPDATE tiller_events SET row = $1 WHERE session_id = $2 AND seq = 3", ["{\"type\": ", S])
      const error = yield* Effect.flip(store.load(S))
      expect(error).toBeInstanceOf(MalformedLog)
      expect(error).toMatchObject({ _tag: "MalformedLog", sessionId: S, seq: 3 })
      yield* raw(url, "DELETE FROM tiller_events WHERE session_id = $1 AND seq = 5", [S])
      yield* raw(url, "UPDATE tiller_events SET row = $1 WHERE session_id = $2 AND seq = 3", [
        JSON.stringify(turnEvents(0, 1, 1000, A, "hi")[3]),
        S
      ])
      expect(yield* Effect.flip(store.load(S))).toMatchObject({ _tag: "MalformedLog", seq: 5 })
    })))

  it.live("the lease: an agent open through one store makes an open through another AgentBusy, until it is disposed", () =>
    Effect.scoped(Effect.gen(function*() {
      const url = yield* freshUrl
      const one = yield* storeOn(url)
      const two = yield* storeOn(url)
      const first = yield* agentIn(one, false)
      expect(Exit.isSuccess(first.exit)).toBe(true)
      const refused = yield* agentIn(two, true)
      expect(failureOf(refused.exit)).toBeInstanceOf(AgentBusy)
      expect(failureOf(refused.exit)).toMatchObject({ sessionId: S, operation: "open" })
      yield* Scope.close(first.scope, Exit.void)
      const second = yield* agentIn(two, true)
      expect(Exit.isSuccess(second.exit)).toBe(true)
      yield* Scope.close(second.scope, Exit.void)
    })))

  it.live("a lease holder whose connections die is detected by the database: another store takes the session over", () =>
    Effect.scoped(Effect.gen(function*() {
      const url = yield* freshUrl
      const one = yield* storeOn(url, "tiller-holder")
      const two = yield* storeOn(url)
      const first = yield* agentIn(one, false)
      expect(Exit.isSuccess(first.exit)).toBe(true)
      expect(failureOf((yield* agentIn(two, true)).exit)).toBeInstanceOf(AgentBusy)
      // What the server sees when the holder's host or process goes away: its connections end (its
      // pool's, named by the test, and the lease connection, which holds the only advisory lock).
      yield* raw(
        url,
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'tiller-holder' " +
          "OR pid IN (SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted)"
      )
      const taken = yield* agentIn(two, true)
      expect(Exit.isSuccess(taken.exit)).toBe(true)
      yield* Scope.close(taken.scope, Exit.void)
      yield* Scope.close(first.scope, Exit.void)
    })))

  it.live(
    "connection loss mid-append is a typed PersistenceError; nothing half-written; the session resumes on a new store",
    () =>
      Effect.scoped(Effect.gen(function*() {
        const url = yield* freshUrl
        const store = yield* storeOn(url, "tiller-victim")
        yield* store.create(makeHeader(S), turnEvents(0, 1, 1000, A, "hi"))
        // Another session holds the table, so the append waits inside its transaction...
        const blocker = new pg.Client({ connectionString: url })
        yield* Effect.promise(() => blocker.connect())
        yield* Effect.promise(() => blocker.query("BEGIN; LOCK TABLE tiller_events IN ACCESS EXCLUSIVE MODE"))
        const pending = yield* Effect.fork(Effect.either(store.append(S, nonEmpty(turnEvents(14, 2, 2000, A, "hi")))))
        yield* Effect.sleep("300 millis")
        // ...when the server drops the store's connections.
        yield* raw(
          url,
          "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'tiller-victim'"
        )
        const result = yield* pending.await
        yield* Effect.promise(() => blocker.query("ROLLBACK").then(() => blocker.end()))
        expect(Exit.isSuccess(result)).toBe(true)
        const outcome = Exit.isSuccess(result) ? result.value : undefined
        expect(outcome !== undefined && Either.isLeft(outcome) ? outcome.left : outcome).toBeInstanceOf(
          PersistenceError
        )
        // The pool reconnects: the same append goes through now.
        yield* store.append(S, nonEmpty(turnEvents(14, 2, 2000, A, "hi")))
        expect((yield* store.load(S)).events).toHaveLength(28)
      }))
  )

  it.live("an agent whose store loses its connections is poisoned with PersistenceError; a resume repairs and continues", () =>
    Effect.scoped(Effect.gen(function*() {
      const url = yield* freshUrl
      const one = yield* storeOn(url, "tiller-lost")
      const first = yield* agentIn(one, false, [ScriptedModel.text("one"), ScriptedModel.text("two")])
      if (Exit.isFailure(first.exit)) return yield* Effect.failCause(first.exit.cause)
      const driver = Context.get(first.exit.value, Driver)
      yield* driver.followup(user("m1"))
      yield* driver.whenIdle
      yield* Context.get(first.exit.value, SessionLog).flush
      const blocker = new pg.Client({ connectionString: url })
      yield* Effect.promise(() => blocker.connect())
      yield* Effect.promise(() => blocker.query("BEGIN; LOCK TABLE tiller_events IN ACCESS EXCLUSIVE MODE"))
      const sent = yield* Effect.fork(Effect.either(driver.followup(user("m2"))))
      // Every attempt (the writer retries twice) waits for the table and loses its connection.
      for (let i = 0; i < 8; i++) {
        yield* Effect.sleep("150 millis")
        yield* raw(url, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'tiller-lost'")
      }
      yield* Effect.promise(() => blocker.query("ROLLBACK").then(() => blocker.end()))
      const outcome = yield* sent
      expect(Either.isLeft(outcome) ? outcome.left._tag : "acknowledged").toBe("PersistenceError")
      yield* Scope.close(first.scope, Exit.void)
      // A new store (another process, say) resumes the session: repaired, checked, and it runs.
      const two = yield* storeOn(url)
      const second = yield* agentIn(two, true, [ScriptedModel.text("three")])
      if (Exit.isFailure(second.exit)) return yield* Effect.failCause(second.exit.cause)
      const driver2 = Context.get(second.exit.value, Driver)
      yield* driver2.followup(user("m3"))
      yield* driver2.whenIdle
      yield* Context.get(second.exit.value, SessionLog).flush
      yield* Scope.close(second.scope, Exit.void)
      const stored = yield* two.load(S)
      expect(checkLog(stored.events, { seedLength: stored.header.seedLength })).toStrictEqual([])
      // Turn 1 as flushed, nothing of m2 (never acknowledged), then the resumed turn.
      const TURN = ["CH(block-start)", "CH(text-delta)", "CH(block-end)", "CH(finish stop)", "AM"]
      expect(stored.events.map(notation)).toStrictEqual([
        "INS(nt,0,[m1])",
        "TS(1)",
        "CLM(nt,0,1)",
        "SS(1,1)",
        "UM(m1)",
        "RH(initial)",
        ...TURN,
        "SE(1,1)",
        "TE(1,completed)",
        "ES",
        "INS(nt,0,[m3])",
        "TS(2)",
        "CLM(nt,0,1)",
        "SS(2,1)",
        "UM(m3)",
        "RH(resume)",
        ...TURN,
        "SE(2,1)",
        "TE(2,completed)"
      ])
    })))

  it.live("a connection URL's password is never in an error", () =>
    Effect.gen(function*() {
      const error = yield* Effect.flip(
        Effect.scoped(
          Layer.build(
            PgSessionStore.layer({ url: "postgres://tiller:s3cret-pw@127.0.0.1:1/db", connectTimeout: "2 seconds" })
          )
        )
      )
      expect(error).toBeInstanceOf(PersistenceError)
      expect(error.message).not.toContain("s3cret-pw")
      expect(error.message).toContain("postgres://tiller:***@127.0.0.1:1/db")
      expect(JSON.stringify(error)).not.toContain("s3cret-pw")
      expect(redactUrl("postgres://u:p%40ss@h:5/d?password=x&sslmode=require")).toBe(
        "postgres://u:***@h:5/d?password=***&sslmode=require"
      )
    }))

  it.live("layerConfig reads the URL from Config, redacted", () =>
    Effect.scoped(Effect.gen(function*() {
      const url = yield* freshUrl
      const ctx = yield* Layer.build(
        PgSessionStore.layerConfig({ url: Config.redacted("DATABASE_URL") }).pipe(
          Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(new Map([["DATABASE_URL", url]]))))
        )
      )
      const store = Context.get(ctx, SessionStore)
      yield* store.create(makeHeader(S), [])
      expect((yield* store.list).map((header) => header.sessionId)).toStrictEqual([S])
    })))
})
