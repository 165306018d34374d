/**
 * Races across agent lifetimes: random deliveries, inbox edits and cancels (both modes), with the
 * agent disposed and resumed on the same store at random points. Invariants after quiescence.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, FastCheck, Fiber, Layer, Option, Schema, Scope, TestClock } from "effect"
import { checkLog } from "../../src/domain/Check.js"
import type { EventOf } from "../../src/domain/Event.js"
import { SessionId } from "../../src/domain/Ids.js"
import { Agent } from "../../src/layers/Agent.js"
import { ScriptedModel } from "../../src/layers/ScriptedModel.js"
import { Driver } from "../../src/services/Driver.js"
import { Inbox } from "../../src/services/Inbox.js"
import { SessionLog } from "../../src/services/SessionLog.js"
import { SessionStore } from "../../src/services/SessionStore.js"
import { Tool, Tools } from "../../src/services/Tools.js"
import { plugin, user } from "./harness.js"

type Op =
  | { readonly _tag: "followup" | "steer" | "inject" }
  | { readonly _tag: "splice"; readonly start: number; readonly deleteCount: number; readonly insert: boolean }
  | { readonly _tag: "wait"; readonly ms: number }
  | { readonly _tag: "cancel"; readonly keepInbox: boolean }
  | { readonly _tag: "reopen" }

const op: FastCheck.Arbitrary<Op> = FastCheck.oneof(
  { weight: 4, arbitrary: FastCheck.record({ _tag: FastCheck.constantFrom("followup" as const, "steer" as const, "inject" as const) }) },
  {
    weight: 1,
    arbitrary: FastCheck.record({
      _tag: FastCheck.constant("splice" as const),
      start: FastCheck.integer({ min: -3, max: 3 }),
      deleteCount: FastCheck.integer({ min: 0, max: 2 }),
      insert: FastCheck.boolean()
    })
  },
  { weight: 2, arbitrary: FastCheck.record({ _tag: FastCheck.constant("wait" as const), ms: FastCheck.integer({ min: 0, max: 30 }) }) },
  { weight: 1, arbitrary: FastCheck.record({ _tag: FastCheck.constant("cancel" as const), keepInbox: FastCheck.boolean() }) },
  { weight: 1, arbitrary: FastCheck.record({ _tag: FastCheck.constant("reopen" as const) }) }
)

const note = Tool.make("note", {
  description: "takes a note",
  parameters: Schema.Struct({ text: Schema.String }),
  mode: "parallel",
  execute: ({ text }) => Effect.as(Effect.sleep("3 millis"), `noted ${text}`)
})

// Every request waits a little Clock time, then answers text or calls the tool.
const script = Array.from({ length: 120 }, (_, i) =>
  i % 3 === 0
    ? ScriptedModel.response({ toolCalls: [{ id: `call-${i}`, name: "note", arguments: { text: `n${i}` } }], awaitBefore: Effect.sleep("4 millis") })
    : ScriptedModel.text(`answer ${i}`, { awaitBefore: Effect.sleep("2 millis") }))

const sid = SessionId.make("race")

describe("race property", () => {
  it.effect.prop(
    "deliveries, splices, cancels and dispose/resume: the log checks and every accepted message is accounted for once",
    [FastCheck.array(op, { maxLength: 30 })],
    ([ops]) =>
      Effect.gen(function*() {
        const store = yield* SessionStore
        const dependencies = Layer.mergeAll(Layer.succeed(SessionStore, store), ScriptedModel.layer(script), Tools.layer({ tools: [note] }))
        const open = (resume: boolean) =>
          Effect.gen(function*() {
            const scope = yield* Scope.make()
            const layer = Agent.layer({ ...(resume ? { resume: sid } : { sessionId: sid }), model: { provider: "p", model: "m" } })
            const context = yield* Layer.buildWithScope(layer.pipe(Layer.provide(dependencies)), scope)
            return { scope, context }
          })
        let agent = yield* open(false)
        const ticker = yield* Effect.fork(Effect.forever(Effect.zipRight(TestClock.adjust("1 millis"), Effect.yieldNow())))
        const accepted: Array<string> = []
        let n = 0
        for (const o of ops) {
          const driver = agent.context.unsafeMap.get(Driver.key) as Driver["Type"]
          const inbox = agent.context.unsafeMap.get(Inbox.key) as Inbox["Type"]
          switch (o._tag) {
            case "followup":
            case "steer":
            case "inject": {
              const m = o._tag === "inject" ? plugin(`m${n++}`) : user(`m${n++}`)
              yield* driver[o._tag](m)
              accepted.push(m.id)
              break
            }
            case "splice": {
              const inserted = o.insert ? [plugin(`m${n++}`)] : []
              yield* inbox.splice("next-step", o.start, o.deleteCount, inserted)
              accepted.push(...inserted.map((m) => m.id))
              break
            }
            case "wait":
              yield* Effect.sleep(`${o.ms} millis`)
              break
            case "cancel":
              yield* driver.cancel({ kind: "user" }, { keepInbox: o.keepInbox })
              break
            case "reopen":
              yield* Scope.close(agent.scope, { _tag: "Success", value: undefined } as never)
              agent = yield* open(true)
              break
          }
        }
        const driver = agent.context.unsafeMap.get(Driver.key) as Driver["Type"]
        const inbox = agent.context.unsafeMap.get(Inbox.key) as Inbox["Type"]
        const log = agent.context.unsafeMap.get(SessionLog.key) as SessionLog["Type"]
        yield* driver.whenIdle
        yield* log.flush
        yield* Fiber.interrupt(ticker)
        const events = yield* log.events
        expect(checkLog(events, { closed: true })).toEqual([])
        // Durable equals live once flushed.
        expect((yield* store.load(sid)).events).toEqual(events)
        const entered = new Map<string, number>()
        for (const e of events) {
          if (e.type === "user/message") {
            const id = (e as EventOf<"user/message">).data.id
            entered.set(id, (entered.get(id) ?? 0) + 1)
          }
        }
        for (const id of accepted) {
          expect(Option.isSome(yield* inbox.idState(id as never))).toBe(true)
          expect(entered.get(id) ?? 0).toBeLessThanOrEqual(1)
        }
        // Turn numbers are contiguous from 1.
        const turns = events.filter((e) => e.type === "turn/start").map((e) => (e as EventOf<"turn/start">).data.turn)
        expect(turns).toEqual(turns.map((_, i) => i + 1))
        yield* Scope.close(agent.scope, { _tag: "Success", value: undefined } as never)
      }).pipe(Effect.provide(SessionStore.layerMemory)),
    { fastCheck: { numRuns: Number(process.env.TILLER_RACE_RUNS ?? 200) } }
  )
})
