/**
 * SPEC §6 / §8.10 on the SQLite store and the `Sessions` service: a failed `Sessions.open` is not
 * kept, so the next open tries again once the cause is gone.
 */
import { describe, expect, it } from "@effect/vitest"
import { Context, Effect, Exit, Layer, Scope } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { Agent, Driver, ScriptedModel, SessionId, SessionLog, Sessions, SqliteSessionStore, Tools } from "../../src/index.js"
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
