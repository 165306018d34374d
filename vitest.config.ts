import { defineConfig } from "vitest/config"

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    testTimeout: 60_000,
    // Two workers on two cores: many files wait on child processes, sockets or SQLite (vitest's
    // default here would be one).
    maxWorkers: 2,
    minWorkers: 1
  }
})
