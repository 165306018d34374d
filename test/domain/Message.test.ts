import { describe, expect, it } from "@effect/vitest"
import { Effect, Either } from "effect"
import { InvalidEvent } from "../../src/domain/Errors.js"
import { REPAIR_ID_PREFIX } from "../../src/domain/Ids.js"
import { MAX_JSON_DEPTH, MAX_JSON_SIZE } from "../../src/domain/Json.js"
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
    expect(Either.isLeft(acceptCallerMessage({ ...valid, content: [{ type: "text", text: "x" }, undefined] }))).toBe(
      true
    )
    expect(Either.isLeft(acceptCallerMessage(null))).toBe(true)
  })
})

/** An object nested `levels` deep (the outermost object is level 1). */
const nested = (levels: number): unknown => {
  let value: unknown = 1
  for (let i = 0; i < levels; i++) value = { a: value }
  return value
}

const reasonOf = (result: Either.Either<unknown, InvalidEvent>): string => {
  if (Either.isRight(result)) throw new Error("expected a refusal")
  expect(result.left).toBeInstanceOf(InvalidEvent)
  expect(result.left.type).toBe("user/message")
  return result.left.reason
}

describe("messages past the limits or unreadable", () => {
  const base = { id: "m", role: "user", content: [{ type: "text", text: "hi" }] }

  it("a message nested MAX_JSON_DEPTH levels is accepted; one level more is InvalidEvent naming the limit", () => {
    // The message is level 1 and its source level 2: the source's field holds the other 254.
    const atLimit = { ...base, source: { kind: "user", a: nested(MAX_JSON_DEPTH - 2) } }
    expect(Either.isRight(acceptCallerMessage(atLimit))).toBe(true)
    const past = { ...base, source: { kind: "user", a: nested(MAX_JSON_DEPTH - 1) } }
    expect(reasonOf(acceptCallerMessage(past))).toBe("message.source.a.a.a.a.a.a.a….a.a: nested deeper than 256 levels")
  })

  it("a source or content nested 10,000 and 100,000 levels is InvalidEvent from every constructor, never a defect", () => {
    for (const levels of [10_000, 100_000]) {
      const source = { kind: "user", a: nested(levels) }
      expect(reasonOf(acceptCallerMessage({ ...base, source }))).toMatch(
        /^message\.source\.a.*: nested deeper than 256 levels$/
      )
      expect(Either.isLeft(validateUserMessage({ ...base, source }))).toBe(true)
      expect(expectInvalid({ id: "m", text: "hi", source }).reason).toMatch(/nested deeper than 256 levels$/)
      const content = [{ type: "text", text: "hi", extra: nested(levels) }]
      expect(reasonOf(acceptCallerMessage({ ...base, content, source: { kind: "user" } }))).toMatch(
        /^message\.content\[0\]\.extra\.a.*: nested deeper than 256 levels$/
      )
    }
  })

  it("a throwing getter, a hostile Proxy and a cycle are InvalidEvent, never a throw", () => {
    const getter = {
      ...base,
      source: {
        kind: "user",
        get bad(): unknown {
          throw new Error("boom")
        }
      }
    }
    expect(reasonOf(acceptCallerMessage(getter))).toBe("message.source.bad: cannot be read (boom)")
    const trap = () => {
      throw new Error("trap")
    }
    const proxy = new Proxy({}, { get: trap, ownKeys: trap, getPrototypeOf: trap, has: trap })
    expect(reasonOf(acceptCallerMessage(proxy))).toBe("message: cannot be read (trap)")
    expect(reasonOf(acceptCallerMessage({ ...base, source: { kind: "user", p: proxy } }))).toBe(
      "message.source.p: cannot be read (trap)"
    )
    expect(reasonOf(acceptCallerMessage({ ...base, content: proxy, source: { kind: "user" } }))).toBe(
      "message.content: cannot be read (trap)"
    )
    const cyclic: Record<string, unknown> = { kind: "user" }
    cyclic.self = cyclic
    expect(reasonOf(acceptCallerMessage({ ...base, source: cyclic }))).toBe("message.source.self: cyclic value")
    // userMessage's own input: read once, a throwing field is InvalidEvent too.
    expect(expectInvalid(proxy).reason).toBe("input: cannot be read (trap)")
    expect(expectInvalid({ id: "m", text: "hi", source: getter.source }).reason).toBe(
      "message.source.bad: cannot be read (boom)"
    )
  })

  it("a message is validated as the copy read once: a getter cannot answer differently after the check", () => {
    let reads = 0
    const source = {
      kind: "user",
      get tag(): unknown {
        reads++
        return reads === 1 ? "ok" : nested(100_000)
      }
    }
    const accepted = acceptCallerMessage({ ...base, source })
    expect(reads).toBe(1)
    expect(accepted).toStrictEqual(Either.right({ ...base, source: { kind: "user", tag: "ok" } }))
    if (Either.isRight(accepted)) expect(isDeepFrozen(accepted.right)).toBe(true)
  })
})

describe("messages past the size limit", () => {
  it("a text whose JSON would pass what a row can hold is InvalidEvent naming the limit, from every constructor", () => {
    // 100 million control characters: 600 million characters of JSON, past the engine's longest string.
    const text = "\u0001".repeat(100_000_000)
    expect(text.length).toBeGreaterThan(MAX_JSON_SIZE)
    const candidate = { id: "big", role: "user", content: [{ type: "text", text }], source: { kind: "user" } }
    expect(reasonOf(acceptCallerMessage(candidate))).toBe("message: larger than 64 MiB of JSON text")
    expect(expectInvalid({ id: "big", text }).reason).toBe("message: larger than 64 MiB of JSON text")
  })
})
