/**
 * The HTML export at 100,000 events: a session's events (`tiller log ID --json` output) repeated,
 * turn by turn, to 100,000 events; prints the time `renderHtml` takes, the page's size, and the
 * client side's work as node measures it (the first part's JSON.parse and fold, shown before the
 * rest is read; the later parts inflated, parsed and folded). test/cli/HtmlExportBrowser.test.ts
 * prints the same page's times in Chromium.
 *
 * Run: `npx esbuild bench/htmlExport.ts --bundle --platform=node --format=esm --packages=external
 * --outfile=node_modules/.cache/tiller-bench/htmlExport.mjs && node node_modules/.cache/tiller-bench/htmlExport.mjs LOG.jsonl [EVENTS]`
 *
 * @since 0.1.0
 */
import { readFileSync } from "node:fs"
import { gunzipSync } from "node:zlib"
import { renderHtml } from "../src/cli/HtmlExport.js"
import { PAGE_SCRIPT } from "../src/cli/HtmlPage.js"
import { repeatedHeader, repeatSession } from "../test/fixtures/repeatedSession.js"

const base = readFileSync(process.argv[2]!, "utf8").trim().split("\n").map((line) => JSON.parse(line))
const target = Number(process.argv[3] ?? 100_000)
const events = repeatSession(base, target)
const header = repeatedHeader("bench-html")
let t = performance.now()
const page = renderHtml(header as any, events)
const renderMs = performance.now() - t
const from = page.indexOf("id=\"tiller-data\">") + "id=\"tiller-data\">".length
const json = page.slice(from, page.indexOf("</script>", from))
const later = [...page.matchAll(/data-part="\d+">([^<]*)<\/script>/g)].map((m) => m[1]!)
t = performance.now()
const first = JSON.parse(json)
const firstMs = performance.now() - t
t = performance.now()
const parts = later.map((text) => JSON.parse(gunzipSync(Buffer.from(text, "base64")).toString("utf8")))
const laterMs = performance.now() - t
const fold = new Function(`${PAGE_SCRIPT}\nreturn tillerFold`)()
t = performance.now()
const model = fold(first.header)
model.feed(first.events)
const firstFoldMs = performance.now() - t
for (const part of parts) model.feed(part)
const foldMs = performance.now() - t
const embedded = first.events.length + parts.reduce((n: number, part: ReadonlyArray<unknown>) => n + part.length, 0)
console.log(
  `${events.length} events: renderHtml ${renderMs.toFixed(0)} ms, page ${
    (Buffer.byteLength(page) / 1024 / 1024).toFixed(1)
  } MiB (${embedded} events embedded, ` +
    `${first.events.length} in the first part, ${parts.length} later parts); client as node measures it: first part JSON.parse ${
      firstMs.toFixed(0)
    } ms ` +
    `and fold ${firstFoldMs.toFixed(0)} ms, later parts inflated and parsed ${laterMs.toFixed(0)} ms, all folded ${
      foldMs.toFixed(0)
    } ms for ${model.rows.length} rows`
)
