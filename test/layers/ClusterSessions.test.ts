/**
 * Sessions as cluster entities on one in-memory runner: the driver's operations through the
 * entity, idempotent redelivery, typed errors, status and the log followed live.
 */
import * as TestRunner from "@effect/cluster/TestRunner"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer, Stream } from "effect"
import { checkLog, SessionId, SessionStore, Tools, userMessage } from "../../src/index.js"
import { ClusterSessions } from "../../src/layers/ClusterSessions.js"
import * as DemoModel from "../../src/layers/DemoModel.js"

const cluster = ClusterSessions.layer({ maxIdleTime: "1 minute" }).pipe(
  Layer.provideMerge(TestRunner.layer),
  Layer.provideMerge(SessionStore.layerMemory),
  Layer.provide(DemoModel.layer),
  Layer.provide(Tools.layer())
)

const sid = (s: string) => SessionId.make(s)

describe("ClusterSessions", () => {
  it.live("followup through the entity runs a turn and is idempotent per message id", () =>
    Effect.gen(function*() {
      const session = yield* ClusterSessions.client(sid("c-1"))
      const hello = userMessage({ id: "m-1", text: "hello" })
      yield* session.followup(hello)
      yield* session.whenIdle
      // A redelivery of the same message is acknowledged without a second copy in the log.
      yield* session.followup(hello)
      // The same message reaching the handler again (another operation key, as after a runner
      // died between applying it and storing its reply) is answered from the log.
      yield* session.send(hello, "next-turn", true)
      yield* session.steer(userMessage({ id: "m-2", text: "steer" }))
      yield* session.whenIdle
      const status = yield* session.status
      expect(status.status).toBe("idle")
      expect(status.turns).toBe(2)
      // The log followed live up to the second turn's end (the writer stores it after idle).
      const followed = yield* session.events(0, { interval: "20 millis" }).pipe(
        Stream.takeUntil((e) => e.type === "turn/end" && (e.data as { turn: number }).turn === 2),
        Stream.runCollect
      )
      const events = Array.from(followed)
      expect(events.map((e) => e.seq)).toEqual(events.map((_, i) => i))
      const ids = events.filter((e) => e.type === "user/message").map((e) => (e.data as { id: string }).id)
      expect(ids).toEqual(["m-1", "m-2"])
      expect(checkLog(events)).toEqual([])
    }).pipe(Effect.provide(cluster)))

  it.live("another message under a known id is refused with DuplicateMessage", () =>
    Effect.gen(function*() {
      const session = yield* ClusterSessions.client(sid("c-2"))
      yield* session.inject(userMessage({ id: "x-1", text: "one" }))
      const error = yield* Effect.flip(session.send(userMessage({ id: "x-1", text: "two" }), "next-turn", false))
      expect(error._tag).toBe("DuplicateMessage")
      const status = yield* session.status
      expect(status.pending.nextStep).toEqual([{ id: "x-1", text: "one" }])
      expect(status.pending.nextTurn).toEqual([])
    }).pipe(Effect.provide(cluster)))
})
