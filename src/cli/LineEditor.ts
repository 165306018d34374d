/**
 * The chat's input line as a value: the text being typed (possibly several lines), the cursor and
 * the history, changed one key at a time by {@link applyKey}. It does no I/O: the terminal
 * (`Terminal.ts`) feeds it the keys it decodes and draws what {@link render} returns.
 *
 * Keys: ← → Home End (Ctrl-A, Ctrl-E) move; ↑ ↓ move between the lines of a multi-line input and
 * otherwise walk the history; Backspace, Delete, Ctrl-U, Ctrl-K, Ctrl-W delete; Enter sends;
 * Alt-Enter, Ctrl-J or a line ending in `\` start a new line of the same message; a paste is
 * inserted whole (its newlines included); Ctrl-L clears the screen; Esc interrupts the running
 * turn; Ctrl-D on an empty line ends the chat.
 *
 * @since 0.1.0
 */

/**
 * A decoded key, as node's `readline.emitKeypressEvents` reports it.
 *
 * @since 0.1.0
 * @category models
 */
export interface Key {
  readonly sequence?: string | undefined
  readonly name?: string | undefined
  readonly ctrl?: boolean | undefined
  readonly meta?: boolean | undefined
  readonly shift?: boolean | undefined
}

/**
 * The input being edited and the history of sent inputs.
 *
 * @since 0.1.0
 * @category models
 */
export interface EditorState {
  readonly text: string
  /** An offset into `text` (0 … text.length). */
  readonly cursor: number
  /** Sent inputs, oldest first. */
  readonly history: ReadonlyArray<string>
  /** The history entry shown, or `history.length` while editing a new input. */
  readonly historyAt: number
  /** The new input put aside while the history is walked. */
  readonly draft: string
  /** Inside a bracketed paste: Enter inserts a newline. */
  readonly pasting: boolean
}

/**
 * What a key asks of the terminal besides the new state.
 *
 * @since 0.1.0
 * @category models
 */
export type EditorAction =
  | { readonly _tag: "none" }
  | { readonly _tag: "submit"; readonly text: string }
  | { readonly _tag: "interrupt" }
  | { readonly _tag: "ctrl-c" }
  | { readonly _tag: "eof" }
  | { readonly _tag: "clear-screen" }

/**
 * How many sent inputs the history keeps.
 *
 * @since 0.1.0
 * @category constants
 */
export const HISTORY_LIMIT = 500

/**
 * An empty input with `history`.
 *
 * @since 0.1.0
 * @category constructors
 */
export const empty = (history: ReadonlyArray<string> = []): EditorState => ({
  text: "",
  cursor: 0,
  history,
  historyAt: history.length,
  draft: "",
  pasting: false
})

/**
 * `state` with `text` as the input, the cursor at its end (as `/edit N` prefills the line).
 *
 * @since 0.1.0
 * @category constructors
 */
export const withText = (state: EditorState, text: string): EditorState => ({ ...state, text, cursor: text.length })

const none: EditorAction = { _tag: "none" }

const insert = (state: EditorState, text: string): EditorState => ({
  ...state,
  text: state.text.slice(0, state.cursor) + text + state.text.slice(state.cursor),
  cursor: state.cursor + text.length
})

const lineStart = (text: string, cursor: number) => text.lastIndexOf("\n", cursor - 1) + 1
const lineEnd = (text: string, cursor: number) => {
  const at = text.indexOf("\n", cursor)
  return at === -1 ? text.length : at
}

/** The cursor one line up or down in a multi-line input, or undefined on the first / last line. */
const verticalMove = (state: EditorState, direction: -1 | 1): number | undefined => {
  const { cursor, text } = state
  const start = lineStart(text, cursor)
  const column = cursor - start
  if (direction === -1) {
    if (start === 0) return undefined
    const previousStart = lineStart(text, start - 1)
    return Math.min(previousStart + column, start - 1)
  }
  const end = lineEnd(text, cursor)
  if (end === text.length) return undefined
  const nextEnd = lineEnd(text, end + 1)
  return Math.min(end + 1 + column, nextEnd)
}

const showHistory = (state: EditorState, at: number): EditorState => {
  const draft = state.historyAt === state.history.length ? state.text : state.draft
  const text = at === state.history.length ? draft : state.history[at]!
  return { ...state, historyAt: at, draft, text, cursor: text.length }
}

/** The start of the word before the cursor (spaces before it included), for Ctrl-W. */
const wordStart = (text: string, cursor: number): number => {
  let at = cursor
  while (at > 0 && /\s/.test(text[at - 1]!)) at--
  while (at > 0 && !/\s/.test(text[at - 1]!)) at--
  return at
}

/**
 * `history` with `text` sent: a blank input and a repeat of the last entry leave it as it is (the
 * same array); the oldest entries go past {@link HISTORY_LIMIT}.
 *
 * @since 0.1.0
 * @category combinators
 */
export const remember = (history: ReadonlyArray<string>, text: string): ReadonlyArray<string> =>
  text.trim() === "" || history[history.length - 1] === text ? history : [...history, text].slice(-HISTORY_LIMIT)

const submit = (state: EditorState): [EditorState, EditorAction] => {
  const text = state.text
  return [empty(remember(state.history, text)), { _tag: "submit", text }]
}

/** Printable text of a key: what it inserts, with carriage returns made newlines. */
const printable = (key: Key): string | undefined => {
  const sequence = key.sequence
  if (sequence === undefined || sequence === "" || key.ctrl === true || key.meta === true) return undefined
  // Escape sequences of keys this editor does not know are dropped, never inserted.
  if (sequence.includes("\u001b")) return undefined

  const text = sequence.replace(/\r\n?/g, "\n").replace(/[\u0000-\u0008\u000b-\u001f\u007f]/g, "")
  return text === "" ? undefined : text
}

/**
 * The state after `key`, and what the terminal must do about it.
 *
 * @since 0.1.0
 * @category combinators
 */
export const applyKey = (state: EditorState, key: Key): [EditorState, EditorAction] => {
  const name = key.name
  if (name === "paste-start") return [{ ...state, pasting: true }, none]
  if (name === "paste-end") return [{ ...state, pasting: false }, none]
  if (state.pasting) {
    if (name === "return" || name === "enter") return [insert(state, "\n"), none]
    if (name === "tab") return [insert(state, "\t"), none]
    const text = printable(key)
    return [text === undefined ? state : insert(state, text), none]
  }
  if (key.ctrl === true) {
    switch (name) {
      case "a":
        return [{ ...state, cursor: lineStart(state.text, state.cursor) }, none]
      case "e":
        return [{ ...state, cursor: lineEnd(state.text, state.cursor) }, none]
      case "b":
        return [{ ...state, cursor: Math.max(0, state.cursor - 1) }, none]
      case "f":
        return [{ ...state, cursor: Math.min(state.text.length, state.cursor + 1) }, none]
      case "u": {
        const start = lineStart(state.text, state.cursor)
        return [{ ...state, text: state.text.slice(0, start) + state.text.slice(state.cursor), cursor: start }, none]
      }
      case "k": {
        const end = lineEnd(state.text, state.cursor)
        return [{ ...state, text: state.text.slice(0, state.cursor) + state.text.slice(end) }, none]
      }
      case "w": {
        const start = wordStart(state.text, state.cursor)
        return [{ ...state, text: state.text.slice(0, start) + state.text.slice(state.cursor), cursor: start }, none]
      }
      case "h":
        return applyKey(state, { name: "backspace" })
      case "j":
        return [insert(state, "\n"), none]
      case "l":
        return [state, { _tag: "clear-screen" }]
      case "c":
        return [state, { _tag: "ctrl-c" }]
      case "d":
        if (state.text === "") return [state, { _tag: "eof" }]
        return applyKey(state, { name: "delete" })
      case "p":
        return applyKey(state, { name: "up" })
      case "n":
        return applyKey(state, { name: "down" })
      default:
        return [state, none]
    }
  }
  switch (name) {
    case "return":
      if (key.meta === true) return [insert(state, "\n"), none]
      // A line ending in a backslash continues on the next line (the backslash is dropped).
      if (state.cursor === state.text.length && state.text.endsWith("\\")) {
        return [{ ...state, text: `${state.text.slice(0, -1)}\n`, cursor: state.text.length }, none]
      }
      return submit(state)
    case "enter":
      // Ctrl-J (a line feed): a new line of the same input.
      return [insert(state, "\n"), none]
    case "escape":
      return [state, { _tag: "interrupt" }]
    case "backspace":
      if (state.cursor === 0) return [state, none]
      return [{
        ...state,
        text: state.text.slice(0, state.cursor - 1) + state.text.slice(state.cursor),
        cursor: state.cursor - 1
      }, none]
    case "delete":
      return [{ ...state, text: state.text.slice(0, state.cursor) + state.text.slice(state.cursor + 1) }, none]
    case "left":
      return [{ ...state, cursor: Math.max(0, state.cursor - 1) }, none]
    case "right":
      return [{ ...state, cursor: Math.min(state.text.length, state.cursor + 1) }, none]
    case "home":
      return [{ ...state, cursor: lineStart(state.text, state.cursor) }, none]
    case "end":
      return [{ ...state, cursor: lineEnd(state.text, state.cursor) }, none]
    case "up": {
      const moved = verticalMove(state, -1)
      if (moved !== undefined) return [{ ...state, cursor: moved }, none]
      return [state.historyAt > 0 ? showHistory(state, state.historyAt - 1) : state, none]
    }
    case "down": {
      const moved = verticalMove(state, 1)
      if (moved !== undefined) return [{ ...state, cursor: moved }, none]
      return [state.historyAt < state.history.length ? showHistory(state, state.historyAt + 1) : state, none]
    }
    case "tab":
      return [insert(state, "  "), none]
    default: {
      const text = printable(key)
      return [text === undefined ? state : insert(state, text), none]
    }
  }
}

/**
 * How the input looks: its rows (the first after `prompt`, later ones after a continuation mark
 * of the same width), and the cursor's row and column, wrapped at `columns`.
 *
 * @since 0.1.0
 * @category formatting
 */
export const render = (
  state: EditorState,
  prompt: string,
  columns: number
): { readonly rows: ReadonlyArray<string>; readonly cursorRow: number; readonly cursorColumn: number } => {
  const width = Math.max(columns, 10)
  const continuation = "·".padEnd(prompt.length)
  const lines = state.text.split("\n")
  const rows: Array<string> = []
  let cursorRow = 0
  let cursorColumn = 0
  let offset = 0
  lines.forEach((line, index) => {
    const full = `${index === 0 ? prompt : continuation}${line}`
    const firstRow = rows.length
    for (let at = 0; at === 0 || at < full.length; at += width) rows.push(full.slice(at, at + width))
    const lineEndOffset = offset + line.length
    if (state.cursor >= offset && state.cursor <= lineEndOffset) {
      const column = prompt.length + state.cursor - offset
      cursorRow = firstRow + Math.floor(column / width)
      cursorColumn = column % width
      // The cursor past a full last row sits at the start of a row of its own.
      if (cursorRow >= rows.length) rows.push("")
    }
    offset = lineEndOffset + 1
  })
  return { rows, cursorRow, cursorColumn }
}
