import { describe, expect, it } from "@effect/vitest"
import type { EditorAction, EditorState, Key } from "../../src/cli/LineEditor.js"
import * as LineEditor from "../../src/cli/LineEditor.js"

/** Types `keys` into `state`; returns the state and every action but "none". */
const type = (keys: ReadonlyArray<Key>, state: EditorState = LineEditor.empty()) => {
  const actions: Array<EditorAction> = []
  for (const key of keys) {
    const [next, action] = LineEditor.applyKey(state, key)
    state = next
    if (action._tag !== "none") actions.push(action)
  }
  return { state, actions }
}

const chars = (text: string): Array<Key> => [...text].map((c) => ({ sequence: c, name: c }))
const key = (name: string, extra: Partial<Key> = {}): Key => ({ name, sequence: "", ...extra })

describe("LineEditor", () => {
  it("arrow keys move the cursor instead of entering escape sequences", () => {
    const { state } = type([
      ...chars("helo"),
      key("left", { sequence: "\u001b[D" }),
      ...chars("l"),
      key("up", { sequence: "\u001b[A" })
    ])
    expect(state.text).toBe("hello")
    expect(state.text).not.toContain("\u001b")
    expect(state.cursor).toBe(4)
  })

  it("an unknown escape sequence is dropped, never inserted", () => {
    expect(type([...chars("a"), { sequence: "\u001b[15~", name: "f5" }]).state.text).toBe("a")
  })

  it("Ctrl-L asks to clear the screen and inserts no form feed", () => {
    const { actions, state } = type([...chars("ab"), { sequence: "\f", name: "l", ctrl: true }])
    expect(state.text).toBe("ab")
    expect(actions).toEqual([{ _tag: "clear-screen" }])
  })

  it("Enter sends; the history walks back and forth with the draft kept", () => {
    const sent = type([...chars("one"), key("return"), ...chars("two"), key("return"), ...chars("dra")])
    expect(sent.actions).toEqual([{ _tag: "submit", text: "one" }, { _tag: "submit", text: "two" }])
    const back = type([key("up"), key("up")], sent.state)
    expect(back.state.text).toBe("one")
    expect(type([key("down")], back.state).state.text).toBe("two")
    expect(type([key("down"), key("down")], back.state).state.text).toBe("dra")
  })

  it("a 6,000-character paste is kept whole", () => {
    const long = "x".repeat(5997) + "end"
    const { actions } = type([key("paste-start"), { sequence: long }, key("paste-end"), key("return")])
    expect(actions).toEqual([{ _tag: "submit", text: long }])
  })

  it("a bracketed paste of three lines is one message; Enter inside it is a newline", () => {
    const { actions, state } = type([
      key("paste-start"),
      ...chars("a"),
      key("return"),
      ...chars("b"),
      key("return"),
      ...chars("c"),
      key("paste-end")
    ])
    expect(actions).toEqual([])
    expect(state.text).toBe("a\nb\nc")
    expect(type([key("return")], state).actions).toEqual([{ _tag: "submit", text: "a\nb\nc" }])
  })

  it("Alt-Enter, Ctrl-J and a trailing backslash continue the message on a new line", () => {
    const { actions } = type([
      ...chars("one"),
      key("return", { meta: true }),
      ...chars("two\\"),
      key("return"),
      ...chars("three"),
      key("enter"),
      ...chars("four"),
      key("return")
    ])
    expect(actions).toEqual([{ _tag: "submit", text: "one\ntwo\nthree\nfour" }])
  })

  it("up and down move between the lines of a multi-line input before they walk the history", () => {
    const { state } = type([...chars("abc"), key("enter"), ...chars("de"), key("up")])
    expect(state.cursor).toBe(2)
    expect(type([key("down")], state).state.cursor).toBe(6)
  })

  it("Esc interrupts; Ctrl-C and Ctrl-D are reported; Ctrl-D on typed text deletes", () => {
    expect(type([key("escape")]).actions).toEqual([{ _tag: "interrupt" }])
    expect(type([key("c", { ctrl: true })]).actions).toEqual([{ _tag: "ctrl-c" }])
    expect(type([key("d", { ctrl: true })]).actions).toEqual([{ _tag: "eof" }])
    const typed = type([...chars("ab"), key("home"), key("d", { ctrl: true })])
    expect(typed.actions).toEqual([])
    expect(typed.state.text).toBe("b")
  })

  it("Ctrl-U, Ctrl-K and Ctrl-W delete", () => {
    expect(type([...chars("hello world"), key("w", { ctrl: true })]).state.text).toBe("hello ")
    expect(type([...chars("hello"), key("left"), key("left"), key("k", { ctrl: true })]).state.text).toBe("hel")
    expect(type([...chars("hello"), key("left"), key("u", { ctrl: true })]).state.text).toBe("o")
  })

  it("render wraps at the width and places the cursor; later lines get a continuation mark", () => {
    const state = LineEditor.withText(LineEditor.empty(), "abcdefghij\nxy")
    const shown = LineEditor.render(state, "› ", 10)
    expect(shown.rows).toEqual(["› abcdefgh", "ij", "· xy"])
    expect([shown.cursorRow, shown.cursorColumn]).toEqual([2, 4])
  })
})
