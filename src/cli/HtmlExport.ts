/**
 * `tiller export ID --html FILE`: one self-contained HTML file with a session's timeline. The page
 * embeds the session's header and events as JSON and renders them on the client with the inline
 * script of `HtmlPage` (no network, no external file): turns and steps as a collapsible tree, the
 * sources of entered messages, text and reasoning, tool calls and results, retries, hook decisions,
 * why each turn ended, the inbox lane, compaction markers, tokens and duration per turn, search,
 * filters and links to a seq (`FILE#seq-42`).
 *
 * @since 0.1.0
 */
import { FileSystem } from "@effect/platform"
import * as NodeFileSystem from "@effect/platform-node/NodeFileSystem"
import { Effect } from "effect"
import { gzipSync } from "node:zlib"
import * as Cost from "../domain/Cost.js"
import type { SessionEvent, SessionHeader } from "../domain/Event.js"
import type { PriceTable } from "../domain/Prices.js"
import * as Prices from "../domain/Prices.js"
import { CliError } from "./CliError.js"
import { describeFileError } from "./FileErrors.js"
import { PAGE_SCRIPT, PAGE_STYLE } from "./HtmlPage.js"
import * as Output from "./Output.js"
import { describeTokens } from "./Timeline.js"

/** Text safe inside an HTML element (`&`, `<`, `>`, quotes escaped). */
const escapeHtml = (text: string): string =>
  text.replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", "\"": "&quot;", "'": "&#39;" })[c]!)

/**
 * JSON safe inside a `<script>` element: `<` (so no `</script>` or `<!--`) and the line separators
 * JavaScript once refused are written as escapes; `JSON.parse` reads them back unchanged.
 *
 * @since 0.1.0
 * @category utils
 */
export const scriptJson = (value: unknown): string =>
  JSON.stringify(value).replace(/</g, "\\u003c").replace(/\u2028/g, "\\u2028").replace(/\u2029/g, "\\u2029")

/**
 * The events the page embeds: every event except the chunks of a completed answer (its
 * `assistant/message` holds their content and cites their seqs); the chunks of a failed or cut
 * attempt stay, they are all that is left of it.
 *
 * @since 0.1.0
 * @category utils
 */
export const embeddedEvents = (events: ReadonlyArray<SessionEvent>): ReadonlyArray<SessionEvent> => {
  const answered = new Set<number>()
  for (const event of events) {
    if (event.type === "assistant/message") {
      for (const seq of (event as { readonly sourceEventSeqs?: ReadonlyArray<number> }).sourceEventSeqs ?? []) {
        answered.add(seq)
      }
    }
  }
  return answered.size === 0 ? events : events.filter((event) => !answered.has(event.seq))
}

/**
 * The size (in characters of JSON) above which the page embeds a session in parts: the first part
 * as JSON, shown at once, and the later ones gzip-compressed in base64, which the page's script
 * inflates with the browser's own `DecompressionStream` and folds in one after another while the
 * first rows are already on screen (a browser also reads a few megabytes of base64 far faster than
 * tens of megabytes of script text).
 *
 * @since 0.1.0
 * @category constants
 */
export const COMPRESS_ABOVE = 1024 * 1024

/**
 * How many events a part holds at least: a part ends at the next turn's start after this many
 * events (or at four times as many inside one long turn); the first part, shown before the others
 * are read, ends after a quarter as many.
 *
 * @since 0.1.0
 * @category constants
 */
export const PART_EVENTS = 2_000

/**
 * The events cut into parts at turn starts.
 *
 * @since 0.1.0
 * @category utils
 */
export const partsOf = (
  events: ReadonlyArray<SessionEvent>,
  size: number = PART_EVENTS
): ReadonlyArray<ReadonlyArray<SessionEvent>> => {
  const parts: Array<Array<SessionEvent>> = []
  let part: Array<SessionEvent> = []
  for (const event of events) {
    const least = parts.length === 0 ? Math.ceil(size / 4) : size
    if (part.length >= least * 4 || (part.length >= least && event.type === "turn/start")) {
      parts.push(part)
      part = []
    }
    part.push(event)
  }
  if (part.length > 0 || parts.length === 0) parts.push(part)
  return parts
}

/**
 * The elements that carry the page's data: `first`, `<script type="application/json"
 * id="tiller-data">` with the header and the events (above `compressAbove` characters, the first
 * part only and the number of later `parts`), placed before the page's script so that it shows at
 * once; `later`, each later part as `<script type="application/gzip+base64" data-part="N">`, placed
 * after the script.
 *
 * @since 0.1.0
 * @category utils
 */
export const dataElements = (
  header: SessionHeader,
  events: ReadonlyArray<SessionEvent>,
  compressAbove: number = COMPRESS_ABOVE,
  partEvents: number = PART_EVENTS
): { readonly first: string; readonly later: ReadonlyArray<string> } => {
  const parts = partsOf(events, partEvents)
  const texts = parts.map((part) => JSON.stringify(part))
  const whole = texts.reduce((sum, text) => sum + text.length, 0) <= compressAbove || parts.length === 1
  if (whole) {
    return {
      first: `<script type="application/json" id="tiller-data">${scriptJson({ header, events })}</script>`,
      later: []
    }
  }
  return {
    first: `<script type="application/json" id="tiller-data">${
      scriptJson({ header, events: parts[0], parts: parts.length - 1 })
    }</script>`,
    later: texts.slice(1).map((text, i) =>
      `<script type="application/gzip+base64" data-part="${i + 1}">${
        gzipSync(text, { level: 1 }).toString("base64")
      }</script>`
    )
  }
}

/**
 * The whole page for a session; `compressAbove` and `partEvents` as for `dataElements`.
 *
 * @since 0.1.0
 * @category constructors
 */
export const renderHtml = (
  header: SessionHeader,
  events: ReadonlyArray<SessionEvent>,
  options?: { readonly compressAbove?: number; readonly partEvents?: number; readonly prices?: PriceTable }
): string => {
  const title = `tiller session ${header.sessionId}`
  // What the session cost, a fold over its usage (its copied seed left out): in the heading, and
  // per turn beside each turn's tokens (the page reads `tiller-cost`).
  const cost = Cost.sessionCost(events, options?.prices ?? Prices.PRICES, { from: header.seedLength })
  const spent = cost.total.inputTokens + cost.total.outputTokens === 0
    ? ""
    : ` · ${describeTokens(cost.total)} · cost ${Cost.describeCost(cost.total)}`
  const turnCosts = Object.fromEntries([...cost.turns].map(([turn, tally]) => [String(turn), Cost.describeCost(tally)]))
  const data = dataElements(header, embeddedEvents(events), options?.compressAbove, options?.partEvents)
  const first = events[0]
  const last = events[events.length - 1]
  const span = first !== undefined && last !== undefined
    ? `${new Date(first.time).toISOString()} – ${new Date(last.time).toISOString()}`
    : "no events"
  return [
    "<!DOCTYPE html>",
    "<html lang=\"en\"><head><meta charset=\"utf-8\">",
    "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">",
    `<title>${escapeHtml(title)}</title>`,
    `<style>${PAGE_STYLE}</style>`,
    "</head><body>",
    "<header>",
    `<h1>${escapeHtml(title)}</h1>`,
    `<div class="meta">${events.length} events · created ${escapeHtml(new Date(header.createdAt).toISOString())} · ${
      escapeHtml(span)
    }${
      header.parent === undefined
        ? ""
        : ` · fork of ${escapeHtml(header.parent.sessionId)} at seq ${header.parent.boundary}`
    }${escapeHtml(spent)}</div>`,
    "<div class=\"controls\">",
    "<input id=\"search\" type=\"search\" placeholder=\"search text, tools, sources…\" aria-label=\"search\">",
    "<label>source <select id=\"source\" aria-label=\"source\"><option value=\"\">all sources</option></select></label>",
    "<span id=\"kinds\" aria-label=\"kinds\"></span>",
    "<button id=\"collapse\" type=\"button\">collapse turns</button><button id=\"expand\" type=\"button\">expand all</button>",
    "<span id=\"count\"></span>",
    "</div></header>",
    "<main id=\"timeline\"><div class=\"lanes\"><span>seq</span><span>conversation</span><span>inbox</span></div><div id=\"rows\"><div class=\"empty\">reading the session…</div></div></main>",
    `<script type="application/json" id="tiller-cost">${scriptJson(turnCosts)}</script>`,
    data.first,
    `<script>${PAGE_SCRIPT}</script>`,
    ...data.later,
    "</body></html>",
    ""
  ].join("\n")
}

/**
 * Writes the page of a session to `file`; prints the file, its size and the number of events.
 *
 * @since 0.1.0
 * @category commands
 */
export const exportHtml = (
  header: SessionHeader,
  events: ReadonlyArray<SessionEvent>,
  file: string,
  prices?: PriceTable
): Effect.Effect<void, CliError> =>
  Effect.gen(function*() {
    const page = renderHtml(header, events, prices === undefined ? {} : { prices })
    const fs = yield* FileSystem.FileSystem
    yield* fs.writeFileString(file, page).pipe(
      Effect.mapError((error) => new CliError({ reason: `cannot write ${file}: ${describeFileError(error)}` }))
    )
    const bytes = Buffer.byteLength(page)
    yield* Output.lines([`wrote ${file}: ${events.length} events, ${(bytes / 1024 / 1024).toFixed(1)} MiB`])
  }).pipe(Effect.provide(NodeFileSystem.layer))
