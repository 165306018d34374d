/**
 * The compositions the CLI's session commands add to an open session: the hook bridge (settings
 * from `.tiller/settings.json`, with `--claude-hooks` also from `.claude/` and `~/.claude/`; a
 * `PreToolUse` `ask` is a durable approval in the chat and a deny in `run`), the permissions (the
 * mode and the rules of the same settings files and `--allow`; an `ask` is a durable approval
 * (SPEC 4.12) in the chat, answered with y / n / always or by `tiller approve`, and a refusal in
 * `run`) and cross-session references
 * (`@ID` or `@ID@SEQ` in a line attaches a snapshot of that session; `/ref ID [--upto SEQ]`).
 *
 * @since 0.1.0
 */
import { Context, Effect, Scope } from "effect"
import * as path from "node:path"
import type { SessionId } from "../domain/Ids.js"
import type { UserMessage } from "../domain/Values.js"
import { HookBridge } from "../layers/HookBridge.js"
import type { HookBridgeOptions, HookNotice, HookQuestion } from "../layers/HookBridge.js"
import { Permissions } from "../layers/Permissions.js"
import type { PermissionMode } from "../layers/Permissions.js"
import { SessionReference } from "../layers/SessionReference.js"
import type { SessionServices } from "../layers/Sessions.js"
import type { DeliveryError } from "../services/Driver.js"
import { Driver } from "../services/Driver.js"
import { SessionStore } from "../services/SessionStore.js"
import { CliError } from "./CliError.js"
import * as Database from "./Database.js"
import * as Output from "./Output.js"

/**
 * What the global options say about the compositions.
 *
 * @since 0.1.0
 * @category models
 */
export interface CompositionOptions {
  /** `--claude-hooks`: also read the Claude Code settings files. */
  readonly claudeHooks: boolean
  /** The database file: transcripts for hooks are written next to it. */
  readonly db: string
  /** `--permission-mode` (or `--dangerously-skip-permissions`) and `--allow`. */
  readonly permissions?: { readonly mode?: PermissionMode | undefined; readonly allow: ReadonlyArray<string> }
  /** The model's name, as `SessionStart` hooks see it. */
  readonly model?: string
}

/**
 * The compositions of one open session, for a command.
 *
 * @since 0.1.0
 * @category models
 */
export interface Compositions {
  /** Takes `line` (y, n [REASON], always) as the answer to the oldest pending approval, if one waits: `true` then. */
  readonly answer: (line: string) => Effect.Effect<boolean>
  /** Snapshots of the stored sessions that `text` mentions (`@ID`, `@ID@SEQ`), each announced. */
  readonly mentioned: (text: string) => Effect.Effect<ReadonlyArray<UserMessage>, CliError>
  /** Delivers `message` with `references` beside it (see `SessionReference.deliver`). */
  readonly deliver: (
    message: UserMessage,
    references: ReadonlyArray<UserMessage>,
    wake: "followup" | "steer"
  ) => Effect.Effect<void, DeliveryError>
  /** `/ref ID [--upto SEQ]`: injects a snapshot of ID for the next step; returns the acknowledgement. */
  readonly ref: (args: string) => Effect.Effect<string, CliError | DeliveryError>
}

/**
 * A chat line read as an approval answer: `y`/`yes`, `n`/`no` with an optional reason, `always`;
 * `undefined` for any other line.
 *
 * @since 0.1.0
 * @category parsing
 */
export const parseAnswer = (
  line: string
): { readonly decision: "allow" | "deny"; readonly always: boolean; readonly reason?: string } | undefined => {
  const match = /^\s*(y|yes|n|no|always)(?:\s+(.*\S))?\s*$/i.exec(line)
  if (match === null) return undefined
  const word = match[1]!.toLowerCase()
  if (word === "n" || word === "no") {
    return match[2] === undefined
      ? { decision: "deny", always: false }
      : { decision: "deny", always: false, reason: match[2] }
  }
  return match[2] === undefined ? { decision: "allow", always: word === "always" } : undefined
}

/**
 * The allow rule an "always" answer records for a call: the exact command for `Bash`, every edit
 * for the edit tools, the tool itself otherwise (Claude Code's syntax).
 *
 * @since 0.1.0
 * @category parsing
 */
export const alwaysRuleFor = (tool: string, input: unknown): string => {
  const command = typeof input === "object" && input !== null
    ? (input as { readonly command?: unknown }).command
    : undefined
  if (tool === "Bash" && typeof command === "string" && !/[()]/.test(command)) return `Bash(${command})`
  if (tool === "Edit" || tool === "Write" || tool === "MultiEdit" || tool === "NotebookEdit") return "Edit"
  return tool
}

/** `@ID` or `@ID@SEQ`, not inside a word or an e-mail address. */
const MENTION = /(?<![\w@.])@([A-Za-z0-9][A-Za-z0-9_-]*)(?:@(\d+))?/g

/**
 * The sessions `text` mentions, in order, each once.
 *
 * @since 0.1.0
 * @category parsing
 */
export const mentionsIn = (text: string): ReadonlyArray<{ readonly id: string; readonly upTo?: number }> => {
  const seen = new Set<string>()
  const out: Array<{ readonly id: string; readonly upTo?: number }> = []
  for (const match of text.matchAll(MENTION)) {
    const id = match[1]!
    if (seen.has(id)) continue
    seen.add(id)
    out.push(match[2] === undefined ? { id } : { id, upTo: Number(match[2]) })
  }
  return out
}

/** A snapshot as the CLI reports it: a refusal is a `CliError`. */
const snapshotOf = (id: string, upTo: number | undefined) =>
  SessionReference.snapshot(id as SessionId, upTo === undefined ? {} : { upTo }).pipe(
    Effect.mapError((error) =>
      new CliError({ reason: error._tag === "SessionNotFound" ? `no session ${id} in this database` : error.message })
    )
  )

/** The note printed for an attached snapshot. */
const noteOf = (snapshot: UserMessage): string => {
  const source = snapshot.source as { readonly session?: string; readonly upTo?: number }
  return `(reference: session ${source.session} up to seq ${source.upTo}, quoted for the model)`
}

/**
 * The line that shows a hook's `systemMessage` or stop reason.
 *
 * @since 0.1.0
 * @category formatting
 */
export const noticeLine = (notice: HookNotice): string =>
  notice.kind === "systemMessage"
    ? `(${notice.event} hook: ${notice.text})`
    : `(${notice.event} hook stopped the turn: ${notice.text})`

/**
 * The hook bridge's options for a session command (the permission mode hooks are told is the
 * option's, else the settings' default), and the permissions' own.
 *
 * @since 0.1.0
 * @category constructors
 */
export const bridgeOptions = (options: CompositionOptions) =>
  Effect.gen(function*() {
    const permissionOptions = {
      cwd: process.cwd(),
      claudeSettings: options.claudeHooks,
      ...(options.permissions?.mode === undefined ? {} : { mode: options.permissions.mode }),
      rules: { allow: options.permissions?.allow ?? [] }
    }
    const { mode } = yield* Permissions.load(permissionOptions).pipe(
      Effect.mapError((error) => new CliError({ reason: error.message }))
    )
    const bridge: HookBridgeOptions = {
      cwd: process.cwd(),
      claudeSettings: options.claudeHooks,
      transcriptDir: options.db === ":memory:" || Database.isPostgres(options.db)
        ? path.join(process.cwd(), ".tiller", "transcripts")
        : path.join(path.dirname(path.resolve(options.db)), "transcripts"),
      permissionMode: mode,
      ...(options.model === undefined ? {} : { model: options.model }),
      warn: (warning) => Output.errorLine(`warning: ${warning}`)
    }
    return { bridge, permissionOptions }
  })

/**
 * Registers the hook bridge on the open session `context` in the current scope and returns its
 * reference helpers. `interactive`: an `ask` becomes a durable approval request.
 *
 * @since 0.1.0
 * @category constructors
 */
export const setup = (
  context: Context.Context<SessionServices>,
  options: CompositionOptions & { readonly interactive: boolean }
): Effect.Effect<Compositions, CliError, SessionStore | Scope.Scope> =>
  Effect.gen(function*() {
    const store = yield* SessionStore
    const driver = Context.get(context, Driver)
    const own = driver.sessionId
    // A hook's `ask` is a durable approval too (SPEC 4.12): answered in the chat or by `tiller approve`.
    const ask = (question: HookQuestion) =>
      driver.requestApproval({
        turn: question.turn,
        step: question.step,
        callId: question.callId,
        tool: question.tool,
        input: question.input,
        reason: `the hook ${question.hook} asks: ${question.reason}`,
        source: "hook"
      }).pipe(Effect.map((answer) => answer.decision === "allow"), Effect.orElseSucceed(() => false))
    const { bridge, permissionOptions } = yield* bridgeOptions(options)
    yield* HookBridge.register({
      ...bridge,
      // The chat shows these from the log as they come; a headless run prints them on stderr.
      ...(options.interactive ? { ask } : { notify: (notice) => Output.errorLine(noticeLine(notice)) })
    }).pipe(
      Effect.provide(context),
      Effect.mapError((error) => new CliError({ reason: error.message }))
    )
    yield* Permissions.register({
      ...permissionOptions,
      warn: (warning) => Output.errorLine(warning),
      ...(options.interactive ? { approvals: true } : {})
    }).pipe(
      Effect.provide(context),
      Effect.mapError((error) => new CliError({ reason: error.message }))
    )
    // y / n [REASON] / always answers the oldest pending approval; any other line is input.
    const answer = (line: string) =>
      Effect.gen(function*() {
        const parsed = parseAnswer(line)
        if (parsed === undefined) return false
        const [oldest] = yield* driver.pendingApprovals
        if (oldest === undefined) return false
        const answered = parsed.decision === "deny"
          ? driver.deny(oldest.callId, parsed.reason ?? "", { by: "the user in the chat" })
          : driver.approve(oldest.callId, {
            by: "the user in the chat",
            ...(parsed.always ? { always: alwaysRuleFor(oldest.tool, oldest.input) } : {})
          })
        yield* answered.pipe(Effect.catchAll((error) => Output.errorLine(`tiller: ${error.message}`)))
        return true
      })
    const mentioned = (text: string) =>
      Effect.gen(function*() {
        const snapshots: Array<UserMessage> = []
        for (const mention of mentionsIn(text)) {
          if (mention.id === own) continue
          const exists = yield* Effect.orElseSucceed(store.exists(mention.id as SessionId), () => false)
          if (!exists) continue
          const snapshot = yield* Effect.provideService(snapshotOf(mention.id, mention.upTo), SessionStore, store)
          yield* Output.errorLine(noteOf(snapshot))
          snapshots.push(snapshot)
        }
        return snapshots
      })
    // The listener that places references beside their message lives as long as the command.
    const scope = yield* Effect.scope
    const deliver = (message: UserMessage, references: ReadonlyArray<UserMessage>, wake: "followup" | "steer") =>
      Scope.extend(Effect.provide(SessionReference.deliver(message, references, { wake }), context), scope)
    const ref = (args: string) =>
      Effect.gen(function*() {
        const match = /^(\S+)(?:\s+--upto\s+(\d+))?$/.exec(args.trim())
        if (match === null) return yield* new CliError({ reason: "usage: /ref ID [--upto SEQ]" })
        const snapshot = yield* Effect.provideService(
          snapshotOf(match[1]!, match[2] === undefined ? undefined : Number(match[2])),
          SessionStore,
          store
        )
        yield* driver.inject(snapshot)
        return `${noteOf(snapshot).slice(1, -1)}; enters with the next step`
      })
    return { answer, mentioned, deliver, ref }
  })
