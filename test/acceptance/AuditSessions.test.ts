/**
 * Acceptance audit of SPEC 4.6 (tool result mapping), 7 (cancel windows), 8.10 (Sessions, SQLite
 * store), written against the package root only.
 */
import { describe, expect, it } from "@effect/vitest"
import { Context, Data, Deferred, Effect, Exit, Layer, Schema, Scope, Stream, TestClock } from "effect"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import type { UserMessage } from "../../src/index.js"
import {
  AgentDisposed,
  CancelCause,
  Driver,
  Hooks,
  Inbox,
  PersistenceError,
  PreStep,
  ScriptedModel,
  SessionExists,
  SessionId,
  SessionLog,
  SessionNotFound,
  Sessions,
  SessionStore,
  SqliteSessionStore,
  Tool,
  Tools
} from "../../src/index.js"
import {
  agentOver,
  closeOut,
  dataOfType,
  events,
  notation,
  plugin,
  recordLive,
  requests,
  scenario,
  settle,
  shape,
  texts,
  until,
  untilEvent,
  user
} from "./AuditHarness.js"
import { gate, open } from "./AuditHarness.js"

const empty = Schema.Struct({})
const resultText = (d: any) => d.message.content[0].content[0].text as string

const plainError = new Error("plain went wrong")

class Boom extends Data.TaggedError("Boom")<{ readonly message: string; readonly code: string }> {}

describe("4.6 result mapping", () => {
  const tools = [
    Tool.make("typed", { description: "", parameters: empty, execute: () => Effect.fail(new Boom({ message: "typed went wrong", code: "E_BOOM" })) }),
    Tool.make("plain", { description: "", parameters: empty, execute: () => Effect.fail(plainError) }),
    Tool.make("defect", { description: "", parameters: empty, execute: () => Effect.die(new Error("died badly")) }),
    Tool.make("args", { description: "", parameters: Schema.Struct({ n: Schema.Number }), execute: ({ n }) => Effect.succeed(`n=${n}`) }),
    Tool.make("none", { description: "", parameters: empty, execute: () => Effect.succeed({ content: [{ type: "text" as const, text: "flagged" }], isError: true, meta: { k: [1] } }) }),
    Tool.make("dupctx", { description: "", parameters: empty, execute: () => Effect.succeed({ content: "x", additionalContexts: [user("A")] }) })
  ]
  it.scoped("4.6: each outcome maps to its text, isError and error {name, code}; meta is stored", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      const results = yield* dataOfType("tool/result")
      const byId = Object.fromEntries(results.map((d) => [d.message.content[0].toolCallId, d]))
      expect(resultText(byId.c1)).toBe("Error: typed went wrong")
      expect(byId.c1.error).toEqual({ name: "Boom", code: "E_BOOM" })
      expect(resultText(byId.c2)).toBe("Error: plain went wrong")
      expect(byId.c2.error).toEqual({ name: "Error", code: "TOOL_ERROR" })
      expect(resultText(byId.c3)).toBe("Error: died badly")
      expect(byId.c3.error).toEqual({ name: "ToolDefect", code: "TOOL_DEFECT" })
      expect(resultText(byId.c4)).toBe("Error: unknown tool ghost")
      expect(byId.c4.error).toEqual({ name: "UnknownToolError", code: "UNKNOWN_TOOL" })
      expect(resultText(byId.c5)).toMatch(/^Error: invalid arguments for args: /)
      expect(byId.c5.error).toEqual({ name: "ToolArgumentsError", code: "INVALID_ARGUMENTS" })
      expect(resultText(byId.c6)).toMatch(/^Error: invalid arguments for args: /)
      expect(byId.c7.message.content[0].isError).toBe(true)
      expect(byId.c7.error).toBeUndefined()
      expect(byId.c7.meta).toEqual({ k: [1] })
      expect(resultText(byId.c8)).toMatch(/^Error: tool produced invalid output: /)
      expect(byId.c8.error).toEqual({ name: "ToolOutputError", code: "INVALID_TOOL_OUTPUT" })
      expect(byId.c1.message.source).toEqual({ kind: "tool", callId: "c1" })
      expect((yield* shape).filter((s) => s.startsWith("INS"))).toEqual(["INS(nt,0,[A])"])
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario(
      [
        ScriptedModel.response({
          toolCalls: [
            { id: "c1", name: "typed", arguments: {} },
            { id: "c2", name: "plain", arguments: {} },
            { id: "c3", name: "defect", arguments: {} },
            { id: "c4", name: "ghost", arguments: {} },
            { id: "c5", name: "args", arguments: { n: "x" } },
            { id: "c6", name: "args", arguments: "{not json" },
            { id: "c7", name: "none", arguments: "" },
            { id: "c8", name: "dupctx", arguments: {} }
          ]
        }),
        ScriptedModel.text("done")
      ],
      { tools }
    ))))

  const ctxTool = Tool.make("ctx", {
    description: "",
    parameters: empty,
    execute: (_p, ctx) => Effect.as(ctx.deferContext(plugin("deferred")), { content: "ok", additionalContexts: [plugin("returned")] })
  })
  it.scoped("4.6: deferContext messages precede additionalContexts", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      const s = yield* shape
      expect(s.slice(s.indexOf("TR(c1)"), s.indexOf("TR(c1)") + 2)).toEqual(["TR(c1)", "INS(ns,0,[deferred,returned])"])
      expect(yield* texts).toEqual(["A", "deferred", "returned"])
    }).pipe(Effect.provide(scenario(
      [ScriptedModel.response({ toolCalls: [{ id: "c1", name: "ctx", arguments: {} }] }), ScriptedModel.text("done")],
      { tools: [ctxTool] }
    ))))

  const quick = Tool.make("quick", { description: "", parameters: empty, execute: () => Effect.succeed("ok") })
  it.scoped("4.6 (D7): a ToolPost failure gives TOOL_INTERNAL_ERROR results, SE, turn error and one agent/error carrying it", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const hooks = yield* Hooks
      const live = yield* recordLive
      const failure = new Error("post broke")
      yield* hooks.onToolPost((input, next) => input.callId === "c1" ? Effect.fail(failure) : next())
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      const s = yield* shape
      expect(s.slice(s.indexOf("AM"))).toEqual(["AM", "TC(c1)", "TR?(c1)", "TC(c2)", "TR?(c2)", "SE(1,1)", "TE(1,error(TOOL_INTERNAL_ERROR))"])
      const results = yield* dataOfType("tool/result")
      expect(results.map((d) => d.error)).toEqual([
        { name: "ToolSchedulerError", code: "TOOL_INTERNAL_ERROR" },
        { name: "ToolSchedulerError", code: "TOOL_INTERNAL_ERROR" }
      ])
      expect(resultText(results[0])).toBe("Error: tool call failed internally")
      const errors = (yield* live).filter((e) => e.type === "agent/error")
      expect(errors).toHaveLength(1)
      expect((errors[0] as any).error).toBe(failure)
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario(
      [ScriptedModel.response({ toolCalls: [{ id: "c1", name: "quick", arguments: {} }, { id: "c2", name: "quick", arguments: {} }] })],
      { tools: [quick] }
    ))))
})

describe("7 cancel windows", () => {
  const holder: { driver?: Context.Tag.Service<Driver> } = {}
  const selfCancel = Tool.make("self", {
    description: "",
    parameters: empty,
    execute: () => Effect.as(Effect.orDie(Effect.suspend(() => holder.driver!.cancel(CancelCause.hook("tool")))), "ok")
  })
  it.scoped("K13/4.6: a body that cancels and then completes yields ABORTED; ToolPost sees aborted: true", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const hooks = yield* Hooks
      holder.driver = driver
      const flags: Array<boolean> = []
      yield* hooks.onToolPost((input, next) => Effect.zipRight(Effect.sync(() => flags.push(input.aborted)), next()))
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect((yield* shape).slice(-4)).toEqual(["TC(c1)", "TR✗(c1)", "SE(1,1)", "TE(1,aborted(hook))"])
      expect((yield* dataOfType("turn/end"))[0]!.reason).toEqual({ kind: "aborted", reason: { kind: "hook", reason: "tool" } })
      expect(flags).toEqual([true])
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario(
      [ScriptedModel.response({ toolCalls: [{ id: "c1", name: "self", arguments: {} }] })],
      { tools: [selfCancel] }
    ))))

  it.scoped("K13: a broad cancel issued from a log observer is not lost", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const log = yield* SessionLog
      const inbox = yield* Inbox
      yield* Effect.forkScoped(Stream.runForEach(log.stream(0), (e) =>
        e.type === "assistant/chunk" ? Effect.ignore(driver.cancel(CancelCause.user)) : Effect.void))
      yield* driver.followup(user("A"))
      yield* driver.followup(user("B"))
      yield* driver.whenIdle
      expect((yield* shape).filter((s) => s.startsWith("TE") || s.startsWith("CAN"))).toEqual(["CAN(nt,0,1)", "TE(1,aborted(user))"])
      expect(yield* inbox.hasPending).toBe(false)
    }).pipe(Effect.provide(scenario([ScriptedModel.hang({ text: "x" })]))))

  it.scoped("K11: a keepInbox cancel right after TX-CLOSE continued the chain aborts the new turn with no step", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const inbox = yield* Inbox
      yield* (yield* PreStep).register((input, next) => input.turn === 2 ? Effect.zipRight(Effect.never, next()) : next())
      yield* driver.followup(user("A"))
      yield* driver.followup(user("B"))
      yield* driver.followup(user("C"))
      yield* untilEvent((e) => e.type === "turn/start" && (e.data as any).turn === 2)
      yield* driver.cancel(CancelCause.user, { keepInbox: true })
      yield* driver.whenIdle
      const s = yield* shape
      expect(s.slice(s.indexOf("TS(2)"))).toEqual(["TS(2)", "CLM(nt,0,1)", "TE(2,aborted(user))"])
      expect((yield* inbox.nextTurn).map((m) => m.id)).toEqual(["C"])
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario([ScriptedModel.text("a")]))))

  const G78 = gate()
  const started78: Array<string> = []
  const masked = Tool.make("masked", {
    description: "",
    parameters: empty,
    mode: "parallel",
    execute: (_p, ctx) => Effect.zipRight(Effect.sync(() => started78.push(ctx.callId)), Effect.uninterruptible(Effect.as(Deferred.await(G78), "done")))
  })
  it.scoped("7.5: a broad cancel after a keepInbox cancel drops the later contexts of the draining step", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const inbox = yield* Inbox
      const hooks = yield* Hooks
      yield* hooks.onToolPost((input, next) =>
        Effect.map(next(), (o) => ({ ...o, additionalContexts: [...o.additionalContexts, plugin(`ctx-${input.callId}`)] })))
      yield* driver.followup(user("A"))
      yield* until(Effect.sync(() => started78.length === 2))
      yield* driver.cancel(CancelCause.user, { keepInbox: true })
      yield* settle
      yield* driver.cancel(CancelCause.parent)
      yield* open(G78)
      yield* driver.whenIdle
      const s = yield* shape
      expect(s.slice(s.indexOf("TC(c1)"))).toEqual([
        "TC(c1)", "TC(c2)", "TR✗(c1)", "INS(ns,0,[ctx-c1])", "CAN(ns,0,1)", "TR✗(c2)", "INS(ns,0,[ctx-c2])", "CAN(ns,0,1)",
        "SE(1,1)", "TE(1,aborted(user))"
      ])
      expect(yield* inbox.hasPending).toBe(false)
      expect(yield* closeOut).toEqual([])
    }).pipe(Effect.provide(scenario(
      [ScriptedModel.response({ toolCalls: [{ id: "c1", name: "masked", arguments: {} }, { id: "c2", name: "masked", arguments: {} }] })],
      { tools: [masked] }
    ))))

  it.scoped("K6: a cancel during the backoff sleep keeps the RT and makes no further attempt", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "llm/retry")
      yield* driver.cancel(CancelCause.user)
      yield* driver.whenIdle
      expect((yield* shape).slice(-4)).toEqual(["CH(finish error)", "RT(1)", "SE(1,1)", "TE(1,aborted(user))"])
      expect(yield* requests).toHaveLength(1)
    }).pipe(Effect.provide(scenario([ScriptedModel.fail({ message: "x", code: "RATE_LIMIT", status: 429 }), ScriptedModel.text("y")]))))

  const G4 = gate()
  it.scoped("K4: a cancel during the request hook leaves SS, UM, SE, TE and no request", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const hooks = yield* Hooks
      yield* hooks.onRequest((_i, next) => Effect.zipRight(Deferred.await(G4), next()))
      yield* driver.followup(user("A"))
      yield* untilEvent((e) => e.type === "user/message")
      yield* driver.cancel(CancelCause.user)
      yield* driver.whenIdle
      expect(yield* shape).toEqual(["INS(nt,0,[A])", "TS(1)", "CLM(nt,0,1)", "SS(1,1)", "UM(A)", "SE(1,1)", "TE(1,aborted(user))"])
      expect(yield* requests).toEqual([])
    }).pipe(Effect.provide(scenario([ScriptedModel.text("x")]))))
})

describe("8.10 Sessions", () => {
  const sessions = Sessions.layer({ model: { provider: "p", model: "m" }, idleTimeToLive: "1 minute" })
  const deps = (script: Parameters<typeof ScriptedModel.layer>[0]) =>
    Layer.mergeAll(SessionStore.layerMemory, ScriptedModel.layer(script), Tools.layer())

  it.scoped("8.10: open creates or resumes, shares one live agent, and disposes it after idleTimeToLive without users", () =>
    Effect.gen(function*() {
      const s = yield* Sessions
      const store = yield* SessionStore
      const id = SessionId.make("one")
      const scope1 = yield* Scope.make()
      const ctx1 = yield* Scope.extend(s.open(id), scope1)
      expect(yield* store.exists(id)).toBe(true)
      const scope2 = yield* Scope.make()
      const ctx2 = yield* Scope.extend(s.open(id), scope2)
      const driver = Context.get(ctx1, Driver)
      expect(Context.get(ctx2, Driver)).toBe(driver)
      yield* driver.inject(plugin("C"))
      yield* Scope.close(scope1, Exit.void)
      yield* Scope.close(scope2, Exit.void)
      yield* TestClock.adjust("30 seconds")
      yield* settle
      expect(Exit.isSuccess(yield* Effect.exit(driver.inject(plugin("D"))))).toBe(true)
      yield* TestClock.adjust("31 seconds")
      yield* until(Effect.map(Effect.exit(driver.inject(plugin("E"))), (exit) => Exit.isFailure(exit)))
      expect(yield* Effect.flip(driver.inject(plugin("F")))).toBeInstanceOf(AgentDisposed)
      const again = yield* Scope.extend(s.open(id), yield* Scope.make())
      const inbox = Context.get(again, Inbox)
      expect((yield* inbox.nextStep).map((m) => m.id)).toEqual(["C", "D"])
      expect((yield* Context.get(again, SessionLog).events).map(notation)).toEqual(["INS(ns,0,[C])", "INS(ns,1,[D])", "ES"])
    }).pipe(Effect.provide(sessions.pipe(Layer.provideMerge(deps([]))))))

  it.scoped("8.10 / 6.6: Sessions.fork flushes a source that is open in this process", () =>
    Effect.gen(function*() {
      const s = yield* Sessions
      const store = yield* SessionStore
      const id = SessionId.make("src")
      const ctx = yield* s.open(id)
      const driver = Context.get(ctx, Driver)
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      const total = (yield* Context.get(ctx, SessionLog).events).length
      const child = yield* s.fork({ source: id })
      expect((yield* store.load(child)).header.seedLength).toBe(total)
    }).pipe(Effect.provide(sessions.pipe(Layer.provideMerge(deps([ScriptedModel.text("a")]))))))
})

describe("8.10 SqliteSessionStore", () => {
  const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "tiller-audit-"))
  it.scoped("8.10: the SQLite store keeps the contract: create, exists, list, load, append with the seq check", () =>
    Effect.gen(function*() {
      const store = yield* SessionStore
      const id = SessionId.make("q")
      const header = { formatVersion: 1, sessionId: id, createdAt: 5, seedLength: 0 }
      yield* store.create(header, [])
      expect(yield* Effect.flip(store.create(header, []))).toBeInstanceOf(SessionExists)
      expect(yield* store.exists(id)).toBe(true)
      expect(yield* Effect.flip(store.load(SessionId.make("none")))).toBeInstanceOf(SessionNotFound)
      const A = user("A")
      const e0 = { type: "agent/inbox/spliced", seq: 0, time: 1, data: { target: "next-turn", start: 0, inserted: [A] } } as any
      const e1 = { type: "x/ext", seq: 1, time: 2, data: { nested: [1, "two", null] }, ignorable: true } as any
      yield* store.append(id, [e0])
      expect(yield* Effect.flip(store.append(id, [e0]))).toBeInstanceOf(PersistenceError)
      yield* store.append(id, [e1])
      const loaded = yield* store.load(id)
      expect(loaded.header).toEqual(header)
      expect(loaded.events).toEqual([e0, e1])
      expect((yield* store.list).map((h) => h.sessionId)).toEqual(["q"])
    }).pipe(Effect.provide(SqliteSessionStore.layer({ filename: Path.join(dir, "a.db") }))))

  it.scoped("8.10: an agent over the SQLite store runs P1 and resumes", () =>
    Effect.gen(function*() {
      const filename = Path.join(dir, "b.db")
      const first = Effect.gen(function*() {
        const driver = yield* Driver
        yield* driver.followup(user("A"))
        yield* driver.whenIdle
        yield* driver.inject(plugin("C"))
        return (yield* events).length
      }).pipe(Effect.provide(agentOver([ScriptedModel.text("hi")]).pipe(Layer.provide(SqliteSessionStore.layer({ filename })))), Effect.scoped)
      const length = yield* first
      yield* Effect.gen(function*() {
        const es = yield* events
        expect(es.length).toBe(length + 1)
        expect(notation(es[es.length - 1]!)).toBe("ES")
        expect(((yield* (yield* Inbox).nextStep) as ReadonlyArray<UserMessage>).map((m) => m.id)).toEqual(["C"])
      }).pipe(Effect.provide(agentOver([], { resume: true }).pipe(Layer.provide(SqliteSessionStore.layer({ filename })))), Effect.scoped)
    }))

  it.scoped("6.1: both stores' load refuses another format version with UnsupportedLogVersion; an unusable file fails the layer with PersistenceError", () =>
    Effect.gen(function*() {
      for (const layer of [SessionStore.layerMemory, SqliteSessionStore.layer({ filename: Path.join(dir, "c.db") })]) {
        const store = Context.get(yield* Layer.build(layer as Layer.Layer<SessionStore, PersistenceError>), SessionStore)
        const id = SessionId.make("v2")
        yield* store.create({ formatVersion: 2 as 1, sessionId: id, createdAt: 0, seedLength: 0 }, [])
        expect(yield* Effect.flip(store.load(id))).toMatchObject({ _tag: "UnsupportedLogVersion", found: 2, supported: 1 })
      }
      const exit = yield* Effect.exit(Layer.build(SqliteSessionStore.layer({ filename: Path.join(dir, "missing", "x.db") })))
      expect(Exit.isFailure(exit) && exit.cause._tag === "Fail" && exit.cause.error).toBeInstanceOf(PersistenceError)
    }))
})
