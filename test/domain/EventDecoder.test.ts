/**
 * The hand-written event check against the Schema decoder it stands in for: on every event shape
 * tiller writes and on a corpus of mutations of them, `decodeOwnedJson` (fast check, Schema
 * fallback) must accept exactly what the Schema decoder accepts, with the reason of the union member
 * the value's type selects when it rejects and an equal, deeply frozen value when it accepts.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Either, FastCheck, Schema } from "effect"
import { CORE_EVENT_TYPES, ExtensionEvent, SessionEvent } from "../../src/domain/Event.js"
import { acceptsEventJson } from "../../src/domain/EventDecoder.js"
import { deepFreeze, losslessDecoder } from "../../src/domain/Json.js"
import { decodeOwnedJson, decodeStored } from "../../src/internal/durability/DecodedEvents.js"
import { ScriptedModel } from "../../src/layers/ScriptedModel.js"
import { Driver } from "../../src/services/Driver.js"
import { SessionLog } from "../../src/services/SessionLog.js"
import { Tool } from "../../src/services/Tools.js"
import { scenario, user } from "../agent/harness.js"
import {
  assistantMessage,
  call,
  event,
  everyChunk,
  fullFailure,
  fullUsage,
  llmFailure,
  log,
  reason,
  repairError,
  text,
  toolResultMessage,
  user as fixtureUser
} from "../fixtures/events.js"

/** The decoder the fast path must match: the Schema with lossless JSON, freezing in place. */
const reference = losslessDecoder(SessionEvent, "event", { owned: true })

// The reason a refusal must give: that of the one union member the value's `type` selects (the
// member of that core type, else the extension member), or the union's when `type` is no string.
const memberReferences = new Map(
  SessionEvent.members.filter((member) => member !== ExtensionEvent).map((member) => [
    (member.fields.type as unknown as { readonly literals: ReadonlyArray<string> }).literals[0]!,
    losslessDecoder(member as Schema.Schema<unknown, unknown>, "event", { owned: true })
  ])
)
const extensionReference = losslessDecoder(ExtensionEvent, "event", { owned: true })
const reasonReference = (input: unknown): Either.Either<unknown, string> => {
  const type = typeof input === "object" && input !== null ? (input as { readonly type?: unknown }).type : undefined
  if (typeof type !== "string") return reference(input)
  return (memberReferences.get(type) ?? extensionReference)(input)
}

type Tree = null | boolean | number | string | Array<Tree> | { [k: string]: Tree }

const isDeepFrozen = (value: unknown): boolean => {
  if (typeof value !== "object" || value === null) return true
  if (!Object.isFrozen(value)) return false
  return Object.values(value).every(isDeepFrozen)
}

// JSON.stringify cannot write -0 or numbers that parse to ±Infinity: mutants carry these markers,
// replaced in the text.
const NEGATIVE_ZERO = "\u0000-0"
const INFINITE = "\u0000inf"
const NEGATIVE_INFINITE = "\u0000-inf"
const PROTO_KEY = "\u0000proto"
const textOf = (tree: Tree): string =>
  JSON.stringify(tree)
    .replaceAll(JSON.stringify(NEGATIVE_ZERO), "-0")
    .replaceAll(JSON.stringify(INFINITE), "1e400")
    .replaceAll(JSON.stringify(NEGATIVE_INFINITE), "-1e400")
    .replaceAll(JSON.stringify(PROTO_KEY), "\"__proto__\"")

interface Outcome {
  readonly accepted: boolean
  readonly fast: boolean
  readonly mismatch?: string
}

/** Decodes `text` both ways (each from its own parse) and says how they compare. */
const compare = (text: string): Outcome => {
  const expected = reference(JSON.parse(text))
  const expectedReason = reasonReference(JSON.parse(text))
  const fast = acceptsEventJson(JSON.parse(text))
  const actual = decodeOwnedJson(text)
  const accepted = Either.isRight(expected)
  if (fast && !accepted) return { accepted, fast, mismatch: `fast check accepts what the Schema rejects: ${text}` }
  if (Either.isRight(actual) !== accepted) return { accepted, fast, mismatch: `acceptance differs: ${text}` }
  if (Either.isRight(expectedReason) !== accepted) {
    return { accepted, fast, mismatch: `the selected member disagrees: ${text}` }
  }
  if (Either.isLeft(actual) && Either.isLeft(expectedReason)) {
    const reason = actual.left._tag === "NotEvent" ? actual.left.reason : `not JSON: ${actual.left.message}`
    if (reason !== expectedReason.left) {
      return { accepted, fast, mismatch: `reasons differ: ${reason} / ${expectedReason.left}` }
    }
  }
  if (Either.isRight(actual) && Either.isRight(expected)) {
    if (!isDeepFrozen(actual.right)) return { accepted, fast, mismatch: `not deeply frozen: ${text}` }
    if (JSON.stringify(actual.right) !== JSON.stringify(expected.right)) {
      return { accepted, fast, mismatch: `values differ: ${text}` }
    }
  }
  return { accepted, fast }
}

// -----------------------------------------------------------------------------------------------
// Every event shape tiller writes
// -----------------------------------------------------------------------------------------------

const at = { turn: 1, step: 1 }
const at1 = { turn: 1, step: 1, attempt: 1 }

/** One event of every type and every optional field and union member. */
const fixtureEvents = (): Array<SessionEvent> => [
  event.turnStart(0, 1),
  ...[
    reason.completed,
    reason.maxTokens,
    reason.interrupted,
    reason.blocked(),
    reason.blocked("no"),
    reason.error("X"),
    reason.aborted(),
    reason.aborted({ kind: "parent" }),
    reason.aborted({ kind: "disposed" }),
    reason.aborted({ kind: "hook", reason: "policy" }),
    { kind: "error" as const, error: fullFailure }
  ]
    .map((why, i) => event.turnEnd(i, 1, why)),
  event.stepStart(1, at),
  event.stepEnd(2, at),
  event.userMessage(3, fixtureUser("u1")),
  event.userMessage(3, fixtureUser("u2"), {
    surfaceOp: { op: "replace", start: 0, end: 2 },
    sourceEventSeqs: [0, 1, 2]
  }),
  event.userMessage(
    3,
    {
      id: "u3",
      role: "user",
      content: [text("a"), { type: "image", mediaType: "image/png", data: "AA==" }],
      source: { kind: "plugin", plugin: "p", extra: { deep: [1, null, "x"] } }
    } as never
  ),
  ...everyChunk.map((chunk, i) => event.chunk(4 + i, at1, chunk)),
  event.assistantMessage(20, at1, assistantMessage("a1", [text("x"), { type: "reasoning", text: "r" }, call("c1")]), {
    sourceEventSeqs: [4, 5]
  }),
  event.assistantMessage(20, at1, assistantMessage("a2", []), {
    sourceEventSeqs: [],
    interrupted: true,
    usage: fullUsage
  }),
  event.assistantMessage(20, at1, {
    ...assistantMessage("a3", [text("y")]),
    source: { kind: "model", provider: "p", model: "m", replayState: { s: [true] } }
  }),
  event.toolCall(21, at, call("c1")),
  event.toolResult(22, at, toolResultMessage("c1"), { sourceEventSeqs: [21] }),
  event.toolResult(22, at, toolResultMessage("c1", { isError: true, text: "bad" }), { error: repairError.notStarted }),
  event.toolResult(22, at, toolResultMessage("c1"), {
    surfaceOp: { op: "replace", start: 3, end: 3 },
    sourceEventSeqs: [3]
  }),
  {
    ...event.toolResult(22, at, toolResultMessage("c1")),
    data: { ...event.toolResult(22, at, toolResultMessage("c1")).data, meta: { ms: 3, tags: ["a"] } }
  },
  event.requestHeader(23),
  event.requestHeader(23, "resume"),
  event.requestHeader(23, "change"),
  {
    type: "request/header",
    seq: 23,
    time: 9,
    data: {
      reason: "initial",
      header: {
        provider: "p",
        model: "m",
        system: "be brief",
        maxTokens: 100,
        temperature: 0.5,
        tools: [{ name: "t", description: "d", parameters: { type: "object", properties: {} } }]
      }
    }
  },
  event.retry(24, at1, llmFailure()),
  event.retry(24, { ...at, attempt: 2 }, fullFailure, 0),
  event.spliced(25, { target: "next-turn", start: 0, inserted: [fixtureUser("s1"), fixtureUser("s2")] }),
  event.spliced(25, { target: "next-step", start: 1, removedCount: 2 }),
  event.spliced(25, { target: "next-step", start: 0, removedCount: 1, outcome: "canceled" }),
  event.endSeed(26),
  event.compaction(27, "start", null),
  event.compaction(27, "summary", 3, { summary: "s", kept: [1, 2] }),
  event.compaction(27, "end", 3, { error: { message: "failed" } }),
  event.compaction(27, "end", null, { anything: { goes: true } }),
  {
    type: "approval/request",
    seq: 29,
    time: 9,
    data: {
      turn: 1,
      step: 1,
      callId: "c1",
      tool: "Bash",
      input: { command: "ls", n: [1, null] },
      reason: "r",
      source: "rule"
    }
  } as unknown as SessionEvent,
  {
    type: "approval/request",
    seq: 29,
    time: 9,
    data: { turn: 2, step: 3, callId: "c2", tool: "Edit", input: null, reason: "", source: "hook" }
  } as unknown as SessionEvent,
  {
    type: "approval/answer",
    seq: 30,
    time: 9,
    data: { callId: "c1", decision: "allow", by: "api" }
  } as unknown as SessionEvent,
  {
    type: "approval/answer",
    seq: 30,
    time: 9,
    data: { callId: "c1", decision: "deny", by: "bob", reason: "no", rule: "Bash(ls)" }
  } as unknown as SessionEvent,
  event.extension(28, "plugin/note", { text: "n" }),
  event.extension(28, "plugin/declared", [1, "two", null], false),
  event.extension(28, "x", null)
]

/** A complete log as the fixtures' builder writes it (claims, steps, tool round trips, retries). */
const builtLog = (): Array<SessionEvent> =>
  log()
    .insert("next-turn", 0, [fixtureUser("A")])
    .turnStart()
    .claim("next-turn", 1)
    .stepStart()
    .enter(fixtureUser("A"))
    .header()
    .streamCall(call("c1"), 0)
    .finish()
    .assistant([call("c1")], { usage: { inputTokens: 1, outputTokens: 2 } })
    .toolCall("c1")
    .toolResult("c1")
    .stepEnd()
    .stepStart()
    .finishFailed()
    .retry()
    .streamText("done")
    .finish()
    .assistant([text("done")])
    .stepEnd()
    .turnEnd()
    .compaction("start", null)
    .compaction("end", null)
    .endSeed()
    .extension("plugin/x")
    .build()

const echo = Tool.make("echo", {
  description: "echoes its text",
  parameters: Schema.Struct({ text: Schema.String }),
  execute: ({ text }) => Effect.succeed(`echo: ${text}`)
})

/** The log of a scripted agent run: a tool round trip with reasoning and replay state, then text. */
const scriptedLog = Effect.gen(function*() {
  const driver = yield* Driver
  yield* driver.followup(user("A"))
  yield* driver.whenIdle
  return yield* (yield* SessionLog).events
}).pipe(
  Effect.provide(scenario([
    ScriptedModel.response({
      reasoning: "think",
      text: "calling",
      toolCalls: [{ id: "c1", name: "echo", arguments: { text: "ping" } }],
      usage: { inputTokens: 3, outputTokens: 4 },
      replayState: { provider: ["state"] }
    }),
    ScriptedModel.text("done", { deltas: ["do", "ne"], usage: { inputTokens: 5, outputTokens: 1 } })
  ], { tools: [echo] })),
  Effect.scoped
)

// -----------------------------------------------------------------------------------------------
// Mutations
// -----------------------------------------------------------------------------------------------

const JUNK: ReadonlyArray<Tree> = [
  null,
  true,
  0,
  -1,
  1.5,
  2 ** 53,
  "",
  "x",
  [],
  [{}],
  {},
  { type: "text", text: "t" },
  NEGATIVE_ZERO,
  INFINITE,
  NEGATIVE_INFINITE,
  { n: [INFINITE] }
]
const TYPES: ReadonlyArray<Tree> = [...CORE_EVENT_TYPES, "", "plugin/other", "x"]

type Path = ReadonlyArray<string | number>

const clone = (tree: Tree): Tree => JSON.parse(JSON.stringify(tree))

const pathsOf = (tree: Tree, path: Path = []): Array<Path> => {
  const out: Array<Path> = [path]
  if (Array.isArray(tree)) tree.forEach((item, i) => out.push(...pathsOf(item, [...path, i])))
  else if (typeof tree === "object" && tree !== null) {
    for (const [key, value] of Object.entries(tree)) out.push(...pathsOf(value, [...path, key]))
  }
  return out
}

/** A copy of `tree` with the node at `path` changed by `change` (which returns the new node, or undefined to delete it). */
const mutateAt = (tree: Tree, path: Path, change: (node: Tree) => Tree | undefined): Tree => {
  const root = clone(tree)
  if (path.length === 0) return change(root) ?? null
  let parent: any = root
  for (const step of path.slice(0, -1)) parent = parent[step]
  const last = path[path.length - 1]!
  const next = change(parent[last])
  if (next !== undefined) parent[last] = next
  else if (Array.isArray(parent)) parent.splice(last as number, 1)
  else delete parent[last]
  return root
}

/** Every single-step mutation of an event: each node deleted, replaced by junk, grown or shrunk. */
const mutantsOf = (tree: Tree): Array<Tree> => {
  const out: Array<Tree> = []
  for (const path of pathsOf(tree)) {
    const last = path[path.length - 1]
    if (path.length > 0) out.push(mutateAt(tree, path, () => undefined))
    for (const junk of last === "type" ? [...JUNK, ...TYPES] : JUNK) out.push(mutateAt(tree, path, () => clone(junk)))
    out.push(mutateAt(tree, path, (node) => {
      if (Array.isArray(node)) return [...node, node[0] ?? 1]
      if (typeof node === "object" && node !== null) return { ...node, extra: 1 }
      return node
    }))
    out.push(
      mutateAt(
        tree,
        path,
        (node) => typeof node === "object" && node !== null && !Array.isArray(node) ? { ...node, [PROTO_KEY]: 1 } : node
      )
    )
  }
  return out
}

// The shape of an event: its JSON with every string and number replaced by its type.
const shapeOf = (tree: Tree): string =>
  JSON.stringify(
    tree,
    (key, value) =>
      typeof value === "string" && key !== "type" && key !== "kind" ? "s" : typeof value === "number" ? 0 : value
  )

/** Every event shape of the fixtures, the builder's log and a scripted run, each once. */
const corpus = Effect.map(scriptedLog, (scripted) => {
  const all = [...fixtureEvents(), ...builtLog(), ...scripted] as unknown as Array<Tree>
  return [...new Map(all.map((e) => [shapeOf(e), e])).values()]
})

describe("EventDecoder", () => {
  it.effect("the fast check accepts every event shape tiller writes, and decodes it as the Schema does", () =>
    Effect.gen(function*() {
      const events = yield* corpus
      const types = new Set(events.map((e) => (e as { type: string }).type))
      expect(CORE_EVENT_TYPES.filter((t) => !types.has(t))).toEqual([])
      expect(events.length).toBeGreaterThan(60)
      for (const e of events) {
        const text = textOf(e)
        expect(acceptsEventJson(JSON.parse(text)), text).toBe(true)
        expect(compare(text)).toEqual({ accepted: true, fast: true })
      }
    }))

  it.effect(
    "mutated events: accepted and rejected exactly as by the Schema, with its reasons",
    () =>
      Effect.gen(function*() {
        const events = yield* corpus
        const mismatches: Array<string> = []
        // Inputs the Schema accepts that the fast check leaves to it (allowed, but none are expected).
        const missed: Array<string> = []
        let accepted = 0
        let rejected = 0
        const texts = new Set(events.flatMap((e) => mutantsOf(e).map(textOf)))
        for (const text of texts) {
          {
            const outcome = compare(text)
            if (outcome.mismatch !== undefined) mismatches.push(outcome.mismatch)
            if (outcome.accepted) {
              accepted++
              if (!outcome.fast) missed.push(text)
            } else {
              rejected++
            }
          }
        }
        expect(mismatches.slice(0, 10)).toEqual([])
        expect(missed.slice(0, 10)).toEqual([])
        // The corpus exercises both sides.
        expect(accepted).toBeGreaterThan(500)
        expect(rejected).toBeGreaterThan(10_000)
      }),
    120_000
  )

  it.effect.prop(
    "any JSON value placed anywhere in an event is judged as by the Schema",
    [FastCheck.nat(), FastCheck.nat(), FastCheck.jsonValue({ maxDepth: 3 })],
    ([pick, where, junk]) =>
      Effect.gen(function*() {
        const events = fixtureEvents() as unknown as Array<Tree>
        const base = events[pick % events.length]!
        const paths = pathsOf(base)
        const mutant = mutateAt(base, paths[where % paths.length]!, () => clone(junk as Tree))
        const outcome = compare(textOf(mutant))
        expect(outcome.mismatch).toBeUndefined()
        if (outcome.accepted) expect(outcome.fast).toBe(true)
      }),
    { fastCheck: { numRuns: 200 } }
  )

  it("text that is not an event object, or not JSON, is refused with the Schema's or the parser's reason", () => {
    for (const text of ["null", "5", "\"turn/start\"", "[]", "{}", "-0", "1e400", "{\"type\":\"turn/start\"}"]) {
      expect(compare(text)).toEqual({ accepted: false, fast: false })
    }
    const broken = "{\"type\":\"turn/start\","
    let message = ""
    try {
      JSON.parse(broken)
    } catch (cause) {
      message = (cause as Error).message
    }
    expect(decodeOwnedJson(broken)).toEqual(Either.left({ _tag: "NotJson", message }))
  })

  it("a tag field holding an object with an own toString key is refused with a reason, not thrown on", () => {
    // Effect's Union parser turns a tag field into text with `String`, which throws on such an object.
    const texts = [
      "{\"type\":{\"toString\":null},\"seq\":0,\"time\":1700000000000,\"data\":{\"turn\":1}}",
      ...([
        [event.turnEnd(1, 1, reason.completed), ["type"]],
        [event.turnEnd(1, 1, reason.completed), ["data", "reason", "kind"]],
        [event.chunk(4, at1, everyChunk[0]!), ["data", "chunk", "type"]],
        [event.chunk(4, at1, everyChunk[0]!), ["data", "chunk", "block"]],
        [event.userMessage(3, fixtureUser("u1")), ["data", "content", 0, "type"]],
        [event.userMessage(3, fixtureUser("u2"), { surfaceOp: { op: "replace", start: 0, end: 2 } }), [
          "surfaceOp",
          "op"
        ]]
      ] as const).flatMap(([e, path]) =>
        [{ toString: false }, [{ toString: 1 }]].map((junk) => textOf(mutateAt(e as unknown as Tree, path, () => junk)))
      )
    ]
    for (const text of texts) expect(compare(text), text).toEqual({ accepted: false, fast: false })
  })

  it("decodeStored trusts only what decodeOwnedJson produced", () => {
    const original = event.toolResult(22, at, toolResultMessage("c1"), { sourceEventSeqs: [21] })
    const owned = Either.getOrThrow(decodeOwnedJson(JSON.stringify(original)))
    expect(decodeStored(owned)).toEqual(Either.right(owned))
    expect(Either.getOrThrow(decodeStored(owned))).toBe(owned)
    // An equal value built elsewhere is decoded again, into a copy.
    const lookalike = deepFreeze(JSON.parse(JSON.stringify(original)))
    const copy = Either.getOrThrow(decodeStored(lookalike))
    expect(copy).toEqual(lookalike)
    expect(copy).not.toBe(lookalike)
    // An invalid value is rejected even if frozen.
    expect(Either.isLeft(decodeStored(deepFreeze({ ...JSON.parse(JSON.stringify(original)), seq: -1 })))).toBe(true)
    // The mark is invisible: no keys, symbols or JSON.
    expect(Reflect.ownKeys(owned)).toEqual(Reflect.ownKeys(original))
    expect(JSON.stringify(owned)).toBe(JSON.stringify(original))
  })

  it("deepFreeze freezes every level of parsed JSON, an own __proto__ key included", () => {
    const value = deepFreeze(
      JSON.parse("{\"a\":[{\"b\":[1,{\"c\":null}]},\"s\"],\"d\":{\"e\":{}},\"__proto__\":{\"f\":[]}}")
    )
    expect(isDeepFrozen(value)).toBe(true)
    expect(Object.isFrozen((value as any)["__proto__"].f)).toBe(true)
  })
})
