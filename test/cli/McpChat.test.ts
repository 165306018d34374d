import { describe, expect, it } from "@effect/vitest"
import { resourceMentionsIn } from "../../src/cli/McpChat.js"

describe("@SERVER:URI mentions", () => {
  it("name configured servers only, each once, without trailing punctuation", () => {
    const servers = new Set(["everything", "files"])
    expect(resourceMentionsIn(
      "see @everything:demo://resource/dynamic/text/1, and @files:file:///tmp/a.txt. Not a@everything:x or @other:y; " +
        "again @everything:demo://resource/dynamic/text/1",
      servers
    )).toEqual([
      { server: "everything", uri: "demo://resource/dynamic/text/1" },
      { server: "files", uri: "file:///tmp/a.txt" }
    ])
    expect(resourceMentionsIn("@s-123 is a session", servers)).toEqual([])
  })
})
