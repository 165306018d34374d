/**
 * The trace of durable approvals (SPEC 4.12): a request is an event of its call's span, which says
 * it is pending; the answer another event, with the decision, who gave it, why and how long it waited.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { foldSpans } from "../../../src/internal/telemetry/SpanFold.js"
import { approvalSession } from "../../fixtures/approvalSession.js"

describe("SpanFold: durable approvals", () => {
  it.live("the call's span carries the request and the answer as events and its status as attributes", () =>
    Effect.gen(function*() {
      const { events, header } = yield* approvalSession
      const actions = foldSpans(events, { sessionId: header.sessionId })
      const onSpan = (key: string) => actions.filter((a) => a._tag !== "Open" && a.key === key)
      const c2 = onSpan("tool:c2")
      expect(c2.filter((a) => a._tag === "Event").map((a) => a._tag === "Event" && a.name)).toEqual([
        "tiller.approval.request",
        "tiller.approval.answer"
      ])
      const answer = c2.find((a) => a._tag === "Event" && a.name === "tiller.approval.answer")!
      expect(answer._tag === "Event" && answer.attributes).toMatchObject({
        "tiller.approval.decision": "deny",
        "tiller.approval.by": "bob",
        "tiller.approval.answer_reason": "not today",
        "gen_ai.tool.call.id": "c2"
      })
      expect(answer._tag === "Event" && typeof answer.attributes["tiller.approval.wait_ms"]).toBe("number")
      const statuses = c2.flatMap((a) =>
        a._tag === "Attributes" && a.attributes["tiller.approval.status"] !== undefined
          ? [a.attributes["tiller.approval.status"]]
          : []
      )
      expect(statuses).toEqual(["pending", "refused"])
      expect(c2.at(-1)).toMatchObject({ _tag: "End", error: { type: "DENIED" } })
      const c1 = onSpan("tool:c1")
      expect(c1.find((a) => a._tag === "Event" && a.name === "tiller.approval.answer")).toMatchObject({
        attributes: {
          "tiller.approval.decision": "allow",
          "tiller.approval.by": "alice",
          "tiller.approval.rule": "Bash(make)"
        }
      })
      expect(c1.at(-1)).toMatchObject({ _tag: "End" })
      expect(c1.at(-1)).not.toHaveProperty("error")
    }))
})
