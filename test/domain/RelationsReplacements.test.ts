/**
 * The relational rules of SPEC 5.2 around the surface: replacement messages (compaction, pruning) and
 * message identity, and compaction brackets (R6), through `checkLog` on hand-built logs.
 */
import { describe, expect, it } from "@effect/vitest"
import { found } from "../fixtures/handLog.js"
import { summary, SurfaceLog, twoTurns, u } from "../fixtures/surfaceLog.js"

describe("5.2 checkLog: replacements and message identity", () => {
  it("5.2 R5/R13: a pruning tool/result outside any turn naming an old (turn, step) is not step-enclosed: []", () => {
    const b = twoTurns()
    b.trr(7, 9, "c1", "pruned", 15)
    expect(found(b.events, { closed: true })).toStrictEqual([])
  })

  it("5.2 R8: a replacement user/message is not an entered message: an appended one right after it is R8", () => {
    const b = twoTurns()
    b.ins("next-turn", [u("C")]).ins("next-step", [u("D")]).ts(3).clm("next-step", 1).clm("next-turn", 1).ss(3, 1).um(
      u("D")
    )
    b.umr(summary("S"), 4, 4, [4])
    b.um(u("C"))
    expect(found(b.events)).toStrictEqual([{ seq: b.last, rule: "R8" }])
  })

  it("5.2 R9: a replacement user/message reusing a pending, claimed-unentered, discarded, assistant or tool-result id is R9 at its seq", () => {
    const base = () => {
      const b = twoTurns()
      // P pending; X claimed by a zero-step blocked turn; Y discarded
      b.ins("next-step", [u("P")])
      b.ins("next-turn", [u("X")]).ts(3).clm("next-step", 1).clm("next-turn", 1).te(3, { kind: "blocked" })
      b.ins("next-step", [u("P2")]).ins("next-turn", [u("Y")]).can("next-turn", 0, 1)
      return b
    }
    expect(found(base().events, { closed: true })).toStrictEqual([])
    for (const id of ["P2", "X", "Y", "am-1-1", "tr-c1", "A"]) {
      const b = base()
      b.umr(summary(id), 34, 34, [34])
      expect(found(b.events)).toStrictEqual([{ seq: b.last, rule: "R9" }])
    }
    const ok = base()
    ok.umr(summary("fresh"), 34, 34, [34])
    expect(found(ok.events, { closed: true })).toStrictEqual([])
  })

  it("5.2 R9: a replacement user/message's id becomes known: inserting it later is R9 at the splice", () => {
    const b = twoTurns()
    b.umr(summary("S"), 4, 22, [4, 13, 15, 22]).ins("next-step", [u("S")])
    expect(found(b.events)).toStrictEqual([{ seq: b.last, rule: "R9" }])
  })

  it("5.2 R9: entering an id that is pending (not claimed) is R9; a fresh pre-step addition is valid", () => {
    const b = new SurfaceLog()
    b.ins("next-turn", [u("A")]).ts(1).clm("next-turn", 1).ins("next-step", [u("P")]).ss(1, 1).um(u("A")).um(u("P"))
    expect(found(b.events)).toStrictEqual([{ seq: b.last, rule: "R9" }])
    const ok = new SurfaceLog()
    ok.ins("next-turn", [u("A")]).ts(1).clm("next-turn", 1).ins("next-step", [u("P")]).ss(1, 1).um(u("A")).um(u("NEW"))
      .rh().answer(1, 1, "x").se(1, 1).te(1)
    expect(found(ok.events, { closed: true })).toStrictEqual([])
  })

  it("5.2 R9: an id claimed at one boundary but dropped by its pre-step cannot be entered at the next step", () => {
    const b = new SurfaceLog()
    b.ins("next-turn", [u("A")]).ins("next-step", [u("K")]).ts(1).clm("next-step", 1).clm("next-turn", 1).ss(1, 1).um(
      u("A")
    ).rh()
    b.answer(1, 1, "x").se(1, 1).ins("next-step", [u("Z")]).clm("next-step", 1).ss(1, 2).um(u("Z")).um(u("K"))
    expect(found(b.events)).toStrictEqual([{ seq: b.last, rule: "R9" }])
  })

  it("5.2 R9: a claimed id is entered at most once, in the step right after its claim", () => {
    const b = new SurfaceLog()
    b.ins("next-turn", [u("A")]).ts(1).clm("next-turn", 1).ss(1, 1).um(u("A")).rh().answer(1, 1, "x").se(1, 1)
    b.ins("next-step", [u("Z")]).clm("next-step", 1).ss(1, 2).um(u("Z")).answer(1, 2, "y").se(1, 2)
    const okLen = b.events.length
    expect(found(b.events)).toStrictEqual([])
    b.ss(1, 3).um(u("Z"))
    expect(found(b.events)).toStrictEqual([{ seq: okLen + 1, rule: "R9" }])
  })

  it("5.2 R9: a replacement splice may re-insert the id it removes among fresh ones; a removed id of another splice is R9", () => {
    const b = new SurfaceLog()
    b.ins("next-step", [u("P"), u("Q")])
    b.push("agent/inbox/spliced", {
      target: "next-step",
      start: 0,
      removedCount: 1,
      inserted: [u("N"), u("P", "edited")],
      outcome: "canceled"
    })
    expect(found(b.events)).toStrictEqual([])
    // lists: [N, P, Q]; Q is cancelled, then a replacement of N re-inserts Q
    b.can("next-step", 2, 1)
    b.push("agent/inbox/spliced", {
      target: "next-step",
      start: 0,
      removedCount: 1,
      inserted: [u("Q", "again")],
      outcome: "canceled"
    })
    expect(found(b.events)).toStrictEqual([{ seq: b.last, rule: "R9" }])
  })
})

describe("5.2 checkLog R6 compaction brackets", () => {
  it("5.2 R6: a {turn:n} bracket abandoned at turn/end n is no longer open: a later null bracket opens and closes cleanly", () => {
    const b = new SurfaceLog()
    b.ins("next-turn", [u("A")]).ts(1).clm("next-turn", 1).comp("start", 1).comp("summary", 1).te(1, {
      kind: "blocked"
    })
    b.comp("start", null).comp("end", null)
    expect(found(b.events, { closed: true })).toStrictEqual([])
  })

  it("5.2 R6: a null bracket is not abandoned at turn/end: compaction/start after the turn is R6", () => {
    const b = new SurfaceLog()
    b.comp("start", null).ins("next-turn", [u("A")]).ts(1).clm("next-turn", 1).te(1, { kind: "blocked" }).comp(
      "start",
      null
    )
    expect(found(b.events)).toStrictEqual([{ seq: b.last, rule: "R6" }])
  })

  it("5.2 R6: closing a null bracket inside a turn is R6; a numeric bracket of a past turn cannot be closed in the next", () => {
    const b = new SurfaceLog()
    b.comp("start", null).ins("next-turn", [u("A")]).ts(1).clm("next-turn", 1).comp("end", null)
    expect(found(b.events).map((v) => v.rule)).toContain("R6")
    expect(found(b.events).every((v) => v.seq === b.last && v.rule === "R6")).toBe(true)
    const c = new SurfaceLog()
    c.ins("next-turn", [u("A")]).ts(1).clm("next-turn", 1).comp("start", 1).te(1, { kind: "blocked" })
    c.ins("next-turn", [u("B")]).ts(2).clm("next-turn", 1).comp("end", 2)
    expect(found(c.events)).toStrictEqual([{ seq: c.last, rule: "R6" }])
  })

  it("5.2 R6: compaction/summary and extra JSON fields inside an open numeric bracket are valid; summary naming another turn is R6", () => {
    const b = new SurfaceLog()
    b.ins("next-turn", [u("A")]).ts(1).clm("next-turn", 1).comp("start", 1, { why: "overflow" }).comp("summary", 1, {
      n: [1, 2]
    }).comp("end", 1, { error: { message: "x" } })
    expect(found(b.events)).toStrictEqual([])
    b.comp("summary", 2)
    expect(found(b.events)).toStrictEqual([{ seq: b.last, rule: "R6" }])
  })
})
