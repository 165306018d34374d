/**
 * `checkLog`: the relational checker of SPEC 5.2 over a whole log.
 *
 * @since 0.1.0
 */
import type { RuleId } from "./Errors.js"
import type { SessionEvent } from "./Event.js"
import { advance, initialLogState } from "./LogState.js"

/**
 * One rule violated at one event.
 *
 * @since 0.1.0
 * @category models
 */
export interface LogViolation {
  readonly seq: number
  readonly rule: RuleId
  readonly message: string
}

const noDeclared: ReadonlySet<string> = new Set()

/**
 * Checks a log against the relational rules R1-R20; `[]` means valid. Pure, total and linear; an
 * open final turn is fine unless `closed: true`.
 *
 * @since 0.1.0
 * @category validation
 */
export const checkLog = (
  events: ReadonlyArray<SessionEvent>,
  options?: { readonly seedLength?: number; readonly closed?: boolean }
): ReadonlyArray<LogViolation> => {
  const out: Array<LogViolation> = []
  let state = initialLogState(options?.seedLength ?? 0)
  const eventAt = (seq: number) => events[seq]
  try {
    for (const event of events) {
      const step = advance({ ...state, length: event.seq }, event, eventAt, { relations: true, eventTypes: noDeclared })
      for (const v of step.violations) {
        if (v.rule !== undefined) out.push({ seq: event.seq, rule: v.rule, message: v.message })
      }
      state = step.state
    }
  } catch (error) {
    const last = events[events.length - 1]
    out.push({ seq: last?.seq ?? 0, rule: "R18", message: `log could not be checked: ${String(error)}` })
  }
  if (options?.closed === true && state.relations.turnOpen) {
    const last = events[events.length - 1]
    out.push({ seq: last?.seq ?? 0, rule: "R19", message: `the log ends inside open turn ${state.relations.lastTurn}` })
  }
  return out
}
