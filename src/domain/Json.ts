/**
 * Lossless JSON values: the only data the durable log stores.
 *
 * @since 0.1.0
 */
import { Either, ParseResult, Schema } from "effect"
import * as SafeDecode from "./SafeDecode.js"

/**
 * A lossless JSON value.
 *
 * @since 0.1.0
 * @category models
 */
export type Json = null | boolean | number | string | ReadonlyArray<Json> | { readonly [k: string]: Json }

/**
 * The deepest nesting of arrays and objects a JSON value may have (the value itself is level 1):
 * a message, the data of an appended event, a tool's meta or parameters, and every JSON field of a
 * stored event. Deeper values are refused as invalid input (on load: as a malformed log).
 *
 * @since 0.1.0
 * @category validation
 */
export const MAX_JSON_DEPTH = 256

/**
 * The largest JSON value accepted, in characters of its JSON text as {@link jsonSize} counts them
 * (64 MiB): a message (or all messages of one splice), the data of an appended event, a tool's
 * content blocks or meta. An event made of such values encodes to a row SQLite and the JavaScript
 * engine can hold.
 *
 * @since 0.1.0
 * @category validation
 */
export const MAX_JSON_SIZE = 64 * 1024 * 1024

// A whole stored event (checked at the root path "event") holds its JSON fields at most 5 levels
// down (event, data, inserted list, message, source): its own depth limit leaves room for them,
// so that every field within MAX_JSON_DEPTH fits and the field's rule is the one that decides. Its
// size is its fields' business (a tool's output, checked when it was produced, may be large).
const EVENT_ROOT = "event"
const EVENT_ENVELOPE_DEPTH = 8

// What a problem says about a value nested too deeply, or too large.
const TOO_DEEP = `nested deeper than ${MAX_JSON_DEPTH} levels`
const TOO_LARGE = `larger than ${MAX_JSON_SIZE / 1024 / 1024} MiB of JSON text`

// The state of one walk over a value: the path of the value being looked at (keys and indexes,
// turned into text only for a problem), the containers above it, the JSON text counted so far and
// the first problem found.
interface Walk {
  readonly at: Array<string | number>
  readonly ancestors: Array<object>
  readonly depthLimit: number
  readonly sizeLimit: number
  size: number
  problem: string | undefined
}

const walkAt = (path: string): Walk =>
  path === EVENT_ROOT
    ? {
      at: [],
      ancestors: [],
      depthLimit: MAX_JSON_DEPTH + EVENT_ENVELOPE_DEPTH,
      sizeLimit: Infinity,
      size: 0,
      problem: undefined
    }
    : { at: [], ancestors: [], depthLimit: MAX_JSON_DEPTH, sizeLimit: MAX_JSON_SIZE, size: 0, problem: undefined }

// The reason for a walk's problem: a size is the whole value's, named at its root.
const reasonOf = (path: string, walk: Walk, problem: string): string =>
  problem === TOO_LARGE ? `${path}: ${TOO_LARGE}` : `${pathText(path, walk.at)}: ${problem}`

/**
 * Returns `undefined` when `value` is lossless JSON (2.1) within {@link MAX_JSON_DEPTH} and
 * {@link MAX_JSON_SIZE}, otherwise a readable reason naming the offending path. Rejects `undefined`,
 * functions, symbols, BigInt, non-finite numbers, `-0`, sparse arrays, class instances, cycles,
 * deeper or larger values, and values that cannot be read (a throwing getter or `Proxy` trap).
 * Never throws.
 *
 * @since 0.1.0
 * @category validation
 */
export const jsonProblem = (value: unknown, path = "$"): string | undefined => {
  const walk = walkAt(path)
  try {
    const problem = check(value, walk)
    return problem === undefined ? undefined : reasonOf(path, walk, problem)
  } catch (cause) {
    return `${pathText(path, walk.at)}: cannot be read (${describeThrown(cause)})`
  }
}

/**
 * A deep-frozen copy of `value` read once (every property read exactly one time), or the reason it
 * is not lossless JSON (as {@link jsonProblem} words it). The copy, not the caller's object, is what
 * later checks see: a getter or `Proxy` that answers differently the second time changes nothing.
 * Never throws.
 *
 * @since 0.1.0
 * @category validation
 */
export const snapshotJson = <A = Json>(value: unknown, path = "$"): Either.Either<A, string> => {
  const walk = walkAt(path)
  try {
    const copied = copy(value, walk)
    return walk.problem === undefined ? Either.right(copied as A) : Either.left(reasonOf(path, walk, walk.problem))
  } catch (cause) {
    return Either.left(`${pathText(path, walk.at)}: cannot be read (${describeThrown(cause)})`)
  }
}

/**
 * The size {@link MAX_JSON_SIZE} limits, of a lossless JSON value: each string and key at its
 * length plus 3 (quotes and a separator), a number at 8, any other scalar at 5, an array or object
 * at 2 (its JSON text is at most six times as long, every character escaped). Never throws.
 *
 * @since 0.1.0
 * @category validation
 */
export const jsonSize = (value: unknown): number => {
  // Bounded like an event's walk: of a value that is not lossless JSON, the part counted so far.
  const walk: Walk = { ...walkAt(EVENT_ROOT), sizeLimit: Infinity }
  try {
    check(value, walk)
  } catch {
    // An unreadable value: the part counted before it.
  }
  return walk.size
}

// A thrown value, described without trusting it (its message or `toString` may throw as well).
const describeThrown = (cause: unknown): string => {
  try {
    const text = cause instanceof Error ? cause.message : String(cause)
    return typeof text === "string" ? (text.length > 200 ? `${text.slice(0, 200)}…` : text) : typeof cause
  } catch {
    return "an unreadable exception"
  }
}

// Paths past this many segments are cut in the middle (a nesting problem's path is hundreds long).
const PATH_HEAD = 8
const PATH_TAIL = 2
const KEY_TEXT = 64

const segmentText = (key: string | number): string =>
  typeof key === "number" ? `[${key}]` : `.${key.length > KEY_TEXT ? `${key.slice(0, KEY_TEXT)}…` : key}`

const pathText = (root: string, at: ReadonlyArray<string | number>): string => {
  let text = root
  if (at.length <= PATH_HEAD + PATH_TAIL + 1) {
    for (const key of at) text += segmentText(key)
    return text
  }
  for (let i = 0; i < PATH_HEAD; i++) text += segmentText(at[i]!)
  text += "…"
  for (let i = at.length - PATH_TAIL; i < at.length; i++) text += segmentText(at[i]!)
  return text
}

// The JSON text of a number or another scalar, as counted.
const NUMBER_SIZE = 8
const SCALAR_SIZE = 5

// Counts `n` characters; whether the walk is still within its size limit.
const grow = (walk: Walk, n: number): boolean => (walk.size += n) <= walk.sizeLimit

// The problem with `value` (its path left in `walk.at`), or undefined. `walk.ancestors` are the
// objects being checked above it (at most the depth limit: a list is cheaper than a Set here), so
// recursion stops at the depth limit.
const check = (value: unknown, walk: Walk): string | undefined => {
  switch (typeof value) {
    case "string":
      return grow(walk, value.length + 3) ? undefined : TOO_LARGE
    case "boolean":
      return grow(walk, SCALAR_SIZE) ? undefined : TOO_LARGE
    case "number":
      return numberProblem(value) ?? (grow(walk, NUMBER_SIZE) ? undefined : TOO_LARGE)
    case "object": {
      if (value === null) return grow(walk, SCALAR_SIZE) ? undefined : TOO_LARGE
      const { ancestors, at } = walk
      if (ancestors.includes(value)) return "cyclic value"
      if (ancestors.length >= walk.depthLimit) return TOO_DEEP
      if (!grow(walk, 2)) return TOO_LARGE
      if (Array.isArray(value)) {
        ancestors.push(value)
        for (let i = 0; i < value.length; i++) {
          at.push(i)
          if (!(i in value)) return "sparse array"
          const problem = check(value[i], walk)
          if (problem !== undefined) return problem
          at.pop()
        }
        ancestors.pop()
        return undefined
      }
      const shape = objectProblem(value)
      if (shape !== undefined) return shape
      const keys = Object.keys(value)
      ancestors.push(value)
      for (let i = 0; i < keys.length; i++) {
        const key = keys[i]!
        at.push(key)
        if (!grow(walk, key.length + 3)) return TOO_LARGE
        const problem = check((value as Record<string, unknown>)[key], walk)
        if (problem !== undefined) return problem
        at.pop()
      }
      ancestors.pop()
      return hiddenProblem(value, keys, at)
    }
    default:
      return primitiveProblem(value)
  }
}

const numberProblem = (value: number): string | undefined => {
  if (!Number.isFinite(value)) return `${String(value)} is not a finite number`
  if (Object.is(value, -0)) return "-0 is not lossless JSON"
  return undefined
}

// An object that is not a plain one: a class instance, or one with symbol keys.
const objectProblem = (value: object): string | undefined => {
  const proto = Object.getPrototypeOf(value)
  if (proto !== Object.prototype && proto !== null) {
    return `${proto?.constructor?.name ?? "class"} instance is not a plain object`
  }
  if (Object.getOwnPropertySymbols(value).length > 0) return "symbol keys are not JSON"
  return undefined
}

// A property JSON.stringify would skip (and a copy would lose) is not JSON either.
const hiddenProblem = (value: object, keys: ReadonlyArray<string>, at: Array<string | number>): string | undefined => {
  const names = Object.getOwnPropertyNames(value)
  if (names.length === keys.length) return undefined
  const hidden = names.find((key) => !Object.prototype.propertyIsEnumerable.call(value, key))
  if (hidden === undefined) return undefined
  at.push(hidden)
  return "a non-enumerable property is not JSON"
}

const primitiveProblem = (value: unknown): string | undefined => {
  switch (typeof value) {
    case "undefined":
      return "undefined is not JSON"
    case "bigint":
      return "BigInt is not JSON"
    case "function":
      return "a function is not JSON"
    case "symbol":
      return "a symbol is not JSON"
    default:
      return undefined
  }
}

// `check` that also builds the frozen copy, reading each property once; on a problem it sets
// `walk.problem` (the path left in `walk.at`) and the returned value means nothing.
const copy = (value: unknown, walk: Walk): unknown => {
  switch (typeof value) {
    case "string":
    case "boolean":
    case "number":
      walk.problem = check(value, walk)
      return value
    case "object": {
      if (value === null) {
        walk.problem = check(value, walk)
        return null
      }
      const { ancestors, at } = walk
      if (ancestors.includes(value)) return fail(walk, "cyclic value")
      if (ancestors.length >= walk.depthLimit) return fail(walk, TOO_DEEP)
      if (!grow(walk, 2)) return fail(walk, TOO_LARGE)
      if (Array.isArray(value)) {
        const length = value.length
        const out = new Array(length)
        ancestors.push(value)
        for (let i = 0; i < length; i++) {
          at.push(i)
          if (!(i in value)) return fail(walk, "sparse array")
          out[i] = copy(value[i], walk)
          if (walk.problem !== undefined) return undefined
          at.pop()
        }
        ancestors.pop()
        return Object.freeze(out)
      }
      const shape = objectProblem(value)
      if (shape !== undefined) return fail(walk, shape)
      const keys = Object.keys(value)
      const out: Record<string, unknown> = {}
      ancestors.push(value)
      for (let i = 0; i < keys.length; i++) {
        const key = keys[i]!
        at.push(key)
        if (!grow(walk, key.length + 3)) return fail(walk, TOO_LARGE)
        const item = copy((value as Record<string, unknown>)[key], walk)
        if (walk.problem !== undefined) return undefined
        // Assigning `out["__proto__"]` would set the prototype instead of copying the own key.
        if (key === "__proto__") {
          Object.defineProperty(out, key, { value: item, enumerable: true, writable: true, configurable: true })
        } else {
          out[key] = item
        }
        at.pop()
      }
      ancestors.pop()
      walk.problem = hiddenProblem(value, keys, at)
      return Object.freeze(out)
    }
    default:
      walk.problem = primitiveProblem(value)
      return value
  }
}

const fail = (walk: Walk, problem: string): undefined => {
  walk.problem = problem
  return undefined
}

/**
 * Deep-copies a lossless JSON value and freezes every level of the copy (for a value already
 * checked: its depth is bounded; an unchecked caller's value goes through {@link snapshotJson}).
 *
 * @since 0.1.0
 * @category constructors
 */
export const freezeCopy = <A>(value: A): A => {
  if (typeof value !== "object" || value === null) return value
  if (Array.isArray(value)) {
    const out = new Array(value.length)
    for (let i = 0; i < value.length; i++) out[i] = freezeCopy(value[i])
    return Object.freeze(out) as A
  }
  const out: Record<string, unknown> = {}
  for (const key in value) {
    const v = (value as Record<string, unknown>)[key]
    if (v === undefined) continue
    // Assigning `out["__proto__"]` would set the prototype instead of copying the own key.
    if (key === "__proto__") {
      Object.defineProperty(out, key, { value: freezeCopy(v), enumerable: true, writable: true, configurable: true })
    } else {
      out[key] = freezeCopy(v)
    }
  }
  return Object.freeze(out) as A
}

/**
 * Freezes a freshly built value in place, every level (use only on values nobody else holds).
 * Iterative: any depth is safe.
 *
 * @since 0.1.0
 * @category constructors
 */
export const deepFreeze = <A>(value: A): A => {
  if (typeof value !== "object" || value === null || Object.isFrozen(value)) return value
  Object.freeze(value)
  // Frozen objects whose children are still to be visited; a frozen child's subtree is skipped.
  const pending: Array<object> = [value]
  let node = pending.pop()
  while (node !== undefined) {
    // Arrays by index (the hot path freezes every appended and loaded event).
    if (Array.isArray(node)) {
      for (let i = 0; i < node.length; i++) {
        const item: unknown = node[i]
        if (typeof item === "object" && item !== null && !Object.isFrozen(item)) pending.push(Object.freeze(item))
      }
    } else {
      for (const key in node) {
        const item: unknown = (node as Record<string, unknown>)[key]
        if (typeof item === "object" && item !== null && !Object.isFrozen(item)) pending.push(Object.freeze(item))
      }
    }
    node = pending.pop()
  }
  return value
}

/**
 * Schema of a lossless JSON value (validated with {@link jsonProblem}, so nested at most
 * {@link MAX_JSON_DEPTH} levels).
 *
 * @since 0.1.0
 * @category schemas
 */
export const JsonValue: Schema.Schema<Json> = Schema.declare(
  (u: unknown): u is Json => jsonProblem(u) === undefined,
  {
    identifier: "Json",
    description: "a lossless JSON value",
    message: (issue) => jsonProblem(issue.actual) ?? "not lossless JSON"
  }
)

/**
 * Structural equality of two JSON values.
 *
 * @since 0.1.0
 * @category utils
 */
export const jsonEquals = (a: unknown, b: unknown): boolean => {
  if (a === b) return true
  if (typeof a !== "object" || typeof b !== "object" || a === null || b === null) return false
  if (Array.isArray(a)) {
    if (!Array.isArray(b) || a.length !== b.length) return false
    for (let i = 0; i < a.length; i++) if (!jsonEquals(a[i], b[i])) return false
    return true
  }
  if (Array.isArray(b)) return false
  const ka = Object.keys(a)
  const kb = Object.keys(b)
  if (ka.length !== kb.length) return false
  for (const k of ka) {
    if (!Object.prototype.hasOwnProperty.call(b, k)) return false
    if (!jsonEquals((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k])) return false
  }
  return true
}

// The Schema's reason for refusing a JSON value (excess properties refused), or undefined.
const schemaReason = <A, I>(schema: Schema.Schema<A, I>) => {
  const decode = SafeDecode.decodeUnknownEither(schema, { onExcessProperty: "error" })
  return (input: unknown): string | undefined => {
    const decoded = decode(input)
    return Either.isLeft(decoded) ? ParseResult.TreeFormatter.formatErrorSync(decoded.left) : undefined
  }
}

/**
 * Why a value is not an `A`: lossless JSON first, then the Schema with excess properties refused;
 * `undefined` when it is one.
 *
 * @since 0.1.0
 * @category validation
 */
export const losslessProblem = <A, I>(schema: Schema.Schema<A, I>, path: string) => {
  const reason = schemaReason(schema)
  return (input: unknown): string | undefined => jsonProblem(input, path) ?? reason(input)
}

/**
 * A validator for untrusted input: {@link losslessProblem}'s checks, made on a deep-frozen copy read
 * once ({@link snapshotJson}); the result is that copy, or a readable reason. Never throws.
 *
 * @since 0.1.0
 * @category validation
 */
export const losslessDecoder = <A, I>(
  schema: Schema.Schema<A, I>,
  path: string,
  options?: {
    readonly owned?: boolean
    /** A faster check of JSON values that accepts only what the Schema accepts (else the Schema decides). */
    readonly accepts?: (json: unknown) => boolean
  }
) => {
  const reason = schemaReason(schema)
  const accepts = options?.accepts
  const decides = (json: unknown): string | undefined => accepts?.(json) === true ? undefined : reason(json)
  // An input the caller owns (freshly parsed JSON: no getters, nobody else holds it) is checked and
  // frozen in place instead of copied.
  if (options?.owned === true) {
    return (input: unknown): Either.Either<A, string> => {
      const problem = jsonProblem(input, path) ?? decides(input)
      return problem === undefined ? Either.right(deepFreeze(input as A)) : Either.left(problem)
    }
  }
  return (input: unknown): Either.Either<A, string> => {
    const copied = snapshotJson<A>(input, path)
    if (Either.isLeft(copied)) return copied
    const problem = decides(copied.right)
    return problem === undefined ? copied : Either.left(problem)
  }
}
