/**
 * The coding tools, named and shaped as Claude Code names them so models and hook scripts know
 * them: `Read`, `Write`, `Edit`, `Glob`, `Grep` and `Bash`. Their paths are confined to the working
 * directory and the added directories (a symbolic link leaving them is refused, and so is a file
 * with several hard links); `Edit`, and `Write` over an existing file, need a `Read` of the file in
 * the same session (with `history`, also a read a restarted process finds in the session's log);
 * `Bash` runs in its own process group without provider keys in its environment, with the
 * variables a `SessionStart` hook wrote to `CLAUDE_ENV_FILE`. Each result's `meta.toolResponse`
 * holds the small fields of Claude Code's response shape, which the hook bridge completes for
 * hooks. The reading tools run in parallel; `Write`, `Edit` and `Bash` run alone.
 *
 * ```ts
 * const tools = CodingTools.layer({ cwd: "/work/project", addDirs: ["/work/shared"] })
 * Agent.layer(...).pipe(Layer.provide(Layer.merge(model, tools)))
 * ```
 *
 * @since 0.1.0
 */
import { Effect, Layer } from "effect"
import * as path from "node:path"
import type { ToolDefinition } from "../domain/Tool.js"
import { defaultEnvDir } from "../internal/hooks/EnvFile.js"
import { makeBash, scrubEnvironment } from "../internal/tools/BashTool.js"
import { makeConfinement } from "../internal/tools/Confine.js"
import { makeEdit } from "../internal/tools/EditTool.js"
import { makeGlob } from "../internal/tools/GlobTool.js"
import { makeGrep } from "../internal/tools/GrepTool.js"
import type { ReadHistory } from "../internal/tools/ReadRecord.js"
import { makeReadRecord } from "../internal/tools/ReadRecord.js"
import { makeRead } from "../internal/tools/ReadTool.js"
import { makeWrite } from "../internal/tools/WriteTool.js"
import type { ToolsOptions } from "../services/Tools.js"
import { Tools } from "../services/Tools.js"

/**
 * Options of the coding tools.
 *
 * @since 0.1.0
 * @category models
 */
export interface CodingToolsOptions {
  /** The working directory: relative paths resolve against it and `Bash` runs in it (default: the process's). */
  readonly cwd?: string
  /** Further directories the tools may use (`--add-dir`), relative to `cwd` or absolute. */
  readonly addDirs?: ReadonlyArray<string>
  /** The environment of `Bash` and the searches, before provider keys are removed (default: the process's). */
  readonly env?: Readonly<Record<string, string | undefined>>
  /** The ripgrep executable behind `Grep` and `Glob` (default `rg` on the PATH). */
  readonly ripgrep?: string
  /** A session's logged events, so a reopened session remembers what it read before (default: memory only). */
  readonly history?: ReadHistory
  /** The directory of the sessions' `CLAUDE_ENV_FILE`s (default `~/.tiller/session-env/<hash of cwd>`, as the hook bridge's). */
  readonly envDir?: string
}

/**
 * The names of the coding tools.
 *
 * @since 0.1.0
 * @category constants
 */
export const NAMES: ReadonlyArray<string> = ["Bash", "Edit", "Glob", "Grep", "Read", "Write"]

/**
 * The coding tools over one workspace (they share the record of what each session read).
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (options: CodingToolsOptions = {}): Effect.Effect<ReadonlyArray<ToolDefinition<any>>> =>
  Effect.gen(function*() {
    const confinement = yield* makeConfinement(options.cwd ?? process.cwd(), options.addDirs ?? [])
    const workspace = {
      confinement,
      record: makeReadRecord(options.history),
      env: scrubEnvironment(options.env ?? process.env),
      ripgrep: options.ripgrep ?? "rg",
      envDir: options.envDir ?? defaultEnvDir(path.resolve(options.cwd ?? process.cwd()))
    }
    return [
      makeBash(workspace),
      makeEdit(workspace),
      makeGlob(workspace),
      makeGrep(workspace),
      makeRead(workspace),
      makeWrite(workspace)
    ]
  })

/**
 * The coding tools.
 *
 * @since 0.1.0
 * @category layers
 */
export const CodingTools = {
  /** The tools as definitions, to register beside others (see {@link make}). */
  make,
  /**
   * A `Tools` registry holding the coding tools and `extra` tools (registered after them, so an
   * extra tool of the same name shadows one of them).
   *
   * @since 0.1.0
   */
  layer: (
    options:
      & CodingToolsOptions
      & { readonly extra?: ReadonlyArray<ToolDefinition<any>> }
      & Pick<ToolsOptions, "maxParallelToolCalls"> = {}
  ): Layer.Layer<Tools> =>
    Layer.unwrapEffect(Effect.map(make(options), (tools) =>
      Tools.layer({
        tools: [...tools, ...(options.extra ?? [])],
        ...(options.maxParallelToolCalls === undefined ? {} : { maxParallelToolCalls: options.maxParallelToolCalls })
      }))),
  /** The names of the coding tools. */
  NAMES
}
