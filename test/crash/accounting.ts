/**
 * The crash test's ledger of acknowledged operations and its audit against a session log: every
 * acknowledged delivery was inserted exactly once, into the list its operation names, with its
 * text, and is now in exactly one state (SPEC 3.9, G5, G8); every acknowledged removal left its
 * message discarded.
 */
import type { Option } from "effect"
import type { EventOf, SessionEvent } from "../../src/domain/Event.js"
import type { KnownIdState } from "../../src/index.js"
import type { Ack } from "./protocol.js"

/** A delivery operation of the child. */
export type DeliveryOp = "followup" | "steer" | "inject"

/** What has been acknowledged on one session file so far, across every crash of it. */
export interface Ledger {
  /** Acknowledged deliveries: message id to operation. */
  readonly delivered: Map<string, DeliveryOp>
  /** Ids whose acknowledged `remove` reported a removal. */
  readonly removed: Set<string>
  /** Acknowledged cancels. */
  cancels: number
}

/** An empty ledger. */
export const emptyLedger = (): Ledger => ({ delivered: new Map(), removed: new Set(), cancels: 0 })

/** Records the acknowledgements of one child run. */
export const record = (ledger: Ledger, acks: ReadonlyArray<Ack>): void => {
  for (const ack of acks) {
    switch (ack.op) {
      case "followup":
      case "steer":
      case "inject":
        ledger.delivered.set(ack.id, ack.op)
        break
      case "remove":
        if (ack.removed) ledger.removed.add(ack.id)
        break
      case "cancel":
        ledger.cancels++
        break
    }
  }
}

/** The text the child gives the message of a delivery. */
export const textOf = (op: DeliveryOp, id: string): string => `${op} ${id}`

/** Where a delivery of `op` may be inserted: a steer is re-routed to `next-turn` while a turn is aborting. */
const allowedTargets: Record<DeliveryOp, ReadonlyArray<string>> = {
  followup: ["next-turn"],
  steer: ["next-step", "next-turn"],
  inject: ["next-step"]
}

interface Insertion {
  readonly target: string
  readonly text: string | undefined
}

/**
 * The problems found auditing `events` (a resumed session's log) against `ledger`; `states` is the
 * session's own known-id table. Empty means every acknowledged operation is accounted for.
 */
export const audit = (
  events: ReadonlyArray<SessionEvent>,
  ledger: Ledger,
  states: (id: string) => Option.Option<KnownIdState>
): Array<string> => {
  const problems: Array<string> = []
  const insertions = new Map<string, Array<Insertion>>()
  const entered = new Map<string, number>()
  for (const event of events) {
    if (event.type === "agent/inbox/spliced") {
      const data = (event as EventOf<"agent/inbox/spliced">).data
      for (const m of data.inserted) {
        const block = m.content[0]
        const list = insertions.get(m.id) ?? []
        list.push({ target: data.target, text: block?.type === "text" ? block.text : undefined })
        insertions.set(m.id, list)
      }
    } else if (event.type === "user/message") {
      const id = (event as EventOf<"user/message">).data.id
      entered.set(id, (entered.get(id) ?? 0) + 1)
    }
  }
  for (const [id, list] of insertions) {
    if (list.length > 1) problems.push(`${id} was inserted ${list.length} times`)
  }
  for (const [id, count] of entered) {
    if (count > 1) problems.push(`${id} entered ${count} times`)
  }
  for (const [id, op] of ledger.delivered) {
    const list = insertions.get(id) ?? []
    if (list.length === 0) {
      problems.push(`acknowledged ${op} ${id} is missing from the log`)
      continue
    }
    const first = list[0]!
    if (!allowedTargets[op].includes(first.target)) problems.push(`${op} ${id} was inserted into ${first.target}`)
    if (first.text !== textOf(op, id)) problems.push(`${op} ${id} was stored with text ${JSON.stringify(first.text)}`)
    const state = states(id)
    if (state._tag === "None") problems.push(`acknowledged ${op} ${id} is not a known id`)
  }
  for (const id of ledger.removed) {
    const state = states(id)
    if (state._tag === "None" || state.value !== "discarded") {
      problems.push(`${id} was acknowledged removed but is ${state._tag === "None" ? "unknown" : state.value}`)
    }
    if ((entered.get(id) ?? 0) > 0) problems.push(`${id} was acknowledged removed but entered`)
  }
  return problems
}

/** How many acknowledged deliveries are in each state. */
export const tally = (
  ledger: Ledger,
  states: (id: string) => Option.Option<KnownIdState>
): Record<KnownIdState | "unknown", number> => {
  const counts: Record<KnownIdState | "unknown", number> = {
    pending: 0,
    claimed: 0,
    entered: 0,
    discarded: 0,
    unknown: 0
  }
  for (const id of ledger.delivered.keys()) {
    const state = states(id)
    counts[state._tag === "None" ? "unknown" : state.value]++
  }
  return counts
}
