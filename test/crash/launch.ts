/**
 * Builds the crash-test child and runs it until a SIGKILL at a chosen moment.
 *
 * Trials are dominated by the child's start, so the child is one CommonJS bundle (everything but
 * the native SQLite driver) started by test/crash/loader.cjs with a V8 code cache. Measured here
 * (time to the ready line, load average ~15 on 2 cores): tsx over the sources 6.2-7.4 s; an ESM
 * bundle with packages external 3.0-4.0 s; a whole ESM bundle 1.1-1.9 s (~0.5 s CPU); the whole
 * bundle with the code cache ~2.1 s wall, ~0.3 s CPU.
 */
import { Data, Effect } from "effect"
import { build } from "esbuild"
import { spawn } from "node:child_process"
import * as crypto from "node:crypto"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import type { ChildReport } from "./protocol.js"
import { parseReport } from "./protocol.js"

const root = fileURLToPath(new URL("../../", import.meta.url))
const cacheDir = path.join(root, "node_modules", ".cache", "tiller-crash")
const loader = fileURLToPath(new URL("./loader.cjs", import.meta.url))

/** The child ended otherwise than by the parent's signal. */
export class ChildFailed extends Data.TaggedError("ChildFailed")<{
  readonly code: number | null
  readonly signal: string | null
  readonly stderr: string
}> {
  override get message() {
    return `the crash child exited by itself (code ${this.code}, signal ${this.signal}): ${this.stderr}`
  }
}

/** How to start the child: the node arguments before the child's own. */
export interface ChildCommand {
  readonly prefix: ReadonlyArray<string>
}

const STALE_MS = 60 * 60 * 1000

/** Removes bundles (and their caches) of earlier sources, once they are an hour old. */
const removeStale = (current: string) => {
  for (const name of fs.readdirSync(cacheDir)) {
    const file = path.join(cacheDir, name)
    if (name.startsWith(current)) continue
    try {
      if (Date.now() - fs.statSync(file).mtimeMs > STALE_MS) fs.rmSync(file, { force: true })
    } catch {
      // Another run removed it first.
    }
  }
}

/** Bundles test/crash/child.ts into node_modules/.cache/tiller-crash/child-<content hash>.cjs (once per content). */
const bundleChild = Effect.promise(async () => {
  const result = await build({
    entryPoints: [path.join(root, "test", "crash", "child.ts")],
    bundle: true,
    platform: "node",
    format: "cjs",
    target: "node20",
    external: ["better-sqlite3", "pg-native"],
    write: false,
    logLevel: "warning"
  })
  const text = result.outputFiles[0]!.contents
  const hash = crypto.createHash("sha256").update(text).digest("hex").slice(0, 16)
  const bundle = path.join(cacheDir, `child-${hash}.cjs`)
  if (!fs.existsSync(bundle)) {
    fs.mkdirSync(cacheDir, { recursive: true })
    // Concurrent runs each write their own file; the rename makes each replacement atomic.
    const temporary = `${bundle}.${process.pid}.tmp`
    fs.writeFileSync(temporary, text)
    fs.renameSync(temporary, bundle)
    removeStale(path.basename(bundle))
  }
  return bundle
})

/** Runs the child once on a scratch file and stops it with SIGTERM, so the loader writes the code cache. */
const warmUp = (command: ChildCommand) =>
  Effect.acquireUseRelease(
    Effect.sync(() => fs.mkdtempSync(path.join(os.tmpdir(), "tiller-crash-warm-"))),
    (dir) =>
      runUntilSignalled(command, [path.join(dir, "warm.db"), "warm", "create", "1", "warm"], {
        after: "acks",
        count: 20,
        ms: 0
      }, "SIGTERM"),
    (dir) => Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true }))
  )

/** The command that starts the child, with its bundle and code cache in place. */
export const prepareChild: Effect.Effect<ChildCommand, ChildFailed> = Effect.gen(function*() {
  const bundle = yield* bundleChild
  const command: ChildCommand = { prefix: [loader, bundle] }
  if (!fs.existsSync(`${bundle}.v8cache`)) yield* warmUp(command)
  return command
})

/**
 * When the parent signals the child: `ms` after it spawned, or `ms` after its `count`-th
 * acknowledgement (0: after its ready line). Counting acknowledgements lets kills land at the same
 * points of the workload however loaded the machine is.
 */
export type KillPlan =
  | { readonly after: "spawn"; readonly ms: number }
  | { readonly after: "acks"; readonly count: number; readonly ms: number }

/** What one child run left: its report (read up to the kill) and how long it took to become ready. */
export interface ChildRun extends ChildReport {
  readonly readyMs: number | undefined
}

/** Runs the child with `args` and SIGKILLs it as planned; the child's whole stdout is read first. */
export const runUntilKilled = (
  command: ChildCommand,
  args: ReadonlyArray<string>,
  plan: KillPlan
): Effect.Effect<ChildRun, ChildFailed> => runUntilSignalled(command, args, plan, "SIGKILL")

const runUntilSignalled = (
  command: ChildCommand,
  args: ReadonlyArray<string>,
  plan: KillPlan,
  signal: "SIGKILL" | "SIGTERM"
): Effect.Effect<ChildRun, ChildFailed> =>
  Effect.async<ChildRun, ChildFailed>((resume) => {
    const started = performance.now()
    const child = spawn(process.execPath, [...command.prefix, ...args], { stdio: ["ignore", "pipe", "pipe"] })
    let stdout = ""
    let stderr = ""
    let readyMs: number | undefined
    let lines = 0
    let timer: NodeJS.Timeout | undefined
    const arm = () => {
      timer = setTimeout(() => child.kill(signal), plan.ms)
    }
    if (plan.after === "spawn") arm()
    child.stdout.setEncoding("utf8").on("data", (text: string) => {
      stdout += text
      if (readyMs === undefined && stdout.startsWith("{\"ready\":true}\n")) readyMs = performance.now() - started
      if (plan.after !== "acks" || timer !== undefined) return
      for (const c of text) if (c === "\n") lines++
      // The first line is the ready line; the others are acknowledgements.
      if (lines >= 1 + plan.count) arm()
    })
    child.stderr.setEncoding("utf8").on("data", (text: string) => (stderr += text))
    // "close" comes after both pipes ended: every line the child wrote before dying has been read.
    child.on("close", (code, exitSignal) => {
      clearTimeout(timer)
      // The loader answers SIGTERM by writing the code cache and exiting with 0.
      const expected = signal === "SIGKILL" ? exitSignal === "SIGKILL" : code === 0
      if (!expected) resume(Effect.fail(new ChildFailed({ code, signal: exitSignal, stderr })))
      else resume(Effect.sync(() => ({ ...parseReport(stdout), readyMs })))
    })
    return Effect.sync(() => {
      clearTimeout(timer)
      child.kill("SIGKILL")
    })
  })
