/**
 * The writer's signal: what wakes the per-session writer fiber (a full batch pending, a durability
 * request, the batch window) and the synchronous write a store that appends at once offers. The
 * fiber that committed an append hands the committed log over ({@link committed}) after its commit,
 * and durability waiters raise it from their own code, never inside a transaction; the writer
 * itself (`Writer.runWriter`) sleeps on it and writes what was handed over.
 *
 * @since 0.1.0
 */
import type { SessionEvent } from "../../domain/Event.js"
import type * as GrowOnly from "../../domain/GrowOnly.js"

/**
 * What wakes the writer: the highest seq someone awaits, and the resumption of a sleeping writer
 * (or a flag that makes its next sleep return at once).
 *
 * @since 0.1.0
 * @category models
 */
export interface WriterSignal {
  readonly batchSize: number
  /** The committed log as last handed over: the writer writes from it (the log only grows). */
  events: GrowOnly.GrowOnly<SessionEvent>
  /** The highest seq a durability waiter asked for (−1 when none). */
  requested: number
  /** Set by a wake that found the writer awake, so it looks again before sleeping. */
  woken: boolean
  wake: (() => void) | undefined
  /** The window deadline (Clock millis) the timer sleeps towards, and its own wake-up. */
  deadline: number
  timerWake: (() => void) | undefined
  /** The batch window in millis, once the timer runs (until then, the writer arms windows itself). */
  windowMs: number | undefined
  /**
   * Set while the writer's store append is in flight, retries included (and for good once the writer
   * is interrupted mid-append, when no synchronous write is left to exclude).
   */
  busy: boolean
  /** For a store that appends synchronously, from `runWriter` until the session closes or is poisoned: see {@link writeNow}. */
  appendNow: (() => void) | undefined
  /** Whether the store lets acknowledgements write at once: see {@link acknowledgesNow}. */
  acknowledgeNow: boolean
}

/**
 * A signal for a writer whose batches hold at most `batchSize` pending events before writing, over
 * the log `events` as opened (all of it durable).
 *
 * @since 0.1.0
 * @category constructors
 */
export const makeSignal = (events: GrowOnly.GrowOnly<SessionEvent>, batchSize = 256): WriterSignal => ({
  batchSize: Math.max(1, batchSize),
  events,
  requested: -1,
  woken: false,
  wake: undefined,
  deadline: Number.NEGATIVE_INFINITY,
  timerWake: undefined,
  windowMs: undefined,
  busy: false,
  appendNow: undefined,
  acknowledgeNow: false
})

/**
 * Wakes the writer (it re-reads the log; a wake with nothing to do is harmless).
 *
 * @since 0.1.0
 * @category signals
 */
export const wake = (signal: WriterSignal): void => {
  const resume = signal.wake
  if (resume === undefined) {
    signal.woken = true
    return
  }
  signal.wake = undefined
  resume()
}

/**
 * Hands the log a transaction committed to the writer, after the commit: when it holds events the
 * writer was not given yet, they are {@link appended} (`durable` is the last durable seq). Commits
 * hand logs over in any order; an older (shorter) one than the writer holds changes nothing.
 *
 * @since 0.1.0
 * @category signals
 */
export const committed = (signal: WriterSignal, durable: number, events: GrowOnly.GrowOnly<SessionEvent>): void => {
  const before = signal.events.length - 1
  const last = events.length - 1
  if (last <= before) return
  signal.events = events
  appended(signal, durable, before, last, events.buffer[before + 1]!.time)
}

/**
 * Called by an append at Clock time `time` that grew the log from `lastSeq` to `newLastSeq` while
 * `durable` was durable: wakes the writer when a full batch is pending, and when the first pending
 * event appeared arms the batch window (through the writer, until the window timer runs). A writer
 * busy writing re-reads the log when it is done.
 *
 * @since 0.1.0
 * @category signals
 */
export const appended = (
  signal: WriterSignal,
  durable: number,
  lastSeq: number,
  newLastSeq: number,
  time: number
): void => {
  if (newLastSeq - durable >= signal.batchSize) wake(signal)
  else if (lastSeq <= durable) {
    if (signal.windowMs === undefined) wake(signal)
    else arm(signal, time + signal.windowMs)
  }
}

/**
 * Asks for everything up to `seq` to be written now.
 *
 * @since 0.1.0
 * @category signals
 */
export const request = (signal: WriterSignal, seq: number): void => {
  if (seq <= signal.requested) return
  signal.requested = seq
  wake(signal)
}

/**
 * Whether {@link writeNow} may write: the session's store appends synchronously, the writer runs
 * and its own append is not in flight.
 *
 * @since 0.1.0
 * @category signals
 */
export const canWriteNow = (signal: WriterSignal): boolean => !signal.busy && signal.appendNow !== undefined

/**
 * Whether an operation's acknowledgement may write at once ({@link canWriteNow}, and the store
 * lets acknowledgements do so); otherwise it asks the writer and waits for its group commit.
 *
 * @since 0.1.0
 * @category signals
 */
export const acknowledgesNow = (signal: WriterSignal): boolean => signal.acknowledgeNow && canWriteNow(signal)

/**
 * Writes every pending event at once, synchronously, as the writer would (one store append that
 * releases every covered waiter), when the session's store appends synchronously, the writer runs
 * and no append is in flight. Otherwise, or when the store declines, it writes nothing: ask with
 * {@link request} and wait.
 *
 * @since 0.1.0
 * @category signals
 */
export const writeNow = (signal: WriterSignal): void => {
  if (canWriteNow(signal)) signal.appendNow!()
}

/**
 * Ends synchronous writes; the session's scope calls it when it closes (its writer may be
 * interrupted before it ever started).
 *
 * @since 0.1.0
 * @category signals
 */
export const stopWritingNow = (signal: WriterSignal): void => {
  signal.appendNow = undefined
}

/**
 * Moves the batch window's deadline to `deadline` (Clock millis) and wakes its timer. The window
 * runs on one timer fiber, started with the first window and kept for the writer's lifetime;
 * deadlines only grow (each is the oldest pending event's time plus the window).
 *
 * @since 0.1.0
 * @category signals
 */
export const arm = (signal: WriterSignal, deadline: number): void => {
  if (deadline <= signal.deadline) return
  signal.deadline = deadline
  const resume = signal.timerWake
  if (resume !== undefined) {
    signal.timerWake = undefined
    resume()
  }
}
