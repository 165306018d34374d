/**
 * SIGKILL crash test of SQLite and PostgreSQL sessions (SPEC D13, G8, 6.4, 6.5). A child process runs a scripted
 * session while concurrent callers followup, steer, inject, remove and cancel, reporting each
 * operation once its Effect completed; the parent SIGKILLs the child at a random moment, resumes the
 * file in-process and checks that the log is valid, that every acknowledged operation is in it
 * exactly once, and that the session goes on normally. Each file is crashed several times in a row.
 *
 * `TILLER_CRASH_TRIALS` raises the number of kills (at least 50); `TILLER_CRASH_SEED` replays the
 * random choices of a run (kill moments and workload; thread timing still varies).
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer, Option } from "effect"
import type { Scope } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import type { EventOf, SessionEvent } from "../../src/domain/Event.js"
import type { KnownIdState } from "../../src/index.js"
import {
  Agent,
  checkLog,
  Driver,
  Inbox,
  MessageId,
  PgSessionStore,
  repairClosers,
  ScriptedModel,
  SessionId,
  SessionLog,
  SessionStore,
  SqliteSessionStore,
  Tools,
  userMessage
} from "../../src/index.js"
import { describePostgres, testPostgres } from "../fixtures/postgres.js"
import type { Ledger } from "./accounting.js"
import { audit, emptyLedger, record, tally, textOf } from "./accounting.js"
import type { ChildCommand, KillPlan } from "./launch.js"
import { prepareChild, runUntilKilled } from "./launch.js"
import { mulberry32 } from "./protocol.js"

const TRIALS = Math.max(50, Number(process.env.TILLER_CRASH_TRIALS ?? 0) || 0)
const SEED = process.env.TILLER_CRASH_SEED !== undefined
  ? Number(process.env.TILLER_CRASH_SEED) >>> 0
  : Math.floor(Math.random() * 2 ** 32)
/** Kills per session file: each later child resumes what the previous one left. */
const CRASHES_PER_FILE = 5
/** Chains of crashes run side by side. */
const PARALLEL_FILES = 2
/** A kill comes after up to this many acknowledgements of the run... */
const MAX_KILL_ACKS = 60
/** ...and up to this many milliseconds after that one. */
const MAX_KILL_DELAY_MS = 50

const sid = SessionId.make("crash")

/** What one trial's resume found, for the run summary. */
interface TrialFacts {
  readonly acks: number
  readonly counts: Record<KnownIdState | "unknown", number>
  readonly openTurn: boolean
  readonly openStep: boolean
  readonly unknownToolOutcomes: number
}

const statesOf = (inbox: Inbox["Type"], ids: Iterable<string>) =>
  Effect.gen(function*() {
    const states = new Map<string, Option.Option<KnownIdState>>()
    for (const id of ids) states.set(id, yield* inbox.idState(MessageId.make(id)))
    return (id: string) => states.get(id) ?? Option.none()
  })

/**
 * The first seq at which two logs differ (each event compared as JSON), or undefined when equal.
 * Cheaper than a deep equality of thousands of events, and its failure message stays short.
 */
const firstDifference = (a: ReadonlyArray<SessionEvent>, b: ReadonlyArray<SessionEvent>): number | undefined => {
  for (let i = 0; i < Math.max(a.length, b.length); i++) {
    if (JSON.stringify(a[i]) !== JSON.stringify(b[i])) return i
  }
  return undefined
}

/** Fails with every problem spelled out (a deep-equality message would show only `[ Array(n) ]`). */
const expectNone = (what: string, problems: ReadonlyArray<unknown>) => {
  if (problems.length > 0) {
    throw new Error(`${what}: ${problems.map((p) => typeof p === "string" ? p : JSON.stringify(p)).join("; ")}`)
  }
}

const turnEndKinds = (events: ReadonlyArray<SessionEvent>) =>
  events.filter((e) => e.type === "turn/end").map((e) => (e as EventOf<"turn/end">).data.reason.kind)

/** The store of a chain: a SQLite file, or a PostgreSQL database given by its URL. */
const storeOf = (file: string) =>
  file.startsWith("postgres://") ? PgSessionStore.layer({ url: file }) : SqliteSessionStore.layer({ filename: file })

/**
 * Resumes `file` in-process and checks it against `ledger`, then runs one more follow-up to
 * completion (which also runs every follow-up the crash left parked).
 */
const verify = (file: string, ledger: Ledger, trial: number) =>
  Effect.gen(function*() {
    const store = yield* SessionStore
    const stored = (yield* store.load(sid)).events
    // What the killed process left is a valid log, possibly ending inside a turn.
    expectNone("the stored log breaks rules", checkLog(stored))
    const closers = repairClosers(stored)
    const agent = Agent.layer({ resume: sid, model: { provider: "scripted", model: "resumed" } }).pipe(
      Layer.provideMerge(Layer.mergeAll(
        ScriptedModel.layer(Array.from({ length: 200 }, (_, n) => ScriptedModel.text(`resumed ${n}`))),
        Tools.layer()
      ))
    )
    return yield* Effect.gen(function*() {
      const driver = yield* Driver
      const inbox = yield* Inbox
      const log = yield* SessionLog
      const scripted = yield* ScriptedModel

      // Resume kept every stored event, closed the open turn and marked the end of the seed.
      const resumed = yield* log.events
      expect(firstDifference(resumed.slice(0, stored.length), stored)).toBeUndefined()
      const expectedTail = stored.at(-1)?.type === "session/end-seed"
        ? []
        : [...closers.map((e) => e.type), "session/end-seed"]
      expect(resumed.slice(stored.length).map((e) => e.type)).toEqual(expectedTail)
      expectNone("the resumed log breaks rules", checkLog(resumed, { closed: true }))
      const atResume = yield* statesOf(inbox, ledger.delivered.keys())
      expectNone("at resume", audit(resumed, ledger, atResume))
      const counts = tally(ledger, atResume)

      // The session goes on: a follow-up runs after every parked one, each turn completing.
      const parked = (yield* inbox.nextTurn).length
      const id = `verify-${trial}`
      yield* driver.followup(userMessage({ id, text: textOf("followup", id) }))
      ledger.delivered.set(id, "followup")
      yield* driver.whenIdle
      yield* log.flush
      const after = yield* log.events
      expectNone("the continued log breaks rules", checkLog(after, { closed: true }))
      expect(turnEndKinds(after.slice(resumed.length))).toEqual(Array.from({ length: parked + 1 }, () => "completed"))
      expect((yield* scripted.requests).length).toBe(parked + 1)
      expect(yield* inbox.snapshot).toEqual({ nextTurn: [], nextStep: [] })
      const states = yield* statesOf(inbox, ledger.delivered.keys())
      expect(states(id)).toEqual(Option.some("entered"))
      expectNone("after the follow-up", audit(after, ledger, states))
      expect(tally(ledger, states).pending).toBe(0)
      expect(firstDifference((yield* store.load(sid)).events, after)).toBeUndefined()

      return {
        counts,
        openTurn: closers.length > 0,
        openStep: closers.some((e) => e.type === "step/end"),
        unknownToolOutcomes: closers.filter((e) =>
          e.type === "tool/result" && (e as EventOf<"tool/result">).data.error?.code === "TOOL_OUTCOME_UNKNOWN"
        ).length
      }
    }).pipe(Effect.provide(agent))
  }).pipe(Effect.provide(storeOf(file)))

/** Crashes one session file (or database) `crashes` times in a row, verifying after each kill. */
const crashChain = (child: ChildCommand, database: DatabaseOf, chain: number, firstTrial: number, crashes: number) =>
  Effect.gen(function*() {
    const file = yield* database(chain)
    const ledger = emptyLedger()
    const facts: Array<TrialFacts> = []
    let lastReadyMs = 0
    for (let k = 0; k < crashes; k++) {
      const trial = firstTrial + k
      const random = mulberry32(SEED ^ Math.imul(trial + 1, 0x9E3779B1))
      // Mostly a kill while the workload runs; sometimes (once the file exists) one while the
      // child starts up and resumes.
      const plan: KillPlan = k > 0 && random() < 0.1
        ? { after: "spawn", ms: Math.floor(random() * lastReadyMs) }
        : {
          after: "acks",
          count: Math.floor(random() * (MAX_KILL_ACKS + 1)),
          ms: Math.floor(random() * MAX_KILL_DELAY_MS)
        }
      const args = [file, sid, k === 0 ? "create" : "resume", String(Math.floor(random() * 2 ** 32)), `t${trial}`]
      const run = yield* runUntilKilled(child, args, plan)
      if (run.readyMs !== undefined) lastReadyMs = run.readyMs
      record(ledger, run.acks)
      const found = yield* verify(file, ledger, trial).pipe(
        Effect.catchAllDefect((defect) =>
          Effect.die(
            new Error(
              `seed ${SEED} (TILLER_CRASH_SEED=${SEED}), trial ${trial} (file ${chain}, crash ${k + 1}, ` +
                `kill ${plan.ms} ms after ${plan.after === "spawn" ? "spawn" : `acknowledgement ${plan.count}`}): ${
                  defect instanceof Error ? defect.message : String(defect)
                }`
            )
          )
        )
      )
      facts.push({ acks: run.acks.length, ...found })
    }
    return { facts, ledger }
  })

/** Where chain `n` keeps its session: a SQLite file, or a fresh PostgreSQL database's URL. */
type DatabaseOf = (chain: number) => Effect.Effect<string>

const tempDir = Effect.acquireRelease(
  Effect.sync(() => fs.mkdtempSync(path.join(os.tmpdir(), "tiller-crash-"))),
  (dir) => Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true }))
)

/** The crash test on one store kind. */
const crashTest = (database: Effect.Effect<DatabaseOf, never, Scope.Scope>) =>
  it.scopedLive(
    `${TRIALS} kills at random moments: every acknowledged operation survives exactly once and the session goes on`,
    () =>
      Effect.gen(function*() {
        const child = yield* prepareChild
        const databaseOf = yield* database
        const chains = Array.from({ length: Math.ceil(TRIALS / CRASHES_PER_FILE) }, (_, c) => c)
        const results = yield* Effect.forEach(
          chains,
          (c) =>
            crashChain(
              child,
              databaseOf,
              c,
              c * CRASHES_PER_FILE,
              Math.min(CRASHES_PER_FILE, TRIALS - c * CRASHES_PER_FILE)
            ),
          { concurrency: PARALLEL_FILES }
        )
        const facts = results.flatMap((r) => r.facts)
        expect(facts.length).toBe(TRIALS)
        const acks = facts.reduce((n, f) => n + f.acks, 0)
        // Kills landed where they matter: inside turns, inside steps, while tool bodies ran.
        const openTurns = facts.filter((f) => f.openTurn).length
        const openSteps = facts.filter((f) => f.openStep).length
        const unknown = facts.reduce((n, f) => n + f.unknownToolOutcomes, 0)
        expect(acks).toBeGreaterThan(0)
        expect(openTurns).toBeGreaterThan(0)
        expect(openSteps).toBeGreaterThan(0)
        const removals = results.reduce((n, r) => n + r.ledger.removed.size, 0)
        const cancels = results.reduce((n, r) => n + r.ledger.cancels, 0)
        // The states of the acknowledged deliveries each resume found, summed over the trials.
        const found = { pending: 0, claimed: 0, entered: 0, discarded: 0 }
        for (const f of facts) {
          for (const state of ["pending", "claimed", "entered", "discarded"] as const) found[state] += f.counts[state]
        }
        console.log(
          `crash test: seed ${SEED}, ${TRIALS} kills, ${acks} acknowledged operations ` +
            `(${removals} removals, ${cancels} cancels); states at resume ${JSON.stringify(found)}; ` +
            `kills inside a turn ${openTurns}, inside a step ${openSteps}, tool outcomes unknown ${unknown}`
        )
      }),
    TRIALS * 12_000
  )

describe("SIGKILL and resume on SQLite", () => {
  crashTest(Effect.map(tempDir, (dir) => (chain: number) => Effect.succeed(path.join(dir, `session-${chain}.db`))))
})

const server = await testPostgres()

describePostgres(server, "SIGKILL and resume", (server) => {
  crashTest(Effect.succeed(() => Effect.promise(() => server.freshUrl())))
})
