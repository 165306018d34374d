/**
 * SPEC §6 / §8.10 on the SQLite store and the `Sessions` service: a failed `Sessions.open` is not
 * kept, so the next open tries again once the cause is gone.
 */
import { describe, expect, it } from "@effect/vitest"
import { Context, Effect, Exit, Layer, Scope, TestClock } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { Agent, Driver, ScriptedModel, SessionId, SessionLog, Sessions, SessionStore, SqliteSessionStore, Tools } from "../../src/index.js"
import { notation, plugin } from "./AuditHarness.js"

describe("§8.10/§6.1 Sessions.open after the session was released elsewhere", () => {
  it.scoped("8.10/6.1: Sessions.open of a session another agent held succeeds once that agent is disposed (no cached AgentBusy for idleTimeToLive)", () =>
    Effect.acquireRelease(
      Effect.sync(() => fs.mkdtempSync(path.join(os.tmpdir(), "tiller-f9d-"))),
      (dir) => Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true }))
    ).pipe(Effect.flatMap((dir) =>
      Effect.gen(function*() {
        const model = { provider: "p", model: "m" }
        const ctx = yield* Layer.build(
          Sessions.layer({ model, idleTimeToLive: "5 minutes" }).pipe(
            Layer.provideMerge(Layer.mergeAll(SqliteSessionStore.layer({ filename: path.join(dir, "s.db") }), ScriptedModel.layer([]), Tools.layer()))
          )
        )
        const sessions = Context.get(ctx, Sessions)
        const id = SessionId.make("x")
        // Another agent of the same store holds the session: open fails with AgentBusy (6.1).
        const holder = yield* Scope.make()
        const held = yield* Layer.buildWithScope(Agent.layer({ sessionId: id, model }).pipe(Layer.provide(Layer.succeedContext(ctx))), holder)
        yield* Context.get(held, Driver).inject(plugin("A"))
        expect(yield* Effect.flip(Effect.scoped(sessions.open(id)))).toMatchObject({ _tag: "AgentBusy", operation: "open" })
        // That agent is disposed: the session is free, so open resumes it.
        yield* Scope.close(holder, Exit.void)
        const reopened = yield* Effect.exit(Effect.scoped(Effect.flatMap(sessions.open(id), (c) => Context.get(c, SessionLog).events)))
        expect(Exit.map(reopened, (es) => es.map(notation))).toEqual(Exit.succeed(["INS(ns,0,[A])", "ES"]))
      })
    )))
})

describe("§8.10 a failed Sessions.open under a long-lived scope", () => {
  it.scoped("8.10: the failed open leaves nothing behind: a later open's agent stays in the map after that scope closes and the time-to-live passes", () =>
    Effect.gen(function*() {
      const model = { provider: "p", model: "m" }
      const ctx = yield* Layer.build(
        Sessions.layer({ model, idleTimeToLive: "1 minute" }).pipe(
          Layer.provideMerge(Layer.mergeAll(SessionStore.layerMemory, ScriptedModel.layer([]), Tools.layer()))
        )
      )
      const sessions = Context.get(ctx, Sessions)
      const id = SessionId.make("y")
      const holder = yield* Scope.make()
      yield* Layer.buildWithScope(Agent.layer({ sessionId: id, model }).pipe(Layer.provide(Layer.succeedContext(ctx))), holder)
      // The failed open runs in a scope that outlives it.
      const longLived = yield* Scope.make()
      const failed = yield* Effect.flip(Scope.extend(sessions.open(id), longLived))
      expect(failed).toMatchObject({ _tag: "AgentBusy", operation: "open" })
      yield* Scope.close(holder, Exit.void)
      // A new open succeeds and is kept in use.
      const user = yield* Scope.make()
      const first = yield* Scope.extend(sessions.open(id), user)
      yield* Scope.close(longLived, Exit.void)
      yield* TestClock.adjust("5 minutes")
      // Still the same agent: the failed attempt's expiry did not take the live one out of the map.
      const again = yield* Effect.scoped(sessions.open(id))
      expect(Context.get(again, Driver)).toBe(Context.get(first, Driver))
      yield* Scope.close(user, Exit.void)
    }))
})
