/**
 * A Claude-Code-shaped JSONL transcript of a session (the file a hook's `transcript_path` names):
 * one line per message event of the log, kept current before every hook run. It is a view of the
 * log, rewritten from the log when the bridge starts; the log stays the only source of truth.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import * as fs from "node:fs/promises"
import * as path from "node:path"
import type { EventOf, SessionEvent } from "../../domain/Event.js"

/**
 * Keeps one session's transcript file current.
 *
 * @since 0.1.0
 * @category models
 */
export interface Transcript {
  readonly path: string
  /** Writes the lines of the message events not written yet (all of them on the first call). */
  readonly sync: (events: ReadonlyArray<SessionEvent>) => Effect.Effect<void>
}

const text = (t: string) => ({ type: "text", text: t })

type Line = Record<string, unknown>

/** The transcript line of one event, if it is a message event. */
const lineOf = (event: SessionEvent, base: { readonly sessionId: string; readonly cwd: string }): Line | undefined => {
  const common = {
    sessionId: base.sessionId,
    cwd: base.cwd,
    timestamp: new Date(event.time).toISOString(),
    tiller: { seq: event.seq }
  }
  switch (event.type) {
    case "user/message": {
      const m = (event as EventOf<"user/message">).data
      const content = m.content.length === 1 && m.content[0]!.type === "text"
        ? m.content[0]!.text
        : m.content.map((b) =>
          b.type === "text"
            ? text(b.text)
            : { type: "image", source: { type: "base64", media_type: b.mediaType, data: b.data } }
        )
      return {
        type: "user",
        uuid: m.id,
        ...common,
        ...(m.source.kind === "user" ? {} : { isMeta: true, source: m.source }),
        message: { role: "user", content }
      }
    }
    case "assistant/message": {
      const { message } = (event as EventOf<"assistant/message">).data
      if (message.content.length === 0) return undefined
      return {
        type: "assistant",
        uuid: message.id,
        ...common,
        message: {
          role: "assistant",
          model: message.source.model,
          content: message.content.map((b) => {
            if (b.type === "text") return text(b.text)
            if (b.type === "reasoning") return { type: "thinking", thinking: b.text }
            let input: unknown = {}
            try {
              input = b.arguments === "" ? {} : JSON.parse(b.arguments)
            } catch {
              input = b.arguments
            }
            return { type: "tool_use", id: b.id, name: b.name, input }
          })
        }
      }
    }
    case "tool/result": {
      const { message } = (event as EventOf<"tool/result">).data
      const block = message.content[0]!
      return {
        type: "user",
        uuid: message.id,
        ...common,
        message: {
          role: "user",
          content: [{
            type: "tool_result",
            tool_use_id: block.toolCallId,
            is_error: block.isError,
            content: block.content.map((b) => b.type === "text" ? b.text : "[image]").join("\n")
          }]
        }
      }
    }
    default:
      return undefined
  }
}

/**
 * The transcript of `sessionId` at `file`.
 *
 * @since 0.1.0
 * @category constructors
 */
export const makeTranscript = (
  options: { readonly file: string; readonly sessionId: string; readonly cwd: string }
): Transcript => {
  let written = -1
  let parent: string | null = null
  let started = false
  const lock = Effect.unsafeMakeSemaphore(1)
  const sync = (events: ReadonlyArray<SessionEvent>) =>
    lock.withPermits(1)(
      Effect.promise(async () => {
        let out = ""
        for (const event of events) {
          if (event.seq <= written) continue
          written = event.seq
          const line = lineOf(event, options)
          if (line === undefined) continue
          out += JSON.stringify({ parentUuid: parent, ...line }) + "\n"
          parent = line["uuid"] as string
        }
        if (!started) {
          await fs.mkdir(path.dirname(options.file), { recursive: true })
          await fs.writeFile(options.file, out)
          started = true
        } else if (out !== "") {
          await fs.appendFile(options.file, out)
        }
      }).pipe(Effect.catchAllDefect(() => Effect.void))
    )
  return { path: options.file, sync }
}
