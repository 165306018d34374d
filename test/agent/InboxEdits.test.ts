/**
 * Inbox mutations through an agent (SPEC 2.7, 3.8, 3.9, 8.4): splices, identity moves, known and
 * reserved ids, observers of edits and aborted chains.
 */
import { describe, expect, it } from "@effect/vitest"
import { Cause, Context, Deferred, Effect, Exit, Fiber, Layer, Option, Scope, Stream } from "effect"
import {
  CancelCause,
  Driver,
  DuplicateMessage,
  Inbox,
  InvalidEvent,
  InvalidSplice,
  PreStep,
  PreStepDecision,
  ScriptedModel,
  SessionLog,
  SessionStore,
  Tool,
  userMessage
} from "../../src/index.js"
import type { UserMessage } from "../../src/index.js"
import {
  agentOver,
  agentTest,
  asId,
  closeOut,
  dataOfType,
  events,
  gate,
  ids,
  liveNotation,
  liveNotations,
  open,
  plugin,
  reasons,
  recordLive,
  requests,
  scenario,
  settle,
  shape,
  texts,
  until,
  user
} from "./harness.js"
import { failureOf } from "./stores.js"
import { calls, empty, resultsByCall } from "./toolFixtures.js"

const gateAppendNt = gate()
const gateAppendNs = gate()
const gateClear = gate()

describe("3.8 inbox mutations", () => {
  agentTest(
    "3.8: replace with a new id writes REP, the old id becomes discarded, live discarded(old) then inserted(new)",
    scenario([]),
    function*({ inbox }) {
      const live = yield* recordLive
      yield* inbox.append("next-turn", user("A"))
      yield* inbox.append("next-turn", user("B"))
      expect(yield* inbox.replace(asId("B"), user("B2"))).toBe(true)
      expect(yield* shape).toEqual(["INS(nt,0,[A])", "INS(nt,1,[B])", "REP(nt,1,[B2])"])
      expect((yield* live).map(liveNotation)).toEqual(["inserted(A)", "inserted(B)", "discarded(B)", "inserted(B2)"])
      expect(yield* inbox.idState(asId("B"))).toEqual(Option.some("discarded"))
      expect(yield* inbox.idState(asId("B2"))).toEqual(Option.some("pending"))
      expect((yield* inbox.nextTurn).map((m) => m.id)).toEqual(["A", "B2"])
      // A same-id content rewrite keeps the id pending.
      expect(yield* inbox.replace(asId("A"), user("A", "rewritten"))).toBe(true)
      expect((yield* shape).at(-1)).toBe("REP(nt,0,[A])")
      expect(yield* inbox.idState(asId("A"))).toEqual(Option.some("pending"))
      expect((yield* inbox.nextTurn)[0]!.content).toEqual([{ type: "text", text: "rewritten" }])
      // A discarded id cannot come back.
      const dup = yield* Effect.flip(inbox.replace(asId("A"), user("B")))
      expect(dup).toBeInstanceOf(DuplicateMessage)
      expect(dup).toMatchObject({ id: "B", state: "discarded" })
    }
  )

  agentTest(
    "3.8: replace and remove of an id that is not pending return false and write nothing",
    scenario([ScriptedModel.text("ok")]),
    function*({ driver, inbox }) {
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      const before = yield* events
      expect(yield* inbox.replace(asId("A"), user("Z"))).toBe(false)
      expect(yield* inbox.remove(asId("A"))).toBe(false)
      expect(yield* inbox.remove(asId("nobody"))).toBe(false)
      expect(yield* inbox.replace(asId("nobody"), user("Z"))).toBe(false)
      yield* inbox.clear
      expect(yield* events).toEqual(before)
      // Z was never accepted: it is still fresh.
      expect(yield* inbox.idState(asId("Z"))).toEqual(Option.none())
    }
  )

  agentTest(
    "3.8/3.9: a splice may re-insert an id it removes (REP); inserting a pending id fails DuplicateMessage {state: pending}",
    scenario([]),
    function*({ inbox }) {
      yield* inbox.append("next-step", plugin("C"))
      yield* inbox.append("next-step", plugin("D"))
      const removed = yield* inbox.splice("next-step", 0, 1, [plugin("C", "edited")])
      expect(removed.map((m) => m.id)).toEqual(["C"])
      expect((yield* shape).at(-1)).toBe("REP(ns,0,[C])")
      const before = yield* events
      const dup = yield* Effect.flip(inbox.splice("next-step", 0, 0, [plugin("D")]))
      expect(dup).toBeInstanceOf(DuplicateMessage)
      expect(dup).toMatchObject({ id: "D", state: "pending" })
      // A pending id of the other list is not fresh either.
      const dup2 = yield* Effect.flip(inbox.append("next-turn", plugin("C")))
      expect(dup2).toMatchObject({ _tag: "DuplicateMessage", id: "C", state: "pending" })
      expect(yield* events).toEqual(before)
    }
  )

  agentTest(
    "3.10/3.8: clear and a broad cancel publish discarded for next-step items first, then next-turn",
    scenario([]),
    function*({ driver, inbox }) {
      yield* inbox.append("next-turn", user("A"))
      yield* inbox.append("next-step", plugin("C"))
      const live = yield* recordLive
      yield* inbox.clear
      expect((yield* live).map(liveNotation)).toEqual(["discarded(C)", "discarded(A)"])
      expect((yield* shape).slice(-2)).toEqual(["CAN(ns,0,1)", "CAN(nt,0,1)"])
      yield* inbox.append("next-turn", user("B"))
      yield* driver.inject(plugin("X"))
      yield* live
      yield* driver.cancel(CancelCause.user)
      expect((yield* live).map(liveNotation)).toEqual(["discarded(X)", "discarded(B)"])
      expect(yield* inbox.hasPending).toBe(false)
    }
  )

  // An invalid target makes the splice event invalid (5.1 A4): the operation fails with a typed error
  // (InvalidEvent; InvalidSplice for splice) and changes nothing.
  agentTest(
    "5.1/3.1: an insertion at a target that is not an InboxTarget fails with a typed error and writes nothing",
    scenario([]),
    function*({ driver, inbox }) {
      const bogus = "elsewhere" as unknown as "next-turn"
      const exits: Array<Exit.Exit<unknown, unknown>> = [
        yield* Effect.exit(inbox.append(bogus, user("A"))),
        yield* Effect.exit(driver.send(user("B"), bogus, false)),
        yield* Effect.exit(inbox.splice(bogus, 0, 0, [user("C")]))
      ]
      for (const exit of exits) {
        expect(Exit.isFailure(exit) && Cause.isFailType(exit.cause) ? "typed failure" : String(exit)).toBe(
          "typed failure"
        )
        const error = failureOf(exit)
        expect(error instanceof InvalidEvent || error instanceof InvalidSplice).toBe(true)
      }
      expect(yield* events).toEqual([])
    }
  )
})

describe("3.8: inbox mutations", () => {
  agentTest(
    "3.8: append/prepend on idle never wake: INS only, no turn, no status change",
    scenario([]),
    function*({ inbox, driver }) {
      const live = yield* recordLive
      yield* inbox.append("next-turn", user("A"))
      yield* inbox.prepend("next-step", user("B"))
      yield* inbox.prepend("next-turn", user("C"))
      yield* settle
      expect(yield* shape).toEqual(["INS(nt,0,[A])", "INS(ns,0,[B])", "INS(nt,0,[C])"])
      expect(yield* liveNotations(live)).toEqual(["inserted(A)", "inserted(B)", "inserted(C)"])
      expect(yield* driver.status).toBe("idle")
      expect(ids(yield* inbox.nextTurn)).toEqual(["C", "A"])
      expect(yield* requests).toHaveLength(0)
    }
  )

  agentTest(
    "3.8: an Inbox.append into next-turn while a turn runs is run as a later turn of the chain",
    scenario([ScriptedModel.text("one", { awaitBefore: Deferred.await(gateAppendNt) }), ScriptedModel.text("two")]),
    function*({ driver, inbox }) {
      yield* driver.followup(user("A"))
      yield* until(Effect.map(shape, (s) => s.includes("RH(initial)")))
      yield* inbox.append("next-turn", user("B"))
      yield* open(gateAppendNt)
      expect(yield* closeOut).toEqual([])
      expect((yield* reasons).map((r) => r.kind)).toEqual(["completed", "completed"])
      expect(yield* texts).toEqual(["A", "B"])
    }
  )

  agentTest(
    "3.8: an Inbox.append into next-step during the last step is claimed at the next boundary of the same turn",
    scenario([ScriptedModel.text("one", { awaitBefore: Deferred.await(gateAppendNs) }), ScriptedModel.text("two")]),
    function*({ driver, inbox }) {
      yield* driver.followup(user("A"))
      yield* until(Effect.map(shape, (s) => s.includes("RH(initial)")))
      yield* inbox.append("next-step", user("X"))
      yield* open(gateAppendNs)
      expect(yield* closeOut).toEqual([])
      const s = yield* shape
      expect(s).toContain("SS(1,2)")
      expect(s.slice(s.indexOf("SE(1,1)"), s.indexOf("SE(1,1)") + 4)).toEqual([
        "SE(1,1)",
        "CLM(ns,0,1)",
        "SS(1,2)",
        "UM(X)"
      ])
      expect((yield* reasons).map((r) => r.kind)).toEqual(["completed"])
    }
  )

  agentTest(
    "3.8/4.8: an Inbox.append into next-step after the claim is not waking work: after a blocked turn the driver goes idle, the item stays pending",
    scenario([]),
    function*({ driver, inbox, preStep: pre }) {
      yield* pre.register(() =>
        Effect.zipRight(inbox.append("next-step", user("X")), Effect.succeed(PreStepDecision.reject("no")))
      )
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect(yield* shape).toEqual(["INS(nt,0,[A])", "TS(1)", "CLM(nt,0,1)", "INS(ns,0,[X])", "TE(1,blocked)"])
      expect(ids(yield* inbox.nextStep)).toEqual(["X"])
      expect(yield* driver.status).toBe("idle")
    }
  )

  agentTest(
    "3.8/3.6: removing one of two latched wakes during maintenance still replays the other",
    scenario([ScriptedModel.text("ok")]),
    function*({ driver, inbox }) {
      const g = gate()
      const task = yield* Effect.fork(driver.runMaintenance(Deferred.await(g)))
      yield* settle
      yield* driver.followup(user("A"))
      yield* driver.followup(user("B"))
      expect(yield* inbox.remove(asId("A"))).toBe(true)
      yield* open(g)
      yield* Fiber.join(task)
      expect(yield* closeOut).toEqual([])
      expect(yield* shape).toEqual([
        "INS(nt,0,[A])",
        "INS(nt,1,[B])",
        "CAN(nt,0,1)",
        "TS(1)",
        "CLM(nt,0,1)",
        "SS(1,1)",
        "UM(B)",
        "RH(initial)",
        "CH(block-start)",
        "CH(text-delta)",
        "CH(block-end)",
        "CH(finish stop)",
        "AM",
        "SE(1,1)",
        "TE(1,completed)"
      ])
    }
  )

  agentTest(
    "3.2/3.8: a splice that swaps a latched wake for a new message (not replace) drops the latch: no turn when the task ends",
    scenario([]),
    function*({ driver, inbox }) {
      const g = gate()
      const task = yield* Effect.fork(driver.runMaintenance(Deferred.await(g)))
      yield* settle
      yield* driver.followup(user("A"))
      expect(ids(yield* inbox.splice("next-turn", 0, 1, [user("A2")]))).toEqual(["A"])
      yield* open(g)
      yield* Fiber.join(task)
      expect(yield* closeOut).toEqual([])
      expect(yield* shape).toEqual(["INS(nt,0,[A])", "REP(nt,0,[A2])"])
      expect(ids(yield* inbox.nextTurn)).toEqual(["A2"])
      expect(yield* requests).toHaveLength(0)
    }
  )

  agentTest(
    "3.8: replace keeping the same id rewrites content: REP, live discarded(A) then inserted(A), true, still pending",
    scenario([]),
    function*({ inbox }) {
      yield* inbox.append("next-step", user("Z"))
      yield* inbox.append("next-step", user("A", "old"))
      const live = yield* recordLive
      expect(yield* inbox.replace(asId("A"), user("A", "new"))).toBe(true)
      expect(yield* shape).toEqual(["INS(ns,0,[Z])", "INS(ns,1,[A])", "REP(ns,1,[A])"])
      const last = (yield* dataOfType("agent/inbox/spliced")).at(-1)!
      expect(last.removedCount).toBe(1)
      expect(last.outcome).toBe("canceled")
      expect(yield* liveNotations(live)).toEqual(["discarded(A)", "inserted(A)"])
      expect(yield* inbox.idState(asId("A"))).toEqual(Option.some("pending"))
      expect((yield* inbox.nextStep).map((m) => (m.content[0] as any).text)).toEqual(["Z", "new"])
    }
  )

  agentTest(
    "3.8/3.9: replace with a non-fresh new id fails DuplicateMessage and writes nothing",
    scenario([]),
    function*({ inbox }) {
      yield* inbox.append("next-turn", user("A"))
      yield* inbox.append("next-step", user("B"))
      const before = (yield* events).length
      const error = yield* Effect.flip(inbox.replace(asId("A"), user("B")))
      expect(error).toBeInstanceOf(DuplicateMessage)
      expect((error as DuplicateMessage).id).toBe("B")
      expect((error as DuplicateMessage).state).toBe("pending")
      expect((yield* events).length).toBe(before)
      expect(ids(yield* inbox.nextTurn)).toEqual(["A"])
    }
  )

  agentTest(
    "3.8/2.7: splice normalises negative start and +Infinity deleteCount; returns removed; live discarded per removed then inserted",
    scenario([]),
    function*({ inbox }) {
      yield* inbox.append("next-step", user("X"))
      yield* inbox.append("next-step", user("Y"))
      yield* inbox.append("next-step", user("Z"))
      const live = yield* recordLive
      const removed = yield* inbox.splice("next-step", -2.7, Infinity, [user("P"), user("Q")])
      expect(ids(removed)).toEqual(["Y", "Z"])
      const last = (yield* dataOfType("agent/inbox/spliced")).at(-1)!
      expect({ start: last.start, removedCount: last.removedCount, outcome: last.outcome }).toEqual({
        start: 1,
        removedCount: 2,
        outcome: "canceled"
      })
      expect(yield* liveNotations(live)).toEqual(["discarded(Y)", "discarded(Z)", "inserted(P)", "inserted(Q)"])
      expect(ids(yield* inbox.nextStep)).toEqual(["X", "P", "Q"])
      expect(yield* inbox.idState(asId("Y"))).toEqual(Option.some("discarded"))
      // Nothing removed, nothing inserted: nothing written, [] returned.
      const n = (yield* events).length
      expect(yield* inbox.splice("next-step", 1, 0, [])).toEqual([])
      expect((yield* events).length).toBe(n)
    }
  )

  agentTest(
    "3.1/3.8: splice check order: coordinates (InvalidSplice) before message validity (InvalidEvent) before identity",
    scenario([]),
    function*({ inbox }) {
      yield* inbox.append("next-turn", user("A"))
      const invalid = { id: "", role: "user", content: "nope" } as unknown as UserMessage
      expect(yield* Effect.flip(inbox.splice("next-turn", NaN, 0, [invalid]))).toBeInstanceOf(InvalidSplice)
      expect(yield* Effect.flip(inbox.splice("next-turn", 0, 0, [user("A"), invalid]))).toBeInstanceOf(InvalidEvent)
      expect(yield* shape).toEqual(["INS(nt,0,[A])"])
    }
  )

  agentTest(
    "3.8: clear on empty lists writes nothing; clear while running removes pending input (CAN) but aborts nothing",
    scenario([ScriptedModel.text("ok", { awaitBefore: Deferred.await(gateClear) })]),
    function*({ inbox, driver }) {
      const live = yield* recordLive
      yield* inbox.clear
      expect(yield* shape).toEqual([])
      expect(yield* liveNotations(live)).toEqual([])
      yield* driver.followup(user("A"))
      yield* until(Effect.map(shape, (s) => s.includes("RH(initial)")))
      yield* driver.inject(plugin("I"))
      yield* driver.send(user("Q"), "next-turn", false)
      yield* inbox.clear
      yield* open(gateClear)
      expect(yield* closeOut).toEqual([])
      const s = yield* shape
      expect(s.slice(3, 7)).toEqual(["SS(1,1)", "UM(A)", "RH(initial)", "INS(ns,0,[I])"])
      expect(s).toContain("CAN(ns,0,1)")
      expect(s).toContain("CAN(nt,0,1)")
      expect(s.indexOf("CAN(nt,0,1)")).toBe(s.indexOf("CAN(ns,0,1)") + 1)
      expect((yield* reasons).map((r) => r.kind)).toEqual(["completed"])
      expect(yield* requests).toHaveLength(1)
    }
  )
})

describe("0.4 D5 / 3.8: observers and aborted chains", () => {
  agentTest(
    "3.8: an Inbox.append into next-turn while running is parked when the turn ends aborted (keepInbox): no replay",
    scenario([ScriptedModel.hang()]),
    function*({ driver, inbox }) {
      yield* driver.followup(user("A"))
      yield* until(Effect.map(shape, (s) => s.includes("RH(initial)")))
      yield* inbox.append("next-turn", user("B"))
      yield* driver.cancel(CancelCause.user, { keepInbox: true })
      expect(yield* closeOut).toEqual([])
      expect((yield* shape).at(-1)).toBe("TE(1,aborted(user))")
      expect(ids(yield* inbox.nextTurn)).toEqual(["B"])
      expect(yield* driver.status).toBe("idle")
      expect(yield* requests).toHaveLength(1)
    }
  )

  agentTest(
    "0.4 D5 / 3.10: a Driver.events observer may call followup; the delivery is not dropped and runs in the chain",
    scenario([ScriptedModel.text("one"), ScriptedModel.text("two")]),
    function*({ driver }) {
      let done = false
      yield* Effect.forkScoped(
        Stream.runForEach(driver.events, (e) =>
          e.type === "agent/inbox/claimed" && e.message.id === "A" && !done
            ? Effect.zipRight(Effect.sync(() => (done = true)), driver.followup(user("B")))
            : Effect.void)
      )
      yield* settle
      yield* driver.followup(user("A"))
      yield* until(Effect.sync(() => done))
      yield* until(Effect.map(texts, (t) => t.includes("B")))
      expect(yield* closeOut).toEqual([])
      expect(yield* texts).toEqual(["A", "B"])
      expect((yield* reasons).map((r) => r.kind)).toEqual(["completed", "completed"])
    }
  )

  agentTest(
    "0.4 D5 / 3.10: a SessionLog.stream observer may cancel the running turn",
    scenario([ScriptedModel.hang()]),
    function*({ driver, log }) {
      yield* Effect.forkScoped(
        Stream.runForEach(
          log.stream(0),
          (e) => e.type === "request/header" ? driver.cancel(CancelCause.user) : Effect.void
        )
      )
      yield* settle
      yield* driver.followup(user("A"))
      yield* until(Effect.map(shape, (s) => s.some((x) => x.startsWith("TE("))))
      expect(yield* closeOut).toEqual([])
      expect((yield* shape).at(-1)).toBe("TE(1,aborted(user))")
    }
  )
})

describe("2.7 splice normalisation", () => {
  agentTest(
    "2.7: truncation, negative and infinite coordinates, clamping; live discarded then inserted",
    scenario([]),
    function*({ inbox }) {
      const live = yield* recordLive
      yield* inbox.splice("next-turn", 0, 0, [user("a"), user("b"), user("c")])
      yield* inbox.splice("next-turn", -Infinity, 0, [user("p")])
      yield* inbox.splice("next-turn", Infinity, 0, [user("z")])
      expect(ids(yield* inbox.nextTurn)).toEqual(["p", "a", "b", "c", "z"])
      yield* live
      expect(ids(yield* inbox.splice("next-turn", 1.7, 1.9, [user("n")]))).toEqual(["a"])
      expect((yield* live).map(liveNotation)).toEqual(["discarded(a)", "inserted(n)"])
      expect(ids(yield* inbox.splice("next-turn", -2, Infinity, []))).toEqual(["c", "z"])
      expect(ids(yield* inbox.splice("next-turn", -100, -5, [user("q")]))).toEqual([])
      expect(ids(yield* inbox.nextTurn)).toEqual(["q", "p", "n", "b"])
      expect(yield* shape).toEqual([
        "INS(nt,0,[a,b,c])",
        "INS(nt,0,[p])",
        "INS(nt,4,[z])",
        "REP(nt,1,[n])",
        "CAN(nt,3,2)",
        "INS(nt,0,[q])"
      ])
      const spliced = yield* dataOfType("agent/inbox/spliced")
      expect(spliced[3]).toEqual({
        target: "next-turn",
        start: 1,
        removedCount: 1,
        inserted: [user("n")],
        outcome: "canceled"
      })
      expect("removedCount" in spliced[0]!).toBe(false)
    }
  )
})

describe("3.9 known ids", () => {
  it.scoped("3.9: assistant and tool-result ids are known; states survive a resume", () =>
    Effect.gen(function*() {
      const storeCtx = yield* Layer.build(SessionStore.layerMemory)
      const build = (script: Parameters<typeof agentOver>[0], resume: boolean) =>
        Effect.gen(function*() {
          const scope = yield* Scope.make()
          const ctx = yield* Layer.buildWithScope(
            agentOver(script, {
              resume,
              tools: [Tool.make("quick", {
                description: "",
                parameters: empty,
                execute: () => Effect.succeed("ok")
              })]
            })
              .pipe(Layer.provide(Layer.succeedContext(storeCtx))),
            scope
          )
          return {
            scope,
            driver: Context.get(ctx, Driver),
            inbox: Context.get(ctx, Inbox),
            log: Context.get(ctx, SessionLog),
            pre: Context.get(ctx, PreStep)
          }
        })
      const first = yield* build(
        [
          ScriptedModel.response({ toolCalls: [{ id: "c1", name: "quick", arguments: {} }] }),
          ScriptedModel.text("done")
        ],
        false
      )
      yield* Scope.extend(
        first.pre.register((input, next) => input.turn === 2 ? Effect.succeed(PreStepDecision.reject()) : next()),
        first.scope
      )
      yield* first.driver.followup(user("A"))
      yield* first.driver.whenIdle
      yield* first.driver.followup(user("B"))
      yield* first.driver.whenIdle
      yield* first.driver.inject(user("C"))
      yield* first.inbox.remove("C" as UserMessage["id"])
      yield* first.driver.inject(user("D"))
      const es = yield* first.log.events
      const amId = (es.find((e) => e.type === "assistant/message")!.data as any).message.id as string
      const trId = (es.find((e) => e.type === "tool/result")!.data as any).message.id as string
      yield* Scope.close(first.scope, Exit.void)
      const second = yield* build([], true)
      const stateOf = (id: string) =>
        Effect.map(Effect.flip(second.driver.followup(user(id))), (e) => [e._tag, (e as DuplicateMessage).state])
      expect(yield* stateOf("A")).toEqual(["DuplicateMessage", "entered"])
      expect(yield* stateOf("B")).toEqual(["DuplicateMessage", "claimed"])
      expect(yield* stateOf("C")).toEqual(["DuplicateMessage", "discarded"])
      expect(yield* stateOf("D")).toEqual(["DuplicateMessage", "pending"])
      expect(yield* stateOf(amId)).toEqual(["DuplicateMessage", "entered"])
      expect(yield* stateOf(trId)).toEqual(["DuplicateMessage", "entered"])
      expect(yield* second.inbox.idState(amId as UserMessage["id"])).toEqual(Option.some("entered"))
      yield* Scope.close(second.scope, Exit.void)
    }))
})

describe("3.8 identity moves of latched and waking items", () => {
  agentTest(
    "3.2/3.8: replacing a latched wake keeps it a wake",
    scenario([ScriptedModel.text("w")]),
    function*({ driver, inbox }) {
      const G = gate()
      const task = yield* Effect.fork(driver.runMaintenance(Deferred.await(G)))
      yield* settle
      yield* driver.followup(user("W"))
      expect(yield* inbox.replace("W" as UserMessage["id"], user("W2"))).toBe(true)
      yield* open(G)
      yield* Fiber.join(task)
      yield* driver.whenIdle
      expect(yield* texts).toEqual(["W2"])
    }
  )

  agentTest(
    "3.2/3.8: replacing a steer inserted after the claim keeps it waking work: the chain continues after a rejection",
    scenario([ScriptedModel.text("s")]),
    function*({ driver, inbox }) {
      const G = gate()
      yield* (yield* PreStep).register((input, next) =>
        input.turn === 1 ? Effect.zipRight(Deferred.await(G), Effect.succeed(PreStepDecision.reject())) : next()
      )
      yield* driver.followup(user("P"))
      yield* driver.steer(user("S"))
      expect(yield* inbox.replace("S" as UserMessage["id"], user("S2"))).toBe(true)
      yield* open(G)
      yield* driver.whenIdle
      const s = yield* shape
      expect(s.slice(s.indexOf("TE(1,blocked)"), s.indexOf("TE(1,blocked)") + 5)).toEqual([
        "TE(1,blocked)",
        "TS(2)",
        "CLM(ns,0,1)",
        "SS(2,1)",
        "UM(S2)"
      ])
    }
  )

  agentTest(
    "3.2/3.8: a steer removed and re-appended through the inbox is no longer waking work",
    scenario([ScriptedModel.text("s")]),
    function*({ driver, inbox }) {
      const G = gate()
      yield* (yield* PreStep).register((input, next) =>
        input.turn === 1 ? Effect.zipRight(Deferred.await(G), Effect.succeed(PreStepDecision.reject())) : next()
      )
      yield* driver.followup(user("P"))
      const S = user("S")
      yield* driver.steer(S)
      expect(yield* inbox.remove(S.id)).toBe(true)
      yield* inbox.append("next-step", user("S2"))
      yield* open(G)
      yield* driver.whenIdle
      expect((yield* shape).filter((s) => s.startsWith("TS"))).toEqual(["TS(1)"])
      expect((yield* inbox.nextStep).map((m) => m.id)).toEqual(["S2"])
    }
  )
})

describe("SPEC 8.4 Inbox", () => {
  agentTest(
    "8.4: InvalidSplice carries the target and the caller's raw coordinates; nothing is written",
    scenario([]),
    function*({ inbox }) {
      yield* inbox.append("next-step", user("A"))
      const a = yield* Effect.flip(inbox.splice("next-step", NaN, 1, []))
      expect(a).toBeInstanceOf(InvalidSplice)
      expect(a).toMatchObject({ _tag: "InvalidSplice", target: "next-step", deleteCount: 1 })
      expect(Number.isNaN((a as InvalidSplice).start)).toBe(true)
      const b = yield* Effect.flip(inbox.splice("next-turn", 0, "1" as unknown as number, [user("B")]))
      expect(b).toBeInstanceOf(InvalidSplice)
      expect(b).toMatchObject({ target: "next-turn", start: 0, deleteCount: "1" })
      expect(typeof (b as InvalidSplice).reason).toBe("string")
      expect(yield* shape).toEqual(["INS(ns,0,[A])"])
      expect(yield* inbox.idState(asId("B"))).toEqual(Option.none())
    }
  )

  agentTest(
    "8.4/2.7: fractional coordinates are truncated and a negative deleteCount removes nothing",
    scenario([]),
    function*({ inbox }) {
      for (const id of ["A", "B", "C"]) yield* inbox.append("next-turn", user(id))
      const removed = yield* inbox.splice("next-turn", 1.9, 1.7, [user("X")])
      expect(removed.map((m) => m.id)).toEqual(["B"])
      const none = yield* inbox.splice("next-turn", 0, -3, [user("Y")])
      expect(none).toEqual([])
      expect((yield* inbox.nextTurn).map((m) => m.id)).toEqual(["Y", "A", "X", "C"])
      expect((yield* shape).slice(3)).toEqual(["REP(nt,1,[X])", "INS(nt,0,[Y])"])
    }
  )

  agentTest(
    "8.4: reads return frozen arrays; hasPending follows either list; idState is none for an unknown id",
    scenario([]),
    function*({ inbox }) {
      expect(yield* inbox.hasPending).toBe(false)
      expect(yield* inbox.idState(asId("nobody"))).toEqual(Option.none())
      yield* inbox.append("next-step", user("S"))
      expect(yield* inbox.hasPending).toBe(true)
      const nextStep = yield* inbox.nextStep
      const nextTurn = yield* inbox.nextTurn
      const snap = yield* inbox.snapshot
      expect(Object.isFrozen(nextStep)).toBe(true)
      expect(Object.isFrozen(nextTurn)).toBe(true)
      expect(Object.isFrozen(snap.nextStep) && Object.isFrozen(snap.nextTurn)).toBe(true)
      expect(snap).toEqual({ nextTurn: [], nextStep: [user("S")] })
      yield* inbox.remove(asId("S"))
      yield* inbox.append("next-turn", user("T"))
      expect(yield* inbox.hasPending).toBe(true)
      yield* inbox.clear
      expect(yield* inbox.hasPending).toBe(false)
      expect(yield* inbox.idState(asId("S"))).toEqual(Option.some("discarded"))
      expect(yield* inbox.idState(asId("T"))).toEqual(Option.some("discarded"))
      expect(yield* shape).toEqual(["INS(ns,0,[S])", "CAN(ns,0,1)", "INS(nt,0,[T])", "CAN(nt,0,1)"])
    }
  )

  agentTest(
    "8.4/3.8: remove of a next-step item writes CAN at its index; replace in next-step writes REP there",
    scenario([]),
    function*({ inbox }) {
      const live = yield* recordLive
      for (const id of ["A", "B", "C"]) yield* inbox.append("next-step", plugin(id))
      expect(yield* inbox.remove(asId("B"))).toBe(true)
      expect(yield* inbox.replace(asId("C"), plugin("D"))).toBe(true)
      expect((yield* inbox.nextStep).map((m) => m.id)).toEqual(["A", "D"])
      expect((yield* shape).slice(3)).toEqual(["CAN(ns,1,1)", "REP(ns,1,[D])"])
      expect((yield* live).map(liveNotation).slice(3)).toEqual(["discarded(B)", "discarded(C)", "inserted(D)"])
    }
  )

  agentTest(
    "8.4/3.9: a splice refused for its second message makes neither id known and writes nothing",
    scenario([]),
    function*({ inbox }) {
      yield* inbox.append("next-turn", user("K"))
      const error = yield* Effect.flip(inbox.splice("next-turn", 0, 0, [user("N1"), user("K")]))
      expect(error).toMatchObject({ _tag: "DuplicateMessage", id: "K", state: "pending" })
      expect(yield* inbox.idState(asId("N1"))).toEqual(Option.none())
      expect(yield* shape).toEqual(["INS(nt,0,[K])"])
      yield* inbox.append("next-step", user("N1"))
      expect(yield* inbox.idState(asId("N1"))).toEqual(Option.some("pending"))
    }
  )
})

describe("3.9/4.4: reserved ids", () => {
  // Regression test (fixed; the text says what tiller did before): SPEC 3.9 "Ids starting with `interrupted-tool-result-` are reserved: a caller message with such an
  // id fails with InvalidEvent"; 4.4 "Each element MUST be a valid UserMessage (else the turn ends
  // error(INVALID_MESSAGE))". Tool contexts are refused (INVALID_TOOL_OUTPUT) but a pre-step addition is entered.
  agentTest(
    "3.9/4.4: a pre-step addition with a reserved id is not entered (error(INVALID_MESSAGE), no step)",
    scenario([ScriptedModel.text("x")]),
    function*({ driver, preStep: pre }) {
      yield* pre.register((input) =>
        Effect.succeed(PreStepDecision.enter([...input.messages, user("interrupted-tool-result-x-1")]))
      )
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect(yield* shape).toEqual(["INS(nt,0,[A])", "TS(1)", "CLM(nt,0,1)", "TE(1,error(INVALID_MESSAGE))"])
    }
  )

  it.scoped("3.9/4.6: a tool context with a reserved id → INVALID_TOOL_OUTPUT", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect((yield* resultsByCall).c1!.error).toEqual({ name: "ToolOutputError", code: "INVALID_TOOL_OUTPUT" })
    }).pipe(Effect.provide(scenario([calls(["c1", "ctx"]), ScriptedModel.text("done")], {
      tools: [Tool.make("ctx", {
        description: "c",
        parameters: empty,
        execute: () => Effect.succeed({ content: "ok", additionalContexts: [user("interrupted-tool-result-y-2")] })
      })]
    }))))
})

describe("§2.3/§3.9 reserved message ids", () => {
  agentTest(
    "2.3/3.9: a replacement user/message whose id starts with interrupted-tool-result- fails InvalidEvent and writes nothing",
    scenario([ScriptedModel.text("a")]),
    function*({ log, driver }) {
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      const before = yield* events
      const surface = yield* log.surface
      const exit = yield* Effect.exit(log.append({
        type: "user/message",
        data: userMessage({ id: "interrupted-tool-result-x-1", text: "summary", source: { kind: "compaction" } }),
        surfaceOp: { op: "replace", start: surface[0]!, end: surface[1]! },
        sourceEventSeqs: [surface[0]!, surface[1]!]
      }))
      const failure = Exit.isFailure(exit) ? Cause.failureOption(exit.cause) : Option.none()
      expect(Option.getOrUndefined(failure)).toBeInstanceOf(InvalidEvent)
      expect(yield* events).toStrictEqual(before)
    }
  )
})
