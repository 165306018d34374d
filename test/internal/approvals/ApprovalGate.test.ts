/**
 * Durable approvals through the public API (SPEC 4.12): `Driver.approve` / `Driver.deny`, the
 * pending list and status while a call waits, the denied result's words, "always" rules, refusals
 * of answers that are not pending, a cancel while waiting, a crash image resumed with the request
 * still pending, and an answer left in the store's mailbox by another process.
 */
import { describe, expect, it } from "@effect/vitest"
import { Duration, Effect, Layer, Schema } from "effect"
import { checkLog } from "../../../src/domain/Check.js"
import type { EventOf, SessionEvent } from "../../../src/domain/Event.js"
import { SessionId } from "../../../src/domain/Ids.js"
import { CancelCause } from "../../../src/domain/Values.js"
import { Permissions } from "../../../src/layers/Permissions.js"
import type { PermissionsOptions } from "../../../src/layers/Permissions.js"
import type { ScriptEntry } from "../../../src/layers/ScriptedModel.js"
import { ScriptedModel } from "../../../src/layers/ScriptedModel.js"
import { Driver } from "../../../src/services/Driver.js"
import { SessionLog } from "../../../src/services/SessionLog.js"
import { MemoryStoreControl, SessionStore } from "../../../src/services/SessionStore.js"
import { Tool } from "../../../src/services/Tools.js"
import { agentOver, notation, user } from "../../agent/harness.js"

const ran: Array<string> = []
const bash = Tool.make("Bash", {
  description: "Runs a command (a test double: it records the command)",
  parameters: Schema.Struct({ command: Schema.String }),
  execute: (params) =>
    Effect.sync(() => {
      ran.push(params.command)
      return `ran: ${params.command}`
    })
})

const callBash = (command: string, id = "c1"): ScriptEntry =>
  ScriptedModel.response({ toolCalls: [{ id, name: "Bash", arguments: { command } }] })

const permissions = (options: PermissionsOptions = {}) =>
  Permissions.layer({ noFiles: true, approvals: true, ...options })

/** An agent "s" over `store` (a memory store layer), with durable approvals. */
const agent = (
  script: ReadonlyArray<ScriptEntry>,
  options: { readonly resume?: boolean; readonly permissions?: PermissionsOptions } = {}
) =>
  permissions(options.permissions).pipe(
    Layer.provideMerge(agentOver(script, { tools: [bash], ...(options.resume === true ? { resume: true } : {}) }))
  )

/** {@link agent} over a fresh memory store. */
const fresh = (script: ReadonlyArray<ScriptEntry>) => agent(script).pipe(Layer.provideMerge(SessionStore.layerMemory))

/** The pending approvals, once there are some (polled). */
const waitPending = Effect.flatMap(Driver, (driver) =>
  Effect.gen(function*() {
    for (let i = 0; i < 2500; i++) {
      const pending = yield* driver.pendingApprovals
      if (pending.length > 0) return pending
      yield* Effect.sleep(Duration.millis(2))
    }
    return yield* Effect.dieMessage("no approval request was recorded")
  }))

const logEvents = Effect.flatMap(SessionLog, (log) => log.events)
const results = (events: ReadonlyArray<SessionEvent>) =>
  events.filter((e) => e.type === "tool/result").map((e) => (e as EventOf<"tool/result">).data)
const textOf = (r: EventOf<"tool/result">["data"]) =>
  r.message.content[0].content.map((b) => (b.type === "text" ? b.text : "")).join("")
const userTexts = (events: ReadonlyArray<SessionEvent>) =>
  events.filter((e) => e.type === "user/message").map((e) => {
    const block = (e as EventOf<"user/message">).data.content[0]
    return block?.type === "text" ? block.text : ""
  })

describe("durable approvals", () => {
  it.live("a call that asks records approval/request and waits, running; approve runs it", () =>
    Effect.gen(function*() {
      ran.length = 0
      const driver = yield* Driver
      yield* driver.followup(user("p1", "build it"))
      const pending = yield* waitPending
      expect(pending).toEqual([
        expect.objectContaining({
          callId: "c1",
          tool: "Bash",
          input: { command: "make" },
          source: "mode",
          interrupted: false,
          turn: 1,
          step: 1
        })
      ])
      expect(pending[0]!.reason).toContain("Bash")
      expect(yield* driver.status).toBe("running")
      expect(ran).toEqual([])
      yield* driver.approve("c1", { by: "alice" })
      yield* driver.whenIdle
      expect(ran).toEqual(["make"])
      const events = yield* logEvents
      expect(events.map(notation)).toEqual([
        "INS(nt,0,[p1])",
        "TS(1)",
        "CLM(nt,0,1)",
        "SS(1,1)",
        "UM(p1)",
        "RH(initial)",
        "CH(block-start)",
        "CH(tool-call-delta)",
        "CH(block-end)",
        "CH(finish stop)",
        "AM",
        "TC(c1)",
        "approval/request",
        "approval/answer",
        "TR(c1)",
        "SE(1,1)",
        "SS(1,2)",
        "CH(block-start)",
        "CH(text-delta)",
        "CH(block-end)",
        "CH(finish stop)",
        "AM",
        "SE(1,2)",
        "TE(1,completed)"
      ])
      expect(events.find((e) => e.type === "approval/answer")!.data).toEqual({
        callId: "c1",
        decision: "allow",
        by: "alice"
      })
      expect(yield* driver.pendingApprovals).toEqual([])
      expect(checkLog(events, { closed: true })).toEqual([])
    }).pipe(Effect.scoped, Effect.provide(fresh([callBash("make"), ScriptedModel.text("built")]))))

  it.live("deny: the result is an error that says who refused and why; the body never runs", () =>
    Effect.gen(function*() {
      ran.length = 0
      const driver = yield* Driver
      yield* driver.followup(user("p1", "clean"))
      yield* waitPending
      yield* driver.deny("c1", "not on my machine", { by: "bob" })
      yield* driver.whenIdle
      expect(ran).toEqual([])
      const [result] = results(yield* logEvents)
      expect(result!.error).toEqual({ name: "ToolDeniedError", code: "DENIED" })
      expect(textOf(result!)).toMatch(
        /^Error: tool call denied: permission refused by bob: not on my machine \(it asked: .*Bash.*\)$/
      )
    }).pipe(Effect.scoped, Effect.provide(fresh([callBash("rm -rf /"), ScriptedModel.text("ok")]))))

  it.live("answers to unknown or answered calls are ApprovalNotPending and record nothing", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const unknown = yield* Effect.flip(driver.approve("nope"))
      expect(unknown).toMatchObject({ _tag: "ApprovalNotPending", callId: "nope", reason: "unknown" })
      yield* driver.followup(user("p1", "build"))
      yield* waitPending
      yield* driver.approve("c1")
      yield* driver.whenIdle
      const before = (yield* logEvents).length
      const twice = yield* Effect.flip(driver.deny("c1", "too late"))
      expect(twice).toMatchObject({ _tag: "ApprovalNotPending", callId: "c1", reason: "answered" })
      expect(twice.message).toContain("no longer pending")
      expect((yield* logEvents).length).toBe(before)
    }).pipe(Effect.scoped, Effect.provide(fresh([callBash("make"), ScriptedModel.text("ok")]))))

  it.live("always records an allow rule in the log: a later matching call runs without asking", () =>
    Effect.gen(function*() {
      ran.length = 0
      const driver = yield* Driver
      yield* driver.followup(user("p1", "test"))
      yield* waitPending
      yield* driver.approve("c1", { by: "user", always: "Bash(npm test:*)" })
      yield* driver.whenIdle
      yield* driver.followup(user("p2", "test again"))
      yield* driver.whenIdle
      expect(ran).toEqual(["npm test", "npm test -- --watch=false"])
      const events = yield* logEvents
      expect(events.filter((e) => e.type === "approval/request")).toHaveLength(1)
      expect(events.find((e) => e.type === "approval/answer")!.data).toEqual({
        callId: "c1",
        decision: "allow",
        by: "user",
        rule: "Bash(npm test:*)"
      })
      expect(yield* driver.approvalRules).toEqual(["Bash(npm test:*)"])
    }).pipe(
      Effect.scoped,
      Effect.provide(fresh([
        callBash("npm test"),
        ScriptedModel.text("ok"),
        callBash("npm test -- --watch=false", "c2"),
        ScriptedModel.text("ok again")
      ]))
    ))

  it.live("a cancel while a call waits ends the turn: the call is aborted before dispatch, nothing pends", () =>
    Effect.gen(function*() {
      ran.length = 0
      const driver = yield* Driver
      yield* driver.followup(user("p1", "build"))
      yield* waitPending
      yield* driver.cancel(CancelCause.user)
      yield* driver.whenIdle
      const events = yield* logEvents
      expect(results(events)[0]!.error?.code).toBe("ABORTED_BEFORE_DISPATCH")
      expect(yield* driver.pendingApprovals).toEqual([])
      expect(ran).toEqual([])
      expect(yield* Effect.flip(driver.approve("c1"))).toMatchObject({ reason: "answered" })
      expect(checkLog(events, { closed: true })).toEqual([])
    }).pipe(Effect.scoped, Effect.provide(fresh([callBash("make"), ScriptedModel.text("ok")]))))

  it.live("a crash keeps the question: resume shows it pending, and approve then runs the call and tells the model", () =>
    Effect.gen(function*() {
      ran.length = 0
      // The crash image: taken while the call waits (the request is durable), then the process is gone.
      const crash = yield* Effect.scoped(
        Effect.gen(function*() {
          const driver = yield* Driver
          yield* driver.followup(user("p1", "build"))
          yield* waitPending
          return yield* Effect.flatMap(MemoryStoreControl, (control) => control.snapshot)
        }).pipe(Effect.provide(fresh([callBash("make")])))
      )
      expect(ran).toEqual([])
      yield* Effect.scoped(
        Effect.gen(function*() {
          const driver = yield* Driver
          const [pending] = yield* driver.pendingApprovals
          expect(pending).toMatchObject({ callId: "c1", tool: "Bash", input: { command: "make" }, interrupted: true })
          expect(yield* driver.status).toBe("idle")
          const repaired = results(yield* logEvents)[0]!
          expect(repaired.error).toEqual({ name: "ApprovalInterruptedError", code: "APPROVAL_INTERRUPTED" })
          expect(textOf(repaired)).toContain("waited for approval")
          yield* driver.approve("c1", { by: "carol" })
          // The call ran, and the follow-up that carries its result opened a turn.
          expect(ran).toEqual(["make"])
          yield* driver.whenIdle
          const events = yield* logEvents
          const told = userTexts(events).at(-1)!
          expect(told).toContain("approved by carol and has run now")
          expect(told).toContain("ran: make")
          expect(events.at(-1)).toMatchObject({ type: "turn/end", data: { turn: 2, reason: { kind: "completed" } } })
          expect(yield* driver.pendingApprovals).toEqual([])
          expect(checkLog(events, { closed: true })).toEqual([])
        }).pipe(
          Effect.provide(
            agent([ScriptedModel.text("thanks")], { resume: true }).pipe(
              Layer.provideMerge(SessionStore.layerMemoryFrom(crash))
            )
          )
        )
      )
    }))

  it.live("after a crash, deny tells the model the call was refused and runs nothing", () =>
    Effect.gen(function*() {
      ran.length = 0
      const crash = yield* Effect.scoped(
        Effect.gen(function*() {
          const driver = yield* Driver
          yield* driver.followup(user("p1", "build"))
          yield* waitPending
          return yield* Effect.flatMap(MemoryStoreControl, (control) => control.snapshot)
        }).pipe(Effect.provide(fresh([callBash("make")])))
      )
      yield* Effect.scoped(
        Effect.gen(function*() {
          const driver = yield* Driver
          yield* driver.deny("c1", "too late now")
          yield* driver.whenIdle
          expect(ran).toEqual([])
          expect(userTexts(yield* logEvents).at(-1)).toContain("refused by api: too late now. It did not run.")
        }).pipe(
          Effect.provide(
            agent([ScriptedModel.text("understood")], { resume: true }).pipe(
              Layer.provideMerge(SessionStore.layerMemoryFrom(crash))
            )
          )
        )
      )
    }))

  it.live("an answer another process leaves in the store's mailbox reaches the waiting call", () =>
    Effect.gen(function*() {
      ran.length = 0
      const driver = yield* Driver
      const store = yield* SessionStore
      yield* driver.followup(user("p1", "build"))
      yield* waitPending
      yield* store.approvalMailbox!.post(SessionId.make("s"), {
        callId: "c1",
        decision: "allow",
        by: "tiller approve"
      })
      yield* driver.whenIdle
      expect(ran).toEqual(["make"])
      expect((yield* logEvents).find((e) => e.type === "approval/answer")!.data).toEqual({
        callId: "c1",
        decision: "allow",
        by: "tiller approve"
      })
    }).pipe(Effect.scoped, Effect.provide(fresh([callBash("make"), ScriptedModel.text("ok")]))))
})
