/**
 * Runners of `tiller serve` as child processes for the cluster tests and benchmarks: started on
 * loopback ports, waited for, SIGKILLed, restarted; and a small HTTP client of the session API.
 */
import { type ChildProcess, spawn } from "node:child_process"
import * as fs from "node:fs"
import * as net from "node:net"
import * as os from "node:os"
import * as path from "node:path"

// The repository: the nearest directory above this module (or its bundle) holding bin/tiller.mjs.
const findRoot = (from: string): string => {
  let dir = from
  while (!fs.existsSync(path.join(dir, "bin", "tiller.mjs"))) {
    const parent = path.dirname(dir)
    if (parent === dir) return process.cwd()
    dir = parent
  }
  return dir
}
const ROOT = findRoot(import.meta.dirname)

/** The bearer token the test runners accept. */
export const TOKEN = "cluster-test-token"

/** One runner process. */
export interface RunnerProcess {
  readonly index: number
  readonly port: number
  readonly runnerPort: number
  child: ChildProcess | undefined
  alive: boolean
  readonly logFile: string
}

/** A free TCP port on 127.0.0.1. */
export const freePort = (): Promise<number> =>
  new Promise((resolve, reject) => {
    const server = net.createServer()
    server.once("error", reject)
    server.listen(0, "127.0.0.1", () => {
      const address = server.address() as net.AddressInfo
      server.close(() => resolve(address.port))
    })
  })

/** A request to a runner's session API; `undefined` when the runner could not be reached. */
export const request = async (
  port: number,
  method: string,
  pathname: string,
  options: { readonly body?: string; readonly token?: string | null; readonly timeoutMs?: number } = {}
): Promise<{ readonly status: number; readonly json: any; readonly text: string } | undefined> => {
  const headers: Record<string, string> = { "content-type": "application/json" }
  if (options.token !== null) headers.authorization = `Bearer ${options.token ?? TOKEN}`
  try {
    const response = await fetch(`http://127.0.0.1:${port}${pathname}`, {
      method,
      headers,
      ...(options.body === undefined ? {} : { body: options.body }),
      signal: AbortSignal.timeout(options.timeoutMs ?? 15_000)
    })
    const text = await response.text()
    let json: unknown = undefined
    try {
      json = JSON.parse(text)
    } catch {
      json = undefined
    }
    return { status: response.status, json, text }
  } catch {
    return undefined
  }
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

/** A cluster of `count` runners over one PostgreSQL database (sessions and cluster storage). */
export const makeCluster = async (dbUrl: string, count: number, extraArgs: ReadonlyArray<string> = []) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "tiller-cluster-"))
  const runners: Array<RunnerProcess> = []
  for (let i = 0; i < count; i++) {
    runners.push({
      index: i,
      port: await freePort(),
      runnerPort: await freePort(),
      child: undefined,
      alive: false,
      logFile: path.join(dir, `runner-${i}.log`)
    })
  }
  const start = (runner: RunnerProcess) => {
    const out = fs.openSync(runner.logFile, "a")
    const child = spawn(process.execPath, [
      path.join(ROOT, "bin/tiller.mjs"),
      "--db",
      dbUrl,
      "--model",
      "demo",
      "serve",
      "--port",
      String(runner.port),
      "--runner-port",
      String(runner.runnerPort),
      ...extraArgs
    ], {
      cwd: ROOT,
      env: { ...process.env, TILLER_SERVER_TOKEN: TOKEN, NO_COLOR: "1" },
      stdio: ["ignore", out, out]
    })
    fs.closeSync(out)
    runner.child = child
    runner.alive = true
    child.once("exit", () => {
      if (runner.child === child) runner.alive = false
    })
  }
  const healthy = async (runner: RunnerProcess, deadlineMs = 120_000) => {
    const until = Date.now() + deadlineMs
    while (Date.now() < until) {
      const response = await request(runner.port, "GET", "/health", { timeoutMs: 2_000 })
      if (response?.status === 200) return
      if (!runner.alive) throw new Error(`runner ${runner.index} exited: ${fs.readFileSync(runner.logFile, "utf8")}`)
      await sleep(200)
    }
    throw new Error(`runner ${runner.index} did not answer within ${deadlineMs} ms`)
  }
  return {
    dir,
    runners,
    start,
    healthy,
    /** Starts every runner and waits until each answers. */
    startAll: async () => {
      // The first runner alone, then the others: each kill below is measured against a cluster
      // whose shards were assigned once (runners started together on a new database are checked
      // by a test of their own, with `startTogether`).
      start(runners[0]!)
      await healthy(runners[0]!)
      for (const runner of runners.slice(1)) start(runner)
      for (const runner of runners.slice(1)) await healthy(runner)
    },
    /** Starts every runner at once and waits until each answers. */
    startTogether: async () => {
      for (const runner of runners) start(runner)
      for (const runner of runners) await healthy(runner)
    },
    /** SIGKILLs a runner and waits for its exit. */
    kill: async (runner: RunnerProcess) => {
      const child = runner.child
      if (child === undefined || child.exitCode !== null) return
      const exited = new Promise((resolve) => child.once("exit", resolve))
      runner.alive = false
      child.kill("SIGKILL")
      await exited
    },
    /** The runners answering now. */
    live: () => runners.filter((runner) => runner.alive),
    /** Stops every runner (SIGTERM, then SIGKILL after a grace). */
    stopAll: async () => {
      await Promise.all(runners.map(async (runner) => {
        const child = runner.child
        if (child === undefined || child.exitCode !== null || child.signalCode !== null) return
        const exited = new Promise((resolve) => child.once("exit", resolve))
        child.kill("SIGTERM")
        const timer = setTimeout(() => child.kill("SIGKILL"), 15_000)
        await exited
        clearTimeout(timer)
        runner.alive = false
      }))
    }
  }
}
