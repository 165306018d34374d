/**
 * The hook bridge: runs hook commands configured in the Claude Code shape (`.tiller/settings.json`,
 * and on request `.claude/settings.json`, `.claude/settings.local.json`, `~/.claude/settings.json`)
 * at tiller's seams, so existing hook scripts run unchanged:
 *
 * - `SessionStart` (startup / resume) when the bridge starts: context is injected, pending until
 *   the next waking input;
 * - `UserPromptSubmit` in the pre-step of a boundary that claimed a prompt: a block rejects the step
 *   (the turn ends `blocked`), context enters beside the prompt;
 * - `PreToolUse` in the tool pre-execute waterfall: deny, `updatedInput`, `ask`;
 * - `PostToolUse` in the tool post-execute waterfall: context after the batch's results, a block's
 *   reason with the result;
 * - `Stop` among the turn-stopping listeners: a block continues the turn with the reason as a steer;
 * - `PreCompact` / `PostCompact` on the agent's `Compaction`, when it has one: a block vetoes the
 *   compaction, context becomes summary instructions (Pre) or compaction context (Post);
 * - `SessionEnd` when the bridge's scope closes.
 *
 * Every command run is recorded as an ignorable `hook/run` event; injected context is a
 * `UserMessage` with `source {kind: "hook", hook, event}`.
 *
 * @since 0.1.0
 */
import type { Scope } from "effect"
import { Duration, Effect, Layer, Option } from "effect"
import * as path from "node:path"
import { HookConfigError } from "../domain/Errors.js"
import type { Json } from "../domain/Json.js"
import { newUserMessage } from "../domain/Message.js"
import { CancelCause } from "../domain/Values.js"
import type { UserMessage } from "../domain/Values.js"
import type { HookRun, RunnerContext } from "../internal/hooks/Runner.js"
import { HOOK_RUN_EVENT, runEvent } from "../internal/hooks/Runner.js"
import type { HookEvent, HookSettings } from "../internal/hooks/Settings.js"
import { loadSettings, mergeSettings, parseSettings, settingsFiles } from "../internal/hooks/Settings.js"
import { makeTranscript } from "../internal/hooks/Transcript.js"
import { Compaction, PreCompactDecision } from "../services/Compaction.js"
import { Driver } from "../services/Driver.js"
import { Hooks, ToolPreDecision } from "../services/Hooks.js"
import { PreStep, PreStepDecision } from "../services/PreStep.js"
import { SessionLog } from "../services/SessionLog.js"

export type { HookCommand, HookEvent, HookGroup, HookSettings } from "../internal/hooks/Settings.js"

/**
 * A `PreToolUse` hook's request for confirmation, as the bridge's `ask` sees it.
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
 * Options of the hook bridge.
 *
 * @since 0.1.0
 * @category models
 */
export interface HookBridgeOptions {
  /** The session's working directory: hooks run there, and settings are read from it (default: the process's). */
  readonly cwd?: string
  /** Also read `.claude/settings.json`, `.claude/settings.local.json` and `~/.claude/settings.json` (the CLI's `--claude-hooks`). */
  readonly claudeSettings?: boolean
  /** The home directory whose `.claude/settings.json` is read (default: the user's). */
  readonly home?: string
  /** Settings documents given inline, read after the files (each in the Claude Code shape). */
  readonly settings?: ReadonlyArray<unknown>
  /** Read no settings files, only `settings`. */
  readonly noFiles?: boolean
  /** The timeout of a command whose configuration names none (default 60 s). */
  readonly defaultTimeout?: Duration.DurationInput
  /** The most bytes a command may write to stdout (default 1 MiB); stderr is cut at the same size. */
  readonly maxOutputBytes?: number
  /** The directory of the session's JSONL transcript (default `<cwd>/.tiller/transcripts`). */
  readonly transcriptDir?: string
  /** Answers a `PreToolUse` `ask` (the chat asks the user); without it, `ask` is a deny (a headless run). */
  readonly ask?: (question: HookQuestion) => Effect.Effect<boolean>
  /** The most times `Stop` hooks may continue one turn (default 10); beyond it the turn stops. */
  readonly maxStopContinuations?: number
}

/** The text of a message's text blocks. */
const textOf = (message: UserMessage): string =>
  message.content.flatMap((b) => (b.type === "text" ? [b.text] : [])).join("\n")

/** A hook's context as a message of its own. */
const contextMessage = (hook: string, event: HookEvent, text: string) =>
  newUserMessage({ text, source: { kind: "hook", hook, event } })

/** The first blocking reason among the runs, if any. */
const blockOf = (runs: ReadonlyArray<HookRun>): string | undefined =>
  runs.find((r) => r.answer.block !== undefined)?.answer.block

/** A tool call's arguments as a hook's `tool_input`: the raw JSON object, else the decoded parameters. */
const toolInputOf = (raw: string, params: unknown): unknown => {
  if (raw === "") return {}
  try {
    return JSON.parse(raw)
  } catch {
    return params
  }
}

/**
 * Reads the bridge's settings: the files its options select, then the inline documents.
 *
 * @since 0.1.0
 * @category constructors
 */
export const loadHookSettings = (options: HookBridgeOptions = {}): Effect.Effect<HookSettings, HookConfigError> =>
  Effect.gen(function*() {
    const cwd = options.cwd ?? process.cwd()
    const files = options.noFiles === true
      ? []
      : settingsFiles({
        cwd,
        claude: options.claudeSettings === true,
        ...(options.home === undefined ? {} : { home: options.home })
      })
    const fromFiles = yield* loadSettings(files)
    const inline = yield* Effect.try({
      try: () => (options.settings ?? []).map((document, i) => parseSettings(document, `settings[${i}]`)),
      catch: (e) => e instanceof HookConfigError ? e : new HookConfigError({ path: "settings", reason: String(e) })
    })
    return mergeSettings([fromFiles, ...inline])
  })

/**
 * Registers the bridge on the agent in the context for the lifetime of the current scope, and
 * runs the `SessionStart` hooks (`startup` for a new session, `resume` otherwise).
 *
 * @since 0.1.0
 * @category constructors
 */
export const register = (
  options: HookBridgeOptions = {}
): Effect.Effect<void, HookConfigError, Driver | SessionLog | PreStep | Hooks | Scope.Scope> =>
  Effect.gen(function*() {
    const settings = yield* loadHookSettings(options)
    const log = yield* SessionLog
    const driver = yield* Driver
    const preStep = yield* PreStep
    const hooks = yield* Hooks
    const cwd = path.resolve(options.cwd ?? process.cwd())
    const transcript = makeTranscript({
      file: path.join(options.transcriptDir ?? path.join(cwd, ".tiller", "transcripts"), `${log.sessionId}.jsonl`),
      sessionId: log.sessionId,
      cwd
    })
    const ctx: RunnerContext = {
      settings,
      sessionId: log.sessionId,
      cwd,
      defaultTimeout: Duration.decode(options.defaultTimeout ?? "60 seconds"),
      maxOutputBytes: options.maxOutputBytes ?? 1024 * 1024,
      transcript,
      events: log.events,
      record: (data: Json) => Effect.ignore(log.append({ type: HOOK_RUN_EVENT, data, ignorable: true }))
    }
    const has = (event: HookEvent) => settings[event].length > 0

    // A `continue: false` outside a prompt's pre-step stops the running turn, keeping pending input.
    const stopTurn = (runs: ReadonlyArray<HookRun>) => {
      const stop = runs.find((r) => r.answer.stop !== undefined)?.answer.stop
      return stop === undefined
        ? Effect.void
        : Effect.ignore(driver.cancel(CancelCause.hook(stop), { keepInbox: true }))
    }

    if (has("UserPromptSubmit")) {
      yield* preStep.register((input, next) =>
        Effect.gen(function*() {
          const prompts = input.messages.filter((m) => m.source.kind === "user")
          const contexts = new Map<string, Array<UserMessage>>()
          for (const prompt of prompts) {
            const runs = yield* runEvent(ctx, "UserPromptSubmit", {
              fields: () => ({ prompt: textOf(prompt) }),
              stopWhen: (a) => a.block !== undefined || a.stop !== undefined,
              recordExtra: { turn: input.turn, step: input.step, messageId: prompt.id }
            })
            const refusal = blockOf(runs) ?? runs.find((r) => r.answer.stop !== undefined)?.answer.stop
            if (refusal !== undefined) return PreStepDecision.reject(refusal)
            const own: Array<UserMessage> = []
            for (const run of runs) {
              if (run.answer.additionalContext === undefined) continue
              own.push(yield* contextMessage(run.hook.command, "UserPromptSubmit", run.answer.additionalContext))
            }
            if (own.length > 0) contexts.set(prompt.id, own)
          }
          const decision = yield* next()
          if (decision._tag !== "Enter" || contexts.size === 0) return decision
          // Each prompt's context right after it; a prompt dropped downstream takes its context along.
          return PreStepDecision.enter(decision.messages.flatMap((m) => [m, ...(contexts.get(m.id) ?? [])]))
        })
      )
    }

    if (has("PreToolUse")) {
      yield* hooks.onToolPre((info, next) =>
        Effect.gen(function*() {
          let input = toolInputOf(info.arguments, info.params)
          let replaced = false
          const runs = yield* runEvent(ctx, "PreToolUse", {
            subject: info.name,
            fields: (previous) => {
              const update = previous[previous.length - 1]?.answer.updatedInput
              if (update !== undefined) {
                input = update
                replaced = true
              }
              return { tool_name: info.name, tool_input: input, tool_use_id: info.callId }
            },
            stopWhen: (a) =>
              a.block !== undefined || a.permission === "deny" || a.permission === "ask" || a.stop !== undefined,
            recordExtra: { turn: info.turn, step: info.step, callId: info.callId, tool: info.name }
          })
          const last = runs[runs.length - 1]
          if (last?.answer.updatedInput !== undefined) {
            input = last.answer.updatedInput
            replaced = true
          }
          yield* stopTurn(runs)
          for (const run of runs) {
            const { answer } = run
            const reason = answer.permissionReason ?? answer.block ?? answer.stop
            if (answer.block !== undefined || answer.permission === "deny" || answer.stop !== undefined) {
              return ToolPreDecision.deny(reason ?? `denied by the PreToolUse hook ${run.hook.command}`)
            }
            if (answer.permission === "ask") {
              const question = {
                hook: run.hook.command,
                callId: info.callId,
                turn: info.turn,
                step: info.step,
                tool: info.name,
                input,
                reason: reason ?? `the hook ${run.hook.command} asks before ${info.name} runs`
              }
              const allowed = options.ask === undefined ? false : yield* options.ask(question)
              yield* ctx.record({
                event: "PreToolUse",
                hook: run.hook.command,
                callId: info.callId,
                ask: allowed ? "allowed" : "denied",
                headless: options.ask === undefined
              })
              if (!allowed) {
                return ToolPreDecision.deny(
                  options.ask === undefined
                    ? `${question.reason} (needs confirmation; denied in a headless run)`
                    : `${question.reason} (the user said no)`
                )
              }
            }
          }
          const decision = yield* next()
          return replaced && decision._tag === "Allow" && decision.params === undefined
            ? ToolPreDecision.allowWith(input)
            : decision
        })
      )
    }

    if (has("PostToolUse")) {
      yield* hooks.onToolPost((input, next) =>
        Effect.gen(function*() {
          const output = yield* next()
          // As in Claude Code, PostToolUse follows a call that ran and succeeded.
          if (output.isError || input.aborted) return output
          const runs = yield* runEvent(ctx, "PostToolUse", {
            subject: input.name,
            fields: () => ({
              tool_name: input.name,
              tool_input: toolInputOf(input.arguments, input.params),
              tool_use_id: input.callId,
              tool_response: {
                content: output.content.map((b) => (b.type === "text" ? b.text : "[image]")).join("\n"),
                is_error: output.isError
              }
            }),
            stopWhen: (a) => a.block !== undefined || a.stop !== undefined,
            recordExtra: { turn: input.turn, step: input.step, callId: input.callId, tool: input.name }
          })
          yield* stopTurn(runs)
          const contexts: Array<UserMessage> = []
          for (const run of runs) {
            if (run.answer.additionalContext === undefined) continue
            contexts.push(yield* contextMessage(run.hook.command, "PostToolUse", run.answer.additionalContext))
          }
          const block = runs.find((r) => r.answer.block !== undefined)
          return {
            ...output,
            content: block === undefined
              ? output.content
              : [...output.content, {
                type: "text" as const,
                text: `PostToolUse hook feedback: ${block.answer.block}`
              }],
            additionalContexts: [...output.additionalContexts, ...contexts]
          }
        })
      )
    }

    if (has("Stop")) {
      const continued = new Map<number, number>()
      const limit = options.maxStopContinuations ?? 10
      yield* hooks.onTurnStopping((input) =>
        Effect.gen(function*() {
          const count = continued.get(input.turn) ?? 0
          const runs = yield* runEvent(ctx, "Stop", {
            fields: () => ({ stop_hook_active: count > 0 }),
            stopWhen: (a) => a.block !== undefined,
            recordExtra: { turn: input.turn, step: input.step }
          })
          const block = runs.find((r) => r.answer.block !== undefined)
          if (block === undefined) return
          if (count >= limit) {
            yield* ctx.record({
              event: "Stop",
              hook: block.hook.command,
              turn: input.turn,
              ignored: `more than ${limit} continuations of one turn`
            })
            return
          }
          continued.set(input.turn, count + 1)
          yield* Effect.ignore(driver.steer(yield* contextMessage(block.hook.command, "Stop", block.answer.block!)))
        })
      )
    }

    // The compaction hooks, when the agent has compaction: PreCompact may veto (a block) or add
    // instructions for the summary (its context); PostCompact's context enters as compaction context.
    const compaction = yield* Effect.serviceOption(Compaction)
    if (Option.isSome(compaction) && has("PreCompact")) {
      yield* compaction.value.onPreCompact((input, next) =>
        Effect.gen(function*() {
          const trigger = input.trigger === "manual" ? "manual" : "auto"
          const runs = yield* runEvent(ctx, "PreCompact", {
            subject: trigger,
            fields: () => ({ trigger, custom_instructions: input.focus ?? "" }),
            stopWhen: (a) => a.block !== undefined,
            recordExtra: { turn: input.turn, trigger: input.trigger }
          })
          const block = blockOf(runs)
          if (block !== undefined) return PreCompactDecision.veto(block)
          const decision = yield* next()
          const instructions = runs.flatMap((
            r
          ) => (r.answer.additionalContext === undefined ? [] : [r.answer.additionalContext]))
          return decision._tag === "Proceed" && instructions.length > 0
            ? PreCompactDecision.proceed([...instructions, ...decision.instructions])
            : decision
        })
      )
    }
    // After a compaction, Claude Code runs the SessionStart hooks with source `compact`: so does the bridge.
    if (Option.isSome(compaction) && (has("PostCompact") || has("SessionStart"))) {
      yield* compaction.value.onPostCompact((input, next) =>
        Effect.gen(function*() {
          const downstream = yield* next()
          const trigger = input.trigger === "manual" ? "manual" : "auto"
          const recordExtra = { turn: input.turn, trigger: input.trigger }
          const post = yield* runEvent(ctx, "PostCompact", {
            subject: trigger,
            fields: () => ({ trigger, pruned: input.report.pruned, summarised: input.report.summarised !== undefined }),
            recordExtra
          })
          const start = yield* runEvent(ctx, "SessionStart", {
            subject: "compact",
            fields: () => ({ source: "compact" }),
            recordExtra
          })
          return [
            ...downstream,
            ...[...post, ...start].flatMap((
              r
            ) => (r.answer.additionalContext === undefined ? [] : [r.answer.additionalContext]))
          ]
        })
      )
    }

    if (has("SessionEnd")) {
      yield* Effect.addFinalizer(() =>
        Effect.asVoid(runEvent(ctx, "SessionEnd", { fields: () => ({ reason: "other" }) }))
      )
    }

    if (has("SessionStart")) {
      const source = log.firstLiveSeq === 0 ? "startup" : "resume"
      const runs = yield* runEvent(ctx, "SessionStart", { subject: source, fields: () => ({ source }) })
      for (const run of runs) {
        if (run.answer.additionalContext === undefined) continue
        yield* Effect.ignore(
          driver.inject(yield* contextMessage(run.hook.command, "SessionStart", run.answer.additionalContext))
        )
      }
    }
  })

/**
 * The hook bridge.
 *
 * @since 0.1.0
 * @category layers
 */
export const HookBridge = {
  /**
   * The bridge over an agent's services, for the layer's lifetime: compose it over `Agent.layer`
   * (`HookBridge.layer(options).pipe(Layer.provideMerge(Agent.layer(...)))`).
   *
   * @since 0.1.0
   */
  layer: (
    options: HookBridgeOptions = {}
  ): Layer.Layer<never, HookConfigError, Driver | SessionLog | PreStep | Hooks> =>
    Layer.scopedDiscard(register(options)),
  /** Registers the bridge in the current scope (see {@link register}). */
  register,
  /** Reads the settings the options select, failing with `HookConfigError` on a malformed file. */
  load: loadHookSettings,
  /** The type of the ignorable extension event that records each command's run. */
  RUN_EVENT: HOOK_RUN_EVENT
}
