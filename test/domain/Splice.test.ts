import { describe, expect, it } from "@effect/vitest"
import { Either, FastCheck } from "effect"
import type { SessionEvent, SpliceData } from "../../src/domain/Event.js"
import { userMessage } from "../../src/domain/Message.js"
import type { InboxLists } from "../../src/domain/Splice.js"
import { applySplice, emptyInbox, foldInbox, listOf, normaliseSplice, spliceShape } from "../../src/domain/Splice.js"
import type { InboxTarget, UserMessage } from "../../src/domain/Values.js"

const msg = (id: string): UserMessage => userMessage({ id, text: `text of ${id}` })
const ids = (list: ReadonlyArray<UserMessage>): ReadonlyArray<string> => list.map((m) => m.id)

const splice = (data: {
  readonly target: InboxTarget
  readonly start: number
  readonly removedCount?: number
  readonly inserted?: ReadonlyArray<UserMessage>
  readonly outcome?: "canceled"
}): SpliceData => ({ ...data, inserted: data.inserted ?? [] }) as SpliceData

const spliced = (seq: number, data: SpliceData): SessionEvent => ({ type: "agent/inbox/spliced", seq, time: 0, data })

const lists = (nextTurn: ReadonlyArray<string>, nextStep: ReadonlyArray<string>): InboxLists => ({
  nextTurn: nextTurn.map(msg),
  nextStep: nextStep.map(msg)
})

const applied = (from: InboxLists, data: SpliceData) => {
  const result = applySplice(from, data)
  if (Either.isLeft(result)) throw new Error(`expected the splice to apply: ${result.left}`)
  return result.right
}

const refused = (from: InboxLists, data: SpliceData): string => {
  const result = applySplice(from, data)
  if (Either.isRight(result)) throw new Error(`expected the splice to be refused: ${JSON.stringify(data)}`)
  expect(result.left.length).toBeGreaterThan(0)
  return result.left
}

describe("normaliseSplice", () => {
  const cases: ReadonlyArray<readonly [number, number, number, number, number]> = [
    // len, start, deleteCount, expected start, expected deleteCount
    [5, 1, 2, 1, 2],
    [5, 0, 0, 0, 0],
    [5, -2, 1, 3, 1],
    [5, -2, 10, 3, 2],
    [5, -7, 1, 0, 1],
    [5, 7, 1, 5, 0],
    [5, 5, 3, 5, 0],
    [5, 1.9, 1.9, 1, 1],
    [5, -1.5, 2, 4, 1],
    [5, -0.5, 2, 0, 2],
    [5, 2, -3, 2, 0],
    [5, 2, -0.5, 2, 0],
    [5, Number.POSITIVE_INFINITY, 1, 5, 0],
    [5, Number.NEGATIVE_INFINITY, 1, 0, 1],
    [5, 1, Number.POSITIVE_INFINITY, 1, 4],
    [5, 1, Number.NEGATIVE_INFINITY, 1, 0],
    [5, -0, -0, 0, 0],
    [0, 3, 3, 0, 0],
    [0, -3, 3, 0, 0]
  ]
  for (const [len, start, deleteCount, expectedStart, expectedDeleteCount] of cases) {
    it(`normalises (${start}, ${deleteCount}) on a list of ${len}`, () => {
      const result = normaliseSplice(len, start, deleteCount)
      expect(result).toStrictEqual(Either.right({ start: expectedStart, deleteCount: expectedDeleteCount }))
      if (Either.isRight(result)) {
        expect(Object.is(result.right.start, -0)).toBe(false)
        expect(Object.is(result.right.deleteCount, -0)).toBe(false)
      }
      // Cross-check against the built-in.
      const model = Array.from({ length: len }, (_, i) => i)
      const removed = model.splice(start, deleteCount, -1)
      expect(removed.length).toBe(expectedDeleteCount)
      expect(model.indexOf(-1)).toBe(expectedStart)
    })
  }

  it("refuses NaN and non-numbers", () => {
    const bad: ReadonlyArray<readonly [unknown, unknown]> = [
      [Number.NaN, 0],
      [0, Number.NaN],
      ["1", 0],
      [0, "1"],
      [undefined, 0],
      [0, undefined],
      [null, 0],
      [0, 1n],
      [new Number(1), 0]
    ]
    for (const [start, deleteCount] of bad) {
      const result = normaliseSplice(3, start, deleteCount)
      expect(Either.isLeft(result), `${String(start)}, ${String(deleteCount)}`).toBe(true)
      if (Either.isLeft(result)) expect(result.left).toMatch(/not a number/)
    }
  })

  it.prop(
    "agrees with Array.prototype.splice",
    [
      FastCheck.nat(12),
      FastCheck.oneof(
        FastCheck.integer({ min: -15, max: 15 }),
        FastCheck.double({ noNaN: true, min: -20, max: 20 }),
        FastCheck.constantFrom(Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY, -0)
      ),
      FastCheck.oneof(
        FastCheck.integer({ min: -15, max: 15 }),
        FastCheck.double({ noNaN: true, min: -20, max: 20 }),
        FastCheck.constantFrom(Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY, -0)
      )
    ],
    ([len, start, deleteCount]) => {
      const result = normaliseSplice(len, start, deleteCount)
      if (Either.isLeft(result)) return false
      const model = Array.from({ length: len }, (_, i) => i)
      const removed = model.splice(start, deleteCount, -1)
      return result.right.deleteCount === removed.length && model.indexOf(-1) === result.right.start &&
        Number.isInteger(result.right.start) && Number.isInteger(result.right.deleteCount)
    },
    { fastCheck: { numRuns: 500 } }
  )
})

describe("spliceShape", () => {
  const m = msg("a")
  it("classifies the four shapes", () => {
    expect(spliceShape(splice({ target: "next-turn", start: 0, inserted: [m] }))).toBe("insertion")
    expect(spliceShape(splice({ target: "next-step", start: 0, removedCount: 2 }))).toBe("claim")
    expect(spliceShape(splice({ target: "next-turn", start: 1, removedCount: 1, outcome: "canceled" }))).toBe(
      "cancellation"
    )
    expect(spliceShape(splice({ target: "next-turn", start: 0, removedCount: 1, inserted: [m], outcome: "canceled" })))
      .toBe(
        "replacement"
      )
  })

  it("rejects every other combination", () => {
    expect(spliceShape(splice({ target: "next-turn", start: 0 }))).toBeUndefined()
    expect(spliceShape(splice({ target: "next-turn", start: 0, outcome: "canceled" }))).toBeUndefined()
    expect(spliceShape(splice({ target: "next-turn", start: 0, inserted: [m], outcome: "canceled" }))).toBeUndefined()
    expect(spliceShape(splice({ target: "next-turn", start: 0, removedCount: 1, inserted: [m] }))).toBeUndefined()
  })
})

describe("applySplice", () => {
  const base = lists(["a", "b", "c"], ["x"])

  it("inserts, claims, cancels and replaces", () => {
    const inserted = applied(base, splice({ target: "next-turn", start: 1, inserted: [msg("n")] }))
    expect(ids(inserted.lists.nextTurn)).toStrictEqual(["a", "n", "b", "c"])
    expect(inserted.lists.nextStep).toBe(base.nextStep)
    expect(inserted.removed).toStrictEqual([])

    const appended = applied(base, splice({ target: "next-step", start: 1, inserted: [msg("y"), msg("z")] }))
    expect(ids(appended.lists.nextStep)).toStrictEqual(["x", "y", "z"])
    expect(appended.lists.nextTurn).toBe(base.nextTurn)

    const claimed = applied(base, splice({ target: "next-turn", start: 0, removedCount: 2 }))
    expect(ids(claimed.lists.nextTurn)).toStrictEqual(["c"])
    expect(ids(claimed.removed)).toStrictEqual(["a", "b"])

    const canceled = applied(base, splice({ target: "next-turn", start: 2, removedCount: 1, outcome: "canceled" }))
    expect(ids(canceled.lists.nextTurn)).toStrictEqual(["a", "b"])
    expect(ids(canceled.removed)).toStrictEqual(["c"])

    const replaced = applied(
      base,
      splice({ target: "next-turn", start: 1, removedCount: 1, inserted: [msg("r1"), msg("r2")], outcome: "canceled" })
    )
    expect(ids(replaced.lists.nextTurn)).toStrictEqual(["a", "r1", "r2", "c"])
    expect(ids(replaced.removed)).toStrictEqual(["b"])
  })

  it("does not mutate the input lists", () => {
    const before = { nextTurn: [...base.nextTurn], nextStep: [...base.nextStep] }
    applied(base, splice({ target: "next-turn", start: 0, removedCount: 1, inserted: [msg("q")], outcome: "canceled" }))
    expect(base).toStrictEqual(before)
  })

  it("refuses a start past the end", () => {
    expect(refused(base, splice({ target: "next-turn", start: 4, inserted: [msg("n")] }))).toMatch(/start 4/)
    refused(base, splice({ target: "next-step", start: 2, removedCount: 1 }))
  })

  it("accepts a start exactly at the end", () => {
    expect(ids(applied(base, splice({ target: "next-turn", start: 3, inserted: [msg("n")] })).lists.nextTurn))
      .toStrictEqual([
        "a",
        "b",
        "c",
        "n"
      ])
  })

  it("refuses a removedCount that is too large", () => {
    expect(refused(base, splice({ target: "next-turn", start: 1, removedCount: 3 }))).toMatch(/removedCount 3/)
    refused(base, splice({ target: "next-turn", start: 3, removedCount: 1, outcome: "canceled" }))
    refused(emptyInbox, splice({ target: "next-step", start: 0, removedCount: 1 }))
  })

  it("accepts a removedCount reaching exactly the end", () => {
    expect(ids(applied(base, splice({ target: "next-turn", start: 1, removedCount: 2 })).removed)).toStrictEqual([
      "b",
      "c"
    ])
  })

  it("refuses coordinates a decoded splice could never carry", () => {
    refused(base, splice({ target: "next-turn", start: 0, removedCount: 0 }))
    refused(base, splice({ target: "next-turn", start: 0, removedCount: -1, outcome: "canceled" }))
    refused(base, splice({ target: "next-turn", start: 0, removedCount: 1.5 }))
    refused(base, splice({ target: "next-turn", start: -1, removedCount: 1 }))
    refused(base, splice({ target: "next-turn", start: 0.5, inserted: [msg("n")] }))
  })

  it("refuses a splice of none of the four shapes", () => {
    refused(base, splice({ target: "next-turn", start: 0 }))
    refused(base, splice({ target: "next-turn", start: 0, removedCount: 1, inserted: [msg("n")] }))
  })

  it("refuses an id already pending in either list", () => {
    expect(refused(base, splice({ target: "next-turn", start: 0, inserted: [msg("x")] }))).toMatch(/x/)
    expect(refused(base, splice({ target: "next-step", start: 0, inserted: [msg("b")] }))).toMatch(/b/)
    refused(base, splice({ target: "next-turn", start: 3, inserted: [msg("a")] }))
    refused(base, splice({ target: "next-turn", start: 0, removedCount: 1, inserted: [msg("c")], outcome: "canceled" }))
    refused(base, splice({ target: "next-step", start: 0, removedCount: 1, inserted: [msg("a")], outcome: "canceled" }))
  })

  it("refuses an id inserted twice in one splice", () => {
    refused(base, splice({ target: "next-step", start: 0, inserted: [msg("d"), msg("d")] }))
  })

  it("allows a replacement to re-insert the ids it removes", () => {
    const result = applied(
      base,
      splice({ target: "next-turn", start: 0, removedCount: 2, inserted: [msg("b"), msg("a")], outcome: "canceled" })
    )
    expect(ids(result.lists.nextTurn)).toStrictEqual(["b", "a", "c"])
    expect(ids(result.removed)).toStrictEqual(["a", "b"])
  })
})

describe("foldInbox", () => {
  const events: ReadonlyArray<SessionEvent> = [
    spliced(0, splice({ target: "next-turn", start: 0, inserted: [msg("a"), msg("b")] })),
    { type: "turn/start", seq: 1, time: 0, data: { turn: 1 } },
    spliced(2, splice({ target: "next-step", start: 0, inserted: [msg("s")] })),
    spliced(3, splice({ target: "next-turn", start: 0, removedCount: 1 })),
    { type: "myext/note", seq: 4, time: 0, data: { removedCount: 9 }, ignorable: true },
    spliced(5, splice({ target: "next-turn", start: 1, inserted: [msg("c")] }))
  ]

  it("applies the splices in order and ignores other events", () => {
    const result = foldInbox(events)
    expect(Either.isRight(result)).toBe(true)
    if (Either.isRight(result)) {
      expect(ids(result.right.nextTurn)).toStrictEqual(["b", "c"])
      expect(ids(result.right.nextStep)).toStrictEqual(["s"])
      expect(Object.isFrozen(result.right.nextTurn)).toBe(true)
      expect(Object.isFrozen(result.right.nextStep)).toBe(true)
    }
  })

  it("folds an empty log to empty lists", () => {
    expect(foldInbox([])).toStrictEqual(Either.right({ nextTurn: [], nextStep: [] }))
  })

  it("skips the splices before seedLength", () => {
    // Without the seed's insertions, the later claim (seq 3) and insertion at 1 (seq 5) are out of range.
    expect(Either.flip(foldInbox(events, 1)).pipe(Either.map((error) => error.seq))).toStrictEqual(Either.right(3))
    expect(Either.flip(foldInbox(events, 4)).pipe(Either.map((error) => error.seq))).toStrictEqual(Either.right(5))
    expect(foldInbox(events, 6)).toStrictEqual(Either.right({ nextTurn: [], nextStep: [] }))
  })

  it("starts from empty lists at seedLength", () => {
    const seeded: ReadonlyArray<SessionEvent> = [
      spliced(0, splice({ target: "next-turn", start: 0, inserted: [msg("a")] })),
      spliced(1, splice({ target: "next-step", start: 0, inserted: [msg("b")] })),
      { type: "session/end-seed", seq: 2, time: 0, data: {} },
      spliced(3, splice({ target: "next-turn", start: 0, inserted: [msg("a")] }))
    ]
    expect(Either.map(foldInbox(seeded, 3), (l) => [ids(l.nextTurn), ids(l.nextStep)])).toStrictEqual(
      Either.right([["a"], []])
    )
    expect(Either.isLeft(foldInbox(seeded, 0))).toBe(true)
    expect(Either.map(foldInbox(seeded, 4), (l) => [ids(l.nextTurn), ids(l.nextStep)])).toStrictEqual(
      Either.right([[], []])
    )
  })

  it("ignores a malformed splice before seedLength", () => {
    const log = [
      spliced(0, splice({ target: "next-turn", start: 5, removedCount: 1 })),
      spliced(1, splice({ target: "next-turn", start: 0, inserted: [msg("a")] }))
    ]
    expect(Either.isLeft(foldInbox(log))).toBe(true)
    expect(Either.map(foldInbox(log, 1), (l) => ids(l.nextTurn))).toStrictEqual(Either.right(["a"]))
  })

  it("returns MalformedLog with the seq of a bad splice", () => {
    const log = [
      spliced(0, splice({ target: "next-turn", start: 0, inserted: [msg("a")] })),
      spliced(1, splice({ target: "next-step", start: 0, inserted: [msg("b")] })),
      spliced(2, splice({ target: "next-turn", start: 0, inserted: [msg("b")] })),
      spliced(3, splice({ target: "next-turn", start: 9, removedCount: 1 }))
    ]
    const result = foldInbox(log)
    expect(Either.isLeft(result)).toBe(true)
    if (Either.isLeft(result)) {
      expect(result.left._tag).toBe("MalformedLog")
      expect(result.left.seq).toBe(2)
      expect(result.left.message).toContain("seq 2")
    }
    const shape = foldInbox([spliced(0, splice({ target: "next-turn", start: 0 }))])
    expect(Either.isLeft(shape) && shape.left.seq).toBe(0)
  })
})

interface Op {
  readonly target: InboxTarget
  readonly start: number
  readonly deleteCount: number
  readonly insertCount: number
}

const coordinate = FastCheck.oneof(
  { weight: 6, arbitrary: FastCheck.integer({ min: -8, max: 8 }) },
  { weight: 2, arbitrary: FastCheck.double({ noNaN: true, min: -10, max: 10 }) },
  { weight: 1, arbitrary: FastCheck.constantFrom(Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY, -0) }
)

const op: FastCheck.Arbitrary<Op> = FastCheck.record({
  target: FastCheck.constantFrom<InboxTarget>("next-turn", "next-step"),
  start: coordinate,
  deleteCount: coordinate,
  insertCount: FastCheck.nat(3)
})

describe("splice model", () => {
  it.prop(
    "applySplice and foldInbox agree with Array.prototype.splice",
    [FastCheck.array(op, { maxLength: 30 })],
    ([ops]) => {
      const model: Record<InboxTarget, Array<UserMessage>> = { "next-turn": [], "next-step": [] }
      let live: InboxLists = emptyInbox
      const recorded: Array<SpliceData> = []
      let fresh = 0
      for (const { target, start, deleteCount, insertCount } of ops) {
        const inserted = Array.from({ length: insertCount }, () => msg(`m${fresh++}`))
        const normalised = normaliseSplice(model[target].length, start, deleteCount)
        if (Either.isLeft(normalised)) throw new Error(normalised.left)
        const expectedRemoved = model[target].splice(start, deleteCount, ...inserted)
        const { start: s, deleteCount: n } = normalised.right
        expect(n).toBe(expectedRemoved.length)
        if (n === 0 && inserted.length === 0) continue
        const data: SpliceData = {
          target,
          start: s,
          ...(n > 0 ? { removedCount: n, outcome: "canceled" as const } : {}),
          inserted
        } as SpliceData
        expect(spliceShape(data)).toBe(n === 0 ? "insertion" : inserted.length === 0 ? "cancellation" : "replacement")
        const result = applySplice(live, data)
        if (Either.isLeft(result)) throw new Error(result.left)
        live = result.right.lists
        recorded.push(data)
        expect(result.right.removed).toStrictEqual(expectedRemoved)
        expect(listOf(live, "next-turn")).toStrictEqual(model["next-turn"])
        expect(listOf(live, "next-step")).toStrictEqual(model["next-step"])
      }
      const folded = foldInbox(recorded.map((data, seq) => spliced(seq, data)))
      expect(folded).toStrictEqual(Either.right({ nextTurn: model["next-turn"], nextStep: model["next-step"] }))
      if (Either.isRight(folded)) {
        expect(folded.right.nextTurn).toStrictEqual(live.nextTurn)
        expect(folded.right.nextStep).toStrictEqual(live.nextStep)
      }
    },
    { fastCheck: { numRuns: 500 } }
  )
})
