/**
 * Durable approvals in the log (SPEC 4.12, 5.2 R20, 6.5): the pending fold, the checker's rule for
 * requests and answers, and the repair result of a call that waited when the session stopped.
 */
import { describe, expect, it } from "@effect/vitest"
import { answerAfter, describeAnswer, foldApprovals } from "../../src/domain/Approvals.js"
import { checkLog } from "../../src/domain/Check.js"
import type { EventOf, SessionEvent } from "../../src/domain/Event.js"
import { repairClosers } from "../../src/domain/Repair.js"
import type { LogBuilder } from "../fixtures/events.js"
import { call, log, user } from "../fixtures/events.js"

const A = user("A")

const request = (callId: string, turn = 1, step = 1) => (seq: number) =>
  ({
    type: "approval/request",
    seq,
    time: 0,
    data: { turn, step, callId, tool: "Bash", input: { command: "make" }, reason: "Bash asks", source: "mode" }
  }) as SessionEvent

const answer = (callId: string, decision: "allow" | "deny", extra: Record<string, string> = {}) => (seq: number) =>
  ({ type: "approval/answer", seq, time: 0, data: { callId, decision, by: "bob", ...extra } }) as SessionEvent

/** A step whose assistant message calls `c1`, with its tool/call logged. */
const calling = (): LogBuilder =>
  log().insert("next-turn", 0, [A]).turnStart().claim("next-turn", 1).stepStart().enter(A).header()
    .respondWithCalls([call("c1")]).toolCall("c1")

const rules = (events: ReadonlyArray<SessionEvent>) => checkLog(events).map((v) => [v.rule, v.message])

describe("approvals in the log", () => {
  it("a request waits until answered; the fold lists it, then not; always rules are kept", () => {
    const b = calling().push(request("c1"))
    expect(foldApprovals(b.events).pending).toEqual([
      {
        seq: b.events.length - 1,
        turn: 1,
        step: 1,
        callId: "c1",
        tool: "Bash",
        input: { command: "make" },
        reason: "Bash asks",
        source: "mode",
        interrupted: false
      }
    ])
    b.push(answer("c1", "allow", { rule: "Bash(make)" }))
    expect(foldApprovals(b.events)).toEqual({ pending: [], rules: ["Bash(make)"] })
    expect(answerAfter(b.events, "c1", b.events.length - 2)).toEqual({
      callId: "c1",
      decision: "allow",
      by: "bob",
      rule: "Bash(make)"
    })
    expect(rules(b.events)).toEqual([])
    expect(describeAnswer({ callId: "c1", decision: "deny", by: "bob", reason: "no" })).toBe("refused by bob: no")
  })

  it("R20: a request needs the call's tool/call in the open step and no result yet; one waits at a time", () => {
    const noCall = log().insert("next-turn", 0, [A]).turnStart().claim("next-turn", 1).stepStart().enter(A).header()
      .respondWithCalls([call("c1")]).push(request("c1"))
    expect(rules(noCall.events)).toEqual([["R20", "approval/request for c1, which has no tool/call in the step"]])
    const twice = calling().push(request("c1")).push(request("c1"))
    expect(rules(twice.events)).toEqual([["R20", "a second approval/request for c1"]])
    const outside = calling().push(request("c1", 1, 2))
    expect(rules(outside.events).map(([rule]) => rule)).toEqual(["R5"])
  })

  it("R20: an answer needs a waiting request: none, answered or closed by a result are violations", () => {
    expect(rules(calling().push(answer("c9", "allow")).events)).toEqual([
      ["R20", "approval/answer for c9, which has no approval/request"]
    ])
    expect(rules(calling().push(request("c1")).push(answer("c1", "allow")).push(answer("c1", "deny")).events))
      .toEqual([["R20", "approval/answer for c1, which is already answered"]])
    // A cancel while it waited: the call's result closes the request.
    const closed = calling().push(request("c1")).toolResult("c1", {
      error: { name: "AbortError", code: "ABORTED_BEFORE_DISPATCH" }
    })
    expect(foldApprovals(closed.events).pending).toEqual([])
    expect(rules(closed.push(answer("c1", "allow")).events)).toEqual([
      ["R20", "approval/answer for c1, whose call already has a result"]
    ])
  })

  it("repair: a call that waited gets APPROVAL_INTERRUPTED citing its tool/call, and its request stays pending", () => {
    const b = calling().push(request("c1"))
    const callSeq = b.callSeq("c1")
    const closers = repairClosers(b.events)
    const [result] = closers as ReadonlyArray<EventOf<"tool/result">>
    expect(result!.data.error).toEqual({ name: "ApprovalInterruptedError", code: "APPROVAL_INTERRUPTED" })
    expect(result!.sourceEventSeqs).toEqual([callSeq])
    expect(result!.data.message.content[0].content).toEqual([{
      type: "text",
      text:
        "Error: the session was interrupted while this tool call waited for approval; it did not run. The request is still pending: if it is approved the call runs and its result follows in a message."
    }])
    const repaired = [...b.events, ...closers]
    expect(checkLog(repaired, { closed: true })).toEqual([])
    expect(foldApprovals(repaired).pending).toEqual([expect.objectContaining({ callId: "c1", interrupted: true })])
    // Answered after the repair: a valid log, nothing pending.
    const answered = [...repaired, answer("c1", "allow")(repaired.length)]
    expect(checkLog(answered, { closed: true })).toEqual([])
    expect(foldApprovals(answered).pending).toEqual([])
  })

  it("repair: an answered call (allowed, so its body may have run) still gets TOOL_OUTCOME_UNKNOWN", () => {
    const b = calling().push(request("c1")).push(answer("c1", "allow"))
    const [result] = repairClosers(b.events) as ReadonlyArray<EventOf<"tool/result">>
    expect(result!.data.error?.code).toBe("TOOL_OUTCOME_UNKNOWN")
  })
})
