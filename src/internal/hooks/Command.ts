/**
 * Runs one hook command: a shell command in its own process group, the event's JSON on stdin, a
 * timeout read through `Clock`, bounded output, and the whole group killed on timeout or interruption.
 *
 * @since 0.1.0
 */
import { Duration, Effect } from "effect"
import { spawn } from "node:child_process"

/**
 * What a finished command left: its exit code and its (bounded) output.
 *
 * @since 0.1.0
 * @category models
 */
export interface CommandResult {
  readonly exitCode: number
  readonly stdout: string
  readonly stderr: string
  readonly durationMs: number
}

/**
 * Why a command gave no result.
 *
 * @since 0.1.0
 * @category models
 */
export interface CommandFailure {
  readonly code: "SPAWN_FAILED" | "TIMEOUT" | "OUTPUT_TOO_LARGE"
  readonly detail: string
}

/**
 * How to run a command.
 *
 * @since 0.1.0
 * @category models
 */
export interface CommandOptions {
  readonly command: string
  readonly cwd: string
  readonly env: Readonly<Record<string, string>>
  readonly stdin: string
  readonly timeout: Duration.Duration
  /** The most bytes of stdout read; more fails the run. Stderr is cut at the same size. */
  readonly maxOutputBytes: number
}

/** Kills the process group of `pid` (the command and whatever it started), ignoring a group already gone. */
const killGroup = (pid: number | undefined): void => {
  if (pid === undefined) return
  try {
    process.kill(process.platform === "win32" ? pid : -pid, "SIGKILL")
  } catch {
    // already gone
  }
}

/** The command's run, without its timeout; interruption kills its process group. */
const spawnCommand = (options: CommandOptions): Effect.Effect<CommandResult, CommandFailure> =>
  Effect.async<CommandResult, CommandFailure>((resume) => {
    const started = performance.now()
    let child: ReturnType<typeof spawn>
    try {
      child = spawn(options.command, {
        cwd: options.cwd,
        env: options.env,
        shell: true,
        detached: process.platform !== "win32",
        stdio: ["pipe", "pipe", "pipe"]
      })
    } catch (e) {
      resume(Effect.fail({ code: "SPAWN_FAILED", detail: `cannot start: ${(e as Error).message}` }))
      return
    }
    let done = false
    const finish = (effect: Effect.Effect<CommandResult, CommandFailure>) => {
      if (done) return
      done = true
      resume(effect)
    }
    const stdout: Array<Buffer> = []
    const stderr: Array<Buffer> = []
    let stdoutBytes = 0
    let stderrBytes = 0
    child.stdout!.on("data", (chunk: Buffer) => {
      stdoutBytes += chunk.length
      if (stdoutBytes > options.maxOutputBytes) {
        killGroup(child.pid)
        finish(
          Effect.fail({ code: "OUTPUT_TOO_LARGE", detail: `wrote more than ${options.maxOutputBytes} bytes to stdout` })
        )
        return
      }
      stdout.push(chunk)
    })
    child.stderr!.on("data", (chunk: Buffer) => {
      const room = options.maxOutputBytes - stderrBytes
      if (room > 0) stderr.push(chunk.subarray(0, room))
      stderrBytes += chunk.length
    })
    // A command that does not read its input closes the pipe early: that is not a failure.
    child.stdin!.on("error", () => {})
    child.stdin!.end(options.stdin)
    child.on("error", (e) => {
      killGroup(child.pid)
      finish(Effect.fail({ code: "SPAWN_FAILED", detail: `cannot start: ${e.message}` }))
    })
    child.on("close", (code, signal) => {
      finish(Effect.succeed({
        exitCode: code ?? (signal === null ? 1 : 128 + signalNumber(signal)),
        stdout: Buffer.concat(stdout).toString("utf8"),
        stderr: Buffer.concat(stderr).toString("utf8") + (stderrBytes > options.maxOutputBytes ? "\n[stderr cut]" : ""),
        durationMs: Math.round(performance.now() - started)
      }))
    })
    return Effect.sync(() => {
      done = true
      killGroup(child.pid)
    })
  })

const SIGNALS: Readonly<Record<string, number>> = { SIGHUP: 1, SIGINT: 2, SIGKILL: 9, SIGTERM: 15 }
const signalNumber = (signal: NodeJS.Signals): number => SIGNALS[signal] ?? 0

/**
 * Runs the command; fails with `TIMEOUT` after `timeout` (by the `Clock`), the process group killed.
 *
 * @since 0.1.0
 * @category constructors
 */
export const runCommand = (options: CommandOptions): Effect.Effect<CommandResult, CommandFailure> =>
  spawnCommand(options).pipe(
    Effect.timeoutFail({
      duration: options.timeout,
      onTimeout: (): CommandFailure => ({
        code: "TIMEOUT",
        detail: `did not finish within ${Duration.format(options.timeout)}; it was killed`
      })
    })
  )

/** Environment variables that carry credentials: never handed to a hook. */
const SECRET = /(^|_)(API_?KEY|KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIALS?)($|_)/i
const PROVIDER = /^(ANTHROPIC|OPENAI|TILLER_API|AZURE_OPENAI|GEMINI|GOOGLE_API|MISTRAL|GROQ|DEEPSEEK|OPENROUTER)/i

/**
 * The environment of a hook: this process's, without provider keys and other credentials, plus
 * `CLAUDE_PROJECT_DIR` (the session's working directory) and `TILLER_SESSION_ID`.
 *
 * @since 0.1.0
 * @category constructors
 */
export const scrubbedEnvironment = (
  env: Readonly<Record<string, string | undefined>>,
  extra: Readonly<Record<string, string>>
): Readonly<Record<string, string>> => {
  const out: Record<string, string> = {}
  for (const [name, value] of Object.entries(env)) {
    if (value === undefined || SECRET.test(name) || PROVIDER.test(name)) continue
    out[name] = value
  }
  return Object.freeze({ ...out, ...extra })
}
