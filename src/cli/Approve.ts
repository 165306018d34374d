/**
 * `tiller approve ID [CALL] --allow|--deny [--reason TEXT]`: answers a durable approval request
 * from another process (SPEC 4.12). The answer goes into the store's approval mailbox; the process
 * that holds the session takes it into its log within a quarter second (the command waits for that,
 * a few seconds at most), and a session no process holds takes it when it is resumed.
 *
 * @since 0.1.0
 */
import { Duration, Effect, Option, Schedule } from "effect"
import type { PendingApproval } from "../domain/Approvals.js"
import { describeAnswer, foldApprovals } from "../domain/Approvals.js"
import type { ApprovalAnswerData } from "../domain/Event.js"
import type { SessionId } from "../domain/Ids.js"
import { SessionStore } from "../services/SessionStore.js"
import { CliError } from "./CliError.js"
import * as Environment from "./Environment.js"
import * as Output from "./Output.js"
import * as ReadOnlyStore from "./ReadOnlyStore.js"

/**
 * Options of `tiller approve`.
 *
 * @since 0.1.0
 * @category models
 */
export interface ApproveCommand {
  readonly id: SessionId
  readonly call: Option.Option<string>
  readonly allow: boolean
  readonly deny: boolean
  readonly reason: Option.Option<string>
  readonly db: string
}

/** How long the command waits for the holding process to record the answer. */
const RECORD_WAIT = Duration.seconds(5)
const RECORD_POLL = Duration.millis(100)

/** One pending request, as a line of the command's output. */
const describePending = (p: PendingApproval) =>
  `${p.callId}  ${p.tool} ${JSON.stringify(p.input)}  (${p.reason}${
    p.interrupted ? "; asked before the session stopped" : ""
  })`

/**
 * The request `call` names, or the only pending one; a readable refusal otherwise.
 *
 * @since 0.1.0
 * @category parsing
 */
export const chooseRequest = (
  id: string,
  pending: ReadonlyArray<PendingApproval>,
  call: string | undefined
): PendingApproval | CliError => {
  if (call !== undefined) {
    return pending.find((p) => p.callId === call) ??
      new CliError({
        reason: `session ${id} has no pending approval for ${call}${
          pending.length === 0 ? "" : `; pending: ${pending.map((p) => p.callId).join(", ")}`
        }`
      })
  }
  if (pending.length === 1) return pending[0]!
  return new CliError({
    reason: pending.length === 0
      ? `session ${id} has no pending approval`
      : `session ${id} has ${pending.length} pending approvals; name one:\n${pending.map(describePending).join("\n")}`
  })
}

/**
 * Runs `tiller approve`.
 *
 * @since 0.1.0
 * @category commands
 */
export const approve = (command: ApproveCommand) =>
  Effect.gen(function*() {
    if (command.allow === command.deny) {
      return yield* new CliError({ reason: "approve takes exactly one of --allow and --deny" })
    }
    const { events } = yield* Environment.loadSession(command.id)
    const chosen = chooseRequest(command.id, foldApprovals(events).pending, Option.getOrUndefined(command.call))
    if (chosen instanceof CliError) return yield* chosen
    const store = yield* SessionStore
    const mailbox = store.approvalMailbox
    if (mailbox === undefined) {
      return yield* new CliError({ reason: "this store takes no approvals from other processes" })
    }
    const answer: ApprovalAnswerData = {
      callId: chosen.callId,
      decision: command.allow ? "allow" : "deny",
      by: "tiller approve",
      ...(Option.isSome(command.reason) ? { reason: command.reason.value } : {})
    }
    yield* mailbox.post(command.id, answer).pipe(Effect.mapError((error) => new CliError({ reason: error.message })))
    const holder = yield* Effect.scoped(
      Effect.flatMap(ReadOnlyStore.open(command.db), (reader) => reader.holder(command.id))
    )
    const what = `${chosen.tool} call ${chosen.callId} of session ${command.id} ${describeAnswer(answer)}`
    if (holder === undefined) {
      return yield* Output.lines([
        `${what}: left in the store; the session is not open, and resuming it (tiller resume ${
          Output.shellWord(command.id)
        }) records the answer and ${answer.decision === "allow" ? "runs" : "refuses"} the call`
      ])
    }
    // The holder takes the answer into its log: wait until it is there.
    const recorded = yield* Environment.loadSession(command.id).pipe(
      Effect.map(({ events }) =>
        events.some((e) =>
          e.type === "approval/answer" && e.seq > chosen.seq && (e.data as ApprovalAnswerData).callId === chosen.callId
        )
      ),
      Effect.filterOrFail((found) => found, () => new CliError({ reason: "not yet" })),
      Effect.retry({ schedule: Schedule.spaced(RECORD_POLL) }),
      Effect.timeoutOption(RECORD_WAIT),
      Effect.map(Option.isSome)
    )
    yield* Output.lines([
      recorded
        ? `${what}: recorded by ${ReadOnlyStore.describeHolder(holder)}`
        : `${what}: left for ${
          ReadOnlyStore.describeHolder(holder)
        }, which has not taken it yet (it records it while the call waits)`
    ])
  })
