/**
 * SPEC §2 (durable log format) and §2.9/§6.8 (versioning): reserved ids on replacement messages,
 * the log's own `time`, and a header version that is not a number.
 */
import { describe, expect, it } from "@effect/vitest"
import { Cause, Context, Effect, Exit, Layer, Option, TestClock } from "effect"
import { Driver, InvalidEvent, ScriptedModel, SessionId, SessionLog, SessionStore, userMessage } from "../../src/index.js"
import type { SessionHeader } from "../../src/index.js"
import { agentOver, events, scenario, user } from "./AuditHarness.js"

/** The `_tag` of an exit's typed failure; "ok" for a success, "defect" for a defect or interruption. */
const failureTag = (exit: Exit.Exit<unknown, unknown>): string => {
  if (Exit.isSuccess(exit)) return "ok"
  const failure = Cause.failureOption(exit.cause)
  return Option.isSome(failure) ? String((failure.value as { readonly _tag?: unknown })._tag) : "defect"
}

describe("§2.3/§3.9 reserved message ids", () => {
  it.scoped("2.3/3.9: a replacement user/message whose id starts with interrupted-tool-result- fails InvalidEvent and writes nothing", () =>
    Effect.gen(function*() {
      const log = yield* SessionLog
      const driver = yield* Driver
      yield* driver.followup(user("A"))
      yield* driver.whenIdle
      const before = yield* events
      const surface = yield* log.surface
      const exit = yield* Effect.exit(log.append({
        type: "user/message",
        data: userMessage({ id: "interrupted-tool-result-x-1", text: "summary", source: { kind: "compaction" } }),
        surfaceOp: { op: "replace", start: surface[0]!, end: surface[1]! },
        sourceEventSeqs: [surface[0]!, surface[1]!]
      }))
      const failure = Exit.isFailure(exit) ? Cause.failureOption(exit.cause) : Option.none()
      expect(Option.getOrUndefined(failure)).toBeInstanceOf(InvalidEvent)
      expect(yield* events).toStrictEqual(before)
    }).pipe(Effect.provide(scenario([ScriptedModel.text("a")]))))
})

describe("§2.1 time", () => {
  it.scoped("2.1: an appended event's time is the Clock time at commit, whatever extra key the input carries", () =>
    Effect.gen(function*() {
      const log = yield* SessionLog
      yield* TestClock.adjust(777)
      const input = { type: "x/ext", data: {}, ignorable: true, time: 5 } as Parameters<typeof log.append>[0]
      const exit = yield* Effect.exit(log.append(input))
      // Either the extra key is refused, or it is ignored and the Clock decides.
      if (Exit.isSuccess(exit)) expect(exit.value.time).toBe(777)
      else expect(Option.getOrUndefined(Cause.failureOption(exit.cause))).toBeInstanceOf(InvalidEvent)
    }).pipe(Effect.provide(scenario([]))))
})

describe("§2.9/§6.1 version check of the memory store", () => {
  it.scoped("2.9/6.1: a stored header whose formatVersion is not the number 1 fails load and resume with a typed error, not a defect", () =>
    Effect.gen(function*() {
      const ctx = yield* Layer.build(SessionStore.layerMemory)
      const store = Context.get(ctx, SessionStore)
      const id = SessionId.make("v")
      yield* store.create({ formatVersion: "2", sessionId: id, createdAt: 0, seedLength: 0 } as unknown as SessionHeader, [])
      const loaded = yield* Effect.exit(store.load(id))
      const resumed = yield* Effect.exit(
        Effect.scoped(Layer.build(agentOver([], { sessionId: "v", resume: true }).pipe(Layer.provide(Layer.succeedContext(ctx)))))
      )
      // UnsupportedLogVersion (the version differs) or MalformedLog (the header is not a header) are both typed.
      const typed = (tag: string) => (tag === "UnsupportedLogVersion" || tag === "MalformedLog" ? "typed" : tag)
      expect([typed(failureTag(loaded)), typed(failureTag(resumed))]).toEqual(["typed", "typed"])
    }))
})
