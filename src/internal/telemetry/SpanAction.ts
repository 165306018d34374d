/**
 * What a span fold asks of a tracer (`SpanFold` produces these actions, `SpanEmitter` carries them
 * out): open a span, set attributes, add an event, end a span, with OTLP's attribute values.
 *
 * @since 0.1.0
 */

/**
 * A span attribute value (OTLP's scalar and array values).
 *
 * @since 0.1.0
 * @category models
 */
export type AttributeValue = string | number | boolean | ReadonlyArray<string>

/**
 * Span attributes by key.
 *
 * @since 0.1.0
 * @category models
 */
export type Attributes = Readonly<Record<string, AttributeValue>>

/**
 * One thing the fold asks of a tracer: open a span, set attributes, add an event, end a span. Spans
 * are named by a key unique within the session (`turn:3`, `chat:3.1.2`, `tool:call-1`).
 *
 * @since 0.1.0
 * @category models
 */
export type SpanAction =
  | {
    readonly _tag: "Open"
    readonly key: string
    readonly parent: string | undefined
    readonly name: string
    readonly kind: "internal" | "client"
    readonly time: number
    readonly attributes: Attributes
  }
  | { readonly _tag: "Attributes"; readonly key: string; readonly attributes: Attributes }
  | {
    readonly _tag: "Event"
    readonly key: string
    readonly name: string
    readonly time: number
    readonly attributes: Attributes
  }
  | {
    readonly _tag: "End"
    readonly key: string
    readonly time: number
    readonly error?: { readonly type: string; readonly message: string }
  }
