import { describe, expect, it } from "@effect/vitest"
import { Effect, FastCheck, Fiber, Option, Schema, TestClock } from "effect"
import { checkLog } from "../../src/domain/Check.js"
import type { EventOf, SessionEvent } from "../../src/domain/Event.js"
import { deriveMessages } from "../../src/domain/Surface.js"
import { ScriptedModel } from "../../src/layers/ScriptedModel.js"
import type { ScriptEntry } from "../../src/layers/ScriptedModel.js"
import { Driver } from "../../src/services/Driver.js"
import { Inbox } from "../../src/services/Inbox.js"
import { SessionLog } from "../../src/services/SessionLog.js"
import { Tool } from "../../src/services/Tools.js"
import { plugin, scenario, user } from "./harness.js"

type Op =
  | { readonly _tag: "followup" | "steer" | "inject" }
  | { readonly _tag: "remove"; readonly pick: number }
  | { readonly _tag: "wait"; readonly ms: number }
  | { readonly _tag: "yield" }
  | { readonly _tag: "cancel"; readonly keepInbox: boolean }

const op: FastCheck.Arbitrary<Op> = FastCheck.oneof(
  FastCheck.record({ _tag: FastCheck.constantFrom("followup" as const, "steer" as const, "inject" as const) }),
  FastCheck.record({ _tag: FastCheck.constant("remove" as const), pick: FastCheck.nat(20) }),
  FastCheck.record({ _tag: FastCheck.constant("wait" as const), ms: FastCheck.integer({ min: 0, max: 30 }) }),
  FastCheck.record({ _tag: FastCheck.constant("yield" as const) }),
  FastCheck.record({ _tag: FastCheck.constant("cancel" as const), keepInbox: FastCheck.boolean() })
)

// Each model entry waits a little Clock time, then answers text or calls the `note` tool.
const entry = FastCheck.record({ delay: FastCheck.integer({ min: 0, max: 20 }), tool: FastCheck.boolean() })

const note = Tool.make("note", {
  description: "takes a note",
  parameters: Schema.Struct({ text: Schema.String }),
  mode: "parallel",
  execute: ({ text }) => Effect.succeed(`noted ${text}`)
})

const toScript = (
  entries: ReadonlyArray<{ readonly delay: number; readonly tool: boolean }>
): ReadonlyArray<ScriptEntry> =>
  entries.map(({ delay, tool }, i) => {
    const options = { awaitBefore: Effect.sleep(`${delay} millis`) }
    return tool
      ? ScriptedModel.response({
        toolCalls: [{ id: `call-${i}`, name: "note", arguments: { text: `n${i}` } }],
        ...options
      })
      : ScriptedModel.text(`answer ${i}`, options)
  })

describe("loop property", () => {
  it.effect.prop(
    "random deliveries and cancels: the log checks, every message is accounted for once, steps enter their claims, requests see the log",
    [FastCheck.array(op, { maxLength: 30 }), FastCheck.array(entry, { minLength: 80, maxLength: 80 })],
    ([ops, entries]) =>
      Effect.gen(function*() {
        const driver = yield* Driver
        const inbox = yield* Inbox
        const log = yield* SessionLog
        const accepted: Array<string> = []
        let n = 0
        // The clock keeps moving in the background so model delays elapse.
        const ticker = yield* Effect.fork(
          Effect.forever(Effect.zipRight(TestClock.adjust("5 millis"), Effect.yieldNow()))
        )
        for (const o of ops) {
          switch (o._tag) {
            case "followup":
            case "steer":
            case "inject": {
              const m = o._tag === "inject" ? plugin(`m${n++}`) : user(`m${n++}`)
              yield* driver[o._tag](m)
              accepted.push(m.id)
              break
            }
            case "remove": {
              const { nextStep, nextTurn } = yield* inbox.snapshot
              const all = [...nextTurn, ...nextStep]
              const victim = all[o.pick % Math.max(all.length, 1)]
              if (victim !== undefined) yield* inbox.remove(victim.id)
              break
            }
            case "wait":
              yield* Effect.sleep(`${o.ms} millis`)
              break
            case "yield":
              yield* Effect.yieldNow()
              break
            case "cancel":
              yield* driver.cancel({ kind: "user" }, { keepInbox: o.keepInbox })
              break
          }
        }
        yield* driver.whenIdle
        yield* Fiber.interrupt(ticker)
        const events = yield* log.events
        expect(checkLog(events, { closed: true })).toEqual([])
        // No stranded wake (G6, D3): unless the last turn was aborted (parking pre-abort work), no
        // follow-up and no steer is left pending once idle.
        const lastEnd = [...events].reverse().find((e) => e.type === "turn/end") as EventOf<"turn/end"> | undefined
        if (lastEnd !== undefined && lastEnd.data.reason.kind !== "aborted") {
          const { nextStep, nextTurn } = yield* inbox.snapshot
          expect(nextTurn).toEqual([])
          expect(nextStep.filter((m) => m.source.kind === "user")).toEqual([])
        }
        // Accounting: each accepted message has one state and is entered at most once.
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
        // With no pre-step listener, each step enters exactly its claims, in claim order.
        let claimed: Array<string> = []
        let lists = { "next-turn": [] as Array<string>, "next-step": [] as Array<string> }
        let stepEntered: Array<string> | undefined
        for (const e of events) {
          if (e.type === "agent/inbox/spliced") {
            const d = (e as EventOf<"agent/inbox/spliced">).data
            const list = lists[d.target]
            const removed = list.splice(d.start, d.removedCount ?? 0, ...d.inserted.map((m) => m.id))
            if (d.removedCount !== undefined && d.inserted.length === 0 && d.outcome === undefined) {
              claimed.push(...removed)
            }
          } else if (e.type === "step/start") {
            stepEntered = []
          } else if (e.type === "user/message" && stepEntered !== undefined) {
            stepEntered.push((e as EventOf<"user/message">).data.id)
          } else if (e.type !== "user/message" && stepEntered !== undefined) {
            expect(stepEntered).toEqual(claimed)
            stepEntered = undefined
            claimed = []
          }
          if (e.type === "turn/end") claimed = []
        }
        void lists
        lists = { "next-turn": [], "next-step": [] }
        // What the model saw equals the derived history of the log when its first chunk arrived.
        const requests = yield* (yield* ScriptedModel).requests
        for (const request of requests) {
          const first = events.findIndex((e) =>
            e.type === "assistant/chunk" &&
            (e as EventOf<"assistant/chunk">).data.turn === request.turn &&
            (e as EventOf<"assistant/chunk">).data.step === request.step &&
            (e as EventOf<"assistant/chunk">).data.attempt === request.attempt
          )
          if (first < 0) continue
          expect(request.messages).toEqual(deriveMessages(events.slice(0, first) as Array<SessionEvent>))
        }
      }).pipe(Effect.scoped, Effect.provide(scenario(toScript(entries), { tools: [note] }))),
    { fastCheck: { numRuns: Number(process.env.TILLER_PROPERTY_RUNS ?? 60) } }
  )
})
