/**
 * The relational rules of SPEC 5.2 through `checkLog`: hand-built logs that break each rule, and a real
 * log that keeps them all. Replacements and compaction brackets: RelationsReplacements.test.ts.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Option, Schema } from "effect"
import {
  checkLog,
  deriveMessages,
  Driver,
  DuplicateMessage,
  Inbox,
  MessageId,
  ScriptedModel,
  SessionLog,
  Tool,
  userMessage
} from "../../src/index.js"
import type { SessionEvent } from "../../src/index.js"
import { scenario } from "../agent/harness.js"
import { found, HandLog, opening, textTurn } from "../fixtures/handLog.js"
import { header, mutate, outcome, richLog, withStore } from "../fixtures/richLog.js"
import { u } from "../fixtures/surfaceLog.js"

const A = u("A")
const B = u("B")
const C = u("C")
const P = u("P")

/** An agent whose first answer calls tool "echo" once (call c1) and whose second answer ends the turn. */
const toolRoundTrip = () =>
  scenario(
    [
      ScriptedModel.response({ text: "calling", toolCalls: [{ id: "c1", name: "echo", arguments: { text: "ping" } }] }),
      ScriptedModel.text("done")
    ],
    {
      tools: [Tool.make("echo", {
        description: "echo",
        parameters: Schema.Struct({ text: Schema.String }),
        execute: ({ text }) => Effect.succeed("echo: " + text)
      })]
    }
  )

// 5.2 checkLog --------------------------------------------------------------------------------

describe("SPEC 5.2 checkLog rule by rule", () => {
  it("5.2 R7: a turn/start followed only by CLM(ns) (no CLM(nt)) is valid ('or only one of them')", () => {
    const b = new HandLog().ins("next-step", 0, [C]).ts(1).clm("next-step", 1).ss(1, 1).um(C).rh().answer(1, 1, "x").se(
      1,
      1
    ).te(1)
    expect(found(b.events)).toStrictEqual([])
  })

  it("5.2 R7: a boundary CLM(ns) between step/end and turn/end is valid", () => {
    const b = opening(new HandLog(), A).answer(1, 1, "x").ins("next-step", 0, [C]).se(1, 1).clm("next-step", 1).te(1)
    expect(found(b.events)).toStrictEqual([])
  })

  it("5.2 R7: CLM(ns) right after turn/end (outside a turn) is reported R7 at the claim", () => {
    const b = opening(new HandLog(), A).answer(1, 1, "x").ins("next-step", 0, [C]).se(1, 1).te(1).clm("next-step", 1)
    expect(found(b.events)).toStrictEqual([{ seq: b.last, rule: "R7" }])
  })

  it("5.2 R3: the first step of turn 2 must be step 1 (step numbering restarts per turn)", () => {
    const b = textTurn(new HandLog(), A).ins("next-turn", 0, [B]).ts(2).clm("next-turn", 1).ss(2, 2)
    expect(found(b.events)).toStrictEqual([{ seq: b.last, rule: "R3" }])
    const ok = textTurn(new HandLog(), A).ins("next-turn", 0, [B]).ts(2).clm("next-turn", 1).ss(2, 1).um(B).answer(
      2,
      1,
      "y"
    ).se(2, 1).te(2)
    expect(found(ok.events)).toStrictEqual([])
  })

  it("5.2 R2: turn/end on an empty log (no turn ever opened) is R2 at seq 0", () => {
    const b = new HandLog().te(1, { kind: "blocked" })
    expect(found(b.events)).toStrictEqual([{ seq: 0, rule: "R2" }])
  })

  it("5.2 R18/seedLength: the inbox is folded from seedLength, so a seed-pending item cannot be claimed after it", () => {
    const seed = textTurn(new HandLog(), A).ins("next-turn", 0, [P])
    const seedLength = seed.events.length
    const b = seed.es().ts(2).clm("next-turn", 1)
    // Without a seed the same log is valid (P is pending).
    expect(found(b.events)).toStrictEqual([])
    const withSeed = found(b.events, { seedLength })
    expect(withSeed).toContainEqual({ seq: b.last, rule: "R18" })
    expect(withSeed.every((v) => v.seq === b.last)).toBe(true)
  })

  it("5.2 R9/seedLength: the known-id table is folded from 0, so re-inserting an id entered in the seed is R9", () => {
    const seed = textTurn(new HandLog(), A)
    const seedLength = seed.events.length
    const b = seed.es().ins("next-turn", 0, [A])
    expect(found(b.events, { seedLength })).toStrictEqual([{ seq: b.last, rule: "R9" }])
  })

  it("5.2 R9/seedLength: an id still pending at the end of the seed stays known after it", () => {
    const seed = textTurn(new HandLog(), A).ins("next-turn", 0, [P])
    const seedLength = seed.events.length
    const b = seed.es().ins("next-turn", 0, [P])
    expect(found(b.events, { seedLength })).toStrictEqual([{ seq: b.last, rule: "R9" }])
  })

  it("5.2 seedLength: splices inside the seed are not folded (an invalid seed splice is not R18) but later ones are", () => {
    const b = new HandLog().ins("next-turn", 3, [A]).es().ins("next-turn", 1, [B])
    expect(found(b.events, { seedLength: 1 })).toStrictEqual([{ seq: 2, rule: "R18" }])
  })

  it("5.2 R19: an open final turn is fine without closed; closed: true adds exactly one R19 after the others", () => {
    const b = opening(new HandLog(), A).answer(1, 1, "x").se(1, 1).chunk(1, 1, 1, { type: "block-end", index: 0 })
    const open = found(b.events)
    expect(open).toStrictEqual([{ seq: b.last, rule: "R5" }])
    const closed = found(b.events, { closed: true })
    expect(closed.slice(0, -1)).toStrictEqual(open)
    expect(closed[closed.length - 1]!.rule).toBe("R19")
    expect(closed.filter((v) => v.rule === "R19")).toHaveLength(1)
    // A balanced log with closed: true reports nothing.
    expect(found(textTurn(new HandLog(), A).events, { closed: true })).toStrictEqual([])
    expect(found([], { closed: true })).toStrictEqual([])
  })

  it("5.2: violations carry the offending event's seq and come in seq order", () => {
    const b = textTurn(new HandLog(), A)
    const r6 = b.push("compaction/summary", { turn: 1 }).last
    const r2 = b.te(1, { kind: "blocked" }).last
    const v = found(b.events)
    expect(v).toStrictEqual([{ seq: r6, rule: "R6" }, { seq: r2, rule: "R2" }])
    for (const x of checkLog(b.events)) expect(typeof x.message === "string" && x.message.length > 0).toBe(true)
  })

  it("5.2: checkLog is total: it never throws on malformed event data", () => {
    const bad: ReadonlyArray<ReadonlyArray<unknown>> = [
      [{ type: "turn/start", seq: 0, time: 0, data: null }],
      [{ type: "tool/result", seq: 0, time: 0, data: {}, surfaceOp: "append" }],
      [{ type: "agent/inbox/spliced", seq: 0, time: 0, data: { target: "nowhere" } }],
      [{ type: "assistant/message", seq: 0, time: 0, data: { turn: 1 }, surfaceOp: "append" }],
      [{ type: "user/message", seq: 0, time: 0, data: 5, surfaceOp: { op: "replace", start: 9, end: 1 } }],
      [{ type: "turn/end", seq: 0, time: 0, data: { turn: 1 } }],
      [{ type: "compaction/end", seq: 0, time: 0, data: [] }],
      [null, undefined, 3]
    ]
    for (const events of bad) {
      let result: unknown
      expect(() => {
        result = checkLog(events as unknown as ReadonlyArray<SessionEvent>, { closed: true })
      }, JSON.stringify(events)).not.toThrow()
      expect(Array.isArray(result)).toBe(true)
    }
  })

  it("5.2 R13: a TOOL_NOT_STARTED result that lacks a citation although its tool/call exists is R13", () => {
    const b = opening(new HandLog(), A).answer(1, 1, "x", [{ id: "c1", name: "t", arguments: "{}" }]).tc(1, 1, "c1")
      .tr(1, 1, "c1", undefined, { name: "ToolNotStarted", code: "TOOL_NOT_STARTED" })
    expect(found(b.events)).toStrictEqual([{ seq: b.last, rule: "R13" }])
  })

  it("5.2 R13: a repair TOOL_NOT_STARTED result without tool/call and without citation is valid", () => {
    const b = opening(new HandLog(), A).answer(1, 1, "x", [{ id: "c1", name: "t", arguments: "{}" }])
      .tr(1, 1, "c1", undefined, { name: "ToolNotStarted", code: "TOOL_NOT_STARTED" }).se(1, 1).te(1, {
        kind: "interrupted"
      })
    expect(found(b.events, { closed: true })).toStrictEqual([])
  })

  it("5.2 R10: an llm/retry after an `aborted` failure finish is accepted; the next attempt's chunks are attempt 2", () => {
    const failure = { message: "x", code: "NETWORK" }
    const b = opening(new HandLog(), A)
      .chunk(1, 1, 1, { type: "finish", finish: { kind: "aborted", failure } })
      .push("llm/retry", { turn: 1, step: 1, attempt: 1, delayMs: 1000, failure })
      .answer(1, 1, "x", [], "stop", 2).se(1, 1).te(1)
    expect(found(b.events)).toStrictEqual([])
  })

  it("5.2 R16: reasons other than completed/max-tokens are not constrained by a max-tokens step", () => {
    for (
      const reason of [{ kind: "error", error: { message: "m", code: "c" } }, { kind: "blocked" }, {
        kind: "interrupted"
      }]
    ) {
      const b = opening(new HandLog(), A).answer(1, 1, "cut", [], "max-tokens").se(1, 1).te(1, reason)
      expect(found(b.events), JSON.stringify(reason)).toStrictEqual([])
    }
  })

  it("5.2 R8: an appended user/message after the step's request/header (not directly after step/start or another appended UM) is R8", () => {
    const b = opening(new HandLog(), A).um(C)
    expect(found(b.events).map((v) => v.rule)).toContain("R8")
    expect(found(b.events).every((v) => v.seq === b.last)).toBe(true)
  })

  it("5.2 R5: request/header inside an open turn but between steps is R5", () => {
    const b = opening(new HandLog(), A).answer(1, 1, "x").se(1, 1).rh()
    expect(found(b.events)).toStrictEqual([{ seq: b.last, rule: "R5" }])
  })

  it("5.2 R6: compaction/summary {turn: 1} after turn 1 ended is R6", () => {
    const b = textTurn(new HandLog(), A).push("compaction/summary", { turn: 1 })
    expect(found(b.events)).toStrictEqual([{ seq: b.last, rule: "R6" }])
  })

  it("5.2 R9/3.9: assistant and tool-result ids are known ids, so inserting a user message with such an id is R9", () => {
    const base = () =>
      opening(new HandLog(), A).answer(1, 1, "x", [{ id: "c1", name: "t", arguments: "{}" }]).tc(1, 1, "c1")
    const c1Seq = base().last
    const done = () => base().tr(1, 1, "c1", [c1Seq]).se(1, 1).ss(1, 2).answer(1, 2, "y").se(1, 2).te(1)
    const am = done().ins("next-turn", 0, [u("am-1-1")])
    expect(found(am.events)).toStrictEqual([{ seq: am.last, rule: "R9" }])
    const tr = done().ins("next-step", 0, [u("tr-c1")])
    expect(found(tr.events)).toStrictEqual([{ seq: tr.last, rule: "R9" }])
    expect(found(done().ins("next-step", 0, [u("fresh")]).events)).toStrictEqual([])
  })

  it("5.2 R7: a second CLM(ns) right after the opening CLM(ns) is R7", () => {
    const b = new HandLog().ins("next-step", 0, [C]).ts(1).clm("next-step", 1).clm("next-step", 1)
    const r7 = found(b.events).filter((v) => v.rule === "R7")
    expect(r7.length).toBeGreaterThan(0)
    expect(r7.every((v) => v.seq === b.last)).toBe(true)
  })

  it.scoped("3.9/8.4: an id used by a logged assistant message or tool result is known: delivering it fails DuplicateMessage {state: entered}", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const log = yield* SessionLog
      const inbox = yield* Inbox
      yield* driver.followup(A)
      yield* driver.whenIdle
      const events = yield* log.events
      const am = events.find((e) => e.type === "assistant/message")!.data as {
        readonly message: { readonly id: string }
      }
      const tr = events.find((e) => e.type === "tool/result")!.data as { readonly message: { readonly id: string } }
      const before = events.length
      for (const id of [am.message.id, tr.message.id]) {
        const e1 = yield* Effect.flip(driver.followup(userMessage({ id, text: "dup" })))
        expect(e1).toBeInstanceOf(DuplicateMessage)
        expect(e1).toMatchObject({ id, state: "entered" })
        const e2 = yield* Effect.flip(inbox.append("next-step", userMessage({ id, text: "dup" })))
        expect(e2).toMatchObject({ _tag: "DuplicateMessage", id, state: "entered" })
        expect(Option.getOrUndefined(yield* inbox.idState(MessageId.make(id)))).toBe("entered")
      }
      expect((yield* log.events).length).toBe(before)
    }).pipe(Effect.provide(toolRoundTrip())))

  it.scoped("5.2/P45: every prefix of a live tool round-trip log is valid, and the whole log is valid with closed: true", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      const log = yield* SessionLog
      yield* driver.followup(A)
      yield* driver.whenIdle
      const events = yield* log.events
      expect(events.some((e) => e.type === "tool/result")).toBe(true)
      for (let n = 0; n <= events.length; n++) expect(checkLog(events.slice(0, n)), `prefix ${n}`).toStrictEqual([])
      expect(checkLog(events, { closed: true })).toStrictEqual([])
      // deriveMessages over the same events is the session's derived history.
      expect(deriveMessages(events)).toStrictEqual(yield* log.messages)
    }).pipe(Effect.provide(toolRoundTrip())))
})

// 5.2 checkLog around replacements and identity ---------------------------------------------------

describe("§5.2 checkLog over a real log", () => {
  it.scoped("5.2: prefix-closed: every prefix of a valid log is []; with closed: true exactly the prefixes ending inside a turn report R19 at their last seq", () =>
    Effect.gen(function*() {
      const es = yield* richLog
      let open = false
      for (let k = 0; k <= es.length; k++) {
        const prefix = es.slice(0, k)
        if (k > 0 && es[k - 1]!.type === "turn/start") open = true
        if (k > 0 && es[k - 1]!.type === "turn/end") open = false
        expect(checkLog(prefix), `prefix ${k}`).toEqual([])
        const closed = checkLog(prefix, { closed: true })
        expect(closed.map((v) => [v.seq, v.rule]), `closed prefix ${k}`).toEqual(open ? [[k - 1, "R19"]] : [])
      }
    }))

  it.scoped("5.2: checkLog reports relational rules only; an acceptance-rule flaw of 5.1 (a replacement not citing a shadowed seq) is not a RuleId", () =>
    Effect.gen(function*() {
      const es = yield* richLog
      const bad = mutate(es, 48, (e) => {
        e.sourceEventSeqs = [4, 17, 26, 46]
      })
      const rules = checkLog(bad, { closed: true }).map((v) => v.rule)
      expect(rules.every((r) => /^R(1[0-9]|[1-9])$/.test(r))).toBe(true)
      // The same flaw is still refused on load, relations or not.
      const { store, run } = yield* withStore
      yield* store.create(header("bad"), bad)
      expect(
        outcome(
          yield* Effect.exit(run([], Effect.void, { sessionId: "bad", resume: true, agent: { invariants: "off" } }))
        )
      ).toBe("MalformedLog@48")
    }))
})
