/**
 * The hook bridge: runs hook commands configured in the Claude Code shape (`.tiller/settings.json`,
 * and on request `.claude/settings.json`, `.claude/settings.local.json`, `~/.claude/settings.json`)
 * at tiller's seams, so existing hook scripts run unchanged:
 *
 * - `SessionStart` (startup / resume) when the bridge starts: context is injected, pending until
 *   the next waking input; `CLAUDE_ENV_FILE` names the file whose `export` lines `Bash` applies;
 * - `UserPromptSubmit` in the pre-step of a boundary that claimed a prompt: a block rejects the step
 *   (the turn ends `blocked`), context enters beside the prompt;
 * - `PreToolUse` in the tool pre-execute waterfall: deny, `updatedInput`, `ask`, context after the
 *   batch's results;
 * - `PostToolUse` in the tool post-execute waterfall: context after the batch's results, a block's
 *   reason with the result;
 * - `Stop` among the turn-stopping listeners: a block continues the turn with the reason as a steer,
 *   unless a `continue: false` stops it;
 * - `PreCompact` / `PostCompact` on the agent's `Compaction`, when it has one: a block vetoes the
 *   compaction, context becomes summary instructions (Pre) or compaction context (Post);
 * - `SessionEnd` when the bridge's scope closes.
 *
 * The commands of one event run in parallel and their answers merge as Claude Code merges them
 * (`internal/hooks/Merge.ts`); tools are shown by Claude Code's names with its input and response
 * shapes. Every command run is recorded as an ignorable `hook/run` event; injected context is a
 * `UserMessage` with `source {kind: "hook", hook, event}`; `systemMessage`s and stop reasons go to
 * `notify`. A malformed settings file is skipped with a warning, as Claude Code skips it.
 *
 * @since 0.1.0
 */
import type { Scope } from "effect"
import { Duration, Effect, Layer, Option } from "effect"
import * as NodeFs from "node:fs/promises"
import * as os from "node:os"
import * as path from "node:path"
import { HookConfigError } from "../domain/Errors.js"
import type { EventOf, SessionEvent } from "../domain/Event.js"
import type { Json } from "../domain/Json.js"
import { newUserMessage } from "../domain/Message.js"
import { CancelCause } from "../domain/Values.js"
import type { UserMessage } from "../domain/Values.js"
import { defaultEnvDir, sessionEnvFile } from "../internal/hooks/EnvFile.js"
import type { FromHook, MergedAnswer } from "../internal/hooks/Merge.js"
import { mergeAnswers } from "../internal/hooks/Merge.js"
import type { RunnerContext } from "../internal/hooks/Runner.js"
import { HOOK_RUN_EVENT, runEvent } from "../internal/hooks/Runner.js"
import type { HookEvent, HookSettings } from "../internal/hooks/Settings.js"
import { loadSettings, mergeSettings, parseSettings, settingsFiles } from "../internal/hooks/Settings.js"
import type { HookQuestion } from "../internal/hooks/ToolHooks.js"
import { makeToolHooks } from "../internal/hooks/ToolHooks.js"
import { makeTranscript } from "../internal/hooks/Transcript.js"
import type { PermissionMode } from "../internal/permissions/Rules.js"
import { Compaction, PreCompactDecision } from "../services/Compaction.js"
import { Driver } from "../services/Driver.js"
import { Hooks } from "../services/Hooks.js"
import { PreStep, PreStepDecision } from "../services/PreStep.js"
import { SessionLog } from "../services/SessionLog.js"

export type { HookCommand, HookEvent, HookGroup, HookSettings } from "../internal/hooks/Settings.js"
export type { HookQuestion } from "../internal/hooks/ToolHooks.js"

/**
 * What a hook tells the user rather than the model: a `systemMessage`, or the `stopReason` of a
 * `continue: false`.
 *
 * @since 0.1.0
 * @category models
 */
export interface HookNotice {
  readonly event: HookEvent
  readonly hook: string
  readonly kind: "systemMessage" | "stopReason"
  readonly text: string
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
  /** The directory of the sessions' `CLAUDE_ENV_FILE`s (default `~/.tiller/session-env/<hash of cwd>`, where `CodingTools`' `Bash` reads them). */
  readonly envDir?: string
  /** Answers a `PreToolUse` `ask` (the chat asks the user); without it, `ask` is a deny (a headless run). */
  readonly ask?: (question: HookQuestion) => Effect.Effect<boolean>
  /** The most times `Stop` hooks may continue one turn (default 10); beyond it the turn stops. */
  readonly maxStopContinuations?: number
  /** The model's name, as `SessionStart` hooks see it (default: the model of the log's last answer). */
  readonly model?: string
  /** The session's permission mode, as every hook's `permission_mode` says (default `default`). */
  readonly permissionMode?: PermissionMode
  /** Told each skipped settings file and each ignored field, once (default: logged as a warning). */
  readonly warn?: (warning: string) => Effect.Effect<void>
  /** Shows a hook's `systemMessage` or stop reason to the user (they are recorded in the log either way). */
  readonly notify?: (notice: HookNotice) => Effect.Effect<void>
  /** Run `SessionStart` (startup / resume) now and `SessionEnd` at the end (default true); `tiller compact` runs only the compaction's hooks. */
  readonly lifecycle?: boolean
}

/** The text of a message's text blocks. */
const textOf = (message: UserMessage): string =>
  message.content.flatMap((b) => (b.type === "text" ? [b.text] : [])).join("\n")

/** A hook's context as a message of its own. */
const contextMessage = (event: HookEvent, context: FromHook) =>
  newUserMessage({ text: context.text, source: { kind: "hook", hook: context.hook, event } })

/** The text of the log's last assistant message and its model, if any. */
const lastAnswer = (
  events: ReadonlyArray<SessionEvent>
): { readonly text: string; readonly model: string } | undefined => {
  for (let i = events.length - 1; i >= 0; i--) {
    const event = events[i]!
    if (event.type !== "assistant/message") continue
    const { message } = (event as EventOf<"assistant/message">).data
    return {
      text: message.content.flatMap((b) => (b.type === "text" ? [b.text] : [])).join("\n"),
      model: message.source.model
    }
  }
  return undefined
}

/** The settings the options select, and the warnings about the files skipped and fields ignored. */
const loadWithWarnings = (options: HookBridgeOptions) =>
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
    const warnings = [...fromFiles.warnings]
    const inline = yield* Effect.try({
      try: () => (options.settings ?? []).map((document, i) => parseSettings(document, `settings[${i}]`, warnings)),
      catch: (e) => e instanceof HookConfigError ? e : new HookConfigError({ path: "settings", reason: String(e) })
    })
    return { settings: mergeSettings([fromFiles.settings, ...inline]), warnings }
  })

/**
 * Reads the bridge's settings: the files its options select (a malformed one skipped, with a
 * warning to `warn`), then the inline documents (a malformed one fails with `HookConfigError`).
 *
 * @since 0.1.0
 * @category constructors
 */
export const loadHookSettings = (options: HookBridgeOptions = {}): Effect.Effect<HookSettings, HookConfigError> =>
  Effect.gen(function*() {
    const { settings, warnings } = yield* loadWithWarnings(options)
    for (const warning of warnings) yield* (options.warn ?? Effect.logWarning)(warning)
    return settings
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
    const envFile = sessionEnvFile(options.envDir ?? defaultEnvDir(cwd), log.sessionId)
    const ctx: RunnerContext = {
      settings,
      sessionId: log.sessionId,
      cwd,
      home: options.home ?? os.homedir(),
      permissionMode: options.permissionMode ?? "default",
      envFile,
      ran: new Set(),
      defaultTimeout: Duration.decode(options.defaultTimeout ?? "60 seconds"),
      maxOutputBytes: options.maxOutputBytes ?? 1024 * 1024,
      transcript,
      events: log.events,
      record: (data: Json) => Effect.ignore(log.append({ type: HOOK_RUN_EVENT, data, ignorable: true }))
    }
    const has = (event: HookEvent) => settings[event].length > 0
    const lifecycle = options.lifecycle !== false

    // What every event does with a merged answer: its systemMessages and stop reason go to the user.
    const notifyOf = (event: HookEvent, merged: MergedAnswer) =>
      options.notify === undefined
        ? Effect.void
        : Effect.forEach(
          [
            ...merged.systemMessages.map((m) => ({ ...m, kind: "systemMessage" as const })),
            ...(merged.stop === undefined ? [] : [{ ...merged.stop, kind: "stopReason" as const }])
          ],
          (notice) =>
            Effect.ignore(options.notify!({ event, hook: notice.hook, kind: notice.kind, text: notice.text })),
          { discard: true }
        )
    // A `continue: false` outside a prompt's pre-step stops the running turn, keeping pending input.
    const after = (event: HookEvent, merged: MergedAnswer) =>
      Effect.zipRight(
        notifyOf(event, merged),
        merged.stop === undefined
          ? Effect.void
          : Effect.ignore(driver.cancel(CancelCause.hook(merged.stop.text), { keepInbox: true }))
      )

    if (has("UserPromptSubmit")) {
      yield* preStep.register((input, next) =>
        Effect.gen(function*() {
          const prompts = input.messages.filter((m) => m.source.kind === "user")
          const contexts = new Map<string, Array<UserMessage>>()
          for (const prompt of prompts) {
            const runs = yield* runEvent(ctx, "UserPromptSubmit", {
              fields: { prompt: textOf(prompt) },
              recordExtra: { turn: input.turn, step: input.step, messageId: prompt.id }
            })
            const merged = mergeAnswers(runs)
            yield* notifyOf("UserPromptSubmit", merged)
            const refusal = merged.block?.text ?? merged.stop?.text
            if (refusal !== undefined) return PreStepDecision.reject(refusal)
            const own = yield* Effect.forEach(merged.contexts, (c) => contextMessage("UserPromptSubmit", c))
            if (own.length > 0) contexts.set(prompt.id, own)
          }
          const decision = yield* next()
          if (decision._tag !== "Enter" || contexts.size === 0) return decision
          // Each prompt's context right after it; a prompt dropped downstream takes its context along.
          return PreStepDecision.enter(decision.messages.flatMap((m) => [m, ...(contexts.get(m.id) ?? [])]))
        })
      )
    }

    if (has("PreToolUse") || has("PostToolUse")) {
      const tools = makeToolHooks({
        runner: ctx,
        after,
        contextMessage,
        ...(options.ask === undefined ? {} : { ask: options.ask })
      }, has)
      if (has("PreToolUse")) yield* hooks.onToolPre(tools.pre)
      yield* hooks.onToolPost(tools.post)
    }

    if (has("Stop")) {
      const continued = new Map<number, number>()
      const limit = options.maxStopContinuations ?? 10
      yield* hooks.onTurnStopping((input) =>
        Effect.gen(function*() {
          const count = continued.get(input.turn) ?? 0
          const runs = yield* runEvent(ctx, "Stop", {
            fields: { stop_hook_active: count > 0, last_assistant_message: lastAnswer(yield* log.events)?.text ?? "" },
            recordExtra: { turn: input.turn, step: input.step }
          })
          const merged = mergeAnswers(runs)
          yield* notifyOf("Stop", merged)
          // `continue: false` wins over a block: the turn stops (with its reason shown to the user).
          if (merged.stop !== undefined || merged.block === undefined) return
          if (count >= limit) {
            yield* ctx.record({
              event: "Stop",
              hook: merged.block.hook,
              turn: input.turn,
              ignored: `more than ${limit} continuations of one turn`
            })
            return
          }
          continued.set(input.turn, count + 1)
          yield* Effect.ignore(driver.steer(yield* contextMessage("Stop", merged.block)))
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
            fields: { trigger, custom_instructions: input.focus ?? "" },
            recordExtra: { turn: input.turn, trigger: input.trigger }
          })
          const merged = mergeAnswers(runs)
          yield* notifyOf("PreCompact", merged)
          const veto = merged.block?.text ?? merged.stop?.text
          if (veto !== undefined) return PreCompactDecision.veto(veto)
          const decision = yield* next()
          const instructions = merged.contexts.map((c) => c.text)
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
          const post = mergeAnswers(
            yield* runEvent(ctx, "PostCompact", {
              subject: trigger,
              fields: { trigger, pruned: input.report.pruned, summarised: input.report.summarised !== undefined },
              recordExtra
            })
          )
          yield* notifyOf("PostCompact", post)
          const start = mergeAnswers(yield* runSessionStart("compact", recordExtra))
          yield* notifyOf("SessionStart", start)
          return [...downstream, ...[...post.contexts, ...start.contexts].map((c) => c.text)]
        })
      )
    }

    if (lifecycle && has("SessionEnd")) {
      yield* Effect.addFinalizer(() =>
        Effect.flatMap(
          runEvent(ctx, "SessionEnd", { fields: { reason: "other" } }),
          (runs) => notifyOf("SessionEnd", mergeAnswers(runs))
        )
      )
    }

    function runSessionStart(source: "startup" | "resume" | "compact", recordExtra?: Record<string, Json>) {
      return Effect.gen(function*() {
        const model = options.model ?? lastAnswer(yield* log.events)?.model
        // The file a hook writes `export` lines to; a new session starts with an empty one.
        yield* Effect.promise(async () => {
          await NodeFs.mkdir(path.dirname(envFile), { recursive: true }).catch(() => undefined)
          if (source === "startup") await NodeFs.writeFile(envFile, "").catch(() => undefined)
        })
        return yield* runEvent(ctx, "SessionStart", {
          subject: source,
          fields: { source, ...(model === undefined ? {} : { model }) },
          ...(recordExtra === undefined ? {} : { recordExtra })
        })
      })
    }

    if (lifecycle && has("SessionStart")) {
      const merged = mergeAnswers(yield* runSessionStart(log.firstLiveSeq === 0 ? "startup" : "resume"))
      yield* notifyOf("SessionStart", merged)
      for (const context of merged.contexts) {
        yield* Effect.ignore(driver.inject(yield* contextMessage("SessionStart", context)))
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
  /** Reads the settings the options select (a malformed file skipped with a warning). */
  load: loadHookSettings,
  /** The type of the ignorable extension event that records each command's run. */
  RUN_EVENT: HOOK_RUN_EVENT
}
