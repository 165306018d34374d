/**
 * The race property (test/agent/RaceProperty.test.ts) on the PostgreSQL store: random programs of
 * deliveries, inbox edits, cancels and dispose/resume against agents whose every write goes to a
 * database. `TILLER_PG_RACE_RUNS` sets the number of programs (default 100, two suites of half each).
 */
import { Effect, Layer } from "effect"
import { PgSessionStore } from "../../src/layers/PgSessionStore.js"
import { raceSuite } from "../agent/raceHarness.js"
import { describePostgres, testPostgres } from "../fixtures/postgres.js"

const server = await testPostgres()
const runs = Number(process.env.TILLER_PG_RACE_RUNS ?? 100)

describePostgres(server, "race property", (server) => {
  const layer = Layer.unwrapEffect(
    Effect.map(Effect.promise(() => server.freshUrl()), (url) => PgSessionStore.layer({ url }))
  )
  raceSuite(1, { store: { name: "PostgreSQL", layer, runs } })
  raceSuite(2, { store: { name: "PostgreSQL", layer, runs } })
})
