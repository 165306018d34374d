import { describe, expect, it } from "@effect/vitest"
import { Effect, Either } from "effect"
import { InvalidEvent } from "../../src/domain/Errors.js"
import { REPAIR_ID_PREFIX } from "../../src/domain/Ids.js"
import type { UserMessageInput } from "../../src/domain/Message.js"
import { acceptCallerMessage, newUserMessage, userMessage, validateUserMessage } from "../../src/domain/Message.js"
import type { MessageSource, UserContent } from "../../src/domain/Values.js"

const UUID_V4 = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/

const isDeepFrozen = (value: unknown): boolean => {
  if (typeof value !== "object" || value === null) return true
  if (!Object.isFrozen(value)) return false
  return Object.values(value).every(isDeepFrozen)
}

const thrown = (f: () => unknown): unknown => {
  try {
    f()
  } catch (error) {
    return error
  }
  throw new Error("expected a throw")
}

const expectInvalid = (input: unknown): InvalidEvent => {
  const error = thrown(() => userMessage(input as UserMessageInput))
  expect(error).toBeInstanceOf(InvalidEvent)
  const invalid = error as InvalidEvent
  expect(invalid._tag).toBe("InvalidEvent")
  expect(invalid.type).toBe("user/message")
  expect(invalid.reason.length).toBeGreaterThan(0)
  return invalid
}

describe("userMessage", () => {
  it("builds a text message with the default user source", () => {
    expect(userMessage({ id: "m1", text: "hello" })).toStrictEqual({
      id: "m1",
      role: "user",
      content: [{ type: "text", text: "hello" }],
      source: { kind: "user" }
    })
  })

  it("builds a message from content blocks", () => {
    const content: ReadonlyArray<UserContent> = [
      { type: "text", text: "look" },
      { type: "image", mediaType: "image/png", data: "iVBORw0KGgo=" }
    ]
    expect(userMessage({ id: "m2", content })).toStrictEqual({
      id: "m2",
      role: "user",
      content,
      source: { kind: "user" }
    })
  })

  it("accepts empty content and empty text", () => {
    expect(userMessage({ id: "m", content: [] }).content).toStrictEqual([])
    expect(userMessage({ id: "m", text: "" }).content).toStrictEqual([{ type: "text", text: "" }])
  })

  it("keeps a custom source with its extra JSON fields", () => {
    const source: MessageSource = { kind: "ide", file: "a.ts", line: 3, range: { from: 1, to: [2, null] } }
    expect(userMessage({ id: "m3", text: "fix", source }).source).toStrictEqual(source)
  })

  it("throws InvalidEvent for an empty id", () => {
    expect(expectInvalid({ id: "", text: "x" }).reason).toMatch(/id/)
  })

  it("throws InvalidEvent for both text and content", () => {
    expectInvalid({ id: "m", text: "x", content: [{ type: "text", text: "y" }] })
  })

  it("throws InvalidEvent for neither text nor content", () => {
    expectInvalid({ id: "m" })
  })

  it("throws InvalidEvent for a non-JSON source", () => {
    expect(expectInvalid({ id: "m", text: "x", source: { kind: "ide", line: 3n } }).reason).toContain("source.line")
    expectInvalid({ id: "m", text: "x", source: { kind: "ide", at: new Date(0) } })
    expectInvalid({ id: "m", text: "x", source: { kind: "ide", n: Number.NaN } })
  })

  it("throws InvalidEvent for a source with an empty or missing kind", () => {
    expectInvalid({ id: "m", text: "x", source: { kind: "" } })
    expectInvalid({ id: "m", text: "x", source: { file: "a.ts" } })
  })

  it("throws InvalidEvent for malformed content blocks", () => {
    expectInvalid({ id: "m", content: [{ type: "reasoning", text: "x" }] })
    expectInvalid({ id: "m", content: [{ type: "text", text: "x", extra: 1 }] })
    expectInvalid({ id: "m", content: [{ type: "image", mediaType: "image/png" }] })
  })

  it("returns a deep-frozen value", () => {
    const message = userMessage({
      id: "m",
      content: [{ type: "text", text: "a" }],
      source: { kind: "ide", pos: { line: 1, cols: [1, 2] } }
    })
    expect(isDeepFrozen(message)).toBe(true)
    expect(() => {
      ;(message.content as Array<UserContent>).push({ type: "text", text: "b" })
    }).toThrow(TypeError)
  })

  it("is not affected by mutating the input afterwards", () => {
    const block = { type: "text" as const, text: "original" }
    const content = [block]
    const pos = { line: 1, cols: [1, 2] }
    const source = { kind: "ide", pos }
    const message = userMessage({ id: "m", content, source })
    block.text = "changed"
    content.push({ type: "text", text: "more" })
    pos.line = 99
    pos.cols.push(3)
    source.kind = "other"
    expect(message).toStrictEqual({
      id: "m",
      role: "user",
      content: [{ type: "text", text: "original" }],
      source: { kind: "ide", pos: { line: 1, cols: [1, 2] } }
    })
    expect(Object.isFrozen(content)).toBe(false)
    expect(Object.isFrozen(source)).toBe(false)
  })
})

describe("newUserMessage", () => {
  it.effect("mints distinct UUID v4 ids", () =>
    Effect.gen(function*() {
      const messages = yield* Effect.all(Array.from({ length: 50 }, () => newUserMessage({ text: "hi" })))
      for (const message of messages) {
        expect(message.id).toMatch(UUID_V4)
        expect(message.content).toStrictEqual([{ type: "text", text: "hi" }])
        expect(Object.isFrozen(message)).toBe(true)
      }
      expect(new Set(messages.map((m) => m.id)).size).toBe(messages.length)
    }))

  it.effect("mints a fresh id each time the effect runs", () =>
    Effect.gen(function*() {
      const make = newUserMessage({ text: "x", source: { kind: "cli" } })
      const a = yield* make
      const b = yield* make
      expect(a.id).not.toBe(b.id)
      expect(a.source).toStrictEqual({ kind: "cli" })
    }))
})

describe("validateUserMessage", () => {
  const valid = { id: "m", role: "user", content: [{ type: "text", text: "x" }], source: { kind: "user" } }

  it("returns a frozen copy of a valid message", () => {
    const result = validateUserMessage(valid)
    expect(Either.isRight(result)).toBe(true)
    if (Either.isRight(result)) {
      expect(result.right).toStrictEqual(valid)
      expect(result.right).not.toBe(valid)
      expect(isDeepFrozen(result.right)).toBe(true)
    }
  })

  it("returns a message it returned before as it is, and copies an equal message it did not", () => {
    const first = Either.getOrThrow(validateUserMessage(valid))
    expect(Either.getOrThrow(validateUserMessage(first))).toBe(first)
    const built = userMessage({ id: "b", text: "y" })
    expect(Either.getOrThrow(acceptCallerMessage(built))).toBe(built)
    const equal = Either.getOrThrow(validateUserMessage(structuredClone(first)))
    expect(equal).not.toBe(first)
    expect(equal).toStrictEqual(first)
    // A frozen message it never returned is still checked.
    const frozenInvalid = Object.freeze({ ...valid, id: "" })
    expect(Either.isLeft(validateUserMessage(frozenInvalid))).toBe(true)
  })

  it("returns a readable reason for an invalid message", () => {
    const result = validateUserMessage({ ...valid, role: "assistant" })
    expect(Either.isLeft(result) && result.left.length > 0).toBe(true)
    const nonJson = validateUserMessage({ ...valid, source: { kind: "user", f: () => 1 } })
    expect(Either.isLeft(nonJson) && nonJson.left).toMatch(/^message\.source\.f:/)
  })
})

describe("acceptCallerMessage", () => {
  const valid = { id: "m", role: "user", content: [{ type: "text", text: "x" }], source: { kind: "user" } }

  it("accepts a well-formed message", () => {
    const result = acceptCallerMessage(valid)
    expect(Either.isRight(result) && result.right).toStrictEqual(valid)
  })

  it("accepts ids that merely contain the reserved prefix", () => {
    expect(Either.isRight(acceptCallerMessage({ ...valid, id: `x-${REPAIR_ID_PREFIX}1` }))).toBe(true)
  })

  it("refuses ids starting with the reserved repair prefix", () => {
    for (const id of [`${REPAIR_ID_PREFIX}call_1-4`, REPAIR_ID_PREFIX]) {
      const result = acceptCallerMessage({ ...valid, id })
      expect(Either.isLeft(result)).toBe(true)
      if (Either.isLeft(result)) {
        expect(result.left._tag).toBe("InvalidEvent")
        expect(result.left.reason).toContain("reserved")
      }
    }
  })

  it("refuses extra keys on the message", () => {
    const result = acceptCallerMessage({ ...valid, priority: 1 })
    expect(Either.isLeft(result)).toBe(true)
    if (Either.isLeft(result)) {
      expect(result.left._tag).toBe("InvalidEvent")
      expect(result.left.reason).toContain("priority")
    }
  })

  it("refuses a missing field and a non-JSON value", () => {
    const { source: _, ...withoutSource } = valid
    expect(Either.isLeft(acceptCallerMessage(withoutSource))).toBe(true)
    expect(Either.isLeft(acceptCallerMessage({ ...valid, content: [{ type: "text", text: "x" }, undefined] }))).toBe(true)
    expect(Either.isLeft(acceptCallerMessage(null))).toBe(true)
  })
})
