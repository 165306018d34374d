/**
 * Permission rules as Claude Code users write them, and their evaluation: a pure function from the
 * rules, the mode and one tool call to an outcome (`allow`, `ask` or `deny`, with the rule or mode
 * that decided). Deny rules are checked first, then the mode's read-only restriction (`plan`), then
 * ask rules, then allow rules, then the mode's default. This room (`internal/permissions/`) holds
 * the rules and the settings they are read from; `layers/Permissions.ts` applies them.
 *
 * Rule syntax: `Tool` or `Tool(*)` (every call of the tool); `Bash(npm test:*)` (a command that
 * starts with `npm test`), `Bash(git status)` (exactly that command), `Bash(git * main)` (`*` any
 * text); `Read(PATTERN)`, `Edit(PATTERN)` with gitignore-style patterns: `//abs/path` from the
 * filesystem root, `~/x` from the home directory, `/x` from the project root, `./x` or `x` from the
 * working directory (a pattern without a slash, like `*.env`, matches at any depth). `Edit` rules
 * cover every tool that edits files (`Edit`, `Write`, `MultiEdit`, `NotebookEdit`), `Read` rules
 * every tool that reads them (`Read`, `Glob`, `Grep`, which are checked on the path they search).
 *
 * @since 0.1.0
 */
import { Either } from "effect"
import ignore from "ignore"
import * as path from "node:path"
import { splitCommand } from "./BashCommand.js"

/**
 * The permission modes.
 *
 * @since 0.1.0
 * @category constants
 */
export const PERMISSION_MODES = ["default", "acceptEdits", "plan", "bypassPermissions"] as const

/**
 * A permission mode: `default` (reading runs, editing and commands ask), `acceptEdits` (edits run,
 * commands ask), `plan` (read-only: edits and commands are denied), `bypassPermissions` (everything
 * runs except what a deny rule names).
 *
 * @since 0.1.0
 * @category models
 */
export type PermissionMode = (typeof PERMISSION_MODES)[number]

/**
 * What a rule or a mode says about a call.
 *
 * @since 0.1.0
 * @category models
 */
export type PermissionBehavior = "allow" | "ask" | "deny"

/**
 * One parsed rule.
 *
 * @since 0.1.0
 * @category models
 */
export interface PermissionRule {
  readonly behavior: PermissionBehavior
  /** The rule as written, e.g. `Bash(npm test:*)`. */
  readonly text: string
  readonly tool: string
  /** The text in parentheses; absent for a bare tool name or `(*)`. */
  readonly content?: string
  /** Where the rule was written (a settings file, the command line). */
  readonly origin: string
  /** The project root a `/x` pattern is relative to. */
  readonly root: string
}

/**
 * The directories path patterns are resolved against.
 *
 * @since 0.1.0
 * @category models
 */
export interface PermissionPlaces {
  readonly cwd: string
  readonly home: string
}

/**
 * One tool call to decide: its name, its input, and for file tools the absolute paths it touches
 * (as written and, when it exists, the real path).
 *
 * @since 0.1.0
 * @category models
 */
export interface PermissionRequest {
  readonly tool: string
  readonly input: unknown
  readonly paths?: ReadonlyArray<string>
}

/**
 * The decision for a call: a value, so that an `ask` can be answered by whatever asks (a chat, an
 * approval store) or refused where no one can answer.
 *
 * @since 0.1.0
 * @category models
 */
export interface PermissionOutcome {
  readonly behavior: PermissionBehavior
  /** The rule that decided, if a rule did (else the mode did). */
  readonly rule?: PermissionRule
  /** Why, in words: names the rule or the mode. */
  readonly reason: string
}

/**
 * The tools whose calls edit files (`Edit` rules cover them all).
 *
 * @since 0.1.0
 * @category constants
 */
export const EDIT_TOOLS: ReadonlyArray<string> = ["Edit", "Write", "MultiEdit", "NotebookEdit"]

/**
 * The tools whose calls read files (`Read` rules cover them all).
 *
 * @since 0.1.0
 * @category constants
 */
export const READ_TOOLS: ReadonlyArray<string> = ["Read", "Glob", "Grep", "NotebookRead"]

const RULE = /^([A-Za-z_][\w.:-]*)(?:\((.*)\))?$/s

/**
 * Parses one rule; a rule that does not parse is `Left` with the reason.
 *
 * @since 0.1.0
 * @category constructors
 */
export const parseRule = (
  text: string,
  behavior: PermissionBehavior,
  origin: string,
  root: string
): Either.Either<PermissionRule, string> => {
  const match = RULE.exec(text.trim())
  if (match === null) {
    return Either.left(`${JSON.stringify(text)} is not a rule: write Tool or Tool(specifier), e.g. Bash(npm test:*)`)
  }
  const content = match[2]
  if (content !== undefined && content.trim() === "") {
    return Either.left(`${JSON.stringify(text)} has empty parentheses: write ${match[1]} for every call`)
  }
  const all = content === undefined || content.trim() === "*"
  return Either.right({
    behavior,
    text: text.trim(),
    tool: match[1]!,
    origin,
    root,
    ...(all ? {} : { content: content.trim() })
  })
}

const coversTool = (ruleTool: string, tool: string): boolean =>
  ruleTool === tool || (ruleTool === "Edit" && EDIT_TOOLS.includes(tool)) ||
  (ruleTool === "Read" && READ_TOOLS.includes(tool))

const isRecord = (value: unknown): value is Record<string, unknown> => typeof value === "object" && value !== null

/** The escaped regular expression of a Bash rule with `*` wildcards. */
const wildcard = (pattern: string): RegExp =>
  new RegExp(`^${pattern.split("*").map((part) => part.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")).join("[\\s\\S]*")}$`)

/** Whether one simple command matches a Bash rule's content. */
const commandMatches = (content: string, command: string): boolean => {
  if (content.endsWith(":*")) {
    const prefix = content.slice(0, -2).trim()
    return command === prefix || command.startsWith(`${prefix} `) || command.startsWith(`${prefix}\t`)
  }
  return content.includes("*") ? wildcard(content).test(command) : command === content
}

/** A gitignore-style pattern and the directory it is relative to. */
const anchorOf = (
  content: string,
  rule: PermissionRule,
  places: PermissionPlaces
): { readonly base: string; readonly pattern: string } => {
  if (content.startsWith("//")) return { base: "/", pattern: content.slice(1) }
  if (content.startsWith("~/")) return { base: places.home, pattern: content.slice(1) }
  if (content.startsWith("/")) return { base: rule.root, pattern: content }
  if (content.startsWith("./")) return { base: places.cwd, pattern: content.slice(1) }
  return { base: places.cwd, pattern: content }
}

/** Whether the absolute `file` matches a path rule's content. */
const pathMatches = (content: string, rule: PermissionRule, places: PermissionPlaces, file: string): boolean => {
  const { base, pattern } = anchorOf(content, rule, places)
  const relative = path.relative(base, file)
  if (relative === "" || relative === ".." || relative.startsWith(`..${path.sep}`) || path.isAbsolute(relative)) {
    return false
  }
  return ignore().add(pattern).ignores(relative)
}

/**
 * Whether `rule` covers `request`. For a Bash rule and a compound command (`a && b`, `a | b`,
 * `a; b`), `part` says how: a deny or ask rule covers it when it covers any part; an allow rule is
 * checked part by part by the caller.
 */
const ruleCovers = (
  rule: PermissionRule,
  request: PermissionRequest,
  places: PermissionPlaces,
  parts: ReadonlyArray<string>
): boolean => {
  if (!coversTool(rule.tool, request.tool)) return false
  const content = rule.content
  if (content === undefined) return true
  if (request.tool === "Bash") {
    const command = isRecord(request.input) && typeof request.input.command === "string"
      ? request.input.command.trim()
      : undefined
    if (command === undefined) return false
    return commandMatches(content, command) || parts.some((part) => commandMatches(content, part))
  }
  if (EDIT_TOOLS.includes(rule.tool) || READ_TOOLS.includes(rule.tool)) {
    return (request.paths ?? []).some((file) => pathMatches(content, rule, places, file))
  }
  // Another tool's specifier: the whole input's JSON must equal it (rare; exact).
  return JSON.stringify(request.input) === content
}

/** Whether every part of a (compound) Bash command is covered by some allow rule. */
const bashAllowed = (
  rules: ReadonlyArray<PermissionRule>,
  request: PermissionRequest,
  places: PermissionPlaces
): PermissionRule | undefined => {
  const whole = rules.find((r) => r.content === undefined)
  if (whole !== undefined) return whole
  const command = isRecord(request.input) && typeof request.input.command === "string"
    ? request.input.command.trim()
    : ""
  const split = splitCommand(command)
  // Command substitution, process substitution or an unclosed quote: no allow rule can vouch for it.
  if (split === undefined) return undefined
  let first: PermissionRule | undefined
  if (split.length === 0) return undefined
  for (const part of split) {
    const rule = rules.find((r) => r.content === undefined || commandMatches(r.content, part))
    if (rule === undefined) return undefined
    first ??= rule
  }
  return first
}

/**
 * Whether `rule` covers one call, whatever its behavior (a hook's `if` condition is such a rule).
 *
 * @since 0.1.0
 * @category predicates
 */
export const covers = (rule: PermissionRule, request: PermissionRequest, places: PermissionPlaces): boolean => {
  const command = request.tool === "Bash" && isRecord(request.input) && typeof request.input.command === "string"
    ? request.input.command
    : undefined
  const parts = command === undefined ? [] : splitCommand(command, { lenient: true }) ?? []
  return ruleCovers(rule, request, places, parts)
}

const describe = (rule: PermissionRule): string =>
  `the ${rule.behavior} rule ${JSON.stringify(rule.text)} (${rule.origin})`

/**
 * Decides one call: deny rules, then `plan`'s read-only restriction, then ask rules, then allow
 * rules, then the mode's default (see {@link PermissionMode}).
 *
 * @since 0.1.0
 * @category combinators
 */
export const evaluate = (
  rules: ReadonlyArray<PermissionRule>,
  mode: PermissionMode,
  request: PermissionRequest,
  places: PermissionPlaces
): PermissionOutcome => {
  const command = request.tool === "Bash" && isRecord(request.input) && typeof request.input.command === "string"
    ? request.input.command
    : undefined
  const parts = command === undefined ? [] : splitCommand(command, { lenient: true }) ?? []
  const covering = (behavior: PermissionBehavior) =>
    rules.filter((r) => r.behavior === behavior && ruleCovers(r, request, places, parts))
  const denied = covering("deny")[0]
  if (denied !== undefined) {
    return { behavior: "deny", rule: denied, reason: `${request.tool} is denied by ${describe(denied)}` }
  }
  const edits = EDIT_TOOLS.includes(request.tool)
  const mutating = edits || request.tool === "Bash"
  if (mode === "plan" && mutating) {
    return {
      behavior: "deny",
      reason: `${request.tool} is not allowed in plan mode (read-only: no edits, no commands)`
    }
  }
  if (mode === "bypassPermissions") {
    return { behavior: "allow", reason: "permissions are bypassed (bypassPermissions mode)" }
  }
  const asked = covering("ask")[0]
  if (asked !== undefined) {
    return { behavior: "ask", rule: asked, reason: `${request.tool} needs approval by ${describe(asked)}` }
  }
  const allowRules = rules.filter((r) => r.behavior === "allow" && coversTool(r.tool, request.tool))
  const allowed = request.tool === "Bash"
    ? bashAllowed(allowRules, request, places)
    : allowRules.find((r) => ruleCovers(r, request, places, parts))
  if (allowed !== undefined) {
    return { behavior: "allow", rule: allowed, reason: `${request.tool} is allowed by ${describe(allowed)}` }
  }
  if (mode === "acceptEdits" && edits) {
    return { behavior: "allow", reason: `${request.tool} is allowed in acceptEdits mode` }
  }
  if (mutating) {
    return {
      behavior: "ask",
      reason: `${request.tool} needs approval in ${mode} mode${
        request.tool === "Bash" ? "" : " (edits run without asking in acceptEdits mode)"
      }`
    }
  }
  return { behavior: "allow", reason: `${request.tool} runs without asking in ${mode} mode` }
}
