/**
 * A hand-written check of parsed JSON against the `SessionEvent` Schema: the same rules (lossless
 * JSON, exact fields, every refinement), written as plain predicates so that loading a long log
 * does not pay for the generic Schema interpreter on every event.
 *
 * It answers only "accepted"; `false` means "not accepted here" and the caller asks the Schema,
 * which also words the reason. Its input is a JSON value: the output of `JSON.parse`, or a caller's
 * value that `jsonProblem` passed (no symbol keys, no non-enumerable properties, no class
 * instances). It checks everything else (types, exact keys, integers, finite numbers, `-0`, literal
 * values, tuple lengths, the tool-result id rule); an object whose prototype is not
 * `Object.prototype` is never accepted here.
 *
 * @since 0.1.0
 */
import { isCoreType } from "./Event.js"
import { jsonProblem } from "./Json.js"

type Fields = Record<string, unknown>

// A plain JSON object (not an array, not null, not a class instance).
const isObject = (u: unknown): u is Fields =>
  typeof u === "object" && u !== null && Object.getPrototypeOf(u) === Object.prototype

// The number of keys `for...in` visits: the own keys of a parsed object.
const keyCount = (o: Fields): number => {
  let n = 0
  for (const _ in o) n++
  return n
}

const isString = (u: unknown): u is string => typeof u === "string"
const isNonEmptyString = (u: unknown): boolean => typeof u === "string" && u.length > 0
// `Schema.Number` after the lossless JSON rule: finite and not -0.
const isNumber = (u: unknown): boolean => typeof u === "number" && Number.isFinite(u) && (u !== 0 || 1 / u > 0)
// `Schema.NonNegativeInt` after the lossless JSON rule (-0 passes the Schema but not the JSON rule).
const isCount = (u: unknown): boolean =>
  typeof u === "number" && Number.isSafeInteger(u) && (u > 0 || (u === 0 && 1 / u > 0))
const isPositive = (u: unknown): boolean => typeof u === "number" && Number.isSafeInteger(u) && u > 0
const isJson = (u: unknown): boolean => jsonProblem(u) === undefined

const isArrayOf = (u: unknown, item: (u: unknown) => boolean): boolean => {
  if (!Array.isArray(u)) return false
  for (let i = 0; i < u.length; i++) if (!item(u[i])) return false
  return true
}

// An optional field: absent, or present with a valid value (counted into `n` by the caller).
const optionalField = (o: Fields, key: string, valid: (u: unknown) => boolean): -1 | 0 | 1 => {
  const value = o[key]
  if (value === undefined) return 0
  return valid(value) ? 1 : -1
}

// --- values (src/domain/Values.ts) -----------------------------------------------------------

// A text or image block.
const isUserContent = (u: unknown): boolean => {
  if (!isObject(u)) return false
  if (u["type"] === "text") return isString(u["text"]) && keyCount(u) === 2
  return u["type"] === "image" && isString(u["mediaType"]) && isString(u["data"]) && keyCount(u) === 3
}

const isAssistantContent = (u: unknown): boolean => {
  if (!isObject(u)) return false
  switch (u["type"]) {
    case "text":
    case "reasoning":
      return isString(u["text"]) && keyCount(u) === 2
    case "tool-call":
      return isString(u["id"]) && isString(u["name"]) && isString(u["arguments"]) && keyCount(u) === 4
    default:
      return false
  }
}

// `MessageSource`: a non-empty `kind` and any other JSON fields.
const isMessageSource = (u: unknown): boolean => {
  if (!isObject(u) || !isNonEmptyString(u["kind"])) return false
  for (const key in u) if (key !== "kind" && !isJson(u[key])) return false
  return true
}

const isUserMessage = (u: unknown): boolean =>
  isObject(u) && isNonEmptyString(u["id"]) && u["role"] === "user" && isArrayOf(u["content"], isUserContent) &&
  isMessageSource(u["source"]) && keyCount(u) === 4

const isModelSource = (u: unknown): boolean => {
  if (!isObject(u) || u["kind"] !== "model" || !isString(u["provider"]) || !isString(u["model"])) return false
  const replay = optionalField(u, "replayState", isJson)
  return replay >= 0 && keyCount(u) === 3 + replay
}

const isAssistantMessage = (u: unknown): boolean =>
  isObject(u) && isNonEmptyString(u["id"]) && u["role"] === "assistant" &&
  isArrayOf(u["content"], isAssistantContent) && isModelSource(u["source"]) && keyCount(u) === 4

const isToolResultBlock = (u: unknown): boolean =>
  isObject(u) && u["type"] === "tool-result" && isString(u["toolCallId"]) && typeof u["isError"] === "boolean" &&
  isArrayOf(u["content"], isUserContent) && keyCount(u) === 4

const isToolResultMessage = (u: unknown): boolean => {
  if (!isObject(u) || !isNonEmptyString(u["id"]) || u["role"] !== "user" || keyCount(u) !== 4) return false
  const content = u["content"]
  if (!Array.isArray(content) || content.length !== 1 || !isToolResultBlock(content[0])) return false
  const source = u["source"]
  if (!isObject(source) || source["kind"] !== "tool" || !isString(source["callId"]) || keyCount(source) !== 2) {
    return false
  }
  return (content[0] as Fields)["toolCallId"] === source["callId"]
}

const isUsage = (u: unknown): boolean => {
  if (!isObject(u) || !isCount(u["inputTokens"]) || !isCount(u["outputTokens"])) return false
  const a = optionalField(u, "totalTokens", isCount)
  const b = optionalField(u, "reasoningTokens", isCount)
  const c = optionalField(u, "cacheReadTokens", isCount)
  const d = optionalField(u, "cacheWriteTokens", isCount)
  return a >= 0 && b >= 0 && c >= 0 && d >= 0 && keyCount(u) === 2 + a + b + c + d
}

const isBoolean = (u: unknown): boolean => typeof u === "boolean"

const isLlmFailure = (u: unknown): boolean => {
  if (!isObject(u) || !isString(u["message"]) || !isString(u["code"])) return false
  const a = optionalField(u, "status", isNumber)
  const b = optionalField(u, "retryAfterMs", isNumber)
  const c = optionalField(u, "requestId", isString)
  const d = optionalField(u, "retryable", isBoolean)
  return a >= 0 && b >= 0 && c >= 0 && d >= 0 && keyCount(u) === 2 + a + b + c + d
}

const isFinish = (u: unknown): boolean => {
  if (!isObject(u)) return false
  switch (u["kind"]) {
    case "stop":
    case "max-tokens":
      return keyCount(u) === 1
    case "error":
    case "aborted":
      return isLlmFailure(u["failure"]) && keyCount(u) === 2
    default:
      return false
  }
}

const isStreamChunk = (u: unknown): boolean => {
  if (!isObject(u)) return false
  switch (u["type"]) {
    case "block-start": {
      if (!isCount(u["index"])) return false
      const block = u["block"]
      if (block === "text" || block === "reasoning") return keyCount(u) === 3
      return block === "tool-call" && isString(u["id"]) && isString(u["name"]) && keyCount(u) === 5
    }
    case "text-delta":
    case "reasoning-delta":
      return isCount(u["index"]) && isString(u["text"]) && keyCount(u) === 3
    case "tool-call-delta":
      return isCount(u["index"]) && isString(u["arguments"]) && keyCount(u) === 3
    case "block-end":
      return isCount(u["index"]) && keyCount(u) === 2
    case "usage":
      return isUsage(u["usage"]) && keyCount(u) === 2
    case "replay-state":
      return isJson(u["state"]) && keyCount(u) === 2
    case "finish":
      return isFinish(u["finish"]) && keyCount(u) === 2
    default:
      return false
  }
}

const isCancelCause = (u: unknown): boolean => {
  if (!isObject(u)) return false
  switch (u["kind"]) {
    case "user":
    case "parent":
    case "disposed":
      return keyCount(u) === 1
    case "hook":
      return isString(u["reason"]) && keyCount(u) === 2
    default:
      return false
  }
}

const isTurnEndReason = (u: unknown): boolean => {
  if (!isObject(u)) return false
  switch (u["kind"]) {
    case "completed":
    case "max-tokens":
    case "interrupted":
      return keyCount(u) === 1
    case "blocked": {
      const message = optionalField(u, "message", isString)
      return message >= 0 && keyCount(u) === 1 + message
    }
    case "aborted":
      return isCancelCause(u["reason"]) && keyCount(u) === 2
    case "error":
      return isLlmFailure(u["error"]) && keyCount(u) === 2
    default:
      return false
  }
}

const isToolSchema = (u: unknown): boolean =>
  isObject(u) && isString(u["name"]) && isString(u["description"]) && isJson(u["parameters"]) &&
  keyCount(u) === 3

const isRequestHeader = (u: unknown): boolean => {
  if (!isObject(u) || !isString(u["provider"]) || !isString(u["model"]) || !isArrayOf(u["tools"], isToolSchema)) {
    return false
  }
  const a = optionalField(u, "system", isString)
  const b = optionalField(u, "maxTokens", isNumber)
  const c = optionalField(u, "temperature", isNumber)
  return a >= 0 && b >= 0 && c >= 0 && keyCount(u) === 3 + a + b + c
}

const isSurfaceOp = (u: unknown): boolean =>
  u === "append" ||
  (isObject(u) && u["op"] === "replace" && isCount(u["start"]) && isCount(u["end"]) && keyCount(u) === 3)

// --- event payloads (src/domain/Event.ts) ----------------------------------------------------

const isTurnStep = (d: Fields): boolean => isPositive(d["turn"]) && isPositive(d["step"])

// A payload check: the `data` value, and the surface op (undefined for a plain event).
type PayloadCheck = (data: unknown, surfaceOp: unknown) => boolean

const payloads: ReadonlyMap<string, PayloadCheck> = new Map<string, PayloadCheck>([
  ["turn/start", (d) => isObject(d) && isPositive(d["turn"]) && keyCount(d) === 1],
  ["turn/end", (d) => isObject(d) && isPositive(d["turn"]) && isTurnEndReason(d["reason"]) && keyCount(d) === 2],
  ["step/start", (d) => isObject(d) && isTurnStep(d) && keyCount(d) === 2],
  ["step/end", (d) => isObject(d) && isTurnStep(d) && keyCount(d) === 2],
  ["user/message", (d, op) => isSurfaceOp(op) && isUserMessage(d)],
  [
    "assistant/chunk",
    (d) => isObject(d) && isTurnStep(d) && isPositive(d["attempt"]) && isStreamChunk(d["chunk"]) && keyCount(d) === 4
  ],
  ["assistant/message", (d, op) => {
    if (op !== "append" || !isObject(d) || !isTurnStep(d) || !isPositive(d["attempt"])) return false
    if (!isAssistantMessage(d["message"])) return false
    const usage = optionalField(d, "usage", isUsage)
    const interrupted = optionalField(d, "interrupted", (u) => u === true)
    return usage >= 0 && interrupted >= 0 && keyCount(d) === 4 + usage + interrupted
  }],
  [
    "tool/call",
    (d) =>
      isObject(d) && isTurnStep(d) && isString(d["callId"]) && isString(d["name"]) && isString(d["arguments"]) &&
      keyCount(d) === 5
  ],
  ["tool/result", (d, op) => {
    if (!isSurfaceOp(op) || !isObject(d) || !isTurnStep(d) || !isToolResultMessage(d["message"])) return false
    const error = optionalField(
      d,
      "error",
      (u) => isObject(u) && isString(u["name"]) && isString(u["code"]) && keyCount(u) === 2
    )
    const meta = optionalField(d, "meta", isJson)
    return error >= 0 && meta >= 0 && keyCount(d) === 3 + error + meta
  }],
  [
    "request/header",
    (d) =>
      isObject(d) && isRequestHeader(d["header"]) &&
      (d["reason"] === "initial" || d["reason"] === "resume" || d["reason"] === "change") && keyCount(d) === 2
  ],
  [
    "llm/retry",
    (d) =>
      isObject(d) && isTurnStep(d) && isPositive(d["attempt"]) && isCount(d["delayMs"]) && isLlmFailure(d["failure"]) &&
      keyCount(d) === 5
  ],
  ["agent/inbox/spliced", (d) => {
    if (!isObject(d) || (d["target"] !== "next-turn" && d["target"] !== "next-step") || !isCount(d["start"])) {
      return false
    }
    if (!isArrayOf(d["inserted"], isUserMessage)) return false
    const removed = optionalField(d, "removedCount", isPositive)
    const outcome = optionalField(d, "outcome", (u) => u === "canceled")
    return removed >= 0 && outcome >= 0 && keyCount(d) === 3 + removed + outcome
  }],
  ["session/end-seed", (d) => isObject(d) && keyCount(d) === 0],
  [
    "approval/request",
    (d) =>
      isObject(d) && isTurnStep(d) && isString(d["callId"]) && isString(d["tool"]) && d["input"] !== undefined &&
      isJson(d["input"]) && isString(d["reason"]) &&
      (d["source"] === "rule" || d["source"] === "mode" || d["source"] === "hook") && keyCount(d) === 7
  ],
  ["approval/answer", (d) => {
    if (!isObject(d) || !isString(d["callId"]) || (d["decision"] !== "allow" && d["decision"] !== "deny")) return false
    if (!isNonEmptyString(d["by"])) return false
    const reason = optionalField(d, "reason", isString)
    const rule = optionalField(d, "rule", isNonEmptyString)
    return reason >= 0 && rule >= 0 && keyCount(d) === 3 + reason + rule
  }],
  ["compaction/start", (d) => isCompaction(d)],
  ["compaction/summary", (d) => isCompaction(d)],
  ["compaction/end", (d) => {
    if (!isCompaction(d)) return false
    const error = (d as Fields)["error"]
    return error === undefined || (isObject(error) && isString(error["message"]) && keyCount(error) === 1)
  }]
])

// A compaction payload: `turn` (null or positive) and any other JSON fields.
const isCompaction = (d: unknown): boolean => isObject(d) && (d["turn"] === null || isPositive(d["turn"])) && isJson(d)

// The surfaced event types carry `surfaceOp` and may carry `sourceEventSeqs`.
const surfaced: ReadonlySet<string> = new Set(["user/message", "assistant/message", "tool/result"])

/**
 * Whether `value`, an output of `JSON.parse`, is a `SessionEvent` by the rules of the Schema
 * decoder (lossless JSON, no excess properties); `false` when it is not or is not recognised here.
 *
 * @since 0.1.0
 * @category validation
 */
export const acceptsEventJson = (value: unknown): boolean => {
  if (!isObject(value)) return false
  const type = value["type"]
  if (typeof type !== "string" || !isCount(value["seq"]) || !isCount(value["time"])) return false
  const ignorable = optionalField(value, "ignorable", (u) => u === true)
  if (ignorable < 0) return false
  let expected = 4 + ignorable
  const check = payloads.get(type)
  if (check === undefined) {
    // An extension event: a non-empty type that is not a core type, any JSON payload.
    return type.length > 0 && !isCoreType(type) && isJson(value["data"]) &&
      keyCount(value) === expected
  }
  if (surfaced.has(type)) {
    const cites = optionalField(value, "sourceEventSeqs", (u) => isArrayOf(u, isCount))
    if (cites < 0) return false
    expected += 1 + cites
  }
  return check(value["data"], value["surfaceOp"]) && keyCount(value) === expected
}

/**
 * Whether a JSON value (one `jsonProblem` passes) is a `UserMessage` the Schema accepts;
 * `false` when it is not or is not recognised here.
 *
 * @since 0.1.0
 * @category validation
 */
export const acceptsUserMessageJson = (value: unknown): boolean => isUserMessage(value)

/**
 * Whether a JSON value (one `jsonProblem` passes) is a `StreamChunk` the Schema accepts; `false`
 * when it is not or is not recognised here.
 *
 * @since 0.1.0
 * @category validation
 */
export const acceptsStreamChunkJson = (value: unknown): boolean => isStreamChunk(value)
