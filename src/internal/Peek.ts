/**
 * Reads a `TRef`'s committed value outside any transaction. Effect 3 commits a transaction
 * synchronously, in one JavaScript turn, so the value read is always one some transaction committed
 * and never part of a commit in progress. Reading it this way costs no transaction: a loop that only
 * needs to know whether a cause is recorded right now uses it instead of committing a read.
 *
 * @since 0.1.0
 */
import type { TRef } from "effect"

/**
 * The value `ref` holds after the last commit that wrote it.
 *
 * @since 0.1.0
 * @category getters
 */
export const peek = <A>(ref: TRef.TRef<A>): A => (ref as unknown as Versioned<A>).versioned.value

// How Effect 3.22 stores a TRef's committed value (test/internal/Peek.test.ts checks it).
interface Versioned<A> {
  readonly versioned: { readonly value: A }
}
