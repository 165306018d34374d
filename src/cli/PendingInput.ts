/**
 * The chat's view of the inbox: `/pending` lists both lists with numbers and sources, `/drop N`
 * removes an item, `/edit N TEXT` rewrites it. Each change is one splice through the `Inbox`
 * service (SPEC 3.8), so it is durable the moment the command answers.
 *
 * @since 0.1.0
 */
import { Effect, Either } from "effect"
import { userMessage } from "../domain/Message.js"
import type { UserMessage } from "../domain/Values.js"
import type { Inbox } from "../services/Inbox.js"
import { describeSource, textOf } from "./Timeline.js"

/**
 * One pending item with its number in `/pending`: next-step items first (the next boundary takes
 * them all), then the queue in the order its prompts will run.
 *
 * @since 0.1.0
 * @category models
 */
export interface Numbered {
  readonly number: number
  readonly list: "next-step" | "queued"
  readonly message: UserMessage
}

/**
 * The pending items, numbered.
 *
 * @since 0.1.0
 * @category constructors
 */
export const numbered = (
  snapshot: { readonly nextTurn: ReadonlyArray<UserMessage>; readonly nextStep: ReadonlyArray<UserMessage> }
): ReadonlyArray<Numbered> => [
  ...snapshot.nextStep.map((message, i) => ({ number: i + 1, list: "next-step" as const, message })),
  ...snapshot.nextTurn.map((message, i) => ({
    number: snapshot.nextStep.length + i + 1,
    list: "queued" as const,
    message
  }))
]

/** The text of a message on one line, cut to `max` characters. */
const oneLine = (message: UserMessage, max: number) => {
  const text = textOf(message.content).replace(/\n/g, " ⏎ ")
  return text.length > max ? `${text.slice(0, max)}… [${text.length} chars]` : text
}

/**
 * The lines `/pending` prints.
 *
 * @since 0.1.0
 * @category formatting
 */
export const describe = (items: ReadonlyArray<Numbered>): ReadonlyArray<string> =>
  items.length === 0
    ? ["(nothing pending)"]
    : [
      "pending input (next-step enters the next step; queued prompts run as turns of their own, in order):",
      ...items.map((item) =>
        `  ${String(item.number).padStart(2)}. ${item.list.padEnd(9)} [${describeSource(item.message.source)}] ${
          oneLine(item.message, 100)
        }`
      ),
      "  /drop N removes an item; /edit N TEXT rewrites it"
    ]

/**
 * The text of item `n` (for `/edit N` without a text, which puts it into the input line).
 *
 * @since 0.1.0
 * @category getters
 */
export const textOfItem = (item: Numbered): string => textOf(item.message.content)

/**
 * The item numbered `argument` now, or a sentence saying why there is none.
 *
 * @since 0.1.0
 * @category combinators
 */
export const lookup = (inbox: Inbox["Type"], argument: string): Effect.Effect<Numbered | string> =>
  Effect.map(inbox.snapshot, (snapshot) => {
    const items = numbered(snapshot)
    const n = Number(argument)
    if (!/^\d+$/.test(argument) || n < 1) return `not an item number: ${JSON.stringify(argument)} (/pending lists them)`
    return items.find((item) => item.number === n) ??
      `no pending item ${n} (${items.length} pending; /pending lists them)`
  })

/**
 * Removes item `argument`; answers what happened in words (left: why nothing was removed).
 *
 * @since 0.1.0
 * @category combinators
 */
export const drop = (inbox: Inbox["Type"], argument: string) =>
  Effect.gen(function*() {
    const item = yield* lookup(inbox, argument)
    if (typeof item === "string") return Either.left(item)
    const removed = yield* inbox.remove(item.message.id)
    return removed
      ? Either.right(`dropped ${item.list} item ${item.number}: ${oneLine(item.message, 60)}`)
      : Either.left(`item ${item.number} is no longer pending (the agent took it)`)
  })

/**
 * Rewrites item `argument` with `text`, keeping its id, source and place; answers in words (left:
 * why nothing was rewritten).
 *
 * @since 0.1.0
 * @category combinators
 */
export const edit = (inbox: Inbox["Type"], argument: string, text: string) =>
  Effect.gen(function*() {
    const item = yield* lookup(inbox, argument)
    if (typeof item === "string") return Either.left(item)
    const replacement = userMessage({ id: item.message.id, text, source: item.message.source })
    const replaced = yield* inbox.replace(item.message.id, replacement)
    return replaced
      ? Either.right(`edited ${item.list} item ${item.number}: ${oneLine(replacement, 60)}`)
      : Either.left(`item ${item.number} is no longer pending (the agent took it)`)
  })
