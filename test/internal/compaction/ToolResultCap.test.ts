/**
 * The tool-result cap's pure part (issue 28 item 2).
 */
import { describe, expect, it } from "@effect/vitest"
import { CAP_META_KEY, capToolOutput } from "../../../src/internal/compaction/ToolResultCap.js"
import type { NormalizedToolOutput } from "../../../src/services/Tools.js"

const output = (
  content: NormalizedToolOutput["content"],
  meta?: NormalizedToolOutput["meta"]
): NormalizedToolOutput => ({
  content,
  isError: false,
  additionalContexts: [],
  concludesTurn: false,
  ...(meta === undefined ? {} : { meta })
})

describe("capToolOutput", () => {
  it("an output that fits is returned as it is", () => {
    const small = output([{ type: "text", text: "abc" }])
    expect(capToolOutput(small, 3, "c")).toBe(small)
  })

  it("text blocks are joined and cut to 60% head and 40% tail; images keep their places; the full text goes to meta", () => {
    const image = { type: "image" as const, mediaType: "image/png", data: "AAAA" }
    const capped = capToolOutput(
      output([{ type: "text", text: "a".repeat(600) }, image, { type: "text", text: "b".repeat(600) }]),
      100,
      "c9"
    )
    expect(capped.content.length).toBe(2)
    expect(capped.content[1]).toEqual(image)
    const text = (capped.content[0] as { readonly text: string }).text
    expect(text.startsWith("a".repeat(60) + "\n\n[… 1,101 of 1,201 characters cut")).toBe(true)
    expect(text.endsWith("]\n\n" + "b".repeat(40))).toBe(true)
    expect(capped.meta).toEqual({
      [CAP_META_KEY]: { characters: 1_201, head: 60, tail: 40, text: "a".repeat(600) + "\n" + "b".repeat(600) }
    })
  })

  it("a tool's object meta keeps its keys; any other meta is kept under `meta`", () => {
    const big = [{ type: "text" as const, text: "z".repeat(50) }]
    expect(capToolOutput(output(big, { page: 2 }), 10, "c").meta).toMatchObject({ page: 2 })
    expect(capToolOutput(output(big, [1, 2]), 10, "c").meta).toMatchObject({ meta: [1, 2] })
  })
})
