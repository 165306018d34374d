/**
 * Fork through the package (SPEC 6.6, 8.10): seed contents and known ids, Sessions.fork validation
 * and check order, fork before the first request, identity across a fork.
 */
import { describe, expect, it } from "@effect/vitest"
import { Context, Effect, Exit, Layer, Option, Scope, TestClock } from "effect"
import {
  checkLog,
  Driver,
  forkSession,
  Inbox,
  PreStep,
  PreStepDecision,
  ScriptedModel,
  SessionId,
  SessionLog,
  Sessions,
  SessionStore,
  Tools
} from "../../src/index.js"
import type { UserMessage } from "../../src/index.js"
import { asId, events, notation, plugin, user } from "./harness.js"
import { buildIn, ev, header, outcome, withStore } from "./stores.js"

const sid = (s: string) => SessionId.make(s)

describe("§6.6 fork: seed contents", () => {
  it.scoped("6.6/3.8/5.2 R9: a fork child whose seed holds a content rewrite keeping its id (REP) opens and checks clean", () =>
    Effect.gen(function*() {
      const { store, run } = yield* withStore
      yield* run(
        [],
        Effect.gen(function*() {
          const inbox = yield* Inbox
          yield* inbox.append("next-turn", user("a", "first"))
          expect(yield* inbox.replace("a" as UserMessage["id"], user("a", "rewritten"))).toBe(true)
        })
      )
      const source = yield* store.load(sid("s"))
      expect(source.events.map(notation)).toEqual(["INS(nt,0,[a])", "REP(nt,0,[a])"])
      const childId = yield* forkSession({ source: sid("s"), childId: sid("child") }).pipe(
        Effect.provideService(SessionStore, store)
      )
      const child = yield* store.load(childId)
      // The seed's REP re-inserts the id it removes (a content rewrite): no R9, and the child opens.
      const violations = checkLog(child.events, { seedLength: child.header.seedLength })
      const opened = yield* Effect.exit(
        run([], Effect.flatMap(SessionLog, (log) => log.events), { sessionId: "child", resume: true })
      )
      expect({ violations, opened: outcome(opened) }).toEqual({ violations: [], opened: "ok" })
    }))
})

describe("§6.6/§3.9 known ids of the seed", () => {
  it.scoped("6.6 step 6/3.9: an id claimed (not entered) in the prefix is known in the child with state claimed, as in the source", () =>
    Effect.gen(function*() {
      const { store, run } = yield* withStore
      const inSource = yield* run(
        [],
        Effect.gen(function*() {
          const pre = yield* PreStep
          const driver = yield* Driver
          const inbox = yield* Inbox
          yield* pre.register(() => Effect.succeed(PreStepDecision.enter([])))
          yield* driver.followup(user("A"))
          yield* driver.whenIdle
          yield* inbox.append("next-step", plugin("P"))
          yield* inbox.remove("P" as UserMessage["id"])
          return [yield* inbox.idState("A" as UserMessage["id"]), yield* inbox.idState("P" as UserMessage["id"])]
        })
      )
      expect(inSource).toEqual([Option.some("claimed"), Option.some("discarded")])
      expect((yield* store.load(sid("s"))).events.map(notation)).toEqual([
        "INS(nt,0,[A])",
        "TS(1)",
        "CLM(nt,0,1)",
        "TE(1,completed)",
        "INS(ns,0,[P])",
        "CAN(ns,0,1)"
      ])
      yield* forkSession({ source: sid("s"), childId: sid("kid") }).pipe(Effect.provideService(SessionStore, store))
      const inChild = yield* run(
        [],
        Effect.flatMap(
          Inbox,
          (inbox) => Effect.all([inbox.idState("A" as UserMessage["id"]), inbox.idState("P" as UserMessage["id"])])
        ),
        { sessionId: "kid", resume: true }
      )
      // The seed's splices are replayed on the seed's own lists: a claimed id keeps its state in the child.
      expect(inChild).toEqual([Option.some("claimed"), Option.some("discarded")])
    }))
})

describe("§6.6/§8.10 Sessions.fork validation", () => {
  const deps = Layer.mergeAll(SessionStore.layerMemory, ScriptedModel.layer([]), Tools.layer())

  it.scoped("6.6 step 2/5.1 A4/8.10: Sessions.fork of a source holding a declared extension event validates with the layer's eventTypes", () =>
    Effect.gen(function*() {
      const s = yield* Sessions
      const store = yield* SessionStore
      const id = sid("src")
      const ctx = yield* Scope.extend(s.open(id), yield* Scope.make())
      yield* Context.get(ctx, SessionLog).append({ type: "x/declared", data: { n: 1 } })
      expect(yield* store.exists(id)).toBe(true)
      // The same configuration that accepted the event live can resume it (D6) ...
      // Sessions.fork validates the source with the layer's declared types.
      const forked = yield* Effect.exit(s.fork({ source: id, childId: sid("kid") }))
      expect(outcome(forked)).toBe("ok")
    }).pipe(
      Effect.provide(
        Sessions.layer({ model: { provider: "p", model: "m" }, eventTypes: ["x/declared"], idleTimeToLive: "1 minute" })
          .pipe(
            Layer.provideMerge(deps)
          )
      )
    ))
})

describe("§6.6/§8.10 Sessions.fork with invariants off", () => {
  const deps = Layer.mergeAll(SessionStore.layerMemory, ScriptedModel.layer([]), Tools.layer())

  it.scoped("6.6 step 2/6.4 step 2/8.10: Sessions.fork with invariants off does not apply 5.2 to a source the layer accepted", () =>
    Effect.gen(function*() {
      const s = yield* Sessions
      const id = sid("src")
      const ctx = yield* Scope.extend(s.open(id), yield* Scope.make())
      // Accepted live because relational checking is off (R6 would refuse it).
      yield* Context.get(ctx, SessionLog).append({ type: "compaction/end", data: { turn: null } })
      // Sessions.fork validates the source with the layer's invariants setting (5.2 off here).
      const forked = yield* Effect.exit(s.fork({ source: id, childId: sid("kid") }))
      expect(outcome(forked)).toBe("ok")
    }).pipe(
      Effect.provide(
        Sessions.layer({ model: { provider: "p", model: "m" }, invariants: "off", idleTimeToLive: "1 minute" }).pipe(
          Layer.provideMerge(deps)
        )
      )
    ))
})

describe("§6.6 fork before the first request", () => {
  it.scoped("6.6 steps 5-7: a prefix without a request/header: the child's first turn is 1 and logs RH(initial); prefix ids are known (discarded)", () =>
    Effect.gen(function*() {
      const { store, run } = yield* withStore
      yield* run(
        [ScriptedModel.text("one")],
        Effect.gen(function*() {
          const driver = yield* Driver
          yield* driver.followup(user("A"))
          yield* driver.whenIdle
        })
      )
      yield* TestClock.adjust(5000)
      const child = yield* forkSession({ source: sid("s"), boundary: 0, childId: sid("kid") }).pipe(
        Effect.provideService(SessionStore, store)
      )
      const loaded = yield* store.load(child)
      expect(loaded.events.map(notation)).toEqual(["INS(nt,0,[A])", "ES"])
      expect(loaded.events.map((e) => e.time)).toEqual([0, 5000])
      expect(loaded.header).toEqual({
        formatVersion: 1,
        sessionId: "kid",
        createdAt: 5000,
        parent: { sessionId: "s", boundary: 0 },
        seedLength: 1
      })
      yield* run(
        [ScriptedModel.text("two")],
        Effect.gen(function*() {
          const driver = yield* Driver
          const inbox = yield* Inbox
          expect(yield* inbox.snapshot).toEqual({ nextTurn: [], nextStep: [] })
          expect(yield* inbox.idState("A" as UserMessage["id"])).toEqual(Option.some("discarded"))
          expect(yield* Effect.flip(driver.followup(user("A")))).toMatchObject({
            _tag: "DuplicateMessage",
            state: "discarded"
          })
          yield* driver.followup(user("B"))
          yield* driver.whenIdle
          const shape = (yield* events).map(notation)
          expect(shape.slice(2, 8)).toEqual([
            "INS(nt,0,[B])",
            "TS(1)",
            "CLM(nt,0,1)",
            "SS(1,1)",
            "UM(B)",
            "RH(initial)"
          ])
          expect(checkLog(yield* events, { seedLength: 1, closed: true })).toEqual([])
        }),
        { sessionId: "kid", resume: true }
      )
    }))
})

describe("§6.6 fork check order", () => {
  it.scoped("6.6 step 1: child-exists is checked first: before SessionNotFound, MalformedLog, UnsupportedLogVersion and invalid-boundary", () =>
    Effect.gen(function*() {
      const { store } = yield* withStore
      yield* store.create(header("taken"), [])
      yield* store.create({ ...header("v2"), formatVersion: 2 as 1 }, [])
      yield* store.create(header("bad"), [ev(0, "turn/end", { turn: 1, reason: { kind: "completed" } })])
      yield* store.create(header("ok"), [ev(0, "x/e", {}, { ignorable: true })])
      const fork = (source: string, boundary?: number) =>
        Effect.flip(
          forkSession({ source: sid(source), childId: sid("taken"), ...(boundary !== undefined ? { boundary } : {}) })
        ).pipe(
          Effect.provideService(SessionStore, store)
        )
      for (
        const [source, boundary] of [["missing", undefined], ["v2", undefined], ["bad", undefined], ["ok", 7]] as const
      ) {
        expect(yield* fork(source, boundary), source).toMatchObject({
          _tag: "ForkError",
          reason: "child-exists",
          source
        })
      }
      // Without the collision each source fails for its own reason.
      const plain = (source: string, boundary?: number) =>
        Effect.flip(forkSession({ source: sid(source), ...(boundary !== undefined ? { boundary } : {}) })).pipe(
          Effect.provideService(SessionStore, store),
          Effect.map((e) =>
            (e as { _tag: string; reason?: string })._tag +
            ((e as { reason?: string }).reason === "invalid-boundary" ? ":invalid-boundary" : "")
          )
        )
      expect([yield* plain("missing"), yield* plain("v2"), yield* plain("bad"), yield* plain("ok", 7)]).toEqual([
        "SessionNotFound",
        "UnsupportedLogVersion",
        "MalformedLog",
        "ForkError:invalid-boundary"
      ])
    }))
})

describe("6.6/3.9 identity across a fork", () => {
  it.scoped("6.6/3.9: an id pending in the source prefix is known in the child (not pending there): idState discarded, resubmission DuplicateMessage", () =>
    Effect.gen(function*() {
      const storeCtx = yield* Layer.build(SessionStore.layerMemory)
      const store = Context.get(storeCtx, SessionStore)
      const source = yield* buildIn(storeCtx, [ScriptedModel.text("ok")])
      yield* source.driver.followup(user("A"))
      yield* source.driver.whenIdle
      yield* source.driver.inject(plugin("C"))
      yield* source.driver.send(user("Q"), "next-turn", false)
      yield* Scope.close(source.scope, Exit.void)
      const childId = yield* forkSession({ source: SessionId.make("s"), childId: SessionId.make("child") }).pipe(
        Effect.provideService(SessionStore, store)
      )
      const child = yield* buildIn(storeCtx, [ScriptedModel.text("child")], { sessionId: childId, resume: true })
      expect(yield* child.inbox.hasPending).toBe(false)
      expect(yield* child.inbox.idState(asId("C"))).toEqual(Option.some("discarded"))
      expect(yield* child.inbox.idState(asId("Q"))).toEqual(Option.some("discarded"))
      expect(yield* child.inbox.idState(asId("A"))).toEqual(Option.some("entered"))
      const dup = yield* Effect.flip(child.driver.inject(plugin("C")))
      expect(dup).toMatchObject({ _tag: "DuplicateMessage", id: "C", state: "discarded" })
      expect(child.log.header).toMatchObject({ parent: { sessionId: "s" }, seedLength: child.log.firstLiveSeq - 1 })
      yield* Scope.close(child.scope, Exit.void)
    }))
})
