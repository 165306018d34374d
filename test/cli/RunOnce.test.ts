import { describe, expect, it } from "@effect/vitest"
import { Context, Effect, Layer } from "effect"
import { runOnce } from "../../src/cli/Chat.js"
import { ExitWith } from "../../src/cli/CliError.js"
import { SessionId } from "../../src/domain/Ids.js"
import type { ScriptEntry } from "../../src/layers/ScriptedModel.js"
import { ScriptedModel } from "../../src/layers/ScriptedModel.js"
import { Sessions } from "../../src/layers/Sessions.js"
import { SessionLog } from "../../src/services/SessionLog.js"
import { SessionStore } from "../../src/services/SessionStore.js"
import { Tools } from "../../src/services/Tools.js"

// The demo model always completes its turns, so the exit code of a turn that does not complete is
// checked here, in process, with scripted models.
const sessionsWith = (script: ReadonlyArray<ScriptEntry>) =>
  Sessions.layer({ idleTimeToLive: 0, model: { provider: "scripted", model: "test" } }).pipe(
    Layer.provideMerge(Layer.mergeAll(SessionStore.layerMemory, ScriptedModel.layer(script), Tools.layer()))
  )

const turnEnds = (id: SessionId) =>
  Effect.scoped(Effect.gen(function*() {
    const sessions = yield* Sessions
    const context = yield* sessions.open(id)
    const events = yield* Context.get(context, SessionLog).events
    return events.filter((e) => e.type === "turn/end").map((e) => {
      const reason = (e.data as { reason: { kind: string; error?: { code: string } } }).reason
      return reason.error === undefined ? reason.kind : `${reason.kind} ${reason.error.code}`
    })
  }))

describe("runOnce", () => {
  const id = SessionId.make("run")

  it.live("a completed turn succeeds", () =>
    Effect.gen(function*() {
      yield* runOnce(id, "hi", { contexts: ["ctx"], json: false })
      expect(yield* turnEnds(id)).toEqual(["completed"])
    }).pipe(Effect.provide(sessionsWith([ScriptedModel.text("fine")]))))

  it.live("a turn that ends in error fails with exit code 1", () =>
    Effect.gen(function*() {
      const error = yield* Effect.flip(runOnce(id, "hi", { contexts: [], json: false }))
      expect(error).toEqual(new ExitWith({ code: 1 }))
      expect(yield* turnEnds(id)).toEqual(["error BAD_REQUEST"])
    }).pipe(Effect.provide(sessionsWith([
      ScriptedModel.fail({ code: "BAD_REQUEST", status: 400, message: "bad request", retryable: false })
    ]))))

  it.live("a turn cut by max-tokens fails with exit code 1", () =>
    Effect.gen(function*() {
      const error = yield* Effect.flip(runOnce(id, "hi", { contexts: [], json: true }))
      expect(error).toEqual(new ExitWith({ code: 1 }))
      expect(yield* turnEnds(id)).toEqual(["max-tokens"])
    }).pipe(Effect.provide(sessionsWith([ScriptedModel.response({ text: "cut", finish: "max-tokens" })]))))
})
