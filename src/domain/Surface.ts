/**
 * The surface: the ordered seqs of the message events that make up model history (SPEC 2.8).
 *
 * @since 0.1.0
 */
import { Either } from "effect"
import type { SessionEvent, SurfaceOp } from "./Event.js"
import * as GrowOnly from "./GrowOnly.js"
import { freezeCopy } from "./Json.js"
import type { Message } from "./Values.js"

/**
 * The surface (persistent, append-optimised).
 *
 * @since 0.1.0
 * @category models
 */
export type Surface = GrowOnly.GrowOnly<number>

/**
 * The empty surface.
 *
 * @since 0.1.0
 * @category constructors
 */
export const emptySurface = (): Surface => GrowOnly.empty()

/**
 * The inclusive positional range `[from, to]` of a replace op, or the reason it is invalid.
 *
 * @since 0.1.0
 * @category getters
 */
export const replaceRange = (
  surface: Surface,
  start: number,
  end: number
): Either.Either<{ readonly from: number; readonly to: number }, string> => {
  let from = -1
  let to = -1
  for (let i = 0; i < surface.length; i++) {
    const seq = surface.buffer[i]
    if (seq === start) from = i
    if (seq === end) to = i
  }
  return rangeOfPositions(from, to, start, end)
}

/**
 * The range of a replace op from the positions of its endpoints on the surface (−1 when absent),
 * or the reason it is invalid.
 *
 * @since 0.1.0
 * @category getters
 */
export const rangeOfPositions = (
  from: number,
  to: number,
  start: number,
  end: number
): Either.Either<{ readonly from: number; readonly to: number }, string> => {
  if (from < 0) return Either.left(`replace start ${start} is not on the surface`)
  if (to < 0) return Either.left(`replace end ${end} is not on the surface`)
  if (from > to) return Either.left(`replace start ${start} comes after end ${end} on the surface`)
  return Either.right({ from, to })
}

/**
 * Applies a surface op for the event at `seq`, assuming the range was validated.
 *
 * @since 0.1.0
 * @category combinators
 */
export const applySurfaceOp = (surface: Surface, seq: number, op: SurfaceOp): Surface => {
  if (op === "append") return GrowOnly.push(surface, seq)
  const range = replaceRange(surface, op.start, op.end)
  if (Either.isLeft(range)) return surface
  const items = GrowOnly.toArray(surface)
  items.splice(range.right.from, range.right.to - range.right.from + 1, seq)
  return GrowOnly.fromArray(items)
}

/**
 * The message a surface node contributes to history, if any (an empty assistant message yields none).
 *
 * @since 0.1.0
 * @category getters
 */
export const messageOf = (event: SessionEvent | undefined): Message | undefined => {
  if (event === undefined) return undefined
  switch (event.type) {
    case "user/message":
      return event.data as Message
    case "assistant/message": {
      const message = (event.data as { readonly message: Message }).message
      return message.content.length === 0 ? undefined : message
    }
    case "tool/result":
      return (event.data as { readonly message: Message }).message
    default:
      return undefined
  }
}

/**
 * The derived history of a surface (a fresh array of frozen values).
 *
 * @since 0.1.0
 * @category getters
 */
export const messagesOf = (surface: Surface, eventAt: (seq: number) => SessionEvent | undefined): Array<Message> => {
  const out: Array<Message> = []
  for (let i = 0; i < surface.length; i++) {
    const message = messageOf(eventAt(surface.buffer[i]!))
    if (message !== undefined) out.push(message)
  }
  return out
}

/**
 * The surface of a whole log (replace ops that are invalid are skipped).
 *
 * @since 0.1.0
 * @category folding
 */
export const surfaceOf = (events: ReadonlyArray<SessionEvent>): Surface => {
  // As applySurfaceOp event by event, on one array: a single-node replacement is found by position
  // in O(1) (a prune's run of them is linear), and the positions are re-read after a range.
  const seqs: Array<number> = []
  let positions: Map<number, number> | undefined
  for (const event of events) {
    const op = (event as { readonly surfaceOp?: SurfaceOp }).surfaceOp
    if (op === undefined) continue
    if (op === "append") {
      seqs.push(event.seq)
      positions?.set(event.seq, seqs.length - 1)
      continue
    }
    if (positions === undefined) positions = new Map(seqs.map((seq, i) => [seq, i]))
    const from = positions.get(op.start)
    const to = positions.get(op.end)
    if (from === undefined || to === undefined || from > to) continue
    if (from === to) {
      seqs[from] = event.seq
      positions.delete(op.start)
      positions.set(event.seq, from)
    } else {
      seqs.splice(from, to - from + 1, event.seq)
      positions = undefined
    }
  }
  return GrowOnly.fromArray(seqs)
}

/**
 * Derived model history of a log (SPEC 2.8).
 *
 * @since 0.1.0
 * @category folding
 */
export const deriveMessages = (events: ReadonlyArray<SessionEvent>): ReadonlyArray<Message> =>
  // Stored events are deep-frozen already; a caller's own events are copied, never frozen in place.
  messagesOf(surfaceOf(events), (seq) => events[seq]).map((m) => Object.isFrozen(m) ? m : freezeCopy(m))
