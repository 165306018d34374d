/**
 * Sessions, fork, and resume with repair over the PostgreSQL store (SPEC 6.4, 6.5, 6.6, 8.10): the
 * same behaviour as on the memory and SQLite stores, through a database.
 */
import { expect, it } from "@effect/vitest"
import { Context, Effect, Exit, Layer, Scope } from "effect"
import { checkLog } from "../../src/domain/Check.js"
import type { SessionEvent } from "../../src/domain/Event.js"
import { SessionId } from "../../src/domain/Ids.js"
import { repairClosers } from "../../src/domain/Repair.js"
import { Agent } from "../../src/layers/Agent.js"
import { PgSessionStore } from "../../src/layers/PgSessionStore.js"
import { ScriptedModel } from "../../src/layers/ScriptedModel.js"
import { Sessions } from "../../src/layers/Sessions.js"
import { Driver } from "../../src/services/Driver.js"
import { forkSession } from "../../src/services/Fork.js"
import { SessionLog } from "../../src/services/SessionLog.js"
import { SessionStore } from "../../src/services/SessionStore.js"
import { Tools } from "../../src/services/Tools.js"
import { notation, user } from "../agent/harness.js"
import { makeHeader, makeUserMessage, turnEvents } from "../contracts/SessionStoreContract.js"
import { describePostgres, testPostgres } from "../fixtures/postgres.js"

const server = await testPostgres()
const sid = SessionId.make
const model = { provider: "p", model: "m" }
const TEXT = ["CH(block-start)", "CH(text-delta)", "CH(block-end)", "CH(finish stop)", "AM"]

describePostgres(server, "Sessions, fork and resume", (server) => {
  /** A PostgreSQL store on a fresh database, built in the current scope. */
  const freshStore = Effect.flatMap(
    Effect.promise(() => server.freshUrl()),
    (url) => Layer.build(PgSessionStore.layer({ url }))
  )

  it.live("Sessions.open creates, shares one agent per id, resumes after release; fork flushes the source", () =>
    Effect.scoped(Effect.gen(function*() {
      const storeCtx = yield* freshStore
      const store = Context.get(storeCtx, SessionStore)
      const sessions = Context.get(
        yield* Layer.build(
          Sessions.layer({ idleTimeToLive: 0, model }).pipe(
            Layer.provide(Layer.mergeAll(
              Layer.succeedContext(storeCtx),
              ScriptedModel.layer([ScriptedModel.text("one"), ScriptedModel.text("two"), ScriptedModel.text("three")]),
              Tools.layer()
            ))
          )
        ),
        Sessions
      )
      const first = yield* Scope.make()
      const ctx = yield* Scope.extend(sessions.open(sid("a")), first)
      const again = yield* Scope.make()
      const shared = yield* Scope.extend(sessions.open(sid("a")), again)
      expect(Context.get(shared, Driver)).toBe(Context.get(ctx, Driver))
      yield* Context.get(ctx, Driver).followup(user("m1"))
      yield* Context.get(ctx, Driver).whenIdle
      // A fork reads durable events only: Sessions.fork flushes the open source first.
      const child = yield* sessions.fork({ source: sid("a"), childId: sid("a-child") })
      const forked = yield* store.load(child)
      expect(forked.events.map(notation)).toEqual([
        "INS(nt,0,[m1])",
        "TS(1)",
        "CLM(nt,0,1)",
        "SS(1,1)",
        "UM(m1)",
        "RH(initial)",
        ...TEXT,
        "SE(1,1)",
        "TE(1,completed)",
        "ES"
      ])
      expect(forked.header).toMatchObject({ parent: { sessionId: "a", boundary: 12 }, seedLength: 13 })
      yield* Scope.close(first, Exit.void)
      yield* Scope.close(again, Exit.void)
      // Released: the next open resumes from the database.
      const reopened = yield* Scope.make()
      const resumed = yield* Scope.extend(sessions.open(sid("a")), reopened)
      yield* Context.get(resumed, Driver).followup(user("m2"))
      yield* Context.get(resumed, Driver).whenIdle
      yield* Context.get(resumed, SessionLog).flush
      yield* Scope.close(reopened, Exit.void)
      const stored = yield* store.load(sid("a"))
      expect(stored.events.map(notation).slice(13)).toEqual([
        "ES",
        "INS(nt,0,[m2])",
        "TS(2)",
        "CLM(nt,0,1)",
        "SS(2,1)",
        "UM(m2)",
        "RH(resume)",
        ...TEXT,
        "SE(2,1)",
        "TE(2,completed)"
      ])
      expect(checkLog(stored.events, { closed: true })).toEqual([])
    })))

  it.live("forkSession refuses a stored child, a boundary out of range and a prefix ending inside a turn", () =>
    Effect.scoped(Effect.gen(function*() {
      const storeCtx = yield* freshStore
      const store = Context.get(storeCtx, SessionStore)
      const A = makeUserMessage("A", "question")
      const closed = turnEvents(0, 1, 10, A, "answer")
      yield* store.create(makeHeader(sid("src")), closed)
      yield* store.create(makeHeader(sid("taken")), [])
      const fork = (options: Parameters<typeof forkSession>[0]) =>
        Effect.flip(forkSession(options)).pipe(Effect.provide(Layer.succeedContext(storeCtx)))
      expect(yield* fork({ source: sid("src"), childId: sid("taken") })).toMatchObject({
        _tag: "ForkError",
        reason: "child-exists"
      })
      expect(yield* fork({ source: sid("src"), boundary: 99 })).toMatchObject({
        _tag: "ForkError",
        reason: "invalid-boundary"
      })
      expect(yield* fork({ source: sid("src"), boundary: 5 })).toMatchObject({ _tag: "ForkError", reason: "open-turn" })
      expect(yield* fork({ source: sid("missing") })).toMatchObject({ _tag: "SessionNotFound" })
      expect((yield* store.list).map((header) => header.sessionId)).toEqual(["src", "taken"])
    })))

  it.live("resume of a log that ends inside a step: the closers and the end-seed are stored, then the session runs", () =>
    Effect.scoped(Effect.gen(function*() {
      const storeCtx = yield* freshStore
      const store = Context.get(storeCtx, SessionStore)
      const A = makeUserMessage("A", "question")
      // A crash after the first chunks of turn 1: its step and turn are open.
      const open: Array<SessionEvent> = turnEvents(0, 1, 10, A, "answer").slice(0, 8)
      yield* store.create(makeHeader(sid("r")), open)
      const closers = repairClosers(open)
      expect(closers.map(notation)).toEqual(["SE(1,1)", "TE(1,interrupted)"])
      const agent = Agent.layer({ resume: sid("r"), model }).pipe(
        Layer.provideMerge(
          Layer.mergeAll(
            Layer.succeedContext(storeCtx),
            ScriptedModel.layer([ScriptedModel.text("after")]),
            Tools.layer()
          )
        )
      )
      yield* Effect.scoped(Effect.gen(function*() {
        const ctx = yield* Layer.build(agent)
        // Before anything else, the repair is durable.
        expect((yield* store.load(sid("r"))).events.map(notation).slice(8)).toEqual([
          "SE(1,1)",
          "TE(1,interrupted)",
          "ES"
        ])
        yield* Context.get(ctx, Driver).followup(user("m2"))
        yield* Context.get(ctx, Driver).whenIdle
        yield* Context.get(ctx, SessionLog).flush
      }))
      const stored = yield* store.load(sid("r"))
      expect(stored.events.map(notation).slice(11)).toEqual([
        "INS(nt,0,[m2])",
        "TS(2)",
        "CLM(nt,0,1)",
        "SS(2,1)",
        "UM(m2)",
        "RH(resume)",
        ...TEXT,
        "SE(2,1)",
        "TE(2,completed)"
      ])
      expect(checkLog(stored.events, { closed: true })).toEqual([])
    })))
})
