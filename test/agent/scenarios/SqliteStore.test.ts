/**
 * SPEC 9 scenarios on SQLite: P42-P45 crash repair, fork, surface replacement, the checker.
 */
import { describe, expect, it } from "@effect/vitest"
import Database from "better-sqlite3"
import { Cause, Effect, Exit, Layer, Option } from "effect"
import { CancelCause, checkLog, deriveMessages, Driver, DuplicateMessage, ForkError, forkSession, Inbox, InvalidEvent, MalformedLog, PreStep, PreStepDecision, repairClosers, ScriptedModel, SessionLog, SessionNotFound, SessionStore, Tool } from "../../../src/index.js"
import { agentOver, dataOfType, events, notation, plugin, requests, shape, token, untilEvent, user } from "../harness.js"
import { closeOnFile, empty, fileRows, freshFile, header, ids, json, onFile, sid, withStore } from "./bothStores.js"
import type { SessionEvent } from "../../../src/index.js"

const hangingTool = Tool.make("slow", { description: "never ends", parameters: empty, execute: () => Effect.never })

describe("P42-P43 on SQLite", () => {
  it.scoped("P42: a crashed log in the file is repaired on resume (closers, then ES); turn 2's request ends with the synthetic result", () =>
    Effect.gen(function*() {
      const file = freshFile()
      // A live run whose tool never finishes; the log is captured right after its tool/call.
      const full = yield* Effect.gen(function*() {
        const driver = yield* Driver
        yield* driver.followup(user("A"))
        yield* untilEvent((e) => e.type === "tool/call")
        return yield* events
      }).pipe(
        Effect.provide(agentOver([ScriptedModel.response({ toolCalls: [{ id: "call-1", name: "slow", arguments: {} }] })], {
          tools: [hangingTool]
        }).pipe(Layer.provideMerge(SessionStore.layerMemory))),
        Effect.scoped
      )
      const d = full.slice(0, full.findIndex((e) => notation(e) === "TC(call-1)") + 1)
      const tc = d.length - 1
      const closers = repairClosers(d)
      expect(closers.map(notation)).toEqual(["TR?(call-1)", "SE(1,1)", "TE(1,interrupted)"])
      yield* withStore(file, (store) => store.create(header("crashed"), d))
      expect(fileRows(file, "crashed")).toEqual(json(d))
      yield* Effect.gen(function*() {
        const log = yield* SessionLog
        const driver = yield* Driver
        const opened = yield* log.events
        expect(opened.map(notation).slice(d.length)).toEqual(["TR?(call-1)", "SE(1,1)", "TE(1,interrupted)", "ES"])
        const tr = opened[d.length] as any
        expect(tr.data.error).toEqual({ name: "ToolOutcomeUnknownError", code: "TOOL_OUTCOME_UNKNOWN" })
        expect(tr.sourceEventSeqs).toEqual([tc])
        expect(opened.slice(d.length, d.length + 3).map((e) => e.seq)).toEqual([d.length, d.length + 1, d.length + 2])
        expect(opened.slice(d.length, d.length + 3).every((e) => e.time === d[d.length - 1]!.time)).toBe(true)
        // The closers and ES are committed before the agent is handed out.
        expect(fileRows(file, "crashed").map(notation).slice(d.length)).toEqual(["TR?(call-1)", "SE(1,1)", "TE(1,interrupted)", "ES"])
        expect(checkLog(opened, { closed: true })).toEqual([])
        yield* driver.followup(user("B"))
        yield* driver.whenIdle
        expect((yield* dataOfType("turn/start")).map((x) => x.turn)).toEqual([1, 2])
        expect((yield* requests)[0]!.messages.map(token).slice(-2)).toEqual(["tool-result call-1", "B"])
        yield* closeOnFile(file, "crashed")
      }).pipe(Effect.provide(onFile(file, [ScriptedModel.text("after")], { sessionId: "crashed", resume: true })), Effect.scoped)
    }))

  it.scoped("P42 (a, b): open turns in the file are closed on resume with TE(interrupted) (and SE), then ES, all committed", () =>
    Effect.gen(function*() {
      const file = freshFile()
      const A = user("A")
      const ins = { type: "agent/inbox/spliced", seq: 0, time: 7, data: { target: "next-turn", start: 0, inserted: [A] } }
      const ts = { type: "turn/start", seq: 1, time: 8, data: { turn: 1 } }
      const clm = { type: "agent/inbox/spliced", seq: 2, time: 9, data: { target: "next-turn", start: 0, removedCount: 1, inserted: [] } }
      const ss = { type: "step/start", seq: 3, time: 10, data: { turn: 1, step: 1 } }
      const um = { type: "user/message", seq: 4, time: 11, data: A, surfaceOp: "append" }
      const a = [ins, ts, clm] as unknown as ReadonlyArray<SessionEvent>
      const b = [ins, ts, clm, ss, um] as unknown as ReadonlyArray<SessionEvent>
      yield* withStore(file, (store) => Effect.zipRight(store.create(header("a"), a), store.create(header("b"), b)))
      for (const [session, log, closers] of [["a", a, ["TE(1,interrupted)"]], ["b", b, ["SE(1,1)", "TE(1,interrupted)"]]] as const) {
        yield* Effect.gen(function*() {
          const es = yield* events
          expect(es.map(notation).slice(log.length)).toEqual([...closers, "ES"])
          expect(es.slice(log.length, log.length + closers.length).map((e) => [e.seq, e.time])).toEqual(
            closers.map((_, i) => [log.length + i, log[log.length - 1]!.time])
          )
          expect(fileRows(file, session)).toEqual(json(es))
          yield* closeOnFile(file, session)
        }).pipe(Effect.provide(onFile(file, [], { sessionId: session, resume: true })), Effect.scoped)
      }
    }))

  it.scoped("P43 (e): on SQLite, boundaries after completed, blocked, aborted and error turns are accepted", () =>
    Effect.gen(function*() {
      const file = freshFile()
      yield* Effect.gen(function*() {
        const driver = yield* Driver
        const preStep = yield* PreStep
        yield* preStep.register((input, next) => input.turn === 2 ? Effect.succeed(PreStepDecision.reject("no")) : next())
        for (const id of ["A", "B", "C"]) {
          yield* driver.followup(user(id))
          yield* driver.whenIdle
        }
        yield* driver.followup(user("D"))
        yield* untilEvent((e) => e.type === "assistant/chunk" && (e.data as any).turn === 4)
        yield* driver.cancel(CancelCause.user)
        yield* closeOnFile(file)
      }).pipe(
        Effect.provide(onFile(file, [ScriptedModel.text("one"), ScriptedModel.fail({ message: "x", code: "AUTH" }), ScriptedModel.hang({ text: "h" })])),
        Effect.scoped
      )
      const stored = fileRows(file)
      const ends = stored.filter((e) => e.type === "turn/end")
      expect(ends.map((e) => (e.data as any).reason.kind)).toEqual(["completed", "blocked", "error", "aborted"])
      yield* withStore(file, (store) =>
        Effect.forEach(ends, (e) =>
          Effect.gen(function*() {
            const child = yield* forkSession({ source: sid("s"), boundary: e.seq }).pipe(Effect.provideService(SessionStore, store))
            expect((yield* store.load(child)).header.seedLength).toBe(e.seq + 1)
            expect(fileRows(file, child).map(notation)).toEqual([...stored.slice(0, e.seq + 1).map(notation), "ES"])
          })))
    }))

  it.scoped("P43 (a, b, d): fork on the SQLite store; the child is read back from a reopened file and runs turn 2 with RH(resume)", () =>
    Effect.gen(function*() {
      const file = freshFile()
      const source = yield* Effect.gen(function*() {
        const driver = yield* Driver
        yield* driver.followup(user("A"))
        yield* driver.whenIdle
        yield* driver.inject(plugin("C"))
        yield* (yield* SessionLog).flush
        return yield* events
      }).pipe(Effect.provide(onFile(file, [ScriptedModel.text("one")])), Effect.scoped)
      expect(fileRows(file)).toEqual(json(source))
      // (a) and (b) on a store opened afresh on the file.
      const childId = yield* withStore(file, (store) =>
        Effect.gen(function*() {
          yield* store.create(header("empty"), [])
          const fork = (input: Parameters<typeof forkSession>[0]) => forkSession(input).pipe(Effect.provideService(SessionStore, store))
          expect(yield* fork({ source: sid("empty"), childId: sid("child0") })).toBe("child0")
          return yield* fork({ source: sid("s") })
        }))
      const reopened = yield* withStore(file, (store) =>
        Effect.all([store.load(sid("child0")), store.load(childId), store.load(sid("nope")).pipe(Effect.flip)]))
      expect(reopened[0].events.map(notation)).toEqual(["ES"])
      expect(reopened[0].header).toMatchObject({ seedLength: 0, parent: { sessionId: "empty", boundary: -1 } })
      expect(fileRows(file, "child0").map(notation)).toEqual(["ES"])
      const child = reopened[1]
      expect(child.events.slice(0, source.length)).toEqual(source)
      expect(child.events.map(notation).slice(source.length)).toEqual(["ES"])
      expect(child.header).toMatchObject({ seedLength: source.length, parent: { sessionId: "s", boundary: source.length - 1 } })
      expect(fileRows(file, childId)).toEqual(json(child.events))
      expect(reopened[2]).toBeInstanceOf(SessionNotFound)
      // (d) An agent on the child, over a new store on the file.
      yield* Effect.gen(function*() {
        const inbox = yield* Inbox
        const driver = yield* Driver
        expect(yield* inbox.nextStep).toEqual([])
        yield* driver.followup(user("B"))
        yield* driver.whenIdle
        expect((yield* shape).slice(source.length + 1, source.length + 7)).toEqual(
          ["INS(nt,0,[B])", "TS(2)", "CLM(nt,0,1)", "SS(2,1)", "UM(B)", "RH(resume)"]
        )
        yield* closeOnFile(file, childId)
      }).pipe(Effect.provide(onFile(file, [ScriptedModel.text("two")], { sessionId: childId, resume: true })), Effect.scoped)
      // The source keeps its pending [C].
      yield* Effect.gen(function*() {
        expect(ids(yield* (yield* Inbox).nextStep)).toEqual(["C"])
      }).pipe(Effect.provide(onFile(file, [], { resume: true })), Effect.scoped)
    }))

  it.scoped("P43 (c): fork errors against a SQLite source holding an open turn", () =>
    Effect.gen(function*() {
      const file = freshFile()
      const source = yield* Effect.gen(function*() {
        const driver = yield* Driver
        yield* driver.followup(user("A"))
        yield* driver.whenIdle
        yield* driver.followup(user("B"))
        yield* untilEvent((e) => e.type === "tool/call")
        yield* (yield* SessionLog).flush
        return yield* events
      }).pipe(
        Effect.provide(agentOver(
          [ScriptedModel.text("one"), ScriptedModel.response({ toolCalls: [{ id: "c1", name: "slow", arguments: {} }] })],
          { tools: [hangingTool] }
        ).pipe(Layer.provideMerge(SessionStore.layerMemory))),
        Effect.scoped
      )
      const at = (n: string) => source.findIndex((e) => notation(e) === n)
      yield* withStore(file, (store) =>
        Effect.gen(function*() {
          yield* store.create(header("src"), source)
          yield* store.create(header("taken"), [])
          const fork = (boundary?: number, childId?: string) =>
            Effect.flip(forkSession({
              source: sid("src"),
              ...(boundary !== undefined ? { boundary } : {}),
              ...(childId !== undefined ? { childId: sid(childId) } : {})
            }).pipe(Effect.provideService(SessionStore, store)))
          for (const boundary of [undefined, at("TS(2)"), at("SS(2,1)"), at("UM(B)"), at("AM"), at("TC(c1)")]) {
            const error = yield* fork(boundary)
            expect(error, String(boundary)).toBeInstanceOf(ForkError)
            expect(error, String(boundary)).toMatchObject({ reason: "open-turn" })
          }
          for (const boundary of [-1, 0.5, source.length]) {
            expect(yield* fork(boundary), String(boundary)).toMatchObject({ _tag: "ForkError", reason: "invalid-boundary" })
          }
          expect(yield* fork(0.5, "taken")).toMatchObject({ _tag: "ForkError", reason: "child-exists" })
          const ok = yield* forkSession({ source: sid("src"), boundary: at("TE(1,completed)"), childId: sid("ok") }).pipe(
            Effect.provideService(SessionStore, store)
          )
          expect(ok).toBe("ok")
        }))
      const rows = fileRows(file, "ok")
      expect(rows.map(notation)).toEqual([...source.slice(0, at("TE(1,completed)") + 1).map(notation), "ES"])
      expect(rows.slice(0, -1)).toEqual(json(source.slice(0, at("TE(1,completed)") + 1)))
      const db = new Database(file, { readonly: true })
      const sessions = db.prepare("SELECT id FROM sessions ORDER BY id").all() as Array<{ readonly id: string }>
      db.close()
      expect(sessions.map((s) => s.id)).toEqual(["ok", "src", "taken"])
    }))
})

describe("P44-P45 on SQLite", () => {
  it.scoped("P44: a surface replacement is written to the file; rejections write nothing; the reopened log derives S where X was", () =>
    Effect.gen(function*() {
      const file = freshFile()
      const replaced = yield* Effect.gen(function*() {
        const driver = yield* Driver
        const log = yield* SessionLog
        yield* driver.followup(user("X"))
        yield* driver.whenIdle
        const before = yield* events
        const s = before.find((e) => e.type === "user/message")!.seq
        const am = before.find((e) => e.type === "assistant/message")!.seq
        const S = user("S", "summary")
        const reject = (input: Parameters<typeof log.append>[0]) => Effect.flip(log.append(input))
        expect(yield* reject({ type: "user/message", data: S, surfaceOp: { op: "replace", start: 0, end: 0 }, sourceEventSeqs: [0] })).toBeInstanceOf(InvalidEvent)
        expect(yield* reject({ type: "user/message", data: S, surfaceOp: { op: "replace", start: am, end: s }, sourceEventSeqs: [s, am] })).toBeInstanceOf(InvalidEvent)
        expect(yield* reject({ type: "user/message", data: S, surfaceOp: { op: "replace", start: s, end: s }, sourceEventSeqs: [0] })).toBeInstanceOf(InvalidEvent)
        expect(yield* reject({ type: "user/message", data: S, surfaceOp: "append" })).toBeInstanceOf(InvalidEvent)
        expect(yield* reject({ type: "user/message", data: user("X", "again"), surfaceOp: { op: "replace", start: s, end: s }, sourceEventSeqs: [s] })).toBeInstanceOf(DuplicateMessage)
        expect(yield* events).toEqual(before)
        yield* log.flush
        expect(fileRows(file)).toEqual(json(before))
        const appended = yield* log.append({ type: "user/message", data: S, surfaceOp: { op: "replace", start: s, end: s }, sourceEventSeqs: [s] })
        expect(appended.seq).toBe(before.length)
        expect((yield* log.messages).map(token)).toEqual(["summary", "ok"])
        const surface = yield* log.surface
        expect(surface[0]).toBe(appended.seq)
        expect(surface).not.toContain(s)
        expect((yield* events).some((e) => e.seq === s && e.type === "user/message")).toBe(true)
        // Acknowledged ⇒ durable.
        expect(fileRows(file).at(-1)).toEqual(json(appended))
        yield* closeOnFile(file)
        return { s, seq: appended.seq }
      }).pipe(Effect.provide(onFile(file, [ScriptedModel.text("ok")])), Effect.scoped)
      const stored = fileRows(file)
      expect(deriveMessages(stored).map(token)).toEqual(["summary", "ok"])
      yield* Effect.gen(function*() {
        const log = yield* SessionLog
        expect((yield* log.messages).map(token)).toEqual(["summary", "ok"])
        const surface = yield* log.surface
        expect(surface[0]).toBe(replaced.seq)
        expect(surface).not.toContain(replaced.s)
        yield* closeOnFile(file)
      }).pipe(Effect.provide(onFile(file, [], { resume: true })), Effect.scoped)
    }))

  it.scoped("P45: on SQLite, live compaction/start {turn: 1} while idle fails InvalidEvent {rule: R6} and writes nothing", () =>
    Effect.gen(function*() {
      const file = freshFile()
      yield* Effect.gen(function*() {
        const log = yield* SessionLog
        const driver = yield* Driver
        yield* driver.followup(user("A"))
        yield* driver.whenIdle
        yield* log.flush
        const before = yield* events
        const error = yield* Effect.flip(log.append({ type: "compaction/start", data: { turn: 1 } }))
        expect(error).toBeInstanceOf(InvalidEvent)
        expect(error).toMatchObject({ rule: "R6" })
        expect(yield* events).toEqual(before)
        yield* closeOnFile(file)
      }).pipe(Effect.provide(onFile(file, [ScriptedModel.text("ok")])), Effect.scoped)
    }))

  it.scoped("P45: opening a stored SQLite log that violates a rule fails MalformedLog and leaves the file as it was", () =>
    Effect.gen(function*() {
      const file = freshFile()
      const A = user("A")
      const bad = [
        { type: "agent/inbox/spliced", seq: 0, time: 0, data: { target: "next-turn", start: 0, inserted: [A] } },
        { type: "turn/start", seq: 1, time: 0, data: { turn: 1 } },
        { type: "step/start", seq: 2, time: 0, data: { turn: 1, step: 1 } }
      ] as unknown as ReadonlyArray<SessionEvent>
      expect(checkLog(bad).map((v) => v.rule)).toContain("R7")
      yield* withStore(file, (store) => store.create(header("bad"), bad))
      const exit = yield* Effect.exit(Effect.scoped(Layer.build(onFile(file, [], { sessionId: "bad", resume: true }))))
      expect(Exit.isFailure(exit) && Option.getOrUndefined(Cause.failureOption(exit.cause))).toBeInstanceOf(MalformedLog)
      expect(fileRows(file, "bad")).toEqual(json(bad))
    }))
})