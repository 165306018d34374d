/**
 * `tiller chat` and `tiller run`: a session driven from the command line. The chat reads its input
 * line by line while the agent runs (a terminal or a pipe alike) and prints the session's log as it
 * grows; `run` delivers one prompt and reports how its turn ended.
 *
 * @since 0.1.0
 */
import { Clock, Context, Effect, Either, Option, Stream } from "effect"
import * as Cost from "../domain/Cost.js"
import type { EventOf, SessionEvent } from "../domain/Event.js"
import { SessionId } from "../domain/Ids.js"
import { newUserMessage } from "../domain/Message.js"
import type { PriceTable } from "../domain/Prices.js"
import * as Prices from "../domain/Prices.js"
import { CancelCause } from "../domain/Values.js"
import type { MessageSource, UserMessage } from "../domain/Values.js"
import { SessionReference } from "../layers/SessionReference.js"
import { Sessions } from "../layers/Sessions.js"
import { Compaction } from "../services/Compaction.js"
import { Driver } from "../services/Driver.js"
import { Inbox } from "../services/Inbox.js"
import { Mcp } from "../services/Mcp.js"
import { SessionLog } from "../services/SessionLog.js"
import * as ChatInput from "./ChatInput.js"
import { CliError, ExitWith } from "./CliError.js"
import { compactOpen } from "./Compact.js"
import * as Compositions from "./Compositions.js"
import * as Database from "./Database.js"
import * as ForkPoint from "./ForkPoint.js"
import * as InputHistory from "./InputHistory.js"
import * as McpChat from "./McpChat.js"
import * as Output from "./Output.js"
import * as PendingInput from "./PendingInput.js"
import { CANCEL_GRACE, cancelRunningTurn, follow, saved, terminating, withinGrace } from "./SessionCommand.js"
import type { InputEvent } from "./Terminal.js"
import { chatView, describeReason, spentNote, statusLine, timeline } from "./Timeline.js"
import { lastTurnOutcome } from "./TurnOutcome.js"

/**
 * The source of a message injected from the CLI.
 *
 * @since 0.1.0
 * @category constants
 */
export const INJECT_SOURCE: MessageSource = { kind: "cli", command: "inject" }

const HELP = [
  "A plain line steers the running turn: it enters the turn's next step (when the agent is idle, it",
  "starts a turn; prompts a cancel kept in the queue still run after it, each as a turn of its own).",
  "  /queue TEXT     queue TEXT as the prompt of a later turn of its own",
  "  /inject TEXT    add TEXT as context for the next step, without waking the agent",
  "  /ref ID [--upto SEQ]  add a quoted snapshot of session ID (up to SEQ) as context for the next step;",
  "                  @ID or @ID@SEQ inside a line attaches the snapshot beside that line",
  "  @SERVER:URI     inside a line: the resource URI of MCP server SERVER enters as context before the line",
  "  /mcp__SERVER__PROMPT ARGS  send MCP server SERVER's prompt (ARGS: NAME=VALUE or the values in order)",
  "  /pending        list the pending input, numbered: next-step items, then the queued prompts",
  "  /drop N         remove pending item N",
  "  /edit N TEXT    rewrite pending item N (on a terminal, /edit N puts its text into the input line)",
  "  /cancel         cancel the running turn and discard pending input",
  "  /cancel --keep  cancel the running turn and keep pending input",
  "  /status         print the status line: idle or running, turn and step, pending input",
  "  /log            print this session's timeline",
  "  /fork [--at N | --at-seq S] [--as ID]",
  "                  copy this session up to the end of turn N (default: the last ended turn), or up",
  "                  to seq S, into a new session, to try another way from there (tiller resume ID",
  "                  continues it); --at-turn N is --at N, as in tiller fork",
  "  /compact [FOCUS] compact the context now (between turns): summarise older history, FOCUS steering it",
  "  /help           this help",
  "  /quit           wait until the agent is idle, then exit (end of input does the same)",
  "  y | n [REASON] | always",
  "                  answer the oldest tool call that waits for approval (always: also allow calls like",
  "                  it for the rest of the session); tiller approve ID CALL --allow|--deny answers from",
  "                  another terminal, also after a restart",
  "  /TOOL ARG       a line naming a tool is sent as a message (the demo model calls the tool,",
  "                  e.g. /wait 3000 keeps the turn running for 3 s so that it can be steered)",
  "Keys on a terminal: Enter sends; Alt-Enter, Ctrl-J or a line ending in \\ continues the message on a",
  "new line (a paste is taken whole); ↑ ↓ history (also of earlier chats); ← → Home End Ctrl-A Ctrl-E",
  "move; Ctrl-U Ctrl-K Ctrl-W delete; Ctrl-L clears the screen. Esc, or Ctrl-C while a turn runs,",
  "interrupts the turn and keeps the chat open and the pending input; Ctrl-C twice at the idle prompt, or",
  "Ctrl-D, exits. An interrupt never discards pending input (only /cancel does); it stays in the session",
  "for the next turn or a resume."
]

/** Two Ctrl-C presses at the idle prompt within this many milliseconds exit the chat. */
const EXIT_PRESS_WINDOW_MS = 2000

/** The latest turn of `events` and, while it is open, its latest step. */
const latestPosition = (
  events: ReadonlyArray<SessionEvent>
): { readonly turn: number; readonly step: number; readonly inTurn: boolean } => {
  let step = 0
  for (let i = events.length - 1; i >= 0; i--) {
    const event = events[i]!
    if (event.type === "step/start" && step === 0) step = (event as EventOf<"step/start">).data.step
    if (event.type === "turn/start") return { turn: (event as EventOf<"turn/start">).data.turn, step, inTurn: true }
    if (event.type === "turn/end") return { turn: (event as EventOf<"turn/end">).data.turn, step: 0, inTurn: false }
  }
  return { turn: 0, step: 0, inTurn: false }
}

/**
 * An interactive (or piped) chat on `sessionId`, created when it is not stored.
 *
 * @since 0.1.0
 * @category commands
 */
export const chat = (
  sessionId: SessionId,
  options: {
    readonly toolNames: ReadonlyArray<string>
    readonly db: string
    readonly model: string
    readonly compositions?: Compositions.CompositionOptions
    /** The prices the status line bills with (default: tiller's table). */
    readonly prices?: PriceTable
  }
) =>
  Effect.scoped(Effect.gen(function*() {
    const sessions = yield* Sessions
    const context = yield* sessions.open(sessionId)
    const compositions = yield* Compositions.setup(context, {
      ...(options.compositions ?? { claudeHooks: false, db: options.db }),
      interactive: true
    })
    const driver = Context.get(context, Driver)
    const inbox = Context.get(context, Inbox)
    const log = Context.get(context, SessionLog)
    // The share of the context window in use, for the status line (the CLI's agents manage their context).
    const compaction = Context.getOption(context as Context.Context<unknown>, Compaction)
    const usage = Effect.map(
      Effect.transposeOption(Option.map(compaction, (c) => c.contextUsage)),
      Option.getOrUndefined
    )
    // What the session has spent so far, a fold over its log (its copied seed left out).
    const spentOf = (events: ReadonlyArray<SessionEvent>) =>
      spentNote(Cost.sessionCost(events, options.prices ?? Prices.PRICES, { from: log.header.seedLength }).total)
    const status = (s: "idle" | "running", position: Parameters<typeof statusLine>[1]) =>
      Effect.zipWith(usage, log.events, (u, events) => statusLine(s, position, u, spentOf(events)))
    const view = chatView(log.header.seedLength)
    // On a terminal, the line editor owns the screen from here on (all output goes through it).
    const input = yield* ChatInput.open(InputHistory.fileOf(options.db))
    let lastStatus: "idle" | "running" = "idle"
    // The MCP servers, when the command has them.
    const mcp = Option.getOrUndefined(yield* Effect.serviceOption(Mcp))
    const mcpServers = mcp === undefined ? [] : yield* mcp.servers
    const mcpChat = mcp === undefined
      ? undefined
      : yield* McpChat.setup(mcp, input.terminal === undefined ? undefined : input.progress)

    // The stored prefix only advances the view's fold; events from this process on are printed.
    const stored = yield* log.events
    let out = ""
    for (const event of stored) out += view.render(event, event.seq >= log.firstLiveSeq)
    const turns = view.position().turn
    yield* Output.lines([
      `tiller chat · session ${sessionId} (${
        log.firstLiveSeq === 0 ? "new" : `resumed: ${turns} turn${turns === 1 ? "" : "s"}, ${log.firstLiveSeq} events`
      })`,
      `db ${Database.label(options.db)} · model ${options.model} · tools: ${
        options.toolNames.length === 0 ? "none" : options.toolNames.join(", ")
      }`,
      ...(mcpServers.length === 0 ? [] : [
        `mcp: ${
          mcpServers.map((s) => `${s.name} (${s.state === "connected" ? `${s.tools} tools` : "failed"})`).join(", ")
        } · @SERVER:URI adds a resource`
      ]),
      "Type a message, or /help for the commands."
    ])
    yield* Output.write(out)
    // Tool calls that wait for approval since before this process opened the session (SPEC 4.12).
    const waiting = (yield* driver.pendingApprovals).filter((p) => p.seq < log.firstLiveSeq)
    const approveHint = `tiller approve ${Output.shellWord(sessionId)}`
    if (waiting.length > 0) {
      yield* Output.lines(waiting.map((p) =>
        `  ? approve ${p.tool} ${JSON.stringify(p.input)}? ${p.reason} (pending since seq ${p.seq}, call ` +
        `${p.callId}). Answer y, n [REASON] or always, or: ${approveHint} ${p.callId} --allow|--deny`
      ))
    }
    lastStatus = yield* driver.status
    yield* Output.lines([yield* status(lastStatus, view.position())])

    const { caughtUp } = yield* follow(log, stored.length, (events) =>
      Effect.gen(function*() {
        let text = ""
        let ended = false
        if (input.terminal !== undefined) {
          input.progress.contextShare((yield* usage)?.fraction)
        }
        for (const event of events) {
          input.progress.observe(event)
          text += view.render(event)
          if (event.type === "turn/start") {
            lastStatus = "running"
          }
          if (event.type === "turn/end") {
            ended = true
          }
        }
        // A turn ended and no next turn started in this chunk: say so if the agent is idle now.
        if (ended && !view.position().inTurn && (yield* driver.status) === "idle") {
          text += view.line(yield* status("idle", view.position()))
          lastStatus = "idle"
        }
        yield* Output.write(text)
      }))

    // The driver's status, the latest turn and step and the pending lists now (the view may lag).
    const currentStatus = Effect.map(
      Effect.all([driver.status, log.events, inbox.snapshot, usage, driver.pendingApprovals]),
      ([status, events, pending, used, approvals]) =>
        statusLine(status, { ...latestPosition(events), pending }, used, spentOf(events), approvals)
    )
    // A note on a line of its own (also when streamed text is mid-line), then the status line.
    const acknowledge = (note: string) =>
      Effect.flatMap(currentStatus, (status) =>
        Output.write(view.line(`(${note}) ${status}`)))

    const deliver = (text: string, source?: MessageSource) =>
      newUserMessage(source === undefined ? { text } : { text, source })

    // A waking delivery to an idle agent starts a turn, whose start line follows; one to a running
    // agent is acknowledged with the pending counts it changed.
    const wake = (message: Effect.Effect<void, unknown>, note: string) =>
      Effect.gen(function*() {
        const before = yield* driver.status
        yield* message
        if (before === "running") yield* acknowledge(note)
        return true
      })

    const handle = (line: string): Effect.Effect<boolean, CliError> => {
      // An MCP server's elicitation waiting for an answer takes this line (approvals are answered below).
      if (mcpChat?.answer(line) === true) return Effect.succeed(true)
      const trimmed = line.trim()
      if (trimmed === "") return Effect.succeed(true)
      const space = trimmed.search(/\s/)
      const command = trimmed.startsWith("/") ? (space === -1 ? trimmed : trimmed.slice(0, space)) : undefined
      const rest = command === undefined ? trimmed : trimmed.slice(command.length).trim()
      const usage = (text: string) => Effect.as(Output.errorLine(`usage: ${text}`), true)
      // A change of the inbox is acknowledged with the status line; a refusal is an error line.
      const answer = (outcome: Either.Either<string, string>) =>
        Effect.as(Either.isRight(outcome) ? acknowledge(outcome.right) : Output.errorLine(outcome.left), true)
      const steer = wake(Effect.flatMap(deliver(trimmed), driver.steer), "steering: enters the next step")
      // An idle agent with prompts parked in the queue (a cancel that kept them): the line goes
      // first in the queue, so the turn it opens takes the line (and any pending next-step input)
      // but not the oldest queued prompt, which stays a later turn of its own.
      const lineOrSteer = Effect.gen(function*() {
        const [status, queued] = yield* Effect.all([driver.status, inbox.nextTurn])
        if (status !== "idle" || queued.length === 0) return yield* steer
        yield* Effect.flatMap(deliver(trimmed), (m) => driver.send(m, "next-turn", true, { at: "start" }))
        return true
      })
      // A line that mentions stored sessions (@ID, @ID@SEQ) carries their snapshots beside it; the
      // MCP resources it mentions (@SERVER:URI) enter as context first.
      const mentionedResources = mcp === undefined
        ? Effect.succeed([])
        : McpChat.injectMentioned(mcp, driver, trimmed)
      const referencing = Effect.flatMap(mentionedResources, (notes) =>
        Effect.zipRight(
          notes.length === 0 ? Effect.void : Output.errorLine(notes.join("\n")),
          Effect.flatMap(compositions.mentioned(trimmed), (references) =>
            references.length === 0
              ? lineOrSteer
              : wake(
                Effect.flatMap(deliver(trimmed), (m) => compositions.deliver(m, references, "steer")),
                "steering with references: enters the next step"
              ))
        ))
      const action: Effect.Effect<boolean, unknown> = (() => {
        switch (command) {
          case undefined:
            // y, n [REASON] or always answers the oldest pending approval (SPEC 4.12).
            return Effect.flatMap(compositions.answer(trimmed), (answered) =>
              answered ? Effect.succeed(true) : referencing)
          case "/ref":
            if (rest === "") {
              return usage("/ref ID [--upto SEQ]")
            }
            return Effect.flatMap(compositions.ref(rest), (note) =>
              Effect.as(acknowledge(note), true))
          case "/quit":
          case "/exit":
            return Effect.succeed(false)
          case "/help":
            return Effect.as(Output.lines(HELP), true)
          case "/status":
            return Effect.as(
              Effect.flatMap(currentStatus, (status) =>
                Output.write(view.line(status))),
              true
            )
          case "/queue":
            if (rest === "") return usage("/queue TEXT")
            return wake(Effect.flatMap(deliver(rest), driver.followup), "queued for a later turn")
          case "/inject":
            if (rest === "") return usage("/inject TEXT")
            return Effect.flatMap(deliver(rest, INJECT_SOURCE), driver.inject).pipe(
              Effect.zipRight(acknowledge("context for the next step")),
              Effect.as(true)
            )
          case "/cancel":
            if (rest !== "" && rest !== "--keep") return usage("/cancel [--keep]")
            return driver.cancel(CancelCause.user, { keepInbox: rest === "--keep" }).pipe(
              Effect.zipRight(
                acknowledge(`cancel requested; pending input ${rest === "--keep" ? "kept" : "discarded"}`)
              ),
              Effect.as(true)
            )
          case "/pending":
            if (rest !== "") return usage("/pending")
            return Effect.as(
              Effect.flatMap(
                inbox.snapshot,
                (snapshot) => Output.lines(PendingInput.describe(PendingInput.numbered(snapshot)))
              ),
              true
            )
          case "/drop":
            if (rest === "") {
              return usage("/drop N (/pending lists the numbers)")
            }
            return Effect.flatMap(PendingInput.drop(inbox, rest), answer)
          case "/edit": {
            const [argument = "", ...words] = rest.split(/(?<=^\S+)\s/)
            const text = words.join(" ").trim()
            if (argument === "") {
              return usage("/edit N TEXT (/pending lists the numbers)")
            }
            if (text !== "") {
              return Effect.flatMap(PendingInput.edit(inbox, argument, text), answer)
            }
            // On a terminal, the item's text goes into the input line to be edited and sent.
            if (input.terminal === undefined) {
              return usage("/edit N TEXT")
            }
            const terminal = input.terminal
            return Effect.flatMap(PendingInput.lookup(inbox, argument), (item) =>
              typeof item === "string"
                ? Effect.as(Output.errorLine(item), true)
                : Effect.as(
                  Effect.sync(() => terminal.prefill(`/edit ${item.number} ${PendingInput.textOfItem(item)}`)),
                  true
                ))
          }
          case "/compact":
            return Effect.as(
              Effect.flatMap(compactOpen(context, rest === "" ? undefined : rest), (line) => Output.lines([line])),
              true
            )
          case "/fork":
            return forkHere(rest)
          case "/log":
            return Effect.gen(function*() {
              const renderer = timeline(log.header)
              const events = yield* log.events
              yield* Output.lines([...renderer.heading, ...events.flatMap((event) => renderer.render(event))])
              return true
            })
          default:
            if (options.toolNames.includes(command.slice(1))) return lineOrSteer
            // An MCP server's prompt: its message is sent as a line is; another /mcp__ line (a
            // tool's name) is a message.
            if (mcp !== undefined && command.startsWith("/mcp__")) {
              return Effect.flatMap(McpChat.isPromptCommand(mcp, command), (isPrompt) =>
                isPrompt
                  ? wake(
                    Effect.flatMap(
                      Effect.mapError(mcp.prompt(command, rest), (error) => new CliError({ reason: error.message })),
                      driver.steer
                    ),
                    "steering: enters the next step"
                  )
                  : referencing)
            }
            return Effect.as(Output.errorLine(`unknown command ${command}; /help lists the commands`), true)
        }
      })()
      // A refused delivery is reported and the chat goes on; the session is unchanged.
      return Effect.catchAll(
        action,
        (error) =>
          Effect.as(Output.errorLine(`tiller: ${error instanceof Error ? error.message : String(error)}`), true)
      )
    }

    // `/fork [--at N | --at-seq S] [--as ID]`: a new session holding this one up to the end of turn N
    // (default: the last ended turn) or up to seq S; the same words as `tiller fork` (ForkPoint).
    const forkHere = (rest: string): Effect.Effect<boolean, unknown> =>
      Effect.gen(function*() {
        const parsed = ForkPoint.parseForkWords(rest)
        if (parsed === undefined) {
          return yield* Effect.as(
            Output.errorLine("usage: /fork [--at N | --at-seq S] [--as ID] (N: a turn number, S: a seq)"),
            true
          )
        }
        const events = yield* log.events
        const ends = events.filter((e) => e.type === "turn/end") as ReadonlyArray<EventOf<"turn/end">>
        const last = ends[ends.length - 1]
        if (parsed.point._tag === "End" && last === undefined) {
          return yield* Effect.as(Output.errorLine("no turn has ended yet: nothing to fork"), true)
        }
        const boundary = ForkPoint.boundaryOf(
          events,
          parsed.point._tag === "End" ? { _tag: "Turn", turn: last!.data.turn } : parsed.point
        )
        if (Either.isLeft(boundary)) return yield* Effect.as(Output.errorLine(boundary.left), true)
        const seq = boundary.right!
        const forked = yield* sessions.fork({
          source: sessionId,
          boundary: seq,
          childId: parsed.childId !== undefined ? SessionId.make(parsed.childId) : yield* ForkPoint.newSessionId
        })
        const end = events[seq]
        const where = end?.type === "turn/end"
          ? `the end of turn ${(end as EventOf<"turn/end">).data.turn}, seq ${seq}`
          : `seq ${seq}`
        yield* Output.lines([
          `(forked at ${where}, as ${forked}; continue it with: tiller resume ${Output.shellWord(forked)})`
        ])
        return true
      })

    // Esc, or Ctrl-C while a turn runs: the turn ends cancelled by the user; pending input stays.
    const interrupt = Effect.gen(function*() {
      if ((yield* driver.status) === "idle") return false
      yield* driver.cancel(CancelCause.user, { keepInbox: true })
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
      if (lastStatus !== "idle") yield* Output.write(view.line(yield* status("idle", view.position())))
      const pending = yield* inbox.snapshot
      if (pending.nextTurn.length + pending.nextStep.length > 0) {
        yield* Output.lines([
          `pending input kept: ${pending.nextTurn.length} queued, ${pending.nextStep.length} next-step (it runs with the next turn)`
        ])
      }
      yield* Output.lines([
        `session ${sessionId} is saved; continue it with: tiller resume ${Output.shellWord(sessionId)}`
      ])
    })

    yield* Effect.gen(function*() {
      yield* Stream.runForEachWhile(input.events, onInput)
      // No line can answer an elicitation any more.
      mcpChat?.endOfInput()
      // Nobody is left to answer in this chat: a call of the running turn that waits for approval, now
      // or later in the turn, is refused (one asked before the session stopped stays pending).
      const refuseWaiting = Effect.flatMap(driver.pendingApprovals, (waiting) =>
        Effect.forEach(
          waiting.filter((w) => !w.interrupted),
          (w) => Effect.ignore(driver.deny(w.callId, "the chat's input ended", { by: "the chat" })),
          { discard: true }
        ))
      yield* Effect.raceFirst(
        driver.whenIdle,
        Effect.zipRight(refuseWaiting, Effect.sleep("50 millis")).pipe(Effect.forever)
      )
      yield* caughtUp
      yield* saved(log)
    }).pipe(
      // SIGINT: the running turn ends as cancelled by the user (pending input kept), and the chat
      // says where it stopped.
      // SIGTERM: nothing here; closing the session disposes of it (the turn ends aborted(disposed)).
      Effect.onInterrupt(() =>
        Effect.gen(function*() {
          if (yield* terminating) return
          yield* cancelRunningTurn(driver)
          yield* withinGrace(caughtUp)
          yield* Effect.timeout(Effect.interruptible(saved(log)), CANCEL_GRACE).pipe(
            Effect.matchEffect({
              onFailure: (error) => Output.errorLine(`tiller: ${error.message}`),
              onSuccess: () => goodbye
            })
          )
        })
      )
    )
    yield* goodbye
  }))

/**
 * One headless turn: inject `contexts`, deliver `prompt`, wait until idle. Prints the final answer
 * (or, with `json`, every event this process appended as one JSON line each); fails with
 * `ExitWith(1)` unless the turn completed. Interrupted (Ctrl-C), it cancels the turn, reports how
 * it ended, and the interruption goes on (exit code 130); terminated (SIGTERM), it leaves the turn
 * to the session's disposal (exit code 143).
 *
 * @since 0.1.0
 * @category commands
 */
export const runOnce = (
  sessionId: SessionId,
  prompt: string,
  options: {
    readonly contexts: ReadonlyArray<string>
    readonly json: boolean
    readonly compositions?: Compositions.CompositionOptions
    /** Snapshots of other sessions delivered beside the prompt (a handoff's). */
    readonly references?: ReadonlyArray<UserMessage>
  }
) =>
  Effect.scoped(Effect.gen(function*() {
    const sessions = yield* Sessions
    const context = yield* sessions.open(sessionId)
    const compositions = options.compositions === undefined
      ? undefined
      : yield* Compositions.setup(context, { ...options.compositions, interactive: false })
    const driver = Context.get(context, Driver)
    const log = Context.get(context, SessionLog)
    const mcp = Option.getOrUndefined(yield* Effect.serviceOption(Mcp))
    const from = log.firstLiveSeq
    const printer = options.json
      ? yield* follow(log, from, (events) => Output.lines(events.map((event) => JSON.stringify(event))))
      : undefined

    // The last turn/end this process appended and the answer of its turn, if any.
    const outcome = Effect.map(log.events, (all) => lastTurnOutcome(all.slice(from)))
    const reportEnd = (end: EventOf<"turn/end">) =>
      Output.errorLine(`turn ${end.data.turn} of session ${sessionId} ended: ${describeReason(end.data.reason)}`)

    yield* Effect.gen(function*() {
      for (const text of options.contexts) {
        yield* Effect.flatMap(newUserMessage({ text, source: INJECT_SOURCE }), driver.inject)
      }
      // MCP resources the prompt mentions (@SERVER:URI) enter as context before it; a prompt that
      // is an MCP prompt command (/mcp__SERVER__PROMPT ARGS) is that prompt's message.
      const notes = mcp === undefined ? [] : yield* McpChat.injectMentioned(mcp, driver, prompt)
      if (notes.length > 0) yield* Output.errorLine(notes.join("\n"))
      const words = /^(\S+)\s*([\s\S]*)$/.exec(prompt.trim())
      const message = mcp !== undefined && words !== null && (yield* McpChat.isPromptCommand(mcp, words[1]!))
        ? yield* Effect.mapError(mcp.prompt(words[1]!, words[2]!), (error) => new CliError({ reason: error.message }))
        : yield* newUserMessage({ text: prompt })
      const references = [
        ...(options.references ?? []),
        ...(compositions === undefined ? [] : yield* compositions.mentioned(prompt))
      ]
      yield* references.length === 0
        ? driver.followup(message)
        : Effect.provide(SessionReference.deliver(message, references), context)
      yield* driver.whenIdle
    }).pipe(
      Effect.onInterrupt(() =>
        Effect.gen(function*() {
          if (yield* terminating) return
          yield* cancelRunningTurn(driver)
          if (printer !== undefined) yield* withinGrace(printer.caughtUp)
          const ended = yield* outcome
          if (Option.isSome(ended)) yield* reportEnd(ended.value.end)
        })
      )
    )
    if (printer !== undefined) yield* printer.caughtUp
    yield* saved(log)
    const ended = yield* outcome
    if (Option.isNone(ended)) {
      return yield* new CliError({ reason: `session ${sessionId}: the turn did not end (see tiller log ${sessionId})` })
    }
    const { end, text } = ended.value
    if (!options.json && text !== "") yield* Output.lines([text])
    if (end.data.reason.kind !== "completed") {
      yield* reportEnd(end)
      return yield* new ExitWith({ code: 1 })
    }
  }))
