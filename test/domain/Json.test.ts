import { describe, expect, it } from "@effect/vitest"
import { Either, Schema } from "effect"
import { freezeCopy, jsonEquals, jsonProblem, JsonValue } from "../../src/domain/Json.js"

class Point {
  constructor(readonly x: number, readonly y: number) {}
}

const isDeepFrozen = (value: unknown): boolean => {
  if (typeof value !== "object" || value === null) return true
  if (!Object.isFrozen(value)) return false
  return Object.values(value).every(isDeepFrozen)
}

describe("jsonProblem", () => {
  it("accepts lossless JSON values", () => {
    const accepted: ReadonlyArray<unknown> = [
      null,
      true,
      false,
      0,
      1.5,
      -42,
      Number.MAX_SAFE_INTEGER,
      "",
      "text",
      [],
      {},
      [1, "a", null, [true], { b: [] }],
      { a: { b: { c: [1, 2, { d: null }] } }, "key with spaces": "", "": 0 },
      Object.assign(Object.create(null) as object, { a: 1 }),
      JSON.parse("{\"__proto__\": {\"a\": 1}}")
    ]
    for (const value of accepted) expect(jsonProblem(value), JSON.stringify(value)).toBeUndefined()
  })

  it("accepts a shared (acyclic) reference that appears twice", () => {
    const shared = { a: 1 }
    expect(jsonProblem([shared, shared, { again: shared }])).toBeUndefined()
    expect(jsonProblem({ x: shared, y: [shared] })).toBeUndefined()
  })

  const sparse: Array<number> = [1]
  sparse[2] = 3
  const cyclicObject: Record<string, unknown> = { a: 1 }
  cyclicObject.self = cyclicObject
  const cyclicArray: Array<unknown> = [1]
  cyclicArray.push({ back: cyclicArray })
  const nestedCycle: Record<string, unknown> = {}
  nestedCycle.inner = { list: [0, nestedCycle] }

  const hiddenId = Object.defineProperty({ text: "x" }, "id", { value: "m", enumerable: false })

  const rejected: ReadonlyArray<readonly [string, unknown, string, RegExp]> = [
    ["undefined", { a: { b: undefined } }, "$.a.b", /undefined/],
    ["a function", { f: () => 1 }, "$.f", /function/],
    ["a symbol", [Symbol("s")], "$[0]", /symbol/],
    ["a BigInt", { n: 1n }, "$.n", /BigInt/],
    ["NaN", { n: Number.NaN }, "$.n", /NaN/],
    ["+Infinity", [Number.POSITIVE_INFINITY], "$[0]", /Infinity/],
    ["-Infinity", { n: Number.NEGATIVE_INFINITY }, "$.n", /-Infinity/],
    ["-0", { z: -0 }, "$.z", /-0/],
    ["a sparse array", { list: sparse }, "$.list[1]", /sparse/],
    ["a Date", { when: new Date(0) }, "$.when", /Date/],
    ["a Map", { m: new Map() }, "$.m", /Map/],
    ["a Set", [new Set([1])], "$[0]", /Set/],
    ["a class instance", { p: new Point(1, 2) }, "$.p", /Point/],
    ["a boxed primitive", { s: new String("x") }, "$.s", /String/],
    ["a symbol key", { [Symbol("k")]: 1 }, "$", /symbol/],
    ["a non-enumerable property", { m: hiddenId }, "$.m.id", /non-enumerable/],
    ["an object cycle", cyclicObject, "$.self", /cycl/],
    ["a cycle nested in an array", cyclicArray, "$[1].back", /cycl/],
    ["a cycle through an array inside objects", nestedCycle, "$.inner.list[1]", /cycl/]
  ]

  for (const [name, value, path, reason] of rejected) {
    it(`rejects ${name} and names the path`, () => {
      const problem = jsonProblem(value)
      expect(problem).toBeTypeOf("string")
      expect(problem!.startsWith(`${path}:`)).toBe(true)
      expect(problem).toMatch(reason)
    })
  }

  it("rejects non-JSON values at the top level", () => {
    expect(jsonProblem(undefined)).toMatch(/^\$: undefined/)
    expect(jsonProblem(Number.NaN)).toMatch(/^\$: NaN/)
    expect(jsonProblem(-0)).toMatch(/^\$: -0/)
    expect(jsonProblem(() => 0)).toMatch(/^\$: .*function/)
  })

  it("uses the given root path", () => {
    expect(jsonProblem({ a: 1n }, "message")).toMatch(/^message\.a:/)
  })
})

describe("JsonValue", () => {
  it("decodes JSON and fails with the jsonProblem reason", () => {
    const decode = Schema.decodeUnknownEither(JsonValue)
    expect(Either.isRight(decode({ a: [1, null] }))).toBe(true)
    const result = decode({ a: [1, Number.NaN] })
    expect(Either.isLeft(result)).toBe(true)
    if (Either.isLeft(result)) expect(result.left.message).toContain("$.a[1]")
  })
})

describe("freezeCopy", () => {
  it("returns primitives unchanged", () => {
    expect(freezeCopy(1)).toBe(1)
    expect(freezeCopy("s")).toBe("s")
    expect(freezeCopy(null)).toBe(null)
    expect(freezeCopy(true)).toBe(true)
  })

  it("produces an equal, deep-frozen copy that shares no structure with the source", () => {
    const source = { a: [1, { b: "x", c: [null, { d: true }] }], e: { f: { g: 2 } } }
    const copy = freezeCopy(source)
    expect(copy).toStrictEqual(source)
    expect(copy).not.toBe(source)
    expect(copy.a).not.toBe(source.a)
    expect(copy.a[1]).not.toBe(source.a[1])
    expect(copy.e.f).not.toBe(source.e.f)
    expect(isDeepFrozen(copy)).toBe(true)
    expect(Object.isFrozen(source)).toBe(false)
    expect(Object.isFrozen(source.e.f)).toBe(false)
  })

  it("is not affected by later mutation of the source", () => {
    const inner = { b: [1, 2] }
    const source: { a: typeof inner; list: Array<unknown>; k?: string } = { a: inner, list: [inner] }
    const copy = freezeCopy(source)
    inner.b.push(3)
    inner.b[0] = 99
    source.list.push("more")
    source.k = "added"
    expect(copy).toStrictEqual({ a: { b: [1, 2] }, list: [{ b: [1, 2] }] })
  })

  it("refuses mutation of the copy", () => {
    const copy = freezeCopy({ a: [1], o: { x: 1 } })
    expect(() => {
      ;(copy.a as Array<number>).push(2)
    }).toThrow(TypeError)
    expect(() => {
      ;(copy.o as { x: number }).x = 2
    }).toThrow(TypeError)
  })

  it("keeps an own __proto__ key as data, not as the prototype", () => {
    const source = JSON.parse("{\"__proto__\": {\"polluted\": 1}, \"b\": 2}") as Record<string, unknown>
    const copy = freezeCopy(source)
    expect(Object.getPrototypeOf(copy)).toBe(Object.prototype)
    expect(Object.keys(copy)).toStrictEqual(["__proto__", "b"])
    expect((copy as Record<string, unknown>).polluted).toBeUndefined()
    expect(JSON.stringify(copy)).toBe(JSON.stringify(source))
    expect(jsonProblem(copy)).toBeUndefined()
    expect(jsonEquals(copy, source)).toBe(true)
  })
})

describe("jsonEquals", () => {
  it("compares structurally", () => {
    expect(jsonEquals({ a: [1, { b: null }] }, { a: [1, { b: null }] })).toBe(true)
    expect(jsonEquals({ a: 1, b: 2 }, { b: 2, a: 1 })).toBe(true)
    expect(jsonEquals({ a: 1 }, { a: 1, b: 2 })).toBe(false)
    expect(jsonEquals({ a: 1, b: 2 }, { a: 1, c: 2 })).toBe(false)
    expect(jsonEquals([1, 2], [2, 1])).toBe(false)
    expect(jsonEquals([1], { 0: 1 })).toBe(false)
    expect(jsonEquals({ 0: 1 }, [1])).toBe(false)
    expect(jsonEquals(null, {})).toBe(false)
    expect(jsonEquals("1", 1)).toBe(false)
  })
})
