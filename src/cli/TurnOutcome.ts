/**
 * How the last turn of some events ended and what it answered: what `tiller run` reports, in
 * process or over `--server`.
 *
 * @since 0.1.0
 */
import { Option } from "effect"
import type { EventOf, SessionEvent } from "../domain/Event.js"
import { textOf } from "./Timeline.js"

/**
 * The last turn end of a run and the text of its turn's last answer.
 *
 * @since 0.1.0
 * @category models
 */
export interface TurnOutcome {
  readonly end: EventOf<"turn/end">
  readonly text: string
}

/**
 * The last `turn/end` of `events` and the text of the last assistant message of its turn (empty
 * when the turn answered nothing); `None` when no turn ended.
 *
 * @since 0.1.0
 * @category constructors
 */
export const lastTurnOutcome = (events: ReadonlyArray<SessionEvent>): Option.Option<TurnOutcome> => {
  const lastOf = (type: string, before: number) => {
    for (let i = before - 1; i >= 0; i--) if (events[i]!.type === type) return i
    return -1
  }
  const endAt = lastOf("turn/end", events.length)
  if (endAt === -1) return Option.none()
  const answerAt = lastOf("assistant/message", endAt)
  const answer = answerAt > lastOf("turn/start", endAt)
    ? events[answerAt] as EventOf<"assistant/message">
    : undefined
  return Option.some({
    end: events[endAt] as EventOf<"turn/end">,
    text: answer === undefined ? "" : textOf(answer.data.message.content.filter((b) => b.type === "text"))
  })
}
