/**
 * The chat's terminal when standard input and output are both terminals: raw mode, keys decoded
 * by node's `readline.emitKeypressEvents` into the {@link LineEditor}, bracketed paste, and a
 * live area at the bottom of the screen (a streamed line still in progress, the progress line,
 * the input being typed) that is erased before any output is written and drawn again after it,
 * so that output never lands inside a half-typed line.
 *
 * @since 0.1.0
 */
import * as readline from "node:readline"
import type { EditorState, Key } from "./LineEditor.js"
import * as LineEditor from "./LineEditor.js"

/**
 * What the terminal reports to the chat.
 *
 * @since 0.1.0
 * @category models
 */
export type InputEvent =
  | { readonly _tag: "line"; readonly text: string }
  /** Esc: interrupt the running turn. */
  | { readonly _tag: "interrupt" }
  /** Ctrl-C on an empty input (Ctrl-C on a typed input only clears it). */
  | { readonly _tag: "ctrl-c" }
  /** Ctrl-D on an empty input. */
  | { readonly _tag: "eof" }

/**
 * The input side: a terminal stream that can be put in raw mode.
 *
 * @since 0.1.0
 * @category models
 */
export interface TerminalInput extends NodeJS.EventEmitter {
  readonly setRawMode?: (mode: boolean) => unknown
  readonly resume: () => unknown
  readonly pause: () => unknown
}

/**
 * The output side: a writable terminal with a width.
 *
 * @since 0.1.0
 * @category models
 */
export interface TerminalOutput extends NodeJS.EventEmitter {
  readonly write: (text: string) => unknown
  readonly columns?: number | undefined
}

const ESC = "\u001b"
const BRACKETED_PASTE_ON = `${ESC}[?2004h`
const BRACKETED_PASTE_OFF = `${ESC}[?2004l`

const ANSI = /\u001b\[[0-9;?]*[A-Za-z]/g

/** The width of `text` on the screen (escape sequences take none). */
const visibleLength = (text: string) => text.replace(ANSI, "").length

/** The rows `line` takes at `columns`. */
const rowsOf = (line: string, columns: number) => Math.max(1, Math.ceil(visibleLength(line) / columns))

/**
 * A terminal session of the chat; {@link Terminal.close} gives the terminal back as it was.
 *
 * @since 0.1.0
 * @category models
 */
export class Terminal {
  private state: EditorState
  /** Output after its last newline: shown in the live area until its line is complete. */
  private held = ""
  private status: string | undefined
  /** Rows of the live area on the screen, and the row of the cursor within it. */
  private drawnRows = 0
  private cursorRow = 0
  private closed = false
  /**
   * Newlines of the chunk being decoded that more text follows in the same chunk: typed keys come
   * one chunk each, so those are a paste (without bracketed paste) and do not send the input.
   */
  private pastedNewlines = 0
  /** Set while one chunk of input is decoded: its keys change the input, drawn once after the chunk. */
  private inChunk = false
  private dirty = false
  private readonly onData = (chunk: Buffer | string) => {
    const text = typeof chunk === "string" ? chunk : chunk.toString("utf8")
    this.pastedNewlines = (text.replace(/[\r\n]+$/, "").match(/\r\n?|\n/g) ?? []).length
    this.inChunk = true
  }
  private readonly afterData = () => {
    this.pastedNewlines = 0
    this.inChunk = false
    if (this.dirty) this.redraw()
  }
  private readonly onKeypress = (_: string | undefined, key: Key | undefined) => {
    if (key === undefined) return
    if ((key.name === "return" || key.name === "enter") && this.pastedNewlines > 0) {
      this.pastedNewlines--
      return this.key({ name: "enter" })
    }
    this.key(key)
  }
  private readonly onResize = () => this.redraw()

  /** `history`: the inputs that ↑ recalls, oldest first (those of earlier chats). */
  constructor(
    private readonly input: TerminalInput,
    private readonly output: TerminalOutput,
    private readonly onEvent: (event: InputEvent) => void,
    private readonly prompt = "› ",
    history: ReadonlyArray<string> = []
  ) {
    this.state = LineEditor.empty(history)
  }

  /** Takes the terminal: raw mode, bracketed paste, the input line drawn. */
  start(): void {
    this.input.prependListener("data", this.onData)
    // A lone Esc is told from the start of an escape sequence by a pause this long (ms).
    readline.emitKeypressEvents(
      this.input as NodeJS.ReadableStream,
      { escapeCodeTimeout: 50 } as unknown as readline.Interface
    )
    this.input.on("keypress", this.onKeypress)
    this.input.on("data", this.afterData)
    this.output.on("resize", this.onResize)
    this.input.setRawMode?.(true)
    this.input.resume()
    this.output.write(BRACKETED_PASTE_ON)
    this.draw()
  }

  /** Handles one key (also how tests type). */
  key(key: Key): void {
    if (this.closed) return
    const [next, action] = LineEditor.applyKey(this.state, key)
    const change = () => {
      this.state = next
      if (action._tag === "ctrl-c" && next.text !== "") this.state = LineEditor.empty(next.history)
      if (action._tag === "clear-screen") {
        this.output.write(`${ESC}[2J${ESC}[H`)
        this.drawnRows = 0
        this.cursorRow = 0
      }
    }
    // Within a chunk (a paste arrives as one), the input is drawn once at its end.
    if (this.inChunk) {
      change()
      this.dirty = true
    } else this.update(change)
    switch (action._tag) {
      case "submit": {
        // The sent input stays on the screen above the live area, as typed.
        this.print(`${this.prompt}${action.text.split("\n").join(`\n${"·".padEnd(this.prompt.length)}`)}\n`)
        this.onEvent({ _tag: "line", text: action.text })
        return
      }
      case "ctrl-c":
        if (next.text === "") this.onEvent({ _tag: "ctrl-c" })
        return
      case "interrupt":
      case "eof":
        this.onEvent(action)
        return
    }
  }

  /** Writes `text` above the live area; a last line without a newline waits there until it ends. */
  print(text: string): void {
    if (text === "") return
    if (this.closed) {
      this.output.write(text)
      return
    }
    this.update(() => {
      const all = this.held + text
      const end = all.lastIndexOf("\n")
      if (end >= 0) this.output.write(all.slice(0, end + 1))
      this.held = all.slice(end + 1)
    })
  }

  /** Shows `line` between the output and the input (the progress line), or nothing. */
  setStatus(line: string | undefined): void {
    if (line === this.status) return
    this.update(() => {
      this.status = line
    })
  }

  /** Puts `text` into the input, to be edited and sent (`/edit N`). */
  prefill(text: string): void {
    this.update(() => {
      this.state = LineEditor.withText(this.state, text)
    })
  }

  /** The input being typed. */
  get typed(): string {
    return this.state.text
  }

  /** Gives the terminal back: the live area erased, a held line ended, cooked mode, no paste brackets. */
  close(): void {
    if (this.closed) return
    this.erase()
    if (this.held !== "") this.output.write(`${this.held}\n`)
    this.held = ""
    this.closed = true
    this.output.write(BRACKETED_PASTE_OFF)
    this.input.removeListener("data", this.onData)
    this.input.removeListener("data", this.afterData)
    this.input.removeListener("keypress", this.onKeypress)
    this.output.removeListener("resize", this.onResize)
    this.input.setRawMode?.(false)
    this.input.pause()
  }

  private get columns() {
    return Math.max(10, this.output.columns ?? 80)
  }

  private update(change: () => void): void {
    this.erase()
    change()
    this.draw()
  }

  private redraw(): void {
    this.update(() => {})
  }

  /** Moves to the first row of the live area and clears from there down. */
  private erase(): void {
    if (this.drawnRows === 0) return
    this.output.write(`\r${this.cursorRow > 0 ? `${ESC}[${this.cursorRow}A` : ""}${ESC}[J`)
    this.drawnRows = 0
    this.cursorRow = 0
  }

  private draw(): void {
    if (this.closed) return
    const columns = this.columns
    const rows: Array<string> = []
    let taken = 0
    if (this.held !== "") {
      rows.push(this.held)
      taken += rowsOf(this.held, columns)
    }
    if (this.status !== undefined) {
      const status = this.status.length > columns - 1 ? this.status.slice(0, columns - 1) : this.status
      rows.push(status)
      taken += 1
    }
    const input = LineEditor.render(this.state, this.prompt, columns)
    rows.push(...input.rows)
    const total = taken + input.rows.length
    const cursorRow = taken + input.cursorRow
    const up = total - 1 - cursorRow
    this.output.write(
      rows.join("\r\n") + (up > 0 ? `${ESC}[${up}A` : "") + "\r" +
        (input.cursorColumn > 0 ? `${ESC}[${input.cursorColumn}C` : "")
    )
    this.drawnRows = total
    this.cursorRow = cursorRow
    this.dirty = false
  }
}
