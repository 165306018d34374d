/**
 * The assembler of one model attempt (SPEC 4.5, 7.4): folds stream chunks into the content, usage
 * and replay state of an `AssistantMessage`, and detects malformed chunk order.
 *
 * The state is immutable. Every chunk costs O(1) amortised: block starts and deltas are pushed onto
 * persistent lists and grouped and joined once, when a message is built.
 *
 * @since 0.1.0
 */
import { Either } from "effect"
import type { MessageId } from "../../domain/Ids.js"
import type { Json } from "../../domain/Json.js"
import type { AssistantMessage, StreamChunk, Usage } from "../../domain/Values.js"
import * as VersionedMap from "../../domain/VersionedMap.js"

type BlockKind = "text" | "reasoning" | "tool-call"

interface BlockStart {
  readonly ordinal: number
  readonly kind: BlockKind
  readonly id: string
  readonly name: string
}

interface Delta {
  readonly ordinal: number
  readonly text: string
}

// A persistent stack, newest first.
type Stack<A> = { readonly head: A; readonly tail: Stack<A> } | undefined

const push = <A>(stack: Stack<A>, head: A): Stack<A> => ({ head, tail: stack })

const toArray = <A>(stack: Stack<A>): Array<A> => {
  const out: Array<A> = []
  for (let s = stack; s !== undefined; s = s.tail) out.push(s.head)
  return out.reverse()
}

// The open blocks by stream index; a closed block's entry is `undefined` (the map has no removal).
type OpenBlocks = VersionedMap.VersionedMap<BlockStart | undefined>

const openAt = (open: OpenBlocks, index: number): BlockStart | undefined => VersionedMap.get(open, String(index))

/**
 * What the assembler has seen of one attempt so far.
 *
 * @since 0.1.0
 * @category models
 */
export interface AssemblerState {
  readonly starts: Stack<BlockStart>
  readonly deltas: Stack<Delta>
  readonly blockCount: number
  readonly open: OpenBlocks
  readonly usage: Usage | undefined
  readonly replayState: { readonly value: Json } | undefined
}

/**
 * The identity and route of the message being assembled; the caller mints the id.
 *
 * @since 0.1.0
 * @category models
 */
export interface MessageOrigin {
  readonly id: MessageId
  readonly provider: string
  readonly model: string
}

/**
 * An assembled assistant message with the usage of the last usage chunk, if any.
 *
 * @since 0.1.0
 * @category models
 */
export interface Assembled {
  readonly message: AssistantMessage
  readonly usage?: Usage
}

/**
 * The state before the first chunk of an attempt.
 *
 * @since 0.1.0
 * @category constructors
 */
export const empty = (): AssemblerState => ({
  starts: undefined,
  deltas: undefined,
  blockCount: 0,
  open: VersionedMap.empty(),
  usage: undefined,
  replayState: undefined
})

// `state` with `patch` applied, as a fresh object of one fixed shape. Not an object spread: in V8 a
// spread of an object that itself came from a spread with overridden keys takes a slow path (about
// 0.5 µs against 0.05 µs on node 20), and every chunk's state comes from the previous one.
const patched = (state: AssemblerState, patch: Partial<AssemblerState>): AssemblerState =>
  Object.assign({
    starts: state.starts,
    deltas: state.deltas,
    blockCount: state.blockCount,
    open: state.open,
    usage: state.usage,
    replayState: state.replayState
  }, patch)

const deltaKind = {
  "text-delta": "text",
  "reasoning-delta": "reasoning",
  "tool-call-delta": "tool-call"
} as const

const appendDelta = (
  state: AssemblerState,
  type: keyof typeof deltaKind,
  index: number,
  text: string
): Either.Either<AssemblerState, string> => {
  const block = openAt(state.open, index)
  if (block === undefined) return Either.left(`${type} for unopened index ${index}`)
  if (block.kind !== deltaKind[type]) {
    return Either.left(`${type} for ${block.kind} block at index ${index}`)
  }
  return Either.right(patched(state, { deltas: push(state.deltas, { ordinal: block.ordinal, text }) }))
}

/**
 * Feeds one chunk; `Left` carries the reason when the chunk breaks the block order (a delta or end
 * for an index with no open block, a delta of another block kind, a start reusing an open index).
 * `finish` chunks leave the state unchanged: the caller decides what a finish means.
 *
 * @since 0.1.0
 * @category combinators
 */
export const feed = (state: AssemblerState, chunk: StreamChunk): Either.Either<AssemblerState, string> => {
  switch (chunk.type) {
    case "block-start": {
      if (openAt(state.open, chunk.index) !== undefined) {
        return Either.left(`block-start reuses open index ${chunk.index}`)
      }
      const start: BlockStart = chunk.block === "tool-call"
        ? { ordinal: state.blockCount, kind: "tool-call", id: chunk.id, name: chunk.name }
        : { ordinal: state.blockCount, kind: chunk.block, id: "", name: "" }
      return Either.right(patched(state, {
        starts: push(state.starts, start),
        blockCount: state.blockCount + 1,
        open: VersionedMap.set(state.open, String(chunk.index), start)
      }))
    }
    case "text-delta":
    case "reasoning-delta":
      return appendDelta(state, chunk.type, chunk.index, chunk.text)
    case "tool-call-delta":
      return appendDelta(state, chunk.type, chunk.index, chunk.arguments)
    case "block-end":
      return openAt(state.open, chunk.index) !== undefined
        ? Either.right(patched(state, { open: VersionedMap.set(state.open, String(chunk.index), undefined) }))
        : Either.left(`block-end for unopened index ${chunk.index}`)
    case "usage":
      return Either.right(patched(state, { usage: chunk.usage }))
    case "replay-state":
      return Either.right(patched(state, { replayState: { value: chunk.state } }))
    case "finish":
      return Either.right(state)
    default:
      return Either.left(`unknown chunk type ${String((chunk as { readonly type?: unknown }).type)}`)
  }
}

type Content = AssistantMessage["content"][number]

// Every block in block-start order, with its deltas joined.
const blocks = (state: AssemblerState): Array<Content> => {
  const parts: Array<Array<string> | undefined> = new Array(state.blockCount)
  for (const delta of toArray(state.deltas)) {
    const part = parts[delta.ordinal]
    if (part === undefined) parts[delta.ordinal] = [delta.text]
    else part.push(delta.text)
  }
  // Starts are numbered in order (ordinal 0 first): each goes to its own place.
  const out: Array<Content> = new Array(state.blockCount)
  for (let s = state.starts; s !== undefined; s = s.tail) {
    const start = s.head
    const part = parts[start.ordinal]
    const text = part === undefined ? "" : part.length === 1 ? part[0]! : part.join("")
    out[start.ordinal] = start.kind === "tool-call"
      ? { type: "tool-call", id: start.id, name: start.name, arguments: text }
      : { type: start.kind, text }
  }
  return out
}

const build = (
  state: AssemblerState,
  origin: MessageOrigin,
  content: ReadonlyArray<Content>,
  replayState: { readonly value: Json } | undefined
): Assembled => {
  const message: AssistantMessage = {
    id: origin.id,
    role: "assistant",
    content,
    source: replayState === undefined
      ? { kind: "model", provider: origin.provider, model: origin.model }
      : { kind: "model", provider: origin.provider, model: origin.model, replayState: replayState.value }
  }
  return state.usage === undefined ? { message } : { message, usage: state.usage }
}

/**
 * The message of a `stop` or `max-tokens` finish. Empty text and reasoning blocks are dropped;
 * on `max-tokens` every tool-call block and the replay state are dropped too.
 *
 * @since 0.1.0
 * @category destructors
 */
export const finishMessage = (
  state: AssemblerState,
  origin: MessageOrigin,
  finish: "stop" | "max-tokens"
): Assembled => {
  const content = blocks(state).filter((block) =>
    block.type === "tool-call" ? finish === "stop" : block.text.length > 0
  )
  return build(state, origin, content, finish === "stop" ? state.replayState : undefined)
}

/**
 * The interrupted prefix (SPEC 7.4): text and reasoning blocks, open or closed, with non-whitespace
 * text, in stream order; tool calls and replay state dropped. `undefined` when nothing is left.
 *
 * @since 0.1.0
 * @category destructors
 */
export const interruptedPrefix = (state: AssemblerState, origin: MessageOrigin): Assembled | undefined => {
  const content = blocks(state).filter((block) => block.type !== "tool-call" && block.text.trim().length > 0)
  return content.length === 0 ? undefined : build(state, origin, content, undefined)
}
