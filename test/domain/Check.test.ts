import { describe, expect, it } from "@effect/vitest"
import { FastCheck } from "effect"
import { checkLog } from "../../src/domain/Check.js"
import type { RuleId } from "../../src/domain/Errors.js"
import type { EventOf, SessionEvent } from "../../src/domain/Event.js"
import { repairClosers } from "../../src/domain/Repair.js"
import type { LogBuilder } from "../fixtures/events.js"
import { assistantMessage, call, event, llmFailure, log, reason, repairError, text, user } from "../fixtures/events.js"

const A = user("A")
const B = user("B")
const C = user("C")
const D = user("D")
const X = user("X")
const Y = user("Y")
const S = user("S", "summary of the conversation")

type Found = ReadonlyArray<{ readonly seq: number; readonly rule: RuleId }>

const found = (
  events: ReadonlyArray<SessionEvent>,
  options?: { readonly seedLength?: number; readonly closed?: boolean }
): Found => checkLog(events, options).map(({ rule, seq }) => ({ seq, rule }))

/** The log is rejected with exactly one violation: `rule` at `seq` (default: the last event). */
const rejects = (b: LogBuilder, rule: RuleId, seq = b.lastSeq): void => {
  expect(found(b.events)).toStrictEqual([{ seq, rule }])
}

const accepts = (b: LogBuilder | ReadonlyArray<SessionEvent>): void => {
  expect(checkLog("events" in b ? b.events : b)).toStrictEqual([])
}

// Prefixes ------------------------------------------------------------------------------------

/** `⟨INS(nt,0,[A]) TS(1) CLM(nt,0,1)⟩` */
const opened = (b = log()) => b.insert("next-turn", 0, [A]).turnStart().claim("next-turn", 1)
/** `… ⟨SS(1,1) UM(A)⟩ RH(initial)` */
const inStep = (b = log()) => opened(b).stepStart().enter(A).header()
/** C1: a whole text turn. */
const c1 = () => inStep().respond("hello").stepEnd().turnEnd()

// Valid logs (SPEC 4.11 and the brief) ---------------------------------------------------------

const validLogs: ReadonlyArray<readonly [string, () => LogBuilder]> = [
  ["C1 one follow-up, text answer", c1],
  [
    "C2 tool round trip",
    () =>
      inStep().respondWithCalls([call("c1")]).toolCall("c1").toolResult("c1").stepEnd()
        .stepStart().respond("done").stepEnd().turnEnd()
  ],
  [
    "C3 idle inject, then follow-up",
    () =>
      log().insert("next-step", 0, [C]).insert("next-turn", 0, [A]).turnStart().claim("next-step", 1).claim(
        "next-turn",
        1
      )
        .stepStart().enter(C, A).header().respond("ok").stepEnd().turnEnd()
  ],
  [
    "C4 rejection, then the chain continues",
    () =>
      log().insert("next-turn", 0, [X]).turnStart().claim("next-turn", 1).insert("next-turn", 0, [Y])
        .turnEnd(reason.blocked("contains X")).turnStart().claim("next-turn", 1)
        .stepStart().enter(Y).header().respond("y").stepEnd().turnEnd()
  ],
  [
    "C5 cancel while streaming",
    () =>
      inStep().chunk({ type: "block-start", index: 0, block: "text" }).chunk({
        type: "text-delta",
        index: 0,
        text: "partial"
      })
        .assistant([text("partial")], { interrupted: true }).stepEnd().turnEnd(reason.aborted({ kind: "user" }))
  ],
  [
    "C6 retry inside the step",
    () =>
      inStep().finishFailed("error", llmFailure("RATE_LIMIT", 429)).retry(llmFailure("RATE_LIMIT", 429), 2000)
        .respond("second try").stepEnd().turnEnd()
  ],
  ["a zero-step blocked turn", () => opened().turnEnd(reason.blocked("no"))],
  [
    "a chain of two turns",
    () =>
      log().insert("next-turn", 0, [A]).insert("next-turn", 1, [B]).turnStart().claim("next-turn", 1)
        .stepStart().enter(A).header().respond("a").stepEnd()
        .turnEnd().turnStart().claim("next-turn", 1)
        .stepStart().enter(B).respond("b").stepEnd().turnEnd()
  ],
  [
    "a boundary claim after step/end",
    () =>
      inStep().respond("first").insert("next-step", 0, [C]).stepEnd().claim("next-step", 1)
        .stepStart().enter(C).respond("second").stepEnd().turnEnd()
  ],
  [
    "P24 parallel tool batch with contexts",
    () =>
      inStep().respondWithCalls([call("c1"), call("c2")]).toolCall("c1").toolCall("c2")
        .toolResult("c1").insert("next-step", 0, [user("ctx-c1")])
        .toolResult("c2").insert("next-step", 1, [user("ctx-c2")])
        .stepEnd().claim("next-step", 2).stepStart().enter(user("ctx-c1"), user("ctx-c2")).respond("both").stepEnd()
        .turnEnd()
  ],
  [
    "P24 exclusive tool batch with contexts",
    () =>
      inStep().respondWithCalls([call("c1"), call("c2")])
        .toolCall("c1").toolResult("c1").insert("next-step", 0, [user("ctx-c1")])
        .toolCall("c2").toolResult("c2").insert("next-step", 1, [user("ctx-c2")])
        .stepEnd().claim("next-step", 2).stepStart().enter(user("ctx-c1"), user("ctx-c2")).respond("both").stepEnd()
        .turnEnd()
  ],
  [
    "never-started calls as adjacent pairs, a draining step's contexts discarded",
    () =>
      inStep().respondWithCalls([call("c1"), call("c2")])
        .toolCall("c1").toolResult("c1", { isError: true, error: { name: "AbortedError", code: "ABORTED" } })
        .insert("next-step", 0, [user("ctx-c1")]).cancel("next-step", 0, 1)
        .toolCall("c2").toolResult("c2", {
          isError: true,
          error: { name: "AbortedError", code: "ABORTED_BEFORE_DISPATCH" }
        })
        .stepEnd().turnEnd(reason.aborted({ kind: "user" }))
  ],
  [
    "repair TOOL_NOT_STARTED and TOOL_OUTCOME_UNKNOWN results",
    () =>
      inStep().respondWithCalls([call("c1"), call("c2")]).toolCall("c1")
        .toolResult("c1", { id: "interrupted-tool-result-c1-9", isError: true, error: repairError.outcomeUnknown })
        .toolResult("c2", {
          id: "interrupted-tool-result-c2-10",
          isError: true,
          error: repairError.notStarted,
          sourceEventSeqs: null
        })
        .stepEnd().turnEnd(reason.interrupted)
  ],
  [
    "extension events and replacement user messages outside turns",
    () => {
      const b = c1().extension("acme/note", { text: "hi" })
      const um = 4
      const am = b.events.findIndex((e) => e.type === "assistant/message")
      return b.replaceWithUser(S, um, am, [um, am]).extension("acme/declared", [1, 2], false)
    }
  ],
  [
    "session/end-seed anywhere",
    () =>
      log().endSeed().insert("next-turn", 0, [A]).endSeed().turnStart().claim("next-turn", 1).endSeed()
        .stepStart().enter(A).endSeed().header().chunk({ type: "block-start", index: 0, block: "text" }).endSeed()
        .chunk({ type: "text-delta", index: 0, text: "x" }).finish().assistant([text("x")]).endSeed()
        .stepEnd().endSeed().turnEnd().endSeed()
  ],
  [
    "session/end-seed between turn/start and its claim, and between step/start and its entered message",
    () =>
      log().insert("next-turn", 0, [A]).turnStart().endSeed().claim("next-turn", 1)
        .stepStart().endSeed().enter(A).endSeed().header().respond("x").stepEnd().turnEnd()
  ],
  [
    "compaction brackets: null outside turns, numeric inside the open turn",
    () =>
      log().compaction("start", null).compaction("summary", null, { text: "s" }).compaction("end", null)
        .insert("next-turn", 0, [A]).turnStart().claim("next-turn", 1).compaction("start", 1)
        .stepStart().enter(A).header().compaction("summary", 1).respond("x").compaction("end", 1, {
          error: { message: "boom" }
        })
        .stepEnd().turnEnd().compaction("summary", null)
  ],
  [
    "a compaction bracket abandoned at session/end-seed",
    () => log().compaction("start", null).endSeed().compaction("start", null).compaction("end", null)
  ],
  [
    "a compaction bracket {turn:n} abandoned at turn/end n",
    () => opened().compaction("start", 1).turnEnd(reason.blocked()).compaction("start", null).compaction("end", null)
  ],
  [
    "max-tokens is sticky within the turn",
    () =>
      inStep().respond("cut", "max-tokens").stepEnd().stepStart().respond("rest").stepEnd().turnEnd(reason.maxTokens)
  ],
  [
    "an interrupted message before any chunk",
    () => inStep().assistant([], { interrupted: true }).stepEnd().turnEnd(reason.aborted({ kind: "disposed" }))
  ],
  [
    "inbox mutations between turns",
    () =>
      c1().insert("next-turn", 0, [B]).replacePending("next-turn", 0, 1, [user("B", "edited")])
        .insert("next-turn", 1, [D]).cancel("next-turn", 1, 1)
  ]
]

describe("checkLog accepts", () => {
  for (const [name, build] of validLogs) {
    it(name, () => {
      accepts(build())
      expect(checkLog(build().events, { closed: true })).toStrictEqual([])
    })
  }

  it("C6: the answer is attempt 2 and cites only attempt 2's chunks", () => {
    const events = validLogs[5]![1]().events
    const am = events.find((e) => e.type === "assistant/message") as EventOf<"assistant/message">
    const retry = events.findIndex((e) => e.type === "llm/retry")
    expect((am.data as { readonly attempt: number }).attempt).toBe(2)
    expect(am.sourceEventSeqs).toStrictEqual([retry + 1, retry + 2, retry + 3, retry + 4])
  })

  it("a fork child: the seed's claims and entered messages are not folded again", () => {
    const source = log().insert("next-step", 0, [C]).insert("next-turn", 0, [A]).turnStart()
      .claim("next-step", 1).claim("next-turn", 1).stepStart().enter(C, A).header().respond("x").stepEnd().turnEnd()
      .insert("next-step", 0, [D])
    const seedLength = source.next
    const child = source.endSeed().insert("next-turn", 0, [B]).insert("next-step", 0, [user("E")]).turnStart(2)
      .claim("next-step", 1).claim("next-turn", 1).stepStart().enter(user("E"), B).header("resume").respond("y")
      .stepEnd().turnEnd()
    expect(found(child.events, { seedLength, closed: true })).toStrictEqual([])
    // Folding from 0 instead, the child's fresh lists disagree with the seed's leftover [D]: the turn-2
    // opening does not claim the whole next-step list.
    expect(found(child.events)).toStrictEqual([{ seq: seedLength + 4, rule: "R7" }])
  })

  it("a resumed log: repair closers, end-seed, and the next turn", () => {
    const crashed = inStep().respondWithCalls([call("call-1")]).toolCall("call-1")
    const closers = repairClosers(crashed.events)
    const b = log()
    for (const e of [...crashed.events, ...closers]) b.push(() => e)
    b.turn = 1
    b.endSeed().insert("next-turn", 0, [B]).turnStart().claim("next-turn", 1).stepStart().enter(B).header("resume")
      .respond("z").stepEnd().turnEnd()
    expect(found(b.events, { closed: true })).toStrictEqual([])
  })
})

describe("checkLog is prefix-closed", () => {
  for (const [name, build] of validLogs) {
    it(name, () => {
      const events = build().events
      for (let k = 0; k <= events.length; k++) {
        expect({ k, violations: found(events.slice(0, k)) }).toStrictEqual({ k, violations: [] })
      }
    })
  }

  // Random well-formed logs: turns of random steps (text, tool batches, retries, max-tokens,
  // interruptions) interleaved with free events.
  type StepPlan = "text" | "max-tokens" | "tools" | "exclusive-tools" | "retry" | "interrupted"
  type TurnPlan = { readonly steps: ReadonlyArray<StepPlan>; readonly free: ReadonlyArray<number> }
  const turnPlan: FastCheck.Arbitrary<TurnPlan> = FastCheck.record({
    steps: FastCheck.array(
      FastCheck.constantFrom<StepPlan>("text", "max-tokens", "tools", "exclusive-tools", "retry", "interrupted"),
      { maxLength: 4 }
    ),
    free: FastCheck.array(FastCheck.nat(3), { maxLength: 4 })
  })
  const freeEvent = (b: LogBuilder, kind: number, n: string): void => {
    if (kind === 0) b.endSeed()
    else if (kind === 1) b.extension("acme/tick", { n })
    else if (kind === 2) b.compaction("summary", b.turnOpen ? b.turn : null)
    else b.insert("next-turn", 0, [user(`late-${n}`)]).cancel("next-turn", 0, 1)
  }
  const build = (plans: ReadonlyArray<TurnPlan>): Array<SessionEvent> => {
    const b = log()
    let headerLogged = false
    plans.forEach((plan, t) => {
      const first = user(`m-${t}`)
      b.insert("next-turn", 0, [first]).turnStart().claim("next-turn", 1)
      let maxTokens = false
      let stopped = false
      plan.steps.forEach((kind, k) => {
        if (stopped) return
        b.stepStart()
        if (k === 0) b.enter(first)
        if (!headerLogged) b.header()
        headerLogged = true
        plan.free.slice(0, k).forEach((f, i) => freeEvent(b, f, `${t}-${k}-${i}`))
        switch (kind) {
          case "text":
            b.respond("t")
            break
          case "max-tokens":
            b.respond("t", "max-tokens")
            maxTokens = true
            break
          case "tools":
            b.respondWithCalls([call(`a${t}${k}`), call(`b${t}${k}`)]).toolCall(`a${t}${k}`).toolCall(`b${t}${k}`)
              .toolResult(`a${t}${k}`).toolResult(`b${t}${k}`)
            break
          case "exclusive-tools":
            b.respondWithCalls([call(`a${t}${k}`), call(`b${t}${k}`)]).toolCall(`a${t}${k}`).toolResult(`a${t}${k}`)
              .insert("next-step", 0, [user(`ctx-${t}-${k}`)]).toolCall(`b${t}${k}`).toolResult(`b${t}${k}`)
            break
          case "retry":
            b.finishFailed().retry().respond("t")
            break
          case "interrupted":
            b.streamText("part").assistant([text("part")], { interrupted: true })
            stopped = true
        }
        b.stepEnd()
        if (kind === "exclusive-tools") {
          b.claim("next-step", 1).stepStart().enter(user(`ctx-${t}-${k}`)).respond("ctx").stepEnd()
        }
      })
      plan.free.forEach((f, i) => freeEvent(b, f, `${t}-end-${i}`))
      b.turnEnd(stopped ? reason.aborted() : maxTokens ? reason.maxTokens : reason.completed)
    })
    return b.events
  }

  it.prop(
    "every prefix of a random well-formed log is valid",
    [FastCheck.array(turnPlan, { minLength: 1, maxLength: 4 })],
    ([plans]) => {
      const events = build(plans)
      if (checkLog(events, { closed: true }).length !== 0) return false
      for (let k = 0; k < events.length; k++) if (checkLog(events.slice(0, k)).length !== 0) return false
      return true
    },
    { fastCheck: { numRuns: 150 } }
  )
})

describe("checkLog rejects, one rule at a time", () => {
  it("reports a readable message with each violation", () => {
    const b = c1().turnEnd()
    const [violation] = checkLog(b.events)
    expect(violation?.message).toMatch(/turn\/end/)
  })

  describe("R1 turn-start", () => {
    it("a second turn/start while a turn is open", () => rejects(opened().turnStart(2), "R1"))
    it("turn/start {3} after turn 1", () => {
      const b = c1().insert("next-turn", 0, [B]).turnStart(3)
      const ts = b.lastSeq
      rejects(b.claim("next-turn", 1), "R1", ts)
    })
    it("a first turn/start that is not turn 1", () => rejects(log().insert("next-turn", 0, [A]).turnStart(2), "R1"))
    it("accepts turn/start {2} after turn 1", () =>
      accepts(c1().insert("next-turn", 0, [B]).turnStart(2).claim("next-turn", 1)))
  })

  describe("R2 turn-end", () => {
    it("turn/end with no open turn", () => rejects(c1().turnEnd(reason.completed, 1), "R2"))
    it("turn/end naming another turn", () => rejects(opened().turnEnd(reason.blocked(), 2), "R2"))
    it("turn/end with an open step", () => rejects(inStep().respond("x").turnEnd(), "R2"))
    it("accepts turn/end after step/end", () => accepts(inStep().respond("x").stepEnd().turnEnd()))
  })

  describe("R3 step-start", () => {
    it("step/start with no open turn", () => rejects(c1().stepStart(2, 1), "R3"))
    it("step/start for another turn", () => rejects(opened().stepStart(1, 2), "R3"))
    it("a nested step/start", () => rejects(inStep().stepStart(2), "R3"))
    it("step/start {3} after step 1", () => rejects(inStep().respond("x").stepEnd().stepStart(3), "R3"))
    it("a first step/start that is not step 1", () => rejects(opened().stepStart(2), "R3"))
    it("accepts step/start {2} after step 1", () => accepts(inStep().respond("x").stepEnd().stepStart(2)))
  })

  describe("R4 step-end", () => {
    it("step/end naming another step", () => rejects(inStep().respond("x").stepEnd(2), "R4"))
    it("step/end naming another turn", () => rejects(inStep().respond("x").stepEnd(1, 2), "R4"))
    it("step/end with no open step", () => rejects(inStep().respond("x").stepEnd().stepEnd(), "R4"))
    it("accepts step/end of the open step", () => accepts(inStep().respond("x").stepEnd(1, 1)))
  })

  describe("R5 step-enclosed", () => {
    it("a chunk with no open step", () =>
      rejects(
        c1().push((seq) =>
          event.chunk(seq, { turn: 1, step: 1, attempt: 1 }, { type: "text-delta", index: 0, text: "x" })
        ),
        "R5"
      ))
    it("a chunk inside the turn between steps", () =>
      rejects(inStep().respond("x").stepEnd().chunk({ type: "text-delta", index: 0, text: "x" }), "R5"))
    it("request/header outside a step", () => rejects(c1().header("change"), "R5"))
    it("request/header in the open turn before its first step", () => rejects(opened().header(), "R5"))
    it("an assistant/message naming another step", () =>
      rejects(inStep().finish().assistant([text("x")], { at: { turn: 1, step: 2 } }), "R5"))
    it("a tool/call with no open step", () => {
      const b = inStep().respondWithCalls([call("c1")]).toolCall("c1").toolResult("c1").stepEnd()
      rejects(b.push((seq) => event.toolCall(seq, { turn: 1, step: 1 }, call("c1"))), "R5")
    })
    it("an appended tool/result naming another turn", () => {
      rejects(
        inStep().respondWithCalls([call("c1")]).toolCall("c1").toolResult("c1", { at: { turn: 2, step: 1 } }),
        "R5"
      )
    })
    it("an llm/retry with no open step", () => {
      rejects(c1().push((seq) => event.retry(seq, { turn: 1, step: 1, attempt: 1 }, llmFailure())), "R5")
    })
    it("accepts all of them inside the open step", () =>
      accepts(inStep().finishFailed().retry().respondWithCalls([call("c1")]).toolCall("c1").toolResult("c1")))
  })

  describe("R6 compaction", () => {
    it("compaction/start {turn:1} while idle", () => rejects(log().compaction("start", 1), "R6"))
    it("compaction/start {turn:null} inside a turn", () => rejects(opened().compaction("start", null), "R6"))
    it("compaction/summary naming another turn", () => rejects(opened().compaction("summary", 2), "R6"))
    it("compaction/end without a compaction/start", () => rejects(log().compaction("end", null), "R6"))
    it("compaction/end of another bracket's turn", () =>
      rejects(
        log().compaction("start", null).insert("next-turn", 0, [A]).turnStart().claim("next-turn", 1).compaction(
          "end",
          1
        ),
        "R6"
      ))
    it("compaction/start while a bracket is open", () =>
      rejects(log().compaction("start", null).compaction("start", null), "R6"))
    it("a bracket abandoned at session/end-seed cannot be ended", () =>
      rejects(log().compaction("start", null).endSeed().compaction("end", null), "R6"))
    it("a bracket abandoned at turn/end n cannot be ended in the next turn", () => {
      const b = opened().compaction("start", 1).turnEnd(reason.blocked()).insert("next-turn", 0, [B]).turnStart().claim(
        "next-turn",
        1
      )
      rejects(b.compaction("end", 2), "R6")
    })
    it("accepts a null bracket spanning a whole turn", () =>
      accepts(
        log().compaction("start", null).insert("next-turn", 0, [A]).turnStart().claim("next-turn", 1).turnEnd(
          reason.blocked()
        ).compaction("end", null)
      ))
    it("accepts compaction/start {turn:1} inside turn 1", () =>
      accepts(opened().compaction("start", 1).compaction("end", 1)))
  })

  describe("R7 claim-placement", () => {
    it("turn/start not followed by a claim", () => {
      const b = log().insert("next-turn", 0, [A]).turnStart().stepStart()
      rejects(b, "R7", b.lastSeq)
    })
    it("a claim outside a turn", () => rejects(log().insert("next-step", 0, [C]).claim("next-step", 1), "R7"))
    it("CLM(nt) at a step boundary", () => {
      const b = log().insert("next-turn", 0, [A, B]).turnStart().claim("next-turn", 1).stepStart().enter(A).header()
        .respond("x").stepEnd()
      rejects(b.claim("next-turn", 1), "R7")
    })
    it("CLM(nt) removing two items", () =>
      rejects(log().insert("next-turn", 0, [A, B]).turnStart().claim("next-turn", 2), "R7"))
    it("a claim with start ≠ 0", () =>
      rejects(log().insert("next-turn", 0, [A, B]).turnStart().claim("next-turn", 1, 1), "R7"))
    it("CLM(ns) not removing the whole next-step list", () => {
      const b = log().insert("next-step", 0, [C, D]).insert("next-turn", 0, [A]).turnStart().claim("next-step", 1)
      expect(found(b.claim("next-turn", 1).events)).toStrictEqual([{ seq: 3, rule: "R7" }])
    })
    it("CLM(nt) before CLM(ns) in the opening", () => {
      rejects(
        log().insert("next-step", 0, [C]).insert("next-turn", 0, [A]).turnStart().claim("next-turn", 1).claim(
          "next-step",
          1
        ),
        "R7"
      )
    })
    it("CLM(ns) inside a step", () => rejects(inStep().insert("next-step", 0, [C]).claim("next-step", 1), "R7"))
    it("a second CLM(ns) in one boundary", () => {
      const b = inStep().respond("x").insert("next-step", 0, [C]).stepEnd().claim("next-step", 1).insert(
        "next-step",
        0,
        [D]
      )
      rejects(b.claim("next-step", 1), "R7")
    })
    it("accepts CLM(ns) then CLM(nt) in the opening, and one CLM(ns) per boundary", () => {
      accepts(
        log().insert("next-step", 0, [C]).insert("next-turn", 0, [A]).turnStart().claim("next-step", 1).claim(
          "next-turn",
          1
        )
          .stepStart().enter(C, A).header().respond("x").insert("next-step", 0, [D]).stepEnd().extension("acme/x")
          .claim("next-step", 1)
          .stepStart().enter(D).respond("y").insert("next-step", 0, [B]).stepEnd().claim("next-step", 1).turnEnd()
      )
    })
  })

  describe("R8 entered-placement", () => {
    const opening = () =>
      log().insert("next-step", 0, [C]).insert("next-turn", 0, [A]).turnStart().claim("next-step", 1).claim(
        "next-turn",
        1
      ).stepStart()
    it("an appended user/message after a chunk", () =>
      rejects(opening().enter(A).header().chunk({ type: "block-start", index: 0, block: "text" }).enter(C), "R8"))
    it("an appended user/message outside a step", () => rejects(c1().enter(user("Z")), "R8"))
    it("an appended user/message after an extension event", () =>
      rejects(opening().enter(A).extension("acme/x").enter(C), "R8"))
    it("accepts consecutive entered messages right after step/start", () =>
      accepts(opening().enter(C, A).header().respond("x")))
  })

  describe("R9 message-identity", () => {
    it("an insertion of an entered id", () => rejects(c1().insert("next-turn", 0, [A]), "R9"))
    it("a replacement splice inserting another known id", () =>
      rejects(c1().insert("next-turn", 0, [B]).replacePending("next-turn", 0, 1, [A]), "R9"))
    it("an appended user/message that its step did not claim", () => {
      rejects(
        log().insert("next-turn", 0, [A]).insert("next-turn", 1, [B]).turnStart().claim("next-turn", 1).stepStart()
          .enter(A, B),
        "R9"
      )
    })
    it("an appended user/message entered twice", () => rejects(opened().stepStart().enter(A, A), "R9"))
    it("an appended user/message claimed for an earlier step", () => {
      const b = log().insert("next-step", 0, [C]).insert("next-turn", 0, [A]).turnStart().claim("next-step", 1).claim(
        "next-turn",
        1
      )
        .stepStart().enter(A).header().respond("x").stepEnd().stepStart()
      rejects(b.enter(C), "R9")
    })
    it("a replacement user/message with a known id", () =>
      rejects(c1().replaceWithUser(user("A", "new text"), 4, 4, [4]), "R9"))
    it("accepts a replacement splice re-inserting the id it removes", () =>
      accepts(c1().insert("next-turn", 0, [B]).replacePending("next-turn", 0, 1, [user("B", "edited")])))
    it("accepts a replacement user/message with a fresh id", () => accepts(c1().replaceWithUser(S, 4, 4, [4])))
  })

  describe("R10 attempt", () => {
    it("a chunk of another attempt", () =>
      rejects(inStep().chunk({ type: "text-delta", index: 0, text: "x" }, 2), "R10"))
    it("an llm/retry without a failure finish", () => rejects(inStep().streamText("x").retry(), "R10"))
    it("an llm/retry after the assistant/message", () => rejects(inStep().respond("x").retry(), "R10"))
    it("an llm/retry naming another attempt", () =>
      rejects(inStep().finishFailed().retry(llmFailure(), 1000, 2), "R10"))
    it("a chunk after its attempt's finish chunk", () =>
      rejects(inStep().finish().chunk({ type: "text-delta", index: 0, text: "late" }), "R10"))
    it("an assistant/message of a past attempt", () =>
      rejects(inStep().finishFailed().retry().streamText("x").finish().assistant([text("x")], { attempt: 1 }), "R10"))
    it("accepts two failed attempts then a success", () =>
      accepts(inStep().finishFailed().retry().finishFailed("aborted").retry().respond("third").stepEnd().turnEnd()))
  })

  describe("R11 assistant-anchor", () => {
    it("a second assistant/message in a step", () => {
      rejects(inStep().respond("x").assistant([text("again")]), "R11")
    })
    it("an assistant/message without a finish chunk", () =>
      rejects(inStep().streamText("x").assistant([text("x")]), "R11"))
    it("an assistant/message after an error finish", () => rejects(inStep().finishFailed().assistant([]), "R11"))
    it("an interrupted assistant/message after a finish chunk", () =>
      rejects(inStep().streamText("x").finish().assistant([text("x")], { interrupted: true }), "R11"))
    it("an assistant/message citing only some chunks", () => {
      const b = inStep()
      const first = b.next
      rejects(b.streamText("x").finish().assistant([text("x")], { sourceEventSeqs: [first] }), "R11")
    })
    it("an assistant/message citing nothing despite chunks", () => {
      const b = inStep().streamText("x").finish()
      rejects(b.push((seq) => event.assistantMessage(seq, b.at, assistantMessage("m", [text("x")]))), "R11")
    })
    it("accepts an interrupted message citing its chunks, and a max-tokens finish", () => {
      accepts(inStep().streamText("x").assistant([text("x")], { interrupted: true }))
      accepts(inStep().respond("x", "max-tokens"))
    })
  })

  describe("R12 tool-call", () => {
    it("a tool/call before the step's assistant/message", () => rejects(inStep().toolCall("c1", call("c1")), "R12"))
    it("a tool/call with other arguments than its block", () =>
      rejects(inStep().respondWithCalls([call("c1")]).toolCall("c1", call("c1", "lookup", "{}")), "R12"))
    it("a tool/call with another name than its block", () =>
      rejects(inStep().respondWithCalls([call("c1")]).toolCall("c1", call("c1", "other")), "R12"))
    it("a tool/call for no block", () => rejects(inStep().respondWithCalls([call("c1")]).toolCall("c9"), "R12"))
    it("a repeated tool/call", () =>
      rejects(inStep().respondWithCalls([call("c1")]).toolCall("c1").toolResult("c1").toolCall("c1"), "R12"))
    it("tool/calls out of block order", () =>
      rejects(inStep().respondWithCalls([call("c1"), call("c2")]).toolCall("c2").toolCall("c1"), "R12"))
    it("accepts calls in block order", () =>
      accepts(inStep().respondWithCalls([call("c1"), call("c2")]).toolCall("c1").toolCall("c2")))
  })

  describe("R13 tool-result", () => {
    const called = () => inStep().respondWithCalls([call("c1"), call("c2")]).toolCall("c1").toolCall("c2")
    it("a tool/result answering no call of its step", () => rejects(called().toolResult("c9"), "R13"))
    it("a tool/result answering a call of an earlier step", () => {
      const b = inStep().respondWithCalls([call("c1")]).toolCall("c1").toolResult("c1").stepEnd().stepStart().respond(
        "x"
      )
      rejects(b.toolResult("c1", { id: "late" }), "R13")
    })
    it("a tool/result answering a call twice", () =>
      rejects(called().toolResult("c1").toolResult("c1", { id: "again" }), "R13"))
    it("tool/results out of block order", () => rejects(called().toolResult("c2").toolResult("c1"), "R13"))
    it("a tool/result citing something else than its tool/call", () =>
      rejects(called().toolResult("c1", { sourceEventSeqs: [4] }), "R13"))
    it("a tool/result without its tool/call", () =>
      rejects(inStep().respondWithCalls([call("c1")]).toolResult("c1"), "R13"))
    it("a TOOL_NOT_STARTED result that cites something", () =>
      rejects(
        inStep().respondWithCalls([call("c1")]).toolResult("c1", {
          isError: true,
          error: repairError.notStarted,
          sourceEventSeqs: [4]
        }),
        "R13"
      ))
    it("accepts a TOOL_NOT_STARTED repair result without a tool/call", () =>
      accepts(
        inStep().respondWithCalls([call("c1")]).toolResult("c1", {
          isError: true,
          error: repairError.notStarted,
          sourceEventSeqs: null
        }).stepEnd()
      ))
  })

  describe("R14 truncated-calls", () => {
    it("an interrupted assistant/message with a tool call", () =>
      rejects(inStep().streamCall(call("c1"), 0).assistant([call("c1")], { interrupted: true }), "R14"))
    it("a max-tokens assistant/message with a tool call", () =>
      rejects(inStep().respondWithCalls([call("c1")], "max-tokens"), "R14"))
    it("accepts a stop assistant/message with a tool call", () => accepts(inStep().respondWithCalls([call("c1")])))
  })

  describe("R15 dangling-call", () => {
    it("step/end with an unanswered call", () =>
      rejects(inStep().respondWithCalls([call("c1"), call("c2")]).toolCall("c1").toolResult("c1").stepEnd(), "R15"))
    it("step/end with a call that was started but not answered", () =>
      rejects(inStep().respondWithCalls([call("c1")]).toolCall("c1").stepEnd(), "R15"))
    it("accepts step/end once every call is answered", () =>
      accepts(
        inStep().respondWithCalls([call("c1"), call("c2")]).toolCall("c1").toolResult("c1").toolCall("c2").toolResult(
          "c2"
        ).stepEnd()
      ))
  })

  describe("R16 turn-end-reason", () => {
    it("completed after a max-tokens step", () =>
      rejects(inStep().respond("cut", "max-tokens").stepEnd().turnEnd(reason.completed), "R16"))
    it("completed after a max-tokens step followed by a stop step", () =>
      rejects(
        inStep().respond("cut", "max-tokens").stepEnd().stepStart().respond("rest").stepEnd().turnEnd(reason.completed),
        "R16"
      ))
    it("max-tokens where no step finished max-tokens", () =>
      rejects(inStep().respond("x").stepEnd().turnEnd(reason.maxTokens), "R16"))
    it("max-tokens of an earlier turn does not carry over", () => {
      const b = inStep().respond("cut", "max-tokens").stepEnd().turnEnd(reason.maxTokens)
        .insert("next-turn", 0, [B]).turnStart().claim("next-turn", 1).stepStart().enter(B).respond("x").stepEnd()
      rejects(b.turnEnd(reason.maxTokens), "R16")
    })
    it("accepts max-tokens after a max-tokens step, and aborted after one", () => {
      accepts(inStep().respond("cut", "max-tokens").stepEnd().turnEnd(reason.maxTokens))
      accepts(inStep().respond("cut", "max-tokens").stepEnd().turnEnd(reason.aborted()))
    })
  })

  describe("R17 header-first", () => {
    it("a chunk with no request/header earlier in the log", () =>
      rejects(opened().stepStart().enter(A).chunk({ type: "block-start", index: 0, block: "text" }), "R17"))
    it("accepts a chunk after a request/header of an earlier turn", () => {
      accepts(c1().insert("next-turn", 0, [B]).turnStart().claim("next-turn", 1).stepStart().enter(B).respond("x"))
    })
  })

  describe("R18 inbox-fold", () => {
    it("a cancellation of an empty list", () => rejects(log().cancel("next-turn", 0, 1), "R18"))
    it("an insertion past the end", () => rejects(log().insert("next-step", 0, [C]).insert("next-step", 2, [D]), "R18"))
    it("a claim removing more than the list holds", () => rejects(log().turnStart().claim("next-turn", 1), "R18"))
    it("a splice of none of the four shapes", () =>
      rejects(log().push((seq) => event.spliced(seq, { target: "next-turn", start: 0, outcome: "canceled" })), "R18"))
    it("accepts an invalid splice inside the seed, which is not folded", () => {
      const b = log().cancel("next-turn", 0, 1).endSeed().insert("next-turn", 0, [A])
      expect(found(b.events, { seedLength: 1 })).toStrictEqual([])
      expect(found(b.events)).toStrictEqual([{ seq: 0, rule: "R18" }])
    })
  })

  describe("R19 closed", () => {
    it("an open final turn with closed: true", () => {
      const b = inStep().respond("x")
      expect(found(b.events, { closed: true })).toStrictEqual([{ seq: b.lastSeq, rule: "R19" }])
      expect(found(b.events)).toStrictEqual([])
    })
    it("an open zero-step turn with closed: true", () => {
      const b = opened()
      expect(found(b.events, { closed: true })).toStrictEqual([{ seq: b.lastSeq, rule: "R19" }])
    })
    it("accepts balanced and empty logs with closed: true", () => {
      expect(found(c1().extension("acme/x").events, { closed: true })).toStrictEqual([])
      expect(found([], { closed: true })).toStrictEqual([])
    })
  })
})

describe("checkLog reports every violation in seq order", () => {
  it("keeps checking after the first violation", () => {
    const b = inStep().respondWithCalls([call("c1")]).stepEnd()
    const se = b.lastSeq
    b.turnEnd(reason.maxTokens)
    expect(found(b.events)).toStrictEqual([{ seq: se, rule: "R15" }, { seq: se + 1, rule: "R16" }])
  })
})
