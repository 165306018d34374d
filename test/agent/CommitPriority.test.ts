/**
 * SPEC 4.6: "whenever a COMMIT is ready (its outcome and all earlier commits exist) it runs to
 * completion before the next START begins", with bodies forked at START step 6. A body that ends
 * while a later call's START is suspended commits before the next START; a body that ends at once
 * counts as forked: it is seen once the scheduling fiber suspends, not before.
 */
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect } from "effect"
import { Driver, Hooks, ScriptedModel, Tool } from "../../src/index.js"
import type { ToolCallInfo } from "../../src/index.js"
import { closeOut, gate, open, scenario, shape, user } from "./harness.js"
import { empty } from "./toolFixtures.js"

const threeCalls = ScriptedModel.response({
  toolCalls: [{ id: "c1", name: "t", arguments: {} }, { id: "c2", name: "t", arguments: {} }, {
    id: "c3",
    name: "t",
    arguments: {}
  }]
})

// One turn: three parallel calls of `t` (default pool of 10), then a text answer; the tool events.
const toolOrder = (
  body: (callId: string) => Effect.Effect<string>,
  pre?: (info: ToolCallInfo) => Effect.Effect<void>
) => {
  const tool = Tool.make("t", {
    description: "t",
    parameters: empty,
    mode: "parallel",
    execute: (_p, ctx) => body(ctx.callId)
  })
  return Effect.gen(function*() {
    const driver = yield* Driver
    const hooks = yield* Hooks
    if (pre !== undefined) yield* hooks.onToolPre((info, next) => Effect.zipRight(pre(info), next()))
    yield* driver.followup(user("A"))
    expect(yield* closeOut).toEqual([])
    return (yield* shape).filter((x) => /^T[CR]\(/.test(x)).join(" ")
  }).pipe(Effect.provide(scenario([threeCalls, ScriptedModel.response({ text: "done" })], { tools: [tool] })))
}

describe("4.6 commits have priority over starts", () => {
  it.scoped("a body that ends while a later call's START waits commits before the next START", () => {
    const g1 = gate()
    const c1Done = gate()
    const rest = gate()
    return Effect.map(
      toolOrder(
        (callId) =>
          callId === "c1"
            ? Effect.zipRight(Deferred.await(g1), Effect.as(open(c1Done), "one"))
            : Effect.as(Deferred.await(rest), callId),
        // c2's ToolPre lets c1 end and waits for it; c3's opens the other bodies.
        (info) =>
          info.callId === "c2"
            ? Effect.zipRight(open(g1), Deferred.await(c1Done))
            : info.callId === "c3"
            ? Effect.asVoid(open(rest))
            : Effect.void
      ),
      (order) => expect(order).toBe("TC(c1) TC(c2) TR(c1) TC(c3) TR(c2) TR(c3)")
    )
  })

  it.scoped("a body that ended at once commits before the next START when the START between suspended", () => {
    const rest = gate()
    return Effect.map(
      toolOrder(
        (callId) => callId === "c1" ? Effect.succeed("one") : Effect.as(Deferred.await(rest), callId),
        (info) =>
          info.callId === "c2" ? Effect.yieldNow() : info.callId === "c3" ? Effect.asVoid(open(rest)) : Effect.void
      ),
      (order) => expect(order).toBe("TC(c1) TC(c2) TR(c1) TC(c3) TR(c2) TR(c3)")
    )
  })

  it.scoped("bodies that end at once, with starts that never suspend, commit after the starts", () =>
    Effect.map(
      toolOrder((callId) => Effect.succeed(callId)),
      (order) => expect(order).toBe("TC(c1) TC(c2) TC(c3) TR(c1) TR(c2) TR(c3)")
    ))
})
