import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer, Option, TestClock } from "effect"
import { checkLog } from "../../src/domain/Check.js"
import { MessageId, SessionId } from "../../src/domain/Ids.js"
import { Agent } from "../../src/layers/Agent.js"
import { ScriptedModel } from "../../src/layers/ScriptedModel.js"
import { Sessions } from "../../src/layers/Sessions.js"
import { Driver } from "../../src/services/Driver.js"
import { forkSession } from "../../src/services/Fork.js"
import { Inbox } from "../../src/services/Inbox.js"
import { SessionLog } from "../../src/services/SessionLog.js"
import { SessionStore } from "../../src/services/SessionStore.js"
import { Tools } from "../../src/services/Tools.js"
import { notation, plugin, user } from "../agent/harness.js"
import { makeHeader, makeUserMessage, turnEvents } from "../contracts/SessionStoreContract.js"

const sid = SessionId.make
const model = { provider: "p", model: "m" }

describe("forkSession (P43)", () => {
  it.effect("(a) an empty source forks an empty child: [ES], seedLength 0", () =>
    Effect.gen(function*() {
      const store = yield* SessionStore
      yield* store.create(makeHeader(sid("src")), [])
      const child = yield* forkSession({ source: sid("src"), childId: sid("kid") })
      const { events, header } = yield* store.load(child)
      expect(events.map(notation)).toEqual(["ES"])
      expect(header.seedLength).toBe(0)
      expect(header.parent).toEqual({ sessionId: "src", boundary: -1 })
    }).pipe(Effect.provide(SessionStore.layerMemory)))

  it.effect("(b) the default fork copies the whole durable log, then ES; pending input is not inherited", () =>
    Effect.gen(function*() {
      const store = yield* SessionStore
      const A = makeUserMessage("A", "question")
      const C = plugin("C")
      const closed = turnEvents(0, 1, 10, A, "answer")
      const pending = {
        type: "agent/inbox/spliced" as const,
        seq: closed.length,
        time: 20,
        data: { target: "next-step" as const, start: 0, inserted: [C] }
      }
      yield* store.create(makeHeader(sid("src")), [...closed, pending])
      const child = yield* forkSession({ source: sid("src") })
      const { events, header } = yield* store.load(child)
      expect(events.slice(0, -1)).toEqual([...closed, pending])
      expect(events.at(-1)?.type).toBe("session/end-seed")
      expect(header.seedLength).toBe(closed.length + 1)
      expect(checkLog(events, { seedLength: header.seedLength, closed: true })).toEqual([])
      // The child's inbox is empty; the source's still holds C.
      const childInbox = yield* Effect.scoped(
        Effect.flatMap(Inbox, (inbox) => inbox.nextStep).pipe(
          Effect.provide(
            Agent.layer({ resume: child, model }).pipe(
              Layer.provide(Layer.mergeAll(ScriptedModel.layer([]), Tools.layer()))
            )
          )
        )
      )
      expect(childInbox).toEqual([])
    }).pipe(Effect.provide(SessionStore.layerMemory)))

  it.effect("(c) boundaries: open turn, invalid, unknown source, existing child", () =>
    Effect.gen(function*() {
      const store = yield* SessionStore
      const A = makeUserMessage("A", "one")
      const B = makeUserMessage("B", "two")
      const turn1 = turnEvents(0, 1, 10, A, "x")
      const open = turnEvents(turn1.length, 2, 20, B, "y").slice(0, 6) // INS TS CLM SS UM RH
      yield* store.create(makeHeader(sid("src")), [...turn1, ...open])
      const te1 = turn1.length - 1
      const atTe = yield* forkSession({ source: sid("src"), boundary: te1, childId: sid("at-te") })
      expect((yield* store.load(atTe)).events.length).toBe(turn1.length + 1)
      const openTurn = [undefined, te1 + 2, te1 + 4, te1 + 5, te1 + 6]
      for (const boundary of openTurn) {
        const error = yield* Effect.flip(
          forkSession({ source: sid("src"), ...(boundary === undefined ? {} : { boundary }) })
        )
        expect(error).toMatchObject({ _tag: "ForkError", reason: "open-turn" })
      }
      for (const boundary of [-1, 0.5, 1_000]) {
        const error = yield* Effect.flip(forkSession({ source: sid("src"), boundary }))
        expect(error).toMatchObject({ _tag: "ForkError", reason: "invalid-boundary" })
      }
      expect((yield* Effect.flip(forkSession({ source: sid("missing") })))._tag).toBe("SessionNotFound")
      const exists = yield* Effect.flip(forkSession({ source: sid("src"), boundary: -1, childId: sid("at-te") }))
      expect(exists).toMatchObject({ _tag: "ForkError", reason: "child-exists" })
    }).pipe(Effect.provide(SessionStore.layerMemory)))

  it.effect("(d) an agent on the child opens turn 2 and logs RH(resume)", () =>
    Effect.gen(function*() {
      const store = yield* SessionStore
      const A = makeUserMessage("A", "one")
      yield* store.create(makeHeader(sid("src")), turnEvents(0, 1, 10, A, "x"))
      const child = yield* forkSession({ source: sid("src"), childId: sid("kid") })
      const { header } = yield* store.load(child)
      const shape = yield* Effect.scoped(
        Effect.gen(function*() {
          const driver = yield* Driver
          yield* driver.followup(user("Q"))
          yield* driver.whenIdle
          const events = yield* (yield* SessionLog).events
          expect(checkLog(events, { seedLength: header.seedLength, closed: true })).toEqual([])
          return events.map(notation)
        }).pipe(Effect.provide(
          Agent.layer({ resume: child, model }).pipe(
            Layer.provide(Layer.mergeAll(ScriptedModel.layer([ScriptedModel.text("two")]), Tools.layer()))
          )
        ))
      )
      expect(shape[header.seedLength]).toBe("ES")
      expect(shape.slice(header.seedLength + 1)).toEqual([
        "INS(nt,0,[Q])",
        "TS(2)",
        "CLM(nt,0,1)",
        "SS(2,1)",
        "UM(Q)",
        "RH(resume)",
        "CH(block-start)",
        "CH(text-delta)",
        "CH(block-end)",
        "CH(finish stop)",
        "AM",
        "SE(2,1)",
        "TE(2,completed)"
      ])
    }).pipe(Effect.provide(SessionStore.layerMemory)))
})

describe("forkSession of a fork", () => {
  const agentOn = (options: { readonly sessionId: SessionId } | { readonly resume: SessionId }) =>
    Agent.layer({ ...options, model }).pipe(
      Layer.provide(
        Layer.mergeAll(ScriptedModel.layer([ScriptedModel.text("a"), ScriptedModel.text("b")]), Tools.layer())
      )
    )

  it.effect("a seed holding an earlier fork's seed replays: the grandchild opens clean and its ids keep their states", () =>
    Effect.gen(function*() {
      const store = yield* SessionStore
      // The source: a finished turn on A, then X injected and still pending at the fork.
      yield* Effect.scoped(
        Effect.gen(function*() {
          const driver = yield* Driver
          yield* driver.followup(user("A"))
          yield* driver.whenIdle
          yield* driver.inject(plugin("X"))
        }).pipe(Effect.provide(agentOn({ sessionId: sid("s") })))
      )
      const child = yield* forkSession({ source: sid("s"), childId: sid("c") })
      // The child (X not inherited): Y and Z injected, Z rewritten keeping its id, then a turn on B
      // claims them; W is claimed by nobody.
      yield* Effect.scoped(
        Effect.gen(function*() {
          const driver = yield* Driver
          const inbox = yield* Inbox
          yield* driver.inject(plugin("Y"))
          yield* driver.inject(plugin("Z"))
          expect(yield* inbox.replace(MessageId.make("Z"), plugin("Z", "Z rewritten"))).toBe(true)
          yield* driver.followup(user("B"))
          yield* driver.whenIdle
          yield* driver.inject(plugin("W"))
        }).pipe(Effect.provide(agentOn({ resume: child })))
      )
      const grandchild = yield* forkSession({ source: child, childId: sid("g") })
      const { events, header } = yield* store.load(grandchild)
      expect(checkLog(events, { seedLength: header.seedLength, closed: true })).toEqual([])
      const states = yield* Effect.scoped(
        Effect.gen(function*() {
          const inbox = yield* Inbox
          return {
            pending: yield* inbox.snapshot,
            ids: yield* Effect.forEach(["A", "X", "Y", "Z", "B", "W"], (id) => inbox.idState(MessageId.make(id)))
          }
        }).pipe(Effect.provide(agentOn({ resume: grandchild })))
      )
      expect(states.pending).toEqual({ nextTurn: [], nextStep: [] })
      expect(states.ids.map(Option.getOrUndefined)).toEqual([
        "entered",
        "discarded",
        "entered",
        "entered",
        "entered",
        "discarded"
      ])
    }).pipe(Effect.provide(SessionStore.layerMemory)))
})

describe("Sessions", () => {
  const layer = Sessions.layer({ model, idleTimeToLive: "1 minute" }).pipe(
    Layer.provideMerge(
      Layer.mergeAll(
        SessionStore.layerMemory,
        ScriptedModel.layer([ScriptedModel.text("a"), ScriptedModel.text("b")]),
        Tools.layer()
      )
    )
  )

  it.scoped("open creates, shares one live agent per id, resumes after the idle time-to-live, lists and forks", () =>
    Effect.gen(function*() {
      const sessions = yield* Sessions
      const first = yield* Effect.scoped(
        Effect.gen(function*() {
          const a = yield* sessions.open(sid("one"))
          const b = yield* sessions.open(sid("one"))
          const driver = a.unsafeMap.get(Driver.key) as Driver["Type"]
          expect(b.unsafeMap.get(Driver.key)).toBe(driver)
          yield* driver.followup(user("Hello there"))
          yield* driver.whenIdle
          return driver
        })
      )
      // A second agent on the same store cannot open "one" while it is live.
      const busy = yield* Effect.flip(Effect.scoped(Layer.build(
        Agent.layer({ resume: sid("one"), model }).pipe(
          Layer.provide(Layer.mergeAll(ScriptedModel.layer([]), Tools.layer()))
        )
      )))
      expect(busy).toMatchObject({ _tag: "AgentBusy", operation: "open" })
      // After the idle time-to-live the agent is disposed: its lease is free and open resumes it.
      yield* TestClock.adjust("2 minutes")
      yield* Effect.scoped(Layer.build(
        Agent.layer({ resume: sid("one"), model }).pipe(
          Layer.provide(Layer.mergeAll(ScriptedModel.layer([]), Tools.layer()))
        )
      ))
      const reopened = yield* Effect.scoped(
        Effect.map(sessions.open(sid("one")), (context) => context.unsafeMap.get(Driver.key) as Driver["Type"])
      )
      expect(reopened).not.toBe(first)
      const summaries = yield* sessions.list
      expect(summaries).toMatchObject([{ sessionId: "one", title: "Hello there", turns: 1, events: 14 }])
      const child = yield* sessions.fork({ source: sid("one"), childId: sid("two") })
      expect(child).toBe("two")
      expect((yield* sessions.list).map((s) => s.sessionId)).toEqual(["one", "two"])
    }).pipe(Effect.provide(layer)))
})
