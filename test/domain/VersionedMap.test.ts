import { describe, expect, it } from "@effect/vitest"
import { FastCheck } from "effect"
import * as VersionedMap from "../../src/domain/VersionedMap.js"

// Reads every key of `keys` from a version, absent ones as undefined.
const contents = (map: VersionedMap.VersionedMap<number>, keys: ReadonlyArray<string>) =>
  keys.map((key) => [key, VersionedMap.has(map, key), VersionedMap.get(map, key)])

const expected = (model: ReadonlyMap<string, number>, keys: ReadonlyArray<string>) =>
  keys.map((key) => [key, model.has(key), model.get(key)])

const keys = ["a", "b", "c", "d", "e", "f"]

// A random program: each op either sets a key on some earlier version (making a new one) or reads one.
const op = FastCheck.oneof(
  FastCheck.record({
    kind: FastCheck.constant("set" as const),
    from: FastCheck.nat(),
    key: FastCheck.constantFrom(...keys),
    value: FastCheck.integer({ min: 0, max: 3 })
  }),
  FastCheck.record({ kind: FastCheck.constant("read" as const), from: FastCheck.nat() })
)

describe("VersionedMap", () => {
  it("a linear line of versions: each keeps its own contents", () => {
    const v0 = VersionedMap.empty<number>()
    const v1 = VersionedMap.set(v0, "a", 1)
    const v2 = VersionedMap.set(v1, "b", 2)
    const v3 = VersionedMap.set(v2, "a", 3)
    expect(contents(v0, ["a", "b"])).toEqual([["a", false, undefined], ["b", false, undefined]])
    expect(contents(v1, ["a", "b"])).toEqual([["a", true, 1], ["b", false, undefined]])
    expect(contents(v2, ["a", "b"])).toEqual([["a", true, 1], ["b", true, 2]])
    expect(contents(v3, ["a", "b"])).toEqual([["a", true, 3], ["b", true, 2]])
  })

  it("extending an older version (a retried transaction) leaves the newer one intact", () => {
    const v0 = VersionedMap.set(VersionedMap.empty<number>(), "a", 1)
    const abandoned = VersionedMap.set(v0, "b", 2)
    const retried = VersionedMap.set(v0, "b", 3)
    const further = VersionedMap.set(abandoned, "c", 4)
    expect(contents(v0, keys.slice(0, 3))).toEqual([["a", true, 1], ["b", false, undefined], ["c", false, undefined]])
    expect(contents(abandoned, keys.slice(0, 3))).toEqual([["a", true, 1], ["b", true, 2], ["c", false, undefined]])
    expect(contents(retried, keys.slice(0, 3))).toEqual([["a", true, 1], ["b", true, 3], ["c", false, undefined]])
    expect(contents(further, keys.slice(0, 3))).toEqual([["a", true, 1], ["b", true, 2], ["c", true, 4]])
  })

  it("separate maps never share contents", () => {
    const one = VersionedMap.set(VersionedMap.empty<number>(), "a", 1)
    const other = VersionedMap.set(VersionedMap.empty<number>(), "a", 2)
    expect([VersionedMap.get(one, "a"), VersionedMap.get(other, "a")]).toEqual([1, 2])
  })

  it.prop(
    "any tree of versions, extended and read in any order, matches copied maps",
    [FastCheck.array(op, { maxLength: 120 })],
    ([ops]) => {
      const versions: Array<VersionedMap.VersionedMap<number>> = [VersionedMap.empty()]
      const models: Array<ReadonlyMap<string, number>> = [new Map()]
      for (const o of ops) {
        const i = o.from % versions.length
        if (o.kind === "set") {
          versions.push(VersionedMap.set(versions[i]!, o.key, o.value))
          models.push(new Map(models[i]!).set(o.key, o.value))
        } else {
          expect(contents(versions[i]!, keys)).toEqual(expected(models[i]!, keys))
        }
      }
      versions.forEach((version, i) => expect(contents(version, keys)).toEqual(expected(models[i]!, keys)))
    },
    { fastCheck: { numRuns: 300 } }
  )
})
