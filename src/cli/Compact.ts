/**
 * Manual compaction from the command line (issue 28 item 5): `tiller compact ID [--focus TEXT]` and
 * the chat's `/compact [focus]`. It runs as the session's maintenance task between turns, so never
 * while a turn (or a tool call) runs, and says what it did in one line.
 *
 * @since 0.1.0
 */
import { Context, Effect, Option } from "effect"
import type { SessionId } from "../domain/Ids.js"
import { HookBridge } from "../layers/HookBridge.js"
import { Sessions } from "../layers/Sessions.js"
import type { CompactionReport } from "../services/Compaction.js"
import { Compaction } from "../services/Compaction.js"
import { SessionStore } from "../services/SessionStore.js"
import { CliError } from "./CliError.js"
import * as Compositions from "./Compositions.js"
import * as Database from "./Database.js"
import * as Output from "./Output.js"

const format = (n: number) => n.toLocaleString("en-US")

/**
 * One line saying what a manual compaction did.
 *
 * @since 0.1.0
 * @category formatting
 */
export const describeCompaction = (report: CompactionReport, window: number): string => {
  const tokens = `context ${format(report.tokensBefore)} → ${format(report.tokensAfter)} of ${format(window)} tokens`
  if (report.vetoed !== undefined) return `compaction vetoed by a hook: ${report.vetoed}`
  const done = [
    ...(report.summarised === undefined
      ? []
      : [
        `summarised seqs ${report.summarised.start}–${report.summarised.end} (${report.summarised.nodes} messages) into one summary`
      ]),
    ...(report.pruned === 0 ? [] : [`pruned ${report.pruned} old tool result${report.pruned === 1 ? "" : "s"}`])
  ]
  if (done.length === 0) {
    return `nothing to compact (context ${format(report.tokensBefore)} of ${format(window)} tokens)`
  }
  return `compacted: ${done.join("; ")}; ${tokens}`
}

/**
 * Compacts an open session's context now (trigger `manual`), the focus steering its summary, and
 * returns the line that says what happened. A running turn, a failed summary request or a session
 * without compaction is a `CliError` saying so; nothing is changed then.
 *
 * @since 0.1.0
 * @category commands
 */
export const compactOpen = <S>(context: Context.Context<S>, focus: string | undefined) =>
  Effect.gen(function*() {
    const compaction = Context.getOption(context as unknown as Context.Context<Compaction>, Compaction)
    if (Option.isNone(compaction)) return yield* new CliError({ reason: "this session's agent has no compaction" })
    const report = yield* compaction.value.compactWith(focus === undefined ? {} : { focus }).pipe(
      Effect.catchTags({
        AgentBusy: (error) =>
          Effect.fail(new CliError({ reason: `cannot compact now: ${error.message}; compact when the agent is idle` })),
        ModelError: (error) =>
          Effect.fail(
            new CliError({
              reason: `compaction failed, nothing was replaced: the summary request failed: ${error.message}`
            })
          )
      })
    )
    const { window } = yield* compaction.value.contextUsage
    return describeCompaction(report, window)
  })

/**
 * `tiller compact ID [--focus TEXT]`: opens the stored session, compacts it and prints what it did.
 * The session's `PreCompact` hooks run (a block vetoes), then its `PostCompact` and `SessionStart`
 * (source `compact`) hooks, as Claude Code's `/compact` runs them; its other hooks do not.
 *
 * @since 0.1.0
 * @category commands
 */
export const compactSession = (
  id: SessionId,
  focus: string | undefined,
  compositions: Compositions.CompositionOptions
) =>
  Effect.scoped(Effect.gen(function*() {
    const db = compositions.db
    if (!(yield* (yield* SessionStore).exists(id))) {
      return yield* new CliError({ reason: `no session ${id} in ${Database.label(db)}` })
    }
    const context = yield* (yield* Sessions).open(id)
    const { bridge } = yield* Compositions.bridgeOptions(compositions)
    yield* HookBridge.register({
      ...bridge,
      lifecycle: false,
      notify: (notice) => Output.errorLine(Compositions.noticeLine(notice))
    }).pipe(
      Effect.provide(context),
      Effect.mapError((error) => new CliError({ reason: error.message }))
    )
    const line = yield* compactOpen(context, focus)
    yield* Output.lines([`session ${id}: ${line}`])
  }))
