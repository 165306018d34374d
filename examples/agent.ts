/**
 * A complete agent: one tool, an injected context and a steer, on the memory store with a
 * scripted model. Run it with `npx tsx examples/agent.ts`; `test/examples.test.ts` runs it in CI.
 */
import { Effect, Layer, Schema } from "effect"
import {
  Agent,
  Driver,
  PreStep,
  ScriptedModel,
  SessionId,
  SessionLog,
  SessionStore,
  Tool,
  Tools,
  userMessage
} from "../src/index.js"

// A tool the model can call. Its result enters history; it could also add context for the next step.
const clock = Tool.make("clock", {
  description: "The current time in milliseconds",
  parameters: Schema.Struct({}),
  execute: () => Effect.map(Effect.clockWith((c) => c.currentTimeMillis), (now) => `now: ${now}`)
})

// The model is scripted here: first it calls the tool, then it answers.
const model = ScriptedModel.layer([
  ScriptedModel.response({
    text: "Let me check the clock.",
    toolCalls: [{ id: "call-1", name: "clock", arguments: {} }]
  }),
  ScriptedModel.text("It is late; keep it short.")
])

/** Runs one turn and returns the log's event types and the model-visible history. */
export const program = Effect.gen(function*() {
  const driver = yield* Driver
  const preStep = yield* PreStep
  // A pre-step listener sees each complete batch before it enters; here it only observes.
  const batches: Array<ReadonlyArray<string>> = []
  yield* preStep.register((input, next) => {
    batches.push(input.messages.map((m) => m.id))
    return next()
  })
  // Context for the next step, without waking the agent: a user-role message whose source names its producer.
  yield* driver.inject(
    userMessage({ id: "ctx", text: "The user prefers short answers.", source: { kind: "plugin", plugin: "prefs" } })
  )
  // A prompt opens turn 1; the injected context enters the same first step, before the prompt.
  yield* driver.followup(userMessage({ id: "prompt", text: "What time is it?" }))
  // Steering joins the running turn at its next step boundary (after the tool result).
  yield* driver.steer(userMessage({ id: "steer", text: "Answer in five words." }))
  yield* driver.whenIdle
  const log = yield* SessionLog
  const events = yield* log.events
  const history = yield* log.messages
  return { types: events.map((e) => e.type), history, batches }
})

/** The layers of the example: an agent over a memory store (opened: resumed when stored, else created), the scripted model and the tool. */
export const AgentLive = Agent.layer({
  open: SessionId.make("example"),
  model: { provider: "demo", model: "scripted" }
}).pipe(
  Layer.provide(Layer.mergeAll(SessionStore.layerMemory, model, Tools.layer({ tools: [clock] })))
)

if (import.meta.url === `file://${process.argv[1]}`) {
  Effect.runPromise(Effect.scoped(Effect.provide(program, AgentLive))).then(({ batches, history }) => {
    console.log("pre-step batches:", batches)
    for (const m of history) {
      const text = m.content.map((
        b
      ) => ("text" in b ? b.text : b.type === "tool-call" ? `[call ${b.name}]` : "[result]")).join(" ")
      console.log(`${m.role.padEnd(9)} ${m.source.kind.padEnd(6)} ${text}`)
    }
  })
}
