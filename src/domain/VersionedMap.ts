/**
 * A persistent string-keyed map with O(1) `set` and `get` when used linearly.
 *
 * Versions share one mutable `Map`. The version that owns it reads and writes it directly; every
 * other version is one key's difference from a neighbour, closer to the owner. `set` on a version
 * first makes it the owner ("rerooting": the differences on the way are applied to the table and
 * reversed), then writes in place and leaves the old version as a one-key difference from the new
 * one. So every version keeps its contents for as long as it is held, and STM transactions that
 * build new versions and then retry or fail leave nothing observable: the committed version is as
 * many differences from the owner as the discarded attempt made, and takes the table back on its
 * next `set`. Reading or extending a version far from the owner costs time proportional to the
 * distance (each set between them): read a version before deriving many others from it.
 *
 * Two lines of versions extended in turn move the owner back and forth: start every independent
 * map from {@link empty}, never from a shared version.
 *
 * @since 0.1.0
 */

/**
 * One version of a map from strings to `V`.
 *
 * @since 0.1.0
 * @category models
 */
export interface VersionedMap<V> {
  readonly _tag: "VersionedMap"
  /** @internal */
  readonly _V?: V
}

// The owner has `table`; any other version has `key`, `present`, `value` and `toward` (the
// neighbour it differs from: this version = `toward` with `key` set to `value`, or absent).
class Version<V> implements VersionedMap<V> {
  readonly _tag = "VersionedMap" as const
  constructor(
    public table: Map<string, V> | undefined,
    public key: string,
    public present: boolean,
    public value: V | undefined,
    public toward: Version<V> | undefined
  ) {}
}

const asVersion = <V>(self: VersionedMap<V>): Version<V> => self as Version<V>

/**
 * A new, empty map with a table of its own.
 *
 * @since 0.1.0
 * @category constructors
 */
export const empty = <V>(): VersionedMap<V> => new Version<V>(new Map(), "", false, undefined, undefined)

/**
 * The value of `key` in this version, or `undefined`.
 *
 * @since 0.1.0
 * @category getters
 */
export const get = <V>(self: VersionedMap<V>, key: string): V | undefined => {
  let version = asVersion(self)
  while (version.table === undefined) {
    if (version.key === key) return version.present ? version.value : undefined
    version = version.toward!
  }
  return version.table.get(key)
}

/**
 * Whether this version has `key`.
 *
 * @since 0.1.0
 * @category getters
 */
export const has = <V>(self: VersionedMap<V>, key: string): boolean => {
  let version = asVersion(self)
  while (version.table === undefined) {
    if (version.key === key) return version.present
    version = version.toward!
  }
  return version.table.has(key)
}

// Makes `self` the owner: walks to the owner, then hands the table back one version at a time,
// applying each difference and recording its inverse on the version that gave the table up.
const reroot = <V>(self: Version<V>): Map<string, V> => {
  if (self.table !== undefined) return self.table
  const path: Array<Version<V>> = []
  let owner = self
  while (owner.table === undefined) {
    path.push(owner)
    owner = owner.toward!
  }
  const table = owner.table
  for (let i = path.length - 1; i >= 0; i--) {
    const next = path[i]!
    const key = next.key
    const present = table.has(key)
    const value = table.get(key)
    if (next.present) table.set(key, next.value as V)
    else table.delete(key)
    owner.table = undefined
    owner.key = key
    owner.present = present
    owner.value = value
    owner.toward = next
    next.table = table
    next.key = ""
    next.present = false
    next.value = undefined
    next.toward = undefined
    owner = next
  }
  return table
}

/**
 * A new version with `key` set to `value`; this version keeps its contents.
 *
 * @since 0.1.0
 * @category combinators
 */
export const set = <V>(self: VersionedMap<V>, key: string, value: V): VersionedMap<V> => {
  const version = asVersion(self)
  const table = reroot(version)
  const present = table.has(key)
  const previous = table.get(key)
  table.set(key, value)
  const next = new Version<V>(table, "", false, undefined, undefined)
  version.table = undefined
  version.key = key
  version.present = present
  version.value = previous
  version.toward = next
  return next
}
