/**
 * SPEC 9 scenarios P31-P41 over both stores: cancellation in the loop, disposal, inbox mutations,
 * maintenance and resume.
 */
import { describe, expect, it } from "@effect/vitest"
import { Cause, Context, Deferred, Effect, Exit, Fiber, Layer, Option, Scope, Stream } from "effect"
import {
  AgentBusy,
  AgentDisposed,
  CancelCause,
  checkLog,
  Driver,
  DuplicateMessage,
  Hooks,
  Inbox,
  InvalidSplice,
  MaintenanceAborted,
  MalformedLog,
  PreStep,
  ScriptedModel,
  SessionLog,
  Tool
} from "../../../src/index.js"
import type { DriverEvent, ScriptEntry } from "../../../src/index.js"
import {
  asId,
  dataOfType,
  events,
  gate,
  liveNotation,
  notation,
  open,
  plugin,
  recordLive,
  recordStatus,
  requests,
  settle,
  shape,
  TEXT,
  texts,
  token,
  until,
  untilEvent,
  user
} from "../harness.js"
import { calls, captured, empty, header, ids, json, onBoth, stores, storeTest } from "./bothStores.js"
import type { StoreUnderTest } from "./bothStores.js"

describe("P31-P37 cancellation in the loop, on both stores", () => {
  it.scoped("P31/C5: cancel while streaming — AM! citing both chunks, SE, TE(aborted(user)); the next request sees the prefix", () =>
    Effect.gen(function*() {
      const run = yield* onBoth(() => ({
        script: [ScriptedModel.hang({ text: "partial" }), ScriptedModel.text("after")],
        body: Effect.gen(function*() {
          const d = yield* Driver
          yield* d.followup(user("A"))
          yield* untilEvent((e) => e.type === "assistant/chunk" && (e.data as any).chunk.type === "text-delta")
          yield* d.cancel(CancelCause.user)
          yield* d.whenIdle
          expect((yield* shape).slice(-3)).toEqual(["AM!", "SE(1,1)", "TE(1,aborted(user))"])
          const es = yield* events
          const am = es.find((e) => e.type === "assistant/message")!
          expect((am.data as any).message.content).toEqual([{ type: "text", text: "partial" }])
          expect((am.data as any).interrupted).toBe(true)
          expect((am as any).sourceEventSeqs).toEqual(es.filter((e) => e.type === "assistant/chunk").map((e) => e.seq))
          yield* d.followup(user("B"))
          yield* d.whenIdle
          expect((yield* (yield* SessionLog).messages).length).toBe(4)
        })
      }))
      expect(run.shape.slice(0, 12)).toEqual([
        "INS(nt,0,[A])",
        "TS(1)",
        "CLM(nt,0,1)",
        "SS(1,1)",
        "UM(A)",
        "RH(initial)",
        "CH(block-start)",
        "CH(text-delta)",
        "AM!",
        "SE(1,1)",
        "TE(1,aborted(user))",
        "INS(nt,0,[B])"
      ])
      expect((run.events[8] as any).sourceEventSeqs).toEqual([6, 7])
      expect(run.requests[1]!.messages).toEqual(["A", "partial", "B"])
      expect(run.live).toEqual([
        "inserted(A)",
        "status(running)",
        "claimed(A,1)",
        "status(idle)",
        "inserted(B)",
        "status(running)",
        "claimed(B,2)",
        "status(idle)"
      ])
    }))

  it.scoped("P32: cancel after the assistant message, before tools — ⟨TC TR⊘⟩, the body never runs", () =>
    Effect.gen(function*() {
      const run = yield* onBoth(() => {
        const driver = captured()
        let ran = 0
        const danger = Tool.make("danger", {
          description: "counts",
          parameters: empty,
          execute: () => Effect.sync(() => (ran++, "boom"))
        })
        return {
          script: [
            ScriptedModel.response({
              toolCalls: [{ id: "c1", name: "danger", arguments: {} }],
              afterFinish: Effect.suspend(() => driver.get.cancel(CancelCause.user))
            }),
            ScriptedModel.text("ok")
          ],
          options: { tools: [danger] },
          body: Effect.gen(function*() {
            const d = yield* driver.capture
            yield* d.followup(user("A"))
            yield* d.whenIdle
            expect((yield* shape).slice(-6)).toEqual([
              "CH(finish stop)",
              "AM",
              "TC(c1)",
              "TR⊘(c1)",
              "SE(1,1)",
              "TE(1,aborted(user))"
            ])
            yield* d.followup(user("B"))
            yield* d.whenIdle
            const result = (yield* requests)[1]!.messages.find((m) => m.content[0]?.type === "tool-result")!
            expect(result.content[0]).toMatchObject({ toolCallId: "c1", isError: true })
            return ran
          })
        }
      })
      expect(run.extra).toBe(0)
      expect(run.requests[1]!.messages).toEqual(["A", "tool-call c1", "tool-result c1", "B"])
      const tr = run.events.find((e) => e.type === "tool/result")!.data as any
      expect(tr.message.content[0].isError).toBe(true)
      expect(run.events.filter((e) => e.type === "turn/end").map((e) => (e.data as any).reason)).toEqual([
        { kind: "aborted", reason: { kind: "user" } },
        { kind: "completed" }
      ])
    }))

  const p33 = (keepInbox: boolean) => () => {
    const started: Array<string> = []
    const p = Tool.make("p", {
      description: "never finishes",
      parameters: empty,
      mode: "parallel",
      execute: (_p, ctx) => Effect.zipRight(Effect.sync(() => started.push(ctx.callId)), Effect.never)
    })
    return {
      script: [calls("p", ["c1", "c2", "c3", "c4"]), ScriptedModel.text("after")],
      options: { tools: [p], maxParallelToolCalls: 2 },
      body: Effect.gen(function*() {
        const hooks = yield* Hooks
        yield* hooks.onToolPost((input, next) =>
          Effect.map(
            next(),
            (output) => ({
              ...output,
              additionalContexts: [...output.additionalContexts, plugin(`ctx-${input.callId}`)]
            })
          )
        )
        const d = yield* Driver
        yield* d.followup(user("A"))
        yield* until(Effect.sync(() => started.length === 2))
        yield* d.cancel(CancelCause.user, { keepInbox })
        yield* d.whenIdle
        const turn1 = yield* shape
        const pending = (yield* (yield* Inbox).nextStep).map((m) => m.id)
        yield* d.followup(user("W"))
        yield* d.whenIdle
        return { turn1, pending, texts: yield* texts }
      })
    }
  }

  it.scoped("P33/D8: broad cancel during parallel tools — each TR✗ with INS+CAN of its context; ⟨TC TR⊘⟩ for unstarted calls", () =>
    Effect.gen(function*() {
      const run = yield* onBoth(p33(false))
      const s = run.extra.turn1
      expect(s.slice(s.indexOf("CH(finish stop)"))).toEqual([
        "CH(finish stop)",
        "AM",
        "TC(c1)",
        "TC(c2)",
        "TR✗(c1)",
        "INS(ns,0,[ctx-c1])",
        "CAN(ns,0,1)",
        "TR✗(c2)",
        "INS(ns,0,[ctx-c2])",
        "CAN(ns,0,1)",
        "TC(c3)",
        "TR⊘(c3)",
        "TC(c4)",
        "TR⊘(c4)",
        "SE(1,1)",
        "TE(1,aborted(user))"
      ])
      expect(run.extra.pending).toEqual([])
      expect(run.extra.texts).toEqual(["A", "W"])
      expect(run.requests[1]!.messages.slice(-1)).toEqual(["W"])
      expect(run.events.filter((e) => e.type === "user/message").map((e) => (e.data as any).id)).toEqual(["A", "W"])
      expect(run.live).toEqual([
        "inserted(A)",
        "status(running)",
        "claimed(A,1)",
        "inserted(ctx-c1)",
        "discarded(ctx-c1)",
        "inserted(ctx-c2)",
        "discarded(ctx-c2)",
        "status(idle)",
        "inserted(W)",
        "status(running)",
        "claimed(W,2)",
        "status(idle)"
      ])
    }))

  it.scoped("P33/D8: keepInbox cancel during parallel tools keeps the contexts; turn 2 enters ctx-c1 ctx-c2 W once", () =>
    Effect.gen(function*() {
      const run = yield* onBoth(p33(true))
      const s = run.shape
      expect(s.slice(s.indexOf("TC(c1)"), s.indexOf("TE(1,aborted(user))") + 1)).toEqual([
        "TC(c1)",
        "TC(c2)",
        "TR✗(c1)",
        "INS(ns,0,[ctx-c1])",
        "TR✗(c2)",
        "INS(ns,1,[ctx-c2])",
        "TC(c3)",
        "TR⊘(c3)",
        "TC(c4)",
        "TR⊘(c4)",
        "SE(1,1)",
        "TE(1,aborted(user))"
      ])
      expect(run.extra.pending).toEqual(["ctx-c1", "ctx-c2"])
      expect(run.extra.texts).toEqual(["A", "ctx-c1", "ctx-c2", "W"])
      const ss = s.indexOf("SS(2,1)")
      expect(s.slice(ss - 4, ss + 4)).toEqual([
        "INS(nt,0,[W])",
        "TS(2)",
        "CLM(ns,0,2)",
        "CLM(nt,0,1)",
        "SS(2,1)",
        "UM(ctx-c1)",
        "UM(ctx-c2)",
        "UM(W)"
      ])
      expect(run.live.filter((x) => x.startsWith("discarded"))).toEqual([])
    }))

  it.scoped("P34: cancel right after waking follow-ups — CAN(nt,0,1), no step, discarded(B)", () =>
    Effect.gen(function*() {
      const run = yield* onBoth(() => {
        const G = gate()
        return {
          script: [],
          body: Effect.gen(function*() {
            yield* (yield* PreStep).register((_i, next) => Effect.zipRight(Deferred.await(G), next()))
            const d = yield* Driver
            yield* d.followup(user("A"))
            yield* d.followup(user("B"))
            yield* d.cancel(CancelCause.user)
            yield* d.whenIdle
            expect(yield* d.status).toBe("idle")
            const inbox = yield* Inbox
            return [yield* inbox.idState(asId("A")), yield* inbox.idState(asId("B"))]
          })
        }
      })
      expect(run.shape).toEqual([
        "INS(nt,0,[A])",
        "TS(1)",
        "CLM(nt,0,1)",
        "INS(nt,0,[B])",
        "CAN(nt,0,1)",
        "TE(1,aborted(user))"
      ])
      expect(run.live).toEqual([
        "inserted(A)",
        "status(running)",
        "claimed(A,1)",
        "inserted(B)",
        "discarded(B)",
        "status(idle)"
      ])
      expect(run.extra).toEqual([Option.some("claimed"), Option.some("discarded")])
    }))

  it.scoped("P35: keepInbox parks pre-abort work; a later wake runs B then W as turns 2 and 3", () =>
    Effect.gen(function*() {
      const run = yield* onBoth(() => ({
        script: [ScriptedModel.hang({ text: "a" }), ScriptedModel.text("b"), ScriptedModel.text("w")],
        racing: ["INS(nt,0,[B])"],
        body: Effect.gen(function*() {
          const d = yield* Driver
          yield* d.followup(user("A"))
          yield* untilEvent((e) => e.type === "assistant/chunk")
          yield* d.followup(user("B"))
          yield* d.cancel(CancelCause.user, { keepInbox: true })
          yield* d.whenIdle
          const parked = {
            texts: yield* texts,
            nextTurn: ids(yield* (yield* Inbox).nextTurn),
            requests: (yield* requests).length
          }
          yield* d.followup(user("W"))
          return parked
        })
      }))
      expect(run.extra).toEqual({ texts: ["A"], nextTurn: ["B"], requests: 1 })
      expect(run.shape.filter((x) => x.startsWith("CAN"))).toEqual([])
      expect(run.shape.filter((x) => x.startsWith("TE") || x.startsWith("UM"))).toEqual([
        "UM(A)",
        "TE(1,aborted(user))",
        "UM(B)",
        "TE(2,completed)",
        "UM(W)",
        "TE(3,completed)"
      ])
      expect(run.events.filter((e) => e.type === "step/start").map((e) => (e.data as any).turn)).toEqual([1, 2, 3])
      const te1 = run.shape.indexOf("TE(1,aborted(user))")
      expect(run.shape.slice(te1 + 1, te1 + 4)).toEqual(["INS(nt,1,[W])", "TS(2)", "CLM(nt,0,1)"])
      expect(run.requests).toHaveLength(3)
    }))

  it.scoped("P36: a wake after a keepInbox cancel is latched and replayed in TX-CLOSE; no transient idle", () =>
    Effect.gen(function*() {
      const run = yield* onBoth(() => {
        const G = gate()
        return {
          script: [ScriptedModel.hang({}, { onInterrupt: Deferred.await(G) }), ScriptedModel.text("b")],
          body: Effect.gen(function*() {
            const d = yield* Driver
            yield* d.followup(user("A"))
            yield* until(Effect.map(requests, (r) => r.length === 1))
            yield* d.cancel(CancelCause.user, { keepInbox: true })
            yield* d.followup(user("B"))
            const idle = yield* Effect.fork(d.whenIdle)
            yield* settle
            const statusBefore = yield* d.status
            const idleBefore = Option.isSome(yield* Fiber.poll(idle))
            yield* open(G)
            yield* Fiber.join(idle)
            return { statusBefore, idleBefore }
          })
        }
      })
      expect(run.extra).toEqual({ statusBefore: "running", idleBefore: false })
      expect(run.shape).toEqual([
        // nothing was streamed: an empty prefix writes no AM! (7.4)
        "INS(nt,0,[A])",
        "TS(1)",
        "CLM(nt,0,1)",
        "SS(1,1)",
        "UM(A)",
        "RH(initial)",
        "INS(nt,0,[B])",
        "SE(1,1)",
        "TE(1,aborted(user))",
        "TS(2)",
        "CLM(nt,0,1)",
        "SS(2,1)",
        "UM(B)",
        ...TEXT,
        "SE(2,1)",
        "TE(2,completed)"
      ])
      expect(run.trace).toEqual(["idle", "running", "idle"])
      expect(run.live).toEqual([
        "inserted(A)",
        "status(running)",
        "claimed(A,1)",
        "inserted(B)",
        "claimed(B,2)",
        "status(idle)"
      ])
    }))

  it.scoped("P37: first cause wins — TE(1,aborted(parent))", () =>
    Effect.gen(function*() {
      const run = yield* onBoth(() => ({
        script: [ScriptedModel.hang({ text: "partial" })],
        body: Effect.gen(function*() {
          const d = yield* Driver
          yield* d.followup(user("A"))
          yield* untilEvent((e) => e.type === "assistant/chunk")
          yield* d.cancel(CancelCause.parent)
          yield* d.cancel(CancelCause.user)
          yield* d.whenIdle
          return (yield* dataOfType("turn/end")).map((x) => x.reason)
        })
      }))
      expect(run.extra).toEqual([{ kind: "aborted", reason: { kind: "parent" } }])
      expect(notation(run.file!.at(-1) as any)).toBe("TE(1,aborted(parent))")
    }))
})

/** An agent over `store` built in a scope the test closes itself, and its driver. */
const buildOver = (store: StoreUnderTest, script: ReadonlyArray<ScriptEntry>) =>
  Effect.gen(function*() {
    const scope = yield* Scope.make()
    const ctx = yield* Layer.buildWithScope(store.agent(script), scope)
    return { scope, ctx, driver: Context.get(ctx, Driver) }
  })

describe.each(stores)(
  "P38-P41 over the $name store: disposal, inbox mutations, maintenance, resume",
  ({ open: openStore }) => {
    it.scoped("P38: disposal keeps the queued tail in the store; an agent resuming it runs T then W", () =>
      Effect.gen(function*() {
        const store = yield* openStore
        const { scope, ctx, driver } = yield* buildOver(store, [ScriptedModel.hang({ text: "partial" })])
        // Observers live in the test's scope, so they see what disposal publishes.
        const trace = yield* Effect.provide(recordStatus, ctx)
        const collected: Array<DriverEvent> = []
        const collector = yield* Effect.fork(
          Stream.runForEach(driver.events, (e) => Effect.sync(() => collected.push(e)))
        )
        yield* settle
        yield* driver.followup(user("A"))
        yield* Effect.provide(
          untilEvent((e) => e.type === "assistant/chunk" && (e.data as any).chunk.type === "text-delta"),
          ctx
        )
        yield* driver.followup(user("T"))
        const live1 = yield* Effect.provide(events, ctx)
        yield* Scope.close(scope, Exit.void)
        yield* settle
        // Driver.events ends on disposal (3.7 step 5), so the collector completes.
        yield* Fiber.join(collector)
        const stored = yield* store.rows()
        const n = stored.map(notation)
        expect(n.indexOf("INS(nt,0,[T])")).toBeGreaterThan(0)
        expect(n.slice(-3)).toEqual(["AM!", "SE(1,1)", "TE(1,aborted(disposed))"])
        expect(n.filter((s) => s.startsWith("CAN"))).toEqual([])
        expect(stored.slice(0, live1.length)).toEqual(json(live1))
        expect(checkLog(stored, { closed: true })).toEqual([])
        const live = collected.map(liveNotation)
        expect(live).toContain("inserted(T)")
        expect(live[live.length - 1]).toBe("status(idle)")
        expect(collected.filter((e) => e.type === "agent/error")).toEqual([])
        expect(yield* trace).toEqual(["idle", "running", "idle"])
        expect(yield* Effect.flip(driver.followup(user("X")))).toBeInstanceOf(AgentDisposed)
        // Lifecycle 2: an agent resuming the same store.
        yield* Effect.gen(function*() {
          const d2 = yield* Driver
          const inbox = yield* Inbox
          expect(ids(yield* inbox.nextTurn)).toEqual(["T"])
          expect(yield* d2.status).toBe("idle")
          const before = yield* events
          expect(json(before.slice(0, stored.length))).toEqual(stored)
          expect(before.map(notation).slice(stored.length)).toEqual(["ES"])
          yield* d2.followup(user("W"))
          yield* d2.whenIdle
          const es = yield* store.close()
          const ss = es.filter((e) => e.type === "step/start" || e.type === "user/message").map(notation)
          expect(ss.slice(-4)).toEqual(["SS(2,1)", "UM(T)", "SS(3,1)", "UM(W)"])
          expect((yield* requests).map((r) => r.messages.map(token).at(-1))).toEqual(["T", "W"])
        }).pipe(
          Effect.provide(store.agent([ScriptedModel.text("t"), ScriptedModel.text("w")], { resume: true })),
          Effect.scoped
        )
      }))

    it.scoped("P38: the status trace of a disposed agent ends idle", () =>
      Effect.gen(function*() {
        const store = yield* openStore
        const { scope, ctx, driver } = yield* buildOver(store, [ScriptedModel.hang({ text: "partial" })])
        const seen: Array<string> = []
        // statusChanges ends on disposal (SPEC 3.7 step 5), so the collector completes.
        const collector = yield* Effect.fork(
          Stream.runForEach(driver.statusChanges, (status) => Effect.sync(() => seen.push(status)))
        )
        yield* settle
        yield* driver.followup(user("A"))
        yield* Effect.provide(untilEvent((e) => e.type === "assistant/chunk"), ctx)
        yield* Scope.close(scope, Exit.void)
        yield* Fiber.join(collector)
        expect(seen).toEqual(["idle", "running", "idle"])
      }))

    storeTest(
      openStore,
      "P39 (a, b, c, e): inbox mutations are committed exactly",
      [ScriptedModel.text("ok")],
      (store) =>
        Effect.gen(function*() {
          const inbox = yield* Inbox
          const driver = yield* Driver
          const live = yield* recordLive
          const O = user("O")
          const N = plugin("N")
          const R = user("R")
          yield* inbox.append("next-turn", O)
          yield* inbox.append("next-step", N)
          expect(yield* inbox.replace(asId("missing"), user("Z"))).toBe(false)
          expect(yield* shape).toEqual(["INS(nt,0,[O])", "INS(ns,0,[N])"])
          expect((yield* store.rows()).map(notation)).toEqual(["INS(nt,0,[O])", "INS(ns,0,[N])"])
          yield* live
          expect(yield* inbox.replace(O.id, R)).toBe(true)
          expect((yield* shape).slice(-1)).toEqual(["REP(nt,0,[R])"])
          expect((yield* live).map(liveNotation)).toEqual(["discarded(O)", "inserted(R)"])
          expect(yield* inbox.idState(O.id)).toEqual(Option.some("discarded"))
          const N2 = plugin("N", "N prime")
          expect(yield* inbox.replace(N.id, N2)).toBe(true)
          expect(yield* inbox.nextStep).toEqual([N2])
          const dupPending = yield* Effect.flip(inbox.replace(R.id, user("N")))
          expect(dupPending).toBeInstanceOf(DuplicateMessage)
          expect(dupPending).toMatchObject({ _tag: "DuplicateMessage", id: "N", state: "pending" })
          expect(yield* Effect.flip(inbox.replace(R.id, user("O")))).toMatchObject({
            _tag: "DuplicateMessage",
            id: "O",
            state: "discarded"
          })
          // (b)
          const before = (yield* shape).length
          yield* inbox.splice("next-turn", 0, 0, [user("F"), user("V")])
          expect((yield* shape).slice(before)).toEqual(["INS(nt,0,[F,V])"])
          expect(ids(yield* inbox.splice("next-turn", -1, 1, []))).toEqual(["R"])
          expect((yield* shape).slice(-1)).toEqual(["CAN(nt,2,1)"])
          expect(yield* inbox.remove(R.id)).toBe(false)
          const dupF = yield* Effect.flip(inbox.append("next-step", user("F")))
          expect(dupF).toBeInstanceOf(DuplicateMessage)
          expect(dupF).toMatchObject({ _tag: "DuplicateMessage", state: "pending" })
          const length = (yield* shape).length
          expect(yield* Effect.flip(inbox.splice("next-turn", NaN, 0, [user("H")]))).toBeInstanceOf(InvalidSplice)
          expect(yield* inbox.splice("next-turn", 5, 0, [])).toEqual([])
          expect((yield* shape).length).toBe(length)
          expect(yield* store.rows()).toHaveLength(length)
          expect(yield* inbox.idState(asId("H"))).toEqual(Option.none())
          // (c)
          yield* live
          yield* inbox.clear
          expect((yield* shape).slice(-2)).toEqual(["CAN(ns,0,1)", "CAN(nt,0,2)"])
          expect((yield* live).map(liveNotation)).toEqual(["discarded(N)", "discarded(F)", "discarded(V)"])
          yield* inbox.clear
          expect((yield* shape).length).toBe(length + 2)
          // (e)
          yield* driver.inject(plugin("C"))
          yield* inbox.remove(asId("C"))
          yield* driver.followup(user("P"))
          expect((yield* shape).slice(length + 2, length + 7)).toEqual([
            "INS(ns,0,[C])",
            "CAN(ns,0,1)",
            "INS(nt,0,[P])",
            "TS(1)",
            "CLM(nt,0,1)"
          ])
          const l = (yield* live).map(liveNotation)
          expect(l.filter((s) => s.startsWith("inserted"))).toEqual(["inserted(C)", "inserted(P)"])
          expect(l.filter((s) => s.startsWith("discarded"))).toEqual(["discarded(C)"])
          expect(l.filter((s) => s.startsWith("claimed"))).toEqual(["claimed(P,1)"])
          yield* driver.whenIdle
          expect((yield* requests).map((r) => r.messages.map(token))).toEqual([["P"]])
          expect(JSON.stringify(yield* requests)).not.toContain("\"C\"")
        })
    )

    it.scoped("P39 (d): resuming a log whose event 0 is an out-of-range splice fails MalformedLog {seq: 0}", () =>
      Effect.gen(function*() {
        const store = yield* openStore
        yield* store.use((s) =>
          s.create(header("s"), [
            {
              type: "agent/inbox/spliced",
              seq: 0,
              time: 0,
              data: { target: "next-turn", start: 1, inserted: [user("X")] }
            } as any
          ])
        )
        const exit = yield* Effect.exit(Effect.scoped(Layer.build(store.agent([], { resume: true }))))
        expect(Exit.isFailure(exit)).toBe(true)
        const error = Exit.isFailure(exit) ? Option.getOrUndefined(Cause.failureOption(exit.cause)) : undefined
        expect(error).toBeInstanceOf(MalformedLog)
        expect(error).toMatchObject({ seq: 0 })
        expect(yield* store.rows()).toHaveLength(1)
      }))

    storeTest(
      openStore,
      "P40 (a, d): a wake during maintenance is latched; the task exit opens the turn; AgentBusy during the task",
      [ScriptedModel.text("w")],
      (store) =>
        Effect.gen(function*() {
          const driver = yield* Driver
          const live = yield* recordLive
          const trace = yield* recordStatus
          const G = gate()
          const task = yield* Effect.fork(driver.runMaintenance(Deferred.await(G).pipe(Effect.as(42))))
          yield* settle
          expect(yield* Effect.flip(driver.runMaintenance(Effect.void))).toMatchObject({
            _tag: "AgentBusy",
            phase: "maintenance"
          })
          yield* driver.followup(user("W"))
          expect(yield* shape).toEqual(["INS(nt,0,[W])"])
          expect((yield* store.rows()).map(notation)).toEqual(["INS(nt,0,[W])"])
          expect(yield* driver.status).toBe("idle")
          expect((yield* live).map(liveNotation)).toEqual(["inserted(W)"])
          yield* open(G)
          expect(yield* Fiber.join(task)).toBe(42)
          yield* driver.whenIdle
          expect((yield* shape).slice(0, 5)).toEqual(["INS(nt,0,[W])", "TS(1)", "CLM(nt,0,1)", "SS(1,1)", "UM(W)"])
          expect(yield* texts).toEqual(["W"])
          expect(yield* trace).toEqual(["idle", "running", "idle"])
        })
    )

    storeTest(
      openStore,
      "P40 (b, c, d): a removed latch opens no turn; a broad cancel fails MaintenanceAborted; AgentBusy while running",
      [ScriptedModel.hang({ text: "b" })],
      () =>
        Effect.gen(function*() {
          const driver = yield* Driver
          const inbox = yield* Inbox
          // (b)
          const G = gate()
          const first = yield* Effect.fork(driver.runMaintenance(Deferred.await(G)))
          yield* settle
          yield* driver.followup(user("W"))
          expect(yield* inbox.remove(asId("W"))).toBe(true)
          yield* open(G)
          yield* Fiber.join(first)
          yield* driver.whenIdle
          expect(yield* shape).toEqual(["INS(nt,0,[W])", "CAN(nt,0,1)"])
          expect(yield* requests).toEqual([])
          // (c)
          const second = yield* Effect.fork(driver.runMaintenance(Effect.never))
          yield* settle
          yield* driver.followup(user("A"))
          yield* driver.cancel(CancelCause.user)
          expect((yield* shape).slice(2)).toEqual(["INS(nt,0,[A])", "CAN(nt,0,1)"])
          const failure = yield* Effect.flip(Fiber.join(second))
          expect(failure).toBeInstanceOf(MaintenanceAborted)
          expect(failure).toMatchObject({ cause: { kind: "user" } })
          yield* driver.followup(user("B"))
          yield* untilEvent((e) => e.type === "assistant/chunk")
          // (d)
          const busy = yield* Effect.flip(driver.runMaintenance(Effect.void))
          expect(busy).toBeInstanceOf(AgentBusy)
          expect(busy).toMatchObject({ operation: "runMaintenance", phase: "running" })
          yield* driver.cancel(CancelCause.user)
          yield* driver.whenIdle
          expect(yield* texts).toEqual(["B"])
          expect((yield* dataOfType("turn/start")).map((x) => x.turn)).toEqual([1])
          expect(yield* requests).toHaveLength(1)
        })
    )

    it.scoped("P41: a pending injection survives a close and a resume; a crash image taken after inject holds it", () =>
      Effect.gen(function*() {
        const store = yield* openStore
        const { scope, ctx, driver } = yield* buildOver(store, [ScriptedModel.text("a")])
        yield* driver.followup(user("A"))
        yield* driver.whenIdle
        yield* driver.inject(plugin("N"))
        // Acknowledged ⇒ durable: the row is committed as inject returns.
        expect((yield* store.rows()).map(notation).slice(-2)).toEqual(["TE(1,completed)", "INS(ns,0,[N])"])
        const image = yield* store.image
        const live1 = yield* Effect.provide(events, ctx)
        yield* Scope.close(scope, Exit.void)
        const stored = yield* store.rows()
        expect(stored).toEqual(json(live1))
        expect(stored.map(notation).slice(-2)).toEqual(["TE(1,completed)", "INS(ns,0,[N])"])
        expect(stored.map(notation).filter((s) => s.startsWith("CAN"))).toEqual([])
        yield* store.run(
          [ScriptedModel.text("q")],
          Effect.gen(function*() {
            const d2 = yield* Driver
            const inbox = yield* Inbox
            const before = yield* shape
            expect(before.slice(stored.length)).toEqual(["ES"])
            expect(ids(yield* inbox.nextStep)).toEqual(["N"])
            expect(yield* d2.status).toBe("idle")
            expect(before.filter((s) => s.startsWith("TS(2"))).toEqual([])
            yield* d2.followup(user("Q"))
            yield* d2.whenIdle
            expect((yield* shape).slice(before.length, before.length + 8)).toEqual(
              ["INS(nt,0,[Q])", "TS(2)", "CLM(ns,0,1)", "CLM(nt,0,1)", "SS(2,1)", "UM(N)", "UM(Q)", "RH(resume)"]
            )
            expect((yield* requests)[0]!.messages.map(token).slice(-2)).toEqual(["N", "Q"])
          }),
          { resume: true }
        )
        // Crash variant: the image taken right after inject returned.
        yield* image.run(
          [],
          Effect.gen(function*() {
            const inbox = yield* Inbox
            expect(ids(yield* inbox.nextStep)).toEqual(["N"])
          }),
          { resume: true }
        )
      }))
  }
)
