/**
 * The step limit against a real provider's answer: a recorded Responses function call, replayed for
 * every request, is a model that never stops calling its tool; with `maxSteps` the turn still ends,
 * with `error(MAX_STEPS)` naming the limit (`npm run test:recordings`; the recordings are read from
 * ../shared/provider-recordings or TILLER_PROVIDER_RECORDINGS, never copied into the repository).
 */
import * as NodeHttpClient from "@effect/platform-node/NodeHttpClient"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer, Schema } from "effect"
import { checkLog } from "../../../src/domain/Check.js"
import type { EventOf } from "../../../src/domain/Event.js"
import { SessionId } from "../../../src/domain/Ids.js"
import { userMessage } from "../../../src/domain/Message.js"
import { Agent } from "../../../src/layers/Agent.js"
import { Driver } from "../../../src/services/Driver.js"
import { SessionLog } from "../../../src/services/SessionLog.js"
import { SessionStore } from "../../../src/services/SessionStore.js"
import { Tool, Tools } from "../../../src/services/Tools.js"
import * as Recordings from "./Recordings.js"
import * as ReplayServer from "./ReplayServer.js"
import { responses } from "./Responses.js"

const RECORDING = "openai-responses/azure-tool-call.1.chunks.txt"

describe("the step limit, replayed", () => {
  it.scopedLive(
    `${RECORDING} answering every request: maxSteps 3 ends the turn error(MAX_STEPS) after step 3`,
    () =>
      Effect.gen(function*() {
        const response = Recordings.load(RECORDING).responses[0]!
        const [call] = responses.expect(response).calls
        expect(call).toBeDefined()
        // Every request gets the same function call: the model never stops calling its tool.
        const server = yield* ReplayServer.listen([], response.body)
        const tool = Tool.make(call!.name, {
          description: "the recorded tool",
          parameters: Schema.Struct({}),
          execute: () => Effect.succeed("sunny")
        })
        const agent = Agent.layer({
          sessionId: SessionId.make("loop"),
          model: { provider: responses.provider, model: "replay" },
          maxSteps: 3
        }).pipe(
          Layer.provideMerge(Layer.mergeAll(
            SessionStore.layerMemory,
            Layer.provide(responses.layer(server.url), NodeHttpClient.layerUndici),
            Tools.layer({ tools: [tool] })
          ))
        )
        const events = yield* Effect.provide(
          Effect.gen(function*() {
            const driver = yield* Driver
            yield* driver.followup(userMessage({ id: "p1", text: "What is the weather?" }))
            yield* driver.whenIdle
            return yield* Effect.flatMap(SessionLog, (log) => log.events)
          }),
          agent
        )
        expect(events.filter((e) => e.type === "step/start").length).toBe(3)
        expect(events.filter((e) => e.type === "tool/result").length).toBe(3)
        expect((yield* server.requests).length).toBe(3)
        const ends = events.filter((e): e is EventOf<"turn/end"> => e.type === "turn/end").map((e) => e.data.reason)
        expect(ends).toMatchObject([{ kind: "error", error: { code: "MAX_STEPS", retryable: false } }])
        expect(ends[0]!.kind === "error" ? ends[0]!.error.message : "").toContain("step limit of 3 steps")
        expect(checkLog(events, { closed: true })).toEqual([])
      }),
    60_000
  )
})
