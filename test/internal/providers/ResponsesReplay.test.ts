import { describe, expect, it } from "@effect/vitest"
import * as ResponsesReplay from "../../../src/internal/providers/ResponsesReplay.js"

describe("ResponsesReplay", () => {
  it("replayItems reads this adapter's key only: ids dropped, a missing summary empty, unusable entries skipped", () => {
    expect(ResponsesReplay.replayItems({ anthropic: { content: [] } })).toBeUndefined()
    expect(ResponsesReplay.replayItems(undefined)).toBeUndefined()
    expect(ResponsesReplay.replayItems({ openai: { items: "no" } })).toBeUndefined()
    expect(ResponsesReplay.replayItems({
      openai: {
        items: [
          { type: "reasoning", id: "rs_1", encrypted_content: "enc-1" },
          { type: "reasoning", id: "rs_2", summary: [] },
          { type: "message", id: "msg_1" },
          { type: "function_call" },
          { type: "function_call", call_id: "call_1", arguments: "{}" },
          { type: "web_search_call", id: "ws_1" },
          "junk"
        ]
      }
    })).toStrictEqual([
      { type: "reasoning", summary: [], encrypted_content: "enc-1" },
      { type: "message" },
      { type: "function_call", call_id: "call_1" }
    ])
  })
})
