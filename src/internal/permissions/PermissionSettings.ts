/**
 * The `permissions` of Claude Code settings documents: `{permissions: {allow: [...], ask: [...],
 * deny: [...], defaultMode}}`, read from the same files as the hooks and merged in file order.
 * `defaultMode: "bypassPermissions"` in a file is not honoured: bypassing takes an explicit flag.
 *
 * @since 0.1.0
 */
import { Effect, Either } from "effect"
import * as fs from "node:fs/promises"
import { PermissionConfigError } from "../../domain/Errors.js"
import type { PermissionBehavior, PermissionMode, PermissionRule } from "./Rules.js"
import { parseRule, PERMISSION_MODES } from "./Rules.js"

/**
 * The permission settings of one or more documents.
 *
 * @since 0.1.0
 * @category models
 */
export interface PermissionSettings {
  readonly rules: ReadonlyArray<PermissionRule>
  /** The last `defaultMode` a document set (never `bypassPermissions`). */
  readonly defaultMode?: PermissionMode
  /** What was ignored, in words (a `bypassPermissions` default). */
  readonly warnings: ReadonlyArray<string>
}

const isRecord = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value)

/**
 * The permission rules given as `behavior` on the command line or inline, each parsed; a rule that
 * does not parse fails with `PermissionConfigError` naming `origin`.
 *
 * @since 0.1.0
 * @category constructors
 */
export const parseRules = (
  texts: ReadonlyArray<string>,
  behavior: PermissionBehavior,
  origin: string,
  root: string
): Either.Either<ReadonlyArray<PermissionRule>, PermissionConfigError> => {
  const rules: Array<PermissionRule> = []
  for (const text of texts) {
    const parsed = parseRule(text, behavior, origin, root)
    if (Either.isLeft(parsed)) return Either.left(new PermissionConfigError({ path: origin, reason: parsed.left }))
    rules.push(parsed.right)
  }
  return Either.right(rules)
}

/**
 * The permission settings of one parsed document whose `/x` patterns are relative to `root`.
 *
 * @since 0.1.0
 * @category constructors
 */
export const parsePermissions = (
  document: unknown,
  origin: string,
  root: string
): Either.Either<PermissionSettings, PermissionConfigError> => {
  const fail = (reason: string) => Either.left(new PermissionConfigError({ path: origin, reason }))
  if (!isRecord(document)) return fail("expected a JSON object")
  const permissions = document["permissions"]
  if (permissions === undefined) return Either.right({ rules: [], warnings: [] })
  if (!isRecord(permissions)) return fail("`permissions` must be an object with allow, ask and deny lists")
  const rules: Array<PermissionRule> = []
  for (const behavior of ["deny", "ask", "allow"] as const) {
    const list = permissions[behavior]
    if (list === undefined) continue
    if (!Array.isArray(list) || list.some((entry) => typeof entry !== "string")) {
      return fail(`permissions.${behavior} must be a list of rules (strings)`)
    }
    const parsed = parseRules(list as ReadonlyArray<string>, behavior, origin, root)
    if (Either.isLeft(parsed)) return fail(`permissions.${behavior}: ${parsed.left.reason}`)
    rules.push(...parsed.right)
  }
  const mode = permissions["defaultMode"]
  if (mode === undefined) return Either.right({ rules, warnings: [] })
  if (typeof mode !== "string" || !(PERMISSION_MODES as ReadonlyArray<string>).includes(mode)) {
    return fail(`permissions.defaultMode must be one of ${PERMISSION_MODES.join(", ")}`)
  }
  if (mode === "bypassPermissions") {
    return Either.right({
      rules,
      warnings: [
        `${origin}: defaultMode bypassPermissions is ignored; bypassing permissions takes --permission-mode bypassPermissions or --dangerously-skip-permissions`
      ]
    })
  }
  return Either.right({ rules, defaultMode: mode as PermissionMode, warnings: [] })
}

/**
 * The settings of several documents together: rules in document order, the last default mode.
 *
 * @since 0.1.0
 * @category combinators
 */
export const mergePermissions = (all: ReadonlyArray<PermissionSettings>): PermissionSettings => {
  const defaultMode = all.reduce<PermissionMode | undefined>(
    (mode, settings) => settings.defaultMode ?? mode,
    undefined
  )
  return {
    rules: all.flatMap((settings) => settings.rules),
    warnings: all.flatMap((settings) => settings.warnings),
    ...(defaultMode === undefined ? {} : { defaultMode })
  }
}

/**
 * Reads the permission settings of `files` (a missing file has none). A file that cannot be read or
 * is not JSON is skipped, as Claude Code skips it, with a warning naming it (the hooks of the same
 * file are skipped too); a file whose `permissions` are malformed fails with `PermissionConfigError`
 * naming it: a rule the user wrote is never dropped on a typo.
 *
 * @since 0.1.0
 * @category constructors
 */
export const loadPermissions = (
  files: ReadonlyArray<string>,
  root: string
): Effect.Effect<PermissionSettings, PermissionConfigError> =>
  Effect.map(
    Effect.forEach(files, (file) =>
      Effect.flatMap(
        Effect.promise(async (): Promise<string | { readonly skipped: string } | undefined> => {
          try {
            return await fs.readFile(file, "utf8")
          } catch (e) {
            if ((e as NodeJS.ErrnoException).code === "ENOENT") return undefined
            return { skipped: `cannot be read (${(e as Error).message})` }
          }
        }),
        (text) => {
          const skip = (reason: string) =>
            Effect.succeed<PermissionSettings>({
              rules: [],
              warnings: [`${file} ${reason}; its permission rules are skipped`]
            })
          if (text === undefined) return Effect.succeed<PermissionSettings>({ rules: [], warnings: [] })
          if (typeof text !== "string") return skip(text.skipped)
          const document = Either.try({ try: () => JSON.parse(text) as unknown, catch: (e) => (e as Error).message })
          return Either.isLeft(document)
            ? skip(`is not valid JSON (${document.left})`)
            : parsePermissions(document.right, file, root)
        }
      )),
    mergePermissions
  )
