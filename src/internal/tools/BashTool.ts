/**
 * `Bash`: runs `command` with `bash -c` in the working directory, in a process group of its own,
 * killed as a whole on cancel or after `timeout` milliseconds (default {@link DEFAULT_TIMEOUT_MS},
 * at most {@link MAX_TIMEOUT_MS}). Its output (stdout and stderr together) is kept up to
 * {@link MAX_OUTPUT_CHARS} characters with a note of what was cut, however much it prints. Its
 * environment is the tools' own, without credentials, provider keys and tiller's settings (see
 * {@link scrubEnvironment}).
 *
 * @since 0.1.0
 */
import { Duration, Effect, Schema } from "effect"
import * as NodeFs from "node:fs/promises"
import type { ToolDefinition } from "../../domain/Tool.js"
import { scrubbedEnvironment } from "../hooks/Command.js"
import { sessionEnvFile } from "../hooks/EnvFile.js"
import { refuse } from "./Confine.js"
import { runProcess } from "./Process.js"
import type { Workspace } from "./Workspace.js"
import { defineTool } from "./Workspace.js"

/**
 * The timeout of a command that names none, in milliseconds.
 *
 * @since 0.1.0
 * @category constants
 */
export const DEFAULT_TIMEOUT_MS = 120_000

/**
 * The longest timeout a command may ask for, in milliseconds.
 *
 * @since 0.1.0
 * @category constants
 */
export const MAX_TIMEOUT_MS = 600_000

/**
 * The most characters of a command's output kept.
 *
 * @since 0.1.0
 * @category constants
 */
export const MAX_OUTPUT_CHARS = 30_000

/**
 * `env` without the variables a command must not see: credentials and provider keys (the rule the
 * hook bridge applies to hooks: `*_API_KEY`, `*_TOKEN`, `*_SECRET`, `OPENAI_*`, `ANTHROPIC_*`, ...)
 * and tiller's own settings (`TILLER_*`).
 *
 * @since 0.1.0
 * @category constructors
 */
export const scrubEnvironment = (env: NodeJS.ProcessEnv): NodeJS.ProcessEnv =>
  Object.fromEntries(Object.entries(scrubbedEnvironment(env, {})).filter(([name]) => !/^TILLER_/i.test(name)))

/** `text` as one single-quoted shell word. */
const shellQuote = (text: string): string => `'${text.replace(/'/g, "'\\''")}'`

const Parameters = Schema.Struct({
  command: Schema.String.annotations({ description: "The command to run (with bash -c)" }),
  timeout: Schema.optional(
    Schema.Number.annotations({
      description: `Optional timeout in milliseconds (default ${DEFAULT_TIMEOUT_MS}, at most ${MAX_TIMEOUT_MS})`
    })
  ),
  description: Schema.optional(Schema.String.annotations({ description: "What the command does, in 5-10 words" }))
})

/**
 * The `Bash` tool over `workspace`.
 *
 * @since 0.1.0
 * @category constructors
 */
export const makeBash = (workspace: Workspace): ToolDefinition<typeof Parameters> =>
  defineTool({
    name: "Bash",
    description: "Runs a bash command in the working directory and returns its output (stdout and stderr together) " +
      `and exit code. timeout is in milliseconds (default ${DEFAULT_TIMEOUT_MS}, at most ${MAX_TIMEOUT_MS}); a command ` +
      `still running then is killed with everything it started. Output beyond ${MAX_OUTPUT_CHARS} characters is cut ` +
      "in the middle. Each call starts a new shell: cd and variables do not carry over. Prefer Read, Edit, Write, " +
      "Glob and Grep over cat, sed, echo >, find and grep.",
    parameters: Parameters,
    mode: "exclusive",
    execute: ({ command, timeout }, ctx) =>
      Effect.gen(function*() {
        if (command.trim() === "") return refuse("refused: the command is empty")
        if (timeout !== undefined && (!Number.isFinite(timeout) || timeout <= 0)) {
          return refuse(
            `refused: timeout must be a positive number of milliseconds (at most ${MAX_TIMEOUT_MS}), got ${timeout}`
          )
        }
        const limit = Math.min(Math.round(timeout ?? DEFAULT_TIMEOUT_MS), MAX_TIMEOUT_MS)
        // The variables a SessionStart hook wrote to CLAUDE_ENV_FILE apply to every command of the session.
        const envFile = workspace.envDir === undefined ? undefined : sessionEnvFile(workspace.envDir, ctx.sessionId)
        const sourced = envFile !== undefined && (yield* Effect.promise(() =>
          NodeFs.stat(envFile).then((stats) => stats.isFile() && stats.size > 0, () => false)
        ))
        const result = yield* runProcess({
          file: "bash",
          args: ["-c", sourced ? `. ${shellQuote(envFile)} >/dev/null 2>&1\n${command}` : command],
          cwd: workspace.confinement.cwd,
          env: workspace.env,
          timeout: Duration.millis(limit),
          maxChars: MAX_OUTPUT_CHARS
        })
        if (result.spawnError !== undefined) return refuse(`cannot run bash: ${result.spawnError}`)
        const output = result.output.replace(/\n$/, "")
        const status = result.timedOut
          ? `[killed after the timeout of ${limit} ms, with every process it started]`
          : result.code === 0
          ? undefined
          : result.code === null
          ? `[ended by signal ${result.signal}]`
          : `[exit code ${result.code}]`
        const text = [output, ...(status === undefined ? [] : [status])].filter((part) => part !== "").join("\n")
        return {
          content: text === "" ? "(no output)" : text,
          isError: status !== undefined,
          // Claude Code's Bash response (stdout is the first outputChars of the text: stderr is merged into it).
          meta: {
            toolResponse: { stderr: "", interrupted: result.timedOut, isImage: false },
            outputChars: output.length
          }
        }
      })
  })
