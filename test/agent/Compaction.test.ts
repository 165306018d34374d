/**
 * Compaction through an agent (SPEC 6.7, 3.6): seams, manual compaction in maintenance, numeric
 * brackets inside a turn, derived history, fail-stop with compaction.
 */
import { describe, expect, it } from "@effect/vitest"
import { Context, Deferred, Duration, Effect, Exit, Fiber, Option, Schema, Scope } from "effect"
import {
  CancelCause,
  checkLog,
  deriveMessages,
  Driver,
  DuplicateMessage,
  InvalidEvent,
  MemoryStoreControl,
  PersistenceError,
  PreStep,
  RequestErrorAction,
  ScriptedModel,
  SessionId,
  SessionLog,
  SessionStore,
  Tool,
  userMessage
} from "../../src/index.js"
import {
  agentTest,
  closeOut,
  events,
  plugin,
  recordLive,
  requests,
  scenario,
  settle,
  shape,
  token,
  until,
  untilEvent,
  user
} from "./harness.js"
import { buildIn, buildOwn } from "./stores.js"
import { empty } from "./toolFixtures.js"

const summaryCompaction = (id: string, text = "summary") =>
  userMessage({ id, text, source: { kind: "compaction", by: "test" } })

/**
 * Appends `message` through `log` in place of the first two surface entries, citing them (and the
 * `moreSources` seqs) as its sources.
 */
const replaceFirstTwo = (
  log: Context.Tag.Service<SessionLog>,
  surface: ReadonlyArray<number>,
  message: ReturnType<typeof userMessage>,
  moreSources: ReadonlyArray<number> = []
) =>
  log.append({
    type: "user/message",
    data: message,
    surfaceOp: { op: "replace", start: surface[0]!, end: surface[1]! },
    sourceEventSeqs: [surface[0]!, surface[1]!, ...moreSources]
  })

/** Sends each of `ids` as a follow-up and waits until the agent is idle before the next. */
const turnsOf = (driver: Context.Tag.Service<typeof Driver>, ...ids: ReadonlyArray<string>) =>
  Effect.forEach(ids, (id) => Effect.zipRight(driver.followup(user(id)), driver.whenIdle), { discard: true })

let logRef: Context.Tag.Service<SessionLog> | undefined

/** A tool `name` whose body runs `use` with the test's log and its surface, then answers "ok". */
const surfaceTool = (
  name: string,
  use: (log: Context.Tag.Service<SessionLog>, surface: ReadonlyArray<number>) => Effect.Effect<void, unknown>
) =>
  Tool.make(name, {
    description: "",
    parameters: Schema.Struct({}),
    execute: () =>
      Effect.as(Effect.flatMap(Effect.suspend(() => logRef!.surface), (surface) => use(logRef!, surface)), "ok")
  })

// replace the first turn's nodes [UM(A), AM(a)]
const compactor = surfaceTool(
  "compact",
  (log, surface) => Effect.orDie(Effect.asVoid(replaceFirstTwo(log, surface, summaryCompaction("S"))))
)

let probeResult: unknown = undefined
// [UM(A) .. AM(call)] where AM(call) was written inside the open step (its result is not on the surface yet)
const prober = surfaceTool("probe", (log, surface) =>
  Effect.map(
    Effect.flip(log.append({
      type: "user/message",
      data: summaryCompaction("S"),
      surfaceOp: { op: "replace", start: surface[0]!, end: surface[surface.length - 1]! },
      sourceEventSeqs: [...surface]
    })),
    (error) => {
      probeResult = error
    }
  ))

/**
 * Forks a maintenance task that opens a null compaction bracket and hangs; its interruption closes
 * the bracket with `error: { message }`. Returns the task once the bracket is logged.
 */
const hangingCompaction = (
  driver: Context.Tag.Service<typeof Driver>,
  log: Context.Tag.Service<typeof SessionLog>,
  message: string
) =>
  Effect.gen(function*() {
    const task = yield* Effect.fork(driver.runMaintenance(
      Effect.gen(function*() {
        yield* log.append({ type: "compaction/start", data: { turn: null } })
        return yield* Effect.never
      }).pipe(Effect.onInterrupt(() =>
        Effect.orDie(log.append({ type: "compaction/end", data: { turn: null, error: { message } } }))
      ))
    ))
    yield* Effect.provideService(
      untilEvent((e) =>
        e.type === "compaction/start"
      ),
      SessionLog,
      log
    )
    return task
  })

describe("6.7 compaction seams", () => {
  agentTest(
    "6.7: automatic compaction in a pre-step listener with a numeric bracket; the step's request sees the summary",
    scenario([ScriptedModel.text("a"), ScriptedModel.text("b")]),
    function*({ driver, log }) {
      yield* (yield* PreStep).register((input, next) =>
        input.turn === 2
          ? Effect.gen(function*() {
            const surface = yield* log.surface
            const start = yield* log.append({ type: "compaction/start", data: { turn: 2 } })
            yield* replaceFirstTwo(log, surface, summaryCompaction("S"), [start.seq])
            yield* log.append({ type: "compaction/end", data: { turn: 2 } })
            return yield* next()
          })
          : next()
      )
      yield* turnsOf(driver, "A", "B")
      const s = yield* shape
      expect(s.slice(s.indexOf("TS(2)"), s.indexOf("TS(2)") + 7)).toEqual([
        "TS(2)",
        "CLM(nt,0,1)",
        "compaction/start",
        "UM~(S)",
        "compaction/end",
        "SS(2,1)",
        "UM(B)"
      ])
      expect((yield* requests)[1]!.messages.map(token)).toEqual(["summary", "B"])
      expect(yield* closeOut).toEqual([])
    }
  )

  agentTest(
    "6.7 / 4.5 G7: overflow recovery replaces history in a request-error listener; the retried attempt sees it",
    scenario([
      ScriptedModel.text("a"),
      ScriptedModel.fail({ message: "too long", code: "CONTEXT_OVERFLOW", status: 400 }),
      ScriptedModel.text("b")
    ]),
    function*({ driver, log, hooks }) {
      yield* hooks.onRequestError((input, next) =>
        input.turn === 2 && input.failure.code === "CONTEXT_OVERFLOW"
          ? Effect.gen(function*() {
            const surface = yield* log.surface
            yield* replaceFirstTwo(log, surface, summaryCompaction("S"))
            return RequestErrorAction.retry(Duration.zero)
          })
          : next()
      )
      yield* turnsOf(driver, "A", "B")
      const rs = yield* requests
      expect(rs.map((r) => r.messages.map(token))).toEqual([["A"], ["A", "a", "B"], ["summary", "B"]])
      expect(rs.map((r) => [r.turn, r.attempt])).toEqual([[1, 1], [2, 1], [2, 2]])
      expect((yield* shape).filter((x) => x.startsWith("RT"))).toEqual(["RT(1)"])
      expect(yield* closeOut).toEqual([])
    }
  )

  const big = Tool.make("big", {
    description: "",
    parameters: empty,
    execute: () => Effect.succeed("a very long output")
  })
  // 2.8: a tool/result replacement equals the shadowed message (id included) except for the result block's content.
  agentTest(
    "6.7: a pruner rewrites one tool/result's content (TR~); a change beyond content is rejected",
    scenario(
      [ScriptedModel.response({ toolCalls: [{ id: "c1", name: "big", arguments: {} }] }), ScriptedModel.text("done")],
      { tools: [big] }
    ),
    function*({ driver, log }) {
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      const tr = (yield* events).find((e) => e.type === "tool/result")!
      const data = tr.data as any
      const pruned = {
        ...data,
        message: {
          ...data.message,
          content: [{ ...data.message.content[0], content: [{ type: "text", text: "[pruned]" }] }]
        }
      }
      const flipped = {
        ...pruned,
        message: { ...pruned.message, content: [{ ...pruned.message.content[0], isError: true }] }
      }
      expect(
        yield* Effect.flip(
          log.append({
            type: "tool/result",
            data: flipped,
            surfaceOp: { op: "replace", start: tr.seq, end: tr.seq },
            sourceEventSeqs: [tr.seq]
          })
        )
      )
        .toBeInstanceOf(InvalidEvent)
      yield* log.append({
        type: "tool/result",
        data: pruned,
        surfaceOp: { op: "replace", start: tr.seq, end: tr.seq },
        sourceEventSeqs: [tr.seq]
      })
      const tokens = (yield* log.messages).map((m) =>
        m.content[0]?.type === "tool-result" ? (m.content[0].content[0] as any).text : token(m)
      )
      expect(tokens).toEqual(["A", "tool-call c1", "[pruned]", "done"])
      expect(checkLog(yield* log.events, { closed: true })).toEqual([])
    }
  )
})

describe("6.7 / 3.6 manual compaction in maintenance", () => {
  agentTest(
    "6.7/3.6: wakes during a compaction task are latched; injected context stays pending, is not summarised, and the turn after sees [S, ...]",
    scenario([ScriptedModel.text("a"), ScriptedModel.text("w")]),
    function*({ driver, log }) {
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      const surfaceBefore = yield* log.surface
      let surfaceAtSummary: ReadonlyArray<number> = []
      const G = yield* Deferred.make<void>()
      const task = yield* Effect.fork(driver.runMaintenance(Effect.gen(function*() {
        const start = yield* log.append({ type: "compaction/start", data: { turn: null } })
        yield* Deferred.await(G)
        const surface = yield* log.surface
        surfaceAtSummary = surface
        const s = yield* log.append({
          type: "user/message",
          data: summaryCompaction("S"),
          surfaceOp: { op: "replace", start: surface[0]!, end: surface[surface.length - 1]! },
          sourceEventSeqs: [...surface, start.seq]
        })
        yield* log.append({ type: "compaction/end", data: { turn: null } })
        return s.seq
      })))
      yield* untilEvent((e) => e.type === "compaction/start")
      yield* driver.inject(plugin("C"))
      yield* driver.followup(user("W"))
      expect(yield* driver.status).toBe("idle")
      yield* Deferred.succeed(G, undefined)
      const sSeq = yield* Fiber.join(task)
      yield* driver.whenIdle
      const s = yield* shape
      expect(s.indexOf("compaction/end")).toBeLessThan(s.indexOf("TS(2)"))
      // injected context, still pending, did not perturb what was summarised
      expect(surfaceAtSummary).toEqual(surfaceBefore)
      expect((yield* events)[sSeq]!.type).toBe("user/message")
      const req = (yield* requests)[1]!.messages.map(token)
      expect(req[0]).toBe("summary")
      expect([...req].sort()).toEqual(["C", "W", "summary"])
      expect(yield* closeOut).toEqual([])
    }
  )

  agentTest(
    "6.7/3.6: a cancelled compaction task closes its null bracket in a finalizer (compaction/end {error}); MaintenanceAborted; a new bracket opens later",
    scenario([ScriptedModel.text("a")]),
    function*({ driver, log }) {
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      const task = yield* hangingCompaction(driver, log, "interrupted")
      yield* driver.cancel(CancelCause.user)
      expect(yield* Effect.flip(Fiber.join(task))).toMatchObject({
        _tag: "MaintenanceAborted",
        cause: { kind: "user" }
      })
      const last = (yield* events).at(-1)!
      expect(last.type).toBe("compaction/end")
      expect(last.data).toEqual({ turn: null, error: { message: "interrupted" } })
      expect(checkLog(yield* events, { closed: true })).toEqual([])
      yield* driver.runMaintenance(Effect.gen(function*() {
        yield* log.append({ type: "compaction/start", data: { turn: null } })
        yield* log.append({ type: "compaction/end", data: { turn: null } })
      }))
      expect(checkLog(yield* events, { closed: true })).toEqual([])
    }
  )

  it.scoped("6.7/3.7: disposal during a compaction task: the finalizer's compaction/end is written and stored; MaintenanceAborted {disposed}", () =>
    Effect.gen(function*() {
      const { driver, log, scope, storeCtx } = yield* buildOwn([ScriptedModel.text("a")])
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      const task = yield* hangingCompaction(driver, log, "disposed")
      yield* Scope.close(scope, Exit.void)
      expect(yield* Effect.flip(Fiber.join(task))).toMatchObject({
        _tag: "MaintenanceAborted",
        cause: { kind: "disposed" }
      })
      const stored = (yield* Context.get(storeCtx, SessionStore).load(SessionId.make("s"))).events
      expect(stored.at(-1)!.type).toBe("compaction/end")
      expect(checkLog(stored, { closed: true })).toEqual([])
    }))
})

describe("6.7 numeric brackets inside a turn", () => {
  agentTest(
    "6.7/R6: in a pre-step listener compaction/start {turn: null} is InvalidEvent; {turn: other} is InvalidEvent; nothing written",
    scenario([ScriptedModel.text("a")]),
    function*({ driver, log }) {
      const seen: Array<unknown> = []
      yield* (yield* PreStep).register((_input, next) =>
        Effect.gen(function*() {
          const before = (yield* log.events).length
          seen.push(yield* Effect.flip(log.append({ type: "compaction/start", data: { turn: null } })))
          seen.push(yield* Effect.flip(log.append({ type: "compaction/start", data: { turn: 7 } })))
          seen.push((yield* log.events).length - before)
          return yield* next()
        })
      )
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect(seen[0]).toBeInstanceOf(InvalidEvent)
      expect(seen[1]).toBeInstanceOf(InvalidEvent)
      expect(seen[2]).toBe(0)
      expect(yield* closeOut).toEqual([])
    }
  )

  agentTest(
    "6.7: a pre-step compaction interrupted by cancel closes its numeric bracket in a finalizer before the turn/end",
    scenario([ScriptedModel.text("a")]),
    function*({ driver, log }) {
      yield* (yield* PreStep).register((input, next) =>
        input.turn === 2
          ? Effect.gen(function*() {
            yield* log.append({ type: "compaction/start", data: { turn: 2 } })
            // Waits for the cancel (never enters).
            return yield* Effect.zipRight(Effect.never, next())
          }).pipe(
            Effect.onInterrupt(() =>
              Effect.orDie(log.append({ type: "compaction/end", data: { turn: 2, error: { message: "interrupted" } } }))
            )
          )
          : next()
      )
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      yield* driver.followup(user("B"))
      yield* untilEvent((e) => e.type === "compaction/start")
      yield* driver.cancel(CancelCause.user, { keepInbox: true })
      yield* driver.whenIdle
      const s = yield* shape
      expect(s.slice(s.indexOf("TS(2)"))).toEqual([
        "TS(2)",
        "CLM(nt,0,1)",
        "compaction/start",
        "compaction/end",
        "TE(2,aborted(user))"
      ])
      expect(yield* closeOut).toEqual([])
    }
  )
})

describe("2.8 derived history", () => {
  agentTest(
    "2.8: a replacement appended by a tool during a step takes effect from the next step's request",
    scenario(
      [
        ScriptedModel.text("a"),
        ScriptedModel.response({ toolCalls: [{ id: "c1", name: "compact", arguments: {} }] }),
        ScriptedModel.text("b")
      ],
      { tools: [compactor] }
    ),
    function*({ driver }) {
      logRef = yield* SessionLog
      yield* turnsOf(driver, "A", "B")
      const rs = (yield* requests).map((r) => r.messages.map(token))
      expect(rs[1]).toEqual(["A", "a", "B"])
      expect(rs[2]).toEqual(["summary", "B", "tool-call c1", "tool-result c1"])
      expect(yield* closeOut).toEqual([])
    }
  )

  agentTest(
    "2.8/6.7: compacting a tool call with its result; a second compaction shadows the first summary; messages = deriveMessages(events); lossless prefix",
    scenario(
      [
        ScriptedModel.response({ toolCalls: [{ id: "c1", name: "echo", arguments: {} }] }),
        ScriptedModel.text("done"),
        ScriptedModel.text("b"),
        ScriptedModel.text("c")
      ],
      {
        tools: [Tool.make("echo", {
          description: "",
          parameters: Schema.Struct({}),
          execute: () => Effect.succeed("out")
        })]
      }
    ),
    function*({ driver, log }) {
      yield* turnsOf(driver, "A", "B")
      const full = yield* log.messages
      expect(full.map(token)).toEqual(["A", "tool-call c1", "tool-result c1", "done", "B", "b"])
      const s0 = yield* log.surface
      // [AM(call), TR] together (never separated)
      const s1 = yield* driver.runMaintenance(log.append({
        type: "user/message",
        data: summaryCompaction("S1", "s1"),
        surfaceOp: { op: "replace", start: s0[1]!, end: s0[2]! },
        sourceEventSeqs: [s0[1]!, s0[2]!]
      }))
      expect((yield* log.messages).map(token)).toEqual(["A", "s1", "done", "B", "b"])
      const mid = (yield* log.events).length
      const cur = yield* log.surface
      // the second compaction must cite every shadowed node, including the earlier summary
      const missing = yield* Effect.flip(driver.runMaintenance(log.append({
        type: "user/message",
        data: summaryCompaction("S2", "s2"),
        surfaceOp: { op: "replace", start: cur[0]!, end: cur[3]! },
        sourceEventSeqs: [cur[0]!, cur[2]!, cur[3]!]
      })))
      expect(missing).toBeInstanceOf(InvalidEvent)
      expect((yield* log.events).length).toBe(mid)
      // a shadowed seq is no longer a valid endpoint
      expect(
        yield* Effect.flip(log.append({
          type: "user/message",
          data: summaryCompaction("S2", "s2"),
          surfaceOp: { op: "replace", start: s0[1]!, end: s0[1]! },
          sourceEventSeqs: [s0[1]!]
        }))
      ).toBeInstanceOf(InvalidEvent)
      yield* driver.runMaintenance(log.append({
        type: "user/message",
        data: summaryCompaction("S2", "s2"),
        surfaceOp: { op: "replace", start: cur[0]!, end: cur[3]! },
        sourceEventSeqs: [cur[0]!, cur[1]!, cur[2]!, cur[3]!]
      }))
      const all = yield* log.events
      const messages = yield* log.messages
      expect(messages.map(token)).toEqual(["s2", "b"])
      expect(messages).toEqual(deriveMessages(all))
      expect(messages.every((m) => Object.isFrozen(m))).toBe(true)
      expect(yield* log.messages).not.toBe(messages)
      expect(deriveMessages(all)).not.toBe(deriveMessages(all))
      expect(deriveMessages(all.slice(0, s1.seq)).map(token)).toEqual(full.map(token))
      expect((yield* log.surface)[0]).toBe(all.length - 1)
      // the summary's id is known: reusing it is a duplicate
      expect(yield* Effect.flip(driver.followup(userMessage({ id: "S1", text: "x" })))).toBeInstanceOf(DuplicateMessage)
      expect(checkLog(all, { closed: true })).toEqual([])
      yield* driver.followup(user("C"))
      yield* driver.whenIdle
      expect((yield* requests).at(-1)!.messages.map(token)).toEqual(["s2", "b", "C"])
    }
  )
})

describe("2.8 A7 open step", () => {
  agentTest(
    "2.8/A7: a tool cannot replace a range that ends at its own step's assistant/message; nothing is written",
    scenario(
      [ScriptedModel.response({ toolCalls: [{ id: "c1", name: "probe", arguments: {} }] }), ScriptedModel.text("done")],
      { tools: [prober] }
    ),
    function*({ driver }) {
      logRef = yield* SessionLog
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      expect(probeResult).toBeInstanceOf(InvalidEvent)
      expect((yield* shape).filter((x) => x.startsWith("UM~"))).toEqual([])
      expect((yield* requests)[1]!.messages.map(token)).toEqual(["A", "tool-call c1", "tool-result c1"])
      expect(yield* closeOut).toEqual([])
    }
  )
})

describe("6.3 fail-stop with compaction and maintenance", () => {
  agentTest(
    "6.3/3.6: a store failure inside a compaction task poisons: the append fails PersistenceError, one agent/error, idle, whenIdle resolves",
    scenario([ScriptedModel.text("a")]),
    function*({ driver, log, control }) {
      const live = yield* recordLive
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      yield* log.flush
      yield* control.failAppends(3)
      const exit = yield* Effect.exit(
        driver.runMaintenance(log.append({ type: "compaction/start", data: { turn: null } }))
      )
      expect(Exit.isFailure(exit)).toBe(true)
      const err = Exit.isFailure(exit) ? exit.cause : undefined
      expect(JSON.stringify(err)).toContain("PersistenceError")
      yield* driver.whenIdle
      expect(yield* driver.status).toBe("idle")
      // exactly one agent/error, the poison's
      expect((yield* live).flatMap((e) => e.type === "agent/error" ? [e.error] : [])).toEqual([
        expect.any(PersistenceError)
      ])
      // read operations return the in-memory state, including the event past durableSeq
      const ev = yield* events
      expect(ev.at(-1)!.type).toBe("compaction/start")
      expect(yield* log.durableSeq).toBe(ev.length - 2)
      const before = ev.length
      const surface = yield* log.surface
      expect(
        yield* Effect.flip(log.append({
          type: "user/message",
          data: summaryCompaction("S"),
          surfaceOp: { op: "replace", start: surface[0]!, end: surface[0]! },
          sourceEventSeqs: [surface[0]!]
        }))
      ).toBeInstanceOf(PersistenceError)
      expect(yield* Effect.flip(log.append({ type: "compaction/end", data: { turn: null } }))).toBeInstanceOf(
        PersistenceError
      )
      expect(yield* Effect.flip(driver.runMaintenance(Effect.void))).toBeInstanceOf(PersistenceError)
      expect((yield* events).length).toBe(before)
    }
  )

  // 6.3 "the activity is interrupted" (glossary: an activity is "a chain of turns, or one maintenance
  // task"). Regression test: tiller once set the phase Idle but never interrupted the task.
  agentTest(
    "6.3: a poison while a maintenance task swallows the failure still interrupts it: whenIdle resolves, status idle, nothing more written",
    scenario([]),
    function*({ driver, log, control }) {
      yield* control.failAppends(3)
      const task = yield* Effect.fork(driver.runMaintenance(
        log.append({ type: "compaction/start", data: { turn: null } }).pipe(
          Effect.catchAll(() => Effect.never)
        )
      ))
      yield* driver.whenIdle
      expect(yield* driver.status).toBe("idle")
      yield* until(Effect.map(Fiber.poll(task), (o) => o._tag === "Some"))
      expect((yield* events).map((e) => e.type)).toEqual(["compaction/start"])
    }
  )

  // 6.3 "the activity is interrupted": a poison caused by another operation (an inject) during
  // maintenance stops the task too. Regression test: runMaintenance once never returned.
  agentTest(
    "6.3/3.6: a poison from an inject during maintenance interrupts the running task; runMaintenance returns",
    scenario([]),
    function*({ driver, control }) {
      const task = yield* Effect.fork(driver.runMaintenance(Effect.never))
      yield* settle
      yield* control.failAppends(3)
      expect(yield* Effect.flip(driver.inject(plugin("C")))).toBeInstanceOf(PersistenceError)
      yield* driver.whenIdle
      expect(yield* driver.status).toBe("idle")
      yield* until(Effect.map(Fiber.poll(task), (o) => o._tag === "Some"))
      expect(Exit.isFailure(yield* Fiber.await(task))).toBe(true)
    }
  )

  agentTest(
    "6.3: reads after a poison inside a turn include the entered message past durableSeq; messages shows it",
    scenario([ScriptedModel.text("a")]),
    function*({ driver, log, control }) {
      yield* (yield* PreStep).register((_input, next) => Effect.zipRight(control.failAppends(3), next()))
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      yield* settle
      const ev = yield* events
      const um = ev.findIndex((e) => e.type === "user/message")
      expect(um).toBeGreaterThan(-1)
      expect(yield* log.durableSeq).toBeLessThan(um)
      expect((yield* log.messages).map(token)).toEqual(["A"])
      expect(yield* log.surface).toEqual([um])
      expect(yield* Effect.flip(log.flush)).toBeInstanceOf(PersistenceError)
    }
  )

  agentTest(
    "6.7/8.5: a replacement append is acknowledged only after it is durable",
    scenario([ScriptedModel.text("a")]),
    function*({ driver, log, control }) {
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      yield* log.flush
      const surface = yield* log.surface
      yield* control.hold
      const fiber = yield* Effect.fork(driver.runMaintenance(replaceFirstTwo(log, surface, summaryCompaction("S"))))
      yield* untilEvent((e) => e.type === "user/message" && (e.data as any).id === "S")
      yield* settle
      expect(Option.isNone(yield* Fiber.poll(fiber))).toBe(true)
      // read operations already show the in-memory replacement
      expect((yield* log.messages).map(token)).toEqual(["summary"])
      yield* control.release
      const ev = yield* Fiber.join(fiber)
      expect(yield* log.durableSeq).toBeGreaterThanOrEqual(ev.seq)
    }
  )

  agentTest(
    "6.3: every waiter on an uncommitted event fails with PersistenceError (two concurrent inbox deliveries)",
    scenario([]),
    function*({ driver, control }) {
      yield* control.failAppends(1000)
      const a = yield* Effect.fork(driver.inject(plugin("C1")))
      const b = yield* Effect.fork(driver.inject(plugin("C2")))
      expect(yield* Effect.flip(Fiber.join(a))).toBeInstanceOf(PersistenceError)
      expect(yield* Effect.flip(Fiber.join(b))).toBeInstanceOf(PersistenceError)
    }
  )

  it.scoped("6.3/6.4: a compaction lost to a poison is visible in memory only; after dispose and resume history is the durable one", () =>
    Effect.gen(function*() {
      const { driver, log, scope, storeCtx } = yield* buildOwn([ScriptedModel.text("a")])
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      yield* log.flush
      const surface = yield* log.surface
      // The first two surface entries replaced by the summary S, in a maintenance task of `agent`.
      const summarise = (agent: { readonly driver: typeof driver; readonly log: typeof log }) =>
        agent.driver.runMaintenance(replaceFirstTwo(agent.log, surface, summaryCompaction("S")))
      yield* Context.get(storeCtx, MemoryStoreControl).failAppends(3)
      const exit = yield* Effect.exit(summarise({ driver, log }))
      expect(Exit.isFailure(exit)).toBe(true)
      expect((yield* log.messages).map(token)).toEqual(["summary"])
      yield* Scope.close(scope, Exit.void)
      const resumed = yield* buildIn(storeCtx, [ScriptedModel.text("b")], { resume: true })
      expect((yield* resumed.log.messages).map(token)).toEqual(["A", "a"])
      // the failed summary id is not known after resume (3.9)
      yield* summarise(resumed)
      expect((yield* resumed.log.messages).map(token)).toEqual(["summary"])
      yield* Scope.close(resumed.scope, Exit.void)
    }))
})

describe("2.9 vocabulary and 6.7 compaction through SessionLog.append", () => {
  agentTest(
    "2.9: an undeclared extension type needs ignorable; a declared one does not",
    scenario([], { agent: { eventTypes: ["x/declared"] } }),
    function*({ log }) {
      expect(yield* Effect.flip(log.append({ type: "x/undeclared", data: { a: 1 } }))).toBeInstanceOf(InvalidEvent)
      const a = yield* log.append({ type: "x/undeclared", data: { a: 1 }, ignorable: true })
      expect(a).toEqual({ type: "x/undeclared", seq: 0, time: 0, data: { a: 1 }, ignorable: true })
      const b = yield* log.append({ type: "x/declared", data: [1] })
      expect(b.seq).toBe(1)
      expect(yield* Effect.flip(log.append({ type: "x/declared", data: { bad: undefined } }))).toBeInstanceOf(
        InvalidEvent
      )
      expect(yield* Effect.flip(log.append({ type: "x/declared", data: NaN }))).toBeInstanceOf(InvalidEvent)
      expect(yield* log.durableSeq).toBe(1)
    }
  )

  agentTest(
    "6.7: compaction/start {turn: null} is accepted only during maintenance; a bracketed replacement compacts history",
    scenario([ScriptedModel.text("a"), ScriptedModel.text("b"), ScriptedModel.text("c")]),
    function*({ driver, log }) {
      yield* turnsOf(driver, "A", "B")
      expect(yield* Effect.flip(log.append({ type: "compaction/start", data: { turn: null } }))).toBeInstanceOf(
        InvalidEvent
      )
      const before = yield* log.surface
      const result = yield* driver.runMaintenance(Effect.gen(function*() {
        const start = yield* log.append({ type: "compaction/start", data: { turn: null, strategy: "test" } })
        const summary = yield* log.append({ type: "compaction/summary", data: { turn: null, text: "sum" } })
        const replaced = yield* log.append({
          type: "user/message",
          data: {
            id: "S",
            role: "user",
            content: [{ type: "text", text: "summary" }],
            source: { kind: "compaction", by: "test" }
          },
          surfaceOp: { op: "replace", start: before[0]!, end: before[1]! },
          sourceEventSeqs: [before[0]!, before[1]!, start.seq, summary.seq]
        })
        yield* log.append({ type: "compaction/end", data: { turn: null } })
        return replaced.seq
      }))
      expect((yield* log.messages).map(token)).toEqual(["summary", "B", "b"])
      expect((yield* log.surface)[0]).toBe(result)
      expect(checkLog(yield* log.events, { closed: true })).toEqual([])
      yield* driver.followup(user("C"))
      yield* driver.whenIdle
      expect((yield* requests)[2]!.messages.map(token)).toEqual(["summary", "B", "b", "C"])
    }
  )
})
