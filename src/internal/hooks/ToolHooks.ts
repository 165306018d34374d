/**
 * The bridge's tool listeners: `PreToolUse` in the tool pre-execute waterfall (deny, `ask`,
 * `updatedInput`, context) and `PostToolUse` in the post-execute waterfall (context, a block's
 * reason with the result). Hooks see Claude Code's tool input (absolute paths) and response shapes
 * (`ToolShapes.ts`). A `PreToolUse` context enters as a hook message after the call's result (with
 * the batch's other contexts, after all of its results), as Claude Code adds it.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import type { Json } from "../../domain/Json.js"
import type { ToolCallInfo, ToolPostInput } from "../../domain/Seams.js"
import { ToolPreDecision } from "../../domain/Seams.js"
import type { NormalizedToolOutput } from "../../domain/Tool.js"
import type { UserMessage } from "../../domain/Values.js"
import type { FromHook, MergedAnswer } from "./Merge.js"
import { mergeAnswers } from "./Merge.js"
import type { RunnerContext } from "./Runner.js"
import { runEvent } from "./Runner.js"
import type { HookEvent } from "./Settings.js"
import { hookToolInput, hookToolResponse } from "./ToolShapes.js"

/**
 * A `PreToolUse` hook's request for confirmation.
 *
 * @since 0.1.0
 * @category models
 */
export interface HookQuestion {
  readonly hook: string
  /** The call that waits, in its turn and step (a durable approval names them). */
  readonly callId: string
  readonly turn: number
  readonly step: number
  readonly tool: string
  readonly input: unknown
  readonly reason: string
}

/**
 * What the tool listeners need from the bridge.
 *
 * @since 0.1.0
 * @category models
 */
export interface ToolHooksContext {
  readonly runner: RunnerContext
  /** Answers an `ask`; absent: an `ask` is a deny (a headless run). */
  readonly ask?: (question: HookQuestion) => Effect.Effect<boolean>
  /** Acts on the merged answer's `continue: false` and shows its `systemMessage`s. */
  readonly after: (event: HookEvent, merged: MergedAnswer) => Effect.Effect<void>
  /** A hook's context as a message of its own. */
  readonly contextMessage: (event: HookEvent, context: FromHook) => Effect.Effect<UserMessage>
}

const isRecord = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value)

/** A tool call's arguments: the raw JSON object, else the decoded parameters. */
const rawInput = (raw: string, params: unknown): unknown => {
  if (raw === "") return {}
  try {
    return JSON.parse(raw)
  } catch {
    return params
  }
}

/**
 * The tool listeners over `ctx`: `pre` and `post` to register (`post` also when only `PreToolUse`
 * hooks are configured, to place their context after the result).
 *
 * @since 0.1.0
 * @category constructors
 */
export const makeToolHooks = (ctx: ToolHooksContext, has: (event: HookEvent) => boolean) => {
  const { runner } = ctx
  // PreToolUse contexts waiting for their call's result, by call id.
  const waiting = new Map<string, ReadonlyArray<UserMessage>>()

  const pre = (
    info: ToolCallInfo,
    next: () => Effect.Effect<ToolPreDecision, unknown>
  ): Effect.Effect<ToolPreDecision, unknown> =>
    Effect.gen(function*() {
      let input = hookToolInput(info.name, rawInput(info.arguments, info.params), runner.cwd)
      const runs = yield* runEvent(runner, "PreToolUse", {
        subject: info.name,
        tool: { tool: info.name, input },
        fields: { tool_name: info.name, tool_input: input, tool_use_id: info.callId },
        recordExtra: { turn: info.turn, step: info.step, callId: info.callId, tool: info.name }
      })
      const merged = mergeAnswers(runs)
      yield* ctx.after("PreToolUse", merged)
      if (merged.contexts.length > 0) {
        waiting.set(info.callId, yield* Effect.forEach(merged.contexts, (c) => ctx.contextMessage("PreToolUse", c)))
      }
      const { block, permission, stop } = merged
      if (block !== undefined || permission?.decision === "deny" || stop !== undefined) {
        const reason = (permission?.decision === "deny" ? permission.reason : undefined) ?? block?.text ?? stop?.text
        const hook = permission?.decision === "deny" ? permission.hook : block?.hook ?? stop?.hook
        return ToolPreDecision.deny(reason ?? `denied by the PreToolUse hook ${hook}`)
      }
      const replaced = merged.updatedInput !== undefined
      if (merged.updatedInput !== undefined) input = merged.updatedInput
      if (permission?.decision === "ask") {
        const question = {
          hook: permission.hook,
          callId: info.callId,
          turn: info.turn,
          step: info.step,
          tool: info.name,
          input,
          reason: permission.reason ?? `the hook ${permission.hook} asks before ${info.name} runs`
        }
        const allowed = ctx.ask === undefined ? false : yield* ctx.ask(question)
        yield* runner.record({
          event: "PreToolUse",
          hook: permission.hook,
          callId: info.callId,
          ask: allowed ? "allowed" : "denied",
          headless: ctx.ask === undefined
        })
        if (!allowed) {
          return ToolPreDecision.deny(
            ctx.ask === undefined
              ? `${question.reason} (needs confirmation; denied in a headless run)`
              : `${question.reason} (the user said no)`
          )
        }
      }
      const decision = yield* next()
      return replaced && decision._tag === "Allow" && decision.params === undefined
        ? ToolPreDecision.allowWith(input)
        : decision
    })

  const post = (
    input: ToolPostInput,
    next: () => Effect.Effect<NormalizedToolOutput, unknown>
  ): Effect.Effect<NormalizedToolOutput, unknown> =>
    Effect.gen(function*() {
      const output = yield* next()
      const early = waiting.get(input.callId) ?? []
      waiting.delete(input.callId)
      // As in Claude Code, PostToolUse follows a call that ran and succeeded.
      if (!has("PostToolUse") || output.isError || input.aborted) {
        return early.length === 0
          ? output
          : { ...output, additionalContexts: [...output.additionalContexts, ...early] }
      }
      // The input the call ran with (a PreToolUse hook may have replaced the model's).
      const toolInput = hookToolInput(
        input.name,
        isRecord(input.params) ? input.params : rawInput(input.arguments, input.params),
        runner.cwd
      )
      const runs = yield* runEvent(runner, "PostToolUse", {
        subject: input.name,
        tool: { tool: input.name, input: toolInput },
        fields: {
          tool_name: input.name,
          tool_input: toolInput,
          tool_use_id: input.callId,
          tool_response: hookToolResponse(input.name, toolInput, output)
        },
        recordExtra: { turn: input.turn, step: input.step, callId: input.callId, tool: input.name } as Record<
          string,
          Json
        >
      })
      const merged = mergeAnswers(runs)
      yield* ctx.after("PostToolUse", merged)
      const later = yield* Effect.forEach(merged.contexts, (c) => ctx.contextMessage("PostToolUse", c))
      return {
        ...output,
        content: merged.block === undefined
          ? output.content
          : [...output.content, { type: "text" as const, text: `PostToolUse hook feedback: ${merged.block.text}` }],
        additionalContexts: [...output.additionalContexts, ...early, ...later]
      }
    })

  return { pre, post }
}
