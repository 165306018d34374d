import { describe, expect, it } from "@effect/vitest"
import * as fs from "node:fs"
import * as path from "node:path"
import * as Recordings from "./Recordings.js"
import { DIALECTS, replay } from "./Replay.js"

// `npm run test:recordings`: every recording in the recordings folder (TILLER_PROVIDER_RECORDINGS,
// else shared/provider-recordings beside the repository; see Recordings.ts) replayed through a local
// server into its adapter, with a real turn.
// Real sockets, so the live clock.

if (!Recordings.exists()) {
  describe("provider recordings", () => {
    it("the recordings folder exists", () => {
      throw new Error(
        `no provider recordings at ${Recordings.folder}: set TILLER_PROVIDER_RECORDINGS to the folder, ` +
          "or place it at ../shared/provider-recordings beside the repository"
      )
    })
  })
} else {
  const files = Recordings.listFiles()
  const recordings = files.filter((name) => !Recordings.isDocumentation(name))

  describe("provider recordings: coverage", () => {
    it("the folder holds recordings of every API family", () => {
      expect(Object.keys(DIALECTS).filter((family) => !recordings.some((name) => name.startsWith(`${family}/`))))
        .toEqual([])
    })

    it("every file is a recording a scenario covers: its family is known and what it must become is derived", () => {
      const uncovered: Array<string> = []
      for (const name of recordings) {
        try {
          const recording = Recordings.load(name)
          for (const [n, response] of recording.responses.entries()) {
            const expected = DIALECTS[recording.family].expect(response)
            // A response that yields nothing this suite checks was not understood.
            if (
              expected.text === "" && expected.reasoning === "" && expected.calls.length === 0 &&
              expected.finish.kind === "stop"
            ) {
              uncovered.push(`${name}: response ${n + 1} yields no text, reasoning, tool call or failure`)
            }
          }
        } catch (error) {
          uncovered.push(`${name}: ${error instanceof Error ? error.message : String(error)}`)
        }
      }
      expect(uncovered).toEqual([])
    })

    it("SOURCES.md names every recording", () => {
      const sources = path.join(Recordings.folder, "SOURCES.md")
      expect(fs.existsSync(sources), `${sources} is missing`).toBe(true)
      const text = fs.readFileSync(sources, "utf8")
      expect(recordings.filter((name) => !text.includes(name))).toEqual([])
    })
  })

  const hasCut = (name: string): boolean => {
    try {
      return Recordings.truncated(Recordings.load(name)) !== undefined
    } catch {
      return false
    }
  }

  for (const name of recordings) {
    describe(name, () => {
      it.scopedLive("a real turn: the logged events and every next request match the recording", () =>
        replay(Recordings.load(name)))
      // A recording whose first response ends with an error, or has no finish event, has no cut variant.
      if (hasCut(name)) {
        it.scopedLive("cut before its finish event: a retryable NETWORK failure, the text so far kept", () => {
          const recording = Recordings.load(name)
          const cut = Recordings.truncated(recording)!
          return replay(recording, { bodies: [cut.body], expected: [DIALECTS[recording.family].expect(cut)] })
        })
      }
    })
  }
}
