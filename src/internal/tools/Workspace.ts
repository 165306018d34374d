/**
 * What the coding tools share: the confinement of their paths, the record of what each session
 * read, and their limits.
 *
 * @since 0.1.0
 */
import type { Schema } from "effect"
import type { ToolDefinition } from "../../domain/Tool.js"
import type { Confinement } from "./Confine.js"
import type { ReadRecord } from "./ReadRecord.js"

/**
 * The shared state and settings of one set of coding tools.
 *
 * @since 0.1.0
 * @category models
 */
export interface Workspace {
  readonly confinement: Confinement
  readonly record: ReadRecord
  /** The environment `Bash` and the search tools run with (provider keys already removed). */
  readonly env: NodeJS.ProcessEnv
  /** The ripgrep executable behind `Grep` and `Glob`. */
  readonly ripgrep: string
  /** Where each session's `CLAUDE_ENV_FILE` is, whose variables `Bash` applies (absent: none is). */
  readonly envDir?: string
}

/**
 * A frozen tool definition (the `Tool.make` of this room, which cannot import the services).
 *
 * @since 0.1.0
 * @category constructors
 */
export const defineTool = <P extends Schema.Schema.AnyNoContext>(tool: ToolDefinition<P>): ToolDefinition<P> =>
  Object.freeze(tool)
