/**
 * The surface and the derived history (SPEC 2.8) as the log fold keeps them. Appends push onto both
 * vectors. A single-node replacement of a node that has a message by one that has a message (a
 * pruned `tool/result`, SPEC 6.7's `TR~`) is kept as a patch found by position in O(1), so a prune
 * of k results costs the fold O(k), not O(k·n); the vectors with their patches applied are built
 * once, when first read (O(n)), and later versions start from them. Other replacements are rebuilt
 * by the fold (O(n), once per summary).
 *
 * @since 0.1.0
 */
import { HashMap, Option } from "effect"
import * as GrowOnly from "./GrowOnly.js"
import type { Message } from "./Values.js"

interface Patch {
  readonly seq: number
  readonly message: Message
  readonly messageIndex: number
}

interface Built {
  readonly surface: GrowOnly.GrowOnly<number>
  readonly messages: GrowOnly.GrowOnly<Message>
}

// The positions of the seqs of a base surface's buffer, filled on demand. A buffer's slots are
// written once (GrowOnly pushes in place only at the tip), so an entry holds for every version that
// shares the buffer and is long enough to see that slot.
interface PositionIndex {
  readonly positions: Map<number, number>
  upTo: number
}

const indexes = new WeakMap<Array<number>, PositionIndex>()

const positionsOf = (base: GrowOnly.GrowOnly<number>): Map<number, number> => {
  let index = indexes.get(base.buffer)
  if (index === undefined) {
    index = { positions: new Map(), upTo: 0 }
    indexes.set(base.buffer, index)
  }
  for (; index.upTo < base.length; index.upTo++) index.positions.set(base.buffer[index.upTo]!, index.upTo)
  return index.positions
}

// How many of the ascending positions in `holes` are below `position`.
const countBelow = (holes: GrowOnly.GrowOnly<number>, position: number): number => {
  let lo = 0
  let hi = holes.length
  while (lo < hi) {
    const mid = (lo + hi) >>> 1
    if (holes.buffer[mid]! < position) lo = mid + 1
    else hi = mid
  }
  return lo
}

/**
 * The surface's seqs and the messages they contribute, with pending single-node patches.
 *
 * @since 0.1.0
 * @category models
 */
export class SurfaceHistory {
  private built: Built | undefined

  private constructor(
    private readonly base: GrowOnly.GrowOnly<number>,
    private readonly baseMessages: GrowOnly.GrowOnly<Message>,
    /** Positions of the nodes without a message (an empty assistant message), ascending. */
    private readonly holes: GrowOnly.GrowOnly<number>,
    /** Patches by surface position. */
    private readonly patches: HashMap.HashMap<number, Patch>,
    /** The positions of the patches' seqs. */
    private readonly patchedSeqs: HashMap.HashMap<number, number>
  ) {
    this.built = HashMap.isEmpty(patches) ? { surface: base, messages: baseMessages } : undefined
  }

  /**
   * The empty surface.
   *
   * @since 0.1.0
   */
  static empty(): SurfaceHistory {
    return new SurfaceHistory(GrowOnly.empty(), GrowOnly.empty(), GrowOnly.empty(), HashMap.empty(), HashMap.empty())
  }

  /**
   * A surface rebuilt whole: its seqs and the message of each (`undefined` for none).
   *
   * @since 0.1.0
   */
  static rebuilt(seqs: ReadonlyArray<number>, messageAt: (seq: number) => Message | undefined): SurfaceHistory {
    const messages: Array<Message> = []
    const holes: Array<number> = []
    for (let i = 0; i < seqs.length; i++) {
      const message = messageAt(seqs[i]!)
      if (message === undefined) holes.push(i)
      else messages.push(message)
    }
    return new SurfaceHistory(
      GrowOnly.fromArray(seqs),
      GrowOnly.fromArray(messages),
      GrowOnly.fromArray(holes),
      HashMap.empty(),
      HashMap.empty()
    )
  }

  /** The number of nodes on the surface. */
  get length(): number {
    return this.base.length
  }

  /** The surface's seqs in order (built on first read when patches are pending). */
  get surface(): GrowOnly.GrowOnly<number> {
    return this.build().surface
  }

  /** The messages of the surface in order (built on first read when patches are pending). */
  get messages(): GrowOnly.GrowOnly<Message> {
    return this.build().messages
  }

  /**
   * The position of `seq` on the surface, or −1.
   *
   * @since 0.1.0
   */
  positionOf(seq: number): number {
    const patched = HashMap.get(this.patchedSeqs, seq)
    if (Option.isSome(patched)) return patched.value
    const position = positionsOf(this.base).get(seq)
    if (position === undefined || position >= this.base.length || HashMap.has(this.patches, position)) return -1
    return position
  }

  /**
   * Whether the node at `position` contributes a message.
   *
   * @since 0.1.0
   */
  hasMessageAt(position: number): boolean {
    const at = countBelow(this.holes, position)
    return at >= this.holes.length || this.holes.buffer[at] !== position
  }

  /**
   * A new version with `seq` appended and its message, if any.
   *
   * @since 0.1.0
   */
  append(seq: number, message: Message | undefined): SurfaceHistory {
    const from = this.rebased()
    return new SurfaceHistory(
      GrowOnly.push(from.base, seq),
      message === undefined ? from.baseMessages : GrowOnly.push(from.baseMessages, message),
      message === undefined ? GrowOnly.push(from.holes, from.base.length) : from.holes,
      from.patches,
      from.patchedSeqs
    )
  }

  /**
   * A new version whose node at `position` (one with a message) is `seq` with `message`.
   *
   * @since 0.1.0
   */
  patch(position: number, seq: number, message: Message): SurfaceHistory {
    const from = this.rebased()
    const previous = HashMap.get(from.patches, position)
    const seqs = Option.isSome(previous) ? HashMap.remove(from.patchedSeqs, previous.value.seq) : from.patchedSeqs
    return new SurfaceHistory(
      from.base,
      from.baseMessages,
      from.holes,
      HashMap.set(from.patches, position, { seq, message, messageIndex: position - countBelow(from.holes, position) }),
      HashMap.set(seqs, seq, position)
    )
  }

  // A version whose patches, once built, are its base: later versions do not apply them again.
  private rebased(): SurfaceHistory {
    if (HashMap.isEmpty(this.patches) || this.built === undefined) return this
    return new SurfaceHistory(this.built.surface, this.built.messages, this.holes, HashMap.empty(), HashMap.empty())
  }

  private build(): Built {
    if (this.built !== undefined) return this.built
    const surface = GrowOnly.toArray(this.base)
    const messages = GrowOnly.toArray(this.baseMessages)
    for (const [position, patch] of this.patches) {
      surface[position] = patch.seq
      messages[patch.messageIndex] = patch.message
    }
    this.built = {
      surface: { buffer: surface, length: surface.length },
      messages: { buffer: messages, length: messages.length }
    }
    return this.built
  }
}
