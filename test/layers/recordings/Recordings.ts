/**
 * The provider recordings: real Anthropic Messages, OpenAI Responses and Chat Completions streams
 * published by other projects (the folder's SOURCES.md names each one's source). They are not in the
 * repository: read at test time from the folder named by `TILLER_PROVIDER_RECORDINGS`, else from
 * `shared/provider-recordings` beside the repository (where CI keeps them); without either,
 * `npm run test:recordings` stops with one line saying so (vitest.recordings.config.ts). Each file becomes one `Recording`: its API family (by folder), its responses (a file
 * with several responses back to back is split into them) and, for each response, the JSON payloads
 * in order and the bytes the replay server sends for it.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"

/** The API family of a recording, named by its folder. */
export type Family = "anthropic" | "openai-responses" | "chat"

/** One recorded response: its payloads, the SSE body to replay, and whether it ends with `[DONE]`. */
export interface RecordedResponse {
  readonly payloads: ReadonlyArray<any>
  /** The raw `data:` texts of the payloads, in order (as sent; `[DONE]` excluded). */
  readonly lines: ReadonlyArray<string>
  /** The bytes sent for this response. */
  readonly body: string
}

/** One recording file. */
export interface Recording {
  /** The path relative to the recordings folder, e.g. `anthropic/docs-thinking.sse`. */
  readonly name: string
  readonly family: Family
  readonly format: "chunks" | "sse"
  readonly responses: ReadonlyArray<RecordedResponse>
}

const ROOT = fileURLToPath(new URL("../../../", import.meta.url))

/** The recordings folder: `TILLER_PROVIDER_RECORDINGS`, else `../shared/provider-recordings` from the repository root. */
export const folder: string =
  process.env.TILLER_PROVIDER_RECORDINGS !== undefined && process.env.TILLER_PROVIDER_RECORDINGS !== ""
    ? path.resolve(process.env.TILLER_PROVIDER_RECORDINGS)
    : path.resolve(ROOT, "..", "shared", "provider-recordings")

const FAMILIES: ReadonlyArray<Family> = ["anthropic", "openai-responses", "chat"]

/** Every file under the folder (relative paths, sorted), documentation included. */
export const listFiles = (): ReadonlyArray<string> => {
  const out: Array<string> = []
  const walk = (relative: string) => {
    for (const entry of fs.readdirSync(path.join(folder, relative), { withFileTypes: true })) {
      const name = relative === "" ? entry.name : `${relative}/${entry.name}`
      if (entry.isDirectory()) walk(name)
      else out.push(name)
    }
  }
  walk("")
  return out.sort()
}

/** Whether the folder exists. */
export const exists = (): boolean => fs.existsSync(folder) && fs.statSync(folder).isDirectory()

/** Files that are documentation, not recordings. */
export const isDocumentation = (name: string): boolean => name.endsWith(".md")

/** How one payload is framed on the wire by the provider of `family` (the `data:` text kept verbatim). */
export const frame = (family: Family, data: string, payload: any): string =>
  family === "chat" ? `data: ${data}\n\n` : `event: ${payload.type}\ndata: ${data}\n\n`

/** The end of a Chat Completions stream. */
export const DONE = "data: [DONE]\n\n"

/** Whether a payload opens a new response of a file with several responses back to back. */
const opensResponse = (family: Family, payload: any): boolean =>
  (family === "anthropic" && payload?.type === "message_start") ||
  (family === "openai-responses" && payload?.type === "response.created")

/** Splits payloads (with their raw texts) where a new response starts. */
const split = <A extends { readonly payload: any }>(family: Family, items: ReadonlyArray<A>): Array<Array<A>> => {
  const groups: Array<Array<A>> = []
  for (const item of items) {
    if (
      groups.length === 0 ||
      (opensResponse(family, item.payload) && groups.at(-1)!.some((i) => opensResponse(family, i.payload)))
    ) {
      groups.push([])
    }
    groups.at(-1)!.push(item)
  }
  return groups
}

/** The `data:` texts of raw SSE bytes, comments and `event:` lines skipped. */
const sseData = (text: string): Array<string> => {
  const out: Array<string> = []
  for (const block of text.replace(/\r\n/g, "\n").split("\n\n")) {
    const data = block.split("\n").filter((line) => line.startsWith("data:")).map((line) =>
      line.slice(5).replace(/^ /, "")
    )
    if (data.length > 0) out.push(data.join("\n"))
  }
  return out
}

/** Reads and splits one recording; throws on a line that is not JSON (a malformed recording). */
export const load = (name: string): Recording => {
  const family = name.split("/")[0] as Family
  if (!FAMILIES.includes(family)) {
    throw new Error(`${name}: no API family for the folder "${family}" (known: ${FAMILIES.join(", ")})`)
  }
  const text = fs.readFileSync(path.join(folder, name), "utf8")
  if (name.endsWith(".chunks.txt")) {
    const items = text.split("\n").filter((line) => line.trim() !== "").map((line) => ({
      line,
      payload: JSON.parse(line)
    }))
    const responses = split(family, items).map((group) => ({
      payloads: group.map((i) => i.payload),
      lines: group.map((i) => i.line),
      body: group.map((i) => frame(family, i.line, i.payload)).join("") + (family === "chat" ? DONE : "")
    }))
    return { name, family, format: "chunks", responses }
  }
  if (name.endsWith(".sse")) {
    // Raw bytes are sent as they are; a file holds one response.
    const lines = sseData(text).filter((data) => data !== "[DONE]")
    return {
      name,
      family,
      format: "sse",
      responses: [{ payloads: lines.map((l) => JSON.parse(l)), lines, body: text }]
    }
  }
  throw new Error(`${name}: not a recording format this suite knows (*.chunks.txt or *.sse)`)
}

/** Whether a payload ends its response (the finish event a complete response has). */
const isTerminal = (family: Family, p: any): boolean =>
  family === "anthropic"
    ? p?.type === "message_stop"
    : family === "openai-responses"
    ? p?.type === "response.completed" || p?.type === "response.incomplete" || p?.type === "response.failed"
    : (p?.choices ?? []).some((c: any) => typeof c?.finish_reason === "string")

/** Whether a payload reports an error inside the stream. */
const isError = (family: Family, p: any): boolean =>
  family === "chat" ? p?.error !== undefined && p?.error !== null : p?.type === "error" || p?.type === "response.failed"

/**
 * The first response of a recording cut just before its finish event (as a server that drops the
 * connection would), framed as its provider frames it; `undefined` when the response has no finish
 * event or carries an error (its error is the point of that recording).
 */
export const truncated = (recording: Recording): RecordedResponse | undefined => {
  const first = recording.responses[0]!
  if (first.payloads.some((p) => isError(recording.family, p))) return undefined
  const at = first.payloads.findIndex((p) => isTerminal(recording.family, p))
  if (at <= 0) return undefined
  const payloads = first.payloads.slice(0, at)
  const lines = first.lines.slice(0, at)
  return { payloads, lines, body: lines.map((line, n) => frame(recording.family, line, payloads[n])).join("") }
}
