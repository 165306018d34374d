/**
 * Runs the commands of one hook event, in parallel as Claude Code runs them: the protocol's stdin
 * JSON, the answer read, every run recorded on the session as an ignorable `hook/run` event (its
 * decision, or its error) in configuration order. A command's `if` (a permission rule the tool call
 * must match) and `once` (at most one run per session) are honoured here.
 *
 * @since 0.1.0
 */
import { Duration, Effect, Either } from "effect"
import { HookCommandError } from "../../domain/Errors.js"
import type { SessionEvent } from "../../domain/Event.js"
import type { Json } from "../../domain/Json.js"
import type { PermissionMode, PermissionRequest } from "../permissions/Rules.js"
import { covers } from "../permissions/Rules.js"
import { runCommand, scrubbedEnvironment } from "./Command.js"
import type { HookAnswer } from "./Protocol.js"
import { readAnswer } from "./Protocol.js"
import type { HookCommand, HookEvent, HookSettings } from "./Settings.js"
import { commandsFor } from "./Settings.js"
import type { Transcript } from "./Transcript.js"

/**
 * The type of the extension event that records one hook command's run.
 *
 * @since 0.1.0
 * @category constants
 */
export const HOOK_RUN_EVENT = "hook/run"

/**
 * One command's answer, or the non-blocking error it ended with.
 *
 * @since 0.1.0
 * @category models
 */
export interface HookRun {
  readonly hook: HookCommand
  readonly answer: HookAnswer
  readonly error?: HookCommandError
}

/**
 * What the runner needs from the session and the bridge's options.
 *
 * @since 0.1.0
 * @category models
 */
export interface RunnerContext {
  readonly settings: HookSettings
  readonly sessionId: string
  readonly cwd: string
  /** The home directory `~/x` patterns of an `if` rule resolve against. */
  readonly home: string
  /** The session's permission mode, as `permission_mode` tells each hook. */
  readonly permissionMode: PermissionMode
  /** The file a `SessionStart` hook may write `export NAME=value` lines to (`CLAUDE_ENV_FILE`). */
  readonly envFile: string
  /** The `once` commands that already ran in this session. */
  readonly ran: Set<HookCommand>
  readonly defaultTimeout: Duration.Duration
  readonly maxOutputBytes: number
  readonly transcript: Transcript
  readonly events: Effect.Effect<ReadonlyArray<SessionEvent>>
  /** Appends a `hook/run` record; failures are ignored (a closing session may refuse it). */
  readonly record: (data: Json) => Effect.Effect<void>
}

/** The record of a run: only the decision fields, never the command's whole output. */
const recordOf = (
  event: HookEvent,
  run: HookRun,
  extra: Record<string, Json>,
  exitCode: number | undefined,
  durationMs: number | undefined
): Json => {
  const { answer } = run
  return {
    event,
    hook: run.hook.command,
    ...(exitCode === undefined ? {} : { exitCode }),
    ...(durationMs === undefined ? {} : { durationMs }),
    ...extra,
    ...(answer.block === undefined ? {} : { block: answer.block }),
    ...(answer.stop === undefined ? {} : { stop: answer.stop }),
    ...(answer.permission === undefined ? {} : { permissionDecision: answer.permission }),
    ...(answer.permissionReason === undefined ? {} : { permissionDecisionReason: answer.permissionReason }),
    ...(answer.updatedInput === undefined ? {} : { updatedInput: answer.updatedInput as Json }),
    ...(answer.additionalContext === undefined ? {} : { additionalContext: answer.additionalContext }),
    ...(answer.systemMessage === undefined ? {} : { systemMessage: answer.systemMessage }),
    ...(run.error === undefined ? {} : { error: { code: run.error.code, message: run.error.message } })
  }
}

/** Events whose commands may carry an `if` rule: the tool events. */
const TOOL_EVENTS: ReadonlySet<HookEvent> = new Set(["PreToolUse", "PostToolUse"])

/**
 * Runs the commands of `event` that match `subject` (and, on a tool event, whose `if` covers
 * `tool`), all at once, each with the common fields and `fields` on stdin; returns their runs in
 * configuration order.
 *
 * @since 0.1.0
 * @category constructors
 */
export const runEvent = (
  ctx: RunnerContext,
  event: HookEvent,
  options: {
    readonly subject?: string
    /** The tool call of a tool event, for the commands' `if` rules. */
    readonly tool?: Omit<PermissionRequest, "paths">
    readonly fields: Record<string, unknown>
    /** Fields added to each run's record (for example the tool call's id). */
    readonly recordExtra?: Record<string, Json>
  }
): Effect.Effect<ReadonlyArray<HookRun>> =>
  Effect.gen(function*() {
    const places = { cwd: ctx.cwd, home: ctx.home }
    const hooks = commandsFor(ctx.settings, event, options.subject).filter((hook) => {
      if (hook.once === true && ctx.ran.has(hook)) return false
      if (hook.if === undefined) return true
      if (!TOOL_EVENTS.has(event) || options.tool === undefined) return false
      return covers(hook.if, { ...options.tool, paths: pathsOf(options.tool.input) }, places)
    })
    if (hooks.length === 0) return []
    for (const hook of hooks) if (hook.once === true) ctx.ran.add(hook)
    yield* Effect.flatMap(ctx.events, ctx.transcript.sync)
    const stdin = JSON.stringify({
      session_id: ctx.sessionId,
      transcript_path: ctx.transcript.path,
      cwd: ctx.cwd,
      permission_mode: ctx.permissionMode,
      hook_event_name: event,
      ...options.fields
    })
    const env = scrubbedEnvironment(process.env, {
      CLAUDE_PROJECT_DIR: ctx.cwd,
      TILLER_SESSION_ID: ctx.sessionId,
      ...(event === "SessionStart" ? { CLAUDE_ENV_FILE: ctx.envFile } : {})
    })
    const runs = yield* Effect.forEach(hooks, (hook) =>
      Effect.gen(function*() {
        const result = yield* Effect.either(runCommand({
          command: hook.command,
          cwd: ctx.cwd,
          env,
          stdin,
          timeout: hook.timeout === undefined ? ctx.defaultTimeout : Duration.seconds(hook.timeout),
          maxOutputBytes: ctx.maxOutputBytes
        }))
        const error = (code: HookCommandError["code"], detail: string) =>
          new HookCommandError({ event, command: hook.command, code, detail })
        let run: HookRun
        if (Either.isLeft(result)) {
          run = { hook, answer: {}, error: error(result.left.code, result.left.detail) }
        } else {
          const answer = readAnswer(event, result.right)
          run = Either.isLeft(answer)
            ? { hook, answer: {}, error: error(answer.left.code, answer.left.detail) }
            : { hook, answer: answer.right }
        }
        return { run, exit: Either.isRight(result) ? result.right : undefined }
      }), { concurrency: "unbounded" })
    for (const { exit, run } of runs) {
      yield* ctx.record(recordOf(event, run, options.recordExtra ?? {}, exit?.exitCode, exit?.durationMs))
    }
    return runs.map((r) => r.run)
  })

/** The absolute paths a file tool's input names (`file_path`, `path`), for an `if` rule. */
const pathsOf = (input: unknown): ReadonlyArray<string> => {
  if (typeof input !== "object" || input === null) return []
  const record = input as Record<string, unknown>
  const named = record["file_path"] ?? record["notebook_path"] ?? record["path"]
  return typeof named === "string" && named.startsWith("/") ? [named] : []
}
