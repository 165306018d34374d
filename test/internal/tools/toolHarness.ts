import { Effect } from "effect"
import { SessionId } from "../../../src/domain/Ids.js"
import * as CodingTools from "../../../src/layers/CodingTools.js"
import type { ToolDefinition, ToolOutput } from "../../../src/services/Tools.js"

/** A tool call's context in session `session`. */
export const contextOf = (session = "s") => ({
  sessionId: SessionId.make(session),
  turn: 1,
  step: 1,
  callId: "c",
  deferContext: () => Effect.void
})

/** The coding tools over `root`: `call(name, params, session?)` runs one, as a plain output without its `meta` (`run` keeps it). */
export const codingTools = (root: string, options: CodingTools.CodingToolsOptions = {}) =>
  Effect.map(CodingTools.make({ cwd: root, ...options }), (tools) => {
    const byName = new Map<string, ToolDefinition<any>>(tools.map((t) => [t.name, t]))
    const run = (name: string, params: unknown, session = "s"): Effect.Effect<ToolOutput> =>
      Effect.map(
        Effect.orDie(byName.get(name)!.execute(params, contextOf(session))),
        (output) => (typeof output === "string" ? { content: output } : output)
      )
    return {
      tools,
      run,
      call: (name: string, params: unknown, session = "s"): Effect.Effect<ToolOutput> =>
        Effect.map(run(name, params, session), ({ meta: _meta, ...output }) => output)
    }
  })

/** The text of an output. */
export const text = (output: ToolOutput): string =>
  typeof output.content === "string"
    ? output.content
    : output.content.map((b) => (b.type === "text" ? b.text : "")).join("")
