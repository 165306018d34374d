/**
 * Where a fork from the command line ends, said the same way by `tiller fork` and the chat's
 * `/fork`: `--at N` (or `--at-turn N`) is a turn number, the fork holding the log up to that turn's
 * `turn/end`; `--at-seq S` is a seq, the last event copied (a `turn/end`, or a seq between turns).
 * Without either, the fork holds the whole log. New sessions the CLI names get ids of one scheme,
 * `s-` and twelve hex digits, whether a chat, a run, a handoff or a fork creates them.
 *
 * @since 0.1.0
 */
import { Effect, Either } from "effect"
import type { EventOf, SessionEvent } from "../domain/Event.js"
import { SessionId } from "../domain/Ids.js"

/**
 * A fresh session id as the CLI names new sessions: `s-` and twelve hex digits.
 *
 * @since 0.1.0
 * @category constructors
 */
export const newSessionId: Effect.Effect<SessionId> = Effect.sync(() =>
  SessionId.make(`s-${crypto.randomUUID().replace(/-/g, "").slice(0, 12)}`)
)

/**
 * Where a fork ends: the end of a turn, an exact seq, or (none given) the end of the log.
 *
 * @since 0.1.0
 * @category models
 */
export type ForkPoint =
  | { readonly _tag: "Turn"; readonly turn: number }
  | { readonly _tag: "Seq"; readonly seq: number }
  | { readonly _tag: "End" }

/**
 * The fork point of the flags given: at most one of a turn (`--at` / `--at-turn`) and a seq
 * (`--at-seq`); both is a refusal.
 *
 * @since 0.1.0
 * @category constructors
 */
export const forkPointOf = (turn: number | undefined, seq: number | undefined): Either.Either<ForkPoint, string> =>
  turn !== undefined && seq !== undefined
    ? Either.left("give a turn (--at N, --at-turn N) or a seq (--at-seq S), not both")
    : turn !== undefined
    ? Either.right({ _tag: "Turn", turn })
    : seq !== undefined
    ? Either.right({ _tag: "Seq", seq })
    : Either.right({ _tag: "End" })

/**
 * The fork boundary (the last seq copied) of a point in a log: a turn's `turn/end`, the seq itself,
 * or `undefined` for the end of the log. A turn that has not ended is a refusal.
 *
 * @since 0.1.0
 * @category getters
 */
export const boundaryOf = (
  events: ReadonlyArray<SessionEvent>,
  point: ForkPoint
): Either.Either<number | undefined, string> => {
  switch (point._tag) {
    case "End":
      return Either.right(undefined)
    case "Seq":
      return Either.right(point.seq)
    case "Turn": {
      const end = events.find((e): e is EventOf<"turn/end"> =>
        e.type === "turn/end" && (e as EventOf<"turn/end">).data.turn === point.turn
      )
      return end === undefined
        ? Either.left(`turn ${point.turn} has not ended (or does not exist)`)
        : Either.right(end.seq)
    }
  }
}

/**
 * The words of a `/fork` line after the command: `--at N`, `--at-turn N`, `--at-seq S`, `--as ID`;
 * `undefined` when they do not parse.
 *
 * @since 0.1.0
 * @category parsing
 */
export const parseForkWords = (
  rest: string
): { readonly point: ForkPoint; readonly childId: string | undefined } | undefined => {
  const words = rest.split(/\s+/).filter((w) => w !== "")
  let turn: number | undefined
  let seq: number | undefined
  let childId: string | undefined
  for (let i = 0; i < words.length; i++) {
    const flag = words[i]
    const value = words[i + 1]
    if (value === undefined) return undefined
    if ((flag === "--at" || flag === "--at-turn") && /^\d+$/.test(value) && turn === undefined) turn = Number(value)
    else if (flag === "--at-seq" && /^\d+$/.test(value) && seq === undefined) seq = Number(value)
    else if (flag === "--as" && childId === undefined) childId = value
    else return undefined
    i++
  }
  return Either.match(forkPointOf(turn, seq), {
    onLeft: () => undefined,
    onRight: (point) => ({ point, childId })
  })
}
