/**
 * Inbox benchmark: inject-then-claim cycles. Each cycle delivers one `next-step` message with the
 * public `Inbox.append` (acknowledged after durability), then commits the loop's opening
 * transaction for a zero-step turn: `turn/start`, the claim, `turn/end completed`.
 *
 * @since 0.1.0
 */
import { Effect, STM } from "effect"
import type { UserMessage } from "../src/index.js"
import { Inbox, userMessage } from "../src/index.js"
import { claimSTM } from "../src/internal/state/InboxOps.js"
import { appendDrafts, awaitDurable, commitLogged, lastSeq, SessionState } from "../src/internal/state/SessionState.js"
import type { Run } from "./util.js"
import { sessionLayer, timed } from "./util.js"

// The loop's opening transaction of turn `turn`, which claims what is pending and ends at once.
const claimTurn = (state: SessionState["Type"], turn: number) =>
  STM.gen(function*() {
    yield* appendDrafts(state, [{ type: "turn/start", data: { turn } }], true)
    const claimed = yield* claimSTM(state, turn, true)
    yield* appendDrafts(state, [{ type: "turn/end", data: { turn, reason: { kind: "completed" } } }], true)
    return claimed.length
  })

/**
 * One run of `cycles` inject-then-claim cycles on a fresh session. Messages are built before the
 * clock starts; the cycles and the wait until the last turn is durable are timed.
 *
 * @since 0.1.0
 * @category benchmarks
 */
export const injectClaimRun = (cycles: number): Effect.Effect<Run, unknown> =>
  Effect.gen(function*() {
    const state = yield* SessionState
    const inbox = yield* Inbox
    const messages: Array<UserMessage> = []
    for (let i = 1; i <= cycles; i++) messages.push(userMessage({ id: `steer-${i}`, text: `steer ${i}` }))
    const [, millis] = yield* timed(Effect.gen(function*() {
      for (let turn = 1; turn <= cycles; turn++) {
        yield* inbox.append("next-step", messages[turn - 1]!)
        const claimed = yield* commitLogged(state, claimTurn(state, turn))
        if (claimed !== 1) return yield* Effect.dieMessage(`turn ${turn} claimed ${claimed} messages, expected 1`)
      }
      yield* awaitDurable(state, yield* STM.commit(lastSeq(state)))
    }))
    return { operations: cycles, millis }
  }).pipe(Effect.provide(sessionLayer("bench-inbox")))
