import { describe, expect, it } from "@effect/vitest"
import { checkLog } from "../../src/domain/Check.js"
import type { SessionEvent } from "../../src/domain/Event.js"
import { repairClosers } from "../../src/domain/Repair.js"
import type { LogBuilder } from "../fixtures/events.js"
import { call, event, log, reason, text, user } from "../fixtures/events.js"

const A = user("A")
const B = user("B")

const NOT_STARTED =
  "Error: the session was interrupted before this tool call started; it did not run and may be retried."
const OUTCOME_UNKNOWN =
  "Error: the session was interrupted while this tool call was running; its outcome is unknown. Check the current state before retrying anything with side effects."

/** Replaces the last event's time with `time` (times need not be monotonic), so closers must copy it. */
const endingAt = (b: LogBuilder, time: number): Array<SessionEvent> => {
  const events = b.build()
  const last = events[events.length - 1]!
  events[events.length - 1] = { ...last, time } as SessionEvent
  return events
}

const LAST_TIME = 42

const opened = () => log().insert("next-turn", 0, [A]).turnStart().claim("next-turn", 1)
const inStep = () => opened().stepStart().enter(A).header()

const closersOf = (events: ReadonlyArray<SessionEvent>): ReadonlyArray<SessionEvent> => {
  const closers = repairClosers(events)
  // Whatever repair returns, the repaired log is a valid closed log.
  expect(checkLog([...events, ...closers], { closed: true })).toStrictEqual([])
  return closers
}

/** The synthetic tool/result repair writes for an interrupted call: `text` as its content, `error` its name and code. */
const interruptedResult = (
  seq: number,
  callId: string,
  text: string,
  error: { readonly name: string; readonly code: string },
  at: { readonly turn: number; readonly step: number }
) => ({
  type: "tool/result",
  seq,
  time: LAST_TIME,
  data: {
    turn: at.turn,
    step: at.step,
    message: {
      id: `interrupted-tool-result-${callId}-${seq}`,
      role: "user",
      content: [{ type: "tool-result", toolCallId: callId, isError: true, content: [{ type: "text", text }] }],
      source: { kind: "tool", callId }
    },
    error
  },
  surfaceOp: "append"
})

const notStartedResult = (seq: number, callId: string, at = { turn: 1, step: 1 }) =>
  interruptedResult(seq, callId, NOT_STARTED, { name: "ToolNotStartedError", code: "TOOL_NOT_STARTED" }, at)

const outcomeUnknownResult = (seq: number, callId: string, callSeq: number, at = { turn: 1, step: 1 }) => ({
  ...interruptedResult(
    seq,
    callId,
    OUTCOME_UNKNOWN,
    { name: "ToolOutcomeUnknownError", code: "TOOL_OUTCOME_UNKNOWN" },
    at
  ),
  sourceEventSeqs: [callSeq]
})

describe("repairClosers (P42)", () => {
  it("(a) an open zero-step turn gets turn/end interrupted", () => {
    const events = endingAt(opened(), LAST_TIME)
    expect(events.map((e) => e.seq)).toStrictEqual([0, 1, 2])
    expect(closersOf(events)).toStrictEqual([event.turnEnd(3, 1, reason.interrupted, LAST_TIME)])
  })

  it("(b) an open step gets step/end then turn/end, with consecutive seqs and the last event's time", () => {
    const events = endingAt(opened().stepStart().enter(A), LAST_TIME)
    const n = events.length
    expect(closersOf(events)).toStrictEqual([
      event.stepEnd(n, { turn: 1, step: 1 }, LAST_TIME),
      event.turnEnd(n + 1, 1, reason.interrupted, LAST_TIME)
    ])
  })

  it("(c) a call without tool/call gets a TOOL_NOT_STARTED result without sourceEventSeqs", () => {
    const events = endingAt(inStep().respondWithCalls([call("call-1")]), LAST_TIME)
    const n = events.length
    const closers = closersOf(events)
    expect(closers).toStrictEqual([
      notStartedResult(n, "call-1"),
      event.stepEnd(n + 1, { turn: 1, step: 1 }, LAST_TIME),
      event.turnEnd(n + 2, 1, reason.interrupted, LAST_TIME)
    ])
    expect(closers[0]).not.toHaveProperty("sourceEventSeqs")
  })

  it("(d) a call with tool/call logged gets TOOL_OUTCOME_UNKNOWN citing its tool/call", () => {
    const b = inStep().respondWithCalls([call("call-1")]).toolCall("call-1")
    const callSeq = b.callSeq("call-1")
    const events = endingAt(b, LAST_TIME)
    const n = events.length
    expect(closersOf(events)).toStrictEqual([
      outcomeUnknownResult(n, "call-1", callSeq),
      event.stepEnd(n + 1, { turn: 1, step: 1 }, LAST_TIME),
      event.turnEnd(n + 2, 1, reason.interrupted, LAST_TIME)
    ])
  })

  it("(d) resumed: closers, then end-seed, then turn 2 is a valid closed log", () => {
    const b = inStep().respondWithCalls([call("call-1")]).toolCall("call-1")
    const closers = repairClosers(b.events)
    const resumed = log()
    for (const e of [...b.events, ...closers]) resumed.push(() => e)
    resumed.turn = 1
    resumed.endSeed().insert("next-turn", 0, [B]).turnStart().claim("next-turn", 1).stepStart().enter(B).header(
      "resume"
    )
      .respond("checked").stepEnd().turnEnd()
    expect(checkLog(resumed.events, { closed: true })).toStrictEqual([])
    expect(resumed.events.find((e) => e.type === "turn/start" && e.seq > closers[0]!.seq)?.data).toStrictEqual({
      turn: 2
    })
  })

  it("(e) answered calls get nothing; unanswered ones follow block order, started or not", () => {
    const b = inStep().respondWithCalls([call("c1"), call("c2"), call("c3")]).toolCall("c1").toolCall("c2").toolResult(
      "c1"
    )
    const c2 = b.callSeq("c2")
    const events = endingAt(b, LAST_TIME)
    const n = events.length
    expect(closersOf(events)).toStrictEqual([
      outcomeUnknownResult(n, "c2", c2),
      notStartedResult(n + 1, "c3"),
      event.stepEnd(n + 2, { turn: 1, step: 1 }, LAST_TIME),
      event.turnEnd(n + 3, 1, reason.interrupted, LAST_TIME)
    ])
  })

  it("(e) calls of closed steps get nothing", () => {
    const b = inStep().respondWithCalls([call("c1")]).toolCall("c1").toolResult("c1").stepEnd()
      .stepStart().respondWithCalls([call("c2")]).toolCall("c2").toolResult("c2").stepEnd()
    const events = endingAt(b, LAST_TIME)
    expect(closersOf(events)).toStrictEqual([event.turnEnd(events.length, 1, reason.interrupted, LAST_TIME)])
  })

  it("(e) only the open step's calls are answered, naming that step", () => {
    const b = inStep().respondWithCalls([call("c1")]).toolCall("c1").toolResult("c1").stepEnd()
      .stepStart().respondWithCalls([call("c2")])
    const events = endingAt(b, LAST_TIME)
    const n = events.length
    expect(closersOf(events)).toStrictEqual([
      notStartedResult(n, "c2", { turn: 1, step: 2 }),
      event.stepEnd(n + 1, { turn: 1, step: 2 }, LAST_TIME),
      event.turnEnd(n + 2, 1, reason.interrupted, LAST_TIME)
    ])
  })

  it("an interrupted assistant/message needs no results", () => {
    const events = endingAt(inStep().streamText("par").assistant([text("par")], { interrupted: true }), LAST_TIME)
    const n = events.length
    expect(closersOf(events)).toStrictEqual([
      event.stepEnd(n, { turn: 1, step: 1 }, LAST_TIME),
      event.turnEnd(n + 1, 1, reason.interrupted, LAST_TIME)
    ])
  })

  it("repairs the open turn of a later turn, after free events, leaving a compaction bracket open", () => {
    const b = inStep().respond("x").stepEnd().turnEnd().insert("next-turn", 0, [B]).turnStart().claim("next-turn", 1)
      .compaction("start", 2).extension("acme/x")
    const events = endingAt(b, LAST_TIME)
    expect(closersOf(events)).toStrictEqual([event.turnEnd(events.length, 2, reason.interrupted, LAST_TIME)])
  })

  it("(f) balanced or empty logs yield []", () => {
    expect(closersOf([])).toStrictEqual([])
    expect(closersOf(inStep().respond("x").stepEnd().turnEnd().build())).toStrictEqual([])
    expect(closersOf(inStep().respond("x").stepEnd().turnEnd().endSeed().insert("next-step", 0, [B]).build()))
      .toStrictEqual([])
    expect(closersOf(log().insert("next-turn", 0, [A]).extension("acme/x").endSeed().build())).toStrictEqual([])
  })
})
