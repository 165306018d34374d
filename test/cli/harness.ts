/**
 * Runs the `tiller` executable (bin/tiller.mjs) as a child process in a working directory.
 */
import { Effect } from "effect"
import { spawn } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"

const BIN = fileURLToPath(new URL("../../bin/tiller.mjs", import.meta.url))

export interface Outcome {
  readonly code: number | null
  readonly stdout: string
  readonly stderr: string
}

/** Runs `tiller ...args` in `cwd` with `input` on stdin (then end of input); TILLER_* come only from `env`. */
export const tiller = (
  cwd: string,
  args: ReadonlyArray<string>,
  options?: { readonly input?: string; readonly env?: Record<string, string> }
): Effect.Effect<Outcome> =>
  Effect.async<Outcome>((resume) => {
    const env: Record<string, string | undefined> = { ...process.env, NO_COLOR: "1" }
    delete env.TILLER_DB
    delete env.TILLER_MODEL
    const child = spawn(process.execPath, [BIN, ...args], {
      cwd,
      env: { ...env, ...options?.env },
      stdio: ["pipe", "pipe", "pipe"]
    })
    let stdout = ""
    let stderr = ""
    child.stdout.setEncoding("utf8").on("data", (text: string) => (stdout += text))
    child.stderr.setEncoding("utf8").on("data", (text: string) => (stderr += text))
    child.on("close", (code) => resume(Effect.succeed({ code, stdout, stderr })))
    child.stdin.end(options?.input ?? "")
    return Effect.sync(() => {
      child.kill()
    })
  })

/** A fresh temporary working directory, removed when the scope closes. */
export const tempDir = Effect.acquireRelease(
  Effect.sync(() => fs.mkdtempSync(path.join(os.tmpdir(), "tiller-cli-"))),
  (dir) => Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true }))
)

/** Parses JSON lines; throws (failing the test) on a line that is not JSON. */
export const jsonLines = (text: string): Array<any> =>
  text.split("\n").filter((line) => line !== "").map((line) => JSON.parse(line))
