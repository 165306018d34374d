import { describe, expect, it } from "@effect/vitest"
import { Either, FastCheck } from "effect"
import { MessageId } from "../../../src/domain/Ids.js"
import type { StreamChunk } from "../../../src/domain/Values.js"
import type { AssemblerState } from "../../../src/internal/loop/Assembler.js"
import * as Assembler from "../../../src/internal/loop/Assembler.js"

const origin = { id: MessageId.make("m1"), provider: "p", model: "m" }
const source = { kind: "model", provider: "p", model: "m" }

const start = (index: number, block: "text" | "reasoning"): StreamChunk => ({ type: "block-start", index, block })
const startCall = (index: number, id: string, name = "t"): StreamChunk => ({
  type: "block-start",
  index,
  block: "tool-call",
  id,
  name
})
const text = (index: number, value: string): StreamChunk => ({ type: "text-delta", index, text: value })
const reasoning = (index: number, value: string): StreamChunk => ({ type: "reasoning-delta", index, text: value })
const args = (index: number, value: string): StreamChunk => ({ type: "tool-call-delta", index, arguments: value })
const end = (index: number): StreamChunk => ({ type: "block-end", index })
const usage = (outputTokens: number): StreamChunk => ({ type: "usage", usage: { inputTokens: 1, outputTokens } })

/** Feeds every chunk; each must be accepted. */
const feedAll = (chunks: ReadonlyArray<StreamChunk>, from: AssemblerState = Assembler.empty()): AssemblerState =>
  chunks.reduce((state, chunk) => {
    const next = Assembler.feed(state, chunk)
    if (Either.isLeft(next)) throw new Error(`rejected ${JSON.stringify(chunk)}: ${next.left}`)
    return next.right
  }, from)

/** Feeds the valid prefix, then returns the reason the last chunk is rejected. */
const rejection = (chunks: ReadonlyArray<StreamChunk>): string => {
  const state = feedAll(chunks.slice(0, -1))
  const result = Assembler.feed(state, chunks[chunks.length - 1]!)
  if (Either.isRight(result)) throw new Error("expected a malformed-order rejection")
  return result.left
}

describe("Assembler: finishMessage", () => {
  it("concatenates deltas per block and keeps the order of block-start", () => {
    const state = feedAll([
      start(0, "reasoning"),
      startCall(1, "c1", "echo"),
      reasoning(0, "thin"),
      args(1, "{\"te"),
      start(2, "text"),
      text(2, "hel"),
      reasoning(0, "king"),
      args(1, "xt\":1}"),
      end(1),
      text(2, "lo"),
      end(2),
      end(0)
    ])
    expect(Assembler.finishMessage(state, origin, "stop")).toStrictEqual({
      message: {
        id: "m1",
        role: "assistant",
        content: [
          { type: "reasoning", text: "thinking" },
          { type: "tool-call", id: "c1", name: "echo", arguments: "{\"text\":1}" },
          { type: "text", text: "hello" }
        ],
        source
      }
    })
  })

  it("a closed index may be reused by a new block, which follows in start order", () => {
    const state = feedAll([start(0, "text"), text(0, "a"), end(0), start(0, "reasoning"), reasoning(0, "b"), end(0)])
    expect(Assembler.finishMessage(state, origin, "stop").message.content).toStrictEqual([
      { type: "text", text: "a" },
      { type: "reasoning", text: "b" }
    ])
  })

  it("on stop drops empty text and reasoning blocks but keeps tool calls, even open or without arguments", () => {
    const state = feedAll([
      start(0, "text"),
      end(0),
      start(1, "reasoning"),
      reasoning(1, ""),
      end(1),
      start(2, "text"),
      text(2, " "),
      end(2),
      startCall(3, "c1"),
      end(3),
      startCall(4, "c2"),
      args(4, "{")
    ])
    expect(Assembler.finishMessage(state, origin, "stop").message.content).toStrictEqual([
      { type: "text", text: " " },
      { type: "tool-call", id: "c1", name: "t", arguments: "" },
      { type: "tool-call", id: "c2", name: "t", arguments: "{" }
    ])
  })

  it("usage and replayState are the last chunks' values; open text blocks count on stop", () => {
    const state = feedAll([
      usage(1),
      { type: "replay-state", state: { v: 1 } },
      start(0, "text"),
      text(0, "open"),
      usage(2),
      { type: "replay-state", state: [null, "x"] }
    ])
    expect(Assembler.finishMessage(state, origin, "stop")).toStrictEqual({
      message: {
        id: "m1",
        role: "assistant",
        content: [{ type: "text", text: "open" }],
        source: { ...source, replayState: [null, "x"] }
      },
      usage: { inputTokens: 1, outputTokens: 2 }
    })
  })

  it("a null replay state is kept (present, not absent)", () => {
    const state = feedAll([{ type: "replay-state", state: null }])
    expect(Assembler.finishMessage(state, origin, "stop").message.source).toStrictEqual({
      ...source,
      replayState: null
    })
  })

  it("without usage or replay-state chunks both are absent", () => {
    const result = Assembler.finishMessage(Assembler.empty(), origin, "stop")
    expect(result).toStrictEqual({ message: { id: "m1", role: "assistant", content: [], source } })
    expect("usage" in result).toBe(false)
    expect("replayState" in result.message.source).toBe(false)
  })

  it("on max-tokens drops every tool-call block and the replay state, keeping text and usage", () => {
    const state = feedAll([
      start(0, "text"),
      text(0, "trunc"),
      end(0),
      startCall(1, "c1"),
      args(1, "{}"),
      end(1),
      startCall(2, "c2"),
      args(2, "{\"te"),
      { type: "replay-state", state: { v: 1 } },
      usage(5)
    ])
    expect(Assembler.finishMessage(state, origin, "max-tokens")).toStrictEqual({
      message: { id: "m1", role: "assistant", content: [{ type: "text", text: "trunc" }], source },
      usage: { inputTokens: 1, outputTokens: 5 }
    })
  })

  it("on max-tokens with only tool calls the content is empty", () => {
    const state = feedAll([startCall(0, "c1"), args(0, "{\"te"), usage(3)])
    expect(Assembler.finishMessage(state, origin, "max-tokens")).toStrictEqual({
      message: { id: "m1", role: "assistant", content: [], source },
      usage: { inputTokens: 1, outputTokens: 3 }
    })
  })

  it("a finish chunk leaves the state unchanged", () => {
    const state = feedAll([start(0, "text"), text(0, "a")])
    expect(Assembler.feed(state, { type: "finish", finish: { kind: "stop" } })).toStrictEqual(Either.right(state))
  })

  it("states are immutable: feeding an earlier state again does not see later chunks", () => {
    const base = feedAll([start(0, "text"), text(0, "a")])
    const left = feedAll([text(0, "b"), end(0)], base)
    const right = feedAll([text(0, "c")], base)
    expect(Assembler.finishMessage(base, origin, "stop").message.content).toStrictEqual([{ type: "text", text: "a" }])
    expect(Assembler.finishMessage(left, origin, "stop").message.content).toStrictEqual([{ type: "text", text: "ab" }])
    expect(Assembler.finishMessage(right, origin, "stop").message.content).toStrictEqual([{ type: "text", text: "ac" }])
    // index 0 is closed in `left` only
    expect(Either.isRight(Assembler.feed(right, text(0, "d")))).toBe(true)
    expect(Either.isLeft(Assembler.feed(left, text(0, "d")))).toBe(true)
  })

  it("text is the concatenation of any split of the deltas", () =>
    FastCheck.assert(
      FastCheck.property(FastCheck.array(FastCheck.string()), (parts) => {
        const state = feedAll([start(0, "text"), ...parts.map((p) => text(0, p)), end(0)])
        const content = Assembler.finishMessage(state, origin, "stop").message.content
        expect(content).toStrictEqual(parts.join("") === "" ? [] : [{ type: "text", text: parts.join("") }])
      })
    ))

  it("a long stream assembles without quadratic work or deep recursion", () => {
    const n = 50_000
    let state = feedAll([start(0, "text")])
    const delta = text(0, "x")
    for (let i = 0; i < n; i++) state = feedAll([delta], state)
    const content = Assembler.finishMessage(state, origin, "stop").message.content
    expect(content[0]?.type === "text" && content[0].text.length).toBe(n)
  })
})

describe("Assembler: malformed order", () => {
  it("a delta for an index that was never opened", () => {
    expect(rejection([text(0, "a")])).toBe("text-delta for unopened index 0")
    expect(rejection([start(0, "reasoning"), reasoning(1, "a")])).toBe("reasoning-delta for unopened index 1")
    expect(rejection([args(2, "{}")])).toBe("tool-call-delta for unopened index 2")
  })

  it("a delta for a closed index", () => {
    expect(rejection([start(0, "text"), text(0, "a"), end(0), text(0, "b")])).toBe("text-delta for unopened index 0")
  })

  it("a block-end for an unopened or already closed index", () => {
    expect(rejection([end(0)])).toBe("block-end for unopened index 0")
    expect(rejection([start(0, "text"), end(0), end(0)])).toBe("block-end for unopened index 0")
  })

  it("a block-start reusing an open index", () => {
    expect(rejection([start(0, "text"), start(0, "text")])).toBe("block-start reuses open index 0")
    expect(rejection([start(0, "text"), end(0), startCall(1, "c1"), startCall(1, "c2")])).toBe(
      "block-start reuses open index 1"
    )
  })

  it("a delta of another block kind", () => {
    expect(rejection([start(0, "text"), reasoning(0, "a")])).toBe("reasoning-delta for text block at index 0")
    expect(rejection([startCall(0, "c1"), text(0, "a")])).toBe("text-delta for tool-call block at index 0")
    expect(rejection([start(0, "reasoning"), args(0, "{}")])).toBe("tool-call-delta for reasoning block at index 0")
  })

  it("a chunk of unknown type", () => {
    expect(rejection([{ type: "bogus" } as unknown as StreamChunk])).toBe("unknown chunk type bogus")
  })
})

describe("Assembler: interruptedPrefix", () => {
  it("keeps text and reasoning blocks, open or closed, with non-whitespace text, in stream order", () => {
    const state = feedAll([
      start(0, "reasoning"),
      reasoning(0, "why"),
      end(0),
      startCall(1, "c1"),
      args(1, "{}"),
      end(1),
      start(2, "text"),
      text(2, " \n\t"),
      end(2),
      start(3, "text"),
      end(3),
      start(4, "text"),
      text(4, "par"),
      text(4, "tial"),
      startCall(5, "c2"),
      args(5, "{\"a"),
      { type: "replay-state", state: { v: 1 } },
      usage(4)
    ])
    expect(Assembler.interruptedPrefix(state, origin)).toStrictEqual({
      message: {
        id: "m1",
        role: "assistant",
        content: [{ type: "reasoning", text: "why" }, { type: "text", text: "partial" }],
        source
      },
      usage: { inputTokens: 1, outputTokens: 4 }
    })
  })

  it("is undefined when nothing but tool calls and whitespace arrived", () => {
    expect(Assembler.interruptedPrefix(Assembler.empty(), origin)).toBeUndefined()
    const state = feedAll([startCall(0, "c1"), args(0, "{}"), end(0), start(1, "text"), text(1, "  "), usage(1)])
    expect(Assembler.interruptedPrefix(state, origin)).toBeUndefined()
  })

  it("has no usage key without a usage chunk", () => {
    const prefix = Assembler.interruptedPrefix(feedAll([start(0, "text"), text(0, "a")]), origin)
    expect(prefix).toStrictEqual({
      message: { id: "m1", role: "assistant", content: [{ type: "text", text: "a" }], source }
    })
    expect(prefix !== undefined && "usage" in prefix).toBe(false)
  })
})
