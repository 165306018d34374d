/**
 * `tiller chat|run|log --server URL` against one `tiller serve` runner (demo model) on a throwaway
 * PostgreSQL: `run` prints the answer and the server's log holds the turn; `log` prints what the
 * in-process `log` prints for the same session; the chat's line goes to the server and its answer
 * comes back over the event stream; a wrong token, an unreachable server and a refused request
 * are one line on stderr and a non-zero exit.
 */
import { expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import { describePostgres, testPostgres } from "../fixtures/postgres.js"
import { freePort, makeCluster, request, TOKEN } from "./clusterHarness.js"
import { jsonLines, tempDir, tiller } from "./harness.js"

const TIMEOUT = 300_000

const pg = await testPostgres()

describePostgres(pg, "tiller chat|run|log --server", (server) => {
  it.scopedLive(
    "run, log and chat over --server; a wrong token, a refused request and no server are one line",
    () =>
      Effect.gen(function*() {
        const url = yield* Effect.promise(() => server.freshUrl())
        const cluster = yield* Effect.acquireRelease(
          Effect.promise(() => makeCluster(url, 1)),
          (cluster) => Effect.promise(() => cluster.stopAll())
        )
        yield* Effect.promise(() => cluster.startAll())
        const port = cluster.runners[0]!.port
        const base = `http://127.0.0.1:${port}`
        const dir = yield* tempDir
        const env = { TILLER_SERVER_TOKEN: TOKEN }

        // run: the answer on stdout, the session on stderr, exit 0; the server's log holds the turn.
        const run = yield* tiller(dir, ["run", "--server", base, "--session", "r-1", "hello there"], { env })
        expect(run.stderr).toBe("session r-1\n")
        // The answer is printed as the in-process run prints it.
        const inProcess = yield* tiller(dir, ["--db", path.join(dir, "local.db"), "run", "hello there"])
        expect(inProcess.stdout).toContain("[user] hello there")
        expect(run).toMatchObject({ code: 0, stdout: inProcess.stdout })
        const status = yield* Effect.promise(() => request(port, "GET", "/sessions/r-1"))
        expect(status?.json).toMatchObject({ status: "idle", turns: 1, header: { sessionId: "r-1" } })
        // A second run on the same session follows only its own turn (from the log's length before it).
        const json = yield* tiller(dir, ["run", "--server", base, "--session", "r-1", "--json", "again"], { env })
        expect(json.code).toBe(0)
        const events = jsonLines(json.stdout)
        expect(events[0].seq).toBe(status?.json.events)
        expect(events.filter((e) => e.type === "turn/start").map((e) => e.data.turn)).toEqual([2])
        expect(events.at(-1)).toMatchObject({ type: "turn/end", data: { turn: 2, reason: { kind: "completed" } } })

        // log: what the in-process log prints for the same session, read from the server.
        const remote = yield* tiller(dir, ["log", "--server", base, "r-1"], { env })
        const local = yield* tiller(dir, ["--db", url, "log", "r-1"])
        expect(local.code).toBe(0)
        expect(remote).toMatchObject({ code: 0, stderr: "" })
        expect(remote.stdout).toBe(local.stdout)
        expect(remote.stdout).toContain("hello there")
        const remoteJson = yield* tiller(dir, ["log", "--server", base, "--json", "r-1"], { env })
        const localJson = yield* tiller(dir, ["--db", url, "log", "--json", "r-1"])
        expect(remoteJson.stdout).toBe(localJson.stdout)

        // chat: a piped line steers the idle agent into a turn; its answer comes over the event stream.
        const tokenFile = path.join(dir, "token")
        fs.writeFileSync(tokenFile, `${TOKEN}\n`)
        const chat = yield* tiller(
          dir,
          ["chat", "--server", base, "--token-file", tokenFile, "--session", "c-1"],
          { input: "what is up\n/status\n" }
        )
        expect(chat.code).toBe(0)
        expect(chat.stdout).toContain("tiller chat · session c-1 (new)")
        expect(chat.stdout).toContain("assistant: Step 1 of turn 1 brought 1 message:\n1. [user] what is up\n")
        expect(chat.stdout).toContain("[idle · 1 turn · pending: 0 queued, 0 next-step]")
        expect(chat.stdout).toContain(`continue it with: tiller chat --server ${base} --session c-1`)
        const chatLog = yield* Effect.promise(() => request(port, "GET", "/sessions/c-1"))
        expect(chatLog?.json).toMatchObject({ status: "idle", turns: 1 })
        // Resumed, the chat says so and /log prints the timeline from the server.
        const resumed = yield* tiller(dir, ["chat", "--server", base, "--session", "c-1"], {
          input: "/log\n/fork\n",
          env
        })
        expect(resumed.code).toBe(0)
        expect(resumed.stdout).toContain("tiller chat · session c-1 (resumed: 1 turn,")
        expect(resumed.stdout).toContain("what is up")
        expect(resumed.stderr).toContain("/fork needs the session in this process")

        // A wrong token: one line, exit 1, the token never printed; nothing is stored.
        for (const args of [["run", "--session", "w-1", "hi"], ["log", "r-1"], ["chat", "--session", "w-1"]]) {
          const wrong = yield* tiller(dir, [args[0]!, "--server", base, ...args.slice(1)], {
            env: { TILLER_SERVER_TOKEN: "not-the-token" },
            input: "hi\n"
          })
          expect(wrong.code, args.join(" ")).toBe(1)
          const lines = wrong.stderr.split("\n").filter((line) => line !== "" && line !== "session w-1")
          expect(lines, args.join(" ")).toEqual([
            `tiller: the server ${base} refused the token (401): give the one it accepts in TILLER_SERVER_TOKEN or --token-file`
          ])
          expect(wrong.stdout + wrong.stderr).not.toContain("not-the-token")
        }
        expect((yield* Effect.promise(() => request(port, "GET", "/sessions/w-1")))?.status).toBe(404)

        // A refused request (a session the server does not have) and a server that is not there.
        const missing = yield* tiller(dir, ["log", "--server", base, "nope"], { env })
        expect(missing).toMatchObject({ code: 1, stderr: `tiller: no session nope on ${base}\n` })
        const nobody = `http://127.0.0.1:${yield* Effect.promise(freePort)}`
        const away = yield* tiller(dir, ["run", "--server", nobody, "--session", "a-1", "hi"], { env })
        expect(away.code).toBe(1)
        expect(away.stderr).toBe(`session a-1\ntiller: cannot reach the server ${nobody}: connection refused\n`)
        // No token at all.
        const none = yield* tiller(dir, ["log", "--server", base, "r-1"])
        expect(none).toMatchObject({
          code: 1,
          stderr: "tiller: --server needs a token: set TILLER_SERVER_TOKEN or give --token-file FILE\n"
        })
      }),
    TIMEOUT
  )
})
