/**
 * Runs the commands of one hook event in order: the protocol's stdin JSON, the answer read, every
 * run recorded on the session as an ignorable `hook/run` event (its decision, or its error).
 *
 * @since 0.1.0
 */
import { Duration, Effect, Either } from "effect"
import { HookCommandError } from "../../domain/Errors.js"
import type { SessionEvent } from "../../domain/Event.js"
import type { Json } from "../../domain/Json.js"
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
  readonly defaultTimeout: Duration.Duration
  readonly maxOutputBytes: number
  readonly transcript: Transcript
  readonly events: Effect.Effect<ReadonlyArray<SessionEvent>>
  /** Appends a `hook/run` record; failures are ignored (a closing session may refuse it). */
  readonly record: (data: Json) => Effect.Effect<void>
}

/**
 * What decides whether to run the next command after an answer: `true` stops the event's run.
 *
 * @since 0.1.0
 * @category models
 */
export type StopWhen = (answer: HookAnswer) => boolean

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

/**
 * Runs the commands of `event` that match `subject`, in order, each with the common fields and
 * `fields(previous answers)` on stdin; stops after an answer for which `stopWhen` holds.
 *
 * @since 0.1.0
 * @category constructors
 */
export const runEvent = (
  ctx: RunnerContext,
  event: HookEvent,
  options: {
    readonly subject?: string
    readonly fields: (runs: ReadonlyArray<HookRun>) => Record<string, unknown>
    readonly stopWhen?: StopWhen
    /** Fields added to each run's record (for example the tool call's id). */
    readonly recordExtra?: Record<string, Json>
  }
): Effect.Effect<ReadonlyArray<HookRun>> =>
  Effect.gen(function*() {
    const hooks = commandsFor(ctx.settings, event, options.subject)
    const runs: Array<HookRun> = []
    if (hooks.length === 0) return runs
    yield* Effect.flatMap(ctx.events, ctx.transcript.sync)
    for (const hook of hooks) {
      const stdin = JSON.stringify({
        session_id: ctx.sessionId,
        transcript_path: ctx.transcript.path,
        cwd: ctx.cwd,
        permission_mode: "default",
        hook_event_name: event,
        ...options.fields(runs)
      })
      const result = yield* Effect.either(runCommand({
        command: hook.command,
        cwd: ctx.cwd,
        env: scrubbedEnvironment(process.env, { CLAUDE_PROJECT_DIR: ctx.cwd, TILLER_SESSION_ID: ctx.sessionId }),
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
      runs.push(run)
      const exit = Either.isRight(result) ? result.right : undefined
      yield* ctx.record(recordOf(event, run, options.recordExtra ?? {}, exit?.exitCode, exit?.durationMs))
      if (options.stopWhen?.(run.answer)) break
    }
    return runs
  })
