/**
 * The answers of the commands of one event, merged as Claude Code merges the hooks it runs in
 * parallel: any block blocks (the reasons joined), any `continue: false` stops, `deny` beats `ask`
 * beats `allow`, the last `updatedInput` in configuration order wins, and every context and
 * `systemMessage` is kept, each with the command that gave it.
 *
 * @since 0.1.0
 */
import type { HookAnswer } from "./Protocol.js"
import type { HookRun } from "./Runner.js"

/**
 * Text a command gave, with the command.
 *
 * @since 0.1.0
 * @category models
 */
export interface FromHook {
  readonly hook: string
  readonly text: string
}

/**
 * The merged decision of one event's runs.
 *
 * @since 0.1.0
 * @category models
 */
export interface MergedAnswer {
  /** The blocking reasons, joined by newlines; the first blocking command. */
  readonly block?: FromHook
  /** The first `continue: false`, with its `stopReason`. */
  readonly stop?: FromHook
  /** The strongest permission decision (`deny` > `ask` > `allow`), with the reason and command of its first giver. */
  readonly permission?: {
    readonly decision: "allow" | "deny" | "ask"
    readonly reason?: string
    readonly hook: string
  }
  readonly updatedInput?: { readonly [k: string]: unknown }
  /** Every `additionalContext`, in configuration order. */
  readonly contexts: ReadonlyArray<FromHook>
  /** Every `systemMessage`, in configuration order. */
  readonly systemMessages: ReadonlyArray<FromHook>
}

const RANK = { allow: 1, ask: 2, deny: 3 } as const

/**
 * Merges the runs of one event (in configuration order).
 *
 * @since 0.1.0
 * @category combinators
 */
export const mergeAnswers = (runs: ReadonlyArray<HookRun>): MergedAnswer => {
  const blocks: Array<FromHook> = []
  let stop: FromHook | undefined
  let permission: MergedAnswer["permission"]
  let updatedInput: HookAnswer["updatedInput"]
  const contexts: Array<FromHook> = []
  const systemMessages: Array<FromHook> = []
  for (const { answer, hook } of runs) {
    const from = (text: string): FromHook => ({ hook: hook.command, text })
    if (answer.block !== undefined) blocks.push(from(answer.block))
    if (answer.stop !== undefined) stop ??= from(answer.stop)
    if (
      answer.permission !== undefined &&
      (permission === undefined || RANK[answer.permission] > RANK[permission.decision])
    ) {
      permission = {
        decision: answer.permission,
        hook: hook.command,
        ...(answer.permissionReason === undefined ? {} : { reason: answer.permissionReason })
      }
    }
    if (answer.updatedInput !== undefined) updatedInput = answer.updatedInput
    if (answer.additionalContext !== undefined) contexts.push(from(answer.additionalContext))
    if (answer.systemMessage !== undefined) systemMessages.push(from(answer.systemMessage))
  }
  return {
    ...(blocks.length === 0
      ? {}
      : { block: { hook: blocks[0]!.hook, text: [...new Set(blocks.map((b) => b.text))].join("\n") } }),
    ...(stop === undefined ? {} : { stop }),
    ...(permission === undefined ? {} : { permission }),
    ...(updatedInput === undefined ? {} : { updatedInput }),
    contexts,
    systemMessages
  }
}
