import { Effect, Layer } from "effect"
import { PgSessionStore } from "../../src/layers/PgSessionStore.js"
import { sessionStoreContract } from "../contracts/SessionStoreContract.js"
import { describePostgres, testPostgres } from "../fixtures/postgres.js"

const server = await testPostgres()

describePostgres(server, "PgSessionStore", (server) => {
  // Every contract test gets a database of its own.
  sessionStoreContract(
    "postgres",
    Layer.unwrapEffect(Effect.map(Effect.promise(() => server.freshUrl()), (url) => PgSessionStore.layer({ url })))
  )

})
