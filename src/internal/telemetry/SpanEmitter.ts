/**
 * Applies the span fold's actions to an Effect `Tracer`: spans are created with the events' own
 * times (so a replayed log keeps its original timestamps), nested by the fold's parent keys, and
 * ended with a failure exit when the fold reports an error (OTLP status `ERROR`).
 *
 * @since 0.1.0
 */
import { Context, Exit, Option } from "effect"
import type * as Tracer from "effect/Tracer"
import type { SpanAction } from "./SpanAction.js"

/**
 * The failure a span ends with: its `name` is the error type, its `message` the description.
 *
 * @since 0.1.0
 * @category models
 */
export class SpanFailure extends Error {
  constructor(type: string, message: string) {
    super(message)
    this.name = type
  }
}

const nanos = (millis: number): bigint => BigInt(millis) * 1_000_000n

/**
 * An emitter over `tracer`: call it with each action in order. It returns how many spans it ended.
 *
 * @since 0.1.0
 * @category constructors
 */
export const makeEmitter = (tracer: Tracer.Tracer): {
  readonly emit: (action: SpanAction) => void
  readonly ended: () => number
} => {
  const spans = new Map<string, Tracer.Span>()
  let ended = 0
  const emit = (action: SpanAction): void => {
    switch (action._tag) {
      case "Open": {
        const parent = action.parent === undefined ? undefined : spans.get(action.parent)
        const span = tracer.span(
          action.name,
          parent === undefined ? Option.none() : Option.some(parent),
          Context.empty(),
          [],
          nanos(action.time),
          action.kind
        )
        for (const key in action.attributes) span.attribute(key, action.attributes[key])
        spans.set(action.key, span)
        break
      }
      case "Attributes": {
        const span = spans.get(action.key)
        if (span !== undefined) { for (const key in action.attributes) span.attribute(key, action.attributes[key]) }
        break
      }
      case "Event":
        spans.get(action.key)?.event(action.name, nanos(action.time), action.attributes)
        break
      case "End": {
        const span = spans.get(action.key)
        if (span === undefined) break
        spans.delete(action.key)
        ended++
        span.end(
          nanos(action.time),
          action.error === undefined ? Exit.void : Exit.fail(new SpanFailure(action.error.type, action.error.message))
        )
        break
      }
    }
  }
  return { emit, ended: () => ended }
}
