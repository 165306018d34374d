import { defineConfig } from "vitest/config"

// `npm run test:recordings`: every adapter replayed against the real provider recordings in
// ../shared/provider-recordings (or the folder named by TILLER_PROVIDER_RECORDINGS).
export default defineConfig({
  test: {
    include: ["test/layers/recordings/**/*.test.ts"],
    testTimeout: 60_000,
    maxWorkers: 2,
    minWorkers: 1
  }
})
