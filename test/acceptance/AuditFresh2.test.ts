/**
 * Fresh acceptance audit of SPEC §2 (durable log format), §6 (persistence), §8.10 (storage, agent
 * and sessions layers) and `checkLog` (§5.2), written against the package root only.
 */
import { describe, expect, it } from "@effect/vitest"
import { Cause, Context, Effect, Either, Exit, Layer, Option, Scope, TestClock } from "effect"
import type { SessionEvent, UserMessage } from "../../src/index.js"
import {
  checkLog,
  deriveMessages,
  Driver,
  foldInbox,
  forkSession,
  Hooks,
  Inbox,
  InvalidEvent,
  MalformedLog,
  MemoryStoreControl,
  PersistenceError,
  PreStep,
  PreStepDecision,
  ScriptedModel,
  SessionId,
  SessionLog,
  Sessions,
  SessionStore,
  SqliteSessionStore,
  Tools,
  userMessage
} from "../../src/index.js"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { agentOver, closeOut, events, notation, plugin, requests, scenario, token, user } from "./AuditHarness.js"

const sid = (s: string) => SessionId.make(s)
const header = (id: string) => ({ formatVersion: 1, sessionId: sid(id), createdAt: 0, seedLength: 0 })

/** A memory store built once in the test scope, and a runner of agents over it. */
const withStore = Effect.map(Layer.build(SessionStore.layerMemory), (storeCtx) => {
  const store = Context.get(storeCtx, SessionStore)
  const run = <A, E, R>(
    script: Parameters<typeof agentOver>[0],
    program: Effect.Effect<A, E, R>,
    options: Parameters<typeof agentOver>[1] = {}
  ) =>
    Effect.scoped(
      Effect.provide(
        program as Effect.Effect<A, E, Exclude<R, Scope.Scope> | Scope.Scope>,
        agentOver(script, options).pipe(Layer.provide(Layer.succeedContext(storeCtx)))
      )
    ) as Effect.Effect<A, E | Layer.Layer.Error<ReturnType<typeof agentOver>>, never>
  return { store, storeCtx, run }
})

/** The typed failure of an exit as `"<_tag>: <reason>"`, or "ok". */
const outcome = (exit: Exit.Exit<unknown, unknown>): string => {
  if (Exit.isSuccess(exit)) return "ok"
  const failure = Cause.failureOption(exit.cause)
  if (Option.isNone(failure)) return `defect: ${Cause.pretty(exit.cause)}`
  const f = failure.value as { readonly _tag?: string; readonly reason?: string }
  return `${f._tag}: ${f.reason ?? ""}`
}

const ev = (seq: number, type: string, data: unknown, extra: Record<string, unknown> = {}) =>
  ({ type, seq, time: 0, data, ...extra }) as SessionEvent

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
      const opened = yield* Effect.exit(run([], Effect.flatMap(SessionLog, (log) => log.events), { sessionId: "child", resume: true }))
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
        "INS(nt,0,[A])", "TS(1)", "CLM(nt,0,1)", "TE(1,completed)", "INS(ns,0,[P])", "CAN(ns,0,1)"
      ])
      yield* forkSession({ source: sid("s"), childId: sid("kid") }).pipe(Effect.provideService(SessionStore, store))
      const inChild = yield* run(
        [],
        Effect.flatMap(Inbox, (inbox) =>
          Effect.all([inbox.idState("A" as UserMessage["id"]), inbox.idState("P" as UserMessage["id"])])),
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
        Sessions.layer({ model: { provider: "p", model: "m" }, eventTypes: ["x/declared"], idleTimeToLive: "1 minute" }).pipe(
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

describe("§6.4/§6.5 resume", () => {
  const A = user("A")
  const crashed: ReadonlyArray<SessionEvent> = [
    { type: "agent/inbox/spliced", seq: 0, time: 1000, data: { target: "next-turn", start: 0, inserted: [A] } },
    { type: "turn/start", seq: 1, time: 2000, data: { turn: 1 } },
    { type: "agent/inbox/spliced", seq: 2, time: 3000, data: { target: "next-turn", start: 0, removedCount: 1, inserted: [] } }
  ] as unknown as ReadonlyArray<SessionEvent>

  it.scoped("2.1/6.4/6.5: resume commits the closer with the last event's time, then ES with the Clock time; firstLiveSeq is the stored length", () =>
    Effect.gen(function*() {
      const { store, run } = yield* withStore
      yield* store.create(header("c"), crashed)
      yield* TestClock.adjust(10_000)
      yield* run(
        [],
        Effect.gen(function*() {
          const log = yield* SessionLog
          const es = yield* log.events
          expect(es.slice(3).map((e) => [notation(e), e.seq, e.time])).toEqual([["TE(1,interrupted)", 3, 3000], ["ES", 4, 10_000]])
          expect(log.firstLiveSeq).toBe(3)
          expect(yield* log.durableSeq).toBe(4)
          // 6.5: input claimed by the interrupted turn is gone; nothing is resurrected.
          const inbox = yield* Inbox
          expect(yield* inbox.snapshot).toEqual({ nextTurn: [], nextStep: [] })
          expect(yield* inbox.idState("A" as UserMessage["id"])).toEqual(Option.some("claimed"))
        }),
        { sessionId: "c", resume: true }
      )
      const stored = yield* store.load(sid("c"))
      expect(stored.events.slice(3).map((e) => e.time)).toEqual([3000, 10_000])
      // Reopening the untouched session does not grow it.
      yield* run([], Effect.void, { sessionId: "c", resume: true })
      expect((yield* store.load(sid("c"))).events.length).toBe(5)
    }))

  it.scoped("2.7/5.1 A9: a seed splice with none of the four shapes makes the log malformed on resume", () =>
    Effect.gen(function*() {
      const { store, run } = yield* withStore
      const m = plugin("m")
      yield* store.create({ ...header("child"), seedLength: 1, parent: { sessionId: "p", boundary: 0 } }, [
        ev(0, "agent/inbox/spliced", { target: "next-step", start: 0, inserted: [m], outcome: "canceled" }),
        ev(1, "session/end-seed", {})
      ])
      const exit = yield* Effect.exit(run([], Effect.void, { sessionId: "child", resume: true }))
      // Splice shapes are checked inside the seed too.
      expect(outcome(exit)).toMatch(/^MalformedLog/)
    }))

  it.scoped("6.4 step 2: resume with invariants off still refuses an invalid persisted splice (\"invalid persisted inbox splice at seq N\")", () =>
    Effect.gen(function*() {
      const { store, run } = yield* withStore
      yield* store.create(header("bad"), [
        ev(0, "agent/inbox/spliced", { target: "next-step", start: 0, inserted: [plugin("x")] }),
        ev(1, "agent/inbox/spliced", { target: "next-step", start: 1, removedCount: 1, inserted: [], outcome: "canceled" })
      ])
      const error = yield* Effect.flip(run([], Effect.void, { sessionId: "bad", resume: true, agent: { invariants: "off" } }))
      expect(error).toBeInstanceOf(MalformedLog)
      expect(error).toMatchObject({ seq: 1 })
      expect((error as MalformedLog).reason).toContain("invalid persisted inbox splice at seq 1")
    }))
})

describe("§2.1/§5.1 A5 envelope of appended extension events", () => {
  it.scoped("5.1 A5: surfaceOp or sourceEventSeqs on an extension or compaction event fails InvalidEvent and writes nothing", () =>
    Effect.gen(function*() {
      const { run } = yield* withStore
      yield* run(
        [],
        Effect.gen(function*() {
          const log = yield* SessionLog
          const inputs: ReadonlyArray<Parameters<typeof log.append>[0]> = [
            { type: "x/ext", data: {}, ignorable: true, surfaceOp: "append" },
            { type: "x/ext", data: {}, ignorable: true, sourceEventSeqs: [] },
            { type: "x/declared", data: {}, sourceEventSeqs: [0] },
            { type: "compaction/summary", data: { turn: null }, sourceEventSeqs: [0] },
            { type: "compaction/summary", data: { turn: null }, surfaceOp: "append" }
          ]
          yield* log.append({ type: "x/declared", data: {} })
          yield* log.append({ type: "compaction/summary", data: { turn: null } })
          for (const input of inputs) {
            expect(yield* Effect.flip(log.append(input)), JSON.stringify(input)).toBeInstanceOf(InvalidEvent)
          }
          expect((yield* log.events).length).toBe(2)
        }),
        { agent: { eventTypes: ["x/declared"] } }
      )
    }))

  it.scoped("2.9: an ignorable extension event is stored with the marker, resumes without declaration and changes no derived state", () =>
    Effect.gen(function*() {
      const { store, run } = yield* withStore
      yield* run(
        [],
        Effect.gen(function*() {
          const log = yield* SessionLog
          yield* log.append({ type: "x/note", data: { a: [1, "b", null] }, ignorable: true })
          yield* (yield* Inbox).append("next-step", plugin("p1"))
        })
      )
      const stored = yield* store.load(sid("s"))
      expect(stored.events[0]).toEqual({ type: "x/note", seq: 0, time: 0, data: { a: [1, "b", null] }, ignorable: true })
      expect(deriveMessages(stored.events)).toEqual([])
      const folded = foldInbox(stored.events)
      expect(Either.isRight(folded) && folded.right.nextStep.map((m) => m.id)).toEqual(["p1"])
      expect(checkLog(stored.events, { closed: true })).toEqual([])
      yield* run([], Effect.flatMap(Inbox, (i) => Effect.map(i.nextStep, (ns) => expect(ns.map((m) => m.id)).toEqual(["p1"]))), {
        resume: true
      })
    }))
})

describe("§6.5 repair and extension brackets (R6)", () => {
  const A = user("A")
  const start: ReadonlyArray<SessionEvent> = [
    ev(0, "agent/inbox/spliced", { target: "next-turn", start: 0, inserted: [A] }),
    ev(1, "turn/start", { turn: 1 }),
    ev(2, "agent/inbox/spliced", { target: "next-turn", start: 0, removedCount: 1, inserted: [] })
  ]

  it.scoped("6.5/R6: an open compaction {turn: n} bracket is abandoned by the repair's turn/end; a new bracket opens in maintenance", () =>
    Effect.gen(function*() {
      const { store, run } = yield* withStore
      yield* store.create(header("c"), [...start, ev(3, "compaction/start", { turn: 1, note: "auto" })])
      yield* run(
        [],
        Effect.gen(function*() {
          const log = yield* SessionLog
          const driver = yield* Driver
          expect((yield* log.events).slice(4).map(notation)).toEqual(["TE(1,interrupted)", "ES"])
          yield* driver.runMaintenance(Effect.gen(function*() {
            yield* log.append({ type: "compaction/start", data: { turn: null } })
            yield* log.append({ type: "compaction/end", data: { turn: null } })
          }))
          expect(checkLog(yield* log.events, { closed: true })).toEqual([])
        }),
        { sessionId: "c", resume: true }
      )
    }))

  it.scoped("6.5/R6: repair never closes a {turn: null} bracket; it is abandoned at ES, so a compaction/end after resume is R6", () =>
    Effect.gen(function*() {
      const { store, run } = yield* withStore
      yield* store.create(header("m"), [ev(0, "compaction/start", { turn: null })])
      yield* run(
        [],
        Effect.gen(function*() {
          const log = yield* SessionLog
          const driver = yield* Driver
          expect((yield* log.events).map(notation)).toEqual(["compaction/start", "ES"])
          const error = yield* Effect.flip(driver.runMaintenance(log.append({ type: "compaction/end", data: { turn: null } })))
          expect(error).toMatchObject({ _tag: "InvalidEvent", rule: "R6" })
          yield* driver.runMaintenance(log.append({ type: "compaction/start", data: { turn: null } }))
          expect((yield* log.events).map(notation)).toEqual(["compaction/start", "ES", "compaction/start"])
        }),
        { sessionId: "m", resume: true }
      )
    }))
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
          expect(yield* Effect.flip(driver.followup(user("A")))).toMatchObject({ _tag: "DuplicateMessage", state: "discarded" })
          yield* driver.followup(user("B"))
          yield* driver.whenIdle
          const shape = (yield* events).map(notation)
          expect(shape.slice(2, 8)).toEqual(["INS(nt,0,[B])", "TS(1)", "CLM(nt,0,1)", "SS(1,1)", "UM(B)", "RH(initial)"])
          expect(checkLog(yield* events, { seedLength: 1, closed: true })).toEqual([])
        }),
        { sessionId: "kid", resume: true }
      )
    }))
})

describe("§5.1/§5.2 invariants option", () => {
  it.scoped("5.2/D6: with invariants off a live relational violation (R6) is accepted; the log then resumes only with off", () =>
    Effect.gen(function*() {
      const { store, run } = yield* withStore
      yield* run(
        [],
        Effect.flatMap(SessionLog, (log) => log.append({ type: "compaction/end", data: { turn: null } })),
        { agent: { invariants: "off" } }
      )
      const stored = yield* store.load(sid("s"))
      expect(checkLog(stored.events).map((v) => v.rule)).toEqual(["R6"])
      const off = yield* Effect.exit(run([], Effect.void, { resume: true, agent: { invariants: "off" } }))
      expect(outcome(off)).toBe("ok")
      const on = yield* Effect.exit(run([], Effect.void, { resume: true }))
      expect(outcome(on)).toMatch(/^MalformedLog: R6/)
    }))

  it.scoped("5.1 A1/A2: loaded envelopes are checked: extra keys, negative or fractional time, a wrong seq, ignorable false", () =>
    Effect.gen(function*() {
      const { store, run } = yield* withStore
      const cases: ReadonlyArray<readonly [string, SessionEvent]> = [
        ["extra", ev(0, "x/e", {}, { ignorable: true, extra: 1 })],
        ["negative-time", { ...ev(0, "x/e", {}, { ignorable: true }), time: -1 } as SessionEvent],
        ["fractional-time", { ...ev(0, "x/e", {}, { ignorable: true }), time: 1.5 } as SessionEvent],
        ["wrong-seq", ev(0, "x/e", {}, { ignorable: true })],
        ["ignorable-false", ev(0, "x/e", {}, { ignorable: false })],
        ["empty-type", ev(0, "", {}, { ignorable: true })]
      ]
      for (const [name, bad] of cases) {
        const good = ev(0, "x/e", {}, { ignorable: true })
        const log = name === "wrong-seq" ? [good, { ...bad, seq: 5 } as SessionEvent] : [good, { ...bad, seq: 1 } as SessionEvent]
        const created = yield* Effect.exit(store.create(header(name), log))
        if (Exit.isFailure(created)) continue // a store may refuse it outright (PersistenceError)
        const error = yield* Effect.flip(run([], Effect.void, { sessionId: name, resume: true }))
        expect(error, name).toBeInstanceOf(MalformedLog)
        expect(error, name).toMatchObject({ seq: 1 })
      }
    }))
})

describe("§2.8 derived history", () => {
  it("2.8: deriveMessages returns a fresh array of frozen values and leaves the caller's events unfrozen", () => {
    const m = { id: "u1", role: "user", content: [{ type: "text", text: "hi" }], source: { kind: "user" } }
    const es = [ev(0, "user/message", m, { surfaceOp: "append" })]
    const a = deriveMessages(es)
    const b = deriveMessages(es)
    expect(a).toEqual([m])
    expect(a).not.toBe(b)
    expect(Object.isFrozen(a[0])).toBe(true)
    expect(Object.isFrozen((a[0] as any).content[0])).toBe(true)
    expect(Object.isFrozen(m)).toBe(false)
    expect(Object.isFrozen(m.content)).toBe(false)
  })
})

describe("§2.8/§6.7 replacement ranges and the open step", () => {
  const summary = (id: string) => userMessage({ id, text: "summary", source: { kind: "compaction" } })

  it.scoped("2.8/A7: during an open step a range of earlier nodes may be replaced; a range holding the step's entered message is refused", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const log = yield* SessionLog
      const hooks = yield* Hooks
      const outcomes: Array<string> = []
      yield* hooks.onRequest((input, next) =>
        input.turn === 2
          ? Effect.gen(function*() {
            const surface = yield* log.surface
            // surface = [UM(A), AM(a), UM(B)]; UM(B) belongs to the open step.
            outcomes.push(outcome(yield* Effect.exit(log.append({
              type: "user/message",
              data: summary("S2"),
              surfaceOp: { op: "replace", start: surface[1]!, end: surface[2]! },
              sourceEventSeqs: [surface[1]!, surface[2]!]
            }))))
            outcomes.push(outcome(yield* Effect.exit(log.append({
              type: "user/message",
              data: summary("S1"),
              surfaceOp: { op: "replace", start: surface[0]!, end: surface[1]! },
              sourceEventSeqs: [surface[0]!, surface[1]!]
            }))))
            return yield* next()
          })
          : next())
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      yield* driver.followup(user("B"))
      yield* driver.whenIdle
      expect(outcomes[0]).toMatch(/^InvalidEvent/)
      expect(outcomes[1]).toBe("ok")
      expect((yield* requests).map((r) => r.messages.map(token))).toEqual([["A"], ["summary", "B"]])
      expect((yield* log.messages).map(token)).toEqual(["summary", "B", "b"])
      expect((yield* events).filter((e) => e.type === "user/message").map((e) => (e.data as UserMessage).id)).toEqual(["A", "B", "S1"])
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario([ScriptedModel.text("a"), ScriptedModel.text("b")]))))
})

describe("§8.10 SqliteSessionStore: fork and resume through the file", () => {
  const tempFile = Effect.acquireRelease(
    Effect.sync(() => fs.mkdtempSync(path.join(os.tmpdir(), "tiller-audit2-"))),
    (dir) => Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true }))
  ).pipe(Effect.map((dir) => path.join(dir, "sessions.db")))

  it.scoped("6.6/8.10: a fork over SQLite stores the child header (parent, seedLength) and prefix + ES; a fresh layer resumes the child at turn 2", () =>
    Effect.gen(function*() {
      const filename = yield* tempFile
      const runOn = <A, E, R>(script: Parameters<typeof agentOver>[0], program: Effect.Effect<A, E, R>, options: Parameters<typeof agentOver>[1] = {}) =>
        Effect.scoped(Effect.provide(
          program as Effect.Effect<A, E, Exclude<R, Scope.Scope> | Scope.Scope>,
          agentOver(script, options).pipe(Layer.provideMerge(SqliteSessionStore.layer({ filename })))
        ))
      const source = yield* runOn(
        [ScriptedModel.text("one")],
        Effect.gen(function*() {
          const driver = yield* Driver
          yield* driver.followup(user("A"))
          yield* driver.whenIdle
          yield* driver.inject(plugin("C"))
          return yield* events
        })
      )
      const { child, empty, list, loaded } = yield* Effect.scoped(Effect.gen(function*() {
        const store = yield* SessionStore
        yield* store.create(header("empty"), [])
        const child = yield* forkSession({ source: sid("s"), childId: sid("kid") })
        const empty = yield* forkSession({ source: sid("empty"), childId: sid("empty-kid") })
        return { child, empty, list: yield* store.list, loaded: yield* store.load(sid("kid")) }
      }).pipe(Effect.provide(SqliteSessionStore.layer({ filename }))))
      expect(child).toBe("kid")
      expect(empty).toBe("empty-kid")
      expect(list.map((h) => h.sessionId)).toEqual(["s", "empty", "kid", "empty-kid"])
      expect(list[3]).toEqual({ formatVersion: 1, sessionId: "empty-kid", createdAt: 0, parent: { sessionId: "empty", boundary: -1 }, seedLength: 0 })
      expect(loaded.header).toEqual({ formatVersion: 1, sessionId: "kid", createdAt: 0, parent: { sessionId: "s", boundary: source.length - 1 }, seedLength: source.length })
      expect(loaded.events.slice(0, source.length)).toEqual(source)
      expect(loaded.events.slice(source.length).map(notation)).toEqual(["ES"])
      yield* runOn(
        [ScriptedModel.text("two")],
        Effect.gen(function*() {
          const driver = yield* Driver
          const inbox = yield* Inbox
          const log = yield* SessionLog
          expect(log.header).toEqual(loaded.header)
          expect(log.firstLiveSeq).toBe(source.length + 1)
          expect(yield* inbox.nextStep).toEqual([])
          yield* driver.followup(user("B"))
          yield* driver.whenIdle
          const after = (yield* events).slice(source.length + 1).map(notation)
          expect(after.slice(0, 6)).toEqual(["INS(nt,0,[B])", "TS(2)", "CLM(nt,0,1)", "SS(2,1)", "UM(B)", "RH(resume)"])
          expect(checkLog(yield* events, { seedLength: source.length, closed: true })).toEqual([])
        }),
        { sessionId: "kid", resume: true }
      )
    }))
})

describe("§6.3 fail-stop then resume", () => {
  it.scoped("6.3/6.4/3.9: a session poisoned inside a turn keeps it open in storage; after disposal a resume repairs it, and the failed input is not known", () =>
    Effect.gen(function*() {
      const { store, storeCtx, run } = yield* withStore
      const control = Context.get(storeCtx, MemoryStoreControl)
      const durable = yield* run(
        [ScriptedModel.hang({ text: "partial" })],
        Effect.gen(function*() {
          const driver = yield* Driver
          const log = yield* SessionLog
          yield* driver.followup(user("A"))
          yield* Effect.flatMap(Effect.yieldNow(), () => log.flush)
          yield* control.failAppends(3)
          expect(yield* Effect.flip(driver.inject(plugin("C")))).toBeInstanceOf(PersistenceError)
          expect(yield* driver.status).toBe("idle")
          expect(yield* Effect.flip(log.flush)).toBeInstanceOf(PersistenceError)
          // Reads keep the in-memory state, which may go beyond durableSeq.
          const inMemory = yield* log.events
          const durableSeq = yield* log.durableSeq
          expect(inMemory.length - 1).toBeGreaterThan(durableSeq)
          return durableSeq
        })
      )
      const stored = (yield* store.load(sid("s"))).events
      expect(stored.length).toBe(durable + 1)
      expect(stored.some((e) => e.type === "turn/end")).toBe(false)
      expect(stored.map(notation)).toContain("TS(1)")
      yield* run(
        [ScriptedModel.text("after")],
        Effect.gen(function*() {
          const driver = yield* Driver
          const inbox = yield* Inbox
          const es = yield* events
          expect(es.slice(stored.length).map(notation).slice(-2)).toEqual(["TE(1,interrupted)", "ES"])
          expect(yield* inbox.idState("C" as UserMessage["id"])).toEqual(Option.none())
          yield* driver.inject(plugin("C"))
          yield* driver.followup(user("B"))
          yield* driver.whenIdle
          expect(yield* closeOut).toEqual([])
          expect((yield* events).filter((e) => e.type === "turn/start").map((e) => (e.data as { turn: number }).turn)).toEqual([1, 2])
        }),
        { resume: true }
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
        Effect.flip(forkSession({ source: sid(source), childId: sid("taken"), ...(boundary !== undefined ? { boundary } : {}) })).pipe(
          Effect.provideService(SessionStore, store)
        )
      for (const [source, boundary] of [["missing", undefined], ["v2", undefined], ["bad", undefined], ["ok", 7]] as const) {
        expect(yield* fork(source, boundary), source).toMatchObject({ _tag: "ForkError", reason: "child-exists", source })
      }
      // Without the collision each source fails for its own reason.
      const plain = (source: string, boundary?: number) =>
        Effect.flip(forkSession({ source: sid(source), ...(boundary !== undefined ? { boundary } : {}) })).pipe(
          Effect.provideService(SessionStore, store),
          Effect.map((e) => (e as { _tag: string; reason?: string })._tag + ((e as { reason?: string }).reason === "invalid-boundary" ? ":invalid-boundary" : ""))
        )
      expect([yield* plain("missing"), yield* plain("v2"), yield* plain("bad"), yield* plain("ok", 7)]).toEqual([
        "SessionNotFound", "UnsupportedLogVersion", "MalformedLog", "ForkError:invalid-boundary"
      ])
    }))
})
