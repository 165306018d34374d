/**
 * Permissions as Claude Code users write them, applied at the tool pre-execute seam: a mode
 * (`default`, `acceptEdits`, `plan`, `bypassPermissions`) and rules `permissions: {allow, ask,
 * deny}` from the settings files the hook bridge reads (`.tiller/settings.json`; with
 * `claudeSettings` also `~/.claude/settings.json`, `.claude/settings.json`,
 * `.claude/settings.local.json`) and from the options (the CLI's `--allow`). A denied call gets an
 * error result whose text names the rule or the mode; with `approvals` an `ask` is a durable
 * approval request answered through the `Driver` (SPEC 4.12), else it goes to the `ask` option and,
 * without one, is refused with a result saying how to allow it.
 *
 * The decision is a value (`PermissionOutcome`), computed by a pure function; only answering an
 * `ask` has effects, through `ask`, so a durable approval can take its place. A `Read` deny rule
 * also hides its files from what `Glob` and `Grep` return (`internal/permissions/SearchFilter.ts`).
 *
 * @since 0.1.0
 */
import { Effect, Either, Layer, Option } from "effect"
import type { Scope } from "effect"
import * as NodeFs from "node:fs/promises"
import * as os from "node:os"
import * as path from "node:path"
import { describeAnswer } from "../domain/Approvals.js"
import { PermissionConfigError } from "../domain/Errors.js"
import { settingsFiles } from "../internal/hooks/Settings.js"
import type { PermissionSettings } from "../internal/permissions/PermissionSettings.js"
import {
  loadPermissions,
  mergePermissions,
  parsePermissions,
  parseRules
} from "../internal/permissions/PermissionSettings.js"
import type {
  PermissionMode,
  PermissionOutcome,
  PermissionRequest,
  PermissionRule
} from "../internal/permissions/Rules.js"
import { covers, EDIT_TOOLS, evaluate, PERMISSION_MODES, READ_TOOLS } from "../internal/permissions/Rules.js"
import { filterSearch, SEARCH_TOOLS } from "../internal/permissions/SearchFilter.js"
import { Driver } from "../services/Driver.js"
import { Hooks, ToolPreDecision } from "../services/Hooks.js"
import type { ToolCallInfo } from "../services/Hooks.js"

export type {
  PermissionBehavior,
  PermissionMode,
  PermissionOutcome,
  PermissionRequest,
  PermissionRule
} from "../internal/permissions/Rules.js"

/**
 * An `ask` to answer: the call, and the outcome that asks (its reason names the rule or the mode).
 *
 * @since 0.1.0
 * @category models
 */
export interface PermissionQuestion {
  readonly callId: string
  readonly tool: string
  readonly input: unknown
  readonly outcome: PermissionOutcome
}

/**
 * Options of the permissions.
 *
 * @since 0.1.0
 * @category models
 */
export interface PermissionsOptions {
  /** The working directory: relative paths and `./x` patterns resolve against it, and settings are read from it (default: the process's). */
  readonly cwd?: string
  /** The home directory for `~/x` patterns and `~/.claude/settings.json` (default: the user's). */
  readonly home?: string
  /** The mode; default: the settings' `defaultMode`, else `default`. */
  readonly mode?: PermissionMode
  /** Rules given besides the settings files (the CLI's `--allow`), each list in Claude Code's syntax. */
  readonly rules?: {
    readonly allow?: ReadonlyArray<string>
    readonly ask?: ReadonlyArray<string>
    readonly deny?: ReadonlyArray<string>
  }
  /** Also read the Claude Code settings files (the CLI's `--claude-hooks`). */
  readonly claudeSettings?: boolean
  /** Settings documents given inline, read after the files. */
  readonly settings?: ReadonlyArray<unknown>
  /** Read no settings files, only `settings` and `rules`. */
  readonly noFiles?: boolean
  /** Answers an `ask` (`true`: run the call); without it (and without `approvals`) an `ask` is refused (a headless run). */
  readonly ask?: (question: PermissionQuestion) => Effect.Effect<boolean>
  /**
   * Durable approvals: an `ask` records `approval/request` in the session's log and the call waits
   * for `Driver.approve` / `Driver.deny` (or `tiller approve` from another process), across a
   * restart too (SPEC 4.12). Allow rules recorded by "always" answers apply for the session.
   * Takes precedence over `ask`.
   */
  readonly approvals?: boolean
  /** Told each settings entry that was ignored (a `bypassPermissions` default in a file). */
  readonly warn?: (warning: string) => Effect.Effect<void>
}

/**
 * The rules and mode the options select.
 *
 * @since 0.1.0
 * @category models
 */
export interface ResolvedPermissions {
  readonly mode: PermissionMode
  readonly rules: ReadonlyArray<PermissionRule>
  readonly warnings: ReadonlyArray<string>
}

/**
 * Reads the settings the options select and resolves the mode.
 *
 * @since 0.1.0
 * @category constructors
 */
export const load = (options: PermissionsOptions = {}): Effect.Effect<ResolvedPermissions, PermissionConfigError> =>
  Effect.gen(function*() {
    const cwd = path.resolve(options.cwd ?? process.cwd())
    const files = options.noFiles === true
      ? []
      : settingsFiles({
        cwd,
        claude: options.claudeSettings === true,
        ...(options.home === undefined ? {} : { home: options.home })
      })
    const fromFiles = yield* loadPermissions(files, cwd)
    const inline: Array<PermissionSettings> = []
    for (const [i, document] of (options.settings ?? []).entries()) {
      inline.push(yield* parsePermissions(document, `settings[${i}]`, cwd))
    }
    const given: Array<PermissionRule> = []
    for (const behavior of ["deny", "ask", "allow"] as const) {
      given.push(...(yield* parseRules(options.rules?.[behavior] ?? [], behavior, "command line", cwd)))
    }
    const merged = mergePermissions([fromFiles, ...inline, { rules: given, warnings: [] }])
    if (options.mode !== undefined && !(PERMISSION_MODES as ReadonlyArray<string>).includes(options.mode)) {
      return yield* new PermissionConfigError({
        path: "mode",
        reason: `unknown permission mode ${JSON.stringify(options.mode)}: use one of ${PERMISSION_MODES.join(", ")}`
      })
    }
    return { mode: options.mode ?? merged.defaultMode ?? "default", rules: merged.rules, warnings: merged.warnings }
  })

const isRecord = (value: unknown): value is Record<string, unknown> => typeof value === "object" && value !== null

/** A call's input: the raw JSON object, else the decoded parameters. */
const inputOf = (info: ToolCallInfo): unknown => {
  if (isRecord(info.params)) return info.params
  try {
    return JSON.parse(info.arguments)
  } catch {
    return info.params
  }
}

/** The absolute paths a file tool's call touches: as written and, when it exists, its real path. */
const pathsOf = (tool: string, input: unknown, cwd: string): Effect.Effect<ReadonlyArray<string>> =>
  Effect.gen(function*() {
    if (!EDIT_TOOLS.includes(tool) && !READ_TOOLS.includes(tool)) return []
    const record = isRecord(input) ? input : {}
    const written = typeof record.file_path === "string"
      ? record.file_path
      : typeof record.notebook_path === "string"
      ? record.notebook_path
      : typeof record.path === "string"
      ? record.path
      : "."
    const absolute = path.resolve(cwd, written)
    const real = yield* Effect.orElseSucceed(Effect.tryPromise(() => NodeFs.realpath(absolute)), () => absolute)
    return real === absolute ? [absolute] : [absolute, real]
  })

/**
 * Decides one call under resolved permissions (reading the real path of a file tool's target).
 *
 * @since 0.1.0
 * @category combinators
 */
export const decide = (
  resolved: ResolvedPermissions,
  request: Omit<PermissionRequest, "paths">,
  places: { readonly cwd: string; readonly home: string }
): Effect.Effect<PermissionOutcome> =>
  Effect.map(
    pathsOf(request.tool, request.input, places.cwd),
    (paths) => evaluate(resolved.rules, resolved.mode, { ...request, paths }, places)
  )

/** How to allow what a headless run refused. */
const howToAllow = (tool: string): string =>
  EDIT_TOOLS.includes(tool)
    ? `run with --permission-mode acceptEdits, or --allow "${tool}(PATH)"`
    : tool === "Bash"
    ? `run with --allow "Bash(COMMAND:*)" for the commands it may run, or --permission-mode bypassPermissions`
    : `run with --allow ${tool}`

/**
 * Registers the permissions on the agent's tool pre-execute seam for the lifetime of the scope.
 *
 * @since 0.1.0
 * @category constructors
 */
export const register = (
  options: PermissionsOptions = {}
): Effect.Effect<ResolvedPermissions, PermissionConfigError, Hooks | Scope.Scope> =>
  Effect.gen(function*() {
    const resolved = yield* load(options)
    if (options.warn !== undefined) { for (const warning of resolved.warnings) yield* options.warn(warning) }
    const hooks = yield* Hooks
    const driver = options.approvals === true ? Option.getOrUndefined(yield* Effect.serviceOption(Driver)) : undefined
    if (options.approvals === true && driver === undefined) {
      return yield* Effect.dieMessage(
        "Permissions: approvals need the session's Driver in context (compose over Agent.layer)"
      )
    }
    const places = { cwd: path.resolve(options.cwd ?? process.cwd()), home: options.home ?? os.homedir() }
    // The session's "always" rules, parsed once per change of the list (it only grows).
    let sessionRules: { readonly texts: number; readonly rules: ReadonlyArray<PermissionRule> } = {
      texts: 0,
      rules: []
    }
    const withSessionRules = Effect.gen(function*() {
      if (driver === undefined) return resolved
      const texts = yield* driver.approvalRules
      if (texts.length === 0) return resolved
      if (texts.length !== sessionRules.texts) {
        const parsed = Either.getOrElse(
          parseRules(texts, "allow", "an approval answered always", places.cwd),
          () => sessionRules.rules
        )
        sessionRules = { texts: texts.length, rules: parsed }
      }
      return { ...resolved, rules: [...resolved.rules, ...sessionRules.rules] }
    })
    yield* hooks.onToolPre((info, next) =>
      Effect.gen(function*() {
        const input = inputOf(info)
        const outcome = yield* decide(yield* withSessionRules, { tool: info.name, input }, places)
        if (outcome.behavior === "deny") return ToolPreDecision.deny(`permission denied: ${outcome.reason}`)
        if (outcome.behavior === "ask" && driver !== undefined) {
          const answer = yield* driver.requestApproval({
            turn: info.turn,
            step: info.step,
            callId: info.callId,
            tool: info.name,
            input,
            reason: outcome.reason,
            source: outcome.rule === undefined ? "mode" : "rule"
          })
          if (answer.decision === "deny") {
            return ToolPreDecision.deny(`permission ${describeAnswer(answer)} (it asked: ${outcome.reason})`)
          }
        } else if (outcome.behavior === "ask") {
          if (options.ask === undefined) {
            return ToolPreDecision.deny(
              `permission needed: ${outcome.reason}, and nobody can approve it in a headless run; ${
                howToAllow(info.name)
              }`
            )
          }
          const approved = yield* options.ask({ callId: info.callId, tool: info.name, input, outcome })
          if (!approved) return ToolPreDecision.deny(`permission refused by the user: ${outcome.reason}`)
        }
        return yield* next()
      })
    )
    const readDenials = resolved.rules.filter((r) => r.behavior === "deny" && r.tool === "Read")
    if (readDenials.length > 0) {
      // The searches print real paths; a rule written against the working directory as given sees both.
      const realCwd = yield* Effect.orElseSucceed(
        Effect.tryPromise(() => NodeFs.realpath(places.cwd)),
        () => places.cwd
      )
      const denied = (file: string): boolean => {
        const relative = path.relative(realCwd, file)
        const paths = realCwd !== places.cwd && !relative.startsWith("..") && !path.isAbsolute(relative)
          ? [file, path.join(places.cwd, relative)]
          : [file]
        return readDenials.some((rule) => covers(rule, { tool: "Read", input: { file_path: file }, paths }, places))
      }
      yield* hooks.onToolPost((input, next) =>
        SEARCH_TOOLS.includes(input.name)
          ? Effect.map(next(), (output) => filterSearch(input.name, output, denied))
          : next()
      )
    }
    return resolved
  })

/**
 * The permissions.
 *
 * @since 0.1.0
 * @category layers
 */
export const Permissions = {
  /**
   * The permissions over an agent's `Hooks`, for the layer's lifetime: compose it over
   * `Agent.layer` (`Permissions.layer(options).pipe(Layer.provideMerge(Agent.layer(...)))`).
   *
   * @since 0.1.0
   */
  layer: (options: PermissionsOptions = {}): Layer.Layer<never, PermissionConfigError, Hooks> =>
    Layer.scopedDiscard(register(options)),
  /** Registers the permissions in the current scope (see {@link register}). */
  register,
  /** Reads the settings and resolves the mode (see {@link load}). */
  load,
  /** Decides one call (see {@link decide}). */
  decide,
  /** The permission modes. */
  MODES: PERMISSION_MODES
}
