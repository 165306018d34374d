/**
 * Benchmarks of sessions on a cluster (`npm run bench -- --only=cluster`), on the PostgreSQL server
 * `TILLER_TEST_PG_URL` names (a fresh database per figure, dropped at the end; the tests' throwaway
 * helper lives in a vitest-only module), with `tiller serve` runners as child processes and the
 * timings tiller ships (`layers/ClusterTimings.ts`):
 * - failover: SIGKILL a runner, then followups to sessions across the cluster; the time from the
 *   kill to the acknowledgement of the slowest (a session that moved: its followup is acknowledged
 *   by its new owner, whose turn opens in the same transaction), p50/p99/max over the kills;
 * - throughput of 1, 2 and 3 runners over 1,000 sessions driven over HTTP (acknowledged
 *   followups/s, steps/s), beside one process driving the same sessions in-process (`Sessions`);
 * - the latency of one followup: direct `Driver` call, entity RPC (an in-process runner), HTTP.
 */
import * as RunnerAddress from "@effect/cluster/RunnerAddress"
import * as NodeClusterSocket from "@effect/platform-node/NodeClusterSocket"
import * as PgClient from "@effect/sql-pg/PgClient"
import { Context, Effect, Layer, Option, Redacted, Scope } from "effect"
import pg from "pg"
import { Agent, Driver, PgSessionStore, SessionId, Sessions, SessionStore, Tools, userMessage } from "../src/index.js"
import { ClusterSessions } from "../src/layers/ClusterSessions.js"
import * as ClusterTimings from "../src/layers/ClusterTimings.js"
import * as DemoModel from "../src/layers/DemoModel.js"
import { freePort, makeCluster, request } from "../test/cli/clusterHarness.js"

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))
const pick = <A>(items: ReadonlyArray<A>): A => items[Math.floor(Math.random() * items.length)]!
const pct = (values: ReadonlyArray<number>, p: number) => {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted.length === 0 ? NaN : sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!
}
const ms = (value: number) => `${value.toFixed(value < 10 ? 2 : 0)} ms`

const FAILOVER_KILLS = Number(process.env.TILLER_BENCH_KILLS ?? "10")
const SESSIONS = 1000
const WINDOW_MS = Number(process.env.TILLER_BENCH_WINDOW_MS ?? "15000")
const CLIENTS = 32

// Followups to random sessions from CLIENTS concurrent callers for WINDOW_MS: acknowledged per second.
const drive = async (send: (session: string, id: string) => Promise<boolean>, prefix: string) => {
  const sessions = Array.from({ length: SESSIONS }, (_, i) => `${prefix}-${i}`)
  let acknowledged = 0
  let n = 0
  const until = Date.now() + WINDOW_MS
  const started = Date.now()
  await Promise.all(Array.from({ length: CLIENTS }, async () => {
    while (Date.now() < until) {
      if (await send(pick(sessions), `${prefix}-m-${n++}`)) acknowledged++
    }
  }))
  return { acknowledged, seconds: (Date.now() - started) / 1000, sessions }
}

// Steps started in `sessions` (the `step/start` events of their logs).
const stepsIn = (url: string, sessions: ReadonlyArray<string>) =>
  Effect.runPromise(
    Effect.gen(function*() {
      const store = yield* SessionStore
      let steps = 0
      yield* Effect.forEach(sessions, (s) =>
        Effect.map(Effect.option(store.load(SessionId.make(s))), (loaded) => {
          if (Option.isSome(loaded)) steps += loaded.value.events.filter((e) => e.type === "step/start").length
        }), { concurrency: 8 })
      return steps
    }).pipe(Effect.provide(PgSessionStore.layer({ url })))
  )

const failover = async (url: string) => {
  const cluster = await makeCluster(url, 3)
  try {
    await cluster.startAll()
    const sessions = Array.from({ length: 90 }, (_, i) => `f-${i}`)
    // Every session active before the kills.
    await Promise.all(sessions.map((s, i) =>
      request(pick(cluster.runners).port, "POST", `/sessions/${s}/followup`, {
        body: JSON.stringify({ id: `warm-${i}`, text: "warm" })
      })
    ))
    const times: Array<number> = []
    for (let k = 0; k < FAILOVER_KILLS; k++) {
      await sleep(1000)
      const victim = pick(cluster.runners)
      await cluster.kill(victim)
      const killedAt = Date.now()
      const latencies = await Promise.all(sessions.map(async (s, p) => {
        while (Date.now() - killedAt < 120_000) {
          const live = cluster.live()
          const response = await request(pick(live).port, "POST", `/sessions/${s}/followup`, {
            body: JSON.stringify({ id: `probe-${k}-${p}`, text: "probe" })
          })
          if (response?.status === 202) return Date.now() - killedAt
          await sleep(50)
        }
        return Number.POSITIVE_INFINITY
      }))
      times.push(Math.max(...latencies))
      console.error(`  kill ${k + 1}: ${ms(times.at(-1)!)}`)
      cluster.start(victim)
      await cluster.healthy(victim)
    }
    return times
  } finally {
    await cluster.stopAll()
  }
}

const throughput = async (serverUrl: () => Promise<string>, runners: number) => {
  const url = await serverUrl()
  const cluster = await makeCluster(url, runners)
  try {
    await cluster.startAll()
    await sleep(3000)
    const result = await drive(async (session, id) => {
      const response = await request(pick(cluster.runners).port, "POST", `/sessions/${session}/followup`, {
        body: JSON.stringify({ id, text: "go" })
      })
      return response?.status === 202
    }, `t${runners}`)
    await cluster.stopAll()
    const steps = await stepsIn(url, result.sessions)
    return { ...result, steps }
  } finally {
    await cluster.stopAll()
  }
}

const inProcessThroughput = async (url: string) => {
  const sessionsLayer = Sessions.layer({ idleTimeToLive: "1 minute" }).pipe(
    Layer.provideMerge(PgSessionStore.layer({ url, maxConnections: 20 })),
    Layer.provide(DemoModel.layer),
    Layer.provide(Tools.layer())
  )
  const result = await Effect.runPromise(
    Effect.gen(function*() {
      const sessions = yield* Sessions
      const scope = yield* Scope.make()
      const send = (session: string, id: string) =>
        Effect.runPromise(
          Effect.gen(function*() {
            const agent = yield* sessions.open(SessionId.make(session))
            yield* Context.get(agent, Driver).followup(userMessage({ id, text: "go" }))
            return true
          }).pipe(Scope.extend(scope), Effect.catchAll(() => Effect.succeed(false)))
        )
      return yield* Effect.promise(() => drive(send, "p"))
    }).pipe(Effect.provide(sessionsLayer))
  )
  const steps = await stepsIn(url, result.sessions)
  return { ...result, steps }
}

const latencies = async (url: string) => {
  const N = 200
  const store = PgSessionStore.layer({ url })
  // Direct: one agent on the PostgreSQL store.
  const direct = await Effect.runPromise(
    Effect.gen(function*() {
      const driver = yield* Driver
      const out: Array<number> = []
      for (let i = 0; i < N; i++) {
        const t = performance.now()
        yield* driver.followup(userMessage({ id: `d-${i}`, text: "go" }))
        out.push(performance.now() - t)
        yield* driver.whenIdle
      }
      return out
    }).pipe(Effect.provide(
      Agent.layer({ open: SessionId.make("lat-direct") }).pipe(
        Layer.provide(Layer.mergeAll(store, DemoModel.layer, Tools.layer()))
      )
    ))
  )
  // Entity RPC: a runner in this process.
  const port = await freePort()
  const runner = ClusterSessions.layer().pipe(
    Layer.provideMerge(NodeClusterSocket.layer({
      storage: "sql",
      shardingConfig: ClusterTimings.make({ runnerAddress: Option.some(RunnerAddress.make("127.0.0.1", port)) })
    })),
    Layer.provide(PgClient.layer({ url: Redacted.make(url) })),
    Layer.provideMerge(store),
    Layer.provide(DemoModel.layer),
    Layer.provide(Tools.layer())
  )
  const rpc = await Effect.runPromise(
    Effect.gen(function*() {
      const session = yield* ClusterSessions.client(SessionId.make("lat-rpc"))
      yield* Effect.sleep("2 seconds")
      const out: Array<number> = []
      for (let i = 0; i < N; i++) {
        const t = performance.now()
        yield* session.followup(userMessage({ id: `r-${i}`, text: "go" }))
        out.push(performance.now() - t)
        yield* session.whenIdle
      }
      return out
    }).pipe(Effect.provide(runner))
  )
  // HTTP: one runner process.
  const cluster = await makeCluster(url, 1)
  const http: Array<number> = []
  try {
    await cluster.startAll()
    const runnerPort = cluster.runners[0]!.port
    await request(runnerPort, "POST", "/sessions/lat-http/followup", { body: JSON.stringify({ text: "warm" }) })
    for (let i = 0; i < N; i++) {
      const t = performance.now()
      await request(runnerPort, "POST", "/sessions/lat-http/followup", {
        body: JSON.stringify({ id: `h-${i}`, text: "go" })
      })
      http.push(performance.now() - t)
      await sleep(20)
    }
  } finally {
    await cluster.stopAll()
  }
  return { direct, rpc, http }
}

/**
 * Runs the cluster benchmarks and prints their figures.
 *
 * @since 0.1.0
 */
export const main = async (): Promise<void> => {
  const admin = process.env.TILLER_TEST_PG_URL
  if (admin === undefined) {
    throw new Error(
      "the cluster benchmarks need TILLER_TEST_PG_URL=postgres://… (a server where databases may be created)"
    )
  }
  const created: Array<string> = []
  const query = async (text: string) => {
    const client = new pg.Client({ connectionString: admin })
    await client.connect()
    try {
      await client.query(text)
    } finally {
      await client.end()
    }
  }
  const server = {
    freshUrl: async () => {
      const name = `tiller_bench_${process.pid}_${created.length}`
      await query(`CREATE DATABASE ${name}`)
      created.push(name)
      const url = new URL(admin)
      url.pathname = `/${name}`
      return url.toString()
    }
  }
  try {
    await run(server)
  } finally {
    for (const name of created) await query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`).catch(() => undefined)
  }
}

const run = async (server: { readonly freshUrl: () => Promise<string> }): Promise<void> => {
  console.error("cluster: followup latency (direct Driver, entity RPC, HTTP) ...")
  const lat = await latencies(await server.freshUrl())
  console.error(`cluster: failover, ${FAILOVER_KILLS} kills of 1 of 3 runners ...`)
  const fail = await failover(await server.freshUrl())
  console.error("cluster: throughput ...")
  const inProcess = await inProcessThroughput(await server.freshUrl())
  const byRunners = []
  for (const runners of [1, 2, 3]) byRunners.push({ runners, ...(await throughput(server.freshUrl, runners)) })
  const lines = [
    "## Sessions on a cluster (PostgreSQL, tiller serve runners on loopback, shipped timings)",
    "",
    "| followup acknowledged | p50 | p99 |",
    "|---|---|---|",
    `| direct Driver.followup | ${ms(pct(lat.direct, 50))} | ${ms(pct(lat.direct, 99))} |`,
    `| entity RPC (persisted, in-process runner) | ${ms(pct(lat.rpc, 50))} | ${ms(pct(lat.rpc, 99))} |`,
    `| HTTP POST /sessions/{id}/followup | ${ms(pct(lat.http, 50))} | ${ms(pct(lat.http, 99))} |`,
    "",
    fail.length === 0 ?
      "Failover: not run (TILLER_BENCH_KILLS=0)" :
      `Failover (kill to the slowest acknowledged followup of 90 sessions on 3 runners), ${fail.length} kills: ` +
      `p50 ${ms(pct(fail, 50))}, p99 ${ms(pct(fail, 99))}, max ${ms(Math.max(...fail))} (target p99 <= 5000 ms: ${
        pct(fail, 99) <= 5000 ? "met" : "missed"
      })`,
    "",
    `| ${SESSIONS} sessions, ${CLIENTS} callers, ${WINDOW_MS / 1000} s | acknowledged followups/s | steps/s |`,
    "|---|---|---|",
    `| one process, Sessions in-process | ${(inProcess.acknowledged / inProcess.seconds).toFixed(0)} | ${
      (inProcess.steps / inProcess.seconds).toFixed(0)
    } |`,
    ...byRunners.map((r) =>
      `| ${r.runners} runner${r.runners === 1 ? "" : "s"} over HTTP | ${(r.acknowledged / r.seconds).toFixed(0)} | ${
        (r.steps / r.seconds).toFixed(0)
      } |`
    )
  ]
  console.log(lines.join("\n"))
}
