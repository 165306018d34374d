/**
 * The store service that persists a session's header and logical log (SPEC 6.1, 8.10).
 *
 * @since 0.1.0
 */
import { Context, Effect, Layer } from "effect"
import type { StoreSnapshot } from "../internal/durability/MemoryStore.js"
import { emptySnapshot, makeMemoryStore } from "../internal/durability/MemoryStore.js"
import type { StoreShape } from "../internal/durability/Store.js"

/**
 * The committed contents of a memory store at one instant: a crash image (opaque).
 *
 * @since 0.1.0
 * @category models
 */
export type { StoreSnapshot } from "../internal/durability/MemoryStore.js"

/**
 * Test controls of the memory store: injected failures, holding appends back, and crash images.
 *
 * @since 0.1.0
 * @category tags
 */
export class MemoryStoreControl extends Context.Tag("tiller/MemoryStoreControl")<MemoryStoreControl, {
  /** The next `n` append calls fail with `PersistenceError` and store nothing. */
  readonly failAppends: (n: number) => Effect.Effect<void>
  /** Append calls block (in call order) until `release`. */
  readonly hold: Effect.Effect<void>
  /** Lets held append calls proceed. */
  readonly release: Effect.Effect<void>
  /** How many append calls were made, including failed and held ones. */
  readonly appendCalls: Effect.Effect<number>
  /** The committed contents only, as `layerMemoryFrom` restores them. */
  readonly snapshot: Effect.Effect<StoreSnapshot>
}>() {}

const layerMemoryFrom = (snapshot: StoreSnapshot): Layer.Layer<SessionStore | MemoryStoreControl> =>
  Layer.effectContext(
    Effect.map(
      makeMemoryStore(snapshot),
      ({ control, store }) => Context.make(SessionStore, store).pipe(Context.add(MemoryStoreControl, control))
    )
  )

/**
 * Persists session headers and logs; one contract suite covers every backend.
 *
 * @since 0.1.0
 * @category tags
 */
export class SessionStore extends Context.Tag("tiller/SessionStore")<SessionStore, StoreShape>() {
  /**
   * A fresh, empty in-memory store with its controls.
   *
   * @since 0.1.0
   * @category layers
   */
  static readonly layerMemory: Layer.Layer<SessionStore | MemoryStoreControl> = layerMemoryFrom(
    emptySnapshot
  )

  /**
   * A fresh in-memory store holding the contents of a snapshot (a reopen after a crash).
   *
   * @since 0.1.0
   * @category layers
   */
  static readonly layerMemoryFrom: (snapshot: StoreSnapshot) => Layer.Layer<SessionStore | MemoryStoreControl> =
    layerMemoryFrom
}
