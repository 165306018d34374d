/**
 * Lossless JSON values: the only data the durable log stores.
 *
 * @since 0.1.0
 */
import { Either, ParseResult, Schema } from "effect"
import * as SafeDecode from "../internal/SafeDecode.js"

/**
 * A lossless JSON value.
 *
 * @since 0.1.0
 * @category models
 */
export type Json = null | boolean | number | string | ReadonlyArray<Json> | { readonly [k: string]: Json }

/**
 * Returns `undefined` when `value` is lossless JSON (2.1), otherwise a readable reason naming the
 * offending path. Rejects `undefined`, functions, symbols, BigInt, non-finite numbers, `-0`, sparse
 * arrays, class instances and cycles.
 *
 * @since 0.1.0
 * @category validation
 */
export const jsonProblem = (value: unknown, path = "$"): string | undefined => {
  // The path of the value being checked, as keys and indexes: turned into text only for a problem.
  const at: Array<string | number> = []
  const problem = check(value, at, [])
  return problem === undefined ? undefined : `${pathText(path, at)}: ${problem}`
}

const pathText = (root: string, at: ReadonlyArray<string | number>): string => {
  let text = root
  for (const key of at) text += typeof key === "number" ? `[${key}]` : `.${key}`
  return text
}

// The problem with `value` (its path left in `at`), or undefined. `ancestors` are the objects being
// checked above it (a short list: JSON is shallow, and a list is cheaper than a Set here).
const check = (value: unknown, at: Array<string | number>, ancestors: Array<object>): string | undefined => {
  switch (typeof value) {
    case "string":
    case "boolean":
      return undefined
    case "number":
      if (!Number.isFinite(value)) return `${String(value)} is not a finite number`
      if (Object.is(value, -0)) return "-0 is not lossless JSON"
      return undefined
    case "object": {
      if (value === null) return undefined
      if (ancestors.includes(value)) return "cyclic value"
      if (Array.isArray(value)) {
        ancestors.push(value)
        for (let i = 0; i < value.length; i++) {
          at.push(i)
          if (!(i in value)) return "sparse array"
          const problem = check(value[i], at, ancestors)
          if (problem !== undefined) return problem
          at.pop()
        }
        ancestors.pop()
        return undefined
      }
      const proto = Object.getPrototypeOf(value)
      if (proto !== Object.prototype && proto !== null) {
        return `${proto?.constructor?.name ?? "class"} instance is not a plain object`
      }
      if (Object.getOwnPropertySymbols(value).length > 0) return "symbol keys are not JSON"
      const keys = Object.keys(value)
      ancestors.push(value)
      for (let i = 0; i < keys.length; i++) {
        const key = keys[i]!
        at.push(key)
        const problem = check((value as Record<string, unknown>)[key], at, ancestors)
        if (problem !== undefined) return problem
        at.pop()
      }
      ancestors.pop()
      // A property JSON.stringify would skip (and a copy would lose) is not JSON either.
      const names = Object.getOwnPropertyNames(value)
      if (names.length !== keys.length) {
        const hidden = names.find((key) => !Object.prototype.propertyIsEnumerable.call(value, key))
        if (hidden !== undefined) {
          at.push(hidden)
          return "a non-enumerable property is not JSON"
        }
      }
      return undefined
    }
    case "undefined":
      return "undefined is not JSON"
    case "bigint":
      return "BigInt is not JSON"
    case "function":
      return "a function is not JSON"
    case "symbol":
      return "a symbol is not JSON"
  }
}

/**
 * Deep-copies a lossless JSON value and freezes every level of the copy.
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
 *
 * @since 0.1.0
 * @category constructors
 */
export const deepFreeze = <A>(value: A): A => {
  if (typeof value !== "object" || value === null || Object.isFrozen(value)) return value
  Object.freeze(value)
  // Arrays by index; only objects recurse (the hot path freezes every appended and loaded event).
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const item: unknown = value[i]
      if (typeof item === "object" && item !== null) deepFreeze(item)
    }
  } else {
    for (const key in value) {
      const item: unknown = value[key]
      if (typeof item === "object" && item !== null) deepFreeze(item)
    }
  }
  return value
}

/**
 * Schema of a lossless JSON value (validated with {@link jsonProblem}).
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
 * A validator for untrusted input: {@link losslessProblem}'s checks; the result is a deep-frozen
 * copy, or a readable reason.
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
  // An input the caller owns (freshly parsed JSON) is frozen in place instead of copied.
  const freeze = options?.owned === true ? (input: A) => deepFreeze(input) : (input: A) => freezeCopy(input)
  const accepts = options?.accepts
  return (input: unknown): Either.Either<A, string> => {
    const problem = jsonProblem(input, path) ?? (accepts?.(input) === true ? undefined : reason(input))
    return problem === undefined ? Either.right(freeze(input as A)) : Either.left(problem)
  }
}
