/**
 * The MCP servers in the chat and in `run`: `@server:uri` in a line enters that resource as
 * context (through `inject()`, one message with source `{kind: "mcp-resource", server, uri}`),
 * `/mcp__server__prompt ARGS` sends the server's prompt, an elicitation is a question answered by
 * the next line (declined when no one can answer), and the servers' progress notifications and
 * state changes show in the progress line and as notes.
 *
 * @since 0.1.0
 */
import { Deferred, Effect, Exit, Stream } from "effect"
import type { Scope } from "effect"
import type { UserMessage } from "../domain/Values.js"
import { PREFIX } from "../internal/mcp/Names.js"
import type { Driver } from "../services/Driver.js"
import type { Mcp, McpElicitation, McpElicitationAnswer, McpEvent } from "../services/Mcp.js"
import { CliError } from "./CliError.js"
import * as Output from "./Output.js"
import type * as Progress from "./Progress.js"

/** `@server:uri`, not inside a word or an e-mail address. */
const MENTION = /(?<![\w@.])@([A-Za-z0-9_.-]+):(\S+)/g

/**
 * The resources `text` names as `@server:uri`, for the servers in `servers`, in order, each once
 * (trailing punctuation is not part of the URI).
 *
 * @since 0.1.0
 * @category parsing
 */
export const resourceMentionsIn = (
  text: string,
  servers: ReadonlySet<string>
): ReadonlyArray<{ readonly server: string; readonly uri: string }> => {
  const seen = new Set<string>()
  const out: Array<{ readonly server: string; readonly uri: string }> = []
  for (const match of text.matchAll(MENTION)) {
    const server = match[1]!
    const uri = match[2]!.replace(/[.,;!?)\]'"]+$/, "")
    if (!servers.has(server) || uri === "" || seen.has(`${server}:${uri}`)) continue
    seen.add(`${server}:${uri}`)
    out.push({ server, uri })
  }
  return out
}

/**
 * Reads every resource `text` mentions, then injects them, in order, as context for the next
 * step; a resource that cannot be read fails the whole delivery before anything is injected.
 * Returns the notes to print.
 *
 * @since 0.1.0
 * @category commands
 */
export const injectMentioned = (
  mcp: Mcp["Type"],
  driver: Driver["Type"],
  text: string
): Effect.Effect<ReadonlyArray<string>, CliError | Effect.Effect.Error<ReturnType<Driver["Type"]["inject"]>>> =>
  Effect.gen(function*() {
    if (!text.includes("@")) return []
    const names = new Set((yield* mcp.servers).map((s) => s.name))
    const mentions = resourceMentionsIn(text, names)
    const messages: Array<UserMessage> = []
    for (const { server, uri } of mentions) {
      messages.push(
        yield* Effect.mapError(mcp.resource(server, uri), (error) => new CliError({ reason: error.message }))
      )
    }
    for (const message of messages) yield* driver.inject(message)
    return mentions.map(({ server, uri }) => `(resource ${uri} of MCP server ${server} entered as context)`)
  })

/**
 * Whether `command` (with its slash) names a prompt of a connected server (`/mcp__SERVER__PROMPT`);
 * another `/mcp__...` line is a message like any other (one naming a tool asks for a call of it).
 *
 * @since 0.1.0
 * @category predicates
 */
export const isPromptCommand = (mcp: Mcp["Type"], command: string): Effect.Effect<boolean> =>
  command.startsWith(`/${PREFIX}`)
    ? Effect.map(mcp.prompts, (prompts) => prompts.some((p) => `/${p.command}` === command))
    : Effect.succeed(false)

/** The fields an elicitation asks for, one line each. */
const fieldLines = (schema: unknown): ReadonlyArray<string> => {
  const s = schema as { readonly properties?: Record<string, any>; readonly required?: ReadonlyArray<string> }
  return Object.entries(s.properties ?? {}).map(([name, field]) =>
    `  ${name} (${field?.type ?? "value"}${(s.required ?? []).includes(name) ? ", required" : ""})${
      field?.description === undefined ? "" : `: ${field.description}`
    }`
  )
}

/** An answer line as an elicitation answer. */
const answerOf = (line: string | undefined): McpElicitationAnswer => {
  const text = (line ?? "").trim()
  if (text === "" || /^(n|no|decline)$/i.test(text)) return { action: "decline" }
  if (/^cancel$/i.test(text)) return { action: "cancel" }
  try {
    const parsed = JSON.parse(text) as unknown
    if (parsed !== null && typeof parsed === "object" && !Array.isArray(parsed)) {
      const content: Record<string, string | number | boolean> = {}
      for (const [key, value] of Object.entries(parsed)) {
        if (typeof value === "string" || typeof value === "number" || typeof value === "boolean") content[key] = value
      }
      return { action: "accept", content }
    }
  } catch {
    // not JSON: declined below
  }
  return { action: "decline" }
}

/**
 * The chat's side of the servers, for the current scope: elicitations asked in the chat (answered
 * by the line `answer` takes), progress shown in `progress`, state changes printed.
 *
 * @since 0.1.0
 * @category models
 */
export interface McpChat {
  /** Takes `line` as the answer to a pending elicitation, if one waits: `true` then. */
  readonly answer: (line: string) => boolean
  /** The input ended: a pending elicitation and every later one are declined. */
  readonly endOfInput: () => void
}

/**
 * Sets up the chat's side of the servers in the current scope.
 *
 * @since 0.1.0
 * @category constructors
 */
export const setup = (
  mcp: Mcp["Type"],
  progress: Progress.Progress | undefined
): Effect.Effect<McpChat, never, Scope.Scope> =>
  Effect.gen(function*() {
    let pending: Deferred.Deferred<string | undefined> | undefined
    let ended = false
    const asking = yield* Effect.makeSemaphore(1)
    const ask = (elicitation: McpElicitation) =>
      asking.withPermits(1)(Effect.gen(function*() {
        if (ended) return { action: "decline" } as const
        const answer = yield* Deferred.make<string | undefined>()
        pending = answer
        yield* Output.lines([
          `MCP server ${elicitation.server} asks: ${elicitation.message}`,
          ...fieldLines(elicitation.requestedSchema),
          "Answer with a JSON object of these fields, or an empty line to decline (cancel cancels):"
        ])
        const line = yield* Effect.ensuring(
          Deferred.await(answer),
          Effect.sync(() => {
            if (pending === answer) pending = undefined
          })
        )
        const result = answerOf(line)
        yield* Output.errorLine(`(elicitation of ${elicitation.server}: ${result.action})`)
        return result
      }))
    yield* mcp.handleElicitations(ask)
    const onEvent = (event: McpEvent) => {
      switch (event._tag) {
        case "Progress":
          return Effect.sync(() => {
            if (progress !== undefined && event.callId !== undefined) {
              const total = event.total === undefined ? "" : `/${event.total}`
              progress.toolProgress(
                event.callId,
                `${event.progress}${total}${event.message === undefined ? "" : ` ${event.message}`}`
              )
            }
          })
        case "ToolsChanged":
          return Output.errorLine(
            `(MCP server ${event.server}: its tools changed; ${event.tools} offered from the next request)`
          )
        case "Closed":
          return Output.errorLine(`(MCP server ${event.server}: ${event.reason}; it starts again on its next use)`)
      }
    }
    yield* Effect.forkScoped(Stream.runForEach(mcp.events, onEvent))
    const answer = (line: string): boolean => {
      const waiting = pending
      if (waiting === undefined) return false
      pending = undefined
      Deferred.unsafeDone(waiting, Exit.succeed(line))
      return true
    }
    const endOfInput = () => {
      ended = true
      const waiting = pending
      pending = undefined
      if (waiting !== undefined) Deferred.unsafeDone(waiting, Exit.succeed(undefined))
    }
    return { answer, endOfInput }
  })
