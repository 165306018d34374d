import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { EventEmitter } from "node:events"
import { PassThrough } from "node:stream"
import type { InputEvent } from "../../src/cli/Terminal.js"
import { Terminal } from "../../src/cli/Terminal.js"

/** A screen that understands what the terminal writes: text, \r, \n, cursor up / right, clear down and clear all. */
class Screen extends EventEmitter {
  rows: Array<string> = [""]
  row = 0
  col = 0
  constructor(readonly columns: number) {
    super()
  }
  write(text: string) {
    let i = 0
    while (i < text.length) {
      const escape = /^\u001b\[([0-9;?]*)([A-Za-z~])/.exec(text.slice(i))
      if (escape !== null) {
        const n = Number(escape[1] === "" ? 1 : escape[1])
        switch (escape[2]) {
          case "A":
            this.row = Math.max(0, this.row - n)
            break
          case "C":
            this.col = Math.min(this.columns, this.col + n)
            break
          case "J":
            if (escape[1] === "2") this.rows = [""]
            else {
              this.rows = this.rows.slice(0, this.row + 1)
              this.rows[this.row] = this.rows[this.row]!.slice(0, this.col)
            }
            break
          case "H":
            this.row = 0
            this.col = 0
            break
        }
        i += escape[0].length
        continue
      }
      const c = text[i++]!
      if (c === "\r") this.col = 0
      else if (c === "\n") {
        this.row++
        this.col = 0
      } else {
        if (this.col >= this.columns) {
          this.row++
          this.col = 0
        }
        while (this.rows.length <= this.row) this.rows.push("")
        const line = this.rows[this.row]!.padEnd(this.col)
        this.rows[this.row] = line.slice(0, this.col) + c + line.slice(this.col + 1)
        this.col++
      }
      while (this.rows.length <= this.row) this.rows.push("")
    }
    return true
  }
  get text() {
    return this.rows.map((row) => row.trimEnd()).join("\n").trimEnd()
  }
}

const setup = (columns = 40) => {
  const input = Object.assign(new PassThrough(), {
    raw: [] as Array<boolean>,
    setRawMode(mode: boolean) {
      this.raw.push(mode)
    }
  })
  const screen = new Screen(columns)
  const events: Array<InputEvent> = []
  const terminal = new Terminal(input, screen, (event) => events.push(event))
  terminal.start()
  const type = (data: string) =>
    Effect.promise(() => new Promise<void>((resolve) => input.write(data, () => setTimeout(resolve, 20))))
  return { input, screen, events, terminal, type }
}

describe("Terminal", () => {
  it.live("output never lands in a half-typed line: it goes above, the typed line is drawn again below", () =>
    Effect.gen(function*() {
      const { screen, terminal, type } = setup()
      yield* type("hel")
      expect(screen.text).toBe("› hel")
      terminal.print("» [user] earlier\n")
      expect(screen.text).toBe("» [user] earlier\n› hel")
      // Streamed text arrives in pieces; the line in progress waits above the input until it ends.
      terminal.print("assistant: Hel")
      terminal.print("lo the")
      expect(screen.text).toBe("» [user] earlier\nassistant: Hello the\n› hel")
      terminal.print("re\n── turn 1 completed\n")
      yield* type("p")
      expect(screen.text).toBe("» [user] earlier\nassistant: Hello there\n── turn 1 completed\n› help")
      terminal.setStatus("⠋ waiting for the model 3 s")
      expect(screen.text).toBe(
        "» [user] earlier\nassistant: Hello there\n── turn 1 completed\n⠋ waiting for the model 3 s\n› help"
      )
      terminal.setStatus(undefined)
      expect(screen.text).toBe("» [user] earlier\nassistant: Hello there\n── turn 1 completed\n› help")
      terminal.close()
    }))

  it.live("keys from the input stream: arrows edit, Enter sends the line, which stays on the screen", () =>
    Effect.gen(function*() {
      const { events, screen, terminal, type } = setup()
      yield* type("helo\u001b[Dl\u001b[C!\r")
      expect(events).toEqual([{ _tag: "line", text: "hello!" }])
      expect(screen.text).toBe("› hello!\n›")
      yield* type("\u001b[A")
      expect(screen.text).toBe("› hello!\n› hello!")
      yield* type("\u000c")
      expect(screen.text).toBe("› hello!")
      terminal.close()
    }))

  it.live("a 6,000-character paste and a three-line paste each arrive whole, as one line event", () =>
    Effect.gen(function*() {
      const { events, terminal, type } = setup()
      const long = "y".repeat(6000)
      yield* type(`\u001b[200~${long}\u001b[201~`)
      yield* type("\r")
      // Without bracketed paste, newlines that arrive in one chunk with more text are a paste too.
      yield* type("one\rtwo\rthree")
      expect(events).toEqual([{ _tag: "line", text: long }])
      yield* type("\r")
      expect(events).toEqual([{ _tag: "line", text: long }, { _tag: "line", text: "one\ntwo\nthree" }])
      // An Enter in the same chunk right after a bracketed paste still sends; the next line is its own.
      yield* type("\u001b[200~a\rb\u001b[201~\r")
      yield* type("c\r")
      expect(events.slice(2)).toEqual([{ _tag: "line", text: "a\nb" }, { _tag: "line", text: "c" }])
      terminal.close()
    }))

  it.live("Esc interrupts; Ctrl-C clears a typed line, and on an empty one is reported; raw mode and paste brackets are undone", () =>
    Effect.gen(function*() {
      const { events, input, screen, terminal, type } = setup()
      // A lone Esc is known as such after a short pause (it could start an escape sequence).
      yield* type("\u001b")
      yield* Effect.sleep("150 millis")
      expect(events).toEqual([{ _tag: "interrupt" }])
      yield* type("draft\u0003")
      expect(screen.text).toBe("›")
      expect(events).toEqual([{ _tag: "interrupt" }])
      yield* type("\u0003")
      yield* type("\u0004")
      expect(events).toEqual([{ _tag: "interrupt" }, { _tag: "ctrl-c" }, { _tag: "eof" }])
      terminal.close()
      expect(input.raw).toEqual([true, false])
    }))
})
