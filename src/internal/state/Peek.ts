/**
 * Reads (and, for a transaction that would change one `TRef` only, replaces) a `TRef`'s committed
 * value outside any transaction. Effect 3 commits a transaction
 * synchronously, in one JavaScript turn, so the value read is always one some transaction committed
 * and never part of a commit in progress. Reading it this way costs no transaction: a loop that only
 * needs to know whether a cause is recorded right now uses it instead of committing a read.
 *
 * Why Effect's private fields. `TRef` has no public synchronous read or write: the public ways are
 * a committed `TRef.get`/`TRef.set` (an Effect to run), or `TRef.get` inside the caller's
 * transaction (a journal entry, on a `TRef` that waiting transactions then re-check). A W1 step
 * peeks 27 times and pokes 6 times (counted over a W1 run); `Effect.runSync(TRef.get(ref))` costs
 * about 6 µs against 8 ns for the field read (`TRef.set` likewise about 6 µs against 30 ns), so the
 * public API adds about 200 µs per step: the whole per-step budget of W1's 5,000 steps/s target.
 * The fields read and written (`versioned`, `todos`) are Effect 3.22's;
 * test/internal/state/Peek.test.ts checks them against the public API, so a patch release that
 * moves them fails that test, not production.
 *
 * @since 0.1.0
 */
import type { Fiber, TRef } from "effect"
import { FiberRef } from "effect"

/**
 * The value `ref` holds after the last commit that wrote it.
 *
 * @since 0.1.0
 * @category getters
 */
export const peek = <A>(ref: TRef.TRef<A>): A => (ref as unknown as Versioned<A>).versioned.value

/**
 * Replaces the value `ref` holds, as a committed transaction that wrote only `ref` would: a new
 * version (so a transaction that read the old one is invalid), and the transactions waiting on `ref`
 * scheduled on `fiber`'s scheduler to run again. Only for a change that reads and writes `ref` alone,
 * synchronously: a transaction doing the same would run in the same single step.
 *
 * @since 0.1.0
 * @category setters
 */
export const poke = <A>(ref: TRef.TRef<A>, value: A, fiber: Fiber.RuntimeFiber<unknown, unknown>): void => {
  const impl = ref as unknown as Versioned<A>
  impl.versioned = new impl.versioned.constructor(value)
  const todos = impl.todos
  if (todos.size === 0) return
  impl.todos = new Map()
  // As a commit does: every waiting transaction's wake-up, in transaction order, as one task.
  const wakeUps = Array.from(todos).sort((x, y) => x[0] - y[0])
  fiber.getFiberRef(FiberRef.currentScheduler).scheduleTask(() => {
    for (const [, wakeUp] of wakeUps) wakeUp()
  }, fiber.getFiberRef(FiberRef.currentSchedulingPriority))
}

/**
 * `TRef.modify` without a transaction, for a change that reads and writes `ref` alone: `f` gets the
 * committed value and returns the result and the new value; the value is replaced ({@link poke})
 * only when `f` returned another one.
 *
 * @since 0.1.0
 * @category setters
 */
export const modifyNow = <A, B>(
  ref: TRef.TRef<A>,
  f: (value: A) => readonly [B, A],
  fiber: Fiber.RuntimeFiber<unknown, unknown>
): B => {
  const current = peek(ref)
  const [result, next] = f(current)
  if (next !== current) poke(ref, next, fiber)
  return result
}

// How Effect 3.22 stores a TRef's committed value and its waiting transactions
// (test/internal/state/Peek.test.ts checks it).
interface Versioned<A> {
  versioned: Version<A>
  todos: Map<number, () => unknown>
}

interface Version<A> {
  readonly value: A
  readonly constructor: new(value: A) => Version<A>
}
