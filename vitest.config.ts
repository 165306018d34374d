import { defineConfig } from "vitest/config"

// The cluster test SIGKILLs runner processes under load for minutes and measures their failover:
// it runs after every other file, alone, so that its timings are the cluster's and not those of
// the other files' child processes sharing the two cores.
const CLUSTER = "test/cli/ServeCluster.test.ts"

export default defineConfig({
  test: {
    // Two workers on two cores: many files wait on child processes, sockets or SQLite (vitest's
    // default here would be one).
    maxWorkers: 2,
    minWorkers: 1,
    projects: [
      {
        extends: true,
        test: {
          name: "tiller",
          include: ["test/**/*.test.ts"],
          // The replay of real provider recordings needs their folder (not in the repository; see
          // vitest.recordings.config.ts): `npm run test:recordings`.
          exclude: ["test/layers/recordings/**", "**/node_modules/**", CLUSTER],
          testTimeout: 60_000
        }
      },
      {
        extends: true,
        test: {
          name: "cluster",
          include: [CLUSTER],
          testTimeout: 60_000,
          sequence: { groupOrder: 1 }
        }
      }
    ]
  }
})
