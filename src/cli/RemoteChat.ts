/**
 * `tiller chat --server URL`: the chat on a session served by `tiller serve`. Its input is read as
 * the in-process chat reads it (`ChatInput`: the line editor on a terminal, else the lines of
 * standard input) and goes to the server: a plain line steers (it starts a turn when the agent is
 * idle), `/queue` is a followup, `/inject` an inject, `/cancel` a cancel; the output is the
 * session's events from the server's event stream, printed by the chat's own view (`chatView`).
 * What needs the session in this process (`/drop`, `/edit`, `/ref`, `/fork`, `/compact`, answering
 * approvals, MCP) is refused with a line saying so.
 *
 * @since 0.1.0
 */
import type { FileSystem } from "@effect/platform"
import { Clock, Effect, Fiber, Option, Schedule, Stream, SubscriptionRef } from "effect"
import * as Cost from "../domain/Cost.js"
import type { SessionEvent } from "../domain/Event.js"
import { LOG_FORMAT_VERSION } from "../domain/Event.js"
import { userMessage } from "../domain/Message.js"
import type { PriceTable } from "../domain/Prices.js"
import * as Prices from "../domain/Prices.js"
import * as ChatInput from "./ChatInput.js"
import type { CliError } from "./CliError.js"
import * as Output from "./Output.js"
import { storedEvents } from "./RemoteRun.js"
import type { RemoteSession, ServerError, SessionInfo } from "./RemoteSession.js"
import { CANCEL_GRACE, terminating, withinGrace } from "./SessionCommand.js"
import type { InputEvent } from "./Terminal.js"
import { chatView, spentNote, statusLine, timeline } from "./Timeline.js"

const HELP = [
  "This chat runs on the server: a plain line steers the running turn (it enters the turn's next step;",
  "when the agent is idle, it starts a turn).",
  "  /queue TEXT     queue TEXT as the prompt of a later turn of its own",
  "  /inject TEXT    add TEXT as context for the next step, without waking the agent",
  "  /pending        list the pending input: next-step items, then the queued prompts",
  "  /cancel         cancel the running turn and discard pending input",
  "  /cancel --keep  cancel the running turn and keep pending input",
  "  /status         print the status line: idle or running, turn and step, pending input",
  "  /log            print this session's timeline",
  "  /help           this help",
  "  /quit           wait until the agent is idle, then exit (end of input does the same)",
  "Esc, or Ctrl-C while a turn runs, interrupts the turn and keeps the pending input; Ctrl-C twice at",
  "the idle prompt, or Ctrl-D, exits. /drop, /edit, /ref, /fork, /compact and approvals need the session",
  "in this process: run the chat without --server on the server's database for them."
]

/** Commands of the in-process chat that need the session in this process. */
const LOCAL_ONLY = new Set(["/drop", "/edit", "/ref", "/fork", "/compact"])

/** Two Ctrl-C presses at the idle prompt within this many milliseconds exit the chat. */
const EXIT_PRESS_WINDOW_MS = 2000

/** How often the chat asks the server whether the agent is idle when it waits for that. */
const IDLE_POLL = "200 millis"

/**
 * The chat on `session` over its server (see the module's description).
 *
 * @since 0.1.0
 * @category commands
 */
export const chatRemote = (
  session: RemoteSession,
  options: { readonly prices?: PriceTable | undefined }
): Effect.Effect<void, ServerError | CliError, FileSystem.FileSystem> =>
  Effect.scoped(Effect.gen(function*() {
    const sessionId = session.sessionId
    const before = yield* session.info
    const from = Option.match(before, { onNone: () => 0, onSome: (info) => info.events })
    const seedLength = Option.match(before, { onNone: () => 0, onSome: (info) => info.header.seedLength })
    const view = chatView(seedLength)
    // Every event seen so far: the stored prefix, then the followed ones.
    const seen: Array<SessionEvent> = [...yield* storedEvents(session, from)]
    for (const event of seen) view.render(event, false)
    const spentOf = () => spentNote(Cost.sessionCost(seen, options.prices ?? Prices.PRICES, { from: seedLength }).total)
    const statusOf = (info: SessionInfo) =>
      statusLine(
        info.status,
        {
          ...view.position(),
          pending: {
            nextTurn: info.pending.nextTurn.map((item) => userMessage(item)),
            nextStep: info.pending.nextStep.map((item) => userMessage(item))
          }
        },
        undefined,
        spentOf()
      )
    const currentInfo = Effect.flatMap(session.info, (info) =>
      Option.match(info, {
        // A new session the chat has sent nothing to yet.
        onNone: () =>
          Effect.map(Clock.currentTimeMillis, (now): SessionInfo => ({
            sessionId,
            status: "idle",
            turns: 0,
            events: 0,
            pending: { nextTurn: [], nextStep: [] },
            header: { formatVersion: LOG_FORMAT_VERSION, sessionId, createdAt: now, seedLength: 0 }
          })),
        onSome: Effect.succeed
      }))
    const currentStatus = Effect.map(currentInfo, statusOf)

    const input = yield* ChatInput.open(undefined)
    const turns = view.position().turn
    yield* Output.lines([
      `tiller chat · session ${sessionId} (${
        from === 0 ? "new" : `resumed: ${turns} turn${turns === 1 ? "" : "s"}, ${from} events`
      })`,
      `server ${session.server}`,
      "Type a message, or /help for the commands."
    ])
    let lastStatus: "idle" | "running" = Option.match(before, {
      onNone: () => "idle",
      onSome: (info) => info.status
    })
    yield* Output.lines([yield* currentStatus])

    // The events from the server, printed as they come; `printed` is the last seq printed.
    const printed = yield* SubscriptionRef.make(from - 1)
    const follower = yield* session.events(from).pipe(
      Stream.runForEach((event) =>
        Effect.gen(function*() {
          seen.push(event)
          input.progress.observe(event)
          let text = view.render(event)
          if (event.type === "turn/start") lastStatus = "running"
          // A turn ended and no next turn started: say so if the agent is idle now.
          if (event.type === "turn/end" && !view.position().inTurn) {
            const info = yield* currentInfo
            if (info.status === "idle") {
              text += view.line(statusOf(info))
              lastStatus = "idle"
            }
          }
          yield* Output.write(text)
          yield* SubscriptionRef.set(printed, event.seq)
        })
      ),
      Effect.forkScoped
    )
    // Waits until every event stored now has been printed.
    const caughtUp = Effect.flatMap(currentInfo, (info) =>
      printed.changes.pipe(Stream.takeUntil((seq) => seq >= info.events - 1), Stream.runDrain))
    const whenIdle = Effect.repeat(
      Effect.map(currentInfo, (info) =>
        info.status === "idle"),
      {
        until: (isIdle) => isIdle,
        schedule: Schedule.spaced(IDLE_POLL)
      }
    )

    const acknowledge = (note: string) =>
      Effect.flatMap(currentStatus, (status) => Output.write(view.line(`(${note}) ${status}`)))

    // A waking delivery to an idle agent starts a turn, whose start line follows; one to a running
    // agent is acknowledged with the pending counts it changed.
    const wake = (delivery: Effect.Effect<unknown, ServerError>, note: string) =>
      Effect.gen(function*() {
        const was = (yield* currentInfo).status
        yield* delivery
        if (was === "running") yield* acknowledge(note)
        return true
      })

    const pendingLines = (info: SessionInfo): ReadonlyArray<string> => {
      const items = [
        ...info.pending.nextStep.map((item) => ({ list: "next-step", text: item.text })),
        ...info.pending.nextTurn.map((item) => ({ list: "queued", text: item.text }))
      ]
      return items.length === 0 ? ["(nothing pending)"] : [
        "pending input (next-step enters the next step; queued prompts run as turns of their own, in order):",
        ...items.map((item, i) =>
          `  ${String(i + 1).padStart(2)}. ${item.list.padEnd(9)} ${item.text.replace(/\n/g, " ⏎ ").slice(0, 100)}`
        )
      ]
    }

    const handle = (line: string): Effect.Effect<boolean> => {
      const trimmed = line.trim()
      if (trimmed === "") return Effect.succeed(true)
      const space = trimmed.search(/\s/)
      const command = trimmed.startsWith("/") ? (space === -1 ? trimmed : trimmed.slice(0, space)) : undefined
      const rest = command === undefined ? trimmed : trimmed.slice(command.length).trim()
      const usage = (text: string) => Effect.as(Output.errorLine(`usage: ${text}`), true)
      const action: Effect.Effect<boolean, ServerError> = (() => {
        switch (command) {
          case undefined:
            return wake(session.deliver("steer", trimmed), "steering: enters the next step")
          case "/quit":
          case "/exit":
            return Effect.succeed(false)
          case "/help":
            return Effect.as(Output.lines(HELP), true)
          case "/status":
            return Effect.as(Effect.flatMap(currentStatus, (status) => Output.write(view.line(status))), true)
          case "/queue":
            if (rest === "") return usage("/queue TEXT")
            return wake(session.deliver("followup", rest), "queued for a later turn")
          case "/inject":
            if (rest === "") return usage("/inject TEXT")
            return session.deliver("inject", rest).pipe(
              Effect.zipRight(acknowledge("context for the next step")),
              Effect.as(true)
            )
          case "/cancel":
            if (rest !== "" && rest !== "--keep") return usage("/cancel [--keep]")
            return session.cancel(rest === "--keep").pipe(
              Effect.zipRight(
                acknowledge(`cancel requested; pending input ${rest === "--keep" ? "kept" : "discarded"}`)
              ),
              Effect.as(true)
            )
          case "/pending":
            if (rest !== "") return usage("/pending")
            return Effect.as(Effect.flatMap(currentInfo, (info) => Output.lines(pendingLines(info))), true)
          case "/log":
            return Effect.gen(function*() {
              const info = yield* currentInfo
              const renderer = timeline(info.header)
              yield* Output.lines([...renderer.heading, ...seen.flatMap((event) => renderer.render(event))])
              return true
            })
          default:
            if (LOCAL_ONLY.has(command)) {
              return Effect.as(
                Output.errorLine(`${command} needs the session in this process; it is not available with --server`),
                true
              )
            }
            return Effect.as(Output.errorLine(`unknown command ${command}; /help lists the commands`), true)
        }
      })()
      // A refused delivery is reported and the chat goes on; the session is unchanged.
      return Effect.catchAll(action, (error) => Effect.as(Output.errorLine(`tiller: ${error.message}`), true))
    }

    // Esc, or Ctrl-C while a turn runs: the turn ends cancelled by the user; pending input stays.
    const interrupt = Effect.gen(function*() {
      if ((yield* currentInfo).status === "idle") return false
      yield* session.cancel(true)
      yield* acknowledge("interrupted; pending input kept")
      return true
    })
    let lastCtrlC = Number.NEGATIVE_INFINITY
    const onInput = (event: InputEvent): Effect.Effect<boolean, CliError> => {
      switch (event._tag) {
        case "line":
          return handle(event.text)
        case "eof":
          return Effect.succeed(false)
        case "interrupt":
          return Effect.as(Effect.ignore(interrupt), true)
        case "ctrl-c":
          return Effect.gen(function*() {
            if (yield* Effect.orElseSucceed(interrupt, () => false)) return true
            const now = yield* Clock.currentTimeMillis
            if (now - lastCtrlC < EXIT_PRESS_WINDOW_MS) return false
            lastCtrlC = now
            yield* Output.lines(["(Ctrl-C again to exit, or Ctrl-D; pending input is kept)"])
            return true
          })
      }
    }

    const goodbye = Effect.gen(function*() {
      const info = yield* currentInfo
      if (lastStatus !== "idle") yield* Output.write(view.line(statusOf(info)))
      if (info.pending.nextTurn.length + info.pending.nextStep.length > 0) {
        yield* Output.lines([
          `pending input kept: ${info.pending.nextTurn.length} queued, ${info.pending.nextStep.length} next-step (it runs with the next turn)`
        ])
      }
      yield* Output.lines([
        `session ${sessionId} is on the server ${session.server}; continue it with: tiller chat --server ${
          Output.shellWord(session.server)
        } --session ${Output.shellWord(sessionId)}`
      ])
    })

    const converse = Effect.gen(function*() {
      yield* Stream.runForEachWhile(input.events, onInput)
      yield* whenIdle
      yield* caughtUp
    })
    // The follower ends only by failing (the server unreachable): the chat ends with that failure.
    yield* Effect.raceFirst(converse, Fiber.join(follower)).pipe(
      // SIGINT: the running turn ends as cancelled by the user (pending input kept).
      Effect.onInterrupt(() =>
        Effect.gen(function*() {
          if (yield* terminating) return
          yield* withinGrace(Effect.ignore(session.cancel(true)))
          yield* withinGrace(Effect.ignore(Effect.zipRight(whenIdle, caughtUp)))
          yield* Effect.ignore(Effect.timeout(goodbye, CANCEL_GRACE))
        })
      )
    )
    yield* goodbye
  }))
