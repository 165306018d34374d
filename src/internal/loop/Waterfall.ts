/**
 * A scoped, ordered registry of waterfall listeners: the machinery behind `PreStep` and `Hooks`
 * (SPEC 4.4, 8.7).
 *
 * Listeners form an ordered list; the first registered is outermost and `prepend: true` inserts at
 * the outermost position. `run` evaluates `chain(0)` over a snapshot of the list taken when the run
 * starts, where `chain(i) = listeners[i](input, next_i)` and the innermost link is the default.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import type { Scope } from "effect"

/**
 * One link of a waterfall: it receives the input and the rest of the chain.
 *
 * @since 0.1.0
 * @category models
 */
export type Listener<I, O, E> = (input: I, next: () => Effect.Effect<O, E>) => Effect.Effect<O, E>

/**
 * Where a listener is inserted.
 *
 * @since 0.1.0
 * @category models
 */
export interface RegisterOptions {
  readonly prepend?: boolean
}

/**
 * A registry of listeners composed as a waterfall.
 *
 * @since 0.1.0
 * @category models
 */
export interface Waterfall<I, O, E> {
  /** Adds a listener for the lifetime of the current scope. */
  readonly register: (listener: Listener<I, O, E>, options?: RegisterOptions) => Effect.Effect<void, never, Scope.Scope>
  /** Runs the listeners registered when the run starts, outermost first, over `innermost`. */
  readonly run: (input: I, innermost: (input: I) => Effect.Effect<O, E>) => Effect.Effect<O, E>
  /** Whether no listener is registered now (then `run` is just `innermost`). */
  readonly isEmpty: () => boolean
}

/**
 * The message of the defect returned by a second call of the same `next`.
 *
 * @since 0.1.0
 * @category constants
 */
export const NEXT_CALLED_TWICE = "next() called more than once"

// Entries are wrapped in a fresh object so that registering the same function twice yields two
// links, each removed by its own scope.
interface Entry<I, O, E> {
  readonly listener: Listener<I, O, E>
}

/**
 * Creates an empty registry; its listener list is replaced (never mutated) on each change.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = <I, O, E>(): Effect.Effect<Waterfall<I, O, E>> =>
  Effect.sync(() => {
    // Replaced, never mutated: a run keeps the snapshot it started with.
    let entries: ReadonlyArray<Entry<I, O, E>> = []
    return {
      register: (listener, options) => {
        const entry: Entry<I, O, E> = { listener }
        return Effect.asVoid(Effect.acquireRelease(
          Effect.sync(() => {
            entries = options?.prepend === true ? [entry, ...entries] : [...entries, entry]
          }),
          () =>
            Effect.sync(() => {
              entries = entries.filter((e) => e !== entry)
            })
        ))
      },
      run: (input, innermost) => Effect.suspend(() => runChain(entries, input, innermost)),
      isEmpty: () => entries.length === 0
    }
  })

const runChain = <I, O, E>(
  snapshot: ReadonlyArray<Entry<I, O, E>>,
  input: I,
  innermost: (input: I) => Effect.Effect<O, E>
): Effect.Effect<O, E> => {
  // `next_i` depends only on its position. The once-only check happens on the call itself (a
  // synchronous JS call, so it cannot race), not when the returned effect runs.
  const called: Array<boolean> = snapshot.map(() => false)
  const nexts: Array<() => Effect.Effect<O, E>> = snapshot.map((_, i) => () => {
    if (called[i]) return Effect.dieMessage(NEXT_CALLED_TWICE)
    called[i] = true
    return chain(i + 1)
  })
  // `suspend` turns a listener that throws instead of returning an effect into a defect.
  const chain = (i: number): Effect.Effect<O, E> =>
    Effect.suspend(() => {
      const entry = snapshot[i]
      return entry === undefined ? innermost(input) : entry.listener(input, nexts[i]!)
    })
  return chain(0)
}
