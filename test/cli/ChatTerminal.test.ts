/**
 * `tiller chat` on a real pseudo-terminal (tmux, 160x50), as a new user meets it: keys typed one by
 * one, bracketed pastes, Esc and Ctrl-C, the progress line, the pending-input commands, forks and
 * the input history of an earlier run. What the chat stored is read from its SQLite file.
 */
import { beforeAll, describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { execFileSync } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { tempDir } from "./harness.js"
import type { Pane } from "./terminalHarness.js"
import { enteredTexts, openPane, poll, storedEvents, textOf, waitForStored } from "./terminalHarness.js"

const BIN = fileURLToPath(new URL("../../bin/tiller.mjs", import.meta.url))
const TIMEOUT = 60_000
const DB = "chat.db"

/** The first run may bundle the CLI: done once here, so that no test pays for it. */
beforeAll(() => {
  execFileSync(process.execPath, [BIN, "--help"], { stdio: "ignore", timeout: 170_000 })
}, 180_000)

/** A chat on `session` in a fresh pane of `dir`, once it is ready for input. */
const chatOn = (dir: string, session: string) =>
  Effect.gen(function*() {
    const pane = yield* openPane(dir, ["chat", "--db", DB, "--session", session])
    yield* pane.waitForText("Type a message, or /help for the commands.")
    return pane
  })

/** Types `line` and presses Enter. */
const send = (pane: Pane, line: string) => Effect.zipRight(pane.type(line), pane.keys("Enter"))

/** The stored turn ends of `events`: `N kind[ reason]`. */
const turnEnds = (events: ReadonlyArray<any>): ReadonlyArray<string> =>
  events.filter((e) => e.type === "turn/end").map((e) =>
    `${e.data.turn} ${e.data.reason.kind}${e.data.reason.reason ? ` ${e.data.reason.reason.kind}` : ""}`
  )

/** The texts entered into each step, as `turn.step: text | text`. */
const steps = (events: ReadonlyArray<any>): ReadonlyArray<string> => {
  const out: Array<string> = []
  let at = ""
  let texts: Array<string> = []
  const flush = () => {
    if (at !== "") out.push(`${at}: ${texts.join(" | ")}`)
  }
  for (const e of events) {
    if (e.type === "step/start") {
      flush()
      at = `${e.data.turn}.${e.data.step}`
      texts = []
    } else if (e.type === "user/message") texts.push(textOf(e.data.content))
  }
  flush()
  return out
}

/** The inbox's two lists as the stored splices leave them. */
const pendingOf = (events: ReadonlyArray<any>) => {
  const lists: Record<string, Array<{ id: string; text: string }>> = { "next-turn": [], "next-step": [] }
  for (const e of events) {
    if (e.type !== "agent/inbox/spliced") continue
    lists[e.data.target]!.splice(
      e.data.start,
      e.data.removedCount ?? 0,
      ...e.data.inserted.map((m: any) => ({ id: m.id, text: textOf(m.content) }))
    )
  }
  return { queued: lists["next-turn"]!, nextStep: lists["next-step"]! }
}

/** Whether the log holds a discard of pending input (an inbox splice with outcome `canceled`). */
const discarded = (events: ReadonlyArray<any>) =>
  events.some((e) => e.type === "agent/inbox/spliced" && e.data.outcome === "canceled")

/**
 * A turn kept running by the demo model's wait tool (10 s, the longest it waits), with one
 * next-step item (`/inject ctx`) and one queued prompt (`/queue later`) pending beside it.
 */
const runningWithPending = (pane: Pane) =>
  Effect.gen(function*() {
    yield* send(pane, "/wait 10000")
    yield* pane.waitForText(`→ wait {"ms":"10000"}`)
    yield* send(pane, "/inject ctx")
    yield* pane.waitForText("(context for the next step)")
    yield* send(pane, "/queue later")
    yield* pane.waitForText("(queued for a later turn)")
  })

describe("tiller chat on a terminal (tmux)", () => {
  it.scopedLive(
    "arrow keys, Home and End move the cursor within the typed line: the message stored is the edited text",
    () =>
      Effect.gen(function*() {
        const dir = yield* tempDir
        const pane = yield* chatOn(dir, "keys")
        yield* pane.type("helo world")
        yield* pane.keys(...Array.from({ length: 7 }, () => "Left"))
        yield* pane.type("l")
        yield* pane.keys("Home")
        yield* pane.type("say: ")
        yield* pane.keys("End")
        yield* pane.type("!")
        yield* pane.waitForText("› say: hello world!")
        yield* pane.keys("Enter")
        const events = yield* waitForStored(
          path.join(dir, DB),
          "keys",
          "the message",
          (events) => enteredTexts(events).length > 0,
          pane
        )
        expect(enteredTexts(events)).toEqual(["say: hello world!"])
      }),
    TIMEOUT
  )

  it.scopedLive("Ctrl-L clears the screen and puts nothing into the typed message", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const pane = yield* chatOn(dir, "clear")
      yield* pane.type("before ")
      yield* pane.keys("C-l")
      // The screen is cleared: the banner is gone and the typed line is redrawn at the top.
      yield* poll(
        pane.screen,
        (rows) => rows[0] === "› before",
        (rows) => `a cleared screen, not:\n${rows?.join("\n")}`
      )
      yield* pane.type("after")
      yield* pane.keys("Enter")
      const events = yield* waitForStored(
        path.join(dir, DB),
        "clear",
        "the message",
        (events) => enteredTexts(events).length > 0,
        pane
      )
      expect(enteredTexts(events)).toEqual(["before after"])
    }), TIMEOUT)

  it.scopedLive("a pasted line of 6,000 characters is stored whole", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const pane = yield* chatOn(dir, "long")
      const long = Array.from({ length: 6000 }, (_, i) => String.fromCharCode(97 + (i % 26))).join("")
      yield* pane.paste(long)
      // The whole paste is in the input (its last characters shown) before it is sent.
      yield* pane.waitForText(long.slice(-40))
      yield* pane.keys("Enter")
      const events = yield* waitForStored(path.join(dir, DB), "long", "the message", (events) =>
        enteredTexts(events).length > 0, pane)
      expect(
        enteredTexts(events).map((text) =>
          text.length
        )
      ).toEqual([6000])
      expect(enteredTexts(events)).toEqual([long])
    }), TIMEOUT)

  it.scopedLive(
    "pasting three lines gives one message of three lines (shown with a · margin), sent as one turn by Enter",
    () =>
      Effect.gen(function*() {
        const dir = yield* tempDir
        const pane = yield* chatOn(dir, "lines")
        yield* pane.paste("first line\nsecond line\nthird line")
        yield* pane.waitForText("› first line\n· second line\n· third line")
        // Nothing is sent before Enter.
        expect(enteredTexts(yield* storedEvents(path.join(dir, DB), "lines"))).toEqual([])
        yield* pane.keys("Enter")
        const events = yield* waitForStored(path.join(dir, DB), "lines", "a turn end", (events) =>
          turnEnds(events).length > 0, pane)
        expect(enteredTexts(events)).toEqual(["first line\nsecond line\nthird line"])
        expect(events.filter((e) =>
          e.type === "turn/start"
        )).toHaveLength(1)
      }),
    TIMEOUT
  )

  it.scopedLive(
    "output streamed while a line is half typed lands above it: the typed text stays whole on the input line",
    () =>
      Effect.gen(function*() {
        const dir = yield* tempDir
        const pane = yield* chatOn(dir, "typing")
        yield* send(pane, "/wait 3000")
        yield* pane.waitForText(`→ wait {"ms":"3000"}`)
        yield* pane.type("half typed")
        // The tool ends, the model streams its answer and the turn ends while the line is half typed.
        yield* pane.waitForText("── turn 1 completed")
        yield* pane.waitForText("[idle · 1 turn")
        const rows = (yield* pane.screen).filter((row) => row !== "")
        expect(rows.filter((row) => row.includes("half typed"))).toEqual(["› half typed"])
        expect(rows[rows.length - 1]).toBe("› half typed")
        yield* pane.keys("Enter")
        const events = yield* waitForStored(path.join(dir, DB), "typing", "the second message", (events) =>
          enteredTexts(events).length > 1, pane)
        expect(enteredTexts(events)).toEqual(["/wait 3000", "half typed"])
      }),
    TIMEOUT
  )

  it.scopedLive(
    "a progress line shows the running tool and its elapsed seconds, which count up while it runs",
    () =>
      Effect.gen(function*() {
        const dir = yield* tempDir
        const pane = yield* chatOn(dir, "progress")
        yield* send(pane, "/wait 6000")
        const seen = new Set<string>()
        yield* poll(pane.screen, (rows) => {
          for (const row of rows) {
            const elapsed = /running wait (\d+) s · turn 1 step 1 .*· Esc interrupts/.exec(row)
            if (elapsed !== null) seen.add(elapsed[1]!)
          }
          return seen.size >= 2
        }, () => `a progress line whose elapsed seconds change; it showed ${[...seen].join(", ") || "none"}`)
        expect(seen.size).toBeGreaterThanOrEqual(2)
      }),
    TIMEOUT
  )

  it.scopedLive(
    "Esc interrupts the running turn: the chat stays open, and the pending input is kept, not discarded",
    () =>
      Effect.gen(function*() {
        const dir = yield* tempDir
        const pane = yield* chatOn(dir, "esc")
        yield* runningWithPending(pane)
        yield* pane.keys("Escape")
        yield* pane.waitForText("(interrupted; pending input kept)")
        const events = yield* waitForStored(
          path.join(dir, DB),
          "esc",
          "the turn's end",
          (events) => turnEnds(events).length > 0,
          pane
        )
        expect(turnEnds(events)).toEqual(["1 aborted user"])
        expect(discarded(events)).toBe(false)
        expect(pendingOf(events)).toMatchObject({ nextStep: [{ text: "ctx" }], queued: [{ text: "later" }] })
        // Still open: it answers a command.
        yield* send(pane, "/pending")
        yield* pane.waitForText("2. queued    [user] later")
        expect(yield* pane.exitCode).toBeUndefined()
      }),
    TIMEOUT
  )

  it.scopedLive(
    "Ctrl-C while a turn runs interrupts it: the chat stays open, and the pending input is kept, not discarded",
    () =>
      Effect.gen(function*() {
        const dir = yield* tempDir
        const pane = yield* chatOn(dir, "ctrlc")
        yield* runningWithPending(pane)
        yield* pane.keys("C-c")
        yield* pane.waitForText("(interrupted; pending input kept)")
        const events = yield* waitForStored(path.join(dir, DB), "ctrlc", "the turn's end", (events) =>
          turnEnds(events).length > 0, pane)
        expect(turnEnds(events)).toEqual(["1 aborted user"])
        expect(discarded(events)).toBe(false)
        expect(pendingOf(events)).toMatchObject({ nextStep: [{ text: "ctx" }], queued: [{ text: "later" }] })
        yield* send(pane, "/status")
        yield* pane.waitForText("[idle · 1 turn · pending: 1 queued, 1 next-step")
        expect(yield* pane.exitCode).toBeUndefined()
      }),
    TIMEOUT
  )

  it.scopedLive(
    "Ctrl-C at the idle prompt asks for a second press, which exits the chat (exit code 0, session saved)",
    () =>
      Effect.gen(function*() {
        const dir = yield* tempDir
        const pane = yield* chatOn(dir, "quit")
        yield* pane.keys("C-c")
        yield* pane.waitForText("(Ctrl-C again to exit, or Ctrl-D; pending input is kept)")
        expect(yield* pane.exitCode).toBeUndefined()
        yield* pane.keys("C-c")
        expect(yield* pane.waitForExit).toBe(0)
        yield* pane.waitForText("session quit is saved; continue it with: tiller resume quit")
      }),
    TIMEOUT
  )

  it.scopedLive(
    "/pending lists the pending items, numbered, with their lists and sources",
    () =>
      Effect.gen(function*() {
        const dir = yield* tempDir
        const pane = yield* chatOn(dir, "pending")
        yield* runningWithPending(pane)
        yield* send(pane, "steer now")
        yield* pane.waitForText("(steering: enters the next step)")
        yield* send(pane, "/pending")
        yield* pane.waitForText(
          "pending input (next-step enters the next step; queued prompts run as turns of their own, in order):\n" +
            "   1. next-step [cli:inject] ctx\n" +
            "   2. next-step [user] steer now\n" +
            "   3. queued    [user] later\n" +
            "  /drop N removes an item; /edit N TEXT rewrites it"
        )
        yield* pane.keys("Escape")
        yield* pane.waitForText("(interrupted; pending input kept)")
      }),
    TIMEOUT
  )

  it.scopedLive(
    "/drop N removes pending item N and /edit N rewrites it in place (typed, or put into the input line), each stored at once",
    () =>
      Effect.gen(function*() {
        const dir = yield* tempDir
        const pane = yield* chatOn(dir, "edit")
        yield* runningWithPending(pane)
        yield* send(pane, "steer now")
        yield* pane.waitForText("(steering: enters the next step)")
        // Parked: the turn ends and keeps the pending input, so nothing takes it meanwhile.
        yield* send(pane, "/cancel --keep")
        yield* pane.waitForText("── turn 1 ")
        const file = path.join(dir, DB)
        const before = pendingOf(yield* storedEvents(file, "edit"))
        expect(before.nextStep.map((m) => m.text)).toEqual(["ctx", "steer now"])

        yield* send(pane, "/drop 1")
        yield* pane.waitForText("(dropped next-step item 1: ctx)")
        yield* waitForStored(file, "edit", "the drop", (events) => pendingOf(events).nextStep.length === 1, pane)

        yield* send(pane, "/edit 2 later, rewritten")
        yield* pane.waitForText("(edited queued item 2: later, rewritten)")
        // `/edit N` alone puts the item's text into the input line, to be changed and sent.
        yield* send(pane, "/edit 1")
        yield* pane.waitForText("› /edit 1 steer now")
        yield* pane.type(" and more")
        yield* pane.keys("Enter")
        yield* pane.waitForText("(edited next-step item 1: steer now and more)")

        const events = yield* waitForStored(file, "edit", "both edits", (events) =>
          pendingOf(events).nextStep[0]?.text === "steer now and more", pane)
        const after = pendingOf(events)
        expect(after).toEqual({
          nextStep: [{ id: before.nextStep[1]!.id, text: "steer now and more" }],
          queued: [{ id: before.queued[0]!.id, text: "later, rewritten" }]
        })
      }),
    TIMEOUT
  )

  it.scopedLive(
    "/fork inside the chat copies the session up to the last ended turn into a new session",
    () =>
      Effect.gen(function*() {
        const dir = yield* tempDir
        const pane = yield* chatOn(dir, "fa")
        yield* send(pane, "hello")
        yield* pane.waitForText("── turn 1 completed")
        yield* send(pane, "/fork --as fb")
        yield* pane.waitForText("as fb; continue it with: tiller resume fb)")
        const source = yield* storedEvents(path.join(dir, DB), "fa")
        const child = yield* storedEvents(path.join(dir, DB), "fb")
        expect(child.map((e) => e.type)).toEqual([...source.map((e) => e.type), "session/end-seed"])
        expect(enteredTexts(child)).toEqual(["hello"])
      }),
    TIMEOUT
  )

  it.scopedLive(
    "a fork child starts with an empty inbox: a prompt queued in the source before the fork point is not pending in the child",
    () =>
      Effect.gen(function*() {
        const dir = yield* tempDir
        const source = yield* chatOn(dir, "fa")
        yield* send(source, "/wait 3000")
        yield* source.waitForText(`→ wait {"ms":"3000"}`)
        yield* send(source, "/queue later")
        yield* source.waitForText("(queued for a later turn)")
        // The queued prompt runs as turn 2; turn 1 ended with it still queued.
        yield* source.waitForText("── turn 2 completed")
        yield* send(source, "/fork --at 1 --as fb")
        yield* source.waitForText("(forked at the end of turn 1")
        yield* send(source, "/quit")
        expect(yield* source.waitForExit).toBe(0)

        const child = yield* chatOn(dir, "fb")
        yield* child.waitForText("[idle · 1 turn · pending: 0 queued, 0 next-step")
        yield* send(child, "/pending")
        yield* child.waitForText("(nothing pending)")
      }),
    TIMEOUT
  )

  it.scopedLive(
    "after /cancel --keep (1 queued, 2 next-step), a typed line enters one step with the next-step items; the older queued prompt runs as a later turn of its own",
    () =>
      Effect.gen(function*() {
        const dir = yield* tempDir
        const pane = yield* chatOn(dir, "keep")
        yield* runningWithPending(pane)
        yield* send(pane, "steer")
        yield* pane.waitForText("(steering: enters the next step)")
        yield* send(pane, "/cancel --keep")
        yield* pane.waitForText("(cancel requested; pending input kept)")
        yield* pane.waitForText("── turn 1 ")
        yield* send(pane, "go on")
        const events = yield* waitForStored(path.join(dir, DB), "keep", "three turn ends", (events) =>
          turnEnds(events).length >= 3, pane)
        expect(turnEnds(events)).toEqual(["1 aborted user", "2 completed", "3 completed"])
        expect(steps(events)).toEqual(["1.1: /wait 10000", "2.1: ctx | steer | go on", "3.1: later"])
      }),
    TIMEOUT
  )

  it.scopedLive(
    "lines typed in an earlier chat run are recalled with ↑ in the next one (the history is kept beside the database)",
    () =>
      Effect.gen(function*() {
        const dir = yield* tempDir
        const first = yield* chatOn(dir, "h1")
        yield* send(first, "first line")
        yield* first.waitForText("── turn 1 completed")
        yield* send(first, "second line")
        yield* first.waitForText("── turn 2 completed")
        yield* first.keys("C-d")
        expect(yield* first.waitForExit).toBe(0)
        expect(fs.existsSync(path.join(dir, `${DB}.history`))).toBe(true)

        const second = yield* chatOn(dir, "h2")
        yield* second.keys("Up")
        yield* second.waitFor("› second line on the input line", (t) => t.endsWith("› second line"))
        yield* second.keys("Up")
        yield* second.waitFor("› first line on the input line", (t) => t.endsWith("› first line"))
        yield* second.keys("Enter")
        const events = yield* waitForStored(path.join(dir, DB), "h2", "the recalled line", (events) =>
          enteredTexts(events).length > 0, second)
        expect(enteredTexts(events)).toEqual(["first line"])
      }),
    TIMEOUT
  )
})
