/**
 * SPEC 4.5 Q5 on the model seam: a `Model.stream` that throws, and a stream that interrupts itself
 * with no cancel, are failures of the stream (a synthetic error finish), through the package root only.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer, Stream } from "effect"
import { Agent, Driver, Hooks, Model, RequestErrorAction, SessionId, SessionStore, Tools } from "../../src/index.js"
import { closeOut, dataOfType, reasons, shape, user } from "./AuditHarness.js"

describe("SPEC 4.5 Q5: a defect of the model stream", () => {
  // 4.5 Q5: "stream failure or defect → append a synthetic finish chunk {kind:"error", failure}
  // (ModelError → its failure; otherwise {message, code:"UNKNOWN"})", and Q7 offers every error
  // finish to the onRequestError waterfall. A Model whose `stream` throws when called is a defect
  // of the model stream: it must be logged as a synthetic error finish and offered to recovery.
  it.scoped("4.5 Q5/Q7: a Model.stream that throws is logged as a synthetic error finish and offered to onRequestError", () =>
    Effect.gen(function*() {
      const hooks = yield* Hooks
      const driver = yield* Driver
      const offered: Array<string> = []
      yield* hooks.onRequestError((input) =>
        Effect.sync(() => {
          offered.push(input.failure.message)
          return RequestErrorAction.fail
        })
      )
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      expect(yield* reasons).toEqual([{ kind: "error", error: { message: "sync boom", code: "UNKNOWN" } }])
      expect((yield* dataOfType("assistant/chunk")).map((d) => d.chunk)).toEqual([
        { type: "finish", finish: { kind: "error", failure: { message: "sync boom", code: "UNKNOWN" } } }
      ])
      expect(offered).toEqual(["sync boom"])
      expect(yield* shape).toEqual([
        "INS(nt,0,[A])", "TS(1)", "CLM(nt,0,1)", "SS(1,1)", "UM(A)", "RH(initial)", "CH(finish error)", "SE(1,1)", "TE(1,error(UNKNOWN))"
      ])
    }).pipe(Effect.provide(
      Agent.layer({ sessionId: SessionId.make("s"), model: { provider: "p", model: "m" } }).pipe(
        Layer.provideMerge(Layer.mergeAll(
          SessionStore.layerMemory,
          Layer.succeed(Model, {
            stream: () => {
              throw new Error("sync boom")
            }
          }),
          Tools.layer()
        ))
      )
    )))
})

describe("SPEC 4.5 Q5 / 7.4: a model stream that interrupts itself", () => {
  // 4.5 Q5: a stream that fails or dies, or ends without a finish, gets a synthetic error finish;
  // 7.4 / Q8: the interrupted prefix (`interrupted: true`) is written only when a cancel cause was
  // recorded; 2.6: `completed` means "the last step stopped naturally". With no cancel, a stream
  // that interrupts itself gives no finish at all, so the attempt cannot end the turn completed.
  it.scoped("4.5 Q5/7.4: a stream interrupting itself without a cancel → synthetic error finish, no AM!, turn error (not completed)", () =>
    Effect.gen(function*() {
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      expect(yield* closeOut).toEqual([])
      const messages = yield* dataOfType("assistant/message")
      expect(messages.filter((d) => d.interrupted === true)).toEqual([])
      const chunks = (yield* dataOfType("assistant/chunk")).map((d) => d.chunk)
      expect(chunks.map((c) => c.type === "finish" ? `finish ${c.finish.kind}` : c.type)).toEqual(["block-start", "text-delta", "finish error"])
      const [reason] = yield* reasons
      expect(reason!.kind).toBe("error")
    }).pipe(Effect.provide(
      Agent.layer({ sessionId: SessionId.make("s"), model: { provider: "p", model: "m" } }).pipe(
        Layer.provideMerge(Layer.mergeAll(
          SessionStore.layerMemory,
          Layer.succeed(Model, {
            stream: () =>
              Stream.concat(
                Stream.make(
                  { type: "block-start" as const, index: 0, block: "text" as const },
                  { type: "text-delta" as const, index: 0, text: "hi" }
                ),
                Stream.fromEffect(Effect.interrupt)
              )
          }),
          Tools.layer()
        ))
      )
    )))
})
