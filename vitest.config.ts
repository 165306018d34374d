import { defineConfig } from "vitest/config"

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    // The replay of real provider recordings needs their folder (not in the repository; see
    // vitest.recordings.config.ts): `npm run test:recordings`.
    exclude: ["test/layers/recordings/**", "**/node_modules/**"],
    testTimeout: 60_000,
    // Two workers on two cores: many files wait on child processes, sockets or SQLite (vitest's
    // default here would be one).
    maxWorkers: 2,
    minWorkers: 1
  }
})
