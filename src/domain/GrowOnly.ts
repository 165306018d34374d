/**
 * A persistent append-only vector with amortised O(1) `push` when used linearly.
 *
 * Versions share one backing array. A version owns the prefix `[0, length)`; `push` writes in place
 * only when the version is the tip of its backing array (nothing was written past it), otherwise it
 * copies its prefix first. Slots past a version's length are never read through that version, so
 * STM transactions that build a new version and then retry or fail leave nothing observable.
 *
 * @since 0.1.0
 */

/**
 * An immutable view of the first `length` elements of a shared backing array.
 *
 * @since 0.1.0
 * @category models
 */
export interface GrowOnly<A> {
  readonly buffer: Array<A>
  readonly length: number
}

/**
 * The empty vector.
 *
 * @since 0.1.0
 * @category constructors
 */
export const empty = <A>(): GrowOnly<A> => ({ buffer: [], length: 0 })

/**
 * A vector holding `items` (copied).
 *
 * @since 0.1.0
 * @category constructors
 */
export const fromArray = <A>(items: ReadonlyArray<A>): GrowOnly<A> => ({ buffer: items.slice(), length: items.length })

/**
 * A new version with `item` appended.
 *
 * @since 0.1.0
 * @category combinators
 */
export const push = <A>(self: GrowOnly<A>, item: A): GrowOnly<A> => {
  const buffer = self.buffer.length === self.length ? self.buffer : self.buffer.slice(0, self.length)
  buffer.push(item)
  return { buffer, length: self.length + 1 }
}

/**
 * The element at `index`, or `undefined` outside `[0, length)`.
 *
 * @since 0.1.0
 * @category getters
 */
export const get = <A>(self: GrowOnly<A>, index: number): A | undefined =>
  index >= 0 && index < self.length ? self.buffer[index] : undefined

/**
 * A fresh array of the elements.
 *
 * @since 0.1.0
 * @category getters
 */
export const toArray = <A>(self: GrowOnly<A>, from = 0): Array<A> => self.buffer.slice(from, self.length)
