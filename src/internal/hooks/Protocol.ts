/**
 * The Claude Code hook protocol's answer: how a finished command's exit code, stdout and stderr
 * read as a decision (exit 0 + optional JSON; exit 2 blocks with stderr as the reason; any other
 * code is a non-blocking error).
 *
 * @since 0.1.0
 */
import { Either } from "effect"
import type { CommandResult } from "./Command.js"
import type { HookEvent } from "./Settings.js"

/**
 * What one hook command decided. Every field is optional: an empty answer lets the action go on.
 *
 * @since 0.1.0
 * @category models
 */
export interface HookAnswer {
  /** Block the action (`decision: "block"`, exit code 2 with stderr), with the reason. */
  readonly block?: string
  /** `continue: false`: stop the turn, with `stopReason`. */
  readonly stop?: string
  /** `hookSpecificOutput.permissionDecision` (or the older `decision: "approve" | "block"` of PreToolUse). */
  readonly permission?: "allow" | "deny" | "ask"
  readonly permissionReason?: string
  /** `hookSpecificOutput.updatedInput`: the tool's new arguments. */
  readonly updatedInput?: { readonly [k: string]: unknown }
  /** `hookSpecificOutput.additionalContext`, or plain stdout of UserPromptSubmit and SessionStart. */
  readonly additionalContext?: string
  readonly systemMessage?: string
}

/**
 * Why an answer could not be read (a non-blocking error).
 *
 * @since 0.1.0
 * @category models
 */
export interface AnswerProblem {
  readonly code: "EXIT_CODE" | "MALFORMED_OUTPUT"
  readonly detail: string
}

const isRecord = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value)

/** Events whose plain (non-JSON) stdout on exit 0 is context for the model, as in Claude Code (and PostCompact, which runs where its SessionStart `compact` does). */
const PLAIN_STDOUT_IS_CONTEXT: ReadonlySet<HookEvent> = new Set(["UserPromptSubmit", "SessionStart", "PostCompact"])

/**
 * Reads a finished command's answer for `event`.
 *
 * @since 0.1.0
 * @category constructors
 */
export const readAnswer = (event: HookEvent, result: CommandResult): Either.Either<HookAnswer, AnswerProblem> => {
  if (result.exitCode === 2) {
    const reason = result.stderr.trim()
    return Either.right({ block: reason === "" ? "blocked by a hook (exit code 2)" : reason })
  }
  if (result.exitCode !== 0) {
    const stderr = result.stderr.trim()
    return Either.left({
      code: "EXIT_CODE",
      detail: `exited with code ${result.exitCode}${stderr === "" ? "" : `: ${stderr.slice(0, 2000)}`}`
    })
  }
  const stdout = result.stdout.trim()
  if (stdout === "") return Either.right({})
  if (!stdout.startsWith("{")) {
    return Either.right(PLAIN_STDOUT_IS_CONTEXT.has(event) ? { additionalContext: stdout } : {})
  }
  let document: unknown
  try {
    document = JSON.parse(stdout)
  } catch (e) {
    return Either.left({ code: "MALFORMED_OUTPUT", detail: `stdout is not valid JSON (${(e as Error).message})` })
  }
  return readDocument(event, document)
}

const readDocument = (event: HookEvent, document: unknown): Either.Either<HookAnswer, AnswerProblem> => {
  const problems: Array<string> = []
  const field = <T>(
    object: Record<string, unknown>,
    name: string,
    check: (v: unknown) => v is T,
    expected: string,
    at = ""
  ): T | undefined => {
    const value = object[name]
    if (value === undefined || value === null) return undefined
    if (!check(value)) {
      problems.push(`${at}${name} must be ${expected}, found ${JSON.stringify(value)}`)
      return undefined
    }
    return value
  }
  const isString = (v: unknown): v is string => typeof v === "string"
  const isBoolean = (v: unknown): v is boolean => typeof v === "boolean"
  if (!isRecord(document)) return Either.left({ code: "MALFORMED_OUTPUT", detail: "stdout must be a JSON object" })
  const decision = field(
    document,
    "decision",
    (v): v is "block" | "approve" => v === "block" || v === "approve",
    `"block" or "approve"`
  )
  const reason = field(document, "reason", isString, "a string")
  const proceed = field(document, "continue", isBoolean, "a boolean")
  const stopReason = field(document, "stopReason", isString, "a string")
  const systemMessage = field(document, "systemMessage", isString, "a string")
  field(document, "suppressOutput", isBoolean, "a boolean")
  const specific = field(document, "hookSpecificOutput", isRecord, "an object")
  let additionalContext: string | undefined
  let permission: HookAnswer["permission"]
  let permissionReason: string | undefined
  let updatedInput: Record<string, unknown> | undefined
  if (specific !== undefined) {
    const at = "hookSpecificOutput."
    const named = field(specific, "hookEventName", isString, "a string", at)
    if (named !== undefined && named !== event) {
      problems.push(`${at}hookEventName is ${JSON.stringify(named)} in a ${event} hook`)
    }
    additionalContext = field(specific, "additionalContext", isString, "a string", at)
    permission = field(
      specific,
      "permissionDecision",
      (v): v is "allow" | "deny" | "ask" => v === "allow" || v === "deny" || v === "ask",
      `"allow", "deny" or "ask"`,
      at
    )
    permissionReason = field(specific, "permissionDecisionReason", isString, "a string", at)
    updatedInput = field(specific, "updatedInput", isRecord, "an object", at)
    // A Stop or PostToolUse hook may also put its decision here.
    if (decision === undefined && specific["decision"] === "block") {
      problems.push(`${at}decision belongs at the top level`)
    }
  }
  if (problems.length > 0) return Either.left({ code: "MALFORMED_OUTPUT", detail: problems.join("; ") })
  // The older PreToolUse form: decision "approve" | "block".
  if (event === "PreToolUse" && permission === undefined && decision !== undefined) {
    permission = decision === "approve" ? "allow" : "deny"
    permissionReason = reason
  }
  return Either.right({
    ...(decision === "block" && event !== "PreToolUse" ? { block: reason ?? `blocked by a ${event} hook` } : {}),
    ...(proceed === false ? { stop: stopReason ?? `stopped by a ${event} hook` } : {}),
    ...(permission === undefined ? {} : { permission }),
    ...(permissionReason === undefined ? {} : { permissionReason }),
    ...(updatedInput === undefined ? {} : { updatedInput }),
    ...(additionalContext === undefined || additionalContext === "" ? {} : { additionalContext }),
    ...(systemMessage === undefined ? {} : { systemMessage })
  })
}
