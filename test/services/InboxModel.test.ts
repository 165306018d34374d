import { describe, expect, it } from "@effect/vitest"
import { Effect, Either, FastCheck } from "effect"
import { checkLog } from "../../src/domain/Check.js"
import { foldInbox } from "../../src/domain/Splice.js"
import type { InboxTarget, UserMessage } from "../../src/domain/Values.js"
import { Inbox } from "../../src/services/Inbox.js"
import { SessionLog } from "../../src/services/SessionLog.js"
import { claimTurn, freshSession, plugin } from "./harness.js"

type Op =
  | {
    readonly _tag: "splice"
    readonly target: InboxTarget
    readonly start: number
    readonly deleteCount: number
    readonly insert: number
  }
  | { readonly _tag: "append" | "prepend"; readonly target: InboxTarget }
  | { readonly _tag: "remove" | "replace"; readonly pick: number }
  | { readonly _tag: "clear" | "claim" }

const target = FastCheck.constantFrom<InboxTarget>("next-turn", "next-step")
const op: FastCheck.Arbitrary<Op> = FastCheck.oneof(
  FastCheck.record({
    _tag: FastCheck.constant("splice" as const),
    target,
    start: FastCheck.oneof(FastCheck.integer({ min: -6, max: 6 }), FastCheck.constantFrom(Infinity, -Infinity, 1.5)),
    deleteCount: FastCheck.oneof(FastCheck.integer({ min: -2, max: 4 }), FastCheck.constant(Infinity)),
    insert: FastCheck.integer({ min: 0, max: 3 })
  }),
  FastCheck.record({ _tag: FastCheck.constantFrom("append" as const, "prepend" as const), target }),
  FastCheck.record({ _tag: FastCheck.constantFrom("remove" as const, "replace" as const), pick: FastCheck.nat(10) }),
  FastCheck.record({ _tag: FastCheck.constantFrom("clear" as const, "claim" as const) })
)

describe("Inbox against a model", () => {
  it.effect.prop(
    "random mutations agree with Array.prototype.splice; the log folds to the live lists",
    [FastCheck.array(op, { maxLength: 25 })],
    ([ops]) =>
      Effect.gen(function*() {
        const inbox = yield* Inbox
        const log = yield* SessionLog
        const model: Record<InboxTarget, Array<UserMessage>> = { "next-turn": [], "next-step": [] }
        let next = 0
        const fresh = () => plugin(`m${next++}`)
        for (const o of ops) {
          switch (o._tag) {
            case "splice": {
              const inserted = Array.from({ length: o.insert }, fresh)
              const removed = yield* inbox.splice(o.target, o.start, o.deleteCount, inserted)
              expect(removed).toEqual(model[o.target].splice(o.start, o.deleteCount, ...inserted))
              break
            }
            case "append":
            case "prepend": {
              const m = fresh()
              yield* inbox[o._tag](o.target, m)
              if (o._tag === "append") model[o.target].push(m)
              else model[o.target].unshift(m)
              break
            }
            case "remove":
            case "replace": {
              const all = [...model["next-turn"], ...model["next-step"]]
              const victim = all[o.pick % Math.max(all.length, 1)]
              if (victim === undefined) break
              const where: InboxTarget = model["next-turn"].includes(victim) ? "next-turn" : "next-step"
              const index = model[where].indexOf(victim)
              if (o._tag === "remove") {
                expect(yield* inbox.remove(victim.id)).toBe(true)
                model[where].splice(index, 1)
              } else {
                const m = fresh()
                expect(yield* inbox.replace(victim.id, m)).toBe(true)
                model[where].splice(index, 1, m)
              }
              break
            }
            case "clear":
              yield* inbox.clear
              model["next-turn"] = []
              model["next-step"] = []
              break
            case "claim": {
              const batch = yield* claimTurn
              const expected = [...model["next-step"], ...model["next-turn"].slice(0, 1)]
              expect(batch).toEqual(expected)
              model["next-step"] = []
              model["next-turn"] = model["next-turn"].slice(1)
              break
            }
          }
          expect(yield* inbox.snapshot).toEqual({ nextTurn: model["next-turn"], nextStep: model["next-step"] })
        }
        const events = yield* log.events
        expect(foldInbox(events)).toEqual(Either.right({ nextTurn: model["next-turn"], nextStep: model["next-step"] }))
        expect(checkLog(events, { closed: true })).toEqual([])
      }).pipe(Effect.scoped, Effect.provide(freshSession())),
    { fastCheck: { numRuns: 150 } }
  )
})
