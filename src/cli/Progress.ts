/**
 * The chat's progress line while a turn runs: what the agent is doing and for how long (waiting for
 * the model, streaming, running a tool, retrying), the turn and step, the tokens the turn used and
 * the share of the context window in use.
 * A fold over the session's events; the chat redraws its line a few times a second.
 *
 * @since 0.1.0
 */
import type { EventOf, SessionEvent } from "../domain/Event.js"

/**
 * The spinner's frames.
 *
 * @since 0.1.0
 * @category constants
 */
export const FRAMES: ReadonlyArray<string> = ["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"]

type Activity =
  | { readonly kind: "idle" }
  | { readonly kind: "waiting"; readonly since: number }
  | { readonly kind: "streaming"; readonly since: number }
  | { readonly kind: "tools"; readonly since: number; readonly names: ReadonlyArray<string> }
  | { readonly kind: "retrying"; readonly until: number; readonly attempt: number }

/**
 * A progress fold: feed it the session's events, ask it for the line at a time.
 *
 * @since 0.1.0
 * @category models
 */
export interface Progress {
  readonly observe: (event: SessionEvent) => void
  /** The share of the context window in use (0 … 1), shown as `ctx N%`; undefined hides it. */
  readonly contextShare: (fraction: number | undefined) => void
  /**
   * A running tool call's own progress (an MCP server's progress notification), shown beside its
   * name until its result; `undefined` clears it.
   */
  readonly toolProgress: (callId: string, text: string | undefined) => void
  /** The line at `now` (milliseconds), with spinner frame `frame`; undefined while no turn runs. */
  readonly line: (now: number, frame: number) => string | undefined
}

const seconds = (ms: number) => `${Math.max(0, Math.floor(ms / 1000))} s`

const count = (
  n: number
) => (n >= 10_000 ? `${Math.round(n / 1000)}k` : n >= 1000 ? `${(n / 1000).toFixed(1)}k` : String(n))

/**
 * An empty progress fold.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (): Progress => {
  let activity: Activity = { kind: "idle" }
  let turn = 0
  let step = 0
  let tokensIn = 0
  let tokensOut = 0
  let share: number | undefined
  const running = new Map<string, string>()
  const progressOf = new Map<string, string>()
  const names = () => [...running].map(([id, name]) => progressOf.has(id) ? `${name} (${progressOf.get(id)})` : name)
  const observe = (event: SessionEvent) => {
    switch (event.type) {
      case "turn/start":
        turn = (event as EventOf<"turn/start">).data.turn
        step = 0
        tokensIn = 0
        tokensOut = 0
        running.clear()
        progressOf.clear()
        activity = { kind: "waiting", since: event.time }
        return
      case "turn/end":
        activity = { kind: "idle" }
        return
      case "step/start":
        step = (event as EventOf<"step/start">).data.step
        activity = { kind: "waiting", since: event.time }
        return
      case "request/header":
        activity = { kind: "waiting", since: event.time }
        return
      case "assistant/chunk":
        if (activity.kind !== "streaming") activity = { kind: "streaming", since: event.time }
        return
      case "assistant/message": {
        const usage = (event as EventOf<"assistant/message">).data.usage
        if (usage !== undefined) {
          tokensIn += usage.inputTokens
          tokensOut += usage.outputTokens
        }
        activity = { kind: "waiting", since: event.time }
        return
      }
      case "tool/call": {
        const data = (event as EventOf<"tool/call">).data
        running.set(data.callId, data.name)
        activity = {
          kind: "tools",
          since: activity.kind === "tools" ? activity.since : event.time,
          names: [...running.values()]
        }
        return
      }
      case "tool/result": {
        const block = (event as EventOf<"tool/result">).data.message.content[0]
        running.delete(block.toolCallId)
        progressOf.delete(block.toolCallId)
        activity = running.size > 0
          ? {
            kind: "tools",
            since: activity.kind === "tools" ? activity.since : event.time,
            names: [...running.values()]
          }
          : { kind: "waiting", since: event.time }
        return
      }
      case "llm/retry": {
        const data = (event as EventOf<"llm/retry">).data
        activity = { kind: "retrying", until: event.time + data.delayMs, attempt: data.attempt }
        return
      }
    }
  }
  const line = (now: number, frame: number): string | undefined => {
    const what = (() => {
      switch (activity.kind) {
        case "idle":
          return undefined
        case "waiting":
          return `waiting for the model ${seconds(now - activity.since)}`
        case "streaming":
          return `streaming ${seconds(now - activity.since)}`
        case "tools":
          return `running ${names().join(", ")} ${seconds(now - activity.since)}`
        case "retrying":
          return `retrying (attempt ${activity.attempt}) in ${seconds(activity.until - now + 999)}`
      }
    })()
    if (what === undefined) return undefined
    const where = `turn ${turn}${step > 0 ? ` step ${step}` : ""}`
    const tokens = tokensIn + tokensOut > 0 ? ` · ${count(tokensIn)} in / ${count(tokensOut)} out tokens` : ""
    const ctx = share === undefined ? "" : ` · ctx ${Math.round(share * 100)}%`
    return `${FRAMES[frame % FRAMES.length]} ${what} · ${where}${tokens}${ctx} · Esc interrupts`
  }
  const contextShare = (fraction: number | undefined) => {
    share = fraction
  }
  const toolProgress = (callId: string, text: string | undefined) => {
    if (text === undefined) progressOf.delete(callId)
    else if (running.has(callId)) progressOf.set(callId, text)
  }
  return { observe, contextShare, toolProgress, line }
}

/**
 * Whether the chat shows a live progress line: only on a terminal, never under `CI` or `NO_COLOR`
 * or on a dumb terminal (those get the plain lines alone).
 *
 * @since 0.1.0
 * @category predicates
 */
export const enabled = (env: NodeJS.ProcessEnv, isTTY: boolean): boolean =>
  isTTY && (env.CI ?? "") === "" && (env.NO_COLOR ?? "") === "" && env.TERM !== "dumb"
