/**
 * The fold from a session's events to trace spans, following the OpenTelemetry GenAI semantic
 * conventions: a turn (`turn/start` … `turn/end`) is an `invoke_agent` span, a model request attempt
 * (from the step's `request/header` or first chunk to its `assistant/message` or failed finish) a
 * `chat {model}` span, a tool execution (`tool/call` … `tool/result`) an `execute_tool {name}` span.
 * Inbox insertions, claims and discards, entered messages, hook decisions, retries and compactions
 * become span events. The fold is incremental (one event in, the span actions it implies out), so the
 * same code serves live export and the replay of a stored log; times are the events' own.
 *
 * @since 0.1.0
 */
import { Either } from "effect"
import * as Cost from "../../domain/Cost.js"
import type { EventOf, SessionEvent } from "../../domain/Event.js"
import type { PriceTable } from "../../domain/Prices.js"
import * as Prices from "../../domain/Prices.js"
import type { InboxLists } from "../../domain/Splice.js"
import { applySplice, emptyInbox, spliceShape } from "../../domain/Splice.js"
import type { LlmFailure, MessageSource, StreamChunk, TurnEndReason, UserMessage } from "../../domain/Values.js"
import type { Attributes, AttributeValue, SpanAction } from "./SpanAction.js"

/**
 * What the fold records beyond the span shape.
 *
 * @since 0.1.0
 * @category models
 */
export interface SpanFoldOptions {
  /** The session id, `gen_ai.conversation.id`. */
  readonly sessionId: string
  /** Record message content (entered text, output text, tool arguments and results). Default false. */
  readonly content?: boolean
  /** The prices of `tiller.cost.usd` (default: tiller's table, `domain/Prices`). */
  readonly prices?: PriceTable
}

/**
 * The incremental fold: `step` for every event in seq order, `close` once at the end (it ends any
 * span still open, marked `tiller.unfinished`).
 *
 * @since 0.1.0
 * @category models
 */
export interface SpanFold {
  readonly step: (event: SessionEvent) => ReadonlyArray<SpanAction>
  readonly close: (time: number) => ReadonlyArray<SpanAction>
}

interface Attempt {
  readonly key: string
  readonly attempt: number
  readonly step: number
}

type Block = { readonly type: string; readonly text?: string; readonly content?: ReadonlyArray<Block> }

const textOf = (content: ReadonlyArray<Block>): string =>
  content.map((
    b
  ) => (b.type === "text" || b.type === "reasoning"
    ? b.text ?? ""
    : b.type === "tool-result"
    ? textOf(b.content ?? [])
    : `[${b.type}]`)
  )
    .join("")

const sourceLabel = (source: MessageSource): string => {
  const { kind, ...rest } = source
  if (kind === "tool" || kind === "model") return kind
  const details = Object.values(rest).filter((value): value is string => typeof value === "string")
  return [kind, ...details].join(":")
}

const failureAttributes = (failure: LlmFailure): Record<string, AttributeValue> => ({
  "error.type": failure.code,
  "tiller.failure.message": failure.message,
  ...(failure.status === undefined ? {} : { "http.response.status_code": failure.status })
})

const finishReason = (kind: string, toolCalls: number): string =>
  kind === "stop" ? (toolCalls > 0 ? "tool_call" : "stop") : kind === "max-tokens" ? "length" : kind

const reasonText = (reason: TurnEndReason): string => {
  switch (reason.kind) {
    case "blocked":
      return reason.message ?? ""
    case "aborted":
      return reason.reason.kind === "hook" ? `hook: ${reason.reason.reason}` : reason.reason.kind
    case "error":
      return `${reason.error.code}: ${reason.error.message}`
    default:
      return ""
  }
}

/**
 * The cost attributes of a tally: `tiller.cost.usd` when every model had a price, else
 * `tiller.cost.unpriced` naming the models without one (and the partial `tiller.cost.usd` of the
 * priced ones, if any).
 */
const costAttributes = (tally: Cost.Tally): Record<string, string | number> => ({
  ...(tally.unpriced.length === 0 || tally.usd > 0 ? { "tiller.cost.usd": Number(tally.usd.toFixed(9)) } : {}),
  ...(tally.unpriced.length === 0 ? {} : { "tiller.cost.unpriced": `no price for model ${tally.unpriced.join(", ")}` })
})

/**
 * A fresh fold for one session.
 *
 * @since 0.1.0
 * @category constructors
 */
export const makeSpanFold = (options: SpanFoldOptions): SpanFold => {
  const content = options.content === true
  let lists: InboxLists = emptyInbox
  let provider: string | undefined
  let model: string | undefined
  let system: string | undefined
  let maxTokens: number | undefined
  let temperature: number | undefined
  let turnKey: string | undefined
  let turn = 0
  let turnInput = 0
  let turnOutput = 0
  let turnTally = Cost.empty
  const prices = options.prices ?? Prices.PRICES
  let steps = 0
  let stepTime = 0
  let headerTime: number | undefined
  let chat: Attempt | undefined
  let finishKind = "stop"
  let compaction: { readonly key: string; readonly inTurn: boolean } | undefined
  let outside: Array<SpanAction & { readonly _tag: "Event" }> = []
  let lastTime = 0
  const tools = new Map<string, string>()
  const open = new Set<string>()

  const event = (name: string, time: number, attributes: Attributes): SpanAction & { readonly _tag: "Event" } => ({
    _tag: "Event",
    key: turnKey ?? "",
    name,
    time,
    attributes
  })

  // Outside a turn, events wait for the next turn span (the insertion of a prompt belongs to the turn
  // it starts); inside one they go to it.
  const turnEvent = (out: Array<SpanAction>, name: string, time: number, attributes: Attributes) => {
    if (compaction !== undefined && !compaction.inTurn) {
      out.push({ ...event(name, time, attributes), key: compaction.key })
    } else if (turnKey === undefined) outside.push(event(name, time, attributes))
    else out.push(event(name, time, attributes))
  }

  const openSpan = (out: Array<SpanAction>, action: SpanAction & { readonly _tag: "Open" }) => {
    open.add(action.key)
    out.push(action)
  }
  const endSpan = (
    out: Array<SpanAction>,
    key: string,
    time: number,
    error?: { readonly type: string; readonly message: string }
  ) => {
    if (!open.delete(key)) return
    out.push(error === undefined ? { _tag: "End", key, time } : { _tag: "End", key, time, error })
  }

  // A request is an event of its call's span (pending until answered); the answer another event, with
  // the decision, who gave it and how long the call waited on the span. An answer given after the
  // session stopped (the call's span is closed) is an event of the turn, or of the next one.
  const requested = new Map<string, number>()
  const approvalActions = (
    out: Array<SpanAction>,
    e: EventOf<"approval/request"> | EventOf<"approval/answer">
  ) => {
    const key = `tool:${e.data.callId}`
    if (e.type === "approval/request") {
      requested.set(e.data.callId, e.time)
      const attributes = {
        "tiller.approval.reason": e.data.reason,
        "tiller.approval.source": e.data.source,
        "gen_ai.tool.call.id": e.data.callId,
        "tiller.seq": e.seq
      }
      if (!open.has(key)) return turnEvent(out, "tiller.approval.request", e.time, attributes)
      out.push({ _tag: "Attributes", key, attributes: { "tiller.approval.status": "pending" } })
      out.push({ _tag: "Event", key, name: "tiller.approval.request", time: e.time, attributes })
      return
    }
    const since = requested.get(e.data.callId)
    const attributes = {
      "tiller.approval.decision": e.data.decision,
      "tiller.approval.by": e.data.by,
      ...(e.data.reason === undefined ? {} : { "tiller.approval.answer_reason": e.data.reason }),
      ...(e.data.rule === undefined ? {} : { "tiller.approval.rule": e.data.rule }),
      ...(since === undefined ? {} : { "tiller.approval.wait_ms": Math.max(0, e.time - since) }),
      "gen_ai.tool.call.id": e.data.callId,
      "tiller.seq": e.seq
    }
    if (!open.has(key)) return turnEvent(out, "tiller.approval.answer", e.time, attributes)
    out.push({
      _tag: "Attributes",
      key,
      attributes: { "tiller.approval.status": e.data.decision === "allow" ? "approved" : "refused", ...attributes }
    })
    out.push({ _tag: "Event", key, name: "tiller.approval.answer", time: e.time, attributes })
  }

  const modelAttributes = (): Record<string, AttributeValue> => ({
    ...(provider === undefined ? {} : { "gen_ai.provider.name": provider }),
    ...(model === undefined ? {} : { "gen_ai.request.model": model })
  })

  const openChat = (out: Array<SpanAction>, step: number, attempt: number, time: number, seq: number) => {
    if (chat !== undefined && chat.step === step && chat.attempt === attempt) return
    if (chat !== undefined) endSpan(out, chat.key, time)
    const key = `chat:${turn}.${step}.${attempt}`
    chat = { key, step, attempt }
    finishKind = "stop"
    openSpan(out, {
      _tag: "Open",
      key,
      parent: turnKey,
      name: `chat ${model ?? "unknown"}`,
      kind: "client",
      time: headerTime ?? time,
      attributes: {
        "gen_ai.operation.name": "chat",
        "gen_ai.conversation.id": options.sessionId,
        ...modelAttributes(),
        ...(maxTokens === undefined ? {} : { "gen_ai.request.max_tokens": maxTokens }),
        ...(temperature === undefined ? {} : { "gen_ai.request.temperature": temperature }),
        ...(content && system !== undefined
          ? { "gen_ai.system_instructions": JSON.stringify([{ type: "text", content: system }]) }
          : {}),
        "tiller.turn": turn,
        "tiller.step": step,
        "tiller.attempt": attempt,
        "tiller.seq": seq
      }
    })
    headerTime = undefined
  }

  const onChunk = (out: Array<SpanAction>, e: EventOf<"assistant/chunk">) => {
    const { attempt, chunk, step } = e.data
    openChat(out, step, attempt, stepTime, e.seq)
    const finish = (chunk as StreamChunk).type === "finish"
      ? (chunk as Extract<StreamChunk, { type: "finish" }>).finish
      : undefined
    if (finish !== undefined && (finish.kind === "stop" || finish.kind === "max-tokens")) finishKind = finish.kind
    if (finish !== undefined && (finish.kind === "error" || finish.kind === "aborted") && chat !== undefined) {
      out.push({
        _tag: "Attributes",
        key: chat.key,
        attributes: { "gen_ai.response.finish_reasons": [finish.kind], ...failureAttributes(finish.failure) }
      })
      endSpan(out, chat.key, e.time, { type: finish.failure.code, message: finish.failure.message })
      chat = undefined
      stepTime = e.time
    }
  }

  const step = (e: SessionEvent): ReadonlyArray<SpanAction> => {
    const out: Array<SpanAction> = []
    lastTime = e.time
    switch (e.type) {
      case "turn/start": {
        turn = (e as EventOf<"turn/start">).data.turn
        turnKey = `turn:${turn}`
        turnInput = 0
        turnOutput = 0
        turnTally = Cost.empty
        steps = 0
        openSpan(out, {
          _tag: "Open",
          key: turnKey,
          parent: undefined,
          name: "invoke_agent",
          kind: "internal",
          time: e.time,
          attributes: {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": "tiller",
            "gen_ai.conversation.id": options.sessionId,
            ...modelAttributes(),
            "tiller.turn": turn,
            "tiller.seq": e.seq
          }
        })
        for (const pending of outside) out.push({ ...pending, key: turnKey })
        outside = []
        break
      }
      case "turn/end": {
        if (turnKey === undefined) break
        const reason = (e as EventOf<"turn/end">).data.reason
        if (chat !== undefined) {
          endSpan(
            out,
            chat.key,
            e.time,
            reason.kind === "error" ? { type: reason.error.code, message: reason.error.message } : undefined
          )
        }
        chat = undefined
        for (const key of [...open]) {
          if (key.startsWith("tool:")) {
            endSpan(out, key, e.time, { type: "UNFINISHED", message: "the turn ended first" })
          }
        }
        const text = reasonText(reason)
        if (reason.kind === "blocked" || (reason.kind === "aborted" && reason.reason.kind === "hook")) {
          out.push({
            ...event("tiller.hook.decision", e.time, {
              "tiller.hook": reason.kind === "blocked" ? "pre_step" : "cancel",
              "tiller.decision": reason.kind,
              "tiller.reason": text,
              "tiller.seq": e.seq
            })
          })
        }
        out.push({
          _tag: "Attributes",
          key: turnKey,
          attributes: {
            "tiller.turn.end_reason": reason.kind,
            ...(text === "" ? {} : { "tiller.turn.end_detail": text }),
            "tiller.turn.steps": steps,
            "tiller.turn.end_seq": e.seq,
            "gen_ai.usage.input_tokens": turnInput,
            "gen_ai.usage.output_tokens": turnOutput,
            ...costAttributes(turnTally),
            ...(reason.kind === "error" ? { "error.type": reason.error.code } : {})
          }
        })
        endSpan(
          out,
          turnKey,
          e.time,
          reason.kind === "error" ? { type: reason.error.code, message: reason.error.message } : undefined
        )
        turnKey = undefined
        break
      }
      case "step/start":
        steps = (e as EventOf<"step/start">).data.step
        stepTime = e.time
        headerTime = undefined
        turnEvent(out, "tiller.step.start", e.time, { "tiller.step": steps, "tiller.seq": e.seq })
        break
      case "step/end":
        if (chat !== undefined) endSpan(out, chat.key, e.time)
        chat = undefined
        break
      case "request/header": {
        const { header, reason } = (e as EventOf<"request/header">).data
        provider = header.provider
        model = header.model
        system = header.system
        maxTokens = header.maxTokens
        temperature = header.temperature
        headerTime = e.time
        if (turnKey !== undefined) out.push({ _tag: "Attributes", key: turnKey, attributes: modelAttributes() })
        if (reason === "change") {
          turnEvent(out, "tiller.hook.decision", e.time, {
            "tiller.hook": "request",
            "tiller.decision": "change",
            "gen_ai.request.model": header.model,
            "tiller.seq": e.seq
          })
        }
        break
      }
      case "user/message": {
        const m = e as EventOf<"user/message">
        if (m.surfaceOp !== "append") {
          turnEvent(out, "tiller.surface.replace", e.time, {
            "tiller.seq": e.seq,
            "tiller.message.source": sourceLabel(m.data.source)
          })
          break
        }
        turnEvent(out, "tiller.message.entered", e.time, {
          "tiller.seq": e.seq,
          "tiller.step": steps,
          "tiller.message.source": sourceLabel(m.data.source),
          "tiller.message.id": m.data.id,
          ...(content ? { "tiller.message.text": textOf(m.data.content) } : {})
        })
        break
      }
      case "assistant/chunk":
        onChunk(out, e as EventOf<"assistant/chunk">)
        break
      case "assistant/message": {
        const { attempt, interrupted, message, step: s, usage } = (e as EventOf<"assistant/message">).data
        openChat(out, s, attempt, stepTime, e.seq)
        if (chat === undefined) break
        const calls = message.content.filter((b) => b.type === "tool-call").length
        const finish = interrupted === true ? "interrupted" : finishKind
        const tally = usage === undefined
          ? undefined
          : Cost.tallyOf(usage, message.source.provider, message.source.model, prices)
        if (tally !== undefined) {
          turnInput += tally.inputTokens
          turnOutput += tally.outputTokens
          turnTally = Cost.add(turnTally, tally)
        }
        out.push({
          _tag: "Attributes",
          key: chat.key,
          attributes: {
            "gen_ai.response.model": message.source.model,
            "gen_ai.response.id": message.id,
            "gen_ai.response.finish_reasons": [finishReason(finish, calls)],
            ...(tally === undefined
              ? {}
              : { "gen_ai.usage.input_tokens": tally.inputTokens, "gen_ai.usage.output_tokens": tally.outputTokens }),
            ...(usage?.cacheReadTokens === undefined
              ? {}
              : { "gen_ai.usage.cache_read.input_tokens": usage.cacheReadTokens }),
            ...(usage?.cacheWriteTokens === undefined
              ? {}
              : { "gen_ai.usage.cache_creation.input_tokens": usage.cacheWriteTokens }),
            ...(tally === undefined ? {} : costAttributes(tally)),
            ...(usage?.reasoningTokens === undefined
              ? {}
              : { "gen_ai.usage.reasoning.output_tokens": usage.reasoningTokens }),
            "tiller.message.seq": e.seq,
            ...(content
              ? { "gen_ai.output.messages": JSON.stringify([{ role: "assistant", parts: message.content }]) }
              : {})
          }
        })
        endSpan(out, chat.key, e.time)
        chat = undefined
        break
      }
      case "tool/call": {
        const data = (e as EventOf<"tool/call">).data
        tools.set(data.callId, data.name)
        openSpan(out, {
          _tag: "Open",
          key: `tool:${data.callId}`,
          parent: turnKey,
          name: `execute_tool ${data.name}`,
          kind: "internal",
          time: e.time,
          attributes: {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.conversation.id": options.sessionId,
            "gen_ai.tool.name": data.name,
            "gen_ai.tool.call.id": data.callId,
            "gen_ai.tool.type": "function",
            "tiller.turn": data.turn,
            "tiller.step": data.step,
            "tiller.seq": e.seq,
            ...(content ? { "gen_ai.tool.call.arguments": data.arguments } : {})
          }
        })
        break
      }
      case "approval/request":
      case "approval/answer": {
        approvalActions(out, e as EventOf<"approval/request"> | EventOf<"approval/answer">)
        break
      }
      case "tool/result": {
        const r = e as EventOf<"tool/result">
        const block = r.data.message.content[0]
        if (r.surfaceOp !== "append") {
          turnEvent(out, "tiller.surface.replace", e.time, {
            "tiller.seq": e.seq,
            "gen_ai.tool.call.id": block.toolCallId
          })
          break
        }
        const key = `tool:${block.toolCallId}`
        const error = r.data.error
        if (error !== undefined && (error.code === "DENIED" || error.code === "PRE_HOOK_FAILED")) {
          turnEvent(out, "tiller.hook.decision", e.time, {
            "tiller.hook": "tool_pre",
            "tiller.decision": error.code === "DENIED" ? "deny" : "failed",
            "gen_ai.tool.name": tools.get(block.toolCallId) ?? "",
            "gen_ai.tool.call.id": block.toolCallId,
            "tiller.seq": e.seq
          })
        }
        if (!open.has(key)) break
        out.push({
          _tag: "Attributes",
          key,
          attributes: {
            "tiller.result.seq": e.seq,
            "tiller.result.is_error": block.isError,
            ...(error === undefined ? {} : { "error.type": error.code }),
            ...(content ? { "gen_ai.tool.call.result": textOf(block.content) } : {})
          }
        })
        endSpan(
          out,
          key,
          e.time,
          error === undefined ? undefined : { type: error.code, message: `${error.name} (${error.code})` }
        )
        break
      }
      case "llm/retry": {
        const data = (e as EventOf<"llm/retry">).data
        if (chat !== undefined) {
          endSpan(out, chat.key, e.time, { type: data.failure.code, message: data.failure.message })
        }
        chat = undefined
        stepTime = e.time + data.delayMs
        turnEvent(out, "tiller.llm.retry", e.time, {
          "tiller.seq": e.seq,
          "tiller.step": data.step,
          "tiller.attempt": data.attempt,
          "tiller.retry.delay_ms": data.delayMs,
          ...failureAttributes(data.failure)
        })
        break
      }
      case "agent/inbox/spliced": {
        const data = (e as EventOf<"agent/inbox/spliced">).data
        const applied = applySplice(lists, data)
        const removed: ReadonlyArray<UserMessage> = Either.isRight(applied) ? applied.right.removed : []
        if (Either.isRight(applied)) lists = applied.right.lists
        const shape = spliceShape(data) ?? "splice"
        const name = shape === "insertion"
          ? "inserted"
          : shape === "claim"
          ? "claimed"
          : shape === "cancellation"
          ? "discarded"
          : "replaced"
        const messages = shape === "insertion" ? data.inserted : removed
        turnEvent(out, `tiller.inbox.${name}`, e.time, {
          "tiller.seq": e.seq,
          "tiller.inbox.target": data.target,
          "tiller.inbox.count": messages.length,
          "tiller.message.sources": messages.map((m) => sourceLabel(m.source)),
          ...(content && shape !== "claim"
            ? { "tiller.message.text": messages.map((m) => textOf(m.content)).join("\n") }
            : {})
        })
        break
      }
      case "compaction/start":
      case "compaction/summary":
      case "compaction/end": {
        const data = e.data as Record<string, unknown>
        const attributes: Record<string, AttributeValue> = { "tiller.seq": e.seq }
        for (const [k, v] of Object.entries(data)) {
          if (typeof v === "string" || typeof v === "number" || typeof v === "boolean") {
            attributes[`tiller.compaction.${k}`] = v
          }
        }
        if (Array.isArray(data.pruned)) attributes["tiller.compaction.pruned_count"] = data.pruned.length
        const error = data.error as { readonly message?: string } | undefined
        if (error?.message !== undefined) attributes["tiller.compaction.error"] = error.message
        const phase = e.type.slice("compaction/".length)
        if (turnKey === undefined && e.type === "compaction/start" && compaction === undefined) {
          compaction = { key: `compaction:${e.seq}`, inTurn: false }
          openSpan(out, {
            _tag: "Open",
            key: compaction.key,
            parent: undefined,
            name: "tiller.compaction",
            kind: "internal",
            time: e.time,
            attributes: { "gen_ai.conversation.id": options.sessionId, ...attributes }
          })
          break
        }
        turnEvent(out, `tiller.compaction.${phase}`, e.time, attributes)
        if (e.type === "compaction/end" && compaction !== undefined) {
          endSpan(
            out,
            compaction.key,
            e.time,
            error?.message === undefined ? undefined : { type: "COMPACTION_FAILED", message: error.message }
          )
          compaction = undefined
        }
        break
      }
      case "session/end-seed":
        turnEvent(out, "tiller.session.opened", e.time, { "tiller.seq": e.seq })
        break
      case "hook/run": {
        // A command hook's run (the hook bridge's ignorable record): its decision fields only.
        const data = (e.data ?? {}) as Record<string, unknown>
        const attributes: Record<string, AttributeValue> = { "tiller.seq": e.seq }
        for (
          const key of [
            "event",
            "hook",
            "exitCode",
            "durationMs",
            "block",
            "stop",
            "permissionDecision",
            "permissionDecisionReason"
          ]
        ) {
          const v = data[key]
          if (typeof v === "string" || typeof v === "number" || typeof v === "boolean") {
            attributes[`tiller.hook.${key}`] = v
          }
        }
        const error = data.error as { readonly code?: unknown } | undefined
        if (typeof error?.code === "string") attributes["error.type"] = error.code
        turnEvent(out, "tiller.hook.run", e.time, attributes)
        break
      }
      default:
        break
    }
    return out
  }

  const close = (time: number): ReadonlyArray<SpanAction> => {
    const out: Array<SpanAction> = []
    const at = Math.max(time, lastTime)
    for (const key of [...open].reverse()) {
      out.push({ _tag: "Attributes", key, attributes: { "tiller.unfinished": true } })
      endSpan(out, key, at)
    }
    return out
  }

  return { step, close }
}

/**
 * Every span action of a whole log, in order (the replay of `tiller trace`).
 *
 * @since 0.1.0
 * @category utils
 */
export const foldSpans = (events: ReadonlyArray<SessionEvent>, options: SpanFoldOptions): ReadonlyArray<SpanAction> => {
  const fold = makeSpanFold(options)
  const out: Array<SpanAction> = []
  for (const event of events) for (const action of fold.step(event)) out.push(action)
  const last = events[events.length - 1]
  for (const action of fold.close(last === undefined ? 0 : last.time)) out.push(action)
  return out
}
