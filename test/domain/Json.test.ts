import { describe, expect, it } from "@effect/vitest"
import { Either, Schema } from "effect"
import {
  deepFreeze,
  freezeCopy,
  jsonEquals,
  jsonProblem,
  jsonSize,
  JsonValue,
  losslessDecoder,
  MAX_JSON_DEPTH,
  MAX_JSON_SIZE,
  snapshotJson
} from "../../src/domain/Json.js"

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

/** An object nested `levels` deep (the outermost object is level 1): `{a: {a: ... {a: 1}}}`. */
const nested = (levels: number): unknown => {
  let value: unknown = 1
  for (let i = 0; i < levels; i++) value = { a: value }
  return value
}

/** An array nested `levels` deep: `[[...[1]]]`. */
const nestedArray = (levels: number): unknown => {
  let value: unknown = 1
  for (let i = 0; i < levels; i++) value = [value]
  return value
}

describe("depth limit (MAX_JSON_DEPTH)", () => {
  it("accepts a value nested exactly MAX_JSON_DEPTH levels and refuses one level more, naming the limit and the path", () => {
    expect(MAX_JSON_DEPTH).toBe(256)
    expect(jsonProblem(nested(MAX_JSON_DEPTH))).toBeUndefined()
    expect(jsonProblem(nestedArray(MAX_JSON_DEPTH))).toBeUndefined()
    expect(jsonProblem(nested(MAX_JSON_DEPTH + 1), "source")).toBe(
      "source.a.a.a.a.a.a.a.a….a.a: nested deeper than 256 levels"
    )
    expect(jsonProblem(nestedArray(MAX_JSON_DEPTH + 1), "x")).toBe(
      "x[0][0][0][0][0][0][0][0]…[0][0]: nested deeper than 256 levels"
    )
    expect(Either.isRight(Schema.decodeUnknownEither(JsonValue)(nested(MAX_JSON_DEPTH)))).toBe(true)
    expect(Either.isLeft(Schema.decodeUnknownEither(JsonValue)(nested(MAX_JSON_DEPTH + 1)))).toBe(true)
  })

  it("refuses values nested 10,000 and 100,000 levels with a reason, never a stack overflow", () => {
    for (const levels of [10_000, 100_000]) {
      for (const value of [nested(levels), nestedArray(levels)]) {
        expect(jsonProblem(value, "v")).toMatch(/^v(\.a|\[0\]){8}….*: nested deeper than 256 levels$/)
        const copied = snapshotJson(value, "v")
        expect(Either.isLeft(copied) && copied.left).toMatch(/nested deeper than 256 levels$/)
        expect(Either.isLeft(Schema.decodeUnknownEither(JsonValue)(value))).toBe(true)
      }
    }
  })

  it("a whole stored event (path \"event\") may hold a field of MAX_JSON_DEPTH levels below its envelope", () => {
    const event = { type: "x/y", seq: 0, time: 0, data: { inserted: [{ source: { a: nested(MAX_JSON_DEPTH) } }] } }
    expect(jsonProblem(event, "event")).toBeUndefined()
    expect(jsonProblem({ data: nested(100_000) }, "event")).toMatch(/^event\.data\.a.*: nested deeper than 256 levels$/)
  })

  it("deepFreeze freezes a value 100,000 levels deep without recursion", () => {
    const value = nested(100_000) as { a: unknown }
    expect(deepFreeze(value)).toBe(value)
    let node: unknown = value
    let frozen = 0
    while (typeof node === "object" && node !== null) {
      if (Object.isFrozen(node)) frozen++
      node = (node as { a: unknown }).a
    }
    expect(frozen).toBe(100_000)
  })
})

describe("hostile values", () => {
  const throwingGetter = () => ({
    kind: "user",
    get bad(): unknown {
      throw new Error("boom")
    }
  })
  const hostileProxy = () =>
    new Proxy({}, {
      get: () => {
        throw new Error("trap")
      },
      ownKeys: () => {
        throw new Error("trap")
      },
      getPrototypeOf: () => {
        throw new Error("trap")
      }
    })

  it("a throwing getter or Proxy trap is a reason naming where it was read, never a throw", () => {
    expect(jsonProblem({ source: throwingGetter() }, "message")).toBe("message.source.bad: cannot be read (boom)")
    expect(jsonProblem({ list: [1, hostileProxy()] }, "message")).toBe("message.list[1]: cannot be read (trap)")
    expect(jsonProblem(hostileProxy(), "message")).toBe("message: cannot be read (trap)")
    const copied = snapshotJson({ source: throwingGetter() }, "message")
    expect(copied).toStrictEqual(Either.left("message.source.bad: cannot be read (boom)"))
    // A thrown value whose own message cannot be read is still described.
    const nasty = new Proxy({ y: 1 }, {
      get: () => {
        throw hostileProxy()
      }
    })
    expect(jsonProblem({ x: nasty }, "m")).toBe("m.x.y: cannot be read (an unreadable exception)")
  })

  it("cycles are refused by the copy as by the check", () => {
    const cyclic: Record<string, unknown> = { kind: "user" }
    cyclic.self = cyclic
    expect(jsonProblem(cyclic, "s")).toBe("s.self: cyclic value")
    expect(snapshotJson(cyclic, "s")).toStrictEqual(Either.left("s.self: cyclic value"))
  })

  it("snapshotJson reads each property once: a getter that answers differently later cannot change the copy", () => {
    let reads = 0
    const shifty = {
      get value(): unknown {
        reads++
        return reads === 1 ? "fine" : () => "a function the second time"
      }
    }
    const copied = snapshotJson(shifty, "x")
    expect(reads).toBe(1)
    expect(copied).toStrictEqual(Either.right({ value: "fine" }))
    if (Either.isRight(copied)) {
      expect(Object.isFrozen(copied.right)).toBe(true)
      expect(Object.getOwnPropertyDescriptor(copied.right, "value")?.get).toBeUndefined()
    }
    // The decoder for untrusted input returns the same one-read copy.
    reads = 0
    const decode = losslessDecoder(Schema.Struct({ value: Schema.String }), "x")
    expect(decode(shifty)).toStrictEqual(Either.right({ value: "fine" }))
    expect(reads).toBe(1)
  })
})

describe("size limit (MAX_JSON_SIZE)", () => {
  it("jsonSize counts strings and keys at their length plus 3, numbers at 8, other scalars at 5, containers at 2", () => {
    expect(jsonSize("abc")).toBe(6)
    expect(jsonSize(12.5)).toBe(8)
    expect(jsonSize(null)).toBe(5)
    expect(jsonSize({ ab: [true, "x"] })).toBe(2 + 5 + 2 + 5 + 4)
    // The JSON text is never more than six times the count, however its strings escape.
    const worst = { k: "\u0001".repeat(1000), n: [-1.2345678901234567e-300, 1e21], b: [false, null] }
    expect(JSON.stringify(worst).length).toBeLessThanOrEqual(6 * jsonSize(worst))
  })

  it("a value at the limit is accepted and one character more is refused, named at its root", () => {
    expect(MAX_JSON_SIZE).toBe(64 * 1024 * 1024)
    const atLimit = { text: "x".repeat(MAX_JSON_SIZE - jsonSize({ text: "" })) }
    expect(jsonSize(atLimit)).toBe(MAX_JSON_SIZE)
    expect(jsonProblem(atLimit, "message")).toBeUndefined()
    expect(Either.isRight(snapshotJson(atLimit, "message"))).toBe(true)
    const past = { text: `${atLimit.text}x` }
    expect(jsonProblem(past, "message")).toBe("message: larger than 64 MiB of JSON text")
    expect(snapshotJson(past, "message")).toStrictEqual(Either.left("message: larger than 64 MiB of JSON text"))
    // Many small values add up.
    const many = Array.from({ length: MAX_JSON_SIZE / 8 }, () => 0)
    expect(jsonProblem(many, "data")).toBe("data: larger than 64 MiB of JSON text")
    // A whole stored event (path "event") is not limited in size: its fields were, when written.
    expect(jsonProblem({ type: "tool/result", data: past }, "event")).toBeUndefined()
  })
})
