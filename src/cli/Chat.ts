/**
 * `tiller chat` and `tiller run`: a session driven from the command line. The chat reads its input
 * line by line while the agent runs (a terminal or a pipe alike) and prints the session's log as it
 * grows; `run` delivers one prompt and reports how its turn ended.
 *
 * @since 0.1.0
 */
import * as NodeStream from "@effect/platform-node/NodeStream"
import type { Scope } from "effect"
import { Context, Effect, Stream, SubscriptionRef } from "effect"
import type { EventOf, SessionEvent } from "../domain/Event.js"
import type { SessionId } from "../domain/Ids.js"
import { newUserMessage } from "../domain/Message.js"
import { CancelCause } from "../domain/Values.js"
import type { MessageSource } from "../domain/Values.js"
import { Driver } from "../services/Driver.js"
import { SessionLog } from "../services/SessionLog.js"
import { Sessions } from "../services/Sessions.js"
import { CliError, ExitWith } from "./CliError.js"
import * as Output from "./Output.js"
import { chatView, describeReason, statusLine, textOf, timeline } from "./Timeline.js"

/**
 * The source of a message injected from the CLI.
 *
 * @since 0.1.0
 * @category constants
 */
export const INJECT_SOURCE: MessageSource = { kind: "cli", command: "inject" }

const HELP = [
  "A plain line steers the running turn (or starts a turn when the agent is idle).",
  "  /queue TEXT     queue TEXT as the prompt of a later turn",
  "  /inject TEXT    add TEXT as context for the next step, without waking the agent",
  "  /cancel         cancel the running turn and discard pending input",
  "  /cancel --keep  cancel the running turn and keep pending input",
  "  /log            print this session's timeline",
  "  /help           this help",
  "  /quit           wait until the agent is idle, then exit (end of input does the same)",
  "  /TOOL ARG       (a line naming a tool is sent as a message; the demo model calls the tool)"
]

/**
 * Follows the log from `fromSeq`, handing each chunk of events to `print`; `caughtUp` waits until
 * every event appended before it was called has been printed.
 */
const follow = (
  log: SessionLog["Type"],
  fromSeq: number,
  print: (events: ReadonlyArray<SessionEvent>) => Effect.Effect<void>
): Effect.Effect<{ readonly caughtUp: Effect.Effect<void> }, never, Scope.Scope> =>
  Effect.gen(function*() {
    const printed = yield* SubscriptionRef.make(fromSeq - 1)
    yield* log.stream(fromSeq).pipe(
      Stream.runForEachChunk((chunk) => {
        const events = Array.from(chunk)
        return Effect.zipRight(print(events), SubscriptionRef.set(printed, events[events.length - 1]!.seq))
      }),
      Effect.forkScoped
    )
    const caughtUp = Effect.flatMap(log.events, (events) =>
      printed.changes.pipe(
        Stream.takeUntil((seq) => seq >= events.length - 1),
        Stream.runDrain
      ))
    return { caughtUp }
  })

/** The lines of standard input, as they arrive. */
const stdinLines: Stream.Stream<string, CliError> = NodeStream.fromReadable(
  () => process.stdin,
  (cause) => new CliError({ reason: `cannot read standard input: ${String(cause)}` })
).pipe(Stream.decodeText(), Stream.splitLines)

/**
 * An interactive (or piped) chat on `sessionId`, created when it is not stored.
 *
 * @since 0.1.0
 * @category commands
 */
export const chat = (
  sessionId: SessionId,
  options: { readonly toolNames: ReadonlyArray<string>; readonly db: string; readonly model: string }
) =>
  Effect.scoped(Effect.gen(function*() {
    const sessions = yield* Sessions
    const context = yield* sessions.open(sessionId)
    const driver = Context.get(context, Driver)
    const log = Context.get(context, SessionLog)
    const view = chatView()
    let lastStatus: "idle" | "running" = "idle"

    // The stored prefix only advances the view's fold; events from this process on are printed.
    const stored = yield* log.events
    let out = ""
    for (const event of stored) out += view.render(event, event.seq >= log.firstLiveSeq)
    const turns = view.position().turn
    yield* Output.lines([
      `tiller chat · session ${sessionId} (${log.firstLiveSeq === 0 ? "new" : `resumed: ${turns} turn${turns === 1 ? "" : "s"}, ${log.firstLiveSeq} events`})`,
      `db ${options.db} · model ${options.model} · tools: ${options.toolNames.length === 0 ? "none" : options.toolNames.join(", ")}`,
      "Type a message, or /help for the commands."
    ])
    yield* Output.write(out)
    lastStatus = yield* driver.status
    yield* Output.lines([statusLine(lastStatus, view.position())])

    const { caughtUp } = yield* follow(log, stored.length, (events) =>
      Effect.gen(function*() {
        let text = ""
        let ended = false
        for (const event of events) {
          text += view.render(event)
          if (event.type === "turn/start") lastStatus = "running"
          if (event.type === "turn/end") ended = true
        }
        // A turn ended and no next turn started in this chunk: say so if the agent is idle now.
        if (ended && !view.position().inTurn && (yield* driver.status) === "idle") {
          text += view.line(statusLine("idle", view.position()))
          lastStatus = "idle"
        }
        yield* Output.write(text)
      }))

    const deliver = (text: string, source?: MessageSource) => newUserMessage(source === undefined ? { text } : { text, source })

    const handle = (line: string): Effect.Effect<boolean, CliError> => {
      const trimmed = line.trim()
      if (trimmed === "") return Effect.succeed(true)
      const space = trimmed.search(/\s/)
      const command = trimmed.startsWith("/") ? (space === -1 ? trimmed : trimmed.slice(0, space)) : undefined
      const rest = command === undefined ? trimmed : trimmed.slice(command.length).trim()
      const usage = (text: string) => Effect.as(Output.errorLine(`usage: ${text}`), true)
      const action: Effect.Effect<boolean, unknown> = (() => {
        switch (command) {
          case undefined:
            return Effect.as(Effect.flatMap(deliver(trimmed), driver.steer), true)
          case "/quit":
          case "/exit":
            return Effect.succeed(false)
          case "/help":
            return Effect.as(Output.lines(HELP), true)
          case "/queue":
            if (rest === "") return usage("/queue TEXT")
            return Effect.as(Effect.flatMap(deliver(rest), driver.followup), true)
          case "/inject":
            if (rest === "") return usage("/inject TEXT")
            return Effect.as(Effect.flatMap(deliver(rest, INJECT_SOURCE), driver.inject), true)
          case "/cancel":
            if (rest !== "" && rest !== "--keep") return usage("/cancel [--keep]")
            return driver.cancel(CancelCause.user, { keepInbox: rest === "--keep" }).pipe(
              Effect.zipRight(Output.lines([`(cancel requested; pending input ${rest === "--keep" ? "kept" : "discarded"})`])),
              Effect.as(true)
            )
          case "/log":
            return Effect.gen(function*() {
              const renderer = timeline(log.header)
              const events = yield* log.events
              yield* Output.lines([...renderer.heading, ...events.flatMap((event) => renderer.render(event))])
              return true
            })
          default:
            if (options.toolNames.includes(command.slice(1))) return Effect.as(Effect.flatMap(deliver(trimmed), driver.steer), true)
            return Effect.as(Output.errorLine(`unknown command ${command}; /help lists the commands`), true)
        }
      })()
      // A refused delivery is reported and the chat goes on; the session is unchanged.
      return Effect.catchAll(action, (error) =>
        Effect.as(Output.errorLine(`tiller: ${error instanceof Error ? error.message : String(error)}`), true))
    }

    yield* Stream.runForEachWhile(stdinLines, handle)
    yield* driver.whenIdle
    yield* caughtUp
    if (lastStatus !== "idle") yield* Output.write(view.line(statusLine("idle", view.position())))
    yield* Output.lines([`session ${sessionId} is saved; continue it with: tiller resume ${sessionId}`])
  }))

/**
 * One headless turn: inject `contexts`, deliver `prompt`, wait until idle. Prints the final answer
 * (or, with `json`, every event this process appended as one JSON line each); fails with
 * `ExitWith(1)` unless the turn completed.
 *
 * @since 0.1.0
 * @category commands
 */
export const runOnce = (
  sessionId: SessionId,
  prompt: string,
  options: { readonly contexts: ReadonlyArray<string>; readonly json: boolean }
) =>
  Effect.scoped(Effect.gen(function*() {
    const sessions = yield* Sessions
    const context = yield* sessions.open(sessionId)
    const driver = Context.get(context, Driver)
    const log = Context.get(context, SessionLog)
    const from = log.firstLiveSeq
    const printer = options.json
      ? yield* follow(log, from, (events) => Output.lines(events.map((event) => JSON.stringify(event))))
      : undefined
    for (const text of options.contexts) yield* Effect.flatMap(newUserMessage({ text, source: INJECT_SOURCE }), driver.inject)
    yield* Effect.flatMap(newUserMessage({ text: prompt }), driver.followup)
    yield* driver.whenIdle
    if (printer !== undefined) yield* printer.caughtUp
    const events = (yield* log.events).slice(from)
    const lastOf = (type: string, before: number) => {
      for (let i = before - 1; i >= 0; i--) if (events[i]!.type === type) return i
      return -1
    }
    const endAt = lastOf("turn/end", events.length)
    if (endAt === -1) return yield* new CliError({ reason: `session ${sessionId}: the turn did not end (see tiller log ${sessionId})` })
    const end = events[endAt] as EventOf<"turn/end">
    const answerAt = lastOf("assistant/message", endAt)
    const answer = answerAt > lastOf("turn/start", endAt) ? events[answerAt] as EventOf<"assistant/message"> : undefined
    const text = answer === undefined ? "" : textOf(answer.data.message.content.filter((b) => b.type === "text"))
    if (!options.json && text !== "") yield* Output.lines([text])
    if (end.data.reason.kind !== "completed") {
      yield* Output.errorLine(`turn ${end.data.turn} of session ${sessionId} ended: ${describeReason(end.data.reason)}`)
      return yield* new ExitWith({ code: 1 })
    }
  }))
