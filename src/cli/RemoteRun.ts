/**
 * `tiller run --server URL` and `tiller log --server URL`: the headless turn and the timeline of a
 * session served by `tiller serve`, printed as the in-process commands print them, from the
 * session's events read over HTTP.
 *
 * @since 0.1.0
 */
import { Effect, Option, Stream } from "effect"
import type { EventOf, SessionEvent } from "../domain/Event.js"
import type { PriceTable } from "../domain/Prices.js"
import { CliError, ExitWith } from "./CliError.js"
import * as Output from "./Output.js"
import type { RemoteSession, ServerError } from "./RemoteSession.js"
import { CANCEL_GRACE, terminating } from "./SessionCommand.js"
import { describeReason, timeline } from "./Timeline.js"
import { lastTurnOutcome } from "./TurnOutcome.js"

/**
 * The session's events from seq 0 up to the `count` it had when asked: the log as stored then.
 *
 * @since 0.1.0
 * @category streams
 */
export const storedEvents = (
  session: RemoteSession,
  count: number
): Effect.Effect<ReadonlyArray<SessionEvent>, ServerError> =>
  count === 0
    ? Effect.succeed([])
    : Effect.map(
      Stream.runCollect(Stream.takeUntil(session.events(0), (event) => event.seq >= count - 1)),
      (events) => Array.from(events)
    )

/** Whether the session is idle on the server now. */
const idle = (session: RemoteSession) =>
  Effect.map(session.info, (info) => Option.isSome(info) && info.value.status === "idle")

/**
 * One headless turn on the server: delivers `contexts` (as `inject`) and `prompt` (as `followup`),
 * follows the session's events from the log's length before the delivery until the turn it
 * started has ended and the session is idle, and reports as `runOnce` does: the answer (or, with
 * `json`, every event from there as one JSON line each), and `ExitWith(1)` unless the turn
 * completed. Interrupted (Ctrl-C), it cancels the running turn on the server, pending input kept.
 *
 * @since 0.1.0
 * @category commands
 */
export const runRemote = (
  session: RemoteSession,
  prompt: string,
  options: { readonly contexts: ReadonlyArray<string>; readonly json: boolean }
): Effect.Effect<void, ServerError | CliError | ExitWith> =>
  Effect.gen(function*() {
    const sessionId = session.sessionId
    const before = yield* session.info
    const from = Option.match(before, { onNone: () => 0, onSome: (info) => info.events })
    const events: Array<SessionEvent> = []
    const reportEnd = (end: EventOf<"turn/end">) =>
      Output.errorLine(`turn ${end.data.turn} of session ${sessionId} ended: ${describeReason(end.data.reason)}`)
    const follow = session.events(from).pipe(
      Stream.tap((event) =>
        Effect.zipRight(
          Effect.sync(() => events.push(event)),
          options.json ? Output.lines([JSON.stringify(event)]) : Effect.void
        )
      ),
      // A turn that ends with the session idle is the last one this delivery woke.
      Stream.takeUntilEffect((event) => event.type === "turn/end" ? idle(session) : Effect.succeed(false)),
      Stream.runDrain
    )
    yield* Effect.gen(function*() {
      for (const text of options.contexts) yield* session.deliver("inject", text)
      yield* session.deliver("followup", prompt)
      yield* follow
    }).pipe(
      Effect.onInterrupt(() =>
        Effect.gen(function*() {
          if (yield* terminating) return
          yield* Effect.ignore(session.cancel(true))
          // The cancelled turn's end, if it comes within the grace.
          const next = events.length === 0 ? from : events[events.length - 1]!.seq + 1
          yield* session.events(next).pipe(
            Stream.tap((event) => Effect.sync(() => events.push(event))),
            Stream.takeUntil((event) => event.type === "turn/end"),
            Stream.runDrain,
            Effect.timeout(CANCEL_GRACE),
            Effect.interruptible,
            Effect.ignore
          )
          const ended = lastTurnOutcome(events)
          if (Option.isSome(ended)) yield* reportEnd(ended.value.end)
        })
      )
    )
    const ended = lastTurnOutcome(events)
    if (Option.isNone(ended)) {
      return yield* new CliError({ reason: `session ${sessionId}: the turn did not end (see tiller log ${sessionId})` })
    }
    const { end, text } = ended.value
    if (!options.json && text !== "") yield* Output.lines([text])
    if (end.data.reason.kind !== "completed") {
      yield* reportEnd(end)
      return yield* new ExitWith({ code: 1 })
    }
  })

/**
 * A session's timeline from the server, as `tiller log` prints it (or its events as JSON lines):
 * the log as stored when asked.
 *
 * @since 0.1.0
 * @category commands
 */
export const logRemote = (
  session: RemoteSession,
  options: { readonly json: boolean; readonly prices?: PriceTable | undefined }
): Effect.Effect<void, ServerError | CliError> =>
  Effect.gen(function*() {
    const info = yield* session.info
    if (Option.isNone(info)) {
      return yield* new CliError({ reason: `no session ${session.sessionId} on ${session.server}` })
    }
    const events = yield* storedEvents(session, info.value.events)
    if (options.json) return yield* Output.lines(events.map((event) => JSON.stringify(event)))
    const renderer = timeline(info.value.header, options.prices)
    yield* Output.lines([
      ...renderer.heading,
      ...events.flatMap((event) => renderer.render(event)),
      ...renderer.total()
    ])
  })
