import { defineConfig } from "vitest/config"
import * as Recordings from "./test/layers/recordings/Recordings.js"

// `npm run test:recordings`: every adapter replayed against real provider streams (Anthropic
// Messages, OpenAI Responses and Chat Completions SSE bodies published by other projects; see the
// folder's SOURCES.md). They are not in the repository: the suite reads them from the folder named
// by TILLER_PROVIDER_RECORDINGS, else from ../shared/provider-recordings beside the repository.
// Without that folder there is nothing to replay: say so in one line and exit 1 (a green run that
// checked nothing would hide a CI job that lost its recordings).
if (!Recordings.exists()) {
  process.stderr.write(
    `test:recordings: no provider recordings at ${Recordings.folder}; ` +
      "set TILLER_PROVIDER_RECORDINGS to the recordings folder (or place it at ../shared/provider-recordings)\n"
  )
  process.exit(1)
}

export default defineConfig({
  test: {
    include: ["test/layers/recordings/**/*.test.ts"],
    testTimeout: 60_000,
    maxWorkers: 2,
    minWorkers: 1
  }
})
