import { describe, expect, it } from "@effect/vitest"
import { Either, Schema } from "effect"
import { acceptsUserMessageJson } from "../../src/domain/EventDecoder.js"
import { losslessDecoder } from "../../src/domain/Json.js"
import { validateUserMessage } from "../../src/domain/Message.js"
import { UserMessage } from "../../src/domain/Values.js"

// The Schema alone, as validateUserMessage decoded before it had a faster check.
const bySchema = losslessDecoder(UserMessage, "message")

const valid = {
  id: "m-1",
  role: "user",
  content: [{ type: "text", text: "hi" }, { type: "image", mediaType: "image/png", data: "AAAA" }],
  source: { kind: "tool", callId: "c1", nested: { a: [1, "x", null, true] } }
}

// Every single-step change of a valid message: each field dropped, replaced or grown.
const junk: ReadonlyArray<unknown> = [
  undefined,
  null,
  0,
  -0,
  1.5,
  Infinity,
  "",
  "x",
  true,
  [],
  {},
  [1],
  { type: "text" },
  new Date(0),
  Symbol.for("s")
]
const mutants = (): Array<unknown> => {
  const out: Array<unknown> = []
  const paths: ReadonlyArray<ReadonlyArray<string | number>> = [
    [],
    ["id"],
    ["role"],
    ["content"],
    ["content", 0],
    ["content", 0, "type"],
    ["content", 0, "text"],
    ["content", 1],
    ["content", 1, "mediaType"],
    ["content", 1, "data"],
    ["source"],
    ["source", "kind"],
    ["source", "callId"],
    ["source", "nested"],
    ["source", "nested", "a"],
    ["source", "nested", "a", 0]
  ]
  const at = (root: any, path: ReadonlyArray<string | number>, f: (parent: any, key: string | number) => void) => {
    const copy = structuredClone(root)
    let node = copy
    for (const key of path.slice(0, -1)) node = node[key]
    f(node, path[path.length - 1]!)
    return copy
  }
  for (const path of paths) {
    if (path.length === 0) {
      out.push(...junk)
      continue
    }
    out.push(at(valid, path, (p, k) => {
      if (Array.isArray(p)) p.splice(k as number, 1)
      else delete p[k]
    }))
    for (const value of junk) out.push(at(valid, path, (p, k) => (p[k] = value)))
    out.push(at(valid, path, (p) => {
      if (!Array.isArray(p)) p.extra = 1
    }))
  }
  out.push({ ...valid, role: "assistant" }, { ...valid, id: 7 }, { ...valid, source: { kind: "" } })
  out.push(Object.assign(Object.create(null), valid))
  // Own keys that are not enumerable: invisible to `for...in`, counted by the Schema.
  const hidden = (target: object, key: string) => Object.defineProperty(target, key, { value: "x", enumerable: false })
  out.push(hidden(structuredClone(valid), "extra"), hidden(structuredClone(valid), "id"))
  const hiddenDeep = structuredClone(valid)
  hidden(hiddenDeep.content[0]!, "extra")
  hidden(hiddenDeep.source, "note")
  out.push(hiddenDeep)
  const hiddenIndex = structuredClone(valid)
  hidden(hiddenIndex.content, "extra")
  out.push(hiddenIndex)
  return out
}

describe("validateUserMessage", () => {
  it("accepts and rejects exactly as the Schema does, with its reasons, returning an equal frozen copy", () => {
    const cases = [valid, ...mutants()]
    let accepted = 0
    for (const input of cases) {
      const fast = validateUserMessage(input)
      const slow = bySchema(input)
      expect(Either.isRight(fast)).toBe(Either.isRight(slow))
      if (Either.isLeft(fast) && Either.isLeft(slow)) expect(fast.left).toBe(slow.left)
      if (Either.isRight(fast) && Either.isRight(slow)) {
        accepted++
        expect(fast.right).toEqual(slow.right)
        expect(Object.isFrozen(fast.right) && Object.isFrozen(fast.right.content[0])).toBe(true)
        expect(fast.right).not.toBe(input)
        expect(Schema.is(UserMessage)(fast.right)).toBe(true)
      }
    }
    expect(cases.length).toBeGreaterThan(250)
    expect(accepted).toBeGreaterThan(3)
  })

  it("takes the fast check for ordinary messages (the Schema is not consulted)", () => {
    expect(acceptsUserMessageJson(valid)).toBe(true)
    expect(acceptsUserMessageJson({ id: "m", role: "user", content: [], source: { kind: "prompt" } })).toBe(true)
    expect(acceptsUserMessageJson({ ...valid, extra: 1 })).toBe(false)
  })
})
