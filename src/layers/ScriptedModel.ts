/**
 * ScriptedModel: a `Model` that answers each request with the next entry of a script, one chunk
 * per pull, with effects at chosen points of the stream (SPEC 8.8). The test seam of the loop.
 * Its `respond` hands the loop an entry with no effects, failure or hang as every chunk at once, and
 * any other entry as its Stream; a consumer of `stream` gets one chunk per pull.
 *
 * @since 0.1.0
 */
import { Chunk, Context, Effect, Exit, Layer, Option, Stream } from "effect"
import { ModelError } from "../domain/Errors.js"
import type { Json } from "../domain/Json.js"
import type { LlmFailure, StreamChunk, Usage } from "../domain/Values.js"
import type { ModelRequest, ModelResponse, ModelShape } from "../services/Model.js"
import { Model } from "../services/Model.js"

/**
 * Effects an entry runs at fixed points of its stream.
 *
 * @since 0.1.0
 * @category models
 */
export interface EntryOptions {
  /** Runs when the stream is first pulled, before the first chunk (also when no chunk follows). */
  readonly awaitBefore?: Effect.Effect<void, unknown>
  /** Runs once the first chunk has been consumed, before the next one is produced. */
  readonly during?: Effect.Effect<void, unknown>
  /** Runs once the finish chunk has been consumed. */
  readonly afterFinish?: Effect.Effect<void, unknown>
  /** Runs uninterruptibly when the stream is interrupted; the interruption waits for it. */
  readonly onInterrupt?: Effect.Effect<void>
}

/**
 * A complete response: reasoning, text and tool calls, then usage, replay state and finish.
 *
 * @since 0.1.0
 * @category models
 */
export interface ResponseSpec {
  readonly text?: string | ReadonlyArray<string>
  readonly reasoning?: string | ReadonlyArray<string>
  readonly toolCalls?: ReadonlyArray<{
    readonly id: string
    readonly name: string
    readonly arguments: unknown
    readonly partial?: boolean
  }>
  readonly finish?: "stop" | "max-tokens"
  readonly usage?: Usage
  readonly replayState?: Json
}

/**
 * The chunks a stream emits before it fails or hangs.
 *
 * @since 0.1.0
 * @category models
 */
export interface PartialSpec {
  readonly text?: string
  readonly reasoning?: string
  readonly closed?: boolean
  readonly toolCall?: { readonly id: string; readonly name: string; readonly arguments: string }
  readonly usage?: Usage
}

/**
 * Brands a script entry.
 *
 * @since 0.1.0
 * @category symbols
 */
export const ScriptEntryTypeId: unique symbol = Symbol.for("tiller/ScriptEntry")

/**
 * One scripted response; build it with the `ScriptedModel` constructors.
 *
 * @since 0.1.0
 * @category models
 */
export interface ScriptEntry {
  readonly [ScriptEntryTypeId]: typeof ScriptEntryTypeId
}

type Ending =
  | { readonly _tag: "End" }
  | { readonly _tag: "Hang" }
  | { readonly _tag: "Fail"; readonly error: ModelError }

interface Entry extends ScriptEntry {
  readonly chunks: ReadonlyArray<StreamChunk>
  readonly ending: Ending
  readonly options: EntryOptions
}

const end: Ending = { _tag: "End" }
const hangForever: Ending = { _tag: "Hang" }

const entry = (chunks: ReadonlyArray<StreamChunk>, ending: Ending, options: EntryOptions | undefined): ScriptEntry => {
  const value: Entry = {
    [ScriptEntryTypeId]: ScriptEntryTypeId,
    chunks,
    ending,
    options: {
      ...(options?.awaitBefore === undefined ? {} : { awaitBefore: options.awaitBefore }),
      ...(options?.during === undefined ? {} : { during: options.during }),
      ...(options?.afterFinish === undefined ? {} : { afterFinish: options.afterFinish }),
      ...(options?.onInterrupt === undefined ? {} : { onInterrupt: options.onInterrupt })
    }
  }
  return value
}

const deltasOf = (text: string | ReadonlyArray<string>): ReadonlyArray<string> =>
  typeof text === "string" ? [text] : text

const argumentsText = (args: unknown): string => typeof args === "string" ? args : JSON.stringify(args) ?? "{}"

// Builds chunks with block indexes increasing from 0 in emission order.
const chunkBuilder = () => {
  const chunks: Array<StreamChunk> = []
  let next = 0
  return {
    chunks,
    textual: (block: "text" | "reasoning", deltas: ReadonlyArray<string>, close: boolean) => {
      const index = next++
      chunks.push({ type: "block-start", index, block })
      for (const text of deltas) {
        chunks.push(block === "text" ? { type: "text-delta", index, text } : { type: "reasoning-delta", index, text })
      }
      if (close) chunks.push({ type: "block-end", index })
    },
    toolCall: (id: string, name: string, args: string, close: boolean) => {
      const index = next++
      chunks.push({ type: "block-start", index, block: "tool-call", id, name })
      chunks.push({ type: "tool-call-delta", index, arguments: args })
      if (close) chunks.push({ type: "block-end", index })
    },
    push: (chunk: StreamChunk) => {
      chunks.push(chunk)
    }
  }
}

const partialChunks = (partial: PartialSpec | undefined): ReadonlyArray<StreamChunk> => {
  const b = chunkBuilder()
  if (partial === undefined) return b.chunks
  const close = partial.closed === true
  if (partial.reasoning !== undefined) b.textual("reasoning", [partial.reasoning], close)
  if (partial.text !== undefined) b.textual("text", [partial.text], close)
  if (partial.toolCall !== undefined) {
    b.toolCall(partial.toolCall.id, partial.toolCall.name, partial.toolCall.arguments, close)
  }
  if (partial.usage !== undefined) b.push({ type: "usage", usage: partial.usage })
  return b.chunks
}

const modelError = (failure: LlmFailure) => new ModelError({ failure })

const describe = (cause: unknown): string =>
  typeof cause === "object" && cause !== null && "message" in cause && typeof cause.message === "string"
    ? cause.message
    : String(cause)

// SPEC 4.5 Q5: a ModelError passes through; anything else becomes an UNKNOWN failure.
const toModelError = (cause: unknown): ModelError =>
  cause instanceof ModelError ? cause : modelError({ message: describe(cause), code: "UNKNOWN" })

const runOption = (effect: Effect.Effect<void, unknown> | undefined): Effect.Effect<void, Option.Option<ModelError>> =>
  effect === undefined ? Effect.void : Effect.mapError(effect, (cause) => Option.some(toModelError(cause)))

const isFinish = (chunk: unknown): boolean =>
  typeof chunk === "object" && chunk !== null && "type" in chunk && chunk.type === "finish"

// `onInterrupt` of the entry a stream played, run as the stream's outermost finalizer: a defect it
// raises stays in the consumer's exit (a finalizer of a scope inside the stream, `Stream.unwrap`'s
// included, would lose it when the consumer is interrupted).
const withOnInterrupt = (
  stream: Stream.Stream<StreamChunk, ModelError>,
  played: () => Entry | undefined
): Stream.Stream<StreamChunk, ModelError> =>
  Stream.ensuringWith(stream, (exit) => {
    const onInterrupt = played()?.options.onInterrupt
    return onInterrupt !== undefined && Exit.isInterrupted(exit) ? onInterrupt : Effect.void
  })

// One chunk per pull; the effects due after a chunk run on the pull that follows it.
const play = (entry: Entry): Stream.Stream<StreamChunk, ModelError> =>
  Stream.suspend(() => {
    const { chunks, ending, options } = entry
    const finishAt = chunks.findIndex(isFinish)
    let emitted = 0
    const due = (): Effect.Effect<void, Option.Option<ModelError>> => {
      if (emitted === 0) return runOption(options.awaitBefore)
      const previous = emitted - 1
      return Effect.zipRight(
        previous === 0 ? runOption(options.during) : Effect.void,
        previous === finishAt ? runOption(options.afterFinish) : Effect.void
      )
    }
    const next = (): Effect.Effect<Chunk.Chunk<StreamChunk>, Option.Option<ModelError>> => {
      if (emitted < chunks.length) {
        return Effect.succeed(Chunk.of(chunks[emitted++]!))
      }
      switch (ending._tag) {
        case "End":
          return Effect.fail(Option.none())
        case "Hang":
          return Effect.never
        case "Fail":
          return Effect.fail(Option.some(ending.error))
      }
    }
    return Stream.repeatEffectChunkOption(Effect.suspend(() => Effect.zipRight(due(), Effect.suspend(next))))
  })

interface ScriptState {
  /** The index of the next entry to play. */
  next: number
  /** Every request so far, oldest first (appended in place; copied when read). */
  readonly requests: Array<ModelRequest>
}

const exhausted = modelError({ message: "ScriptedModel: script exhausted", code: "UNKNOWN" })

const freeze = <A extends object>(value: A): A => Object.isFrozen(value) ? value : Object.freeze({ ...value })

// An entry with no timing points, failure or hang: all its chunks are known when it starts.
const isPlain = (entry: Entry): boolean =>
  entry.ending._tag === "End" && entry.options.awaitBefore === undefined && entry.options.during === undefined &&
  entry.options.afterFinish === undefined && entry.options.onInterrupt === undefined

const make = (script: ReadonlyArray<ScriptEntry>) =>
  Effect.gen(function*() {
    const entries = script as ReadonlyArray<Entry>
    // Changed only inside one synchronous step of an Effect, so no Ref is needed.
    const state: ScriptState = yield* Effect.sync(() => ({ next: 0, requests: [] }))
    // Recording the request and taking its entry is one atomic step, when the stream starts: the
    // entry for `request` (given to `use`), or the script is exhausted.
    const entryFor = <A>(request: ModelRequest, use: (entry: Entry) => A): Effect.Effect<A, ModelError> =>
      Effect.suspend(() => {
        state.requests.push(freeze(request))
        const entry = entries[state.next++]
        return entry === undefined ? Effect.fail(exhausted) : Effect.succeed(use(entry))
      })
    // The loop's reading (`respond`): a plain entry's chunks at once (it has no effect to place
    // between them), any other entry as its stream.
    const respond = (request: ModelRequest): ModelResponse => {
      state.requests.push(freeze(request))
      const next = entries[state.next++]
      if (next === undefined) return Effect.fail(exhausted)
      return isPlain(next) ? next.chunks : withOnInterrupt(play(next), () => next)
    }
    const model: ModelShape = {
      stream: (request) => {
        let played: Entry | undefined
        const started = entryFor(request, (entry) => {
          played = entry
          return play(entry)
        })
        return withOnInterrupt(Stream.unwrap(started), () => played)
      },
      respond
    }
    const scripted = ScriptedModel.of({
      requests: Effect.sync(() => Object.freeze([...state.requests])),
      remaining: Effect.sync(() => Math.max(0, entries.length - state.next))
    })
    return Context.make(Model, model).pipe(Context.add(ScriptedModel, scripted))
  })

/**
 * A scripted `Model` and its inspection service: each request consumes the next entry.
 *
 * @since 0.1.0
 * @category tags
 */
export class ScriptedModel extends Context.Tag("tiller/ScriptedModel")<ScriptedModel, {
  readonly requests: Effect.Effect<ReadonlyArray<ModelRequest>>
  readonly remaining: Effect.Effect<number>
}>() {
  /**
   * A `Model` answering from `script`, with the `ScriptedModel` that inspects it.
   *
   * @since 0.1.0
   */
  static readonly layer = (script: ReadonlyArray<ScriptEntry>): Layer.Layer<Model | ScriptedModel> =>
    Layer.effectContext(make(script))

  /**
   * A text response: one block (one delta per element of `deltas`, default `[text]`), usage, `stop`.
   *
   * @since 0.1.0
   */
  static readonly text = (
    text: string,
    options?: EntryOptions & { readonly deltas?: ReadonlyArray<string>; readonly usage?: Usage }
  ): ScriptEntry => {
    const b = chunkBuilder()
    b.textual("text", options?.deltas ?? [text], true)
    if (options?.usage !== undefined) b.push({ type: "usage", usage: options.usage })
    b.push({ type: "finish", finish: { kind: "stop" } })
    return entry(b.chunks, end, options)
  }

  /**
   * A full response: reasoning, text, tool calls, then usage, replay state and finish (`stop`).
   *
   * @since 0.1.0
   */
  static readonly response = (spec: ResponseSpec & EntryOptions): ScriptEntry => {
    const b = chunkBuilder()
    if (spec.reasoning !== undefined) b.textual("reasoning", deltasOf(spec.reasoning), true)
    if (spec.text !== undefined) b.textual("text", deltasOf(spec.text), true)
    for (const call of spec.toolCalls ?? []) {
      b.toolCall(call.id, call.name, argumentsText(call.arguments), call.partial !== true)
    }
    if (spec.usage !== undefined) b.push({ type: "usage", usage: spec.usage })
    if (spec.replayState !== undefined) b.push({ type: "replay-state", state: spec.replayState })
    b.push({ type: "finish", finish: { kind: spec.finish ?? "stop" } })
    return entry(b.chunks, end, spec)
  }

  /**
   * A provider-side failure: the partial chunks, then a finish `error` (or `aborted`) with `failure`.
   *
   * @since 0.1.0
   */
  static readonly fail = (
    failure: LlmFailure,
    options?: EntryOptions & { readonly partial?: PartialSpec; readonly finish?: "error" | "aborted" }
  ): ScriptEntry =>
    entry(
      [...partialChunks(options?.partial), { type: "finish", finish: { kind: options?.finish ?? "error", failure } }],
      end,
      options
    )

  /**
   * A stream that fails with `ModelError {message, code: "UNKNOWN"}` without emitting a chunk.
   *
   * @since 0.1.0
   */
  static readonly die = (message: string, options?: EntryOptions): ScriptEntry =>
    entry([], { _tag: "Fail", error: modelError({ message, code: "UNKNOWN" }) }, options)

  /**
   * The partial chunks (blocks left open unless `closed`), then a stream that never ends.
   *
   * @since 0.1.0
   */
  static readonly hang = (partial?: PartialSpec, options?: EntryOptions): ScriptEntry =>
    entry(partialChunks(partial), hangForever, options)

  /**
   * The given chunks verbatim, even invalid ones, then the end of the stream or a hang.
   *
   * @since 0.1.0
   */
  static readonly chunks = (
    chunks: ReadonlyArray<unknown>,
    options?: EntryOptions & { readonly then?: "end" | "hang" }
  ): ScriptEntry =>
    entry([...chunks] as ReadonlyArray<StreamChunk>, options?.then === "hang" ? hangForever : end, options)
}
