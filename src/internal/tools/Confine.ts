/**
 * The file tools' confinement: every path a tool touches lies inside the working directory or one
 * of the added directories (`--add-dir`). A path is checked twice: as written (resolved against the
 * working directory) and as its real path, so a symbolic link inside a root that points outside it
 * is refused. This room (`internal/tools/`) holds the machinery of the coding tools: confinement,
 * safe file reads, the per-session read record, capped child processes, and one module per tool.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import * as NodeFs from "node:fs/promises"
import * as path from "node:path"
import type { ToolOutput } from "../../domain/Tool.js"
import { describeFileError } from "./FileErrors.js"

/**
 * An error tool output with `content`.
 *
 * @since 0.1.0
 * @category constructors
 */
export const refuse = (content: string): ToolOutput => ({ content, isError: true })

/**
 * The roots of one set of tools and the checks against them.
 *
 * @since 0.1.0
 * @category models
 */
export interface Confinement {
  /** The real path of the working directory: relative paths are resolved against it. */
  readonly cwd: string
  /** The real paths of the working directory and the added directories. */
  readonly roots: ReadonlyArray<string>
  /** `requested` made absolute (against the working directory), not yet checked. */
  readonly resolve: (requested: string) => string
  /** Whether an absolute path lies inside one of the roots (lexically). */
  readonly inside: (absolute: string) => boolean
  /** The real path of an existing `requested`, inside a root, or the refusal. */
  readonly existing: (requested: string) => Effect.Effect<string, ToolOutput>
  /**
   * The path to create or replace for `requested`: the real path of its nearest existing directory
   * is inside a root (the directories below it are the caller's to create), and the name itself,
   * when it exists, is not a symbolic link that leaves the roots.
   */
  readonly writable: (
    requested: string
  ) => Effect.Effect<{ readonly target: string; readonly exists: boolean }, ToolOutput>
}

const isInside = (root: string, candidate: string): boolean => {
  const relative = path.relative(root, candidate)
  return relative === "" || (!path.isAbsolute(relative) && relative !== ".." && !relative.startsWith(`..${path.sep}`))
}

const realOrResolved = (dir: string): Effect.Effect<string> =>
  Effect.orElseSucceed(Effect.tryPromise(() => NodeFs.realpath(dir)), () => path.resolve(dir))

/**
 * The confinement to `cwd` and `addDirs` (each resolved to its real path).
 *
 * @since 0.1.0
 * @category constructors
 */
export const makeConfinement = (cwd: string, addDirs: ReadonlyArray<string> = []): Effect.Effect<Confinement> =>
  Effect.gen(function*() {
    const realCwd = yield* realOrResolved(cwd)
    const added = yield* Effect.forEach(addDirs, (dir) => realOrResolved(path.resolve(realCwd, dir)))
    const roots = [realCwd, ...added.filter((dir, i) => dir !== realCwd && added.indexOf(dir) === i)]
    const inside = (absolute: string) => roots.some((root) => isInside(root, absolute))
    const resolve = (requested: string) => path.resolve(realCwd, requested)
    const where = roots.length === 1
      ? `the working directory (${realCwd})`
      : `the working directory (${realCwd}) and the added directories (${roots.slice(1).join(", ")})`
    const outside = (requested: string) =>
      refuse(
        `refused: ${requested} is outside ${where}; only paths inside ${roots.length === 1 ? "it" : "them"} can be used`
      )

    const existing = (requested: string): Effect.Effect<string, ToolOutput> =>
      Effect.gen(function*() {
        const resolved = resolve(requested)
        if (!inside(resolved)) return yield* Effect.fail(outside(requested))
        const real = yield* Effect.tryPromise({
          try: () => NodeFs.realpath(resolved),
          catch: (error) => refuse(`cannot open ${requested}: ${describeFileError(error)}`)
        })
        // A symbolic link inside a root may point outside it.
        if (!inside(real)) return yield* Effect.fail(outside(requested))
        return real
      })

    const writable = (requested: string) =>
      Effect.gen(function*() {
        const resolved = resolve(requested)
        if (!inside(resolved)) return yield* Effect.fail(outside(requested))
        const link = yield* Effect.tryPromise(() => NodeFs.lstat(resolved)).pipe(Effect.option)
        if (link._tag === "Some") {
          // The name exists: write where it really is, if that is inside.
          const real = yield* existing(requested)
          return { target: real, exists: true }
        }
        // The nearest existing ancestor decides where the new file really goes.
        let ancestor = path.dirname(resolved)
        const missing: Array<string> = [path.basename(resolved)]
        while (true) {
          const found = yield* Effect.tryPromise(() => NodeFs.realpath(ancestor)).pipe(Effect.option)
          if (found._tag === "Some") {
            if (!inside(found.value)) return yield* Effect.fail(outside(requested))
            return { target: path.join(found.value, ...missing), exists: false }
          }
          const parent = path.dirname(ancestor)
          if (parent === ancestor) {
            return yield* Effect.fail(refuse(`cannot create ${requested}: no existing directory above it`))
          }
          missing.unshift(path.basename(ancestor))
          ancestor = parent
        }
      })

    return { cwd: realCwd, roots, resolve, inside, existing, writable }
  })
