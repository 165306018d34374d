/**
 * Hook configurations in the Claude Code shape: `{hooks: {Event: [{matcher, hooks: [{type:
 * "command", command, timeout, if, once}]}]}}`, read from settings files and merged in file order.
 * As Claude Code does, a settings file that cannot be read or is malformed is skipped with a
 * warning; fields tiller does not know are reported once, by a warning, and ignored.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import * as fs from "node:fs/promises"
import * as os from "node:os"
import * as path from "node:path"
import { HookConfigError } from "../../domain/Errors.js"
import type { PermissionRule } from "../permissions/Rules.js"
import { parseRule } from "../permissions/Rules.js"

/**
 * The hook events tiller maps onto its seams.
 *
 * @since 0.1.0
 * @category constants
 */
export const HOOK_EVENTS = [
  "SessionStart",
  "UserPromptSubmit",
  "PreToolUse",
  "PostToolUse",
  "Stop",
  "PreCompact",
  "PostCompact",
  "SessionEnd"
] as const

/**
 * A hook event tiller runs.
 *
 * @since 0.1.0
 * @category models
 */
export type HookEvent = (typeof HOOK_EVENTS)[number]

/**
 * One configured command: what to run, for how long at most, and the file that named it.
 *
 * @since 0.1.0
 * @category models
 */
export interface HookCommand {
  readonly command: string
  /** Seconds; absent: the bridge's default. */
  readonly timeout?: number
  /** `if`: a permission rule (`Bash(git *)`, `Edit(src/**)`) the tool call must match; on other events the command never runs. */
  readonly if?: PermissionRule
  /** `once`: the command runs at most once per session. */
  readonly once?: boolean
  readonly origin: string
}

/**
 * A matcher group: the commands that run when `matcher` matches.
 *
 * @since 0.1.0
 * @category models
 */
export interface HookGroup {
  /** Absent, `""` or `"*"` match everything; otherwise an anchored regular expression. */
  readonly matcher: string | undefined
  readonly hooks: ReadonlyArray<HookCommand>
}

/**
 * The merged configuration: the groups of each event, in file order.
 *
 * @since 0.1.0
 * @category models
 */
export type HookSettings = { readonly [E in HookEvent]: ReadonlyArray<HookGroup> }

/**
 * A configuration without hooks.
 *
 * @since 0.1.0
 * @category constants
 */
export const emptySettings: HookSettings = Object.freeze(
  Object.fromEntries(HOOK_EVENTS.map((event) => [event, []])) as unknown as HookSettings
)

const isRecord = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value)

const isHookEvent = (name: string): name is HookEvent => (HOOK_EVENTS as ReadonlyArray<string>).includes(name)

/** The fields of a command entry tiller reads (`statusMessage` is a spinner text: nothing to show it in). */
const COMMAND_FIELDS: ReadonlySet<string> = new Set(["type", "command", "timeout", "if", "once", "statusMessage"])
/** The fields of a matcher group. */
const GROUP_FIELDS: ReadonlySet<string> = new Set(["matcher", "hooks"])

/**
 * Reads the `hooks` of one parsed settings document. Events tiller does not run and hook types
 * other than `command` are skipped (Claude Code has more of both); a malformed entry is an error;
 * each field tiller does not know (for one, `async`) is named once in `warnings`.
 *
 * @since 0.1.0
 * @category constructors
 */
export const parseSettings = (document: unknown, origin: string, warnings?: Array<string>): HookSettings => {
  const fail = (reason: string): never => {
    throw new HookConfigError({ path: origin, reason })
  }
  if (!isRecord(document)) return fail("expected a JSON object")
  const hooks = document["hooks"]
  if (hooks === undefined) return emptySettings
  if (!isRecord(hooks)) return fail("`hooks` must be an object mapping event names to matcher groups")
  const result: Record<string, Array<HookGroup>> = Object.fromEntries(HOOK_EVENTS.map((event) => [event, []]))
  const unknown = new Map<string, string>()
  const noteUnknown = (object: Record<string, unknown>, known: ReadonlySet<string>, at: string) => {
    for (const name of Object.keys(object)) if (!known.has(name) && !unknown.has(name)) unknown.set(name, at)
  }
  for (const [event, groups] of Object.entries(hooks)) {
    if (!Array.isArray(groups)) return fail(`hooks.${event} must be an array of matcher groups`)
    if (!isHookEvent(event)) continue
    groups.forEach((group, i) => {
      const at = `hooks.${event}[${i}]`
      if (!isRecord(group)) return fail(`${at} must be an object with matcher and hooks`)
      noteUnknown(group, GROUP_FIELDS, at)
      const matcher = group["matcher"]
      if (matcher !== undefined && typeof matcher !== "string") return fail(`${at}.matcher must be a string`)
      if (typeof matcher === "string" && matcher !== "" && matcher !== "*") {
        compileMatcher(matcher, `${origin}: ${at}.matcher`)
      }
      const entries = group["hooks"]
      if (!Array.isArray(entries)) return fail(`${at}.hooks must be an array`)
      const commands: Array<HookCommand> = []
      entries.forEach((entry, j) => {
        const where = `${at}.hooks[${j}]`
        if (!isRecord(entry)) return fail(`${where} must be an object`)
        if (entry["type"] !== "command") return
        noteUnknown(entry, COMMAND_FIELDS, where)
        const command = entry["command"]
        if (typeof command !== "string" || command.trim() === "") {
          return fail(`${where}.command must be a non-empty string`)
        }
        const timeout = entry["timeout"]
        if (timeout !== undefined && (typeof timeout !== "number" || !Number.isFinite(timeout) || timeout <= 0)) {
          return fail(`${where}.timeout must be a positive number of seconds`)
        }
        const once = entry["once"]
        if (once !== undefined && typeof once !== "boolean") return fail(`${where}.once must be a boolean`)
        const condition = entry["if"]
        let rule: PermissionRule | undefined
        if (condition !== undefined) {
          if (typeof condition !== "string") return fail(`${where}.if must be a permission rule such as "Bash(git *)"`)
          const parsed = parseRule(
            condition,
            "allow",
            `${origin}: ${where}.if`,
            path.isAbsolute(origin) ? path.dirname(path.dirname(origin)) : path.resolve(".")
          )
          if (parsed._tag === "Left") return fail(`${where}.if: ${parsed.left}`)
          rule = parsed.right
        }
        commands.push(Object.freeze({
          command,
          origin,
          ...(timeout === undefined ? {} : { timeout }),
          ...(rule === undefined ? {} : { if: rule }),
          ...(once === true ? { once } : {})
        }))
      })
      if (commands.length > 0) result[event]!.push(Object.freeze({ matcher, hooks: Object.freeze(commands) }))
    })
  }
  for (const [name, at] of unknown) {
    warnings?.push(`${origin}: ${at}.${name} is not a field tiller reads; it is ignored`)
  }
  return Object.freeze(result) as unknown as HookSettings
}

/**
 * The settings of several documents together, each event's groups in document order.
 *
 * @since 0.1.0
 * @category combinators
 */
export const mergeSettings = (all: ReadonlyArray<HookSettings>): HookSettings =>
  Object.freeze(
    Object.fromEntries(HOOK_EVENTS.map((event) => [event, all.flatMap((settings) => settings[event])]))
  ) as unknown as HookSettings

const matchers = new Map<string, RegExp>()

/** The anchored expression of a matcher; a matcher that is no expression fails with `HookConfigError`. */
const compileMatcher = (matcher: string, origin: string): RegExp => {
  let compiled = matchers.get(matcher)
  if (compiled === undefined) {
    try {
      compiled = new RegExp(`^(?:${matcher})$`)
    } catch (e) {
      throw new HookConfigError({
        path: origin,
        reason: `matcher ${JSON.stringify(matcher)} is not a regular expression (${String(e)})`
      })
    }
    matchers.set(matcher, compiled)
  }
  return compiled
}

/**
 * Whether a group's matcher selects `subject` (a tool name, a session start source, a trigger).
 *
 * @since 0.1.0
 * @category predicates
 */
export const matches = (matcher: string | undefined, subject: string | undefined): boolean =>
  matcher === undefined || matcher === "" || matcher === "*" ||
  (subject !== undefined && compileMatcher(matcher, "").test(subject))

/**
 * The commands of `event` whose matcher selects `subject`, in configuration order; a command named
 * by several groups runs once.
 *
 * @since 0.1.0
 * @category combinators
 */
export const commandsFor = (settings: HookSettings, event: HookEvent, subject?: string): ReadonlyArray<HookCommand> => {
  const seen = new Set<string>()
  const out: Array<HookCommand> = []
  for (const group of settings[event]) {
    if (!matches(group.matcher, subject)) continue
    for (const hook of group.hooks) {
      const key = `${hook.command}\u0000${hook.if?.text ?? ""}`
      if (seen.has(key)) continue
      seen.add(key)
      out.push(hook)
    }
  }
  return out
}

/**
 * Where settings are read from, in order: with `claude`, `~/.claude/settings.json`,
 * `.claude/settings.json` and `.claude/settings.local.json`; always `.tiller/settings.json`.
 *
 * @since 0.1.0
 * @category constructors
 */
export const settingsFiles = (
  options: { readonly cwd: string; readonly claude: boolean; readonly home?: string }
): ReadonlyArray<string> => [
  ...(options.claude
    ? [
      path.join(options.home ?? os.homedir(), ".claude", "settings.json"),
      path.join(options.cwd, ".claude", "settings.json"),
      path.join(options.cwd, ".claude", "settings.local.json")
    ]
    : []),
  path.join(options.cwd, ".tiller", "settings.json")
]

/**
 * The merged settings of some files and the warnings about them.
 *
 * @since 0.1.0
 * @category models
 */
export interface LoadedSettings {
  readonly settings: HookSettings
  /** A skipped file (unreadable or malformed) or an ignored field, one line each. */
  readonly warnings: ReadonlyArray<string>
}

/**
 * Reads and merges the hook settings of `files`. A missing file has no hooks; one that cannot be
 * read or is malformed is skipped, as Claude Code skips it, with a warning naming it.
 *
 * @since 0.1.0
 * @category constructors
 */
export const loadSettings = (files: ReadonlyArray<string>): Effect.Effect<LoadedSettings> =>
  Effect.map(
    Effect.forEach(files, (file) =>
      Effect.promise(async (): Promise<LoadedSettings> => {
        const warnings: Array<string> = []
        const skipped = (reason: string): LoadedSettings => ({
          settings: emptySettings,
          warnings: [`${file} ${reason}; its hooks are skipped`]
        })
        let text: string
        try {
          text = await fs.readFile(file, "utf8")
        } catch (e) {
          if ((e as NodeJS.ErrnoException).code === "ENOENT") return { settings: emptySettings, warnings }
          return skipped(`cannot be read (${(e as Error).message})`)
        }
        let document: unknown
        try {
          document = JSON.parse(text)
        } catch (e) {
          return skipped(`is not valid JSON (${(e as Error).message})`)
        }
        try {
          return { settings: parseSettings(document, file, warnings), warnings }
        } catch (e) {
          return skipped(`is malformed (${e instanceof HookConfigError ? e.reason : String(e)})`)
        }
      })),
    (all) => ({ settings: mergeSettings(all.map((a) => a.settings)), warnings: all.flatMap((a) => a.warnings) })
  )
