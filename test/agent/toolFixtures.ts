/**
 * Tools and scripted tool-call responses shared by the agent tests, and readers of what the tools'
 * calls left in the log.
 */
import { Deferred, Effect, Schema } from "effect"
import type { Context } from "effect"
import { ScriptedModel } from "../../src/layers/ScriptedModel.js"
import { Driver } from "../../src/services/Driver.js"
import { Tool } from "../../src/services/Tools.js"
import { dataOfType } from "./harness.js"

/** Parameters of a tool that takes none. */
export const empty = Schema.Struct({})

/** A tool `name` in `mode` answering "ok" (or running `body`). */
export const okTool = (name: string, mode: "parallel" | "exclusive" = "exclusive", body?: Effect.Effect<any, any>) =>
  Tool.make(name, { description: name, parameters: empty, mode, execute: () => body ?? Effect.succeed("ok") })

/** One tool call `id` of tool `name`. */
export const call = (id: string, name: string, args: unknown = {}) => ({ id, name, arguments: args })

/** A scripted response calling the `[id, name]` pairs, with no arguments. */
export const calls = (...cs: ReadonlyArray<readonly [string, string]>) =>
  ScriptedModel.response({ toolCalls: cs.map(([id, name]) => call(id, name)) })

/** A scripted response with one call `id` of tool `t`. */
export const callT = (id = "c1") => calls([id, "t"])

/** The logged tool results by call id: text, isError, error and meta. */
export const resultsByCall = Effect.map(
  dataOfType("tool/result"),
  (ds) =>
    Object.fromEntries(ds.map((d) => [d.message.content[0].toolCallId, {
      text: d.message.content[0].content[0]?.text,
      isError: d.message.content[0].isError,
      error: d.error,
      meta: d.meta
    }]))
)

type DriverService = Context.Tag.Service<Driver>

/** A driver handle for effects that are built before the agent (script entries, tools). */
export const makeHandle = Effect.map(Deferred.make<DriverService>(), (handle) => ({
  set: Effect.flatMap(Driver, (driver) => Deferred.succeed(handle, driver)),
  use: <A, E>(f: (driver: DriverService) => Effect.Effect<A, E>) => Effect.flatMap(Deferred.await(handle), f)
}))

/** A slot for the driver, filled by the test, for tool bodies and script entries built before the agent. */
export const holder = () => ({ d: undefined as DriverService | undefined })

/** A parallel tool `zeta` without parameters answering "z". */
export const zetaTool = Tool.make("zeta", {
  description: "Last tool",
  parameters: Schema.Struct({}),
  mode: "parallel",
  execute: () => Effect.succeed("z")
})
